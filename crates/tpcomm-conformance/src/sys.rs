//! Every `unsafe` of the suite: the CUDA driver (cudarc's raw bindings, loaded at run time),
//! the drop-in opened by path (libloading), and killing a child's process group.
//!
//! The wrappers take plain numbers (device pointers, handles as `usize`) because the suite's
//! point is to hand the drop-in whatever an NCCL program might, bad values included; each
//! returns the raw result code for the caller to judge.

use cudarc::driver::sys as cu;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::time::{Duration, Instant};

/// Whether `libcuda.so` can be opened at all (no GPU machine: false, never a panic).
pub fn cuda_driver_present() -> bool {
    // SAFETY: only tries to dlopen the driver library.
    unsafe { cu::is_culib_present() }
}

fn cu_err(r: cu::CUresult, what: &str) -> Result<(), String> {
    if r == cu::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(format!("{what}: CUDA error {r:?}"))
    }
}

/// A rank's GPU: its primary context made current on the calling thread.
#[derive(Clone, Copy)]
pub struct Gpu {
    pub ordinal: i32,
    ctx: usize,
}

/// cuInit and the number of GPUs.
pub fn device_count() -> Result<i32, String> {
    let mut n: c_int = 0;
    // SAFETY: plain driver calls with an out-pointer to a local.
    unsafe {
        cu_err(cu::cuInit(0), "cuInit")?;
        cu_err(cu::cuDeviceGetCount(&mut n), "cuDeviceGetCount")?;
    }
    Ok(n)
}

impl Gpu {
    /// Retains GPU `ordinal`'s primary context (shared by every thread on it, as the CUDA
    /// runtime does) and makes it current on this thread.
    pub fn open(ordinal: i32) -> Result<Gpu, String> {
        device_count()?;
        let mut dev: cu::CUdevice = 0;
        let mut ctx: cu::CUcontext = std::ptr::null_mut();
        // SAFETY: out-pointers to locals; the context is kept for the process's life.
        unsafe {
            cu_err(cu::cuDeviceGet(&mut dev, ordinal), "cuDeviceGet")?;
            cu_err(
                cu::cuDevicePrimaryCtxRetain(&mut ctx, dev),
                "cuDevicePrimaryCtxRetain",
            )?;
            cu_err(cu::cuCtxSetCurrent(ctx), "cuCtxSetCurrent")?;
        }
        Ok(Gpu {
            ordinal,
            ctx: ctx as usize,
        })
    }
    /// Makes this GPU's context current on the calling thread.
    pub fn make_current(&self) -> Result<(), String> {
        // SAFETY: a context retained by `open`.
        unsafe {
            cu_err(
                cu::cuCtxSetCurrent(self.ctx as cu::CUcontext),
                "cuCtxSetCurrent",
            )
        }
    }
}

/// Device memory, freed on drop.
pub struct DevBuf {
    pub ptr: u64,
}

impl DevBuf {
    pub fn new(bytes: usize) -> Result<DevBuf, String> {
        let mut p: cu::CUdeviceptr = 0;
        // SAFETY: out-pointer to a local; at least one byte so the pointer is real.
        unsafe { cu_err(cu::cuMemAlloc_v2(&mut p, bytes.max(1)), "cuMemAlloc")? };
        Ok(DevBuf { ptr: p })
    }
}

impl Drop for DevBuf {
    fn drop(&mut self) {
        // SAFETY: allocated by cuMemAlloc and not freed elsewhere.
        unsafe {
            let _ = cu::cuMemFree_v2(self.ptr);
        }
    }
}

/// A stream; `blocking` streams synchronise with the legacy default stream.
///
/// Its copies to and from host memory go through a pinned staging buffer of its own
/// (`STAGE` bytes, allocated with the stream, before any collective call), in pieces: a
/// piece waits for the stream by polling `cuStreamQuery`, never inside the driver. A copy
/// through pageable memory can hold the calling thread inside the driver, and other threads'
/// CUDA calls with it, until earlier work on the stream is done; with ranks as threads of one
/// process sharing a GPU and a replayed graph's kernel waiting for a peer, that wait never
/// ends (docs/shared-gpu.md). The suite's synchronous pageable copies are `sync_copy_to_*`.
pub struct Stream {
    pub raw: usize,
    stage: usize,
    /// The longest a copy waits for the stream's earlier work.
    limit: Duration,
}

/// Bytes of a stream's pinned staging buffer.
const STAGE: usize = 4 << 20;

