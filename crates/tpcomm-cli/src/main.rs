//! The `tpcomm` command.
//!
//! No unsafe code, except in the GPU benchmarks' rank loops, which hand the
//! library raw device pointers of the buffers they allocated
//! (`StreamAllReduce::all_reduce_call`, the forward model) and switch off
//! cudarc's per-buffer events; each block there says why it is sound.
#![deny(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

mod bench;

use clap::{Parser, Subcommand};

mod checks;
mod explain;
#[allow(unsafe_code)]
mod forward_bench;
#[allow(unsafe_code)]
mod gpu_bench;
mod machine;
mod pipe;
mod plan;
mod probe;
mod tune;
mod workers;

/// What every command's exit status means (`tpcomm --help` ends with it).
const EXIT_STATUS: &str = "\
Exit status:
  0  done (also when the reader of stdout stops early, as `| head` does)
  1  the run failed, or a result it checked was wrong
  2  usage: an option was refused before any work started (nothing was run or
     written); every error of `tpcomm plan` is one";

#[derive(Parser)]
#[command(
    name = "tpcomm",
    version,
    about = "Fast all-reduce for tensor-parallel inference on one machine",
    after_help = EXIT_STATUS
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// The internal rank command that `tpcomm bench --device gpu --launch
/// processes` starts (gpu_bench/launch.rs). It is parsed apart from [`Cli`],
/// only when it is the first argument, so clap never offers it for a
/// mistyped command ("did you mean").
const GPU_BENCH_WORKER: &str = "gpu-bench-worker";

#[derive(Parser)]
#[command(name = "gpu-bench-worker", bin_name = "tpcomm gpu-bench-worker")]
struct WorkerCli {
    #[command(flatten)]
    args: gpu_bench::GpuBenchArgs,
}

#[derive(Subcommand)]
enum Command {
    /// Plan KV-cache memory and speculative decoding (no GPU needed).
    #[command(subcommand)]
    Plan(plan::PlanCommand),
    /// Show what links this machine's GPUs (NVLink, PCIe P2P), check P2P for real, print the machine class and fingerprint.
    Probe(probe::ProbeArgs),
    /// Time all-reduce on this machine's GPUs (every tpcomm algorithm and NCCL, eager and in CUDA graphs) or, without GPUs, on CPU ranks; nccl-tests columns, every result checked. `tpcomm bench forward`: all-reduce inside a transformer forward.
    Bench(Box<bench::unified::BenchCommand>),
    /// Measure every algorithm and NCCL at every size, eager and graph, and write this machine's tuning table.
    Tune(tune::TuneArgs),
    /// Which algorithm an all-reduce of a given size gets, why, and what the alternatives cost.
    Explain(explain::ExplainArgs),
}

fn main() {
    let job = parse(std::env::args_os().collect()).unwrap_or_else(|e| e.exit());
    // Before anything starts CUDA (which reads it once): the GPU bench, the
    // forward bench and tune run ranks as threads of this process, several per GPU when
    // ranks share one, and each rank's stream needs a hardware queue of its
    // own (docs/shared-gpu.md). A value the user gave is kept. Rank
    // processes get the user's value or CUDA's default (workers.rs).
    let _ = workers::USER_QUEUES.set(tpcomm::cuda::share::widen_queues_for_threads());
    std::process::exit(pipe::run(move || run(job)));
}

/// What this process was started to do.
enum Job {
    Command(Command),
    /// Internal: one rank of `tpcomm bench --device gpu --launch processes`,
    /// which starts it with --worker-rank and --rendezvous (refused without).
    GpuBenchWorker(gpu_bench::GpuBenchArgs),
}

/// The job of a command line (`argv[0]` first): the internal worker when
/// its name is the first argument, else one of [`Cli`]'s commands.
fn parse(argv: Vec<std::ffi::OsString>) -> Result<Job, clap::Error> {
    if argv.get(1).is_some_and(|a| a == GPU_BENCH_WORKER) {
        WorkerCli::try_parse_from(argv.into_iter().skip(1)).map(|w| Job::GpuBenchWorker(w.args))
    } else {
        Cli::try_parse_from(argv).map(|c| Job::Command(c.command))
    }
}

/// Runs one command; returns its exit status.
fn run(job: Job) -> i32 {
    let command = match job {
        Job::GpuBenchWorker(args) => return gpu_bench::run_worker(args),
        Job::Command(c) => c,
    };
    match command {
        Command::Plan(cmd) => {
            if let Err(e) = plan::run(cmd) {
                eprintln!("error: {e}");
                return checks::USAGE;
            }
            0
        }
        Command::Probe(args) => probe::run(args),
        Command::Bench(cmd) => bench::unified::run(*cmd),
        Command::Tune(args) => tune::run(args),
        Command::Explain(args) => explain::run(args),
    }
}
