//! GPU tests of the quantized all-reduce (int8 / fp8 on the wire) over both
//! GPU transports, ranks as threads. Ignored unless asked for, and then they
//! run only with TPCOMM_GPU_TESTS=1 (`-- --ignored --test-threads=1`); world
//! sizes come from TPCOMM_TEST_WORLDS (gpu_common), on however many GPUs
//! there are: ranks go round-robin over the GPUs, so they may share one.
//!
//! Each case checks that every rank's output bytes are identical, that they
//! equal the CPU model of the same arithmetic on the same inputs bit for bit
//! (tpcomm::quant::model), and that the error against a float64 reference is
//! within docs/quantized.md's bound; graph replays, mixing with exact calls,
//! a peer that never arrives and the memory report are covered too.

use std::sync::Arc;
use std::time::Duration;
use tpcomm::cuda::cudarc::driver::{sys, CudaContext, CudaSlice, CudaStream, DevicePtr};
use tpcomm::cuda::quant::QuantAlgo;
use tpcomm::cuda::{
    open_context, Call, Communicator, CudaConfig, Launch, Rendezvous, Route, ThreadGroup, Transport,
};
use tpcomm::quant::model::{self, inputs, reference_f64};
use tpcomm::quant::{Format, Wire};
use tpcomm::{ByteSize, DType, Error, Place};

mod gpu_common;
use gpu_common::{describe, device_of, gpu_worlds};

/// The world sizes when TPCOMM_GPU_TESTS is set (gpu_common's rules:
/// TPCOMM_TEST_WORLDS, ranks round-robin over the GPUs); `None` after saying
/// the test is skipped otherwise.
fn setup() -> Option<Vec<usize>> {
    gpu_worlds("1+ GPUs; ranks may share one")
}

/// The transports to test: host, and Auto, which is P2P when every GPU
/// pair used can access each other (ranks of one GPU always can) and host
/// otherwise (then host is simply tested twice).
fn transports() -> [Transport; 2] {
    [Transport::Host, Transport::Auto]
}

struct Rank {
    comm: Communicator,
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    inp: CudaSlice<u8>,
    out: CudaSlice<u8>,
}

const MAX: ByteSize = ByteSize::mib(8);

fn make_ranks(world: usize, transport: Transport, timeout: Duration) -> Vec<Rank> {
    let group = ThreadGroup::new(world);
    let hs: Vec<_> = (0..world)
        .map(|r| {
            let group = group.clone();
            std::thread::spawn(move || {
                let dev = device_of(r);
                let mut cfg = CudaConfig::new(r, world, dev);
                cfg.max_bytes = MAX;
                cfg.timeout = timeout;
                cfg.transport = transport;
                cfg.wire = Some(Wire::int8());
                cfg.wire_min_bytes = Some(ByteSize::b(0));
                // The gathered form's blocks too, so every algorithm runs;
                // calls that leave the choice to the communicator take it.
                cfg.wire_algo = QuantAlgo::Gathered;
                let comm = Communicator::new(&cfg, &Rendezvous::Threads(group))
                    .expect("create communicator");
                let ctx = open_context(dev).unwrap();
                // SAFETY (test): no slice is shared between streams.
                unsafe { ctx.disable_event_tracking() };
                let stream = ctx.new_stream().unwrap();
                let inp = stream.alloc_zeros::<u8>(MAX.bytes() as usize).unwrap();
                let out = stream.alloc_zeros::<u8>(MAX.bytes() as usize).unwrap();
                Rank {
                    comm,
                    ctx,
                    stream,
                    inp,
                    out,
                }
            })
        })
        .collect();
    hs.into_iter().map(|h| h.join().unwrap()).collect()
}

/// Element bytes of `xs` (values already representable in `dtype`).
fn to_bytes(dtype: DType, xs: &[f32]) -> Vec<u8> {
    let mut v = Vec::with_capacity(xs.len() * dtype.size());
    for &x in xs {
        let b = model::round_to(dtype, x);
        v.extend_from_slice(&b.to_le_bytes()[..dtype.size()]);
    }
    v
}

