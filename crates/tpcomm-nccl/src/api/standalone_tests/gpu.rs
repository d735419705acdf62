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
        let r = create("test", &mut comm, world as c_int, secret, rank as c_int);
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
