//! The finished measurement: the table on stdout, the JSON on request.

use super::{GpuBenchArgs, Launch, RankOut, Row};
use std::collections::BTreeMap;
use tpcomm::report::{utc_now, BenchMeta, BenchReport, BenchRow, Machine};
use tpcomm::{Error, ReduceOp, Result};

/// Prints the table (and writes the JSON) of a finished measurement.
pub(crate) fn report_rows(args: &GpuBenchArgs, world: usize, outs: Vec<RankOut>) -> Result<()> {
    report(args, world, outs)
}

pub(super) fn report(args: &GpuBenchArgs, world: usize, outs: Vec<RankOut>) -> Result<()> {
    let mut rows = outs[0].rows.clone();
    // Times are rank 0's; a wrong element on any rank counts.
    for o in &outs[1..] {
        for (r, x) in rows.iter_mut().zip(&o.rows) {
            r.wrong += x.wrong;
        }
    }
    let driver = tpcomm::cuda::driver_version()
        .map(|(a, b)| format!("{a}.{b}"))
        .unwrap_or_default();
    let doc = bench_report(args, world, &outs, &rows, &driver)?;
    eprint!("{}", outs[0].info.memory);
    println!(
        "# tpcomm bench (gpu): {world} x {} ({}), driver CUDA {driver}, NVRTC {}, NCCL {}, transport {}, launch {}, median of {} reps x {} calls, {} rotating buffers",
        outs[0].info.gpu,
        outs[0].info.arch,
        outs[0].info.nvrtc,
        outs[0].info.nccl.clone().unwrap_or_else(|| "not loaded".into()),
        outs[0].info.transport,
        doc.meta.launch,
        args.reps,
        args.iters_text(),
        args.rotate
    );
    if let Some(k) = doc.meta.shared_gpu {
        println!(
            "# shared GPU: up to {k} ranks per device; these timings are one GPU doing every rank's work, not a measurement of {world} GPUs"
        );
        if rows.iter().any(|r| r.algo.ends_with("-pdl")) {
            println!(
                "# -pdl rows: launched ordinarily, as every launch is where ranks share a GPU (programmatic dependent launch could stall the call there; docs/shared-gpu.md)"
            );
        }
    }
    println!("{}", crate::bench::columns::header());
    for r in &doc.rows {
        println!("{}", crate::bench::columns::line(r));
    }
    let quant: Vec<&Row> = rows.iter().filter(|r| r.rel_rms.is_some()).collect();
    if !quant.is_empty() {
        println!("# quantized wire rows: error against the float64 sum (docs/quantized.md); #wrong counts elements that differ from the CPU model");
        println!(
            "# {:>12} {:>10} {:>6} {:>10} {:>9}",
            "size", "wire", "mode", "rel-RMS", "max-rel"
        );
        for r in quant {
            println!(
                "# {:>12} {:>10} {:>6} {:>9.3}% {:>9.3}",
                r.bytes,
                r.algo,
                r.mode,
                100.0 * r.rel_rms.unwrap_or(0.0),
                r.max_rel.unwrap_or(0.0)
            );
        }
    }
    let wrong: u64 = doc.rows.iter().map(|r| r.wrong).sum();
    println!("# total wrong elements: {wrong}");
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&doc)
            .map_err(|e| Error::invalid("json", e.to_string()))?;
        std::fs::write(path, text)
            .map_err(|e| Error::io(format!("write {}", path.display()), e))?;
    }
    if wrong > 0 {
        return Err(Error::Aborted(format!("{wrong} wrong elements")));
    }
    Ok(())
}

/// The run as the CPU bench's JSON shape: rank 0's rows (wrong elements
/// already summed over ranks), GPU facts in the optional meta fields.
pub(super) fn bench_report(
    args: &GpuBenchArgs,
    world: usize,
    outs: &[RankOut],
    rows: &[Row],
    driver: &str,
) -> Result<BenchReport> {
    let info = &outs[0].info;
    let mut versions = BTreeMap::new();
    versions.insert("tpcomm".to_string(), env!("CARGO_PKG_VERSION").to_string());
    if !driver.is_empty() {
        versions.insert("driver".to_string(), driver.to_string());
    }
    versions.insert("nvrtc".to_string(), info.nvrtc.clone());
    if let Some(n) = &info.nccl {
        versions.insert("nccl".to_string(), n.clone());
    }
    let meta = BenchMeta {
        machine: Machine::this(),
        cores: std::thread::available_parallelism().map_or(0, |n| n.get()),
        date: utc_now(),
        versions,
        transport: info.transport.clone(),
        world_size: world,
        // measure() resolves it; only a report built by hand can lack it.
        launch: args.launch.map_or("default", Launch::name).into(),
        device: Some("gpu".into()),
        gpus: Some(outs.iter().map(|o| o.info.gpu.clone()).collect()),
        arch: Some(info.arch.clone()),
        iters: args.iters,
        reps: Some(args.reps),
        rotate: Some(args.rotate),
        timing: Some(
            format!(
                "CUDA events on rank 0, per-call time = median over reps of (elapsed / iters), iters {}; \
                 the algorithms of one size take turns rep by rep; call words (TPCOMM_CHECK_CALLS) {}",
                args.iters_text(),
                match tpcomm::env::CHECK_CALLS.checked_value() {
                    Some(true) => "on",
                    Some(false) => "off",
                    None => "unset: on when ranks share a GPU",
                }
            ),
        ),
        shared_gpu: outs
            .iter()
            .map(|o| o.info.ranks_on_device)
            .max()
            .filter(|&k| k > 1),
    };
    let rows = rows
        .iter()
        .map(|r| {
            Ok(BenchRow {
                bytes: r.bytes,
                count: r.count as u64,
                dtype: r.dtype.parse()?,
                op: ReduceOp::Sum.name().to_string(),
                algo: r.algo.clone(),
                mode: r.mode.clone(),
                time_us: r.time_us,
                algbw_gbps: r.algbw_gbps,
                busbw_gbps: r.busbw_gbps,
                wrong: r.wrong as u64,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(BenchReport { meta, rows })
}
