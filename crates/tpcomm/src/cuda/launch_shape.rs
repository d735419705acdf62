//! Launch shapes: how many blocks of how many threads (and bytes of dynamic
//! shared memory) every kernel family of the library launches with. One pure
//! function per family, unit-tested without a GPU; the launching code asks
//! here and nowhere else.
//!
//! What the functions take was fixed before the call: the family's largest
//! block (`loader::common_block`: what every kernel of the family can launch,
//! whole warps), the most blocks a rank may launch ([`grid_cap`]: one per SM,
//! or this rank's share of the GPU when ranks share it) and the SM count; and
//! the call's size. The overrides for measuring other shapes on a machine
//! (TPCOMM_P2P_BLOCK, TPCOMM_HOST_BLOCK, TPCOMM_QUANT_BLOCKS,
//! TPCOMM_HOST_PRODUCERS, TPCOMM_HOST_CONSUMERS) come in as arguments too.
//!
//! The rules every shape keeps (the tests check them over many inputs):
//! - never a zero grid or a zero block;
//! - blocks of whole warps (the quantized kernels: a power of two), at most
//!   the family's largest block;
//! - at most the grid cap for the kernels whose blocks wait on peers (every
//!   block must be resident at once), and at most one block per unit of work
//!   (but for the spare warp or block a checking call may get:
//!   [`with_idle_checker`]);
//! - no dynamic shared memory (every kernel sizes its shared arrays statically).

use super::share::Sharing;
use crate::algo::Collective;
use crate::error::{Error, Result};
use crate::quant::model::CHUNK_ELEMS;

/// One launch: `grid` blocks of `block` threads, `shared_bytes` of dynamic
/// shared memory per block (0 for every family today).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub grid: u32,
    pub block: u32,
    pub shared_bytes: u32,
}

impl Shape {
    /// `grid` blocks of `block` threads, no dynamic shared memory.
    pub const fn new(grid: u32, block: u32) -> Self {
        Shape {
            grid,
            block,
            shared_bytes: 0,
        }
    }

    /// Threads of the whole grid.
    pub fn threads(&self) -> u64 {
        u64::from(self.grid) * u64::from(self.block)
    }
}

/// The most blocks one rank's grid may have: one per SM when the device is
/// its own, else its share of what the device holds at once.
/// `blocks_per_sm` is the occupancy of the kernels at their largest block
/// (a smaller block never fits fewer blocks per SM).
pub fn grid_cap(sms: usize, blocks_per_sm: usize, sharing: Sharing) -> Result<usize> {
    let k = sharing.ranks_on_device.max(1);
    let capacity = sms * blocks_per_sm;
    let cap = sms.min(capacity / k);
    if cap == 0 {
        return Err(Error::Unsupported(format!(
            "{k} ranks share one GPU, but it holds only {capacity} blocks of tpcomm's kernels at once \
             ({sms} SMs x {blocks_per_sm}); put at most {capacity} ranks on this GPU"
        )));
    }
    Ok(cap)
}

/// Smallest block of the one-shot kernels on a message of many vectors.
/// Measured on 2 x H200 (bench/results/2026-11-30-h200x2-tune-forward/block/): blocks
/// of 128 threads spread over more SMs took 8 KiB from 3.23 to 2.80 us,
/// 64 KiB from 3.48 to 3.33 and 256 KiB from 4.06 to 3.91 against 512;
/// 64 was no better.
const ONESHOT_MIN_BLOCK: usize = 128;

/// Threads per block for a one-shot message of `nvec` vectors: the smallest
/// whole-warp count from ONESHOT_MIN_BLOCK up that covers the message with
/// one vector per thread in at most `sms` blocks, at most `max` (beyond
/// that, threads loop over several vectors).
fn oneshot_block(nvec: usize, sms: usize, max: usize) -> usize {
    let need = nvec.div_ceil(sms.max(1)).div_ceil(32) * 32;
    need.clamp(ONESHOT_MIN_BLOCK.min(max), max)
}

