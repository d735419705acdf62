//! Options checked before any work starts (src/checks.rs): each bad value is
//! refused by the parent with exit status 2, in exactly one line on stderr
//! that names the flag, with nothing on stdout (no run began) and nothing
//! left in the temporary directory or at the output path. More CPU ranks
//! than cores is a one-line warning. The launch flag has one spelling in
//! every help, and clap never offers the internal worker command.

use std::path::Path;
use std::process::{Command, Output};

/// Runs tpcomm with its temporary directory in `tmp`.
fn tpcomm_in(tmp: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tpcomm"))
        .args(args)
        .env("TMPDIR", tmp)
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `args` is refused before any work: status 2, one line on stderr naming
/// `flag`, nothing on stdout, nothing made in the temporary directory.
fn refused_once(args: &[&str], flag: &str) -> String {
    let tmp = tempfile::tempdir().unwrap();
    let o = tpcomm_in(tmp.path(), args);
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(2), "{args:?}\n{err}");
    assert_eq!(out, "", "{args:?}: a run started\n{err}");
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{args:?}: not one message:\n{err}");
    assert!(lines[0].contains(flag), "{args:?}: {flag} not named: {err}");
    assert!(!err.contains("panicked"), "{args:?}: {err}");
    let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
    assert!(left.is_empty(), "{args:?} left {left:?}");
    lines[0].to_string()
}

#[test]
fn an_output_path_that_cannot_be_written_is_refused_before_the_run() {
    let base = tempfile::tempdir().unwrap();
    let missing = base.path().join("no/such/dir/x.json");
    let missing = missing.to_str().unwrap();
    let file = base.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    let under_file = file.join("x.json");
    let under_file = under_file.to_str().unwrap();
    let dir = base.path().to_str().unwrap();
    for args in [
        &["bench", "--device", "cpu", "--json", missing][..],
        &[
            "bench", "--device", "cpu", "--launch", "threads", "--json", missing,
        ],
        &["bench", "--json", missing],
        &["bench", "--device", "cpu", "--json", under_file],
        &["bench", "--device", "gpu", "--json", missing],
        &["bench", "forward", "--json", missing],
        &["tune", "--json", missing],
        &["probe", "--json", missing],
    ] {
        let msg = refused_once(args, "--json");
        assert!(
            msg.contains("does not exist") || msg.contains("is not a directory"),
            "{args:?}: {msg}"
        );
    }
    let msg = refused_once(&["bench", "--device", "cpu", "--json", dir], "--json");
    assert!(msg.contains("is a directory"), "{msg}");
    // tune makes the table's missing folders, so only a file in the way stops it.
    refused_once(&["tune", "--out", under_file], "--out");
    refused_once(
        &["tune", "--from-bench", "x.json", "--out", under_file],
        "--out",
    );
    let plot = file.join("plots");
    refused_once(
        &[
            "plan",
            "spec",
            "--model",
            "kimi-k2.5",
            "--machine",
            "pcie8-rtxpro6000",
            "--weights",
            "int4",
            "--draft",
            "kimi-k2.5-eagle3",
            "--plot",
            plot.to_str().unwrap(),
        ],
        "--plot",
    );
    // Nothing was made where the output would have gone.
    assert!(!base.path().join("no").exists());
    let left: Vec<_> = std::fs::read_dir(base.path()).unwrap().collect();
    assert_eq!(left.len(), 1, "{left:?}");
}

#[test]
fn the_cpu_communicators_sizes_are_refused_once_not_once_per_rank() {
    for launch in ["processes", "threads"] {
        for (flag, value) in [
            ("--max-message", "1KiB"),
            ("--max-message", "17GiB"),
            ("--piece", "1KiB"),
        ] {
            let msg = refused_once(
                &[
                    "bench", "--device", "cpu", "--ranks", "4", "--launch", launch, flag, value,
                ],
                flag,
            );
            assert!(msg.contains("give"), "{msg}");
        }
    }
    // 16 GiB in 4 KiB pieces is more pieces than a segment holds.
    let msg = refused_once(
        &[
            "bench",
            "--device",
            "cpu",
            "--max-message",
            "16GiB",
            "--piece",
            "4KiB",
        ],
        "--piece",
    );
    assert!(msg.contains("8 MiB"), "{msg}");
}

