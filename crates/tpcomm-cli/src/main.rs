//! The `tpcomm` command.

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
}

fn main() {
    let cli = Cli::parse();
    match cli.command {
        Command::Version => println!("tpcomm {}", env!("CARGO_PKG_VERSION")),
    }
}