/// Whole warps covering `nvec` 16-byte vectors (at least one warp).
fn warps_for(nvec: usize) -> usize {
    nvec.max(1).div_ceil(32) * 32
}

/// The P2P all-reduce (kernels/allreduce.cu) of `bytes`: at most `cap`
/// blocks, so every block is resident (the kernels wait on peers, never on
/// blocks of their own grid), and no idle warps. One-shot spreads a message
/// over the SMs in blocks of ONESHOT_MIN_BLOCK threads or the fewest more
/// that still give one vector per thread; two-shot takes the full
/// `max_block`. Never more threads a block than the message has vectors
/// (whole warps). Where [`Shape::threads`] covers the message's vectors, the
/// one-vector-per-thread kernel runs.
pub fn p2p_all_reduce(bytes: usize, two_shot: bool, cap: u32, max_block: u32) -> Shape {
    let nvec = bytes.div_ceil(16).max(1);
    let cap = cap.max(1) as usize;
    let block = if two_shot {
        max_block as usize
    } else {
        oneshot_block(nvec, cap, max_block as usize)
    }
    .min(warps_for(nvec)) as u32;
    let grid = nvec.div_ceil(block.max(1) as usize).clamp(1, cap) as u32;
    Shape::new(grid, block)
}

/// `shape` for a call of `bytes` that sends call words, on P2P
/// (kernels/allreduce.cu and collectives.cu) or the host path's one-pass
/// all-reduce (host_allreduce.cu's delta): the grid's last thread checks
/// the peers' words (`is_checker`), and where it would have a vector of the
/// message, its check would follow that vector's round trip (about 0.45 us
/// at 1 KiB on an H100). So where the grid covers the message exactly with
/// one vector per thread, a single block gets one more warp (within
/// `max_block`) and a grid of several one more block (within `cap`); a
/// message the threads loop over, or a launch already at both limits,
/// keeps its shape (its words arrive long before its data).
pub fn with_idle_checker(shape: Shape, bytes: usize, cap: u32, max_block: u32) -> Shape {
    let nvec = bytes.div_ceil(16).max(1) as u64;
    if shape.threads() != nvec {
        return shape;
    }
    if shape.grid == 1 && shape.block + 32 <= max_block {
        Shape::new(1, shape.block + 32)
    } else if shape.grid < cap {
        Shape::new(shape.grid + 1, shape.block)
    } else {
        shape
    }
}

/// The P2P all-gather, reduce-scatter and broadcast (kernels/collectives.cu)
/// of a `bytes` block: one vector per thread in whole warps, at least one
/// warp (a broadcast's token threads are the grid's first `world`
/// threads), at most `max_block`, and at most `cap` blocks.
pub fn p2p_collective(bytes: usize, cap: usize, max_block: u32) -> Shape {
    let nvec = bytes.div_ceil(16).max(1);
    let block = warps_for(nvec).clamp(32, (max_block as usize).max(32)) as u32;
    let grid = nvec.div_ceil(block as usize).clamp(1, cap.max(1)) as u32;
    Shape::new(grid, block)
}

/// Vectors per push piece of the fused kernel when its stores are spread
/// over the grid.
pub(crate) const FUSED_PUSH_VECS: usize = 128;

/// Largest block of both norm kernels (kernels/fused.cu).
pub(crate) const NORM_BLOCK_MAX: u32 = 1024;

/// Threads per block of both norm kernels: one per 16-byte vector of a row
/// (rounded to whole warps), at most NORM_BLOCK_MAX. Both kernels must use
/// the same value so they sum each row's squares in the same order.
fn norm_block(row_vecs: usize) -> u32 {
    (row_vecs.div_ceil(32) * 32).clamp(32, NORM_BLOCK_MAX as usize) as u32
}

