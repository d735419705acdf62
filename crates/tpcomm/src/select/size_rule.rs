//! The CUDA (P2P) transport's size rule for `Algo::Auto`, used where no
//! tuning table answers. The enum itself is [`crate::algo::Algo`], shared by
//! every transport; each transport resolves `Auto` by its own rule.

use crate::algo::Algo;
use crate::units::ByteSize;

/// The algorithm the CUDA transport's size rule runs for a message of
/// `bytes` among `world` ranks (`Auto` resolved, the others unchanged).
pub fn resolve_by_size(algo: Algo, bytes: usize, world: usize) -> Algo {
    match algo {
        Algo::Auto if bytes as u64 <= auto_oneshot_max(world).bytes() => Algo::OneShot,
        Algo::Auto => Algo::TwoShot,
        a => a,
    }
}

/// Messages up to this size go one-shot under `Algo::Auto`, a size rule until
/// tuning tables exist. For 2 ranks: on 2 x H200 one-shot was faster up to
/// 1 MiB, even at 2 MiB, and two-shot faster from 4 MiB
/// (crates/tpcomm/src/select/testdata/2026-11-30-h200x2-v4-*).
/// One-shot moves (world - 1) times the message out of each rank, so with more
/// ranks the crossing comes sooner; the 256 KiB used there is a guess, not a
/// measurement (only 2-GPU machines were available).
pub fn auto_oneshot_max(world: usize) -> ByteSize {
    if world <= 2 {
        ByteSize::mib(1)
    } else {
        ByteSize::kib(256)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_picks_one_shot_up_to_the_threshold_and_two_shot_above() {
        assert_eq!(auto_oneshot_max(2), ByteSize::mib(1));
        for world in [2, 4, 8] {
            let t = auto_oneshot_max(world).bytes() as usize;
            assert_eq!(resolve_by_size(Algo::Auto, t, world), Algo::OneShot);
            assert_eq!(resolve_by_size(Algo::Auto, t + 2, world), Algo::TwoShot);
            assert_eq!(resolve_by_size(Algo::TwoShot, 16, world), Algo::TwoShot);
            assert_eq!(resolve_by_size(Algo::OneShot, t * 8, world), Algo::OneShot);
        }
    }
}
