//! The quantized all-reduce (int8 / fp8 codes with a scale per group on the
//! wire) on both GPU transports: kernels/quant.cu, its buffers, its launch.
//! docs/quantized.md describes the protocol and the error; the arithmetic is
//! modelled bit for bit by `crate::quant::model`.
//!
//! Its buffers are its own, allocated at creation beside the exact kernels'
//! (only when a quantized wire is enabled), with their own epoch counter, so
//! exact and quantized calls may follow each other in any order:
//! - P2P: a device receive area per rank with one slot per sender and two
//!   parities; each rank writes its slot in every peer's area;
//! - host: a pinned host area per rank with its own slot in two parities,
//!   which every peer reads; device memory holds only the control words.

use super::call;
use super::comm::CudaConfig;
use super::cuda_err;
use super::host_path::Transport;
use super::loader::{
    common_block, compile_and_load, dtype_index, per_device, resident_blocks_per_sm, PerDevice,
};
use super::pdl::{self, Launch};
use super::rendezvous::Rendezvous;
use super::share::{grid_cap, DeviceIdentity, Sharing};
use super::{compile, MAX_WORLD};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::memory::{GpuAllocations, MemoryLine, MemoryReport};
use crate::quant::model::CHUNK_ELEMS;
use crate::quant::{Format, Wire, MIN_GROUP};
use crate::sys::cuda::pinned::Registered;
use crate::sys::cuda::{
    self as raw, CUdeviceptr, CUstream, DeviceAlloc, Function, HostMapped, IpcMapping,
};
use crate::sys::shm::SharedFile;
use crate::units::ByteSize;
use cudarc::driver::CudaContext;
use std::sync::Arc;
use std::time::Duration;

/// Q_WAIT_QUANT in kernels/quant.cu.
const WAIT_QUANT: u32 = 8;
const CTL_BYTES: usize = 256;
const STATUS_BYTES: usize = 64;
/// Q_BLOCK in kernels/quant.cu (the launch bound).
const MAX_BLOCK: u32 = 512;

/// Where a slot's parts sit, identical on every rank. Sized for the most
/// elements a message of `max_bytes` can hold (2-byte elements) and the
/// smallest group (the most scales).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct QuantLayout {
    /// Elements a slot holds: max_bytes / 2, rounded up to whole chunks.
    pub max_elems: usize,
    /// Codes start at byte 0 of a slot; scales (f32 per group) here.
    pub scales_off: usize,
    /// Flags (u32 per chunk).
    pub flags_off: usize,
    /// The sender's call word (kernels/common.cuh, "call words").
    pub call_off: usize,
    /// Bytes of one slot (whole 256-byte lines).
    pub slot_stride: usize,
    /// Bytes between the two parities: every sender's slot (P2P) or the own
    /// one (host).
    pub parity_stride: usize,
}

fn round_up(x: usize, a: usize) -> usize {
    x.div_ceil(a) * a
}

impl QuantLayout {
    pub fn new(max_bytes: usize, world: usize, transport: Transport) -> Self {
        let max_elems = round_up(max_bytes.div_ceil(2).max(1), CHUNK_ELEMS);
        let scales_off = round_up(max_elems, 256);
        let flags_off = round_up(scales_off + 4 * (max_elems / MIN_GROUP as usize), 256);
        let call_off = round_up(flags_off + 4 * (max_elems / CHUNK_ELEMS), 8);
        let slot_stride = round_up(call_off + 8, 256);
        let senders = if transport == Transport::Host {
            1
        } else {
            world
        };
        Self {
            max_elems,
            scales_off,
            flags_off,
            call_off,
            slot_stride,
            parity_stride: senders * slot_stride,
        }
    }
    /// Bytes of a rank's area (both parities).
    pub fn area_bytes(&self) -> usize {
        2 * self.parity_stride
    }
}

/// (blocks, threads per block) of a quantized call of `count` elements: a
/// power-of-two block (the kernel's chunk loop needs it) of at most
/// `max_block`, and at most one block per chunk and at most `cap` blocks:
/// `share::grid_cap` of the quantized kernels' occupancy and the ranks on
/// this GPU, so every block of every rank on the GPU is resident at once
/// (blocks wait on peers' flags).
pub fn quant_grid(count: usize, cap: u32, max_block: u32) -> (u32, u32) {
    let mut block = 32u32;
    while block * 2 <= max_block.min(MAX_BLOCK) {
        block *= 2;
    }
    let chunks = count.div_ceil(CHUNK_ELEMS).max(1);
    (chunks.min(cap.max(1) as usize) as u32, block)
}

