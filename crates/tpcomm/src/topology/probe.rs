//! Probing this machine: CUDA driver first (it decides which GPUs exist and
//! their order), then NVML and sysfs for links, then the timed copies.

use super::classify::{self, link_class, normalize_bus_id, pcie_path, pcie_path_from_nvml};
use super::model::{
    ComputeCapability, DriverInfo, Gpu, P2pCaps, Pair, PcieLink, PeerCopy, Topology,
};
use super::sysfs;
use crate::error::Result;
// The probe's CUDA driver calls live in the unsafe bottom layer.
use crate::sys::cuda::probe as cuda;
use crate::sys::nvml::{self, Nvml, P2pIndex};
use crate::units::ByteSize;

/// What the probe does beyond reading facts.
#[derive(Clone, Debug)]
pub struct ProbeOptions {
    /// Run the peer copy test (verify and time) for every ordered pair.
    pub copy_test: bool,
    pub small_copy: ByteSize,
    pub large_copy: ByteSize,
}

impl Default for ProbeOptions {
    fn default() -> Self {
        ProbeOptions {
            copy_test: true,
            small_copy: ByteSize::kib(4),
            large_copy: ByteSize::mib(64),
        }
    }
}

/// Probes the GPUs of this machine. Without a driver or a GPU this is an
/// error that says so (never a panic).
pub fn probe(opts: &ProbeOptions) -> Result<Topology> {
    cuda::init()?;
    let n = cuda::device_count()?;
    if n == 0 {
        return Err(crate::Error::Unsupported(
            "the CUDA driver reports no GPU (check CUDA_VISIBLE_DEVICES and `nvidia-smi`)".into(),
        ));
    }
    let mut warnings = Vec::new();
    let nvml = match Nvml::open() {
        Ok(n) => Some(n),
        Err(e) => {
            warnings.push(format!(
                "{e}; NVLink counts, NVML P2P status and PCIe generation are unknown"
            ));
            None
        }
    };

    let mut gpus = Vec::with_capacity(n);
    for i in 0..n {
        let f = cuda::device_facts(i)?;
        let bus = normalize_bus_id(&f.bus_id).unwrap_or(f.bus_id.to_ascii_lowercase());
        let nvml_pcie = nvml
            .as_ref()
            .and_then(|m| m.device(&bus).ok())
            .and_then(|d| nvml.as_ref()?.pcie(d))
            .map(|p| PcieLink {
                current_gen: p.current_gen,
                current_width: p.current_width,
                max_gen: p.max_gen,
                max_width: p.max_width,
            });
        gpus.push(Gpu {
            index: i,
            name: f.name,
            compute_capability: Some(ComputeCapability {
                major: f.cc.0,
                minor: f.cc.1,
            }),
            memory: Some(ByteSize::b(f.memory)),
            numa_node: sysfs::numa_node(&bus),
            pcie: nvml_pcie.or_else(|| sysfs::pcie_link(&bus)),
            sysfs_path: sysfs::device_path(&bus),
            pci_bus_id: Some(bus),
        });
    }

    let handles: Vec<Option<nvml::Device>> = gpus
        .iter()
        .map(|g| {
            let m = nvml.as_ref()?;
            match m.device(g.pci_bus_id.as_deref()?) {
                Ok(d) => Some(d),
                Err(e) => {
                    warnings.push(e);
                    None
                }
            }
        })
        .collect();
    let bus_ids: Vec<String> = gpus
        .iter()
        .map(|g| g.pci_bus_id.clone().unwrap_or_default())
        .collect();
    let remotes: Vec<Vec<String>> = handles
        .iter()
        .map(|h| match (nvml.as_ref(), h) {
            (Some(m), Some(d)) => m.nvlink_remotes(*d),
            _ => Vec::new(),
        })
        .collect();
    let nvlinks = classify::nvlink_counts(&bus_ids, &remotes);

    let mut pairs = Vec::new();
    for ((a, b), links, via_switch) in nvlinks {
        let mut p2p = P2pCaps::default();
        let mut ancestor = None;
        if let (Some(m), Some(ha), Some(hb)) = (nvml.as_ref(), handles[a], handles[b]) {
            let both = |idx: P2pIndex| -> (Option<bool>, Option<u32>) {
                match (m.p2p_status(ha, hb, idx), m.p2p_status(hb, ha, idx)) {
                    (Some(x), Some(y)) => (Some(x == 0 && y == 0), Some(x.max(y))),
                    _ => (None, None),
                }
            };
            let (read, read_code) = both(P2pIndex::Read);
            let (write, write_code) = both(P2pIndex::Write);
            p2p.nvml_read = read;
            p2p.nvml_write = write;
            p2p.nvml_atomics = both(P2pIndex::Atomics).0;
            p2p.nvml_nvlink = both(P2pIndex::NvLink).0;
            let bad = [read_code, write_code]
                .into_iter()
                .flatten()
                .find(|&c| c != 0);
            p2p.nvml_reason = bad.map(|c| format!("P2P {}", nvml::p2p_status_name(c)));
            ancestor = m
                .common_ancestor(ha, hb)
                .map(|l| classify::nvml_level_name(l).to_owned());
        }
        let (fa, fb) = (cuda::peer_facts(a, b)?, cuda::peer_facts(b, a)?);
        p2p.cuda_access = Some(fa.can_access && fb.can_access);
        p2p.cuda_native_atomics = match (fa.native_atomics, fb.native_atomics) {
            (Some(x), Some(y)) => Some(x && y),
            _ => None,
        };
        p2p.cuda_performance_rank = fa.perf_rank.max(fb.perf_rank);

        let (ga, gb) = (&gpus[a], &gpus[b]);
        let path = match (&ga.sysfs_path, &gb.sysfs_path) {
            (Some(x), Some(y)) => pcie_path(x, y, ga.numa_node, gb.numa_node),
            _ => None,
        }
        .or_else(|| ancestor.as_deref().and_then(pcie_path_from_nvml));
        let link = link_class(links, &p2p, path);
        pairs.push(Pair {
            a,
            b,
            link,
            nvlinks: links,
            nvswitch: via_switch,
            pcie_path: path,
            nvml_ancestor: ancestor,
            p2p,
        });
    }

    let driver = DriverInfo {
        driver_version: nvml.as_ref().and_then(Nvml::driver_version),
        cuda_driver_version: cuda::driver_version(),
    };
    drop(nvml);
    let mut topo = Topology::new(driver, gpus, pairs)?;
    topo.warnings = warnings;

    if opts.copy_test && n > 1 {
        let small = opts.small_copy.as_usize()?;
        let large = opts.large_copy.as_usize()?;
        for src in 0..n {
            for dst in 0..n {
                if src == dst {
                    continue;
                }
                let m = cuda::copy_test(src, dst, small, large)?;
                let large_gbs = large as f64 / (m.large_ms * 1e-3) / 1e9;
                let host_gbs = large as f64 / (m.host_ms * 1e-3) / 1e9;
                topo.copies.push(PeerCopy {
                    src,
                    dst,
                    peer_access: m.peer_access,
                    verified: m.verified,
                    small_bytes: opts.small_copy,
                    small_latency_us: round3(m.small_ms * 1e3),
                    large_bytes: opts.large_copy,
                    large_bandwidth_gbs: round3(large_gbs),
                    host_roundtrip_gbs: round3(host_gbs),
                    through_host: classify::through_host(large_gbs, host_gbs),
                });
            }
        }
        classify::judge_copies(&mut topo)?;
    }
    Ok(topo)
}

/// Three decimals are more than the timings resolve; more only adds noise
/// to the JSON.
fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}
