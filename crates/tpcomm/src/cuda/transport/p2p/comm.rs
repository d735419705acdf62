//! `P2pTransport`: all-reduce between GPUs that map each other's memory
//! (peer access between threads of one process, CUDA IPC between processes).

use crate::algo::{Algo, Collective};
use crate::cuda::call::{Call, GpuTransport};
use crate::cuda::call_word;
use crate::cuda::config::CudaConfig;
use crate::cuda::driver_error::cuda_err;
use crate::cuda::kernels::{self, dtype_index, kernels_for, KernelArgs, Kernels};
use crate::cuda::launch_shape::{self, grid_cap};
use crate::cuda::layout::{round_up, Layout};
use crate::cuda::rendezvous::Rendezvous;
use crate::cuda::self_tune::{self, Timed};
use crate::cuda::share::{
    mps_refusal_hint, note_sharing, time_slice_warning, warn_queues_once, DeviceIdentity, Sharing,
    QUEUES_ENV,
};
use crate::cuda::transport::fields::{transport_accessors, transport_debug};
use crate::dtype::ReduceOp;
use crate::error::{Error, Result};
use crate::memory::{GpuAllocations, MemoryLine, MemoryReport};
use crate::sys::cuda::{self as raw, DeviceAlloc, HostMapped, IpcMapping};
use crate::transport::MAX_WORLD;
use crate::units::ByteSize;
use cudarc::driver::CudaContext;
use std::sync::Arc;
use std::time::Duration;

// The status codes the kernels write (TPCOMM_WAIT_* in kernels/allreduce.cu).
// The record each rank posts at creation: its GPU's identity, device
// ordinal and receive buffer's address, and for processes the IPC handle.
const RECORD_THREADS: usize = DeviceIdentity::BYTES + 12;
const RECORD_PROCS: usize = RECORD_THREADS + 64;

const WAIT_ONESHOT: u32 = 1;
const WAIT_REDUCE_SCATTER: u32 = 2;
const WAIT_ALL_GATHER: u32 = 3;
// TPCOMM_WAIT_FUSED in kernels/fused.cu: the fused all-reduce + residual + RMSNorm.
const WAIT_FUSED: u32 = 4;
const CTL_BYTES: usize = 256;
const STATUS_BYTES: usize = 64;

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
    let ctx = CudaContext::new(device).map_err(|e| {
        let code = e.0;
        let mut err = cuda_err("cuDevicePrimaryCtxRetain")(e);
        if let Error::Cuda { detail, .. } = &mut err {
            let mps = raw::mps_enabled(device as i32).unwrap_or(false);
            // CUDA's own variable, read as CUDA reads it.
            let queues = std::env::var(QUEUES_ENV).ok();
            if let Some(hint) = mps_refusal_hint(code, mps, queues.as_deref()) {
                detail.push_str(&hint);
            }
        }
        err
    })?;
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
    /// How the group sits on this GPU: the fused kernel sizes its grid by it.
    pub sharing: Sharing,
    /// Whether calls carry call words (`CudaConfig::check_calls`).
    pub check_calls: bool,
    pub rank: usize,
    pub world: usize,
}

impl ProtocolParts<'_> {
    /// The argument the one-shot protocol's kernels start with for a call
    /// of `nbytes` from `input` to `output` whose call word is `call` (the
    /// two-shot fields zero).
    pub(crate) fn kernel_args(
        &self,
        input: u64,
        output: u64,
        nbytes: u64,
        call: u64,
    ) -> KernelArgs {
        KernelArgs {
            input,
            output,
            nbytes,
            bufs: self.bufs,
            epoch_stride: self.epoch_stride,
            slot_stride: self.slot_stride,
            ctl: self.ctl,
            status: self.status,
            timeout_ns: self.timeout_ns,
            call,
            rank: self.rank as u32,
            world: self.world as u32,
            ..Default::default()
        }
    }
}

