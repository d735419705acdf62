//! `tpcomm explain` and `tpcomm tune --from-bench` as a user runs them, with no GPU.

use std::path::Path;
use std::process::Command;

fn tpcomm() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tpcomm"))
}

fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

const FIXTURE: &str = r#"format = 1
fingerprint = "v1-00000000000000aa"
machine_class = "nvlink"
world = 2
gpu = "Test GPU"
driver = "13.0"
nccl = "2.28.3"
measured = "by hand"
rows = [
  { dtype = "bf16", mode = "graph", bytes = 1024, times_us = { "cuda:one-shot" = 3.0, "cuda:two-shot" = 5.0, "nccl" = 7.0 } },
  { dtype = "bf16", mode = "graph", bytes = 4096, times_us = { "cuda:one-shot" = 10.0, "cuda:two-shot" = 6.0, "nccl" = 8.0 } },
  { dtype = "bf16", mode = "eager", bytes = 1024, times_us = { "cuda:one-shot" = 6.0, "nccl" = 5.0 } },
]
"#;

fn run(args: &[&str]) -> (bool, String, String) {
    let out = tpcomm().args(args).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn explain_on_a_table_shows_choice_row_and_alternatives() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("t.toml");
    std::fs::write(&p, FIXTURE).unwrap();
    let t = p.to_str().unwrap();
    let (ok, out, err) = run(&["explain", "--table", t, "--bytes", "4KiB", "--graph"]);
    assert!(ok, "{err}");
    assert!(
        out.contains("4 KiB (4096 bytes) bf16, 2 ranks, graph mode"),
        "{out}"
    );
    assert!(out.contains("choice: cuda:two-shot"), "{out}");
    assert!(
        out.contains("table row on line 11 (4096 bytes, measured)"),
        "{out}"
    );
    assert!(out.contains("fingerprint v1-00000000000000aa"), "{out}");
    // Every alternative with its time and how much slower it is.
    let alt: Vec<&str> = out
        .lines()
        .skip_while(|l| !l.starts_with("alternatives"))
        .collect();
    assert!(
        alt[1].contains("cuda:two-shot") && alt[1].contains("6.00") && alt[1].contains("chosen"),
        "{out}"
    );
    assert!(
        alt[2].contains("nccl") && alt[2].contains("8.00") && alt[2].contains("+33.3%"),
        "{out}"
    );
    assert!(
        alt[3].contains("cuda:one-shot") && alt[3].contains("10.00") && alt[3].contains("+66.7%"),
        "{out}"
    );
    // Eager at 1 KiB: NCCL measured faster in this fixture.
    let (ok, out, _) = run(&["explain", "--table", t, "--bytes", "1024"]);
    assert!(
        ok && out.contains("choice: nccl") && out.contains("eager mode"),
        "{out}"
    );
    // Between rows: interpolated, and the reason names both rows.
    let (_, out, _) = run(&["explain", "--table", t, "--bytes", "2KiB", "--graph"]);
    assert!(
        out.contains(
            "interpolated between table rows on lines 10 (1024 bytes) and 11 (4096 bytes)"
        ),
        "{out}"
    );
}

#[test]
fn explain_by_class_needs_no_gpu_and_states_unmeasured_rules() {
    let (ok, out, err) = run(&[
        "explain", "--class", "pcie-p2p", "--bytes", "64KiB", "--world", "4",
    ]);
    assert!(ok, "{err}");
    assert!(
        out.contains("choice: cuda:one-shot") && out.contains("unmeasured"),
        "{out}"
    );
    assert!(out.contains("no measured times"), "{out}");
    let (ok, out, err) = run(&[
        "explain",
        "--class",
        "nvlink",
        "--bytes",
        "16MiB",
        "--graph",
        "--max-bytes",
        "64MiB",
    ]);
    assert!(ok, "{err}");
    assert!(
        out.contains("choice: cuda:two-shot")
            && out.contains("crates/tpcomm/tables/default-nvlink.toml"),
        "{out}"
    );
    // With the library's default buffers (8 MiB) the communicator hands
    // 16 MiB to NCCL, and explain says so.
    let (ok, out, err) = run(&[
        "explain", "--class", "nvlink", "--bytes", "16MiB", "--graph",
    ]);
    assert!(ok, "{err}");
    assert!(
        out.contains("choice: nccl") && out.contains("above the communicator's buffers (8 MiB)"),
        "{out}"
    );
    // A pcie-p2p machine's communicator takes NCCL above 256 KiB.
    let (ok, out, err) = run(&["explain", "--class", "pcie-p2p", "--bytes", "1MiB"]);
    assert!(ok, "{err}");
    assert!(
        out.contains("choice: nccl")
            && out.contains("route: NCCL (faster than tpcomm at this size"),
        "{out}"
    );
    // A no-P2P machine's communicator runs on the host transport.
    let (ok, out, err) = run(&["explain", "--class", "pcie-nop2p", "--bytes", "64KiB"]);
    assert!(ok, "{err}");
    assert!(
        out.contains("choice: host:one-shot") && out.contains("communicator: host transport"),
        "{out}"
    );
    let (ok, _, err) = run(&["explain", "--class", "infiniband", "--bytes", "2"]);
    assert!(
        !ok && err.contains("\"infiniband\"") && !err.contains("panicked"),
        "{err}"
    );
}

