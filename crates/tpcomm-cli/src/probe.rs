//! `tpcomm probe`: what links the GPUs of this machine.

use clap::Args;
use std::path::PathBuf;
use tpcomm::topology::{self, format, ProbeOptions, Topology};

#[derive(Args, Debug)]
pub struct ProbeArgs {
    /// Print the topology as JSON on stdout, or, with FILE, write it there
    /// (and print the table on stdout; its directory must exist).
    #[arg(long, value_name = "FILE", num_args = 0..=1, default_missing_value = "-")]
    json: Option<PathBuf>,

    /// Skip the peer copy test (pattern check, latency and bandwidth of a
    /// 4 KiB and a 64 MiB copy between every two GPUs) and the P2P check
    /// with the kernels' own stores.
    #[arg(long)]
    no_copy_test: bool,

    /// Show a topology from a file (TOML, or JSON from `tpcomm probe --json`)
    /// instead of probing this machine; needs no GPU.
    #[arg(long, value_name = "FILE")]
    from: Option<PathBuf>,
}

/// Runs the subcommand; returns the process exit code.
pub fn run(args: ProbeArgs) -> i32 {
    // Where the JSON goes, checked before the GPUs are probed.
    let options = match args.json.as_deref().filter(|p| p.as_os_str() != "-") {
        Some(p) => crate::checks::output_file("--json", p),
        None => Ok(()),
    };
    crate::checks::exit_status("probe", options, || run_inner(&args))
}

fn run_inner(args: &ProbeArgs) -> tpcomm::Result<()> {
    let mut check = None;
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
            let topo = topology::probe(&opts)?;
            if opts.copy_test {
                check = kernel_check(&topo);
            }
            topo
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
    if let Some(line) = check {
        // On stderr when stdout carries the JSON.
        match args.json.as_deref() {
            Some(p) if p.as_os_str() == "-" => eprintln!("{line}"),
            _ => println!("{line}"),
        }
    }
    Ok(())
}

/// The P2P check a communicator over every GPU of this machine makes at
/// creation (`tpcomm::cuda::transport::p2p::check`, ranks as threads, one per GPU), when
/// the driver allows P2P between every pair: the verdict in one line.
fn kernel_check(topo: &Topology) -> Option<String> {
    let world = topo.gpus.len();
    if !(2..=tpcomm::transport::MAX_WORLD).contains(&world)
        || tpcomm::select::transport_of(topo) != tpcomm::select::Transport::Cuda
    {
        return None;
    }
    let group = tpcomm::cuda::ThreadGroup::new(world);
    let timeout = std::time::Duration::from_secs(10);
    let verdicts: Vec<tpcomm::Result<tpcomm::cuda::transport::p2p::check::Verdict>> =
        std::thread::scope(|s| {
            let hs: Vec<_> = (0..world)
                .map(|rank| {
                    let rv = tpcomm::cuda::Rendezvous::Threads(group.clone());
                    s.spawn(move || {
                        tpcomm::cuda::transport::p2p::check::run(rank, world, rank, &rv, timeout)
                    })
                })
                .collect();
            hs.into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(tpcomm::Error::Aborted("a check thread panicked".into()))
                    })
                })
                .collect()
        });
    Some(match verdicts.into_iter().next() {
        Some(Ok(v)) => format!(
            "P2P check (the kernels' own stores, all {world} GPUs): {}",
            v.why
        ),
        Some(Err(e)) => format!("P2P check (the kernels' own stores): did not complete ({e})"),
        None => return None,
    })
}
