//! The model of a machine's GPUs and links, as plain data: what a probe
//! finds or a file holds (link and machine classes, GPUs, pairs, timed
//! copies, driver versions).

use crate::error::{Error, Result};
use crate::units::ByteSize;
use serde::{Deserialize, Serialize};
use std::fmt;

/// How two GPUs reach each other, best first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LinkClass {
    /// NVLink, direct or through NVSwitch.
    #[serde(rename = "nvlink")]
    NvLink,
    /// PCIe P2P whose traffic stays below a shared PCIe switch.
    PcieSwitch,
    /// PCIe P2P through the CPU's root complex (one socket).
    PcieHostBridge,
    /// PCIe P2P across the link between CPU sockets.
    CrossSocket,
    /// No peer access: data between these GPUs goes through host memory.
    NoP2p,
}

impl LinkClass {
    pub const fn name(self) -> &'static str {
        match self {
            LinkClass::NvLink => "nvlink",
            LinkClass::PcieSwitch => "pcie-switch",
            LinkClass::PcieHostBridge => "pcie-host-bridge",
            LinkClass::CrossSocket => "cross-socket",
            LinkClass::NoP2p => "no-p2p",
        }
    }

    /// Whether GPU kernels can write into the peer's memory directly.
    pub const fn has_p2p(self) -> bool {
        !matches!(self, LinkClass::NoP2p)
    }
}

display_by_name!(LinkClass);

/// The machine as a whole, from its pairs' link classes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MachineClass {
    /// One GPU: nothing to communicate between GPUs.
    #[default]
    SingleGpu,
    /// Every pair is joined by NVLink.
    Nvlink,
    /// Every pair has PCIe P2P (switch, host bridge or cross-socket).
    PcieP2p,
    /// No pair has P2P.
    PcieNop2p,
    /// Pairs of different kinds (NVLink and PCIe, or P2P and none).
    Mixed,
}

impl MachineClass {
    /// Every class, in the order the built-in tables and `--class` list them.
    pub const ALL: [MachineClass; 5] = [
        MachineClass::Nvlink,
        MachineClass::PcieP2p,
        MachineClass::PcieNop2p,
        MachineClass::Mixed,
        MachineClass::SingleGpu,
    ];

    pub const fn name(self) -> &'static str {
        match self {
            MachineClass::SingleGpu => "single-gpu",
            MachineClass::Nvlink => "nvlink",
            MachineClass::PcieP2p => "pcie-p2p",
            MachineClass::PcieNop2p => "pcie-nop2p",
            MachineClass::Mixed => "mixed",
        }
    }
}

display_by_name!(MachineClass);

/// Where two GPUs' PCIe paths meet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PciePath {
    /// Below a PCIe switch both GPUs hang from.
    SameSwitch,
    /// At the root complex of one CPU socket.
    HostBridge,
    /// Only across the CPU sockets' interconnect.
    CrossSocket,
}

impl PciePath {
    pub const fn name(self) -> &'static str {
        match self {
            PciePath::SameSwitch => "same-switch",
            PciePath::HostBridge => "host-bridge",
            PciePath::CrossSocket => "cross-socket",
        }
    }
}

/// A CUDA compute capability, written "9.0".
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ComputeCapability {
    pub major: u32,
    pub minor: u32,
}

impl fmt::Display for ComputeCapability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

impl std::str::FromStr for ComputeCapability {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        let bad = || Error::invalid("compute capability", format!("{s:?} is not like \"9.0\""));
        let (a, b) = s.trim().split_once('.').ok_or_else(bad)?;
        Ok(ComputeCapability {
            major: a.parse().map_err(|_| bad())?,
            minor: b.parse().map_err(|_| bad())?,
        })
    }
}

