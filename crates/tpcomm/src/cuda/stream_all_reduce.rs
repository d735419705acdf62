//! The all-reduce of a [`Call`] on a stream, as callers of the communicator
//! write it: implemented by [`Communicator`](super::Communicator), and by
//! every [`GpuTransport`].

use super::call::{Call, GpuTransport};
use crate::error::Result;

/// An all-reduce enqueued on a caller's CUDA stream.
pub trait StreamAllReduce {
    /// What the call ran: the route (`Communicator`), the algorithm (P2P),
    /// the kernel (pinned host memory), or nothing said (`GpuComm`).
    type Ran;

    /// Reduces (`call.op`, where the communicator has it) `call.count`
    /// elements of `call.dtype` from `call.input` over all ranks into
    /// `call.output` (in place when they are equal), on `call.stream`,
    /// asynchronously, with `call.algo`, launched as `call.launch` says.
    /// Works inside stream capture. Call the communicator's `check` after
    /// synchronizing to learn whether a peer failed to arrive.
    ///
    /// `Launch::Overlapped` (programmatic dependent launch, sm_90+) lets the
    /// kernel start while the previous kernel on the stream (typically the
    /// GEMM that produced `input`) drains; it waits for that kernel inside
    /// before reading anything, so results are the same and the launch
    /// latency is hidden. Older GPUs get an ordinary launch.
    ///
    /// # Safety
    /// `call.input` and `call.output` must be device memory of the
    /// communicator's device (or mapped into it), 16-byte aligned, holding at
    /// least `call.count` elements, and stay valid until the stream has run
    /// the call; `call.stream` must belong to that device's primary context
    /// (or be null).
    unsafe fn all_reduce_call(&self, call: &Call) -> Result<Self::Ran>;
}

/// A transport's all-reduce: [`GpuTransport::all_reduce`].
impl<T: GpuTransport> StreamAllReduce for T {
    type Ran = T::Ran;

    unsafe fn all_reduce_call(&self, call: &Call) -> Result<T::Ran> {
        // SAFETY: the caller's contract is the trait's.
        unsafe { GpuTransport::all_reduce(self, call) }
    }
}
