//! GPU tests of the CUDA communicator, one thread per GPU. They need at least
//! two GPUs with peer access and run only with TPCOMM_GPU_TESTS=1 (run them
//! with --test-threads=1: each test uses every GPU). Without it they print
//! that they were skipped.

use std::sync::Arc;
use std::time::{Duration, Instant};
use tpcomm::cuda::cudarc::driver::{sys, CudaSlice, CudaStream, DevicePtr};
use tpcomm::cuda::StreamAllReduce;
use tpcomm::cuda::{open_context, CudaCommunicator, CudaConfig, Rendezvous, ThreadGroup};
use tpcomm::verify::{count_wrong, random_bytes, reference, Rng};
use tpcomm::{Algo, ByteSize, DType, Error, ReduceOp};

fn gpu_world() -> Option<usize> {
    if std::env::var_os("TPCOMM_GPU_TESTS").is_none() {
        eprintln!("SKIPPED: set TPCOMM_GPU_TESTS=1 to run the GPU tests (needs 2+ GPUs with P2P)");
        return None;
    }
    tpcomm::cuda::ensure_driver().expect("CUDA driver");
    let n =
        tpcomm::cuda::cudarc::driver::CudaContext::device_count().expect("device count") as usize;
    assert!(n >= 2, "TPCOMM_GPU_TESTS=1 but only {n} GPU(s)");
    Some(n.min(tpcomm::cuda::MAX_WORLD))
}

/// One rank: its communicator, a stream and two device arenas.
struct Rank {
    comm: CudaCommunicator,
    stream: Arc<CudaStream>,
    a: CudaSlice<u8>,
    b: CudaSlice<u8>,
}

impl Rank {
    fn ptr(&self, buf: &CudaSlice<u8>) -> u64 {
        let (p, _sync) = buf.device_ptr(&self.stream);
        p
    }
}

fn make_ranks(world: usize, max: ByteSize, arena: usize, timeout: Duration) -> Vec<Rank> {
    let group = ThreadGroup::new(world);
    let hs: Vec<_> = (0..world)
        .map(|r| {
            let rv = Rendezvous::Threads(group.clone());
            std::thread::spawn(move || {
                let mut cfg = CudaConfig::new(r, world, r);
                cfg.max_bytes = max;
                cfg.timeout = timeout;
                let comm = CudaCommunicator::new(&cfg, &rv).expect("create communicator");
                let ctx = comm.context().clone();
                // SAFETY (test): no slice is shared between streams, so
                // cudarc's per-slice events are not needed, and they would be
                // recorded into captured graphs otherwise.
                unsafe { ctx.disable_event_tracking() };
                let stream = ctx.new_stream().unwrap();
                let a = stream.alloc_zeros::<u8>(arena).unwrap();
                let b = stream.alloc_zeros::<u8>(arena).unwrap();
                Rank { comm, stream, a, b }
            })
        })
        .collect();
    hs.into_iter().map(|h| h.join().unwrap()).collect()
}

#[derive(Clone, Copy, Debug)]
struct Call {
    dtype: DType,
    count: usize,
    algo: Algo,
    in_place: bool,
    offset: usize,
}

/// A rank's two arenas (a, b) as read back after a batch.
type Arenas = (Vec<u8>, Vec<u8>);

