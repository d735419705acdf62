//! Which job a rank belongs to: its job key (given in the config or in
//! `TPCOMM_JOB_KEY`, or, for threads of one process given none, made by
//! rank 0 and kept in memory here), and how a rank that fails during set-up
//! tells the rest of its job (docs/protocol.md, "Meeting", step 7).

use super::config::HostConfig;
use super::notice;
use crate::error::{Error, Result};
use crate::meet::identity::{euid, JobKey};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Keys of communicators being set up by ranks that were given none, per
/// rendezvous file: the threads of this process find their rank 0's key
/// here. Never written to any file.
static LOCAL_KEYS: Mutex<Option<HashMap<PathBuf, LocalKey>>> = Mutex::new(None);

#[derive(Clone, Copy)]
struct LocalKey {
    key: JobKey,
    /// Set when a rank of this job failed during set-up: (rank, when).
    failed: Option<(usize, Instant)>,
}

fn local_keys<R>(f: impl FnOnce(&mut HashMap<PathBuf, LocalKey>) -> R) -> R {
    let mut g = LOCAL_KEYS.lock().unwrap_or_else(|p| p.into_inner());
    f(g.get_or_insert_with(HashMap::new))
}

/// One job at one rendezvous file, as a rank knows it.
pub(crate) struct Job<'a> {
    pub file: &'a Path,
    pub key: JobKey,
    /// The key lives in `LOCAL_KEYS` (threads of one process), not in a
    /// config or the environment.
    pub local: bool,
    /// Failures older than this belong to an earlier job.
    pub recent: Duration,
}

impl Job<'_> {
    /// Tells the other ranks of this job that `rank` failed during set-up.
    pub(crate) fn failed(&self, rank: usize) {
        if self.local {
            local_keys(|m| {
                if let Some(e) = m.get_mut(self.file) {
                    e.failed.get_or_insert((rank, Instant::now()));
                }
            });
        } else {
            notice::write(self.file, self.key.hash(), rank);
        }
    }

    /// The rank of this job that reported failing during set-up, if any.
    pub(crate) fn failure(&self) -> Option<usize> {
        if self.local {
            local_failure(self.file, self.recent)
        } else {
            notice::read(self.file, self.key.hash(), euid(), self.recent).map(|n| n.rank)
        }
    }
}

/// The in-memory key of the communicator being set up at `file`, if any.
pub(crate) fn local_key(file: &Path) -> Option<JobKey> {
    local_keys(|m| m.get(file).map(|e| e.key))
}

pub(crate) fn local_failure(file: &Path, recent: Duration) -> Option<usize> {
    local_keys(|m| m.get(file).and_then(|e| e.failed))
        .filter(|(_, at)| at.elapsed() <= recent)
        .map(|(r, _)| r)
}

pub(crate) fn failed_error(rank: usize, me: usize) -> Error {
    Error::Aborted(format!(
        "rank {rank} failed during set-up (its error says why), so rank {me} stops too"
    ))
}

/// The key given to this rank: in its config, else in `TPCOMM_JOB_KEY`.
pub(crate) fn given_key(cfg: &HostConfig) -> Result<Option<JobKey>> {
    match cfg.job_key {
        Some(k) => Ok(Some(k)),
        None => JobKey::from_env(),
    }
}

impl<'a> Job<'a> {
    /// Rank 0's job: the key given, else a fresh one kept in memory for the
    /// threads of this process (an error while another communicator of this
    /// process is being set up at the same file).
    pub(crate) fn for_rank_0(cfg: &HostConfig, file: &'a Path) -> Result<Job<'a>> {
        let (key, local) = match given_key(cfg)? {
            Some(k) => (k, false),
            None => {
                let k = JobKey::random();
                let fresh = local_keys(|m| {
                    // A failed job's entry stays (its late ranks read it) until
                    // the next communicator at this path replaces it.
                    if m.get(file).is_some_and(|e| e.failed.is_none()) {
                        return false;
                    }
                    m.insert(
                        file.to_path_buf(),
                        LocalKey {
                            key: k,
                            failed: None,
                        },
                    );
                    true
                });
                if !fresh {
                    return Err(Error::invalid(
                    "rendezvous",
                    format!(
                        "another communicator of this process is being set up at {}; give every communicator its own path (or each job its own job key)",
                        file.display()
                    ),
                ));
                }
                (k, true)
            }
        };
        Ok(Job {
            file,
            key,
            local,
            recent: cfg.timeout,
        })
    }

    /// Set-up succeeded: the in-memory key is no longer needed.
    pub(crate) fn set_up(&self) {
        if self.local {
            local_keys(|m| m.remove(self.file));
        }
    }
}
