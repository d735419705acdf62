//! `PinnedTransport`: all-reduce between GPUs through pinned host memory.

use super::algo::{delta_shadow_bytes, resolve, HostAlgo};
use super::group::{agree, GroupRecord};
use super::kernels::{self, dtype_index, host_kernels_for, HostKernelArgs, HostKernels};
use super::layout::{chunk_plan_with, HostChunkShape, HostLayout};
use crate::algo::{Algo, Collective};
use crate::cuda::call::{Call, GpuTransport};
use crate::cuda::call_word;
use crate::cuda::config::CudaConfig;
use crate::cuda::launch_shape::{self, block_var};
use crate::cuda::rendezvous::Rendezvous;
use crate::cuda::share::{
    note_sharing, time_slice_warning, warn_queues_once, DeviceIdentity, Sharing,
};
use crate::cuda::transport::fields::{transport_accessors, transport_debug};
use crate::cuda::transport::p2p::open_context;
use crate::dtype::{DType, ReduceOp};
use crate::error::{Error, Result};
use crate::memory::{GpuAllocations, MemoryLine, MemoryReport};
use crate::sys::cuda::pinned::{self, Registered};
use crate::sys::cuda::{self as raw, DeviceAlloc, HostMapped};
use crate::sys::shm::{self, Mapping, SharedFile};
use crate::transport::MAX_WORLD;
use crate::units::ByteSize;
use cudarc::driver::CudaContext;
use std::sync::Arc;
use std::time::Duration;

// Status codes the kernels write (HG_WAIT_* in host_allreduce.cu).
const WAIT_CHUNK: u32 = 5;
const WAIT_DELTA: u32 = 7;
const CTL_BYTES: usize = 256;
const STATUS_BYTES: usize = 64;
const PAGE: usize = 4096;

// This rank's own area and, for processes, the peers' segments it mapped.
// Registrations are listed before the mappings they pin, so they drop first.
enum Areas {
    Threads {
        _own: HostMapped,
    },
    Procs {
        _registered: Vec<Registered>,
        _segments: Vec<Segment>,
    },
}

// A process's view of one rank's area: a /dev/shm segment or a memfd.
enum Segment {
    Shm(Mapping),
    File(SharedFile),
}

impl Segment {
    fn base(&self) -> *mut u8 {
        match self {
            Segment::Shm(m) => m.base(),
            Segment::File(f) => f.base(),
        }
    }
    fn len(&self) -> usize {
        match self {
            Segment::Shm(m) => m.len(),
            Segment::File(f) => f.len(),
        }
    }
}

/// One rank of a group of GPUs doing all-reduce through pinned host memory.
///
/// Drop it only when no rank has a call of it still queued or running: peers
/// read this rank's area, which drop frees. A failed call (see
/// [`check`](Self::check)) leaves the communicator unusable; create new ones
/// on every rank.
pub struct PinnedTransport {
    ctx: Arc<CudaContext>,
    rank: usize,
    world: usize,
    max_bytes: ByteSize,
    timeout: Duration,
    check_calls: bool,
    layout: HostLayout,
    kernels: Arc<HostKernels>,
    /// The most blocks a launch may have: one per SM, or this rank's share
    /// of the GPU when ranks share it (group.rs, share.rs).
    grid: usize,
    /// The smallest such grid of the group (agreed at creation): chunk sizes
    /// come from it, so every rank cuts the same chunks.
    group_grid: usize,
    sharing: Sharing,
    /// Overrides of the chunked kernel's plan (environment, read at creation).
    shape: HostChunkShape,
    /// Threads per block of the one-pass kernels when TPCOMM_HOST_BLOCK sets
    /// it (read at creation); `None`: the one-shot rule (`launch_shape::host_delta`).
    one_pass_block: Option<u32>,
    ctl: DeviceAlloc,
    /// The delta kernel's memory of the previous content of every rank's two
    /// buffers.
    shadow: DeviceAlloc,
    status: HostMapped,
    areas: [u64; MAX_WORLD],
    report: MemoryReport,
    /// What the routes were decided with (`CudaConfig::selector`, else this
    /// machine's: `select::for_this_machine`).
    selector: Arc<crate::select::Selector>,
    /// What `Algo::Auto` runs, per size class (`select::RouteTable`, without
    /// NCCL): the selector's `host:*` rows, else the pcie-nop2p rules.
    routes: crate::select::RouteTable,
    mode: crate::select::Mode,
    _own: Areas,
}

transport_debug!(PinnedTransport);

