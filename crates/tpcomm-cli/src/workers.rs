//! Rank processes and their supervision, for every command that starts one
//! process per rank (`tpcomm bench` on CPU ranks, the GPU and forward
//! benches).
//!
//! The parent never waits on one child blindly: it polls all of them, and
//! as soon as one fails (exits unsuccessfully or by a signal) or stays
//! stopped (SIGSTOP) longer than the ranks' own timeout, it kills every rank
//! and reports which one it was. The peers of a stopped rank time out after
//! the timeout and fail, so every rank is gone within timeout + a poll.
//! Once the ranks are gone it removes the shared-memory segments a rank
//! killed during set-up left (`tpcomm::cpu::sweep_stale_segments`).
//!
//! Each rank process drives one rank, so it gets CUDA's own number of
//! hardware queues (or the user's CUDA_DEVICE_MAX_CONNECTIONS), never the 32
//! that `main` sets for ranks as threads: under MPS every client takes its
//! queues from one pool per GPU, and 32 a client left room for only three
//! rank processes on one H200 (the fourth failed in cuDevicePrimaryCtxRetain,
//! out of memory; later ones, MPS_MAX_CONNECTIONS_REACHED).

use serde::de::DeserializeOwned;
use std::ffi::{OsStr, OsString};
use std::os::unix::fs::DirBuilderExt;
use std::path::Path;
use std::process::Child;
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use tpcomm::{Error, JobKey, Result};

/// CUDA_DEVICE_MAX_CONNECTIONS as the user started this command (`None`:
/// unset), recorded by `main` before it sets the variable for thread ranks.
pub(crate) static USER_QUEUES: OnceLock<Option<OsString>> = OnceLock::new();

/// The CUDA_DEVICE_MAX_CONNECTIONS a rank process gets: the user's value,
/// else CUDA's default (8).
fn worker_queues(user: Option<&OsStr>) -> OsString {
    user.map_or_else(|| OsString::from("8"), OsStr::to_os_string)
}

/// How a command's ranks run: `--launch` of `tpcomm bench` (CPU ranks and
/// GPUs), `tpcomm bench forward` and `tpcomm tune`, one spelling for all.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Launch {
    /// One process per rank (the command re-runs itself; GPUs share buffers
    /// by CUDA IPC). `procs` is the same.
    #[value(alias = "procs")]
    Processes,
    /// One thread per rank inside this process (GPUs share buffers by peer access).
    Threads,
}

impl Launch {
    /// As reports, JSON and messages name it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Launch::Processes => "processes",
            Launch::Threads => "threads",
        }
    }
}

/// How often the parent looks at its ranks.
pub(crate) const POLL: Duration = Duration::from_millis(10);

/// A child's state letter from /proc/<pid>/stat ('T': stopped, 't': traced).
fn proc_state(pid: u32) -> Option<char> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    s.rsplit_once(')')?.1.trim_start().chars().next()
}

/// The ranks of one run. Dropping it ends every rank still running.
pub(crate) struct Supervisor {
    kids: Vec<Option<Child>>,
    stopped_since: Vec<Option<Instant>>,
    stopped_limit: Duration,
}

impl Supervisor {
    /// `stopped_limit`: how long a rank may stay stopped (use the ranks' timeout).
    pub(crate) fn new(kids: Vec<Child>, stopped_limit: Duration) -> Self {
        let n = kids.len();
        Supervisor {
            kids: kids.into_iter().map(Some).collect(),
            stopped_since: vec![None; n],
            stopped_limit,
        }
    }

    pub(crate) fn child_mut(&mut self, rank: usize) -> Option<&mut Child> {
        self.kids.get_mut(rank).and_then(|k| k.as_mut())
    }

    /// Looks at every rank once. `Ok(true)`: all exited successfully;
    /// `Ok(false)`: some still run; `Err`: a rank failed or stayed stopped,
    /// every rank has been ended, and the message names the rank(s).
    pub(crate) fn poll(&mut self) -> std::result::Result<bool, String> {
        let mut failed = Vec::new();
        let mut running = false;
        for (rank, slot) in self.kids.iter_mut().enumerate() {
            let Some(k) = slot else { continue };
            match k.try_wait() {
                Ok(Some(s)) if s.success() => *slot = None,
                Ok(Some(s)) => {
                    failed.push(format!("rank {rank} failed ({s})"));
                    *slot = None;
                }
                Ok(None) => {
                    running = true;
                    let stopped = matches!(proc_state(k.id()), Some('T' | 't'));
                    let since = &mut self.stopped_since[rank];
                    match (stopped, *since) {
                        (false, _) => *since = None,
                        (true, None) => *since = Some(Instant::now()),
                        (true, Some(t)) if t.elapsed() >= self.stopped_limit => failed.push(
                            format!("rank {rank} was stopped (SIGSTOP?) for {:?}", t.elapsed()),
                        ),
                        (true, Some(_)) => {}
                    }
                }
                Err(e) => failed.push(format!("rank {rank}: cannot wait for it ({e})")),
            }
        }
        if failed.is_empty() {
            return Ok(!running);
        }
        // Name stopped ranks too: a stopped rank is usually why the others
        // timed out and failed.
        for (rank, k) in self.kids.iter().enumerate() {
            if let Some(k) = k {
                if matches!(proc_state(k.id()), Some('T' | 't'))
                    && !failed
                        .iter()
                        .any(|f| f.starts_with(&format!("rank {rank} ")))
                {
                    failed.push(format!("rank {rank} is stopped (SIGSTOP?)"));
                }
            }
        }
        let ended = self.end_all();
        Err(format!(
            "{}; ended the other ranks{}",
            failed.join(", "),
            if ended.is_empty() {
                String::new()
            } else {
                format!(" ({})", ended.join(", "))
            }
        ))
    }

