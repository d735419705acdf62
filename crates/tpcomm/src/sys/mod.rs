//! The bottom layer: every call into C, and nothing else. The CUDA driver
//! and NVRTC ([`cuda`]), NVML (`nvml`), NCCL (`nccl`) and the C library's
//! shared memory and process calls (`shm`), each behind safe functions and
//! owning types, or an `unsafe fn` whose contract is the caller's pointers.
//!
//! It imports nothing of the library above it except the basic types
//! ([`crate::error`], [`crate::env`]); the transports, the topology probe
//! and the NCCL wrapper import from here. The old public paths
//! (`tpcomm::cuda::{launch, DeviceAlloc, Module, Function, SavedContext,
//! Scratch, Staging, ...}`) re-export what lives here.

pub mod cuda;
pub(crate) mod nccl;
pub(crate) mod nvml;
pub(crate) mod shm;

use std::ffi::{c_char, CStr};

/// A C string as an owned, trimmed `String` (empty for null), lossily.
///
/// # Safety
/// `p` is null or points to a NUL-terminated string alive for the call.
pub(crate) unsafe fn cstr_to_string(p: *const c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        // SAFETY: non-null, so NUL-terminated and alive (the caller's contract).
        unsafe { CStr::from_ptr(p) }
            .to_string_lossy()
            .trim()
            .to_owned()
    }
}