fn u64_at(blob: &[u8], at: usize) -> Result<u64> {
    blob.get(at..at + 8)
        .and_then(|b| b.try_into().ok())
        .map(u64::from_le_bytes)
        .ok_or_else(|| {
            Error::invalid(
                "rendezvous",
                "a rank posted a malformed record; do all ranks run the same tpcomm?",
            )
        })
}

impl PinnedTransport {
    /// Creates this rank's communicator: compiles (or loads) the kernels,
    /// allocates and pins its host area, and maps every peer's. All ranks call
    /// this with the same world, max size and rendezvous.
    pub fn new(cfg: &CudaConfig, rendezvous: &Rendezvous) -> Result<Self> {
        let max_bytes = cfg.checked("the host GPU transport")?;
        let ctx = open_context(cfg.device)?;
        let kernels = host_kernels_for(&ctx)?;
        let sms = raw::sm_count(cfg.device as i32)?.max(1) as usize;
        let shape = HostChunkShape::from_env()?;
        let one_pass_block = block_var(&crate::env::HOST_BLOCK, kernels.block)?;
        let layout = HostLayout::new(max_bytes);
        let area_bytes = layout.area_bytes(PAGE);

        // The control words get a whole allocation granule of their own: a
        // smaller request may be carved from a granule the driver already
        // holds, or not, and the report must say exactly what free memory
        // loses.
        let granularity = raw::allocation_granularity(cfg.device as i32)?.max(CTL_BYTES);
        let ctl = DeviceAlloc::new(ctx.cu_ctx(), granularity)?;
        ctl.fill(0, CTL_BYTES, 0)?;
        let status = HostMapped::new(ctx.cu_ctx(), STATUS_BYTES)?;

        let threads = matches!(rendezvous, Rendezvous::Threads(_));
        let mut areas = [0u64; MAX_WORLD];
        let mut items = vec![MemoryLine::pinned_host(
            "own host area: 2 halves and the one-pass buffers (pinned, mapped)",
            area_bytes,
        )];
        let own = if threads {
            // Portable, device-mapped pinned memory has one address in every
            // context of the process (unified addressing), so peers' threads
            // use it as it is; each rank checks that below.
            let own = HostMapped::new(ctx.cu_ctx(), area_bytes)?;
            let mut mine = Vec::with_capacity(16);
            mine.extend_from_slice(&own.device_ptr().to_le_bytes());
            mine.extend_from_slice(&(area_bytes as u64).to_le_bytes());
            let all =
                rendezvous.exchange("host-gpu-areas", cfg.rank, cfg.world, &mine, cfg.timeout)?;
            for (p, blob) in all.iter().enumerate() {
                let (ptr, len) = (u64_at(blob, 0)?, u64_at(blob, 8)?);
                if len != area_bytes as u64 {
                    return Err(Error::invalid("rendezvous", format!("rank {p} has a {len}-byte area, this rank {area_bytes}: do all ranks use the same max message size?")));
                }
                raw::set_current(ctx.cu_ctx())?;
                let seen = pinned::device_pointer(ptr as *mut u8)?;
                if seen != ptr {
                    return Err(Error::Unsupported(format!("rank {p}'s pinned area is at {ptr:#x} on its GPU but at {seen:#x} on GPU {} (no unified addressing?); run one process per GPU instead", cfg.device)));
                }
                areas[p] = ptr;
            }
            Areas::Threads { _own: own }
        } else {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0);
            let name = format!(
                "/tpcomm-hostgpu-{}-{}-{nanos}",
                std::process::id(),
                cfg.rank
            );
            let made =
                Self::map_process_areas(cfg, rendezvous, &ctx, &name, area_bytes, &mut areas)
                    .and_then(|m| {
                        // Only once every rank has opened every segment may
                        // the names go (a peer may still be opening this one).
                        rendezvous.exchange(
                            "host-gpu-opened",
                            cfg.rank,
                            cfg.world,
                            &[1],
                            cfg.timeout,
                        )?;
                        Ok(m)
                    });
            // The memory lives on until the last mapping is gone.
            shm::unlink(&name);
            let (registered, segments) = made?;
            // Their pages are the peers' own (counted in their reports):
            // mapping and registering them takes no new memory here, so the
            // line says how much is mapped but counts 0 bytes.
            let mapped = ByteSize::from_usize((cfg.world - 1) * area_bytes);
            items.push(MemoryLine::pinned_host(
                &format!(
                    "peers' areas mapped and registered ({mapped} of their pages, no new memory)"
                ),
                0,
            ));
            Areas::Procs {
                _registered: registered,
                _segments: segments,
            }
        };
        // The delta buffers start as the sentinel (all-ones bytes), as their
        // shadows say, before any peer may read there.
        // SAFETY: the one-pass region lies inside this rank's area (HostLayout),
        // mapped above; no kernel uses it yet, as no rank launches before
        // the exchange below.
        unsafe {
            raw::fill_mapped(
                ctx.cu_ctx(),
                areas[cfg.rank] + layout.delta_offset as u64,
                layout.one_pass_region(),
                0xff,
            )?
        };
        // No rank launches before every rank has mapped every area; the
        // records say what all ranks must agree on (group.rs).
        let record = GroupRecord {
            sms: sms.min(u32::MAX as usize) as u32,
            blocks_per_sm: kernels.blocks_per_sm,
            chunk_override: shape.chunk_bytes.unwrap_or(0) as u64,
            check_calls: cfg.check_calls,
            device: DeviceIdentity::of_device(cfg.device)?,
        };
        let all = rendezvous.exchange(
            "host-gpu-mapped",
            cfg.rank,
            cfg.world,
            &record.to_bytes(),
            cfg.timeout,
        )?;
        let agreed = agree(cfg.rank, &all)?;
        if let Some(w) = time_slice_warning(
            agreed.sharing,
            raw::mps_enabled(cfg.device as i32)?,
            cfg.device,
        ) {
            eprintln!("{w}");
        }
        warn_queues_once(agreed.sharing, cfg.device);
        note_sharing(agreed.sharing, cfg.device);

