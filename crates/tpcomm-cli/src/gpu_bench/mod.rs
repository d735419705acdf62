//! `tpcomm bench` on GPUs (`--device gpu`, or auto with 2+ GPUs): every
//! tpcomm GPU all-reduce algorithm and NCCL, eager and inside CUDA graphs, in
//! one run, every result checked against a float64 reference. One process
//! per rank (the command re-executes itself as workers, through the internal
//! `gpu-bench-worker`) or one thread per rank (`--launch threads`); without
//! `--launch`, [`default_launch`] decides from the GPUs and MPS. The JSON is
//! `tpcomm::report::BenchReport`, as the CPU bench writes.

use clap::Args;
use serde::Serialize;
use std::path::PathBuf;
use tpcomm::cuda::cudarc::driver::CudaContext;
use tpcomm::cuda::{Rendezvous, Transport};
use tpcomm::quant::Wire;
use tpcomm::select;
use tpcomm::{Algo, ByteSize, DType, Error, Result};

mod check;
mod comms;
mod device;
mod launch;
mod quant;
mod rank;
mod report;
#[cfg(test)]
mod tests;

pub(crate) use check::{count_wrong_par, random_inputs};
pub(crate) use device::{capture_graph, cuda, open_rank_device, time_us, RankDevice};
pub(crate) use report::report_rows;

use launch::run_procs;
pub(crate) use launch::run_threads;
use rank::rank_main;
use report::report;

pub use crate::workers::Launch;

#[derive(Args, Clone, Debug)]
pub struct GpuBenchArgs {
    /// Collective to time: all-reduce, all-gather, reduce-scatter, broadcast
    /// (the last three: tpcomm's one kernel per transport, row `tpcomm`, and
    /// NCCL; nccl-tests' size and busbw conventions, see bench/coll.rs).
    #[arg(long, value_enum, default_value = "all-reduce")]
    pub(crate) coll: crate::bench::coll::Coll,
    /// How ranks run: a process per GPU (CUDA IPC) or a thread per GPU (peer
    /// access). Default: processes when every rank has a GPU of its own or an
    /// MPS server serves the GPUs ranks share, else threads (processes that
    /// share a GPU without MPS run in time slices, milliseconds per call); the
    /// run prints which and why.
    #[arg(long, value_enum)]
    pub(crate) launch: Option<Launch>,
    /// GPU transport: cuda (P2P), host (through pinned host memory, no P2P
    /// needed; one-shot = delta words, two-shot = chunked),
    /// auto (host when any
    /// pair lacks P2P).
    #[arg(long, default_value = "auto")]
    pub(crate) transport: Transport,
    /// Number of ranks (2 to 8); default: every GPU, at most 8. Ranks go
    /// round-robin over the visible GPUs, so more ranks than GPUs share them
    /// (the report then says "shared GPU": such timings are one GPU doing
    /// every rank's work, never an N-GPU result; NCCL rows are skipped, as
    /// NCCL refuses ranks that share a GPU).
    #[arg(long, visible_alias = "ranks")]
    pub(crate) gpus: Option<usize>,
    /// Element type: bf16, f16 or f32.
    #[arg(long, default_value = "bf16")]
    pub(crate) dtype: DType,
    /// Smallest message (a whole number of --dtype elements).
    #[arg(long, default_value = "1KiB")]
    pub(crate) min: ByteSize,
    /// Largest message (a whole number of --dtype elements; also the
    /// communicator's buffer size).
    #[arg(long, default_value = "64MiB")]
    pub(crate) max: ByteSize,
    /// Algorithms, comma separated: one-shot, two-shot, auto, nccl. `auto` runs what
    /// the library's selection picks at each size and mode (rows `auto:<choice>`).
    /// one-shot-pdl and two-shot-pdl launch the same kernels with programmatic
    /// dependent launch (sm_90+), so each call's launch overlaps the previous call.
    /// int8 and fp8 (optionally /32, /64, /128: the group) run the quantized
    /// wire (docs/quantized.md); their rows also print the error against the
    /// float64 sum, and `#wrong` counts elements that differ from the CPU model.
    #[arg(long, value_delimiter = ',', default_value = "one-shot,two-shot,nccl")]
    pub(crate) algos: Vec<String>,
    /// Modes, comma separated: eager, graph.
    #[arg(long, value_delimiter = ',', default_value = "eager,graph")]
    pub(crate) modes: Vec<String>,
    /// Calls per timed repetition (and per captured graph). Default: 100 below
    /// 4 MiB and 20 from 4 MiB, as shared/anchors/torch_allreduce.py times, so
    /// the one graph launch per repetition weighs the same in both.
    #[arg(long)]
    pub(crate) iters: Option<usize>,
    /// Timed repetitions; the median is reported.
    #[arg(long, default_value_t = 25)]
    pub(crate) reps: usize,
    /// Input/output buffer pairs rotated through, so caches do not flatter.
    #[arg(long, default_value_t = 4)]
    pub(crate) rotate: usize,
    /// Bound on every wait, in milliseconds.
    #[arg(long, default_value_t = 20_000)]
    pub(crate) timeout_ms: u64,
    /// Write the results as JSON here (its directory must exist).
    #[arg(long)]
    pub(crate) json: Option<PathBuf>,
    /// Also measure the midpoints between powers of two (1.5 x each), as `tpcomm tune` does.
    #[arg(long)]
    pub(crate) midpoints: bool,
    /// Tuning table for `--algos auto` (else $TPCOMM_TUNING_TABLE, then the
    /// default location for this machine's fingerprint, then the class defaults).
    #[arg(long, value_name = "FILE")]
    pub(crate) table: Option<PathBuf>,
    #[arg(long, hide = true)]
    fingerprint: Option<String>,
    #[arg(long, hide = true)]
    class: Option<String>,
    #[arg(long, hide = true)]
    worker_rank: Option<usize>,
    #[arg(long, hide = true)]
    rendezvous: Option<PathBuf>,
}

