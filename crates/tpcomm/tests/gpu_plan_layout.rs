//! GPU test of `tpcomm::plan_layout`: the planner's report of what a
//! communicator allocates must equal the report of a real communicator,
//! line by line and allocation by allocation. Ignored by default and run
//! only with TPCOMM_GPU_TESTS=1, like the other gpu_*.rs tests; one GPU is
//! enough (ranks are threads, round-robin over the GPUs there are):
//!
//!   TPCOMM_GPU_TESTS=1 TPCOMM_TEST_WORLDS=2,4,8 cargo test -p tpcomm --test gpu_plan_layout -- --ignored --test-threads=1

use std::time::Duration;
use tpcomm::cuda::{CudaConfig, GpuComm, Rendezvous, ThreadGroup, Transport};
use tpcomm::plan_layout::{planned_report, PlannedTransport, DEFAULT_GRANULARITY};
use tpcomm::{ByteSize, MemoryReport};

mod gpu_common;
use gpu_common::{describe, device_of};

/// Every rank's memory report for a group of `world` thread ranks.
fn real_reports(world: usize, max: ByteSize, t: Transport) -> Vec<MemoryReport> {
    let group = ThreadGroup::new(world);
    let hs: Vec<_> = (0..world)
        .map(|r| {
            let rv = Rendezvous::Threads(group.clone());
            std::thread::spawn(move || {
                let mut cfg = CudaConfig::new(r, world, device_of(r));
                cfg.max_bytes = max;
                cfg.timeout = Duration::from_secs(20);
                cfg.transport = t;
                cfg.nccl_fallback = false;
                cfg.self_tune = false;
                let comm = GpuComm::new(&cfg, &rv).expect("communicator");
                comm.memory_report().clone()
            })
        })
        .collect();
    hs.into_iter().map(|h| h.join().expect("rank")).collect()
}

#[test]
#[ignore = "needs a GPU: TPCOMM_GPU_TESTS=1 ... -- --ignored"]
fn planned_report_equals_a_real_communicators() {
    let Some(worlds) = gpu_common::gpu_worlds("a GPU; ranks share GPUs round-robin") else {
        return;
    };
    for (transport, planned) in [
        (Transport::Cuda, PlannedTransport::P2p),
        (Transport::Host, PlannedTransport::Host { processes: false }),
    ] {
        for &world in &worlds {
            for max in [
                ByteSize::mib(1),
                ByteSize::mib(8),
                ByteSize::b((8 << 20) + 6),
            ] {
                for (r, real) in real_reports(world, max, transport).into_iter().enumerate() {
                    let g = real.gpu.clone().expect("a GPU report");
                    let plan = planned_report(
                        planned,
                        world,
                        max.bytes() as usize,
                        g.granularity.bytes() as usize,
                        g.device,
                    )
                    .expect("plan");
                    eprintln!(
                        "{transport:?}, {}, max {max}, rank {r}:\n{real}",
                        describe(world)
                    );
                    assert_eq!(plan.lines, real.lines, "{transport:?} world {world} {max}");
                    assert_eq!(
                        plan.gpu.as_ref().map(|p| &p.allocations),
                        Some(&g.allocations),
                        "{transport:?} world {world} {max}"
                    );
                    assert_eq!(plan.device_reserved(), real.device_reserved());
                    assert_eq!(
                        g.granularity.bytes() as usize,
                        DEFAULT_GRANULARITY,
                        "the planner assumes this granularity without a GPU"
                    );
                }
            }
        }
    }
}
