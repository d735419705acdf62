//! Reading all-reduce tables and interpolating them.

use tpcomm::ByteSize;
use tpcomm_plan::latency::{Interp, LatencySource, LatencyTable};
use tpcomm_plan::PlanError;

fn table(points: &[(u64, f64)]) -> LatencyTable {
    LatencyTable::new(
        "t",
        points.iter().map(|&(b, us)| (ByteSize::b(b), us)).collect(),
    )
    .unwrap()
}

#[test]
fn interpolation_by_hand() {
    let t = table(&[(1024, 10.0), (4096, 20.0)]);
    // Log-log: halfway in log(bytes) is halfway in log(time): 10 x sqrt(2).
    let ll = t.latency_us(ByteSize::b(2048), Interp::LogLog);
    assert!((ll - 10.0 * 2f64.sqrt()).abs() < 1e-9, "{ll}");
    // Linear: a third of the way from 1024 to 4096.
    let lin = t.latency_us(ByteSize::b(2048), Interp::Linear);
    assert!((lin - (10.0 + 10.0 / 3.0)).abs() < 1e-9, "{lin}");
    // Rows are hit exactly.
    assert_eq!(t.latency_us(ByteSize::b(4096), Interp::LogLog), 20.0);
    // Below the table: the smallest row's time (latency floor).
    assert_eq!(t.latency_us(ByteSize::b(10), Interp::LogLog), 10.0);
    // Above: proportional to size from the last row.
    assert_eq!(t.latency_us(ByteSize::b(8192), Interp::Linear), 40.0);
}

#[test]
fn rows_are_sorted_and_validated() {
    let t = table(&[(4096, 20.0), (1024, 10.0)]);
    assert_eq!(t.points[0].0, ByteSize::b(1024));
    for bad in [
        vec![(ByteSize::b(1024), 1.0), (ByteSize::b(1024), 2.0)],
        vec![(ByteSize::b(0), 1.0)],
        vec![(ByteSize::b(8), -1.0)],
        vec![(ByteSize::b(8), f64::NAN)],
        vec![],
    ] {
        let e = LatencyTable::new("bad", bad).unwrap_err();
        assert!(matches!(e, PlanError::Table { .. }), "{e}");
    }
}

const BENCH: &str = r#"{
  "meta": {"machine": "test"},
  "rows": [
    {"bytes": 1024, "dtype": "bf16", "algo": "oneshot", "mode": "graph", "time_us": 3.0},
    {"bytes": 65536, "dtype": "bf16", "algo": "oneshot", "mode": "graph", "time_us": 4.0},
    {"bytes": 1024, "dtype": "bf16", "algo": "nccl", "mode": "graph", "time_us": 19.0},
    {"bytes": 65536, "dtype": "bf16", "algo": "nccl", "mode": "graph", "time_us": 23.7},
    {"bytes": 1024, "dtype": "bf16", "algo": "nccl", "mode": "eager", "time_us": 36.0}
  ]
}"#;

#[test]
fn bench_json_rows_are_filtered() {
    let t =
        LatencyTable::from_bench_str("b.json", BENCH, Some("nccl"), Some("graph"), Some("bf16"))
            .unwrap();
    assert_eq!(
        t.points,
        vec![(ByteSize::kib(1), 19.0), (ByteSize::kib(64), 23.7)]
    );
    let t = LatencyTable::from_bench_str("b.json", BENCH, Some("ONESHOT"), None, None).unwrap();
    assert_eq!(t.points.len(), 2);
    // Unfiltered, two rows share a size: the error says to filter.
    let e = LatencyTable::from_bench_str("b.json", BENCH, None, None, None).unwrap_err();
    assert!(e.to_string().contains("filter"), "{e}");
}

#[test]
fn bench_json_errors() {
    let e = LatencyTable::from_bench_str("b.json", BENCH, Some("twoshot"), None, None).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("no row matches") && msg.contains("algo=oneshot"),
        "{msg}"
    );
    let e = LatencyTable::from_bench_str("b.json", "{", None, None, None).unwrap_err();
    assert!(e.to_string().contains("not valid JSON"), "{e}");
    let e = LatencyTable::from_bench_str("b.json", "{\"meta\": {}}", None, None, None).unwrap_err();
    assert!(e.to_string().contains("rows"), "{e}");
    let bad = r#"{"rows": [{"bytes": -5, "time_us": 3.0}]}"#;
    assert!(LatencyTable::from_bench_str("b.json", bad, None, None, None).is_err());
    let bad = r#"{"rows": [{"bytes": 5, "time_us": "fast"}]}"#;
    assert!(LatencyTable::from_bench_str("b.json", bad, None, None, None).is_err());
    let e = LatencyTable::from_bench_json(
        std::path::Path::new("/nonexistent/b.json"),
        None,
        None,
        None,
    )
    .unwrap_err();
    assert!(matches!(e, PlanError::Io { .. }));
}

/// In the planner's own reader (not only `plan --bench`'s
/// check before it): a row whose result was wrong gives no latency.
#[test]
fn bench_rows_with_wrong_results_are_not_latencies() {
    let row = |wrong: &str| {
        format!(
            r#"{{"rows": [{{"bytes": 1024, "time_us": 3.0, "algo": "a", "wrong": 0}},
                          {{"bytes": 2048, "time_us": 4.0, "algo": "b", "wrong": {wrong}}}]}}"#
        )
    };
    assert!(LatencyTable::from_bench_str("b.json", &row("0"), None, None, None).is_ok());
    let e = LatencyTable::from_bench_str("b.json", &row("3"), None, None, None).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("rows[1]") && msg.contains("3 wrong element(s)") && msg.contains("b.json"),
        "{msg}"
    );
    for odd in ["-1", "1.5", "\"none\"", "null"] {
        let e = LatencyTable::from_bench_str("b.json", &row(odd), None, None, None).unwrap_err();
        assert!(e.to_string().contains("\"wrong\""), "{odd}: {e}");
    }
    // Rows the filter leaves out are not judged.
    assert!(LatencyTable::from_bench_str("b.json", &row("3"), Some("a"), None, None).is_ok());
}

#[test]
fn flat_source_ignores_size() {
    let s = LatencySource::Flat { us: 7.5 };
    assert_eq!(s.latency_us(ByteSize::b(1)), 7.5);
    assert_eq!(s.latency_us(ByteSize::gib(1)), 7.5);
}
