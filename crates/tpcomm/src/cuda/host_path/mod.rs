//! All-reduce between GPUs that cannot reach each other peer-to-peer: every
//! rank's contribution goes through its own pinned host area, which every GPU
//! maps (cuMemHostAlloc for ranks that are threads, a POSIX shared-memory
//! segment registered with cuMemHostRegister for ranks that are processes).
//!
//! Four kernels (kernels/host_allreduce.cu): push (plain data into the
//! peers' sentinel-filled slots) or LL words (data beside the epoch) for
//! small messages, lines (a flag per 512 bytes) for middle sizes, chunks
//! with per-chunk flags, produced and consumed by separate blocks, for large
//! ones; `choice` says which runs a call. [`GpuComm`] picks this path or the
//! P2P one ([`Transport`]).

mod choice;
mod comm;
mod kernels;
pub mod layout;
mod pinned;
mod select;

pub use super::compile::HOST_ALLREDUCE_SRC;
pub use choice::{HostAlgo, KernelChoice, LINES_MAX};
pub use comm::HostGpuCommunicator;
pub use select::{GpuComm, Transport};
