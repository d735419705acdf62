//! Selection for one machine: its class's defaults (the committed table or
//! the stated rules), or a tuning table measured on it.

use super::defaults::{builtin_table, class_rule};
use super::query::{Candidate, Decision, Mode, Query};
use super::table::Table;
use crate::dtype::DType;
use crate::topology::MachineClass;
use crate::transport::Transport;

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
