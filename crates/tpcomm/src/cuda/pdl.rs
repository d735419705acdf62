//! Programmatic dependent launch (sm_90+): a kernel launched this way may
//! start while the previous kernel on its stream drains, and waits for it
//! inside (`griddepcontrol.wait`, in `wait_for_previous_kernel` of
//! kernels/common.cuh) before touching what that kernel wrote. Every tpcomm kernel starts with that wait, so any of
//! them may be launched this way. The one unsafe launch call for it lives here.

use super::raw::{self, CUstream, Function};
use crate::error::{Error, Result};
use cudarc::driver::sys as cu;
use std::ffi::c_void;

/// How a tpcomm kernel is launched.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Launch {
    /// An ordinary launch: the kernel starts once the previous one on the
    /// stream has finished.
    #[default]
    Ordinary,
    /// Programmatic dependent launch: the kernel may start while the
    /// previous one drains and waits for it inside, hiding its launch
    /// latency. sm_90 and newer; an ordinary launch on older GPUs.
    Overlapped,
}

/// Launches `f` as `how` asks on a device of compute capability major
/// `arch_major` (overlapped only from sm_90 on, ordinary otherwise).
///
/// # Safety
/// As `raw::launch`; `f` must start with `wait_for_previous_kernel`.
pub(crate) unsafe fn launch<A>(
    f: Function,
    grid: u32,
    block: u32,
    args: &A,
    stream: CUstream,
    how: Launch,
    arch_major: i32,
) -> Result<()> {
    // SAFETY: forwarded from the caller.
    unsafe {
        if how == Launch::Overlapped && arch_major >= 9 {
            launch_overlapped(f, grid, block, args, stream)
        } else {
            raw::launch(f, grid, block, args, stream)
        }
    }
}

/// Launches `f` with one by-value argument, allowing it to overlap the
/// previous kernel on `stream` (the launch attribute
/// PROGRAMMATIC_STREAM_SERIALIZATION). Only for kernels that call
/// `wait_for_previous_kernel` before reading anything, on sm_90 or newer.
///
/// # Safety
/// As `raw::launch`: `A` matches the kernel's parameter, and every device
/// address in `args` stays valid until the kernel has finished.
unsafe fn launch_overlapped<A>(
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
