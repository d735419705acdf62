//! How the ranks run: a process per GPU (the command re-executes itself as
//! workers, which meet in a directory) or a thread per GPU in this process.

use super::rank::rank_main;
use super::{GpuBenchArgs, RankOut};
use tpcomm::cuda::{Rendezvous, ThreadGroup};
use tpcomm::{Error, Result};

/// One thread per GPU in this process (`--launch threads`).
pub(super) fn run_threads(args: &GpuBenchArgs, world: usize) -> Result<Vec<RankOut>> {
    let group = ThreadGroup::new(world);
    let hs: Vec<_> = (0..world)
        .map(|r| {
            let (a, rv) = (args.clone(), Rendezvous::Threads(group.clone()));
            std::thread::spawn(move || rank_main(r, world, &a, rv))
        })
        .collect();
    hs.into_iter()
        .map(|h| {
            h.join()
                .map_err(|_| Error::Aborted("a rank thread panicked".into()))?
        })
        .collect::<Result<_>>()
}

pub(super) fn run_procs(args: &GpuBenchArgs, world: usize) -> Result<Vec<RankOut>> {
    let exe = std::env::current_exe().map_err(|e| Error::io("find this executable", e))?;
    let dir = std::env::temp_dir().join(format!(
        "tpcomm-gpu-bench-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    ));
    std::fs::create_dir_all(&dir).map_err(|e| Error::io(format!("create {}", dir.display()), e))?;
    let mut children = Vec::new();
    for r in 0..world {
        let mut cmd = std::process::Command::new(&exe);
        cmd.args(worker_argv(args, world, r, &dir));
        children.push(
            cmd.spawn()
                .map_err(|e| Error::io("start a worker process", e))?,
        );
    }
    let mut failed = Vec::new();
    for (r, mut c) in children.into_iter().enumerate() {
        let status = c.wait().map_err(|e| Error::io("wait for a worker", e))?;
        if !status.success() {
            failed.push(format!("rank {r}: {status}"));
        }
    }
    if !failed.is_empty() {
        return Err(Error::Aborted(format!(
            "worker processes failed ({}); their messages are above",
            failed.join(", ")
        )));
    }
    let outs = (0..world)
        .map(|r| {
            let p = dir.join(format!("result.rank{r}.json"));
            let text = std::fs::read_to_string(&p)
                .map_err(|e| Error::io(format!("read {}", p.display()), e))?;
            serde_json::from_str(&text).map_err(|e| Error::invalid("worker result", e.to_string()))
        })
        .collect::<Result<Vec<RankOut>>>()?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(outs)
}

/// The command line of worker `rank`: the hidden `gpu-bench` spelling with
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
        "gpu-bench",
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
        "--iters",
        &args.iters.to_string(),
        "--reps",
        &args.reps.to_string(),
        "--rotate",
        &args.rotate.to_string(),
        "--timeout-ms",
        &args.timeout_ms.to_string(),
        "--transport",
        args.transport.name(),
    ]));
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
