//! This machine as selection sees it (class, fingerprint, driver), and
//! machine classes by name: what `explain`, `tune` and the GPU bench share.

use tpcomm::select::Machine;
use tpcomm::topology::{self, MachineClass};
use tpcomm::{Error, Result};

/// A machine class from its name (as `--class` takes it).
pub(crate) fn parse_class(s: &str) -> Result<MachineClass> {
    MachineClass::ALL
        .into_iter()
        .find(|c| c.name() == s)
        .ok_or_else(|| {
            Error::invalid(
                "machine class",
                format!("{s:?} (expected nvlink, pcie-p2p, pcie-nop2p, mixed or single-gpu)"),
            )
        })
}

/// This machine as the tuning table key sees it: the library's probe, the
/// one communicators use (`tpcomm::select::this_machine`).
pub(crate) fn this_machine(nccl: Option<String>) -> Result<(Machine, topology::Topology)> {
    tpcomm::select::this_machine(nccl)
}
