//! `tpcomm probe`: what links the GPUs of this machine.

use clap::Args;
use std::path::PathBuf;
use tpcomm::topology::{self, format, ProbeOptions, Topology};

#[derive(Args, Debug)]
pub struct ProbeArgs {
    /// Print the topology as JSON on stdout, or, with FILE, write it there
    /// (and print the table on stdout).
    #[arg(long, value_name = "FILE", num_args = 0..=1, default_missing_value = "-")]
    json: Option<PathBuf>,

    /// Skip the peer copy test (pattern check, latency and bandwidth of a
    /// 4 KiB and a 64 MiB copy between every two GPUs).
    #[arg(long)]
    no_copy_test: bool,

    /// Show a topology from a file (TOML, or JSON from `tpcomm probe --json`)
    /// instead of probing this machine; needs no GPU.
    #[arg(long, value_name = "FILE")]
    from: Option<PathBuf>,
}

/// Runs the subcommand; returns the process exit code.
pub fn run(args: ProbeArgs) -> i32 {
    match run_inner(&args) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("tpcomm probe: {e}");
            1
        }
    }
}

fn run_inner(args: &ProbeArgs) -> tpcomm::Result<()> {
    let topo = match &args.from {
        Some(path) => Topology::from_path(path)?,
        None => {
            let opts = ProbeOptions {
                copy_test: !args.no_copy_test,
                ..ProbeOptions::default()
            };
            if opts.copy_test {
                eprintln!(
                    "tpcomm probe: probing GPUs and timing peer copies ({} and {}); --no-copy-test skips the copies",
                    opts.small_copy, opts.large_copy
                );
            }
            topology::probe(&opts)?
        }
    };
    match args.json.as_deref() {
        Some(p) if p.as_os_str() == "-" => println!("{}", topo.to_json()),
        Some(p) => {
            std::fs::write(p, topo.to_json() + "\n")
                .map_err(|e| tpcomm::Error::io(format!("writing {}", p.display()), e))?;
            print!("{}", format::render(&topo));
            eprintln!("tpcomm probe: wrote {}", p.display());
        }
        None => print!("{}", format::render(&topo)),
    }
    Ok(())
}