/// One rank of a group of GPUs doing all-reduce through each other's memory.
///
/// Drop it only when no rank has a call of it still queued or running: peers
/// write into this rank's receive buffer, which drop frees. A failed call
/// (see [`check`](Self::check)) leaves the communicator unusable; create new
/// ones on every rank.
pub struct P2pTransport {
    ctx: Arc<CudaContext>,
    rank: usize,
    world: usize,
    max_bytes: ByteSize,
    timeout: Duration,
    check_calls: bool,
    /// What the routes were decided with (`CudaConfig::selector`).
    selector: Arc<crate::select::Selector>,
    /// What `Algo::Auto` runs, per size class (`select::RouteTable`, without NCCL).
    routes: crate::select::RouteTable,
    mode: crate::select::Mode,
    layout: Layout,
    kernels: Arc<Kernels>,
    /// Threads per block of the all-reduce kernels: the kernels' own limit,
    /// or less when TPCOMM_P2P_BLOCK asks (read at creation).
    block: u32,
    /// The most blocks a launch may have: one per SM, or this rank's share
    /// of the device when ranks share it (share.rs).
    grid: u32,
    sms: u32,
    sharing: Sharing,
    recv: DeviceAlloc,
    status: HostMapped,
    bufs: [u64; MAX_WORLD],
    report: MemoryReport,
    // Kept alive for the mappings in `bufs`: peer contexts (threads) or IPC
    // mappings (processes).
    _peer_ctxs: Vec<Arc<CudaContext>>,
    _ipc: Vec<IpcMapping>,
}

transport_debug!(P2pTransport);

impl P2pTransport {
    /// Creates this rank's communicator: compiles (or loads) the kernels,
    /// allocates every buffer it will ever use, and maps the peers' buffers.
    /// All ranks must call this with the same world, max size and rendezvous.
    pub fn new(cfg: &CudaConfig, rendezvous: &Rendezvous) -> Result<Self> {
        let max_bytes = cfg.checked("the CUDA transport")?;
        let ctx = open_context(cfg.device)?;
        let kernels = kernels_for(&ctx)?;
        let block = launch_shape::p2p_block_from_env(kernels.block)?;
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

        let report = MemoryReport::gpu(
            "the CUDA communicator",
            vec![
                MemoryLine::device("receive slots (2 epochs)", recv_bytes),
                MemoryLine::device("control words (epoch, abort)", CTL_BYTES),
                MemoryLine::pinned_host("status (pinned, mapped)", STATUS_BYTES),
            ],
            GpuAllocations {
                device: cfg.device,
                allocations: vec![ByteSize::from_usize(alloc_bytes)],
                granularity: ByteSize::from_usize(granularity),
                kernel_image: ByteSize::from_usize(kernels.cubin_bytes),
            },
        );

        // Published only after the fill completed, so no peer can write into
        // this buffer before it holds the sentinel.
        let identity = DeviceIdentity::of_device(cfg.device)?;
        let mut mine = Vec::with_capacity(RECORD_PROCS);
        mine.extend_from_slice(&identity.to_bytes());
        mine.extend_from_slice(&(cfg.device as u32).to_le_bytes());
        mine.extend_from_slice(&recv.ptr().to_le_bytes());
        let threads = matches!(rendezvous, Rendezvous::Threads(_));
        if !threads {
            mine.extend_from_slice(&recv.ipc_handle()?);
        }
        let all = rendezvous.exchange("cuda-buffers", cfg.rank, cfg.world, &mine, cfg.timeout)?;
        let expect = if threads {
            RECORD_THREADS
        } else {
            RECORD_PROCS
        };
        let mut ids = Vec::with_capacity(cfg.world);
        for (p, blob) in all.iter().enumerate() {
            match DeviceIdentity::from_bytes(blob) {
                Some(id) if blob.len() == expect => ids.push(id),
                _ => return Err(Error::invalid("rendezvous", format!("rank {p} posted {} bytes, expected {expect}: do all ranks run the same tpcomm with the same kind of rendezvous?", blob.len()))),
            }
        }
        let sharing = Sharing::of(&ids, cfg.rank);
        let grid = grid_cap(sms as usize, kernels.blocks_per_sm as usize, sharing)? as u32;
        if let Some(w) = time_slice_warning(sharing, raw::mps_enabled(dev)?, cfg.device) {
            eprintln!("{w}");
        }
        warn_queues_once(sharing, cfg.device);
        note_sharing(sharing, cfg.device);

        let mut bufs = [0u64; MAX_WORLD];
        let mut peer_ctxs = Vec::new();
        let mut ipc = Vec::new();
        for (p, blob) in all.iter().enumerate() {
            let at = DeviceIdentity::BYTES;
            let peer_dev =
                u32::from_le_bytes(blob[at..at + 4].try_into().unwrap_or_default()) as i32;
            let ptr = u64::from_le_bytes(blob[at + 4..at + 12].try_into().unwrap_or_default());
            if p == cfg.rank {
                bufs[p] = recv.ptr();
                continue;
            }
            if peer_dev != dev && !raw::can_access_peer(dev, peer_dev)? {
                return Err(Error::Unsupported(format!(
                    "GPU {dev} cannot access GPU {peer_dev} peer-to-peer; the CUDA transport needs P2P (run `nvidia-smi topo -p2p r`); use the host or NCCL transport instead"
                )));
            }
            // Ranks in this process (threads, or the drop-in's standalone
            // communicators on threads) map nothing: a CUDA IPC handle
            // cannot be opened in the process that made it, and the pointer
            // is valid here as it is.
            if threads || ids[p].same_process(&ids[cfg.rank]) {
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
                h.copy_from_slice(&blob[RECORD_THREADS..RECORD_PROCS]);
                let m = IpcMapping::open(ctx.cu_ctx(), &h)?;
                bufs[p] = m.ptr();
                ipc.push(m);
            }
        }
        // A second meeting so that no rank returns (and launches) before every
        // rank has mapped every peer: a failure anywhere then fails all ranks here.
        // It also checks that every rank sends and checks call words alike.
        let check_calls = call_word::resolve(cfg.check_calls, &ids);
        call_word::meet(rendezvous, "cuda-mapped", cfg, check_calls)?;

        let found = match &cfg.selector {
            Some(s) => Some(s.clone()),
            None if cfg.self_tune => None,
            None => Some(Arc::new(crate::select::for_this_machine(
                crate::select::Transport::Cuda,
            )?)),
        };
        let selector = found.clone().unwrap_or_else(|| {
            Arc::new(crate::select::Selector::for_class(
                crate::topology::MachineClass::Nvlink,
            ))
        });
        let group = crate::select::Group {
            world: cfg.world,
            transport: crate::select::Transport::Cuda,
            nccl: false,
            max_bytes: cfg.max_bytes,
        };
        let routes = crate::select::RouteTable::resolve(&selector, group)?;
        let mut comm = Self {
            ctx,
            rank: cfg.rank,
            world: cfg.world,
            max_bytes: cfg.max_bytes,
            timeout: cfg.timeout,
            check_calls,
            selector,
            routes,
            mode: cfg.mode,
            layout,
            kernels,
            block,
            grid,
            sms,
            sharing,
            recv,
            status,
            bufs,
            report,
            _peer_ctxs: peer_ctxs,
            _ipc: ipc,
        };
        if found.is_none() {
            let s = self_tune::run(&comm, rendezvous, cfg.timeout)?;
            comm.selector = Arc::new(s);
        }
        let transport = crate::select::Transport::Cuda;
        comm.routes = cfg.agreed_routes(&comm.selector, transport, false, rendezvous)?;
        Ok(comm)
    }

