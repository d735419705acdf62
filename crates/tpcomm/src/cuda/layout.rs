//! Where the slots of every rank live inside a receive area, and how a call
//! is cut into blocks. Pure arithmetic, unit-tested.

use crate::error::{Error, Result};

pub(super) fn round_up(x: usize, a: usize) -> usize {
    x.div_ceil(a) * a
}

/// Byte layout of one rank's receive area (identical on every rank).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Layout {
    /// One-shot: bytes between the slots of two senders.
    pub slot_stride: usize,
    /// Two-shot: bytes between the slots of two senders.
    pub shard_stride: usize,
    /// Two-shot: where the all-gather slots start inside an epoch buffer.
    pub ag_offset: usize,
    /// Bytes of one epoch buffer; there are two.
    pub epoch_stride: usize,
}

impl Layout {
    pub fn new(max_bytes: usize, world: usize) -> Self {
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
    pub fn receive_bytes(&self) -> usize {
        2 * self.epoch_stride
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cuda::MAX_WORLD;

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
pub(crate) fn oneshot_block(nvec: usize, sms: usize, max: usize) -> usize {
    let need = nvec.div_ceil(sms.max(1)).div_ceil(32) * 32;
    need.clamp(ONESHOT_MIN_BLOCK.min(max), max)
}

/// Threads per block for the all-reduce kernels: `max` (what every kernel
/// can launch), or TPCOMM_P2P_BLOCK when set (a multiple of 32 from 32 to
/// `max`), for measuring other shapes: fewer threads per block spread a
/// message over more SMs.
pub(super) fn block_from_env(max: u32) -> Result<u32> {
    Ok(block_var(&crate::env::P2P_BLOCK, max)?.unwrap_or(max))
}

/// The block size the variable `name` asks for (a multiple of 32 from 32 to
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
mod block_tests {
    use super::{oneshot_block, parse_block};

    #[test]
    fn oneshot_blocks_spread_over_the_sms_with_one_vector_per_thread() {
        // 132 SMs (H200), blocks of up to 512.
        assert_eq!(oneshot_block(64, 132, 512), 128); // 1 KiB: one block (trimmed to 64 by the caller)
        assert_eq!(oneshot_block(4096, 132, 512), 128); // 64 KiB: 32 blocks
        assert_eq!(oneshot_block(16384, 132, 512), 128); // 256 KiB: 128 blocks
        assert_eq!(oneshot_block(32768, 132, 512), 256); // 512 KiB: 128 blocks of 256
        assert_eq!(oneshot_block(65536, 132, 512), 512); // 1 MiB: 128 blocks of 512
        assert_eq!(oneshot_block(1 << 22, 132, 512), 512); // larger: threads loop
                                                           // A smaller override wins; whole warps always.
        assert_eq!(oneshot_block(65536, 132, 64), 64);
        for nvec in [1usize, 33, 1000, 17_000, 70_000] {
            let b = oneshot_block(nvec, 132, 512);
            assert!(b.is_multiple_of(32) && (128..=512).contains(&b));
            if nvec <= 132 * 512 {
                assert!(nvec.div_ceil(b) <= 132, "{nvec}: {b}");
            }
        }
    }

    #[test]
    fn block_override_takes_whole_warps_within_the_kernels_limit() {
        for name in ["TPCOMM_P2P_BLOCK", "TPCOMM_HOST_BLOCK"] {
            assert_eq!(parse_block(name, "128", 512).unwrap(), 128);
            assert_eq!(parse_block(name, " 512 ", 512).unwrap(), 512);
            for bad in ["0", "16", "100", "1024", "many", "-32"] {
                let e = parse_block(name, bad, 512).unwrap_err().to_string();
                assert!(e.contains(name) && e.contains("512"), "{bad}: {e}");
            }
        }
    }
}