/// The fused all-reduce + residual + RMSNorm (kernels/fused.cu) of `rows`
/// rows of `row_vecs` vectors: a block per row (at most `cap`) and, when
/// `spread`, as many more as there are push pieces of FUSED_PUSH_VECS
/// vectors (still at most `cap`).
pub fn fused_rmsnorm(rows: usize, row_vecs: usize, cap: usize, spread: bool) -> Shape {
    let pieces = if spread {
        (rows * row_vecs).div_ceil(FUSED_PUSH_VECS)
    } else {
        0
    };
    let grid = rows.max(pieces).clamp(1, cap.max(1)) as u32;
    Shape::new(grid, norm_block(row_vecs))
}

/// The unfused add + RMSNorm (kernels/fused.cu): a block per row, at most
/// one per SM, of the fused kernel's block.
pub fn add_rmsnorm(rows: usize, row_vecs: usize, sms: usize) -> Shape {
    Shape::new(rows.clamp(1, sms.max(1)) as u32, norm_block(row_vecs))
}

/// The pinned host path's one-pass (delta) all-reduce
/// (kernels/host_allreduce.cu) of `bytes`: blocks of at least
/// ONESHOT_MIN_BLOCK threads spread over the SMs with one vector per thread
/// (as the P2P one-shot), or `asked` (TPCOMM_HOST_BLOCK) threads; never more
/// threads than the message has vectors (whole warps); at most `cap` blocks
/// (they wait on peers, so all must be resident).
pub fn host_delta(bytes: usize, cap: usize, max_block: u32, asked: Option<u32>) -> Shape {
    let nvec = bytes.div_ceil(16).max(1);
    let block = asked
        .unwrap_or_else(|| oneshot_block(nvec, cap, max_block as usize) as u32)
        .min(warps_for(nvec) as u32);
    let grid = nvec.div_ceil(block.max(1) as usize).clamp(1, cap.max(1)) as u32;
    Shape::new(grid, block)
}

/// The pinned host path's chunked kernels (all-reduce and collectives): the
/// grid is split into blocks that copy chunks to host memory (producers,
/// the grid's first blocks) and blocks that read peers' chunks (consumers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Split {
    pub producers: u32,
    pub consumers: u32,
}

impl Split {
    /// The launch: both kinds of block, of the family's `block` threads.
    pub fn shape(self, block: u32) -> Shape {
        Shape::new(self.producers + self.consumers, block)
    }
}

/// Producer and consumer counts asked for by TPCOMM_HOST_PRODUCERS and
/// TPCOMM_HOST_CONSUMERS (for measuring); `None` keeps the rule.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Asked {
    pub producers: Option<usize>,
    pub consumers: Option<usize>,
}

/// Messages up to this size go in MID_CHUNK chunks (transport::pinned::layout) with
/// at most MID_PRODUCERS producer and MID_CONSUMERS consumer blocks.
pub const MID_MAX: usize = 4 << 20;
/// See [`MID_MAX`] and [`host_chunked`].
pub const MID_PRODUCERS: usize = 16;
/// With a consumer per chunk (32 at 4 MiB) the 4 MiB call of 2 ranks
/// sharing one H200 took 411-419 us, with 16 or 8 a rank 357-364 us; at 8
/// MiB 16 were equal to the rule's 66 and at 16 MiB 3% slower
/// (bench/results/host-consumers.md; shared-GPU runs only).
pub const MID_CONSUMERS: usize = 16;

