//! Pure functions from facts to meaning: no GPU, driver or file system here,
//! so everything is tested on fixtures in CI.

use super::model::{Gpu, LinkClass, MachineClass, P2pCaps, Pair, PciePath, Topology};
use crate::error::{Error, Result};
use std::collections::BTreeSet;

/// A PCI bus id in one spelling: "dddd:bb:dd.f", lower case. NVML writes
/// the domain with 8 digits ("00000000:18:00.0"), CUDA and sysfs with 4.
pub fn normalize_bus_id(id: &str) -> Option<String> {
    let id = id.trim().trim_end_matches('\0').to_ascii_lowercase();
    let mut parts = id.splitn(3, ':');
    let (domain, bus, rest) = (parts.next()?, parts.next()?, parts.next()?);
    let (dev, func) = rest.split_once('.')?;
    let domain = u32::from_str_radix(domain, 16).ok()?;
    let bus = u8::from_str_radix(bus, 16).ok()?;
    let dev = u8::from_str_radix(dev, 16).ok()?;
    let func = u8::from_str_radix(func, 16).ok()?;
    Some(format!("{domain:04x}:{bus:02x}:{dev:02x}.{func:x}"))
}

/// The chain of a device's sysfs path under `/sys/devices`: the host bridge
/// ("pci0000:17") and then each PCI function down to the device itself.
fn pci_chain(sysfs_path: &str) -> Option<(String, Vec<String>)> {
    let rest = sysfs_path.trim().trim_start_matches("/sys/devices/");
    let mut parts = rest.split('/').filter(|s| !s.is_empty());
    let root = parts.next()?;
    if !root.starts_with("pci") {
        return None;
    }
    let chain: Vec<String> = parts
        .filter(|p| normalize_bus_id(p).is_some())
        .map(str::to_owned)
        .collect();
    if chain.is_empty() {
        return None;
    }
    Some((root.to_owned(), chain))
}

/// Where two GPUs' PCIe paths meet, from their sysfs paths (the targets of
/// `/sys/bus/pci/devices/<bus id>`) and NUMA nodes.
///
/// - Different host bridges: across sockets when the NUMA nodes are known
///   and differ, otherwise the root complex of one socket.
/// - Same host bridge and a shared bridge below it (a root port has a single
///   link, so two GPUs below the same one sit behind a switch): same switch.
/// - Same host bridge, nothing shared below it: host bridge.
pub fn pcie_path(
    path_a: &str,
    path_b: &str,
    numa_a: Option<u32>,
    numa_b: Option<u32>,
) -> Option<PciePath> {
    let (root_a, chain_a) = pci_chain(path_a)?;
    let (root_b, chain_b) = pci_chain(path_b)?;
    if root_a != root_b {
        return Some(match (numa_a, numa_b) {
            (Some(x), Some(y)) if x != y => PciePath::CrossSocket,
            _ => PciePath::HostBridge,
        });
    }
    // The bridges above each GPU: every element but the GPU itself.
    let above_a = &chain_a[..chain_a.len() - 1];
    let above_b = &chain_b[..chain_b.len() - 1];
    let shared = above_a
        .iter()
        .zip(above_b)
        .take_while(|(x, y)| x == y)
        .count();
    Some(if shared > 0 {
        PciePath::SameSwitch
    } else {
        PciePath::HostBridge
    })
}

/// NVML's `nvmlGpuTopologyLevel_t` as a name.
pub fn nvml_level_name(level: u32) -> &'static str {
    match level {
        0 => "internal",
        10 => "single-switch",
        20 => "multiple-switches",
        30 => "host-bridge",
        40 => "numa-node",
        50 => "system",
        _ => "unknown",
    }
}

/// NVML's common-ancestor level as a PCIe path, used when sysfs gives none.
pub fn pcie_path_from_nvml(level_name: &str) -> Option<PciePath> {
    match level_name {
        "internal" | "single-switch" | "multiple-switches" => Some(PciePath::SameSwitch),
        "host-bridge" | "numa-node" => Some(PciePath::HostBridge),
        "system" => Some(PciePath::CrossSocket),
        _ => None,
    }
}

/// Whether the pair has working peer access, from what the sources said.
/// The CUDA driver decides when it answered (it is what kernels use);
/// otherwise NVML's read and write status must both be OK.
pub fn p2p_usable(p2p: &P2pCaps) -> bool {
    match p2p.cuda_access {
        Some(access) => access,
        None => p2p.nvml_read == Some(true) && p2p.nvml_write == Some(true),
    }
}

