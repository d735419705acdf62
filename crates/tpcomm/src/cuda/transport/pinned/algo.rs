//! Which kernel a host-path all-reduce runs (the one-pass delta kernel or
//! the chunked one), and the device bytes the delta kernel's shadows take.

use super::layout::AUTO_ONE_PASS_MAX;
use crate::algo::Algo;

/// The kernel a host-path all-reduce runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostAlgo {
    /// Plain data written once into the own area, every element differing
    /// from what was there before (shadows in device memory say what): one
    /// pass, the message's bytes, no emptying.
    Delta,
    /// Plain data in chunks with a flag each, producer and consumer blocks.
    Chunked,
}

impl HostAlgo {
    pub fn name(self) -> &'static str {
        match self {
            HostAlgo::Delta => "host-delta",
            HostAlgo::Chunked => "host-chunked",
        }
    }
}

/// Device bytes of the delta kernel's shadows: two buffers of every rank,
/// `delta_cap` each, in whole allocation granules.
pub fn delta_shadow_bytes(world: usize, delta_cap: usize, granularity: usize) -> usize {
    let g = granularity.max(1);
    (2 * world * delta_cap).div_ceil(g) * g
}

/// `OneShot` asks for the one-pass (delta) kernel, `TwoShot` for chunks,
/// `Auto` for the delta kernel up to `AUTO_ONE_PASS_MAX`; it is never used
/// above `cap`, its largest message (`HostLayout::delta_cap`: its buffers
/// are that big).
pub fn resolve(algo: Algo, bytes: usize, cap: usize) -> HostAlgo {
    let one_pass_max = match algo {
        Algo::OneShot => cap,
        Algo::TwoShot => 0,
        Algo::Auto => AUTO_ONE_PASS_MAX.min(cap),
    };
    if bytes > one_pass_max {
        HostAlgo::Chunked
    } else {
        HostAlgo::Delta
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cuda::transport::pinned::layout::HostLayout;

    #[test]
    fn auto_takes_the_delta_kernel_for_small_messages_and_chunks_above() {
        let cap = AUTO_ONE_PASS_MAX;
        let one = HostAlgo::Delta;
        assert_eq!(resolve(Algo::Auto, 1024, cap), one);
        assert_eq!(resolve(Algo::Auto, AUTO_ONE_PASS_MAX, cap), one);
        assert_eq!(
            resolve(Algo::Auto, AUTO_ONE_PASS_MAX + 2, cap),
            HostAlgo::Chunked
        );
        assert_eq!(resolve(Algo::OneShot, cap, cap), one);
        // Above the cap the words would not fit the buffers.
        assert_eq!(resolve(Algo::OneShot, cap + 2, cap), HostAlgo::Chunked);
        assert_eq!(resolve(Algo::TwoShot, 16, cap), HostAlgo::Chunked);
        // A small communicator's cap bounds Auto too.
        assert_eq!(resolve(Algo::Auto, 4096, 2048), HostAlgo::Chunked);
    }

    #[test]
    fn delta_buffers_hold_two_mib() {
        let l = HostLayout::new(64 << 20);
        assert_eq!(l.delta_cap, 2 << 20);
        // Two buffers after the halves, whatever the world size.
        assert_eq!(l.one_pass_region(), 4 << 20);
        assert_eq!(HostLayout::new(1000).one_pass_region(), 2 * 1024);
        // Shadows: 2 buffers x 2 ranks x 2 MiB, whole 2 MiB granules.
        assert_eq!(delta_shadow_bytes(2, l.delta_cap, 2 << 20), 8 << 20);
        assert_eq!(delta_shadow_bytes(2, 1000, 2 << 20), 2 << 20);
    }
}