impl Stream {
    pub fn new(blocking: bool) -> Result<Stream, String> {
        let mut s: cu::CUstream = std::ptr::null_mut();
        let flags = if blocking { 0 } else { 1 };
        // SAFETY: out-pointer to a local.
        unsafe { cu_err(cu::cuStreamCreate(&mut s, flags), "cuStreamCreate")? };
        let mut stage: *mut c_void = std::ptr::null_mut();
        // SAFETY: out-pointer to a local; freed by drop.
        if let Err(e) =
            unsafe { cu_err(cu::cuMemAllocHost_v2(&mut stage, STAGE), "cuMemAllocHost") }
        {
            // SAFETY: created above.
            unsafe {
                let _ = cu::cuStreamDestroy_v2(s);
            }
            return Err(e);
        }
        Ok(Stream {
            raw: s as usize,
            stage: stage as usize,
            limit: Duration::from_secs(60),
        })
    }
    fn cu(&self) -> cu::CUstream {
        self.raw as cu::CUstream
    }
    /// Whether the stream's work is done (`cuStreamQuery`), or its error.
    pub fn query(&self) -> Result<bool, String> {
        // SAFETY: a live stream.
        match unsafe { cu::cuStreamQuery(self.cu()) } {
            cu::CUresult::CUDA_SUCCESS => Ok(true),
            cu::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            e => Err(format!("stream: CUDA error {e:?}")),
        }
    }
    /// Waits for the stream's work, polling, at most `limit`.
    pub fn sync(&self, limit: Duration) -> Result<(), String> {
        let end = Instant::now() + limit;
        loop {
            // SAFETY: a live stream.
            let r = unsafe { cu::cuStreamQuery(self.cu()) };
            match r {
                cu::CUresult::CUDA_SUCCESS => return Ok(()),
                cu::CUresult::CUDA_ERROR_NOT_READY => {}
                e => return Err(format!("stream: CUDA error {e:?}")),
            }
            if Instant::now() > end {
                return Err(format!("stream work not done within {limit:?}"));
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }
    /// Host to device on this stream, in pieces through the staging buffer: each piece
    /// waits (polling) for the stream's earlier work, then is queued; the last may still be
    /// in flight when this returns (the stream orders it before later work).
    pub fn upload(&self, dst: u64, host: &[u8]) -> Result<(), String> {
        for (k, piece) in host.chunks(STAGE).enumerate() {
            self.sync(self.limit)
                .map_err(|e| format!("upload, before its piece {k}: {e}"))?;
            // SAFETY: the staging buffer holds STAGE bytes and the stream has finished any
            // copy out of it (synced above); `dst` holds host.len() bytes (the caller's
            // buffer) and this piece lies inside it.
            unsafe {
                std::ptr::copy_nonoverlapping(piece.as_ptr(), self.stage as *mut u8, piece.len());
                cu_err(
                    cu::cuMemcpyHtoDAsync_v2(
                        dst + (k * STAGE) as u64,
                        self.stage as *const c_void,
                        piece.len(),
                        self.cu(),
                    ),
                    "cuMemcpyHtoDAsync",
                )?;
            }
        }
        Ok(())
    }
    /// Device to host after the stream's earlier work, in pieces through the staging
    /// buffer; returns when `host` holds the bytes (a wait of at most the stream's limit
    /// per piece, polling).
    pub fn download(&self, host: &mut [u8], src: u64) -> Result<(), String> {
        for (k, piece) in host.chunks_mut(STAGE).enumerate() {
            // SAFETY: as `upload`, the other way; the piece is read only after the stream
            // has run the copy (synced below).
            unsafe {
                cu_err(
                    cu::cuMemcpyDtoHAsync_v2(
                        self.stage as *mut c_void,
                        src + (k * STAGE) as u64,
                        piece.len(),
                        self.cu(),
                    ),
                    "cuMemcpyDtoHAsync",
                )?;
            }
            self.sync(self.limit)
                .map_err(|e| format!("download of piece {k}: {e}"))?;
            // SAFETY: the copy above is done; the staging buffer holds STAGE bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    self.stage as *const u8,
                    piece.as_mut_ptr(),
                    piece.len(),
                );
            }
        }
        Ok(())
    }
    pub fn memset(&self, dst: u64, byte: u8, n: usize) -> Result<(), String> {
        // SAFETY: `dst` holds at least n bytes.
        unsafe {
            cu_err(
                cu::cuMemsetD8Async(dst, byte, n, self.cu()),
                "cuMemsetD8Async",
            )
        }
    }
    /// Starts capturing this stream into a graph, in the mode [`set_global_capture`] chose.
    pub fn begin_capture(&self) -> Result<(), String> {
        self.begin_capture_in(GLOBAL_CAPTURE.load(std::sync::atomic::Ordering::Relaxed))
    }
    /// Starts capturing this stream into a graph, in global mode or thread-local.
    pub fn begin_capture_in(&self, global: bool) -> Result<(), String> {
        let mode = if global {
            cu::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL
        } else {
            cu::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
        };
        // SAFETY: a live stream.
        unsafe {
            cu_err(
                cu::cuStreamBeginCapture_v2(self.cu(), mode),
                "cuStreamBeginCapture",
            )
        }
    }
    /// Ends the capture and instantiates the graph.
    pub fn end_capture(&self) -> Result<Graph, String> {
        let mut g: cu::CUgraph = std::ptr::null_mut();
        let mut e: cu::CUgraphExec = std::ptr::null_mut();
        // SAFETY: out-pointers to locals; both are destroyed by Graph's drop.
        unsafe {
            cu_err(
                cu::cuStreamEndCapture(self.cu(), &mut g),
                "cuStreamEndCapture",
            )?;
            if let Err(m) = cu_err(
                cu::cuGraphInstantiateWithFlags(&mut e, g, 0),
                "cuGraphInstantiate",
            ) {
                let _ = cu::cuGraphDestroy(g);
                return Err(m);
            }
        }
        Ok(Graph {
            graph: g as usize,
            exec: e as usize,
        })
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        // SAFETY: created by `new`; the staging buffer is not used after the stream.
        unsafe {
            let _ = cu::cuStreamDestroy_v2(self.cu());
            let _ = cu::cuMemFreeHost(self.stage as *mut c_void);
        }
    }
}

