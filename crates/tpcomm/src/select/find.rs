//! Finding this machine's tuning table: an explicit path, then the
//! environment variable, then the default location; else the class defaults.
//! A table measured on another machine is refused, never silently used.

use super::selector::Selector;
use super::table::Table;
use crate::error::{Error, Result};
use crate::topology::MachineClass;
use crate::transport::Transport;
use std::path::{Path, PathBuf};

/// Environment variable naming a tuning table file (`env::TUNING_TABLE`).
pub const ENV_TABLE: &str = "TPCOMM_TUNING_TABLE";

/// Where the table came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TableSource {
    Explicit(PathBuf),
    Env(PathBuf),
    DefaultLocation(PathBuf),
    ClassDefaults,
}

/// `$XDG_CONFIG_HOME/tpcomm/tuning/<fingerprint>.toml`, or under
/// `$HOME/.config` when XDG_CONFIG_HOME is unset; `None` with neither.
pub fn default_table_path(fingerprint: &str) -> Option<PathBuf> {
    default_path_in(
        crate::env::XDG_CONFIG_HOME.checked_value(),
        crate::env::HOME.checked_value(),
        fingerprint,
    )
}

fn default_path_in(
    xdg: Option<PathBuf>,
    home: Option<PathBuf>,
    fingerprint: &str,
) -> Option<PathBuf> {
    let base = xdg
        .filter(|p| p.is_absolute())
        .or_else(|| home.map(|h| h.join(".config")))?;
    Some(
        base.join("tpcomm")
            .join("tuning")
            .join(format!("{fingerprint}.toml")),
    )
}

/// The machine a table must match.
#[derive(Clone, Debug)]
pub struct Machine {
    pub fingerprint: String,
    pub class: MachineClass,
    /// CUDA driver version ("13.0") and NCCL version in use, where known.
    pub driver: Option<String>,
    pub nccl: Option<String>,
}

/// Loads the table at `path` for `machine`: refused when it was measured on
/// another machine; a different driver or NCCL version is a note (the choice
/// may be stale), not a refusal.
pub fn load_for(path: &Path, machine: &Machine) -> Result<Selector> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::io(format!("read tuning table {}", path.display()), e))?;
    let table = Table::parse(&text, &path.display().to_string())?;
    check_machine(&table, &path.display().to_string(), machine)?;
    let mut sel = Selector::with_table(table.clone(), path.display().to_string());
    if let Some(d) = &machine.driver {
        if d != &table.driver {
            sel = sel.note(format!(
                "the table was measured with CUDA driver {}, this machine runs {d}; run `tpcomm tune` again",
                table.driver
            ));
        }
    }
    if let (Some(n), Some(tn)) = (&machine.nccl, &table.nccl) {
        if n != tn {
            sel = sel.note(format!(
                "the table was measured with NCCL {tn}, this process loads {n}; run `tpcomm tune` again"
            ));
        }
    }
    Ok(sel)
}

/// Refuses a table measured on another machine.
pub fn check_machine(table: &Table, origin: &str, machine: &Machine) -> Result<()> {
    match &table.fingerprint {
        Some(fp) if fp == &machine.fingerprint => Ok(()),
        Some(fp) => Err(Error::invalid(
            format!("tuning table {origin}"),
            format!(
                "it was measured on another machine (fingerprint {fp}, class {}, {} x {}); this machine is {} (class {}). Run `tpcomm tune` on this machine, or point {ENV_TABLE} / --table at a table made here",
                table.machine_class, table.world, table.gpu, machine.fingerprint, machine.class
            ),
        )),
        None => Err(Error::invalid(
            format!("tuning table {origin}"),
            "it has no machine fingerprint (a class default table); run `tpcomm tune` to make one for this machine",
        )),
    }
}

/// The selector for `machine`: `explicit` (a `--table` or config field) first,
/// then `$TPCOMM_TUNING_TABLE`, then the default location if that file exists;
/// otherwise the class defaults. An explicit or environment table that cannot
/// be used is an error (the user asked for it); so is a broken file at the
/// default location.
pub fn find_table(explicit: Option<&Path>, machine: &Machine) -> Result<(Selector, TableSource)> {
    find_with(
        explicit,
        crate::env::TUNING_TABLE.checked_value(),
        default_table_path(&machine.fingerprint),
        machine,
    )
}

