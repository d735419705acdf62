//! The one place the host transport talks to the kernel: a POSIX shared-memory
//! object, sized and reserved at creation, mapped read-write.
//!
//! All `unsafe` of the host transport's setup lives here, behind `Mapping`,
//! which owns one `mmap` of a whole segment and unmaps it on drop.

use super::identity::Proc;
use crate::error::{Error, Result};
use std::ffi::CString;
use std::ptr::NonNull;

/// One mapping of a shared-memory segment.
pub(crate) struct Mapping {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory shared with other ranks; all accesses
// to it go through atomics or through the flag protocol (docs/protocol.md),
// which orders every non-atomic access with release/acquire pairs. Moving the
// owner to another thread does not change that.
unsafe impl Send for Mapping {}
unsafe impl Sync for Mapping {}

impl Mapping {
    pub(crate) fn base(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: base/len are exactly what mmap returned; nothing borrows the
        // mapping past the owner's lifetime (the communicator hands out no
        // references into it).
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.len);
        }
    }
}

fn c_name(name: &str) -> Result<CString> {
    CString::new(name).map_err(|_| Error::invalid("segment name", format!("{name:?} contains NUL")))
}

/// Creates a new segment (failing if the name exists), reserves its pages so a
/// full /dev/shm is an error now rather than SIGBUS later, and maps it.
pub(crate) fn create(name: &str, len: usize) -> Result<Mapping> {
    let cname = c_name(name)?;
    // SAFETY: plain FFI calls with a valid NUL-terminated name; the fd is
    // closed on every path below.
    unsafe {
        let fd = libc::shm_open(
            cname.as_ptr(),
            libc::O_CREAT | libc::O_EXCL | libc::O_RDWR | libc::O_CLOEXEC,
            0o600,
        );
        if fd < 0 {
            return Err(Error::last_os(
                format!("shm_open({name}) to create the segment"),
                "; is /dev/shm mounted and writable?",
            ));
        }
        let r = libc::posix_fallocate(fd, 0, len as libc::off_t);
        if r != 0 {
            libc::close(fd);
            libc::shm_unlink(cname.as_ptr());
            let source = std::io::Error::from_raw_os_error(r);
            return Err(Error::Os {
                call: format!("reserving {len} bytes of shared memory for {name}"),
                source,
                hint: "; free space in /dev/shm (df -h /dev/shm) or lower the maximum message size"
                    .into(),
            });
        }
        let m = map(fd, len, name);
        libc::close(fd);
        if m.is_err() {
            libc::shm_unlink(cname.as_ptr());
        }
        m
    }
}

/// Opens and maps an existing segment. `Ok(None)` when the name does not
/// exist (a stale rendezvous file whose segment is gone). A segment that
/// belongs to another user, or that others may write, is an error: it is not
/// one this user's ranks created.
pub(crate) fn open(name: &str) -> Result<Option<Mapping>> {
    open_owned_by(name, super::identity::euid())
}

/// [`open`], with the owner the segment must have given (the test seam).
pub(crate) fn open_owned_by(name: &str, uid: u32) -> Result<Option<Mapping>> {
    let cname = c_name(name)?;
    // SAFETY: plain FFI calls; the fd is closed on every path; fstat writes
    // into a zeroed struct we own.
    unsafe {
        let fd = libc::shm_open(cname.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC, 0);
        if fd < 0 {
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOENT) {
                return Ok(None);
            }
            return Err(Error::last_os(
                format!("shm_open({name}) to attach"),
                "; all ranks must run as the same user",
            ));
        }
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd, &mut st) != 0 {
            let e = Error::last_os(format!("fstat({name})"), "");
            libc::close(fd);
            return Err(e);
        }
        if st.st_uid != uid || st.st_mode & 0o022 != 0 {
            libc::close(fd);
            if st.st_uid != uid {
                return Err(super::identity::foreign_owner(
                    &format!("shared-memory segment {name}"),
                    st.st_uid,
                    uid,
                ));
            }
            return Err(Error::invalid(
                "rendezvous",
                format!(
                    "shared-memory segment {name} may be written by other users (mode {:o}); tpcomm creates its segments 0600, so this one is not tpcomm's: remove it",
                    st.st_mode & 0o777
                ),
            ));
        }
        let len = st.st_size as usize;
        let m = map(fd, len, name);
        libc::close(fd);
        m.map(Some)
    }
}

/// SAFETY (caller): `fd` is an open shared-memory object of at least `len` bytes.
unsafe fn map(fd: libc::c_int, len: usize, name: &str) -> Result<Mapping> {
    if len == 0 {
        return Err(Error::invalid("segment", format!("{name} is empty")));
    }
    let p = libc::mmap(
        std::ptr::null_mut(),
        len,
        libc::PROT_READ | libc::PROT_WRITE,
        libc::MAP_SHARED,
        fd,
        0,
    );
    if p == libc::MAP_FAILED {
        return Err(Error::last_os(format!("mmap({name}, {len} bytes)"), ""));
    }
    Ok(Mapping {
        base: NonNull::new(p.cast()).expect("mmap returned null without MAP_FAILED"),
        len,
    })
}

/// Removes a segment's name; the memory lives on until the last rank unmaps.
pub(crate) fn unlink(name: &str) {
    if let Ok(cname) = c_name(name) {
        // SAFETY: FFI with a valid name; failure (already gone) is harmless.
        unsafe {
            libc::shm_unlink(cname.as_ptr());
        }
    }
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
    sweep_in(std::path::Path::new("/dev/shm"), super::identity::euid())
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
