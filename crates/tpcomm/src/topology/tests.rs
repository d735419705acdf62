use super::classify::*;
use super::*;
use crate::units::ByteSize;

fn gpu(i: usize, name: &str) -> Gpu {
    Gpu {
        index: i,
        name: name.into(),
        compute_capability: None,
        memory: None,
        pci_bus_id: None,
        numa_node: None,
        pcie: None,
        sysfs_path: None,
    }
}

fn pair(a: usize, b: usize, link: LinkClass) -> Pair {
    Pair {
        a,
        b,
        link,
        nvlinks: 0,
        nvswitch: false,
        pcie_path: None,
        nvml_ancestor: None,
        p2p: P2pCaps::default(),
    }
}

fn p2p(cuda: Option<bool>, nvml_rw: Option<bool>) -> P2pCaps {
    P2pCaps {
        nvml_read: nvml_rw,
        nvml_write: nvml_rw,
        cuda_access: cuda,
        ..P2pCaps::default()
    }
}

#[test]
fn bus_ids_from_nvml_cuda_and_sysfs_agree() {
    assert_eq!(
        normalize_bus_id("00000000:18:00.0").unwrap(),
        "0000:18:00.0"
    );
    assert_eq!(normalize_bus_id("0000:18:00.0").unwrap(), "0000:18:00.0");
    assert_eq!(normalize_bus_id("0000:AB:1F.3\0").unwrap(), "0000:ab:1f.3");
    assert_eq!(
        normalize_bus_id("00000001:c1:00.0").unwrap(),
        "0001:c1:00.0"
    );
    assert_eq!(normalize_bus_id("pci0000:00"), None);
    assert_eq!(normalize_bus_id("18:00.0"), None);
}

// Sysfs-like paths of real layouts.
const SWITCH_A: &str =
    "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:08.0/0000:03:00.0";
const SWITCH_B: &str =
    "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:10.0/0000:04:00.0";
const PORT_C: &str = "/sys/devices/pci0000:00/0000:00:03.0/0000:05:00.0";
const OTHER_ROOT: &str = "/sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0";
const FLAT_VM_A: &str = "/sys/devices/pci0000:00/0000:00:05.0";
const FLAT_VM_B: &str = "/sys/devices/pci0000:00/0000:00:06.0";

#[test]
fn gpus_below_one_switch_are_same_switch() {
    assert_eq!(
        pcie_path(SWITCH_A, SWITCH_B, Some(0), Some(0)),
        Some(PciePath::SameSwitch)
    );
}

#[test]
fn gpus_on_different_root_ports_meet_at_the_host_bridge() {
    assert_eq!(
        pcie_path(SWITCH_A, PORT_C, Some(0), Some(0)),
        Some(PciePath::HostBridge)
    );
    assert_eq!(
        pcie_path(FLAT_VM_A, FLAT_VM_B, None, None),
        Some(PciePath::HostBridge)
    );
}

#[test]
fn different_host_bridges_are_cross_socket_only_on_different_numa_nodes() {
    assert_eq!(
        pcie_path(SWITCH_A, OTHER_ROOT, Some(0), Some(1)),
        Some(PciePath::CrossSocket)
    );
    // One socket with several root complexes (common on AMD EPYC).
    assert_eq!(
        pcie_path(SWITCH_A, OTHER_ROOT, Some(0), Some(0)),
        Some(PciePath::HostBridge)
    );
    assert_eq!(
        pcie_path(SWITCH_A, OTHER_ROOT, None, Some(1)),
        Some(PciePath::HostBridge)
    );
}

#[test]
fn unreadable_paths_give_no_answer() {
    assert_eq!(pcie_path("", SWITCH_A, None, None), None);
    assert_eq!(
        pcie_path("/sys/devices/virtual/foo", SWITCH_A, None, None),
        None
    );
}

