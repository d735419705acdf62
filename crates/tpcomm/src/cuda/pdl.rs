//! Programmatic dependent launch (sm_90+): a kernel launched this way may
//! start while the previous kernel on its stream drains, and waits for it
//! inside (`griddepcontrol.wait`, in `wait_for_previous_kernel` of
//! kernels/fused.cu) before touching what that kernel wrote. The one unsafe
//! call of the fused kernels' launch path lives here.

use super::raw::{CUstream, Function};
use crate::error::{Error, Result};
use cudarc::driver::sys as cu;
use std::ffi::c_void;

/// Launches `f` with one by-value argument, allowing it to overlap the
/// previous kernel on `stream` (the launch attribute
/// PROGRAMMATIC_STREAM_SERIALIZATION). Only for kernels that call
/// `wait_for_previous_kernel` before reading anything, on sm_90 or newer.
///
/// # Safety
/// As `raw::launch`: `A` matches the kernel's parameter, and every device
/// address in `args` stays valid until the kernel has finished.
pub(crate) unsafe fn launch_overlapped<A>(
    f: Function,
    grid: u32,
    block: u32,
    args: &A,
    stream: CUstream,
) -> Result<()> {
    // SAFETY: CUlaunchAttribute is a plain C struct (an id and a union of
    // plain values); all-zero is a valid starting point.
    let mut attr: cu::CUlaunchAttribute = unsafe { std::mem::zeroed() };
    attr.id = cu::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmaticStreamSerializationAllowed = 1;
    let config = cu::CUlaunchConfig {
        gridDimX: grid,
        gridDimY: 1,
        gridDimZ: 1,
        blockDimX: block,
        blockDimY: 1,
        blockDimZ: 1,
        sharedMemBytes: 0,
        hStream: stream,
        attrs: &mut attr,
        numAttrs: 1,
    };
    let mut params = [args as *const A as *mut c_void];
    // SAFETY: config and attr outlive the call; the caller upholds the
    // argument layout and lifetime contract; the driver copies the argument
    // bytes before returning.
    let r = unsafe {
        cu::cuLaunchKernelEx(
            &config,
            f.handle(),
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    };
    if r == cu::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(Error::Cuda {
            call: "cuLaunchKernelEx (programmatic dependent launch)".into(),
            detail: format!("{r:?}"),
        })
    }
}
