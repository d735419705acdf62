//! The forward benchmark's table and JSON, from every rank's rows: per-site
//! cost against the floor, communication share, and the output checks
//! (the quantized rows: their error against an exact run).

use super::*;

#[derive(Clone, Debug, Serialize)]
pub(super) struct Row {
    tokens: usize,
    mode: String,
    /// The kernel the all-reduce ran where it is not the mode's name (host
    /// transport: host-delta or host-chunked).
    kernel: Option<String>,
    /// Max over ranks of each rank's median forward time.
    forward_us: f64,
    forward_us_per_rank: Vec<f64>,
    /// (forward - floor) / (2 x layers); None without a floor row.
    per_site_us: Option<f64>,
    /// For the -pdl modes: the same against the none-pdl floor (the norm
    /// kernel launched overlapped too), so PDL's own gain on the norm kernel
    /// is not counted as cheaper communication. None for other modes or
    /// without a none-pdl row.
    per_site_vs_pdl_floor_us: Option<f64>,
    /// (forward - floor) / forward.
    comm_share: Option<f64>,
    ranks_identical: Option<bool>,
    rel_diff_vs_nccl: Option<f64>,
    bitwise_equal_nccl: Option<bool>,
    /// Quantized modes: the wire ("int8/g64", "fp8/g64"); None otherwise.
    wire: Option<String>,
    /// Quantized modes: the quantized kernel each site ran ("one-shot", or
    /// "two-shot" above 2 ranks where the message has a 4096-element chunk
    /// per rank: QuantAlgo::Auto); None otherwise.
    quant_algo: Option<String>,
    /// Quantized modes: the exact mode whose final hidden state at this
    /// token count the error is measured against (nccl when it ran, else the
    /// first exact tpcomm mode); None otherwise.
    reference: Option<String>,
    /// Quantized modes: max over ranks of max |out - ref| / max |ref| over
    /// the final hidden state (the measure of rel_diff_vs_nccl).
    rel_diff_vs_reference: Option<f64>,
}

fn opt(v: Option<f64>, prec: usize) -> String {
    v.map_or("-".into(), |x| format!("{x:.prec$}"))
}

/// The transport for the table header: what ran, and what was asked for
/// when that was auto.
fn transport_label(requested: Transport, info: &RankInfo) -> String {
    let ran = if info.transport.is_empty() {
        "unknown"
    } else {
        info.transport.as_str()
    };
    if requested == Transport::Auto {
        format!("{ran} (auto)")
    } else {
        ran.to_string()
    }
}

/// Per-site cost and communication share of every row against the `none`
/// row of its token count, and of every -pdl mode against `none-pdl` too.
fn attach_floors(rows: &mut [Row], sites: usize) {
    let floor = |rows: &[Row], mode: &str, tokens: usize| {
        rows.iter()
            .find(|r| r.mode == mode && r.tokens == tokens)
            .map(|r| r.forward_us)
    };
    let found: Vec<(Option<f64>, Option<f64>)> = rows
        .iter()
        .map(|r| {
            (
                floor(rows, "none", r.tokens),
                floor(rows, "none-pdl", r.tokens),
            )
        })
        .collect();
    for (r, (none, none_pdl)) in rows.iter_mut().zip(found) {
        if let Some(f) = none {
            r.per_site_us = Some((r.forward_us - f) / sites as f64);
            r.comm_share = Some((r.forward_us - f) / r.forward_us);
        }
        if r.mode.ends_with("-pdl") && r.mode != "none-pdl" {
            r.per_site_vs_pdl_floor_us = none_pdl.map(|f| (r.forward_us - f) / sites as f64);
        }
    }
}

pub(super) fn report(args: &ForwardBenchArgs, world: usize, outs: Vec<RankOut>) -> Result<()> {
    let sites = 2 * args.layers;
    let mut failures = Vec::new();
    let rows = merged_rows(args, world, &outs, &mut failures);
    let driver = tpcomm::cuda::driver_version()
        .map(|(a, b)| format!("{a}.{b}"))
        .unwrap_or_default();
    let shared = outs
        .iter()
        .map(|o| o.info.ranks_on_device)
        .max()
        .unwrap_or(1);
    print_header(args, world, &outs[0].info, &driver, shared);
    print!("{}", table(&rows));
    if let Some(path) = &args.json {
        let run = JsonRun {
            args,
            world,
            outs: &outs,
            driver: &driver,
            shared,
            sites,
        };
        write_json(path, &run, &rows)?;
    }
    if !failures.is_empty() {
        return Err(Error::Aborted(format!(
            "forward outputs failed their checks: {}",
            failures.join("; ")
        )));
    }
    Ok(())
}

