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
mod tests;