        items.push(MemoryLine::device(
            "control words (epoch, abort; one granule)",
            granularity,
        ));
        let mut allocations = vec![ByteSize::from_usize(granularity)];
        // Delta words: what every rank's two buffers hold, as the sentinel
        // the buffers were filled with; whole granules, so the report says
        // exactly what free memory loses.
        let shadow_bytes = delta_shadow_bytes(cfg.world, layout.delta_cap, granularity);
        let shadow = DeviceAlloc::new(ctx.cu_ctx(), shadow_bytes)?;
        shadow.fill(0, shadow_bytes, 0xff)?;
        items.push(MemoryLine::device(
            "delta shadows (2 buffers of every rank)",
            shadow_bytes,
        ));
        allocations.push(ByteSize::from_usize(shadow_bytes));
        items.push(MemoryLine::pinned_host(
            "status (pinned, mapped)",
            STATUS_BYTES,
        ));
        let report = MemoryReport::gpu(
            "the host-path communicator",
            items,
            GpuAllocations {
                device: cfg.device,
                allocations,
                granularity: ByteSize::from_usize(granularity),
                kernel_image: ByteSize::from_usize(kernels.cubin_bytes),
            },
        );
        let selector = match &cfg.selector {
            Some(s) => s.clone(),
            None => Arc::new(crate::select::for_this_machine(
                crate::select::Transport::Host,
            )?),
        };
        let routes =
            cfg.agreed_routes(&selector, crate::select::Transport::Host, false, rendezvous)?;
        Ok(Self {
            ctx,
            rank: cfg.rank,
            world: cfg.world,
            max_bytes: cfg.max_bytes,
            timeout: cfg.timeout,
            check_calls: agreed.check_calls,
            layout,
            kernels,
            grid: agreed.grid,
            group_grid: agreed.group_grid,
            sharing: agreed.sharing,
            shape,
            one_pass_block,
            ctl,
            shadow,
            status,
            areas,
            report,
            selector,
            routes,
            mode: cfg.mode,
            _own: own,
        })
    }

    /// Processes: this rank's area is a new POSIX shared-memory segment, or,
    /// when /dev/shm has no room for it, a memfd that peers open through
    /// /proc (both zeroed by the kernel); each rank maps and registers every
    /// area, its own too. The record a rank posts says which (`shm:NAME` or
    /// `fd:PATH`).
    fn map_process_areas(
        cfg: &CudaConfig,
        rendezvous: &Rendezvous,
        ctx: &Arc<CudaContext>,
        name: &str,
        area_bytes: usize,
        areas: &mut [u64; MAX_WORLD],
    ) -> Result<(Vec<Registered>, Vec<Segment>)> {
        let (own, record) = match shm::create(name, area_bytes) {
            Ok(m) => (Segment::Shm(m), format!("shm:{name}")),
            Err(shm_err) => match SharedFile::create(area_bytes) {
                Ok((f, path)) => (Segment::File(f), format!("fd:{path}")),
                Err(e) => {
                    return Err(Error::invalid(
                        "host GPU area",
                        format!("neither /dev/shm ({shm_err}) nor a memfd ({e}) could hold {area_bytes} bytes"),
                    ))
                }
            },
        };
        let mut segments = Vec::with_capacity(cfg.world);
        let mut registered = Vec::with_capacity(cfg.world);
        raw::set_current(ctx.cu_ctx())?;
        // SAFETY: `own` is this rank's whole mapped area; the registration
        // goes into `registered`, which Areas drops before `segments`.
        let reg = unsafe { Registered::new(own.base(), own.len()) }?;
        areas[cfg.rank] = reg.device_ptr();
        registered.push(reg);
        segments.push(own);
        let all = rendezvous.exchange(
            "host-gpu-segments",
            cfg.rank,
            cfg.world,
            record.as_bytes(),
            cfg.timeout,
        )?;
        for (p, blob) in all.iter().enumerate() {
            if p == cfg.rank {
                continue;
            }
            let rec = std::str::from_utf8(blob).map_err(|_| {
                Error::invalid(
                    "rendezvous",
                    format!("rank {p} posted an area record that is not UTF-8"),
                )
            })?;
            let seg = if let Some(peer_name) = rec.strip_prefix("shm:") {
                Segment::Shm(shm::open(peer_name)?.ok_or_else(|| {
                    Error::invalid(
                        "rendezvous",
                        format!("rank {p}'s segment {peer_name} does not exist (did it exit?)"),
                    )
                })?)
            } else if let Some(path) = rec.strip_prefix("fd:") {
                Segment::File(SharedFile::open(path)?)
            } else {
                return Err(Error::invalid(
                    "rendezvous",
                    format!("rank {p} posted {rec:?}; do all ranks run the same tpcomm?"),
                ));
            };
            if seg.len() != area_bytes {
                return Err(Error::invalid("rendezvous", format!("rank {p}'s area has {} bytes, this rank's {area_bytes}: do all ranks use the same max message size?", seg.len())));
            }
            raw::set_current(ctx.cu_ctx())?;
            // SAFETY: as for this rank's own area above.
            let reg = unsafe { Registered::new(seg.base(), seg.len()) }?;
            areas[p] = reg.device_ptr();
            registered.push(reg);
            segments.push(seg);
        }
        Ok((registered, segments))
    }

    transport_accessors!();

    /// The kernel a message of `bytes` runs with under `algo` (`Auto` by the
    /// size rule; [`all_reduce_call`](crate::cuda::StreamAllReduce::all_reduce_call) asks selection instead,
    /// see [`auto_algo`](Self::auto_algo)).
    pub fn resolve(&self, algo: Algo, bytes: usize) -> HostAlgo {
        resolve(algo, bytes, self.layout.delta_cap)
    }
}

