//! Selection: which transport and algorithm runs an all-reduce.
//!
//! A pure function of (machine class, world size, element type, bytes, eager
//! or graph), answered from a tuning table written by `tpcomm tune` when this
//! machine has one, from a committed default table for its class when that
//! class was measured, and from stated rules otherwise. Every answer carries
//! the reason (`why`) and the estimated times of the alternatives, so
//! `tpcomm explain` can show them.
//!
//! The selector knows nothing of how a transport moves bytes; transports and
//! algorithms know nothing of selection (as in NCCL, tuning lives apart).

#[forbid(unsafe_code)]
mod defaults;
#[forbid(unsafe_code)]
mod find;
#[forbid(unsafe_code)]
mod route;
#[cfg(test)]
mod route_tests;
#[forbid(unsafe_code)]
mod size_rule;
#[forbid(unsafe_code)]
mod table;
#[cfg(test)]
mod tests;

pub use defaults::{builtin_table, class_rule, BUILTIN_NVLINK_TOML};
pub use find::{
    check_machine, default_table_path, find_table, for_probed, for_this_machine, load_for,
    this_machine, Machine, TableSource, ENV_TABLE,
};
pub use route::{
    agree, class_edge, class_floor, decide, size_class, transport_of, transport_of_class, Group,
    NcclReason, Route, RouteTable,
};
pub use size_rule::{auto_oneshot_max, resolve_by_size};
pub use table::{Measured, Row, Table, FORMAT};

use crate::algo::Algo;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::topology::MachineClass;
use crate::units::ByteSize;
use std::fmt;

/// Where the bytes of a collective live and how peers see them: the crate's
/// one transport type (`crate::transport`).
pub use crate::transport::Transport;

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

/// Selection for one machine: its class, and its tuning table if any.
#[derive(Clone, Debug)]
pub struct Selector {
    class: MachineClass,
    table: Option<Table>,
    source: String,
    notes: Vec<String>,
}

impl Selector {
    /// The defaults of a machine class: the committed table where the class
    /// was measured, rules otherwise.
    pub fn for_class(class: MachineClass) -> Selector {
        let (table, source) = match builtin_table(class) {
            Some((t, name)) => (Some(t), format!("built-in default table {name}")),
            None => (None, format!("built-in rules for class {class}")),
        };
        Selector {
            class,
            table,
            source,
            notes: Vec::new(),
        }
    }

    /// A table measured on this machine (already checked against it).
    pub fn with_table(table: Table, source: impl Into<String>) -> Selector {
        Selector {
            class: table.machine_class,
            table: Some(table),
            source: source.into(),
            notes: Vec::new(),
        }
    }

    /// Adds a remark that `explain` prints (stale driver, other NCCL, ...).
    pub fn note(mut self, note: impl Into<String>) -> Selector {
        self.notes.push(note.into());
        self
    }

    pub fn class(&self) -> MachineClass {
        self.class
    }
    pub fn table(&self) -> Option<&Table> {
        self.table.as_ref()
    }
    pub fn source(&self) -> &str {
        &self.source
    }
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// The best of every candidate.
    pub fn choose(&self, q: &Query) -> Decision {
        self.choose_among(q, &|_| true)
    }

    /// The best candidate that `allowed` accepts (a caller that has no NCCL,
    /// or only the CUDA transport, narrows the field).
    pub fn choose_among(&self, q: &Query, allowed: &dyn Fn(Candidate) -> bool) -> Decision {
        if let Some(t) = &self.table {
            match t.estimate(q, allowed) {
                Ok(mut d) => {
                    d.why = format!("{} ({})", d.why, self.source);
                    return d;
                }
                Err(gap) => {
                    let mut d = class_rule(self.class, q, allowed);
                    d.why = format!("{}; {gap}", d.why);
                    return d;
                }
            }
        }
        class_rule(self.class, q, allowed)
    }

    /// The best candidate for a communicator on `transport` (`Cuda` or
    /// `Host`): that transport's algorithms, and NCCL when `nccl` is loaded.
    ///
    /// On `Host` the table answers only where it has `host:*` rows for the
    /// query (its `nccl` rows alone were likely measured with P2P on, which a
    /// host-transport run does not have); otherwise the pcie-nop2p rules
    /// decide, whatever this machine's class, since they are the rules of
    /// GPUs that share data through host memory.
    pub fn choose_on(&self, q: &Query, transport: Transport, nccl: bool) -> Decision {
        let allowed =
            |c: Candidate| c.transport == transport || (nccl && c.transport == Transport::Nccl);
        if transport != Transport::Host {
            return self.choose_among(q, &allowed);
        }
        let gap = match &self.table {
            Some(t) => match t.estimate(q, &allowed) {
                Ok(mut d)
                    if d.estimates
                        .iter()
                        .any(|(c, _)| c.transport == Transport::Host) =>
                {
                    d.why = format!("{} ({})", d.why, self.source);
                    return d;
                }
                Ok(_) => "the table has no host:* rows for this query".to_string(),
                Err(gap) => gap,
            },
            None => format!("{} has no host:* rows", self.source),
        };
        let mut d = class_rule(MachineClass::PcieNop2p, q, &allowed);
        d.why = format!("{}; {gap}", d.why);
        d
    }
}

/// The pure selection function of the design: (class, world, type, bytes,
/// mode) -> choice, with the class's defaults.
pub fn select(class: MachineClass, world: usize, dtype: DType, bytes: u64, mode: Mode) -> Decision {
    Selector::for_class(class).choose(&Query {
        world,
        dtype,
        bytes,
        mode,
    })
}

/// Sizes `tpcomm tune` measures: powers of two from `min` to `max` and the
/// midpoints between them (1.5 x each power of two), all multiples of 16.
pub fn tune_sizes(min: ByteSize, max: ByteSize) -> Vec<u64> {
    let (min, max) = (min.bytes().max(16), max.bytes());
    let mut out = Vec::new();
    let mut p = min.next_power_of_two();
    if min < p && min <= max {
        out.push(min);
    }
    while p <= max {
        out.push(p);
        let mid = p + p / 2;
        if mid <= max && mid < 2 * p && mid.is_multiple_of(16) {
            out.push(mid);
        }
        p *= 2;
    }
    out
}
