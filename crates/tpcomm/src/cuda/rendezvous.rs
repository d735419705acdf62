//! How the ranks of a CUDA communicator swap the addresses (threads) or IPC
//! handles (processes) of their receive buffers. Every wait is bounded.
//!
//! Two forms: ranks that are threads of one process share a [`ThreadGroup`];
//! ranks that are processes write files into a directory all of them know.
//!
//! A key may be used again (a second communicator on the same group or
//! directory): each rank counts its uses of a key, and the n-th use meets the
//! other ranks' n-th use, never an earlier round's values. Ranks make their
//! exchanges in the same order, as collective set-up does.

use crate::error::{Error, Result};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Where the ranks meet.
#[derive(Clone, Debug)]
pub enum Rendezvous {
    /// Ranks are threads of this process, sharing this group.
    Threads(Arc<ThreadGroup>),
    /// Ranks are processes; each writes `<dir>/<key>.rank<r>` and reads the others'.
    Dir(PathBuf),
    /// Ranks are processes that already share a channel of their own (the
    /// NCCL drop-in all-gathers through the real NCCL communicator).
    Custom(Arc<dyn Exchange>),
}

/// One rank's turn in an exchange: it posts `mine` as rank `rank` of
/// `world` for the step `key`, and waits at most `timeout` for the others.
#[derive(Clone, Copy, Debug)]
pub struct Turn<'a> {
    pub key: &'a str,
    pub rank: usize,
    pub world: usize,
    pub mine: &'a [u8],
    pub timeout: Duration,
}

/// A caller-supplied way for ranks to swap byte strings, with the contract
/// of [`Rendezvous::exchange`].
pub trait Exchange: Send + Sync + std::fmt::Debug {
    fn exchange(&self, turn: Turn<'_>) -> Result<Vec<Vec<u8>>>;
}

/// The meeting point of `world` threads.
#[derive(Debug)]
pub struct ThreadGroup {
    world: usize,
    posted: Mutex<HashMap<String, Vec<Option<Vec<u8>>>>>,
    changed: Condvar,
    rounds: Rounds,
}

/// How many times each (place, key, rank) has exchanged: the round of the next use.
#[derive(Debug, Default)]
struct Rounds(Mutex<HashMap<(String, String, usize), u64>>);

impl Rounds {
    /// The key of this rank's next use of `key` at `place`: `key` itself the
    /// first time, `key#n` the n-th time after.
    fn next(&self, place: &str, key: &str, rank: usize) -> Result<String> {
        let mut m = self
            .0
            .lock()
            .map_err(|_| Error::Aborted("a rank panicked during the rendezvous".into()))?;
        let n = m
            .entry((place.to_string(), key.to_string(), rank))
            .or_insert(0);
        let round = *n;
        *n += 1;
        Ok(if round == 0 {
            key.to_string()
        } else {
            format!("{key}#{round}")
        })
    }
}

/// Rounds of directory rendezvous in this process (a directory has no state
/// of its own, and `Rendezvous::Dir` is a plain path).
fn dir_rounds() -> &'static Rounds {
    static ROUNDS: std::sync::OnceLock<Rounds> = std::sync::OnceLock::new();
    ROUNDS.get_or_init(Rounds::default)
}

impl ThreadGroup {
    pub fn new(world: usize) -> Arc<Self> {
        Arc::new(Self {
            world,
            posted: Mutex::new(HashMap::new()),
            changed: Condvar::new(),
            rounds: Rounds::default(),
        })
    }
    pub fn world(&self) -> usize {
        self.world
    }
}

impl Rendezvous {
    /// Posts `mine` as rank `rank`'s value for `key` and returns every rank's
    /// value (index = rank), waiting at most `timeout` for the others.
    pub fn exchange(
        &self,
        key: &str,
        rank: usize,
        world: usize,
        mine: &[u8],
        timeout: Duration,
    ) -> Result<Vec<Vec<u8>>> {
        let turn = Turn {
            key,
            rank,
            world,
            mine,
            timeout,
        };
        match self {
            Rendezvous::Threads(g) => {
                let key = g.rounds.next("", key, rank)?;
                exchange_threads(g, Turn { key: &key, ..turn })
            }
            Rendezvous::Dir(d) => {
                let key = dir_rounds().next(&d.display().to_string(), key, rank)?;
                exchange_dir(d, Turn { key: &key, ..turn })
            }
            Rendezvous::Custom(x) => x.exchange(turn),
        }
    }
}

