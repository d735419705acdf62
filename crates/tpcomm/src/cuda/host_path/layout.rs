//! Where everything lives inside one rank's pinned host area, and how a
//! message is cut into chunks and blocks. Pure arithmetic, unit-tested.

/// Largest message the one-pass kernels (delta words, push slots, LL words) carry; bigger
/// ones go chunked. Push keeps three buffers of slots and LL words take twice
/// the message size, so it is capped well below the communicator's maximum.
pub const LL_CAP: usize = 1 << 20;
/// Largest message the delta kernel carries. Its traffic is the message's
/// bytes once each way, so it stays ahead of the chunked kernel past 1 MiB;
/// its cost is device memory for the shadows (2 x world x this) and pinned
/// host memory for its two buffers.
pub const DELTA_CAP: usize = 2 << 20;
/// Largest message `Algo::Auto` sends through the one-pass kernel when no
/// selection is consulted (each kernel's own cap still applies: 1 MiB for
/// push and LL): on 2 x H200 with the host path forced delta beat the
/// chunked kernel at every size up to 2 MiB
/// (bench/results/2026-11-30-session4/).
pub const AUTO_ONE_PASS_MAX: usize = 2 << 20;
/// Smallest and largest chunk of the chunked path.
pub const MIN_CHUNK: usize = 16 << 10;
pub const MAX_CHUNK: usize = 256 << 10;

/// Buffers the push kernel rotates through (host_allreduce.cu says why three).
pub const PUSH_BUFFERS: usize = 3;

fn round_up(x: usize, a: usize) -> usize {
    x.div_ceil(a) * a
}

/// Byte layout of one rank's host area (identical on every rank). Two halves,
/// picked by the epoch's parity, each holding the LL words, the chunked data
/// and one 32-bit flag per chunk; after them the one-pass region: the delta
/// kernel's two buffers, or the push kernel's three buffers, each with one
/// receive slot per peer (written by that peer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostLayout {
    /// Largest message the push and LL kernels take (bytes of data; LL
    /// words take twice as many, a push slot as many).
    pub ll_cap: usize,
    pub data_offset: usize,
    pub flag_offset: usize,
    /// Flags per half: enough for the largest message in the smallest chunks.
    pub max_chunks: usize,
    /// First push buffer (after both halves); slot k (k < world - 1) of
    /// buffer b starts at `push_offset + b * push_bytes + k * ll_cap`.
    pub push_offset: usize,
    /// Bytes of one push buffer (all its slots).
    pub push_bytes: usize,
    /// Largest message the delta kernel takes; its two buffers of this
    /// size share the push buffers' region (starting at `push_offset`).
    pub delta_cap: usize,
    pub half_stride: usize,
}

impl HostLayout {
    pub fn new(max_bytes: usize, world: usize) -> Self {
        // Whole groups of 32 vectors: the kernel interleaves the LL halves per group.
        let ll_cap = round_up(max_bytes.min(LL_CAP), 512);
        let data_offset = 2 * ll_cap;
        let data_bytes = round_up(max_bytes, 256);
        let flag_offset = data_offset + data_bytes;
        let max_chunks = max_bytes.div_ceil(MIN_CHUNK).max(1);
        let half_stride = round_up(flag_offset + 4 * max_chunks, 4096);
        // Push slots carry plain data, as many bytes as the LL cap.
        let push_offset = 2 * half_stride;
        let push_bytes = world.saturating_sub(1).max(1) * ll_cap;
        let delta_cap = round_up(max_bytes.min(DELTA_CAP), 512);
        Self {
            ll_cap,
            data_offset,
            flag_offset,
            max_chunks,
            push_offset,
            push_bytes,
            delta_cap,
            half_stride,
        }
    }
    /// Bytes after `push_offset`: the push buffers or the delta kernel's
    /// two buffers, whichever is larger (a communicator uses one of them).
    pub fn one_pass_region(&self) -> usize {
        (PUSH_BUFFERS * self.push_bytes).max(2 * self.delta_cap)
    }
    /// Bytes of one rank's area, rounded to whole pages (it is registered with
    /// the driver, which pins whole pages).
    pub fn area_bytes(&self, page: usize) -> usize {
        round_up(self.push_offset + self.one_pass_region(), page.max(1))
    }
}