    /// What the routes were decided with (always `Some`: the given, the
    /// self-tuned or this machine's selector).
    pub fn selector(&self) -> Option<&crate::select::Selector> {
        Some(&self.selector)
    }

    /// The selector, shared (`cuda::Communicator` decides its NCCL routes with it).
    pub(crate) fn selector_arc(&self) -> &Arc<crate::select::Selector> {
        &self.selector
    }

    /// What `Algo::Auto` runs at each size (without NCCL).
    pub fn routes(&self) -> &crate::select::RouteTable {
        &self.routes
    }

    /// The launch mode the routes are looked up for (`CudaConfig::mode`).
    pub fn mode(&self) -> crate::select::Mode {
        self.mode
    }

    transport_accessors!();
}

impl GpuTransport for P2pTransport {
    type Ran = Algo;

    unsafe fn all_reduce(&self, call: &Call) -> Result<Algo> {
        let bytes = self.all_reduce_bytes("the CUDA kernels", call)?;
        let dtype = call.dtype;
        let algo = self
            .routes
            .lookup(
                bytes as u64,
                dtype,
                ReduceOp::Sum,
                call.algo,
                self.mode,
                crate::wire::Wire::Exact,
            )
            .algo()
            .unwrap_or(Algo::OneShot);
        if call.count == 0 {
            return Ok(algo);
        }
        let mut shape =
            launch_shape::p2p_all_reduce(bytes, algo == Algo::TwoShot, self.grid, self.block);
        if self.check_calls {
            shape = launch_shape::with_idle_checker(shape, bytes, self.grid, self.block);
        }
        let d = dtype_index(dtype);
        let one_vector_per_thread = bytes.div_ceil(16) as u64 <= shape.threads();
        let f = match algo {
            Algo::TwoShot => self.kernels.fns[kernels::TWOSHOT][d],
            _ if one_vector_per_thread => self.kernels.fns[kernels::ONESHOT_SMALL][d],
            _ => self.kernels.fns[kernels::ONESHOT][d],
        };
        let kind = match algo {
            Algo::TwoShot => call_word::Kind::TwoShot,
            _ => call_word::Kind::OneShot,
        };
        let args = KernelArgs {
            input: call.input,
            output: call.output,
            nbytes: bytes as u64,
            bufs: self.bufs,
            epoch_stride: self.layout.epoch_stride as u64,
            slot_stride: self.layout.slot_stride as u64,
            shard_stride: self.layout.shard_stride as u64,
            ag_offset: self.layout.ag_offset as u64,
            ctl: self.recv.ptr() + self.layout.receive_bytes() as u64,
            status: self.status.device_ptr(),
            timeout_ns: self.timeout.as_nanos().min(u64::MAX as u128) as u64,
            call: call.word(self.check_calls, kind, bytes as u64, 0)?,
            rank: self.rank as u32,
            world: self.world as u32,
        };
        // SAFETY: KernelArgs mirrors `struct Args`; the receive buffers and
        // status live as long as `self` (callers keep the communicator until
        // their streams finish); input/output validity is the caller's
        // contract above; every kernel of allreduce.cu starts with
        // wait_for_previous_kernel, as an overlapped launch requires.
        unsafe { call.launch_kernel(&self.ctx, f, shape, &args, self.kernels.arch.0)? };
        Ok(algo)
    }