fn missing_error(rank: usize, peer: usize, what: String, waited: Duration) -> Error {
    Error::PeerTimeout {
        rank,
        peer,
        epoch: 0,
        what,
        waited,
    }
}

fn exchange_threads(g: &ThreadGroup, turn: Turn<'_>) -> Result<Vec<Vec<u8>>> {
    let (key, rank, world, mine) = (turn.key, turn.rank, turn.world, turn.mine);
    let timeout = turn.timeout;
    if g.world != world {
        return Err(Error::invalid(
            "thread group",
            format!("made for {} ranks, used with {world}", g.world),
        ));
    }
    let start = Instant::now();
    let lock_err = || Error::Aborted("a rank panicked during the rendezvous".into());
    let mut posted = g.posted.lock().map_err(|_| lock_err())?;
    posted
        .entry(key.to_string())
        .or_insert_with(|| vec![None; world])[rank] = Some(mine.to_vec());
    g.changed.notify_all();
    loop {
        let slots = &posted[key];
        if let Some(missing) = slots.iter().position(|s| s.is_none()) {
            let waited = start.elapsed();
            if waited >= timeout {
                return Err(missing_error(
                    rank,
                    missing,
                    format!("rendezvous {key:?}"),
                    waited,
                ));
            }
            posted = g
                .changed
                .wait_timeout(posted, timeout - waited)
                .map_err(|_| lock_err())?
                .0;
        } else {
            return Ok(slots
                .iter()
                .map(|s| s.clone().unwrap_or_default())
                .collect());
        }
    }
}

/// The hash of this job's key, zeros when none is given.
fn job_tag() -> Result<[u8; 16]> {
    let mut tag = [0u8; 16];
    if let Some(k) = crate::meet::JobKey::from_env()? {
        let h = k.hash();
        tag[..8].copy_from_slice(&h[0].to_le_bytes());
        tag[8..].copy_from_slice(&h[1].to_le_bytes());
    }
    Ok(tag)
}

/// Where rank `rank`'s record of `key` lies in `dir`.
fn record_path(dir: &Path, key: &str, rank: usize) -> PathBuf {
    dir.join(format!("{key}.rank{rank}"))
}

/// `mine` as a record: the hash of the job key (TPCOMM_JOB_KEY, which
/// `tpcomm` sets for the ranks it starts; zeros without one) first, so a
/// record of another job in the same directory is refused, never used.
fn framed(mine: &[u8]) -> Result<Vec<u8>> {
    let tag = job_tag()?;
    let mut record = Vec::with_capacity(16 + mine.len());
    record.extend_from_slice(&tag);
    record.extend_from_slice(mine);
    Ok(record)
}

/// Posts `mine` as rank `rank`'s record of `key` in the existing directory
/// `dir`, as [`Rendezvous::Dir`] posts it (`<dir>/<key>.rank<rank>`, a file
/// only this user can have written), without waiting for anyone: for
/// meetings where not every rank reads every record. `key` is used as
/// given (no rounds).
pub fn post_record(dir: &Path, key: &str, rank: usize, mine: &[u8]) -> Result<()> {
    crate::meet::private_file::write(&record_path(dir, key, rank), &framed(mine)?)
}

/// [`post_record`], but only when no record of `key` and `rank` is there
/// yet: `false` when one was. Of ranks racing to post the same record
/// exactly one wins, and every reader sees that one (a decision any rank
/// may take, once).
pub fn post_first_record(dir: &Path, key: &str, rank: usize, mine: &[u8]) -> Result<bool> {
    crate::meet::private_file::write_new(&record_path(dir, key, rank), &framed(mine)?)
}

/// Rank `rank`'s record of `key` in `dir` (what [`post_record`] or an
/// exchange posted), `None` while there is none; an error when it is not a
/// private file of this user or belongs to another job.
pub fn read_record(dir: &Path, key: &str, rank: usize) -> Result<Option<Vec<u8>>> {
    let path = record_path(dir, key, rank);
    let Some(bytes) = crate::meet::private_file::read(&path)? else {
        return Ok(None);
    };
    match bytes.strip_prefix(&job_tag()?[..]) {
        Some(body) => Ok(Some(body.to_vec())),
        None => Err(Error::invalid(
            "rendezvous",
            format!(
                "{} belongs to another job (its job key differs): give each job its own directory and TPCOMM_JOB_KEY",
                path.display()
            ),
        )),
    }
}

