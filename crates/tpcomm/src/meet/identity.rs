//! Who is who at a rendezvous: the job key every rank of one job shares, the
//! identity of a process (pid and start time, so a reused pid is not taken
//! for the process that died), and the user that owns a file.

use crate::error::{Error, Result};
use crate::hash::mix;

/// The environment variable a launcher sets to the same job key in every
/// rank process (32 hexadecimal digits; `tpcomm bench` sets it for its ranks).
pub const JOB_KEY_ENV: &str = "TPCOMM_JOB_KEY";

/// A random 128-bit secret shared by the ranks of one job and by no other
/// job. Ranks attach only to a segment whose header carries this key's hash,
/// so two jobs given the same rendezvous path never mix ranks.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct JobKey([u64; 2]);

impl std::fmt::Debug for JobKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key is a secret; its hash is enough to tell keys apart in logs.
        write!(f, "JobKey(hash {:016x})", self.hash()[0])
    }
}

impl JobKey {
    /// A fresh key from the operating system's random source.
    pub fn random() -> Self {
        JobKey([rand::random(), rand::random()])
    }

    /// Parses the 32-hex-digit form that [`JobKey::to_hex`] writes.
    pub fn from_hex(s: &str) -> Result<Self> {
        let s = s.trim();
        let bad = || {
            Error::invalid(
                "job key",
                format!(
                    "{:?} is not 32 hexadecimal digits; give every rank of a job the same key, e.g. from `openssl rand -hex 16`",
                    s.chars().take(40).collect::<String>()
                ),
            )
        };
        if s.len() != 32 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad());
        }
        let hi = u64::from_str_radix(&s[..16], 16).map_err(|_| bad())?;
        let lo = u64::from_str_radix(&s[16..], 16).map_err(|_| bad())?;
        if hi == 0 && lo == 0 {
            return Err(Error::invalid(
                "job key",
                "is all zeros; use a random key (`openssl rand -hex 16`)",
            ));
        }
        Ok(JobKey([hi, lo]))
    }

    pub fn to_hex(&self) -> String {
        format!("{:016x}{:016x}", self.0[0], self.0[1])
    }

    /// The key given in `TPCOMM_JOB_KEY`, if any (an error when set but malformed).
    pub fn from_env() -> Result<Option<Self>> {
        match crate::env::JOB_KEY.get()? {
            Some(v) => JobKey::from_hex(&v)
                .map(Some)
                .map_err(|e| Error::invalid(JOB_KEY_ENV, e.to_string())),
            None => Ok(None),
        }
    }

    /// What tickets and segment headers carry: an identifier of the key, not
    /// the key. It is not a MAC: the files that carry it are mode 0600 and
    /// checked to belong to this user, which is what keeps other users out.
    pub(crate) fn hash(&self) -> [u64; 2] {
        let a = mix(self.0[0] ^ 0x7470_636f_6d6d_4b31);
        let b = mix(self.0[1] ^ a.rotate_left(17));
        [mix(a ^ b), mix(b.wrapping_add(0x9e37_79b9_7f4a_7c15) ^ a)]
    }
}

/// A process as it can be recognised later: pid and start time (clock ticks
/// after boot, from /proc), so a new process that reuses the pid differs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Proc {
    pub pid: u32,
    pub start: u64,
}

impl Proc {
    /// This process. Its start time is read from /proc once per pid (a
    /// forked child has a pid of its own and reads its own): every record
    /// written names its writer, and the directory rendezvous writes one per
    /// exchange.
    pub(crate) fn me() -> Proc {
        static CACHED: std::sync::Mutex<Option<Proc>> = std::sync::Mutex::new(None);
        let pid = std::process::id();
        let mut c = CACHED.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = *c {
            if p.pid == pid {
                return p;
            }
        }
        let me = Proc {
            pid,
            start: start_time(pid).unwrap_or(0),
        };
        // A start time that could not be read is not kept: the next call tries again.
        if me.start != 0 {
            *c = Some(me);
        }
        me
    }