/// Blocks of the chunked all-reduce of `bytes` cut into `chunks` chunks
/// among `world` ranks, within `cap` blocks (at least 2 assumed): up to
/// MID_MAX at most MID_PRODUCERS producers and MID_CONSUMERS consumers;
/// above, producers write one copy of the message and consumers read
/// world - 1 copies, so the grid is split in that proportion. At least one of
/// each, producers + consumers at most `cap`, neither more than the chunks.
/// `asked` replaces the rule, within the same limits.
pub fn host_chunked(bytes: usize, world: usize, cap: usize, chunks: usize, asked: Asked) -> Split {
    let sms = cap.max(2);
    let world = world.max(2);
    let split = (sms / world).max(1);
    let (producers_rule, consumers_cap) = if bytes <= MID_MAX {
        (split.min(MID_PRODUCERS), MID_CONSUMERS)
    } else {
        (split, usize::MAX)
    };
    let producers = asked.producers.unwrap_or(producers_rule).clamp(1, sms - 1);
    let consumers = asked
        .consumers
        .unwrap_or((sms - producers).min(consumers_cap))
        .clamp(1, sms - producers);
    let chunks = chunks.max(1);
    Split {
        producers: producers.min(chunks) as u32,
        consumers: consumers.min(chunks) as u32,
    }
}

/// Reading blocks of the host-path all-gather per GPU (split among the
/// ranks sharing it): every one of them streams peers' chunks from pinned
/// host memory across the GPU's one link. With one reading block per chunk
/// (up to 66 per rank), the host-path all-gather slowed about fivefold per
/// byte past 20-24 MiB of output per rank; 4 or 8 per rank kept 20-22 GB/s
/// from 8 to 64 MiB (one H100, 2 ranks sharing it,
/// bench/results/2026-12-02-h100-h200-plan-quant/). Why many readers hurt
/// was not found.
pub const ALL_GATHER_LINK_READERS: usize = 16;

/// Blocks of the host-path all-gather, reduce-scatter and broadcast
/// (kernels/host_collectives.cu) that write `chunks` chunks and read
/// `per_block` chunks a block, within `cap` blocks (at least 2): producers one
/// per chunk up to half the grid, consumers one per chunk of a block (for the
/// all-gather at most its share of [`ALL_GATHER_LINK_READERS`] among the
/// `ranks_on_device`); `asked` replaces the rule, within the grid.
pub fn host_collective(
    what: Collective,
    chunks: usize,
    per_block: usize,
    cap: usize,
    ranks_on_device: usize,
    asked: Asked,
) -> Split {
    let cap = cap.max(2);
    let producers = match asked.producers {
        Some(n) => n.clamp(1, cap - 1).min(chunks.max(1)),
        None => chunks.clamp(1, cap / 2),
    };
    let rule = match what {
        Collective::AllGather => {
            per_block.min((ALL_GATHER_LINK_READERS / ranks_on_device.max(1)).max(1))
        }
        _ => per_block,
    };
    let consumers = asked.consumers.unwrap_or(rule).clamp(1, cap - producers);
    Split {
        producers: producers as u32,
        consumers: consumers as u32,
    }
}

/// Q_BLOCK in kernels/quant.cu (the launch bound).
pub(crate) const QUANT_MAX_BLOCK: u32 = 512;

/// The largest power of two from 32 to `max` (and to QUANT_MAX_BLOCK): the
/// quantized kernels' block (their chunk loop needs a power of two).
pub(crate) fn quant_block(max: u32) -> u32 {
    let mut block = 32u32;
    while block * 2 <= max.min(QUANT_MAX_BLOCK) {
        block *= 2;
    }
    block
}

