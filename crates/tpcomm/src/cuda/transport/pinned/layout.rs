//! Where everything lives inside one rank's pinned host area, and how a
//! message is cut into chunks (the blocks that carry them are
//! `launch_shape`'s). Pure arithmetic, unit-tested.

use crate::cuda::launch_shape::{self, Asked, Split};
/// The block rules of the chunked kernel, `launch_shape`'s.
pub use crate::cuda::launch_shape::{MID_CONSUMERS, MID_MAX, MID_PRODUCERS};

/// Largest message the one-pass (delta) kernel carries; bigger ones go
/// chunked. Its traffic is the message's bytes once each way, so it stays
/// ahead of the chunked kernel past 1 MiB; its cost is device memory for the
/// shadows (2 x world x this) and pinned host memory for its two buffers.
pub const DELTA_CAP: usize = 2 << 20;
/// Largest message `Algo::Auto` sends through the delta kernel when no
/// selection is consulted (the buffers' size still applies): on 2 x H200
/// with the host path forced delta beat the chunked kernel at every size up
/// to 2 MiB (bench/results/2026-11-30-h200x2-host-delta/).
pub const AUTO_ONE_PASS_MAX: usize = 2 << 20;
/// Smallest and largest chunk of the chunked path.
pub const MIN_CHUNK: usize = 16 << 10;
pub const MAX_CHUNK: usize = 256 << 10;

fn round_up(x: usize, a: usize) -> usize {
    x.div_ceil(a) * a
}

/// Byte layout of one rank's host area (identical on every rank). Two halves,
/// picked by the epoch's parity, each holding the chunked data and one
/// 32-bit flag per chunk; after them the delta kernel's two buffers (the
/// one-pass region), picked by the epoch's parity too. The layout is the same
/// for every world size: each rank writes only its own area.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostLayout {
    pub data_offset: usize,
    pub flag_offset: usize,
    /// Flags per half: enough for the largest message in the smallest chunks.
    pub max_chunks: usize,
    /// The delta kernel's first buffer (after both halves); buffer b starts
    /// at `delta_offset + b * delta_cap`.
    pub delta_offset: usize,
    /// Largest message the delta kernel takes: the size of each of its two
    /// buffers.
    pub delta_cap: usize,
    /// This rank's call word (kernels/common.cuh, "call words") for calls
    /// of the half's parity, after the flags; peers read it.
    pub call_offset: usize,
    pub half_stride: usize,
}

impl HostLayout {
    pub fn new(max_bytes: usize) -> Self {
        let data_offset = 0;
        let data_bytes = round_up(max_bytes, 256);
        let flag_offset = data_offset + data_bytes;
        let max_chunks = max_bytes.div_ceil(MIN_CHUNK).max(1);
        let call_offset = round_up(flag_offset + 4 * max_chunks, 8);
        let half_stride = round_up(call_offset + 8, 4096);
        let delta_offset = 2 * half_stride;
        // Whole 512-byte lines (32 vectors), as the buffers were sized
        // when the kernel was measured.
        let delta_cap = round_up(max_bytes.min(DELTA_CAP), 512);
        Self {
            data_offset,
            flag_offset,
            max_chunks,
            delta_offset,
            delta_cap,
            call_offset,
            half_stride,
        }
    }
    /// Bytes after `delta_offset`: the delta kernel's two buffers.
    pub fn one_pass_region(&self) -> usize {
        2 * self.delta_cap
    }
    /// Bytes of one rank's area, rounded to whole pages (it is registered with
    /// the driver, which pins whole pages).
    pub fn area_bytes(&self, page: usize) -> usize {
        round_up(self.delta_offset + self.one_pass_region(), page.max(1))
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

impl ChunkPlan {
    /// The plan's blocks, as `launch_shape` splits them.
    pub fn split(&self) -> Split {
        Split {
            producers: self.producers,
            consumers: self.consumers,
        }
    }
}

/// Overrides of the chunked kernel's plan, for measuring other shapes on a
/// machine (`HostChunkShape::from_env`); `None` keeps the rule of
/// [`chunk_plan`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostChunkShape {
    pub chunk_bytes: Option<usize>,
    pub producers: Option<usize>,
    pub consumers: Option<usize>,
}

impl HostChunkShape {
    /// Reads TPCOMM_HOST_CHUNK (a size, e.g. 64KiB; clamped to 16 KiB-256 KiB
    /// and whole 16 KiB), TPCOMM_HOST_PRODUCERS and TPCOMM_HOST_CONSUMERS
    /// (block counts, at least 1). Unset: the default rule.
    pub fn from_env() -> crate::error::Result<Self> {
        let count =
            |v: &crate::env::Var<crate::env::Count>| -> crate::error::Result<Option<usize>> {
                Ok(v.get()?.map(|n| n as usize))
            };
        let chunk_bytes = crate::env::HOST_CHUNK
            .get()?
            .map(|b| b.as_usize())
            .transpose()?;
        Ok(Self {
            chunk_bytes,
            producers: count(&crate::env::HOST_PRODUCERS)?,
            consumers: count(&crate::env::HOST_CONSUMERS)?,
        })
    }

