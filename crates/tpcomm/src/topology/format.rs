//! The topology as text for people (`tpcomm probe` without `--json`).

use super::model::{LinkClass, Topology};
use std::fmt::Write;

fn yn(v: Option<bool>) -> &'static str {
    match v {
        Some(true) => "yes",
        Some(false) => "no",
        None => "?",
    }
}

/// Left-aligned columns, two spaces apart.
fn table(rows: &[Vec<String>]) -> String {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in rows {
        let mut line = String::from("  ");
        for (c, cell) in r.iter().enumerate() {
            if c + 1 < r.len() {
                let _ = write!(line, "{cell:<w$}  ", w = widths[c]);
            } else {
                line.push_str(cell);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// A short cell for the link matrix: "NV18", "NVS18" (through NVSwitch),
/// "PIX" (PCIe switch), "PHB" (host bridge), "SYS" (cross-socket), "-" (no
/// P2P): the abbreviations `nvidia-smi topo -m` users know.
pub fn matrix_cell(t: &Topology, i: usize, j: usize) -> String {
    if i == j {
        return "X".into();
    }
    match t.pair(i, j) {
        None => "?".into(),
        Some(p) => match p.link {
            LinkClass::NvLink if p.nvswitch => format!("NVS{}", p.nvlinks),
            LinkClass::NvLink => format!("NV{}", p.nvlinks),
            LinkClass::PcieSwitch => "PIX".into(),
            LinkClass::PcieHostBridge => "PHB".into(),
            LinkClass::CrossSocket => "SYS".into(),
            LinkClass::NoP2p => "-".into(),
        },
    }
}

/// The whole report.
pub fn render(t: &Topology) -> String {
    let mut out = String::new();
    let driver = match (&t.driver.driver_version, t.driver.cuda_driver_version) {
        (Some(d), Some(c)) => format!("driver {d}, CUDA {}.{}", c / 1000, (c % 1000) / 10),
        (Some(d), None) => format!("driver {d}"),
        (None, Some(c)) => format!("CUDA {}.{}", c / 1000, (c % 1000) / 10),
        (None, None) => "driver unknown".into(),
    };
    let _ = writeln!(out, "GPUs ({}, {driver})", t.gpus.len());
    let mut rows = vec![vec![
        "#".to_string(),
        "name".into(),
        "cc".into(),
        "memory".into(),
        "PCI bus id".into(),
        "NUMA".into(),
        "PCIe now".into(),
        "PCIe max".into(),
    ]];
    for g in &t.gpus {
        rows.push(vec![
            g.index.to_string(),
            g.name.clone(),
            g.compute_capability.map_or("?".into(), |c| c.to_string()),
            g.memory.map_or("?".into(), |m| m.to_string()),
            g.pci_bus_id.clone().unwrap_or_else(|| "?".into()),
            g.numa_node.map_or("-".into(), |n| n.to_string()),
            g.pcie.map_or("?".into(), |p| {
                format!("gen{} x{}", p.current_gen, p.current_width)
            }),
            g.pcie
                .map_or("?".into(), |p| format!("gen{} x{}", p.max_gen, p.max_width)),
        ]);
    }
    out.push_str(&table(&rows));

    if t.gpus.len() > 1 {
        out.push_str("\nLink matrix (NV<n>: n NVLinks, NVS<n>: n NVLinks to NVSwitch, PIX: PCIe switch, PHB: host bridge, SYS: cross-socket, -: no P2P)\n");
        let n = t.gpus.len();
        let mut rows = vec![std::iter::once(String::new())
            .chain((0..n).map(|j| format!("GPU{j}")))
            .collect::<Vec<_>>()];
        for i in 0..n {
            rows.push(
                std::iter::once(format!("GPU{i}"))
                    .chain((0..n).map(|j| matrix_cell(t, i, j)))
                    .collect(),
            );
        }
        out.push_str(&table(&rows));

        out.push_str("\nPairs\n");
        let mut rows = vec![vec![
            "pair".to_string(),
            "link class".into(),
            "NVLinks".into(),
            "PCIe path".into(),
            "NVML ancestor".into(),
            "P2P read".into(),
            "write".into(),
            "atomics".into(),
            "perf rank".into(),
        ]];
        for p in &t.pairs {
            rows.push(vec![
                format!("{}-{}", p.a, p.b),
                p.link.to_string(),
                if p.nvswitch {
                    format!("{} (NVSwitch)", p.nvlinks)
                } else {
                    p.nvlinks.to_string()
                },
                p.pcie_path.map_or("?".into(), |x| x.name().to_string()),
                p.nvml_ancestor.clone().unwrap_or_else(|| "?".into()),
                yn(p.p2p.read()).into(),
                yn(p.p2p.write()).into(),
                yn(p.p2p.atomics()).into(),
                p.p2p
                    .cuda_performance_rank
                    .map_or("?".into(), |r| r.to_string()),
            ]);
        }
        out.push_str(&table(&rows));
        for p in &t.pairs {
            if let Some(reason) = &p.p2p.nvml_reason {
                let _ = writeln!(out, "  {}-{}: NVML says {reason}", p.a, p.b);
            }
        }
    }

    if !t.copies.is_empty() {
        let c0 = &t.copies[0];
        let _ = writeln!(
            out,
            "\nPeer copies (median of CUDA-event timings; host = the same {} copy staged by hand through pinned host memory)",
            c0.large_bytes
        );
        let mut rows = vec![vec![
            "src->dst".to_string(),
            "access".into(),
            "pattern".into(),
            format!("{} latency", c0.small_bytes),
            format!("{} bandwidth", c0.large_bytes),
            "host round trip".into(),
            "verdict".into(),
        ]];
        for c in &t.copies {
            rows.push(vec![
                format!("{}->{}", c.src, c.dst),
                if c.peer_access { "peer" } else { "staged" }.into(),
                if c.verified { "ok" } else { "WRONG" }.into(),
                format!("{:.2} us", c.small_latency_us),
                format!("{:.1} GB/s", c.large_bandwidth_gbs),
                format!("{:.1} GB/s", c.host_roundtrip_gbs),
                if !c.verified {
                    "P2P BROKEN: data read back wrong".into()
                } else if c.through_host {
                    "no faster than host memory".into()
                } else {
                    "ok".into()
                },
            ]);
        }
        out.push_str(&table(&rows));
    }

    let _ = writeln!(out, "\nmachine class: {}", t.machine_class);
    let _ = writeln!(out, "fingerprint:   {}", t.fingerprint);
    let _ = writeln!(out, "  (FNV-1a 64 of \"{}\")", t.fingerprint_input);
    for w in &t.warnings {
        let _ = writeln!(out, "warning: {w}");
    }
    out
}
