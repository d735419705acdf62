//! `tpcomm bench` end to end: both launch modes, the JSON it writes, and the
//! errors it gives for bad options.

use std::process::Command;

fn tpcomm(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tpcomm"))
        .args(args)
        .output()
        .unwrap()
}

fn run_and_read_json(extra: &[&str]) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("out.json");
    let mut args = vec![
        "bench",
        "--min-bytes",
        "1KiB",
        "--max-bytes",
        "64KiB",
        "--iters",
        "20",
        "--warmup",
        "2",
    ];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--json", json.to_str().unwrap()]);
    let out = tpcomm(&args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("busbw") && stdout.contains("#wrong"),
        "{stdout}"
    );
    serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap()
}

#[test]
fn bench_in_processes_writes_checked_rows_and_machine_meta() {
    let v = run_and_read_json(&["--ranks", "2", "--dtype", "bf16"]);
    assert_eq!(v["meta"]["transport"], "host");
    assert_eq!(v["meta"]["world_size"], 2);
    assert_eq!(v["meta"]["launch"], "processes");
    assert!(v["meta"]["cores"].as_u64().unwrap() >= 1);
    let rows = v["rows"].as_array().unwrap();
    // 1 KiB .. 64 KiB is 7 sizes, two algorithms each.
    assert_eq!(rows.len(), 14);
    for r in rows {
        assert_eq!(r["wrong"], 0);
        assert_eq!(r["mode"], "eager");
        assert_eq!(r["dtype"], "bf16");
        assert!(r["time_us"].as_f64().unwrap() > 0.0);
        let (alg, bus) = (
            r["algbw_gbps"].as_f64().unwrap(),
            r["busbw_gbps"].as_f64().unwrap(),
        );
        assert!((bus - alg).abs() < 1e-9, "2 ranks: busbw == algbw");
    }
}

#[test]
fn bench_with_four_ranks_as_threads() {
    let v = run_and_read_json(&[
        "--ranks", "4", "--launch", "threads", "--algo", "auto", "--op", "max",
    ]);
    assert_eq!(v["meta"]["launch"], "threads");
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 7);
    assert!(rows.iter().all(|r| r["wrong"] == 0 && r["op"] == "max"));
}

#[test]
fn bad_options_fail_with_a_message_naming_the_option() {
    for (args, needle) in [
        (vec!["bench", "--ranks", "0"], "--ranks"),
        (
            vec!["bench", "--min-bytes", "2MiB", "--max-bytes", "1MiB"],
            "--min-bytes",
        ),
        (vec!["bench", "--dtype", "int8"], "int8"),
        (vec!["bench", "--max-bytes", "lots"], "lots"),
        (vec!["bench", "--timeout", "0"], "duration"),
        (vec!["bench", "--algo", "three-shot"], "three-shot"),
        (vec!["bench", "--iters", "0"], "--iters"),
    ] {
        let out = tpcomm(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}