    /// Whether this very process still runs (not a zombie, not a reused pid).
    pub(crate) fn alive(&self) -> bool {
        self.pid != 0
            && pid_alive(self.pid)
            && start_time(self.pid).is_some_and(|s| s == self.start)
    }
}

/// Field 22 of /proc/<pid>/stat. `comm` may hold spaces and parentheses, so
/// fields are counted after the last ')'.
pub(crate) fn start_time(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = s.rsplit_once(')')?;
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// The effective user id of this process.
pub(crate) fn euid() -> u32 {
    crate::sys::shm::effective_uid()
}

/// Whether a process id refers to a live process (or one we may not signal).
/// A zombie (exited, not yet reaped by its parent) counts as dead.
pub(crate) fn pid_alive(pid: u32) -> bool {
    if pid == 0 {
        return false;
    }
    crate::sys::shm::process_exists(pid) && !zombie(pid)
}

fn zombie(pid: u32) -> bool {
    // /proc/<pid>/stat: "pid (comm) state ..."; comm may hold spaces or
    // parentheses, so the state is the first field after the last ')'.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with(['Z', 'X']))
        })
        .unwrap_or(false)
}

/// The name rank 0 gives a new segment: it says which user and which process
/// (pid and start time) created it, so a later run can tell a segment whose
/// creator died during set-up (nothing can ever use it) from a live one.
pub(crate) fn segment_name(uid: u32, creator: Proc, random: u64) -> String {
    format!(
        "/tpcomm-u{uid}-p{}-s{}-{random:016x}",
        creator.pid, creator.start
    )
}

/// The (uid, creator) a [`segment_name`] encodes (without the leading '/').
pub(crate) fn parse_segment_name(name: &str) -> Option<(u32, Proc)> {
    let rest = name.trim_start_matches('/').strip_prefix("tpcomm-u")?;
    let mut f = rest.split('-');
    let uid = f.next()?.parse().ok()?;
    let pid = f.next()?.strip_prefix('p')?.parse().ok()?;
    let start = f.next()?.strip_prefix('s')?.parse().ok()?;
    let random = f.next()?;
    if random.len() != 16 || f.next().is_some() {
        return None;
    }
    Some((uid, Proc { pid, start }))
}

/// Unlinks the segments in /dev/shm that this user's tpcomm ranks created
/// and that can never be used: named by [`segment_name`] for this uid,
/// owned by this uid, and whose creator (pid and start time) is gone. A
/// segment's name exists only during set-up, so such a segment is what a
/// rank 0 killed during set-up leaves. Returns the names removed.
pub fn sweep_stale_segments() -> Vec<String> {
    sweep_in(std::path::Path::new("/dev/shm"), euid())
}

pub(crate) fn sweep_in(dir: &std::path::Path, uid: u32) -> Vec<String> {
    use std::os::unix::fs::MetadataExt;
    let mut removed = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return removed;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some((owner, creator)) = parse_segment_name(&name) else {
            continue;
        };
        if owner != uid || creator.alive() {
            continue;
        }
        let Ok(m) = std::fs::symlink_metadata(e.path()) else {
            continue;
        };
        if m.file_type().is_file() && m.uid() == uid && std::fs::remove_file(e.path()).is_ok() {
            removed.push(name);
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_through_hex_and_bad_keys_are_errors() {
        let k = JobKey::random();
        assert_eq!(JobKey::from_hex(&k.to_hex()).unwrap(), k);
        for bad in ["", "xyz", &"0".repeat(32), &"g".repeat(32), &"a".repeat(33)] {
            assert!(JobKey::from_hex(bad).is_err(), "{bad:?} accepted");
        }
        assert_ne!(k.hash(), JobKey::random().hash());
        assert!(
            !format!("{k:?}").contains(&k.to_hex()),
            "Debug shows the key"
        );
    }

    #[test]
    fn this_process_is_alive_and_a_changed_start_time_is_not() {
        let me = Proc::me();
        assert!(me.start > 0);
        assert!(me.alive());
        let other = Proc {
            start: me.start + 1,
            ..me
        };
        assert!(!other.alive());
    }
}
