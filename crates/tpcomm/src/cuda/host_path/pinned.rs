//! The host path's only unsafe code: pinning a shared-memory mapping and
//! mapping it into the device's address space (cuMemHostRegister with the
//! portable and device-map flags), and reading the device address of pinned
//! memory.

use crate::error::{Error, Result};
use cudarc::driver::sys as cu;
use std::ffi::c_void;

fn check(call: &str, r: cu::CUresult) -> Result<()> {
    if r == cu::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(Error::Cuda {
            call: call.to_string(),
            detail: format!("{r:?}"),
        })
    }
}

/// Host memory registered with the driver for as long as this value lives.
/// The caller keeps the memory mapped longer than this value (field order in
/// the owner: the registration drops first).
pub struct Registered {
    host: *mut u8,
    dev: u64,
}

// SAFETY: a registration is process-wide driver state plus two addresses;
// dropping it from another thread is allowed by the driver API.
unsafe impl Send for Registered {}
unsafe impl Sync for Registered {}

impl Registered {
    /// Pins `bytes` at `host` (page-aligned, page multiple, mapped read-write
    /// and kept mapped until this value is dropped) and maps them into every
    /// context of the process. A context must be current.
    pub fn new(host: *mut u8, bytes: usize) -> Result<Self> {
        let flags = cu::CU_MEMHOSTREGISTER_PORTABLE | cu::CU_MEMHOSTREGISTER_DEVICEMAP;
        // SAFETY: the caller guarantees `host..host+bytes` is a live mapping
        // that outlives this registration; the driver only pins those pages.
        let r = unsafe { cu::cuMemHostRegister_v2(host as *mut c_void, bytes, flags) };
        check("cuMemHostRegister", r).map_err(|e| match e {
            Error::Cuda { call, detail } => Error::Cuda {
                call,
                detail: format!("{detail} (pinning {bytes} bytes of shared memory; raise `ulimit -l` or lower the maximum message size)"),
            },
            e => e,
        })?;
        let dev = match device_pointer(host) {
            Ok(d) => d,
            Err(e) => {
                // SAFETY: registered just above, unregistered once here.
                unsafe { cu::cuMemHostUnregister(host as *mut c_void) };
                return Err(e);
            }
        };
        Ok(Self { host, dev })
    }
    /// The address kernels use for the first byte.
    pub fn device_ptr(&self) -> u64 {
        self.dev
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        // SAFETY: registered in `new`, unregistered exactly once.
        unsafe { cu::cuMemHostUnregister(self.host as *mut c_void) };
    }
}

/// The device address of pinned, device-mapped host memory at `host`, in the
/// current context.
pub fn device_pointer(host: *mut u8) -> Result<u64> {
    let mut dev = 0;
    // SAFETY: writes one device pointer; the driver rejects addresses that
    // are not pinned and device-mapped (an error, not undefined behaviour).
    let r = unsafe { cu::cuMemHostGetDevicePointer_v2(&mut dev, host as *mut c_void, 0) };
    check("cuMemHostGetDevicePointer", r)?;
    Ok(dev)
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
        // SAFETY: maps `len` bytes of a file that is at least that long
        // (fallocated by its creator); the mapping is owned by the returned
        // value and unmapped exactly once in Drop.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(Error::last_os(format!("mmap of {len} bytes (memfd)"), ""));
        }
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
            libc::munmap(self.base as *mut c_void, self.len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_memfd_area_is_zeroed_and_shared_with_whoever_opens_its_path() {
        let (a, path) = SharedFile::create(3 * 4096).unwrap();
        let b = SharedFile::open(&path).unwrap();
        assert_eq!(b.len(), 3 * 4096);
        // SAFETY (test): both mappings are live, in bounds, and only this
        // thread touches them.
        unsafe {
            assert_eq!(*b.base().add(5000), 0);
            *a.base().add(5000) = 42;
            assert_eq!(std::ptr::read_volatile(b.base().add(5000)), 42);
        }
        assert!(SharedFile::open("/proc/self/fd/999999").is_err());
    }
}