    unsafe fn run_collective(&self, what: Collective, call: &Call) -> Result<()> {
        // SAFETY: the trait's contract (collectives.rs).
        unsafe { self.collective(what, call) }
    }
}

/// The self-tune times this transport's own calls (`self_tune::run`).
impl Timed for P2pTransport {
    fn rank(&self) -> usize {
        P2pTransport::rank(self)
    }
    fn world(&self) -> usize {
        P2pTransport::world(self)
    }
    fn max_bytes(&self) -> ByteSize {
        P2pTransport::max_bytes(self)
    }
    fn context(&self) -> &Arc<CudaContext> {
        P2pTransport::context(self)
    }
    fn check(&self) -> Result<()> {
        P2pTransport::check(self)
    }
}

impl P2pTransport {
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
            sharing: self.sharing,
            check_calls: self.check_calls,
            rank: self.rank,
            world: self.world,
        }
    }

    /// After a timeout: where the wait was and what the slot holds, for a
    /// diagnosis (`None` when no wait timed out). Names the slot's epoch
    /// buffer and place (one-shot slot of a sender, two-shot reduce-scatter
    /// or all-gather slot; the receive area is laid out the same for every
    /// rank, so both readings are given), the vector, the value last read
    /// and the value there now, this rank's arrival counter when the wait
    /// gave up and now, and the block and thread that waited. Synchronize
    /// the stream first.
    pub fn timeout_detail(&self) -> Option<String> {
        match self.status.read_u32(0) {
            0 => return None,
            // Not a wait for data: check()'s message says it all.
            call_word::CALL_MISMATCH | call_word::WAIT_CALL => {
                return self.check().err().map(|e| e.to_string())
            }
            _ => {}
        }
        let slot = self.status.read_u64(16);
        let arrivals_then = self.status.read_u64(24);
        let last: Vec<u32> = (0..4).map(|k| self.status.read_u32(32 + 4 * k)).collect();
        let (block, thread) = (self.status.read_u32(48), self.status.read_u32(52));
        let l = &self.layout;
        let base = self.recv.ptr();
        let recv = l.receive_bytes() as u64;
        let mut out = format!(
            "rank {}: waited in block {block} thread {thread}; arrivals {arrivals_then:#x} (epoch {}) when it gave up",
            self.rank,
            arrivals_then >> 20
        );
        // The control words (kernels/allreduce.cu, struct Ctl): arrivals at
        // 0, the diagnosis from 16 on.
        if let Ok(c) = self.recv.read_at(l.receive_bytes(), 96) {
            let u = |at: usize| u64::from_le_bytes(c[at..at + 8].try_into().unwrap_or_default());
            let w = |at: usize| u32::from_le_bytes(c[at..at + 4].try_into().unwrap_or_default());
            let now = u(0);
            out += &format!(", {now:#x} (epoch {}) now", now >> 20);
            let gave_up = u(40);
            // %globaltimer ns, shown relative to the give-up (one clock for
            // every rank of a machine, so ranks' lines compare).
            let rel = |t: u64| -> String {
                if t == 0 {
                    "never".into()
                } else {
                    format!("{:+.1} us", (t as i128 - gave_up as i128) as f64 / 1e3)
                }
            };
            out += &format!(
                "; gave up at globaltimer {gave_up} ns; own latest call: epoch {} started {}, a block 0 last ended {}",
                u(24),
                rel(u(16)),
                rel(u(32))
            );
            out += &format!(
                "; the slot read atomically then: [{:08x}, {:08x}, {:08x}, {:08x}]",
                w(48),
                w(52),
                w(56),
                w(60)
            );
            let pa = u(64);
            out += &format!(
                "; the peer's words then: arrivals {pa:#x} (epoch {}), latest call epoch {} started {}, a block 0 last ended {}",
                pa >> 20,
                u(72),
                rel(u(80)),
                rel(u(88))
            );
        }
        out += &format!("; last read {last:08x?}");
        if slot < base || slot >= base + recv {
            out += &format!("; slot {slot:#x} is outside this rank's receive area");
            return Some(out);
        }
        let off = slot - base;
        let (parity, within) = (off / l.epoch_stride as u64, off % l.epoch_stride as u64);
        let one = (
            within / l.slot_stride as u64,
            within % l.slot_stride as u64 / 16,
        );
        let two = if within < l.ag_offset as u64 {
            format!(
                "reduce-scatter slot of sender {} vector {}",
                within / l.shard_stride as u64,
                within % l.shard_stride as u64 / 16
            )
        } else {
            let w = within - l.ag_offset as u64;
            format!(
                "all-gather slot of shard {} vector {}",
                w / l.shard_stride as u64,
                w % l.shard_stride as u64 / 16
            )
        };
        out += &format!(
            "; slot at offset {off:#x}: epoch buffer {parity}, as one-shot: sender {} vector {}, as two-shot: {two}",
            one.0, one.1
        );
        if let Ok(v) = self.recv.read_at(off as usize, 16) {
            out += &format!("; holds now {v:02x?}");
        }
        Some(out)
    }

    /// Reports a peer that did not arrive in an earlier call (read from the
    /// status the kernels write). Synchronize the stream first to see the
    /// outcome of the latest call.
    pub fn check(&self) -> Result<()> {
        call_word::status_check(&self.status, self.rank, self.timeout, |code| match code {
            WAIT_ONESHOT => "one-shot data",
            WAIT_REDUCE_SCATTER => "two-shot reduce-scatter data",
            WAIT_ALL_GATHER => "two-shot all-gather data",
            WAIT_FUSED => "fused all-reduce + residual + RMSNorm data",
            c => crate::cuda::wait::wait_what(c).unwrap_or("data"),
        })
    }
}

#[cfg(test)]
mod wait_code_tests {
    use super::*;

    /// The codes `check()` names must be the ones the kernels write.
    #[test]
    fn wait_codes_match_the_kernel_sources() {
        let all = concat!(
            include_str!("../../kernels/allreduce.cu"),
            include_str!("../../kernels/fused.cu")
        );
        for (name, code) in [
            ("TPCOMM_WAIT_ONESHOT", WAIT_ONESHOT),
            ("TPCOMM_WAIT_REDUCE_SCATTER", WAIT_REDUCE_SCATTER),
            ("TPCOMM_WAIT_ALL_GATHER", WAIT_ALL_GATHER),
            ("TPCOMM_WAIT_FUSED", WAIT_FUSED),
        ] {
            let line = format!("#define {name} {code}u");
            assert!(all.contains(&line), "kernels lack {line:?}");
        }
    }
}
