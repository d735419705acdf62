//! Checking all-reduce results against a float64 reference, shared by the
//! tests, `tpcomm bench` (whose #wrong column comes from here) and the GPU
//! benches.
//!
//! Two ways in, one reference:
//! - typed slices of an [`Element`] ([`random_input`], [`Reference::new`],
//!   [`Reference::count_wrong`]): the CPU transport and its bench;
//! - raw little-endian bytes of a [`DType`] ([`Rng`], [`random_bytes`],
//!   [`element`], [`reference()`], [`count_wrong`], [`count_wrong_against`]):
//!   device buffers copied back from the GPU.
//!
//! Each keeps its own random stream (ranks, tests and benches rebuild inputs
//! from seeds, so a stream must never change) and its own bound for sums;
//! see [`SumBound`].

mod bytes;
mod reference;

pub use bytes::{count_wrong, count_wrong_against, element, random_bytes, reference, Rng};
pub use reference::{random_input, Reference, SumBound};
