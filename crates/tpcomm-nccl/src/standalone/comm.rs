//! A standalone communicator's state (docs/standalone.md): what create.rs
//! creates and every standalone path (standalone/collectives.rs, gathered.rs) runs on, and the
//! two helpers they share. Its GPU side holds the library's `Communicator`
//! (no NCCL behind it, a staging buffer) plus what only standalone mode
//! needs: the gathered-block kernels and the launch gate.

use crate::standalone::{self, launch_gate, Secret};
use crate::types::*;
use std::sync::Arc;
use tpcomm::cuda::{gathered, Communicator, GpuComm, SavedContext, Staging};

/// The GPU side of a standalone communicator.
pub struct StandaloneGpu {
    /// The library's communicator with no NCCL behind it
    /// (`NcclFallback::None`): the kernels on the transport the ranks' P2P
    /// verdict gave ([`gpu`](Self::gpu)), and the staging buffer
    /// ([`staging`](Self::staging)). Private: [`StandaloneGpu::new`] checks
    /// both.
    comm: Communicator,
    /// The reduction of gathered blocks: all-reduces of the types and ops
    /// the collective kernels do not sum (loaded at creation).
    pub gathered: Arc<gathered::Kernels>,
    /// Orders this rank's launches with the other ranks of this process on
    /// its GPU (launch_gate.rs); `None` when it has the GPU to itself here.
    pub gate: Option<launch_gate::Gate>,
}

// SAFETY: a `Communicator` is `Sync` but for an NCCL communicator of its
// own (`NcclFallback::Own`, which NCCL lets one thread at a time use), and
// `StandaloneGpu::new` takes only one without; the gathered kernels and the
// gate are `Sync`, and the kernels and staging buffer were when this struct
// held them one by one.
unsafe impl Sync for StandaloneGpu {}

impl StandaloneGpu {
    /// The GPU side from its parts: `comm` must have no NCCL of its own and
    /// keep a staging buffer (`Setup { fallback: Fallback::None, staging:
    /// true }`, as create.rs makes it).
    pub fn new(
        comm: Communicator,
        gathered: Arc<gathered::Kernels>,
        gate: Option<launch_gate::Gate>,
    ) -> tpcomm::Result<Self> {
        if comm.nccl().is_some() || comm.staging().is_none() {
            return Err(tpcomm::Error::invalid(
                "standalone communicator",
                "it needs a staging buffer and no NCCL of its own",
            ));
        }
        Ok(StandaloneGpu {
            comm,
            gathered,
            gate,
        })
    }

    /// The kernels on the transport the ranks' P2P verdict gave.
    pub fn gpu(&self) -> &GpuComm {
        self.comm.gpu()
    }

    /// Where all-reduces of unaligned buffers are summed, and where the
    /// other all-reduces gather their blocks (TPCOMM_MAX_BYTES).
    pub fn staging(&self) -> &Staging {
        match self.comm.staging() {
            Some(s) => s,
            // `new` took only a communicator with one.
            None => unreachable!("a standalone communicator without its staging buffer"),
        }
    }
}

/// One rank's standalone communicator.
pub struct StandaloneComm {
    pub rank: usize,
    pub world: usize,
    pub device: usize,
    /// The id's secret: where ranks meet again (ncclCommSplit).
    pub secret: Secret,
    /// How many ncclCommSplit calls this communicator has had (every rank
    /// makes them in the same order, so the count names each one).
    pub splits: std::sync::atomic::AtomicU64,
    /// How many groups of sends and receives this communicator has ended
    /// (each rank ends them in the same order: the count names the
    /// exchange of their sizes, p2p.rs).
    pub p2p_groups: std::sync::atomic::AtomicU64,
    /// The two-rank communicators this rank's sends and receives run on, one
    /// per peer, made at the first group with that peer (p2p.rs): the peer
    /// and the pair's communicator. Empty for a communicator of one or two
    /// ranks, whose groups run on the communicator itself.
    pub pairs: std::sync::Mutex<Vec<(usize, Arc<StandaloneComm>)>>,
    /// The pre-multiplied sums ncclRedOpCreatePreMulSum made on it (premul.rs).
    pub premul: standalone::premul::PreMulOps,
    /// Always there for a communicator ncclCommInitRank made; `None` only
    /// in this crate's unit tests, which need a handle without a GPU.
    pub live: Option<StandaloneGpu>,
    /// A communicator of one rank instead: every collective is a copy from
    /// the send to the receive buffer on the caller's stream (this 16-byte
    /// buffer only lends its context and copy).
    pub solo: Option<Staging>,
}

