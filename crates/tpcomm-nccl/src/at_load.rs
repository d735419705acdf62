//! What the drop-in does when the dynamic loader maps it (`LD_PRELOAD`, or a
//! program linking it), before the program's `main` and before CUDA starts:
//! it gives the process CUDA's widest set of hardware work queues when the
//! program left `CUDA_DEVICE_MAX_CONNECTIONS` unset and no MPS daemon is in
//! sight.
//!
//! Why: ranks that are threads of one process on one GPU share a context,
//! whose streams CUDA spreads round-robin over `CUDA_DEVICE_MAX_CONNECTIONS`
//! queues (8 by default), each running its work in order. Two ranks whose
//! streams land in one queue stall each other until the timeout
//! (docs/shared-gpu.md, measured: 32 queues pass at 2 to 8 ranks where 8
//! stall). CUDA reads the variable once, when it starts, so only code that
//! runs before the program's first CUDA call can set it, and programs
//! nobody here wrote do not. Under MPS every client takes its queues from
//! one pool per GPU (three clients of 32 fit on an H100), so the variable is
//! left alone where an MPS pipe directory is visible; a value the program
//! or user gave is always kept, and `TPCOMM_DISABLE=1` leaves it alone too.

use std::ffi::OsStr;

/// The default pipe directory of an MPS control daemon.
const MPS_DEFAULT_PIPE: &str = "/tmp/nvidia-mps";

/// Whether to set `CUDA_DEVICE_MAX_CONNECTIONS`: it is unset, tpcomm is not
/// disabled, and neither `CUDA_MPS_PIPE_DIRECTORY` nor the default MPS pipe
/// directory says an MPS daemon may serve this process.
fn widen(
    queues: Option<&OsStr>,
    disabled: bool,
    mps_pipe: Option<&OsStr>,
    default_pipe: bool,
) -> bool {
    queues.is_none() && !disabled && mps_pipe.is_none() && !default_pipe
}

extern "C" fn at_load() {
    // Nothing here may unwind into the loader.
    let _ = std::panic::catch_unwind(|| {
        let disabled = tpcomm::env::DISABLE.checked_value().unwrap_or(false);
        let q = tpcomm::cuda::share::QUEUES_ENV;
        let set = widen(
            std::env::var_os(q).as_deref(),
            disabled,
            std::env::var_os("CUDA_MPS_PIPE_DIRECTORY").as_deref(),
            std::path::Path::new(MPS_DEFAULT_PIPE).exists(),
        );
        if set {
            // Before main: the loader runs constructors on one thread.
            std::env::set_var(q, tpcomm::cuda::share::MAX_CONNECTIONS.to_string());
            WIDENED.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    });
}

/// Whether [`at_load`] set the variable (the info log says so once).
pub(crate) static WIDENED: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

#[used]
#[link_section = ".init_array"]
static AT_LOAD: extern "C" fn() = at_load;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_queues_widen_only_when_unset_enabled_and_no_mps_in_sight() {
        let some = Some(OsStr::new("8"));
        assert!(widen(None, false, None, false));
        assert!(!widen(some, false, None, false), "a value given is kept");
        assert!(!widen(None, true, None, false), "TPCOMM_DISABLE leaves it");
        assert!(
            !widen(None, false, Some(OsStr::new("/tmp/mps")), false),
            "MPS pipe set"
        );
        assert!(
            !widen(None, false, None, true),
            "the default MPS pipe exists"
        );
    }
}
