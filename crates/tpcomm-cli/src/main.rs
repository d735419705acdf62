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

#[derive(Parser)]
#[command(
    name = "tpcomm",
    version,
    about = "Fast all-reduce for tensor-parallel inference on one machine"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
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
    /// Internal: one rank of `tpcomm bench --device gpu --launch processes`,
    /// which starts it with --worker-rank and --rendezvous (refused without).
    #[command(hide = true, name = "gpu-bench-worker")]
    GpuBenchWorker(gpu_bench::GpuBenchArgs),
    /// Measure every algorithm and NCCL at every size, eager and graph, and write this machine's tuning table.
    Tune(tune::TuneArgs),
    /// Which algorithm an all-reduce of a given size gets, why, and what the alternatives cost.
    Explain(explain::ExplainArgs),
}

fn main() {
    let cli = Cli::parse();
    // Before anything starts CUDA (which reads it once): the GPU bench, the
    // forward bench and tune run ranks as threads of this process, several per GPU when
    // ranks share one, and each rank's stream needs a hardware queue of its
    // own (docs/shared-gpu.md). A value the user gave is kept. Rank
    // processes get the user's value or CUDA's default (workers.rs).
    let _ = workers::USER_QUEUES.set(tpcomm::cuda::share::widen_queues_for_threads());
    std::process::exit(pipe::run(move || run(cli.command)));
}

/// Runs one command; returns its exit status.
fn run(command: Command) -> i32 {
    match command {
        Command::Plan(cmd) => {
            if let Err(e) = plan::run(cmd) {
                eprintln!("error: {e}");
                return 2;
            }
            0
        }
        Command::Probe(args) => probe::run(args),
        Command::GpuBenchWorker(args) => gpu_bench::run_worker(args),
        Command::Bench(cmd) => bench::unified::run(*cmd),
        Command::Tune(args) => tune::run(args),
        Command::Explain(args) => explain::run(args),
    }
}
