//! Options a newcomer gets wrong: each is refused with a message that names
//! the option and says what it takes, and the CPU bench says what it checked.

use std::process::{Command, Output};

fn tpcomm(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tpcomm"))
        .args(args)
        .output()
        .unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Whether this machine has an NVIDIA GPU (then `--device auto` picks GPUs).
fn has_nvidia_gpu() -> bool {
    std::path::Path::new("/dev/nvidiactl").exists()
}

#[test]
fn explain_refuses_worlds_outside_2_to_max_world() {
    let max = tpcomm::transport::MAX_WORLD;
    for bad in ["0".to_string(), "1".to_string(), (max + 1).to_string()] {
        let o = tpcomm(&[
            "explain", "--class", "nvlink", "--bytes", "1MiB", "--world", &bad,
        ]);
        let err = stderr(&o);
        assert!(!o.status.success(), "--world {bad} succeeded");
        assert!(
            err.contains("--world") && err.contains(&format!("2..={max}")),
            "--world {bad}: {err}"
        );
    }
    for good in ["2".to_string(), max.to_string()] {
        let o = tpcomm(&[
            "explain", "--class", "nvlink", "--bytes", "1MiB", "--world", &good,
        ]);
        assert!(o.status.success(), "--world {good}: {}", stderr(&o));
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(out.contains(&format!("{good} ranks")), "{out}");
    }
}

#[test]
fn cpu_bench_needs_at_least_two_ranks() {
    for bad in ["0", "1", "65"] {
        let o = tpcomm(&["bench", "--device", "cpu", "--ranks", bad]);
        let err = stderr(&o);
        assert!(!o.status.success(), "--ranks {bad} succeeded");
        assert!(
            err.contains("--ranks") && err.contains("at least 2"),
            "--ranks {bad}: {err}"
        );
    }
}

#[test]
fn a_misspelt_algorithm_gets_the_list_of_valid_ones() {
    let o = tpcomm(&["bench", "--device", "cpu", "--algo", "three-shot"]);
    let err = stderr(&o);
    assert!(!o.status.success());
    for v in ["three-shot", "auto", "one-shot", "two-shot", "all"] {
        assert!(err.contains(v), "CPU bench, {v} missing: {err}");
    }
    // The GPU list is given before any GPU is looked for.
    let o = tpcomm(&["bench", "--device", "gpu", "--algos", "ring"]);
    let err = stderr(&o);
    assert!(!o.status.success());
    for v in [
        "ring",
        "one-shot",
        "two-shot",
        "one-shot-pdl",
        "nccl",
        "all",
    ] {
        assert!(err.contains(v), "GPU bench, {v} missing: {err}");
    }
}

/// Quantized wires are GPU bench rows (docs/quantized.md): the front end's
/// name check lets them through to the GPU bench, and refuses a bad group
/// naming the groups there are.
#[test]
fn quantized_wires_pass_the_gpu_bench_name_check_and_a_bad_group_is_refused() {
    let o = tpcomm(&[
        "bench",
        "--device",
        "gpu",
        "--algos",
        "one-shot,int8,fp8/128",
    ]);
    let err = stderr(&o);
    assert!(!err.contains("invalid --algos"), "{err}");
    let o = tpcomm(&["bench", "--device", "gpu", "--algos", "int8/48"]);
    let err = stderr(&o);
    assert!(!o.status.success());
    assert!(
        err.contains("int8/48") && err.contains("32 to 128"),
        "{err}"
    );
}

#[test]
fn cpu_bench_ends_with_what_it_checked() {
    let o = tpcomm(&[
        "bench",
        "--device",
        "cpu",
        "--launch",
        "threads",
        "--min-bytes",
        "1KiB",
        "--max-bytes",
        "4KiB",
        "--iters",
        "5",
        "--warmup",
        "1",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    let last = out.lines().last().unwrap_or("");
    // 1, 2 and 4 KiB, one-shot and two-shot: 6 all-reduces; 2 ranks of
    // 256 + 512 + 1024 f32 each, twice.
    assert_eq!(
        last,
        "# checked 6 all-reduces (3 sizes x 2 algorithm(s), 2 ranks, f32 sum) against a float64 reference: 0 of 7168 output elements wrong",
        "{out}"
    );
}

/// Without a GPU the main job says in one line that it runs on CPU ranks,
/// not that a driver is missing.
#[test]
fn without_a_gpu_the_default_bench_says_it_runs_on_cpu() {
    if has_nvidia_gpu() {
        eprintln!("SKIPPED: this test is for machines without GPUs");
        return;
    }
    let o = tpcomm(&[
        "bench",
        "--launch",
        "threads",
        "--min-bytes",
        "1KiB",
        "--max-bytes",
        "1KiB",
        "--iters",
        "2",
    ]);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("no GPU found, so running the CPU all-reduce"),
        "{err}"
    );
    assert!(!err.to_lowercase().contains("install"), "{err}");
    assert!(!err.contains("libcuda"), "{err}");
}
