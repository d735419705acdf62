//! Times the quantized all-reduce (int8 and fp8 on the wire) against the
//! exact one on the same communicator and transport, and prints each row's
//! error against a float64 reference (rel-RMS, max-rel as
//! docs/quantized.md defines them) and whether the output equals the CPU
//! model bit for bit. Also the GPU's device-to-device copy bandwidth,
//! measured in the same run, to set the quantized kernels' rate against.
//! Ranks are threads; rank r drives GPU r % GPUs, so ranks may share a GPU
//! (then the timings are "shared GPU" figures). bench/device/suite.sh (--only quant) runs it.
//!
//! With `--algo gathered` (the communicator created with that
//! `wire_algo`), it also times that form's two local kernels alone (pack:
//! quantize into the rank's block; unpack-sum: dequantize and sum every
//! block), rank 0 by itself while the others wait, against the copy rate
//! and against a device copy of the same bytes (the best a kernel of that
//! size could do).
//!
//! cargo run --release -p tpcomm --example quant_bench -- \
//!     [--ranks 2] [--gpus N] [--transport host|cuda|auto] [--min 4MiB] \
//!     [--max 64MiB] [--iters 10] [--reps 15] [--group 64] \
//!     [--dist gaussian|outliers] [--algo auto|one-shot|two-shot|gathered]

use std::sync::{Arc, Barrier};
use std::time::Duration;
use tpcomm::cuda::cudarc::driver::{sys, CudaContext, DevicePtr};

use tpcomm::cuda::quant::QuantAlgo;
use tpcomm::cuda::{
    open_context, Call, Communicator, CudaConfig, Rendezvous, ThreadGroup, Transport,
};
use tpcomm::quant::model::{self, inputs, reference_f64};
use tpcomm::quant::Wire;
use tpcomm::{ByteSize, DType, Error, Result};

struct Args {
    ranks: usize,
    gpus: Option<usize>,
    transport: Transport,
    min: ByteSize,
    max: ByteSize,
    iters: usize,
    reps: usize,
    group: u32,
    dist: inputs::Dist,
    algo: QuantAlgo,
}

fn parse() -> Result<Args> {
    let mut a = Args {
        ranks: 2,
        gpus: None,
        transport: Transport::Host,
        min: ByteSize::mib(4),
        max: ByteSize::mib(64),
        iters: 10,
        reps: 15,
        group: 64,
        dist: inputs::Dist::Gaussian,
        algo: QuantAlgo::Auto,
    };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < argv.len() {
        let v = argv
            .get(i + 1)
            .ok_or_else(|| Error::invalid("arguments", format!("{} needs a value", argv[i])))?;
        let num = |what: &str| -> Result<usize> {
            v.parse()
                .map_err(|_| Error::invalid(what, format!("{v:?} is not a number")))
        };
        match argv[i].as_str() {
            "--ranks" => a.ranks = num("--ranks")?,
            "--gpus" => a.gpus = Some(num("--gpus")?),
            "--transport" => a.transport = v.parse()?,
            "--min" => a.min = v.parse()?,
            "--max" => a.max = v.parse()?,
            "--iters" => a.iters = num("--iters")?.max(1),
            "--reps" => a.reps = num("--reps")?.max(1),
            "--group" => a.group = num("--group")? as u32,
            "--dist" => {
                a.dist = match v.as_str() {
                    "gaussian" => inputs::Dist::Gaussian,
                    "outliers" => inputs::Dist::Outliers,
                    _ => {
                        return Err(Error::invalid(
                            "--dist",
                            format!("{v:?} (expected gaussian or outliers)"),
                        ))
                    }
                }
            }
            "--algo" => {
                a.algo = match v.as_str() {
                    "auto" => QuantAlgo::Auto,
                    "one-shot" => QuantAlgo::OneShot,
                    "two-shot" => QuantAlgo::TwoShot,
                    "gathered" => QuantAlgo::Gathered,
                    _ => {
                        return Err(Error::invalid(
                            "--algo",
                            format!("{v:?} (expected auto, one-shot, two-shot or gathered)"),
                        ))
                    }
                }
            }
            other => return Err(Error::invalid("arguments", format!("unknown {other}"))),
        }
        i += 2;
    }
    Ok(a)
}

