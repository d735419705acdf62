//! GPU tests of the host-memory transport (`Transport::Host`), one thread per
//! GPU. They need two or more GPUs (no P2P needed) and run only with
//! TPCOMM_GPU_TESTS=1 (run them with --test-threads=1: each test uses every
//! GPU). Without it they print that they were skipped. Processes are covered
//! by `tpcomm gpu-bench --transport host --launch procs`, which checks every
//! result.

use std::time::{Duration, Instant};
use tpcomm::cuda::cudarc::driver::sys;
use tpcomm::cuda::transport::pinned::delta_shadow_bytes;
use tpcomm::cuda::transport::pinned::layout::HostLayout;
use tpcomm::cuda::StreamAllReduce;
use tpcomm::cuda::{open_context, CudaConfig, GpuComm, Rendezvous, ThreadGroup, Transport};
use tpcomm::verify::{count_wrong, element, random_bytes, reference, Rng};
use tpcomm::{Algo, ByteSize, DType, Error, Place};

mod gpu_common;
use gpu_common::{
    check_batch, check_every_size, describe, device_of, run_batch, Arenas, Call, Rank,
};

fn gpu_worlds() -> Option<Vec<usize>> {
    gpu_common::gpu_worlds("a GPU; ranks share GPUs round-robin")
}

fn config(r: usize, world: usize, max: ByteSize, timeout: Duration) -> CudaConfig {
    let mut cfg = CudaConfig::new(r, world, device_of(r));
    cfg.max_bytes = max;
    cfg.timeout = timeout;
    cfg.transport = Transport::Host;
    cfg
}

fn make_ranks(world: usize, max: ByteSize, arena: usize, timeout: Duration) -> Vec<Rank<GpuComm>> {
    let group = ThreadGroup::new(world);
    gpu_common::make_ranks(world, arena, move |r| {
        let comm = GpuComm::new(
            &config(r, world, max, timeout),
            &Rendezvous::Threads(group.clone()),
        )
        .expect("create communicator");
        assert_eq!(comm.transport(), Transport::Host);
        comm
    })
}

/// Ranks of 1 MiB communicators, with 8 MiB arenas and a 10 s timeout.
fn one_mib_ranks(world: usize) -> Vec<Rank<GpuComm>> {
    make_ranks(world, ByteSize::mib(1), 8 << 20, Duration::from_secs(10))
}

#[test]
#[ignore = "needs a GPU: TPCOMM_GPU_TESTS=1 [TPCOMM_TEST_WORLDS=2,4,8] cargo test -- --ignored"]
fn gpu_host_sums_are_right_for_every_size_type_kernel_and_mode() {
    let Some(worlds) = gpu_worlds() else { return };
    for world in worlds {
        let max = ByteSize::mib(8);
        let mut total = 0;
        // OneShot and Auto run the delta kernel up to 2 MiB, chunks above;
        // TwoShot runs chunks.
        let mut ranks = make_ranks(world, max, 64 << 20, Duration::from_secs(10));
        total += check_every_size(&mut ranks, max, &mut Rng::new(42), "host path");
        eprintln!(
            "host path: checked {total} calls on {}: 0 wrong, bit-identical across ranks",
            describe(world)
        );
    }
}

/// The delta kernel's sentinel is the all-ones element (a NaN in every
/// type): such an input element must arrive as a NaN, not hang the call, and
/// leave every other element right and the next calls unaffected.
#[test]
#[ignore = "needs a GPU: TPCOMM_GPU_TESTS=1 [TPCOMM_TEST_WORLDS=2,4,8] cargo test -- --ignored"]
fn gpu_host_delta_carries_all_ones_elements_as_nan() {
    let Some(worlds) = gpu_worlds() else { return };
    for world in worlds {
        all_ones_elements_arrive_as_nan(world);
    }
}

