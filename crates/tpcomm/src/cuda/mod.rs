//! The GPU communicators: the two transports (`transport`: P2P, where peer
//! GPUs write into each other's receive buffers, and pinned host memory),
//! their kernels compiled by NVRTC at run time, and the `Communicator` that
//! composes them with routing, the quantized wire and NCCL.
//!
//! `crate::sys::cuda`, the bottom layer, holds every CUDA driver and NVRTC
//! call (the only `cudarc` `sys` calls of the library), behind safe functions and owning types. Above it,
//! `unsafe` remains only where the API itself takes raw device pointers and
//! streams from the caller (`GpuTransport`'s methods on a `Call`,
//! `StreamAllReduce::all_reduce_call`, and the kernel launches behind them, the fused, quantized, collective and P2P-check
//! entry points): each block there says which caller contract makes it
//! sound. Modules marked `forbid(unsafe_code)` hold none. `loader`,
//! `compile` and the launch, module and allocation types of `sys::cuda`,
//! re-exported here, are public for kernel families outside the library (the benchmark
//! forward's, in crates/tpcomm-forward).

mod call;
mod call_word;
pub mod collectives;
pub mod communicator;
#[forbid(unsafe_code)]
pub mod compile;
#[forbid(unsafe_code)]
mod config;
#[forbid(unsafe_code)]
mod driver_error;
#[forbid(unsafe_code)]
pub mod fp8;
pub mod fused;
pub mod gathered;
mod gpu_comm;
#[forbid(unsafe_code)]
mod kernel_args;
mod kernels;
#[forbid(unsafe_code)]
pub mod launch_shape;
#[forbid(unsafe_code)]
pub(crate) mod layout;
#[forbid(unsafe_code)]
pub mod loader;
mod pdl;
pub mod quant;
#[forbid(unsafe_code)]
mod rendezvous;
pub mod self_tune;
#[forbid(unsafe_code)]
pub mod share;
mod stream_all_reduce;
pub mod transport;
#[forbid(unsafe_code)]
mod wait;

/// Kept so `tpcomm::cuda::Algo` still names the shared enum (the GPU bench's
/// rank loop imports it from here).
pub use crate::algo::Algo;
pub use crate::sys::cuda::scratch::{
    current_device, KeptContext, Rows, SavedContext, Scratch, Staging,
};
pub use crate::sys::cuda::{
    driver_version, ensure_driver, ensure_nvrtc, mem_get_info, mps_enabled,
    nvrtc::NVRTC_LIBRARY_ENV, nvrtc_path, nvrtc_version, stream_is_capturing, CUdeviceptr,
    CUstream,
};
/// What a kernel family outside the library launches with.
pub use crate::sys::cuda::{launch, DeviceAlloc, Function, Module};
pub use call::{Call, GpuTransport};
pub use call_word::Signature;
pub use collectives::{collective_route, Collective};
pub use communicator::{nccl_over_rendezvous, Communicator, NcclFallback, Route};
pub use config::CudaConfig;
/// The cudarc this crate is built with, so callers use the same types.
pub use cudarc;
pub use gpu_comm::{GpuComm, Transport};
pub use pdl::Launch;
pub use rendezvous::{
    post_first_record, post_record, read_record, Exchange, Rendezvous, ThreadGroup, Turn,
};
pub use stream_all_reduce::StreamAllReduce;
pub use transport::p2p::{open_context, P2pTransport};
pub use transport::pinned::{HostAlgo, PinnedTransport};