/// Runs `calls` on every rank (inputs[rank] is that rank's arena image) and
/// returns each rank's (arena a, arena b) afterwards.
fn run_batch(
    ranks: &mut [Rank],
    calls: &[Call],
    inputs: &[Vec<u8>],
    graph: bool,
) -> Vec<Result<Arenas, Error>> {
    std::thread::scope(|s| {
        let hs: Vec<_> = ranks
            .iter_mut()
            .zip(inputs)
            .map(|(rank, input)| {
                s.spawn(move || -> Result<(Vec<u8>, Vec<u8>), Error> {
                    rank.comm.context().bind_to_thread().unwrap();
                    let poison = vec![0xa5u8; input.len()];
                    rank.stream
                        .memcpy_htod(&input[..], &mut rank.a.slice_mut(..input.len()))
                        .unwrap();
                    rank.stream
                        .memcpy_htod(&poison[..], &mut rank.b.slice_mut(..input.len()))
                        .unwrap();
                    let (pa, pb) = (rank.ptr(&rank.a), rank.ptr(&rank.b));
                    let cs = rank.stream.cu_stream();
                    if graph {
                        rank.stream
                            .begin_capture(
                                sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
                            )
                            .unwrap();
                    }
                    for c in calls {
                        let inp = pa + c.offset as u64;
                        let out = if c.in_place {
                            inp
                        } else {
                            pb + c.offset as u64
                        };
                        // SAFETY: both ranges lie inside this rank's arenas,
                        // which outlive the synchronisation below.
                        unsafe {
                            rank.comm.all_reduce(
                                inp,
                                out,
                                c.count,
                                c.dtype,
                                ReduceOp::Sum,
                                c.algo,
                                cs,
                            )
                        }?;
                    }
                    if graph {
                        let g = rank
                            .stream
                            .end_capture(sys::CUgraphInstantiate_flags(0))
                            .unwrap()
                            .unwrap();
                        g.launch().unwrap();
                        rank.stream.synchronize().unwrap();
                    }
                    rank.stream.synchronize().unwrap();
                    rank.comm.check()?;
                    let mut a = vec![0u8; input.len()];
                    let mut b = vec![0u8; input.len()];
                    rank.stream
                        .memcpy_dtoh(&rank.a.slice(..input.len()), &mut a[..])
                        .unwrap();
                    rank.stream
                        .memcpy_dtoh(&rank.b.slice(..input.len()), &mut b[..])
                        .unwrap();
                    rank.stream.synchronize().unwrap();
                    Ok((a, b))
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// Lays out `calls` (dtype, count, algo, in place) in arenas, fills fresh
/// random inputs, runs them, and checks every element against a float64
/// reference and every rank's bytes against rank 0's. Returns (wrong elements, calls).
fn check_batch(
    ranks: &mut [Rank],
    spec: &[(DType, usize, Algo, bool)],
    graph: bool,
    rng: &mut Rng,
) -> (usize, usize) {
    let world = ranks.len();
    let mut calls = Vec::new();
    let mut offset = 0usize;
    for &(dtype, count, algo, in_place) in spec {
        calls.push(Call {
            dtype,
            count,
            algo,
            in_place,
            offset,
        });
        offset += (count * dtype.size()).div_ceil(256) * 256;
    }
    let inputs: Vec<Vec<u8>> = (0..world)
        .map(|_| {
            let mut arena = vec![0u8; offset];
            for c in &calls {
                let bytes = random_bytes(c.dtype, c.count, rng);
                arena[c.offset..c.offset + bytes.len()].copy_from_slice(&bytes);
            }
            arena
        })
        .collect();
    let results = run_batch(ranks, &calls, &inputs, graph);
    let results: Vec<(Vec<u8>, Vec<u8>)> = results
        .into_iter()
        .map(|r| r.expect("all-reduce"))
        .collect();
    let mut wrong = 0;
    for c in &calls {
        let n = c.count * c.dtype.size();
        let ins: Vec<&[u8]> = inputs.iter().map(|a| &a[c.offset..c.offset + n]).collect();
        let reference = reference(c.dtype, &ins, c.count);
        let out_of = |r: &(Vec<u8>, Vec<u8>)| -> Vec<u8> {
            let src = if c.in_place { &r.0 } else { &r.1 };
            src[c.offset..c.offset + n].to_vec()
        };
        let first = out_of(&results[0]);
        for (r, res) in results.iter().enumerate() {
            let out = out_of(res);
            assert_eq!(
                out, first,
                "rank {r} differs from rank 0 bit for bit in {c:?} (graph {graph})"
            );
            if !c.in_place {
                // The input of an out-of-place call is left untouched.
                assert_eq!(
                    &res.0[c.offset..c.offset + n],
                    &inputs[r][c.offset..c.offset + n],
                    "input changed in {c:?}"
                );
            }
        }
        let w = count_wrong(c.dtype, &first, &reference, world);
        if w > 0 {
            eprintln!("{w} wrong elements in {c:?} (graph {graph})");
        }
        wrong += w;
    }
    (wrong, calls.len())
}

#[test]
fn gpu_sums_are_right_for_every_size_type_algorithm_and_mode() {
    let Some(world) = gpu_world() else { return };
    let max = ByteSize::mib(8);
    let mut ranks = make_ranks(world, max, 64 << 20, Duration::from_secs(10));
    let mut rng = Rng::new(42);
    let mut total = 0;
    for graph in [false, true] {
        for dtype in DType::ALL {
            let max_count = max.bytes() as usize / dtype.size();
            let counts = [
                1,
                2,
                3,
                7,
                8,
                9,
                15,
                16,
                17,
                31,
                33,
                255,
                256,
                1000,
                4097,
                65_536 + 3,
                500_000,
                max_count,
            ];
            let mut spec = Vec::new();
            for &count in &counts {
                for algo in [Algo::OneShot, Algo::TwoShot, Algo::Auto] {
                    for in_place in [false, true] {
                        spec.push((dtype, count, algo, in_place));
                    }
                }
            }
            // Batches stay under the 64 MiB arenas.
            for chunk in spec.chunks(6) {
                let (wrong, n) = check_batch(&mut ranks, chunk, graph, &mut rng);
                assert_eq!(wrong, 0, "{dtype} graph={graph}");
                total += n;
            }
        }
    }
    eprintln!(
        "checked {total} calls on {world} GPUs: 0 wrong elements, bit-identical across ranks"
    );
}

#[test]
fn gpu_stress_100k_random_calls_are_all_right_and_bit_identical() {
    let Some(world) = gpu_world() else { return };
    let calls_wanted: usize = std::env::var("TPCOMM_STRESS_CALLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000);
    let max = ByteSize::kib(256);
    let mut ranks = make_ranks(world, max, 8 << 20, Duration::from_secs(10));
    let mut rng = Rng::new(7);
    let (mut done, mut wrong, mut graphs) = (0usize, 0usize, 0usize);
    let t0 = Instant::now();
    while done < calls_wanted {
        let mut spec = Vec::new();
        let mut bytes = 0usize;
        while spec.len() < 200 && bytes < (6 << 20) && done + spec.len() < calls_wanted {
            let dtype = DType::ALL[rng.below(3) as usize];
            let max_count = max.bytes() as usize / dtype.size();
            // Log-uniform sizes from 1 element to the maximum.
            let bits = rng.below(64 - (max_count as u64).leading_zeros() as u64 + 1);
            let count = (1 + rng.below(1u64 << bits) as usize).min(max_count);
            let algo = [Algo::OneShot, Algo::TwoShot, Algo::Auto][rng.below(3) as usize];
            spec.push((dtype, count, algo, rng.below(2) == 0));
            bytes += count * dtype.size() + 256;
        }
        let graph = rng.below(2) == 0;
        graphs += graph as usize;
        let (w, n) = check_batch(&mut ranks, &spec, graph, &mut rng);
        wrong += w;
        done += n;
    }
    eprintln!(
        "stress: {done} calls ({graphs} batches captured in graphs) on {world} GPUs in {:.1} s: {wrong} wrong elements",
        t0.elapsed().as_secs_f64()
    );
    assert_eq!(wrong, 0);
}

#[test]
fn gpu_graph_replayed_10000_times_is_right_every_time() {
    let Some(world) = gpu_world() else { return };
    let replays: usize = std::env::var("TPCOMM_REPLAYS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000);
    let mut ranks = make_ranks(world, ByteSize::mib(1), 4 << 20, Duration::from_secs(10));
    // First validate the expected bytes eagerly against the reference.
    let mut rng = Rng::new(3);
    let c1 = (DType::Bf16, 3001usize, Algo::OneShot);
    let c2 = (DType::F16, 70_001usize, Algo::TwoShot);
    let in1: Vec<Vec<u8>> = (0..world)
        .map(|_| random_bytes(c1.0, c1.1, &mut rng))
        .collect();
    let in2: Vec<Vec<u8>> = (0..world)
        .map(|_| random_bytes(c2.0, c2.1, &mut rng))
        .collect();
    let off2 = (c1.1 * 2).div_ceil(256) * 256;
    let n2 = c2.1 * 2;
    let r1 = reference(c1.0, &in1.iter().map(|v| &v[..]).collect::<Vec<_>>(), c1.1);
    let r2 = reference(c2.0, &in2.iter().map(|v| &v[..]).collect::<Vec<_>>(), c2.1);
    let results: Vec<usize> = std::thread::scope(|s| {
        let hs: Vec<_> = ranks
            .iter_mut()
            .enumerate()
            .map(|(r, rank)| {
                let (in1, in2, r1, r2) = (&in1, &in2, &r1, &r2);
                s.spawn(move || {
                    rank.comm.context().bind_to_thread().unwrap();
                    let mut arena = vec![0u8; off2 + n2];
                    arena[..c1.1 * 2].copy_from_slice(&in1[r]);
                    arena[off2..].copy_from_slice(&in2[r]);
                    rank.stream
                        .memcpy_htod(&arena[..], &mut rank.a.slice_mut(..arena.len()))
                        .unwrap();
                    let (pa, pb) = (rank.ptr(&rank.a), rank.ptr(&rank.b));
                    let cs = rank.stream.cu_stream();
                    rank.stream
                        .begin_capture(
                            sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
                        )
                        .unwrap();
                    // SAFETY: ranges inside this rank's arenas, alive for the test.
                    unsafe {
                        rank.comm
                            .all_reduce(pa, pb, c1.1, c1.0, ReduceOp::Sum, c1.2, cs)
                            .unwrap();
                        rank.comm
                            .all_reduce(
                                pa + off2 as u64,
                                pb + off2 as u64,
                                c2.1,
                                c2.0,
                                ReduceOp::Sum,
                                c2.2,
                                cs,
                            )
                            .unwrap();
                    }
                    let g = rank
                        .stream
                        .end_capture(sys::CUgraphInstantiate_flags(0))
                        .unwrap()
                        .unwrap();
                    let poison = vec![0xffu8; arena.len()];
                    let mut out = vec![0u8; arena.len()];
                    let mut expected: Option<Vec<u8>> = None;
                    let mut bad = 0usize;
                    for i in 0..replays {
                        rank.stream
                            .memcpy_htod(&poison[..], &mut rank.b.slice_mut(..arena.len()))
                            .unwrap();
                        g.launch().unwrap();
                        rank.stream
                            .memcpy_dtoh(&rank.b.slice(..arena.len()), &mut out[..])
                            .unwrap();
                        rank.stream.synchronize().unwrap();
                        rank.comm.check().unwrap();
                        match &expected {
                            None => {
                                assert_eq!(count_wrong(c1.0, &out[..c1.1 * 2], r1, world), 0);
                                assert_eq!(count_wrong(c2.0, &out[off2..], r2, world), 0);
                                expected = Some(out.clone());
                            }
                            Some(e) => {
                                if *e != out {
                                    bad += 1;
                                    eprintln!("rank {r}: replay {i} differs from the first replay");
                                }
                            }
                        }
                    }
                    bad
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    eprintln!("graph of 2 all-reduces replayed {replays} times on {world} GPUs: wrong replays per rank {results:?}");
    assert!(results.iter().all(|&b| b == 0));
}

#[test]
fn gpu_peer_that_never_arrives_gives_a_timeout_naming_it() {
    let Some(_) = gpu_world() else { return };
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
        rank0.comm.all_reduce(
            pa,
            pb,
            4096,
            DType::Bf16,
            ReduceOp::Sum,
            algo,
            rank0.stream.cu_stream(),
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
        rank0.comm.all_reduce(
            pa,
            pb,
            4096,
            DType::Bf16,
            ReduceOp::Sum,
            algo,
            rank0.stream.cu_stream(),
        )
    };
    assert!(matches!(again, Err(Error::PeerTimeout { peer: 1, .. })));
}

#[test]
fn gpu_memory_report_matches_the_free_memory_drop() {
    let Some(world) = gpu_world() else { return };
    // The first group loads the kernels and enables peer access; neither is
    // repeated, so the second group's drop is its buffers alone.
    drop(make_ranks(
        world,
        ByteSize::mib(8),
        16,
        Duration::from_secs(10),
    ));
    let group = ThreadGroup::new(world);
    let hs: Vec<_> = (0..world)
        .map(|r| {
            let rv = Rendezvous::Threads(group.clone());
            std::thread::spawn(move || {
                let ctx = open_context(r).unwrap();
                ctx.synchronize().unwrap();
                let (free_before, _) = tpcomm::cuda::mem_get_info().unwrap();
                let mut cfg = CudaConfig::new(r, world, r);
                cfg.max_bytes = ByteSize::b((8 << 20) + 6);
                let comm = CudaCommunicator::new(&cfg, &rv).unwrap();
                let (free_after, _) = tpcomm::cuda::mem_get_info().unwrap();
                let drop = free_before - free_after;
                let rep = comm.memory_report().clone();
                eprintln!(
                    "{rep}  free memory dropped by {drop} bytes ({})",
                    ByteSize::from_usize(drop)
                );
                (rep.device_reserved().bytes() as usize, drop)
            })
        })
        .collect();
    for h in hs {
        let (reserved, drop) = h.join().unwrap();
        assert_eq!(
            reserved, drop,
            "reported reserved bytes vs free-memory drop"
        );
    }
}