impl GpuBenchArgs {
    /// The arguments with nothing given: the clap defaults above, spelt out
    /// (`tpcomm bench` starts from these; its tests hold them equal).
    pub(crate) fn defaults() -> Self {
        GpuBenchArgs {
            coll: crate::bench::coll::Coll::AllReduce,
            launch: None,
            transport: Transport::Auto,
            gpus: None,
            dtype: DType::Bf16,
            min: ByteSize::kib(1),
            max: ByteSize::mib(64),
            algos: ["one-shot", "two-shot", "nccl"].map(String::from).to_vec(),
            modes: ["eager", "graph"].map(String::from).to_vec(),
            iters: None,
            reps: 25,
            rotate: 4,
            timeout_ms: 20_000,
            json: None,
            midpoints: false,
            table: None,
            fingerprint: None,
            class: None,
            worker_rank: None,
            rendezvous: None,
        }
    }
}

#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub(crate) struct Row {
    pub(crate) bytes: u64,
    pub(crate) count: usize,
    pub(crate) dtype: String,
    pub(crate) algo: String,
    pub(crate) mode: String,
    pub(crate) time_us: f64,
    pub(crate) algbw_gbps: f64,
    pub(crate) busbw_gbps: f64,
    pub(crate) wrong: usize,
    /// Quantized-wire rows: error against the float64 sum (docs/quantized.md).
    #[serde(default)]
    pub(crate) rel_rms: Option<f64>,
    #[serde(default)]
    pub(crate) max_rel: Option<f64>,
}

#[derive(Clone, Debug, Default, Serialize, serde::Deserialize)]
pub(crate) struct RankInfo {
    pub(crate) gpu: String,
    pub(crate) arch: String,
    pub(crate) nvrtc: String,
    pub(crate) nccl: Option<String>,
    pub(crate) memory: String,
    #[serde(default)]
    pub(crate) transport: String,
    /// Ranks on this rank's GPU (1: a GPU of its own).
    #[serde(default)]
    pub(crate) ranks_on_device: usize,
}

