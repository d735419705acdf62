//! tpcomm: all-reduce for tensor-parallel inference on one machine.
//!
//! Layers (see DESIGN.md at the repository root of the project): basic types
//! ([`units`], [`dtype`], [`error`]), transports, algorithms, the communicator.

pub mod cuda;
pub mod dtype;
pub mod error;
pub mod nccl;
pub mod select;
pub mod topology;
pub mod units;

pub use dtype::{DType, Element, ReduceOp};
pub use error::{Error, Result};
pub use units::ByteSize;