fn all_ones_elements_arrive_as_nan(world: usize) {
    let small = "delta";
    let mut ranks = one_mib_ranks(world);
    let mut rng = Rng::new(11);
    for graph in [false, true] {
        for dtype in DType::ALL {
            let count = 4097;
            let size = dtype.size();
            let mut inputs: Vec<Vec<u8>> = (0..world)
                .map(|_| random_bytes(dtype, count, &mut rng))
                .collect();
            // Rank 0 sends all-ones at every 7th element, the last rank at
            // every 11th (both at 77, 154, ...).
            let poisoned = |r: usize, i: usize| {
                (r == 0 && i.is_multiple_of(7)) || (r == world - 1 && i.is_multiple_of(11))
            };
            for (r, input) in inputs.iter_mut().enumerate() {
                for i in (0..count).filter(|&i| poisoned(r, i)) {
                    input[i * size..(i + 1) * size].fill(0xff);
                }
            }
            let nan_at = |i: usize| (0..world).any(|r| poisoned(r, i));
            let calls = [Call {
                dtype,
                count,
                algo: Algo::OneShot,
                in_place: false,
                offset: 0,
            }];
            let results: Vec<Arenas> = run_batch(&mut ranks, &calls, &inputs, graph)
                .into_iter()
                .map(|r| {
                    r.unwrap_or_else(|e| panic!("{small}: all-reduce with all-ones elements: {e}"))
                })
                .collect();
            let first = results[0].1[..count * size].to_vec();
            for (r, res) in results.iter().enumerate() {
                assert_eq!(
                    &res.1[..count * size],
                    &first[..],
                    "rank {r} differs from rank 0"
                );
            }
            // NaN where an input was all-ones; elsewhere the float64 sum.
            let mut masked_out = first.clone();
            let mut masked_in = inputs.clone();
            for i in (0..count).filter(|&i| nan_at(i)) {
                assert!(
                    element(dtype, &first, i).is_nan(),
                    "{small} {dtype} element {i}: {} instead of NaN (graph {graph})",
                    element(dtype, &first, i)
                );
                masked_out[i * size..(i + 1) * size].fill(0);
                for m in masked_in.iter_mut() {
                    m[i * size..(i + 1) * size].fill(0);
                }
            }
            let ins: Vec<&[u8]> = masked_in.iter().map(|v| &v[..]).collect();
            let wrong = count_wrong(dtype, &masked_out, &reference(dtype, &ins, count), world);
            assert_eq!(
                wrong, 0,
                "{small} {dtype} graph={graph}: other elements wrong"
            );
            // The slots are empty again: ordinary calls after it are right.
            let spec: Vec<_> = (0..4)
                .map(|k| (dtype, 1000 + k, Algo::OneShot, k % 2 == 0))
                .collect();
            let (wrong, _) = check_batch(&mut ranks, &spec, graph, &mut rng);
            assert_eq!(
                wrong, 0,
                "{small} {dtype} graph={graph}: calls after the all-ones one"
            );
        }
    }
}

/// The delta kernel sends an element that equals what its buffer held two
/// calls before as the sentinel ("the same again"): calls that repeat the
/// same input, whole or in part, must still give the float64 sum.
#[test]
#[ignore = "needs a GPU: TPCOMM_GPU_TESTS=1 [TPCOMM_TEST_WORLDS=2,4,8] cargo test -- --ignored"]
fn gpu_host_repeated_inputs_are_right_with_the_delta_kernel() {
    let Some(worlds) = gpu_worlds() else { return };
    for world in worlds {
        let small = "delta";
        let mut ranks = one_mib_ranks(world);
        let mut rng = Rng::new(5);
        for graph in [false, true] {
            for dtype in DType::ALL {
                let count = 3001;
                let size = dtype.size();
                // Half the elements equal on every rank and call: the
                // input is the same in all calls, so from the third call on
                // every element repeats its buffer's previous content.
                let mut inputs: Vec<Vec<u8>> = (0..world)
                    .map(|_| random_bytes(dtype, count, &mut rng))
                    .collect();
                let shared = random_bytes(dtype, count, &mut rng);
                for input in inputs.iter_mut() {
                    for i in (0..count).filter(|i| i % 2 == 0) {
                        input[i * size..(i + 1) * size]
                            .copy_from_slice(&shared[i * size..(i + 1) * size]);
                    }
                }
                // Five calls of the same input, then one of a prefix of it.
                let mut calls: Vec<Call> = (0..5)
                    .map(|_| Call {
                        dtype,
                        count,
                        algo: Algo::OneShot,
                        in_place: false,
                        offset: 0,
                    })
                    .collect();
                calls.push(Call {
                    dtype,
                    count: count / 2,
                    algo: Algo::OneShot,
                    in_place: false,
                    offset: 0,
                });
                let results: Vec<Arenas> = run_batch(&mut ranks, &calls, &inputs, graph)
                    .into_iter()
                    .map(|r| r.unwrap_or_else(|e| panic!("{small}: repeated calls: {e}")))
                    .collect();
                let ins: Vec<&[u8]> = inputs.iter().map(|v| &v[..]).collect();
                let want = reference(dtype, &ins, count);
                for (r, res) in results.iter().enumerate() {
                    // The prefix comes from the last call, the rest from the fifth.
                    let wrong = count_wrong(dtype, &res.1[..count * size], &want, world);
                    assert_eq!(
                        wrong, 0,
                        "{small} {dtype} graph={graph} rank {r}: repeated inputs"
                    );
                }
                // Then ordinary random calls stay right.
                let spec: Vec<_> = (0..4)
                    .map(|k| (dtype, 700 + 300 * k, Algo::OneShot, k % 2 == 1))
                    .collect();
                let (wrong, _) = check_batch(&mut ranks, &spec, graph, &mut rng);
                assert_eq!(wrong, 0, "{small} {dtype} graph={graph}: calls after");
            }
        }
        eprintln!("host path: repeated inputs right with delta");
    }
}

