//! `tpcomm bench forward`: what an all-reduce costs where it lives. A
//! tensor-parallel transformer forward (the tpcomm-forward crate), one process
//! per rank (the command re-executes itself as workers) or one thread per
//! rank (`--launch threads`; without `--launch`, the GPU bench's
//! `default_launch` decides), captured in a CUDA graph and timed as whole
//! forwards, once per way of doing its all-reduce sites: none (the compute
//! floor), NCCL, each tpcomm algorithm, and the fused all-reduce + residual
//! add + RMSNorm kernel; opt-in, the quantized all-reduce (int8 or fp8 on
//! the wire), whose rows report how far the final hidden state is from an
//! exact run's. `--transport host` runs tpcomm's modes through pinned host
//! memory (no P2P), where the fused modes cannot run.

use clap::Args;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;
use tpcomm::cuda::cudarc::driver::{sys, CudaContext};
use tpcomm::cuda::Launch;
use tpcomm::cuda::{CudaConfig, Rendezvous};
use tpcomm::cuda::{GpuComm, Transport};
use tpcomm::nccl::{Nccl, NcclComm, UniqueId};
use tpcomm::quant::Wire;
use tpcomm::{Algo, ByteSize, DType, Error, ReduceOp, Result};
use tpcomm_forward::{Model, Shape, Site};

mod launch;
mod rank;
mod report;

use crate::gpu_bench::{
    choose_launch, cuda, mps_on, open_rank_device, run_threads, Launch as RankLaunch, RankDevice,
};
use launch::run_workers;
use rank::rank_main;
use report::report;

/// Largest relative difference (max |a - b| / max |b| over the final hidden
/// state) allowed between a tpcomm mode's forward output and NCCL's.
pub const TOLERANCE_VS_NCCL: f64 = 1e-2;

#[derive(Args, Clone, Debug)]
pub struct ForwardBenchArgs {
    /// Number of ranks (2 to 8); default: every GPU, at most 8. Ranks go
    /// round-robin over the visible GPUs: more ranks than GPUs share them
    /// (as threads unless an MPS server serves them: see --launch), the
    /// report says "shared GPU", and nccl is left out (NCCL refuses ranks
    /// that share a GPU).
    #[arg(long, visible_alias = "ranks")]
    gpus: Option<usize>,
    /// How ranks run: a process per rank (CUDA IPC) or a thread per rank in
    /// this process. Default: processes when every rank has a GPU of its own
    /// or an MPS server serves the GPUs ranks share, else threads (processes
    /// that share a GPU without MPS run in time slices, milliseconds per
    /// call); the run prints which and why.
    #[arg(long, value_enum)]
    launch: Option<RankLaunch>,
    /// Transformer layers (two all-reduce sites each).
    #[arg(long, default_value_t = 61)]
    layers: usize,
    /// Hidden size.
    #[arg(long, default_value_t = 7168)]
    hidden: usize,
    /// MLP intermediate size.
    #[arg(long, default_value_t = 18432)]
    mlp: usize,
    /// Tokens per forward, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "1,4,8,16")]
    tokens: Vec<usize>,
    /// Modes, comma separated: none (no communication: the floor), nccl,
    /// one-shot, two-shot, fused; the -pdl forms (none-pdl, one-shot-pdl,
    /// two-shot-pdl, fused-pdl) launch tpcomm's kernels and the norm kernel
    /// with programmatic dependent launch (sm_90+), hiding launch gaps.
    /// Per-site costs are taken against none. Default: none, nccl, one-shot,
    /// one-shot-pdl, two-shot, fused, fused-pdl, none-pdl; on the host
    /// transport all but fused and fused-pdl, which need P2P. Opt-in, never
    /// in the default: int8 and fp8, the quantized all-reduce (one f32 scale
    /// per group of 64 elements, or of 32 or 128 as int8/32, fp8/128;
    /// docs/quantized.md) then the add + RMSNorm;
    /// their rows report the final hidden state's relative error against
    /// the exact run at the same token count (NCCL's when nccl ran, else the
    /// first exact tpcomm mode's), so an exact tpcomm mode (one-shot,
    /// two-shot, fused or a -pdl form) must come before them, e.g.
    /// --modes none,one-shot,int8,fp8.
    #[arg(long, value_delimiter = ',')]
    modes: Option<Vec<String>>,
    /// GPU transport of tpcomm's modes: cuda (P2P), host (through pinned host
    /// memory, no P2P needed; one-shot runs the host-delta kernel, two-shot
    /// host-chunked; fused modes refused), auto (host when any pair of GPUs
    /// lacks P2P). NCCL picks its own; set NCCL_P2P_DISABLE=1 to compare
    /// without P2P.
    #[arg(long, default_value = "auto")]
    transport: Transport,
    /// Forwards per timed repetition (graph launches back to back).
    #[arg(long, default_value_t = 5)]
    iters: usize,
    /// Timed repetitions; the median is reported.
    #[arg(long, default_value_t = 15)]
    reps: usize,
    /// Bound on every wait, in milliseconds.
    #[arg(long, default_value_t = 20_000)]
    timeout_ms: u64,
    /// Write the results as JSON here (its directory must exist).
    #[arg(long)]
    json: Option<PathBuf>,
    #[arg(long, hide = true)]
    worker_rank: Option<usize>,
    #[arg(long, hide = true)]
    rendezvous: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    None(Launch),
    Nccl,
    Tp(Algo, Launch),
    Fused(Launch),
    /// The quantized all-reduce on this wire, then the add + RMSNorm kernel
    /// (ordinary launches).
    Quant(Wire),
}

