//! The status codes the collective kernels write when a wait times out,
//! and what each was waiting for; read by the communicators' `check()`
//! (kept apart so the communicators need not import the collectives).

// TPCOMM_WAIT_COLL_* in kernels/collectives.cu.
pub(super) const WAIT_ALL_GATHER: u32 = 5;
pub(super) const WAIT_REDUCE_SCATTER: u32 = 6;
pub(super) const WAIT_BROADCAST: u32 = 7;

/// What a status code of the collective kernels was waiting for, for
/// `P2pTransport::check`; `None` for other codes.
pub(super) fn wait_what(code: u32) -> Option<&'static str> {
    match code {
        WAIT_ALL_GATHER => Some("all-gather data"),
        WAIT_REDUCE_SCATTER => Some("reduce-scatter data"),
        WAIT_BROADCAST => Some("broadcast data or a peer's broadcast token"),
        _ => None,
    }
}