#[test]
fn message_sizes_need_whole_elements_and_min_at_most_max() {
    for (args, flag, says) in [
        (
            &["bench", "--device", "cpu", "--min-bytes", "0"][..],
            "--min-bytes",
            "at least one element",
        ),
        (
            &["bench", "--device", "cpu", "--min", "3"],
            "--min-bytes",
            "nearest: 4 B",
        ),
        (
            &["bench", "--device", "cpu", "--min-bytes", "2"],
            "--min-bytes",
            "f32",
        ),
        (
            &[
                "bench",
                "--device",
                "cpu",
                "--dtype",
                "bf16",
                "--max-bytes",
                "3",
            ],
            "--max-bytes",
            "nearest: 2 B or 4 B",
        ),
        (
            &["bench", "--device", "cpu", "--min", "2MiB", "--max", "1MiB"],
            "--min-bytes",
            "at most --max-bytes",
        ),
        (
            &["bench", "--device", "gpu", "--min", "3"],
            "--min-bytes",
            "bf16",
        ),
        (
            &[
                "bench",
                "--device",
                "gpu",
                "--min-bytes",
                "2MiB",
                "--max-bytes",
                "1MiB",
            ],
            "--min-bytes",
            "at most --max-bytes",
        ),
        (&["tune", "--min", "3"], "--min", "bf16"),
        (
            &["tune", "--dtype", "f32", "--max", "6"],
            "--max",
            "nearest: 4 B or 8 B",
        ),
        (
            &["explain", "--class", "nvlink", "--bytes", "0"],
            "--bytes",
            "at least one element",
        ),
        (
            &["explain", "--class", "nvlink", "--bytes", "3"],
            "--bytes",
            "bf16",
        ),
        (
            &[
                "explain", "--class", "nvlink", "--bytes", "2", "--dtype", "f32",
            ],
            "--bytes",
            "f32",
        ),
        // Without --class: refused before this machine is probed.
        (&["explain", "--bytes", "3"], "--bytes", "bf16"),
    ] {
        let msg = refused_once(args, flag);
        assert!(msg.contains(says), "{args:?}: {msg}");
    }
    // One element is a message.
    let tmp = tempfile::tempdir().unwrap();
    let o = tpcomm_in(
        tmp.path(),
        &["explain", "--class", "nvlink", "--bytes", "2"],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
}

/// The cores this test may use, as the command counts them.
fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

#[test]
fn more_cpu_ranks_than_cores_warns_once() {
    let cores = cores();
    let tiny = [
        "--min-bytes",
        "1KiB",
        "--max-bytes",
        "1KiB",
        "--iters",
        "2",
        "--warmup",
        "0",
    ];
    let warnings = |ranks: usize, launch: &str| {
        let tmp = tempfile::tempdir().unwrap();
        let ranks = ranks.to_string();
        let mut args = vec![
            "bench", "--device", "cpu", "--ranks", &ranks, "--launch", launch,
        ];
        args.extend(tiny);
        let o = tpcomm_in(tmp.path(), &args);
        let err = text(&o.stderr);
        assert!(o.status.success(), "{args:?}: {err}");
        err.lines()
            .filter(|l| l.contains("warning"))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    if cores < 64 {
        for launch in ["processes", "threads"] {
            let w = warnings(cores + 1, launch);
            assert_eq!(w.len(), 1, "{launch}: {w:?}");
            assert!(
                w[0].contains(&format!("--ranks {}", cores + 1))
                    && w[0].contains(&format!("{cores} core"))
                    && w[0].contains("unrepresentative"),
                "{w:?}"
            );
        }
    }
    if cores >= 2 {
        assert_eq!(warnings(2, "threads"), Vec::<String>::new());
    }
}

#[test]
fn launch_is_spelt_processes_or_threads_in_every_help_and_procs_still_works() {
    let tmp = tempfile::tempdir().unwrap();
    for cmd in [&["bench"][..], &["bench", "forward"], &["tune"]] {
        // The short help lists the values; the long one describes each.
        let short = text(&tpcomm_in(tmp.path(), &[cmd, &["-h"]].concat()).stdout);
        let words: Vec<&str> = short
            .split("--launch <LAUNCH>")
            .nth(1)
            .unwrap_or_default()
            .split_whitespace()
            .collect();
        let words = words.join(" ");
        let values = words
            .split("[possible values: ")
            .nth(1)
            .and_then(|v| v.split(']').next());
        assert_eq!(values, Some("processes, threads"), "{cmd:?}:\n{short}");
        let long = text(&tpcomm_in(tmp.path(), &[cmd, &["--help"]].concat()).stdout);
        let values: Vec<&str> = long
            .split("--launch <LAUNCH>")
            .nth(1)
            .unwrap_or_default()
            .lines()
            .take_while(|l| !l.trim_start().starts_with("--"))
            .filter_map(|l| l.trim_start().strip_prefix("- "))
            .filter_map(|l| l.split(':').next())
            .collect();
        assert_eq!(values, ["processes", "threads"], "{cmd:?}:\n{long}");
    }
    // The alias is parsed (the run stops at a later check instead of at clap).
    for args in [
        &[
            "bench", "--device", "cpu", "--launch", "procs", "--min", "3",
        ][..],
        &[
            "bench", "--device", "gpu", "--launch", "procs", "--min", "3",
        ],
        &["tune", "--launch", "procs", "--min", "3"],
    ] {
        refused_once(args, "--min");
    }
    refused_once(
        &[
            "bench",
            "forward",
            "--launch",
            "procs",
            "--json",
            "/no/such/x.json",
        ],
        "--json",
    );
}

#[test]
fn explain_help_names_every_class_and_transport_any() {
    let tmp = tempfile::tempdir().unwrap();
    let help = text(&tpcomm_in(tmp.path(), &["explain", "--help"]).stdout);
    for class in ["nvlink", "pcie-p2p", "pcie-nop2p", "mixed", "single-gpu"] {
        assert!(help.contains(class), "{class}:\n{help}");
    }
    let transport = help.split("--transport").nth(1).unwrap_or_default();
    assert!(transport.contains("any"), "{help}");
    // And every class named there is one it takes.
    for class in ["nvlink", "pcie-p2p", "pcie-nop2p", "mixed", "single-gpu"] {
        let o = tpcomm_in(
            tmp.path(),
            &[
                "explain",
                "--class",
                class,
                "--bytes",
                "1MiB",
                "--transport",
                "any",
            ],
        );
        assert!(o.status.success(), "{class}: {}", text(&o.stderr));
    }
}

#[test]
fn the_internal_worker_is_never_suggested() {
    let tmp = tempfile::tempdir().unwrap();
    for typo in [
        "gpu-bench",
        "gpu-ben",
        "gpu-bench-wor",
        "gpu-bench-worke",
        "gpu-bench-workers",
        "bench-worker",
    ] {
        let o = tpcomm_in(tmp.path(), &[typo]);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{typo}: {err}");
        // Only the typo itself may say "worker": no suggestion does.
        assert!(
            !err.replace(&format!("'{typo}'"), "").contains("worker"),
            "{typo}: {err}"
        );
    }
    let help = text(&tpcomm_in(tmp.path(), &["--help"]).stdout);
    assert!(!help.contains("worker"), "{help}");
    // The exit statuses are documented there.
    assert!(help.contains("Exit status"), "{help}");
    // The worker itself still parses (and refuses to run without its
    // parent's --worker-rank and --rendezvous).
    let o = tpcomm_in(tmp.path(), &["gpu-bench-worker", "--gpus", "2"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("internal"), "{}", text(&o.stderr));
}
