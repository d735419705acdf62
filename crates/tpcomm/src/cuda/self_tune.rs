//! The quick self-tune at communicator creation (off by default;
//! `TPCOMM_SELF_TUNE=1` or `CudaConfig::self_tune`): a few timed calls of
//! each CUDA algorithm at a handful of sizes, agreed between ranks, turned
//! into an in-memory table. For machines no table covers (PCIe with P2P).
//!
//! Every rank makes exactly the same calls (no early exit on a rank's own
//! clock: a rank that stopped would leave its peers waiting), and every rank
//! takes the slowest rank's time per point, so all ranks build the same
//! table and run the same kernel for every later `Algo::Auto` call.

use super::call::Call;
use super::rendezvous::Rendezvous;
use super::stream_all_reduce::StreamAllReduce;
use crate::algo::Algo;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::select::{Candidate, Measured, Mode, Selector, Table};
use crate::topology::MachineClass;
use crate::units::ByteSize;
use cudarc::driver::{sys, CudaContext, DevicePtr};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Environment variable that turns the self-tune on (`env::SELF_TUNE`).
pub const ENV_SELF_TUNE: &str = "TPCOMM_SELF_TUNE";

const WARMUP: usize = 2;
const TIMED: usize = 5;
const ALGOS: [Algo; 2] = [Algo::OneShot, Algo::TwoShot];

/// Sizes measured: latency-bound to bandwidth-bound, up to the buffer size.
/// With at most 16 MiB and 7 calls per point the GPU work is a few ms even
/// over PCIe (16 MiB at 10 GB/s: 1.6 ms per call, 22 ms in all).
pub fn sizes(max: ByteSize) -> Vec<u64> {
    [
        4u64 << 10,
        64 << 10,
        256 << 10,
        1 << 20,
        2 << 20,
        4 << 20,
        16 << 20,
    ]
    .into_iter()
    .filter(|&b| b <= max.bytes())
    .collect()
}

/// The slowest rank's time per point, from every rank's times (f64 little
/// endian, one per point, in the same order on every rank).
pub fn slowest(all: &[Vec<u8>], points: usize) -> Result<Vec<f64>> {
    let mut out = vec![0f64; points];
    for (r, blob) in all.iter().enumerate() {
        if blob.len() != points * 8 {
            return Err(Error::Aborted(format!(
                "self-tune: rank {r} sent {} bytes of times, expected {}; are all ranks the same tpcomm build with the same max_bytes?",
                blob.len(),
                points * 8
            )));
        }
        for (i, c) in blob.chunks_exact(8).enumerate() {
            let t = f64::from_le_bytes(c.try_into().expect("chunks of 8"));
            out[i] = out[i].max(t);
        }
    }
    Ok(out)
}

/// The table made of the agreed times (`times[i * 2 + a]` for size i, algorithm a).
/// The times are eager; graph rows carry the same numbers (a graph would
/// take a capture per point, beyond the budget), which the table says.
pub fn table(world: usize, sizes: &[u64], times: &[f64], spent: Duration) -> Table {
    let mut m = Vec::new();
    for (i, &bytes) in sizes.iter().enumerate() {
        for (a, algo) in ALGOS.iter().enumerate() {
            for mode in [Mode::Eager, Mode::Graph] {
                m.push(Measured {
                    dtype: DType::Bf16,
                    mode,
                    bytes,
                    candidate: Candidate::cuda(*algo),
                    time_us: times[i * ALGOS.len() + a].max(1e-3),
                });
            }
        }
    }
    let header = Table {
        fingerprint: None,
        // Only the CUDA transport is measured, so the class rules are only
        // reached for queries no row answers; the P2P-over-PCIe rule is the
        // cautious one.
        machine_class: MachineClass::PcieP2p,
        world,
        gpu: String::new(),
        driver: String::new(),
        nccl: None,
        measured: format!(
            "self-tune at communicator creation: bf16, eager, {TIMED} calls per point, slowest rank, {} ms; graph rows repeat the eager times",
            spent.as_millis()
        ),
        rows: Vec::new(),
    };
    Table::from_measured(header, &m)
}

