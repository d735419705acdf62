//! `CudaCommunicator`: all-reduce between GPUs that map each other's memory
//! (peer access between threads of one process, CUDA IPC between processes).

use super::compile;
use super::memory::{MemoryItem, MemoryReport};
use super::raw::{
    self, CUdeviceptr, CUstream, DeviceAlloc, Function, HostMapped, IpcMapping, Module,
};
use super::rendezvous::Rendezvous;
use crate::dtype::{DType, ReduceOp};
use crate::error::{Error, Result};
use crate::units::ByteSize;
use cudarc::driver::CudaContext;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// Largest world size the kernels take (their argument block has 8 slots).
pub const MAX_WORLD: usize = 8;

/// Which kernel runs an all-reduce.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Algo {
    /// Every rank pushes its whole input to every peer, then reduces locally.
    OneShot,
    /// Reduce-scatter then all-gather: each rank moves 2(w-1)/w of the message.
    TwoShot,
    /// One-shot up to [`auto_oneshot_max`] for the world size, two-shot above.
    Auto,
}

impl Algo {
    /// The algorithm that runs a message of `bytes` among `world` ranks
    /// (`Auto` resolved).
    pub fn resolve(self, bytes: usize, world: usize) -> Algo {
        match self {
            Algo::Auto if bytes as u64 <= auto_oneshot_max(world).bytes() => Algo::OneShot,
            Algo::Auto => Algo::TwoShot,
            a => a,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Algo::OneShot => "one-shot",
            Algo::TwoShot => "two-shot",
            Algo::Auto => "auto",
        }
    }
}

impl std::str::FromStr for Algo {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "one-shot" | "oneshot" => Ok(Algo::OneShot),
            "two-shot" | "twoshot" => Ok(Algo::TwoShot),
            "auto" => Ok(Algo::Auto),
            other => Err(Error::invalid(
                "algorithm",
                format!("{other:?} (expected one-shot, two-shot or auto)"),
            )),
        }
    }
}

/// Messages up to this size go one-shot under `Algo::Auto`, a size rule until
/// tuning tables exist. For 2 ranks: on 2 x H200 one-shot was faster up to
/// 1 MiB and two-shot from 2 MiB (bench/results/2026-11-30-h200x2-v2-*).
/// One-shot moves (world - 1) times the message out of each rank, so with more
/// ranks the crossing comes sooner; the 256 KiB used there is a guess, not a
/// measurement (only 2-GPU machines were available).
pub fn auto_oneshot_max(world: usize) -> ByteSize {
    if world <= 2 {
        ByteSize::mib(1)
    } else {
        ByteSize::kib(256)
    }
}

/// What a communicator is created with.
#[derive(Clone, Debug)]
pub struct CudaConfig {
    pub rank: usize,
    pub world: usize,
    /// CUDA device ordinal this rank drives.
    pub device: usize,
    /// Largest message an all-reduce may carry; buffers are sized for it.
    pub max_bytes: ByteSize,
    /// Bound on every wait, in the rendezvous and inside the kernels.
    pub timeout: Duration,
}

impl CudaConfig {
    pub fn new(rank: usize, world: usize, device: usize) -> Self {
        Self {
            rank,
            world,
            device,
            max_bytes: ByteSize::mib(8),
            timeout: Duration::from_secs(10),
        }
    }
}

// Kernel threads per block (TPCOMM_BLOCK in kernels/allreduce.cu, whose
// launch bounds fit the registers to it), and the status codes the kernels
// write (TPCOMM_WAIT_*).
const BLOCK: u32 = 512;
const WAIT_ONESHOT: u32 = 1;
const WAIT_REDUCE_SCATTER: u32 = 2;
const WAIT_ALL_GATHER: u32 = 3;
const CTL_BYTES: usize = 256;
const STATUS_BYTES: usize = 64;

