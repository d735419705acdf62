//! Copies out of a [`DeviceAlloc`]: the stream-ordered device-to-device copy
//! and the synchronous read back to the host that the benchmark forward
//! (crates/tpcomm-forward) needs. Both check their ranges against the
//! allocations.

use super::{check, cu, set_current, CUstream, DeviceAlloc};
use crate::error::{Error, Result};
use std::ffi::c_void;

impl DeviceAlloc {
    /// Enqueues on `stream` a copy of the first `bytes` of `src` to the start
    /// of this allocation (capturable into a CUDA graph).
    ///
    /// # Safety
    /// `stream` belongs to the context of both allocations, and both stay
    /// alive until the stream has run the copy (or every replay of a graph
    /// that captured it).
    pub unsafe fn copy_from_async(
        &self,
        src: &DeviceAlloc,
        bytes: usize,
        stream: CUstream,
    ) -> Result<()> {
        if bytes > self.bytes || bytes > src.bytes {
            return Err(Error::invalid(
                "copy size",
                format!(
                    "{bytes} bytes from an allocation of {} into one of {}",
                    src.bytes, self.bytes
                ),
            ));
        }
        // SAFETY: both ranges lie inside live allocations (checked above);
        // the stream and the lifetimes are the caller's contract.
        check("cuMemcpyDtoDAsync", unsafe {
            cu::cuMemcpyDtoDAsync_v2(self.ptr, src.ptr, bytes, stream)
        })
    }

    /// Copies the first `dst.len()` bytes of this allocation into `dst` and
    /// waits for it. Synchronize the streams that write the allocation first,
    /// or the bytes may be a mix of old and new.
    pub fn read(&self, dst: &mut [u8]) -> Result<()> {
        self.read_into(0, dst)
    }

    /// Copies `len` bytes at `offset` of this allocation to the host and
    /// waits for it (a diagnostic read; synchronize the writers first).
    pub fn read_at(&self, offset: usize, len: usize) -> Result<Vec<u8>> {
        let mut out = vec![0u8; len];
        self.read_into(offset, &mut out)?;
        Ok(out)
    }

    /// Copies `dst.len()` bytes at `offset` of this allocation into `dst`
    /// and waits for it.
    fn read_into(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        let len = dst.len();
        if offset.checked_add(len).is_none_or(|end| end > self.bytes) {
            return Err(Error::invalid(
                "read range",
                format!("{len} bytes at {offset} of an allocation of {}", self.bytes),
            ));
        }
        set_current(self.ctx)?;
        // SAFETY: the source range lies inside this live allocation (checked
        // above) and `dst` is a host slice of exactly the length copied.
        check("cuMemcpyDtoH", unsafe {
            cu::cuMemcpyDtoH_v2(
                dst.as_mut_ptr() as *mut c_void,
                self.ptr + offset as u64,
                len,
            )
        })
    }
}
