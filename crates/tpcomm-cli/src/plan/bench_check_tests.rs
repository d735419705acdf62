use super::check_bench_rows;
use tpcomm::report::{BenchRow, RowLabels};
use tpcomm::DType;

/// `plan --bench` once took rows with wrong results as latencies.
#[test]
fn a_bench_file_with_wrong_rows_is_refused_as_a_latency_table() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("b.json");
    let row = |algo, wrong| {
        BenchRow::new(
            4096,
            2048,
            DType::Bf16,
            RowLabels {
                op: "sum",
                algo,
                mode: "graph",
            },
            5.0,
            2,
            wrong,
        )
    };
    let rows = [row("one-shot", 0), row("two-shot", 3)];
    std::fs::write(&p, serde_json::json!({ "rows": rows }).to_string()).unwrap();
    assert!(check_bench_rows(&p, Some("one-shot"), Some("graph"), "bf16").is_ok());
    let e = check_bench_rows(&p, Some("two-shot"), Some("graph"), "bf16")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("--bench") && e.contains("rows[1]") && e.contains("3 wrong element(s)"),
        "{e}"
    );
}