#[derive(Serialize, serde::Deserialize)]
pub(crate) struct RankOut {
    pub(crate) info: RankInfo,
    pub(crate) rows: Vec<Row>,
}

/// Runs the bench; errors are printed after `name` (the spelling the user typed).
pub fn run(args: GpuBenchArgs, name: &str) -> i32 {
    // Refused before any GPU is looked for, and with the usage status.
    if let Err(e) = validate_as(&args, &BENCH) {
        eprintln!("{name}: {e}");
        return crate::checks::USAGE;
    }
    match run_inner(args) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("{name}: {e}");
            1
        }
    }
}

/// Entry point of the internal `tpcomm gpu-bench-worker`: one rank, started
/// by the bench itself (launch.rs), never a whole bench.
pub fn run_worker(args: GpuBenchArgs) -> i32 {
    let name = "tpcomm gpu-bench-worker";
    if args.worker_rank.is_none() || args.rendezvous.is_none() {
        eprintln!(
            "{name}: internal: one rank of `tpcomm bench --device gpu`, which starts it with --worker-rank and --rendezvous; run `tpcomm bench --device gpu` instead"
        );
        return 2;
    }
    run(args, name)
}

fn run_inner(args: GpuBenchArgs) -> Result<()> {
    let (args, world, outs) = measure(args, &BENCH)?;
    report(&args, world, outs)
}

/// How the command that runs the measurement spells what its messages name:
/// each error names a flag of the command the user typed.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Spelling {
    /// The command, as its lines begin.
    pub(crate) command: &'static str,
    /// The flag that sets the number of ranks.
    pub(crate) ranks: &'static str,
    /// The flags of the smallest and the largest message.
    pub(crate) min: &'static str,
    pub(crate) max: &'static str,
    /// What to do instead on a machine without a CUDA GPU.
    pub(crate) without_gpu: &'static str,
}

/// `tpcomm bench` (and the internal `gpu-bench-worker`): `--ranks`, or its
/// alias `--gpus`.
pub(crate) const BENCH: Spelling = Spelling {
    command: "tpcomm bench",
    ranks: "--ranks",
    min: "--min-bytes",
    max: "--max-bytes",
    without_gpu: "`tpcomm bench --device cpu` measures CPU ranks",
};

/// `tpcomm tune`, which counts ranks with `--gpus` and has no `--ranks`.
pub(crate) const TUNE: Spelling = Spelling {
    command: "tpcomm tune",
    ranks: "--gpus",
    min: "--min",
    max: "--max",
    without_gpu: "`tpcomm tune --from-bench FILE` makes a table from GPU bench JSON measured on a machine with GPUs",
};

/// A worker process of a bench (this one's or the forward bench's): runs rank
/// `rank` of `gpus` with `rank_main(world, rendezvous)`, meeting the others
/// in `dir`, and writes what it returns to `dir`/result.rank{rank}.json for
/// the launcher.
pub(crate) fn write_worker_result<T: Serialize>(
    rank: usize,
    gpus: Option<usize>,
    dir: PathBuf,
    rank_main: impl FnOnce(usize, Rendezvous) -> Result<T>,
) -> Result<()> {
    let world = gpus.ok_or_else(|| Error::invalid("--gpus", "workers need it"))?;
    let out = rank_main(world, Rendezvous::Dir(dir.clone()))?;
    let path = dir.join(format!("result.rank{rank}.json"));
    let text = serde_json::to_string(&out).map_err(|e| Error::invalid("result", e.to_string()))?;
    std::fs::write(&path, text).map_err(|e| Error::io(format!("write {}", path.display()), e))
}

