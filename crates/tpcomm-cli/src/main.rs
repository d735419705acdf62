//! The `tpcomm` command.

mod bench;

use clap::{Parser, Subcommand};

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
    /// Time all-reduce across ranks of this machine (nccl-tests columns), every result checked.
    Bench(bench::BenchArgs),
}

fn main() {
    let cli = Cli::parse();
    match cli.command {
        Command::Version => println!("tpcomm {}", env!("CARGO_PKG_VERSION")),
        Command::Bench(args) => {
            if let Err(e) = bench::run(args) {
                eprintln!("tpcomm bench: {e}");
                std::process::exit(1);
            }
        }
    }
}
