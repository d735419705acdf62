//! tpcomm: all-reduce for tensor-parallel inference on one machine.
//!
//! Layers (docs/architecture.md): basic types ([`units`], [`error`],
//! [`dtype`], [`algo`], [`wire`], [`env`]), transports, algorithms, the
//! communicator.
//!
//! `unsafe` is confined to the modules docs/architecture.md lists ("Where
//! `unsafe` lives"); every block says why it is sound, an unsafe function's
//! body marks its unsafe operations one by one, and the modules marked
//! `forbid(unsafe_code)` below (and in `cpu`, `cuda`, `meet`, `topology`) hold none.

#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

/// `Display` as the type's `name()` (the spelling its `FromStr` takes).
macro_rules! display_by_name {
    ($($t:ty),+) => {$(
        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }
    )+};
}

#[forbid(unsafe_code)]
pub mod algo;
pub mod cpu;
pub mod cuda;
#[forbid(unsafe_code)]
pub mod dtype;
#[forbid(unsafe_code)]
pub mod env;
#[forbid(unsafe_code)]
pub mod error;
#[forbid(unsafe_code)]
pub mod hash;
pub mod meet;
#[forbid(unsafe_code)]
pub mod memory;
pub mod nccl;
#[forbid(unsafe_code)]
pub mod plan_layout;
#[forbid(unsafe_code)]
pub mod quant;
#[forbid(unsafe_code)]
pub mod report;
pub mod select;
pub(crate) mod sys;
#[forbid(unsafe_code)]
pub mod topology;
#[forbid(unsafe_code)]
pub mod transport;
#[forbid(unsafe_code)]
pub mod units;
#[forbid(unsafe_code)]
pub mod verify;
pub mod wire;

pub use algo::Algo;
pub use cpu::{HostCommunicator, HostConfig};
pub use dtype::{DType, Element, ReduceOp};
pub use error::{Error, Result};
pub use meet::JobKey;
pub use memory::{GpuAllocations, MemoryLine, MemoryReport, Place};
pub use units::ByteSize;