/// Runs the measurement (or, in a worker process, one rank of it) and returns
/// every rank's rows; `tpcomm tune` calls this too, with its own `spelling`.
pub(crate) fn measure(
    mut args: GpuBenchArgs,
    spelling: &Spelling,
) -> Result<(GpuBenchArgs, usize, Vec<RankOut>)> {
    validate_as(&args, spelling)?;
    if let (Some(rank), Some(dir)) = (args.worker_rank, args.rendezvous.clone()) {
        write_worker_result(rank, args.gpus, dir, |world, rv| {
            rank_main(rank, world, &args, rv)
        })?;
        std::process::exit(0);
    }
    tpcomm::cuda::ensure_driver()?;
    let n = CudaContext::device_count().map_err(|e| Error::Cuda {
        call: "cuDeviceGetCount".into(),
        detail: e.to_string(),
    })? as usize;
    let world = args.gpus.unwrap_or(n.min(tpcomm::transport::MAX_WORLD));
    if args.algos.iter().any(|a| a == "auto") && args.class.is_none() {
        // Resolve the table once here, so every rank (thread or process)
        // loads the same one and checks it against the same fingerprint.
        let (machine, _) = crate::machine::this_machine(None)?;
        let (_, source) = select::find_table(args.table.as_deref(), &machine)?;
        args.table = match source {
            select::TableSource::ClassDefaults => None,
            select::TableSource::Explicit(p)
            | select::TableSource::Env(p)
            | select::TableSource::DefaultLocation(p) => Some(p),
        };
        args.class = Some(machine.class.name().to_string());
        if machine.class == tpcomm::topology::MachineClass::SingleGpu && args.table.is_none() {
            // As a communicator here decides (select::for_this_machine):
            // without a table, the defaults of the transport's class.
            args.class = Some(
                match args.transport {
                    Transport::Host => "pcie-nop2p",
                    _ => "nvlink",
                }
                .to_string(),
            );
        }
        args.fingerprint = Some(machine.fingerprint);
    }
    if n == 0 {
        return Err(Error::Unsupported(format!(
            "this machine has no CUDA GPU to measure; {}",
            spelling.without_gpu
        )));
    }
    if !(2..=tpcomm::transport::MAX_WORLD).contains(&world) {
        return Err(Error::invalid(
            spelling.ranks,
            format!(
                "{world} ranks: the GPU bench takes 2 to {} (they go round-robin over this machine's {n} GPU(s))",
                tpcomm::transport::MAX_WORLD
            ),
        ));
    }
    let (launch, line) = choose_launch(args.launch, world, n, spelling.command, mps_on);
    if let Some(line) = line {
        eprintln!("{line}");
    }
    args.launch = Some(launch);
    let outs: Vec<RankOut> = match launch {
        Launch::Threads => run_threads(world, |r, rv| rank_main(r, world, &args, rv))?,
        Launch::Processes => run_procs(&args, world)?,
    };
    Ok((args, world, outs))
}

/// `--launch` as given, or else [`default_launch`]'s choice for `world`
/// ranks on `gpus` GPUs with the line the run prints (to stderr) saying
/// which and why, beginning with `command`. `mps` as for [`default_launch`]
/// ([`mps_on`] on a machine). `tpcomm bench --device gpu`, `tpcomm tune`
/// and `tpcomm bench forward` all decide here.
pub(crate) fn choose_launch(
    given: Option<Launch>,
    world: usize,
    gpus: usize,
    command: &str,
    mps: impl Fn(usize) -> Result<bool>,
) -> (Launch, Option<String>) {
    if let Some(given) = given {
        return (given, None);
    }
    let (chosen, why) = default_launch(world, gpus, mps);
    let line = format!(
        "{command}: ranks run as {}: {why} (--launch chooses)",
        chosen.name()
    );
    (chosen, Some(line))
}

/// Whether an MPS server serves GPU `device` (`tpcomm::cuda::mps_enabled`).
pub(crate) fn mps_on(device: usize) -> Result<bool> {
    let d = i32::try_from(device).map_err(|_| Error::invalid("GPU ordinal", device.to_string()))?;
    tpcomm::cuda::mps_enabled(d)
}

