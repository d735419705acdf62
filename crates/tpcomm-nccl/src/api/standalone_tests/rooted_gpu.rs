//! The ignored GPU test of ncclReduce, ncclGather, ncclScatter and
//! ncclAlltoAll on standalone communicators: ranks as threads sharing GPU 0,
//! made and served through the exports, every output element compared with
//! the host's answer (the bytes for the calls that only move them; for the
//! reduce, integers bit for bit against the host model of the rank-order
//! reduction, floats against the float64 reduction within its roundings).

use super::*;
use crate::api::rooted::{ncclAlltoAll, ncclGather, ncclReduce, ncclScatter};
use tpcomm::cuda::cudarc::driver::{CudaSlice, DevicePtr};
use tpcomm::cuda::gathered::{reference, Elem, Op};

/// Random bytes (an LCG), different for every (rank, salt).
fn noise(rank: usize, salt: u64, n: usize) -> Vec<u8> {
    let mut x = (salt ^ ((rank as u64) << 40)).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (x >> 56) as u8
        })
        .collect()
}

/// Element `b` of float type `t` (6, 7, 8, 9) as f64.
fn decode(t: c_int, b: &[u8]) -> f64 {
    let h = || u16::from_le_bytes([b[0], b[1]]);
    match t {
        6 => {
            let (e, m) = (((h() >> 10) & 31) as i32, (h() & 1023) as f64);
            let v = match e {
                0 => m * 2f64.powi(-24),
                31 if m == 0.0 => f64::INFINITY,
                31 => f64::NAN,
                _ => (1.0 + m / 1024.0) * 2f64.powi(e - 15),
            };
            if h() >> 15 == 1 {
                -v
            } else {
                v
            }
        }
        9 => f32::from_bits((h() as u32) << 16) as f64,
        7 => f32::from_le_bytes(b[..4].try_into().unwrap()) as f64,
        _ => f64::from_le_bytes(b[..8].try_into().unwrap()),
    }
}

/// How many elements of float type `t` in `got` are off the float64
/// reduction of `inputs` by more than the roundings allow ((world + 2)
/// units in the last place of the type over the magnitudes; max and min
/// exactly), and the first one.
fn float_wrong(t: c_int, op: c_int, inputs: &[Vec<u8>], got: &[u8]) -> (usize, String) {
    let z = crate::types::type_size(t).unwrap();
    let w = inputs.len();
    let eps = match t {
        6 => 2f64.powi(-11),
        9 => 2f64.powi(-8),
        7 => 2f64.powi(-24),
        _ => 2f64.powi(-53),
    };
    let mut bad = (0, String::new());
    for i in 0..got.len() / z {
        let v: Vec<f64> = inputs
            .iter()
            .map(|x| decode(t, &x[i * z..(i + 1) * z]))
            .collect();
        let (want, mag) = match op {
            0 => (
                v.iter().sum::<f64>(),
                v.iter().map(|x| x.abs()).sum::<f64>(),
            ),
            1 => (v.iter().product::<f64>(), v.iter().product::<f64>().abs()),
            2 => (v.iter().cloned().fold(f64::MIN, f64::max), 0.0),
            3 => (v.iter().cloned().fold(f64::MAX, f64::min), 0.0),
            _ => (
                v.iter().sum::<f64>() / w as f64,
                v.iter().map(|x| x.abs()).sum::<f64>() / w as f64,
            ),
        };
        let g = decode(t, &got[i * z..(i + 1) * z]);
        if (g - want).abs() > (w as f64 + 2.0) * eps * mag {
            if bad.0 == 0 {
                bad.1 = format!("first {i}: got {g} want {want}");
            }
            bad.0 += 1;
        }
    }
    bad
}