/// The link class of a pair from its facts.
pub fn link_class(nvlinks: u32, p2p: &P2pCaps, path: Option<PciePath>) -> LinkClass {
    if !p2p_usable(p2p) {
        return LinkClass::NoP2p;
    }
    if nvlinks > 0 || p2p.nvml_nvlink == Some(true) {
        return LinkClass::NvLink;
    }
    match path {
        Some(PciePath::SameSwitch) => LinkClass::PcieSwitch,
        Some(PciePath::CrossSocket) => LinkClass::CrossSocket,
        // Unknown paths (some virtual machines hide them) are taken as the
        // common case of a root complex in between.
        Some(PciePath::HostBridge) | None => LinkClass::PcieHostBridge,
    }
}

/// NVLink links between GPUs, from each GPU's active links and the PCI bus id
/// at the far end of each link (fake NVML answers in tests).
///
/// A link whose far end is one of `bus_ids` joins those two GPUs directly;
/// any other far end is counted as an NVSwitch port. Returns, per pair
/// `(a, b)` with `a < b`, the link count and whether it goes through NVSwitch.
pub fn nvlink_counts(
    bus_ids: &[String],
    remotes: &[Vec<String>],
) -> Vec<((usize, usize), u32, bool)> {
    let n = bus_ids.len();
    let mut direct = vec![vec![0u32; n]; n];
    let mut switch = vec![0u32; n];
    for (i, links) in remotes.iter().enumerate().take(n) {
        for remote in links {
            let remote = normalize_bus_id(remote);
            match bus_ids
                .iter()
                .position(|b| Some(b.as_str()) == remote.as_deref())
            {
                Some(j) if j != i => direct[i][j] += 1,
                Some(_) => {}
                None => switch[i] += 1,
            }
        }
    }
    let mut out = Vec::new();
    for a in 0..n {
        for b in a + 1..n {
            // Each side sees the same direct links; trust the smaller count.
            let d = direct[a][b].min(direct[b][a]);
            if d > 0 {
                out.push(((a, b), d, false));
            } else if switch[a] > 0 && switch[b] > 0 {
                out.push(((a, b), switch[a].min(switch[b]), true));
            } else {
                out.push(((a, b), 0, false));
            }
        }
    }
    out
}

/// PCIe generation from a sysfs `current_link_speed` ("16.0 GT/s PCIe").
pub fn pcie_gen_from_speed(speed: &str) -> Option<u32> {
    let gts: f64 = speed.split_whitespace().next()?.parse().ok()?;
    let table = [
        (2.5, 1),
        (5.0, 2),
        (8.0, 3),
        (16.0, 4),
        (32.0, 5),
        (64.0, 6),
        (128.0, 7),
    ];
    table
        .iter()
        .find(|(rate, _)| (gts - rate).abs() < 0.01)
        .map(|&(_, gen)| gen)
}

/// A peer copy is "through host" when its bandwidth is not clearly above a
/// copy done by hand through pinned host memory. Real P2P over PCIe runs at
/// about twice the host round trip (one transfer instead of two), so 1.2x
/// leaves room for noise without excusing a staged copy.
pub fn through_host(peer_gbs: f64, host_roundtrip_gbs: f64) -> bool {
    peer_gbs <= host_roundtrip_gbs * 1.2
}

/// Draws the consequences of the peer copies in `t.copies`: a warning for
/// each copy that read back wrong or was no faster than host memory, and the
/// link class `no-p2p` for every pair with a wrong read-back (P2P that
/// corrupts data is no P2P, whatever the driver claims). A slow pair keeps
/// its class: its P2P works, only slowly. Derived fields are recomputed.
pub fn judge_copies(t: &mut Topology) -> Result<()> {
    let mut broken = BTreeSet::new();
    for c in &t.copies {
        if !c.verified {
            t.warnings.push(format!(
                "GPU {} -> GPU {}: data copied into the peer read back WRONG; the pair is \
                 classed no-p2p (disable P2P for it elsewhere too, e.g. NCCL_P2P_DISABLE=1)",
                c.src, c.dst
            ));
            broken.insert((c.src.min(c.dst), c.src.max(c.dst)));
        } else if c.peer_access && c.through_host {
            t.warnings.push(format!(
                "GPU {} -> GPU {}: the driver grants P2P but the copy ran at {:.1} GB/s, no \
                 better than through host memory ({:.1} GB/s): P2P is probably routed \
                 through system memory",
                c.src, c.dst, c.large_bandwidth_gbs, c.host_roundtrip_gbs
            ));
        }
    }
    for p in t.pairs.iter_mut() {
        if broken.contains(&(p.a, p.b)) {
            p.link = LinkClass::NoP2p;
        }
    }
    t.finish()
}