#[test]
fn explain_with_a_malformed_table_names_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("bad.toml");
    std::fs::write(&p, FIXTURE.replace("bytes = 4096", "bytes = -4096")).unwrap();
    let (ok, out, err) = run(&["explain", "--table", p.to_str().unwrap(), "--bytes", "2"]);
    assert!(!ok && out.is_empty(), "{out}");
    assert!(
        err.starts_with("tpcomm explain: invalid tuning table"),
        "{err}"
    );
    assert!(
        err.contains("line 11, field `bytes`") && !err.contains("panicked"),
        "{err}"
    );
}

/// The committed NVLink default is exactly what `tpcomm tune --from-bench`
/// makes of the committed measurement, so it can be re-derived and checked.
#[test]
fn the_committed_nvlink_default_is_rebuilt_from_the_committed_measurement() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("nvlink.toml");
    let bench =
        root().join("crates/tpcomm/src/select/testdata/2026-11-30-h200x2-v4-gpu-bench-procs.json");
    let (ok, _, err) = run(&[
        "tune",
        "--from-bench",
        bench.to_str().unwrap(),
        "--class",
        "nvlink",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    let made = std::fs::read_to_string(&out).unwrap();
    let committed =
        std::fs::read_to_string(root().join("crates/tpcomm/tables/default-nvlink.toml")).unwrap();
    assert_eq!(made, committed);
    assert_eq!(made.matches("dtype = ").count(), 34);
}

#[test]
fn explain_on_the_host_transport_weighs_host_kernels_and_nccl_only() {
    // The NVLink default has no host:* rows, so the pcie-nop2p rule decides.
    let (ok, out, err) = run(&[
        "explain",
        "--class",
        "nvlink",
        "--transport",
        "host",
        "--bytes",
        "64KiB",
        "--graph",
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("choice: host:one-shot"), "{out}");
    assert!(out.contains("no host:* rows"), "{out}");
    let (ok, out, err) = run(&[
        "explain",
        "--class",
        "nvlink",
        "--transport",
        "host",
        "--bytes",
        "4MiB",
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("choice: nccl"), "{out}");
    // Without NCCL beside the communicator the host kernel runs instead.
    let (ok, out, err) = run(&[
        "explain",
        "--class",
        "nvlink",
        "--transport",
        "host",
        "--no-nccl",
        "--bytes",
        "4MiB",
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("choice: host:two-shot"), "{out}");
    // --no-nccl alone takes the class's transport; a max without NCCL is
    // an error of the communicator, and explain says so.
    let (ok, out, err) = run(&[
        "explain",
        "--class",
        "nvlink",
        "--no-nccl",
        "--bytes",
        "16",
        "--op",
        "max",
    ]);
    assert!(ok, "{err}");
    assert!(
        out.contains("choice: error (no NCCL beside the kernels)"),
        "{out}"
    );
}

#[test]
fn explain_that_cannot_probe_names_the_options_that_need_no_gpu() {
    // A machine without a driver (or GPUs) cannot be probed; the message
    // must say how to get an answer anyway. With GPUs the probe works and
    // there is nothing to check.
    let (ok, _, err) = run(&["explain", "--bytes", "224KiB", "--graph"]);
    if ok {
        return;
    }
    for word in [
        "--class nvlink",
        "single-gpu",
        "--table FILE",
        "needs a GPU",
    ] {
        assert!(err.contains(word), "no {word:?} in:\n{err}");
    }
    // The class it names answers.
    let (ok, out, err) = run(&[
        "explain", "--bytes", "224KiB", "--graph", "--class", "nvlink",
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("machine class nvlink"), "{out}");
}
