//! The rendezvous file ("ticket"): what it says, and how it is written and
//! read without trusting anything another user could have put there.
//!
//! Written to a temporary file with an unpredictable name (created with
//! `O_CREAT | O_EXCL | O_NOFOLLOW`, mode 0600), then hard-linked onto the
//! rendezvous name: `link` fails if anything (a live ticket, a symlink) is
//! already there, so a ticket is never replaced and never written through a
//! link. Read with `O_NOFOLLOW | O_NONBLOCK` and accepted only when it is a
//! regular file of this user that no one else may write.

use super::identity::Proc;
use crate::error::{Error, Result};
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// What a ticket announces.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Ticket {
    /// The segment's name.
    pub name: String,
    /// The segment's random id (also in its header).
    pub id: [u64; 2],
    /// Hash of the job key (also in the segment's header).
    pub key_hash: [u64; 2],
    pub world: usize,
    pub creator: Proc,
}

fn hex2(v: [u64; 2]) -> String {
    format!("{:016x}{:016x}", v[0], v[1])
}

fn unhex2(s: &str) -> Option<[u64; 2]> {
    if s.len() != 32 {
        return None;
    }
    Some([
        u64::from_str_radix(&s[..16], 16).ok()?,
        u64::from_str_radix(&s[16..], 16).ok()?,
    ])
}

impl Ticket {
    pub(crate) fn render(&self) -> String {
        format!(
            "tpcomm-rendezvous 2 {} {} {} {} {} {}\n",
            self.name,
            hex2(self.id),
            hex2(self.key_hash),
            self.world,
            self.creator.pid,
            self.creator.start
        )
    }

    pub(crate) fn parse(s: &str) -> Option<Ticket> {
        let f: Vec<&str> = s.split_whitespace().collect();
        if f.len() != 8 || f[0] != "tpcomm-rendezvous" || f[1] != "2" {
            return None;
        }
        Some(Ticket {
            name: f[2].to_string(),
            id: unhex2(f[3])?,
            key_hash: unhex2(f[4])?,
            world: f[5].parse().ok()?,
            creator: Proc {
                pid: f[6].parse().ok()?,
                start: f[7].parse().ok()?,
            },
        })
    }
}

/// A ticket as read, with the file's identity (to remove exactly this file).
pub(crate) struct Found {
    /// `None`: the file is not a tpcomm ticket of this version.
    pub ticket: Option<Ticket>,
    /// A ticket of an earlier format (an older tpcomm's), removable as stale.
    pub old_format: bool,
    ino: (u64, u64),
}

/// Reads the ticket at `file`. `Ok(None)` when there is none. Errors (at
/// once, never retried) when the path is a symbolic link, not a regular
/// file, owned by a uid other than `uid`, or writable by group or others.
pub(crate) fn read(file: &Path, uid: u32) -> Result<Option<Found>> {
    let Some((mut f, meta)) = open_checked(file, uid)? else {
        return Ok(None);
    };
    let mut text = String::new();
    // A ticket is one short line; a larger file is not one.
    let _ = (&mut f).take(4096).read_to_string(&mut text);
    Ok(Some(Found {
        ticket: Ticket::parse(&text),
        old_format: text.starts_with("tpcomm-rendezvous 1 "),
        ino: (meta.dev(), meta.ino()),
    }))
}

/// Opens `file` for reading without following a link and checks it
/// ([`check_file`]); `None` while it does not exist.
pub(crate) fn open_checked(
    file: &Path,
    uid: u32,
) -> Result<Option<(std::fs::File, std::fs::Metadata)>> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(file);
    let f = match f {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(Error::invalid(
                "rendezvous",
                format!(
                    "{} is a symbolic link; tpcomm never follows links at a rendezvous path: remove it or give a directory only you can write",
                    file.display()
                ),
            ))
        }
        Err(e) => return Err(Error::io(format!("open the rendezvous file {}", file.display()), e)),
    };
    let meta = f
        .metadata()
        .map_err(|e| Error::io(format!("stat {}", file.display()), e))?;
    check_file(file, &meta, uid)?;
    Ok(Some((f, meta)))
}

