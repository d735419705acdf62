//! Who is who at a rendezvous: the job key every rank of one job shares, the
//! identity of a process (pid and start time, so a reused pid is not taken
//! for the process that died), and the user that owns a file.

use crate::error::{Error, Result};

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

/// A 64-bit finalizer (from MurmurHash3): every input bit affects every output bit.
fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

/// A process as it can be recognised later: pid and start time (clock ticks
/// after boot, from /proc), so a new process that reuses the pid differs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Proc {
    pub pid: u32,
    pub start: u64,
}

impl Proc {
    pub(crate) fn me() -> Proc {
        let pid = std::process::id();
        Proc {
            pid,
            start: start_time(pid).unwrap_or(0),
        }
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
    super::shm::effective_uid()
}

/// The error for a file or segment that another user owns.
pub(crate) fn foreign_owner(what: &str, owner: u32, me: u32) -> Error {
    Error::invalid(
        "rendezvous",
        format!(
            "{what} belongs to uid {owner}, not to you (uid {me}); someone else created it, so tpcomm will not use it: give a rendezvous path in a directory only you can write (not a shared /tmp name)"
        ),
    )
}

/// Whether a process id refers to a live process (or one we may not signal).
/// A zombie (exited, not yet reaped by its parent) counts as dead.
pub(crate) fn pid_alive(pid: u32) -> bool {
    if pid == 0 {
        return false;
    }
    super::shm::process_exists(pid) && !zombie(pid)
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
