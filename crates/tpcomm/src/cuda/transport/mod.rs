//! The two ways the GPU communicators move bytes between GPUs: `p2p`, where
//! GPUs write into each other's memory (NVLink or PCIe peer access), and
//! `pinned`, through pinned host memory that every GPU maps (for GPUs that
//! cannot reach each other peer-to-peer). `GpuComm` (gpu_comm.rs) picks one
//! for a group; the communicator (communicator.rs) composes it with routing
//! and NCCL.

#[forbid(unsafe_code)]
mod fields;
pub mod p2p;
pub mod pinned;
