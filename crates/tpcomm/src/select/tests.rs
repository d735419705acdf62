use super::find::{default_path_for_test, find_with};
use super::*;
use crate::algo::Algo;
use crate::cuda::self_tune;
use crate::dtype::DType;
use crate::dtype::ReduceOp;
use crate::topology::MachineClass;
use crate::units::ByteSize;
use std::path::PathBuf;

const FP: &str = "v1-00000000000000aa";

/// Two sizes where one-shot wins, a crossing, two-shot then NCCL winning.
fn fixture() -> String {
    format!(
        r#"format = 1
fingerprint = "{FP}"
machine_class = "nvlink"
world = 2
gpu = "Test GPU"
driver = "13.0"
nccl = "2.28.3"
measured = "by hand"
rows = [
  {{ dtype = "bf16", mode = "graph", bytes = 1024, times_us = {{ "cuda:one-shot" = 3.0, "cuda:two-shot" = 5.0, "nccl" = 7.0 }} }},
  {{ dtype = "bf16", mode = "graph", bytes = 2048, times_us = {{ "cuda:one-shot" = 4.0, "cuda:two-shot" = 5.0, "nccl" = 7.0 }} }},
  {{ dtype = "bf16", mode = "graph", bytes = 4096, times_us = {{ "cuda:one-shot" = 10.0, "cuda:two-shot" = 6.0, "nccl" = 8.0 }} }},
  {{ dtype = "bf16", mode = "graph", bytes = 8192, times_us = {{ "cuda:one-shot" = 30.0, "cuda:two-shot" = 20.0, "nccl" = 9.0 }} }},
  {{ dtype = "bf16", mode = "eager", bytes = 1024, times_us = {{ "cuda:one-shot" = 6.0, "nccl" = 5.0 }} }},
]
"#
    )
}

/// What `Algo::Auto` runs inside a communicator on `transport` without NCCL
/// (graph mode, 64 MiB buffers): its route table's answer.
fn auto_on(sel: &Selector, transport: Transport, world: usize, bytes: u64) -> Algo {
    let g = Group {
        world,
        transport,
        nccl: false,
        max_bytes: ByteSize::mib(64),
    };
    RouteTable::resolve(sel, g)
        .unwrap()
        .lookup(
            bytes,
            DType::Bf16,
            ReduceOp::Sum,
            Algo::Auto,
            Mode::Graph,
            crate::wire::Wire::Exact,
        )
        .algo()
        .unwrap()
}

fn cuda_auto(sel: Option<&Selector>, world: usize, _: DType, bytes: u64) -> Algo {
    let nvlink = Selector::for_class(MachineClass::Nvlink);
    auto_on(sel.unwrap_or(&nvlink), Transport::Cuda, world, bytes)
}

fn host_auto(sel: Option<&Selector>, world: usize, _: DType, bytes: u64) -> Algo {
    let rules = Selector::for_class(MachineClass::PcieNop2p);
    auto_on(sel.unwrap_or(&rules), Transport::Host, world, bytes)
}

fn table() -> Table {
    Table::parse(&fixture(), "fixture.toml").unwrap()
}

fn q(bytes: u64, mode: Mode) -> Query {
    Query {
        world: 2,
        dtype: DType::Bf16,
        bytes,
        mode,
    }
}

fn machine(fp: &str) -> Machine {
    Machine {
        fingerprint: fp.into(),
        class: MachineClass::Nvlink,
        driver: Some("13.0".into()),
        nccl: None,
    }
}

#[test]
fn selection_picks_the_fastest_candidate_of_a_measured_row() {
    let s = Selector::with_table(table(), "fixture.toml");
    let t = table();
    for row in &t.rows {
        let d = s.choose(&q(row.bytes, row.mode));
        let fastest = row
            .times_us
            .iter()
            .min_by(|a, b| a.1.total_cmp(b.1))
            .map(|(c, _)| *c)
            .unwrap();
        assert_eq!(d.choice, fastest, "row {} {:?}", row.bytes, row.mode);
        assert!(d.why.contains(&format!("line {}", row.line)), "{}", d.why);
        assert_eq!(d.estimates.len(), row.times_us.len());
        assert!(d.estimates.windows(2).all(|w| w[0].1 <= w[1].1));
    }
    assert_eq!(s.choose(&q(1024, Mode::Eager)).choice, Candidate::NCCL);
    assert_eq!(
        s.choose(&q(4096, Mode::Graph)).choice,
        Candidate::cuda(Algo::TwoShot)
    );
}

