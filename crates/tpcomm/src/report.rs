//! Benchmark results as written by `tpcomm bench` (JSON) for every
//! transport: one `BenchRow` per (size, type, algorithm, mode), and a
//! `BenchMeta` describing the machine.

use crate::dtype::DType;
use crate::error::{Error, Result};
use std::collections::BTreeMap;

/// One measured size.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct BenchRow {
    /// Message size in bytes (count x element size).
    pub bytes: u64,
    pub count: u64,
    pub dtype: DType,
    /// Reduce op name ("sum", "max", "min").
    pub op: String,
    /// Algorithm name as the transport calls it ("one-shot", "two-shot", "nccl", ...).
    pub algo: String,
    /// "eager", or "graph" for calls replayed inside a CUDA graph.
    pub mode: String,
    /// Median time of one call, microseconds (slowest rank's median).
    pub time_us: f64,
    /// bytes / time, GB/s (1e9 bytes per second).
    pub algbw_gbps: f64,
    /// algbw x 2 (n - 1) / n: what each link carries, comparable across world sizes.
    pub busbw_gbps: f64,
    /// Output elements outside tolerance of the float64 reference, summed over ranks.
    pub wrong: u64,
}

/// What a row names besides its size and type: the `op`, `algo` and `mode`
/// columns.
#[derive(Clone, Copy, Debug)]
pub struct RowLabels<'a> {
    pub op: &'a str,
    pub algo: &'a str,
    pub mode: &'a str,
}

impl BenchRow {
    /// A row of `bytes` (`count` elements of `dtype`) measured at `time_us`
    /// a call at `world` ranks, with its bandwidths by nccl-tests' rules for
    /// an all-reduce.
    pub fn new(
        bytes: u64,
        count: u64,
        dtype: DType,
        labels: RowLabels<'_>,
        time_us: f64,
        world: usize,
        wrong: u64,
    ) -> Self {
        let RowLabels { op, algo, mode } = labels;
        let algbw = if time_us > 0.0 {
            bytes as f64 / (time_us * 1e3)
        } else {
            0.0
        };
        let factor = if world > 1 {
            2.0 * (world as f64 - 1.0) / world as f64
        } else {
            0.0
        };
        BenchRow {
            bytes,
            count,
            dtype,
            op: op.into(),
            algo: algo.into(),
            mode: mode.into(),
            time_us,
            algbw_gbps: algbw,
            busbw_gbps: algbw * factor,
            wrong,
        }
    }
}

/// The machine and run a table was measured on.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct BenchMeta {
    pub machine: Machine,
    /// Logical CPUs available to this process.
    pub cores: usize,
    /// UTC, "YYYY-MM-DDTHH:MM:SSZ".
    pub date: String,
    /// Component -> version: "tpcomm"; GPU runs add "driver" (CUDA driver),
    /// "nvrtc" and, when NCCL was loaded, "nccl".
    pub versions: BTreeMap<String, String>,
    /// How ranks share data: "host" (shared memory on CPU ranks, or pinned
    /// host memory between GPUs: see `device`), "cuda" (GPU peer-to-peer).
    pub transport: String,
    pub world_size: usize,
    /// How ranks were launched ("processes" or "threads").
    pub launch: String,
    /// "cpu" or "gpu"; absent in files written before one command ran both
    /// (those are CPU runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    /// GPU runs: each rank's GPU name, in rank order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<Vec<String>>,
    /// GPU runs: the architecture the kernels were compiled for ("sm_90").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arch: Option<String>,
    /// GPU runs: calls per timed repetition (and per captured graph).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iters: Option<usize>,
    /// GPU runs: timed repetitions (the median is reported).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reps: Option<usize>,
    /// GPU runs: input/output buffer pairs rotated through.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotate: Option<usize>,
    /// GPU runs: how a time was taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timing: Option<String>,
    /// GPU runs whose ranks share GPUs: the most ranks on one device. Such
    /// timings measure one GPU doing every rank's work; they are never an
    /// N-GPU result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_gpu: Option<usize>,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Machine {
    pub hostname: String,
    pub cpu_model: String,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct BenchReport {
    pub meta: BenchMeta,
    pub rows: Vec<BenchRow>,
}

