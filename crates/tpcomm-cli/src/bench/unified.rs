//! `tpcomm bench`: one command for both devices. With `--device auto` (the
//! default) it measures GPUs when this machine has two or more CUDA GPUs and
//! CPU ranks otherwise. The options are one set; each device's own options
//! are refused, with the other device's spelling, when the run is on the
//! other device. The chosen device's options fill in the CPU bench's
//! arguments (`super::BenchArgs`) or the GPU bench's
//! (`crate::gpu_bench::GpuBenchArgs`), starting from that bench's defaults
//! (`defaults()`, which tests hold equal to its clap defaults).
//! `tpcomm bench forward` is the forward benchmark.

use super::{parse_duration, AlgoChoice, BenchArgs, Launch};
use crate::forward_bench::ForwardBenchArgs;
use crate::gpu_bench::GpuBenchArgs;
use clap::{Args, Subcommand, ValueEnum};
use std::path::PathBuf;
use std::time::Duration;
use tpcomm::cuda::Transport;
use tpcomm::{ByteSize, DType, ReduceOp};

/// The GPU bench's algorithms when `--algos all` (its default set).
const GPU_ALL: &str = "one-shot,two-shot,nccl";

#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct BenchCommand {
    #[command(subcommand)]
    sub: Option<BenchSub>,
    #[command(flatten)]
    opts: BenchOpts,
}

#[derive(Subcommand, Debug)]
enum BenchSub {
    /// A tensor-parallel transformer forward in a CUDA graph, once per
    /// all-reduce mode (none, NCCL, tpcomm, fused): what each all-reduce site
    /// costs inside it (GPUs).
    Forward(ForwardBenchArgs),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Device {
    /// GPUs when this machine has two or more CUDA GPUs, else CPU ranks.
    Auto,
    /// Ranks on CPU cores, over shared memory.
    Cpu,
    /// One rank per GPU.
    Gpu,
}

#[derive(Args, Clone, Debug)]
struct BenchOpts {
    /// Collective: all-reduce (default), all-gather, reduce-scatter,
    /// broadcast (on GPUs the last three run tpcomm's kernel, row `tpcomm`,
    /// and NCCL; on CPU ranks one row per size). Columns as
    /// nccl-tests: size is the whole array (all-gather: the output of a rank,
    /// world x its input; reduce-scatter: the input of a rank, world x its
    /// output; broadcast and all-reduce: the message); busbw = algbw x
    /// 2(n-1)/n for all-reduce, x (n-1)/n for all-gather and reduce-scatter,
    /// x 1 for broadcast.
    #[arg(long, value_enum)]
    coll: Option<super::coll::Coll>,
    /// Where ranks run.
    #[arg(long, value_enum, default_value_t = Device::Auto)]
    device: Device,
    /// How ranks run: processes (GPUs share buffers by CUDA IPC) or
    /// threads (GPUs by peer access). Default on CPU ranks: processes. Default
    /// on GPUs: processes when every rank has a GPU of its own or an MPS
    /// server serves the GPUs ranks share, else threads (processes that share
    /// a GPU without MPS run in time slices, milliseconds per call); the run
    /// prints which it chose and why.
    #[arg(long, value_enum)]
    launch: Option<Launch>,
    /// Smallest message, a whole number of --dtype elements; sizes double up
    /// to --max-bytes. Default 1KiB.
    #[arg(long, visible_alias = "min")]
    min_bytes: Option<ByteSize>,
    /// Largest message, a whole number of --dtype elements (on GPUs also the
    /// communicator's buffer). Default 64MiB.
    #[arg(long, visible_alias = "max")]
    max_bytes: Option<ByteSize>,
    /// Element type: f32, f16, bf16. Default: f32 on CPU, bf16 on GPUs.
    #[arg(long)]
    dtype: Option<DType>,
    /// Algorithms, comma separated. CPU: one of auto, one-shot, two-shot, all
    /// (default all: one-shot and two-shot). GPU: any of one-shot, two-shot,
    /// auto (rows `auto:<choice>`: what the library's selection picks), nccl,
    /// one-shot-pdl, two-shot-pdl (the kernels launched with programmatic
    /// dependent launch, sm_90+); all = one-shot,two-shot,nccl (the default).
    #[arg(long, visible_alias = "algo", value_delimiter = ',')]
    algos: Vec<String>,
    /// CPU: timed calls per size (default from 1000 for small sizes down to
    /// 20, about 2 GiB of traffic per size). GPU: calls per timed repetition
    /// and per captured graph (default 20).
    #[arg(long)]
    iters: Option<usize>,
    /// Also write the results as JSON here (tpcomm::report::BenchReport); its
    /// directory must exist and be writable (checked before the run).
    #[arg(long)]
    json: Option<PathBuf>,
    /// Bound on every wait, e.g. "5s", "500ms". Default 10s on CPU, 20s on GPUs.
    #[arg(long, value_parser = parse_duration, conflicts_with = "timeout_ms")]
    timeout: Option<Duration>,
    /// Bound on every wait, in milliseconds (the same as --timeout).
    #[arg(long)]
    timeout_ms: Option<u64>,

