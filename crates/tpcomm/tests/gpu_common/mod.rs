//! Shared by the GPU all-reduce tests (gpu_allreduce.rs over P2P,
//! gpu_host_allreduce.rs over pinned host memory): ranks are threads, one per
//! GPU, each with a stream and two device arenas; a batch of calls gets fresh
//! random inputs, runs eagerly or captured in a CUDA graph, and every output
//! element is checked against a float64 reference and every rank's bytes
//! against rank 0's.
#![allow(dead_code)]

use std::sync::Arc;
use tpcomm::cuda::cudarc::driver::{sys, CudaContext, CudaSlice, CudaStream, DevicePtr};
use tpcomm::cuda::{open_context, GpuComm, P2pTransport, StreamAllReduce};
use tpcomm::verify::{count_wrong, random_bytes, reference, Rng};
use tpcomm::{Algo, DType, Error};

/// The GPUs this process sees (once asked, the same for the whole run).
pub fn gpu_count() -> usize {
    static N: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *N.get_or_init(|| {
        // The ranks of these tests are threads of this process, several per
        // GPU: each rank's stream needs a hardware queue of its own
        // (docs/shared-gpu.md). CUDA reads this once, when it starts, which
        // is the next line; a value given by the caller is kept.
        tpcomm::cuda::share::widen_queues_for_threads();
        tpcomm::cuda::ensure_driver().expect("CUDA driver");
        CudaContext::device_count().expect("device count") as usize
    })
}

/// The GPU of `rank`: ranks go round-robin over the GPUs, so on one GPU
/// every rank shares it.
pub fn device_of(rank: usize) -> usize {
    rank % gpu_count().max(1)
}

/// The world sizes to test when TPCOMM_GPU_TESTS is set: TPCOMM_TEST_WORLDS
/// (a comma list, each from 2 to 8, e.g. "2,3,4,5,8"), else every GPU (two
/// ranks sharing it on a machine of one GPU). `None` (after saying the test
/// is skipped) when TPCOMM_GPU_TESTS is unset. `needs` says what the GPUs
/// need, for the skip message.
pub fn gpu_worlds(needs: &str) -> Option<Vec<usize>> {
    if !tpcomm::env::GPU_TESTS
        .get_or(false)
        .unwrap_or_else(|e| panic!("{e}"))
    {
        eprintln!("SKIPPED: set TPCOMM_GPU_TESTS=1 to run the GPU tests (needs {needs})");
        return None;
    }
    let n = gpu_count();
    assert!(n >= 1, "TPCOMM_GPU_TESTS=1 but no GPU");
    let worlds = match tpcomm::env::TEST_WORLDS
        .get()
        .unwrap_or_else(|e| panic!("{e}"))
    {
        Some(list) => list.into_iter().map(|w| w as usize).collect(),
        None => vec![n.clamp(2, tpcomm::transport::MAX_WORLD)],
    };
    Some(worlds)
}

/// "4 ranks on 1 GPU (shared GPU: up to 4 ranks per device)", for the
/// lines a test prints: timings of shared GPUs are never an N-GPU result.
pub fn describe(world: usize) -> String {
    let n = gpu_count().max(1);
    let per = world.div_ceil(n);
    if per > 1 {
        format!(
            "{world} ranks on {} GPU(s) (shared GPU: up to {per} ranks per device)",
            n.min(world)
        )
    } else {
        format!("{world} ranks on {world} GPUs")
    }
}

/// A communicator the harness drives: its calls, and the outcome of the
/// calls so far (a peer that never arrived).
pub trait TestComm: StreamAllReduce + Send {
    fn status(&self) -> Result<(), Error>;
}

impl TestComm for P2pTransport {
    fn status(&self) -> Result<(), Error> {
        self.check()
    }
}

impl TestComm for tpcomm::cuda::PinnedTransport {
    fn status(&self) -> Result<(), Error> {
        self.check()
    }
}

impl TestComm for GpuComm {
    fn status(&self) -> Result<(), Error> {
        self.check()
    }
}

/// One rank: its communicator, its GPU's context, a stream and two arenas.
pub struct Rank<C> {
    pub comm: C,
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    pub a: CudaSlice<u8>,
    pub b: CudaSlice<u8>,
}