#[test]
fn sizes_between_rows_are_interpolated_linearly_in_bytes() {
    let s = Selector::with_table(table(), "fixture.toml");
    // 3072 is halfway between 2048 and 4096: one-shot 7.0, two-shot 5.5, NCCL 7.5.
    let d = s.choose(&q(3072, Mode::Graph));
    assert_eq!(d.choice, Candidate::cuda(Algo::TwoShot));
    let est: std::collections::HashMap<_, _> = d.estimates.iter().copied().collect();
    assert!((est[&Candidate::cuda(Algo::OneShot)] - 7.0).abs() < 1e-9);
    assert!((est[&Candidate::cuda(Algo::TwoShot)] - 5.5).abs() < 1e-9);
    assert!((est[&Candidate::NCCL] - 7.5).abs() < 1e-9);
    assert!(d.why.contains("interpolated"), "{}", d.why);
    // An eighth of the way (2304): one-shot 4.75 against two-shot 5.125.
    assert_eq!(
        s.choose(&q(2304, Mode::Graph)).choice,
        Candidate::cuda(Algo::OneShot)
    );
    // Outside the measured range: the nearest row.
    assert_eq!(
        s.choose(&q(16, Mode::Graph)).choice,
        Candidate::cuda(Algo::OneShot)
    );
    assert_eq!(s.choose(&q(1 << 30, Mode::Graph)).choice, Candidate::NCCL);
}

#[test]
fn a_narrowed_field_gets_the_fastest_allowed_candidate() {
    let s = Selector::with_table(table(), "fixture.toml");
    let d = s.choose_among(&q(8192, Mode::Graph), &|c| c.transport == Transport::Cuda);
    assert_eq!(d.choice, Candidate::cuda(Algo::TwoShot));
    assert!(d
        .estimates
        .iter()
        .all(|(c, _)| c.transport == Transport::Cuda));
}

#[test]
fn a_query_the_table_cannot_answer_falls_back_to_the_class_rule_and_says_why() {
    let s = Selector::with_table(table(), "fixture.toml");
    let d = s.choose(&Query {
        world: 4,
        ..q(1024, Mode::Graph)
    });
    assert!(
        d.why.contains("rule nvlink") && d.why.contains("measured with 2 ranks"),
        "{}",
        d.why
    );
    assert_eq!(d.choice, Candidate::cuda(Algo::OneShot));
    // f16 has no rows: bf16's (same width) are used, and the reason says so.
    let d = s.choose(&Query {
        dtype: DType::F16,
        ..q(4096, Mode::Graph)
    });
    assert_eq!(d.choice, Candidate::cuda(Algo::TwoShot));
    assert!(d.why.contains("using bf16 rows"), "{}", d.why);
}

#[test]
fn written_tables_read_back_equal() {
    let t = table();
    let back = Table::parse(&t.to_toml(), "written").unwrap();
    let strip = |t: &Table| {
        let mut t = t.clone();
        t.rows.iter_mut().for_each(|r| r.line = 0);
        t
    };
    assert_eq!(strip(&back), strip(&t));
}

#[test]
fn a_table_of_another_machine_is_refused_and_the_message_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("t.toml");
    std::fs::write(&p, fixture()).unwrap();
    let e = load_for(&p, &machine("v1-00000000000000bb"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("another machine"), "{e}");
    assert!(e.contains(FP) && e.contains("v1-00000000000000bb"), "{e}");
    assert!(e.contains("tpcomm tune"), "{e}");
    // The same through the environment variable and the default location.
    let e = find_with(None, Some(p.clone()), None, &machine("v1-00000000000000bb")).unwrap_err();
    assert!(e.to_string().contains(ENV_TABLE), "{e}");
    assert!(find_with(None, None, Some(p.clone()), &machine("v1-00000000000000bb")).is_err());
    // A class default (no fingerprint) is not a machine's table either.
    std::fs::write(&p, BUILTIN_NVLINK_TOML).unwrap();
    let e = load_for(&p, &machine(FP)).unwrap_err().to_string();
    assert!(e.contains("no machine fingerprint"), "{e}");
}

