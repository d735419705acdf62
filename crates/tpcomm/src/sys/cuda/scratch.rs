//! The CUDA driver calls the NCCL drop-in (tpcomm-nccl) needs beside a
//! communicator: saving and restoring the caller's current context, a small
//! device buffer with its own stream for the set-up all-gather, and the
//! staging buffer for calls whose buffers are not 16-byte aligned. They free
//! what they hold without making another context current where the caller's
//! thread could see it (Scratch), or bind their own (Staging), as the drop-in
//! was measured with.

use super::{CUcontext, CUdeviceptr, CUstream};
use crate::error::{Error, Result};
use cudarc::driver::sys::{self as cu, CUresult};

fn check(call: &'static str, r: CUresult) -> Result<()> {
    if r == CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(Error::Cuda {
            call: call.into(),
            detail: format!("{r:?}"),
        })
    }
}

/// The device of the calling thread's current context (what the CUDA
/// runtime's `cudaSetDevice` selected), or `None` when no context is current
/// or there is no usable driver.
pub fn current_device() -> Option<usize> {
    super::ensure_driver().ok()?;
    let mut d: cu::CUdevice = -1;
    // SAFETY: writes one device ordinal into `d`; fails without a current context.
    let r = unsafe { cu::cuCtxGetDevice(&mut d) };
    (r == CUresult::CUDA_SUCCESS && d >= 0).then_some(d as usize)
}

/// The calling thread's current context, put back when dropped: PyTorch and
/// other callers must find the thread as they left it.
pub struct SavedContext(CUcontext);

impl SavedContext {
    /// Requires the driver to be loaded (`tpcomm::cuda::ensure_driver`).
    pub fn save() -> Self {
        let mut c: CUcontext = std::ptr::null_mut();
        // SAFETY: writes one pointer into `c`; on failure `c` stays null and
        // nothing is restored.
        unsafe { cu::cuCtxGetCurrent(&mut c) };
        SavedContext(c)
    }
}

/// The calling thread's current context, kept to be made current again
/// later ([`KeptContext::bind`]); unlike [`SavedContext`] nothing happens
/// when it is dropped. Work a caller asked for on a context it has since
/// left (the drop-in's creations deferred to ncclGroupEnd) runs on it.
#[derive(Debug)]
pub struct KeptContext(CUcontext);

impl KeptContext {
    /// Requires the driver to be loaded (`tpcomm::cuda::ensure_driver`).
    pub fn current() -> Self {
        let mut c: CUcontext = std::ptr::null_mut();
        // SAFETY: writes one pointer into `c`; on failure `c` stays null.
        unsafe { cu::cuCtxGetCurrent(&mut c) };
        KeptContext(c)
    }

    /// Makes the kept context current (nothing when none was current).
    pub fn bind(&self) -> Result<()> {
        if self.0.is_null() {
            return Ok(());
        }
        // SAFETY: a context handle the thread held when it was kept.
        check("cuCtxSetCurrent", unsafe { cu::cuCtxSetCurrent(self.0) })
    }
}

impl Drop for SavedContext {
    fn drop(&mut self) {
        let mut now: CUcontext = std::ptr::null_mut();
        // SAFETY: both calls take or write a context handle; restoring a
        // handle the thread held a moment ago is always valid.
        unsafe {
            cu::cuCtxGetCurrent(&mut now);
            if now != self.0 && !self.0.is_null() {
                cu::cuCtxSetCurrent(self.0);
            }
        }
    }
}

/// A device buffer and a non-blocking stream of the current context.
pub struct Scratch {
    pub ptr: CUdeviceptr,
    pub bytes: usize,
    pub stream: CUstream,
}

// SAFETY: the handles are plain driver objects, usable from any thread that
// makes their context current (every method does so through its caller).
unsafe impl Send for Scratch {}
// SAFETY: as for Send, and no method mutates through a shared reference.
unsafe impl Sync for Scratch {}