/// The kernels' by-value argument: mirrors `struct Args` in allreduce.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct KernelArgs {
    input: u64,
    output: u64,
    nbytes: u64,
    bufs: [u64; MAX_WORLD],
    epoch_stride: u64,
    slot_stride: u64,
    shard_stride: u64,
    ag_offset: u64,
    ctl: u64,
    status: u64,
    timeout_ns: u64,
    rank: u32,
    world: u32,
}

/// Byte layout of one rank's receive area (identical on every rank).
#[derive(Clone, Copy, Debug)]
struct Layout {
    /// One-shot: bytes between the slots of two senders.
    slot_stride: usize,
    /// Two-shot: bytes between the slots of two senders.
    shard_stride: usize,
    /// Two-shot: where the all-gather slots start inside an epoch buffer.
    ag_offset: usize,
    /// Bytes of one epoch buffer; there are two.
    epoch_stride: usize,
}

fn round_up(x: usize, a: usize) -> usize {
    x.div_ceil(a) * a
}

impl Layout {
    fn new(max_bytes: usize, world: usize) -> Self {
        let max_vecs = max_bytes.div_ceil(16);
        let slot_stride = round_up(max_vecs * 16, 256);
        let shard_stride = round_up(max_vecs.div_ceil(world) * 16, 256);
        let ag_offset = world * shard_stride;
        let epoch_stride = (world * slot_stride).max(2 * world * shard_stride);
        Self {
            slot_stride,
            shard_stride,
            ag_offset,
            epoch_stride,
        }
    }
    fn receive_bytes(&self) -> usize {
        2 * self.epoch_stride
    }
}

/// The compiled kernels of one device, loaded once per process.
struct Kernels {
    oneshot: [Function; 3],
    twoshot: [Function; 3],
    /// Threads per block: BLOCK, or less if a kernel cannot take that many.
    block: u32,
    nvrtc: (i32, i32),
    arch: (i32, i32),
    cubin_bytes: usize,
    _module: Module,
    // Keeps the primary context (and so the module) alive for the process:
    // releasing the last reference would destroy the context under the cache.
    _ctx: Arc<CudaContext>,
}

fn dtype_index(d: DType) -> usize {
    match d {
        DType::F32 => 0,
        DType::F16 => 1,
        DType::Bf16 => 2,
    }
}

fn kernels_for(ctx: &Arc<CudaContext>) -> Result<Arc<Kernels>> {
    static CACHE: OnceLock<Mutex<HashMap<usize, Arc<Kernels>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    let mut map = cache
        .lock()
        .map_err(|_| Error::Aborted("kernel cache poisoned by a panic".into()))?;
    if let Some(k) = map.get(&ctx.ordinal()) {
        return Ok(k.clone());
    }
    let arch = ctx
        .compute_capability()
        .map_err(cuda_err("cuDeviceGetAttribute"))?;
    let compiled = compile::compile_cached(compile::ALLREDUCE_SRC, "allreduce.cu", arch)?;
    let module = Module::load(ctx.cu_ctx(), &compiled.cubin).map_err(|e| Error::Library {
        library: "NVRTC".into(),
        detail: format!(
            "the kernels compiled by NVRTC {}.{} for sm_{}{} did not load ({e}); the driver may be older than this NVRTC",
            compiled.nvrtc.0, compiled.nvrtc.1, arch.0, arch.1
        ),
    })?;
    let f = |n: &str| module.function(n);
    let oneshot = [
        f("tpcomm_oneshot_f32")?,
        f("tpcomm_oneshot_f16")?,
        f("tpcomm_oneshot_bf16")?,
    ];
    let twoshot = [
        f("tpcomm_twoshot_f32")?,
        f("tpcomm_twoshot_f16")?,
        f("tpcomm_twoshot_bf16")?,
    ];
    let mut block = BLOCK;
    for k in oneshot.iter().chain(twoshot.iter()) {
        // Rounded down to whole warps; the kernels work with any block size.
        block = block.min(k.max_threads_per_block()? / 32 * 32);
    }
    if block == 0 {
        return Err(Error::Unsupported(format!(
            "the all-reduce kernels cannot launch on sm_{}{} (not enough registers for one warp)",
            arch.0, arch.1
        )));
    }
    let k = Arc::new(Kernels {
        oneshot,
        twoshot,
        block,
        nvrtc: compiled.nvrtc,
        arch,
        cubin_bytes: compiled.cubin.len(),
        _module: module,
        _ctx: ctx.clone(),
    });
    map.insert(ctx.ordinal(), k.clone());
    Ok(k)
}

