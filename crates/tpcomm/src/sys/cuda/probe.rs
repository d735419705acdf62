//! The CUDA driver calls of the topology probe (`topology::probe`), through
//! cudarc's `result` and `sys` layers, behind safe functions. Its resources
//! are held by owners so an error anywhere frees what was taken: cudarc's
//! `CudaContext` (a retained primary context) and this layer's
//! [`DeviceAlloc`], and three guards of its own for what neither has in the
//! form the copy test measures with (portable pinned memory without a
//! device mapping, a non-blocking stream, a pair of timing events).

use super::DeviceAlloc;
use crate::error::{Error, Result};
use cudarc::driver::{result, sys, CudaContext};
use std::ffi::{c_char, c_void, CStr};
use std::sync::Arc;

fn cuda_err(call: &str) -> impl Fn(result::DriverError) -> Error + '_ {
    move |e| Error::Cuda {
        call: call.to_owned(),
        detail: e.to_string(),
    }
}

/// Loads the driver library and initialises it, or says why not.
pub(crate) fn init() -> Result<()> {
    // SAFETY: only tries to dlopen libcuda under its usual names; checking
    // first matters because cudarc panics when its first call finds no
    // library.
    if !unsafe { sys::is_culib_present() } {
        return Err(Error::Library {
            library: "CUDA driver".into(),
            detail: "libcuda.so.1 was not found: this machine has no NVIDIA driver (or it is \
                     not on the loader's path); install the NVIDIA driver, or run tpcomm probe \
                     on a machine with GPUs"
                .into(),
        });
    }
    result::init().map_err(|e| {
        if e.0 == sys::cudaError_enum::CUDA_ERROR_NO_DEVICE {
            Error::Unsupported(
                "the NVIDIA driver is installed but reports no CUDA GPU (check \
                 CUDA_VISIBLE_DEVICES and `nvidia-smi`)"
                    .into(),
            )
        } else {
            cuda_err("cuInit")(e)
        }
    })
}

pub(crate) fn driver_version() -> Option<u32> {
    let mut v = 0;
    // SAFETY: writes one int through a pointer to a live local.
    let ok = unsafe { sys::cuDriverGetVersion(&mut v) } == sys::cudaError_enum::CUDA_SUCCESS;
    (ok && v > 0).then_some(v as u32)
}

pub(crate) fn device_count() -> Result<usize> {
    let n = result::device::get_count().map_err(cuda_err("cuDeviceGetCount"))?;
    Ok(n.max(0) as usize)
}

pub(crate) struct DeviceFacts {
    pub name: String,
    pub cc: (u32, u32),
    pub memory: u64,
    pub bus_id: String,
}

fn device(ordinal: usize) -> Result<sys::CUdevice> {
    result::device::get(ordinal as i32).map_err(cuda_err("cuDeviceGet"))
}

fn attribute(dev: sys::CUdevice, attr: sys::CUdevice_attribute) -> Result<i32> {
    // SAFETY: `dev` comes from cuDeviceGet; the call only reads.
    unsafe { result::device::get_attribute(dev, attr) }.map_err(cuda_err("cuDeviceGetAttribute"))
}