    /// Number of ranks. CPU: 2 to 64, default 2. GPUs: 2 to 8, default every GPU;
    /// ranks go round-robin over the GPUs, so more ranks than GPUs share
    /// them (rows then say "shared GPU": never an N-GPU result). CPU ranks
    /// beyond the cores this process may use get a warning: their timings are
    /// unrepresentative.
    #[arg(long)]
    ranks: Option<usize>,
    /// CPU: reduce op: sum, max, min (GPUs: sum only). Default sum.
    #[arg(long, help_heading = "CPU ranks")]
    op: Option<ReduceOp>,
    /// CPU: untimed calls before timing (default 5).
    #[arg(long, help_heading = "CPU ranks")]
    warmup: Option<usize>,
    /// CPU: largest message reduced in one piece (fixes the segment size; 4KiB
    /// to 16GiB, default 8MiB).
    #[arg(long, help_heading = "CPU ranks")]
    max_message: Option<ByteSize>,
    /// CPU: most bytes one epoch carries; larger messages are pipelined (at
    /// least 4KiB and --max-message / 2048; default 8MiB).
    #[arg(long, help_heading = "CPU ranks")]
    piece: Option<ByteSize>,
    /// CPU: where ranks meet (default: a fresh temporary directory).
    #[arg(long, help_heading = "CPU ranks")]
    rendezvous: Option<PathBuf>,

    /// GPU: transport: cuda (P2P), host (through pinned host memory, no P2P
    /// needed; one-shot = delta words, two-shot = chunked),
    /// auto (host when any
    /// pair lacks P2P; the default).
    #[arg(long, help_heading = "GPUs")]
    transport: Option<Transport>,
    /// GPU: the same as --ranks (kept for earlier scripts).
    #[arg(long, help_heading = "GPUs")]
    gpus: Option<usize>,
    /// GPU: modes, comma separated: eager, graph (default both). CPU ranks run eager only.
    #[arg(long, value_delimiter = ',', help_heading = "GPUs")]
    modes: Vec<String>,
    /// GPU: timed repetitions; the median is reported (default 25).
    #[arg(long, help_heading = "GPUs")]
    reps: Option<usize>,
    /// GPU: input/output buffer pairs rotated through, so caches do not flatter (default 4).
    #[arg(long, help_heading = "GPUs")]
    rotate: Option<usize>,
    /// GPU: also measure the midpoints between powers of two (1.5 x each), as `tpcomm tune` does.
    #[arg(long, help_heading = "GPUs")]
    midpoints: bool,
    /// GPU: tuning table for `--algos auto` (else $TPCOMM_TUNING_TABLE, then
    /// the default location for this machine's fingerprint, then the class defaults).
    #[arg(long, value_name = "FILE", help_heading = "GPUs")]
    table: Option<PathBuf>,
}

impl BenchCommand {
    /// The forward bench's arguments, for `tpcomm bench forward`.
    #[cfg(test)]
    pub(crate) fn forward(self) -> Option<ForwardBenchArgs> {
        self.sub.map(|BenchSub::Forward(a)| a)
    }
}

/// What `tpcomm bench` resolved to.
#[derive(Debug)]
enum Run {
    Cpu(BenchArgs),
    Gpu(GpuBenchArgs),
}

/// Entry point of `tpcomm bench`; returns the exit code.
pub fn run(cmd: BenchCommand) -> i32 {
    if let Some(BenchSub::Forward(args)) = cmd.sub {
        return crate::forward_bench::run(args, "tpcomm bench forward");
    }
    match resolve(&cmd.opts, detect) {
        Ok(Run::Gpu(args)) => crate::gpu_bench::run(args, "tpcomm bench"),
        Ok(Run::Cpu(args)) => match super::run(args) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("tpcomm bench: {e}");
                1
            }
        },
        Err(e) => {
            eprintln!("tpcomm bench: {e}");
            2
        }
    }
}

