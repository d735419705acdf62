//! `tpcomm plan` end to end: JSON output parses and errors exit non-zero
//! with a message that names the problem.

use std::process::Command;

fn tpcomm(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tpcomm"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn memory_json() {
    let (code, out, err) = tpcomm(&[
        "plan",
        "memory",
        "--model",
        "deepseek-v3",
        "--machine",
        "h200x2-nvlink",
        "--gpu",
        "b200",
        "--tp",
        "8",
        "--weights",
        "fp8",
        "--draft",
        "deepseek-v3-mtp",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["tp"], 8);
    assert!(v["plan"]["kv_tokens"].as_u64().unwrap() > 0);
    // MLA latent replicated: 61 layers x 576 x 2 bytes per token on every rank.
    assert_eq!(v["plan"]["kv_per_token_target"], 61 * 576 * 2);
    assert_eq!(v["plan"]["kv_per_token_draft"], 576 * 2);
}

#[test]
fn spec_json_and_flat_latency() {
    let (code, out, err) = tpcomm(&[
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
        "--allreduce-us",
        "200",
        "--plain-allreduce-us",
        "20",
        "--calibrate-tok-s",
        "89.5",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let plain = v["plan"]["plain"]["tok_s"].as_f64().unwrap();
    assert!((plain - 89.5).abs() < 1e-9);
    let best = v["plan"]["best"].as_u64().unwrap() as usize;
    let s = &v["plan"]["settings"][best];
    assert!(s["tok_s"].as_f64().unwrap() < plain);
    assert_eq!(s["break_even"]["kind"], "at");
    assert!(s["break_even"]["mean_us"].as_f64().unwrap() < 200.0);
}

#[test]
fn bad_inputs_exit_with_a_message() {
    let (code, _, err) = tpcomm(&["plan", "memory", "--model", "gpt-7", "--gpu", "h100-sxm"]);
    assert_ne!(code, 0);
    assert!(err.contains("no model named \"gpt-7\""), "{err}");

    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("config.json");
    std::fs::write(&cfg, "{ not json").unwrap();
    let (code, _, err) = tpcomm(&[
        "plan",
        "memory",
        "--config",
        cfg.to_str().unwrap(),
        "--gpu",
        "h100-sxm",
    ]);
    assert_ne!(code, 0);
    assert!(err.contains("not valid JSON"), "{err}");

    let (code, _, err) = tpcomm(&[
        "plan",
        "memory",
        "--model",
        "llama-3.1-70b",
        "--gpu",
        "rtx-4090",
        "--tp",
        "1",
    ]);
    assert_ne!(code, 0);
    assert!(
        err.contains("target weights") && err.contains("short by"),
        "{err}"
    );

    let (code, _, err) = tpcomm(&[
        "plan",
        "spec",
        "--model",
        "llama-3.1-8b",
        "--gpu",
        "h100-sxm",
        "--draft",
        "llama-3.1-8b-eagle3",
        "--tp",
        "2",
    ]);
    assert_ne!(code, 0);
    assert!(err.contains("--allreduce-us"), "{err}");

    let (code, _, err) = tpcomm(&["plan", "list", "--catalog", "/nonexistent"]);
    assert_ne!(code, 0);
    assert!(err.contains("/nonexistent"), "{err}");
}

/// A bench JSON file as the cycle's latency table, a config.json as the
/// model, and plots written to a directory.
#[test]
fn spec_from_bench_file_config_and_plots() {
    let dir = tempfile::tempdir().unwrap();
    let bench = dir.path().join("bench.json");
    std::fs::write(
        &bench,
        r#"{"meta": {}, "rows": [
          {"bytes": 1024, "dtype": "bf16", "algo": "oneshot", "mode": "graph", "time_us": 4.0},
          {"bytes": 1048576, "dtype": "bf16", "algo": "oneshot", "mode": "graph", "time_us": 12.0},
          {"bytes": 1024, "dtype": "bf16", "algo": "nccl", "mode": "graph", "time_us": 20.0}]}"#,
    )
    .unwrap();
    let cfg = dir.path().join("config.json");
    std::fs::write(
        &cfg,
        r#"{"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
            "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
            "vocab_size": 128256}"#,
    )
    .unwrap();
    let plots = dir.path().join("plots");
    let (code, out, err) = tpcomm(&[
        "plan",
        "spec",
        "--config",
        cfg.to_str().unwrap(),
        "--gpu",
        "h100-sxm",
        "--tp",
        "2",
        "--draft",
        "llama-3.1-8b-eagle3",
        "--bench",
        bench.to_str().unwrap(),
        "--algo",
        "oneshot",
        "--mode",
        "graph",
        "--overhead-us",
        "10",
        "--plot",
        plots.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("best:"), "{out}");
    assert!(plots.join("latency.png").exists() && plots.join("cycle.png").exists());

    // Filtering down to nothing is an error that lists what the file has.
    let (code, _, err) = tpcomm(&[
        "plan",
        "spec",
        "--model",
        "llama-3.1-8b",
        "--gpu",
        "h100-sxm",
        "--draft",
        "llama-3.1-8b-eagle3",
        "--bench",
        bench.to_str().unwrap(),
        "--algo",
        "twoshot",
    ]);
    assert_ne!(code, 0);
    assert!(
        err.contains("no row matches") && err.contains("algo=oneshot"),
        "{err}"
    );
}

/// `plan spec` cannot run without a draft, and says so in its usage line.
#[test]
fn spec_usage_shows_draft_is_required() {
    let (code, out, _) = tpcomm(&["plan", "spec", "--help"]);
    assert_eq!(code, 0);
    let usage = out.lines().find(|l| l.starts_with("Usage:")).unwrap_or("");
    assert!(usage.contains("--draft <DRAFT>"), "{usage}");
    let (code, _, err) = tpcomm(&[
        "plan",
        "spec",
        "--model",
        "llama-3.1-8b",
        "--gpu",
        "h100-sxm",
    ]);
    assert_ne!(code, 0);
    assert!(err.contains("--draft"), "{err}");
}

/// Numbers near 2^64 and absurd latencies are errors, never a
/// wrapped figure or NaN.
#[test]
fn huge_numbers_are_errors() {
    let spec = |extra: &[&str]| {
        let mut a = vec![
            "plan",
            "spec",
            "--model",
            "llama-3.1-8b",
            "--gpu",
            "h100-sxm",
            "--tp",
            "2",
            "--draft",
            "llama-3.1-8b-eagle3",
        ];
        a.extend_from_slice(extra);
        tpcomm(&a)
    };
    let (code, out, err) = spec(&["--allreduce-us", "1e308"]);
    assert_ne!(code, 0, "{out}");
    assert!(
        err.contains("--allreduce-us") && !out.contains("NaN"),
        "{err}"
    );
    // The per-layer overhead, given or fitted, is bounded as a latency is:
    // 1e308 us per layer printed "inf us" and a NaN speed-up.
    for (flag, value) in [
        ("--overhead-us", "1e308"),
        ("--overhead-us", "1e10"),
        ("--calibrate-tok-s", "1e-300"),
    ] {
        let (code, out, err) = spec(&["--allreduce-us", "5", flag, value]);
        assert_eq!(code, 2, "{flag} {value}: {out}");
        assert!(
            err.contains(flag) && !out.contains("NaN") && !out.contains("inf"),
            "{flag} {value}: {err}"
        );
    }
    let (code, _, err) = spec(&["--allreduce-us", "5", "--context", "18446744073709551615"]);
    assert_ne!(code, 0);
    assert!(err.contains("--context"), "{err}");
    for flag in ["--max-batch-tokens", "--logit-rows"] {
        let (code, out, err) = tpcomm(&[
            "plan",
            "memory",
            "--model",
            "llama-3.1-8b",
            "--gpu",
            "h200-sxm",
            flag,
            "18446744073709551615",
        ]);
        assert_ne!(code, 0, "{flag}: {out}");
        assert!(err.contains("64-bit"), "{flag}: {err}");
    }
    // Zero would leave buffers or activations out of the plan without a word.
    for flag in ["--max-batch-tokens", "--logit-rows", "--nccl-channels"] {
        let (code, out, err) = tpcomm(&[
            "plan",
            "memory",
            "--model",
            "llama-3.1-8b",
            "--gpu",
            "h200-sxm",
            flag,
            "0",
        ]);
        assert_ne!(code, 0, "{flag} 0: {out}");
        assert!(err.contains(flag), "{flag} 0: {err}");
    }
}

/// GPU memory comes from the catalog's nvidia-smi MiB, or from a probe file.
#[test]
fn gpu_memory_from_catalog_or_probe() {
    let (code, out, err) = tpcomm(&[
        "plan",
        "memory",
        "--model",
        "llama-3.1-8b",
        "--gpu",
        "h200-sxm",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        v["plan"]["gpu_memory"].as_u64(),
        Some(143_771 << 20),
        "{out}"
    );

    let probe = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../bench/results/2026-11-30-h200x2-first-runs/probe.json"
    );
    let (code, out, err) = tpcomm(&[
        "plan",
        "memory",
        "--model",
        "llama-3.1-8b",
        "--gpu",
        "h200-sxm",
        "--from-probe",
        probe,
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("139.8 GiB") && out.contains("GPU memory: from"),
        "{out}"
    );
}

/// "1 draft step", not "1 draft steps"; TP 1 needs no latency.
#[test]
fn one_step_is_singular_and_tp1_needs_no_latency() {
    let (code, out, err) = tpcomm(&[
        "plan",
        "spec",
        "--model",
        "llama-3.1-8b",
        "--gpu",
        "h100-sxm",
        "--draft",
        "llama-3.1-8b-eagle3",
        "--max-steps",
        "1",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("1 draft step,") && !out.contains("1 draft steps"),
        "{out}"
    );
    assert!(out.contains("no all-reduces"), "{out}");
    // Asking for more steps than the draft has rates is said, not hidden.
    let (code, out, err) = tpcomm(&[
        "plan",
        "spec",
        "--model",
        "llama-3.1-8b",
        "--gpu",
        "h100-sxm",
        "--draft",
        "llama-3.1-8b-eagle3",
        "--max-steps",
        "10",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("--max-steps 10") && out.contains("tried 1 to 7"),
        "{out}"
    );
}

/// `--tree` adds a tree setting beside the chains; a bad one is refused.
#[test]
fn trees_from_the_command_line() {
    let base = [
        "plan",
        "spec",
        "--model",
        "llama-3.1-8b",
        "--gpu",
        "h100-sxm",
        "--draft",
        "llama-3.1-8b-eagle3",
        "--json",
        "--tree",
    ];
    let mut a = base.to_vec();
    a.push("5,4,8,3.5");
    let (code, out, err) = tpcomm(&a);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let settings = v["plan"]["settings"].as_array().unwrap();
    let t = settings.last().unwrap();
    assert_eq!(t["which"]["kind"], "tree", "{t}");
    assert_eq!(
        (t["topk"].as_u64(), t["verify_tokens"].as_u64()),
        (Some(4), Some(8))
    );
    let mut a = base.to_vec();
    a.push("5,4,99,3.5");
    let (code, _, err) = tpcomm(&a);
    assert_ne!(code, 0);
    assert!(err.contains("draft_tokens 99"), "{err}");
}