fn cuda<E: std::fmt::Display>(call: &'static str) -> impl Fn(E) -> Error {
    move |e| Error::Cuda {
        call: call.into(),
        detail: e.to_string(),
    }
}

/// Two timing events on `ctx`: start and end of a timed span.
fn timing_events(
    ctx: &Arc<CudaContext>,
) -> Result<(
    tpcomm::cuda::cudarc::driver::CudaEvent,
    tpcomm::cuda::cudarc::driver::CudaEvent,
)> {
    let ev = || {
        ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(cuda("cuEventCreate"))
    };
    Ok((ev()?, ev()?))
}

/// Device-to-device copy bandwidth of GPU 0 (bytes read + written per
/// second), the ceiling a memory-bound kernel can reach.
fn copy_bandwidth() -> Result<f64> {
    let ctx = open_context(0)?;
    let stream = ctx.new_stream().map_err(cuda("cuStreamCreate"))?;
    let n = 1usize << 30;
    let src = stream.alloc_zeros::<u8>(n).map_err(cuda("cuMemAlloc"))?;
    let mut dst = stream.alloc_zeros::<u8>(n).map_err(cuda("cuMemAlloc"))?;
    let (ev0, ev1) = timing_events(&ctx)?;
    stream
        .memcpy_dtod(&src, &mut dst)
        .map_err(cuda("cuMemcpyDtoD"))?;
    let mut times = Vec::new();
    for _ in 0..5 {
        ev0.record(&stream).map_err(cuda("cuEventRecord"))?;
        stream
            .memcpy_dtod(&src, &mut dst)
            .map_err(cuda("cuMemcpyDtoD"))?;
        ev1.record(&stream).map_err(cuda("cuEventRecord"))?;
        ev1.synchronize().map_err(cuda("cuEventSynchronize"))?;
        times.push(ev0.elapsed_ms(&ev1).map_err(cuda("cuEventElapsedTime"))? as f64 / 1e3);
    }
    times.sort_by(f64::total_cmp);
    Ok(2.0 * n as f64 / times[times.len() / 2])
}

/// One row of a rank's results: size, wire, the quantized algorithm that
/// ran (None for exact), median us per call, output bytes.
type Row = (usize, Wire, Option<QuantAlgo>, f64, Vec<u8>);
type RankRows = Vec<Row>;