impl Serialize for ComputeCapability {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ComputeCapability {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// A PCIe link's generation and lane count, now and at most. GPUs lower the
/// generation when idle to save power, so "current" is often below "max".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PcieLink {
    pub current_gen: u32,
    pub current_width: u32,
    pub max_gen: u32,
    pub max_width: u32,
}

/// One GPU.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Gpu {
    /// The CUDA device ordinal (after `CUDA_VISIBLE_DEVICES`).
    pub index: usize,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_capability: Option<ComputeCapability>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<ByteSize>,
    /// "0000:18:00.0" (domain:bus:device.function, lower case).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci_bus_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numa_node: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pcie: Option<PcieLink>,
    /// The device's path under /sys/devices (its chain of PCIe bridges).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sysfs_path: Option<String>,
}

/// What NVML and the CUDA driver say about peer access between two GPUs.
/// `None`: that source was not available or did not answer. NVML's answers
/// are true only when both directions are OK.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct P2pCaps {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvml_read: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvml_write: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvml_atomics: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvml_nvlink: Option<bool>,
    /// NVML's reason when P2P reads or writes are not OK.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvml_reason: Option<String>,
    /// `cuDeviceCanAccessPeer`, both directions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda_access: Option<bool>,
    /// `CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED`, both directions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda_native_atomics: Option<bool>,
    /// `CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK` (lower is better).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda_performance_rank: Option<i32>,
}

impl P2pCaps {
    /// Peer reads work: the CUDA driver's word first, NVML's otherwise.
    pub fn read(&self) -> Option<bool> {
        self.cuda_access.or(self.nvml_read)
    }
    pub fn write(&self) -> Option<bool> {
        self.cuda_access.or(self.nvml_write)
    }
    pub fn atomics(&self) -> Option<bool> {
        self.cuda_native_atomics.or(self.nvml_atomics)
    }
}

/// Two GPUs, `a < b`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Pair {
    pub a: usize,
    pub b: usize,
    pub link: LinkClass,
    /// NVLink links between them: direct links, or, through NVSwitch, the
    /// smaller of the two GPUs' switch link counts.
    #[serde(default)]
    pub nvlinks: u32,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub nvswitch: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pcie_path: Option<PciePath>,
    /// NVML's own common-ancestor answer, for comparison with `pcie_path`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvml_ancestor: Option<String>,
    #[serde(default)]
    pub p2p: P2pCaps,
}

/// A timed copy from GPU `src` into GPU `dst`'s memory.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PeerCopy {
    pub src: usize,
    pub dst: usize,
    /// Peer access was enabled, so the copy went through the peer mapping;
    /// otherwise the driver staged it through host memory.
    pub peer_access: bool,
    /// A random pattern written into the peer's memory read back intact.
    pub verified: bool,
    pub small_bytes: ByteSize,
    /// Median time of one small copy, in microseconds (CUDA events).
    pub small_latency_us: f64,
    pub large_bytes: ByteSize,
    /// Median bandwidth of one large copy, in GB/s (10^9 bytes per second).
    pub large_bandwidth_gbs: f64,
    /// The same large copy done by hand through pinned host memory
    /// (device to host, then host to device), in GB/s.
    pub host_roundtrip_gbs: f64,
    /// The peer copy was no faster than the host round trip: a driver that
    /// claims P2P but routes it through system memory.
    pub through_host: bool,
}

/// Versions of the software the probe talked to.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DriverInfo {
    /// The NVIDIA driver, as NVML reports it ("580.159.04").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver_version: Option<String>,
    /// `cuDriverGetVersion`: 13000 for CUDA 13.0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda_driver_version: Option<u32>,
}

/// The GPUs of one machine and how they are linked.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Topology {
    /// Derived from `pairs` (recomputed when loaded).
    #[serde(default)]
    pub machine_class: MachineClass,
    /// Derived (recomputed when loaded): see [`classify::fingerprint`].
    #[serde(default)]
    pub fingerprint: String,
    /// The exact text the fingerprint hashes, so anyone can see what is in it.
    #[serde(default)]
    pub fingerprint_input: String,
    #[serde(default)]
    pub driver: DriverInfo,
    pub gpus: Vec<Gpu>,
    #[serde(default)]
    pub pairs: Vec<Pair>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub copies: Vec<PeerCopy>,
    /// Things a user should know (P2P claimed but slow, a source missing).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}
