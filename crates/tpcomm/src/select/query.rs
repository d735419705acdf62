//! What selection is asked and what it answers: the candidates (a tpcomm
//! algorithm on a transport, or NCCL), the query (world, type, bytes, eager
//! or graph) and the decision with its reason.

use crate::algo::Algo;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::transport::Transport;
use std::fmt;

/// One thing selection can pick: a tpcomm algorithm on a transport, or NCCL.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Candidate {
    pub transport: Transport,
    /// `None` for NCCL (it picks its own algorithm); never `Algo::Auto`.
    pub algo: Option<Algo>,
}

impl Candidate {
    pub const NCCL: Candidate = Candidate {
        transport: Transport::Nccl,
        algo: None,
    };
    pub const fn cuda(algo: Algo) -> Candidate {
        Candidate {
            transport: Transport::Cuda,
            algo: Some(algo),
        }
    }
    pub const fn host(algo: Algo) -> Candidate {
        Candidate {
            transport: Transport::Host,
            algo: Some(algo),
        }
    }
}

impl Candidate {
    fn key(&self) -> (Transport, &'static str) {
        (self.transport, self.algo.map_or("", Algo::name))
    }
}

impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Candidate {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.key().cmp(&other.key())
    }
}

impl fmt::Display for Candidate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.algo {
            Some(a) => write!(f, "{}:{}", self.transport.name(), a.name()),
            None => f.write_str(self.transport.name()),
        }
    }
}

impl std::str::FromStr for Candidate {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        let bad = || {
            Error::invalid(
                "candidate",
                format!("{s:?} (expected nccl, cuda:one-shot, cuda:two-shot, host:one-shot or host:two-shot)"),
            )
        };
        if s == "nccl" {
            return Ok(Candidate::NCCL);
        }
        let (t, a) = s.split_once(':').ok_or_else(bad)?;
        let transport = match t {
            "cuda" => Transport::Cuda,
            "host" => Transport::Host,
            _ => return Err(bad()),
        };
        let algo: Algo = a.parse().map_err(|_| bad())?;
        if algo == Algo::Auto {
            return Err(bad());
        }
        Ok(Candidate {
            transport,
            algo: Some(algo),
        })
    }
}

/// Eager launches or replay inside a CUDA graph: launch overhead differs, so
/// the best choice can too.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Eager,
    Graph,
}

impl Mode {
    pub const fn name(self) -> &'static str {
        match self {
            Mode::Eager => "eager",
            Mode::Graph => "graph",
        }
    }
}

impl std::str::FromStr for Mode {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "eager" => Ok(Mode::Eager),
            "graph" => Ok(Mode::Graph),
            o => Err(Error::invalid(
                "mode",
                format!("{o:?} (expected eager or graph)"),
            )),
        }
    }
}

/// What is being all-reduced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Query {
    pub world: usize,
    pub dtype: DType,
    pub bytes: u64,
    pub mode: Mode,
}

/// The answer: what runs, why, and what the others would have cost.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub choice: Candidate,
    /// The table row(s) or rule behind the choice, in words.
    pub why: String,
    /// Estimated time per call (us) of every candidate the table has for this
    /// query, fastest first; empty when a rule decided.
    pub estimates: Vec<(Candidate, f64)>,
}
