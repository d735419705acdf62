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
//!   which every peer reads; device memory holds only the control words;
//! - the gathered form (gathered.rs, opt-in: `CudaConfig::wire_algo`): a
//!   device buffer of one block of codes and scales per rank, moved by the
//!   exact communicator's all-gather.

use super::call::Call;
use super::call_word;
use super::compile;
use super::config::CudaConfig;
use super::driver_error::cuda_err;
use super::gpu_comm::Transport;
use super::kernel_args::QuantArgs;
use super::launch_shape::{self, grid_cap, quant_block, QUANT_MAX_BLOCK};
use super::loader::{
    common_block, compile_and_load, dtype_index, per_device, resident_blocks_per_sm, PerDevice,
};
use super::rendezvous::Rendezvous;
use super::share::{DeviceIdentity, Sharing};
use crate::error::{Error, Result};
use crate::memory::{GpuAllocations, MemoryLine, MemoryReport};
use crate::quant::model::CHUNK_ELEMS;
use crate::quant::{Format, Wire, MIN_GROUP};
use crate::sys::cuda::pinned::Registered;
use crate::sys::cuda::{self as raw, DeviceAlloc, Function, HostMapped, IpcMapping};
use crate::sys::shm::SharedFile;
use crate::transport::MAX_WORLD;
use crate::units::ByteSize;
use cudarc::driver::CudaContext;
use std::sync::Arc;
use std::time::Duration;

mod create;
pub mod gathered;
mod wire;

pub use wire::{agree_wire, resolve_wire, wire_for};

/// Q_WAIT_QUANT in kernels/quant.cu.
const WAIT_QUANT: u32 = 8;
const CTL_BYTES: usize = 256;
const STATUS_BYTES: usize = 64;

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