fn cuda_err(call: &'static str) -> impl Fn(cudarc::driver::DriverError) -> Error {
    move |e| Error::Cuda {
        call: call.into(),
        detail: e.to_string(),
    }
}

/// Opens the primary context of `device` after checking the driver is there
/// (cudarc would panic otherwise).
pub fn open_context(device: usize) -> Result<Arc<CudaContext>> {
    raw::ensure_driver()?;
    let n = CudaContext::device_count().map_err(cuda_err("cuDeviceGetCount"))?;
    if device >= n.max(0) as usize {
        return Err(Error::invalid(
            "device",
            format!("ordinal {device}, but this machine has {n} CUDA device(s)"),
        ));
    }
    let ctx = CudaContext::new(device).map_err(cuda_err("cuDevicePrimaryCtxRetain"))?;
    ctx.bind_to_thread().map_err(cuda_err("cuCtxSetCurrent"))?;
    Ok(ctx)
}

/// A communicator's protocol state, borrowed by the fused kernels (fused.rs).
pub(crate) struct ProtocolParts<'a> {
    pub ctx: &'a Arc<CudaContext>,
    pub bufs: [u64; MAX_WORLD],
    pub epoch_stride: u64,
    pub slot_stride: u64,
    pub ctl: u64,
    pub status: u64,
    pub timeout_ns: u64,
    pub sms: u32,
}

/// One rank of a group of GPUs doing all-reduce through each other's memory.
pub struct CudaCommunicator {
    ctx: Arc<CudaContext>,
    rank: usize,
    world: usize,
    max_bytes: ByteSize,
    timeout: Duration,
    layout: Layout,
    kernels: Arc<Kernels>,
    sms: u32,
    recv: DeviceAlloc,
    status: HostMapped,
    bufs: [u64; MAX_WORLD],
    report: MemoryReport,
    // Kept alive for the mappings in `bufs`: peer contexts (threads) or IPC
    // mappings (processes).
    _peer_ctxs: Vec<Arc<CudaContext>>,
    _ipc: Vec<IpcMapping>,
}

impl std::fmt::Debug for CudaCommunicator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaCommunicator")
            .field("rank", &self.rank)
            .field("world", &self.world)
            .field("device", &self.ctx.ordinal())
            .field("max_bytes", &self.max_bytes)
            .finish()
    }
}