/// Usable CUDA GPUs, or why there are none; never panics without a driver
/// (ensure_driver loads it before anything calls into it).
fn detect() -> Result<usize, String> {
    tpcomm::cuda::ensure_driver().map_err(|e| e.to_string())?;
    tpcomm::cuda::cudarc::driver::CudaContext::device_count()
        .map(|n| n.max(0) as usize)
        .map_err(|e| format!("cuDeviceGetCount failed: {e}"))
}

/// Picks the device and builds that bench's arguments. `gpus` is asked only
/// for `--device auto`, and never in a CPU rank's worker process (which runs
/// with its parent's arguments and must land on the CPU bench again).
fn resolve(o: &BenchOpts, gpus: impl FnOnce() -> Result<usize, String>) -> Result<Run, String> {
    // `why`: the reason auto chose CPU ranks, in full for error messages;
    // `found`: the same in a few words for the line a run starts with (a
    // machine without GPUs is the normal case here, not an error).
    let (device, why, found) = match o.device {
        Device::Cpu => (Device::Cpu, None, None),
        Device::Gpu => (Device::Gpu, None, None),
        Device::Auto if tpcomm::env::BENCH_WORKER.checked_value().is_some() => {
            (Device::Cpu, None, None)
        }
        Device::Auto => match gpus() {
            Ok(n) if n >= 2 => (Device::Gpu, None, None),
            Ok(n) => {
                let w = format!("{n} CUDA GPU here, the GPU bench needs 2");
                (Device::Cpu, Some(w.clone()), Some(w))
            }
            Err(e) => (
                Device::Cpu,
                Some(format!("no usable CUDA GPU: {e}")),
                Some("no GPU found".to_string()),
            ),
        },
    };
    // A GPU-only option on CPU ranks: say why auto did not pick GPUs.
    let auto_note = |msg: String| match &why {
        Some(w) if gpu_only_option(o).is_some() => {
            format!("{msg} (--device auto chose CPU ranks: {w})")
        }
        _ => msg,
    };
    match device {
        Device::Gpu => gpu_args(o).map(Run::Gpu),
        _ => {
            let args = cpu_args(o).map_err(auto_note)?;
            // Checked before the line below, so a bad value is the only message.
            args.validate()?;
            if let Some(found) = &found {
                eprintln!(
                    "tpcomm bench: {found}, so running the CPU all-reduce (shared memory between CPU ranks)"
                );
            }
            Ok(Run::Cpu(args))
        }
    }
}

/// The first option given that only the GPU bench takes, as a message.
fn gpu_only_option(o: &BenchOpts) -> Option<&'static str> {
    let gpu_only = [
        (
            o.transport.is_some(),
            "--transport picks how GPUs exchange data; CPU ranks always use shared memory",
        ),
        (
            o.gpus.is_some(),
            "--gpus counts GPUs; CPU ranks take --ranks",
        ),
        (
            o.modes.iter().any(|m| m != "eager"),
            "--modes: CPU ranks run eager only (graph mode is CUDA graphs)",
        ),
        (
            o.reps.is_some(),
            "--reps is for the GPU bench; CPU ranks take --iters and --warmup",
        ),
        (o.rotate.is_some(), "--rotate is for the GPU bench"),
        (o.midpoints, "--midpoints is for the GPU bench"),
        (
            o.table.is_some(),
            "--table is for the GPU bench's --algos auto",
        ),
    ];
    gpu_only
        .iter()
        .find(|(given, _)| *given)
        .map(|(_, msg)| *msg)
}

