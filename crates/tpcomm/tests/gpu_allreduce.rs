//! GPU tests of the CUDA communicator, one thread per GPU. They need at least
//! two GPUs with peer access and run only with TPCOMM_GPU_TESTS=1 (run them
//! with --test-threads=1: each test uses every GPU). Without it they print
//! that they were skipped.

use std::time::{Duration, Instant};
use tpcomm::cuda::cudarc::driver::sys;
use tpcomm::cuda::StreamAllReduce;
use tpcomm::cuda::{Call, CudaConfig, P2pTransport, Rendezvous, ThreadGroup};
use tpcomm::verify::{count_wrong, random_bytes, reference, Rng};
use tpcomm::{Algo, ByteSize, DType, Error};

mod gpu_common;
use gpu_common::{check_every_size, describe, device_of, Rank};

fn gpu_worlds() -> Option<Vec<usize>> {
    gpu_common::gpu_worlds("a GPU; ranks share GPUs round-robin")
}

fn make_ranks(
    world: usize,
    max: ByteSize,
    arena: usize,
    timeout: Duration,
) -> Vec<Rank<P2pTransport>> {
    let group = ThreadGroup::new(world);
    gpu_common::make_ranks(world, arena, move |r| {
        let mut cfg = CudaConfig::new(r, world, device_of(r));
        cfg.max_bytes = max;
        cfg.timeout = timeout;
        P2pTransport::new(&cfg, &Rendezvous::Threads(group.clone())).expect("create communicator")
    })
}

#[test]
#[ignore = "needs a GPU: TPCOMM_GPU_TESTS=1 [TPCOMM_TEST_WORLDS=2,4,8] cargo test -- --ignored"]
fn gpu_sums_are_right_for_every_size_type_algorithm_and_mode() {
    let Some(worlds) = gpu_worlds() else { return };
    for world in worlds {
        let max = ByteSize::mib(8);
        let mut ranks = make_ranks(world, max, 64 << 20, Duration::from_secs(10));
        let total = check_every_size(&mut ranks, max, &mut Rng::new(42), "");
        eprintln!(
            "checked {total} calls on {}: 0 wrong elements, bit-identical across ranks",
            describe(world)
        );
    }
}

#[test]
#[ignore = "needs a GPU: TPCOMM_GPU_TESTS=1 [TPCOMM_TEST_WORLDS=2,4,8] cargo test -- --ignored"]
fn gpu_stress_100k_random_calls_are_all_right_and_bit_identical() {
    let Some(worlds) = gpu_worlds() else { return };
    for world in worlds {
        let max = ByteSize::kib(256);
        let mut ranks = make_ranks(world, max, 8 << 20, Duration::from_secs(10));
        gpu_common::assert_stress(&mut ranks, max, "stress");
    }
}

/// The calls a replay test repeats: (type, elements, algorithm).
type Calls = [(DType, usize, Algo)];

/// Input sets the repetitions cycle through: repetition i uses set i % 3,
/// so consecutive repetitions always reduce different data and a slot read
/// one epoch early (the previous repetition's data still there) gives a
/// wrong result instead of an identical one.
const INPUT_SETS: usize = 3;

