//! The status codes the collective kernels write when a wait times out,
//! and what each was waiting for; read by the communicators' `check()`
//! (kept apart so the communicators need not import the collectives).

// HC_WAIT_* in kernels/host_collectives.cu.
pub(super) const WAIT_ALL_GATHER: u32 = 8;
pub(super) const WAIT_REDUCE_SCATTER: u32 = 9;
pub(super) const WAIT_BROADCAST: u32 = 10;

/// What a status code of these kernels waited for, for
/// `PinnedTransport::check`; `None` for other codes.
pub(super) fn wait_what(code: u32) -> Option<&'static str> {
    match code {
        WAIT_ALL_GATHER => Some("host-path all-gather chunk flag"),
        WAIT_REDUCE_SCATTER => Some("host-path reduce-scatter chunk flag"),
        WAIT_BROADCAST => Some("host-path broadcast chunk flag (data or token)"),
        _ => None,
    }
}
