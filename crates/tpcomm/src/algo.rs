//! Which all-reduce algorithm a call uses, and which other collective.
//!
//! The enum is shared by every transport (CPU shared memory, CUDA P2P, GPUs
//! through pinned host memory); each resolves `Auto` by its own rule
//! (`HostCommunicator::auto_algo`, `select::resolve_by_size`, the tuning
//! tables of `select`) and rejects variants it does not implement with
//! `Error::Unsupported`. Names are what bench rows, tuning tables and JSON
//! hold, so they must not change.

use crate::error::{Error, Result};
use std::str::FromStr;

/// Which collective other than the all-reduce a call runs (GPU transports:
/// `cuda::collectives`, `cuda::transport::pinned::collectives`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Collective {
    AllGather,
    ReduceScatter,
    Broadcast { root: usize },
}

impl Collective {
    pub fn name(self) -> &'static str {
        match self {
            Collective::AllGather => "all-gather",
            Collective::ReduceScatter => "reduce-scatter",
            Collective::Broadcast { .. } => "broadcast",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Algo {
    /// Let the transport pick by message size (see each transport's rule).
    Auto,
    /// Every rank publishes its whole input and reduces all of it.
    OneShot,
    /// Reduce-scatter (each rank reduces one shard) then all-gather.
    TwoShot,
}

impl Algo {
    /// The concrete algorithms, in the order benchmarks list them.
    pub const CONCRETE: [Algo; 2] = [Algo::OneShot, Algo::TwoShot];

    pub const fn name(self) -> &'static str {
        match self {
            Algo::Auto => "auto",
            Algo::OneShot => "one-shot",
            Algo::TwoShot => "two-shot",
        }
    }

    /// A small stable code, published in call descriptors.
    pub(crate) const fn code(self) -> u64 {
        match self {
            Algo::Auto => 0,
            Algo::OneShot => 1,
            Algo::TwoShot => 2,
        }
    }
}

display_by_name!(Algo);

impl FromStr for Algo {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        // Exact spellings only: callers compare names as strings too (the
        // GPU bench treats "auto" apart), so a folded spelling would parse
        // here yet miss there.
        match s {
            "auto" => Ok(Algo::Auto),
            "one-shot" | "oneshot" => Ok(Algo::OneShot),
            "two-shot" | "twoshot" => Ok(Algo::TwoShot),
            other => Err(Error::invalid(
                "algorithm",
                format!("{other:?} is not one of auto, one-shot, two-shot"),
            )),
        }
    }
}

#[cfg(test)]
mod tests;
