//! Planners for tensor-parallel inference, with no GPU code: how much memory
//! is left for the KV cache ([`memory`]), and whether speculative decoding
//! pays off on a given box ([`spec`]). Models, GPUs, machines and drafts come
//! from the TOML catalog under `catalog/` ([`catalog`]) or a Hugging Face
//! `config.json` ([`hf`]); all-reduce latencies from `tpcomm bench --json`
//! files or the catalog ([`latency`]).
#![forbid(unsafe_code)]

pub mod arch;
pub mod catalog;
mod ck;
pub mod error;
mod fields;
pub mod hf;
pub mod kernels;
pub mod latency;
pub mod memory;
pub mod plot;
pub mod spec;

pub use error::{PlanError, Result};