pub(crate) fn round_up(x: usize, a: usize) -> usize {
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

/// Chunks of a one-shot step (Q_STEP in kernels/quant.cu): one-shot blocks
/// take a step at a time, two-shot blocks a chunk.
pub(crate) const STEP_CHUNKS: usize = 4;

/// Which quantized algorithm a call runs (defined in `crate::wire`, beside
/// `Wire`, so that `CudaConfig` can hold it without importing this module).
pub use crate::wire::QuantAlgo;

impl QuantAlgo {
    /// Whether a call of `count` elements at `world` ranks runs two-shot
    /// (the arithmetic of `quant::model::all_reduce_twoshot_bits`; every
    /// other choice is `all_reduce_bits`'s).
    pub fn runs_twoshot(self, count: usize, world: usize) -> bool {
        let asked = match self {
            QuantAlgo::OneShot | QuantAlgo::Gathered => false,
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
    /// The gathered form's local halves (quant_gathered.cu), [format][dtype].
    pack: [[Function; 3]; 2],
    unpack_sum: [[Function; 3]; 2],
    block: u32,
    /// Blocks of `block` threads one SM holds of the kernel that fits fewest.
    blocks_per_sm: u32,
    arch: (i32, i32),
    cubin_bytes: usize,
    _module: raw::Module,
    _ctx: Arc<CudaContext>,
}

fn kernels_for(ctx: &Arc<CudaContext>) -> Result<Arc<QuantKernels>> {
    static CACHE: PerDevice<QuantKernels> = PerDevice::new();
    per_device(&CACHE, ctx, || {
        let l = compile_and_load(ctx, compile::QUANT_SRC, "quant.cu", "the quantized kernels")?;
        let int8 = super::loader::per_type(&l.module, "tpcomm_quant_oneshot_int8")?;
        let fp8 = super::loader::per_type(&l.module, "tpcomm_quant_oneshot_fp8")?;
        let int8_2 = super::loader::per_type(&l.module, "tpcomm_quant_twoshot_int8")?;
        let fp8_2 = super::loader::per_type(&l.module, "tpcomm_quant_twoshot_fp8")?;
        let pack = [
            super::loader::per_type(&l.module, "tpcomm_quant_pack_int8")?,
            super::loader::per_type(&l.module, "tpcomm_quant_pack_fp8")?,
        ];
        let unpack_sum = [
            super::loader::per_type(&l.module, "tpcomm_quant_unpack_sum_int8")?,
            super::loader::per_type(&l.module, "tpcomm_quant_unpack_sum_fp8")?,
        ];
        // The local halves launch whole blocks of GATHER_BLOCK threads.
        let local = common_block(
            pack.iter().chain(&unpack_sum).flatten(),
            GATHER_BLOCK,
            "the quantized pack and unpack-sum kernels",
            l.arch,
        )?;
        if local != GATHER_BLOCK {
            return Err(Error::Unsupported(format!(
                "the quantized pack and unpack-sum kernels launch only {local} threads per block on sm_{}{}; they need {}",
                l.arch.0, l.arch.1, GATHER_BLOCK
            )));
        }
        let block = common_block(
            int8.iter().chain(&fp8).chain(&int8_2).chain(&fp8_2),
            QUANT_MAX_BLOCK,
            "the quantized kernels",
            l.arch,
        )?;
        let blocks_per_sm = resident_blocks_per_sm(
            int8.iter().chain(&fp8).chain(&int8_2).chain(&fp8_2),
            quant_block(block),
        )?;
        Ok(QuantKernels {
            blocks_per_sm,
            oneshot: [int8, fp8],
            twoshot: [int8_2, fp8_2],
            pack,
            unpack_sum,
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

/// QG_BLOCK in kernels/quant_gathered.cu (the launch bound).
pub(super) const GATHER_BLOCK: u32 = 256;

pub(super) fn format_index(f: Format) -> usize {
    match f {
        Format::Int8 => 0,
        Format::Fp8E4m3 => 1,
    }
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
    /// The most blocks a call launches (launch_shape::grid_cap).
    grid_cap: u32,
    /// TPCOMM_QUANT_BLOCKS at creation: blocks per call instead of the rule.
    blocks_asked: Option<u32>,
    sharing: Sharing,
    /// P2P: the receive area with the control words after it; host: the
    /// control words alone.
    _dev: DeviceAlloc,
    ctl: u64,
    status: HostMapped,
    dst: [u64; MAX_WORLD],
    ndst: u32,
    src: [u64; MAX_WORLD],
    /// The gathered form's blocks, one per rank (gathered.rs), when
    /// `CudaConfig::wire_algo` asked for it; `gathered_block` bytes each.
    gathered: Option<DeviceAlloc>,
    gathered_block: usize,
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

    /// Launches the quantized all-reduce (sum) of `call` (`call.op` and
    /// `call.algo` are not read) on the wire `wire`, on the kernel `algo`
    /// names: one-shot, two-shot, or `Auto`, which picks by
    /// `QuantAlgo::runs_twoshot`. The gathered form needs the exact
    /// communicator too: [`run`](Self::run).
    ///
    /// # Safety
    /// `call.input` and `call.output` (may be equal) are device allocations
    /// of at least `count` elements of `dtype`, 16-byte aligned, valid until
    /// the kernel has finished; every rank makes the same calls in the same
    /// order.
    pub unsafe fn all_reduce_with(&self, call: &Call, wire: Wire, algo: QuantAlgo) -> Result<()> {
        if algo == QuantAlgo::Gathered {
            return Err(Error::invalid(
                "quantized algorithm",
                "the gathered form runs through the exact communicator's all-gather: call Communicator::all_reduce_quant",
            ));
        }
        let Some((format, group)) = self.checked_call(call, wire)? else {
            return Ok(());
        };
        let (count, dtype) = (call.count, call.dtype);
        let bytes = count * dtype.size();
        let twoshot = algo.runs_twoshot(count, self.world);
        let unit = if twoshot { 1 } else { STEP_CHUNKS };
        let shape = launch_shape::quant(
            count,
            unit,
            self.grid_cap,
            self.kernels.block,
            self.blocks_asked,
        );
        let kernels = if twoshot {
            &self.kernels.twoshot
        } else {
            &self.kernels.oneshot
        };
        // The wire (1 int8, 0 fp8) and the group (32 << g) go into the
        // call's word: peers with another wire or group made another call.
        let aux = u64::from(format == Format::Int8)
            | (u64::from(group.trailing_zeros().saturating_sub(5)) & 3) << 1;
        let word = call_word::word_if(
            self.check_calls,
            if twoshot {
                call_word::Kind::QuantTwoShot
            } else {
                call_word::Kind::QuantOneShot
            },
            call_word::Signature::of(dtype, crate::ReduceOp::Sum),
            bytes as u64,
            aux,
        )?;
        let f = kernels[format_index(format)][dtype_index(dtype)];
        let args = QuantArgs {
            input: call.input,
            output: call.output,
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
            call: word,
            rank: self.rank as u32,
            world: self.world as u32,
            ndst: self.ndst,
            group,
        };
        // SAFETY: QuantArgs mirrors `struct QArgs`; the areas, control words
        // and status live as long as `self` (callers keep it until their
        // streams finish); input/output are the caller's contract above; the
        // kernel starts with wait_for_previous_kernel.
        unsafe { call.launch_kernel(&self.ctx, f, shape, &args, self.kernels.arch.0) }
    }

    /// The checks every quantized call makes (an earlier call's failure, the
    /// wire, the size, the alignment); the wire's format and group, or
    /// `None` for an empty message.
    pub(crate) fn checked_call(&self, call: &Call, wire: Wire) -> Result<Option<(Format, u32)>> {
        let count = call.count;
        self.check()?;
        let Some((format, group)) = wire.checked()?.quantized() else {
            return Err(Error::invalid(
                "wire",
                "the quantized all-reduce takes int8 or fp8, not exact",
            ));
        };
        let bytes = count
            .checked_mul(call.dtype.size())
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
        if !call.input.is_multiple_of(16) || !call.output.is_multiple_of(16) {
            return Err(Error::invalid(
                "buffer address",
                "input and output must be 16-byte aligned",
            ));
        }
        Ok((count > 0).then_some((format, group)))
    }

    /// Reports a peer that did not arrive in an earlier call. Synchronize
    /// the stream first to see the latest call's outcome.
    pub fn check(&self) -> Result<()> {
        call_word::status_check(&self.status, self.rank, self.timeout, |code| match code {
            WAIT_QUANT => "quantized one-shot data",
            _ => "data",
        })
    }
}

#[cfg(test)]
mod tests;
