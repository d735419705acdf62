//! A standalone communicator's state (docs/standalone.md): what create.rs
//! creates and every standalone path (standalone/collectives.rs, gathered.rs) runs on, and the
//! two helpers they share.

use crate::standalone::{self, Secret};
use crate::types::*;
use std::sync::Arc;
use tpcomm::cuda::{gathered, GpuComm, SavedContext, Staging};

/// The GPU side of a standalone communicator.
pub struct StandaloneGpu {
    /// The kernels on the transport the ranks' P2P verdict gave.
    pub gpu: GpuComm,
    /// Where all-reduces of unaligned buffers are summed, and where the
    /// other all-reduces gather their blocks (TPCOMM_MAX_BYTES).
    pub staging: Staging,
    /// The reduction of gathered blocks: all-reduces of the types and ops
    /// the collective kernels do not sum (loaded at creation).
    pub gathered: Arc<gathered::Kernels>,
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

/// Runs `f` with the caller's CUDA context put back after; an error is
/// ncclInternalError with the text for ncclGetLastError.
pub(crate) fn run(
    call: &str,
    a: &StandaloneComm,
    f: impl FnOnce() -> tpcomm::Result<()>,
) -> NcclResult {
    let _restore = SavedContext::save();
    match f() {
        Ok(()) => SUCCESS,
        Err(e) => standalone::fail(
            INTERNAL_ERROR,
            format!("{call} rank {}/{}: tpcomm failed ({e})", a.rank, a.world),
        ),
    }
}
