//! GPU test of `tpcomm bench forward`: a small forward (4 layers) in every
//! mode; with communication every rank's output must be bit-identical, and
//! each tpcomm mode's output close to NCCL's (the bench's stated tolerance).
//! Needs 2+ GPUs with P2P, cuBLAS and NCCL; runs only with TPCOMM_GPU_TESTS=1.
//! The second test runs it over the host transport (no P2P needed); the
//! third runs its ranks as threads (`--launch threads`, one GPU will do).

use std::process::Command;

mod procs;
use procs::tpcomm;

/// Whether TPCOMM_GPU_TESTS asks for the GPU tests (else says they are skipped).
fn gpu_tests_on() -> bool {
    let on = tpcomm::env::GPU_TESTS
        .get_or(false)
        .unwrap_or_else(|e| panic!("{e}"));
    if !on {
        eprintln!("SKIPPED: set TPCOMM_GPU_TESTS=1 to run the GPU tests");
    }
    on
}

/// Runs `tpcomm bench forward` on the tests' small model (4 layers, hidden
/// 2048, MLP 4096, tokens 1, 3 and 16, 3 reps of 2 iterations) with `args`
/// and `envs` added; asserts it succeeded and returns its stdout and JSON.
fn forward(envs: &[(&str, &str)], args: &[&str]) -> (String, serde_json::Value) {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("forward.json");
    let out = Command::new(tpcomm())
        .envs(envs.iter().copied())
        .args(["bench", "forward"])
        .args(args)
        .args(["--layers", "4", "--hidden", "2048", "--mlp", "4096"])
        .args(["--tokens", "1,3,16", "--reps", "3", "--iters", "2"])
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "bench forward {} failed:\n{stdout}\n{stderr}",
        args.join(" ")
    );
    let doc = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    (stdout, doc)
}

#[test]
#[ignore = "needs 2+ GPUs, cuBLAS and NCCL; run with TPCOMM_GPU_TESTS=1 --ignored"]
fn forward_outputs_are_identical_across_ranks_and_match_nccl() {
    if !gpu_tests_on() {
        return;
    }
    let (stdout, doc) = forward(&[], &[]);
    let rows = doc["rows"].as_array().unwrap();
    let modes = [
        "none",
        "nccl",
        "one-shot",
        "one-shot-pdl",
        "two-shot",
        "fused",
        "fused-pdl",
        "none-pdl",
    ];
    assert_eq!(rows.len(), 3 * modes.len(), "{stdout}");
    let tol = doc["meta"]["tolerance_vs_nccl"].as_f64().unwrap();
    for r in rows {
        let mode = r["mode"].as_str().unwrap();
        assert!(modes.contains(&mode), "{r}");
        assert!(r["forward_us"].as_f64().unwrap() > 0.0);
        if mode.starts_with("none") {
            continue;
        }
        assert_eq!(r["ranks_identical"], serde_json::Value::Bool(true), "{r}");
        if mode != "nccl" {
            let d = r["rel_diff_vs_nccl"].as_f64().unwrap();
            assert!(d <= tol, "{mode}: {d} from NCCL's output (tolerance {tol})");
        }
    }
}

/// `--transport host` with NCCL_P2P_DISABLE=1: the default modes less the
/// fused two, tpcomm's rows named for the host kernels, every rank's output
/// identical and close to NCCL's.
#[test]
#[ignore = "needs 2+ GPUs, cuBLAS and NCCL; run with TPCOMM_GPU_TESTS=1 --ignored"]
fn forward_over_the_host_transport_matches_nccl_without_p2p() {
    if !gpu_tests_on() {
        return;
    }
    let (stdout, doc) = forward(&[("NCCL_P2P_DISABLE", "1")], &["--transport", "host"]);
    assert!(stdout.contains("tpcomm transport host"), "{stdout}");
    assert!(stdout.contains("not run: fused, fused-pdl"), "{stdout}");
    assert_eq!(doc["meta"]["transport"], "host");
    assert_eq!(doc["meta"]["nccl_p2p_disable"], "1");
    assert_eq!(
        doc["meta"]["modes_skipped"],
        serde_json::json!(["fused", "fused-pdl"])
    );
    let rows = doc["rows"].as_array().unwrap();
    let modes = [
        "none",
        "nccl",
        "one-shot",
        "one-shot-pdl",
        "two-shot",
        "none-pdl",
    ];
    assert_eq!(rows.len(), 3 * modes.len(), "{stdout}");
    let tol = doc["meta"]["tolerance_vs_nccl"].as_f64().unwrap();
    for r in rows {
        let mode = r["mode"].as_str().unwrap();
        assert!(modes.contains(&mode), "{r}");
        assert!(r["forward_us"].as_f64().unwrap() > 0.0);
        if mode.starts_with("none") {
            continue;
        }
        assert_eq!(r["ranks_identical"], serde_json::Value::Bool(true), "{r}");
        if mode != "nccl" {
            let kernel = r["kernel"].as_str().unwrap_or_default();
            assert!(kernel.starts_with("host-"), "{r}");
            if mode == "two-shot" {
                assert_eq!(kernel, "host-chunked", "{r}");
            }
            let d = r["rel_diff_vs_nccl"].as_f64().unwrap();
            assert!(d <= tol, "{mode}: {d} from NCCL's output (tolerance {tol})");
        }
    }
}

/// `--launch threads`: two ranks as threads of one process (on one GPU they
/// share it and nccl is left out; on two, NCCL runs in the threads too),
/// every rank's output identical, tpcomm's close to NCCL's where it ran.
#[test]
#[ignore = "needs a GPU and cuBLAS; run with TPCOMM_GPU_TESTS=1 --ignored"]
fn forward_ranks_as_threads_agree() {
    if !gpu_tests_on() {
        return;
    }
    let (stdout, doc) = forward(&[], &["--launch", "threads", "--ranks", "2"]);
    assert!(stdout.contains("ranks as threads"), "{stdout}");
    assert_eq!(doc["meta"]["launch"], "threads");
    let rows = doc["rows"].as_array().unwrap();
    assert!(!rows.is_empty(), "{stdout}");
    let nccl_ran = rows.iter().any(|r| r["mode"] == "nccl");
    let tol = doc["meta"]["tolerance_vs_nccl"].as_f64().unwrap();
    for r in rows {
        let mode = r["mode"].as_str().unwrap();
        assert!(r["forward_us"].as_f64().unwrap() > 0.0);
        if mode.starts_with("none") {
            continue;
        }
        assert_eq!(r["ranks_identical"], serde_json::Value::Bool(true), "{r}");
        if nccl_ran && mode != "nccl" {
            let d = r["rel_diff_vs_nccl"].as_f64().unwrap();
            assert!(d <= tol, "{mode}: {d} from NCCL's output (tolerance {tol})");
        }
    }
}