/// How the chunked kernel splits a message of `bytes` over at most `sms`
/// blocks of `block` threads among `world` ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkPlan {
    pub chunk_bytes: usize,
    pub chunks: usize,
    /// Blocks that copy the input to host memory.
    pub producers: u32,
    /// Blocks that wait, read the peers' chunks and reduce.
    pub consumers: u32,
}

/// Overrides of the chunked kernel's plan, for measuring other shapes on a
/// machine (`HostChunkShape::from_env`); `None` keeps the rule of
/// [`chunk_plan`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostChunkShape {
    pub chunk_bytes: Option<usize>,
    pub producers: Option<usize>,
    pub consumers: Option<usize>,
    /// One system fence per chunk, by the thread that writes the flag after
    /// a block barrier (the default), or one per thread
    /// (TPCOMM_HOST_FENCE=thread). One per chunk was 3-8% faster from 64 KiB
    /// to 64 MiB on 2 x H200 (bench/results/2026-11-30-session4/).
    pub fence_once: bool,
}

impl Default for HostChunkShape {
    fn default() -> Self {
        Self {
            chunk_bytes: None,
            producers: None,
            consumers: None,
            fence_once: true,
        }
    }
}

impl HostChunkShape {
    /// Reads TPCOMM_HOST_CHUNK (a size, e.g. 64KiB; clamped to 16 KiB-256 KiB
    /// and whole 16 KiB), TPCOMM_HOST_PRODUCERS and TPCOMM_HOST_CONSUMERS
    /// (block counts, at least 1) and TPCOMM_HOST_FENCE (`block` or
    /// `thread`). Unset: the default rule.
    pub fn from_env() -> crate::error::Result<Self> {
        use crate::error::Error;
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let count =
            |v: &crate::env::Var<crate::env::Count>| -> crate::error::Result<Option<usize>> {
                Ok(v.get()?.map(|n| n as usize))
            };
        let chunk_bytes = crate::env::HOST_CHUNK
            .get()?
            .map(|b| b.as_usize())
            .transpose()?;
        let fence_once = match var("TPCOMM_HOST_FENCE").as_deref().map(str::trim) {
            None | Some("") | Some("block") => true,
            Some("thread") => false,
            Some(other) => {
                return Err(Error::invalid(
                    "TPCOMM_HOST_FENCE",
                    format!("{other:?} (expected thread or block, or unset it)"),
                ))
            }
        };
        Ok(Self {
            chunk_bytes,
            producers: count(&crate::env::HOST_PRODUCERS)?,
            consumers: count(&crate::env::HOST_CONSUMERS)?,
            fence_once,
        })
    }
}

/// Messages up to this size go in MID_CHUNK chunks with at most MID_PRODUCERS
/// producer blocks.
pub const MID_MAX: usize = 4 << 20;
pub const MID_CHUNK: usize = 128 << 10;
pub const MID_PRODUCERS: usize = 16;

/// Up to MID_MAX: chunks of MID_CHUNK and at most MID_PRODUCERS producers. A
/// sweep of chunk sizes (16-128 KiB) and producer blocks (4-32) on 2 x H200
/// with the host path forced (bench/results/2026-11-30-session2/hx/) found
/// the per-chunk cost (fence, flag, the consumer's poll across PCIe)
/// dominating there: 128 KiB chunks took 1 MiB from 108 to 77 us and 4 MiB
/// from 272 to 204 us against the rule below. Above: chunks sized so every
/// block gets about two of them (pipelining within a block), between
/// MIN_CHUNK and MAX_CHUNK, which stayed best from 16 to 64 MiB. Producers
/// write one copy of the message, consumers read world - 1 copies, so blocks
/// are split in that proportion (at least one of each).
pub fn chunk_plan(bytes: usize, world: usize, sms: usize) -> ChunkPlan {
    chunk_plan_with(bytes, world, sms, sms, &HostChunkShape::default())
}

