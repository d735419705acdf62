//! GPU test of `cuda::Communicator`'s NCCL fallback: a message above the
//! buffers and a max all-reduce run on NCCL, a small sum on tpcomm, each
//! checked element by element. Needs 2+ GPUs and NCCL; runs only with
//! TPCOMM_GPU_TESTS=1 (one thread per GPU).

use tpcomm::cuda::cudarc::driver::DevicePtr;
use tpcomm::cuda::StreamAllReduce;
use tpcomm::cuda::{open_context, Call, Communicator, CudaConfig, Rendezvous, ThreadGroup};
use tpcomm::select::NcclReason;
use tpcomm::verify::{count_wrong, element, random_bytes, reference, Rng};
use tpcomm::{ByteSize, DType, ReduceOp};

mod gpu_common;
use gpu_common::{describe, device_of, gpu_count};

fn gpu_worlds() -> Option<Vec<usize>> {
    gpu_common::gpu_worlds("a GPU; NCCL needs a GPU per rank")
}

#[test]
#[ignore = "needs a GPU and NCCL: TPCOMM_GPU_TESTS=1 cargo test -- --ignored"]
fn calls_the_kernels_cannot_take_run_on_nccl_and_are_right() {
    let Some(worlds) = gpu_worlds() else { return };
    for world in worlds {
        // NCCL refuses ranks that share a GPU ("Duplicate GPU detected").
        if world > gpu_count() {
            eprintln!("SKIPPED at {}: NCCL needs a GPU per rank", describe(world));
            continue;
        }
        let max = ByteSize::kib(64);
        // (elements, op, where it must run)
        let cases = [
            (1000usize, ReduceOp::Sum, None),
            (
                max.bytes() as usize,
                ReduceOp::Sum,
                Some(NcclReason::TooLarge),
            ),
            (
                3 * 1024 * 1024 + 7,
                ReduceOp::Sum,
                Some(NcclReason::TooLarge),
            ),
            (4099, ReduceOp::Max, Some(NcclReason::Op)),
        ];
        fallback_runs_on_nccl(world, max, None, &cases);
    }
}

/// NCCL takes the sizes where the routes say it is faster. The
/// pcie-p2p class defaults (forced here, whatever this machine is) give
/// NCCL every sum above 256 KiB; below, the kernels run.
#[test]
#[ignore = "needs a GPU and NCCL: TPCOMM_GPU_TESTS=1 cargo test -- --ignored"]
fn sums_where_nccl_is_faster_run_on_nccl_and_are_right() {
    let Some(worlds) = gpu_worlds() else { return };
    let sel = std::sync::Arc::new(tpcomm::select::Selector::for_class(
        tpcomm::topology::MachineClass::PcieP2p,
    ));
    for world in worlds {
        if world > gpu_count() {
            eprintln!("SKIPPED at {}: NCCL needs a GPU per rank", describe(world));
            continue;
        }
        let cases = [
            (1000usize, ReduceOp::Sum, None),
            (128 * 1024, ReduceOp::Sum, None),
            (128 * 1024 + 8, ReduceOp::Sum, Some(NcclReason::Faster)),
            (300_001, ReduceOp::Sum, Some(NcclReason::Faster)),
        ];
        fallback_runs_on_nccl(world, ByteSize::mib(1), Some(sel.clone()), &cases);
    }
}