fn exchange_dir(dir: &Path, turn: Turn<'_>) -> Result<Vec<Vec<u8>>> {
    let (key, rank, world, mine) = (turn.key, turn.rank, turn.world, turn.mine);
    let timeout = turn.timeout;
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::io(format!("create rendezvous directory {}", dir.display()), e))?;
    // Files are this user's and no one else's (meet/private_file.rs).
    post_record(dir, key, rank, mine)?;
    let start = Instant::now();
    let mut out: Vec<Option<Vec<u8>>> = vec![None; world];
    // This rank's own record is what it just posted: not read back.
    if let Some(own) = out.get_mut(rank) {
        *own = Some(mine.to_vec());
    }
    loop {
        for (r, slot) in out.iter_mut().enumerate() {
            if slot.is_none() {
                *slot = read_record(dir, key, r)?;
            }
        }
        match out.iter().position(|s| s.is_none()) {
            None => return Ok(out.into_iter().map(|s| s.unwrap_or_default()).collect()),
            Some(missing) => {
                let waited = start.elapsed();
                if waited >= timeout {
                    return Err(missing_error(
                        rank,
                        missing,
                        format!(
                            "rendezvous file {}",
                            record_path(dir, key, missing).display()
                        ),
                        waited,
                    ));
                }
                match poll_pause(waited) {
                    p if p.is_zero() => std::thread::yield_now(),
                    p => std::thread::sleep(p),
                }
            }
        }
    }
}