/// [`chunk_plan`] with the overrides of `shape`; the result always fits
/// the SMs (producers + consumers <= sms, each at least 1) and the flags.
/// Chunks are sized from `group_sms`, the smallest SM count of the group, so
/// every rank cuts the same chunks (their flags name byte ranges); blocks
/// come from this GPU's `sms`.
pub fn chunk_plan_with(
    bytes: usize,
    world: usize,
    sms: usize,
    group_sms: usize,
    shape: &HostChunkShape,
) -> ChunkPlan {
    let sms = sms.max(2);
    let group_sms = group_sms.max(2);
    let world = world.max(2);
    let split = (sms / world).max(1);
    let (chunk_rule, producers_rule) = if bytes <= MID_MAX {
        (MID_CHUNK, split.min(MID_PRODUCERS))
    } else {
        (bytes.div_ceil(2 * group_sms), split)
    };
    let chunk_bytes =
        round_up(shape.chunk_bytes.unwrap_or(chunk_rule), MIN_CHUNK).clamp(MIN_CHUNK, MAX_CHUNK);
    let chunks = bytes.div_ceil(chunk_bytes).max(1);
    let producers = shape.producers.unwrap_or(producers_rule).clamp(1, sms - 1);
    let consumers = shape
        .consumers
        .unwrap_or(sms - producers)
        .clamp(1, sms - producers);
    let (producers, consumers) = (producers.min(chunks), consumers.min(chunks));
    ChunkPlan {
        chunk_bytes,
        chunks,
        producers: producers as u32,
        consumers: consumers as u32,
    }
}