#[test]
fn a_matching_table_is_used_and_a_different_driver_is_noted() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("t.toml");
    std::fs::write(&p, fixture()).unwrap();
    let s = load_for(&p, &machine(FP)).unwrap();
    assert!(s.notes().is_empty());
    assert_eq!(s.choose(&q(8192, Mode::Graph)).choice, Candidate::NCCL);
    let mut m = machine(FP);
    m.driver = Some("12.8".into());
    let s = load_for(&p, &m).unwrap();
    assert!(s.notes()[0].contains("driver 13.0"), "{:?}", s.notes());
}

#[test]
fn tables_are_found_explicit_first_then_env_then_default_location_then_class() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.toml");
    let b = dir.path().join("b.toml");
    std::fs::write(&a, fixture()).unwrap();
    std::fs::write(&b, fixture()).unwrap();
    let m = machine(FP);
    let missing = dir.path().join("none.toml");
    let src = |e: Option<&std::path::Path>, env: Option<PathBuf>, d: Option<PathBuf>| {
        find_with(e, env, d, &m).unwrap().1
    };
    assert_eq!(
        src(Some(&a), Some(b.clone()), Some(b.clone())),
        TableSource::Explicit(a.clone())
    );
    assert_eq!(
        src(None, Some(a.clone()), Some(b.clone())),
        TableSource::Env(a.clone())
    );
    assert_eq!(
        src(None, None, Some(b.clone())),
        TableSource::DefaultLocation(b.clone())
    );
    assert_eq!(
        src(None, None, Some(missing.clone())),
        TableSource::ClassDefaults
    );
    // An explicit file that is not there is an error, not a silent default.
    assert!(find_with(Some(&missing), None, None, &m).is_err());
    assert_eq!(
        default_path_for_test(Some("/x".into()), Some("/home/u".into()), FP),
        Some(PathBuf::from(format!("/x/tpcomm/tuning/{FP}.toml")))
    );
    assert_eq!(
        default_path_for_test(None, Some("/home/u".into()), FP),
        Some(PathBuf::from(format!(
            "/home/u/.config/tpcomm/tuning/{FP}.toml"
        )))
    );
}

fn parse_err(text: &str) -> String {
    Table::parse(text, "bad.toml").unwrap_err().to_string()
}

#[test]
fn malformed_tables_give_errors_naming_line_and_field() {
    let good = fixture();
    // A value of the wrong type (line 12: the third row).
    let e = parse_err(&good.replace("bytes = 4096", "bytes = \"4k\""));
    assert!(
        e.contains("bad.toml") && e.contains("line 12") && e.contains("field `bytes`"),
        "{e}"
    );
    // An unknown candidate.
    let e = parse_err(&good.replace("\"cuda:two-shot\" = 20.0", "\"cuda:ring\" = 20.0"));
    assert!(
        e.contains("line 13") && e.contains("times_us.cuda:ring"),
        "{e}"
    );
    // A time that is not a time.
    let e = parse_err(&good.replace("\"nccl\" = 9.0", "\"nccl\" = -9.0"));
    assert!(e.contains("line 13") && e.contains("times_us.nccl"), "{e}");
    // A missing field and an unknown one.
    let e = parse_err(&good.replace("world = 2\n", ""));
    assert!(e.contains("field `world`") && e.contains("line "), "{e}");
    let e = parse_err(&good.replace("world = 2\n", "world = 2\nwolrd = 3\n"));
    assert!(e.contains("line 5") && e.contains("wolrd"), "{e}");
    // A line that is not TOML at all.
    let e = parse_err(&good.replace("gpu = \"Test GPU\"", "gpu = Test GPU"));
    assert!(e.contains("line 5"), "{e}");
    // A newer format, a duplicate row, a bad mode.
    let e = parse_err(&good.replace("format = 1", "format = 2"));
    assert!(e.contains("line 1") && e.contains("field `format`"), "{e}");
    let e = parse_err(&good.replace("bytes = 2048", "bytes = 1024"));
    assert!(
        e.contains("line 11") && e.contains("already measured on line 10"),
        "{e}"
    );
    let e = parse_err(&good.replace("mode = \"eager\"", "mode = \"lazy\""));
    assert!(e.contains("line 14") && e.contains("field `mode`"), "{e}");
}

