//! Which kernel runs an all-reduce, and the size rule of `Algo::Auto`.

use crate::error::{Error, Result};
use crate::units::ByteSize;

/// Which kernel runs an all-reduce.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Algo {
    /// Every rank pushes its whole input to every peer, then reduces locally.
    OneShot,
    /// Reduce-scatter then all-gather: each rank moves 2(w-1)/w of the message.
    TwoShot,
    /// One-shot up to [`auto_oneshot_max`] for the world size, two-shot above.
    Auto,
}

impl Algo {
    /// The algorithm that runs a message of `bytes` among `world` ranks
    /// (`Auto` resolved).
    pub fn resolve(self, bytes: usize, world: usize) -> Algo {
        match self {
            Algo::Auto if bytes as u64 <= auto_oneshot_max(world).bytes() => Algo::OneShot,
            Algo::Auto => Algo::TwoShot,
            a => a,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Algo::OneShot => "one-shot",
            Algo::TwoShot => "two-shot",
            Algo::Auto => "auto",
        }
    }
}

impl std::str::FromStr for Algo {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "one-shot" | "oneshot" => Ok(Algo::OneShot),
            "two-shot" | "twoshot" => Ok(Algo::TwoShot),
            "auto" => Ok(Algo::Auto),
            other => Err(Error::invalid(
                "algorithm",
                format!("{other:?} (expected one-shot, two-shot or auto)"),
            )),
        }
    }
}

/// Messages up to this size go one-shot under `Algo::Auto`, a size rule until
/// tuning tables exist. For 2 ranks: on 2 x H200 one-shot was faster up to
/// 1 MiB, even at 2 MiB, and two-shot faster from 4 MiB
/// (bench/results/2026-11-30-h200x2-v4-*).
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
            assert_eq!(Algo::Auto.resolve(t, world), Algo::OneShot);
            assert_eq!(Algo::Auto.resolve(t + 2, world), Algo::TwoShot);
            assert_eq!(Algo::TwoShot.resolve(16, world), Algo::TwoShot);
            assert_eq!(Algo::OneShot.resolve(t * 8, world), Algo::OneShot);
        }
    }
}
