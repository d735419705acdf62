//! The bottom layer: every call into C, and nothing else. The CUDA driver
//! and NVRTC ([`cuda`]), NVML (`nvml`), NCCL (`nccl`) and the C library's
//! shared memory and process calls (`shm`), each behind safe functions and
//! owning types, or an `unsafe fn` whose contract is the caller's pointers.
//!
//! It imports nothing of the library above it except the basic types
//! ([`crate::error`], [`crate::env`]); the transports, the topology probe
//! and the NCCL wrapper import from here. The old public paths
//! (`tpcomm::cuda::{launch, DeviceAlloc, Module, Function, SavedContext,
//! Scratch, Staging, ...}`) re-export what lives here.

pub mod cuda;
pub(crate) mod nccl;
pub(crate) mod nvml;
pub(crate) mod shm;