#[test]
fn malformed_input_never_panics() {
    let good = fixture();
    for cut in (0..good.len()).step_by(7) {
        let _ = Table::parse(&good[..cut], "cut.toml");
    }
}

#[test]
fn class_rules_without_a_table() {
    let at = |class, bytes, world| select(class, world, DType::Bf16, bytes, Mode::Graph);
    let d = at(MachineClass::PcieP2p, 64 << 10, 2);
    assert_eq!(d.choice, Candidate::cuda(Algo::OneShot));
    assert!(d.why.contains("unmeasured"), "{}", d.why);
    assert_eq!(
        at(MachineClass::PcieP2p, 1 << 20, 2).choice,
        Candidate::NCCL
    );
    assert_eq!(
        at(MachineClass::PcieNop2p, 4096, 2).choice,
        Candidate::host(Algo::OneShot)
    );
    assert_eq!(
        at(MachineClass::PcieNop2p, 2 << 20, 2).choice,
        Candidate::host(Algo::OneShot)
    );
    assert_eq!(
        at(MachineClass::PcieNop2p, 3 << 20, 2).choice,
        Candidate::NCCL
    );
    assert_eq!(at(MachineClass::Mixed, 4096, 2).choice, Candidate::NCCL);
    assert_eq!(
        at(MachineClass::Nvlink, 4 << 20, 4).choice,
        Candidate::cuda(Algo::TwoShot)
    );
    // Without the host transport, a no-P2P machine goes to NCCL and says why.
    let d = class_rule(MachineClass::PcieNop2p, &q(4096, Mode::Graph), &|c| {
        c.transport != Transport::Host
    });
    assert_eq!(d.choice, Candidate::NCCL);
    assert!(d.why.contains("not available"), "{}", d.why);
}

#[test]
fn the_auto_of_an_nvlink_machine_follows_its_defaults() {
    assert_eq!(cuda_auto(None, 2, DType::Bf16, 1 << 20), Algo::OneShot);
    assert_eq!(cuda_auto(None, 2, DType::Bf16, 8 << 20), Algo::TwoShot);
    assert_eq!(cuda_auto(None, 4, DType::Bf16, 1 << 20), Algo::TwoShot);
    let s = Selector::with_table(table(), "fixture.toml");
    // NCCL is fastest at 8 KiB in the fixture; the communicator has only CUDA.
    assert_eq!(cuda_auto(Some(&s), 2, DType::Bf16, 8192), Algo::TwoShot);
    assert_eq!(cuda_auto(Some(&s), 2, DType::Bf16, 1024), Algo::OneShot);
}

#[test]
fn tune_sizes_are_powers_of_two_and_midpoints() {
    let s = tune_sizes(ByteSize::kib(1), ByteSize::kib(8));
    assert_eq!(s, vec![1024, 1536, 2048, 3072, 4096, 6144, 8192]);
    let s = tune_sizes(ByteSize::kib(1), ByteSize::mib(64));
    assert_eq!(s.len(), 33);
    assert!(s.iter().all(|b| b.is_multiple_of(16) && *b <= 64 << 20));
}

#[test]
fn candidates_print_and_parse_back() {
    for c in [
        Candidate::NCCL,
        Candidate::cuda(Algo::OneShot),
        Candidate::cuda(Algo::TwoShot),
        Candidate::host(Algo::OneShot),
    ] {
        assert_eq!(c.to_string().parse::<Candidate>().unwrap(), c);
    }
    assert!("cuda:auto".parse::<Candidate>().is_err());
    assert!("gloo".parse::<Candidate>().is_err());
}