/// The quantized all-reduce (kernels/quant.cu) of `count` elements whose
/// blocks take `unit` chunks at a time (`quant::STEP_CHUNKS` for one-shot, 1
/// for two-shot): a [`quant_block`] of `max_block`, and at most one block
/// per unit and at most `cap` blocks (the quantized kernels' grid cap, so
/// every block of every rank on the GPU is resident at once: blocks wait on
/// peers' flags). Blocks taking steps (one-shot) are fewer while that keeps
/// half the cap: each gets at least 4 steps, so its sends and sums overlap
/// (8 MiB of bf16 at 2 ranks on an H100: 0.59-0.61x the exact host path
/// against 0.62-0.63x with one block per step, bench/results/quantized.md).
/// Then as few blocks as give the same most steps a block: a call lasts as
/// long as its busiest block, and a block more only adds to the link's
/// traffic (8 MiB: 64 blocks of 4 steps, not 66 of which 8 have 3).
/// `asked` (TPCOMM_QUANT_BLOCKS) replaces that rule, still at most one block
/// per unit and at most `cap`.
pub fn quant(count: usize, unit: usize, cap: u32, max_block: u32, asked: Option<u32>) -> Shape {
    let block = quant_block(max_block);
    let units = count.div_ceil(CHUNK_ELEMS * unit.max(1)).max(1);
    let cap = cap.max(1) as usize;
    let blocks = match asked {
        Some(n) => n as usize,
        None if unit > 1 => {
            // As few blocks as take the same most steps each: no block
            // idles through the last round while the others finish it.
            let first = units.div_ceil(4).max(cap / 2).clamp(1, units.min(cap));
            units.div_ceil(units.div_ceil(first))
        }
        None => units,
    };
    Shape::new(blocks.clamp(1, units.min(cap)) as u32, block)
}

/// The quantized gathered form's local halves (pack and unpack-sum,
/// kernels/quant.cu) on `count` elements: one thread per `octets` octets of
/// elements, whole blocks of `block` threads. An error when the grid would
/// not fit 32 bits.
pub fn quant_local(count: usize, octets: usize, block: u32) -> Result<Shape> {
    let threads = count.div_ceil(8 * octets.max(1)).max(1);
    let grid = u32::try_from(threads.div_ceil(block.max(1) as usize))
        .map_err(|_| Error::invalid("count", format!("{count} elements need too many blocks")))?;
    Ok(Shape::new(grid, block))
}

/// Threads per block of the gathered-block kernels (kernels/gathered.cu).
pub(crate) const GATHERED_BLOCK: u32 = 256;

/// The gathered-block kernels (expand, compact and the reduction of
/// gathered blocks, kernels/gathered.cu) over `items` bytes or elements:
/// one item per thread, at most 4 blocks per SM of `sms` (the threads loop
/// beyond that; these kernels wait on nothing).
pub fn gathered(items: u64, sms: u32) -> Shape {
    let grid = items
        .div_ceil(u64::from(GATHERED_BLOCK))
        .clamp(1, (4 * u64::from(sms)).max(1)) as u32;
    Shape::new(grid, GATHERED_BLOCK)
}

/// Threads per block of the P2P check's kernels (kernels/p2p_check.cu).
pub(crate) const P2P_CHECK_BLOCK: u32 = 256;

/// The P2P check's store and verify kernels (kernels/p2p_check.cu) at
/// `world` ranks: a block per rank's slot.
pub fn p2p_check(world: usize) -> Shape {
    Shape::new(world.max(1) as u32, P2P_CHECK_BLOCK)
}

/// Threads per block for the P2P all-reduce kernels: `max` (what every
/// kernel can launch), or TPCOMM_P2P_BLOCK when set (a multiple of 32 from
/// 32 to `max`), for measuring other shapes: fewer threads per block spread
/// a message over more SMs.
pub(crate) fn p2p_block_from_env(max: u32) -> Result<u32> {
    Ok(block_var(&crate::env::P2P_BLOCK, max)?.unwrap_or(max))
}

/// The block size the variable `var` asks for (a multiple of 32 from 32 to
/// `max`), `None` when unset or empty.
pub(crate) fn block_var(var: &crate::env::Var<crate::env::Count>, max: u32) -> Result<Option<u32>> {
    match var.get()? {
        Some(n) => parse_block(var.name, &n.to_string(), max).map(Some),
        None => Ok(None),
    }
}

fn parse_block(name: &'static str, v: &str, max: u32) -> Result<u32> {
    match v.trim().parse::<u32>() {
        Ok(n) if (32..=max).contains(&n) && n.is_multiple_of(32) => Ok(n),
        _ => Err(Error::invalid(
            name,
            format!("{v:?} (expected a multiple of 32 from 32 to {max}, or unset it)"),
        )),
    }
}

#[cfg(test)]
mod tests;