/// For each option of `o` that is given (`Some(x)`), `a.field = x`; the
/// field has the option's name, or the one after `as`.
macro_rules! given {
    ($a:ident <- $o:ident: $($from:ident $(as $to:ident)?),+ $(,)?) => {
        $(given!(@one $a, $o, $from $(, $to)?);)+
    };
    (@one $a:ident, $o:ident, $from:ident) => {
        given!(@one $a, $o, $from, $from)
    };
    (@one $a:ident, $o:ident, $from:ident, $to:ident) => {
        if let Some(x) = $o.$from {
            $a.$to = x;
        }
    };
}

fn cpu_args(o: &BenchOpts) -> Result<BenchArgs, String> {
    if let Some(msg) = gpu_only_option(o) {
        return Err(format!("{msg} (use --device gpu on a machine with GPUs)"));
    }
    let mut a = BenchArgs::defaults();
    if let Some(c) = o.coll {
        if c != super::coll::Coll::AllReduce && !o.algos.is_empty() {
            return Err(format!(
                "--algos applies to the all-reduce only; the {} has one algorithm on CPU ranks",
                c.name()
            ));
        }
        a.coll = c;
    }
    given!(a <- o: ranks, launch, min_bytes, max_bytes, dtype, op, warmup, max_message, piece);
    if let Some(algo) = cpu_algo(&o.algos)? {
        a.algo = algo;
    }
    if o.iters.is_some() {
        a.iters = o.iters;
    }
    if o.json.is_some() {
        a.json = o.json.clone();
    }
    if o.rendezvous.is_some() {
        a.rendezvous = o.rendezvous.clone();
    }
    match (o.timeout, o.timeout_ms) {
        (Some(d), _) => a.timeout = d,
        (None, Some(ms)) => a.timeout = cpu_timeout_ms(ms)?,
        (None, None) => {}
    }
    Ok(a)
}

/// The longest `--timeout-ms` the CPU bench takes (`--timeout` is under one
/// day): the GPU benches' ceiling.
const CPU_MAX_TIMEOUT_MS: u64 = crate::gpu_bench::MAX_TIMEOUT_MS;

/// `--timeout-ms` for the CPU bench: the duration `--timeout {ms}ms` gives,
/// refused in the words of the flag the user typed.
fn cpu_timeout_ms(ms: u64) -> Result<Duration, String> {
    parse_duration(&format!("{ms}ms")).map_err(|_| {
        format!(
            "invalid value '{ms}' for '--timeout-ms <TIMEOUT_MS>': give 1 to {CPU_MAX_TIMEOUT_MS} milliseconds (under one day)"
        )
    })
}

/// The CPU bench takes one algorithm choice; `one-shot,two-shot` is `all`.
fn cpu_algo(algos: &[String]) -> Result<Option<AlgoChoice>, String> {
    if algos.iter().any(|a| a == "nccl") {
        return Err(
            "--algos nccl: NCCL rows need GPUs (use --device gpu on a machine with GPUs); CPU ranks time auto, one-shot, two-shot or all".into(),
        );
    }
    let mut set: Vec<&str> = algos.iter().map(String::as_str).collect();
    set.sort_unstable();
    set.dedup();
    match set.as_slice() {
        [] => Ok(None),
        [one] => cpu_algo_choice(one).map(Some),
        ["one-shot", "two-shot"] => Ok(Some(AlgoChoice::All)),
        _ => Err(format!(
            "--algos {}: CPU ranks take one of auto, one-shot, two-shot or all",
            algos.join(",")
        )),
    }
}

