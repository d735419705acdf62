//! The library's bottom layer for CUDA: every CUDA driver and NVRTC call,
//! each behind a safe function or an owning type (or an `unsafe fn` whose
//! contract is the caller's device pointers: [`launch`], [`fill_mapped`]).
//! Nothing else in the library calls cudarc's `sys` or `result` functions,
//! except the benchmark forward's cuBLAS bindings (`cuda::forward`, leaving
//! the library). Beside this file: [`nvrtc`] opens an NVRTC the driver can
//! load, `pinned` registers host mappings with the driver, `probe` makes the
//! topology probe's driver calls, [`scratch`] holds the NCCL drop-in's
//! buffers and its saved context.
//!
//! The libraries are loaded at run time by cudarc, whose loader panics when a
//! library is missing; [`ensure_driver`] and [`ensure_nvrtc`] check presence
//! first so callers get `Error::Library` instead.

use crate::error::{Error, Result};
use cudarc::driver::sys as cu;
use std::ffi::{c_void, CString};
use std::sync::OnceLock;

pub use cu::{CUcontext, CUdeviceptr, CUstream};

mod copy;
pub mod nvrtc;
pub(crate) mod pinned;
pub(crate) mod probe;
pub mod scratch;

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

/// Loads and initialises the CUDA driver once. A missing `libcuda.so` is an
/// `Error::Library` with advice, never a panic.
pub fn ensure_driver() -> Result<()> {
    static INIT: OnceLock<std::result::Result<(), String>> = OnceLock::new();
    INIT.get_or_init(|| {
        // SAFETY: only tries to dlopen the driver's file names; loads no symbol.
        if !unsafe { cu::is_culib_present() } {
            return Err("the CUDA driver (libcuda.so.1) was not found: install the NVIDIA driver, or add its directory to LD_LIBRARY_PATH".to_string());
        }
        // SAFETY: the library is present (checked above); cuInit takes a flags word.
        let r = unsafe { cu::cuInit(0) };
        if r != cu::CUresult::CUDA_SUCCESS {
            return Err(format!("cuInit failed ({r:?}): no usable GPU or driver"));
        }
        Ok(())
    })
    .clone()
    .map_err(|detail| Error::Library {
        library: "CUDA driver".into(),
        detail,
    })
}

/// The driver's CUDA version as (major, minor), e.g. (13, 0).
pub fn driver_version() -> Result<(i32, i32)> {
    ensure_driver()?;
    let mut v = 0i32;
    // SAFETY: writes one int through a valid pointer.
    check("cuDriverGetVersion", unsafe {
        cu::cuDriverGetVersion(&mut v)
    })?;
    Ok((v / 1000, (v % 1000) / 10))
}

/// The NVRTC of this process (`nvrtc::get`), chosen against this driver.
fn nvrtc() -> Result<&'static nvrtc::Nvrtc> {
    nvrtc::get(|| driver_version().ok().map(|v| v.0))
}

/// Checks that an NVRTC can be loaded (see the `nvrtc` module for which one).
pub fn ensure_nvrtc() -> Result<()> {
    nvrtc().map(|_| ())
}

/// The chosen NVRTC's version as (major, minor).
pub fn nvrtc_version() -> Result<(i32, i32)> {
    Ok(nvrtc()?.version)
}

/// The chosen NVRTC's file name or path, for reports.
pub fn nvrtc_path() -> Result<String> {
    Ok(nvrtc()?.path.clone())
}

/// Compiles `src` with NVRTC and returns (cubin, compiler log). The log holds
/// warnings even when compilation succeeds.
pub fn nvrtc_compile(src: &str, name: &str, options: &[String]) -> Result<(Vec<u8>, String)> {
    nvrtc()?.compile(src, name, options)
}