#[test]
#[ignore = "needs a GPU: TPCOMM_GPU_TESTS=1 [TPCOMM_TEST_WORLDS=2,4,8] cargo test -- --ignored"]
fn gpu_host_stress_100k_random_calls_are_all_right_and_bit_identical() {
    let Some(worlds) = gpu_worlds() else { return };
    for world in worlds {
        let max = ByteSize::kib(256);
        let mut ranks = make_ranks(world, max, 8 << 20, Duration::from_secs(10));
        gpu_common::assert_stress(&mut ranks, max, "host stress");
    }
}

#[test]
#[ignore = "needs a GPU: TPCOMM_GPU_TESTS=1 [TPCOMM_TEST_WORLDS=2,4,8] cargo test -- --ignored"]
fn gpu_host_peer_that_never_arrives_gives_a_timeout_naming_it() {
    let Some(_) = gpu_worlds() else { return };
    let timeout = Duration::from_millis(300);
    for algo in [Algo::OneShot, Algo::TwoShot] {
        let mut ranks = make_ranks(2, ByteSize::mib(1), 1 << 20, timeout);
        let mut rng = Rng::new(9);
        let input = random_bytes(DType::Bf16, 4096, &mut rng);
        let rank0 = &mut ranks[0];
        open_context(0).unwrap();
        rank0
            .stream
            .memcpy_htod(&input[..], &mut rank0.a.slice_mut(..input.len()))
            .unwrap();
        let (pa, pb) = (rank0.ptr(&rank0.a), rank0.ptr(&rank0.b));
        let cs = rank0.stream.cu_stream();
        let t0 = Instant::now();
        // Rank 1 never calls: rank 0's kernel must give up on its own.
        // SAFETY: ranges inside rank 0's arenas.
        unsafe {
            rank0.comm.all_reduce_call(
                &tpcomm::cuda::Call::new(pa, pb, 4096, DType::Bf16, cs).with_algo(algo),
            )
        }
        .unwrap();
        rank0.stream.synchronize().unwrap();
        let waited = t0.elapsed();
        let err = rank0.comm.check().unwrap_err();
        eprintln!("{algo:?} after {waited:?}: {err}");
        match &err {
            Error::PeerTimeout { rank, peer, .. } => assert_eq!((*rank, *peer), (0, 1)),
            other => panic!("expected a timeout naming rank 1, got {other}"),
        }
        assert!(
            waited >= timeout && waited < timeout + Duration::from_secs(2),
            "{waited:?}"
        );
        // SAFETY: as above.
        let again = unsafe {
            rank0.comm.all_reduce_call(
                &tpcomm::cuda::Call::new(pa, pb, 4096, DType::Bf16, cs).with_algo(algo),
            )
        };
        assert!(matches!(again, Err(Error::PeerTimeout { peer: 1, .. })));
    }
}

