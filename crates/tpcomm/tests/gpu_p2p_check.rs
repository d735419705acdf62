//! The P2P check of communicator creation (src/cuda/transport/p2p/check.rs) on real
//! GPUs: ranks as threads, round-robin over the GPUs (sharing one on a
//! machine of one GPU). Needs a GPU; CI compiles the kernel only
//! (tests/nvrtc_compile.rs).

mod gpu_common;

use std::time::{Duration, Instant};
use tpcomm::cuda::transport::p2p::check;
use tpcomm::cuda::{Rendezvous, ThreadGroup};

#[test]
#[ignore = "needs a GPU: TPCOMM_GPU_TESTS=1 [TPCOMM_TEST_WORLDS=2,4,8] cargo test -- --ignored"]
fn gpu_p2p_check_passes_between_gpus_that_move_the_right_bytes_and_agrees_on_every_rank() {
    let Some(worlds) = gpu_common::gpu_worlds("a GPU; ranks share GPUs round-robin") else {
        return;
    };
    for world in worlds {
        let group = ThreadGroup::new(world);
        let started = Instant::now();
        let verdicts: Vec<check::Verdict> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..world)
                .map(|rank| {
                    let rv = Rendezvous::Threads(group.clone());
                    s.spawn(move || {
                        check::run(
                            rank,
                            world,
                            gpu_common::device_of(rank),
                            &rv,
                            Duration::from_secs(30),
                        )
                        .expect("the check's rendezvous")
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let took = started.elapsed();
        eprintln!(
            "{}: {} in {took:?} (first run includes compiling the kernel)",
            gpu_common::describe(world),
            verdicts[0].why
        );
        assert!(verdicts.iter().all(|v| *v == verdicts[0]), "{verdicts:?}");
        // On a machine whose P2P works (the GPU test machines) every pair
        // moves the pattern, and the check ran everywhere.
        assert!(verdicts[0].p2p_ok && verdicts[0].ran, "{}", verdicts[0].why);
    }
}
