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
    // --device cpu: these are CPU-rank tests, also on a machine with GPUs.
    let mut args = vec![
        "bench",
        "--device",
        "cpu",
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
        (vec!["bench", "--device", "cpu", "--ranks", "0"], "--ranks"),
        (
            vec![
                "bench",
                "--device",
                "cpu",
                "--min-bytes",
                "2MiB",
                "--max-bytes",
                "1MiB",
            ],
            "--min-bytes",
        ),
        (vec!["bench", "--dtype", "int8"], "int8"),
        (vec!["bench", "--max-bytes", "lots"], "lots"),
        (vec!["bench", "--timeout", "0"], "duration"),
        (
            vec!["bench", "--device", "cpu", "--algo", "three-shot"],
            "three-shot",
        ),
        (vec!["bench", "--device", "cpu", "--iters", "0"], "--iters"),
    ] {
        let out = tpcomm(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

/// Whether this machine has an NVIDIA GPU (then `--device auto` picks GPUs,
/// and the tests of what happens without one do not apply).
fn has_nvidia_gpu() -> bool {
    std::path::Path::new("/dev/nvidiactl").exists()
}

fn root() -> &'static std::path::Path {
    std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// The CPU JSON keeps its shape; the only addition is `device`, and none of
/// the GPU-only meta fields appear.
#[test]
fn cpu_json_says_device_cpu_and_has_no_gpu_fields() {
    let v = run_and_read_json(&["--ranks", "2", "--algo", "one-shot"]);
    let meta = v["meta"].as_object().unwrap();
    let keys: Vec<&str> = meta.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "cores",
            "date",
            "device",
            "launch",
            "machine",
            "transport",
            "versions",
            "world_size"
        ]
    );
    assert_eq!(meta["device"], "cpu");
    let row = v["rows"][0].as_object().unwrap();
    let keys: Vec<&str> = row.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "algbw_gbps",
            "algo",
            "busbw_gbps",
            "bytes",
            "count",
            "dtype",
            "mode",
            "op",
            "time_us",
            "wrong"
        ]
    );
}