impl CudaCommunicator {
    /// Creates this rank's communicator: compiles (or loads) the kernels,
    /// allocates every buffer it will ever use, and maps the peers' buffers.
    /// All ranks must call this with the same world, max size and rendezvous.
    pub fn new(cfg: &CudaConfig, rendezvous: &Rendezvous) -> Result<Self> {
        if !(2..=MAX_WORLD).contains(&cfg.world) {
            return Err(Error::invalid(
                "world size",
                format!(
                    "{} (the CUDA transport takes 2 to {MAX_WORLD} ranks)",
                    cfg.world
                ),
            ));
        }
        if cfg.rank >= cfg.world {
            return Err(Error::invalid(
                "rank",
                format!("{} is not below the world size {}", cfg.rank, cfg.world),
            ));
        }
        if cfg.max_bytes.bytes() == 0 {
            return Err(Error::invalid("max message size", "must be above 0"));
        }
        let max_bytes = cfg.max_bytes.as_usize()?;
        let ctx = open_context(cfg.device)?;
        let kernels = kernels_for(&ctx)?;
        let dev = cfg.device as i32;
        let sms = raw::sm_count(dev)? as u32;
        let layout = Layout::new(max_bytes, cfg.world);
        let recv_bytes = layout.receive_bytes();
        let alloc_bytes = recv_bytes + CTL_BYTES;

        let granularity = raw::allocation_granularity(dev)?;
        let (free_before, _) = raw::mem_get_info()?;
        if round_up(alloc_bytes, granularity) > free_before {
            return Err(Error::OutOfMemory {
                what: "the CUDA communicator's receive buffers".into(),
                needed: ByteSize::from_usize(alloc_bytes),
                available: ByteSize::from_usize(free_before),
            });
        }
        let recv = DeviceAlloc::new(ctx.cu_ctx(), alloc_bytes)?;
        // Idle slots hold the sentinel; control words start at zero.
        recv.fill(0, recv_bytes, 0xff)?;
        recv.fill(recv_bytes, CTL_BYTES, 0)?;
        let status = HostMapped::new(ctx.cu_ctx(), STATUS_BYTES)?;

        let report = MemoryReport {
            device: cfg.device,
            items: vec![
                MemoryItem::device("receive slots (2 epochs)", recv_bytes),
                MemoryItem::device("control words (epoch, abort)", CTL_BYTES),
                MemoryItem::host("status (pinned, mapped)", STATUS_BYTES),
            ],
            allocations: vec![ByteSize::from_usize(alloc_bytes)],
            granularity: ByteSize::from_usize(granularity),
            kernel_image: ByteSize::from_usize(kernels.cubin_bytes),
        };

        // Published only after the fill completed, so no peer can write into
        // this buffer before it holds the sentinel.
        let mut mine = Vec::with_capacity(80);
        mine.extend_from_slice(&std::process::id().to_le_bytes());
        mine.extend_from_slice(&(cfg.device as u32).to_le_bytes());
        mine.extend_from_slice(&recv.ptr().to_le_bytes());
        let threads = matches!(rendezvous, Rendezvous::Threads(_));
        if !threads {
            mine.extend_from_slice(&recv.ipc_handle()?);
        }
        let all = rendezvous.exchange("cuda-buffers", cfg.rank, cfg.world, &mine, cfg.timeout)?;

        let mut bufs = [0u64; MAX_WORLD];
        let mut peer_ctxs = Vec::new();
        let mut ipc = Vec::new();
        for (p, blob) in all.iter().enumerate() {
            let expect = if threads { 16 } else { 80 };
            if blob.len() != expect {
                return Err(Error::invalid("rendezvous", format!("rank {p} posted {} bytes, expected {expect}: do all ranks use the same kind of rendezvous?", blob.len())));
            }
            let peer_dev = u32::from_le_bytes(blob[4..8].try_into().unwrap_or_default()) as i32;
            let ptr = u64::from_le_bytes(blob[8..16].try_into().unwrap_or_default());
            if p == cfg.rank {
                bufs[p] = recv.ptr();
                continue;
            }
            if peer_dev != dev && !raw::can_access_peer(dev, peer_dev)? {
                return Err(Error::Unsupported(format!(
                    "GPU {dev} cannot access GPU {peer_dev} peer-to-peer; the CUDA transport needs P2P (run `nvidia-smi topo -p2p r`); use the host or NCCL transport instead"
                )));
            }
            if threads {
                if peer_dev != dev {
                    let pctx = CudaContext::new(peer_dev as usize)
                        .map_err(cuda_err("cuDevicePrimaryCtxRetain"))?;
                    raw::set_current(ctx.cu_ctx())?;
                    raw::enable_peer_access(pctx.cu_ctx())?;
                    peer_ctxs.push(pctx);
                }
                bufs[p] = ptr;
            } else {
                let mut h = [0u8; 64];
                h.copy_from_slice(&blob[16..80]);
                let m = IpcMapping::open(ctx.cu_ctx(), &h)?;
                bufs[p] = m.ptr();
                ipc.push(m);
            }
        }
        // A second meeting so that no rank returns (and launches) before every
        // rank has mapped every peer: a failure anywhere then fails all ranks here.
        rendezvous.exchange("cuda-mapped", cfg.rank, cfg.world, &[1], cfg.timeout)?;

        Ok(Self {
            ctx,
            rank: cfg.rank,
            world: cfg.world,
            max_bytes: cfg.max_bytes,
            timeout: cfg.timeout,
            layout,
            kernels,
            sms,
            recv,
            status,
            bufs,
            report,
            _peer_ctxs: peer_ctxs,
            _ipc: ipc,
        })
    }