/// The committed NVLink default against both committed measurements of the
/// same call (threads and procs): at every size and mode, what the default
/// picks is within 5% of the fastest there, and never more than 5% slower than NCCL.
#[test]
fn the_nvlink_default_is_within_5_percent_of_the_best_on_the_committed_measurements() {
    let runs = [
        include_str!("testdata/2026-11-30-h200x2-v4-gpu-bench-threads.json"),
        include_str!("testdata/2026-11-30-h200x2-v4-gpu-bench-procs.json"),
    ];
    let sel = Selector::for_class(MachineClass::Nvlink);
    assert!(
        sel.table().is_some(),
        "the built-in nvlink table must parse"
    );
    for run in runs {
        let doc: serde_json::Value = serde_json::from_str(run).unwrap();
        let mut points: std::collections::BTreeMap<(String, u64), Vec<(Candidate, f64)>> =
            Default::default();
        for r in doc["rows"].as_array().unwrap() {
            let algo = r["algo"].as_str().unwrap();
            let c: Candidate = if algo == "nccl" {
                Candidate::NCCL
            } else {
                format!("cuda:{algo}").parse().unwrap()
            };
            let key = (
                r["mode"].as_str().unwrap().to_string(),
                r["bytes"].as_u64().unwrap(),
            );
            points
                .entry(key)
                .or_default()
                .push((c, r["time_us"].as_f64().unwrap()));
        }
        assert_eq!(points.len(), 34);
        for ((mode, bytes), times) in points {
            let d = sel.choose(&q(bytes, mode.parse().unwrap()));
            let t = |c: Candidate| times.iter().find(|x| x.0 == c).unwrap().1;
            let best = times.iter().map(|x| x.1).fold(f64::INFINITY, f64::min);
            let chosen = t(d.choice);
            assert!(
                chosen <= best * 1.05,
                "{mode} {bytes}: {} {chosen} vs best {best}",
                d.choice
            );
            assert!(chosen <= t(Candidate::NCCL) * 1.05, "{mode} {bytes}");
        }
    }
}

#[test]
fn self_tune_takes_the_slowest_rank_and_its_table_picks_the_fastest() {
    let enc = |v: &[f64]| v.iter().flat_map(|t| t.to_le_bytes()).collect::<Vec<u8>>();
    let all = vec![enc(&[3.0, 5.0, 9.0, 6.0]), enc(&[3.5, 4.0, 8.0, 7.0])];
    let t = self_tune::slowest(&all, 4).unwrap();
    assert_eq!(t, vec![3.5, 5.0, 9.0, 7.0]);
    // A rank that measured a different number of points is an error, not a guess.
    let e = self_tune::slowest(&[enc(&[1.0]), enc(&[1.0, 2.0])], 1).unwrap_err();
    assert!(e.to_string().contains("rank 1"), "{e}");
    let table = self_tune::table(2, &[4096, 1 << 20], &t, std::time::Duration::from_millis(3));
    assert_eq!(table.rows.len(), 4);
    let s = Selector::with_table(table, "self-tune");
    assert_eq!(cuda_auto(Some(&s), 2, DType::Bf16, 4096), Algo::OneShot);
    assert_eq!(cuda_auto(Some(&s), 2, DType::Bf16, 1 << 20), Algo::TwoShot);
    assert_eq!(
        self_tune::sizes(ByteSize::kib(256)),
        vec![4096, 65536, 262144]
    );
}

/// One table holding a cuda run's rows and a host run's rows: host one-shot
/// wins at 1 KiB, host two-shot at 8 KiB, NCCL (measured with P2P off) at 64 KiB.
fn host_fixture() -> Table {
    let text = format!(
        r#"format = 1
fingerprint = "{FP}"
machine_class = "nvlink"
world = 2
gpu = "Test GPU"
driver = "13.0"
measured = "by hand"
rows = [
  {{ dtype = "bf16", mode = "graph", bytes = 1024, times_us = {{ "cuda:one-shot" = 1.0, "host:one-shot" = 4.0, "host:two-shot" = 9.0, "nccl" = 20.0 }} }},
  {{ dtype = "bf16", mode = "graph", bytes = 8192, times_us = {{ "cuda:one-shot" = 1.5, "host:one-shot" = 12.0, "host:two-shot" = 10.0, "nccl" = 21.0 }} }},
  {{ dtype = "bf16", mode = "graph", bytes = 65536, times_us = {{ "cuda:two-shot" = 3.0, "host:one-shot" = 40.0, "host:two-shot" = 30.0, "nccl" = 25.0 }} }},
]
"#
    );
    Table::parse(&text, "host-fixture.toml").unwrap()
}