/// Makes `ctx` current on the calling thread.
/// Sets `len` bytes at device address `ptr` (device memory, or pinned host
/// memory through its device address) to `value` and waits until done.
///
/// # Safety
/// `ptr..ptr + len` must be memory of `ctx`'s device that nothing else uses
/// while this runs.
pub unsafe fn fill_mapped(ctx: CUcontext, ptr: CUdeviceptr, len: usize, value: u8) -> Result<()> {
    set_current(ctx)?;
    // SAFETY: the range is the caller's to write (see above).
    check("cuMemsetD8", unsafe { cu::cuMemsetD8_v2(ptr, value, len) })?;
    // SAFETY: no arguments; waits for the memset.
    check("cuCtxSynchronize", unsafe { cu::cuCtxSynchronize() })
}

pub fn set_current(ctx: CUcontext) -> Result<()> {
    // SAFETY: ctx is a live context handle held by the caller's CudaContext.
    check("cuCtxSetCurrent", unsafe { cu::cuCtxSetCurrent(ctx) })
}

/// The ordinal of the current context's device.
pub fn current_device() -> Result<usize> {
    let mut dev: cu::CUdevice = 0;
    // SAFETY: writes one int; needs a current context (callers bind first).
    check("cuCtxGetDevice", unsafe { cu::cuCtxGetDevice(&mut dev) })?;
    usize::try_from(dev).map_err(|_| Error::Cuda {
        call: "cuCtxGetDevice".into(),
        detail: format!("device ordinal {dev}"),
    })
}

