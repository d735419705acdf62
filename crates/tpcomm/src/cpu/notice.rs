//! Abort notices: a rank that fails during set-up, before it could tell its
//! job through the segment's abort word, leaves `<file>.abort-<key hash>`
//! next to the rendezvous file. The other ranks of the job (and only they:
//! the name and the content carry their key's hash) see it while they poll
//! and stop at once instead of waiting out their timeout. The next rank 0 at
//! the path removes notices whose writer has exited.

use crate::meet::identity::Proc;
use crate::meet::ticket;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A failed rank's notice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Notice {
    pub rank: usize,
    pub writer: Proc,
}

fn hash_hex(key_hash: [u64; 2]) -> String {
    format!("{:016x}{:016x}", key_hash[0], key_hash[1])
}

fn prefix(file: &Path) -> String {
    let mut s = file
        .file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned();
    s.push_str(".abort-");
    s
}

pub(crate) fn path(file: &Path, key_hash: [u64; 2]) -> PathBuf {
    file.with_file_name(format!("{}{}", prefix(file), hash_hex(key_hash)))
}

/// Leaves the notice (0600, O_EXCL | O_NOFOLLOW; the first failing rank's
/// stays). Best effort: a path that cannot be written is no worse than none.
pub(crate) fn write(file: &Path, key_hash: [u64; 2], rank: usize) {
    let me = Proc::me();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path(file, key_hash));
    if let Ok(mut f) = f {
        let _ = writeln!(
            f,
            "tpcomm-abort 1 {} {rank} {} {}",
            hash_hex(key_hash),
            me.pid,
            me.start
        );
    }
}

/// The notice of this job, if a rank of it failed within the last `recent`
/// (an older notice is a previous run's that reused the key).
pub(crate) fn read(file: &Path, key_hash: [u64; 2], uid: u32, recent: Duration) -> Option<Notice> {
    let p = path(file, key_hash);
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(&p)
        .ok()?;
    let meta = f.metadata().ok()?;
    ticket::check_file(&p, &meta, uid).ok()?;
    let age = meta.modified().ok()?.elapsed().unwrap_or_default();
    if age > recent {
        return None;
    }
    let mut text = String::new();
    std::io::Read::read_to_string(&mut std::io::Read::take(f, 256), &mut text).ok()?;
    let f: Vec<&str> = text.split_whitespace().collect();
    if f.len() != 6 || f[0] != "tpcomm-abort" || f[1] != "1" || f[2] != hash_hex(key_hash) {
        return None;
    }
    Some(Notice {
        rank: f[3].parse().ok()?,
        writer: Proc {
            pid: f[4].parse().ok()?,
            start: f[5].parse().ok()?,
        },
    })
}

/// Removes this user's notices at `file` whose writer has exited.
pub(crate) fn sweep(file: &Path, uid: u32) {
    for (path, hex) in ticket::own_files(file, &prefix(file), uid) {
        if hex.len() != 32 {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let f: Vec<&str> = text.split_whitespace().collect();
        let writer = (f.len() == 6)
            .then(|| {
                Some(Proc {
                    pid: f[4].parse().ok()?,
                    start: f[5].parse().ok()?,
                })
            })
            .flatten();
        if !writer.is_some_and(|w| w.alive()) {
            let _ = std::fs::remove_file(&path);
        }
    }
}

#[cfg(test)]
mod tests;