pub(super) fn find_with(
    explicit: Option<&Path>,
    env: Option<PathBuf>,
    default: Option<PathBuf>,
    machine: &Machine,
) -> Result<(Selector, TableSource)> {
    if let Some(p) = explicit {
        return Ok((
            load_for(p, machine)?,
            TableSource::Explicit(p.to_path_buf()),
        ));
    }
    if let Some(p) = env.filter(|p| !p.as_os_str().is_empty()) {
        return load_for(&p, machine)
            .map_err(|e| Error::invalid(ENV_TABLE, e.to_string()))
            .map(|s| (s, TableSource::Env(p)));
    }
    if let Some(p) = default.filter(|p| p.is_file()) {
        return Ok((load_for(&p, machine)?, TableSource::DefaultLocation(p)));
    }
    Ok((
        Selector::for_class(machine.class),
        TableSource::ClassDefaults,
    ))
}

/// This machine as tuning tables are keyed (class, fingerprint, driver):
/// probed without the timed peer copies, so it takes well under a second.
pub fn this_machine(nccl: Option<String>) -> Result<(Machine, crate::topology::Topology)> {
    let topo = crate::topology::probe(&crate::topology::ProbeOptions {
        copy_test: false,
        ..crate::topology::ProbeOptions::default()
    })?;
    let driver = crate::sys::cuda::driver_version()
        .ok()
        .map(|(a, b)| format!("{a}.{b}"));
    Ok((
        Machine {
            fingerprint: topo.fingerprint.clone(),
            class: topo.machine_class,
            driver,
            nccl,
        },
        topo,
    ))
}

/// The selector a communicator decides with when it was given none: this
/// machine's table ([`find_table`]: `$TPCOMM_TUNING_TABLE`, then the default
/// location for its fingerprint), else its class's built-in defaults. The
/// probe is made once per process. When it fails, or when this process sees
/// one GPU only (its fingerprint is then not the machine's), the defaults of
/// the class the transport implies (pcie-nop2p for `Host`, nvlink for
/// `Cuda`, as before tables existed) decide, with a note saying so; a table
/// named by `$TPCOMM_TUNING_TABLE` then cannot be checked and is an error.
pub fn for_this_machine(transport: Transport) -> Result<Selector> {
    static MACHINE: std::sync::OnceLock<std::result::Result<Machine, String>> =
        std::sync::OnceLock::new();
    let machine =
        MACHINE.get_or_init(|| this_machine(None).map(|m| m.0).map_err(|e| e.to_string()));
    match machine {
        Ok(m) => for_probed(m, transport),
        Err(e) => for_machine(Err(e), env_table(), None, transport),
    }
}

/// [`for_this_machine`] for a machine already probed (`tpcomm explain`
/// probes for the topology too).
pub fn for_probed(machine: &Machine, transport: Transport) -> Result<Selector> {
    let default = default_table_path(&machine.fingerprint);
    for_machine(Ok(machine), env_table(), default, transport)
}

fn env_table() -> Option<PathBuf> {
    crate::env::TUNING_TABLE
        .checked_value()
        .filter(|p| !p.as_os_str().is_empty())
}

/// [`for_this_machine`] past the probe and the environment (tested without a GPU).
pub(super) fn for_machine(
    machine: std::result::Result<&Machine, &str>,
    env: Option<PathBuf>,
    default: Option<PathBuf>,
    transport: Transport,
) -> Result<Selector> {
    let unusable = match machine {
        // A group of GPUs, but this process sees one (CUDA_VISIBLE_DEVICES
        // narrowed per rank, or ranks sharing one GPU): a table made for
        // that view is used; without one, the single-GPU rule (NCCL for
        // every call) is not this group's, the transport's class is.
        Ok(m) if m.class == MachineClass::SingleGpu => {
            match find_with(None, env.clone(), default, m)? {
                (_, TableSource::ClassDefaults) => format!(
                    "this process sees one GPU (fingerprint {}) and has no table for it",
                    m.fingerprint
                ),
                (sel, _) => return Ok(sel),
            }
        }
        Ok(m) => return Ok(find_with(None, env, default, m)?.0),
        Err(e) => format!("this machine could not be probed ({e})"),
    };
    if let Some(p) = env {
        return Err(Error::invalid(
            ENV_TABLE,
            format!(
                "{} cannot be checked against this machine: {unusable}; or unset {ENV_TABLE}",
                p.display()
            ),
        ));
    }
    let class = match transport {
        Transport::Host => MachineClass::PcieNop2p,
        _ => MachineClass::Nvlink,
    };
    Ok(Selector::for_class(class).note(format!(
        "{unusable}; no table was looked up, the {class} defaults decide"
    )))
}

#[cfg(test)]
pub(super) fn default_path_for_test(
    xdg: Option<PathBuf>,
    home: Option<PathBuf>,
    fp: &str,
) -> Option<PathBuf> {
    default_path_in(xdg, home, fp)
}

#[cfg(test)]
mod machine_tests;
