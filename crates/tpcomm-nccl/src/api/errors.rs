//! Errors and queries that take no collective: ncclGetErrorString,
//! ncclGetVersion, ncclGetLastError and ncclCommGetAsyncError (standalone
//! communicators answer from their own state; the rest is forwarded).

use crate::ffi::{call_real, guard, Fail};
use crate::settings::{self, Standalone};
use crate::standalone;
use crate::standalone::registry;
use crate::types::*;
use std::ffi::{c_char, c_int};

#[no_mangle]
pub unsafe extern "C" fn ncclGetErrorString(result: NcclResult) -> *const c_char {
    guard("ncclGetErrorString", || {
        call_real!(ncclGetErrorString(result) as fn(NcclResult) -> *const c_char)
            .unwrap_or_else(|_| error_string(result).as_ptr())
    })
}

/// The NCCL version this library's API is (nccl.h 2.28): what
/// ncclGetVersion says in standalone mode when no real NCCL is there.
const API_VERSION: c_int = 22800;

#[no_mangle]
pub unsafe extern "C" fn ncclGetVersion(version: *mut c_int) -> NcclResult {
    guard("ncclGetVersion", || {
        match call_real!(ncclGetVersion(version) as fn(*mut c_int) -> NcclResult) {
            Ok(r) => r,
            Err(_) if settings::get().standalone == Standalone::Always && !version.is_null() => {
                // SAFETY: non-null, the caller's int.
                unsafe { *version = API_VERSION };
                SUCCESS
            }
            Err(_) => NcclResult::missing(),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclGetLastError(comm: NcclComm) -> *const c_char {
    guard("ncclGetLastError", || {
        // Standalone mode's own text for its communicators, and for the
        // calls that take none (creation, ids) when it is on; in auto mode
        // for those when tpcomm failed the last creation (a census, a
        // standalone communicator: one handed to NCCL clears the text).
        let mode = settings::get().standalone;
        let ours = registry::lookup(comm).is_some()
            || (mode == Standalone::Always && registry::is_unknown(comm))
            || (comm.is_null() && mode == Standalone::Auto && standalone::has_last_error());
        if ours {
            return standalone::last_error_ptr();
        }
        call_real!(ncclGetLastError(comm) as fn(NcclComm) -> *const c_char).unwrap_or_else(|_| {
            if standalone::has_last_error() {
                standalone::last_error_ptr()
            } else {
                <*const c_char>::missing()
            }
        })
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommGetAsyncError(
    comm: NcclComm,
    async_error: *mut NcclResult,
) -> NcclResult {
    guard("ncclCommGetAsyncError", || {
        if let Some(a) = registry::lookup(comm) {
            return registry::async_error(comm, &a, async_error);
        }
        if let Some(r) = registry::unknown("ncclCommGetAsyncError", comm) {
            return r;
        }
        call_real!(
            ncclCommGetAsyncError(comm, async_error) as fn(NcclComm, *mut NcclResult) -> NcclResult
        )
        .unwrap_or_else(|_| NcclResult::missing())
    })
}