/// `count` random values of NCCL type `t` for a reduction: any bits for the
/// integers, floats between 2^-3 and 2^2 in magnitude (a product of 4 ranks'
/// stays far from overflow and from subnormals).
fn values(t: c_int, rank: usize, salt: u64, count: usize) -> Vec<u8> {
    let z = Elem::from_nccl(t).map_or(1, Elem::size);
    let raw = noise(rank, salt, count * 8);
    // (exponent's bit position, exponent of 2^-3 in that format)
    let float = match t {
        6 => Some((10, 12u64)),
        9 => Some((7, 124)),
        7 => Some((23, 124)),
        8 => Some((52, 1020)),
        _ => None,
    };
    (0..count)
        .flat_map(|i| {
            let r = u64::from_le_bytes(raw[i * 8..i * 8 + 8].try_into().unwrap());
            let bits = match float {
                None => r,
                Some((at, e0)) => {
                    let sign = (r >> 63) << (8 * z - 1);
                    let mant = r & ((1u64 << at) - 1);
                    sign | ((e0 + (r >> 40) % 5) << at) | mant
                }
            };
            bits.to_le_bytes()[..z].to_vec()
        })
        .collect()
}

#[test]
#[ignore = "needs a GPU: cargo test --release -p tpcomm-nccl --lib standalone_rooted -- --ignored"]
fn standalone_rooted_calls_match_the_host_at_every_element_on_one_gpu() {
    tpcomm::cuda::share::widen_queues_for_threads();
    for world in [1usize, 2, 3, 4] {
        let secret = standalone::parse(&standalone::new_id().unwrap()).unwrap();
        std::thread::scope(|s| {
            for rank in 0..world {
                s.spawn(move || one_rank(rank, world, secret));
            }
        });
        eprintln!("standalone rooted test: {world} rank(s) on GPU 0 passed");
    }
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
    // Blocks of half the staging buffer per rank: every kind runs in
    // several pieces (the staging buffer holds world + 1 areas).
    let mb = crate::settings::get().max_bytes.bytes() as usize;
    let arena = mb + 4096;
    let mut a = stream.alloc_zeros::<u8>(arena).unwrap();
    let mut b = stream.alloc_zeros::<u8>(arena).unwrap();
    let (pa, pb) = (a.device_ptr(&stream).0, b.device_ptr(&stream).0);
    // One pinned buffer for every copy, allocated before any call (see gpu.rs).
    // SAFETY: (test) every read of it follows the copy that fills it.
    let host =
        std::cell::RefCell::new(unsafe { ctx.alloc_pinned_with_flags::<u8>(arena, 0) }.unwrap());
    let fetch = |buf: &CudaSlice<u8>, at: usize, len: usize| {
        let mut h = host.borrow_mut();
        let h = &mut h.as_mut_slice().unwrap()[..len];
        if len > 0 {
            stream.memcpy_dtoh(&buf.slice(at..at + len), h).unwrap();
        }
        stream.synchronize().unwrap();
        h.to_vec()
    };
    let upload = |buf: &mut CudaSlice<u8>, at: usize, v: &[u8]| {
        if v.is_empty() {
            return;
        }
        let mut h = host.borrow_mut();
        let h = &mut h.as_mut_slice().unwrap()[..v.len()];
        h.copy_from_slice(v);
        stream
            .memcpy_htod(&*h, &mut buf.slice_mut(at..at + v.len()))
            .unwrap();
        stream.synchronize().unwrap();
    };
    let p = |x: u64| x as *mut c_void;
    let first_wrong = |got: &[u8], want: &[u8], z: usize| -> String {
        let bad = (0..want.len() / z.max(1))
            .filter(|&i| got[i * z..(i + 1) * z] != want[i * z..(i + 1) * z])
            .collect::<Vec<_>>();
        match bad.first() {
            None => String::new(),
            Some(&i) => format!(
                "{} of {} elements wrong, first {i}: got {:02x?} want {:02x?}",
                bad.len(),
                want.len() / z.max(1),
                &got[i * z..(i + 1) * z],
                &want[i * z..(i + 1) * z]
            ),
        }
    };

    // ncclReduce: every type 0 to 9 and op, counts 0, 1, odd, past a piece.
    for t in 0..10 {
        let z = Elem::from_nccl(t).unwrap().size();
        let big = mb / (2 * world) / z + 3;
        for op in 0..5 {
            for (ci, count) in [0usize, 1, 7, 1025, big].into_iter().enumerate() {
                let root = (t as usize + op as usize + ci) % world;
                let inplace = (ci + op as usize).is_multiple_of(2);
                let salt = ((t as u64) << 16) | ((op as u64) << 8) | ci as u64;
                upload(&mut a, 0, &values(t, rank, salt, count));
                let (sp, rp) = match (rank == root, inplace) {
                    (true, true) => (pa, pa),
                    (true, false) => (pa, pb),
                    // A non-root's recvbuff is not used: NULL.
                    (false, _) => (pa, 0),
                };
                // SAFETY: (test) every range is inside this rank's arenas.
                let r = unsafe { ncclReduce(p(sp), p(rp), count, t, op, root as c_int, comm, st) };
                let what = format!("rank {rank}/{world}: reduce type {t} op {op} count {count} root {root} in place {inplace}");
                assert_eq!(r, SUCCESS, "{what}: {}", standalone::last_error());
                if rank != root {
                    continue;
                }
                let got = fetch(if inplace { &a } else { &b }, 0, count * z);
                let all: Vec<Vec<u8>> = (0..world).map(|q| values(t, q, salt, count)).collect();
                let refs: Vec<&[u8]> = all.iter().map(|v| &v[..]).collect();
                let (elem, gop) = (Elem::from_nccl(t).unwrap(), Op::from_nccl(op).unwrap());
                if matches!(t, 6..=9) {
                    // Floats against the float64 reduction.
                    let (wrong, first) = float_wrong(t, op, &all, &got);
                    assert_eq!(wrong, 0, "{what}: {wrong} of {count} wrong, {first}");
                    continue;
                }
                // Integers bit for bit, wrapping (the rank-order model).
                let want: Vec<u8> = (0..count)
                    .flat_map(|i| reference(elem, gop, &refs, i))
                    .collect();
                assert!(got == want, "{what}: {}", first_wrong(&got, &want, z));
            }
        }
    }

    // Gather, scatter, all-to-all: bytes of any pattern (all-ones words
    // included), types of every width, every root, in place and not.
    for t in [0, 6, 7, 8] {
        let z = type_size(t);
        let big = mb / (2 * world) / z + 3;
        for (ci, count) in [0usize, 1, 7, 1025, big].into_iter().enumerate() {
            let nb = count * z;
            let roots: Vec<usize> = if count == big {
                vec![world - 1]
            } else {
                (0..world).collect()
            };
            for root in roots {
                let inplace = (ci + root).is_multiple_of(2);
                let salt = 0x6a00 | ((t as u64) << 16) | ((ci as u64) << 8) | root as u64;
                let what = format!(
                    "rank {rank}/{world}: type {t} count {count} root {root} in place {inplace}"
                );
                // Gather: the root's block of recvbuff is sendbuff in place.
                let mine = noise(rank, salt, nb);
                let at = if rank == root && inplace {
                    rank * nb
                } else {
                    0
                };
                upload(&mut b, at, &mine);
                let (sp, rp) = match (rank == root, inplace) {
                    (true, true) => (pb + at as u64, pb),
                    (true, false) => (pb, pa),
                    (false, _) => (pb, 0),
                };
                // SAFETY: (test) as above.
                let r = unsafe { ncclGather(p(sp), p(rp), count, t, root as c_int, comm, st) };
                assert_eq!(r, SUCCESS, "gather {what}: {}", standalone::last_error());
                if rank == root {
                    let got = fetch(if inplace { &b } else { &a }, 0, nb * world);
                    let want: Vec<u8> = (0..world).flat_map(|q| noise(q, salt, nb)).collect();
                    assert!(
                        got == want,
                        "gather {what}: {}",
                        first_wrong(&got, &want, z)
                    );
                }
                // Scatter: the root's recvbuff is its block of sendbuff in place.
                let all = noise(root, salt ^ 0x5c, nb * world);
                if rank == root {
                    upload(&mut a, 0, &all);
                }
                let (sp, rp) = match (rank == root, inplace) {
                    (true, true) => (pa, pa + (rank * nb) as u64),
                    (true, false) => (pa, pb),
                    // A non-root's sendbuff is not used: NULL.
                    (false, _) => (0, pb),
                };
                // SAFETY: (test) as above.
                let r = unsafe { ncclScatter(p(sp), p(rp), count, t, root as c_int, comm, st) };
                assert_eq!(r, SUCCESS, "scatter {what}: {}", standalone::last_error());
                let got = if rank == root && inplace {
                    fetch(&a, rank * nb, nb)
                } else {
                    fetch(&b, 0, nb)
                };
                let want = &all[rank * nb..(rank + 1) * nb];
                assert!(
                    got == want,
                    "scatter {what}: {}",
                    first_wrong(&got, want, z)
                );
            }
            // All-to-all (no root), in place and not.
            for inplace in [false, true] {
                let salt = 0xa2a0 | ((t as u64) << 16) | ((ci as u64) << 8) | inplace as u64;
                upload(&mut a, 0, &noise(rank, salt, nb * world));
                let rp = if inplace { pa } else { pb };
                // SAFETY: (test) as above.
                let r = unsafe { ncclAlltoAll(p(pa), p(rp), count, t, comm, st) };
                let what = format!(
                    "rank {rank}/{world}: all-to-all type {t} count {count} in place {inplace}"
                );
                assert_eq!(r, SUCCESS, "{what}: {}", standalone::last_error());
                let got = fetch(if inplace { &a } else { &b }, 0, nb * world);
                let want: Vec<u8> = (0..world)
                    .flat_map(|q| noise(q, salt, nb * world)[rank * nb..(rank + 1) * nb].to_vec())
                    .collect();
                assert!(got == want, "{what}: {}", first_wrong(&got, &want, z));
            }
        }
    }
    // SAFETY: (test) a live handle, released once.
    unsafe { assert_eq!(crate::api::init::ncclCommDestroy(comm), SUCCESS) };
}