#[test]
fn nvml_ancestor_levels_map_to_paths() {
    assert_eq!(nvml_level_name(10), "single-switch");
    assert_eq!(nvml_level_name(50), "system");
    assert_eq!(nvml_level_name(7), "unknown");
    assert_eq!(
        pcie_path_from_nvml("multiple-switches"),
        Some(PciePath::SameSwitch)
    );
    assert_eq!(pcie_path_from_nvml("numa-node"), Some(PciePath::HostBridge));
    assert_eq!(pcie_path_from_nvml("system"), Some(PciePath::CrossSocket));
    assert_eq!(pcie_path_from_nvml("unknown"), None);
}

#[test]
fn link_class_follows_p2p_then_nvlink_then_pcie_path() {
    let ok = p2p(Some(true), Some(true));
    assert_eq!(link_class(4, &ok, None), LinkClass::NvLink);
    assert_eq!(
        link_class(0, &ok, Some(PciePath::SameSwitch)),
        LinkClass::PcieSwitch
    );
    assert_eq!(
        link_class(0, &ok, Some(PciePath::HostBridge)),
        LinkClass::PcieHostBridge
    );
    assert_eq!(
        link_class(0, &ok, Some(PciePath::CrossSocket)),
        LinkClass::CrossSocket
    );
    assert_eq!(link_class(0, &ok, None), LinkClass::PcieHostBridge);
    // The CUDA driver's refusal wins over NVML and over NVLink.
    assert_eq!(
        link_class(4, &p2p(Some(false), Some(true)), None),
        LinkClass::NoP2p
    );
    // Without the driver's answer, NVML must say both read and write are OK.
    assert_eq!(
        link_class(0, &p2p(None, Some(true)), Some(PciePath::SameSwitch)),
        LinkClass::PcieSwitch
    );
    assert_eq!(link_class(0, &p2p(None, None), None), LinkClass::NoP2p);
    let nvml_nvlink = P2pCaps {
        nvml_nvlink: Some(true),
        ..ok.clone()
    };
    assert_eq!(link_class(0, &nvml_nvlink, None), LinkClass::NvLink);
}