/// What a latency table needs of a row of a `tpcomm bench --json` file.
/// Hand-written tables and files of older versions hold only some of the
/// fields of [`BenchRow`]; a missing size or time is an error only in a row
/// a table takes, as `tpcomm plan --bench` has always read them.
#[derive(Clone, Debug, PartialEq, serde::Deserialize)]
pub struct TimedRow {
    #[serde(default)]
    pub bytes: Option<u64>,
    #[serde(default)]
    pub dtype: String,
    #[serde(default)]
    pub algo: String,
    #[serde(default)]
    pub mode: String,
    #[serde(default)]
    pub time_us: Option<f64>,
    /// Elements outside tolerance; absent in hand-written tables.
    #[serde(default)]
    pub wrong: u64,
}

/// Which rows a latency table takes; `None` matches any. Names compare
/// without regard to case, as `tpcomm plan --bench` does.
#[derive(Clone, Copy, Debug, Default)]
pub struct RowFilter<'a> {
    pub algo: Option<&'a str>,
    pub mode: Option<&'a str>,
    pub dtype: Option<&'a str>,
}

impl RowFilter<'_> {
    pub fn matches(&self, r: &TimedRow) -> bool {
        let is = |want: Option<&str>, have: &str| want.is_none_or(|w| w.eq_ignore_ascii_case(have));
        is(self.algo, &r.algo) && is(self.mode, &r.mode) && is(self.dtype, &r.dtype)
    }
}

/// The rows of a `tpcomm bench --json` file (its `meta` is not read);
/// `origin` names the file in messages.
pub fn parse_rows(text: &str, origin: &str) -> Result<Vec<TimedRow>> {
    #[derive(serde::Deserialize)]
    struct Rows {
        rows: Vec<TimedRow>,
    }
    serde_json::from_str::<Rows>(text)
        .map(|r| r.rows)
        .map_err(|e| {
            Error::invalid(
                format!("bench file {origin}"),
                format!("{e}; give a file written by `tpcomm bench --json`"),
            )
        })
}

/// The longest time per call a latency row may give, in microseconds (1000 s:
/// anything longer is no measurement of an all-reduce).
pub const MAX_TIME_US: f64 = 1e9;

/// The rows `filter` takes, each checked to be a latency: a size above 0, a
/// time above 0 and at most [`MAX_TIME_US`], and no wrong element (a fast wrong answer is no
/// answer). A row that fails is an error naming it.
pub fn latency_rows<'a>(
    rows: &'a [TimedRow],
    origin: &str,
    filter: RowFilter,
) -> Result<Vec<&'a TimedRow>> {
    let mut out = Vec::new();
    for (i, r) in rows.iter().enumerate() {
        if !filter.matches(r) {
            continue;
        }
        let bad = |why: String| {
            Error::invalid(
                format!("bench file {origin}"),
                format!(
                    "rows[{i}] ({} bytes, {} {} {}): {why}",
                    r.bytes.map_or("?".into(), |b| b.to_string()),
                    r.dtype,
                    r.algo,
                    r.mode
                ),
            )
        };
        if r.wrong > 0 {
            return Err(bad(format!(
                "{} wrong element(s), so its time is not a latency; fix or leave out that algorithm (--algo) and run `tpcomm bench` again",
                r.wrong
            )));
        }
        if r.bytes.is_none_or(|b| b == 0) {
            return Err(bad("no size above 0 (\"bytes\")".into()));
        }
        match r.time_us {
            Some(t) if t.is_finite() && t > 0.0 && t <= MAX_TIME_US => out.push(r),
            Some(t) => {
                return Err(bad(format!(
                    "time_us {t} is not a time above 0 and at most {MAX_TIME_US} us"
                )))
            }
            None => return Err(bad("no time (\"time_us\")".into())),
        }
    }
    Ok(out)
}

impl Machine {
    /// This machine, from /proc and the hostname (unknown parts say so).
    pub fn this() -> Self {
        let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "unknown".into());
        let cpu_model = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split_once(':'))
                    .map(|(_, v)| v.trim().to_string())
            })
            .unwrap_or_else(|| "unknown".into());
        Machine {
            hostname,
            cpu_model,
        }
    }
}