impl GpuTransport for PinnedTransport {
    type Ran = HostAlgo;

    unsafe fn all_reduce(&self, call: &Call) -> Result<HostAlgo> {
        let bytes = self.all_reduce_bytes("the host-path kernels", call)?;
        let dtype = call.dtype;
        let which = self.resolve(self.auto_algo(call.algo, dtype, bytes), bytes);
        if call.count == 0 {
            return Ok(which);
        }
        let d = dtype_index(dtype);
        let mut args = HostKernelArgs {
            input: call.input,
            output: call.output,
            nbytes: bytes as u64,
            call: call.word(
                self.check_calls,
                match which {
                    HostAlgo::Delta => call_word::Kind::HostDelta,
                    HostAlgo::Chunked => call_word::Kind::HostChunked,
                },
                bytes as u64,
                0,
            )?,
            ..self.kernel_args()
        };
        let (f, shape) = match which {
            HostAlgo::Delta => {
                let shape = launch_shape::host_delta(
                    bytes,
                    self.grid,
                    self.kernels.block,
                    self.one_pass_block,
                );
                let shape = if self.check_calls {
                    launch_shape::with_idle_checker(
                        shape,
                        bytes,
                        self.grid as u32,
                        self.kernels.block,
                    )
                } else {
                    shape
                };
                (self.kernels.fns[kernels::DELTA][d], shape)
            }
            HostAlgo::Chunked => {
                let plan =
                    chunk_plan_with(bytes, self.world, self.grid, self.group_grid, &self.shape);
                if plan.chunks > self.layout.max_chunks {
                    return Err(Error::invalid(
                        "chunk plan",
                        format!(
                            "{} chunks exceed the {} flags of the area (a bug)",
                            plan.chunks, self.layout.max_chunks
                        ),
                    ));
                }
                args.chunk_bytes = plan.chunk_bytes as u64;
                args.producers = plan.producers;
                (
                    self.kernels.fns[kernels::CHUNKED][d],
                    plan.split().shape(self.kernels.block),
                )
            }
        };
        // SAFETY: HostKernelArgs mirrors `struct HArgs`; the areas, control
        // words and status live as long as `self` (callers keep the
        // communicator until their streams finish); input/output validity is
        // the caller's contract above; both kernels of host_allreduce.cu
        // start with wait_for_previous_kernel, as an overlapped launch requires.
        unsafe { call.launch_kernel(&self.ctx, f, shape, &args, self.kernels.arch.0)? };
        Ok(which)
    }