/// Whether captures are in global mode (see [`set_global_capture`]).
static GLOBAL_CAPTURE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Captures of this process in global mode (`true`: PyTorch's default, `torch.cuda.graph`'s
/// `capture_error_mode="global"`, where a capture-unsafe CUDA call from any thread of the
/// process, the drop-in's included, breaks the capture) or thread-local (`false`: a
/// process whose threads are ranks, each doing its own ordinary CUDA work meanwhile).
pub fn set_global_capture(global: bool) {
    GLOBAL_CAPTURE.store(global, std::sync::atomic::Ordering::Relaxed);
}

pub struct Graph {
    graph: usize,
    exec: usize,
}

impl Graph {
    pub fn launch(&self, s: &Stream) -> Result<(), String> {
        // SAFETY: an instantiated graph and a live stream.
        unsafe {
            cu_err(
                cu::cuGraphLaunch(self.exec as cu::CUgraphExec, s.cu()),
                "cuGraphLaunch",
            )
        }
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        // SAFETY: made by end_capture.
        unsafe {
            let _ = cu::cuGraphExecDestroy(self.exec as cu::CUgraphExec);
            let _ = cu::cuGraphDestroy(self.graph as cu::CUgraph);
        }
    }
}

/// The ordinary synchronous CUDA work a checking program does between calls: a copy on the
/// legacy default stream (blocking) and a context synchronise. Unbounded by design (the
/// supervisor's limit bounds the case): this is the pattern that must not deadlock.
pub fn sync_copy_to_host(host: &mut [u8], src: u64) -> Result<(), String> {
    // SAFETY: `src` holds host.len() bytes.
    unsafe {
        cu_err(
            cu::cuMemcpyDtoH_v2(host.as_mut_ptr() as *mut c_void, src, host.len()),
            "cuMemcpyDtoH",
        )?;
        cu_err(cu::cuCtxSynchronize(), "cuCtxSynchronize")
    }
}

/// Synchronous host-to-device copy (legacy stream).
pub fn sync_copy_to_device(dst: u64, host: &[u8]) -> Result<(), String> {
    // SAFETY: `dst` holds host.len() bytes.
    unsafe {
        cu_err(
            cu::cuMemcpyHtoD_v2(dst, host.as_ptr() as *const c_void, host.len()),
            "cuMemcpyHtoD",
        )
    }
}

/// `ncclUniqueId`.
pub type UniqueId = [u8; 128];
/// `ncclComm_t` as a number (so it can cross threads; it is only ever passed back).
pub type Comm = usize;

/// NCCL 2.28's `ncclConfig_t` (`ncclConfig_v22800`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Config {
    pub size: usize,
    pub magic: u32,
    pub version: u32,
    pub blocking: c_int,
    pub cga_cluster_size: c_int,
    pub min_ctas: c_int,
    pub max_ctas: c_int,
    pub net_name: *const c_char,
    pub split_share: c_int,
    pub traffic_class: c_int,
    pub comm_name: *const c_char,
    pub collnet_enable: c_int,
    pub cta_policy: c_int,
    pub shrink_share: c_int,
    pub nvls_ctas: c_int,
    pub n_channels_per_net_peer: c_int,
    pub nvlink_centric_sched: c_int,
}