impl Mode {
    fn parse(s: &str) -> Result<Mode> {
        // int8 and fp8 at the default group, or with one: int8/128.
        if let Some(w) = Wire::parse_quantized(s) {
            return Ok(Mode::Quant(w.map_err(|e| match e {
                Error::InvalidArgument { detail, .. } => Error::invalid("--modes", detail),
                e => e,
            })?));
        }
        Ok(match s {
            "none" => Mode::None(Launch::Ordinary),
            "none-pdl" => Mode::None(Launch::Overlapped),
            "nccl" => Mode::Nccl,
            "fused" => Mode::Fused(Launch::Ordinary),
            "fused-pdl" => Mode::Fused(Launch::Overlapped),
            "one-shot" | "two-shot" => Mode::Tp(s.parse()?, Launch::Ordinary),
            "one-shot-pdl" => Mode::Tp(Algo::OneShot, Launch::Overlapped),
            "two-shot-pdl" => Mode::Tp(Algo::TwoShot, Launch::Overlapped),
            other => {
                return Err(Error::invalid(
                    "--modes",
                    format!("{other:?} (expected none, none-pdl, nccl, one-shot, one-shot-pdl, two-shot, two-shot-pdl, fused, fused-pdl, int8 or fp8, the last two optionally with a group: int8/32, fp8/128)"),
                ))
            }
        })
    }

    /// An exact tpcomm all-reduce: what a quantized row is compared with
    /// when NCCL did not run.
    fn is_exact_tpcomm(self) -> bool {
        matches!(self, Mode::Tp(..) | Mode::Fused(_))
    }
}

/// Every mode, in the order the default runs them.
const ALL_MODES: [&str; 8] = [
    "none",
    "nccl",
    "one-shot",
    "one-shot-pdl",
    "two-shot",
    "fused",
    "fused-pdl",
    "none-pdl",
];

/// The modes to run over `transport`: the ones asked for, refused where one
/// needs P2P on the host transport or where a quantized mode has no exact
/// tpcomm mode before it; without `--modes`, every mode that can run there
/// (never a quantized one). Returns the modes and the names of default modes
/// left out. `Auto` refuses no fused mode (the workers call this again once
/// it is resolved).
fn modes_for(
    requested: Option<&[String]>,
    transport: Transport,
) -> Result<(Vec<Mode>, Vec<&'static str>)> {
    let host = transport == Transport::Host;
    let Some(requested) = requested else {
        let mut modes = Vec::new();
        let mut skipped = Vec::new();
        for name in ALL_MODES {
            let m = Mode::parse(name)?;
            if host && matches!(m, Mode::Fused(_)) {
                skipped.push(name);
            } else {
                modes.push(m);
            }
        }
        return Ok((modes, skipped));
    };
    let modes: Vec<Mode> = requested
        .iter()
        .map(|m| Mode::parse(m))
        .collect::<Result<_>>()?;
    if modes.is_empty() {
        return Err(Error::invalid("--modes", "name at least one mode"));
    }
    check_quant_references(&modes)?;
    if host {
        let fused: Vec<String> = modes
            .iter()
            .filter(|m| matches!(m, Mode::Fused(_)))
            .map(|&m| mode_name(m))
            .collect();
        if !fused.is_empty() {
            return Err(Error::invalid(
                "--modes",
                format!(
                    "{} cannot run on the host transport: the fused kernel reads its peers' GPU buffers, which needs P2P; drop {} from --modes, or use --transport cuda on GPUs with P2P",
                    fused.join(" and "),
                    if fused.len() > 1 { "them" } else { "it" }
                ),
            ));
        }
    }
    Ok((modes, Vec::new()))
}

