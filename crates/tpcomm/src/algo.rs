//! Which all-reduce algorithm a call uses.
//!
//! The enum is shared by every transport; a transport rejects variants it does
//! not implement with `Error::Unsupported`. GPU paths add variants here.

use crate::error::{Error, Result};
use std::fmt;
use std::str::FromStr;

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

impl fmt::Display for Algo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Algo {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().replace('_', "-").as_str() {
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
