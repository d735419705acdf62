//! All-gather, reduce-scatter and broadcast between GPUs without P2P, on
//! the host-path communicator's pinned areas and epoch
//! (kernels/host_collectives.cu): no memory beyond what creation allocated.
//!
//! A call's block must fit the area's chunked-data region and flags: any
//! block up to `max_bytes` for all-gather and broadcast; for reduce-scatter
//! all `world` blocks of the input (each rounded up to 16 bytes) and their
//! chunks. [`fits`] says which; `Communicator` sends the rest to NCCL.

use super::comm::PinnedTransport;
use super::layout::{HostLayout, MAX_CHUNK, MIN_CHUNK};
use crate::algo::Collective;
use crate::cuda::call::Call;
use crate::cuda::call_word;
use crate::cuda::compile::HOST_COLLECTIVES_SRC;
use crate::cuda::kernel_args::HostCollArgs;
use crate::cuda::launch_shape::{self, grid_cap};
use crate::cuda::loader::{kernel_family, pick};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::sys::cuda as raw;
use crate::units::ByteSize;

/// HG_BLOCK in host_allreduce.cu.
const BLOCK: u32 = 512;

kernel_family! {
    /// The host-path collective kernels of one device: `fns` is [all-gather,
    /// reduce-scatter, broadcast] (see `collectives::pick`).
    fn kernels = 3 of HOST_COLLECTIVES_SRC, "host_collectives.cu", "the host-path collective kernels",
        ["tpcomm_host_all_gather", "tpcomm_host_reduce_scatter", "tpcomm_host_broadcast"], BLOCK
}

/// How a call of `bytes` per block is cut: the chunk (from values every rank
/// shares, so all cut the same chunks), the chunks in the area and the
/// chunks this rank reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CollPlan {
    pub chunk_bytes: usize,
    /// Chunks written per rank (all blocks for reduce-scatter).
    pub chunks: usize,
    /// Chunks read per rank (one block's).
    pub per_block: usize,
}

/// The plan of a call, or `None` when its blocks do not fit the area (the
/// data region and the chunk flags the all-reduce's layout made).
/// `chunk_override` (TPCOMM_HOST_CHUNK, for measuring) replaces the rule's
/// chunk, rounded to whole MIN_CHUNK within MIN_CHUNK-MAX_CHUNK.
pub fn fits(
    what: Collective,
    bytes: usize,
    world: usize,
    group_grid: usize,
    l: &HostLayout,
    chunk_override: Option<usize>,
) -> Option<CollPlan> {
    if bytes == 0 {
        return Some(CollPlan {
            chunk_bytes: MIN_CHUNK,
            chunks: 0,
            per_block: 0,
        });
    }
    // About one chunk per reading block of the smallest grid, within
    // MIN_CHUNK (which the flags were counted for) and MAX_CHUNK.
    let readers = (group_grid / 2).max(1);
    let chunk_bytes = match chunk_override {
        Some(c) => c.div_ceil(MIN_CHUNK) * MIN_CHUNK,
        None => bytes.div_ceil(readers).div_ceil(16) * 16,
    }
    .clamp(MIN_CHUNK, MAX_CHUNK);
    let per_block = bytes.div_ceil(chunk_bytes);
    let blocks = match what {
        Collective::ReduceScatter => world,
        _ => 1,
    };
    let data = blocks.checked_mul(bytes.div_ceil(16) * 16)?;
    let chunks = blocks.checked_mul(per_block)?;
    (data <= l.flag_offset - l.data_offset && chunks <= l.max_chunks).then_some(CollPlan {
        chunk_bytes,
        chunks,
        per_block,
    })
}

/// The all-gather's reading blocks per GPU (`launch_shape::host_collective`).
pub use crate::cuda::launch_shape::ALL_GATHER_LINK_READERS;

impl PinnedTransport {
    /// Loads the collective kernels now (see
    /// `P2pTransport::prepare_collectives`); returns the kernel image's size.
    pub fn prepare_collectives(&self) -> Result<ByteSize> {
        Ok(ByteSize::from_usize(kernels(self.context())?.cubin_bytes))
    }

    /// Whether a call of `count` elements of `dtype` per block fits this
    /// communicator's areas (see [`fits`]).
    pub fn collective_fits(&self, what: Collective, count: usize, dtype: DType) -> bool {
        let p = self.parts();
        count
            .checked_mul(dtype.size())
            .filter(|&b| b as u64 <= self.max_bytes().bytes())
            .and_then(|b| {
                fits(
                    what,
                    b,
                    self.world(),
                    p.group_grid,
                    &p.layout,
                    p.shape.chunk_bytes,
                )
            })
            .is_some()
    }

    /// All-gather, reduce-scatter (sum) or broadcast through pinned host
    /// memory (the transport's [`GpuTransport`](crate::cuda::GpuTransport) methods), with the results
    /// of `P2pTransport`'s (the same bytes on every rank; reduce-scatter's
    /// bits those of this transport's chunked all-reduce).
    ///
    /// # Safety
    /// As [`GpuTransport`](crate::cuda::GpuTransport)'s methods.
    pub(crate) unsafe fn collective(&self, what: Collective, call: &Call) -> Result<()> {
        let Some(bytes) = self.collective_bytes(what, call)? else {
            return Ok(());
        };
        let dtype = call.dtype;
        let p = self.parts();
        let Some(plan) = fits(
            what,
            bytes,
            self.world(),
            p.group_grid,
            &p.layout,
            p.shape.chunk_bytes,
        ) else {
            return Err(Error::invalid(
                "message size",
                format!(
                    "a {} block of {} does not fit this communicator's host areas ({} ranks x the block must fit {}); create it with a larger max_bytes",
                    what.name(),
                    ByteSize::from_usize(bytes),
                    self.world(),
                    self.max_bytes()
                ),
            ));
        };
        let k = kernels(p.ctx)?;
        // One block per SM, or this rank's share of what the GPU holds of
        // these kernels at once when ranks share it (all blocks must be
        // resident: readers wait on writers of the same grid).
        let sms = raw::sm_count(p.ctx.ordinal() as i32)? as usize;
        let grid = grid_cap(sms, k.blocks_per_sm as usize, p.sharing)?;
        if grid < 2 {
            return Err(Error::Unsupported(format!(
                "the host-path {} needs 2 blocks (one writing, one reading) but this rank may launch {grid}",
                what.name()
            )));
        }
        let split = launch_shape::host_collective(
            what,
            plan.chunks,
            plan.per_block,
            grid,
            p.sharing.ranks_on_device,
            p.shape.asked(),
        );
        let (f, root, kind) = pick(&k, what, dtype, call_word::HOST_COLLECTIVES);
        let mut base = p.args;
        base.call = call.word(p.check_calls, kind, bytes as u64, root as u64)?;
        base.input = call.input;
        base.output = call.output;
        base.nbytes = bytes as u64;
        base.chunk_bytes = plan.chunk_bytes as u64;
        base.producers = split.producers;
        let args = HostCollArgs { base, root, pad: 0 };
        // SAFETY: HostCollArgs mirrors the kernel's parameter; the areas,
        // control words and status belong to `self`, which callers keep
        // alive until their streams finish; the pointers are the caller's
        // contract; every kernel of host_collectives.cu starts with
        // wait_for_previous_kernel, as an overlapped launch requires.
        unsafe { call.launch_kernel(p.ctx, f, split.shape(k.block), &args, p.arch_major) }
    }
}

#[cfg(test)]
mod tests;
