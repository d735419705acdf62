//! The memory calls (nccl.h's "buffer registration" and "memory allocator"
//! groups): ncclMemAlloc and ncclMemFree, ncclCommRegister and
//! ncclCommDeregister, ncclCommWindowRegister and ncclCommWindowDeregister.
//!
//! On a communicator the real NCCL made they are NCCL's. Standalone
//! (TPCOMM_STANDALONE=1, or a communicator tpcomm serves itself) there is no
//! NCCL to ask, and vLLM's and SGLang's wrappers call them all the same:
//! ncclMemAlloc then gives plain device memory of the current GPU
//! (`cuMemAlloc`, freed by ncclMemFree), and registering a buffer or a
//! window succeeds with a handle that stands for it: tpcomm's kernels run
//! on any device buffer, so registration has nothing to do.

use crate::ffi::{call_real, guard, Fail};
use crate::settings::{self, info, Standalone};
use crate::standalone::{self, registry};
use crate::types::*;
use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::sync::{Arc, Mutex, OnceLock};
use tpcomm::cuda::cudarc::driver::CudaContext;
use tpcomm::cuda::{DeviceAlloc, SavedContext};

/// ncclMemAlloc's allocations made here, by address, with the context that
/// holds each.
type Allocations = Mutex<HashMap<u64, (DeviceAlloc, Arc<CudaContext>)>>;

fn allocations() -> &'static Allocations {
    static A: OnceLock<Allocations> = OnceLock::new();
    A.get_or_init(Default::default)
}

/// Allocates `size` bytes on the current thread's GPU, kept until
/// [`free_ours`].
fn alloc_ours(ptr: *mut *mut c_void, size: usize) -> NcclResult {
    const CALL: &str = "ncclMemAlloc";
    if ptr.is_null() {
        return standalone::fail(
            INVALID_ARGUMENT,
            format!("{CALL}: the pointer to write is NULL"),
        );
    }
    if size == 0 {
        return standalone::fail(INVALID_ARGUMENT, format!("{CALL}: size 0"));
    }
    let Some(device) = tpcomm::cuda::current_device() else {
        return standalone::fail(
            CUDA_ERROR,
            format!("{CALL}: no CUDA context is current on this thread; select the GPU first (cudaSetDevice)"),
        );
    };
    let _restore = SavedContext::save();
    let made = tpcomm::cuda::open_context(device)
        .and_then(|ctx| DeviceAlloc::new(ctx.cu_ctx(), size).map(|m| (m, ctx)));
    match made {
        Ok((mem, ctx)) => {
            let p = mem.ptr();
            allocations()
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(p, (mem, ctx));
            info!("{CALL}: {size} bytes on GPU {device} (standalone: cuMemAlloc)");
            // SAFETY: non-null, the caller's void*.
            unsafe { *ptr = p as *mut c_void };
            SUCCESS
        }
        Err(e) => standalone::fail(
            CUDA_ERROR,
            format!("{CALL}: {size} bytes on GPU {device} could not be allocated ({e})"),
        ),
    }
}

/// Frees `ptr` if ncclMemAlloc gave it here; false when it is not ours.
fn free_ours(ptr: *mut c_void) -> bool {
    let gone = allocations()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&(ptr as u64));
    match gone {
        Some(m) => {
            let _restore = SavedContext::save();
            drop(m);
            true
        }
        None => false,
    }
}

/// Whether ncclMemAlloc is answered here: standalone mode, or no real NCCL
/// to answer it.
fn ours() -> bool {
    settings::get().standalone == Standalone::Always || crate::real_nccl::get().is_err()
}

#[no_mangle]
pub unsafe extern "C" fn ncclMemAlloc(ptr: *mut *mut c_void, size: usize) -> NcclResult {
    guard("ncclMemAlloc", || {
        if ours() {
            return alloc_ours(ptr, size);
        }
        call_real!(ncclMemAlloc(ptr, size) as fn(*mut *mut c_void, usize) -> NcclResult)
            .unwrap_or_else(|_| NcclResult::missing())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclMemFree(ptr: *mut c_void) -> NcclResult {
    guard("ncclMemFree", || {
        if ptr.is_null() {
            return SUCCESS;
        }
        if free_ours(ptr) {
            return SUCCESS;
        }
        if ours() {
            return standalone::fail(
                INVALID_ARGUMENT,
                format!("ncclMemFree: {ptr:p} was not given by ncclMemAlloc"),
            );
        }
        call_real!(ncclMemFree(ptr) as fn(*mut c_void) -> NcclResult)
            .unwrap_or_else(|_| NcclResult::missing())
    })
}

/// Writes `value` (a handle standing for a registered buffer) to `out`.
fn registered(call: &str, out: *mut *mut c_void, value: *mut c_void) -> NcclResult {
    if out.is_null() {
        return standalone::fail(
            INVALID_ARGUMENT,
            format!("{call}: the handle pointer is NULL"),
        );
    }
    // SAFETY: non-null, the caller's handle.
    unsafe { *out = value };
    SUCCESS
}

/// The handle of a registration of `buff`: never NULL (callers test it).
fn token(buff: *mut c_void) -> *mut c_void {
    if buff.is_null() {
        std::ptr::dangling_mut::<u8>().cast()
    } else {
        buff
    }
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommRegister(
    comm: NcclComm,
    buff: *mut c_void,
    size: usize,
    handle: *mut *mut c_void,
) -> NcclResult {
    guard("ncclCommRegister", || {
        if registry::lookup(comm).is_some() {
            return registered("ncclCommRegister", handle, token(buff));
        }
        if let Some(r) = registry::unknown("ncclCommRegister", comm) {
            return r;
        }
        call_real!(ncclCommRegister(comm, buff, size, handle)
            as fn(NcclComm, *mut c_void, usize, *mut *mut c_void) -> NcclResult)
        .unwrap_or_else(|_| NcclResult::missing())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommDeregister(comm: NcclComm, handle: *mut c_void) -> NcclResult {
    guard("ncclCommDeregister", || {
        if registry::lookup(comm).is_some() {
            return SUCCESS;
        }
        if let Some(r) = registry::unknown("ncclCommDeregister", comm) {
            return r;
        }
        call_real!(ncclCommDeregister(comm, handle) as fn(NcclComm, *mut c_void) -> NcclResult)
            .unwrap_or_else(|_| NcclResult::missing())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommWindowRegister(
    comm: NcclComm,
    buff: *mut c_void,
    size: usize,
    win: *mut Opaque,
    win_flags: c_int,
) -> NcclResult {
    guard("ncclCommWindowRegister", || {
        if registry::lookup(comm).is_some() {
            return registered("ncclCommWindowRegister", win.cast(), token(buff));
        }
        if let Some(r) = registry::unknown("ncclCommWindowRegister", comm) {
            return r;
        }
        call_real!(ncclCommWindowRegister(comm, buff, size, win, win_flags)
            as fn(
                NcclComm,
                *mut c_void,
                usize,
                *mut Opaque,
                c_int,
            ) -> NcclResult)
        .unwrap_or_else(|_| NcclResult::missing())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommWindowDeregister(comm: NcclComm, win: Opaque) -> NcclResult {
    guard("ncclCommWindowDeregister", || {
        if registry::lookup(comm).is_some() {
            return SUCCESS;
        }
        if let Some(r) = registry::unknown("ncclCommWindowDeregister", comm) {
            return r;
        }
        call_real!(ncclCommWindowDeregister(comm, win) as fn(NcclComm, Opaque) -> NcclResult)
            .unwrap_or_else(|_| NcclResult::missing())
    })
}