/// What the self-tune reads of the transport it times (the P2P transport,
/// whose creation runs it, implements it in transport/p2p/comm.rs).
pub(crate) trait Timed: StreamAllReduce {
    fn rank(&self) -> usize;
    fn world(&self) -> usize;
    fn max_bytes(&self) -> ByteSize;
    fn context(&self) -> &Arc<CudaContext>;
    /// An earlier call's failure, if any.
    fn check(&self) -> Result<()>;
}

/// Runs the self-tune on a freshly created communicator (every rank at once).
/// Two scratch buffers of the largest size are taken and given back before
/// this returns.
pub(crate) fn run(comm: &impl Timed, rv: &Rendezvous, timeout: Duration) -> Result<Selector> {
    let started = Instant::now();
    let err = |call: &'static str| {
        move |e: cudarc::driver::DriverError| Error::Cuda {
            call: call.into(),
            detail: e.to_string(),
        }
    };
    let sizes = sizes(comm.max_bytes());
    let Some(&largest) = sizes.last() else {
        return Err(Error::invalid(
            "self-tune",
            format!(
                "the buffer ({}) is below the smallest size measured (4 KiB)",
                comm.max_bytes()
            ),
        ));
    };
    let ctx = comm.context().clone();
    ctx.bind_to_thread().map_err(err("cuCtxSetCurrent"))?;
    let stream = ctx.new_stream().map_err(err("cuStreamCreate"))?;
    // Timing needs no particular values, only finite ones that are not the
    // -0.0 sentinel: 0x3c3c is a small positive number in bf16 and f16.
    let fill = vec![0x3cu8; largest as usize];
    let input = stream.clone_htod(&fill).map_err(err("cuMemcpyHtoD"))?;
    let output = stream
        .alloc_zeros::<u8>(largest as usize)
        .map_err(err("cuMemAlloc"))?;
    let ev0 = ctx
        .new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
        .map_err(err("cuEventCreate"))?;
    let ev1 = ctx
        .new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
        .map_err(err("cuEventCreate"))?;
    let (pi, po) = (input.device_ptr(&stream).0, output.device_ptr(&stream).0);
    let mut mine = Vec::with_capacity(sizes.len() * ALGOS.len() * 8);
    for &bytes in &sizes {
        let count = bytes as usize / DType::Bf16.size();
        for algo in ALGOS {
            let call = || -> Result<()> {
                // SAFETY: pi and po are `largest`-byte device buffers of this
                // rank's context, alive until after the synchronize below;
                // bytes <= largest <= the communicator's max_bytes.
                unsafe {
                    comm.all_reduce_call(
                        &Call::new(pi, po, count, DType::Bf16, stream.cu_stream()).with_algo(algo),
                    )
                }
                .map(|_| ())
            };
            for _ in 0..WARMUP {
                call()?;
            }
            ev0.record(&stream).map_err(err("cuEventRecord"))?;
            for _ in 0..TIMED {
                call()?;
            }
            ev1.record(&stream).map_err(err("cuEventRecord"))?;
            ev1.synchronize().map_err(err("cuEventSynchronize"))?;
            comm.check()?;
            let us = ev0.elapsed_ms(&ev1).map_err(err("cuEventElapsedTime"))? as f64 * 1000.0
                / TIMED as f64;
            mine.extend_from_slice(&us.to_le_bytes());
        }
    }
    stream.synchronize().map_err(err("cuStreamSynchronize"))?;
    drop((input, output));
    stream.synchronize().map_err(err("cuStreamSynchronize"))?;
    let all = rv.exchange(
        "tpcomm-self-tune",
        comm.rank(),
        comm.world(),
        &mine,
        timeout,
    )?;
    let times = slowest(&all, sizes.len() * ALGOS.len())?;
    let t = table(comm.world(), &sizes, &times, started.elapsed());
    Ok(
        Selector::with_table(t, "self-tune at communicator creation")
            .note("graph-mode rows of the self-tune repeat its eager times"),
    )
}