#[test]
fn nvlink_counts_from_fake_nvml_answers() {
    let bus: Vec<String> = ["0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    // GPU0-GPU1: 4 direct links (NVML spells bus ids with 8-digit domains);
    // GPU2: no NVLink at all.
    let remotes = vec![
        vec!["00000000:2A:00.0".to_string(); 4],
        vec!["00000000:18:00.0".to_string(); 4],
        vec![],
    ];
    let c = nvlink_counts(&bus, &remotes);
    assert_eq!(
        c,
        vec![((0, 1), 4, false), ((0, 2), 0, false), ((1, 2), 0, false)]
    );
}

#[test]
fn nvlinks_to_unknown_far_ends_count_as_nvswitch_ports() {
    let bus: Vec<String> = ["0000:18:00.0", "0000:2a:00.0"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let remotes = vec![
        vec!["00000000:c1:00.0".to_string(); 18],
        vec!["00000000:c2:00.0".to_string(); 16],
    ];
    assert_eq!(nvlink_counts(&bus, &remotes), vec![((0, 1), 16, true)]);
}

#[test]
fn pcie_speeds_map_to_generations() {
    assert_eq!(pcie_gen_from_speed("2.5 GT/s PCIe"), Some(1));
    assert_eq!(pcie_gen_from_speed("16.0 GT/s PCIe"), Some(4));
    assert_eq!(pcie_gen_from_speed("32.0 GT/s PCIe"), Some(5));
    assert_eq!(pcie_gen_from_speed("Unknown"), None);
}

#[test]
fn peer_copies_no_faster_than_host_are_flagged() {
    // Real PCIe P2P: ~25 GB/s against a ~12 GB/s round trip.
    assert!(!through_host(25.0, 12.0));
    // Staged through system memory: about the round trip's speed.
    assert!(through_host(12.5, 12.0));
    assert!(through_host(6.0, 12.0));
}

#[test]
fn machine_classes() {
    use LinkClass::*;
    let mk = |links: &[LinkClass]| {
        let n = if links.len() == 3 { 3 } else { 2 };
        let idx = [(0, 1), (0, 2), (1, 2)];
        let pairs: Vec<Pair> = links
            .iter()
            .enumerate()
            .map(|(k, &l)| pair(idx[k].0, idx[k].1, l))
            .collect();
        machine_class(n, &pairs)
    };
    assert_eq!(machine_class(1, &[]), MachineClass::SingleGpu);
    assert_eq!(mk(&[NvLink]), MachineClass::Nvlink);
    assert_eq!(
        mk(&[PcieSwitch, PcieHostBridge, CrossSocket]),
        MachineClass::PcieP2p
    );
    assert_eq!(mk(&[NoP2p, NoP2p, NoP2p]), MachineClass::PcieNop2p);
    assert_eq!(mk(&[NvLink, PcieSwitch, PcieSwitch]), MachineClass::Mixed);
    assert_eq!(mk(&[PcieSwitch, NoP2p, NoP2p]), MachineClass::Mixed);
}

#[test]
fn validation_names_the_problem() {
    let gpus = vec![gpu(0, "A"), gpu(1, "A"), gpu(2, "A")];
    let mut missing = vec![pair(0, 1, LinkClass::NoP2p), pair(1, 2, LinkClass::NoP2p)];
    let e = validate(&gpus, &mut missing).unwrap_err().to_string();
    assert!(e.contains("pair (0, 2) is missing"), "{e}");
    let mut dup = vec![
        pair(0, 1, LinkClass::NoP2p),
        pair(1, 0, LinkClass::NoP2p),
        pair(1, 2, LinkClass::NoP2p),
    ];
    let e = validate(&gpus, &mut dup).unwrap_err().to_string();
    assert!(e.contains("listed twice"), "{e}");
    let mut bad = vec![pair(0, 3, LinkClass::NoP2p)];
    let e = validate(&gpus, &mut bad).unwrap_err().to_string();
    assert!(e.contains("does not name two different GPUs"), "{e}");
    let e = validate(&[gpu(1, "A")], &mut []).unwrap_err().to_string();
    assert!(e.contains("index 1"), "{e}");
}

#[test]
fn fnv1a_matches_its_published_test_vectors() {
    assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
    assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
    assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
}

fn two_h200(link: LinkClass, driver: &str) -> Topology {
    let mut g = vec![gpu(0, "NVIDIA H200"), gpu(1, "NVIDIA H200")];
    g[0].pci_bus_id = Some("0000:18:00.0".into());
    g[1].memory = Some(ByteSize::gib(141));
    Topology::new(
        DriverInfo {
            driver_version: Some(driver.into()),
            cuda_driver_version: Some(13000),
        },
        g,
        vec![pair(0, 1, link)],
    )
    .unwrap()
}

#[test]
fn fingerprint_covers_names_links_and_driver_major_only() {
    let t = two_h200(LinkClass::NvLink, "580.159.04");
    assert_eq!(
        t.fingerprint_input,
        "tpcomm-topology-v1|gpus=2|names=NVIDIA H200,NVIDIA H200|links=0-1:nvlink|driver=580"
    );
    assert_eq!(
        t.fingerprint,
        format!("v1-{:016x}", fnv1a64(t.fingerprint_input.as_bytes()))
    );
    // A minor driver update, other bus ids or memory: same machine kind.
    let mut same = two_h200(LinkClass::NvLink, "580.65.06");
    same.gpus[0].pci_bus_id = Some("0000:9a:00.0".into());
    same.gpus[1].memory = None;
    same.finish().unwrap();
    assert_eq!(same.fingerprint, t.fingerprint);
    // Another link class or driver major: another key.
    assert_ne!(
        two_h200(LinkClass::NoP2p, "580.159.04").fingerprint,
        t.fingerprint
    );
    assert_ne!(
        two_h200(LinkClass::NvLink, "575.57.08").fingerprint,
        t.fingerprint
    );
}

#[test]
fn driver_tag_falls_back_to_the_cuda_version() {
    let mut t = two_h200(LinkClass::NvLink, "580.1");
    t.driver.driver_version = None;
    assert_eq!(driver_tag(&t), "cuda13.0");
    t.driver.cuda_driver_version = None;
    assert_eq!(driver_tag(&t), "unknown");
}

const HAND_WRITTEN: &str = r#"
# Four consumer cards, two per PCIe switch, no P2P between the switches.
[[gpus]]
index = 0
name = "NVIDIA GeForce RTX 4090"
memory = "24 GiB"
compute_capability = "8.9"

[[gpus]]
index = 1
name = "NVIDIA GeForce RTX 4090"

[[gpus]]
index = 2
name = "NVIDIA GeForce RTX 4090"

[[gpus]]
index = 3
name = "NVIDIA GeForce RTX 4090"

[[pairs]]
a = 0
b = 1
link = "pcie-switch"

[[pairs]]
a = 2
b = 3
link = "pcie-switch"

[[pairs]]
a = 0
b = 2
link = "no-p2p"

[[pairs]]
a = 0
b = 3
link = "no-p2p"

[[pairs]]
a = 1
b = 2
link = "no-p2p"

[[pairs]]
a = 3
b = 1
link = "no-p2p"
"#;

#[test]
fn a_hand_written_toml_topology_loads_and_is_classified() {
    let t = Topology::from_toml(HAND_WRITTEN).unwrap();
    assert_eq!(t.gpus.len(), 4);
    assert_eq!(t.gpus[0].memory, Some(ByteSize::gib(24)));
    assert_eq!(
        t.gpus[0].compute_capability,
        Some(ComputeCapability { major: 8, minor: 9 })
    );
    assert_eq!(t.machine_class, MachineClass::Mixed);
    assert_eq!(t.pair(3, 1).unwrap().link, LinkClass::NoP2p);
    assert_eq!(t.pair(2, 3).unwrap().link, LinkClass::PcieSwitch);
    assert!(t.fingerprint.starts_with("v1-"));
}

#[test]
fn json_round_trip_keeps_everything_and_recomputes_derived_fields() {
    let mut t = two_h200(LinkClass::NvLink, "580.159.04");
    t.copies.push(PeerCopy {
        src: 0,
        dst: 1,
        peer_access: true,
        verified: true,
        small_bytes: ByteSize::kib(4),
        small_latency_us: 2.5,
        large_bytes: ByteSize::mib(64),
        large_bandwidth_gbs: 370.0,
        host_roundtrip_gbs: 25.0,
        through_host: false,
    });
    let json = t.to_json();
    let back = Topology::from_json(&json).unwrap();
    assert_eq!(back, t);
    // A stale or forged class in the file is recomputed from the pairs.
    let forged = json.replace(
        "\"machine_class\": \"nvlink\"",
        "\"machine_class\": \"mixed\"",
    );
    assert_ne!(forged, json);
    assert_eq!(
        Topology::from_json(&forged).unwrap().machine_class,
        MachineClass::Nvlink
    );
}

#[test]
fn files_load_by_extension_and_errors_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let toml_path = dir.path().join("box.toml");
    std::fs::write(&toml_path, HAND_WRITTEN).unwrap();
    assert_eq!(Topology::from_path(&toml_path).unwrap().gpus.len(), 4);
    let json_path = dir.path().join("box.json");
    std::fs::write(&json_path, two_h200(LinkClass::NvLink, "580.1").to_json()).unwrap();
    assert_eq!(
        Topology::from_path(&json_path).unwrap().machine_class,
        MachineClass::Nvlink
    );
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[[gpus]]\nindex = 0\n").unwrap();
    let e = Topology::from_path(&bad).unwrap_err().to_string();
    assert!(e.contains("bad.toml") && e.contains("name"), "{e}");
    let e = Topology::from_path(&dir.path().join("none.toml"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("none.toml"), "{e}");
}

#[test]
fn the_report_shows_matrix_pairs_copies_class_and_fingerprint() {
    let mut t = two_h200(LinkClass::NvLink, "580.159.04");
    t.pairs[0].nvlinks = 18;
    t.pairs[0].nvswitch = true;
    t.copies.push(PeerCopy {
        src: 0,
        dst: 1,
        peer_access: true,
        verified: false,
        small_bytes: ByteSize::kib(4),
        small_latency_us: 2.25,
        large_bytes: ByteSize::mib(64),
        large_bandwidth_gbs: 370.04,
        host_roundtrip_gbs: 25.0,
        through_host: false,
    });
    let text = format::render(&t);
    assert_eq!(format::matrix_cell(&t, 1, 0), "NVS18");
    assert_eq!(format::matrix_cell(&t, 0, 0), "X");
    for want in [
        "NVIDIA H200",
        "0000:18:00.0",
        "141 GiB",
        "NVS18",
        "18 (NVSwitch)",
        "4 KiB latency",
        "2.25 us",
        "370.0 GB/s",
        "P2P BROKEN",
        "machine class: nvlink",
        &t.fingerprint,
    ] {
        assert!(text.contains(want), "missing {want:?} in\n{text}");
    }
}

#[test]
fn serde_names_are_the_display_names() {
    use LinkClass::*;
    for l in [NvLink, PcieSwitch, PcieHostBridge, CrossSocket, NoP2p] {
        assert_eq!(serde_json::to_string(&l).unwrap(), format!("\"{l}\""));
    }
    use MachineClass::*;
    for m in [SingleGpu, Nvlink, PcieP2p, PcieNop2p, Mixed] {
        assert_eq!(serde_json::to_string(&m).unwrap(), format!("\"{m}\""));
    }
    for p in [
        PciePath::SameSwitch,
        PciePath::HostBridge,
        PciePath::CrossSocket,
    ] {
        assert_eq!(
            serde_json::to_string(&p).unwrap(),
            format!("\"{}\"", p.name())
        );
    }
}

fn copy(src: usize, dst: usize, verified: bool, peer_gbs: f64, host_gbs: f64) -> PeerCopy {
    PeerCopy {
        src,
        dst,
        peer_access: true,
        verified,
        small_bytes: ByteSize::kib(4),
        small_latency_us: 10.0,
        large_bytes: ByteSize::mib(64),
        large_bandwidth_gbs: peer_gbs,
        host_roundtrip_gbs: host_gbs,
        through_host: through_host(peer_gbs, host_gbs),
    }
}

#[test]
fn a_pair_whose_copy_reads_back_wrong_becomes_no_p2p() {
    let mut t = two_h200(LinkClass::PcieSwitch, "580.1");
    let before = t.fingerprint.clone();
    t.copies = vec![copy(0, 1, true, 25.0, 12.0), copy(1, 0, false, 25.0, 12.0)];
    judge_copies(&mut t).unwrap();
    assert_eq!(t.pairs[0].link, LinkClass::NoP2p);
    assert_eq!(t.machine_class, MachineClass::PcieNop2p);
    assert_ne!(t.fingerprint, before);
    assert_eq!(t.warnings.len(), 1);
    assert!(t.warnings[0].contains("GPU 1 -> GPU 0"), "{:?}", t.warnings);
    assert!(t.warnings[0].contains("WRONG"), "{:?}", t.warnings);
}

#[test]
fn a_slow_pair_keeps_its_class_but_is_warned_about() {
    let mut t = two_h200(LinkClass::PcieHostBridge, "580.1");
    t.copies = vec![copy(0, 1, true, 11.0, 12.0), copy(1, 0, true, 25.0, 12.0)];
    judge_copies(&mut t).unwrap();
    assert_eq!(t.pairs[0].link, LinkClass::PcieHostBridge);
    assert_eq!(t.warnings.len(), 1);
    assert!(
        t.warnings[0].contains("GPU 0 -> GPU 1") && t.warnings[0].contains("system memory"),
        "{:?}",
        t.warnings
    );
}