impl<C> Rank<C> {
    pub fn ptr(&self, buf: &CudaSlice<u8>) -> u64 {
        buf.device_ptr(&self.stream).0
    }
}

/// Creates `world` ranks, rank r on GPU [`device_of`]`(r)`, its communicator by
/// `new(r)` on its own thread (all ranks create theirs at once, as the
/// rendezvous needs), each with two arenas of `arena` bytes.
pub fn make_ranks<C: TestComm + 'static>(
    world: usize,
    arena: usize,
    new: impl Fn(usize) -> C + Send + Sync + Clone + 'static,
) -> Vec<Rank<C>> {
    let hs: Vec<_> = (0..world)
        .map(|r| {
            let new = new.clone();
            std::thread::spawn(move || {
                let comm = new(r);
                let ctx = open_context(device_of(r)).unwrap();
                // SAFETY (test): no slice is shared between streams, so
                // cudarc's per-slice events are not needed, and they would be
                // recorded into captured graphs otherwise.
                unsafe { ctx.disable_event_tracking() };
                let stream = ctx.new_stream().unwrap();
                let a = stream.alloc_zeros::<u8>(arena).unwrap();
                let b = stream.alloc_zeros::<u8>(arena).unwrap();
                Rank {
                    comm,
                    ctx,
                    stream,
                    a,
                    b,
                }
            })
        })
        .collect();
    hs.into_iter().map(|h| h.join().unwrap()).collect()
}

#[derive(Clone, Copy, Debug)]
pub struct Call {
    pub dtype: DType,
    pub count: usize,
    pub algo: Algo,
    pub in_place: bool,
    pub offset: usize,
}

/// A rank's two arenas (a, b) as read back after a batch.
pub type Arenas = (Vec<u8>, Vec<u8>);