#[test]
fn on_the_host_transport_the_fastest_host_candidate_or_nccl_is_chosen() {
    let s = Selector::with_table(host_fixture(), "host-fixture.toml");
    let g = |b| q(b, Mode::Graph);
    // cuda:* rows are faster everywhere but a host communicator cannot run them.
    let d = s.choose_on(&g(1024), Transport::Host, true);
    assert_eq!(d.choice, Candidate::host(Algo::OneShot), "{}", d.why);
    assert!(d
        .estimates
        .iter()
        .all(|(c, _)| c.transport != Transport::Cuda));
    let d = s.choose_on(&g(8192), Transport::Host, true);
    assert_eq!(d.choice, Candidate::host(Algo::TwoShot), "{}", d.why);
    let d = s.choose_on(&g(65536), Transport::Host, true);
    assert_eq!(d.choice, Candidate::NCCL, "{}", d.why);
    // Without NCCL, the fastest host algorithm there.
    let d = s.choose_on(&g(65536), Transport::Host, false);
    assert_eq!(d.choice, Candidate::host(Algo::TwoShot), "{}", d.why);
    assert_eq!(
        host_auto(Some(&s), 2, DType::Bf16, 8192),
        Algo::TwoShot,
        "the host communicator's Auto follows the table"
    );
    assert_eq!(host_auto(Some(&s), 2, DType::Bf16, 1024), Algo::OneShot);
}

#[test]
fn the_cuda_transport_never_picks_host_rows() {
    let s = Selector::with_table(host_fixture(), "host-fixture.toml");
    for b in [1024, 8192, 65536] {
        let d = s.choose_on(&q(b, Mode::Graph), Transport::Cuda, true);
        assert_eq!(d.choice.transport, Transport::Cuda, "{b}: {}", d.why);
        assert!(d
            .estimates
            .iter()
            .all(|(c, _)| c.transport != Transport::Host));
    }
    // And the cuda communicator's Auto ignores host rows too.
    assert_eq!(cuda_auto(Some(&s), 2, DType::Bf16, 1024), Algo::OneShot);
}

#[test]
fn a_table_without_host_rows_gives_the_host_transport_the_pcie_nop2p_rule() {
    // The fixture has nccl rows at every size (measured with P2P on): they
    // alone must not decide for the host transport.
    let s = Selector::with_table(table(), "fixture.toml");
    for (bytes, want) in [
        (1024, Candidate::host(Algo::OneShot)),
        (2 << 20, Candidate::host(Algo::OneShot)),
        (3 << 20, Candidate::NCCL),
    ] {
        let d = s.choose_on(&q(bytes, Mode::Graph), Transport::Host, true);
        assert_eq!(d.choice, want, "{bytes}: {}", d.why);
        assert!(d.why.contains("pcie-nop2p"), "{}", d.why);
        assert!(d.why.contains("host path forced"), "{}", d.why);
        assert!(d.why.contains("no host:* rows"), "{}", d.why);
        assert!(d.estimates.is_empty());
    }
    // Inside the host communicator (no NCCL): delta up to 2 MiB (it beat the
    // chunked kernel there), chunked above.
    assert_eq!(host_auto(Some(&s), 2, DType::Bf16, 2 << 20), Algo::OneShot);
    assert_eq!(host_auto(Some(&s), 2, DType::Bf16, 3 << 20), Algo::TwoShot);
    // No selector at all: the same rules.
    assert_eq!(host_auto(None, 2, DType::Bf16, 1024), Algo::OneShot);
    assert_eq!(host_auto(None, 2, DType::Bf16, 3 << 20), Algo::TwoShot);
    // Above 16 MiB the chunked kernel is preferred even when NCCL is there.
    let d = s.choose_on(&q(64 << 20, Mode::Graph), Transport::Host, true);
    assert_eq!(d.choice, Candidate::host(Algo::TwoShot), "{}", d.why);
}

