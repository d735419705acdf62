//! `tpcomm bench --coll` on CPU ranks: every collective runs, checks every
//! output element, and prints nccl-tests' size and busbw conventions.

use std::process::{Command, Output};

fn tpcomm(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tpcomm"))
        .args(args)
        .output()
        .unwrap()
}

fn bench(coll: &str, launch: &str, json: &std::path::Path) -> Output {
    tpcomm(&[
        "bench",
        "--device",
        "cpu",
        "--coll",
        coll,
        "--ranks",
        "4",
        "--launch",
        launch,
        "--min-bytes",
        "1KiB",
        "--max-bytes",
        "64KiB",
        "--iters",
        "5",
        "--warmup",
        "1",
        "--dtype",
        "bf16",
        "--json",
        json.to_str().unwrap(),
    ])
}

#[test]
fn every_collective_runs_checked_with_nccl_tests_columns() {
    let dir = tempfile::tempdir().unwrap();
    for (coll, launch, factor, op, checked) in [
        // 7 sizes; per size 4 ranks x the whole 512..32768-element array
        // (all-gather, broadcast) or one quarter of it (reduce-scatter).
        ("all-gather", "threads", 0.75, "none", 4 * 65_024),
        ("reduce-scatter", "processes", 0.75, "sum", 65_024),
        ("broadcast", "threads", 1.0, "none", 4 * 65_024),
        ("all-reduce", "threads", 1.5, "sum", 2 * 4 * 65_024),
    ] {
        let json = dir.path().join(format!("{coll}.json"));
        let o = bench(coll, launch, &json);
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success(),
            "{coll}: {}\n{out}",
            String::from_utf8_lossy(&o.stderr)
        );
        let last = out.lines().last().unwrap_or("");
        assert!(
            last.starts_with("# checked ")
                && last.contains(&format!("{coll}s"))
                && last.ends_with(&format!(": 0 of {checked} output elements wrong")),
            "{coll}: {last}"
        );
        let report: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        let rows = report["rows"].as_array().unwrap();
        assert!(!rows.is_empty());
        for r in rows {
            let bytes = r["bytes"].as_u64().unwrap();
            let count = r["count"].as_u64().unwrap();
            assert_eq!(bytes, 2 * count, "{coll}: size is count x 2 bytes of bf16");
            assert_eq!(r["op"], op, "{coll}");
            assert_eq!(r["wrong"], 0, "{coll}");
            let (alg, bus, t) = (
                r["algbw_gbps"].as_f64().unwrap(),
                r["busbw_gbps"].as_f64().unwrap(),
                r["time_us"].as_f64().unwrap(),
            );
            assert!(
                (alg - bytes as f64 / (t * 1e3)).abs() <= 1e-9 * alg.max(1.0),
                "{coll}"
            );
            assert!(
                (bus - alg * factor).abs() <= 1e-9 * alg.max(1.0),
                "{coll}: busbw"
            );
        }
        // The first row is 1 KiB: for all-gather, 128 bf16 from each of 4 ranks.
        assert_eq!(rows[0]["bytes"], 1024, "{coll}");
    }
}

#[test]
fn collectives_other_than_all_reduce_refuse_all_reduce_only_algorithms() {
    let o = tpcomm(&[
        "bench",
        "--device",
        "cpu",
        "--coll",
        "broadcast",
        "--algos",
        "one-shot",
    ]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--algos applies to the all-reduce only"));
    // On GPUs the all-reduce's overlapped launches are refused for the others
    // before any GPU is looked for.
    let o = tpcomm(&[
        "bench",
        "--device",
        "gpu",
        "--coll",
        "all-gather",
        "--algos",
        "one-shot-pdl",
    ]);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("one-shot-pdl is an all-reduce algorithm"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = tpcomm(&["bench", "--coll", "gather"]);
    assert!(!o.status.success());
}