/// One CPU algorithm by name, refused in the words the CPU bench's own
/// `--algo` would use.
fn cpu_algo_choice(name: &str) -> Result<AlgoChoice, String> {
    if let Ok(choice) = AlgoChoice::from_str(name, false) {
        return Ok(choice);
    }
    let values: Vec<String> = AlgoChoice::value_variants()
        .iter()
        .filter_map(|v| v.to_possible_value())
        .map(|v| v.get_name().to_string())
        .collect();
    let values = format!("[possible values: {}]", values.join(", "));
    Err(if name.is_empty() {
        format!("a value is required for '--algo <ALGO>' but none was supplied {values}")
    } else {
        format!("invalid value '{name}' for '--algo <ALGO>' {values}")
    })
}

fn gpu_args(o: &BenchOpts) -> Result<GpuBenchArgs, String> {
    let cpu_only = [
        (
            o.ranks.is_some() && o.gpus.is_some(),
            "--ranks and --gpus both count GPU ranks; give one",
        ),
        (
            o.op.is_some_and(|op| op != ReduceOp::Sum),
            "--op: the GPU bench measures sum only",
        ),
        (
            o.warmup.is_some(),
            "--warmup is for CPU ranks; the GPU bench warms up on its own and takes --reps",
        ),
        (
            o.max_message.is_some(),
            "--max-message is for CPU ranks; on GPUs --max-bytes sets the buffer",
        ),
        (o.piece.is_some(), "--piece is for CPU ranks"),
        (
            o.rendezvous.is_some(),
            "--rendezvous is for CPU ranks; GPU ranks meet on their own",
        ),
    ];
    if let Some((_, msg)) = cpu_only.iter().find(|(given, _)| *given) {
        return Err(format!(
            "{msg} (the run is on GPUs; --device cpu runs CPU ranks)"
        ));
    }
    // Checked here, before any GPU is looked for, so a misspelt algorithm
    // gets the list of valid ones on any machine.
    // Quantized wires (int8, fp8/128) are rows of their own, their group
    // checked here too.
    for a in o.algos.iter().filter(|a| *a != "all" && *a != "nccl") {
        match tpcomm::quant::Wire::parse_quantized(a) {
            Some(w) => {
                w.map_err(|e| format!("--algos {a}: {e}"))?;
            }
            None => {
                crate::gpu_bench::parse_algo(a).map_err(|e| {
                    format!("{e} (or all, or a quantized wire: int8 or fp8, optionally with a group: int8/32, fp8/128)")
                })?;
            }
        }
    }
    let mut a = GpuBenchArgs::defaults();
    given!(a <- o: coll, transport, dtype, reps, rotate);
    given!(a <- o: min_bytes as min, max_bytes as max);
    // Not given: the GPU bench decides from the machine (and says so).
    a.launch = o.launch;
    if let Some(n) = o.gpus.or(o.ranks) {
        a.gpus = Some(n);
    }
    if !o.algos.is_empty() {
        a.algos = gpu_algos(&o.algos);
    }
    if !o.modes.is_empty() {
        a.modes = o.modes.clone();
    }
    if o.iters.is_some() {
        a.iters = o.iters;
    }
    match (o.timeout, o.timeout_ms) {
        (Some(d), _) => a.timeout_ms = d.as_millis().max(1) as u64,
        (None, Some(ms)) => a.timeout_ms = ms,
        (None, None) => {}
    }
    if o.json.is_some() {
        a.json = o.json.clone();
    }
    a.midpoints = o.midpoints;
    if o.table.is_some() {
        a.table = o.table.clone();
    }
    Ok(a)
}

/// The GPU bench's algorithm list: `all` is its default set.
fn gpu_algos(algos: &[String]) -> Vec<String> {
    algos
        .iter()
        .flat_map(|a| {
            if a == "all" {
                GPU_ALL.split(',').map(str::to_string).collect()
            } else {
                vec![a.clone()]
            }
        })
        .collect()
}

#[cfg(test)]
mod tests;
