//! Whole files that only this user can have written: the directory
//! rendezvous of GPU ranks in separate processes (cuda/rendezvous.rs) posts
//! its records this way. Written under an unpredictable temporary name
//! (`O_CREAT | O_EXCL | O_NOFOLLOW`, mode 0600) and renamed into place (or
//! linked, to write a name only once), so
//! readers see whole files and nothing is written through a planted link;
//! read with `O_NOFOLLOW` and accepted only as a regular file of this user
//! that nobody else may write (the checks of the ticket, ticket.rs).

use super::identity::euid;
use super::ticket::{open_checked, temp_name};
use crate::error::{Error, Result};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Writes `bytes` to a new temporary file next to `file`; gives its name.
fn write_temp(file: &Path, bytes: &[u8]) -> Result<std::path::PathBuf> {
    let tmp = temp_name(file);
    let io = |what: &str, e| Error::io(format!("{what} {}", tmp.display()), e);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&tmp)
        .map_err(|e| io("create", e))?;
    let written = f.write_all(bytes).and_then(|_| f.flush());
    drop(f);
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(io("write", e));
    }
    Ok(tmp)
}

/// Writes `bytes` as the whole of `file` (replacing what is there).
pub(crate) fn write(file: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = write_temp(file, bytes)?;
    if let Err(e) = std::fs::rename(&tmp, file) {
        let _ = std::fs::remove_file(&tmp);
        return Err(Error::io(
            format!("rename {} to {}", tmp.display(), file.display()),
            e,
        ));
    }
    Ok(())
}

/// Writes `bytes` as the whole of `file` only if nothing is there yet
/// (a hard link of the written temporary file, which fails on any existing
/// name, a link included): `false` when `file` already existed. Of writers
/// racing for one name exactly one wins, and readers see its whole file.
pub(crate) fn write_new(file: &Path, bytes: &[u8]) -> Result<bool> {
    let tmp = write_temp(file, bytes)?;
    let linked = std::fs::hard_link(&tmp, file);
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(Error::io(
            format!("link {} to {}", tmp.display(), file.display()),
            e,
        )),
    }
}

/// The whole of `file`, `None` while it does not exist; an error when it is
/// a link, not a regular file, another user's, or writable by others.
pub(crate) fn read(file: &Path) -> Result<Option<Vec<u8>>> {
    let Some((mut f, _)) = open_checked(file, euid())? else {
        return Ok(None);
    };
    let mut bytes = Vec::new();
    f.read_to_end(&mut bytes)
        .map_err(|e| Error::io(format!("read {}", file.display()), e))?;
    Ok(Some(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn files_round_trip_and_links_or_loose_modes_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("rec");
        assert_eq!(read(&f).unwrap(), None);
        write(&f, b"hello").unwrap();
        assert_eq!(read(&f).unwrap().as_deref(), Some(&b"hello"[..]));
        let meta = std::fs::metadata(&f).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        // Replacing a planted link replaces the link, never its target.
        let victim = d.path().join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        let l = d.path().join("link");
        std::os::unix::fs::symlink(&victim, &l).unwrap();
        assert!(read(&l).unwrap_err().to_string().contains("symbolic link"));
        write(&l, b"new").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        // A file others may write is refused.
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert!(read(&f).unwrap_err().to_string().contains("other users"));
    }

    #[test]
    fn only_the_first_new_file_is_written_and_a_planted_link_is_never_followed() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("decision");
        assert!(write_new(&f, b"first").unwrap());
        assert!(!write_new(&f, b"second").unwrap());
        assert_eq!(read(&f).unwrap().as_deref(), Some(&b"first"[..]));
        let meta = std::fs::metadata(&f).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        // A link planted at the name counts as taken; its target is untouched.
        let victim = d.path().join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        let l = d.path().join("planted");
        std::os::unix::fs::symlink(&victim, &l).unwrap();
        assert!(!write_new(&l, b"new").unwrap());
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        // No temporary file is left behind.
        let names: Vec<_> = std::fs::read_dir(d.path()).unwrap().flatten().collect();
        assert_eq!(names.len(), 3, "{names:?}");
        // Racing writers: exactly one wins.
        let g = d.path().join("raced");
        let wins: usize = std::thread::scope(|s| {
            let hs: Vec<_> = (0..8u8)
                .map(|i| {
                    let g = &g;
                    s.spawn(move || write_new(g, &[i]).unwrap() as usize)
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!(wins, 1);
    }
}
