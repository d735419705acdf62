use super::launch::worker_argv;
use super::*;

fn bf16_bytes(v: &[f32]) -> Vec<u8> {
    v.iter()
        .flat_map(|x| half::bf16::from_f32(*x).to_le_bytes())
        .collect()
}

#[test]
fn modes_parse_and_unknown_ones_are_refused() {
    assert_eq!(Mode::parse("none").unwrap(), Mode::None(Launch::Ordinary));
    assert_eq!(
        Mode::parse("fused-pdl").unwrap(),
        Mode::Fused(Launch::Overlapped)
    );
    assert_eq!(
        Mode::parse("two-shot").unwrap(),
        Mode::Tp(Algo::TwoShot, Launch::Ordinary)
    );
    assert_eq!(
        Mode::parse("one-shot-pdl").unwrap(),
        Mode::Tp(Algo::OneShot, Launch::Overlapped)
    );
    assert!(Mode::parse("auto").is_err());
    assert!(Mode::parse("fast").is_err());
    for m in [
        "none",
        "none-pdl",
        "nccl",
        "one-shot",
        "one-shot-pdl",
        "two-shot",
        "two-shot-pdl",
        "fused",
        "fused-pdl",
    ] {
        assert_eq!(mode_name(Mode::parse(m).unwrap()), m);
    }
}

fn parse_worker(own: &[&str], dir: &std::path::Path) -> ForwardBenchArgs {
    let argv = worker_argv(own.iter().map(|s| s.into()), true, 2, 1, dir);
    parse_argv(argv).unwrap_or_else(|e| panic!("{own:?}: {e}"))
}

/// `tpcomm` with `argv` (`bench forward ...`), as the forward bench's arguments.
fn parse_argv(argv: Vec<std::ffi::OsString>) -> std::result::Result<ForwardBenchArgs, String> {
    use clap::Parser;
    let cli = crate::Cli::try_parse_from(std::iter::once("tpcomm".into()).chain(argv))
        .map_err(|e| e.to_string())?;
    match cli.command {
        crate::Command::Bench(b) => b.forward().ok_or_else(|| "not forward".into()),
        _ => Err("not `bench forward`".into()),
    }
}

/// A worker re-parses its parent's own command line plus the rank fields,
/// and lands in the forward bench as a worker.
#[test]
fn workers_parse_back_the_parents_command_line() {
    let dir = std::path::Path::new("/tmp/fw rv");
    let own = &["bench", "forward", "--tokens", "8", "--modes", "none,nccl"];
    let a = parse_worker(own, dir);
    check_worker(&a, dir);
    assert_eq!(a.transport, Transport::Auto, "{own:?}");
}

/// --transport reaches the workers, in any position.
#[test]
fn workers_keep_the_transport() {
    let dir = std::path::Path::new("/tmp/fw rv");
    for own in [
        &[
            "bench",
            "forward",
            "--transport",
            "host",
            "--tokens",
            "8",
            "--modes",
            "none,nccl",
        ][..],
        &[
            "bench",
            "forward",
            "--tokens",
            "8",
            "--modes",
            "none,nccl",
            "--transport",
            "host",
        ][..],
        &[
            "bench",
            "forward",
            "--transport=cuda",
            "--tokens",
            "8",
            "--modes",
            "none,nccl",
        ][..],
    ] {
        let a = parse_worker(own, dir);
        check_worker(&a, dir);
        let want = if own.contains(&"--transport=cuda") {
            Transport::Cuda
        } else {
            Transport::Host
        };
        assert_eq!(a.transport, want, "{own:?}");
    }
    // Without --modes the worker also sees none, so it picks the same default.
    let a = parse_worker(&["bench", "forward", "--transport", "host"], dir);
    assert_eq!(a.modes, None);
    assert_eq!(a.transport, Transport::Host);
}

#[test]
fn unknown_transports_are_refused() {
    use clap::Parser;
    for bad in [
        &["tpcomm", "bench", "forward", "--transport", "nvlink"][..],
        &["tpcomm", "bench", "forward", "--transport", "shm"][..],
    ] {
        assert!(crate::Cli::try_parse_from(bad).is_err(), "{bad:?}");
    }
}