/// Blocks of the LL kernel: one 16-byte vector per thread where the SMs
/// allow, at most one block per SM (blocks wait on peers, so all must be
/// resident).
pub fn ll_blocks(bytes: usize, block: usize, sms: usize) -> u32 {
    let nvec = bytes.div_ceil(16);
    nvec.div_ceil(block.max(1)).clamp(1, sms.max(1)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_regions_do_not_overlap_and_fit_the_largest_message() {
        for max in [
            1usize,
            2,
            16,
            1000,
            64 << 10,
            1 << 20,
            (1 << 20) + 2,
            64 << 20,
        ] {
            for world in 2..=8 {
                let l = HostLayout::new(max, world);
                assert!(l.ll_cap >= max.min(LL_CAP));
                assert!(l.ll_cap.is_multiple_of(512));
                // LL words: 2 bytes of area per byte of data.
                assert!(2 * l.ll_cap <= l.data_offset);
                assert!(l.data_offset + max <= l.flag_offset);
                assert!(l.data_offset.is_multiple_of(16) && l.flag_offset.is_multiple_of(16));
                assert!(l.flag_offset + 4 * l.max_chunks <= l.half_stride);
                // The delta kernel's two buffers fit the region.
                assert!(l.delta_cap >= max.min(DELTA_CAP) && l.delta_cap >= l.ll_cap);
                assert!(l.delta_cap.is_multiple_of(512));
                assert!(l.push_offset + 2 * l.delta_cap <= l.area_bytes(4096));
                assert!(l.push_offset + PUSH_BUFFERS * l.push_bytes <= l.area_bytes(4096));
                assert!(l.half_stride.is_multiple_of(4096));
                // Three push buffers after the halves, one slot per peer
                // each, each slot as big as the LL cap.
                assert_eq!(l.push_offset, 2 * l.half_stride);
                assert_eq!(l.push_bytes, (world - 1) * l.ll_cap);
                let area = l.area_bytes(4096);
                assert!(area >= l.push_offset + PUSH_BUFFERS * l.push_bytes);
                assert!(area.is_multiple_of(4096));
                // Every chunk plan for a message up to max stays within the flags.
                for sms in [2usize, 8, 132] {
                    let p = chunk_plan(max, 2, sms);
                    assert!(p.chunks <= l.max_chunks, "max {max} sms {sms}: {p:?}");
                }
            }
        }
    }

    #[test]
    fn chunk_plan_covers_the_message_in_bounded_chunks() {
        for bytes in [16usize, 1024, 64 << 10, 1 << 20, 16 << 20, (64 << 20) + 48] {
            for world in 2..=8 {
                for sms in [2usize, 16, 132] {
                    let p = chunk_plan(bytes, world, sms);
                    assert!(p.chunk_bytes.is_multiple_of(16));
                    assert!((MIN_CHUNK..=MAX_CHUNK).contains(&p.chunk_bytes));
                    assert!(p.chunks * p.chunk_bytes >= bytes);
                    assert!((p.chunks - 1) * p.chunk_bytes < bytes);
                    assert!(p.producers >= 1 && p.consumers >= 1);
                    assert!((p.producers + p.consumers) as usize <= sms);
                    assert!(p.producers as usize <= p.chunks && p.consumers as usize <= p.chunks);
                }
            }
        }
        // 64 MiB on an H200 (132 SMs), 2 ranks: 256 KiB chunks, SMs split in half.
        let p = chunk_plan(64 << 20, 2, 132);
        assert_eq!(
            (p.chunk_bytes, p.chunks, p.producers, p.consumers),
            (256 << 10, 256, 66, 66)
        );
        // More ranks: consumers read world - 1 copies, so they get more blocks.
        let p = chunk_plan(64 << 20, 4, 132);
        assert_eq!((p.producers, p.consumers), (33, 99));
        // Up to 4 MiB: 128 KiB chunks, at most 16 producers (and no block
        // without a chunk).
        let p = chunk_plan(1 << 20, 2, 132);
        assert_eq!(
            (p.chunk_bytes, p.chunks, p.producers, p.consumers),
            (128 << 10, 8, 8, 8)
        );
        let p = chunk_plan(4 << 20, 2, 132);
        assert_eq!(
            (p.chunk_bytes, p.chunks, p.producers, p.consumers),
            (128 << 10, 32, 16, 32)
        );
        let p = chunk_plan((4 << 20) + 16, 2, 132);
        assert_eq!((p.chunk_bytes, p.producers), (16 << 10, 66));
    }

    #[test]
    fn chunk_shape_overrides_stay_within_the_sms_and_the_flags() {
        let shape = HostChunkShape {
            chunk_bytes: Some(64 << 10),
            producers: Some(8),
            consumers: Some(16),
            fence_once: false,
        };
        let p = chunk_plan_with(4 << 20, 2, 132, 132, &shape);
        assert_eq!(
            (p.chunk_bytes, p.chunks, p.producers, p.consumers),
            (64 << 10, 64, 8, 16)
        );
        // Out-of-range asks are clamped: chunks to 16 KiB..256 KiB, blocks to the SMs.
        let wild = HostChunkShape {
            chunk_bytes: Some(1),
            producers: Some(1000),
            consumers: Some(1000),
            fence_once: true,
        };
        let l = HostLayout::new(1 << 20, 2);
        let p = chunk_plan_with(1 << 20, 2, 132, 132, &wild);
        assert_eq!(p.chunk_bytes, MIN_CHUNK);
        assert!(p.chunks <= l.max_chunks);
        assert!(p.producers >= 1 && p.consumers >= 1);
        assert!((p.producers + p.consumers) as usize <= 132);
        let p = chunk_plan_with(
            64 << 20,
            2,
            132,
            132,
            &HostChunkShape {
                chunk_bytes: Some(8 << 20),
                ..Default::default()
            },
        );
        assert_eq!(p.chunk_bytes, MAX_CHUNK);
        // Unset: exactly the default rule.
        assert_eq!(
            chunk_plan_with(3 << 20, 3, 132, 132, &HostChunkShape::default()),
            chunk_plan(3 << 20, 3, 132)
        );
    }

    #[test]
    fn ranks_on_gpus_with_different_sm_counts_cut_the_same_chunks() {
        // An 82-SM and a 128-SM GPU in one group: the chunk size comes from
        // the group's smallest count, the blocks from each GPU's own.
        for bytes in [5usize << 20, 16 << 20, 64 << 20] {
            let small = chunk_plan_with(bytes, 2, 82, 82, &HostChunkShape::default());
            let big = chunk_plan_with(bytes, 2, 128, 82, &HostChunkShape::default());
            assert_eq!(small.chunk_bytes, big.chunk_bytes, "{bytes}");
            assert_eq!(small.chunks, big.chunks, "{bytes}");
            assert!((big.producers + big.consumers) as usize <= 128);
            assert!((small.producers + small.consumers) as usize <= 82);
        }
        // Without the group count they would differ (what the record fixes).
        assert_ne!(
            chunk_plan(16 << 20, 2, 82).chunk_bytes,
            chunk_plan(16 << 20, 2, 128).chunk_bytes
        );
    }

    #[test]
    fn ll_blocks_give_one_vector_per_thread_up_to_one_block_per_sm() {
        assert_eq!(ll_blocks(16, 512, 132), 1);
        assert_eq!(ll_blocks(64 << 10, 512, 132), 8);
        assert_eq!(ll_blocks(1 << 20, 512, 132), 128);
        assert_eq!(ll_blocks(4 << 20, 512, 132), 132);
    }
}