/// How ranks run when `--launch` is not given, and why, for the line the run
/// prints. Processes (as tensor parallelism runs) when every rank has a GPU
/// of its own (`world` ranks round-robin over `gpus`), or when an MPS server
/// serves every GPU that ranks share; otherwise threads, since processes
/// sharing a GPU without MPS run in time slices (milliseconds per call, see
/// `tpcomm::cuda::share::time_slice_warning`). `mps(device)` asks whether
/// MPS serves a GPU (`tpcomm::cuda::mps_enabled` on a machine; anything in
/// tests); an answer it cannot give counts as no MPS.
pub(crate) fn default_launch(
    world: usize,
    gpus: usize,
    mps: impl Fn(usize) -> Result<bool>,
) -> (Launch, String) {
    if world <= gpus {
        return (
            Launch::Processes,
            format!("every rank has a GPU of its own ({world} ranks, {gpus} GPUs)"),
        );
    }
    let gpus = gpus.max(1);
    let mut shared: Vec<usize> = (gpus..world).map(|r| r % gpus).collect();
    shared.sort_unstable();
    shared.dedup();
    let share = format!(
        "{world} ranks share {gpus} GPU{}",
        if gpus == 1 { "" } else { "s" }
    );
    for d in shared {
        let why = match mps(d) {
            Ok(true) => continue,
            Ok(false) => format!("no MPS server serves GPU {d}"),
            Err(e) => format!("whether an MPS server serves GPU {d} is unknown ({e})"),
        };
        return (
            Launch::Threads,
            format!(
                "{share} and {why}, so ranks as processes would run in time slices (milliseconds per call); start MPS (`nvidia-cuda-mps-control -d`) to run them as processes"
            ),
        );
    }
    (
        Launch::Processes,
        format!("{share} and an MPS server serves them"),
    )
}

/// Arguments as if given on the command line (for `tpcomm tune`).
impl GpuBenchArgs {
    /// Calls per timed repetition for a message of `bytes`.
    pub(crate) fn iters_for(&self, bytes: usize) -> usize {
        self.iters
            .unwrap_or(if bytes < (4 << 20) { 100 } else { 20 })
    }
    /// How the calls per repetition were chosen, for the report.
    pub(crate) fn iters_text(&self) -> String {
        match self.iters {
            Some(n) => n.to_string(),
            None => "100 (< 4 MiB) / 20".into(),
        }
    }
}

/// Most calls per timed repetition (`--iters`), as the CPU bench allows.
pub(crate) const MAX_CALLS: usize = crate::bench::MAX_CALLS;
/// Most timed repetitions per point (`--reps`).
pub(crate) const MAX_REPS: usize = 10_000;
/// Most input/output buffer pairs rotated through (`--rotate`).
pub(crate) const MAX_ROTATE: usize = 64;
/// The longest bound on a wait (`--timeout-ms`): under one day, as the CPU
/// bench's `--timeout` (one ceiling for every device and bench).
pub(crate) const MAX_TIMEOUT_MS: u64 = 86_399_999;

/// `--timeout-ms` of a GPU bench: 1 to [`MAX_TIMEOUT_MS`].
pub(crate) fn check_timeout_ms(ms: u64) -> Result<()> {
    if !(1..=MAX_TIMEOUT_MS).contains(&ms) {
        return Err(Error::invalid(
            "--timeout-ms",
            format!("{ms}: give 1 to {MAX_TIMEOUT_MS} milliseconds (under one day)"),
        ));
    }
    Ok(())
}

/// [`validate_as`] in `tpcomm bench`'s words.
#[cfg(test)]
fn validate(args: &GpuBenchArgs) -> Result<()> {
    validate_as(args, &BENCH)
}