fn type_size(t: c_int) -> usize {
    crate::types::type_size(t).unwrap()
}

/// The GPU test's own host side: decoding, the float64 check, the values.
#[test]
fn the_rooted_gpu_test_s_host_reference_decodes_and_judges_floats_as_meant() {
    assert_eq!(decode(6, &0x3c00u16.to_le_bytes()), 1.0);
    assert_eq!(decode(6, &0xc000u16.to_le_bytes()), -2.0);
    assert_eq!(decode(6, &0x0001u16.to_le_bytes()), 2f64.powi(-24));
    assert_eq!(decode(9, &0x3f80u16.to_le_bytes()), 1.0);
    assert_eq!(decode(8, &(-0.375f64).to_le_bytes()), -0.375);
    let ins = vec![
        1.5f32.to_le_bytes().to_vec(),
        2.25f32.to_le_bytes().to_vec(),
    ];
    assert_eq!(float_wrong(7, 0, &ins, &3.75f32.to_le_bytes()).0, 0);
    assert_eq!(float_wrong(7, 0, &ins, &3.7501f32.to_le_bytes()).0, 1);
    assert_eq!(float_wrong(7, 1, &ins, &3.375f32.to_le_bytes()).0, 0);
    assert_eq!(float_wrong(7, 2, &ins, &2.25f32.to_le_bytes()).0, 0);
    assert_eq!(float_wrong(7, 3, &ins, &2.25f32.to_le_bytes()).0, 1);
    assert_eq!(float_wrong(7, 4, &ins, &1.875f32.to_le_bytes()).0, 0);
    for t in 6..=9 {
        let z = crate::types::type_size(t).unwrap();
        let v = values(t, 3, 9, 500);
        assert_eq!(v.len(), 500 * z);
        for x in v.chunks(z) {
            let m = decode(t, x).abs();
            assert!((0.125..4.0).contains(&m), "type {t}: {m}");
        }
    }
}
