//! The `tpcomm` command.

mod bench;

use clap::{Parser, Subcommand};

mod gpu_bench;
mod plan;
mod probe;

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
    /// Print the version (placeholder until subcommands land).
    Version,
    /// Plan KV-cache memory and speculative decoding (no GPU needed).
    #[command(subcommand)]
    Plan(plan::PlanCommand),
    /// Show what links this machine's GPUs (NVLink, PCIe P2P), check P2P for real, print the machine class and fingerprint.
    Probe(probe::ProbeArgs),
    /// All-reduce over GPUs with tpcomm's CUDA kernels and NCCL, eager and in CUDA graphs, every result checked.
    GpuBench(gpu_bench::GpuBenchArgs),
    /// Time all-reduce across ranks of this machine (nccl-tests columns), every result checked.
    Bench(bench::BenchArgs),
}

fn main() {
    let cli = Cli::parse();
    match cli.command {
        Command::Version => println!("tpcomm {}", env!("CARGO_PKG_VERSION")),
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
    }
}
