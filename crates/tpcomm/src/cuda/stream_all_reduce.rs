//! The all-reduce with its arguments one by one, as callers of the
//! communicator write it: implemented by [`Communicator`](super::Communicator),
//! and by every [`GpuTransport`] through the [`Call`] it builds.

use super::call::{Call, GpuTransport};
use super::pdl::Launch;
use crate::algo::Algo;
use crate::dtype::{DType, ReduceOp};
use crate::error::Result;
use crate::sys::cuda::{CUdeviceptr, CUstream};

/// An all-reduce enqueued on a caller's CUDA stream.
pub trait StreamAllReduce {
    /// What the call ran: the route (`Communicator`), the algorithm (P2P),
    /// the kernel (pinned host memory), or nothing said (`GpuComm`).
    type Ran;

    /// Sums `count` elements of `dtype` from `input` over all ranks into
    /// `output` (in place when they are equal), on `stream`, asynchronously,
    /// launched as `how` says. Works inside stream capture. Call the
    /// communicator's `check` after synchronizing to learn whether a peer
    /// failed to arrive.
    ///
    /// `Launch::Overlapped` (programmatic dependent launch, sm_90+) lets the
    /// kernel start while the previous kernel on the stream (typically the
    /// GEMM that produced `input`) drains; it waits for that kernel inside
    /// before reading anything, so results are the same and the launch
    /// latency is hidden. Older GPUs get an ordinary launch.
    ///
    /// # Safety
    /// `input` and `output` must be device memory of the communicator's
    /// device (or mapped into it), 16-byte aligned, holding at least `count`
    /// elements, and stay valid until the stream has run the call; `stream`
    /// must belong to that device's primary context (or be null).
    #[allow(clippy::too_many_arguments)]
    unsafe fn all_reduce_launched(
        &self,
        input: CUdeviceptr,
        output: CUdeviceptr,
        count: usize,
        dtype: DType,
        op: ReduceOp,
        algo: Algo,
        stream: CUstream,
        how: Launch,
    ) -> Result<Self::Ran>;

    /// [`all_reduce_launched`](Self::all_reduce_launched) with an ordinary launch.
    ///
    /// # Safety
    /// As [`all_reduce_launched`](Self::all_reduce_launched).
    #[allow(clippy::too_many_arguments)]
    unsafe fn all_reduce(
        &self,
        input: CUdeviceptr,
        output: CUdeviceptr,
        count: usize,
        dtype: DType,
        op: ReduceOp,
        algo: Algo,
        stream: CUstream,
    ) -> Result<Self::Ran> {
        // SAFETY: the caller's contract is passed on unchanged.
        unsafe {
            self.all_reduce_launched(
                input,
                output,
                count,
                dtype,
                op,
                algo,
                stream,
                Launch::Ordinary,
            )
        }
    }
}

/// A transport's all-reduce with the arguments one by one: the [`Call`]
/// they make, run by [`GpuTransport::all_reduce`].
impl<T: GpuTransport> StreamAllReduce for T {
    type Ran = T::Ran;

    unsafe fn all_reduce_launched(
        &self,
        input: CUdeviceptr,
        output: CUdeviceptr,
        count: usize,
        dtype: DType,
        op: ReduceOp,
        algo: Algo,
        stream: CUstream,
        how: Launch,
    ) -> Result<T::Ran> {
        let call = Call {
            input,
            output,
            count,
            dtype,
            op,
            algo,
            root: 0,
            stream,
            launch: how,
        };
        // SAFETY: the caller's contract is the trait's.
        unsafe { GpuTransport::all_reduce(self, &call) }
    }
}