    unsafe fn run_collective(&self, what: Collective, call: &Call) -> Result<()> {
        // SAFETY: the trait's contract (collectives.rs).
        unsafe { self.collective(what, call) }
    }
}

/// What the collective kernels (collectives.rs) need of a communicator.
pub(super) struct HostParts<'a> {
    pub ctx: &'a Arc<CudaContext>,
    pub args: HostKernelArgs,
    pub layout: HostLayout,
    pub group_grid: usize,
    pub sharing: Sharing,
    /// Whether calls carry call words (`CudaConfig::check_calls`).
    pub check_calls: bool,
    pub arch_major: i32,
    /// TPCOMM_HOST_CHUNK / _PRODUCERS / _CONSUMERS, which the collectives
    /// take too.
    pub shape: HostChunkShape,
}

impl PinnedTransport {
    /// The kernels' argument with this communicator's areas, layout, epoch
    /// words, status and timeout; the per-call fields (input, output, size,
    /// chunking, call word) zero, for the caller to set.
    fn kernel_args(&self) -> HostKernelArgs {
        HostKernelArgs {
            input: 0,
            output: 0,
            nbytes: 0,
            areas: self.areas,
            half_stride: self.layout.half_stride as u64,
            data_offset: self.layout.data_offset as u64,
            flag_offset: self.layout.flag_offset as u64,
            chunk_bytes: 16,
            ctl: self.ctl.ptr(),
            status: self.status.device_ptr(),
            timeout_ns: self.timeout.as_nanos().min(u64::MAX as u128) as u64,
            delta_offset: self.layout.delta_offset as u64,
            slot_bytes: self.layout.delta_cap as u64,
            shadow: self.shadow.ptr(),
            call_offset: self.layout.call_offset as u64,
            call: 0,
            rank: self.rank as u32,
            world: self.world as u32,
            producers: 0,
        }
    }

    /// The protocol state the collective kernels run on (collectives.rs):
    /// the all-reduce's kernel arguments with this communicator's areas,
    /// epoch and status, its layout and the group's smallest grid.
    pub(super) fn parts(&self) -> HostParts<'_> {
        HostParts {
            ctx: &self.ctx,
            // Input, output, size, chunking and the call word are set per
            // call (collectives.rs).
            args: self.kernel_args(),
            layout: self.layout,
            group_grid: self.group_grid,
            sharing: self.sharing,
            check_calls: self.check_calls,
            arch_major: self.kernels.arch.0,
            shape: self.shape,
        }
    }
}

impl PinnedTransport {
    /// `Algo::Auto` as selection answers it for this communicator (its
    /// selector's `host:*` rows, else the pcie-nop2p rules); other algorithms
    /// unchanged. Every rank answers alike, as all hold the same selector.
    pub fn auto_algo(&self, algo: Algo, dtype: DType, bytes: usize) -> Algo {
        self.routes
            .lookup(
                bytes as u64,
                dtype,
                ReduceOp::Sum,
                algo,
                self.mode,
                crate::wire::Wire::Exact,
            )
            .algo()
            .unwrap_or(Algo::OneShot)
    }

    /// What the routes were decided with.
    pub fn selector(&self) -> &Arc<crate::select::Selector> {
        &self.selector
    }

    /// What `Algo::Auto` runs at each size (without NCCL).
    pub fn routes(&self) -> &crate::select::RouteTable {
        &self.routes
    }

    /// Reports a peer that did not arrive in an earlier call (read from the
    /// status the kernels write). Synchronize the stream first to see the
    /// outcome of the latest call.
    pub fn check(&self) -> Result<()> {
        call_word::status_check(&self.status, self.rank, self.timeout, |code| match code {
            WAIT_CHUNK => "host-path chunk flag",
            WAIT_DELTA => "host-path delta words",
            c => super::wait::wait_what(c).unwrap_or("host-path data"),
        })
    }
}
