//! Pinning host memory the process already mapped (a shared-memory segment
//! or memfd of the host path) and mapping it into every device's address
//! space (cuMemHostRegister with the portable and device-map flags), and
//! reading the device address of pinned memory.

use super::check;
use crate::error::{Error, Result};
use cudarc::driver::sys as cu;
use std::ffi::c_void;

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
// SAFETY: as for Send, and no method mutates through a shared reference.
unsafe impl Sync for Registered {}

impl Registered {
    /// Pins `bytes` at `host` and maps them into every context of the
    /// process. A context must be current.
    ///
    /// # Safety
    /// `host..host + bytes` is a read-write mapping of this process
    /// (page-aligned, whole pages) that stays mapped until this value is
    /// dropped.
    pub unsafe fn new(host: *mut u8, bytes: usize) -> Result<Self> {
        let flags = cu::CU_MEMHOSTREGISTER_PORTABLE | cu::CU_MEMHOSTREGISTER_DEVICEMAP;
        // SAFETY: the caller's contract above; the driver only pins those
        // pages.
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