/// The wire a communicator created with `cfg` uses and the smallest message
/// it quantizes: the config's, else the environment's (TPCOMM_WIRE,
/// TPCOMM_WIRE_MIN_BYTES; `crate::quant::wire_from_env`).
pub fn resolve_wire(cfg: &CudaConfig) -> Result<(Wire, ByteSize)> {
    let env = match (cfg.wire, cfg.wire_min_bytes) {
        (Some(w), Some(m)) => return Ok((w.checked()?, m)),
        _ => crate::quant::wire_from_env()?,
    };
    Ok((
        cfg.wire.unwrap_or(env.wire).checked()?,
        cfg.wire_min_bytes.unwrap_or(env.min_bytes),
    ))
}

/// The bytes a rank posts for [`agree_wire`].
fn wire_record(wire: Wire, min_bytes: ByteSize) -> Vec<u8> {
    let (kind, group) = match wire {
        Wire::Exact => (0u8, 0u32),
        Wire::Int8 { group } => (1, group),
        Wire::Fp8 { group } => (2, group),
    };
    let mut v = vec![kind];
    v.extend_from_slice(&group.to_le_bytes());
    v.extend_from_slice(&min_bytes.bytes().to_le_bytes());
    v
}

/// Checks that every rank of the group resolved the same wire and minimum
/// size (from its config or its environment): otherwise ranks would run
/// different kernels and wait for each other until the timeout. A mismatch
/// is an error on every rank, naming the first rank that differs.
pub fn agree_wire(
    cfg: &CudaConfig,
    rendezvous: &Rendezvous,
    wire: Wire,
    min_bytes: ByteSize,
) -> Result<()> {
    let mine = wire_record(wire, min_bytes);
    let all = rendezvous.exchange("quant-wire", cfg.rank, cfg.world, &mine, cfg.timeout)?;
    match all.iter().position(|r| r != &all[0]) {
        None => Ok(()),
        Some(r) => Err(Error::invalid(
            "quantized wire",
            format!(
                "rank 0 and rank {r} differ in the wire or its minimum size (CudaConfig::wire, TPCOMM_WIRE, TPCOMM_WIRE_MIN_BYTES; this rank: {} from {min_bytes}): give every rank the same",
                wire.label()
            ),
        )),
    }
}

/// The wire a sum of `bytes` travels on, given the communicator's `wire` and
/// `min_bytes`: quantized only when enabled and the message is at least
/// `min_bytes` (below, the call is latency-bound and stays exact).
pub fn wire_for(wire: Wire, min_bytes: ByteSize, bytes: u64) -> Wire {
    if wire != Wire::Exact && bytes >= min_bytes.bytes() && bytes > 0 {
        wire
    } else {
        Wire::Exact
    }
}

/// The by-value kernel argument: mirrors `struct QArgs` in quant.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct QuantArgs {
    input: u64,
    output: u64,
    count: u64,
    dst: [u64; MAX_WORLD],
    src: [u64; MAX_WORLD],
    parity_stride: u64,
    scales_off: u64,
    flags_off: u64,
    ctl: u64,
    status: u64,
    timeout_ns: u64,
    call_off: u64,
    call: u64,
    rank: u32,
    world: u32,
    ndst: u32,
    group: u32,
}

/// Which quantized kernel a call runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuantAlgo {
    /// Every rank sends all its codes to every peer.
    OneShot,
    /// Quantized reduce-scatter, f32 sum of the own shard, requantized
    /// all-gather (a second rounding, less traffic above 2 ranks). Messages
    /// of fewer 4096-element chunks than ranks run one-shot.
    TwoShot,
    /// One-shot at 2 ranks (the same traffic, one rounding less), two-shot
    /// above.
    Auto,
}

