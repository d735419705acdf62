//! How the forward bench's ranks run as processes: the command re-executes
//! itself as one worker per rank, which meet in a directory. (Thread ranks
//! run through the GPU bench's `run_threads`.)

use super::RankOut;
use std::time::Duration;
use tpcomm::Result;

/// Starts one worker process per rank with this command's own arguments and
/// collects what each wrote.
pub(super) fn run_workers(world: usize, add_gpus: bool, timeout: Duration) -> Result<Vec<RankOut>> {
    crate::workers::run_worker_processes("forward-bench", world, timeout, |r, dir| {
        worker_argv(std::env::args_os().skip(1), add_gpus, world, r, dir)
    })
}

/// A worker's command line: this command's own (`bench forward ...`), plus
/// the rank, the meeting directory and, when the user left it out, the world
/// size.
pub(super) fn worker_argv(
    own: impl Iterator<Item = std::ffi::OsString>,
    add_gpus: bool,
    world: usize,
    rank: usize,
    dir: &std::path::Path,
) -> Vec<std::ffi::OsString> {
    let mut v: Vec<std::ffi::OsString> = own.collect();
    if add_gpus {
        v.extend(["--gpus".into(), world.to_string().into()]);
    }
    v.extend([
        "--worker-rank".into(),
        rank.to_string().into(),
        "--rendezvous".into(),
        dir.as_os_str().to_owned(),
    ]);
    v
}