fn from_bytes(dtype: DType, b: &[u8]) -> Vec<u32> {
    b.chunks(dtype.size())
        .map(|c| {
            let mut w = [0u8; 4];
            w[..c.len()].copy_from_slice(c);
            u32::from_le_bytes(w)
        })
        .collect()
}

/// One quantized call on every rank: `inputs[r]` in, the output bytes of
/// every rank (read back after `replays` launches of a captured graph, or
/// one eager call), or the error.
/// `algo` `None`: `Communicator::all_reduce_wire` (the communicator's own
/// choice); `Some`: that algorithm through `Communicator::all_reduce_quant`,
/// which must run it.
fn run(
    ranks: &mut [Rank],
    dtype: DType,
    wire: Wire,
    algo: Option<QuantAlgo>,
    in_place: bool,
    inputs: &[Vec<u8>],
    graph_replays: usize,
) -> Vec<Result<Vec<u8>, Error>> {
    // Every rank's copies are done before any rank launches: a copy from
    // pageable memory can hold a rank's thread while a peer's kernel
    // already waits for that rank's call (docs/shared-gpu.md, two rules).
    let gate = &std::sync::Barrier::new(ranks.len());
    std::thread::scope(|s| {
        let hs: Vec<_> = ranks
            .iter_mut()
            .zip(inputs)
            .map(|(rank, input)| {
                s.spawn(move || -> Result<Vec<u8>, Error> {
                    rank.ctx.bind_to_thread().unwrap();
                    let n = input.len();
                    let count = n / dtype.size();
                    rank.stream
                        .memcpy_htod(&input[..], &mut rank.inp.slice_mut(..n))
                        .unwrap();
                    let poison = vec![0xa5u8; n];
                    rank.stream
                        .memcpy_htod(&poison[..], &mut rank.out.slice_mut(..n))
                        .unwrap();
                    rank.stream.synchronize().unwrap();
                    gate.wait();
                    let pi = rank.inp.device_ptr(&rank.stream).0;
                    let po = if in_place {
                        pi
                    } else {
                        rank.out.device_ptr(&rank.stream).0
                    };
                    let cs = rank.stream.cu_stream();
                    let call_of = |how| Call::new(pi, po, count, dtype, cs).with_launch(how);
                    let call = |how| -> Result<Route, Error> {
                        // SAFETY: both buffers hold MAX bytes and outlive the
                        // synchronisation below.
                        unsafe {
                            match algo {
                                Some(a) => {
                                    rank.comm
                                        .all_reduce_quant(&call_of(how), wire, a)
                                        .map(|ran| {
                                            // Two-shot runs where every rank owns a chunk.
                                            let world = inputs.len();
                                            let want = match a {
                                                QuantAlgo::TwoShot | QuantAlgo::Auto
                                                    if a.runs_twoshot(count, world) =>
                                                {
                                                    QuantAlgo::TwoShot
                                                }
                                                QuantAlgo::TwoShot | QuantAlgo::Auto => {
                                                    QuantAlgo::OneShot
                                                }
                                                _ => a,
                                            };
                                            assert_eq!(ran, want, "asked for {a:?}, count {count}");
                                            Route::Tpcomm {
                                                transport: rank.comm.routes().group().transport,
                                                algo: None,
                                                wire,
                                            }
                                        })
                                }
                                None => rank.comm.all_reduce_wire(&call_of(how), wire),
                            }
                        }
                    };
                    if graph_replays == 0 {
                        let route = call(Launch::Ordinary)?;
                        if wire != Wire::Exact {
                            assert!(
                                matches!(route, Route::Tpcomm { wire: w, algo: None, .. } if w == wire),
                                "{route}"
                            );
                        }
                    } else {
                        rank.stream
                            .begin_capture(
                                sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
                            )
                            .unwrap();
                        call(Launch::Ordinary)?;
                        let g = rank
                            .stream
                            .end_capture(sys::CUgraphInstantiate_flags(0))
                            .unwrap()
                            .unwrap();
                        for _ in 0..graph_replays {
                            g.launch().unwrap();
                        }
                        rank.stream.synchronize().unwrap();
                    }
                    rank.stream.synchronize().unwrap();
                    rank.comm.check()?;
                    let mut o = vec![0u8; n];
                    let src = if in_place { &rank.inp } else { &rank.out };
                    rank.stream
                        .memcpy_dtoh(&src.slice(..n), &mut o[..])
                        .unwrap();
                    rank.stream.synchronize().unwrap();
                    Ok(o)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// The documented bound on the relative RMS error for Gaussian inputs
/// (docs/quantized.md), with room for small messages' sampling noise.
fn bound(f: Format, twoshot: bool, count: usize) -> f64 {
    let b = match (f, twoshot) {
        (Format::Int8, false) => 0.01,
        (Format::Int8, true) => 0.01,
        (Format::Fp8E4m3, false) => 0.03,
        (Format::Fp8E4m3, true) => 0.04,
    };
    if count >= 4096 {
        b
    } else {
        3.0 * b
    }
}

/// Every rank's input of one (type, count), sampled once and checked
/// against by every call made on it; the CPU model's bits (one-shot,
/// two-shot) and the float64 reference are computed at most once each.
struct Inputs {
    dtype: DType,
    xs: Vec<Vec<f32>>,
    bytes: Vec<Vec<u8>>,
    bits: [Option<Vec<u32>>; 2],
    reference: Option<Vec<f64>>,
}

impl Inputs {
    /// Fresh Gaussian inputs, one rank per thread (each from a seed drawn
    /// from `rng`, so the run stays reproducible): the sampling is most of
    /// the CPU time of the bit-exact test.
    fn new(world: usize, dtype: DType, count: usize, rng: &mut inputs::Rng) -> Self {
        let seeds: Vec<u64> = (0..world).map(|_| rng.next_u64()).collect();
        let (xs, bytes) = std::thread::scope(|s| {
            let hs: Vec<_> = seeds
                .iter()
                .map(|&seed| {
                    s.spawn(move || {
                        let x = inputs::sample(
                            &mut inputs::Rng::new(seed),
                            inputs::Dist::Gaussian,
                            dtype,
                            count,
                        );
                        let b = to_bytes(dtype, &x);
                        (x, b)
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).unzip()
        });
        Self {
            dtype,
            xs,
            bytes,
            bits: [None, None],
            reference: None,
        }
    }
}

/// The algorithms to test: the communicator's choice (`wire_algo`, the
/// gathered form in these tests), the kernels' own choice, the two kernels
/// and the gathered form.
fn algos() -> [Option<QuantAlgo>; 5] {
    [
        None,
        Some(QuantAlgo::Auto),
        Some(QuantAlgo::OneShot),
        Some(QuantAlgo::TwoShot),
        Some(QuantAlgo::Gathered),
    ]
}

/// Runs one case on `inp` and checks it; in-place calls of a graph replay
/// their own output, so only out-of-place calls are replayed.
fn check_on(
    ranks: &mut [Rank],
    inp: &mut Inputs,
    wire: Wire,
    algo: Option<QuantAlgo>,
    in_place: bool,
    replays: usize,
) {
    let world = ranks.len();
    let dtype = inp.dtype;
    let count = inp.xs[0].len();
    let (f, g) = wire.quantized().unwrap();
    // `None` runs the communicator's wire_algo: the gathered form here.
    let twoshot = algo
        .unwrap_or(QuantAlgo::Gathered)
        .runs_twoshot(count, world);
    let outs: Vec<Vec<u8>> = run(ranks, dtype, wire, algo, in_place, &inp.bytes, replays)
        .into_iter()
        .map(|r| r.expect("quantized all-reduce"))
        .collect();
    let what = format!(
        "{} {dtype} count {count} two-shot {twoshot} in_place {in_place} replays {replays} world {world}",
        wire.label()
    );
    for (r, o) in outs.iter().enumerate() {
        assert!(o == &outs[0], "rank {r} differs from rank 0: {what}");
    }
    let got = from_bytes(dtype, &outs[0]);
    let xs = &inp.xs;
    let want = inp.bits[twoshot as usize].get_or_insert_with(|| {
        if twoshot {
            model::all_reduce_twoshot_bits(f, g as usize, dtype, xs)
        } else {
            model::all_reduce_bits(f, g as usize, dtype, xs)
        }
    });
    let mismatches = got.iter().zip(want.iter()).filter(|(a, b)| a != b).count();
    if mismatches > 0 {
        let i = got
            .iter()
            .zip(want.iter())
            .position(|(a, b)| a != b)
            .unwrap();
        panic!(
            "{mismatches} elements differ from the CPU model ({what}); first at {i}: {:#x} vs {:#x}",
            got[i], want[i]
        );
    }
    let vals: Vec<f32> = got.iter().map(|&b| model::value_of(dtype, b)).collect();
    let reference = inp.reference.get_or_insert_with(|| reference_f64(xs));
    let e = model::error_stats(&vals, reference);
    assert!(
        e.rel_rms <= bound(f, twoshot, count),
        "rel RMS {:.4} above the bound ({what})",
        e.rel_rms
    );
}

#[test]
#[ignore = "needs a GPU: TPCOMM_GPU_TESTS=1 [TPCOMM_TEST_WORLDS=2,4,8] cargo test --test gpu_quant -- --ignored --test-threads=1"]
fn gpu_quant_matches_the_cpu_model_bit_for_bit_on_every_rank() {
    let Some(worlds) = setup() else {
        return;
    };
    let mut rng = inputs::Rng::new(0x9e37);
    for &world in &worlds {
        for t in transports() {
            let mut ranks = make_ranks(world, t, Duration::from_secs(20));
            let wires = [
                Wire::Int8 { group: 32 },
                Wire::Int8 { group: 64 },
                Wire::Int8 { group: 128 },
                Wire::Fp8 { group: 32 },
                Wire::Fp8 { group: 128 },
            ];
            let started = std::time::Instant::now();
            for wire in wires {
                for dtype in DType::ALL {
                    let max_count = MAX.bytes() as usize / dtype.size();
                    for count in [1, 7, 8, 9, 33, 4095, 4096, 4097, 8193, 100_003, max_count] {
                        // The calls below share their inputs and models.
                        let mut inp = Inputs::new(world, dtype, count, &mut rng);
                        for in_place in [false, true] {
                            for algo in algos() {
                                check_on(&mut ranks, &mut inp, wire, algo, in_place, 0);
                            }
                        }
                    }
                }
                // Progress: a slow run shows these lines coming; a stuck one
                // stops at a (world, transport, wire).
                eprintln!(
                    "  {} over {}: {} matched, {:.1} s so far",
                    describe(world),
                    ranks[0].comm.gpu().transport().name(),
                    wire.label(),
                    started.elapsed().as_secs_f64()
                );
            }
            eprintln!(
                "{} over {}: every case matched",
                describe(world),
                ranks[0].comm.gpu().transport().name()
            );
        }
    }
}

#[test]
#[ignore = "needs a GPU: TPCOMM_GPU_TESTS=1 [TPCOMM_TEST_WORLDS=2,4,8] cargo test --test gpu_quant -- --ignored --test-threads=1"]
fn gpu_quant_graph_replays_advance_the_epoch_and_mix_with_exact_calls() {
    let Some(worlds) = setup() else {
        return;
    };
    let mut rng = inputs::Rng::new(0x51ab);
    for &world in &worlds {
        for t in transports() {
            let mut ranks = make_ranks(world, t, Duration::from_secs(20));
            for replays in [1, 2, 5, 100] {
                for algo in algos().into_iter().skip(1) {
                    // A case on fresh inputs.
                    let mut inp = Inputs::new(ranks.len(), DType::Bf16, 300_001, &mut rng);
                    check_on(&mut ranks, &mut inp, Wire::int8(), algo, false, replays);
                    // A case on fresh inputs.
                    let mut inp = Inputs::new(ranks.len(), DType::F16, 70_000, &mut rng);
                    check_on(&mut ranks, &mut inp, Wire::fp8(), algo, false, replays);
                }
                // An exact call in between: separate buffers and epochs.
                let xs: Vec<Vec<u8>> = (0..world)
                    .map(|_| {
                        to_bytes(
                            DType::Bf16,
                            &inputs::sample(&mut rng, inputs::Dist::Gaussian, DType::Bf16, 5000),
                        )
                    })
                    .collect();
                let outs = run(&mut ranks, DType::Bf16, Wire::Exact, None, false, &xs, 0);
                // Wire::Exact routes to tpcomm's exact kernels.
                for o in &outs {
                    assert!(o.is_ok(), "{o:?}");
                }
            }
        }
    }
}

#[test]
#[ignore = "needs a GPU: TPCOMM_GPU_TESTS=1 [TPCOMM_TEST_WORLDS=2,4,8] cargo test --test gpu_quant -- --ignored --test-threads=1"]
fn gpu_quant_a_missing_peer_is_named_after_the_timeout() {
    let Some(_) = setup() else { return };
    // Created once with a long timeout first, so the kernels are compiled
    // and loaded (once per device and process) before the short one counts.
    drop(make_ranks(2, Transport::Host, Duration::from_secs(60)));
    // The one-shot kernel names its own wait; the gathered form (the host
    // path's default at 2 ranks) waits in the exact all-gather, which first
    // checks the peer's description of the call.
    for (algo, names) in [
        (QuantAlgo::OneShot, &["quantized"][..]),
        (
            QuantAlgo::Gathered,
            &["all-gather", "description of its call"][..],
        ),
    ] {
        let mut ranks = make_ranks(2, Transport::Host, Duration::from_secs(2));
        let r0 = &mut ranks[0];
        r0.ctx.bind_to_thread().unwrap();
        let p = r0.inp.device_ptr(&r0.stream).0;
        // SAFETY: the buffer holds MAX bytes and outlives the sync below.
        unsafe {
            let call = Call::new(p, p, 1 << 20, DType::Bf16, r0.stream.cu_stream());
            r0.comm.all_reduce_quant(&call, Wire::int8(), algo).unwrap()
        };
        r0.stream.synchronize().unwrap();
        match r0.comm.check() {
            Err(Error::PeerTimeout { peer, what, .. }) => {
                assert_eq!(peer, 1, "{algo:?}");
                assert!(names.iter().any(|n| what.contains(n)), "{algo:?}: {what}");
            }
            other => panic!("{algo:?}: expected a timeout naming rank 1, got {other:?}"),
        }
    }
}

#[test]
#[ignore = "needs a GPU: TPCOMM_GPU_TESTS=1 [TPCOMM_TEST_WORLDS=2,4,8] cargo test --test gpu_quant -- --ignored --test-threads=1"]
fn gpu_quant_memory_report_shows_the_quantized_layout() {
    let Some(_) = setup() else { return };
    for t in transports() {
        let ranks = make_ranks(2, t, Duration::from_secs(20));
        let q = ranks[0]
            .comm
            .quant()
            .expect("a quantized wire was asked for");
        let rep = q.memory_report();
        eprintln!("{rep}");
        let place = if q.transport() == Transport::Host {
            Place::PinnedHost
        } else {
            Place::Device
        };
        assert!(rep
            .lines
            .iter()
            .any(|l| l.place == place && l.name.contains("quantized wire")));
        assert!(rep.total().unwrap().bytes() > MAX.bytes() / 2);
        // The gathered form's blocks: one per rank, each the largest
        // message's codes and scales (groups of 32), in device memory.
        // (make_ranks asks for them: CudaConfig::wire_algo.)
        assert!(q.has_gathered());
        let l = rep
            .lines
            .iter()
            .find(|l| l.name.contains("gathered"))
            .expect("a line for the gathered blocks");
        assert_eq!(l.place, Place::Device);
        let block = tpcomm::cuda::quant::gathered::GatherLayout::max_block(MAX.bytes() as usize);
        assert_eq!(l.bytes.bytes(), 2 * block as u64);
    }
}