impl QuantAlgo {
    /// Whether a call of `count` elements at `world` ranks runs two-shot.
    pub fn runs_twoshot(self, count: usize, world: usize) -> bool {
        let asked = match self {
            QuantAlgo::OneShot => false,
            QuantAlgo::TwoShot => true,
            QuantAlgo::Auto => world > 2,
        };
        asked && crate::quant::model::twoshot_fits(count, world)
    }
}

/// The compiled quantized kernels of one device: [format][dtype].
struct QuantKernels {
    oneshot: [[Function; 3]; 2],
    twoshot: [[Function; 3]; 2],
    block: u32,
    /// Blocks of `block` threads one SM holds of the kernel that fits fewest.
    blocks_per_sm: u32,
    arch: (i32, i32),
    cubin_bytes: usize,
    _module: raw::Module,
    _ctx: Arc<CudaContext>,
}

/// The power-of-two block the kernels launch with (at most `max`).
fn pow2_block(max: u32) -> u32 {
    quant_grid(1, 1, max).1
}

fn kernels_for(ctx: &Arc<CudaContext>) -> Result<Arc<QuantKernels>> {
    static CACHE: PerDevice<QuantKernels> = PerDevice::new();
    per_device(&CACHE, ctx, || {
        let l = compile_and_load(ctx, compile::QUANT_SRC, "quant.cu", "the quantized kernels")?;
        let int8 = super::loader::per_type(&l.module, "tpcomm_quant_oneshot_int8")?;
        let fp8 = super::loader::per_type(&l.module, "tpcomm_quant_oneshot_fp8")?;
        let int8_2 = super::loader::per_type(&l.module, "tpcomm_quant_twoshot_int8")?;
        let fp8_2 = super::loader::per_type(&l.module, "tpcomm_quant_twoshot_fp8")?;
        let block = common_block(
            int8.iter().chain(&fp8).chain(&int8_2).chain(&fp8_2),
            MAX_BLOCK,
            "the quantized kernels",
            l.arch,
        )?;
        let blocks_per_sm = resident_blocks_per_sm(
            int8.iter().chain(&fp8).chain(&int8_2).chain(&fp8_2),
            pow2_block(block),
        )?;
        Ok(QuantKernels {
            blocks_per_sm,
            oneshot: [int8, fp8],
            twoshot: [int8_2, fp8_2],
            block,
            arch: l.arch,
            cubin_bytes: l.cubin_bytes,
            _module: l.module,
            _ctx: ctx.clone(),
        })
    })
}

/// This rank's own area: device memory (P2P, the control words after it) or
/// pinned host memory (host path; cuMemHostAlloc for threads, a registered
/// memfd for processes). Held only so that it is freed on drop.
#[allow(dead_code)]
enum OwnArea {
    Device,
    HostThreads(HostMapped),
    // Field order: the registration drops before the mapping.
    HostProcess(Registered, SharedFile),
}

/// A peer's area mapped here, kept alive for the addresses in the arguments
/// (held only so that it is unmapped on drop).
#[allow(dead_code)]
enum PeerMap {
    Ctx(Arc<CudaContext>),
    Ipc(IpcMapping),
    Host(Registered, SharedFile),
}

/// One rank of a quantized all-reduce group (see the module docs). Drop it
/// only when no rank has a call of it queued or running.
pub struct QuantComm {
    ctx: Arc<CudaContext>,
    rank: usize,
    world: usize,
    max_bytes: usize,
    timeout: Duration,
    check_calls: bool,
    transport: Transport,
    layout: QuantLayout,
    kernels: Arc<QuantKernels>,
    /// The most blocks a call launches (share::grid_cap).
    grid_cap: u32,
    sharing: Sharing,
    /// P2P: the receive area with the control words after it; host: the
    /// control words alone.
    _dev: DeviceAlloc,
    ctl: u64,
    status: HostMapped,
    dst: [u64; MAX_WORLD],
    ndst: u32,
    src: [u64; MAX_WORLD],
    report: MemoryReport,
    // Dropped after `dev`'s users are gone: the peers' mappings, then the own area.
    _peers: Vec<PeerMap>,
    _own: OwnArea,
}

impl std::fmt::Debug for QuantComm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuantComm")
            .field("rank", &self.rank)
            .field("world", &self.world)
            .field("transport", &self.transport)
            .field("layout", &self.layout)
            .finish()
    }
}