/// The GPU bench's spellings (`--launch procs`, `--min/--max`, `--algos`,
/// `--timeout-ms`) run CPU ranks too.
#[test]
fn gpu_bench_spellings_run_cpu_ranks_when_there_is_no_gpu() {
    if has_nvidia_gpu() {
        eprintln!("SKIPPED: this test is for machines without GPUs");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("out.json");
    let out = tpcomm(&[
        "bench",
        "--launch",
        "procs",
        "--min",
        "1KiB",
        "--max",
        "4KiB",
        "--algos",
        "two-shot",
        "--iters",
        "5",
        "--timeout-ms",
        "10000",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
    assert_eq!(v["meta"]["launch"], "processes");
    assert_eq!(v["meta"]["device"], "cpu");
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 3);
    assert!(rows
        .iter()
        .all(|r| r["algo"] == "two-shot" && r["wrong"] == 0));
}

/// No GPU on the test machine: asking for GPUs fails with a message that
/// says what is missing, never a panic; GPU-only options under auto say why
/// the run is on CPU ranks.
#[test]
fn gpu_requests_without_a_gpu_fail_cleanly() {
    if has_nvidia_gpu() {
        eprintln!("SKIPPED: this test is for machines without GPUs");
        return;
    }
    for (args, needle) in [
        (vec!["bench", "--device", "gpu"], "CUDA"),
        (
            vec!["bench", "--gpus", "2"],
            "--device auto chose CPU ranks",
        ),
        (vec!["bench", "--transport", "host"], "--transport"),
        // --ranks counts GPU ranks too: the GPU bench runs and finds no driver.
        (vec!["bench", "--device", "gpu", "--ranks", "2"], "CUDA"),
        (
            vec!["bench", "--device", "gpu", "--ranks", "2", "--gpus", "2"],
            "--gpus",
        ),
        (vec!["bench", "forward", "--tokens", "1"], "CUDA"),
    ] {
        let out = tpcomm(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

/// The old spellings `gpu-bench` and `forward-bench` are gone; the GPU
/// bench's internal worker command is hidden and refuses to run a bench.
#[test]
fn the_old_spellings_are_gone_and_the_public_ones_check_their_options() {
    let help = tpcomm(&["--help"]);
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(
        text.contains("bench") && !text.contains("gpu-bench"),
        "{text}"
    );
    for old in ["gpu-bench", "forward-bench"] {
        let out = tpcomm(&[old, "--help"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains("unrecognized subcommand"),
            "{old}: {err}"
        );
    }
    let out = tpcomm(&["gpu-bench-worker", "--gpus", "2"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("tpcomm bench --device gpu"), "{err}");
    let help = tpcomm(&["bench", "--help"]);
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(
        text.contains("forward") && text.contains("--device") && text.contains("--transport"),
        "{text}"
    );
    for (args, needle) in [
        (vec!["bench", "--device", "gpu", "--modes", "lazy"], "lazy"),
        (vec!["bench", "forward", "--modes", "fast"], "fast"),
    ] {
        let out = tpcomm(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(needle),
            "{args:?}: {err}"
        );
    }
}

/// `tpcomm tune --from-bench` reads the new JSON shape (here the committed
/// gpu-bench measurement rewritten into it) to the same table as the old,
/// and refuses a CPU run.
#[test]
fn tune_from_bench_reads_old_and_new_shapes_alike_and_refuses_cpu_runs() {
    let dir = tempfile::tempdir().unwrap();
    let old_path =
        root().join("crates/tpcomm/src/select/testdata/2026-11-30-h200x2-v4-gpu-bench-procs.json");
    let old: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&old_path).unwrap()).unwrap();
    let m = &old["meta"];
    let mut rows = old["rows"].clone();
    for r in rows.as_array_mut().unwrap() {
        r["op"] = "sum".into();
    }
    let new = serde_json::json!({
        "meta": {
            "machine": {"hostname": "vm", "cpu_model": "unknown"},
            "cores": 16, "date": "2026-11-30T00:00:00Z",
            "versions": {"tpcomm": "0.1.0", "driver": m["driver"], "nvrtc": m["nvrtc"], "nccl": m["nccl"]},
            "transport": m["transport"], "world_size": m["world"], "launch": "processes",
            "device": "gpu", "gpus": m["gpus"], "arch": m["arch"], "iters": m["iters"],
            "reps": m["reps"], "rotate": m["rotate"], "timing": m["timing"],
        },
        "rows": rows,
    });
    let new_path = dir.path().join("new.json");
    std::fs::write(&new_path, serde_json::to_string(&new).unwrap()).unwrap();
    let table = |bench: &std::path::Path, name: &str| {
        let out = dir.path().join(name);
        let o = tpcomm(&[
            "tune",
            "--from-bench",
            bench.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        std::fs::read_to_string(out).unwrap()
    };
    let (a, b) = (table(&old_path, "old.toml"), table(&new_path, "new.toml"));
    let measured = |t: &str| {
        t.lines()
            .find(|l| l.starts_with("measured"))
            .unwrap()
            .to_string()
    };
    assert!(
        measured(&a).contains("tpcomm gpu-bench --launch procs"),
        "{a}"
    );
    assert!(
        measured(&b).contains("tpcomm bench --device gpu --launch processes"),
        "{b}"
    );
    let body = |t: &str| {
        t.lines()
            .filter(|l| !l.starts_with("measured"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(body(&a), body(&b));
    assert!(
        b.contains("driver = \"13.0\"") && b.contains("2.28.3"),
        "{b}"
    );

    let cpu = run_and_read_json(&["--algo", "one-shot"]);
    let cpu_path = dir.path().join("cpu.json");
    std::fs::write(&cpu_path, cpu.to_string()).unwrap();
    let o = tpcomm(&[
        "tune",
        "--from-bench",
        cpu_path.to_str().unwrap(),
        "--out",
        "-",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("CPU ranks"), "{err}");
}

/// `--transport host` refuses the fused modes (they need P2P) before it
/// looks for a GPU, so this holds on any machine; the help names the
/// option.
#[test]
fn forward_refuses_fused_modes_on_the_host_transport() {
    for spelling in [&["bench", "forward"][..]] {
        let mut help = spelling.to_vec();
        help.push("--help");
        let text = String::from_utf8_lossy(&tpcomm(&help).stdout).to_string();
        assert!(text.contains("--transport"), "{spelling:?}: {text}");
        for modes in ["none,fused", "fused-pdl,nccl"] {
            let mut args = spelling.to_vec();
            args.extend(["--transport", "host", "--modes", modes]);
            let out = tpcomm(&args);
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "{args:?} succeeded");
            assert!(
                err.contains("cannot run on the host transport") && err.contains("P2P"),
                "{args:?}: {err}"
            );
            assert!(!err.contains("panicked"), "{args:?}: {err}");
        }
        let mut args = spelling.to_vec();
        args.extend(["--transport", "pcie"]);
        let out = tpcomm(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains("pcie"), "{err}");
    }
}

/// The quantized modes are in the help (with their group) and a quantized
/// mode with no exact tpcomm mode before it is refused before any GPU is
/// looked for, so this holds on any machine.
#[test]
fn forward_refuses_a_quantized_mode_with_no_exact_mode_before_it() {
    let help = tpcomm(&["bench", "forward", "--help"]);
    let text = String::from_utf8_lossy(&help.stdout).to_string();
    assert!(
        text.contains("int8") && text.contains("fp8") && text.contains("group of 64"),
        "{text}"
    );
    for (modes, fix) in [
        ("int8", "--modes one-shot,int8"),
        ("none,nccl,fp8", "--modes none,nccl,one-shot,fp8"),
    ] {
        let out = tpcomm(&["bench", "forward", "--modes", modes]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{modes} succeeded");
        assert!(err.contains(fix), "{modes}: {err}");
        assert!(
            !err.contains("CUDA") && !err.contains("panicked"),
            "{modes}: {err}"
        );
    }
}
