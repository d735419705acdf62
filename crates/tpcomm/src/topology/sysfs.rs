//! What Linux's /sys tells about a PCI device. Every read is optional: a
//! container or virtual machine may hide any of it.

use super::classify::pcie_gen_from_speed;
use super::model::PcieLink;
use std::path::PathBuf;

fn dir(bus_id: &str) -> PathBuf {
    PathBuf::from("/sys/bus/pci/devices").join(bus_id)
}

fn read(bus_id: &str, file: &str) -> Option<String> {
    std::fs::read_to_string(dir(bus_id).join(file))
        .ok()
        .map(|s| s.trim().to_owned())
}

/// The device's real path, e.g.
/// "/sys/devices/pci0000:17/0000:17:01.0/0000:18:00.0".
pub(super) fn device_path(bus_id: &str) -> Option<String> {
    std::fs::canonicalize(dir(bus_id))
        .ok()
        .map(|p| p.to_string_lossy().into_owned())
}

/// The NUMA node, when the platform reports one (-1 means none).
pub(super) fn numa_node(bus_id: &str) -> Option<u32> {
    read(bus_id, "numa_node")?
        .parse::<i64>()
        .ok()?
        .try_into()
        .ok()
}

/// The PCIe link from `{current,max}_link_{speed,width}`.
pub(super) fn pcie_link(bus_id: &str) -> Option<PcieLink> {
    Some(PcieLink {
        current_gen: pcie_gen_from_speed(&read(bus_id, "current_link_speed")?)?,
        current_width: read(bus_id, "current_link_width")?.parse().ok()?,
        max_gen: pcie_gen_from_speed(&read(bus_id, "max_link_speed")?)?,
        max_width: read(bus_id, "max_link_width")?.parse().ok()?,
    })
}