fn check_worker(a: &ForwardBenchArgs, dir: &std::path::Path) {
    assert_eq!(a.worker_rank, Some(1));
    assert_eq!(a.gpus, Some(2));
    assert_eq!(a.rendezvous.as_deref(), Some(dir));
    assert_eq!(a.tokens, vec![8]);
    assert_eq!(
        a.modes.as_deref(),
        Some(&["none".to_string(), "nccl".to_string()][..])
    );
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn fused_modes_are_refused_on_the_host_transport_only() {
    for asked in [
        &["none", "fused"][..],
        &["fused-pdl"],
        &["nccl", "fused", "fused-pdl"],
    ] {
        let asked = strings(asked);
        let e = modes_for(Some(&asked), Transport::Host)
            .unwrap_err()
            .to_string();
        assert!(e.contains("host transport"), "{e}");
        assert!(e.contains("P2P"), "{e}");
        assert!(e.contains("--transport cuda"), "{e}");
        for m in asked.iter().filter(|m| m.starts_with("fused")) {
            assert!(e.contains(m.as_str()), "{e} should name {m}");
        }
        for t in [Transport::Cuda, Transport::Auto] {
            let (modes, skipped) = modes_for(Some(&asked), t).unwrap();
            assert_eq!(modes.len(), asked.len());
            assert!(skipped.is_empty());
        }
    }
    let (modes, skipped) = modes_for(
        Some(&strings(&[
            "none", "none-pdl", "nccl", "one-shot", "two-shot",
        ])),
        Transport::Host,
    )
    .unwrap();
    assert_eq!(
        modes,
        vec![
            Mode::None(Launch::Ordinary),
            Mode::None(Launch::Overlapped),
            Mode::Nccl,
            Mode::Tp(Algo::OneShot, Launch::Ordinary),
            Mode::Tp(Algo::TwoShot, Launch::Ordinary)
        ]
    );
    assert!(skipped.is_empty());
    assert!(modes_for(Some(&strings(&["none", "fast"])), Transport::Host).is_err());
    assert!(modes_for(Some(&[]), Transport::Cuda).is_err());
}

/// Without --modes: every mode on P2P (or auto, undecided yet), and on
/// the host transport every one but the fused two, which are named.
#[test]
fn default_modes_leave_the_fused_ones_out_on_the_host_transport() {
    for t in [Transport::Cuda, Transport::Auto] {
        let (modes, skipped) = modes_for(None, t).unwrap();
        assert_eq!(
            modes.iter().map(|&m| mode_name(m)).collect::<Vec<_>>(),
            ALL_MODES.to_vec()
        );
        assert!(skipped.is_empty());
    }
    let (modes, skipped) = modes_for(None, Transport::Host).unwrap();
    assert_eq!(
        modes.iter().map(|&m| mode_name(m)).collect::<Vec<_>>(),
        vec![
            "none",
            "nccl",
            "one-shot",
            "one-shot-pdl",
            "two-shot",
            "none-pdl"
        ]
    );
    assert_eq!(skipped, vec!["fused", "fused-pdl"]);
}

#[test]
fn relative_difference_is_max_error_over_max_magnitude() {
    let b = bf16_bytes(&[1.0, -4.0, 2.0]);
    let a = bf16_bytes(&[1.0, -4.0, 2.5]);
    assert_eq!(rel_diff(&b, &b), 0.0);
    assert_eq!(rel_diff(&a, &b), 0.5 / 4.0);
    let nan = bf16_bytes(&[1.0, f32::NAN, 2.0]);
    assert!(rel_diff(&nan, &b).is_infinite());
}

/// Each number of `bench forward` is bounded on both sides
/// before any worker starts, and the error names its flag.
#[test]
fn numbers_out_of_range_are_refused_naming_the_flag() {
    let dir = std::path::Path::new("/tmp/fw rv");
    let huge = u64::MAX.to_string();
    let args = |extra: &[&str]| {
        let own: Vec<&str> = ["bench", "forward"].iter().chain(extra).copied().collect();
        parse_worker(&own, dir)
    };
    check_counts(&args(&[])).unwrap();
    for (flag, bad) in [
        ("--layers", "0"),
        ("--layers", "1025"),
        ("--hidden", &huge[..]),
        ("--mlp", "0"),
        ("--mlp", "1048577"),
        ("--tokens", "1,0,4"),
        ("--tokens", "70000"),
        ("--iters", &huge),
        ("--reps", "0"),
        ("--timeout-ms", "0"),
        ("--timeout-ms", &huge),
    ] {
        let msg = check_counts(&args(&[flag, bad])).unwrap_err().to_string();
        assert!(
            msg.contains(flag) && msg.contains("give 1 to"),
            "{flag} {bad}: {msg}"
        );
    }
}

/// `tpcomm bench forward` with `own`.
fn parse_forward(own: &[&str]) -> std::result::Result<ForwardBenchArgs, String> {
    let argv = ["bench", "forward"].iter().chain(own).map(|s| s.into());
    parse_argv(argv.collect())
}

fn parse(own: &[&str]) -> ForwardBenchArgs {
    parse_forward(own).unwrap_or_else(|e| panic!("{own:?}: {e}"))
}

/// --launch is open unless given (run_inner then decides); processes go by
/// either name; a worker handed the parent's --launch still parses.
#[test]
fn launch_is_open_unless_given() {
    assert_eq!(parse(&[]).launch, None);
    for (flag, want) in [
        ("procs", RankLaunch::Processes),
        ("processes", RankLaunch::Processes),
        ("threads", RankLaunch::Threads),
    ] {
        assert_eq!(parse(&["--launch", flag]).launch, Some(want), "{flag}");
    }
    assert!(parse_forward(&["--launch", "fibers"]).is_err());
    let dir = std::path::Path::new("/tmp/fw rv");
    let own = &[
        "bench",
        "forward",
        "--launch",
        "processes",
        "--tokens",
        "8",
        "--modes",
        "none,nccl",
    ];
    let a = parse_worker(own, dir);
    check_worker(&a, dir);
    assert_eq!(a.launch, Some(RankLaunch::Processes));
}

/// Without --launch the forward bench decides as `tpcomm bench --device gpu`
/// does (gpu_bench::default_launch): processes when every rank has a GPU of
/// its own or MPS serves the shared GPUs, threads when ranks would share a
/// GPU as processes without MPS (time slices), with one line naming this
/// command saying which and why. A --launch given is kept, MPS not asked.
#[test]
fn ranks_sharing_a_gpu_without_mps_run_as_threads_unless_launch_says() {
    let name = "tpcomm bench forward";
    let never = |_: usize| -> Result<bool> { panic!("MPS asked though --launch was given") };
    let open = parse(&[]).launch;
    let (l, line) = choose_launch(open, 4, 1, name, |_| Ok(false));
    assert_eq!(l, RankLaunch::Threads);
    let line = line.unwrap();
    assert!(
        line.starts_with(
            "tpcomm bench forward: ranks run as threads: 4 ranks share 1 GPU and no MPS server serves GPU 0"
        ) && line.contains("time slices")
            && line.ends_with("(--launch chooses)"),
        "{line}"
    );
    let (l, line) = choose_launch(open, 4, 1, name, |_| Ok(true));
    assert_eq!(l, RankLaunch::Processes);
    assert!(
        line.unwrap()
            .starts_with("tpcomm bench forward: ranks run as processes: 4 ranks share 1 GPU and an MPS server serves them")
    );
    let (l, line) = choose_launch(open, 2, 8, name, |_| {
        panic!("MPS asked with a GPU per rank")
    });
    assert_eq!(l, RankLaunch::Processes);
    assert!(line.unwrap().contains("every rank has a GPU of its own"));
    for (flag, want) in [
        ("processes", RankLaunch::Processes),
        ("threads", RankLaunch::Threads),
    ] {
        let given = parse(&["--launch", flag]).launch;
        assert_eq!(
            choose_launch(given, 4, 1, name, never),
            (want, None),
            "{flag}"
        );
    }
}

mod quant;
