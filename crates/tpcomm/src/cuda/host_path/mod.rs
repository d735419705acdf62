//! All-reduce between GPUs that cannot reach each other peer-to-peer: every
//! rank's contribution goes through its own pinned host area, which every GPU
//! maps (cuMemHostAlloc for ranks that are threads, a POSIX shared-memory
//! segment registered with cuMemHostRegister for ranks that are processes).
//!
//! Three kernels (kernels/host_allreduce.cu): push (plain data into the
//! peers' sentinel-filled slots) for small messages, or LL words (data beside
//! the epoch) with TPCOMM_HOST_SMALL=ll; chunks with per-chunk flags,
//! produced and consumed by separate blocks, for large ones. [`GpuComm`]
//! picks this path or the P2P one ([`Transport`]).

mod comm;
mod kernels;
pub mod layout;
mod pinned;
mod select;

pub use super::compile::HOST_ALLREDUCE_SRC;
pub use comm::{HostAlgo, HostGpuCommunicator};
pub use select::{GpuComm, Transport};