/// Every rank's rows merged (`merged_row`), the quantized ones with their
/// wire and kernel, costed against the floors.
pub(super) fn merged_rows(
    args: &ForwardBenchArgs,
    world: usize,
    outs: &[RankOut],
    failures: &mut Vec<String>,
) -> Vec<Row> {
    let mut rows: Vec<Row> = (0..outs[0].rows.len())
        .map(|i| merged_row(outs, i, failures))
        .collect();
    for r in &mut rows {
        if let Ok(Mode::Quant(w)) = Mode::parse(&r.mode) {
            let twoshot =
                tpcomm::cuda::quant::QuantAlgo::Auto.runs_twoshot(r.tokens * args.hidden, world);
            r.wire = Some(w.label());
            r.quant_algo = Some(if twoshot { "two-shot" } else { "one-shot" }.into());
        }
    }
    attach_floors(&mut rows, 2 * args.layers);
    rows
}

/// Row `i` of every rank as one row (the time: the slowest rank's), with
/// what the output checks found added to `failures`.
fn merged_row(outs: &[RankOut], i: usize, failures: &mut Vec<String>) -> Row {
    let r0 = &outs[0].rows[i];
    let per_rank: Vec<f64> = outs.iter().map(|o| o.rows[i].forward_us).collect();
    let t = per_rank.iter().copied().fold(0.0, f64::max);
    let communicates = !r0.mode.starts_with("none");
    let identical =
        communicates.then(|| outs.iter().all(|o| o.rows[i].output_hash == r0.output_hash));
    if identical == Some(false) {
        failures.push(format!(
            "{} at {} tokens: ranks' outputs differ",
            r0.mode, r0.tokens
        ));
    }
    let rel = outs
        .iter()
        .filter_map(|o| o.rows[i].rel_diff_vs_nccl)
        .reduce(f64::max);
    if rel.is_some_and(|d| d.is_nan() || d > TOLERANCE_VS_NCCL) {
        failures.push(format!(
            "{} at {} tokens: output differs from NCCL's by {:.3e} (tolerance {TOLERANCE_VS_NCCL:e})",
            r0.mode, r0.tokens, rel.unwrap_or(f64::NAN)
        ));
    }
    let equal = outs
        .iter()
        .map(|o| o.rows[i].bitwise_equal_nccl)
        .reduce(|a, b| a.zip(b).map(|(a, b)| a && b))
        .flatten();
    // A quantized row's error is measured, not bounded; only a non-finite
    // one (NaN or infinity in either output) fails the run.
    let quant_rel = outs
        .iter()
        .filter_map(|o| o.rows[i].rel_diff_vs_reference)
        .reduce(|a, b| {
            if a.is_nan() || b.is_nan() {
                f64::NAN
            } else {
                a.max(b)
            }
        });
    let reference = r0.reference.clone();
    if let Some(d) = quant_rel.filter(|d| !d.is_finite()) {
        failures.push(format!(
            "{} at {} tokens: relative error against {} is {d}",
            r0.mode,
            r0.tokens,
            reference.as_deref().unwrap_or("the reference")
        ));
    }
    Row {
        tokens: r0.tokens,
        mode: r0.mode.clone(),
        kernel: r0.kernel.clone(),
        forward_us: t,
        forward_us_per_rank: per_rank,
        per_site_us: None,
        per_site_vs_pdl_floor_us: None,
        comm_share: None,
        ranks_identical: identical,
        rel_diff_vs_nccl: rel,
        bitwise_equal_nccl: equal,
        wire: None,
        quant_algo: None,
        reference,
        rel_diff_vs_reference: quant_rel,
    }
}

