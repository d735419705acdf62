//! Programmatic dependent launch (sm_90+): a kernel launched this way may
//! start while the previous kernel on its stream drains, and waits for it
//! inside (`griddepcontrol.wait`, in `wait_for_previous_kernel` of
//! kernels/common.cuh) before touching what that kernel wrote. Every tpcomm kernel starts with that wait, so any of
//! them may be launched this way. The launch call itself is the raw layer's
//! (`sys::cuda::launch_overlapped`).

use crate::error::Result;
use crate::sys::cuda::{self as raw, CUstream, Function};

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
/// As `sys::cuda::launch`; `f` must start with `wait_for_previous_kernel`.
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
            raw::launch_overlapped(f, grid, block, args, stream)
        } else {
            raw::launch(f, grid, block, args, stream)
        }
    }
}