    /// Polls until every rank has exited or one failed.
    pub(crate) fn wait(&mut self) -> std::result::Result<(), String> {
        while !self.poll()? {
            std::thread::sleep(POLL);
        }
        Ok(())
    }

    /// Kills and reaps every rank still running (SIGKILL ends stopped
    /// processes too), then sweeps the segments killed ranks left. Returns
    /// the ranks it killed.
    /// Kills every rank still running, all of them first, then reaps them,
    /// so GPU ranks' exits (each tears down its context) can overlap rather
    /// than follow one another. On one H200 shared by 4 time-sliced ranks
    /// the run still ended 3.95-4.24 s after a stopped rank's signal (3 s
    /// timeout), against 4.03-4.45 s before: no clear gain
    /// (bench/results/shared-gpu.md).
    fn end_all(&mut self) -> Vec<String> {
        let mut ended = Vec::new();
        for (rank, slot) in self.kids.iter_mut().enumerate() {
            if let Some(k) = slot {
                if matches!(k.try_wait(), Ok(None)) {
                    let _ = k.kill();
                    ended.push(format!("rank {rank}"));
                }
            }
        }
        for slot in self.kids.iter_mut() {
            if let Some(mut k) = slot.take() {
                let _ = k.wait();
            }
        }
        tpcomm::cpu::sweep_stale_segments();
        ended
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        self.end_all();
    }
}

/// Starts `world` copies of this executable, rank `r` with `argv(r, dir)`,
/// supervises them (see the module doc; a rank stopped longer than
/// `stopped_limit`, the ranks' own timeout, ends the run), and returns their results in
/// rank order. `tag` names the meeting directory (under the temporary
/// directory), removed at the end. Every rank gets the same fresh job key.
pub(crate) fn run_worker_processes<T, A, S>(
    tag: &str,
    world: usize,
    stopped_limit: Duration,
    argv: impl Fn(usize, &Path) -> A,
) -> Result<Vec<T>>
where
    T: DeserializeOwned,
    A: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let exe = std::env::current_exe().map_err(|e| Error::io("find this executable", e))?;
    let dir = std::env::temp_dir().join(format!(
        "tpcomm-{tag}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    ));
    // A new directory only this user can enter: an existing one (planted
    // under this name) is an error, not a place to meet.
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .map_err(|e| Error::io(format!("create {}", dir.display()), e))?;
    // Removed on every way out, a closed stdout's unwind included (pipe.rs).
    let dir = crate::pipe::TempDir::adopt(dir);
    let key = JobKey::random();
    let mut children = Vec::new();
    for r in 0..world {
        let mut cmd = std::process::Command::new(&exe);
        cmd.args(argv(r, dir.path()))
            .env(tpcomm::meet::JOB_KEY_ENV, key.to_hex())
            .env(
                tpcomm::cuda::share::QUEUES_ENV,
                worker_queues(USER_QUEUES.get().and_then(|v| v.as_deref())),
            );
        match cmd.spawn() {
            Ok(c) => children.push(c),
            Err(e) => {
                // Dropping the supervisor ends the ranks already started.
                drop(Supervisor::new(children, stopped_limit));
                return Err(Error::io("start a worker process", e));
            }
        }
    }
    let waited = Supervisor::new(children, stopped_limit).wait();
    if let Err(why) = waited {
        return Err(Error::Aborted(format!(
            "worker processes failed: {why}; their messages are above"
        )));
    }
    let outs = (0..world)
        .map(|r| {
            let p = dir.path().join(format!("result.rank{r}.json"));
            let text = std::fs::read_to_string(&p)
                .map_err(|e| Error::io(format!("read {}", p.display()), e))?;
            serde_json::from_str(&text).map_err(|e| Error::invalid("worker result", e.to_string()))
        })
        .collect::<Result<Vec<T>>>()?;
    Ok(outs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_processes_get_the_users_queues_else_cudas_default() {
        assert_eq!(worker_queues(None), OsString::from("8"));
        assert_eq!(worker_queues(Some(OsStr::new("4"))), OsString::from("4"));
        assert_eq!(worker_queues(Some(OsStr::new("32"))), OsString::from("32"));
    }
}