impl QuantComm {
    /// Creates this rank's quantized all-reduce over `transport` (`Cuda` or
    /// `Host`, as the group's exact communicator resolved it): compiles the
    /// kernels, allocates and maps every buffer. Every rank calls it with the
    /// same configuration and transport.
    pub fn new(cfg: &CudaConfig, transport: Transport, rendezvous: &Rendezvous) -> Result<Self> {
        let max_bytes = cfg.checked("the quantized all-reduce")?;
        if matches!(transport, Transport::Auto | Transport::Nccl) {
            return Err(Error::invalid(
                "transport",
                format!(
                    "the quantized all-reduce takes the resolved transport (cuda or host), not {transport}"
                ),
            ));
        }
        let ctx = super::comm::open_context(cfg.device)?;
        let kernels = kernels_for(&ctx)?;
        let dev_ord = cfg.device as i32;
        let sms = raw::sm_count(dev_ord)? as u32;
        let layout = QuantLayout::new(max_bytes, cfg.world, transport);
        let host = transport == Transport::Host;
        let area_bytes = layout.area_bytes();
        let dev_bytes = if host {
            CTL_BYTES
        } else {
            area_bytes + CTL_BYTES
        };
        let granularity = raw::allocation_granularity(dev_ord)?;
        let (free, _) = raw::mem_get_info()?;
        if round_up(dev_bytes, granularity) > free {
            return Err(Error::OutOfMemory {
                what: "the quantized all-reduce's buffers".into(),
                needed: ByteSize::from_usize(dev_bytes),
                available: ByteSize::from_usize(free),
            });
        }
        let dev = DeviceAlloc::new(ctx.cu_ctx(), dev_bytes)?;
        // Flags start at 0, which no call's tag is; control words at 0.
        dev.fill(0, dev_bytes, 0)?;
        let ctl = dev.ptr() + (dev_bytes - CTL_BYTES) as u64;
        let status = HostMapped::new(ctx.cu_ctx(), STATUS_BYTES)?;
        let threads = matches!(rendezvous, Rendezvous::Threads(_));

        // The own area and what peers need to map it.
        let (own, own_ptr, extra): (OwnArea, u64, Vec<u8>) = if !host {
            let h = if threads {
                Vec::new()
            } else {
                dev.ipc_handle()?.to_vec()
            };
            (OwnArea::Device, dev.ptr(), h)
        } else if threads {
            // Portable pinned memory (zero-filled) has one address in every
            // context of the process.
            let m = HostMapped::new(ctx.cu_ctx(), area_bytes)?;
            let p = m.device_ptr();
            (OwnArea::HostThreads(m), p, Vec::new())
        } else {
            let len = round_up(area_bytes, 1 << 16);
            let (file, path) = SharedFile::create(len)?;
            raw::set_current(ctx.cu_ctx())?;
            // SAFETY: the whole mapping of `file`, kept beside the
            // registration (which drops first: the variant's first field).
            let reg = unsafe { Registered::new(file.base(), len) }?;
            let p = reg.device_ptr();
            (OwnArea::HostProcess(reg, file), p, path.into_bytes())
        };

        let identity = DeviceIdentity::of_device(cfg.device)?;
        const HEAD: usize = DeviceIdentity::BYTES + 12;
        let mut mine = Vec::with_capacity(HEAD + extra.len());
        mine.extend_from_slice(&identity.to_bytes());
        mine.extend_from_slice(&(cfg.device as u32).to_le_bytes());
        mine.extend_from_slice(&own_ptr.to_le_bytes());
        mine.extend_from_slice(&extra);
        let all = rendezvous.exchange("quant-buffers", cfg.rank, cfg.world, &mine, cfg.timeout)?;

        let mut areas = [0u64; MAX_WORLD];
        let mut peers = Vec::new();
        let mut ids = Vec::with_capacity(cfg.world);
        for (p, blob) in all.iter().enumerate() {
            let id = (blob.len() >= HEAD)
                .then(|| DeviceIdentity::from_bytes(blob))
                .flatten();
            ids.push(id.ok_or_else(|| {
                Error::invalid(
                    "rendezvous",
                    format!(
                        "rank {p} posted {} bytes for the quantized buffers, expected at least {HEAD}",
                        blob.len()
                    ),
                )
            })?);
        }
        let sharing = Sharing::of(&ids, cfg.rank);
        let check_calls = call::resolve(cfg.check_calls, &ids);
        let cap = grid_cap(sms as usize, kernels.blocks_per_sm as usize, sharing)? as u32;
        for (p, blob) in all.iter().enumerate() {
            let at = DeviceIdentity::BYTES;
            let peer_dev =
                u32::from_le_bytes([blob[at], blob[at + 1], blob[at + 2], blob[at + 3]]) as i32;
            let mut ptr_bytes = [0u8; 8];
            ptr_bytes.copy_from_slice(&blob[at + 4..at + 12]);
            let ptr = u64::from_le_bytes(ptr_bytes);
            let rest = &blob[HEAD..];
            if p == cfg.rank {
                areas[p] = own_ptr;
                continue;
            }
            // A rank of this process (threads, or standalone communicators on
            // threads) is mapped as a thread is: an IPC handle cannot be
            // opened in the process that made it.
            let here = threads || ids[p].same_process(&ids[cfg.rank]);
            areas[p] = match (host, here) {
                (false, true) => {
                    if peer_dev != dev_ord {
                        if !raw::can_access_peer(dev_ord, peer_dev)? {
                            return Err(Error::Unsupported(format!(
                                "GPU {dev_ord} cannot access GPU {peer_dev} peer-to-peer; the quantized P2P all-reduce needs it (use the host transport)"
                            )));
                        }
                        let pctx = CudaContext::new(peer_dev as usize)
                            .map_err(cuda_err("cuDevicePrimaryCtxRetain"))?;
                        raw::set_current(ctx.cu_ctx())?;
                        raw::enable_peer_access(pctx.cu_ctx())?;
                        peers.push(PeerMap::Ctx(pctx));
                    }
                    ptr
                }
                (false, false) => {
                    let h: [u8; 64] = rest.try_into().map_err(|_| {
                        Error::invalid(
                            "rendezvous",
                            format!("rank {p} posted no CUDA IPC handle for the quantized buffers"),
                        )
                    })?;
                    let m = IpcMapping::open(ctx.cu_ctx(), &h)?;
                    let ptr = m.ptr();
                    peers.push(PeerMap::Ipc(m));
                    ptr
                }
                (true, true) => ptr,
                (true, false) => {
                    let path = std::str::from_utf8(rest).map_err(|_| {
                        Error::invalid(
                            "rendezvous",
                            format!("rank {p} posted a bad path for its quantized host area"),
                        )
                    })?;
                    let file = SharedFile::open(path)?;
                    raw::set_current(ctx.cu_ctx())?;
                    // SAFETY: as for this rank's own file above.
                    let reg = unsafe { Registered::new(file.base(), file.len()) }?;
                    let ptr = reg.device_ptr();
                    peers.push(PeerMap::Host(reg, file));
                    ptr
                }
            };
        }
        // No rank launches before every rank has mapped every peer; every
        // rank sends and checks call words alike.
        call::meet(rendezvous, "quant-mapped", cfg, check_calls)?;

        let (mut dst, mut src) = ([0u64; MAX_WORLD], [0u64; MAX_WORLD]);
        let ndst;
        if host {
            dst[0] = own_ptr;
            ndst = 1;
            src[..cfg.world].copy_from_slice(&areas[..cfg.world]);
        } else {
            // dst[q]: this rank's slot in rank q's area; none for itself
            // (the kernels compute its own codes again rather than reading
            // them back, so slot `rank` of each area stays unused).
            for p in 0..cfg.world {
                src[p] = own_ptr + (p * layout.slot_stride) as u64;
                if p != cfg.rank {
                    dst[p] = areas[p] + (cfg.rank * layout.slot_stride) as u64;
                }
            }
            ndst = cfg.world as u32;
        }

        let slots = if host { 1 } else { cfg.world };
        let detail = format!(
            "2 parities x {slots} slot(s) x {} (codes {}, f32 scales for groups of {MIN_GROUP}, u32 flags per {CHUNK_ELEMS}-element chunk)",
            ByteSize::from_usize(layout.slot_stride),
            ByteSize::from_usize(layout.max_elems)
        );
        let mut lines = Vec::new();
        if host {
            lines.push(
                MemoryLine::pinned_host(
                    "quantized wire: own area (codes, scales, flags)",
                    area_bytes,
                )
                .with_detail(detail),
            );
        } else {
            lines.push(
                MemoryLine::device(
                    "quantized wire: receive slots (codes, scales, flags)",
                    area_bytes,
                )
                .with_detail(detail),
            );
        }
        lines.push(MemoryLine::device(
            "quantized wire: control words (epoch, abort)",
            CTL_BYTES,
        ));
        lines.push(MemoryLine::pinned_host(
            "quantized wire: status (pinned, mapped)",
            STATUS_BYTES,
        ));
        let report = MemoryReport::gpu(
            "the quantized all-reduce",
            lines,
            GpuAllocations {
                device: cfg.device,
                allocations: vec![ByteSize::from_usize(dev_bytes)],
                granularity: ByteSize::from_usize(granularity),
                kernel_image: ByteSize::from_usize(kernels.cubin_bytes),
            },
        );

        Ok(Self {
            ctx,
            rank: cfg.rank,
            world: cfg.world,
            max_bytes,
            timeout: cfg.timeout,
            check_calls,
            transport,
            layout,
            kernels,
            grid_cap: cap,
            sharing,
            _dev: dev,
            ctl,
            status,
            dst,
            ndst,
            src,
            report,
            _peers: peers,
            _own: own,
        })
    }

