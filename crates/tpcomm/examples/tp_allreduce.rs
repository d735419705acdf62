//! Using tpcomm from a Rust inference engine: one thread per GPU, each with a
//! `Communicator` (tpcomm's kernels over P2P or pinned host memory, whichever
//! the GPUs allow, with NCCL behind it for what the kernels cannot take), an
//! all-reduce on the engine's own stream, and the same call launched
//! overlapped, as it would follow a GEMM.
//!
//!     cargo run --release -p tpcomm --example tp_allreduce   # 2+ GPUs
//!
//! Without GPUs it says why and exits with status 2.

use std::process::ExitCode;
use std::sync::Arc;
use tpcomm::cuda::cudarc::driver::{CudaContext, DevicePtr};
use tpcomm::cuda::{
    open_context, Call, Communicator, CudaConfig, Launch, Rendezvous, StreamAllReduce, ThreadGroup,
};
use tpcomm::{Algo, ByteSize, DType, ReduceOp, Result};

/// Elements per all-reduce: 4 tokens of hidden size 7168 (an engine would
/// use bf16; f32 keeps this check exact).
const COUNT: usize = 28_672;

fn rank_main(rank: usize, world: usize, group: Arc<ThreadGroup>) -> Result<String> {
    let mut cfg = CudaConfig::new(rank, world, rank);
    cfg.max_bytes = ByteSize::mib(1);
    // Messages above max_bytes, and max/min, go to NCCL instead of failing
    // (needs libnccl.so.2; without it, creation fails and says so).
    cfg.nccl_fallback = std::env::var_os("EXAMPLE_NCCL").is_some();
    let comm = Communicator::new(&cfg, &Rendezvous::Threads(group))?;

    let ctx = open_context(rank)?;
    let stream = ctx.new_stream().map_err(|e| tpcomm::Error::Cuda {
        call: "cuStreamCreate".into(),
        detail: e.to_string(),
    })?;
    // Rank r holds (r + 1) * (i % 7): small integers, so the f32 sum is exact.
    let host: Vec<f32> = (0..COUNT).map(|i| ((rank + 1) * (i % 7)) as f32).collect();
    let buf = stream.clone_htod(&host).map_err(|e| tpcomm::Error::Cuda {
        call: "cuMemcpyHtoD".into(),
        detail: e.to_string(),
    })?;
    let ptr = buf.device_ptr(&stream).0;

    // SAFETY: `buf` is this rank's device memory of COUNT f32, 16-byte
    // aligned (cudarc allocations are), alive until after the synchronize
    // below; the stream belongs to this device's primary context.
    let route = unsafe {
        comm.all_reduce_call(
            &Call::new(ptr, ptr, COUNT, DType::F32, stream.cu_stream())
                .with_op(ReduceOp::Sum)
                .with_algo(Algo::Auto),
        )?
    };
    // The same call launched overlapped: in an engine it follows the GEMM that
    // wrote `buf` and starts while that GEMM drains (sm_90+; an ordinary
    // launch elsewhere). Here it sums the already-summed buffer again.
    // SAFETY: as above.
    unsafe {
        comm.all_reduce_call(
            &Call::new(ptr, ptr, COUNT, DType::F32, stream.cu_stream())
                .with_launch(Launch::Overlapped),
        )?
    };
    stream.synchronize().map_err(|e| tpcomm::Error::Cuda {
        call: "cuStreamSynchronize".into(),
        detail: e.to_string(),
    })?;
    // A peer that never arrived would be reported here, by rank.
    comm.gpu().check()?;

    let out = stream.clone_dtoh(&buf).map_err(|e| tpcomm::Error::Cuda {
        call: "cuMemcpyDtoH".into(),
        detail: e.to_string(),
    })?;
    let ranks_sum = (world * (world + 1) / 2) as f32;
    let wrong = out
        .iter()
        .enumerate()
        .filter(|(i, &v)| v != world as f32 * ranks_sum * (i % 7) as f32)
        .count();
    if wrong > 0 {
        return Err(tpcomm::Error::Aborted(format!(
            "rank {rank}: {wrong} of {COUNT} elements wrong"
        )));
    }
    Ok(format!(
        "rank {rank}: {COUNT} f32 summed twice over {world} GPUs on {} ({}), all right\n{}",
        comm.gpu().transport().name(),
        route,
        comm.gpu().memory_report()
    ))
}

fn main() -> ExitCode {
    if let Err(e) = tpcomm::cuda::ensure_driver() {
        eprintln!("tp_allreduce: this example needs 2 or more NVIDIA GPUs and found none ({e})");
        return ExitCode::from(2);
    }
    let world = match CudaContext::device_count() {
        Ok(n) if n >= 2 => (n as usize).min(tpcomm::transport::MAX_WORLD),
        Ok(n) => {
            eprintln!("tp_allreduce: needs 2 or more GPUs, found {n}");
            return ExitCode::from(2);
        }
        Err(e) => {
            eprintln!("tp_allreduce: cannot count GPUs: {e}");
            return ExitCode::from(2);
        }
    };
    let group = ThreadGroup::new(world);
    let results: Vec<Result<String>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..world)
            .map(|r| {
                let g = group.clone();
                s.spawn(move || rank_main(r, world, g))
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(tpcomm::Error::Aborted("rank thread panicked".into())))
            })
            .collect()
    });
    let mut ok = true;
    for r in results {
        match r {
            Ok(text) => println!("{text}"),
            Err(e) => {
                eprintln!("tp_allreduce: {e}");
                ok = false;
            }
        }
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