pub(crate) fn device_facts(ordinal: usize) -> Result<DeviceFacts> {
    use sys::CUdevice_attribute as A;
    let dev = device(ordinal)?;
    let name = result::device::get_name(dev).map_err(cuda_err("cuDeviceGetName"))?;
    // SAFETY: `dev` comes from cuDeviceGet.
    let memory =
        unsafe { result::device::total_mem(dev) }.map_err(cuda_err("cuDeviceTotalMem"))? as u64;
    let major = attribute(dev, A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
    let minor = attribute(dev, A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
    let mut buf = [0 as c_char; 64];
    // SAFETY: the driver writes at most `len` bytes, NUL included.
    unsafe { sys::cuDeviceGetPCIBusId(buf.as_mut_ptr(), buf.len() as i32, dev) }
        .result()
        .map_err(cuda_err("cuDeviceGetPCIBusId"))?;
    buf[63] = 0;
    // SAFETY: NUL-terminated by the line above.
    let bus_id = unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned();
    Ok(DeviceFacts {
        name,
        cc: (major.max(0) as u32, minor.max(0) as u32),
        memory,
        bus_id,
    })
}

pub(crate) struct PeerFacts {
    pub can_access: bool,
    pub native_atomics: Option<bool>,
    pub perf_rank: Option<i32>,
}

/// What the driver says about `a` reaching `b`'s memory.
pub(crate) fn peer_facts(a: usize, b: usize) -> Result<PeerFacts> {
    use sys::CUdevice_P2PAttribute as P;
    let (da, db) = (device(a)?, device(b)?);
    let mut can = 0;
    // SAFETY: devices from cuDeviceGet, an int written to a live local.
    unsafe { sys::cuDeviceCanAccessPeer(&mut can, da, db) }
        .result()
        .map_err(cuda_err("cuDeviceCanAccessPeer"))?;
    let attr = |p: P| -> Option<i32> {
        let mut v = 0;
        // SAFETY: as above.
        let r = unsafe { sys::cuDeviceGetP2PAttribute(&mut v, p, da, db) };
        (r == sys::cudaError_enum::CUDA_SUCCESS).then_some(v)
    };
    Ok(PeerFacts {
        can_access: can != 0,
        native_atomics: attr(P::CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED).map(|v| v != 0),
        perf_rank: attr(P::CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK),
    })
}

/// A device's retained primary context (cudarc's owner: released on drop).
type Ctx = Arc<CudaContext>;

fn retain(ordinal: usize) -> Result<Ctx> {
    CudaContext::new(ordinal).map_err(cuda_err("cuDevicePrimaryCtxRetain"))
}

fn make_current(ctx: &Ctx) -> Result<()> {
    ctx.bind_to_thread().map_err(cuda_err("cuCtxSetCurrent"))
}

/// Page-locked host memory usable from every context.
struct HostBuf {
    ptr: *mut c_void,
    len: usize,
}

impl HostBuf {
    fn new(bytes: usize) -> Result<HostBuf> {
        // SAFETY: cuMemHostAlloc returns `bytes` of writable memory (freed in
        // drop); it is only used through `as_mut_slice`, after being filled.
        let ptr = unsafe { result::malloc_host(bytes, sys::CU_MEMHOSTALLOC_PORTABLE) }
            .map_err(cuda_err("cuMemHostAlloc"))?;
        // SAFETY: `bytes` valid bytes at `ptr`; u8 has no invalid values, so
        // zeroing first makes the slice view below sound.
        unsafe { std::ptr::write_bytes(ptr as *mut u8, 0, bytes) };
        Ok(HostBuf { ptr, len: bytes })
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: `len` initialised bytes (zeroed in `new`), owned by `self`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr as *mut u8, self.len) }
    }
}

impl Drop for HostBuf {
    fn drop(&mut self) {
        // SAFETY: from cuMemHostAlloc, freed once.
        let _ = unsafe { result::free_host(self.ptr) };
    }
}

struct Stream(sys::CUstream);

impl Stream {
    fn new(ctx: &Ctx) -> Result<Stream> {
        make_current(ctx)?;
        result::stream::create(result::stream::StreamKind::NonBlocking)
            .map(Stream)
            .map_err(cuda_err("cuStreamCreate"))
    }
    fn sync(&self) -> Result<()> {
        // SAFETY: a live stream.
        unsafe { result::stream::synchronize(self.0) }.map_err(cuda_err("cuStreamSynchronize"))
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        // SAFETY: created by cuStreamCreate, destroyed once.
        let _ = unsafe { result::stream::destroy(self.0) };
    }
}

/// Two events on one stream, timing what is enqueued between them.
struct Timer(sys::CUevent, sys::CUevent);

impl Timer {
    fn new(ctx: &Ctx) -> Result<Timer> {
        make_current(ctx)?;
        let flags = sys::CUevent_flags::CU_EVENT_DEFAULT;
        let a = result::event::create(flags).map_err(cuda_err("cuEventCreate"))?;
        let b = match result::event::create(flags) {
            Ok(b) => b,
            Err(e) => {
                // SAFETY: `a` was just created and is not recorded.
                let _ = unsafe { result::event::destroy(a) };
                return Err(cuda_err("cuEventCreate")(e));
            }
        };
        Ok(Timer(a, b))
    }

    /// Milliseconds taken by `work` on `stream`.
    fn time(&self, stream: &Stream, work: impl FnOnce() -> Result<()>) -> Result<f64> {
        // SAFETY: events and stream belong to the same (current) context.
        unsafe { result::event::record(self.0, stream.0) }.map_err(cuda_err("cuEventRecord"))?;
        work()?;
        // SAFETY: as above.
        unsafe { result::event::record(self.1, stream.0) }.map_err(cuda_err("cuEventRecord"))?;
        // SAFETY: a recorded event.
        unsafe { result::event::synchronize(self.1) }.map_err(cuda_err("cuEventSynchronize"))?;
        // SAFETY: both events recorded and complete.
        let ms = unsafe { result::event::elapsed(self.0, self.1) }
            .map_err(cuda_err("cuEventElapsedTime"))?;
        Ok(ms as f64)
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        // SAFETY: created by cuEventCreate, destroyed once (after the
        // synchronize in `time`, or never recorded).
        unsafe {
            let _ = result::event::destroy(self.0);
            let _ = result::event::destroy(self.1);
        }
    }
}