/// The live GPU side of `a`, or the refusal of `call`.
pub(crate) fn live<'a>(a: &'a StandaloneComm, call: &str) -> Result<&'a StandaloneGpu, NcclResult> {
    a.live
        .as_ref()
        .ok_or_else(|| standalone::unservable(call, "this communicator has no GPU side"))
}

/// Runs `f` (which queues the call's kernels) with the caller's CUDA context
/// put back after, and, where other ranks of this process share the GPU,
/// through the rank's launch gate; an error of `f` is ncclInternalError, a
/// rank the gate waited for in vain ncclSystemError, each with the text for
/// ncclGetLastError.
pub(crate) fn run(
    call: &str,
    a: &StandaloneComm,
    stream: CudaStream,
    f: impl FnOnce() -> tpcomm::Result<()>,
) -> NcclResult {
    let _restore = SavedContext::save();
    let gate = a.live.as_ref().and_then(|l| l.gate.as_ref());
    if gate.is_some() {
        warn_if_captured(call, a, stream);
    }
    // Inside a group one thread may be issuing every rank's call: it would
    // wait for itself (launch_gate.rs).
    let done = match gate {
        Some(g) if crate::group::depth() == 0 => match g.around(f) {
            Ok(r) => r,
            Err(e) => {
                return standalone::fail(
                    SYSTEM_ERROR,
                    format!("{call} rank {}/{}: {e}", a.rank, a.world),
                )
            }
        },
        Some(g) => {
            warn_if_entangled(call, a, g);
            f()
        }
        None => f(),
    };
    match done {
        Ok(()) => SUCCESS,
        Err(e) => standalone::fail(
            INTERNAL_ERROR,
            format!("{call} rank {}/{}: tpcomm failed ({e})", a.rank, a.world),
        ),
    }
}

/// Once per process: the launch gate cannot order this layout of threads
/// and ranks (launch_gate.rs, `Gate::note_grouped`).
fn warn_if_entangled(call: &str, a: &StandaloneComm, g: &launch_gate::Gate) {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if SAID.load(std::sync::atomic::Ordering::Relaxed) {
        return;
    }
    if let Some(why) = g.note_grouped() {
        if !SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
            crate::settings::warn!("{call} rank {}/{} GPU {}: {why}", a.rank, a.world, a.device);
        }
    }
}

/// Once per process: a call of ranks that are threads sharing a GPU is being
/// captured into a CUDA graph. Its replays run no host code, so the launch
/// gate cannot order them, and a device-synchronizing call on one rank's
/// thread between replays (cudaFree, cudaDeviceSynchronize, a pageable copy)
/// can wait for a peer's replayed kernel that waits for this rank: the
/// ranks then stall until TPCOMM_TIMEOUT_S (docs/shared-gpu.md).
fn warn_if_captured(call: &str, a: &StandaloneComm, stream: CudaStream) {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if SAID.load(std::sync::atomic::Ordering::Relaxed) {
        return;
    }
    // SAFETY: the call's stream, which NCCL's contract makes a live stream
    // of this rank's GPU (its context is current: the caller bound it).
    let captured = unsafe { tpcomm::cuda::stream_is_capturing(stream as tpcomm::cuda::CUstream) };
    if captured.unwrap_or(false) && !SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
        crate::settings::warn!(
            "{call} rank {}/{}: captured into a CUDA graph while ranks of this process share GPU {}; between replays no rank thread may make a device-synchronizing CUDA call (cudaFree, cudaDeviceSynchronize, a copy through pageable memory), or the ranks stall until TPCOMM_TIMEOUT_S: docs/shared-gpu.md",
            a.rank,
            a.world,
            a.device
        );
    }
}

/// Swaps `mine` with every rank of `a` for the step `key` ([`exchange`](standalone::exchange) in
/// its meeting directory, within TPCOMM_TIMEOUT), then removes this rank's
/// record of it: a step each rank runs once while the communicator lives
/// (a split, a group of sends and receives), keyed by its number.
pub fn swap(a: &StandaloneComm, key: &str, mine: &[u8]) -> tpcomm::Result<Vec<Vec<u8>>> {
    let dir = standalone::meeting_dir(&standalone::runtime_base(), &a.secret)?;
    let turn = tpcomm::cuda::Turn {
        key,
        rank: a.rank,
        world: a.world,
        mine,
        timeout: crate::settings::get().timeout,
    };
    let all = standalone::exchange(&dir, &a.secret, turn)?;
    standalone::tidy(&dir, a.rank, key);
    Ok(all)
}