/// How long a directory rendezvous waits before it reads the records again,
/// `waited` into the exchange: not at all (a yield) for the first 200 us,
/// since the ranks of a send/recv group or a split usually post within
/// microseconds of each other; then half the time waited past that, at
/// least 20 us and at most 1 ms, so a rank still computing costs a read of
/// the directory a millisecond. Measured with
/// `cargo run --release -p tpcomm --example rendezvous_latency` on tmpfs
/// (docs/standalone.md).
fn poll_pause(waited: Duration) -> Duration {
    const SPIN_US: u64 = 200;
    let w = waited.as_micros().min(u128::from(u64::MAX)) as u64;
    if w < SPIN_US {
        return Duration::ZERO;
    }
    Duration::from_micros(((w - SPIN_US) / 2).clamp(20, 1000))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_wait_polls_at_once_then_backs_off_to_a_millisecond() {
        let us = Duration::from_micros;
        assert_eq!(poll_pause(us(0)), Duration::ZERO);
        assert_eq!(poll_pause(us(199)), Duration::ZERO);
        assert_eq!(poll_pause(us(200)), us(20));
        assert_eq!(poll_pause(us(400)), us(100));
        assert_eq!(poll_pause(us(2200)), us(1000));
        assert_eq!(poll_pause(Duration::from_secs(3600)), us(1000));
        let mut last = Duration::ZERO;
        for w in (0..5000).step_by(7) {
            let p = poll_pause(us(w));
            assert!(p >= last && p <= us(1000), "{w} us: {p:?}");
            last = p;
        }
    }

    #[test]
    fn threads_exchange_returns_every_rank_value_in_rank_order() {
        let g = ThreadGroup::new(3);
        let hs: Vec<_> = (0..3)
            .map(|r| {
                let rv = Rendezvous::Threads(g.clone());
                std::thread::spawn(move || {
                    rv.exchange("k", r, 3, &[r as u8; 2], Duration::from_secs(5))
                        .unwrap()
                })
            })
            .collect();
        for h in hs {
            assert_eq!(
                h.join().unwrap(),
                vec![vec![0u8, 0], vec![1, 1], vec![2, 2]]
            );
        }
    }

    /// Rank 0's turn posting `x` at the step `key`, waiting 5 s for the others.
    fn rank0_posts_x(key: &str, world: usize) -> Turn<'_> {
        let timeout = Duration::from_secs(5);
        Turn {
            key,
            rank: 0,
            world,
            mine: b"x",
            timeout,
        }
    }

    #[test]
    fn dir_exchange_refuses_another_jobs_record_and_a_planted_link() {
        let d = tempfile::tempdir().unwrap();
        // What rank 1 of another job (another key hash) posted for the first round of "k".
        let mut other = vec![7u8; 16];
        other.extend_from_slice(b"theirs");
        crate::meet::private_file::write(&d.path().join("k.rank1"), &other).unwrap();
        let e = exchange_dir(d.path(), rank0_posts_x("k", 2)).unwrap_err();
        assert!(e.to_string().contains("another job"), "{e}");
        // A link planted where a peer's record goes is refused, not followed.
        let d = tempfile::tempdir().unwrap();
        let secret = d.path().join("secret");
        std::fs::write(&secret, b"not for the rendezvous").unwrap();
        std::os::unix::fs::symlink(&secret, d.path().join("j.rank1")).unwrap();
        let e = exchange_dir(d.path(), rank0_posts_x("j", 2)).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
    }

    #[test]
    fn records_posted_alone_are_read_by_rank_and_only_the_first_of_a_race_stays() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(read_record(d.path(), "census", 2).unwrap(), None);
        post_record(d.path(), "census", 2, b"gpu").unwrap();
        assert_eq!(
            read_record(d.path(), "census", 2).unwrap().as_deref(),
            Some(&b"gpu"[..])
        );
        assert!(post_first_record(d.path(), "decision", 0, b"a").unwrap());
        assert!(!post_first_record(d.path(), "decision", 0, b"b").unwrap());
        assert_eq!(
            read_record(d.path(), "decision", 0).unwrap().as_deref(),
            Some(&b"a"[..])
        );
        // An exchange meets records posted alone (same files).
        let all = Rendezvous::Dir(d.path().to_path_buf()).exchange(
            "census",
            0,
            3,
            b"x",
            Duration::from_millis(50),
        );
        assert!(all.is_err(), "rank 1 never posted");
        post_record(d.path(), "census", 1, b"y").unwrap();
        let all = exchange_dir(d.path(), rank0_posts_x("census", 3)).unwrap();
        assert_eq!(all, vec![b"x".to_vec(), b"y".to_vec(), b"gpu".to_vec()]);
    }

    #[test]
    fn dir_exchange_names_the_missing_rank_after_the_timeout() {
        let d = tempfile::tempdir().unwrap();
        let rv = Rendezvous::Dir(d.path().to_path_buf());
        let t0 = Instant::now();
        let err = rv
            .exchange("k", 0, 2, b"x", Duration::from_millis(50))
            .unwrap_err();
        assert!(t0.elapsed() < Duration::from_secs(2));
        match err {
            Error::PeerTimeout { rank, peer, .. } => assert_eq!((rank, peer), (0, 1)),
            other => panic!("unexpected {other}"),
        }
    }

    #[test]
    fn dir_exchange_between_two_writers() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().to_path_buf();
        let h = std::thread::spawn(move || {
            Rendezvous::Dir(p)
                .exchange("k", 1, 2, b"one", Duration::from_secs(5))
                .unwrap()
        });
        let mine = Rendezvous::Dir(d.path().to_path_buf())
            .exchange("k", 0, 2, b"zero", Duration::from_secs(5))
            .unwrap();
        assert_eq!(mine, vec![b"zero".to_vec(), b"one".to_vec()]);
        assert_eq!(h.join().unwrap(), mine);
    }

    fn exchange_twice(rv_of: impl Fn() -> Rendezvous) {
        let hs: Vec<_> = (0..2)
            .map(|r| {
                let rv = rv_of();
                std::thread::spawn(move || {
                    let t = Duration::from_secs(5);
                    let first = rv.exchange("buffers", r, 2, &[r as u8], t).unwrap();
                    let second = rv.exchange("buffers", r, 2, &[10 + r as u8], t).unwrap();
                    (first, second)
                })
            })
            .collect();
        for h in hs {
            let (first, second) = h.join().unwrap();
            assert_eq!(first, vec![vec![0u8], vec![1]]);
            // The second round sees the second values, not the first round's.
            assert_eq!(second, vec![vec![10u8], vec![11]]);
        }
    }

    #[test]
    fn a_key_used_again_on_a_thread_group_meets_the_new_round() {
        let g = ThreadGroup::new(2);
        exchange_twice(|| Rendezvous::Threads(g.clone()));
    }

    #[test]
    fn a_key_used_again_in_a_directory_meets_the_new_round() {
        let dir = std::env::temp_dir().join(format!(
            "tpcomm-rv-rounds-{}-{:?}",
            std::process::id(),
            std::time::SystemTime::now()
        ));
        let d = dir.clone();
        exchange_twice(move || Rendezvous::Dir(d.clone()));
        let _ = std::fs::remove_dir_all(dir);
    }
}
