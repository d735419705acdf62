//! The CUDA transport and its all-reduce kernels: receive buffers that peer
//! GPUs write into directly, kernels compiled by NVRTC at run time.
//!
//! `raw` holds every unsafe CUDA call; the rest is safe code on top of it.

mod comm;
pub mod compile;
pub mod forward;
pub mod fused;
mod memory;
mod pdl;
mod raw;
mod rendezvous;
pub mod verify;

pub use comm::{auto_oneshot_max, open_context, Algo, CudaCommunicator, CudaConfig, MAX_WORLD};
/// The cudarc this crate is built with, so callers use the same types.
pub use cudarc;
pub use memory::{MemoryItem, MemoryReport};
pub use raw::{
    driver_version, ensure_driver, ensure_nvrtc, mem_get_info, nvrtc_version, CUdeviceptr, CUstream,
};
pub use rendezvous::{Rendezvous, ThreadGroup};