/// The checks on an opened rendezvous file (`uid` is the owner it must have).
pub(crate) fn check_file(file: &Path, meta: &std::fs::Metadata, uid: u32) -> Result<()> {
    if !meta.file_type().is_file() {
        return Err(Error::invalid(
            "rendezvous",
            format!(
                "{} is not a regular file; give a path tpcomm can create its file at",
                file.display()
            ),
        ));
    }
    if meta.uid() != uid {
        return Err(Error::foreign_owner(
            &file.display().to_string(),
            meta.uid(),
            uid,
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(Error::invalid(
            "rendezvous",
            format!(
                "{} may be written by other users (mode {:o}); tpcomm writes its files 0600: remove this one",
                file.display(),
                meta.mode() & 0o777
            ),
        ));
    }
    Ok(())
}

/// Removes the file `found` was read from, if that file is still there
/// (a different file at the path, e.g. a newer job's ticket, stays).
pub(crate) fn remove_if_same(file: &Path, found: &Found) {
    if let Ok(m) = std::fs::symlink_metadata(file) {
        if (m.dev(), m.ino()) == found.ino {
            let _ = std::fs::remove_file(file);
        }
    }
}

/// Outcome of [`publish`].
pub(crate) enum Published {
    /// The ticket is at the rendezvous path; `Found` identifies it for removal.
    Done(Found),
    /// Something already is at the rendezvous path; nothing was written.
    Occupied,
}

fn temp_prefix(file: &Path) -> String {
    format!(
        "{}.tmp-",
        file.file_name().unwrap_or_default().to_string_lossy()
    )
}

/// The temporary name next to `file`: unpredictable (128 random bits), so
/// no one can plant a link there in advance (and it is created with
/// O_EXCL | O_NOFOLLOW anyway). It names its writer (pid and start time) so
/// that one left by a process killed mid-write can be removed later.
pub(crate) fn temp_name(file: &Path) -> PathBuf {
    let me = Proc::me();
    file.with_file_name(format!(
        "{}{}-{}-{:016x}{:016x}",
        temp_prefix(file),
        me.pid,
        me.start,
        rand::random::<u64>(),
        rand::random::<u64>()
    ))
}

/// The regular files of user `uid` (not links) beside `file` whose names
/// start with `pre`, each with the rest of its name: what the sweeps of
/// leftover tickets and notices look through.
pub(crate) fn own_files(file: &Path, pre: &str, uid: u32) -> Vec<(PathBuf, String)> {
    let dir = match file.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let rest = name.strip_prefix(pre)?.to_string();
            let m = std::fs::symlink_metadata(e.path()).ok()?;
            (m.file_type().is_file() && m.uid() == uid).then(|| (e.path(), rest))
        })
        .collect()
}