    pub fn rank(&self) -> usize {
        self.rank
    }
    pub fn world(&self) -> usize {
        self.world
    }
    pub fn max_bytes(&self) -> ByteSize {
        self.max_bytes
    }
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }
    /// Every byte this communicator took, per buffer.
    pub fn memory_report(&self) -> &MemoryReport {
        &self.report
    }
    /// NVRTC version and architecture the kernels were compiled with.
    pub fn compiled_with(&self) -> ((i32, i32), (i32, i32)) {
        (self.kernels.nvrtc, self.kernels.arch)
    }

    /// Sums `count` elements of `dtype` from `input` over all ranks into
    /// `output` (in place when they are equal), on `stream`, asynchronously.
    /// Works inside stream capture. Returns the algorithm used. Call
    /// [`check`](Self::check) after synchronizing to learn whether a peer
    /// failed to arrive.
    ///
    /// # Safety
    /// `input` and `output` must be device memory of this communicator's
    /// device (or mapped into it), 16-byte aligned, holding at least `count`
    /// elements, and stay valid until the stream has run the call; `stream`
    /// must belong to this device's primary context (or be null).
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn all_reduce(
        &self,
        input: CUdeviceptr,
        output: CUdeviceptr,
        count: usize,
        dtype: DType,
        op: ReduceOp,
        algo: Algo,
        stream: CUstream,
    ) -> Result<Algo> {
        self.check()?;
        if op != ReduceOp::Sum {
            return Err(Error::Unsupported(format!(
                "reduce op {op:?} in the CUDA kernels (only sum); use NCCL for it"
            )));
        }
        let bytes = count
            .checked_mul(dtype.size())
            .ok_or_else(|| Error::invalid("count", format!("{count} elements overflow")))?;
        if bytes as u64 > self.max_bytes.bytes() {
            return Err(Error::invalid(
                "message size",
                format!(
                    "{} is above this communicator's maximum {}; create it with a larger max_bytes",
                    ByteSize::from_usize(bytes),
                    self.max_bytes
                ),
            ));
        }
        if !input.is_multiple_of(16) || !output.is_multiple_of(16) {
            return Err(Error::invalid(
                "buffer address",
                "input and output must be 16-byte aligned",
            ));
        }
        let algo = algo.resolve(bytes, self.world);
        if count == 0 {
            return Ok(algo);
        }
        let nvec = bytes.div_ceil(16);
        // Small messages get one vector per thread and no idle warps; large
        // ones at most one block per SM, so every block is resident (the
        // kernels wait on peers, never on blocks of their own grid).
        let block = (self.kernels.block as usize).min(nvec.div_ceil(32) * 32) as u32;
        let blocks = nvec.div_ceil(block as usize).clamp(1, self.sms as usize) as u32;
        let d = dtype_index(dtype);
        let f = match algo {
            Algo::TwoShot => self.kernels.twoshot[d],
            _ => self.kernels.oneshot[d],
        };
        let args = KernelArgs {
            input,
            output,
            nbytes: bytes as u64,
            bufs: self.bufs,
            epoch_stride: self.layout.epoch_stride as u64,
            slot_stride: self.layout.slot_stride as u64,
            shard_stride: self.layout.shard_stride as u64,
            ag_offset: self.layout.ag_offset as u64,
            ctl: self.recv.ptr() + self.layout.receive_bytes() as u64,
            status: self.status.device_ptr(),
            timeout_ns: self.timeout.as_nanos().min(u64::MAX as u128) as u64,
            rank: self.rank as u32,
            world: self.world as u32,
        };
        raw::set_current(self.ctx.cu_ctx())?;
        // SAFETY: KernelArgs mirrors `struct Args`; the receive buffers and
        // status live as long as `self` (callers keep the communicator until
        // their streams finish); input/output validity is the caller's
        // contract above.
        unsafe { raw::launch(f, blocks, block, &args, stream)? };
        Ok(algo)
    }

    /// What the fused kernels (fused.rs) need to run the one-shot protocol on
    /// this communicator's buffers and epoch: (context, peer receive buffers,
    /// epoch stride, one-shot slot stride, control words, status, timeout ns, SMs).
    pub(crate) fn protocol_parts(&self) -> ProtocolParts<'_> {
        ProtocolParts {
            ctx: &self.ctx,
            bufs: self.bufs,
            epoch_stride: self.layout.epoch_stride as u64,
            slot_stride: self.layout.slot_stride as u64,
            ctl: self.recv.ptr() + self.layout.receive_bytes() as u64,
            status: self.status.device_ptr(),
            timeout_ns: self.timeout.as_nanos().min(u64::MAX as u128) as u64,
            sms: self.sms,
        }
    }

    /// Reports a peer that did not arrive in an earlier call (read from the
    /// status the kernels write). Synchronize the stream first to see the
    /// outcome of the latest call.
    pub fn check(&self) -> Result<()> {
        let code = self.status.read_u32(0);
        if code == 0 {
            return Ok(());
        }
        let peer = self.status.read_u32(4) as usize;
        let epoch = self.status.read_u64(8);
        let what = match code {
            WAIT_ONESHOT => "one-shot data",
            WAIT_REDUCE_SCATTER => "two-shot reduce-scatter data",
            WAIT_ALL_GATHER => "two-shot all-gather data",
            _ => "data",
        };
        Err(Error::PeerTimeout {
            rank: self.rank,
            peer,
            epoch,
            what: what.into(),
            waited: self.timeout,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_args_match_the_cuda_struct_size() {
        // 18 u64 words and two u32: the size `struct Args` has in allreduce.cu.
        assert_eq!(std::mem::size_of::<KernelArgs>(), 18 * 8 + 8);
    }

    #[test]
    fn layout_fits_both_algorithms_in_an_epoch_buffer() {
        for world in 2..=MAX_WORLD {
            for max in [1usize, 2, 16, 1000, 1 << 20, (8 << 20) + 6] {
                let l = Layout::new(max, world);
                assert!(l.slot_stride >= max && l.slot_stride.is_multiple_of(16));
                assert!(world * l.shard_stride >= max.div_ceil(16) * 16);
                assert!(world * l.slot_stride <= l.epoch_stride);
                assert!(l.ag_offset + world * l.shard_stride <= l.epoch_stride);
            }
        }
    }

    #[test]
    fn auto_picks_one_shot_up_to_the_threshold_and_two_shot_above() {
        assert_eq!(auto_oneshot_max(2), ByteSize::mib(1));
        for world in [2, 4, 8] {
            let t = auto_oneshot_max(world).bytes() as usize;
            assert_eq!(Algo::Auto.resolve(t, world), Algo::OneShot);
            assert_eq!(Algo::Auto.resolve(t + 2, world), Algo::TwoShot);
            assert_eq!(Algo::TwoShot.resolve(16, world), Algo::TwoShot);
            assert_eq!(Algo::OneShot.resolve(t * 8, world), Algo::OneShot);
        }
    }
}
