//! GPU test of `cuda::Communicator`'s all-gather, reduce-scatter and
//! broadcast routes: blocks within the buffers run on tpcomm's kernels,
//! larger blocks and reduce-scatter max on NCCL (with `nccl_fallback`), each
//! output checked element by element; without the fallback such a call is
//! an error naming `nccl_fallback`. Needs a GPU per rank and NCCL; runs only
//! with TPCOMM_GPU_TESTS=1 and --ignored (one thread per GPU).

use tpcomm::cuda::cudarc::driver::DevicePtr;
use tpcomm::cuda::{open_context, Call, Communicator, CudaConfig, Launch, Rendezvous, ThreadGroup};
use tpcomm::select::NcclReason;
use tpcomm::verify::{count_wrong, element, random_bytes, reference, Rng};
use tpcomm::{ByteSize, DType, ReduceOp};

mod gpu_common;
use gpu_common::{describe, device_of, gpu_count};

#[derive(Clone, Copy, Debug)]
enum Coll {
    AllGather,
    ReduceScatter(ReduceOp),
    Broadcast(usize),
}

const MAX: ByteSize = ByteSize::kib(64);

#[test]
#[ignore = "needs a GPU per rank and NCCL: TPCOMM_GPU_TESTS=1 cargo test -- --ignored"]
fn collectives_route_to_tpcomm_or_nccl_and_are_right() {
    let Some(worlds) = gpu_common::gpu_worlds("a GPU per rank and NCCL") else {
        return;
    };
    for world in worlds {
        if world > gpu_count() {
            eprintln!("SKIPPED at {}: NCCL needs a GPU per rank", describe(world));
            continue;
        }
        run(world);
    }
}