impl Config {
    /// `NCCL_CONFIG_INITIALIZER` of NCCL 2.28.
    pub fn initializer() -> Config {
        let u = c_int::MIN;
        Config {
            size: std::mem::size_of::<Config>(),
            magic: 0xcafe_beef,
            version: 22800,
            blocking: u,
            cga_cluster_size: u,
            min_ctas: u,
            max_ctas: u,
            net_name: std::ptr::null(),
            split_share: u,
            traffic_class: u,
            comm_name: std::ptr::null(),
            collnet_enable: u,
            cta_policy: u,
            shrink_share: u,
            nvls_ctas: u,
            n_channels_per_net_peer: u,
            nvlink_centric_sched: u,
        }
    }
}

type V = *mut c_void;
type CV = *const c_void;
type R = c_int;

macro_rules! api {
    ($( $field:ident = $sym:literal : fn($($a:ty),*) -> $ret:ty ;)*) => {
        /// The drop-in's exported functions, each `None` when the library lacks it.
        #[derive(Clone, Copy)]
        #[allow(non_snake_case)]
        pub struct Api { $( $field: Option<unsafe extern "C" fn($($a),*) -> $ret>, )* }
        impl Api {
            fn load(lib: &'static libloading::Library) -> Api {
                // SAFETY: each name is looked up with the prototype nccl.h gives it.
                unsafe { Api { $( $field: lib.get::<unsafe extern "C" fn($($a),*) -> $ret>($sym).ok().map(|s| *s), )* } }
            }
            /// Names of the functions the library does not export.
            pub fn missing(&self) -> Vec<&'static str> {
                let mut v = Vec::new();
                $( if self.$field.is_none() { v.push(std::str::from_utf8(&$sym[..$sym.len() - 1]).unwrap_or("?")); } )*
                v
            }
        }
    };
}

api! {
    get_unique_id = b"ncclGetUniqueId\0": fn(*mut UniqueId) -> R;
    init_rank = b"ncclCommInitRank\0": fn(*mut V, c_int, UniqueId, c_int) -> R;
    init_rank_config = b"ncclCommInitRankConfig\0": fn(*mut V, c_int, UniqueId, c_int, *mut Config) -> R;
    init_all = b"ncclCommInitAll\0": fn(*mut V, c_int, *const c_int) -> R;
    init_scalable = b"ncclCommInitRankScalable\0": fn(*mut V, c_int, c_int, c_int, *mut UniqueId, *mut Config) -> R;
    split = b"ncclCommSplit\0": fn(V, c_int, c_int, *mut V, *mut Config) -> R;
    shrink = b"ncclCommShrink\0": fn(V, *mut c_int, c_int, *mut V, *mut Config, c_int) -> R;
    finalize = b"ncclCommFinalize\0": fn(V) -> R;
    destroy = b"ncclCommDestroy\0": fn(V) -> R;
    abort = b"ncclCommAbort\0": fn(V) -> R;
    async_error = b"ncclCommGetAsyncError\0": fn(V, *mut R) -> R;
    count = b"ncclCommCount\0": fn(V, *mut c_int) -> R;
    cu_device = b"ncclCommCuDevice\0": fn(V, *mut c_int) -> R;
    user_rank = b"ncclCommUserRank\0": fn(V, *mut c_int) -> R;
    get_version = b"ncclGetVersion\0": fn(*mut c_int) -> R;
    error_string = b"ncclGetErrorString\0": fn(R) -> *const c_char;
    last_error = b"ncclGetLastError\0": fn(V) -> *const c_char;
    group_start = b"ncclGroupStart\0": fn() -> R;
    group_end = b"ncclGroupEnd\0": fn() -> R;
    all_reduce = b"ncclAllReduce\0": fn(CV, V, usize, c_int, c_int, V, V) -> R;
    reduce = b"ncclReduce\0": fn(CV, V, usize, c_int, c_int, c_int, V, V) -> R;
    reduce_scatter = b"ncclReduceScatter\0": fn(CV, V, usize, c_int, c_int, V, V) -> R;
    all_gather = b"ncclAllGather\0": fn(CV, V, usize, c_int, V, V) -> R;
    broadcast = b"ncclBroadcast\0": fn(CV, V, usize, c_int, c_int, V, V) -> R;
    bcast = b"ncclBcast\0": fn(V, usize, c_int, c_int, V, V) -> R;
    send = b"ncclSend\0": fn(CV, usize, c_int, c_int, V, V) -> R;
    recv = b"ncclRecv\0": fn(V, usize, c_int, c_int, V, V) -> R;
    all_to_all = b"ncclAlltoAll\0": fn(CV, V, usize, c_int, V, V) -> R;
    gather = b"ncclGather\0": fn(CV, V, usize, c_int, c_int, V, V) -> R;
    scatter = b"ncclScatter\0": fn(CV, V, usize, c_int, c_int, V, V) -> R;
    premulsum = b"ncclRedOpCreatePreMulSum\0": fn(*mut c_int, V, c_int, c_int, V) -> R;
    redop_destroy = b"ncclRedOpDestroy\0": fn(c_int, V) -> R;
    mem_alloc = b"ncclMemAlloc\0": fn(*mut V, usize) -> R;
    mem_free = b"ncclMemFree\0": fn(V) -> R;
    register = b"ncclCommRegister\0": fn(V, V, usize, *mut V) -> R;
    deregister = b"ncclCommDeregister\0": fn(V, V) -> R;
    window_register = b"ncclCommWindowRegister\0": fn(V, V, usize, *mut V, c_int) -> R;
    window_deregister = b"ncclCommWindowDeregister\0": fn(V, V) -> R;
    team_world = b"ncclTeamWorld\0": fn(V) -> Team;
    team_rank_to_world = b"ncclTeamRankToWorld\0": fn(V, Team, c_int) -> c_int;
    revoke = b"ncclCommRevoke\0": fn(V, c_int) -> R;
}