impl Scratch {
    /// Allocates in the current context (the caller made it current).
    pub fn new(bytes: usize) -> Result<Self> {
        let mut ptr: CUdeviceptr = 0;
        // SAFETY: writes one device pointer; freed once in Drop.
        check("cuMemAlloc", unsafe { cu::cuMemAlloc_v2(&mut ptr, bytes) })?;
        let mut stream: CUstream = std::ptr::null_mut();
        // SAFETY: writes one stream handle; destroyed once in Drop.
        let r = unsafe {
            cu::cuStreamCreate(&mut stream, 1 /* CU_STREAM_NON_BLOCKING */)
        };
        if let Err(e) = check("cuStreamCreate", r) {
            // SAFETY: allocated just above, freed once.
            unsafe { cu::cuMemFree_v2(ptr) };
            return Err(e);
        }
        Ok(Self { ptr, bytes, stream })
    }

    /// Copies `data` to `offset`, ordered on the scratch stream (a
    /// synchronous copy from pageable memory may still be in flight when it
    /// returns, and the stream is not ordered after the legacy stream).
    pub fn upload(&self, offset: usize, data: &[u8]) -> Result<()> {
        if offset + data.len() > self.bytes {
            return Err(Error::invalid(
                "exchange",
                "blob larger than the scratch buffer",
            ));
        }
        // SAFETY: the range lies inside the allocation (checked above);
        // `data` outlives the copy because the stream is waited on before
        // `gather` returns (a pageable source is staged before this returns).
        check("cuMemcpyHtoDAsync", unsafe {
            cu::cuMemcpyHtoDAsync_v2(
                self.ptr + offset as u64,
                data.as_ptr().cast(),
                data.len(),
                self.stream,
            )
        })
    }

    /// Copies the whole buffer back (synchronous).
    pub fn download(&self) -> Result<Vec<u8>> {
        let mut out = vec![0u8; self.bytes];
        // SAFETY: `out` holds exactly `bytes` bytes.
        check("cuMemcpyDtoH", unsafe {
            cu::cuMemcpyDtoH_v2(out.as_mut_ptr().cast(), self.ptr, self.bytes)
        })?;
        Ok(out)
    }

    /// Waits for the stream, at most `timeout`; `Ok(false)` when it did not finish.
    pub fn wait(&self, timeout: std::time::Duration) -> Result<bool> {
        let start = std::time::Instant::now();
        loop {
            // SAFETY: queries a live stream handle.
            let r = unsafe { cu::cuStreamQuery(self.stream) };
            match r {
                CUresult::CUDA_SUCCESS => return Ok(true),
                CUresult::CUDA_ERROR_NOT_READY => {}
                other => check("cuStreamQuery", other)?,
            }
            if start.elapsed() >= timeout {
                return Ok(false);
            }
            std::thread::sleep(std::time::Duration::from_micros(50));
        }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // SAFETY: created in `new`, released once here; the stream is idle or
        // abandoned after a timeout (destroying it then is still allowed).
        unsafe {
            cu::cuStreamDestroy_v2(self.stream);
            cu::cuMemFree_v2(self.ptr);
        }
    }
}

/// A device buffer of the communicator's GPU where calls whose buffers are not
/// 16-byte aligned are reduced (the kernels load 16-byte vectors): the input
/// is copied in, reduced in place, and copied out, all on the caller's stream.
/// With it routing never depends on an address, which can differ between
/// ranks while size, type and op cannot. Allocated at set-up, freed with the
/// communicator.
pub struct Staging {
    ptr: CUdeviceptr,
    bytes: usize,
    ctx: std::sync::Arc<cudarc::driver::CudaContext>,
}

// SAFETY: a device pointer and an Arc'd context; every use binds the context.
unsafe impl Send for Staging {}
// SAFETY: as for Send, and no method mutates through a shared reference.
unsafe impl Sync for Staging {}