/// Refuses a quantized mode with no exact tpcomm mode before it in `modes`:
/// its row would have nothing exact to be compared with. NCCL alone does not
/// count, as NCCL is left out where ranks share a GPU.
fn check_quant_references(modes: &[Mode]) -> Result<()> {
    let first_exact = modes
        .iter()
        .position(|m| m.is_exact_tpcomm())
        .unwrap_or(modes.len());
    let mut orphans: Vec<String> = Vec::new();
    for &m in &modes[..first_exact] {
        if matches!(m, Mode::Quant(_)) && !orphans.contains(&mode_name(m)) {
            orphans.push(mode_name(m));
        }
    }
    if orphans.is_empty() {
        return Ok(());
    }
    let mut example: Vec<String> = modes.iter().map(|&m| mode_name(m)).collect();
    let at = example
        .iter()
        .position(|m| orphans.contains(m))
        .unwrap_or(0);
    example.insert(at, "one-shot".into());
    Err(Error::invalid(
        "--modes",
        format!(
            "{} {} compared with an exact run at the same token count (NCCL's, else the first exact tpcomm mode's), and no exact tpcomm mode (one-shot, two-shot, fused or a -pdl form) comes before {}; nccl alone does not do, as it is left out where ranks share a GPU; put one first, e.g. --modes {}",
            orphans.join(" and "),
            if orphans.len() > 1 { "are" } else { "is" },
            if orphans.len() > 1 { "them" } else { "it" },
            example.join(",")
        ),
    ))
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct RankRow {
    tokens: usize,
    mode: String,
    /// The kernel tpcomm's all-reduce ran, where it differs from the mode's
    /// name (the host transport's host-delta and host-chunked).
    #[serde(default)]
    kernel: Option<String>,
    forward_us: f64,
    /// FNV-1a of the final residual stream and hidden state bytes.
    output_hash: u64,
    /// max |out - nccl_out| / max |nccl_out| over the final hidden state
    /// (None for NCCL itself, the floor, the quantized modes, or when NCCL
    /// did not run).
    rel_diff_vs_nccl: Option<f64>,
    bitwise_equal_nccl: Option<bool>,
    /// Quantized modes: the exact mode whose output at this token count
    /// `rel_diff_vs_reference` is measured against (nccl when it ran, else
    /// the first exact tpcomm mode); None for the other modes.
    #[serde(default)]
    reference: Option<String>,
    /// Quantized modes: max |out - ref| / max |ref| over the final hidden
    /// state, `ref` the output of the `reference` mode.
    #[serde(default)]
    rel_diff_vs_reference: Option<f64>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct RankInfo {
    gpu: String,
    arch: String,
    nccl: Option<String>,
    comm_memory: String,
    model_bytes: u64,
    /// The transport tpcomm's modes used (auto resolved).
    #[serde(default)]
    transport: String,
    /// Default modes left out because that transport cannot run them.
    #[serde(default)]
    skipped_modes: Vec<String>,
    /// Ranks on this rank's GPU (1: a GPU of its own).
    #[serde(default)]
    ranks_on_device: usize,
}

#[derive(Serialize, Deserialize)]
struct RankOut {
    info: RankInfo,
    rows: Vec<RankRow>,
}

/// Runs the bench; errors are printed after `name` (the spelling the user typed).
pub fn run(args: ForwardBenchArgs, name: &str) -> i32 {
    // Refused before any worker starts or GPU is looked for, with the usage
    // status; the workers decide the modes again once `auto` is resolved.
    let checked = modes_for(args.modes.as_deref(), args.transport)
        .and_then(|_| check_counts(&args))
        .and_then(|()| match &args.json {
            Some(p) => Ok(crate::checks::output_file("--json", p)?),
            None => Ok(()),
        });
    if let Err(e) = checked {
        eprintln!("{name}: {e}");
        return crate::checks::USAGE;
    }
    match run_inner(args, name) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("{name}: {e}");
            1
        }
    }
}

/// Most layers, hidden and MLP width, and tokens per forward the bench
/// builds: the model's own bounds (`Shape::check`), one source of truth.
const MAX_LAYERS: usize = Shape::MAX_LAYERS;
const MAX_WIDTH: usize = Shape::MAX_WIDTH;
const MAX_TOKENS: usize = Shape::MAX_TOKENS;
/// Most forwards per repetition (`--iters`) and repetitions (`--reps`).
const MAX_REPEATS: usize = 10_000;

/// Every number of the command in its range, each error naming its flag
/// before any worker or GPU work.
fn check_counts(args: &ForwardBenchArgs) -> Result<()> {
    if args.tokens.is_empty() {
        return Err(Error::invalid("--tokens", "give at least one token count"));
    }
    let mut checks = vec![
        ("--layers", args.layers, MAX_LAYERS),
        ("--hidden", args.hidden, MAX_WIDTH),
        ("--mlp", args.mlp, MAX_WIDTH),
        ("--iters", args.iters, MAX_REPEATS),
        ("--reps", args.reps, MAX_REPEATS),
    ];
    checks.extend(args.tokens.iter().map(|&t| ("--tokens", t, MAX_TOKENS)));
    for (flag, n, max) in checks {
        if !(1..=max).contains(&n) {
            return Err(Error::invalid(flag, format!("{n}: give 1 to {max}")));
        }
    }
    crate::gpu_bench::check_timeout_ms(args.timeout_ms)
}

