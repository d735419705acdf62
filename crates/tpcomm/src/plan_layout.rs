//! What a GPU communicator will allocate, computed without a GPU, for
//! planners (`tpcomm plan memory`) that must subtract it before a server
//! sizes its KV cache. The result is the same [`MemoryReport`] the
//! communicator itself returns (same lines, same allocations), so the two
//! can be compared line by line; `tests/gpu_plan_layout.rs` does that on a
//! GPU.
//!
//! Both transports are computed by their own layout code: the P2P
//! transport's `cuda::layout::Layout` and the host path's [`HostLayout`] and
//! [`delta_shadow_bytes`].

use crate::cuda::transport::pinned::delta_shadow_bytes;
use crate::cuda::transport::pinned::layout::HostLayout;
use crate::error::{Error, Result};
use crate::memory::{GpuAllocations, MemoryLine, MemoryReport};
use crate::transport::MAX_WORLD;
use crate::units::ByteSize;

/// Bytes of the control words of either transport (`CTL_BYTES` in
/// cuda/transport/p2p/comm.rs and cuda/transport/pinned/comm.rs).
pub const CONTROL_BYTES: usize = 256;
/// Bytes of the pinned status word block of either transport (`STATUS_BYTES`).
pub const STATUS_BYTES: usize = 64;
/// Page the host path rounds its area to (`PAGE` in cuda/transport/pinned/comm.rs).
pub const HOST_PAGE: usize = 4096;
/// The driver's recommended allocation granularity on the GPUs this project
/// has measured (H200: 2 MiB); a planner without a GPU assumes it.
pub const DEFAULT_GRANULARITY: usize = 2 << 20;

/// Which GPU transport a plan is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlannedTransport {
    /// Peers' device memory mapped directly (NVLink or PCIe P2P).
    P2p,
    /// Pinned host memory every GPU maps (no P2P). `processes`: one process
    /// per GPU (the report then has a zero-byte line for the peers' mapped
    /// areas).
    Host { processes: bool },
}

fn check(world: usize, max_bytes: usize) -> Result<()> {
    if !(2..=MAX_WORLD).contains(&world) {
        return Err(Error::invalid(
            "world size",
            format!("{world} (the GPU transports take 2 to {MAX_WORLD} ranks)"),
        ));
    }
    if max_bytes == 0 {
        return Err(Error::invalid("max message size", "must be above 0"));
    }
    // Far above any real buffer, and small enough that no layout formula
    // below (a few multiplications by at most 2 x MAX_WORLD) can overflow.
    if max_bytes > 1 << 40 {
        return Err(Error::invalid(
            "max message size",
            format!(
                "{} is above the 1 TiB a plan accepts",
                ByteSize::from_usize(max_bytes)
            ),
        ));
    }
    Ok(())
}

/// Bytes of the P2P transport's receive area (both epoch buffers): the
/// communicator's own `cuda::layout::Layout`, after the bounds check that
/// keeps its arithmetic from overflowing.
pub fn p2p_receive_bytes(max_bytes: usize, world: usize) -> Result<usize> {
    check(world, max_bytes)?;
    Ok(crate::cuda::layout::Layout::new(max_bytes, world).receive_bytes())
}

