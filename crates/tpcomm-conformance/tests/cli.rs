//! The suite's command line without a GPU: the pattern list, the supervision of hanging,
//! crashing and failing cases (hidden self-tests that need neither a GPU nor the drop-in),
//! and a clear refusal when there is no CUDA driver.

use std::process::Command;
use std::time::{Duration, Instant};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tpcomm-conformance"))
}

fn run(args: &[&str]) -> (i32, String, String) {
    let o = bin().args(args).output().expect("the suite runs");
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into(),
        String::from_utf8_lossy(&o.stderr).into(),
    )
}

#[test]
fn list_prints_every_pattern_and_hides_the_self_tests() {
    let (code, out, _) = run(&["--list"]);
    assert_eq!(code, 0);
    for name in [
        "create.group-initrankconfig",
        "allreduce.fp8e4m3",
        "reducescatter.bf16",
        "sendrecv.alltoall",
        "bad.mismatch-op",
        "syncwork.sweep",
    ] {
        assert!(
            out.lines().any(|l| l.starts_with(name)),
            "{name} missing from --list:\n{out}"
        );
    }
    assert!(!out.contains("selftest"));
    let (_, only, _) = run(&["--list", "--only", "reduce.*"]);
    assert_eq!(only.lines().count(), 12, "{only}");
}

#[test]
fn hang_crash_and_fail_are_recorded_and_the_run_goes_on() {
    let start = Instant::now();
    let (code, out, _) = run(&[
        "--only",
        "selftest.*",
        "--worlds",
        "1,2",
        "--case-timeout",
        "1",
    ]);
    assert_eq!(code, 1, "{out}");
    for (status, case) in [
        ("HANG", "selftest.hang"),
        ("CRASH", "selftest.crash"),
        ("FAIL", "selftest.fail"),
        ("PASS", "selftest.pass"),
    ] {
        for mode in ["threads", "procs"] {
            let want = format!("{status} {case} world=2 mode={mode}");
            assert!(out.contains(&want), "no `{want}` in:\n{out}");
        }
    }
    assert!(
        out.contains("total 16 cases: PASS 4, FAIL 4, HANG 4, CRASH 4, SKIP 0"),
        "{out}"
    );
    // Four hangs of 1 s each, not the self-test's hour.
    assert!(start.elapsed() < Duration::from_secs(60));
}

#[test]
fn a_passing_run_exits_zero_and_the_budget_skips() {
    let (code, out, _) = run(&["--only", "selftest.pass", "--worlds", "1,2,3"]);
    assert_eq!(code, 0, "{out}");
    let (code, out, _) = run(&[
        "--only",
        "selftest.pass,selftest.fail",
        "--budget",
        "0",
        "--modes",
        "threads",
    ]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("SKIP selftest.fail world=1 mode=threads budget"),
        "{out}"
    );
}

#[test]
fn without_a_cuda_driver_it_says_so_and_fails() {
    let has_driver = [
        "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
        "/usr/lib64/libcuda.so.1",
        "/usr/lib/wsl/lib/libcuda.so.1",
    ]
    .iter()
    .any(|p| std::path::Path::new(p).exists());
    if has_driver {
        eprintln!("a CUDA driver is installed here; the no-driver message cannot be shown");
        return;
    }
    let (code, out, err) = run(&["--only", "queries", "--worlds", "1"]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("no CUDA driver"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}
