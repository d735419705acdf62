//! The one place the host transport talks to the kernel: a POSIX shared-memory
//! object, sized and reserved at creation, mapped read-write.
//!
//! Every libc call of the host transports lives here: `Mapping`, which owns
//! one `mmap` of a whole segment and unmaps it on drop, `SharedFile`, the
//! memfd the GPU host path falls back to, and the few process and file
//! system queries the rendezvous needs. The segment's contents are read and
//! written through raw pointers in cpu/{layout,allreduce,reduce}.rs.

use crate::error::{Error, Result};
use std::ffi::CString;
use std::ptr::NonNull;

/// The effective user id of this process.
pub(crate) fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Whether process `pid` exists (signal 0: existence and permission only;
/// one we may not signal exists too).
pub(crate) fn process_exists(pid: u32) -> bool {
    // SAFETY: signal 0 only checks for existence and permission.
    let r = unsafe { libc::kill(pid as libc::pid_t, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Free bytes of the file system at `dir` (for an unprivileged user).
pub(crate) fn fs_free(dir: &std::path::Path) -> Option<u64> {
    let c = CString::new(dir.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: statvfs writes into a zeroed struct we own (all-zero is a valid
    // statvfs); the path is NUL-terminated.
    unsafe {
        let mut s: libc::statvfs = std::mem::zeroed();
        if libc::statvfs(c.as_ptr(), &mut s) != 0 {
            return None;
        }
        Some((s.f_bavail as u64).saturating_mul(s.f_frsize as u64))
    }
}

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
// SAFETY: as for Send, and no method mutates through a shared reference.
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
    open_owned_by(name, effective_uid())
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
                return Err(Error::foreign_owner(
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

/// Maps `len` bytes of `fd` from its start, shared, for reading and writing;
/// `None` when mmap fails (errno says why).
///
/// # Safety
/// `fd` is open and at least `len` bytes long; the caller owns the mapping.
unsafe fn mmap_shared(fd: libc::c_int, len: usize) -> Option<*mut libc::c_void> {
    // SAFETY: the caller's contract.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    (p != libc::MAP_FAILED).then_some(p)
}

/// # Safety
/// `fd` is an open shared-memory object of at least `len` bytes.
unsafe fn map(fd: libc::c_int, len: usize, name: &str) -> Result<Mapping> {
    if len == 0 {
        return Err(Error::invalid("segment", format!("{name} is empty")));
    }
    // SAFETY: an object at least `len` bytes long (the caller's contract);
    // the Mapping returned owns the mapping.
    let p = unsafe { mmap_shared(fd, len) }
        .ok_or_else(|| Error::last_os(format!("mmap({name}, {len} bytes)"), ""))?;
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

/// An anonymous shared-memory file (memfd), mapped read-write: the area of a
/// rank that is a process when /dev/shm has no room (memfd pages are not
/// counted against the /dev/shm mount). Peers of the same user open it
/// through `/proc/<pid>/fd/<fd>`. Unmapped on drop; the file closes after.
pub struct SharedFile {
    base: *mut u8,
    len: usize,
    _file: std::fs::File,
}

// SAFETY: plain shared memory; all accesses from the host are the driver's
// (registration) and the kernels' own; moving the owner between threads
// changes nothing.
unsafe impl Send for SharedFile {}
// SAFETY: as for Send, and no method mutates through a shared reference.
unsafe impl Sync for SharedFile {}

impl SharedFile {
    /// Creates a zero-filled memfd of `len` bytes with every page reserved
    /// now (a full memory is an error here, not a SIGBUS later) and maps it.
    /// Returns it and the path peers open.
    pub fn create(len: usize) -> Result<(Self, String)> {
        use std::os::fd::FromRawFd;
        let name = c"tpcomm-hostgpu";
        // SAFETY: valid NUL-terminated name; the returned fd is owned by the
        // File below on success.
        let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(Error::last_os("memfd_create for the host GPU area", ""));
        }
        // SAFETY: fd is a fresh descriptor that nothing else owns.
        let file = unsafe { std::fs::File::from_raw_fd(fd) };
        // SAFETY: plain FFI on an fd we own.
        let r = unsafe { libc::posix_fallocate(fd, 0, len as libc::off_t) };
        if r != 0 {
            return Err(Error::Os {
                call: format!("reserving {len} bytes of shared memory (memfd)"),
                source: std::io::Error::from_raw_os_error(r),
                hint: "; free memory or lower the maximum message size".into(),
            });
        }
        let path = format!("/proc/{}/fd/{fd}", std::process::id());
        Ok((Self::map(file, len)?, path))
    }

    /// Opens a peer's memfd through its `/proc/<pid>/fd/<fd>` path and maps it.
    pub fn open(path: &str) -> Result<Self> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| Error::Os {
                call: format!("open {path} (a peer's host GPU area)"),
                source: e,
                hint: "; all ranks must run as the same user on this machine".into(),
            })?;
        let len = file
            .metadata()
            .map_err(|e| Error::io(format!("stat {path}"), e))?
            .len() as usize;
        Self::map(file, len)
    }

    fn map(file: std::fs::File, len: usize) -> Result<Self> {
        use std::os::fd::AsRawFd;
        if len == 0 {
            return Err(Error::invalid("host GPU area", "the shared file is empty"));
        }
        // SAFETY: a file that is at least `len` bytes long (fallocated by
        // its creator); the mapping is owned by the returned value and
        // unmapped exactly once in Drop.
        let p = unsafe { mmap_shared(file.as_raw_fd(), len) }
            .ok_or_else(|| Error::last_os(format!("mmap of {len} bytes (memfd)"), ""))?;
        Ok(Self {
            base: p as *mut u8,
            len,
            _file: file,
        })
    }

    pub fn base(&self) -> *mut u8 {
        self.base
    }
    pub fn len(&self) -> usize {
        self.len
    }
}

impl Drop for SharedFile {
    fn drop(&mut self) {
        // SAFETY: exactly the mapping made in `map`; nothing borrows it past
        // its owner (registrations drop first, see Areas in comm.rs).
        unsafe {
            libc::munmap(self.base as *mut libc::c_void, self.len);
        }
    }
}

#[cfg(test)]
mod shared_file_tests {
    use super::*;

    #[test]
    fn a_memfd_area_is_zeroed_and_shared_with_whoever_opens_its_path() {
        let (a, path) = SharedFile::create(3 * 4096).unwrap();
        let b = SharedFile::open(&path).unwrap();
        assert_eq!(b.len(), 3 * 4096);
        // SAFETY: (test) both mappings are live, in bounds, and only this
        // thread touches them.
        unsafe {
            assert_eq!(*b.base().add(5000), 0);
            *a.base().add(5000) = 42;
            assert_eq!(std::ptr::read_volatile(b.base().add(5000)), 42);
        }
        assert!(SharedFile::open("/proc/self/fd/999999").is_err());
    }
}
