//! Benchmark results as written by `tpcomm bench` (JSON) for every
//! transport: one `BenchRow` per (size, type, algorithm, mode), and a
//! `BenchMeta` describing the machine.

use crate::dtype::DType;
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

impl BenchRow {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        bytes: u64,
        count: u64,
        dtype: DType,
        op: &str,
        algo: &str,
        mode: &str,
        time_us: f64,
        world: usize,
        wrong: u64,
    ) -> Self {
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
            "sum",
            "one-shot",
            "eager",
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
}