pub(crate) struct CopyMeasure {
    pub peer_access: bool,
    pub verified: bool,
    pub small_ms: f64,
    pub large_ms: f64,
    pub host_ms: f64,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Copies from GPU `src` into GPU `dst`: verifies a random pattern arrives
/// intact, then times a `small` and a `large` copy (medians), and the same
/// large copy staged by hand through pinned host memory.
pub(crate) fn copy_test(src: usize, dst: usize, small: usize, large: usize) -> Result<CopyMeasure> {
    let cs = retain(src)?;
    let cd = retain(dst)?;
    let peer_access = peer_facts(src, dst)?.can_access && {
        make_current(&cs)?;
        // SAFETY: both contexts are retained; enabling access twice is
        // reported as ALREADY_ENABLED, which is success here.
        let r = unsafe { sys::cuCtxEnablePeerAccess(cd.cu_ctx(), 0) };
        r == sys::cudaError_enum::CUDA_SUCCESS
            || r == sys::cudaError_enum::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED
    };
    // cuMemAlloc memory (plain allocations: peers can map them).
    let bs = DeviceAlloc::new(cs.cu_ctx(), large)?;
    let bd = DeviceAlloc::new(cd.cu_ctx(), large)?;
    let mut host = HostBuf::new(large)?;
    let ss = Stream::new(&cs)?;
    let sd = Stream::new(&cd)?;
    let ts = Timer::new(&cs)?;
    let td = Timer::new(&cd)?;

    // Random, never-zero pattern into src; its complement into dst, so a
    // copy that did nothing cannot pass.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15 ^ ((src as u64) << 8 | dst as u64);
    let pattern: Vec<u8> = (0..large)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x as u8) | 1
        })
        .collect();
    let complement: Vec<u8> = pattern.iter().map(|b| !b).collect();
    make_current(&cs)?;
    // SAFETY: `bs` holds `large` bytes in the current context.
    unsafe { result::memcpy_htod_sync(bs.ptr(), &pattern) }.map_err(cuda_err("cuMemcpyHtoD"))?;
    make_current(&cd)?;
    // SAFETY: `bd` holds `large` bytes in the current context.
    unsafe { result::memcpy_htod_sync(bd.ptr(), &complement) }.map_err(cuda_err("cuMemcpyHtoD"))?;

    let peer_copy = |bytes: usize| -> Result<()> {
        // SAFETY: both buffers hold at least `bytes` and outlive the stream
        // synchronisation that follows every use.
        unsafe {
            result::memcpy_peer_async(cd.cu_ctx(), bd.ptr(), cs.cu_ctx(), bs.ptr(), bytes, ss.0)
        }
        .map_err(cuda_err("cuMemcpyPeerAsync"))
    };
    make_current(&cs)?;
    peer_copy(large)?;
    ss.sync()?;
    make_current(&cd)?;
    let back = host.as_mut_slice();
    // SAFETY: `bd` holds `large` bytes; `back` is `large` bytes.
    unsafe { result::memcpy_dtoh_sync(back, bd.ptr()) }.map_err(cuda_err("cuMemcpyDtoH"))?;
    let verified = back[..] == pattern[..];

    make_current(&cs)?;
    let time_copies = |bytes: usize, warm: usize, reps: usize| -> Result<f64> {
        for _ in 0..warm {
            peer_copy(bytes)?;
        }
        ss.sync()?;
        let v: Result<Vec<f64>> = (0..reps)
            .map(|_| ts.time(&ss, || peer_copy(bytes)))
            .collect();
        Ok(median(v?))
    };
    let small_ms = time_copies(small, 10, 51)?;
    let large_ms = time_copies(large, 2, 7)?;

    // The host round trip: device to pinned host on src, then host to dst.
    let hp = host.ptr;
    let mut d2h = Vec::new();
    let mut h2d = Vec::new();
    for _ in 0..5 {
        make_current(&cs)?;
        d2h.push(ts.time(&ss, || {
            // SAFETY: `hp` is `large` pinned bytes, `bs` `large` device
            // bytes; the timer synchronises before they are reused.
            unsafe { sys::cuMemcpyDtoHAsync_v2(hp, bs.ptr(), large, ss.0) }
                .result()
                .map_err(cuda_err("cuMemcpyDtoHAsync"))
        })?);
        make_current(&cd)?;
        h2d.push(td.time(&sd, || {
            // SAFETY: as above, in the other direction.
            unsafe { sys::cuMemcpyHtoDAsync_v2(bd.ptr(), hp, large, sd.0) }
                .result()
                .map_err(cuda_err("cuMemcpyHtoDAsync"))
        })?);
    }
    let host_ms = median(d2h) + median(h2d);
    sd.sync()?;
    Ok(CopyMeasure {
        peer_access,
        verified,
        small_ms,
        large_ms,
        host_ms,
    })
}