/// The memory report a communicator of `transport` over `world` ranks with
/// messages up to `max_bytes` returns on `device`, for a driver allocation
/// granularity of `granularity` bytes. The kernel image (loaded once per
/// device, shared) is not known without a GPU and is reported as 0.
pub fn planned_report(
    transport: PlannedTransport,
    world: usize,
    max_bytes: usize,
    granularity: usize,
    device: usize,
) -> Result<MemoryReport> {
    check(world, max_bytes)?;
    if granularity == 0 || !granularity.is_power_of_two() {
        return Err(Error::invalid(
            "allocation granularity",
            format!("{granularity} (a power of two above 0)"),
        ));
    }
    let gpu = |allocations: Vec<usize>| GpuAllocations {
        device,
        allocations: allocations.into_iter().map(ByteSize::from_usize).collect(),
        granularity: ByteSize::from_usize(granularity),
        kernel_image: ByteSize::b(0),
    };
    match transport {
        PlannedTransport::P2p => {
            let recv = p2p_receive_bytes(max_bytes, world)?;
            Ok(MemoryReport::gpu(
                "the CUDA communicator",
                vec![
                    MemoryLine::device("receive slots (2 epochs)", recv),
                    MemoryLine::device("control words (epoch, abort)", CONTROL_BYTES),
                    MemoryLine::pinned_host("status (pinned, mapped)", STATUS_BYTES),
                ],
                gpu(vec![recv + CONTROL_BYTES]),
            ))
        }
        PlannedTransport::Host { processes } => {
            let layout = HostLayout::new(max_bytes);
            let area = layout.area_bytes(HOST_PAGE);
            let mut lines = vec![MemoryLine::pinned_host(
                "own host area: 2 halves and the one-pass buffers (pinned, mapped)",
                area,
            )];
            if processes {
                let mapped = ByteSize::from_usize((world - 1) * area);
                lines.push(MemoryLine::pinned_host(
                    &format!(
                        "peers' areas mapped and registered ({mapped} of their pages, no new memory)"
                    ),
                    0,
                ));
            }
            let ctl = granularity.max(CONTROL_BYTES);
            lines.push(MemoryLine::device(
                "control words (epoch, abort; one granule)",
                ctl,
            ));
            let shadows = delta_shadow_bytes(world, layout.delta_cap, granularity);
            lines.push(MemoryLine::device(
                "delta shadows (2 buffers of every rank)",
                shadows,
            ));
            let allocations = vec![ctl, shadows];
            lines.push(MemoryLine::pinned_host(
                "status (pinned, mapped)",
                STATUS_BYTES,
            ));
            Ok(MemoryReport::gpu(
                "the host-path communicator",
                lines,
                gpu(allocations),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::Place;

    #[test]
    fn p2p_buffers_are_two_epochs_of_the_larger_algorithm() {
        // TP 8, 8 MiB: 8 slots of 8 MiB per epoch (one-shot) against 2 x 8
        // shards of 1 MiB (two-shot): 64 MiB per epoch, 128 MiB in all.
        assert_eq!(p2p_receive_bytes(8 << 20, 8).unwrap(), 128 << 20);
        // TP 2, 8 MiB: 2 x 8 MiB against 2 x 2 x 4 MiB: 16 MiB per epoch.
        assert_eq!(p2p_receive_bytes(8 << 20, 2).unwrap(), 32 << 20);
        let r = planned_report(PlannedTransport::P2p, 8, 8 << 20, 2 << 20, 0).unwrap();
        assert_eq!(r.device_requested(), ByteSize::b((128 << 20) + 256));
        assert_eq!(r.device_reserved(), ByteSize::mib(130));
        assert_eq!(r.total_in(Place::PinnedHost).unwrap(), ByteSize::b(64));
    }

    #[test]
    fn host_path_device_memory_is_a_granule_and_the_delta_shadows() {
        let threads = PlannedTransport::Host { processes: false };
        let r = planned_report(threads, 2, 64 << 20, 2 << 20, 0).unwrap();
        // delta_cap 2 MiB: 2 buffers x 2 ranks x 2 MiB of shadows + one granule.
        assert_eq!(r.device_reserved(), ByteSize::mib(10));
        assert_eq!(r.lines.len(), 4);
        // The pinned area: 2 halves of 64 MiB of chunked data, its flags
        // (4096 of 4 bytes) and the call word (a page more), then the two
        // 2 MiB delta buffers; and the status.
        let half = (64 << 20) + 4 * 4096 + 4096;
        assert_eq!(
            r.total_in(Place::PinnedHost).unwrap(),
            ByteSize::b(2 * half + (4 << 20) + 64)
        );
        // Processes: one more line, for the peers' areas, of 0 bytes.
        let procs = PlannedTransport::Host { processes: true };
        let r = planned_report(procs, 2, 64 << 20, 2 << 20, 0).unwrap();
        assert_eq!(r.device_reserved(), ByteSize::mib(10));
        assert_eq!(r.lines.len(), 5);
        assert_eq!(
            r.total_in(Place::PinnedHost).unwrap(),
            ByteSize::b(2 * half + (4 << 20) + 64)
        );
    }

    #[test]
    fn bad_inputs_are_errors_not_panics() {
        for (world, max, gran) in [
            (1, 8 << 20, 2 << 20),
            (MAX_WORLD + 1, 8 << 20, 2 << 20),
            (2, 0, 2 << 20),
            (2, usize::MAX, 2 << 20),
            (2, 8 << 20, 0),
            (2, 8 << 20, 3),
        ] {
            assert!(planned_report(PlannedTransport::P2p, world, max, gran, 0).is_err());
        }
    }
}