/// Rank 0's times of the gathered form's local kernels: (size, wire,
/// stage, median us, median us of a device copy moving the same bytes).
type StageRows = Vec<(usize, Wire, &'static str, f64, f64)>;

/// One quantized or exact call (a bf16 sum); the quantized algorithm that ran.
///
/// # Safety
/// `call`'s buffers hold its elements until the stream has run it.
unsafe fn one_call(
    comm: &Communicator,
    call: &Call,
    wire: Wire,
    algo: QuantAlgo,
) -> Result<Option<QuantAlgo>> {
    // SAFETY: the caller's contract.
    unsafe {
        if wire == Wire::Exact {
            comm.all_reduce_wire(call, wire)?;
            return Ok(None);
        }
        comm.all_reduce_quant(call, wire, algo).map(Some)
    }
}

fn rank_main(
    a: &Args,
    r: usize,
    gpus: usize,
    group: Arc<ThreadGroup>,
    barrier: &Barrier,
    sizes: &[usize],
    wires: &[Wire],
) -> Result<(RankRows, StageRows, String)> {
    let dev = r % gpus;
    let mut cfg = CudaConfig::new(r, a.ranks, dev);
    cfg.max_bytes = a.max;
    cfg.timeout = Duration::from_secs(30);
    cfg.transport = a.transport;
    cfg.wire = Some(Wire::Int8 { group: a.group });
    cfg.wire_min_bytes = Some(ByteSize::b(0));
    if a.algo == QuantAlgo::Gathered {
        cfg.wire_algo = QuantAlgo::Gathered;
    }
    let comm = Communicator::new(&cfg, &Rendezvous::Threads(group))?;
    let transport = comm.gpu().transport().name().to_string();
    let ctx = open_context(dev)?;
    // SAFETY: no slice is shared between streams; events must not be
    // recorded into the captured graphs.
    unsafe { ctx.disable_event_tracking() };
    let stream = ctx.new_stream().map_err(cuda("cuStreamCreate"))?;
    let max = a.max.as_usize()?;
    let mut inp = stream.alloc_zeros::<u8>(max).map_err(cuda("cuMemAlloc"))?;
    let out = stream.alloc_zeros::<u8>(max).map_err(cuda("cuMemAlloc"))?;
    let (pi, po) = (inp.device_ptr(&stream).0, out.device_ptr(&stream).0);
    let (ev0, ev1) = timing_events(&ctx)?;
    // Every copy goes through pinned host memory allocated here, before the
    // first call: with ranks as threads of one process, a copy from pageable
    // memory (or freeing pinned memory) can hold this thread while a peer's
    // kernel waits for this rank's next call (docs/shared-gpu.md). One
    // input and one output buffer per size, filled before any call.
    let mut staged = Vec::with_capacity(sizes.len());
    for &bytes in sizes {
        let xs = inputs::sample(
            &mut inputs::Rng::new(seed(bytes, r)),
            a.dist,
            DType::Bf16,
            bytes / 2,
        );
        // SAFETY: plain pinned memory (flags 0), filled right away below
        // and read by the copies only after that.
        let mut host = unsafe { ctx.alloc_pinned_with_flags::<u8>(bytes, 0) }
            .map_err(cuda("cuMemHostAlloc"))?;
        for (dst, &x) in host
            .as_mut_slice()
            .map_err(cuda("cuMemHostAlloc"))?
            .chunks_exact_mut(2)
            .zip(&xs)
        {
            dst.copy_from_slice(&(model::round_to(DType::Bf16, x) as u16).to_le_bytes());
        }
        // SAFETY: as above; written by the device-to-host copy before it is read.
        let back = unsafe { ctx.alloc_pinned_with_flags::<u8>(bytes, 0) }
            .map_err(cuda("cuMemHostAlloc"))?;
        staged.push((host, back));
    }
    barrier.wait();
    let mut rows: RankRows = Vec::new();
    for (&bytes, (host, back)) in sizes.iter().zip(staged.iter_mut()) {
        let count = bytes / 2;
        stream
            .memcpy_htod(&*host, &mut inp.slice_mut(..bytes))
            .map_err(cuda("cuMemcpyHtoD"))?;
        stream.synchronize().map_err(cuda("cuStreamSynchronize"))?;
        barrier.wait();
        let mut graphs = Vec::new();
        for &wire in wires {
            let call = || -> Result<()> {
                // SAFETY: both buffers hold `max` bytes and outlive every
                // launch (the stream is synchronized before they drop).
                unsafe {
                    one_call(
                        &comm,
                        &Call::new(pi, po, count, DType::Bf16, stream.cu_stream()),
                        wire,
                        a.algo,
                    )?
                };
                Ok(())
            };
            for _ in 0..3 {
                call()?;
            }
            stream
                .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
                .map_err(cuda("cuStreamBeginCapture"))?;
            for _ in 0..a.iters {
                call()?;
            }
            let g = stream
                .end_capture(sys::CUgraphInstantiate_flags(0))
                .map_err(cuda("cuStreamEndCapture"))?
                .ok_or_else(|| Error::invalid("graph", "capture produced no graph"))?;
            graphs.push(g);
        }
        stream.synchronize().map_err(cuda("cuStreamSynchronize"))?;
        comm.check()?;
        barrier.wait();
        // Wires take turns rep by rep, so a slow spell falls on all alike.
        let mut times = vec![Vec::new(); wires.len()];
        for _ in 0..a.reps {
            for (g, t) in graphs.iter().zip(times.iter_mut()) {
                ev0.record(&stream).map_err(cuda("cuEventRecord"))?;
                g.launch().map_err(cuda("cuGraphLaunch"))?;
                ev1.record(&stream).map_err(cuda("cuEventRecord"))?;
                ev1.synchronize().map_err(cuda("cuEventSynchronize"))?;
                t.push(
                    ev0.elapsed_ms(&ev1).map_err(cuda("cuEventElapsedTime"))? as f64 * 1e3
                        / a.iters as f64,
                );
            }
        }
        comm.check()?;
        for (&wire, mut t) in wires.iter().zip(times) {
            t.sort_by(f64::total_cmp);
            // One more call, read back for the error and the model check.
            // SAFETY: as above.
            let ran = unsafe {
                one_call(
                    &comm,
                    &Call::new(pi, po, count, DType::Bf16, stream.cu_stream()),
                    wire,
                    a.algo,
                )?
            };
            stream
                .memcpy_dtoh(&out.slice(..bytes), &mut *back)
                .map_err(cuda("cuMemcpyDtoH"))?;
            stream.synchronize().map_err(cuda("cuStreamSynchronize"))?;
            comm.check()?;
            let o = back.as_slice().map_err(cuda("cuMemcpyDtoH"))?.to_vec();
            rows.push((bytes, wire, ran, t[t.len() / 2], o));
        }
        barrier.wait();
    }
    let mut stages = Vec::new();
    if r == 0 {
        if let Some(q) = comm.quant().filter(|q| q.has_gathered()) {
            for &bytes in sizes {
                for &wire in &wires[1..] {
                    // SAFETY: as above; rank 0 alone, its own block only.
                    stages.extend(unsafe {
                        {
                            let call = tpcomm::cuda::Call::new(
                                pi,
                                po,
                                bytes / 2,
                                DType::Bf16,
                                stream.cu_stream(),
                            );
                            time_stages(q, &ctx, &stream, &call, wire, a.ranks, a.reps)?
                        }
                    });
                }
            }
        }
    }
    barrier.wait();
    Ok((rows, stages, transport))
}

/// Times the gathered form's pack and unpack-sum kernels alone on rank 0's
/// stream (no peer involved): each the median of `reps` graphs of 10
/// launches; beside each, a device copy that reads and writes as many bytes
/// (`moved / 2` copied), timed the same way: the rate a kernel of that size
/// could reach at best, where launch and tail weigh.
///
/// # Safety
/// `call`'s input and output (bf16, on `stream`) hold its count until the
/// stream has run the launches.
unsafe fn time_stages(
    q: &tpcomm::cuda::quant::QuantComm,
    ctx: &Arc<CudaContext>,
    stream: &Arc<tpcomm::cuda::cudarc::driver::CudaStream>,
    call: &tpcomm::cuda::Call,
    wire: Wire,
    world: usize,
    reps: usize,
) -> Result<StageRows> {
    let bytes = call.count * 2;
    let Some(c) = q.gathered_call(call, wire)? else {
        return Ok(Vec::new());
    };
    let (ev0, ev1) = timing_events(ctx)?;
    const N: usize = 10;
    // Median us of one replay of `g` over `reps`, per launch it holds.
    let median_us = |g: &tpcomm::cuda::cudarc::driver::CudaGraph| -> Result<f64> {
        g.launch().map_err(cuda("cuGraphLaunch"))?;
        let mut t = Vec::new();
        for _ in 0..reps {
            ev0.record(stream).map_err(cuda("cuEventRecord"))?;
            g.launch().map_err(cuda("cuGraphLaunch"))?;
            ev1.record(stream).map_err(cuda("cuEventRecord"))?;
            ev1.synchronize().map_err(cuda("cuEventSynchronize"))?;
            t.push(
                ev0.elapsed_ms(&ev1).map_err(cuda("cuEventElapsedTime"))? as f64 * 1e3 / N as f64,
            );
        }
        t.sort_by(f64::total_cmp);
        Ok(t[t.len() / 2])
    };
    let capture = |record: &mut dyn FnMut() -> Result<()>| {
        stream
            .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(cuda("cuStreamBeginCapture"))?;
        for _ in 0..N {
            record()?;
        }
        stream
            .end_capture(sys::CUgraphInstantiate_flags(0))
            .map_err(cuda("cuStreamEndCapture"))?
            .ok_or_else(|| Error::invalid("graph", "capture produced no graph"))
    };
    let mut rows = Vec::new();
    for stage in ["pack", "unpack-sum"] {
        let g = capture(&mut || {
            // SAFETY: the caller's contract; the blocks are the communicator's.
            unsafe {
                match stage {
                    "pack" => q.pack(&c, call),
                    _ => q.unpack_sum(&c, call),
                }
            }
        })?;
        let kernel = median_us(&g)?;
        let half = stage_bytes(bytes, wire, stage, world).div_ceil(2);
        let src = stream.alloc_zeros::<u8>(half).map_err(cuda("cuMemAlloc"))?;
        let mut dst = stream.alloc_zeros::<u8>(half).map_err(cuda("cuMemAlloc"))?;
        let g = capture(&mut || {
            stream
                .memcpy_dtod(&src, &mut dst)
                .map_err(cuda("cuMemcpyDtoD"))
        })?;
        rows.push((bytes, wire, stage, kernel, median_us(&g)?));
    }
    Ok(rows)
}

/// Bytes a gathered-form kernel must read and write for a bf16 message of
/// `bytes` among `world` ranks: pack reads the message and writes its block,
/// unpack-sum reads every rank's block and writes the message.
fn stage_bytes(bytes: usize, wire: Wire, stage: &str, world: usize) -> usize {
    let (_, g) = wire
        .quantized()
        .unwrap_or((tpcomm::quant::Format::Int8, 64));
    let block = tpcomm::cuda::quant::gathered::GatherLayout::of(bytes / 2, g).block_bytes;
    match stage {
        "pack" => bytes + block,
        _ => world * block + bytes,
    }
}

fn seed(bytes: usize, r: usize) -> u64 {
    0x9e37_79b9 ^ (bytes as u64) << 8 ^ r as u64
}

fn main() {
    // Before CUDA starts: ranks as threads sharing a GPU need a hardware
    // queue per rank's stream (docs/shared-gpu.md). A value given is kept.
    tpcomm::cuda::share::widen_queues_for_threads();
    if let Err(e) = run() {
        eprintln!("quant_bench: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<()> {
    let a = parse()?;
    tpcomm::cuda::ensure_driver()?;
    let gpus = a
        .gpus
        .unwrap_or(CudaContext::device_count().map_err(cuda("cuDeviceGetCount"))? as usize)
        .max(1);
    let copy = copy_bandwidth()?;
    let mut sizes = Vec::new();
    let mut s = a.min.as_usize()?.max(4096);
    while s <= a.max.as_usize()? {
        sizes.push(s);
        s *= 2;
    }
    let wires = [
        Wire::Exact,
        Wire::Int8 { group: a.group },
        Wire::Fp8 { group: a.group },
    ];
    let group = ThreadGroup::new(a.ranks);
    let barrier = Barrier::new(a.ranks);
    let results: Vec<Result<(RankRows, StageRows, String)>> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..a.ranks)
            .map(|r| {
                let (a, group, barrier, sizes, wires) =
                    (&a, group.clone(), &barrier, &sizes, &wires);
                sc.spawn(move || rank_main(a, r, gpus, group, barrier, sizes, wires))
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(Error::Aborted("a rank panicked".into())))
            })
            .collect()
    });
    let mut all = Vec::new();
    for r in results {
        all.push(r?);
    }
    let transport = all[0].2.clone();
    let shared = if a.ranks > gpus { ", shared GPU" } else { "" };
    println!(
        "{} ranks on {} GPU(s){shared}, transport {transport}, bf16, {} inputs, graph of {} calls, median of {} reps",
        a.ranks,
        gpus.min(a.ranks),
        a.dist.name(),
        a.iters,
        a.reps
    );
    println!(
        "GPU 0 device-to-device copy: {:.0} GB/s (read + write)",
        copy / 1e9
    );
    println!();
    // Ranks that drive GPU 0 (rank r drives GPU r % gpus).
    let on_gpu0 = a.ranks.div_ceil(gpus);
    println!("| bytes | wire | algorithm | time us | algbw GB/s | x exact | GPU 0 GB/s vs copy | rel-RMS | max-rel | = CPU model | ranks equal |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    let rows0 = &all[0].0;
    for (k, (bytes, wire, ran, t, out)) in rows0.iter().enumerate() {
        let count = bytes / 2;
        let exact_t = rows0
            .iter()
            .find(|(b, w, ..)| b == bytes && *w == Wire::Exact)
            .map_or(f64::NAN, |x| x.3);
        let equal = all
            .iter()
            .all(|(rows, ..)| &rows[k].4 == out && rows[k].2 == *ran);
        let xs: Vec<Vec<f32>> = (0..a.ranks)
            .map(|r| {
                inputs::sample(
                    &mut inputs::Rng::new(seed(*bytes, r)),
                    a.dist,
                    DType::Bf16,
                    count,
                )
            })
            .collect();
        let got: Vec<u32> = out
            .chunks(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]) as u32)
            .collect();
        let vals: Vec<f32> = got
            .iter()
            .map(|&b| model::value_of(DType::Bf16, b))
            .collect();
        let e = model::error_stats(&vals, &reference_f64(&xs));
        let (model_eq, rate) = match wire.quantized() {
            Some((f, g)) => {
                let twoshot = *ran == Some(QuantAlgo::TwoShot);
                let want = if twoshot {
                    model::all_reduce_twoshot_bits(f, g as usize, DType::Bf16, &xs)
                } else {
                    model::all_reduce_bits(f, g as usize, DType::Bf16, &xs)
                };
                // The bytes one rank's call must move through device
                // memory over P2P: its input once, its output, its codes
                // and scales written to the peers and the peers' read
                // (one-shot: all of them, each way; two-shot: (n - 1) / n of
                // them, twice each way). Times the ranks on GPU 0, over the
                // call's time: GPU 0's rate, set against its copy rate.
                // Over the host path the codes cross PCIe, not device
                // memory, and no rate is given.
                let wire_bytes = count as f64 * (1.0 + 4.0 / g as f64);
                let n = a.ranks as f64;
                // (The gathered form moves the one-shot bytes, plus its
                // blocks written and read once more in device memory.)
                let codes = if twoshot {
                    4.0 * (n - 1.0) / n * wire_bytes
                } else {
                    2.0 * (n - 1.0) * wire_bytes
                };
                let moved = (2.0 * *bytes as f64 + codes) * on_gpu0 as f64;
                (
                    if got == want { "yes" } else { "NO" },
                    if transport == "cuda" {
                        format!(
                            "{:.0} ({:.0}%)",
                            moved / (t * 1e-6) / 1e9,
                            100.0 * moved / (t * 1e-6) / copy
                        )
                    } else {
                        "-".into()
                    },
                )
            }
            None => ("-", "-".into()),
        };
        println!(
            "| {} | {} | {} | {:.1} | {:.1} | {:.2} | {} | {:.3}% | {:.3} | {} | {} |",
            ByteSize::from_usize(*bytes),
            wire.label(),
            ran.map_or("exact".to_string(), |r| format!("{r:?}")),
            t,
            *bytes as f64 / (t * 1e-6) / 1e9,
            t / exact_t,
            rate,
            100.0 * e.rel_rms,
            e.max_rel,
            model_eq,
            if equal { "yes" } else { "NO" }
        );
    }
    let stages = &all[0].1;
    if !stages.is_empty() {
        println!();
        println!("Gathered form's local kernels, rank 0 alone (graph of 10 launches, median of {} reps); bytes = what the kernel must read + write; vs copy: against the 1 GiB copy above; same-size copy: a device copy reading and writing as many bytes, timed the same way:", a.reps);
        println!();
        println!("| bytes | wire | kernel | time us | bytes moved | GB/s | vs copy | same-size copy GB/s | vs same-size copy |");
        println!("|---|---|---|---|---|---|---|---|---|");
        for (bytes, wire, stage, t, t_copy) in stages {
            let moved = stage_bytes(*bytes, *wire, stage, a.ranks) as f64;
            let rate = moved / (t * 1e-6);
            let copy_rate = 2.0 * (moved / 2.0).ceil() / (t_copy * 1e-6);
            println!(
                "| {} | {} | {stage} | {t:.1} | {} | {:.0} | {:.0}% | {:.0} | {:.0}% |",
                ByteSize::from_usize(*bytes),
                wire.label(),
                ByteSize::from_usize(moved as usize),
                rate / 1e9,
                100.0 * rate / copy,
                copy_rate / 1e9,
                100.0 * rate / copy_rate
            );
        }
    }
    Ok(())
}