/// Runs `calls` on every rank (inputs[rank] is that rank's image of arena
/// a; arena b is poisoned) and returns each rank's arenas afterwards, or the
/// error a call or the communicator's status gave.
pub fn run_batch<C: TestComm>(
    ranks: &mut [Rank<C>],
    calls: &[Call],
    inputs: &[Vec<u8>],
    graph: bool,
) -> Vec<Result<Arenas, Error>> {
    std::thread::scope(|s| {
        let hs: Vec<_> = ranks
            .iter_mut()
            .zip(inputs)
            .map(|(rank, input)| {
                s.spawn(move || -> Result<Arenas, Error> {
                    rank.ctx.bind_to_thread().unwrap();
                    let n = input.len();
                    let poison = vec![0xa5u8; n];
                    rank.stream
                        .memcpy_htod(&input[..], &mut rank.a.slice_mut(..n))
                        .unwrap();
                    rank.stream
                        .memcpy_htod(&poison[..], &mut rank.b.slice_mut(..n))
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
                            rank.comm.all_reduce_call(
                                &tpcomm::cuda::Call::new(inp, out, c.count, c.dtype, cs)
                                    .with_algo(c.algo),
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
                        // The graph must outlive its run.
                        rank.stream.synchronize().unwrap();
                    }
                    rank.stream.synchronize().unwrap();
                    rank.comm.status()?;
                    let mut a = vec![0u8; n];
                    let mut b = vec![0u8; n];
                    rank.stream
                        .memcpy_dtoh(&rank.a.slice(..n), &mut a[..])
                        .unwrap();
                    rank.stream
                        .memcpy_dtoh(&rank.b.slice(..n), &mut b[..])
                        .unwrap();
                    rank.stream.synchronize().unwrap();
                    Ok((a, b))
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// Lays out `spec` (dtype, count, algo, in place) in the arenas, fills fresh
/// random inputs, runs the calls, and checks every element against a float64
/// reference, every rank's bytes against rank 0's, and that an out-of-place
/// call left its input alone. Returns (wrong elements, calls).
pub fn check_batch<C: TestComm>(
    ranks: &mut [Rank<C>],
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
    // Every rank's inputs from a generator of its own, seeded from `rng`,
    // a thread per rank (at 8 ranks the CPU side is most of a batch).
    let seeds: Vec<u64> = (0..world).map(|_| rng.next_u64()).collect();
    let calls_ref = &calls;
    let inputs: Vec<Vec<u8>> = std::thread::scope(|s| {
        let hs: Vec<_> = seeds
            .iter()
            .map(|&seed| {
                s.spawn(move || {
                    let mut rng = Rng::new(seed);
                    let mut arena = vec![0u8; offset];
                    for c in calls_ref {
                        let bytes = random_bytes(c.dtype, c.count, &mut rng);
                        arena[c.offset..c.offset + bytes.len()].copy_from_slice(&bytes);
                    }
                    arena
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let results: Vec<Arenas> = run_batch(ranks, &calls, &inputs, graph)
        .into_iter()
        .map(|r| r.expect("all-reduce"))
        .collect();
    // The checks, calls dealt round-robin over the CPU's threads.
    let lanes = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 16);
    let (inputs, results) = (&inputs, &results);
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..lanes)
            .map(|lane| {
                let mine: Vec<&Call> = calls.iter().skip(lane).step_by(lanes).collect();
                s.spawn(move || check_calls(&mine, inputs, results, graph))
            })
            .collect();
        let wrong = hs.into_iter().map(|h| h.join().unwrap()).sum();
        (wrong, calls.len())
    })
}

/// Checks `calls` of one batch: every rank's bytes equal rank 0's, an
/// out-of-place call's input unchanged, rank 0's output against the
/// float64 reference. Returns the wrong elements.
fn check_calls(calls: &[&Call], inputs: &[Vec<u8>], results: &[Arenas], graph: bool) -> usize {
    let world = inputs.len();
    let mut wrong = 0;
    for c in calls {
        let n = c.count * c.dtype.size();
        let ins: Vec<&[u8]> = inputs.iter().map(|a| &a[c.offset..c.offset + n]).collect();
        let reference = reference(c.dtype, &ins, c.count);
        let out_of = |r: &Arenas| -> Vec<u8> {
            let src = if c.in_place { &r.0 } else { &r.1 };
            src[c.offset..c.offset + n].to_vec()
        };
        let first = out_of(&results[0]);
        for (r, res) in results.iter().enumerate() {
            assert_eq!(
                out_of(res),
                first,
                "rank {r} differs from rank 0 bit for bit in {c:?} (graph {graph})"
            );
            if !c.in_place {
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
    wrong
}

/// Every size class from 1 element to `max`, every type, OneShot, TwoShot
/// and Auto, in and out of place, eager and graph, in batches that fit
/// 64 MiB arenas. Returns the calls checked; asserts that none was wrong.
pub fn check_every_size<C: TestComm>(
    ranks: &mut [Rank<C>],
    max: tpcomm::ByteSize,
    rng: &mut Rng,
    what: &str,
) -> usize {
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
            for chunk in spec.chunks(6) {
                let (wrong, n) = check_batch(ranks, chunk, graph, rng);
                assert_eq!(wrong, 0, "{dtype} graph={graph} {what}");
                total += n;
            }
        }
    }
    total
}

/// What `stress` did: calls, batches captured in graphs, wrong elements.
pub struct Stress {
    pub calls: usize,
    pub graph_batches: usize,
    pub wrong: usize,
}

/// `calls` random calls (log-uniform sizes from 1 element to `max`, random
/// type, algorithm and placement) in batches of up to 200, each batch eager
/// or captured in a graph at random.
pub fn stress<C: TestComm>(
    ranks: &mut [Rank<C>],
    max: tpcomm::ByteSize,
    calls: usize,
    rng: &mut Rng,
) -> Stress {
    let mut s = Stress {
        calls: 0,
        graph_batches: 0,
        wrong: 0,
    };
    while s.calls < calls {
        let mut spec = Vec::new();
        let mut bytes = 0usize;
        while spec.len() < 200 && bytes < (6 << 20) && s.calls + spec.len() < calls {
            let dtype = DType::ALL[rng.below(3) as usize];
            let max_count = max.bytes() as usize / dtype.size();
            let bits = rng.below(64 - (max_count as u64).leading_zeros() as u64 + 1);
            let count = (1 + rng.below(1u64 << bits) as usize).min(max_count);
            let algo = [Algo::OneShot, Algo::TwoShot, Algo::Auto][rng.below(3) as usize];
            spec.push((dtype, count, algo, rng.below(2) == 0));
            bytes += count * dtype.size() + 256;
        }
        let graph = rng.below(2) == 0;
        s.graph_batches += graph as usize;
        let (w, n) = check_batch(ranks, &spec, graph, rng);
        s.wrong += w;
        s.calls += n;
    }
    s
}

/// TPCOMM_STRESS_CALLS, or 100,000.
pub fn stress_calls() -> usize {
    tpcomm::env::STRESS_CALLS
        .get_or(100_000)
        .unwrap_or_else(|e| panic!("{e}")) as usize
}

/// Creates rank r's communicator with `new(r)` on its own thread, every
/// rank at once, and reads every GPU's free memory before any rank
/// allocates and after every rank is done. Returns, per rank, its
/// communicator and how much its GPU's free memory dropped (one figure for
/// all the ranks sharing that GPU).
pub fn create_measured<C: Send + 'static>(
    world: usize,
    new: impl Fn(usize) -> C + Send + Sync + Clone + 'static,
) -> Vec<(C, usize)> {
    let gate = Arc::new(std::sync::Barrier::new(world));
    let hs: Vec<_> = (0..world)
        .map(|r| {
            let (new, gate) = (new.clone(), gate.clone());
            std::thread::spawn(move || {
                let ctx = open_context(device_of(r)).unwrap();
                ctx.synchronize().unwrap();
                gate.wait();
                let (free_before, _) = tpcomm::cuda::mem_get_info().unwrap();
                gate.wait();
                let comm = new(r);
                ctx.synchronize().unwrap();
                gate.wait();
                let (free_after, _) = tpcomm::cuda::mem_get_info().unwrap();
                (comm, free_before - free_after)
            })
        })
        .collect();
    hs.into_iter().map(|h| h.join().unwrap()).collect()
}

/// Asserts that on every GPU the bytes the ranks there report reserved add
/// up to the drop of that GPU's free memory.
pub fn assert_reports_add_up(reserved_and_drop: &[(usize, usize)]) {
    let mut per_device = std::collections::BTreeMap::<usize, (usize, usize)>::new();
    for (r, &(reserved, drop)) in reserved_and_drop.iter().enumerate() {
        let e = per_device.entry(device_of(r)).or_insert((0, drop));
        e.0 += reserved;
        assert_eq!(
            e.1,
            drop,
            "ranks on GPU {} saw different drops",
            device_of(r)
        );
    }
    for (d, (reserved, drop)) in per_device {
        eprintln!(
            "GPU {d}: ranks there report {reserved} bytes reserved; free memory dropped by {drop}"
        );
        assert_eq!(
            reserved, drop,
            "GPU {d}: reported reserved bytes vs free-memory drop"
        );
    }
}

/// Every algorithm at the largest message the buffers take (`max`), f32 and
/// bf16, eager and graph, each checked against the float64 reference; the
/// lines printed say what ran (`what`) and where.
pub fn check_largest_messages<C: TestComm>(
    ranks: &mut [Rank<C>],
    max: tpcomm::ByteSize,
    what: &str,
) {
    let world = ranks.len();
    let mut rng = Rng::new(11);
    for graph in [false, true] {
        for algo in [Algo::OneShot, Algo::TwoShot, Algo::Auto] {
            for dtype in [DType::F32, DType::Bf16] {
                let count = max.bytes() as usize / dtype.size();
                let t0 = std::time::Instant::now();
                let (wrong, _) =
                    check_batch(ranks, &[(dtype, count, algo, false)], graph, &mut rng);
                eprintln!(
                    "{what} {algo:?} {dtype} {count} elements graph={graph} on {}: {wrong} wrong, {:.1} ms",
                    describe(world),
                    t0.elapsed().as_secs_f64() * 1e3
                );
                assert_eq!(wrong, 0);
            }
        }
    }
}

/// [`stress`] with [`stress_calls`] calls on `ranks`, timed, printed with
/// `what` and where it ran; asserts that no element was wrong.
pub fn assert_stress<C: TestComm>(ranks: &mut [Rank<C>], max: tpcomm::ByteSize, what: &str) {
    let world = ranks.len();
    let t0 = std::time::Instant::now();
    let s = stress(ranks, max, stress_calls(), &mut Rng::new(7));
    eprintln!(
        "{what}: {} calls ({} batches captured in graphs) on {} in {:.1} s: {} wrong elements",
        s.calls,
        s.graph_batches,
        describe(world),
        t0.elapsed().as_secs_f64(),
        s.wrong
    );
    assert_eq!(s.wrong, 0);
}