/// Whether work queued on `stream` now is being captured into a CUDA graph
/// (it then runs at each replay, with no host code of the caller's around
/// it).
///
/// # Safety
/// `stream` is a live stream of the current context, or null (the legacy
/// default stream).
pub unsafe fn stream_is_capturing(stream: CUstream) -> Result<bool> {
    let mut status = cu::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    // SAFETY: writes one enum; the stream is as the caller's contract says.
    check("cuStreamIsCapturing", unsafe {
        cu::cuStreamIsCapturing(stream, &mut status)
    })?;
    Ok(status != cu::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
}

/// (free, total) bytes of the current context's device.
pub fn mem_get_info() -> Result<(usize, usize)> {
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: writes two usizes; needs a current context (callers bind first).
    check("cuMemGetInfo", unsafe {
        cu::cuMemGetInfo_v2(&mut free, &mut total)
    })?;
    Ok((free, total))
}

/// The granularity the driver rounds device allocations of `device` to.
pub fn allocation_granularity(device: i32) -> Result<usize> {
    // SAFETY: CUmemAllocationProp is a plain C struct; all-zero is its default.
    let mut prop: cu::CUmemAllocationProp = unsafe { std::mem::zeroed() };
    prop.type_ = cu::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type_ = cu::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = device;
    let mut g = 0usize;
    // SAFETY: prop is fully initialised; writes one usize.
    check("cuMemGetAllocationGranularity", unsafe {
        cu::cuMemGetAllocationGranularity(
            &mut g,
            &prop,
            cu::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_RECOMMENDED,
        )
    })?;
    Ok(g)
}

/// Number of streaming multiprocessors of `device`.
pub fn sm_count(device: i32) -> Result<i32> {
    let mut v = 0i32;
    // SAFETY: writes one int; `device` is an ordinal the caller checked.
    check("cuDeviceGetAttribute", unsafe {
        cu::cuDeviceGetAttribute(
            &mut v,
            cu::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
            device,
        )
    })?;
    Ok(v)
}

/// The device's UUID: what identifies one GPU across processes, whatever
/// ordinal CUDA_VISIBLE_DEVICES gives it in each.
pub fn device_uuid(device: i32) -> Result<[u8; 16]> {
    let mut dev: cu::CUdevice = 0;
    // SAFETY: writes one handle; `device` is an ordinal the caller opened.
    check("cuDeviceGet", unsafe { cu::cuDeviceGet(&mut dev, device) })?;
    let mut id = cu::CUuuid { bytes: [0; 16] };
    // SAFETY: writes the 16 bytes of `id`; `dev` came from cuDeviceGet.
    check("cuDeviceGetUuid", unsafe {
        cu::cuDeviceGetUuid_v2(&mut id, dev)
    })?;
    Ok(id.bytes.map(|b| b as u8))
}

/// Whether contexts on `device` are served by an MPS server (kernels of
/// different processes then run at once instead of in time slices).
pub fn mps_enabled(device: i32) -> Result<bool> {
    let mut v = 0i32;
    // SAFETY: writes one int; `device` is an ordinal the caller opened.
    check("cuDeviceGetAttribute", unsafe {
        cu::cuDeviceGetAttribute(
            &mut v,
            cu::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MPS_ENABLED,
            device,
        )
    })?;
    Ok(v != 0)
}

/// Whether `device` can map the memory of `peer`.
pub fn can_access_peer(device: i32, peer: i32) -> Result<bool> {
    let mut v = 0i32;
    // SAFETY: writes one int; both ordinals are devices the caller opened.
    check("cuDeviceCanAccessPeer", unsafe {
        cu::cuDeviceCanAccessPeer(&mut v, device, peer)
    })?;
    Ok(v != 0)
}

/// Lets the current context access memory of `peer` (idempotent).
pub fn enable_peer_access(peer: CUcontext) -> Result<()> {
    // SAFETY: `peer` is a live context retained by the caller.
    let r = unsafe { cu::cuCtxEnablePeerAccess(peer, 0) };
    if r == cu::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED {
        return Ok(());
    }
    check("cuCtxEnablePeerAccess", r)
}

/// Device memory from `cuMemAlloc` in the context current at creation; freed
/// on drop (the owner keeps that context alive and current).
pub struct DeviceAlloc {
    ptr: CUdeviceptr,
    bytes: usize,
    ctx: CUcontext,
}

// SAFETY: the allocation is a plain device address; the driver API is thread
// safe and Drop makes the owning context current before freeing.
unsafe impl Send for DeviceAlloc {}
// SAFETY: as for Send, and no method mutates through a shared reference.
unsafe impl Sync for DeviceAlloc {}

impl DeviceAlloc {
    /// Allocates `bytes` in `ctx` (made current here).
    pub fn new(ctx: CUcontext, bytes: usize) -> Result<Self> {
        set_current(ctx)?;
        let mut ptr = 0;
        // SAFETY: writes one device pointer; bytes > 0 is checked by callers.
        check("cuMemAlloc", unsafe { cu::cuMemAlloc_v2(&mut ptr, bytes) })?;
        Ok(Self { ptr, bytes, ctx })
    }
    pub fn ptr(&self) -> CUdeviceptr {
        self.ptr
    }
    /// Fills `len` bytes at `offset` with `value` and waits for it.
    pub fn fill(&self, offset: usize, len: usize, value: u8) -> Result<()> {
        if offset.checked_add(len).is_none_or(|end| end > self.bytes) {
            return Err(Error::invalid("fill range", "outside the allocation"));
        }
        set_current(self.ctx)?;
        // SAFETY: the range lies inside this allocation (checked above).
        check("cuMemsetD8", unsafe {
            cu::cuMemsetD8_v2(self.ptr + offset as u64, value, len)
        })?;
        // SAFETY: no arguments; waits for the memset.
        check("cuCtxSynchronize", unsafe { cu::cuCtxSynchronize() })
    }
    /// A CUDA IPC handle other processes open to map this allocation.
    pub fn ipc_handle(&self) -> Result<[u8; 64]> {
        set_current(self.ctx)?;
        // SAFETY: CUipcMemHandle is 64 plain bytes.
        let mut h: cu::CUipcMemHandle = unsafe { std::mem::zeroed() };
        // SAFETY: ptr is the base of a cuMemAlloc allocation, as IPC requires.
        check("cuIpcGetMemHandle", unsafe {
            cu::cuIpcGetMemHandle(&mut h, self.ptr)
        })?;
        let mut out = [0u8; 64];
        for (o, b) in out.iter_mut().zip(h.reserved.iter()) {
            *o = *b as u8;
        }
        Ok(out)
    }
}

impl Drop for DeviceAlloc {
    fn drop(&mut self) {
        if set_current(self.ctx).is_ok() {
            // SAFETY: allocated by cuMemAlloc in this context, freed once.
            unsafe { cu::cuMemFree_v2(self.ptr) };
        }
    }
}

/// A peer process's allocation mapped into the current context by CUDA IPC;
/// unmapped on drop.
pub struct IpcMapping {
    ptr: CUdeviceptr,
    ctx: CUcontext,
}

// SAFETY: a device address plus the context it was opened in; see DeviceAlloc.
unsafe impl Send for IpcMapping {}
// SAFETY: as for Send, and no method mutates through a shared reference.
unsafe impl Sync for IpcMapping {}

impl IpcMapping {
    pub fn open(ctx: CUcontext, handle: &[u8; 64]) -> Result<Self> {
        set_current(ctx)?;
        // SAFETY: CUipcMemHandle is 64 plain bytes.
        let mut h: cu::CUipcMemHandle = unsafe { std::mem::zeroed() };
        for (d, s) in h.reserved.iter_mut().zip(handle.iter()) {
            *d = *s as _;
        }
        let mut ptr = 0;
        // SAFETY: writes one device pointer; the driver validates the handle.
        check("cuIpcOpenMemHandle", unsafe {
            cu::cuIpcOpenMemHandle_v2(
                &mut ptr,
                h,
                cu::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as u32,
            )
        })?;
        Ok(Self { ptr, ctx })
    }
    pub fn ptr(&self) -> CUdeviceptr {
        self.ptr
    }
}

impl Drop for IpcMapping {
    fn drop(&mut self) {
        if set_current(self.ctx).is_ok() {
            // SAFETY: opened by cuIpcOpenMemHandle in this context, closed once.
            unsafe { cu::cuIpcCloseMemHandle(self.ptr) };
        }
    }
}

/// Pinned host memory mapped into the device's address space: the kernels
/// write their status here and the host reads it without a copy.
pub struct HostMapped {
    host: *mut u8,
    dev: CUdeviceptr,
    bytes: usize,
}

// SAFETY: the memory is pinned and lives until drop; the host reads it with
// volatile loads only.
unsafe impl Send for HostMapped {}
// SAFETY: as for Send, and no method mutates through a shared reference.
unsafe impl Sync for HostMapped {}

impl HostMapped {
    pub fn new(ctx: CUcontext, bytes: usize) -> Result<Self> {
        set_current(ctx)?;
        let mut host: *mut c_void = std::ptr::null_mut();
        // SAFETY: writes one host pointer to `bytes` of pinned memory.
        check("cuMemHostAlloc", unsafe {
            cu::cuMemHostAlloc(
                &mut host,
                bytes,
                cu::CU_MEMHOSTALLOC_DEVICEMAP | cu::CU_MEMHOSTALLOC_PORTABLE,
            )
        })?;
        // SAFETY: `host` points to `bytes` writable bytes just allocated.
        unsafe { std::ptr::write_bytes(host as *mut u8, 0, bytes) };
        let mut dev = 0;
        // SAFETY: `host` was allocated with DEVICEMAP, so it has a device address.
        let r = unsafe { cu::cuMemHostGetDevicePointer_v2(&mut dev, host, 0) };
        if let Err(e) = check("cuMemHostGetDevicePointer", r) {
            // SAFETY: allocated above, freed once on this error path.
            unsafe { cu::cuMemFreeHost(host) };
            return Err(e);
        }
        Ok(Self {
            host: host as *mut u8,
            dev,
            bytes,
        })
    }
    pub fn device_ptr(&self) -> CUdeviceptr {
        self.dev
    }
    /// Reads the 32-bit word at byte `offset` as the device last wrote it.
    pub fn read_u32(&self, offset: usize) -> u32 {
        assert!(offset.is_multiple_of(4) && offset + 4 <= self.bytes);
        // SAFETY: aligned and in bounds (asserted); volatile because the
        // device writes it behind the compiler's back.
        unsafe { std::ptr::read_volatile(self.host.add(offset) as *const u32) }
    }
    pub fn read_u64(&self, offset: usize) -> u64 {
        assert!(offset.is_multiple_of(8) && offset + 8 <= self.bytes);
        // SAFETY: as read_u32.
        unsafe { std::ptr::read_volatile(self.host.add(offset) as *const u64) }
    }
}

impl Drop for HostMapped {
    fn drop(&mut self) {
        // SAFETY: allocated by cuMemHostAlloc, freed once.
        unsafe { cu::cuMemFreeHost(self.host as *mut c_void) };
    }
}

/// A module loaded from a cubin, with its functions looked up by name.
pub struct Module {
    module: cu::CUmodule,
}

// SAFETY: module and function handles are usable from any thread once the
// owning context is current; the driver API is thread safe.
unsafe impl Send for Module {}
// SAFETY: as for Send, and no method mutates through a shared reference.
unsafe impl Sync for Module {}

#[derive(Clone, Copy)]
pub struct Function(cu::CUfunction);

impl Function {
    /// The most threads a block of this kernel can have (registers permitting).
    pub fn max_threads_per_block(&self) -> Result<u32> {
        let mut v = 0i32;
        // SAFETY: valid function handle from cuModuleGetFunction; writes one int.
        check("cuFuncGetAttribute", unsafe {
            cu::cuFuncGetAttribute(
                &mut v,
                cu::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
                self.0,
            )
        })?;
        Ok(v.max(0) as u32)
    }
    /// How many blocks of `block` threads of this kernel, as compiled, one SM
    /// holds at once (registers, shared memory and thread limits together).
    pub fn resident_blocks_per_sm(&self, block: u32) -> Result<u32> {
        let mut v = 0i32;
        // SAFETY: valid function handle; writes one int; no dynamic shared memory.
        check("cuOccupancyMaxActiveBlocksPerMultiprocessor", unsafe {
            cu::cuOccupancyMaxActiveBlocksPerMultiprocessor(&mut v, self.0, block as i32, 0)
        })?;
        Ok(v.max(0) as u32)
    }
}
// SAFETY: as Module.
unsafe impl Send for Function {}
// SAFETY: as for Send, and no method mutates through a shared reference.
unsafe impl Sync for Function {}

impl Module {
    pub fn load(ctx: CUcontext, cubin: &[u8]) -> Result<Self> {
        set_current(ctx)?;
        let mut module = std::ptr::null_mut();
        // SAFETY: `cubin` is a complete image produced by NVRTC; the driver copies it.
        check("cuModuleLoadData", unsafe {
            cu::cuModuleLoadData(&mut module, cubin.as_ptr() as *const c_void)
        })?;
        Ok(Self { module })
    }
    pub fn function(&self, name: &str) -> Result<Function> {
        let cname =
            CString::new(name).map_err(|_| Error::invalid("kernel name", "contains NUL"))?;
        let mut f = std::ptr::null_mut();
        // SAFETY: valid module handle and NUL-terminated name.
        check("cuModuleGetFunction", unsafe {
            cu::cuModuleGetFunction(&mut f, self.module, cname.as_ptr())
        })?;
        load_now(f)?;
        Ok(Function(f))
    }
}

/// Finishes loading a kernel's code onto the device now, where the driver
/// would otherwise do it at its first launch (CUDA's lazy loading, the
/// default since CUDA 12.2). Loading can wait for every kernel running in
/// the context, so a rank's first launch of a kernel, with a peer rank of
/// the same context already spinning in a collective kernel that waits for
/// it, would never return. Every kernel is looked up at creation, so none
/// is loaded during a call. `cuFuncLoad` exists from the 12.4 driver on;
/// older drivers are left to load as they do.
fn load_now(f: cu::CUfunction) -> Result<()> {
    static HAS_FUNC_LOAD: OnceLock<bool> = OnceLock::new();
    let has = *HAS_FUNC_LOAD.get_or_init(|| driver_version().is_ok_and(|v| v >= (12, 4)));
    if !has {
        return Ok(());
    }
    // SAFETY: a function handle cuModuleGetFunction just gave; loading a
    // loaded function has no effect.
    check("cuFuncLoad", unsafe { cu::cuFuncLoad(f) })
}

// Modules are cached for the life of the process (one per device), so Module
// has no Drop: unloading would race with kernels still in flight.

/// Launches `f` with one by-value argument of type `A` on `stream`.
///
/// # Safety
/// `A` must match the kernel's parameter layout, and every device address in
/// `args` must stay valid until the kernel has finished.
pub unsafe fn launch<A>(
    f: Function,
    grid: u32,
    block: u32,
    args: &A,
    stream: CUstream,
) -> Result<()> {
    // SAFETY: the caller's contract, passed on unchanged.
    unsafe { launch_shared(f, grid, block, 0, args, stream) }
}

/// [`launch`] with `shared_bytes` of dynamic shared memory per block.
///
/// # Safety
/// As [`launch`].
pub unsafe fn launch_shared<A>(
    f: Function,
    grid: u32,
    block: u32,
    shared_bytes: u32,
    args: &A,
    stream: CUstream,
) -> Result<()> {
    let mut params = [args as *const A as *mut c_void];
    // SAFETY: the caller upholds the layout and lifetime contract above; the
    // driver copies the argument bytes before returning.
    check("cuLaunchKernel", unsafe {
        cu::cuLaunchKernel(
            f.0,
            grid,
            1,
            1,
            block,
            1,
            1,
            shared_bytes,
            stream,
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    })
}

/// Launches `f` with one by-value argument and `shared_bytes` of dynamic
/// shared memory per block, allowing it to overlap the
/// previous kernel on `stream` (the launch attribute
/// PROGRAMMATIC_STREAM_SERIALIZATION). Only for kernels that call
/// `wait_for_previous_kernel` before reading anything, on sm_90 or newer.
///
/// # Safety
/// As [`launch`]: `A` matches the kernel's parameter, and every device
/// address in `args` stays valid until the kernel has finished.
pub unsafe fn launch_overlapped<A>(
    f: Function,
    grid: u32,
    block: u32,
    shared_bytes: u32,
    args: &A,
    stream: CUstream,
) -> Result<()> {
    // SAFETY: CUlaunchAttribute is a plain C struct (an id and a union of
    // plain values); all-zero is a valid starting point.
    let mut attr: cu::CUlaunchAttribute = unsafe { std::mem::zeroed() };
    attr.id = cu::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmaticStreamSerializationAllowed = 1;
    let config = cu::CUlaunchConfig {
        gridDimX: grid,
        gridDimY: 1,
        gridDimZ: 1,
        blockDimX: block,
        blockDimY: 1,
        blockDimZ: 1,
        sharedMemBytes: shared_bytes,
        hStream: stream,
        attrs: &mut attr,
        numAttrs: 1,
    };
    let mut params = [args as *const A as *mut c_void];
    // SAFETY: config and attr outlive the call; the caller upholds the
    // argument layout and lifetime contract; the driver copies the argument
    // bytes before returning.
    let r =
        unsafe { cu::cuLaunchKernelEx(&config, f.0, params.as_mut_ptr(), std::ptr::null_mut()) };
    if r == cu::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(Error::Cuda {
            call: "cuLaunchKernelEx (programmatic dependent launch)".into(),
            detail: format!("{r:?}"),
        })
    }
}