fn run_inner(mut args: ForwardBenchArgs, name: &str) -> Result<()> {
    // Checked here so that a bad request fails before any worker starts; the
    // workers decide again once `auto` is resolved.
    modes_for(args.modes.as_deref(), args.transport)?;
    check_counts(&args)?;
    if let (Some(rank), Some(dir)) = (args.worker_rank, args.rendezvous.clone()) {
        let gpus = args.gpus;
        return crate::gpu_bench::write_worker_result(rank, gpus, dir, |world, rv| {
            rank_main(rank, world, &args, rv)
        });
    }
    tpcomm::cuda::ensure_driver()?;
    tpcomm_forward::ensure_cublas()?;
    let n = CudaContext::device_count().map_err(cuda("cuDeviceGetCount"))? as usize;
    let world = args.gpus.unwrap_or(n.min(tpcomm::transport::MAX_WORLD));
    if n == 0 || !(2..=tpcomm::transport::MAX_WORLD).contains(&world) {
        return Err(Error::invalid(
            "--ranks",
            format!(
                "{world} ranks: the forward bench takes 2 to {} (round-robin over this machine's {n} GPU(s))",
                tpcomm::transport::MAX_WORLD
            ),
        ));
    }
    let (launch, line) = choose_launch(args.launch, world, n, name, mps_on);
    if let Some(line) = line {
        eprintln!("{line}");
    }
    args.launch = Some(launch);
    let outs = match launch {
        RankLaunch::Threads => run_threads(world, |r, rv| rank_main(r, world, &args, rv))?,
        RankLaunch::Processes => run_workers(
            world,
            args.gpus.is_none(),
            Duration::from_millis(args.timeout_ms),
        )?,
    };
    report(&args, world, outs)
}

fn nccl_comm(rank: usize, world: usize, rv: &Rendezvous, timeout: Duration) -> Result<NcclComm> {
    // Every rank learns whether every rank loaded NCCL, so all fail together.
    let loaded = Nccl::load();
    let mine = match (&loaded, rank) {
        (Ok(n), 0) => n.unique_id()?.0.to_vec(),
        (Ok(_), _) => vec![1],
        (Err(_), _) => vec![],
    };
    let all = rv.exchange("nccl-id", rank, world, &mine, timeout)?;
    let nccl = loaded?;
    if all.iter().any(|v| v.is_empty()) || all[0].len() != 128 {
        return Err(Error::Aborted(
            "another rank could not load NCCL; drop nccl from --modes or fix NCCL there".into(),
        ));
    }
    let mut id = [0u8; 128];
    id.copy_from_slice(&all[0]);
    nccl.comm_init_rank(world, &UniqueId(id), rank)
}

fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for p in parts {
        for b in p.iter() {
            h ^= *b as u64;
            h = h.wrapping_mul(0x100000001b3);
        }
    }
    h
}

fn bf16s(bytes: &[u8]) -> Vec<f64> {
    bytes
        .chunks_exact(2)
        .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f64())
        .collect()
}

/// max |a - b| / max |b|.
fn rel_diff(a: &[u8], b: &[u8]) -> f64 {
    let (a, b) = (bf16s(a), bf16s(b));
    let scale = b
        .iter()
        .fold(0.0f64, |m, v| m.max(v.abs()))
        .max(f64::MIN_POSITIVE);
    let diff = a
        .iter()
        .zip(&b)
        .fold(0.0f64, |m, (x, y)| m.max((x - y).abs()));
    if a.iter().chain(&b).any(|v| !v.is_finite()) {
        return f64::INFINITY;
    }
    diff / scale
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn mode_name(m: Mode) -> String {
    match m {
        Mode::None(Launch::Ordinary) => "none".into(),
        Mode::None(Launch::Overlapped) => "none-pdl".into(),
        Mode::Nccl => "nccl".into(),
        Mode::Tp(a, Launch::Ordinary) => a.name().into(),
        Mode::Tp(a, Launch::Overlapped) => format!("{}-pdl", a.name()),
        Mode::Fused(Launch::Ordinary) => "fused".into(),
        Mode::Fused(Launch::Overlapped) => "fused-pdl".into(),
        Mode::Quant(w) => match w.quantized() {
            Some((f, Wire::DEFAULT_GROUP)) => f.name().into(),
            Some((f, g)) => format!("{}/{g}", f.name()),
            None => "exact".into(),
        },
    }
}

#[cfg(test)]
mod tests;