/// Runs `calls` `replays` times on every rank, captured once in a CUDA graph
/// and replayed (`graph`) or issued again each time, with the output
/// poisoned and the inputs replaced (cycling through INPUT_SETS sets) before
/// every repetition. The first repetition of each set is checked against
/// the float64 reference, every later one against it, bit for bit.
/// Returns per rank the repetitions that differed, or the error that
/// stopped it (a call's, or the communicator's status).
fn repeat_calls(
    world: usize,
    calls: &Calls,
    graph: bool,
    replays: usize,
) -> Vec<Result<usize, String>> {
    let mut ranks = make_ranks(world, ByteSize::mib(1), 4 << 20, Duration::from_secs(10));
    let mut rng = Rng::new(3);
    let mut offsets = Vec::new();
    let mut end = 0usize;
    for c in calls {
        offsets.push(end);
        end += (c.1 * c.0.size()).div_ceil(256) * 256;
    }
    // inputs[set][call][rank], refs[set][call].
    let inputs: Vec<Vec<Vec<Vec<u8>>>> = (0..INPUT_SETS)
        .map(|_| {
            calls
                .iter()
                .map(|c| {
                    (0..world)
                        .map(|_| random_bytes(c.0, c.1, &mut rng))
                        .collect()
                })
                .collect()
        })
        .collect();
    let refs: Vec<Vec<tpcomm::verify::Reference>> = inputs
        .iter()
        .map(|set| {
            calls
                .iter()
                .zip(set)
                .map(|(c, ins)| {
                    reference(c.0, &ins.iter().map(|v| &v[..]).collect::<Vec<_>>(), c.1)
                })
                .collect()
        })
        .collect();
    std::thread::scope(|s| {
        let hs: Vec<_> = ranks
            .iter_mut()
            .enumerate()
            .map(|(r, rank)| {
                let (inputs, refs, offsets) = (&inputs, &refs, &offsets);
                s.spawn(move || -> Result<usize, String> {
                    rank.comm.context().bind_to_thread().unwrap();
                    let arenas: Vec<Vec<u8>> = inputs
                        .iter()
                        .map(|set| {
                            let mut arena = vec![0u8; end];
                            for (k, c) in calls.iter().enumerate() {
                                let n = c.1 * c.0.size();
                                arena[offsets[k]..offsets[k] + n].copy_from_slice(&set[k][r]);
                            }
                            arena
                        })
                        .collect();
                    let (pa, pb) = (rank.ptr(&rank.a), rank.ptr(&rank.b));
                    let cs = rank.stream.cu_stream();
                    let issue = |rank: &Rank<P2pTransport>| -> Result<(), String> {
                        for (k, c) in calls.iter().enumerate() {
                            let off = offsets[k] as u64;
                            // SAFETY: ranges inside this rank's arenas, alive for the test.
                            unsafe {
                                rank.comm
                                    .all_reduce_call(&Call::new(pa + off, pb + off, c.1, c.0, cs).with_algo(c.2))
                                    .map_err(|e| e.to_string())?;
                            }
                        }
                        Ok(())
                    };
                    let g = if graph {
                        rank.stream
                            .begin_capture(
                                sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
                            )
                            .unwrap();
                        issue(rank)?;
                        Some(
                            rank.stream
                                .end_capture(sys::CUgraphInstantiate_flags(0))
                                .unwrap()
                                .unwrap(),
                        )
                    } else {
                        None
                    };
                    // Pinned host buffers for every copy: a copy from or to
                    // pageable memory is staged by the driver and can hold
                    // this thread (and, through the driver, other ranks'
                    // threads of this process) while a peer's call is still
                    // waiting for it; then the peer's kernel spins until
                    // its timeout (docs/shared-gpu.md, ranks as threads).
                    let pinned = |bytes: &[u8]| {
                        // SAFETY (test): filled right away, read only after.
                        let mut p = unsafe { rank.ctx.alloc_pinned_with_flags::<u8>(end, 0) }.unwrap();
                        p.as_mut_slice().unwrap().copy_from_slice(bytes);
                        p
                    };
                    let arenas: Vec<_> = arenas.iter().map(|a| pinned(a)).collect();
                    let poison = pinned(&vec![0xffu8; end]);
                    let mut out_pinned = pinned(&vec![0u8; end]);
                    let mut expected: Vec<Option<Vec<u8>>> = vec![None; INPUT_SETS];
                    let mut bad = 0usize;
                    for i in 0..replays {
                        let set = i % INPUT_SETS;
                        rank.stream
                            .memcpy_htod(&arenas[set], &mut rank.a.slice_mut(..end))
                            .unwrap();
                        rank.stream
                            .memcpy_htod(&poison, &mut rank.b.slice_mut(..end))
                            .unwrap();
                        match &g {
                            Some(g) => g.launch().unwrap(),
                            None => issue(rank)?,
                        }
                        rank.stream
                            .memcpy_dtoh(&rank.b.slice(..end), &mut out_pinned)
                            .unwrap();
                        rank.stream.synchronize().unwrap();
                        let out = out_pinned.as_slice().unwrap();
                        rank.comm.check().map_err(|e| {
                            // Where the wait was and what the slot holds:
                            // the shared-GPU graph-replay timeout.
                            let detail = rank.comm.timeout_detail().unwrap_or_default();
                            eprintln!("rank {r}: repetition {i}: {e}\n  {detail}");
                            format!("repetition {i}: {e}; {detail}")
                        })?;
                        match &expected[set] {
                            None => {
                                for (k, c) in calls.iter().enumerate() {
                                    let n = c.1 * c.0.size();
                                    let o = &out[offsets[k]..offsets[k] + n];
                                    assert_eq!(count_wrong(c.0, o, &refs[set][k], world), 0);
                                }
                                expected[set] = Some(out.to_vec());
                            }
                            Some(e) => {
                                if e[..] != out[..] {
                                    bad += 1;
                                    eprintln!("rank {r}: repetition {i} (input set {set}) differs from the first of its set");
                                }
                            }
                        }
                    }
                    Ok(bad)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn replays() -> usize {
    tpcomm::env::REPLAYS
        .get_or(10_000)
        .unwrap_or_else(|e| panic!("{e}")) as usize
}

const ONE_SHOT_SMALL: (DType, usize, Algo) = (DType::Bf16, 3001, Algo::OneShot);
const TWO_SHOT_MID: (DType, usize, Algo) = (DType::F16, 70_001, Algo::TwoShot);

/// Runs one repetition test at every world and asserts every rank finished
/// with every repetition equal to the first.
fn assert_repeats(what: &str, calls: &Calls, graph: bool) {
    let Some(worlds) = gpu_worlds() else { return };
    let n = replays();
    for world in worlds {
        let results = repeat_calls(world, calls, graph, n);
        eprintln!(
            "{what}, {n} times on {}: per rank {results:?}",
            describe(world)
        );
        assert!(results.iter().all(|r| r == &Ok(0)), "{what}: {results:?}");
    }
}

#[test]
#[ignore = "needs a GPU: TPCOMM_GPU_TESTS=1 [TPCOMM_TEST_WORLDS=2,4,8] cargo test -- --ignored"]
fn gpu_graph_replayed_10000_times_is_right_every_time() {
    assert_repeats(
        "graph of one-shot + two-shot replayed",
        &[ONE_SHOT_SMALL, TWO_SHOT_MID],
        true,
    );
}

/// The graph test's two calls issued again each time instead of replayed:
/// with ranks sharing a GPU this separates graph replays from the calls.
#[test]
#[ignore = "needs a GPU: TPCOMM_GPU_TESTS=1 [TPCOMM_TEST_WORLDS=2,4,8] cargo test -- --ignored"]
fn gpu_same_two_calls_issued_10000_times_are_right_every_time() {
    assert_repeats(
        "one-shot + two-shot issued eagerly",
        &[ONE_SHOT_SMALL, TWO_SHOT_MID],
        false,
    );
}

/// Graphs of one call each, replayed: which algorithm a hang needs.
#[test]
#[ignore = "needs a GPU: TPCOMM_GPU_TESTS=1 [TPCOMM_TEST_WORLDS=2,4,8] cargo test -- --ignored"]
fn gpu_graphs_of_one_call_replayed_10000_times_are_right_every_time() {
    assert_repeats("graph of one-shot replayed", &[ONE_SHOT_SMALL], true);
    assert_repeats("graph of two-shot replayed", &[TWO_SHOT_MID], true);
}

#[test]
#[ignore = "needs a GPU: TPCOMM_GPU_TESTS=1 [TPCOMM_TEST_WORLDS=2,4,8] cargo test -- --ignored"]
fn gpu_peer_that_never_arrives_gives_a_timeout_naming_it() {
    let Some(_) = gpu_worlds() else { return };
    let timeout = Duration::from_millis(300);
    let mut ranks = make_ranks(2, ByteSize::mib(1), 1 << 20, timeout);
    let mut rng = Rng::new(9);
    let input = random_bytes(DType::Bf16, 4096, &mut rng);
    let rank0 = &mut ranks[0];
    rank0.comm.context().bind_to_thread().unwrap();
    rank0
        .stream
        .memcpy_htod(&input[..], &mut rank0.a.slice_mut(..input.len()))
        .unwrap();
    let (pa, pb) = (rank0.ptr(&rank0.a), rank0.ptr(&rank0.b));
    let algo = Algo::OneShot;
    let t0 = Instant::now();
    // Rank 1 never calls: rank 0's kernel must give up on its own.
    // SAFETY: ranges inside rank 0's arenas.
    unsafe {
        rank0.comm.all_reduce_call(
            &Call::new(pa, pb, 4096, DType::Bf16, rank0.stream.cu_stream()).with_algo(algo),
        )
    }
    .unwrap();
    rank0.stream.synchronize().unwrap();
    let waited = t0.elapsed();
    let err = rank0.comm.check().unwrap_err();
    eprintln!("after {waited:?}: {err}");
    match &err {
        Error::PeerTimeout { rank, peer, .. } => assert_eq!((*rank, *peer), (0, 1)),
        other => panic!("expected a timeout naming rank 1, got {other}"),
    }
    assert!(
        waited >= timeout && waited < timeout + Duration::from_secs(2),
        "{waited:?}"
    );
    // The communicator stays failed: later calls report at once.
    // SAFETY: as above.
    let again = unsafe {
        rank0.comm.all_reduce_call(
            &Call::new(pa, pb, 4096, DType::Bf16, rank0.stream.cu_stream()).with_algo(algo),
        )
    };
    assert!(matches!(again, Err(Error::PeerTimeout { peer: 1, .. })));
}

#[test]
#[ignore = "needs a GPU: TPCOMM_GPU_TESTS=1 [TPCOMM_TEST_WORLDS=2,4,8] cargo test -- --ignored"]
fn gpu_memory_report_matches_the_free_memory_drop() {
    let Some(worlds) = gpu_worlds() else { return };
    for world in worlds {
        // The first group loads the kernels and enables peer access; neither is
        // repeated, so the second group's drop is its buffers alone.
        drop(make_ranks(
            world,
            ByteSize::mib(8),
            16,
            Duration::from_secs(10),
        ));
        let group = ThreadGroup::new(world);
        let made = gpu_common::create_measured(world, move |r| {
            let mut cfg = CudaConfig::new(r, world, device_of(r));
            cfg.max_bytes = ByteSize::b((8 << 20) + 6);
            P2pTransport::new(&cfg, &Rendezvous::Threads(group.clone())).unwrap()
        });
        let sums: Vec<_> = made
            .iter()
            .map(|(comm, drop)| {
                let rep = comm.memory_report();
                eprintln!("{rep}");
                (rep.device_reserved().bytes() as usize, *drop)
            })
            .collect();
        gpu_common::assert_reports_add_up(&sums);
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
        gpu_common::check_largest_messages(&mut ranks, max, "P2P");
    }
}
