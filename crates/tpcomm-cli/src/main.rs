//! The `tpcomm` command.

mod bench;

use clap::{Parser, Subcommand};

mod explain;
mod forward_bench;
mod gpu_bench;
mod plan;
mod probe;
mod tune;

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
    /// All-reduce over GPUs with tpcomm's CUDA kernels and NCCL, eager and in CUDA graphs, every result checked.
    GpuBench(gpu_bench::GpuBenchArgs),
    /// Time all-reduce across ranks of this machine (nccl-tests columns), every result checked.
    Bench(bench::BenchArgs),
    /// A tensor-parallel transformer forward in a CUDA graph, once per all-reduce mode (none, NCCL, tpcomm, fused): what each all-reduce site costs inside it.
    ForwardBench(forward_bench::ForwardBenchArgs),
    /// Measure every algorithm and NCCL at every size, eager and graph, and write this machine's tuning table.
    Tune(tune::TuneArgs),
    /// Which algorithm an all-reduce of a given size gets, why, and what the alternatives cost.
    Explain(explain::ExplainArgs),
}

fn main() {
    let cli = Cli::parse();
    match cli.command {
        Command::Plan(cmd) => {
            if let Err(e) = plan::run(cmd) {
                eprintln!("error: {e}");
                std::process::exit(2);
            }
        }
        Command::Probe(args) => std::process::exit(probe::run(args)),
        Command::GpuBench(args) => std::process::exit(gpu_bench::run(args)),
        Command::Bench(args) => {
            if let Err(e) = bench::run(args) {
                eprintln!("tpcomm bench: {e}");
                std::process::exit(1);
            }
        }
        Command::ForwardBench(args) => std::process::exit(forward_bench::run(args)),
        Command::Tune(args) => std::process::exit(tune::run(args)),
        Command::Explain(args) => std::process::exit(explain::run(args)),
    }
}
