//! Which host-path kernel runs a call: the algorithm asked for, the message
//! size, and the kernel choices read from the environment at creation.

use super::layout::AUTO_LL_MAX;
use crate::algo::Algo;
use crate::error::{Error, Result};

/// The kernel a host-path all-reduce runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostAlgo {
    /// Plain data pushed into every peer's receive slots, which hold a
    /// sentinel until it lands: one pass, the message's bytes.
    Push,
    /// Data beside the epoch in every 8-byte word: one pass, twice the bytes.
    Ll,
    /// Plain data with a flag per 512-byte line, written by the warp after a
    /// fence: every thread both writes and reads.
    Lines,
    /// Plain data in chunks with a flag each, producer and consumer blocks.
    Chunked,
}

impl HostAlgo {
    pub fn name(self) -> &'static str {
        match self {
            HostAlgo::Push => "host-push",
            HostAlgo::Ll => "host-ll",
            HostAlgo::Lines => "host-lines",
            HostAlgo::Chunked => "host-chunked",
        }
    }
}

/// Largest message `TwoShot` sends as lines (chunks above) unless
/// TPCOMM_HOST_LINES_MAX says otherwise.
pub const LINES_MAX: usize = 64 << 20;

/// The kernel choices of a communicator: which one-pass kernel `OneShot`
/// runs (push, or LL words with TPCOMM_HOST_SMALL=ll) and up to which size
/// `TwoShot` runs lines rather than chunks (TPCOMM_HOST_LINES_MAX, a size;
/// 0: always chunks). Both exist for measuring one kernel against another on
/// a machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelChoice {
    pub small: HostAlgo,
    pub lines_max: usize,
}

impl Default for KernelChoice {
    fn default() -> Self {
        Self {
            small: HostAlgo::Push,
            lines_max: LINES_MAX,
        }
    }
}

impl KernelChoice {
    pub fn from_env() -> Result<Self> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let small = match var("TPCOMM_HOST_SMALL").as_deref().map(str::trim) {
            None | Some("push") => HostAlgo::Push,
            Some("ll") => HostAlgo::Ll,
            Some(other) => {
                return Err(Error::invalid(
                    "TPCOMM_HOST_SMALL",
                    format!("{other:?} (expected push or ll, or unset it)"),
                ))
            }
        };
        let lines_max = match var("TPCOMM_HOST_LINES_MAX") {
            None => LINES_MAX,
            Some(v) => v
                .parse::<crate::units::ByteSize>()
                .map_err(|e| {
                    Error::invalid(
                        "TPCOMM_HOST_LINES_MAX",
                        format!("{e} (a size such as 8MiB, 0 for chunks only)"),
                    )
                })?
                .as_usize()?,
        };
        Ok(Self { small, lines_max })
    }

    /// `OneShot` asks for the one-pass kernel, `TwoShot` for lines (chunks
    /// above `lines_max`), `Auto` for the one-pass kernel up to
    /// `AUTO_LL_MAX` and `TwoShot`'s choice above; no one-pass kernel runs
    /// above `ll_cap` (the slots and words are that big).
    pub fn resolve(&self, algo: Algo, bytes: usize, ll_cap: usize) -> HostAlgo {
        let one_pass_max = match algo {
            Algo::OneShot => ll_cap,
            Algo::TwoShot => 0,
            Algo::Auto => AUTO_LL_MAX.min(ll_cap),
        };
        if bytes <= one_pass_max {
            self.small
        } else if bytes <= self.lines_max {
            HostAlgo::Lines
        } else {
            HostAlgo::Chunked
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_pass_kernel_for_small_messages_lines_then_chunks_above() {
        let cap = 1 << 20;
        for small in [HostAlgo::Push, HostAlgo::Ll] {
            let c = KernelChoice {
                small,
                lines_max: 8 << 20,
            };
            assert_eq!(c.resolve(Algo::Auto, 1024, cap), small);
            assert_eq!(c.resolve(Algo::Auto, AUTO_LL_MAX, cap), small);
            assert_eq!(c.resolve(Algo::Auto, AUTO_LL_MAX + 2, cap), HostAlgo::Lines);
            assert_eq!(c.resolve(Algo::OneShot, cap, cap), small);
            // Above the cap the slots and words would not fit the area.
            assert_eq!(c.resolve(Algo::OneShot, cap + 2, cap), HostAlgo::Lines);
            assert_eq!(c.resolve(Algo::TwoShot, 16, cap), HostAlgo::Lines);
            assert_eq!(c.resolve(Algo::TwoShot, 8 << 20, cap), HostAlgo::Lines);
            assert_eq!(
                c.resolve(Algo::TwoShot, (8 << 20) + 2, cap),
                HostAlgo::Chunked
            );
            // A small communicator's cap bounds Auto too.
            assert_eq!(c.resolve(Algo::Auto, 4096, 2048), HostAlgo::Lines);
        }
        // lines_max 0: chunks for everything above the one-pass kernel.
        let c = KernelChoice {
            small: HostAlgo::Push,
            lines_max: 0,
        };
        assert_eq!(c.resolve(Algo::TwoShot, 16, cap), HostAlgo::Chunked);
        assert_eq!(c.resolve(Algo::OneShot, 16, cap), HostAlgo::Push);
    }
}
