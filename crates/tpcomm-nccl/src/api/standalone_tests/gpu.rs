//! The ignored GPU test of the drop-in's standalone mode: ranks as threads
//! sharing GPU 0, created and served through the exports.

use super::*;

/// On a GPU: 1, 2 and 4 ranks as threads, all on GPU 0 (the case real NCCL
/// refuses), made through the exports' creation and served through
/// them: an f32 all-reduce (aligned and not), a u8 all-gather, a u8
/// broadcast and an f32 reduce-scatter, each compared with the host's
/// answer, then destroy.
#[test]
#[ignore = "needs a GPU: cargo test --release -p tpcomm-nccl --lib standalone_ranks_sharing -- --ignored"]
fn standalone_ranks_sharing_one_gpu_serve_the_collectives() {
    use tpcomm::cuda::cudarc::driver::DevicePtr;
    // Ranks are threads of this process sharing GPU 0: their streams
    // need hardware queues of their own (docs/shared-gpu.md), and every
    // copy below goes through pinned memory (a pageable copy can hold a
    // rank's thread while a peer's kernel waits for that rank's call).
    tpcomm::cuda::share::widen_queues_for_threads();
    for world in [1usize, 2, 4] {
        let secret = standalone::parse(&standalone::new_id().unwrap()).unwrap();
        std::thread::scope(|s| {
            for rank in 0..world {
                s.spawn(move || one_rank(rank, world, secret));
            }
        });
        eprintln!("standalone test: {world} rank(s) on GPU 0 passed");
    }

    fn one_rank(rank: usize, world: usize, secret: Secret) {
        let ctx = tpcomm::cuda::open_context(0).unwrap();
        ctx.bind_to_thread().unwrap();
        // SAFETY: (test) no buffer is shared between streams.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream().unwrap();
        let st = stream.cu_stream() as CudaStream;
        let mut comm: NcclComm = std::ptr::null_mut();
        let r = create(
            "test",
            &mut comm,
            world as c_int,
            secret,
            rank as c_int,
            Blocking::Yes,
        );
        assert_eq!(r, SUCCESS, "{}", standalone::last_error());
        let arena = 1 << 20;
        let mut a = stream.alloc_zeros::<u8>(arena).unwrap();
        let mut b = stream.alloc_zeros::<u8>(arena).unwrap();
        let (pa, pb) = (a.device_ptr(&stream).0, b.device_ptr(&stream).0);
        // One pinned buffer for every copy, allocated before any call
        // and freed after the last: freeing pinned memory synchronizes
        // the context, which the ranks (threads) share, so a free
        // between calls would wait for a peer's kernel that waits for
        // this rank's next call.
        // SAFETY: (test) every read of it follows the copy that fills it.
        let host = std::cell::RefCell::new(
            unsafe { ctx.alloc_pinned_with_flags::<u8>(arena, 0) }.unwrap(),
        );
        let fetch = |buf: &tpcomm::cuda::cudarc::driver::CudaSlice<u8>, len: usize| {
            let mut h = host.borrow_mut();
            let h = &mut h.as_mut_slice().unwrap()[..len];
            stream.memcpy_dtoh(&buf.slice(..len), h).unwrap();
            stream.synchronize().unwrap();
            h.to_vec()
        };
        // Copies v into buf at [at, at + v.len()), through the pinned buffer.
        let upload =
            |buf: &mut tpcomm::cuda::cudarc::driver::CudaSlice<u8>, at: usize, v: &[u8]| {
                let mut h = host.borrow_mut();
                let h = &mut h.as_mut_slice().unwrap()[..v.len()];
                h.copy_from_slice(v);
                stream
                    .memcpy_htod(&*h, &mut buf.slice_mut(at..at + v.len()))
                    .unwrap();
                stream.synchronize().unwrap();
            };
        let f32s = |v: &[u8]| -> Vec<f32> {
            v.chunks(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                .collect()
        };
        // All-reduce of 1001 f32, aligned (in a) and 4 bytes off (in b).
        let n = 1001;
        let mine: Vec<u8> = (0..n)
            .flat_map(|i| ((rank * 7 + i) as f32).to_le_bytes())
            .collect();
        let want: Vec<f32> = (0..n)
            .map(|i| (0..world).map(|r| (r * 7 + i) as f32).sum())
            .collect();
        upload(&mut a, 0, &mine);
        upload(&mut b, 4, &mine);
        let p = |x: u64| x as *mut c_void;
        // SAFETY: (test) every range is inside this rank's arenas, which
        // outlive the synchronisation in `fetch`.
        unsafe {
            let r = crate::api::all_reduce::ncclAllReduce(p(pa), p(pa), n, 7, OP_SUM, comm, st);
            assert_eq!(r, SUCCESS, "{}", standalone::last_error());
            let r =
                crate::api::all_reduce::ncclAllReduce(p(pb + 4), p(pb + 4), n, 7, OP_SUM, comm, st);
            assert_eq!(r, SUCCESS, "{}", standalone::last_error());
        }
        assert_eq!(
            f32s(&fetch(&a, 4 * n)),
            want,
            "rank {rank}: aligned all-reduce"
        );
        assert_eq!(
            f32s(&fetch(&b, 4 + 4 * n)[4..]),
            want,
            "rank {rank}: unaligned all-reduce"
        );
        // All-gather of 6 u8 per rank (counted as 3 f16 words).
        let block: Vec<u8> = (0..6).map(|i| (rank * 16 + i) as u8).collect();
        upload(&mut a, 0, &block);
        // SAFETY: (test) as above.
        let r = unsafe { crate::api::collectives::ncclAllGather(p(pa), p(pb), 6, 1, comm, st) };
        assert_eq!(r, SUCCESS, "{}", standalone::last_error());
        let want: Vec<u8> = (0..world)
            .flat_map(|r| (0..6).map(move |i| (r * 16 + i) as u8))
            .collect();
        assert_eq!(fetch(&b, 6 * world), want, "rank {rank}: all-gather");
        // Broadcast of 10 u8 from the last rank, in place.
        let root = world - 1;
        let mine: Vec<u8> = (0..10).map(|i| (rank * 3 + i) as u8).collect();
        upload(&mut a, 0, &mine);
        // SAFETY: (test) as above.
        let r =
            unsafe { crate::api::collectives::ncclBcast(p(pa), 10, 1, root as c_int, comm, st) };
        assert_eq!(r, SUCCESS, "{}", standalone::last_error());
        let want: Vec<u8> = (0..10).map(|i| (root * 3 + i) as u8).collect();
        assert_eq!(fetch(&a, 10), want, "rank {rank}: broadcast");
        // Reduce-scatter of f32: world blocks of 64, small integers (exact).
        let cnt = 64;
        let mine: Vec<u8> = (0..cnt * world)
            .flat_map(|i| ((rank + i) as f32).to_le_bytes())
            .collect();
        upload(&mut a, 0, &mine);
        // SAFETY: (test) as above.
        let r = unsafe {
            crate::api::collectives::ncclReduceScatter(p(pa), p(pb), cnt, 7, OP_SUM, comm, st)
        };
        assert_eq!(r, SUCCESS, "{}", standalone::last_error());
        let want: Vec<f32> = (0..cnt)
            .map(|j| (0..world).map(|r| (r + rank * cnt + j) as f32).sum())
            .collect();
        assert_eq!(
            f32s(&fetch(&b, 4 * cnt)),
            want,
            "rank {rank}: reduce-scatter"
        );
        // Types and ops beyond the summing kernels, with values whose
        // words are all ones (-1, 255), which the kernels' sentinel
        // would change if they travelled as floats: each against the
        // host model of the gathered reduction (gathered::reference).
        use tpcomm::cuda::gathered::{reference, Elem, Op};
        let put =
            |buf: &mut tpcomm::cuda::cudarc::driver::CudaSlice<u8>, v: &[u8]| upload(buf, 0, v);
        let block_of = |r: usize, elem: Elem, n: usize| -> Vec<u8> {
            (0..n)
                .flat_map(|i| {
                    let x = (r * 1000 + i) as i64;
                    match elem {
                        Elem::I64 => (-1 - x).to_le_bytes().to_vec(),
                        Elem::U8 => vec![if r == 0 { 255 } else { (x % 251) as u8 }],
                        Elem::I32 => ((-1 - x) as i32).to_le_bytes().to_vec(),
                        Elem::F64 => (x as f64 * 0.5 - 3.0).to_le_bytes().to_vec(),
                        _ => unreachable!(),
                    }
                })
                .collect()
        };
        for (elem, op, n) in [
            (Elem::I64, Op::Sum, 37usize),
            (Elem::U8, Op::Max, 1),
            (Elem::I32, Op::Min, 1001),
            (Elem::F64, Op::Avg, 5),
            (Elem::I64, Op::Prod, 3),
        ] {
            put(&mut a, &block_of(rank, elem, n));
            let t = Elem::ALL.iter().position(|&e| e == elem).unwrap() as c_int;
            // SAFETY: (test) as above.
            let r = unsafe {
                crate::api::all_reduce::ncclAllReduce(p(pa), p(pb), n, t, op as c_int, comm, st)
            };
            assert_eq!(r, SUCCESS, "{elem:?} {op:?}: {}", standalone::last_error());
            let blocks: Vec<Vec<u8>> = (0..world).map(|r| block_of(r, elem, n)).collect();
            let refs: Vec<&[u8]> = blocks.iter().map(|v| &v[..]).collect();
            let want: Vec<u8> = (0..n).flat_map(|i| reference(elem, op, &refs, i)).collect();
            assert_eq!(
                fetch(&b, n * elem.size()),
                want,
                "rank {rank}: all-reduce {elem:?} {op:?}"
            );
        }
        // Reduce-scatter of the same kinds: this rank's block of every
        // rank's input, reduced in rank order.
        for (elem, op, n) in [(Elem::I64, Op::Max, 33usize), (Elem::U8, Op::Sum, 70)] {
            put(&mut a, &block_of(rank, elem, n * world));
            let t = Elem::ALL.iter().position(|&e| e == elem).unwrap() as c_int;
            // SAFETY: (test) as above.
            let r = unsafe {
                crate::api::collectives::ncclReduceScatter(
                    p(pa),
                    p(pb),
                    n,
                    t,
                    op as c_int,
                    comm,
                    st,
                )
            };
            assert_eq!(r, SUCCESS, "{elem:?} {op:?}: {}", standalone::last_error());
            let z = elem.size();
            let blocks: Vec<Vec<u8>> = (0..world)
                .map(|r| block_of(r, elem, n * world)[rank * n * z..(rank + 1) * n * z].to_vec())
                .collect();
            let refs: Vec<&[u8]> = blocks.iter().map(|v| &v[..]).collect();
            let want: Vec<u8> = (0..n).flat_map(|i| reference(elem, op, &refs, i)).collect();
            assert_eq!(
                fetch(&b, n * z),
                want,
                "rank {rank}: reduce-scatter {elem:?} {op:?}"
            );
        }
        // All-gather of i32 -1s and broadcast of i64 -1s: byte-exact.
        let n = 300;
        put(&mut a, &block_of(rank, Elem::I32, n));
        // SAFETY: (test) as above.
        let r = unsafe { crate::api::collectives::ncclAllGather(p(pa), p(pb), n, 2, comm, st) };
        assert_eq!(r, SUCCESS, "{}", standalone::last_error());
        let want: Vec<u8> = (0..world).flat_map(|r| block_of(r, Elem::I32, n)).collect();
        assert_eq!(fetch(&b, want.len()), want, "rank {rank}: i32 all-gather");
        put(&mut a, &block_of(rank, Elem::I64, n));
        // SAFETY: (test) as above.
        let r = unsafe { crate::api::collectives::ncclBroadcast(p(pa), p(pb), n, 4, 0, comm, st) };
        assert_eq!(r, SUCCESS, "{}", standalone::last_error());
        assert_eq!(
            fetch(&b, 8 * n),
            block_of(0, Elem::I64, n),
            "rank {rank}: i64 broadcast"
        );
        let mut e: NcclResult = -1;
        // SAFETY: (test) a live handle and out-pointer.
        unsafe {
            assert_eq!(
                crate::api::errors::ncclCommGetAsyncError(comm, &mut e),
                SUCCESS
            );
            assert_eq!(e, SUCCESS);
            assert_eq!(crate::api::init::ncclCommDestroy(comm), SUCCESS);
        }
    }
}

/// On a GPU: 2 and 3 ranks as threads on GPU 0, fresh random inputs each
/// run (the seed is printed): all-reduces and reduce-scatters of both fp8
/// types with every built-in op, and pre-multiplied sums (host and device
/// scalars, each rank its own) of f32, f16, bf16, f64, i32 and fp8. Every
/// element is checked against a float64 reference (within (world + 2) unit
/// roundoffs of the sum of magnitudes; integers exactly) and against the
/// host model of the kernel (gathered::reference, reference_premul), bit
/// for bit.
#[test]
#[ignore = "needs a GPU: cargo test --release -p tpcomm-nccl --lib standalone_fp8_and_premul -- --ignored"]
fn standalone_fp8_and_premul_serve_every_element() {
    use tpcomm::cuda::cudarc::driver::DevicePtr;
    use tpcomm::cuda::fp8::Fp8;
    use tpcomm::cuda::gathered::{reference, reference_premul, Elem, Op};
    tpcomm::cuda::share::widen_queues_for_threads();
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    eprintln!("fp8/premul GPU test: seed {seed:#x}");

    /// The value of one element, in f64 (exact for every type here).
    fn value(e: Elem, b: &[u8]) -> f64 {
        match e {
            Elem::F32 => f32::from_le_bytes(b.try_into().unwrap()) as f64,
            Elem::F64 => f64::from_le_bytes(b.try_into().unwrap()),
            Elem::F16 => half::f16::from_bits(u16::from_le_bytes(b.try_into().unwrap())).to_f64(),
            Elem::Bf16 => half::bf16::from_bits(u16::from_le_bytes(b.try_into().unwrap())).to_f64(),
            Elem::F8E4M3 => Fp8::E4M3.decode(b[0]) as f64,
            Elem::F8E5M2 => Fp8::E5M2.decode(b[0]) as f64,
            Elem::I32 => i32::from_le_bytes(b.try_into().unwrap()) as f64,
            _ => unreachable!(),
        }
    }
    /// The element of `v` (rounded to the type).
    fn encode(e: Elem, v: f64) -> Vec<u8> {
        match e {
            Elem::F32 => (v as f32).to_le_bytes().to_vec(),
            Elem::F64 => v.to_le_bytes().to_vec(),
            Elem::F16 => half::f16::from_f64(v).to_bits().to_le_bytes().to_vec(),
            Elem::Bf16 => half::bf16::from_f64(v).to_bits().to_le_bytes().to_vec(),
            Elem::F8E4M3 => vec![Fp8::E4M3.encode(v as f32)],
            Elem::F8E5M2 => vec![Fp8::E5M2.encode(v as f32)],
            Elem::I32 => (v as i32).to_le_bytes().to_vec(),
            _ => unreachable!(),
        }
    }
    fn roundoff(e: Elem) -> f64 {
        match e {
            Elem::F32 => 2f64.powi(-24),
            Elem::F64 => 2f64.powi(-53),
            Elem::F16 => 2f64.powi(-11),
            Elem::Bf16 => 2f64.powi(-8),
            Elem::F8E4M3 => 2f64.powi(-4),
            Elem::F8E5M2 => 2f64.powi(-3),
            _ => 0.0,
        }
    }
    /// Rank r's input of case `k`: n elements in [-4, 4) (integers in
    /// [-1000, 1000)), from the seed.
    fn input(seed: u64, k: u64, r: usize, e: Elem, n: usize) -> Vec<u8> {
        let mut z = seed ^ (k << 40) ^ ((r as u64) << 32);
        (0..n)
            .flat_map(|_| {
                z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
                let mut x = z;
                x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                let u = (x ^ (x >> 31)) as f64 / 2f64.powi(64);
                match e {
                    Elem::I32 => encode(e, (u * 2000.0 - 1000.0).floor()),
                    _ => encode(e, u * 8.0 - 4.0),
                }
            })
            .collect()
    }
    fn scalar(e: Elem, r: usize) -> Vec<u8> {
        encode(
            e,
            match e {
                Elem::I32 => [2.0, -3.0, 5.0][r % 3],
                _ => [0.5, 1.5, -2.0][r % 3],
            },
        )
    }
    /// The f64 reference of one element and its tolerance.
    fn want(e: Elem, op: Option<Op>, vals: &[f64], scal: &[f64]) -> (f64, f64) {
        let w = vals.len() as f64;
        let (v, mag) = match op {
            Some(Op::Sum) => (vals.iter().sum(), vals.iter().map(|v| v.abs()).sum()),
            Some(Op::Avg) => (
                vals.iter().sum::<f64>() / w,
                vals.iter().map(|v| v.abs()).sum::<f64>() / w,
            ),
            Some(Op::Prod) => {
                let p: f64 = vals.iter().product();
                (p, p.abs())
            }
            Some(Op::Max) => (vals.iter().cloned().fold(f64::MIN, f64::max), 0.0),
            Some(Op::Min) => (vals.iter().cloned().fold(f64::MAX, f64::min), 0.0),
            None => (
                vals.iter().zip(scal).map(|(v, s)| v * s).sum(),
                vals.iter().zip(scal).map(|(v, s)| (v * s).abs()).sum(),
            ),
        };
        // Plus half the type's smallest subnormal step: a result below the
        // normal range rounds to that absolute grid, not a relative one (an
        // e4m3 product of -0.125 and 0.0117 is -2^-9, its nearest value).
        (v, (w + 2.0) * roundoff(e) * mag + half_subnormal(e))
    }
    fn half_subnormal(e: Elem) -> f64 {
        match e {
            Elem::F8E4M3 => 2f64.powi(-10),
            Elem::F8E5M2 => 2f64.powi(-17),
            Elem::F16 => 2f64.powi(-25),
            _ => 0.0,
        }
    }

    for world in [2usize, 3] {
        let secret = standalone::parse(&standalone::new_id().unwrap()).unwrap();
        std::thread::scope(|s| {
            for rank in 0..world {
                s.spawn(move || one_rank(rank, world, secret, seed));
            }
        });
        eprintln!("fp8/premul GPU test: {world} ranks on GPU 0 passed");
    }

    fn one_rank(rank: usize, world: usize, secret: Secret, seed: u64) {
        let ctx = tpcomm::cuda::open_context(0).unwrap();
        ctx.bind_to_thread().unwrap();
        // SAFETY: (test) no buffer is shared between streams.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream().unwrap();
        let st = stream.cu_stream() as CudaStream;
        let mut comm: NcclComm = std::ptr::null_mut();
        let r = create(
            "test",
            &mut comm,
            world as c_int,
            secret,
            rank as c_int,
            Blocking::Yes,
        );
        assert_eq!(r, SUCCESS, "{}", standalone::last_error());
        let arena = 1 << 20;
        let mut a = stream.alloc_zeros::<u8>(arena).unwrap();
        let mut b = stream.alloc_zeros::<u8>(arena).unwrap();
        let mut sc = stream.alloc_zeros::<u8>(64).unwrap();
        let (pa, pb, ps) = (
            a.device_ptr(&stream).0,
            b.device_ptr(&stream).0,
            sc.device_ptr(&stream).0,
        );
        // SAFETY: (test) every read of it follows the copy that fills it.
        let host = std::cell::RefCell::new(
            unsafe { ctx.alloc_pinned_with_flags::<u8>(arena, 0) }.unwrap(),
        );
        let fetch = |buf: &tpcomm::cuda::cudarc::driver::CudaSlice<u8>, len: usize| {
            let mut h = host.borrow_mut();
            let h = &mut h.as_mut_slice().unwrap()[..len];
            stream.memcpy_dtoh(&buf.slice(..len), h).unwrap();
            stream.synchronize().unwrap();
            h.to_vec()
        };
        let upload = |buf: &mut tpcomm::cuda::cudarc::driver::CudaSlice<u8>, v: &[u8]| {
            let mut h = host.borrow_mut();
            let h = &mut h.as_mut_slice().unwrap()[..v.len()];
            h.copy_from_slice(v);
            stream
                .memcpy_htod(&*h, &mut buf.slice_mut(..v.len()))
                .unwrap();
            stream.synchronize().unwrap();
        };
        let p = |x: u64| x as *mut c_void;
        let nccl = |e: Elem| Elem::ALL.iter().position(|&x| x == e).unwrap() as c_int;
        // (element, op (None: pre-multiplied sum), device scalar, reduce-scatter, count)
        let mut cases: Vec<(Elem, Option<Op>, bool, bool, usize)> = Vec::new();
        for e in [Elem::F8E4M3, Elem::F8E5M2] {
            for op in Op::ALL {
                cases.push((e, Some(op), false, false, 1001));
            }
            cases.push((e, Some(Op::Sum), false, true, 77));
            cases.push((e, None, false, false, 513));
            cases.push((e, None, true, true, 65));
        }
        for (e, dev) in [
            (Elem::F32, false),
            (Elem::F16, true),
            (Elem::Bf16, false),
            (Elem::F64, true),
            (Elem::I32, false),
        ] {
            cases.push((e, None, dev, false, 1001));
            cases.push((e, None, !dev, true, 99));
        }
        for (k, &(e, op, dev, rs, n)) in cases.iter().enumerate() {
            let what = format!(
                "rank {rank}/{world}: {e:?} {} {}{} count {n}",
                op.map_or("premul".to_string(), |o| format!("{o:?}")),
                if rs { "reduce-scatter" } else { "all-reduce" },
                if op.is_none() {
                    if dev {
                        " (device scalar)"
                    } else {
                        " (host scalar)"
                    }
                } else {
                    ""
                }
            );
            let z = e.size();
            let send_n = if rs { n * world } else { n };
            let inputs: Vec<Vec<u8>> = (0..world)
                .map(|r| input(seed, k as u64, r, e, send_n))
                .collect();
            upload(&mut a, &inputs[rank]);
            let opv = match op {
                Some(o) => o as c_int,
                None => {
                    let mut v: NcclRedOp = -1;
                    let mut mine = scalar(e, rank);
                    let r = if dev {
                        upload(&mut sc, &mine);
                        // SAFETY: (test) a live handle and out-pointer.
                        unsafe {
                            crate::api::redop::ncclRedOpCreatePreMulSum(
                                &mut v,
                                p(ps),
                                nccl(e),
                                0,
                                comm,
                            )
                        }
                    } else {
                        // SAFETY: (test) the scalar is read during the call.
                        unsafe {
                            crate::api::redop::ncclRedOpCreatePreMulSum(
                                &mut v,
                                mine.as_mut_ptr() as *mut c_void,
                                nccl(e),
                                1,
                                comm,
                            )
                        }
                    };
                    assert_eq!(r, SUCCESS, "{what}: {}", standalone::last_error());
                    v
                }
            };
            // SAFETY: (test) every range is inside this rank's arenas.
            let r = unsafe {
                if rs {
                    crate::api::collectives::ncclReduceScatter(
                        p(pa),
                        p(pb),
                        n,
                        nccl(e),
                        opv,
                        comm,
                        st,
                    )
                } else {
                    crate::api::all_reduce::ncclAllReduce(p(pa), p(pb), n, nccl(e), opv, comm, st)
                }
            };
            assert_eq!(r, SUCCESS, "{what}: {}", standalone::last_error());
            let got = fetch(&b, n * z);
            if op.is_none() {
                // SAFETY: (test) a live handle.
                let r = unsafe { crate::api::redop::ncclRedOpDestroy(opv, comm) };
                assert_eq!(r, SUCCESS, "{what}: {}", standalone::last_error());
            }
            let start = if rs { rank * n } else { 0 };
            let scalars: Vec<Vec<u8>> = (0..world).map(|r| scalar(e, r)).collect();
            let srefs: Vec<&[u8]> = scalars.iter().map(|v| &v[..]).collect();
            let blocks: Vec<&[u8]> = inputs
                .iter()
                .map(|v| &v[start * z..(start + n) * z])
                .collect();
            let svals: Vec<f64> = scalars.iter().map(|s| value(e, s)).collect();
            let mut wrong = 0;
            let mut first = None;
            for i in 0..n {
                let g = &got[i * z..(i + 1) * z];
                let model = match op {
                    Some(o) => reference(e, o, &blocks, i),
                    None => reference_premul(e, &srefs, &blocks, i),
                };
                let vals: Vec<f64> = blocks
                    .iter()
                    .map(|b| value(e, &b[i * z..(i + 1) * z]))
                    .collect();
                let ok64 = if e == Elem::I32 {
                    // Integers: exactly, wrapping in 32 bits.
                    let s: i64 = vals
                        .iter()
                        .zip(&svals)
                        .map(|(v, s)| (*v as i64) * (*s as i64))
                        .sum();
                    value(e, g) == (s as i32) as f64
                } else {
                    let (w, tol) = want(e, op, &vals, &svals);
                    (value(e, g) - w).abs() <= tol
                };
                if g != &model[..] || !ok64 {
                    wrong += 1;
                    if first.is_none() {
                        first = Some(format!(
                            "element {i}: got {g:02x?} ({}), model {model:02x?}, inputs {vals:?}",
                            value(e, g)
                        ));
                    }
                }
            }
            assert_eq!(wrong, 0, "{what}: {wrong} of {n} wrong; first {first:?}");
        }
        // ncclReduce with a pre-multiplied sum, to the last rank: the root
        // gets the model's bits at every element, the other ranks' receive
        // buffers keep what they held.
        for (k, (e, dev, n)) in [
            (Elem::F32, false, 1001),
            (Elem::I32, true, 77),
            (Elem::Bf16, false, 3),
        ]
        .into_iter()
        .enumerate()
        {
            let root = world - 1;
            let what = format!("rank {rank}/{world}: {e:?} premul ncclReduce to {root} count {n}");
            let z = e.size();
            let inputs: Vec<Vec<u8>> = (0..world)
                .map(|r| input(seed, 500 + k as u64, r, e, n))
                .collect();
            upload(&mut a, &inputs[rank]);
            let before: Vec<u8> = (0..n * z).map(|i| (i * 7 + rank) as u8).collect();
            upload(&mut b, &before);
            let mut v: NcclRedOp = -1;
            let mut mine = scalar(e, rank);
            if dev {
                upload(&mut sc, &mine);
            }
            let (ptr, resid) = if dev {
                (p(ps), 0)
            } else {
                (mine.as_mut_ptr() as *mut c_void, 1)
            };
            // SAFETY: (test) a live handle; the scalar is read during the call.
            let r = unsafe {
                crate::api::redop::ncclRedOpCreatePreMulSum(&mut v, ptr, nccl(e), resid, comm)
            };
            assert_eq!(r, SUCCESS, "{what}: {}", standalone::last_error());
            // SAFETY: (test) every range is inside this rank's arenas.
            let r = unsafe {
                crate::api::rooted::ncclReduce(p(pa), p(pb), n, nccl(e), v, root as c_int, comm, st)
            };
            assert_eq!(r, SUCCESS, "{what}: {}", standalone::last_error());
            let got = fetch(&b, n * z);
            // SAFETY: (test) a live handle.
            let r = unsafe { crate::api::redop::ncclRedOpDestroy(v, comm) };
            assert_eq!(r, SUCCESS);
            if rank != root {
                assert_eq!(got, before, "{what}: a non-root's receive buffer changed");
                continue;
            }
            let scalars: Vec<Vec<u8>> = (0..world).map(|r| scalar(e, r)).collect();
            let srefs: Vec<&[u8]> = scalars.iter().map(|v| &v[..]).collect();
            let blocks: Vec<&[u8]> = inputs.iter().map(|v| &v[..]).collect();
            let wrong = (0..n)
                .filter(|&i| got[i * z..(i + 1) * z] != reference_premul(e, &srefs, &blocks, i)[..])
                .count();
            assert_eq!(
                wrong, 0,
                "{what}: {wrong} of {n} elements differ from the model"
            );
        }
        // Captured in a CUDA graph: an f32 pre-multiplied sum with a device
        // scalar reads the scalar's value at each replay; one with a host
        // scalar keeps the value it was made with, also after its op is
        // destroyed.
        use tpcomm::cuda::cudarc::driver::sys;
        let n = 257;
        let e = Elem::F32;
        let inputs: Vec<Vec<u8>> = (0..world).map(|r| input(seed, 999, r, e, n)).collect();
        let blocks: Vec<&[u8]> = inputs.iter().map(|v| &v[..]).collect();
        for dev in [true, false] {
            let mut v: NcclRedOp = -1;
            let mut first = 0.25f32 * (rank + 1) as f32;
            upload(&mut sc, &first.to_le_bytes());
            // SAFETY: (test) a live handle; the host scalar is read now.
            let r = unsafe {
                if dev {
                    crate::api::redop::ncclRedOpCreatePreMulSum(&mut v, p(ps), 7, 0, comm)
                } else {
                    crate::api::redop::ncclRedOpCreatePreMulSum(
                        &mut v,
                        &mut first as *mut f32 as *mut c_void,
                        7,
                        1,
                        comm,
                    )
                }
            };
            assert_eq!(r, SUCCESS, "{}", standalone::last_error());
            upload(&mut a, &inputs[rank]);
            stream
                .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
                .unwrap();
            // SAFETY: (test) as above; captured, not run.
            let r =
                unsafe { crate::api::all_reduce::ncclAllReduce(p(pa), p(pb), n, 7, v, comm, st) };
            let graph = stream
                .end_capture(sys::CUgraphInstantiate_flags(0))
                .unwrap()
                .expect("a graph");
            assert_eq!(r, SUCCESS, "captured: {}", standalone::last_error());
            if !dev {
                // SAFETY: (test) a live handle.
                let r = unsafe { crate::api::redop::ncclRedOpDestroy(v, comm) };
                assert_eq!(r, SUCCESS);
            }
            for round in 0..2usize {
                // Every rank's scalar this round (a device scalar changes).
                let mine_of = |r: usize| -> f32 {
                    let base = 0.25f32 * (r + 1) as f32;
                    if dev {
                        base * (round + 1) as f32
                    } else {
                        base
                    }
                };
                upload(&mut sc, &mine_of(rank).to_le_bytes());
                graph.launch().unwrap();
                let got = fetch(&b, 4 * n);
                let scalars: Vec<[u8; 4]> = (0..world).map(|r| mine_of(r).to_le_bytes()).collect();
                let srefs: Vec<&[u8]> = scalars.iter().map(|v| &v[..]).collect();
                let want: Vec<u8> = (0..n)
                    .flat_map(|i| reference_premul(e, &srefs, &blocks, i))
                    .collect();
                assert_eq!(
                    got, want,
                    "rank {rank}: graph replay {round} (device scalar {dev})"
                );
            }
            drop(graph);
            if dev {
                // SAFETY: (test) a live handle.
                let r = unsafe { crate::api::redop::ncclRedOpDestroy(v, comm) };
                assert_eq!(r, SUCCESS);
            }
        }
        // SAFETY: (test) a live handle.
        unsafe { assert_eq!(crate::api::init::ncclCommDestroy(comm), SUCCESS) };
    }
}

/// On a GPU: one thread creates every rank of 2 and of 4 in turn, outside any
/// group, with a non-blocking config (as NCCL allows: each call returns before
/// its peers exist). Each creation says ncclInProgress, its handle answers the
/// queries at once, and ncclCommGetAsyncError reaches ncclSuccess for every
/// rank within the timeout; then an all-reduce through every rank in one
/// group is checked and every rank destroyed.
#[test]
#[ignore = "needs a GPU: cargo test --release -p tpcomm-nccl --lib standalone_non_blocking -- --ignored"]
fn standalone_non_blocking_creation_from_one_thread_in_turn() {
    tpcomm::cuda::share::widen_queues_for_threads();
    let ctx = tpcomm::cuda::open_context(0).unwrap();
    ctx.bind_to_thread().unwrap();
    for world in [2usize, 4] {
        let secret = standalone::parse(&standalone::new_id().unwrap()).unwrap();
        let mut comms = vec![std::ptr::null_mut(); world];
        for (rank, c) in comms.iter_mut().enumerate() {
            let r = create(
                "test",
                c,
                world as c_int,
                secret,
                rank as c_int,
                Blocking::No,
            );
            assert_eq!(r, IN_PROGRESS, "{}", standalone::last_error());
            let mut got: c_int = -1;
            // SAFETY: (test) a live handle and an int.
            let q = unsafe { crate::api::init::ncclCommUserRank(*c, &mut got) };
            assert_eq!((q, got), (SUCCESS, rank as c_int));
        }
        let until = std::time::Instant::now() + std::time::Duration::from_secs(60);
        for (rank, &c) in comms.iter().enumerate() {
            loop {
                let mut e: NcclResult = -1;
                // SAFETY: (test) a live handle and a result.
                let r = unsafe { crate::api::errors::ncclCommGetAsyncError(c, &mut e) };
                assert_eq!(r, SUCCESS);
                if e == SUCCESS {
                    break;
                }
                assert_eq!(e, IN_PROGRESS, "rank {rank}: {}", standalone::last_error());
                assert!(
                    std::time::Instant::now() < until,
                    "rank {rank} still in progress after 60 s"
                );
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        }
        // Every rank made: one all-reduce of 1025 f32 per rank, in one group,
        // each rank on a stream of its own (their kernels wait for each other).
        let n = 1025usize;
        let inputs: Vec<Vec<f32>> = (0..world)
            .map(|r| (0..n).map(|i| 0.5 + (r * n + i) as f32 * 0.25).collect())
            .collect();
        let bufs: Vec<_> = inputs
            .iter()
            .map(|v| {
                let stream = ctx.new_stream().unwrap();
                let send = stream.clone_htod(v).unwrap();
                let recv = stream.alloc_zeros::<f32>(n).unwrap();
                stream.synchronize().unwrap();
                (stream, send, recv)
            })
            .collect();
        use tpcomm::cuda::cudarc::driver::DevicePtr;
        // SAFETY: (test) device buffers of n f32 each, live handles.
        unsafe {
            assert_eq!(crate::api::group::ncclGroupStart(), SUCCESS);
            for (rank, (stream, send, recv)) in bufs.iter().enumerate() {
                let r = crate::api::all_reduce::ncclAllReduce(
                    send.device_ptr(stream).0 as *const c_void,
                    recv.device_ptr(stream).0 as *mut c_void,
                    n,
                    7,
                    OP_SUM,
                    comms[rank],
                    stream.cu_stream() as CudaStream,
                );
                assert_eq!(r, SUCCESS, "rank {rank}: {}", standalone::last_error());
            }
            let r = crate::api::group::ncclGroupEnd();
            assert_eq!(r, SUCCESS, "{}", standalone::last_error());
        }
        for (stream, _, _) in &bufs {
            stream.synchronize().unwrap();
        }
        for (rank, (stream, _, recv)) in bufs.iter().enumerate() {
            let got = stream.clone_dtoh(recv).unwrap();
            for (i, g) in got.iter().enumerate() {
                let want: f64 = inputs.iter().map(|v| v[i] as f64).sum();
                let err = (*g as f64 - want).abs();
                assert!(
                    err <= want.abs() * 1e-6,
                    "rank {rank} element {i}: {g} vs {want}"
                );
            }
        }
        for c in comms {
            // SAFETY: (test) a live handle, destroyed once.
            unsafe { assert_eq!(crate::api::init::ncclCommDestroy(c), SUCCESS) };
        }
        eprintln!("standalone test: non-blocking creation of {world} ranks from one thread passed");
    }
}
