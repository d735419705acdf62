//! Programmatic dependent launch (sm_90+): a kernel launched this way may
//! start while the previous kernel on its stream drains, and waits for it
//! inside (`griddepcontrol.wait`, in `wait_for_previous_kernel` of
//! kernels/common.cuh) before touching what that kernel wrote. Every tpcomm kernel starts with that wait, so any of
//! them may be launched this way. The launch call itself is the raw layer's
//! (`sys::cuda::launch_overlapped`). Where ranks share the GPU an overlapped
//! launch is an ordinary one ([`super::share::device_shared`] says why).

use super::call::Call;
use super::launch_shape::Shape;
use super::share::device_shared;
use crate::error::Result;
use crate::sys::cuda::{self as raw, CUstream, Function};
use cudarc::driver::CudaContext;

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
    /// latency. sm_90 and newer; an ordinary launch on older GPUs and on a
    /// GPU this process's ranks share with other ranks.
    Overlapped,
}

/// How a kernel asked to launch as `how` is launched on a device of
/// compute capability major `arch_major` that ranks share or not: overlapped
/// only from sm_90 on and only on a GPU of the rank's own.
pub(crate) fn effective(how: Launch, arch_major: i32, shared: bool) -> Launch {
    if how == Launch::Overlapped && arch_major >= 9 && !shared {
        Launch::Overlapped
    } else {
        Launch::Ordinary
    }
}

/// Launches `f` in `shape` (`launch_shape`'s) as `how` asks on the current
/// context's device, of compute capability major `arch_major` ([`effective`]).
///
/// # Safety
/// As `sys::cuda::launch`; `f` must start with `wait_for_previous_kernel`.
pub(crate) unsafe fn launch<A>(
    f: Function,
    shape: Shape,
    args: &A,
    stream: CUstream,
    how: Launch,
    arch_major: i32,
) -> Result<()> {
    // The current device is asked only when an overlapped launch is possible.
    let how = match effective(how, arch_major, false) {
        Launch::Overlapped => effective(how, arch_major, device_shared(raw::current_device()?)),
        Launch::Ordinary => Launch::Ordinary,
    };
    let Shape {
        grid,
        block,
        shared_bytes,
    } = shape;
    // SAFETY: forwarded from the caller.
    unsafe {
        match how {
            Launch::Overlapped => {
                raw::launch_overlapped(f, grid, block, shared_bytes, args, stream)
            }
            Launch::Ordinary => raw::launch_shared(f, grid, block, shared_bytes, args, stream),
        }
    }
}

/// [`launch`] of a transport's `call`: makes `ctx` current and launches `f`
/// on the call's stream as the call asks.
///
/// # Safety
/// As [`launch`].
pub(crate) unsafe fn launch_call<A>(
    ctx: &CudaContext,
    f: Function,
    shape: Shape,
    args: &A,
    call: &Call,
    arch_major: i32,
) -> Result<()> {
    raw::set_current(ctx.cu_ctx())?;
    // SAFETY: forwarded from the caller.
    unsafe { launch(f, shape, args, call.stream, call.launch, arch_major) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlapped_only_from_sm_90_and_only_on_a_gpu_of_its_own() {
        use Launch::*;
        assert_eq!(effective(Overlapped, 9, false), Overlapped);
        assert_eq!(effective(Overlapped, 10, false), Overlapped);
        assert_eq!(effective(Overlapped, 9, true), Ordinary);
        assert_eq!(effective(Overlapped, 8, false), Ordinary);
        assert_eq!(effective(Ordinary, 9, false), Ordinary);
        assert_eq!(effective(Ordinary, 9, true), Ordinary);
    }
}
