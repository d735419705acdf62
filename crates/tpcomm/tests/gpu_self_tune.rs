//! GPU test of the self-tune at communicator creation, one thread per GPU.
//! Runs only with TPCOMM_GPU_TESTS=1 (2+ GPUs with P2P); prints SKIPPED otherwise.

use std::time::{Duration, Instant};
use tpcomm::cuda::cudarc::driver::DevicePtr;
use tpcomm::cuda::StreamAllReduce;
use tpcomm::cuda::{Call, CudaConfig, P2pTransport, Rendezvous, ThreadGroup};
use tpcomm::verify::{count_wrong_against, random_bytes, Rng};
use tpcomm::{ByteSize, DType};

mod gpu_common;
use gpu_common::device_of;

#[test]
#[ignore = "needs a GPU: TPCOMM_GPU_TESTS=1 cargo test -- --ignored"]
fn self_tune_agrees_between_ranks_stays_under_a_second_and_auto_stays_correct() {
    if gpu_common::gpu_worlds("a GPU").is_none() {
        return;
    }
    let world = 2;
    let max = ByteSize::mib(16);
    // Rendezvous keys are one-shot per group: one group per communicator.
    let (g1, g2) = (ThreadGroup::new(world), ThreadGroup::new(world));
    let sizes = [4096usize, 96 << 10, 1 << 20, 3 << 20, 16 << 20];
    let inputs: Vec<Vec<u8>> = (0..world)
        .map(|p| {
            random_bytes(
                DType::Bf16,
                max.bytes() as usize / 2,
                &mut Rng::new(7 + p as u64),
            )
        })
        .collect();
    let hs: Vec<_> = (0..world)
        .map(|r| {
            let (rv1, rv2) = (
                Rendezvous::Threads(g1.clone()),
                Rendezvous::Threads(g2.clone()),
            );
            let inputs = inputs.clone();
            std::thread::spawn(move || {
                // Compile (or load) the kernels first, so the timed creation
                // below is the communicator and its self-tune.
                let mut cfg = CudaConfig::new(r, world, device_of(r));
                cfg.max_bytes = max;
                cfg.timeout = Duration::from_secs(10);
                cfg.self_tune = false;
                let first = P2pTransport::new(&cfg, &rv1).expect("create");
                // Both ranks' first communicators go only after both are made
                // (a peer's buffers must outlive its mappings).
                rv1.exchange("test-drop", r, world, &[], Duration::from_secs(10))
                    .unwrap();
                drop(first);
                cfg.self_tune = true;
                let t0 = Instant::now();
                let comm = P2pTransport::new(&cfg, &rv2).expect("create with self-tune");
                let took = t0.elapsed();
                let sel = comm.selector().expect("self-tune sets a selector");
                let table = sel.table().expect("a table").to_toml();
                let ctx = comm.context().clone();
                let stream = ctx.new_stream().unwrap();
                let a = stream.clone_htod(&inputs[r][..]).unwrap();
                let b = stream.alloc_zeros::<u8>(inputs[r].len()).unwrap();
                let (pa, pb) = (a.device_ptr(&stream).0, b.device_ptr(&stream).0);
                let mut picks = Vec::new();
                let mut wrong = 0;
                for &bytes in &sizes {
                    // SAFETY (test): both buffers hold max bytes and outlive the sync.
                    let algo = unsafe {
                        comm.all_reduce_call(&Call::new(
                            pa,
                            pb,
                            bytes / 2,
                            DType::Bf16,
                            stream.cu_stream(),
                        ))
                    }
                    .expect("all-reduce");
                    stream.synchronize().unwrap();
                    comm.check().unwrap();
                    let mut host = vec![0u8; bytes];
                    stream
                        .memcpy_dtoh(&b.slice(..bytes), &mut host[..])
                        .unwrap();
                    let ins: Vec<&[u8]> = inputs.iter().map(|v| &v[..bytes]).collect();
                    wrong += count_wrong_against(DType::Bf16, &host, &ins, world);
                    picks.push(algo);
                }
                (took, table, picks, wrong)
            })
        })
        .collect();
    let outs: Vec<_> = hs.into_iter().map(|h| h.join().unwrap()).collect();
    for (took, table, picks, wrong) in &outs {
        eprintln!("self-tune creation {took:?}, picks {picks:?}\n{table}");
        assert!(
            *took < Duration::from_secs(1),
            "creation with self-tune took {took:?}"
        );
        assert_eq!(*wrong, 0);
    }
    // Same table and the same picks on every rank.
    assert_eq!(outs[0].1, outs[1].1);
    assert_eq!(outs[0].2, outs[1].2);
}