/// The current UTC time as "YYYY-MM-DDTHH:MM:SSZ".
pub fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busbw_follows_the_nccl_tests_formula() {
        let r = BenchRow::new(
            1_000_000,
            250_000,
            DType::F32,
            RowLabels {
                op: "sum",
                algo: "one-shot",
                mode: "eager",
            },
            10.0,
            4,
            0,
        );
        assert!((r.algbw_gbps - 100.0).abs() < 1e-9);
        assert!((r.busbw_gbps - 150.0).abs() < 1e-9);
    }

    /// Files written before `device` and the GPU fields existed still read
    /// (as CPU runs), and a CPU meta writes none of the GPU fields.
    #[test]
    fn meta_without_the_optional_fields_reads_and_writes_without_them() {
        let old = r#"{"machine": {"hostname": "h", "cpu_model": "c"}, "cores": 2,
            "date": "2026-11-30T00:00:00Z", "versions": {"tpcomm": "0.1.0"},
            "transport": "host", "world_size": 2, "launch": "threads"}"#;
        let m: BenchMeta = serde_json::from_str(old).unwrap();
        assert_eq!(
            (m.device.as_deref(), m.gpus.as_ref(), m.reps),
            (None, None, None)
        );
        let v = serde_json::to_value(&m).unwrap();
        assert_eq!(v.as_object().unwrap().len(), 7, "{v}");
        let gpu = BenchMeta {
            device: Some("gpu".into()),
            gpus: Some(vec!["H200".into(); 2]),
            arch: Some("sm_90".into()),
            iters: Some(20),
            reps: Some(25),
            rotate: Some(4),
            timing: Some("CUDA events".into()),
            ..m
        };
        let back: BenchMeta = serde_json::from_str(&serde_json::to_string(&gpu).unwrap()).unwrap();
        assert_eq!(back, gpu);
    }

    #[test]
    fn utc_now_is_well_formed() {
        let d = utc_now();
        assert_eq!(d.len(), 20, "{d}");
        assert!(d.starts_with("20") && d.ends_with('Z'));
    }

    fn row(algo: &str, bytes: u64, time_us: f64, wrong: u64) -> BenchRow {
        BenchRow::new(
            bytes,
            bytes / 2,
            DType::Bf16,
            RowLabels {
                op: "sum",
                algo,
                mode: "graph",
            },
            time_us,
            2,
            wrong,
        )
    }

    fn json(rows: &[BenchRow]) -> String {
        serde_json::json!({ "meta": {}, "rows": rows }).to_string()
    }

    /// Rows with wrong results were once taken as latencies.
    #[test]
    fn a_latency_row_with_wrong_results_is_refused_by_name() {
        let rows = parse_rows(
            &json(&[
                row("one-shot", 1024, 3.0, 0),
                row("two-shot", 1024, 2.0, 0),
                row("two-shot", 4096, 2.5, 12),
            ]),
            "b.json",
        )
        .unwrap();
        let all = |algo| RowFilter {
            algo,
            mode: Some("GRAPH"),
            dtype: Some("bf16"),
        };
        let e = latency_rows(&rows, "b.json", all(Some("two-shot")))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("b.json")
                && e.contains("rows[2] (4096 bytes, bf16 two-shot graph): 12 wrong element(s)"),
            "{e}"
        );
        // Rows of another algorithm are not this table's business.
        let ok = latency_rows(&rows, "b.json", all(Some("one-shot"))).unwrap();
        assert_eq!(ok.len(), 1);
        let timed = |r: &BenchRow| parse_rows(&json(std::slice::from_ref(r)), "b.json").unwrap();
        let e =
            latency_rows(&timed(&row("x", 0, 1.0, 0)), "b.json", RowFilter::default()).unwrap_err();
        assert!(e.to_string().contains("no size above 0"), "{e}");
        // NaN is written as null: no time.
        let nan = timed(&row("x", 64, f64::NAN, 0));
        let e = latency_rows(&nan, "b.json", RowFilter::default()).unwrap_err();
        assert!(e.to_string().contains("no time"), "{e}");
        let negative = timed(&row("x", 64, -1.0, 0));
        let e = latency_rows(&negative, "b.json", RowFilter::default()).unwrap_err();
        assert!(e.to_string().contains("-1 is not a time"), "{e}");
    }

    /// Hand-written tables hold only what a latency needs; a row the table
    /// does not take may lack even that.
    #[test]
    fn hand_written_rows_read_and_only_taken_rows_must_be_complete() {
        let text = r#"{"rows": [{"bytes": 64, "dtype": "f32", "algo": "oneshot", "mode": "eager", "time_us": 1.5},
            {"algo": "nccl", "mode": "eager"}]}"#;
        let rows = parse_rows(text, "hand.json").unwrap();
        assert_eq!(
            (rows[0].bytes, rows[0].time_us, rows[0].wrong),
            (Some(64), Some(1.5), 0)
        );
        let only = |algo| RowFilter {
            algo: Some(algo),
            mode: None,
            dtype: None,
        };
        assert_eq!(
            latency_rows(&rows, "hand.json", only("oneshot"))
                .unwrap()
                .len(),
            1
        );
        let e = latency_rows(&rows, "hand.json", only("nccl"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("rows[1] (? bytes") && e.contains("no size"),
            "{e}"
        );
        let e = parse_rows("{\"rows\": [{\"bytes\": -1}]}", "bad.json").unwrap_err();
        assert!(
            e.to_string().contains("bad.json") && e.to_string().contains("line 1"),
            "{e}"
        );
    }

    fn arb_row() -> impl proptest::strategy::Strategy<Value = BenchRow> {
        use proptest::prelude::*;
        (
            0u64..(1 << 40),
            proptest::sample::select(vec![DType::F32, DType::F16, DType::Bf16]),
            proptest::sample::select(vec!["one-shot", "two-shot", "nccl"]),
            proptest::sample::select(vec!["eager", "graph"]),
            proptest::num::f64::ANY,
            0u64..3,
        )
            .prop_map(|(bytes, dtype, algo, mode, t, wrong)| {
                BenchRow::new(
                    bytes,
                    bytes / 2,
                    dtype,
                    RowLabels {
                        op: "sum",
                        algo,
                        mode,
                    },
                    t,
                    2,
                    wrong,
                )
            })
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(200))]

        /// Every row written reads back with the fields a latency needs
        /// (a time that is not finite is written as null: no time).
        #[test]
        fn bench_rows_round_trip_through_json(rows in proptest::collection::vec(arb_row(), 0..8)) {
            // serde_json's default float parser may be one unit in the last
            // place off (for a subnormal time one unit is far more than
            // 1e-15 of it); everything else must be exact.
            let close = |a: f64, b: f64| {
                (a - b).abs() <= 1e-15 * a.abs().max(b.abs())
                    || (a.is_sign_negative() == b.is_sign_negative()
                        && a.to_bits().abs_diff(b.to_bits()) <= 1)
            };
            let back = parse_rows(&json(&rows), "r.json").unwrap();
            proptest::prop_assert_eq!(back.len(), rows.len());
            for (b, r) in back.iter().zip(&rows) {
                proptest::prop_assert_eq!(
                    (b.bytes, b.dtype.as_str(), b.algo.as_str(), b.mode.as_str(), b.wrong),
                    (Some(r.bytes), r.dtype.name(), r.algo.as_str(), r.mode.as_str(), r.wrong)
                );
                match b.time_us {
                    Some(t) => proptest::prop_assert!(close(t, r.time_us), "{} vs {}", t, r.time_us),
                    None => proptest::prop_assert!(!r.time_us.is_finite()),
                }
            }
        }

        /// The latency reader takes a set of rows exactly when each taken row
        /// has no wrong element, a size and a time above 0 and at most MAX_TIME_US.
        #[test]
        fn latency_rows_take_only_correct_timed_rows(
            rows in proptest::collection::vec(arb_row(), 0..8),
            algo in proptest::option::of(proptest::sample::select(vec!["one-shot", "TWO-SHOT", "nccl"])),
        ) {
            let rows = parse_rows(&json(&rows), "r.json").unwrap();
            let filter = RowFilter { algo, mode: None, dtype: None };
            let taken: Vec<&TimedRow> = rows.iter().filter(|r| filter.matches(r)).collect();
            let valid = |r: &TimedRow| {
                r.wrong == 0
                    && r.bytes.is_some_and(|b| b > 0)
                    && r.time_us.is_some_and(|t| t.is_finite() && t > 0.0 && t <= MAX_TIME_US)
            };
            match latency_rows(&rows, "r.json", filter) {
                Ok(got) => {
                    proptest::prop_assert!(taken.iter().all(|r| valid(r)));
                    proptest::prop_assert_eq!(got, taken);
                }
                Err(e) => {
                    proptest::prop_assert!(taken.iter().any(|r| !valid(r)));
                    proptest::prop_assert!(e.to_string().contains("rows["), "{}", e);
                }
            }
        }

        /// Damaged JSON never panics the reader; an error names the file.
        #[test]
        fn damaged_bench_json_gives_an_error_naming_the_file(
            rows in proptest::collection::vec(arb_row(), 1..4),
            at in proptest::prelude::any::<proptest::sample::Index>(),
            len in 0usize..20,
            insert in "[ -~]{0,4}",
        ) {
            let text = json(&rows);
            let i = at.index(text.len());
            let j = (i + len).min(text.len());
            let damaged = format!("{}{insert}{}", &text[..i], &text[j..]);
            if let Err(e) = parse_rows(&damaged, "d.json") {
                proptest::prop_assert!(e.to_string().contains("d.json"), "{}", e);
            }
        }
    }
}