/// Removes this user's temporary tickets next to `file` whose writer is gone.
pub(crate) fn sweep_temps(file: &Path, uid: u32) {
    for (path, rest) in own_files(file, &temp_prefix(file), uid) {
        let mut f = rest.split('-');
        let (Some(Ok(pid)), Some(Ok(start))) = (
            f.next().map(str::parse::<u32>),
            f.next().map(str::parse::<u64>),
        ) else {
            continue;
        };
        if !(Proc { pid, start }).alive() {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Writes `t` at `file` unless something is already there.
pub(crate) fn publish(file: &Path, t: &Ticket) -> Result<Published> {
    publish_via(file, &temp_name(file), t)
}

pub(crate) fn publish_via(file: &Path, tmp: &Path, t: &Ticket) -> Result<Published> {
    let hint = |e: std::io::Error, what: String| Error::Os {
        call: what,
        source: e,
        hint: "; give a rendezvous path in a directory you own and can write".into(),
    };
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(tmp)
        .map_err(|e| hint(e, format!("creating {}", tmp.display())))?;
    let meta = f
        .metadata()
        .map_err(|e| hint(e, format!("stat {}", tmp.display())))?;
    let linked = f
        .write_all(t.render().as_bytes())
        .map_err(|e| hint(e, format!("writing {}", tmp.display())))
        .and_then(|_| match std::fs::hard_link(tmp, file) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(hint(
                e,
                format!("linking the rendezvous file {}", file.display()),
            )),
        });
    let _ = std::fs::remove_file(tmp);
    Ok(if linked? {
        Published::Done(Found {
            ticket: Some(t.clone()),
            old_format: false,
            ino: (meta.dev(), meta.ino()),
        })
    } else {
        Published::Occupied
    })
}

/// The error for a path that another live job's ticket holds.
pub(crate) fn in_use(file: &Path, t: &Ticket) -> Error {
    Error::invalid(
        "rendezvous",
        format!(
            "{} is in use by another communicator (created by pid {} for {} ranks, still running); two jobs cannot share a rendezvous path: give every job its own path",
            file.display(),
            t.creator.pid,
            t.world
        ),
    )
}

/// How often rank 0 publishes its ticket when the path was taken and freed
/// again by another job in between.
const PUBLISH_ATTEMPTS: u32 = 4;

/// Publishes rank 0's ticket (`publish`), reading the path (`read`) when
/// something is already there. Another job's rank 0 can publish between
/// this rank's look at the path and its publish, and be done with the path
/// (its ticket removed) before this rank reads it: the path is free then,
/// so publishing is tried again, up to PUBLISH_ATTEMPTS times. A ticket
/// found there is another job's: an error naming its creator.
pub(crate) fn publish_until_free(
    file: &Path,
    mut publish: impl FnMut() -> Result<Published>,
    mut read: impl FnMut() -> Result<Option<Found>>,
) -> Result<Found> {
    for attempt in 1..=PUBLISH_ATTEMPTS {
        match publish()? {
            Published::Done(found) => return Ok(found),
            Published::Occupied => match read()? {
                None if attempt < PUBLISH_ATTEMPTS => continue,
                Some(Found {
                    ticket: Some(t), ..
                }) => return Err(in_use(file, &t)),
                _ => break,
            },
        }
    }
    Err(Error::invalid(
        "rendezvous",
        format!(
            "{} appeared while this rank was creating it; give every job its own path",
            file.display()
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::super::identity::euid;
    use super::*;
    use std::cell::Cell;

    fn ticket() -> Ticket {
        Ticket {
            name: "/tpcomm-u0-p1-s2-00".into(),
            id: [1, 2],
            key_hash: [3, 4],
            world: 2,
            creator: Proc::me(),
        }
    }

    #[test]
    fn tickets_round_trip_and_garbage_is_not_one() {
        let t = ticket();
        assert_eq!(Ticket::parse(&t.render()), Some(t));
        assert_eq!(Ticket::parse("tpcomm-rendezvous 1 /x 00 2 5"), None);
        assert_eq!(Ticket::parse(""), None);
    }

    #[test]
    fn a_ticket_never_replaces_what_is_at_the_path_nor_writes_through_links() {
        let d = tempfile::tempdir().unwrap();
        let victim = d.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let file = d.path().join("rv");
        // A link at the rendezvous path: occupied, victim untouched.
        std::os::unix::fs::symlink(&victim, &file).unwrap();
        assert!(matches!(
            publish(&file, &ticket()).unwrap(),
            Published::Occupied
        ));
        assert!(read(&file, super::super::identity::euid()).is_err());
        // A link at the temporary path: creating it fails, victim untouched.
        std::fs::remove_file(&file).unwrap();
        let tmp = d.path().join("rv.tmp-planted");
        std::os::unix::fs::symlink(&victim, &tmp).unwrap();
        assert!(publish_via(&file, &tmp, &ticket()).is_err());
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert!(!file.exists());
        // A real publish: mode 0600, readable back, and a second one is refused.
        assert!(matches!(
            publish(&file, &ticket()).unwrap(),
            Published::Done(_)
        ));
        let m = std::fs::symlink_metadata(&file).unwrap();
        assert_eq!(m.mode() & 0o777, 0o600);
        assert!(matches!(
            publish(&file, &ticket()).unwrap(),
            Published::Occupied
        ));
    }

    #[test]
    fn a_ticket_of_another_uid_or_writable_by_others_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let file = d.path().join("rv");
        publish(&file, &ticket()).unwrap();
        let me = super::super::identity::euid();
        assert!(read(&file, me).unwrap().unwrap().ticket.is_some());
        // The seam: the same file, checked as if we were another user.
        let e = read(&file, me + 1).err().unwrap().to_string();
        assert!(
            e.contains(&format!("uid {me}")) && e.contains("not to you"),
            "{e}"
        );
        std::fs::set_permissions(
            &file,
            <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o666),
        )
        .unwrap();
        let e = read(&file, me).err().unwrap().to_string();
        assert!(e.contains("other users"), "{e}");
    }

    #[test]
    fn temporary_tickets_of_dead_writers_are_swept_and_live_ones_kept() {
        let d = tempfile::tempdir().unwrap();
        let file = d.path().join("rv");
        let uid = super::super::identity::euid();
        let live = temp_name(&file);
        std::fs::write(&live, "x").unwrap();
        let dead = file.with_file_name(format!("{}1-{}-{:032x}", temp_prefix(&file), u64::MAX, 5));
        std::fs::write(&dead, "x").unwrap();
        let other = d.path().join("rv.tmp-unrelated");
        std::fs::write(&other, "x").unwrap();
        sweep_temps(&file, uid);
        assert!(live.exists() && other.exists() && !dead.exists());
    }

    #[test]
    fn a_path_freed_between_look_and_publish_is_published_again() {
        let d = tempfile::tempdir().unwrap();
        let file = d.path().join("rv");
        let uid = euid();
        let calls = Cell::new(0);
        // The first publish finds the path taken; by the read it is free.
        let found = publish_until_free(
            &file,
            || {
                calls.set(calls.get() + 1);
                if calls.get() == 1 {
                    Ok(Published::Occupied)
                } else {
                    publish(&file, &ticket())
                }
            },
            || read(&file, uid),
        )
        .unwrap();
        assert_eq!(calls.get(), 2);
        assert_eq!(found.ticket, Some(ticket()));
        let on_disk = read(&file, uid).unwrap().unwrap();
        assert_eq!(on_disk.ticket, Some(ticket()));
    }

    #[test]
    fn another_jobs_ticket_at_the_path_is_in_use_and_not_retried() {
        let d = tempfile::tempdir().unwrap();
        let file = d.path().join("rv");
        let uid = euid();
        let mut other = ticket();
        other.world = 5;
        assert!(matches!(
            publish(&file, &other).unwrap(),
            Published::Done(_)
        ));
        let calls = Cell::new(0);
        let err = publish_until_free(
            &file,
            || {
                calls.set(calls.get() + 1);
                publish(&file, &ticket())
            },
            || read(&file, uid),
        )
        .err()
        .unwrap()
        .to_string();
        assert_eq!(calls.get(), 1);
        assert!(
            err.contains("in use by another") && err.contains("5 ranks"),
            "{err}"
        );
        // The other job's ticket is left as it was.
        let on_disk = read(&file, uid).unwrap().unwrap();
        assert_eq!(on_disk.ticket, Some(other));
    }

    #[test]
    fn a_path_taken_and_freed_again_and_again_ends_in_an_error_after_the_attempts() {
        let d = tempfile::tempdir().unwrap();
        let file = d.path().join("rv");
        let calls = Cell::new(0);
        let err = publish_until_free(
            &file,
            || {
                calls.set(calls.get() + 1);
                Ok(Published::Occupied)
            },
            || Ok(None),
        )
        .err()
        .unwrap()
        .to_string();
        assert_eq!(calls.get(), PUBLISH_ATTEMPTS);
        assert!(
            err.contains("appeared while this rank was creating it"),
            "{err}"
        );
    }
}
