//! All-reduce latency as a function of message size: a measured table
//! (a `tpcomm bench --json` file or a catalog machine) interpolated between
//! its rows, or one flat figure.

use crate::error::{PlanError, Result};
use serde::Serialize;
use std::path::Path;
use tpcomm::ByteSize;

/// Largest all-reduce latency a plan accepts (1000 s), so that no sum of
/// latencies can reach infinity and turn a rate into NaN.
pub const MAX_LATENCY_US: f64 = 1e9;

/// How to read between two measured sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Interp {
    /// Straight line in log(bytes)-log(time): right for latency-bound small
    /// sizes, where time barely moves over decades of size.
    #[default]
    LogLog,
    /// Straight line in bytes-time.
    Linear,
}

/// Measured (bytes, microseconds) points, sorted by size.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LatencyTable {
    pub name: String,
    pub source: String,
    pub points: Vec<(ByteSize, f64)>,
}

impl LatencyTable {
    pub fn new(name: impl Into<String>, mut points: Vec<(ByteSize, f64)>) -> Result<Self> {
        let name = name.into();
        let bad = |problem: String| PlanError::Table {
            source_name: name.clone(),
            problem,
        };
        if points.is_empty() {
            return Err(bad("no rows".into()));
        }
        points.sort_by_key(|p| p.0);
        for w in points.windows(2) {
            if w[0].0 == w[1].0 {
                return Err(bad(format!(
                    "two rows for {} (filter by algorithm/mode/dtype so one row is left per size)",
                    w[0].0
                )));
            }
        }
        for (b, us) in &points {
            if *b == ByteSize::ZERO {
                return Err(bad("a row has 0 bytes".into()));
            }
            if !us.is_finite() || *us <= 0.0 || *us > MAX_LATENCY_US {
                return Err(bad(format!(
                    "the row for {b} has time {us} us; times must be positive and at most {} us",
                    MAX_LATENCY_US
                )));
            }
        }
        Ok(LatencyTable {
            source: String::new(),
            name,
            points,
        })
    }

    pub fn with_source(mut self, source: String) -> Self {
        self.source = source;
        self
    }

    /// Latency of one all-reduce of `bytes`, in microseconds. Below the
    /// smallest row the smallest row's time is used (latency floor); above
    /// the largest, time grows in proportion to size (bandwidth bound).
    pub fn latency_us(&self, bytes: ByteSize, interp: Interp) -> f64 {
        let x = bytes.bytes().max(1) as f64;
        let (first, last) = (self.points[0], self.points[self.points.len() - 1]);
        if x <= first.0.bytes() as f64 {
            return first.1;
        }
        if x >= last.0.bytes() as f64 {
            return last.1 * x / last.0.bytes() as f64;
        }
        let i = self.points.partition_point(|p| (p.0.bytes() as f64) <= x);
        let (x0, y0) = (self.points[i - 1].0.bytes() as f64, self.points[i - 1].1);
        let (x1, y1) = (self.points[i].0.bytes() as f64, self.points[i].1);
        match interp {
            Interp::Linear => y0 + (y1 - y0) * (x - x0) / (x1 - x0),
            Interp::LogLog => {
                let t = (x.ln() - x0.ln()) / (x1.ln() - x0.ln());
                (y0.ln() + t * (y1.ln() - y0.ln())).exp()
            }
        }
    }

    /// Reads a `tpcomm bench --json` file: `{"meta": ..., "rows": [{"bytes",
    /// "dtype", "algo", "mode", "time_us", ...}]}`, keeping the rows that match
    /// the filters (a filter left as None matches anything).
    pub fn from_bench_json(
        path: &Path,
        algo: Option<&str>,
        mode: Option<&str>,
        dtype: Option<&str>,
    ) -> Result<Self> {
        let name = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| PlanError::Io {
            path: name.clone(),
            source,
        })?;
        Self::from_bench_str(&name, &text, algo, mode, dtype)
    }

    pub fn from_bench_str(
        name: &str,
        text: &str,
        algo: Option<&str>,
        mode: Option<&str>,
        dtype: Option<&str>,
    ) -> Result<Self> {
        let bad = |problem: String| PlanError::Table {
            source_name: name.to_string(),
            problem,
        };
        let v: serde_json::Value =
            serde_json::from_str(text).map_err(|e| bad(format!("not valid JSON: {e}")))?;
        let rows = v.get("rows").and_then(|r| r.as_array()).ok_or_else(|| {
            bad("no \"rows\" list (is this a `tpcomm bench --json` file?)".into())
        })?;
        let mut points = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        for (i, row) in rows.iter().enumerate() {
            let text_field = |k: &str| row.get(k).and_then(|x| x.as_str());
            let keep = |k: &str, want: Option<&str>| match want {
                None => true,
                Some(w) => text_field(k).is_some_and(|s| s.eq_ignore_ascii_case(w)),
            };
            for k in ["algo", "mode", "dtype"] {
                if let Some(s) = text_field(k) {
                    seen.insert(format!("{k}={s}"));
                }
            }
            if !(keep("algo", algo) && keep("mode", mode) && keep("dtype", dtype)) {
                continue;
            }
            let bytes = row
                .get("bytes")
                .and_then(|x| x.as_u64())
                .ok_or_else(|| bad(format!("rows[{i}]: no positive integer \"bytes\"")))?;
            let us = row
                .get("time_us")
                .and_then(|x| x.as_f64())
                .ok_or_else(|| bad(format!("rows[{i}]: no number \"time_us\"")))?;
            // A row whose result was checked wrong timed no all-reduce (issue
            // 17 item 7); absent in hand-written tables, which means none.
            let wrong = match row.get("wrong") {
                None => 0,
                Some(w) => w.as_u64().ok_or_else(|| {
                    bad(format!(
                        "rows[{i}]: \"wrong\" is {w}, not a count of wrong elements"
                    ))
                })?,
            };
            if wrong > 0 {
                return Err(bad(format!(
                    "rows[{i}] ({bytes} bytes): {wrong} wrong element(s), so its time is not a latency; fix or leave out that algorithm (--algo) and run `tpcomm bench` again"
                )));
            }
            points.push((ByteSize::b(bytes), us));
        }
        if points.is_empty() {
            return Err(bad(format!(
                "no row matches algo={} mode={} dtype={}; the file has {}",
                algo.unwrap_or("*"),
                mode.unwrap_or("*"),
                dtype.unwrap_or("*"),
                seen.into_iter().collect::<Vec<_>>().join(", ")
            )));
        }
        let label = format!(
            "{name} (algo={} mode={} dtype={})",
            algo.unwrap_or("*"),
            mode.unwrap_or("*"),
            dtype.unwrap_or("*")
        );
        Ok(LatencyTable::new(label, points)?.with_source(format!("measured: {name}")))
    }
}

/// Where per-message all-reduce latencies come from, and how to adjust them.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum LatencySource {
    /// Every all-reduce takes this long, whatever its size.
    Flat {
        us: f64,
    },
    Table {
        table: LatencyTable,
        interp: Interp,
    },
}

impl LatencySource {
    pub fn latency_us(&self, bytes: ByteSize) -> f64 {
        match self {
            LatencySource::Flat { us } => *us,
            LatencySource::Table { table, interp } => table.latency_us(bytes, *interp),
        }
    }

    pub fn describe(&self) -> String {
        match self {
            LatencySource::Flat { us } => format!("flat {us} us per all-reduce"),
            LatencySource::Table { table, interp } => {
                format!("table {} ({:?} interpolation)", table.name, interp)
            }
        }
    }
}