/// `ncclTeam_t` (nccl_device/core.h, NCCL 2.28): ranks, this rank's index, stride.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Team {
    pub n_ranks: c_int,
    pub rank: c_int,
    pub stride: c_int,
}

/// The drop-in, opened once and never closed.
#[derive(Clone, Copy)]
pub struct Nccl {
    api: Api,
}

/// A call outcome: the result code, or the missing function's name.
pub type Call = Result<i32, &'static str>;

/// The buffers of one NCCL collective as the suite passes them: send and
/// receive buffer (device addresses), element count and `ncclDataType_t`.
#[derive(Clone, Copy, Debug)]
pub struct Bufs {
    pub send: u64,
    pub recv: u64,
    pub count: usize,
    pub dt: i32,
}

impl Bufs {
    pub fn new(send: u64, recv: u64, count: usize, dt: i32) -> Self {
        Bufs {
            send,
            recv,
            count,
            dt,
        }
    }
}

macro_rules! need {
    ($s:ident . $f:ident, $name:literal) => {
        match $s.api.$f {
            Some(f) => f,
            None => return Err($name),
        }
    };
}

fn p(x: u64) -> V {
    x as usize as V
}
fn c(x: Comm) -> V {
    x as V
}
fn s(x: usize) -> V {
    x as V
}