#[test]
fn route_tables_keep_the_two_transports_apart() {
    let s = Selector::with_table(host_fixture(), "host-fixture.toml");
    // Same (type, size): cuda one-shot for the P2P communicator, host
    // two-shot for the host one; neither answer may leak into the other.
    assert_eq!(cuda_auto(Some(&s), 2, DType::Bf16, 8192), Algo::OneShot);
    assert_eq!(host_auto(Some(&s), 2, DType::Bf16, 8192), Algo::TwoShot);
}

/// Syntax errors once named a token ("field `}`") as the field,
/// and a key with no value gave no reason at all.
#[test]
fn toml_syntax_errors_name_the_field_before_them_and_a_reason() {
    let good = fixture();
    // A comma missing after `bytes = 4096` (line 12).
    let e = parse_err(&good.replace("bytes = 4096,", "bytes = 4096"));
    assert!(
        e.contains(
            "line 12, after field `bytes`: not valid TOML (invalid inline table, expected `}`)"
        ),
        "{e}"
    );
    // A doubled comma inside times_us (line 10).
    let e = parse_err(&good.replacen("\"cuda:one-shot\" = 3.0,", "\"cuda:one-shot\" = 3.0,,", 1));
    assert!(
        e.contains("line 10, after field `cuda:one-shot`: not valid TOML"),
        "{e}"
    );
    // A key with nothing after `=`: the parser's message is empty.
    let cut = good.find("bytes = 2048").unwrap() + "bytes =".len();
    let e = parse_err(&good[..cut]);
    assert!(
        e.contains("line 11, field `bytes`: no value after `=`"),
        "{e}"
    );
    // A key cut short.
    let cut = good.find("bytes = 2048").unwrap() + "byt".len();
    let e = parse_err(&good[..cut]);
    assert!(
        e.contains("line 11, after field `mode`: not valid TOML"),
        "{e}"
    );
}

/// A key of no letters or digits (`""`, `"'"`) is not a field: the error
/// quotes the key and places it after the last real key of its line, where
/// serde's message would name the field "``" (proptest seed 32e877eb).
#[test]
fn keys_without_a_name_are_quoted_not_named_as_fields() {
    let good = fixture();
    let e = parse_err(&good.replacen("bytes = 2048,", "\"\" = 2048,", 1));
    assert!(
        e.contains("line 11, after field `mode`: unknown key \"\", expected one of `dtype`"),
        "{e}"
    );
    let e = parse_err(&good.replace("world = 2\n", "world = 2\n\"`\" = 3\n"));
    assert!(
        e.contains("line 5: unknown key \"`\", expected one of `format`"),
        "{e}"
    );
    assert_eq!(field_named(&e), None, "{e}");
    // A key with a letter in it is named as written.
    let e = parse_err(&good.replace("world = 2\n", "world = 2\n\"'a\" = 3\n"));
    assert!(e.contains("line 5, field `'a`: unknown field `'a`"), "{e}");
}

/// The `field `...`` a message names, if any.
fn field_named(msg: &str) -> Option<&str> {
    let start = msg.find("field `")? + "field `".len();
    let len = msg[start..].find('`')?;
    Some(&msg[start..start + len])
}

