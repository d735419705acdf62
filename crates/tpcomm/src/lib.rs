//! tpcomm: all-reduce for tensor-parallel inference on one machine.
//!
//! Layers (docs/architecture.md): basic types ([`units`], [`error`],
//! [`dtype`], [`algo`], [`wire`], [`env`]), transports, algorithms, the
//! communicator.

pub mod algo;
pub mod cuda;
pub mod dtype;
pub mod env;
pub mod error;
pub mod host;
pub mod memory;
pub mod nccl;
pub mod plan_layout;
pub mod quant;
pub mod report;
pub mod select;
pub mod topology;
pub mod transport;
pub mod units;
pub mod verify;
pub mod wire;

pub use algo::Algo;
pub use dtype::{DType, Element, ReduceOp};
pub use error::{Error, Result};
pub use host::{HostCommunicator, HostConfig, JobKey};
pub use memory::{GpuAllocations, MemoryLine, MemoryReport, Place};
pub use units::ByteSize;