impl Nccl {
    /// dlopen(path) and look every function up by name.
    pub fn open(path: &str) -> Result<Nccl, String> {
        // SAFETY: loading a shared library runs its initialisers; this is the library under test.
        let lib = unsafe { libloading::Library::new(path) }
            .map_err(|e| format!("cannot dlopen {path}: {e}"))?;
        let lib: &'static libloading::Library = Box::leak(Box::new(lib));
        Ok(Nccl {
            api: Api::load(lib),
        })
    }
    pub fn missing(&self) -> Vec<&'static str> {
        self.api.missing()
    }
    pub fn unique_id(&self) -> Result<(i32, UniqueId), &'static str> {
        let f = need!(self.get_unique_id, "ncclGetUniqueId");
        let mut id = [0u8; 128];
        // SAFETY: a 128-byte out-buffer.
        Ok((unsafe { f(&mut id) }, id))
    }
    /// ncclCommInitRank; `out_null` passes a null result pointer.
    pub fn init_rank(
        &self,
        nranks: i32,
        id: &UniqueId,
        rank: i32,
        out_null: bool,
    ) -> Result<(i32, Comm), &'static str> {
        let f = need!(self.init_rank, "ncclCommInitRank");
        let mut comm: V = std::ptr::null_mut();
        let out = if out_null {
            std::ptr::null_mut()
        } else {
            &mut comm as *mut V
        };
        // SAFETY: out-pointer to a local (or null, which the library must reject).
        Ok((unsafe { f(out, nranks, *id, rank) }, comm as Comm))
    }
    pub fn init_rank_config(
        &self,
        nranks: i32,
        id: &UniqueId,
        rank: i32,
        cfg: &mut Config,
    ) -> Result<(i32, Comm), &'static str> {
        let f = need!(self.init_rank_config, "ncclCommInitRankConfig");
        let mut comm: V = std::ptr::null_mut();
        // SAFETY: out-pointer to a local; the config lives for the call.
        Ok((
            unsafe { f(&mut comm, nranks, *id, rank, cfg) },
            comm as Comm,
        ))
    }
    pub fn init_all(&self, devs: &[i32]) -> Result<(i32, Vec<Comm>), &'static str> {
        let f = need!(self.init_all, "ncclCommInitAll");
        let mut comms: Vec<V> = vec![std::ptr::null_mut(); devs.len()];
        // SAFETY: one slot per device.
        let r = unsafe { f(comms.as_mut_ptr(), devs.len() as c_int, devs.as_ptr()) };
        Ok((r, comms.into_iter().map(|x| x as Comm).collect()))
    }
    pub fn init_scalable(
        &self,
        nranks: i32,
        rank: i32,
        ids: &mut [UniqueId],
    ) -> Result<(i32, Comm), &'static str> {
        let f = need!(self.init_scalable, "ncclCommInitRankScalable");
        let mut comm: V = std::ptr::null_mut();
        // SAFETY: `ids.len()` ids; a null config means the defaults.
        Ok((
            unsafe {
                f(
                    &mut comm,
                    nranks,
                    rank,
                    ids.len() as c_int,
                    ids.as_mut_ptr(),
                    std::ptr::null_mut(),
                )
            },
            comm as Comm,
        ))
    }
    pub fn split(&self, comm: Comm, color: i32, key: i32) -> Result<(i32, Comm), &'static str> {
        let f = need!(self.split, "ncclCommSplit");
        let mut out: V = std::ptr::null_mut();
        // SAFETY: out-pointer to a local.
        Ok((
            unsafe { f(c(comm), color, key, &mut out, std::ptr::null_mut()) },
            out as Comm,
        ))
    }
    pub fn shrink(&self, comm: Comm, exclude: &mut [i32]) -> Result<(i32, Comm), &'static str> {
        let f = need!(self.shrink, "ncclCommShrink");
        let mut out: V = std::ptr::null_mut();
        // SAFETY: `exclude.len()` ranks; out-pointer to a local; flags 0 (NCCL_SHRINK_DEFAULT).
        Ok((
            unsafe {
                f(
                    c(comm),
                    exclude.as_mut_ptr(),
                    exclude.len() as c_int,
                    &mut out,
                    std::ptr::null_mut(),
                    0,
                )
            },
            out as Comm,
        ))
    }
    pub fn finalize(&self, comm: Comm) -> Call {
        let f = need!(self.finalize, "ncclCommFinalize");
        // SAFETY: the handle is passed through as given.
        Ok(unsafe { f(c(comm)) })
    }
    pub fn destroy(&self, comm: Comm) -> Call {
        let f = need!(self.destroy, "ncclCommDestroy");
        // SAFETY: as above.
        Ok(unsafe { f(c(comm)) })
    }
    pub fn abort(&self, comm: Comm) -> Call {
        let f = need!(self.abort, "ncclCommAbort");
        // SAFETY: as above.
        Ok(unsafe { f(c(comm)) })
    }
    pub fn async_error(&self, comm: Comm) -> Result<(i32, i32), &'static str> {
        let f = need!(self.async_error, "ncclCommGetAsyncError");
        let mut e: R = -1;
        // SAFETY: out-pointer to a local.
        Ok((unsafe { f(c(comm), &mut e) }, e))
    }
    fn int_query(
        &self,
        f: Option<unsafe extern "C" fn(V, *mut c_int) -> R>,
        name: &'static str,
        comm: Comm,
        null_out: bool,
    ) -> Result<(i32, i32), &'static str> {
        let f = f.ok_or(name)?;
        let mut v: c_int = -1;
        let out = if null_out {
            std::ptr::null_mut()
        } else {
            &mut v as *mut c_int
        };
        // SAFETY: out-pointer to a local or null (which the library must reject).
        Ok((unsafe { f(c(comm), out) }, v))
    }
    pub fn comm_count(&self, comm: Comm, null_out: bool) -> Result<(i32, i32), &'static str> {
        self.int_query(self.api.count, "ncclCommCount", comm, null_out)
    }
    pub fn comm_cu_device(&self, comm: Comm) -> Result<(i32, i32), &'static str> {
        self.int_query(self.api.cu_device, "ncclCommCuDevice", comm, false)
    }
    pub fn comm_user_rank(&self, comm: Comm) -> Result<(i32, i32), &'static str> {
        self.int_query(self.api.user_rank, "ncclCommUserRank", comm, false)
    }
    pub fn version(&self) -> Result<(i32, i32), &'static str> {
        let f = need!(self.get_version, "ncclGetVersion");
        let mut v: c_int = 0;
        // SAFETY: out-pointer to a local.
        Ok((unsafe { f(&mut v) }, v))
    }
    fn text(ptr: *const c_char) -> Option<String> {
        if ptr.is_null() {
            None
        } else {
            // SAFETY: the library returns a NUL-terminated string it keeps alive.
            Some(
                unsafe { CStr::from_ptr(ptr) }
                    .to_string_lossy()
                    .into_owned(),
            )
        }
    }
    pub fn error_string(&self, r: i32) -> Result<Option<String>, &'static str> {
        let f = need!(self.error_string, "ncclGetErrorString");
        // SAFETY: takes a plain integer.
        Ok(Self::text(unsafe { f(r) }))
    }
    pub fn last_error(&self, comm: Comm) -> Result<Option<String>, &'static str> {
        let f = need!(self.last_error, "ncclGetLastError");
        // SAFETY: the handle is passed through (NULL allowed by NCCL).
        Ok(Self::text(unsafe { f(c(comm)) }))
    }
    pub fn group_start(&self) -> Call {
        let f = need!(self.group_start, "ncclGroupStart");
        // SAFETY: no arguments.
        Ok(unsafe { f() })
    }
    pub fn group_end(&self) -> Call {
        let f = need!(self.group_end, "ncclGroupEnd");
        // SAFETY: no arguments.
        Ok(unsafe { f() })
    }
    pub fn all_reduce(&self, b: Bufs, op: i32, comm: Comm, st: usize) -> Call {
        let f = need!(self.all_reduce, "ncclAllReduce");
        // SAFETY: buffers and handles are passed through; the suite's own are valid for the call.
        Ok(unsafe { f(p(b.send), p(b.recv), b.count, b.dt, op, c(comm), s(st)) })
    }
    pub fn reduce(&self, b: Bufs, op: i32, root: i32, comm: Comm, st: usize) -> Call {
        let f = need!(self.reduce, "ncclReduce");
        // SAFETY: as all_reduce.
        Ok(unsafe {
            f(
                p(b.send),
                p(b.recv),
                b.count,
                b.dt,
                op,
                root,
                c(comm),
                s(st),
            )
        })
    }
    pub fn reduce_scatter(&self, b: Bufs, op: i32, comm: Comm, st: usize) -> Call {
        let f = need!(self.reduce_scatter, "ncclReduceScatter");
        // SAFETY: as all_reduce.
        Ok(unsafe { f(p(b.send), p(b.recv), b.count, b.dt, op, c(comm), s(st)) })
    }
    pub fn all_gather(&self, b: Bufs, comm: Comm, st: usize) -> Call {
        let f = need!(self.all_gather, "ncclAllGather");
        // SAFETY: as all_reduce.
        Ok(unsafe { f(p(b.send), p(b.recv), b.count, b.dt, c(comm), s(st)) })
    }
    pub fn broadcast(&self, b: Bufs, root: i32, comm: Comm, st: usize) -> Call {
        let f = need!(self.broadcast, "ncclBroadcast");
        // SAFETY: as all_reduce.
        Ok(unsafe { f(p(b.send), p(b.recv), b.count, b.dt, root, c(comm), s(st)) })
    }
    pub fn bcast(&self, buf: u64, count: usize, dt: i32, root: i32, comm: Comm, st: usize) -> Call {
        let f = need!(self.bcast, "ncclBcast");
        // SAFETY: as all_reduce.
        Ok(unsafe { f(p(buf), count, dt, root, c(comm), s(st)) })
    }
    pub fn send(&self, buf: u64, count: usize, dt: i32, peer: i32, comm: Comm, st: usize) -> Call {
        let f = need!(self.send, "ncclSend");
        // SAFETY: as all_reduce.
        Ok(unsafe { f(p(buf), count, dt, peer, c(comm), s(st)) })
    }
    pub fn recv(&self, buf: u64, count: usize, dt: i32, peer: i32, comm: Comm, st: usize) -> Call {
        let f = need!(self.recv, "ncclRecv");
        // SAFETY: as all_reduce.
        Ok(unsafe { f(p(buf), count, dt, peer, c(comm), s(st)) })
    }
    pub fn all_to_all(&self, b: Bufs, comm: Comm, st: usize) -> Call {
        let f = need!(self.all_to_all, "ncclAlltoAll");
        // SAFETY: as all_reduce.
        Ok(unsafe { f(p(b.send), p(b.recv), b.count, b.dt, c(comm), s(st)) })
    }
    pub fn gather(&self, b: Bufs, root: i32, comm: Comm, st: usize) -> Call {
        let f = need!(self.gather, "ncclGather");
        // SAFETY: as all_reduce.
        Ok(unsafe { f(p(b.send), p(b.recv), b.count, b.dt, root, c(comm), s(st)) })
    }
    pub fn scatter(&self, b: Bufs, root: i32, comm: Comm, st: usize) -> Call {
        let f = need!(self.scatter, "ncclScatter");
        // SAFETY: as all_reduce.
        Ok(unsafe { f(p(b.send), p(b.recv), b.count, b.dt, root, c(comm), s(st)) })
    }
    /// ncclRedOpCreatePreMulSum with a host-immediate scalar (its bytes in the element type).
    pub fn premulsum(
        &self,
        scalar: &mut [u8; 8],
        dt: i32,
        comm: Comm,
    ) -> Result<(i32, i32), &'static str> {
        let f = need!(self.premulsum, "ncclRedOpCreatePreMulSum");
        let mut op: c_int = -1;
        // SAFETY: the scalar's storage outlives the call (host immediate: read during it).
        Ok((
            unsafe { f(&mut op, scalar.as_mut_ptr() as V, dt, 1, c(comm)) },
            op,
        ))
    }
    pub fn redop_destroy(&self, op: i32, comm: Comm) -> Call {
        let f = need!(self.redop_destroy, "ncclRedOpDestroy");
        // SAFETY: plain values.
        Ok(unsafe { f(op, c(comm)) })
    }
    pub fn mem_alloc(&self, bytes: usize) -> Result<(i32, u64), &'static str> {
        let f = need!(self.mem_alloc, "ncclMemAlloc");
        let mut ptr: V = std::ptr::null_mut();
        // SAFETY: out-pointer to a local.
        Ok((unsafe { f(&mut ptr, bytes) }, ptr as usize as u64))
    }
    pub fn mem_free(&self, ptr: u64) -> Call {
        let f = need!(self.mem_free, "ncclMemFree");
        // SAFETY: a pointer from mem_alloc.
        Ok(unsafe { f(p(ptr)) })
    }
    pub fn register(
        &self,
        comm: Comm,
        buf: u64,
        bytes: usize,
    ) -> Result<(i32, usize), &'static str> {
        let f = need!(self.register, "ncclCommRegister");
        let mut h: V = std::ptr::null_mut();
        // SAFETY: out-pointer to a local.
        Ok((unsafe { f(c(comm), p(buf), bytes, &mut h) }, h as usize))
    }
    pub fn deregister(&self, comm: Comm, handle: usize) -> Call {
        let f = need!(self.deregister, "ncclCommDeregister");
        // SAFETY: a handle from register.
        Ok(unsafe { f(c(comm), handle as V) })
    }
    pub fn window_register(
        &self,
        comm: Comm,
        buf: u64,
        bytes: usize,
    ) -> Result<(i32, usize), &'static str> {
        let f = need!(self.window_register, "ncclCommWindowRegister");
        let mut w: V = std::ptr::null_mut();
        // SAFETY: out-pointer to a local; flags 0 (NCCL_WIN_DEFAULT).
        Ok((unsafe { f(c(comm), p(buf), bytes, &mut w, 0) }, w as usize))
    }
    /// ncclTeamWorld; `None` when the library lacks it (before NCCL 2.28).
    pub fn team_world(&self, comm: Comm) -> Option<Team> {
        // SAFETY: a communicator handle (possibly one the library refuses).
        self.api.team_world.map(|f| unsafe { f(c(comm)) })
    }
    /// ncclTeamRankToWorld; `None` when the library lacks it.
    pub fn team_rank_to_world(&self, comm: Comm, team: Team, rank: i32) -> Option<i32> {
        // SAFETY: plain values and a communicator handle.
        self.api
            .team_rank_to_world
            .map(|f| unsafe { f(c(comm), team, rank) })
    }
    /// ncclCommRevoke.
    pub fn revoke(&self, comm: Comm, flags: i32) -> Call {
        let f = need!(self.revoke, "ncclCommRevoke");
        // SAFETY: plain values.
        Ok(unsafe { f(c(comm), flags) })
    }
    pub fn window_deregister(&self, comm: Comm, win: usize) -> Call {
        let f = need!(self.window_deregister, "ncclCommWindowDeregister");
        // SAFETY: a window from window_register.
        Ok(unsafe { f(c(comm), win as V) })
    }
}

/// Kills every process of group `pgid` (a case's runner and its rank processes).
pub fn kill_group(pgid: u32) {
    // SAFETY: sends a signal; no memory is touched.
    unsafe {
        libc::kill(-(pgid as libc::pid_t), libc::SIGKILL);
    }
}

/// Prints `line` as this rank process's result and ends the process at once, running no exit
/// handlers and destroying nothing (a rank that leaves mid-job, as a killed one would).
pub fn leave_now(line: &str) -> ! {
    use std::io::Write;
    println!("{line}");
    let _ = std::io::stdout().flush();
    // SAFETY: ends the process; nothing after it runs.
    unsafe { libc::_exit(0) }
}

/// Dies by SIGSEGV-like abort (the hidden self-test of crash supervision).
pub fn die_by_signal() -> ! {
    // SAFETY: raising a signal at oneself.
    unsafe {
        libc::raise(libc::SIGABRT);
    }
    std::process::abort()
}