fn run(world: usize) {
    let dtype = DType::Bf16;
    let small = 1000usize;
    let big = MAX.bytes() as usize / dtype.size() + 3;
    // (collective, block elements, where it must run)
    let cases = [
        (Coll::AllGather, small, None),
        (Coll::AllGather, big, Some(NcclReason::TooLarge)),
        (Coll::ReduceScatter(ReduceOp::Sum), small, None),
        (
            Coll::ReduceScatter(ReduceOp::Sum),
            big,
            Some(NcclReason::TooLarge),
        ),
        (
            Coll::ReduceScatter(ReduceOp::Max),
            small,
            Some(NcclReason::Op),
        ),
        (Coll::Broadcast(world - 1), small, None),
        (Coll::Broadcast(0), big, Some(NcclReason::TooLarge)),
    ];
    let in_len = |c: Coll, n: usize| match c {
        Coll::ReduceScatter(_) => world * n,
        _ => n,
    };
    let out_len = |c: Coll, n: usize| match c {
        Coll::AllGather => world * n,
        _ => n,
    };
    let inputs: Vec<Vec<Vec<u8>>> = cases
        .iter()
        .enumerate()
        .map(|(k, &(c, n, _))| {
            (0..world)
                .map(|r| random_bytes(dtype, in_len(c, n), &mut Rng::new(91 + (k * 8 + r) as u64)))
                .collect()
        })
        .collect();
    let group = ThreadGroup::new(world);
    let outs: Vec<Vec<Vec<u8>>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..world)
            .map(|rank| {
                let rv = Rendezvous::Threads(group.clone());
                let (inputs, cases) = (&inputs, &cases);
                s.spawn(move || {
                    let mut cfg = CudaConfig::new(rank, world, device_of(rank));
                    cfg.max_bytes = MAX;
                    cfg.nccl_fallback = true;
                    let comm = Communicator::new(&cfg, &rv).expect("create communicator");
                    comm.prepare_collectives().unwrap();
                    let ctx = open_context(device_of(rank)).unwrap();
                    let stream = ctx.new_stream().unwrap();
                    let cs = stream.cu_stream();
                    let mut got = Vec::new();
                    for (k, &(c, n, want)) in cases.iter().enumerate() {
                        let inp = stream.clone_htod(&inputs[k][rank][..]).unwrap();
                        let out = stream
                            .alloc_zeros::<u8>(out_len(c, n) * dtype.size())
                            .unwrap();
                        let (pi, _gi) = inp.device_ptr(&stream);
                        let (po, _go) = out.device_ptr(&stream);
                        let call = Call::new(pi, po, n, dtype, cs).with_launch(Launch::Ordinary);
                        // SAFETY: the buffers hold what each collective reads
                        // and writes on this rank's GPU and live past the
                        // synchronize below.
                        let route = unsafe {
                            match c {
                                Coll::AllGather => comm.all_gather(&call),
                                Coll::ReduceScatter(op) => comm.reduce_scatter(&call.with_op(op)),
                                Coll::Broadcast(root) => comm.broadcast(&call.with_root(root)),
                            }
                        }
                        .expect("collective");
                        assert_eq!(route.nccl_reason(), want, "case {k}: {c:?} of {n}: {route}");
                        stream.synchronize().unwrap();
                        comm.check().unwrap();
                        got.push(stream.clone_dtoh(&out).unwrap());
                    }
                    got
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let b = dtype.size();
    for (k, &(c, n, _)) in cases.iter().enumerate() {
        for (rank, out) in outs.iter().enumerate() {
            let out = &out[k];
            let wrong = match c {
                Coll::AllGather => {
                    let all: Vec<u8> = inputs[k].iter().flatten().copied().collect();
                    (0..world * n)
                        .filter(|&i| out[i * b..(i + 1) * b] != all[i * b..(i + 1) * b])
                        .count()
                }
                Coll::Broadcast(root) => (0..n)
                    .filter(|&i| out[i * b..(i + 1) * b] != inputs[k][root][i * b..(i + 1) * b])
                    .count(),
                Coll::ReduceScatter(op) => {
                    let ins: Vec<&[u8]> = inputs[k]
                        .iter()
                        .map(|v| &v[rank * n * b..(rank + 1) * n * b])
                        .collect();
                    match op {
                        ReduceOp::Sum => count_wrong(dtype, out, &reference(dtype, &ins, n), world),
                        _ => (0..n)
                            .filter(|&i| {
                                let want = ins
                                    .iter()
                                    .map(|v| element(dtype, v, i))
                                    .fold(f64::NEG_INFINITY, f64::max);
                                element(dtype, out, i) != want
                            })
                            .count(),
                    }
                }
            };
            assert_eq!(wrong, 0, "case {k} ({c:?} of {n}) on rank {rank}");
        }
    }
}

#[test]
#[ignore = "needs a GPU: TPCOMM_GPU_TESTS=1 cargo test -- --ignored"]
fn without_the_fallback_a_block_above_the_buffers_is_a_clear_error() {
    let Some(worlds) = gpu_common::gpu_worlds("a GPU") else {
        return;
    };
    for world in worlds {
        let group = ThreadGroup::new(world);
        std::thread::scope(|s| {
            for rank in 0..world {
                let rv = Rendezvous::Threads(group.clone());
                s.spawn(move || {
                    let mut cfg = CudaConfig::new(rank, world, device_of(rank));
                    cfg.max_bytes = MAX;
                    cfg.nccl_fallback = false;
                    let comm = Communicator::new(&cfg, &rv).expect("create communicator");
                    let ctx = open_context(device_of(rank)).unwrap();
                    let stream = ctx.new_stream().unwrap();
                    let buf = stream.alloc_zeros::<u8>(1 << 20).unwrap();
                    let (p, _g) = buf.device_ptr(&stream);
                    // SAFETY: the call is refused before anything is launched.
                    let err = unsafe {
                        comm.broadcast(&Call::new(p, p, 64 * 1024, DType::Bf16, stream.cu_stream()))
                    }
                    .unwrap_err();
                    assert!(err.to_string().contains("nccl_fallback"), "{err}");
                });
            }
        });
    }
}
