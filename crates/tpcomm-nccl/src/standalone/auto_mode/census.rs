//! A census (auto_mode.rs): rank 0 counts the ranks of this host and their
//! GPUs and decides; the others wait for the decision; any rank may decide
//! NCCL first when it cannot take part or waited too long. The decision is
//! the one record of step DECISION that its first writer wrote.

use super::creator::{Creator, Tidy, CENSUS, DECISION};
use crate::settings::{info, warn};
use crate::standalone::{self, Secret};
use crate::types::*;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tpcomm::cuda::share::DeviceIdentity;

/// A decision record: its kind, then why (for every rank's log line).
pub(super) fn decision(standalone: bool, why: &str) -> Vec<u8> {
    let mut v = vec![standalone as u8];
    v.extend_from_slice(why.as_bytes());
    v
}

/// One rank's part in a census.
pub(super) struct Census {
    pub tag: String,
    pub dir: PathBuf,
    pub secret: Secret,
    pub rank: usize,
    pub world: usize,
    pub real: [u8; 128],
}

impl Census {
    /// Rank 0: waits at most `wait` for every rank's record, decides, and
    /// publishes the decision (or follows one already there).
    pub(super) fn count(self, me: DeviceIdentity, wait: Duration) -> Creator {
        let t0 = Instant::now();
        let mut seen: Vec<Option<DeviceIdentity>> = vec![None; self.world];
        seen[0] = Some(me);
        let mut broken = None;
        let mut poll = Poller::new();
        loop {
            for (r, slot) in seen.iter_mut().enumerate().filter(|(_, s)| s.is_none()) {
                match standalone::read(&self.dir, &self.secret, CENSUS, r) {
                    Ok(None) => {}
                    Ok(Some(b)) => match DeviceIdentity::from_bytes(&b) {
                        Some(d) => *slot = Some(d),
                        None => broken = Some(format!("rank {r}'s census record is malformed")),
                    },
                    Err(e) => broken = Some(e.to_string()),
                }
            }
            let all = seen.iter().all(Option::is_some);
            if all || broken.is_some() || t0.elapsed() >= wait || self.decided() {
                break;
            }
            poll.sleep();
        }
        let (standalone, why) = judge(&seen, broken, wait);
        match standalone::post_first(&self.dir, &self.secret, DECISION, 0, &decision(standalone, &why)) {
            Ok(true) => self.follow(standalone, &why),
            Ok(false) => self.read_decision(),
            Err(e) => Creator::Failed(standalone::fail(
                SYSTEM_ERROR,
                format!(
                    "{}: the census decision could not be published in {} ({e}); set TPCOMM_STANDALONE=0 to use NCCL without a census",
                    self.tag,
                    self.dir.display()
                ),
            )),
        }
    }

    /// Whether a decision record is there (another rank gave up first).
    pub(super) fn decided(&self) -> bool {
        !matches!(
            standalone::read(&self.dir, &self.secret, DECISION, 0),
            Ok(None)
        )
    }

    /// Every other rank: waits at most `timeout` for the decision, then
    /// decides NCCL itself (which rank 0 will follow if it comes later).
    pub(super) fn await_decision(self, timeout: Duration) -> Creator {
        let t0 = Instant::now();
        let mut poll = Poller::new();
        loop {
            match standalone::read(&self.dir, &self.secret, DECISION, 0) {
                Ok(None) => {}
                Ok(Some(_)) => return self.read_decision(),
                Err(e) => return self.unreadable(e),
            }
            if t0.elapsed() >= timeout {
                warn!(
                    "{}: rank 0 published no census decision within {:?} (TPCOMM_TIMEOUT_S): rank 0 is on another host than the one that made the unique id, or never reached creation; deciding NCCL for every rank",
                    self.tag, timeout
                );
                return self.give_up("rank 0 published no decision within TPCOMM_TIMEOUT_S", true);
            }
            poll.sleep();
        }
    }