#[test]
#[ignore = "needs a GPU: TPCOMM_GPU_TESTS=1 [TPCOMM_TEST_WORLDS=2,4,8] cargo test -- --ignored"]
fn gpu_host_memory_report_counts_the_pinned_area_and_the_device_words() {
    let Some(worlds) = gpu_worlds() else { return };
    for world in worlds {
        // The first group loads the kernels; the second's drop is its buffers alone.
        drop(make_ranks(
            world,
            ByteSize::mib(8),
            16,
            Duration::from_secs(10),
        ));
        let max = ByteSize::b((8 << 20) + 6);
        let group = ThreadGroup::new(world);
        let made = gpu_common::create_measured(world, move |r| {
            GpuComm::new(
                &config(r, world, max, Duration::from_secs(10)),
                &Rendezvous::Threads(group.clone()),
            )
            .unwrap()
        });
        let mut sums = Vec::new();
        let area = HostLayout::new(max.bytes() as usize).area_bytes(4096);
        for (comm, drop) in &made {
            let rep = comm.memory_report();
            eprintln!("{rep}");
            let host = rep.total_in(Place::PinnedHost).unwrap().bytes();
            // The own area (threads map the peers' without new memory) plus the 64-byte status.
            assert_eq!(host, area as u64 + 64, "{rep}");
            // Device memory: the control words' one allocation granule and the
            // delta kernel's shadows, nothing else.
            let granularity = rep.gpu.as_ref().expect("a GPU report").granularity;
            let delta_cap = HostLayout::new(max.bytes() as usize).delta_cap;
            let shadows = delta_shadow_bytes(world, delta_cap, granularity.bytes() as usize);
            assert_eq!(
                rep.device_requested().bytes(),
                granularity.bytes() + shadows as u64,
                "{rep}"
            );
            sums.push((rep.device_reserved().bytes() as usize, *drop));
        }
        gpu_common::assert_reports_add_up(&sums);
    }
}

#[test]
#[ignore = "needs a GPU: TPCOMM_GPU_TESTS=1 [TPCOMM_TEST_WORLDS=2,4,8] cargo test -- --ignored"]
fn gpu_transport_auto_picks_p2p_only_when_every_pair_has_it() {
    let Some(worlds) = gpu_worlds() else { return };
    for world in worlds {
        tpcomm::cuda::ensure_driver().unwrap();
        let mut all_p2p = true;
        for a in 0..world {
            open_context(device_of(a)).unwrap();
            for b in 0..world {
                let (da, db) = (device_of(a), device_of(b));
                // Ranks on one GPU reach each other's memory without P2P.
                if da != db {
                    let mut v = 0i32;
                    // SAFETY: writes one int; both ordinals exist.
                    let r = unsafe { sys::cuDeviceCanAccessPeer(&mut v, da as i32, db as i32) };
                    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
                    all_p2p &= v != 0;
                }
            }
        }
        let group = ThreadGroup::new(world);
        let hs: Vec<_> = (0..world)
            .map(|r| {
                let rv = Rendezvous::Threads(group.clone());
                std::thread::spawn(move || {
                    let mut cfg = config(r, world, ByteSize::mib(1), Duration::from_secs(10));
                    cfg.transport = Transport::Auto;
                    GpuComm::new(&cfg, &rv).unwrap().transport()
                })
            })
            .collect();
        let want = if all_p2p {
            Transport::Cuda
        } else {
            Transport::Host
        };
        for h in hs {
            assert_eq!(h.join().unwrap(), want);
        }
    }
}

/// Every algorithm at the largest message the buffers take, at every world
/// size: when ranks share a GPU their grids must fit on it together
/// (cuda/share.rs) or the calls time out. Before the grids were sized for
/// sharing, 8 ranks on one H200 timed out here with one-shot from 262,143
/// f32 elements on.
#[test]
#[ignore = "needs a GPU: TPCOMM_GPU_TESTS=1 [TPCOMM_TEST_WORLDS=2,4,8] cargo test -- --ignored"]
fn gpu_largest_messages_finish_for_every_algorithm_with_ranks_sharing_a_gpu() {
    let Some(worlds) = gpu_worlds() else { return };
    let max = ByteSize::mib(8);
    for world in worlds {
        let mut ranks = make_ranks(world, max, 16 << 20, Duration::from_secs(10));
        gpu_common::check_largest_messages(&mut ranks, max, "host path");
    }
}