    pub fn transport(&self) -> Transport {
        self.transport
    }
    pub fn rank(&self) -> usize {
        self.rank
    }
    pub fn world(&self) -> usize {
        self.world
    }
    /// Every byte the quantized wire took, per buffer.
    pub fn memory_report(&self) -> &MemoryReport {
        &self.report
    }
    /// How the group's ranks sit on this rank's GPU.
    pub fn sharing(&self) -> Sharing {
        self.sharing
    }

    /// Launches the quantized all-reduce (sum) of `count` elements of
    /// `dtype` from `input` into `output` (may be equal) on `stream`.
    ///
    /// # Safety
    /// `input` and `output` are device allocations of at least `count`
    /// elements of `dtype`, 16-byte aligned, valid until the kernel has
    /// finished; every rank makes the same calls in the same order.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn all_reduce(
        &self,
        input: CUdeviceptr,
        output: CUdeviceptr,
        count: usize,
        dtype: DType,
        wire: Wire,
        stream: CUstream,
        how: Launch,
    ) -> Result<()> {
        // SAFETY: the caller's contract is passed on unchanged.
        unsafe {
            self.all_reduce_with(
                input,
                output,
                count,
                dtype,
                wire,
                QuantAlgo::Auto,
                stream,
                how,
            )
        }
    }

    /// [`all_reduce`](Self::all_reduce) with the kernel chosen by `algo`.
    ///
    /// # Safety
    /// As [`all_reduce`](Self::all_reduce).
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn all_reduce_with(
        &self,
        input: CUdeviceptr,
        output: CUdeviceptr,
        count: usize,
        dtype: DType,
        wire: Wire,
        algo: QuantAlgo,
        stream: CUstream,
        how: Launch,
    ) -> Result<()> {
        self.check()?;
        let Some((format, group)) = wire.checked()?.quantized() else {
            return Err(Error::invalid(
                "wire",
                "the quantized all-reduce takes int8 or fp8, not exact",
            ));
        };
        let bytes = count
            .checked_mul(dtype.size())
            .ok_or_else(|| Error::invalid("count", format!("{count} elements overflow")))?;
        if bytes > self.max_bytes || count > self.layout.max_elems {
            return Err(Error::invalid(
                "message size",
                format!(
                    "{} is above the quantized buffers' maximum {}; create the communicator with a larger max_bytes",
                    ByteSize::from_usize(bytes),
                    ByteSize::from_usize(self.max_bytes)
                ),
            ));
        }
        if !input.is_multiple_of(16) || !output.is_multiple_of(16) {
            return Err(Error::invalid(
                "buffer address",
                "input and output must be 16-byte aligned",
            ));
        }
        if count == 0 {
            return Ok(());
        }
        let (grid, block) = quant_grid(count, self.grid_cap, self.kernels.block);
        let twoshot = algo.runs_twoshot(count, self.world);
        let kernels = if twoshot {
            &self.kernels.twoshot
        } else {
            &self.kernels.oneshot
        };
        // The wire (1 int8, 0 fp8) and the group (32 << g) go into the
        // call's word: peers with another wire or group made another call.
        let aux = u64::from(format == Format::Int8)
            | (u64::from(group.trailing_zeros().saturating_sub(5)) & 3) << 1;
        let call = call::word_if(
            self.check_calls,
            if twoshot {
                call::Kind::QuantTwoShot
            } else {
                call::Kind::QuantOneShot
            },
            dtype,
            bytes as u64,
            aux,
        )?;
        let f = kernels[match format {
            Format::Int8 => 0,
            Format::Fp8E4m3 => 1,
        }][dtype_index(dtype)];
        let args = QuantArgs {
            input,
            output,
            count: count as u64,
            dst: self.dst,
            src: self.src,
            parity_stride: self.layout.parity_stride as u64,
            scales_off: self.layout.scales_off as u64,
            flags_off: self.layout.flags_off as u64,
            ctl: self.ctl,
            status: self.status.device_ptr(),
            timeout_ns: self.timeout.as_nanos().min(u64::MAX as u128) as u64,
            call_off: self.layout.call_off as u64,
            call,
            rank: self.rank as u32,
            world: self.world as u32,
            ndst: self.ndst,
            group,
        };
        raw::set_current(self.ctx.cu_ctx())?;
        // SAFETY: QuantArgs mirrors `struct QArgs`; the areas, control words
        // and status live as long as `self` (callers keep it until their
        // streams finish); input/output are the caller's contract above; the
        // kernel starts with wait_for_previous_kernel.
        unsafe { pdl::launch(f, grid, block, &args, stream, how, self.kernels.arch.0) }
    }

    /// Reports a peer that did not arrive in an earlier call. Synchronize
    /// the stream first to see the latest call's outcome.
    pub fn check(&self) -> Result<()> {
        let code = self.status.read_u32(0);
        if code == 0 {
            return Ok(());
        }
        let (peer, epoch) = (self.status.read_u32(4) as usize, self.status.read_u64(8));
        if code == call::CALL_MISMATCH {
            let (mine, theirs) = (self.status.read_u64(16), self.status.read_u64(24));
            return Err(call::mismatch(self.rank, peer, epoch, mine, theirs));
        }
        Err(Error::PeerTimeout {
            rank: self.rank,
            peer,
            epoch,
            what: match code {
                WAIT_QUANT => "quantized one-shot data".into(),
                call::WAIT_CALL => "the description of its call".into(),
                _ => "data".into(),
            },
            waited: self.timeout,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quant_args_match_the_cuda_struct_size() {
        // 27 u64 words and four u32: the size `struct QArgs` has in quant.cu.
        assert_eq!(std::mem::size_of::<QuantArgs>(), 27 * 8 + 16);
    }

    #[test]
    fn the_wait_code_is_the_kernels() {
        let src = include_str!("kernels/quant.cu");
        assert!(src.contains(&format!("#define Q_WAIT_QUANT {WAIT_QUANT}u")));
        assert!(src.contains(&format!("#define Q_CHUNK {CHUNK_ELEMS}u")));
        assert!(src.contains(&format!("#define Q_BLOCK {MAX_BLOCK}")));
    }

    #[test]
    fn slots_hold_the_largest_message_with_the_smallest_group() {
        for world in 2..=MAX_WORLD {
            for max in [1usize, 16, 1000, 1 << 20, (64 << 20) + 6] {
                for t in [Transport::Cuda, Transport::Host] {
                    let l = QuantLayout::new(max, world, t);
                    assert!(l.max_elems >= max / 2 && l.max_elems.is_multiple_of(CHUNK_ELEMS));
                    assert!(l.scales_off >= l.max_elems);
                    assert!(l.flags_off >= l.scales_off + 4 * l.max_elems / 32);
                    assert!(l.call_off >= l.flags_off + 4 * l.max_elems / CHUNK_ELEMS);
                    assert!(l.slot_stride >= l.call_off + 8 && l.call_off.is_multiple_of(8));
                    assert!(l.slot_stride.is_multiple_of(256));
                    let senders = if t == Transport::Host { 1 } else { world };
                    assert_eq!(l.parity_stride, senders * l.slot_stride);
                }
            }
        }
        // 64 MiB of bf16 over P2P at 2 ranks: 32 Mi codes + 4 MiB scales +
        // 32 KiB flags per slot, then the call word in one more 256-byte
        // line; 4 slots.
        let l = QuantLayout::new(64 << 20, 2, Transport::Cuda);
        assert_eq!(l.slot_stride, (32 << 20) + (4 << 20) + (32 << 10) + 256);
        assert_eq!(l.area_bytes(), 4 * l.slot_stride);
    }

    #[test]
    fn only_enabled_wires_and_large_enough_messages_are_quantized() {
        let min = ByteSize::mib(1);
        assert_eq!(wire_for(Wire::Exact, min, 64 << 20), Wire::Exact);
        assert_eq!(wire_for(Wire::int8(), min, (1 << 20) - 1), Wire::Exact);
        assert_eq!(wire_for(Wire::int8(), min, 1 << 20), Wire::int8());
        assert_eq!(wire_for(Wire::fp8(), ByteSize::b(0), 0), Wire::Exact);
    }

    #[test]
    fn ranks_that_resolved_different_wires_fail_together() {
        let group = super::super::ThreadGroup::new(2);
        let hs: Vec<_> = [Wire::int8(), Wire::fp8()]
            .into_iter()
            .enumerate()
            .map(|(r, w)| {
                let group = group.clone();
                std::thread::spawn(move || {
                    let cfg = CudaConfig::new(r, 2, r);
                    agree_wire(&cfg, &Rendezvous::Threads(group), w, ByteSize::mib(1))
                })
            })
            .collect();
        for h in hs {
            let e = h.join().unwrap().unwrap_err().to_string();
            assert!(e.contains("rank 1") && e.contains("TPCOMM_WIRE"), "{e}");
        }
        let group = super::super::ThreadGroup::new(2);
        let hs: Vec<_> = (0..2)
            .map(|r| {
                let group = group.clone();
                std::thread::spawn(move || {
                    let cfg = CudaConfig::new(r, 2, r);
                    agree_wire(
                        &cfg,
                        &Rendezvous::Threads(group),
                        Wire::Exact,
                        ByteSize::mib(1),
                    )
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap().unwrap();
        }
    }

    #[test]
    fn an_explicit_wire_in_the_config_wins_over_the_environment() {
        let mut cfg = CudaConfig::new(0, 2, 0);
        cfg.wire = Some(Wire::Fp8 { group: 128 });
        cfg.wire_min_bytes = Some(ByteSize::kib(64));
        assert_eq!(
            resolve_wire(&cfg).unwrap(),
            (Wire::Fp8 { group: 128 }, ByteSize::kib(64))
        );
        cfg.wire = Some(Wire::Int8 { group: 48 });
        assert!(resolve_wire(&cfg).is_err());
    }

    #[test]
    fn two_shot_runs_only_when_every_rank_owns_a_chunk() {
        let c = CHUNK_ELEMS;
        assert!(!QuantAlgo::Auto.runs_twoshot(100 * c, 2));
        assert!(QuantAlgo::Auto.runs_twoshot(100 * c, 4));
        assert!(QuantAlgo::TwoShot.runs_twoshot(2 * c, 2));
        assert!(!QuantAlgo::TwoShot.runs_twoshot(2 * c, 3));
        assert!(QuantAlgo::TwoShot.runs_twoshot(2 * c + 1, 3));
        assert!(!QuantAlgo::OneShot.runs_twoshot(100 * c, 8));
    }

    #[test]
    fn grids_stay_within_the_cap_and_the_chunks() {
        assert_eq!(quant_grid(1, 132, 512), (1, 512));
        assert_eq!(quant_grid(32 << 20, 132, 512), (132, 512));
        assert_eq!(quant_grid(32 << 20, 66, 512), (66, 512));
        assert_eq!(quant_grid(5 * CHUNK_ELEMS, 66, 512), (5, 512));
        // Blocks are powers of two (the kernel's chunk loop needs it).
        assert_eq!(quant_grid(1 << 20, 132, 384), (132, 256));
        assert_eq!(quant_grid(1 << 20, 0, 512), (1, 512));
    }
}
