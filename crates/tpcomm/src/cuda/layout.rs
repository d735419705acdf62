//! Where the slots of every rank live inside a receive area (the blocks a
//! call launches are `launch_shape`'s). Pure arithmetic, unit-tested.

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
    use crate::transport::MAX_WORLD;

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