/// Every option in its range before any GPU work, each error naming the
/// flag as `spelling`'s command takes it.
pub(crate) fn validate_as(args: &GpuBenchArgs, spelling: &Spelling) -> Result<()> {
    crate::checks::size_range(
        (spelling.min, args.min),
        (spelling.max, args.max),
        args.dtype,
    )?;
    if let Some(p) = &args.json {
        crate::checks::output_file("--json", p)?;
    }
    // Each count bounded on both sides, named by its own flag, before any
    // GPU work: a huge one would overflow a buffer's capacity or run for
    // for ever.
    for (flag, value, max, what) in [
        (
            "--iters",
            args.iters,
            MAX_CALLS,
            "calls per timed repetition",
        ),
        (
            "--reps",
            Some(args.reps),
            MAX_REPS,
            "timed repetitions per point",
        ),
        (
            "--rotate",
            Some(args.rotate),
            MAX_ROTATE,
            "buffer pairs (each as large as --max)",
        ),
    ] {
        if let Some(n) = value.filter(|n| !(1..=max).contains(n)) {
            return Err(Error::invalid(flag, format!("{n}: give 1 to {max} {what}")));
        }
    }
    check_timeout_ms(args.timeout_ms)?;
    if let Some(n) = args
        .gpus
        .filter(|n| !(2..=tpcomm::transport::MAX_WORLD).contains(n))
    {
        return Err(Error::invalid(
            spelling.ranks,
            format!(
                "{n} ranks: the GPU bench takes 2 to {}",
                tpcomm::transport::MAX_WORLD
            ),
        ));
    }
    if args.coll != crate::bench::coll::Coll::AllReduce {
        if let Some(a) = args
            .algos
            .iter()
            .find(|a| Wire::parse_quantized(a).is_some() || a.ends_with("-pdl"))
        {
            return Err(Error::invalid(
                "--algos",
                format!(
                    "{a} is an all-reduce algorithm; the {} runs tpcomm's kernel (any of one-shot, two-shot, auto) and nccl",
                    args.coll.name()
                ),
            ));
        }
    }
    for a in &args.algos {
        match Wire::parse_quantized(a) {
            Some(w) => {
                w?;
            }
            None if a != "nccl" => {
                parse_algo(a)?;
            }
            None => {}
        }
    }
    for m in &args.modes {
        if m != "eager" && m != "graph" {
            return Err(Error::invalid(
                "--modes",
                format!("{m:?} (expected eager or graph)"),
            ));
        }
    }
    Ok(())
}

/// A tpcomm algorithm name of `--algos`: `one-shot`, `two-shot`, `auto`, or
/// `one-shot-pdl` / `two-shot-pdl` (the same kernel launched with
/// programmatic dependent launch, so back-to-back calls overlap their
/// launches; sm_90+, ordinary elsewhere).
pub(crate) fn parse_algo(name: &str) -> Result<(Algo, tpcomm::cuda::Launch)> {
    use tpcomm::cuda::Launch;
    let bad = || {
        Error::invalid(
            "--algos",
            format!(
                "{name:?} (expected one-shot, two-shot, one-shot-pdl, two-shot-pdl, auto or nccl)"
            ),
        )
    };
    match name.strip_suffix("-pdl") {
        Some(base) => match base.parse::<Algo>() {
            Ok(a @ (Algo::OneShot | Algo::TwoShot)) => Ok((a, Launch::Overlapped)),
            _ => Err(bad()),
        },
        None => name
            .parse::<Algo>()
            .map(|a| (a, Launch::Ordinary))
            .map_err(|_| bad()),
    }
}

/// The transport routing decides for (one type for every call; `Auto`
/// never comes out of `GpuComm::transport` and maps to CUDA).
pub(crate) fn select_transport(t: Transport) -> select::Transport {
    t.for_routes()
}

/// A bench row's algorithm label as a selection candidate on `transport`
/// (the communicator's, as `RankInfo::transport` names it): the host
/// kernels' names (`host-delta` and `host-chunked`) are the host transport's
/// one-shot and two-shot; `auto:*` rows are not candidates.
pub(crate) fn row_candidate(transport: &str, algo: &str) -> Option<select::Candidate> {
    if algo == "nccl" {
        return Some(select::Candidate::NCCL);
    }
    if algo.starts_with("auto") {
        return None;
    }
    let algo = match algo {
        "host-delta" => "one-shot",
        "host-chunked" => "two-shot",
        a => a,
    };
    format!("{transport}:{algo}").parse().ok()
}