/// The memory lines (stderr) and the `#` lines above the table: the
/// machine, the model, how it was timed, and what was shared or not run.
fn print_header(
    args: &ForwardBenchArgs,
    world: usize,
    info: &RankInfo,
    driver: &str,
    shared: usize,
) {
    eprint!("{}", info.comm_memory);
    eprintln!(
        "model (weights shared by all layers, activations, cuBLAS workspace): {} per rank",
        ByteSize::b(info.model_bytes)
    );
    println!(
        "# tpcomm forward-bench: {world} x {} ({}), driver CUDA {driver}, NCCL {}{}, tpcomm transport {}, ranks as {}; {} layers, hidden {}, MLP {}, bf16, CUDA graph; median of {} reps x {} forwards, max over ranks",
        info.gpu,
        info.arch,
        info.nccl.clone().unwrap_or_else(|| "not run".into()),
        tpcomm::env::NCCL_P2P_DISABLE
            .checked_value()
            .map(|v| format!(" (NCCL_P2P_DISABLE={v})"))
            .unwrap_or_default(),
        transport_label(args.transport, info),
        launch_name(args),
        args.layers,
        args.hidden,
        args.mlp,
        args.reps,
        args.iters
    );
    if shared > 1 {
        println!(
            "# shared GPU: up to {shared} ranks per device; one GPU does every rank's work, so these are not a measurement of {world} GPUs"
        );
        if args.modes.iter().flatten().any(|m| m.ends_with("-pdl")) {
            println!(
                "# -pdl modes: launched ordinarily, as every launch is where ranks share a GPU (programmatic dependent launch could stall the call there; docs/shared-gpu.md)"
            );
        }
    }
    if !info.skipped_modes.is_empty() {
        println!(
            "# not run: {} (fused modes need P2P, and NCCL a GPU per rank; transport {})",
            info.skipped_modes.join(", "),
            info.transport
        );
    }
}

/// The `#` line above a table with quantized rows.
const QUANT_NOTE: &str = "# quantized rows (int8, fp8: one f32 scale per group of 64 elements, or as the wire column says): error = max |out - ref| / max |ref| over the final hidden state, ref = the exact mode named beside it at the same token count (nccl when it ran, else the first exact tpcomm mode); measured, not held to a tolerance";

/// The table, one line per row. A table with quantized rows has one more
/// column, beside the per-site cost: their error against the exact run
/// and which mode that was ("-" on the other rows); without quantized rows
/// the table is as it was before they existed.
pub(super) fn table(rows: &[Row]) -> String {
    use std::fmt::Write;
    // Host kernels are named for what ran; the mode column widens only then.
    let shown = |r: &Row| r.kernel.clone().unwrap_or_else(|| r.mode.clone());
    let mw = rows.iter().map(|r| shown(r).len()).fold(9, usize::max);
    // The reference as the mode column shows it (a host kernel's name where
    // one ran), so the error names a row of the table.
    let reference = |r: &Row| {
        r.reference.as_ref().map(|m| {
            rows.iter()
                .find(|o| o.tokens == r.tokens && &o.mode == m)
                .map_or_else(|| m.clone(), shown)
        })
    };
    let error = |r: &Row| match (r.rel_diff_vs_reference, reference(r)) {
        (Some(d), Some(m)) => format!("{d:.2e} vs {m}"),
        (Some(d), None) => format!("{d:.2e}"),
        (None, Some(m)) => format!("- vs {m}"),
        (None, None) => "-".to_string(),
    };
    let quant = rows
        .iter()
        .any(|r| r.reference.is_some() || r.wire.is_some());
    let ew = if quant {
        rows.iter().map(|r| error(r).len()).fold(20, usize::max)
    } else {
        0
    };
    let mut out = String::new();
    if quant {
        let _ = writeln!(out, "{QUANT_NOTE}");
    }
    let _ = write!(
        out,
        "{:>6} {:>mw$} {:>12} {:>13}",
        "tokens", "mode", "forward(us)", "per-site(us)"
    );
    if quant {
        let _ = write!(out, " {:>ew$}", "error (reference)");
    }
    let _ = writeln!(
        out,
        " {:>13} {:>10} {:>10} {:>14}",
        "vs none-pdl", "comm share", "ranks ==", "vs NCCL"
    );
    for r in rows {
        let vs = match (r.bitwise_equal_nccl, r.rel_diff_vs_nccl) {
            (Some(true), _) => "bitwise equal".to_string(),
            (_, Some(d)) => format!("{d:.2e}"),
            _ => "-".to_string(),
        };
        let _ = write!(
            out,
            "{:>6} {:>mw$} {:>12.1} {:>13}",
            r.tokens,
            shown(r),
            r.forward_us,
            opt(r.per_site_us, 2),
        );
        if quant {
            let _ = write!(out, " {:>ew$}", error(r));
        }
        let _ = writeln!(
            out,
            " {:>13} {:>10} {:>10} {:>14}",
            opt(r.per_site_vs_pdl_floor_us, 2),
            r.comm_share
                .map_or("-".into(), |s| format!("{:.1}%", 100.0 * s)),
            r.ranks_identical
                .map_or("-".into(), |b| if b { "yes" } else { "NO" }.to_string()),
            vs
        );
    }
    out
}

