//! How the ranks run: a process per GPU (the command re-executes itself as
//! workers, which meet in a directory) or a thread per GPU in this process.

use super::{GpuBenchArgs, RankOut};
use tpcomm::cuda::{Rendezvous, ThreadGroup};
use tpcomm::{Error, Result};

/// One thread per rank in this process (`--launch threads`), meeting through
/// a thread group: `rank(r, rendezvous)` is rank r's whole run. The GPU bench
/// and the forward bench run their thread ranks here.
pub(crate) fn run_threads<T: Send>(
    world: usize,
    rank: impl Fn(usize, Rendezvous) -> Result<T> + Sync,
) -> Result<Vec<T>> {
    let group = ThreadGroup::new(world);
    let rank = &rank;
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..world)
            .map(|r| {
                let rv = Rendezvous::Threads(group.clone());
                s.spawn(move || rank(r, rv))
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .map_err(|_| Error::Aborted("a rank thread panicked".into()))?
            })
            .collect::<Result<_>>()
    })
}

pub(super) fn run_procs(args: &GpuBenchArgs, world: usize) -> Result<Vec<RankOut>> {
    let timeout = std::time::Duration::from_millis(args.timeout_ms);
    crate::workers::run_worker_processes("gpu-bench", world, timeout, |r, dir| {
        worker_argv(args, world, r, dir)
    })
}

/// The command line of worker `rank`: the internal `gpu-bench-worker` with
/// every option that shapes the measurement, so each worker measures exactly
/// what the parent was asked for.
pub(super) fn worker_argv(
    args: &GpuBenchArgs,
    world: usize,
    rank: usize,
    dir: &std::path::Path,
) -> Vec<std::ffi::OsString> {
    use std::ffi::OsString;
    let strs = |items: &[&str]| items.iter().map(OsString::from).collect::<Vec<_>>();
    let mut v = strs(&[
        "gpu-bench-worker",
        "--gpus",
        &world.to_string(),
        "--worker-rank",
        &rank.to_string(),
        "--rendezvous",
    ]);
    v.push(dir.as_os_str().to_owned());
    v.extend(strs(&[
        "--dtype",
        args.dtype.name(),
        "--min",
        &args.min.bytes().to_string(),
        "--max",
        &args.max.bytes().to_string(),
        "--algos",
        &args.algos.join(","),
        "--modes",
        &args.modes.join(","),
        "--reps",
        &args.reps.to_string(),
        "--rotate",
        &args.rotate.to_string(),
        "--timeout-ms",
        &args.timeout_ms.to_string(),
        "--transport",
        args.transport.name(),
        "--coll",
        args.coll.name(),
    ]));
    if let Some(n) = args.iters {
        v.extend(strs(&["--iters", &n.to_string()]));
    }
    if args.midpoints {
        v.push("--midpoints".into());
    }
    if let Some(t) = &args.table {
        v.push("--table".into());
        v.push(t.as_os_str().to_owned());
    }
    if let Some(c) = &args.class {
        v.extend(strs(&["--class", c]));
    }
    if let Some(f) = &args.fingerprint {
        v.extend(strs(&["--fingerprint", f]));
    }
    v
}