/// Checks GPU indices are 0..n in order and that there is exactly one pair
/// for every two GPUs (sorting the pairs by (a, b)).
pub fn validate(gpus: &[Gpu], pairs: &mut [Pair]) -> Result<()> {
    for (i, g) in gpus.iter().enumerate() {
        if g.index != i {
            return Err(Error::invalid(
                "topology",
                format!("GPU #{i} has index {}; list GPUs by index from 0", g.index),
            ));
        }
    }
    let n = gpus.len();
    for p in pairs.iter_mut() {
        if p.a > p.b {
            std::mem::swap(&mut p.a, &mut p.b);
        }
        if p.a == p.b || p.b >= n {
            return Err(Error::invalid(
                "topology",
                format!(
                    "pair ({}, {}) does not name two different GPUs of the {n} listed",
                    p.a, p.b
                ),
            ));
        }
    }
    pairs.sort_by_key(|p| (p.a, p.b));
    for w in pairs.windows(2) {
        if (w[0].a, w[0].b) == (w[1].a, w[1].b) {
            return Err(Error::invalid(
                "topology",
                format!("pair ({}, {}) is listed twice", w[0].a, w[0].b),
            ));
        }
    }
    let want = n * n.saturating_sub(1) / 2;
    if pairs.len() != want {
        let missing = (0..n)
            .flat_map(|a| (a + 1..n).map(move |b| (a, b)))
            .find(|&(a, b)| !pairs.iter().any(|p| (p.a, p.b) == (a, b)));
        return Err(Error::invalid(
            "topology",
            format!(
                "{n} GPUs need {want} pairs, found {}{}",
                pairs.len(),
                missing.map_or(String::new(), |(a, b)| format!(
                    "; pair ({a}, {b}) is missing"
                ))
            ),
        ));
    }
    Ok(())
}

/// The machine class from the pairs' link classes.
pub fn machine_class(gpus: usize, pairs: &[Pair]) -> MachineClass {
    if gpus <= 1 || pairs.is_empty() {
        return MachineClass::SingleGpu;
    }
    if pairs.iter().all(|p| p.link == LinkClass::NvLink) {
        MachineClass::Nvlink
    } else if pairs
        .iter()
        .all(|p| p.link.has_p2p() && p.link != LinkClass::NvLink)
    {
        MachineClass::PcieP2p
    } else if pairs.iter().all(|p| p.link == LinkClass::NoP2p) {
        MachineClass::PcieNop2p
    } else {
        MachineClass::Mixed
    }
}

/// The driver part of the fingerprint: the NVIDIA driver's major version
/// ("580") when NVML told it, else the CUDA driver API version ("cuda13.0"),
/// else "unknown".
pub fn driver_tag(t: &Topology) -> String {
    if let Some(major) = t
        .driver
        .driver_version
        .as_deref()
        .and_then(|v| v.split('.').next())
        .filter(|m| !m.is_empty())
    {
        return major.to_owned();
    }
    match t.driver.cuda_driver_version {
        Some(v) => format!("cuda{}.{}", v / 1000, (v % 1000) / 10),
        None => "unknown".to_owned(),
    }
}

/// The fingerprint: a stable key for this kind of machine, for tuning tables.
///
/// What goes in, as one line of text (returned as the first value):
/// `tpcomm-topology-v1|gpus=<n>|names=<name of GPU 0>,<name of GPU 1>,...|
/// links=<a>-<b>:<link class>,...|driver=<driver tag>`, pairs in (a, b)
/// order. What stays out: bus ids, serial numbers, memory sizes, NUMA nodes
/// and measured speeds, so two machines of the same build share a table.
/// The hash is 64-bit FNV-1a of that text, written as 16 hex digits after
/// "v1-"; FNV is fixed by its definition, so the value never changes with the
/// Rust version or platform.
pub fn fingerprint(t: &Topology) -> (String, String) {
    let names: Vec<&str> = t.gpus.iter().map(|g| g.name.trim()).collect();
    let links: Vec<String> = t
        .pairs
        .iter()
        .map(|p| format!("{}-{}:{}", p.a, p.b, p.link))
        .collect();
    let input = format!(
        "tpcomm-topology-v1|gpus={}|names={}|links={}|driver={}",
        t.gpus.len(),
        names.join(","),
        links.join(","),
        driver_tag(t)
    );
    let hash = format!("v1-{:016x}", fnv1a64(input.as_bytes()));
    (input, hash)
}

/// 64-bit FNV-1a.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}