/// How the ranks ran (`run_inner` sets `--launch` once it has decided).
fn launch_name(args: &ForwardBenchArgs) -> &'static str {
    args.launch.map_or("default", RankLaunch::name)
}

/// What the JSON's `meta` says about the run.
struct JsonRun<'a> {
    args: &'a ForwardBenchArgs,
    world: usize,
    outs: &'a [RankOut],
    driver: &'a str,
    shared: usize,
    sites: usize,
}

/// The results as JSON at `path`: `meta` (the run, and how each column was
/// computed) and `rows`.
fn write_json(path: &std::path::Path, run: &JsonRun, rows: &[Row]) -> Result<()> {
    let (args, info) = (run.args, &run.outs[0].info);
    let doc = serde_json::json!({
        "meta": {
            "tool": "tpcomm forward-bench",
            "machine": std::fs::read_to_string("/proc/sys/kernel/hostname").map(|s| s.trim().to_string()).unwrap_or_default(),
            "world": run.world,
            "gpus": run.outs.iter().map(|o| o.info.gpu.clone()).collect::<Vec<_>>(),
            "arch": info.arch,
            "driver": run.driver,
            "nccl": info.nccl,
            "nccl_p2p_disable": tpcomm::env::NCCL_P2P_DISABLE.checked_value(),
            "transport_requested": args.transport.name(),
            "transport": info.transport,
            "modes_skipped": info.skipped_modes,
            "shared_gpu": (run.shared > 1).then_some(run.shared),
            "launch": launch_name(args),
            "layers": args.layers,
            "hidden": args.hidden,
            "mlp": args.mlp,
            "dtype": "bf16",
            "sites_per_forward": run.sites,
            "reps": args.reps,
            "iters": args.iters,
            "model_bytes_per_rank": info.model_bytes,
            "attention": "simplified: QKV GEMM, then the O GEMM on the V third of its output; no score computation",
            "floor": "mode none: same graph, each site is one residual add + RMSNorm kernel, no communication",
            "timing": "CUDA events per rank around iters back-to-back graph launches; median over reps; forward_us = max over ranks",
            "per_site": "(forward_us - floor forward_us) / sites_per_forward",
            "per_site_vs_pdl_floor": "for the -pdl modes: (forward_us - none-pdl forward_us) / sites_per_forward",
            "tolerance_vs_nccl": TOLERANCE_VS_NCCL,
            "rel_diff_vs_reference": "quantized modes (int8, fp8): max |out - ref| / max |ref| over the final hidden state, max over ranks; ref = the output of the row's `reference` mode at the same token count (nccl when it ran, else the first exact tpcomm mode); measured, not held to tolerance_vs_nccl",
        },
        "rows": rows,
    });
    let text =
        serde_json::to_string_pretty(&doc).map_err(|e| Error::invalid("json", e.to_string()))?;
    std::fs::write(path, text).map_err(|e| Error::io(format!("write {}", path.display()), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(tokens: usize, mode: &str, us: f64) -> Row {
        Row {
            tokens,
            mode: mode.into(),
            kernel: None,
            forward_us: us,
            forward_us_per_rank: vec![us],
            per_site_us: None,
            per_site_vs_pdl_floor_us: None,
            comm_share: None,
            ranks_identical: None,
            rel_diff_vs_nccl: None,
            bitwise_equal_nccl: None,
            wire: None,
            quant_algo: None,
            reference: None,
            rel_diff_vs_reference: None,
        }
    }

    /// Every mode is costed against `none` of its token count; the -pdl modes
    /// also against `none-pdl`, and nothing else is.
    #[test]
    fn pdl_modes_are_also_costed_against_the_pdl_floor() {
        let mut rows = vec![
            row(1, "none", 1000.0),
            row(1, "none-pdl", 990.0),
            row(1, "one-shot", 1030.0),
            row(1, "fused-pdl", 1010.0),
            row(4, "none", 2000.0),
            row(4, "fused-pdl", 2020.0),
        ];
        attach_floors(&mut rows, 10);
        let get = |t, m: &str| rows.iter().find(|r| r.tokens == t && r.mode == m).unwrap();
        assert_eq!(get(1, "one-shot").per_site_us, Some(3.0));
        assert_eq!(get(1, "one-shot").per_site_vs_pdl_floor_us, None);
        assert_eq!(get(1, "fused-pdl").per_site_us, Some(1.0));
        assert_eq!(get(1, "fused-pdl").per_site_vs_pdl_floor_us, Some(2.0));
        assert_eq!(get(1, "none-pdl").per_site_us, Some(-1.0));
        assert_eq!(get(1, "none-pdl").per_site_vs_pdl_floor_us, None);
        // No none-pdl row at 4 tokens: no second figure.
        assert_eq!(get(4, "fused-pdl").per_site_us, Some(2.0));
        assert_eq!(get(4, "fused-pdl").per_site_vs_pdl_floor_us, None);
        assert!((get(1, "one-shot").comm_share.unwrap() - 30.0 / 1030.0).abs() < 1e-12);
    }

    fn args(extra: &[&str]) -> ForwardBenchArgs {
        use clap::Parser;
        let argv = ["tpcomm", "bench", "forward", "--layers", "2"]
            .iter()
            .chain(extra)
            .map(|s| s.to_string());
        match crate::Cli::try_parse_from(argv).unwrap().command {
            crate::Command::Bench(b) => b.forward().expect("the forward bench"),
            _ => panic!("not the forward bench"),
        }
    }

    fn rank(transport: &str, skipped: &[&str], one_shot_kernel: Option<&str>) -> RankOut {
        let row = |mode: &str, us: f64, kernel: Option<&str>, rel: Option<f64>| RankRow {
            tokens: 4,
            mode: mode.into(),
            kernel: kernel.map(String::from),
            forward_us: us,
            output_hash: 7,
            rel_diff_vs_nccl: rel,
            bitwise_equal_nccl: rel.map(|d| d == 0.0),
            reference: None,
            rel_diff_vs_reference: None,
        };
        RankOut {
            info: RankInfo {
                transport: transport.into(),
                skipped_modes: skipped.iter().map(|s| s.to_string()).collect(),
                ..RankInfo::default()
            },
            rows: vec![
                row("none", 100.0, None, None),
                row("nccl", 140.0, None, None),
                row("one-shot", 120.0, one_shot_kernel, Some(1e-3)),
            ],
        }
    }

    fn run_report(extra: &[&str], outs: Vec<RankOut>) -> serde_json::Value {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.json");
        let p = path.to_str().unwrap();
        let mut all = extra.to_vec();
        all.extend(["--json", p]);
        report(&args(&all), 2, outs).unwrap();
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
    }

    #[test]
    fn json_records_the_transport_and_the_host_kernel() {
        let outs = (0..2)
            .map(|_| rank("host", &["fused", "fused-pdl"], Some("host-delta")))
            .collect();
        let doc = run_report(&["--transport", "host"], outs);
        let m = &doc["meta"];
        assert_eq!(m["transport"], "host");
        assert_eq!(m["transport_requested"], "host");
        assert_eq!(
            m["modes_skipped"],
            serde_json::json!(["fused", "fused-pdl"])
        );
        let rows = doc["rows"].as_array().unwrap();
        assert_eq!(rows[2]["mode"], "one-shot");
        assert_eq!(rows[2]["kernel"], "host-delta");
        assert!(rows[1]["kernel"].is_null());
        // 2 layers: 4 sites; (120 - 100) / 4.
        assert_eq!(rows[2]["per_site_us"], 5.0);
    }

    #[test]
    fn json_says_what_auto_resolved_to() {
        let outs = (0..2).map(|_| rank("cuda", &[], None)).collect();
        let doc = run_report(&[], outs);
        assert_eq!(doc["meta"]["transport"], "cuda");
        assert_eq!(doc["meta"]["transport_requested"], "auto");
        assert_eq!(doc["meta"]["modes_skipped"], serde_json::json!([]));
        assert!(doc["rows"][2]["kernel"].is_null());
    }

    /// The JSON names how the ranks ran (run_inner sets --launch before the
    /// report, given or chosen).
    #[test]
    fn json_names_the_launch() {
        for (flag, want) in [("threads", "threads"), ("procs", "processes")] {
            let outs = (0..2).map(|_| rank("cuda", &[], None)).collect();
            let doc = run_report(&["--launch", flag], outs);
            assert_eq!(doc["meta"]["launch"], want, "{flag}");
        }
    }

    #[test]
    fn the_header_names_the_transport_and_auto() {
        let info = |t: &str| RankInfo {
            transport: t.into(),
            ..RankInfo::default()
        };
        assert_eq!(transport_label(Transport::Host, &info("host")), "host");
        assert_eq!(
            transport_label(Transport::Auto, &info("cuda")),
            "cuda (auto)"
        );
        assert_eq!(transport_label(Transport::Cuda, &info("")), "unknown");
    }
}