fn arb_table() -> impl proptest::strategy::Strategy<Value = Table> {
    use proptest::prelude::*;
    let candidates = [
        Candidate::NCCL,
        Candidate::cuda(Algo::OneShot),
        Candidate::cuda(Algo::TwoShot),
        Candidate::host(Algo::OneShot),
        Candidate::host(Algo::TwoShot),
    ];
    let row = (
        proptest::sample::select(vec![DType::F32, DType::F16, DType::Bf16]),
        proptest::sample::select(vec![Mode::Eager, Mode::Graph]),
        1u64..(1 << 40),
        proptest::collection::btree_map(
            proptest::sample::select(candidates.to_vec()),
            // Hundredths of a microsecond: what to_toml writes exactly.
            (1u64..100_000_000).prop_map(|h| h as f64 / 100.0),
            1..5,
        ),
    )
        .prop_map(|(dtype, mode, bytes, times_us)| Row {
            dtype,
            mode,
            bytes,
            line: 0,
            times_us,
        });
    (
        proptest::collection::vec(row, 1..12),
        2usize..=64,
        "\\PC{0,24}",
        proptest::option::of("[a-z0-9.-]{1,16}"),
        any::<bool>(),
    )
        .prop_map(|(mut rows, world, gpu, nccl, has_fp)| {
            rows.sort_by_key(|r| (r.dtype.name(), r.mode, r.bytes));
            rows.dedup_by_key(|r| (r.dtype, r.mode, r.bytes));
            Table {
                fingerprint: has_fp.then(|| FP.to_string()),
                machine_class: MachineClass::PcieP2p,
                world,
                gpu: gpu.clone(),
                driver: "13.0".into(),
                nccl,
                measured: format!("by \"proptest\" \\ {gpu}"),
                rows,
            }
        })
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(200))]

    /// Any valid table reads back equal from the TOML it is written as.
    #[test]
    fn tables_round_trip_through_toml(t in arb_table()) {
        let text = t.to_toml();
        let mut back = Table::parse(&text, "gen.toml").map_err(|e| {
            proptest::test_runner::TestCaseError::fail(format!("{e}\n{text}"))
        })?;
        for r in &mut back.rows {
            proptest::prop_assert!(r.line > 0);
            r.line = 0;
        }
        proptest::prop_assert_eq!(back, t);
    }

    /// A written table cut, or with text spliced in, never panics, and an
    /// error names the file and a line, and never a TOML token as a field.
    #[test]
    fn damaged_tables_give_errors_that_name_a_real_field(
        t in arb_table(),
        at in proptest::prelude::any::<proptest::sample::Index>(),
        len in 0usize..40,
        insert in "[ -~]{0,6}|\\PC{0,3}",
    ) {
        let text = t.to_toml();
        let mut i = at.index(text.len());
        while !text.is_char_boundary(i) { i -= 1; }
        let mut j = (i + len).min(text.len());
        while !text.is_char_boundary(j) { j -= 1; }
        let damaged = format!("{}{insert}{}", &text[..i], &text[j..]);
        if let Err(e) = Table::parse(&damaged, "damaged.toml") {
            let m = e.to_string();
            proptest::prop_assert!(m.contains("damaged.toml"), "{}", m);
            if let Some(f) = field_named(&m) {
                proptest::prop_assert!(
                    f.chars().any(|c| c.is_alphanumeric()),
                    "field {:?} in {}\n{}", f, m, damaged
                );
            }
            let reason = m.rsplit(": ").next().unwrap_or("");
            proptest::prop_assert!(!reason.trim().is_empty(), "no reason: {}", m);
        }
    }

    /// Values outside what a table may hold are errors, not read as
    /// something else.
    #[test]
    fn out_of_range_values_are_refused(t in arb_table(), case in 0usize..4) {
        let text = t.to_toml();
        let bad = match case {
            0 => {
                // The first row's size becomes 0.
                let i = text.find("bytes = ").unwrap() + "bytes = ".len();
                let j = i + text[i..].find(',').unwrap();
                format!("{}0{}", &text[..i], &text[j..])
            }
            1 => {
                // The first time becomes negative.
                let i = text.find("times_us = { ").unwrap();
                let k = i + "times_us = { ".len() + text[i + "times_us = { ".len()..].find(" = ").unwrap() + 3;
                format!("{}-{}", &text[..k], &text[k..])
            }
            2 => text.replacen(&format!("world = {}", t.world), "world = 1", 1),
            _ => text.replacen("format = 1", "format = 0", 1),
        };
        proptest::prop_assert_ne!(&bad, &text);
        proptest::prop_assert!(Table::parse(&bad, "bad.toml").is_err(), "{}", bad);
    }
}