    /// Decides NCCL if no decision is there yet, else follows the one there.
    /// `posted`: this rank's census record is out, so NCCL is only sound
    /// once the decision says so.
    pub(super) fn give_up(self, why: &str, posted: bool) -> Creator {
        let why = format!("rank {} decided for every rank: {why}", self.rank);
        match standalone::post_first(&self.dir, &self.secret, DECISION, 0, &decision(false, &why)) {
            Ok(true) => self.follow(false, &why),
            Ok(false) => self.read_decision(),
            // Without this rank's census record rank 0 can only decide NCCL.
            Err(_) if !posted => self.follow(false, &why),
            Err(e) => self.unreadable(e),
        }
    }

    /// Follows the decision record there.
    pub(super) fn read_decision(self) -> Creator {
        match standalone::read(&self.dir, &self.secret, DECISION, 0) {
            Ok(Some(b)) if matches!(b.first(), Some(0 | 1)) => {
                let why = String::from_utf8_lossy(&b[1..]).into_owned();
                self.follow(b[0] == 1, &why)
            }
            Ok(_) => self.unreadable(tpcomm::Error::invalid(
                "census",
                "the decision record is missing or malformed",
            )),
            Err(e) => self.unreadable(e),
        }
    }

    fn unreadable(&self, e: tpcomm::Error) -> Creator {
        Creator::Failed(standalone::fail(
            SYSTEM_ERROR,
            format!(
                "{}: the census decision in {} could not be read ({e}); the ranks cannot agree on NCCL or standalone: remove that directory, or set TPCOMM_STANDALONE=0 on every rank",
                self.tag,
                self.dir.display()
            ),
        ))
    }

    fn follow(self, standalone: bool, why: &str) -> Creator {
        if standalone {
            warn!(
                "{}: {why}; NCCL refuses ranks that share a GPU, so tpcomm serves this communicator itself (standalone mode, no NCCL under it); TPCOMM_STANDALONE=0 stops it",
                self.tag
            );
            Creator::Standalone(self.secret)
        } else {
            info!("{}: census: {why}; NCCL's communicator", self.tag);
            standalone::clear_last_error();
            Creator::Nccl {
                id: self.real,
                after: Some(Tidy {
                    dir: self.dir,
                    rank: self.rank,
                }),
            }
        }
    }
}

/// Rank 0's decision from the census: standalone only when every rank came
/// and two share a GPU; with why, for the log.
pub(super) fn judge(
    seen: &[Option<DeviceIdentity>],
    broken: Option<String>,
    wait: Duration,
) -> (bool, String) {
    if let Some(e) = broken {
        return (false, format!("the census failed ({e})"));
    }
    let missing: Vec<usize> = (0..seen.len()).filter(|&r| seen[r].is_none()).collect();
    if !missing.is_empty() {
        return (
            false,
            format!(
                "rank(s) {missing:?} of {} did not check in within {wait:?} (TPCOMM_STANDALONE_WAIT_S: on other hosts, or later)",
                seen.len()
            ),
        );
    }
    let gpus: Vec<[u8; 16]> = seen.iter().flatten().map(|d| d.uuid).collect();
    for (a, g) in gpus.iter().enumerate() {
        let sharing: Vec<usize> = (0..gpus.len()).filter(|&b| gpus[b] == *g).collect();
        if sharing.len() > 1 && sharing[0] == a {
            return (
                true,
                format!("ranks {sharing:?} share GPU {}", uuid_text(g)),
            );
        }
    }
    (false, "every rank has a GPU of its own".into())
}

/// A GPU's UUID as nvidia-smi writes it.
pub fn uuid_text(u: &[u8; 16]) -> String {
    let h: Vec<String> = u.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        h[..4].concat(),
        h[4..6].concat(),
        h[6..8].concat(),
        h[8..10].concat(),
        h[10..].concat()
    )
}

/// Sleeps between looks at the directory: 1 ms at first, then longer (at
/// most 20 ms) for a wait that may last minutes.
struct Poller(Duration);

impl Poller {
    fn new() -> Self {
        Poller(Duration::from_millis(1))
    }
    fn sleep(&mut self) {
        std::thread::sleep(self.0);
        self.0 = (self.0 * 2).min(Duration::from_millis(20));
    }
}
