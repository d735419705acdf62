//! The `tpcomm` command.

use clap::{Parser, Subcommand};

mod plan;

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
    }
}
