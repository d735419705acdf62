//! What links the GPUs of this machine, as a small model.
//!
//! The model ([`Topology`]) is plain data: it can be probed on a machine with
//! GPUs ([`probe()`]), or written by hand / saved from `tpcomm probe --json`
//! and loaded from a TOML or JSON file ([`Topology::from_path`]), so planners
//! and tests work without GPUs. What a topology *means* (link class per pair,
//! machine class, fingerprint) is computed by the pure functions of
//! [`classify`], the same whether the facts came from a probe or a file.

#[forbid(unsafe_code)]
pub mod classify;
#[forbid(unsafe_code)]
pub mod format;
#[forbid(unsafe_code)]
mod model;
#[forbid(unsafe_code)]
mod probe;
#[forbid(unsafe_code)]
mod sysfs;

pub use model::{
    ComputeCapability, DriverInfo, Gpu, LinkClass, MachineClass, P2pCaps, Pair, PcieLink, PciePath,
    PeerCopy, Topology,
};
pub use probe::{probe, ProbeOptions};

use crate::error::{Error, Result};
use std::path::Path;

impl Topology {
    /// Builds a topology from facts, checking it and computing what derives
    /// from them.
    pub fn new(driver: DriverInfo, gpus: Vec<Gpu>, pairs: Vec<Pair>) -> Result<Topology> {
        let mut t = Topology {
            machine_class: MachineClass::SingleGpu,
            fingerprint: String::new(),
            fingerprint_input: String::new(),
            driver,
            gpus,
            pairs,
            copies: Vec::new(),
            warnings: Vec::new(),
        };
        t.finish()?;
        Ok(t)
    }

    /// Checks the GPUs and pairs are consistent (indices 0..n in order, one
    /// pair for every two GPUs) and recomputes the derived fields.
    pub fn finish(&mut self) -> Result<()> {
        classify::validate(&self.gpus, &mut self.pairs)?;
        self.machine_class = classify::machine_class(self.gpus.len(), &self.pairs);
        let (input, hash) = classify::fingerprint(self);
        self.fingerprint_input = input;
        self.fingerprint = hash;
        Ok(())
    }

    /// The pair of GPUs `i` and `j`, in either order.
    pub fn pair(&self, i: usize, j: usize) -> Option<&Pair> {
        let (a, b) = if i < j { (i, j) } else { (j, i) };
        self.pairs.iter().find(|p| p.a == a && p.b == b)
    }

    /// Loads a topology written as JSON (`.json`) or TOML (anything else).
    pub fn from_path(path: &Path) -> Result<Topology> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::io(format!("reading topology file {}", path.display()), e))?;
        let is_json = path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("json"));
        let what = format!("topology file {}", path.display());
        if is_json {
            Topology::from_json(&text).map_err(|e| retitle(e, &what))
        } else {
            Topology::from_toml(&text).map_err(|e| retitle(e, &what))
        }
    }

    pub fn from_json(text: &str) -> Result<Topology> {
        let mut t: Topology = serde_json::from_str(text)
            .map_err(|e| Error::invalid("topology JSON", e.to_string()))?;
        t.finish()?;
        Ok(t)
    }

    pub fn from_toml(text: &str) -> Result<Topology> {
        let mut t: Topology =
            toml::from_str(text).map_err(|e| Error::invalid("topology TOML", e.to_string()))?;
        t.finish()?;
        Ok(t)
    }

    pub fn to_json(&self) -> String {
        // Plain data with string keys: serialisation cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_default()
    }
}

fn retitle(e: Error, what: &str) -> Error {
    match e {
        Error::InvalidArgument { detail, .. } => Error::invalid(what, detail),
        other => other,
    }
}

#[cfg(test)]
mod tests;
