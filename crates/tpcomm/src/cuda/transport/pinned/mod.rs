//! All-reduce between GPUs that cannot reach each other peer-to-peer: every
//! rank's contribution goes through its own pinned host area, which every GPU
//! maps (cuMemHostAlloc for ranks that are threads, a POSIX shared-memory
//! segment registered with cuMemHostRegister for ranks that are processes).
//!
//! Two kernels (kernels/host_allreduce.cu): for messages up to 2 MiB delta
//! words (plain data written once into the own area, each element differing
//! from what was there before); chunks with per-chunk flags, produced and
//! consumed by separate blocks, for larger ones. [`GpuComm`](crate::cuda::GpuComm) picks this path
//! or the P2P one ([`Transport`](crate::transport::Transport)).

#[forbid(unsafe_code)]
mod algo;
pub mod collectives;
mod comm;
#[forbid(unsafe_code)]
mod group;
#[forbid(unsafe_code)]
mod kernels;
#[forbid(unsafe_code)]
pub mod layout;
#[forbid(unsafe_code)]
mod wait;

pub use crate::cuda::compile::HOST_ALLREDUCE_SRC;
pub use algo::{delta_shadow_bytes, HostAlgo};
pub use comm::PinnedTransport;