    /// The block counts it asks for, as `launch_shape` takes them.
    pub fn asked(&self) -> Asked {
        Asked {
            producers: self.producers,
            consumers: self.consumers,
        }
    }
}

/// Messages up to MID_MAX go in chunks of this size.
pub const MID_CHUNK: usize = 128 << 10;

/// Up to MID_MAX: chunks of MID_CHUNK, at most MID_PRODUCERS producers and
/// MID_CONSUMERS consumers (`launch_shape::host_chunked`). A
/// sweep of chunk sizes (16-128 KiB) and producer blocks (4-32) on 2 x H200
/// with the host path forced (bench/results/2026-11-30-h200x2-tune-forward/hx/) found
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
    let group_sms = group_sms.max(2);
    let chunk_rule = if bytes <= MID_MAX {
        MID_CHUNK
    } else {
        bytes.div_ceil(2 * group_sms)
    };
    let chunk_bytes =
        round_up(shape.chunk_bytes.unwrap_or(chunk_rule), MIN_CHUNK).clamp(MIN_CHUNK, MAX_CHUNK);
    let chunks = bytes.div_ceil(chunk_bytes).max(1);
    let Split {
        producers,
        consumers,
    } = launch_shape::host_chunked(bytes, world, sms, chunks, shape.asked());
    ChunkPlan {
        chunk_bytes,
        chunks,
        producers,
        consumers,
    }
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
            let l = HostLayout::new(max);
            assert!(l.data_offset + max <= l.flag_offset);
            assert!(l.data_offset.is_multiple_of(16) && l.flag_offset.is_multiple_of(16));
            assert!(l.flag_offset + 4 * l.max_chunks <= l.half_stride);
            // The delta kernel's two buffers follow the halves and
            // fit the area.
            assert!(l.delta_cap >= max.min(DELTA_CAP));
            assert!(l.delta_cap.is_multiple_of(512));
            assert!(l.half_stride.is_multiple_of(4096));
            assert_eq!(l.delta_offset, 2 * l.half_stride);
            let area = l.area_bytes(4096);
            assert!(l.delta_offset + 2 * l.delta_cap <= area);
            assert!(area.is_multiple_of(4096));
            // Every chunk plan for a message up to max stays within the flags.
            for (world, sms) in [(2, 2usize), (2, 8), (8, 132), (2, 132)] {
                let p = chunk_plan(max, world, sms);
                assert!(p.chunks <= l.max_chunks, "max {max} sms {sms}: {p:?}");
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
        // 4 MiB: 32 chunks, but at most 16 consumers.
        let p = chunk_plan(4 << 20, 2, 132);
        assert_eq!(
            (p.chunk_bytes, p.chunks, p.producers, p.consumers),
            (128 << 10, 32, 16, 16)
        );
        let p = chunk_plan((4 << 20) + 16, 2, 132);
        assert_eq!((p.chunk_bytes, p.producers), (16 << 10, 66));
        // The consumer cap holds up to 4 MiB only: above, the rest of the SMs.
        assert_eq!(chunk_plan((4 << 20) + 16, 2, 132).consumers, 66);
        assert_eq!(chunk_plan(8 << 20, 2, 132).consumers, 66);
        // With 4 ranks at 4 MiB the cap holds too (16 of 32 chunks).
        let p = chunk_plan(4 << 20, 4, 132);
        assert_eq!((p.chunks, p.producers, p.consumers), (32, 16, 16));
    }

    #[test]
    fn chunk_shape_overrides_stay_within_the_sms_and_the_flags() {
        let shape = HostChunkShape {
            chunk_bytes: Some(64 << 10),
            producers: Some(8),
            consumers: Some(16),
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
        };
        let l = HostLayout::new(1 << 20);
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
}