fn fallback_runs_on_nccl(
    world: usize,
    max: ByteSize,
    selector: Option<std::sync::Arc<tpcomm::select::Selector>>,
    cases: &[(usize, ReduceOp, Option<NcclReason>)],
) {
    let dtype = DType::Bf16;
    let inputs: Vec<Vec<Vec<u8>>> = cases
        .iter()
        .enumerate()
        .map(|(c, &(n, _, _))| {
            (0..world)
                .map(|r| random_bytes(dtype, n, &mut Rng::new(17 + (c * 8 + r) as u64)))
                .collect()
        })
        .collect();
    let group = ThreadGroup::new(world);
    let outs: Vec<Vec<Vec<u8>>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..world)
            .map(|rank| {
                let rv = Rendezvous::Threads(group.clone());
                let inputs = &inputs;
                let selector = selector.clone();
                s.spawn(move || {
                    let mut cfg = CudaConfig::new(rank, world, device_of(rank));
                    cfg.max_bytes = max;
                    cfg.nccl_fallback = true;
                    cfg.selector = selector;
                    let comm = Communicator::new(&cfg, &rv).expect("create communicator");
                    assert!(comm.nccl().is_some(), "the fallback was asked for");
                    let ctx = open_context(device_of(rank)).unwrap();
                    let stream = ctx.new_stream().unwrap();
                    let mut got = Vec::new();
                    for (c, &(n, op, want)) in cases.iter().enumerate() {
                        let inp = stream.clone_htod(&inputs[c][rank][..]).unwrap();
                        let out = stream.alloc_zeros::<u8>(n * dtype.size()).unwrap();
                        let (pi, _gi) = inp.device_ptr(&stream);
                        let (po, _go) = out.device_ptr(&stream);
                        // SAFETY: both buffers hold n elements of dtype on this
                        // rank's GPU and live past the synchronize below.
                        let route = unsafe {
                            comm.all_reduce_call(
                                &Call::new(pi, po, n, dtype, stream.cu_stream()).with_op(op),
                            )
                        }
                        .expect("all-reduce");
                        assert_eq!(
                            route.nccl_reason(),
                            want,
                            "case {c}: {n} elements, {op}: {route}"
                        );
                        stream.synchronize().unwrap();
                        comm.gpu().check().unwrap();
                        got.push(stream.clone_dtoh(&out).unwrap());
                    }
                    got
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (c, &(n, op, _)) in cases.iter().enumerate() {
        let ins: Vec<&[u8]> = inputs[c].iter().map(|v| &v[..]).collect();
        for (rank, out) in outs.iter().enumerate() {
            let wrong = match op {
                ReduceOp::Sum => count_wrong(dtype, &out[c], &reference(dtype, &ins, n), world),
                // max is exact: the output must be one of the inputs' values.
                _ => (0..n)
                    .filter(|&i| {
                        let want = ins
                            .iter()
                            .map(|inp| element(dtype, inp, i))
                            .fold(f64::NEG_INFINITY, f64::max);
                        element(dtype, &out[c], i) != want
                    })
                    .count(),
            };
            assert_eq!(wrong, 0, "case {c} ({n} elements, {op}) on rank {rank}");
            assert_eq!(
                out[c], outs[0][c],
                "case {c}: rank {rank} differs from rank 0"
            );
        }
    }
}

#[test]
#[ignore = "needs a GPU: TPCOMM_GPU_TESTS=1 cargo test -- --ignored"]
fn without_the_fallback_a_large_message_is_a_clear_error() {
    let Some(worlds) = gpu_worlds() else { return };
    for world in worlds {
        without_fallback(world);
    }
}

fn without_fallback(world: usize) {
    let group = ThreadGroup::new(world);
    std::thread::scope(|s| {
        for rank in 0..world {
            let rv = Rendezvous::Threads(group.clone());
            s.spawn(move || {
                let mut cfg = CudaConfig::new(rank, world, device_of(rank));
                cfg.max_bytes = ByteSize::kib(64);
                cfg.nccl_fallback = false;
                let comm = Communicator::new(&cfg, &rv).expect("create communicator");
                let ctx = open_context(device_of(rank)).unwrap();
                let stream = ctx.new_stream().unwrap();
                let buf = stream.alloc_zeros::<u8>(256 * 1024).unwrap();
                let (p, _g) = buf.device_ptr(&stream);
                // SAFETY: the call is refused before anything is launched.
                let err = unsafe {
                    comm.all_reduce_call(&Call::new(
                        p,
                        p,
                        128 * 1024,
                        DType::Bf16,
                        stream.cu_stream(),
                    ))
                }
                .unwrap_err();
                assert!(err.to_string().contains("nccl_fallback"), "{err}");
            });
        }
    });
}