impl Staging {
    pub fn new(ctx: &std::sync::Arc<cudarc::driver::CudaContext>, bytes: usize) -> Result<Self> {
        ctx.bind_to_thread().map_err(|e| Error::Cuda {
            call: "cuCtxSetCurrent".into(),
            detail: e.to_string(),
        })?;
        let mut ptr: CUdeviceptr = 0;
        // SAFETY: writes one device pointer; freed once in Drop.
        check("cuMemAlloc (drop-in staging)", unsafe {
            cu::cuMemAlloc_v2(&mut ptr, bytes.max(16))
        })?;
        Ok(Self {
            ptr,
            bytes,
            ctx: ctx.clone(),
        })
    }

    pub fn ptr(&self) -> CUdeviceptr {
        self.ptr
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Copies `bytes` from `src` to `dst` on `stream` (capturable into a graph).
    ///
    /// # Safety
    /// Both ranges are device memory valid until the stream has run the copy,
    /// and `stream` belongs to the staging buffer's context.
    pub unsafe fn copy(
        &self,
        dst: CUdeviceptr,
        src: CUdeviceptr,
        bytes: usize,
        stream: CUstream,
    ) -> Result<()> {
        self.ctx.bind_to_thread().map_err(|e| Error::Cuda {
            call: "cuCtxSetCurrent".into(),
            detail: e.to_string(),
        })?;
        // SAFETY: the caller's contract.
        check("cuMemcpyDtoDAsync (drop-in staging)", unsafe {
            cu::cuMemcpyDtoDAsync_v2(dst, src, bytes, stream)
        })
    }
}

/// `rows` rows of `width` bytes: row `i` from `src + i * src_pitch` to
/// `dst + i * dst_pitch` ([`Staging::copy_rows`]).
#[derive(Clone, Copy, Debug)]
pub struct Rows {
    pub dst: CUdeviceptr,
    pub dst_pitch: usize,
    pub src: CUdeviceptr,
    pub src_pitch: usize,
    pub width: usize,
    pub rows: usize,
}

impl Staging {
    /// Copies the rows `r` names on `stream` (capturable into a graph).
    /// The drop-in's pieces of all-gathers and reduce-scatters use it to move
    /// one piece of every rank's block between the caller's buffer and the
    /// staging buffer in one call.
    ///
    /// # Safety
    /// Every row of both sides is device memory valid until the stream has
    /// run the copy, and `stream` belongs to the staging buffer's context.
    pub unsafe fn copy_rows(&self, r: Rows, stream: CUstream) -> Result<()> {
        let Rows {
            dst,
            dst_pitch,
            src,
            src_pitch,
            width,
            rows,
        } = r;
        if width == 0 || rows == 0 {
            return Ok(());
        }
        self.ctx.bind_to_thread().map_err(|e| Error::Cuda {
            call: "cuCtxSetCurrent".into(),
            detail: e.to_string(),
        })?;
        let copy = cu::CUDA_MEMCPY2D {
            srcXInBytes: 0,
            srcY: 0,
            srcMemoryType: cu::CUmemorytype::CU_MEMORYTYPE_DEVICE,
            srcHost: std::ptr::null(),
            srcDevice: src,
            srcArray: std::ptr::null_mut(),
            srcPitch: src_pitch,
            dstXInBytes: 0,
            dstY: 0,
            dstMemoryType: cu::CUmemorytype::CU_MEMORYTYPE_DEVICE,
            dstHost: std::ptr::null_mut(),
            dstDevice: dst,
            dstArray: std::ptr::null_mut(),
            dstPitch: dst_pitch,
            WidthInBytes: width,
            Height: rows,
        };
        // SAFETY: the caller's contract; `copy` lives across the call.
        check("cuMemcpy2DAsync (drop-in staging)", unsafe {
            cu::cuMemcpy2DAsync_v2(&copy, stream)
        })
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        // SAFETY: allocated in `new`, freed once; its context is current.
        unsafe { cu::cuMemFree_v2(self.ptr) };
    }
}
