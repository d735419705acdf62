//! The all-reduce every GPU communicator offers (`CudaCommunicator` over P2P,
//! `HostGpuCommunicator` through pinned host memory, and `GpuComm`, either),
//! as one trait, so callers can be generic over the transport.

use super::pdl::Launch;
use crate::algo::Algo;
use crate::dtype::{DType, ReduceOp};
use crate::error::Result;
use crate::sys::cuda::{CUdeviceptr, CUstream};

/// An all-reduce enqueued on a caller's CUDA stream.
pub trait StreamAllReduce {
    /// What the call ran: the algorithm (P2P), the kernel (host path), or
    /// nothing said (`GpuComm`).
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
