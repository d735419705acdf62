//! One rank of the GPU bench: its communicator (and NCCL's), every size,
//! algorithm and mode timed, every output checked.

use super::check::cpu_workers;
use super::{count_wrong_par, random_inputs, select_transport};
use super::{GpuBenchArgs, RankInfo, RankOut, Row};
use std::time::Duration;
use tpcomm::cuda::cudarc::driver::{sys, CudaSlice, DevicePtr};
use tpcomm::cuda::{open_context, Algo, CudaConfig, GpuComm, Launch, Rendezvous, StreamAllReduce};
use tpcomm::nccl::{Nccl, NcclComm, UniqueId};
use tpcomm::select;
use tpcomm::{Error, ReduceOp, Result};

/// One algorithm in one mode at the size being measured.
struct Entry {
    name: String,
    mode: String,
    imp: Impl,
    /// The captured calls of a graph-mode entry.
    graph: Option<tpcomm::cuda::cudarc::driver::CudaGraph>,
}

enum Impl {
    /// A tpcomm algorithm, launched ordinarily or overlapped (`-pdl` names).
    Tp(Algo, Launch),
    Nccl,
    /// What the library's selection picks for each size and mode.
    Auto,
    /// The quantized all-reduce on this wire.
    Quant(tpcomm::quant::Wire),
}

fn cuda(call: &'static str) -> impl Fn(tpcomm::cuda::cudarc::driver::DriverError) -> Error {
    move |e| Error::Cuda {
        call: call.into(),
        detail: e.to_string(),
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

pub(super) fn rank_main(
    rank: usize,
    world: usize,
    args: &GpuBenchArgs,
    rv: Rendezvous,
) -> Result<RankOut> {
    let timeout = Duration::from_millis(args.timeout_ms);
    // Ranks go round-robin over the visible GPUs; more ranks than GPUs share them.
    let gpus = tpcomm::cuda::cudarc::driver::CudaContext::device_count()
        .map_err(cuda("cuDeviceGetCount"))?
        .max(1) as usize;
    let device = rank % gpus;
    let ctx = open_context(device)?;
    // SAFETY: every buffer here is used on one stream only, so cudarc's
    // per-buffer events are not needed (and must not be recorded into graphs).
    unsafe { ctx.disable_event_tracking() };
    let stream = ctx.new_stream().map_err(cuda("cuStreamCreate"))?;
    let mut cfg = CudaConfig::new(rank, world, device);
    cfg.max_bytes = args.max;
    cfg.timeout = timeout;
    cfg.transport = args.transport;
    let comm = GpuComm::new(&cfg, &rv)?;
    let (nvrtc, arch) = comm.compiled_with();
    let mut info = RankInfo {
        gpu: ctx.name().unwrap_or_default(),
        arch: format!("sm_{}{}", arch.0, arch.1),
        nvrtc: format!(
            "{}.{} ({})",
            nvrtc.0,
            nvrtc.1,
            tpcomm::cuda::nvrtc_path().unwrap_or_default()
        ),
        nccl: None,
        memory: comm.memory_report().to_string(),
        transport: comm.transport().name().to_string(),
        ranks_on_device: comm.sharing().ranks_on_device,
    };
    let nccl = if world > gpus && args.algos.iter().any(|a| a == "nccl") {
        if rank == 0 {
            eprintln!("NCCL rows skipped: NCCL refuses ranks that share a GPU ({world} ranks on {gpus} GPU(s))");
        }
        None
    } else if args.algos.iter().any(|a| a == "nccl") {
        nccl_comm(rank, world, &rv, timeout, &mut info)
    } else {
        None
    };
    let quant = if args
        .algos
        .iter()
        .any(|a| super::quant::wire_of(a).is_some())
    {
        Some(tpcomm::cuda::quant::QuantComm::new(
            &cfg,
            comm.transport(),
            &rv,
        )?)
    } else {
        None
    };
    let barrier = |key: &str| rv.exchange(key, rank, world, &[], timeout).map(|_| ());

    let dtype = args.dtype;
    let max = args.max.as_usize()?;
    let max_count = max / dtype.size();
    let rot = args.rotate;
    // Every rank makes every rank's inputs (seeded by rank and buffer), so each
    // can check its results against the float64 reference on its own. Made
    // once, reused by every size, algorithm and mode; spread over this rank's
    // share of the cores (at 64 MiB that is rot x world buffers of 32 M
    // elements each, seconds on one core).
    let workers = cpu_workers(world);
    let inputs = random_inputs(dtype, max_count, rot, world, workers);
    let mut ins: Vec<CudaSlice<u8>> = Vec::new();
    let mut outs: Vec<CudaSlice<u8>> = Vec::new();
    for input in &inputs {
        ins.push(
            stream
                .clone_htod(&input[rank][..])
                .map_err(cuda("cuMemcpyHtoD"))?,
        );
        outs.push(stream.alloc_zeros::<u8>(max).map_err(cuda("cuMemAlloc"))?);
    }
    let ptr = |s: &CudaSlice<u8>| s.device_ptr(&stream).0;
    let in_ptrs: Vec<u64> = ins.iter().map(ptr).collect();
    let out_ptrs: Vec<u64> = outs.iter().map(ptr).collect();
    let poison = vec![0xffu8; max];
    let ev0 = ctx
        .new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
        .map_err(cuda("cuEventCreate"))?;
    let ev1 = ctx
        .new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
        .map_err(cuda("cuEventCreate"))?;

    let sizes: Vec<usize> = if args.midpoints {
        select::tune_sizes(args.min, args.max)
            .into_iter()
            .map(|b| b as usize)
            .collect()
    } else {
        let mut v = Vec::new();
        let mut s = args.min.as_usize()?;
        while s <= max {
            v.push(s);
            s *= 2;
        }
        v
    };
    let selector = if args.algos.iter().any(|a| a == "auto") {
        Some(auto_selector(args)?)
    } else {
        None
    };
    let mut rows = Vec::new();
    let mut step = 0usize;
    let call = |imp: &Impl, k: usize, count: usize| -> Result<()> {
        let (i, o) = (in_ptrs[k % rot], out_ptrs[k % rot]);
        // SAFETY: i and o are `max`-byte buffers of this rank's device that
        // live until the end of rank_main, after every sync; count elements
        // fit in them.
        unsafe {
            match imp {
                Impl::Tp(a, how) => comm.all_reduce_launched(
                    i,
                    o,
                    count,
                    dtype,
                    ReduceOp::Sum,
                    *a,
                    stream.cu_stream(),
                    *how,
                ),
                Impl::Nccl => nccl.as_ref().map_or(Ok(()), |n| {
                    n.all_reduce(i, o, count, dtype, ReduceOp::Sum, stream.cu_stream())
                }),
                Impl::Quant(w) => quant.as_ref().map_or(Ok(()), |q| {
                    q.all_reduce(i, o, count, dtype, *w, stream.cu_stream(), Launch::Ordinary)
                }),
                Impl::Auto => unreachable!("resolved before any call"),
            }
        }
    };
    for &bytes in &sizes {
        let count = bytes / dtype.size();
        if count == 0 {
            continue;
        }
        let iters = args.iters_for(bytes);
        // Every (algorithm, mode) of this size, resolved to what it runs.
        let mut entries: Vec<Entry> = Vec::new();
        for algo_name in &args.algos {
            let imp = if let Some(w) = super::quant::wire_of(algo_name) {
                Impl::Quant(w?)
            } else if algo_name == "nccl" {
                match &nccl {
                    Some(_) => Impl::Nccl,
                    None => continue,
                }
            } else if algo_name == "auto" {
                Impl::Auto
            } else {
                let (algo, how) = super::parse_algo(algo_name)?;
                Impl::Tp(algo, how)
            };
            for mode in &args.modes {
                // `auto` runs exactly what the library's selection picks for this
                // size and mode among the candidates of the transport in use
                // (NCCL only when it was loaded).
                let have_nccl = nccl.is_some();
                let decision = selector.as_ref().map(|s| {
                    s.choose_on(
                        &select::Query {
                            world,
                            dtype,
                            bytes: bytes as u64,
                            mode: mode.parse().unwrap_or(select::Mode::Eager),
                        },
                        select_transport(comm.transport()),
                        have_nccl,
                    )
                });
                let imp = match (&imp, &decision) {
                    (Impl::Auto, Some(d)) if d.choice == select::Candidate::NCCL => Impl::Nccl,
                    (Impl::Auto, Some(d)) => {
                        Impl::Tp(d.choice.algo.unwrap_or(Algo::Auto), Launch::Ordinary)
                    }
                    (Impl::Tp(a, how), _) => Impl::Tp(*a, *how),
                    (Impl::Nccl, _) => Impl::Nccl,
                    (Impl::Quant(w), _) => Impl::Quant(*w),
                    (Impl::Auto, None) => Impl::Tp(Algo::Auto, Launch::Ordinary),
                };
                let name = match (&decision, &imp) {
                    (_, Impl::Quant(w)) => w.label(),
                    (Some(d), _) if algo_name == "auto" => format!("auto:{}", d.choice),
                    (_, Impl::Tp(a, Launch::Ordinary)) => comm.algo_name(*a, bytes).to_string(),
                    (_, Impl::Tp(a, Launch::Overlapped)) => {
                        format!("{}-pdl", comm.algo_name(*a, bytes))
                    }
                    _ => "nccl".to_string(),
                };
                entries.push(Entry {
                    name,
                    mode: mode.clone(),
                    imp,
                    graph: None,
                });
            }
        }
        step += 1;
        barrier(&format!("b{step}"))?;
        // Capture each graph mode's calls once (and run it once); warm the
        // eager ones.
        for e in entries.iter_mut() {
            if e.mode == "graph" {
                stream
                    .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
                    .map_err(cuda("cuStreamBeginCapture"))?;
                let mut res = Ok(());
                for k in 0..iters {
                    res = res.and_then(|_| call(&e.imp, k, count));
                }
                let g = stream
                    .end_capture(sys::CUgraphInstantiate_flags(0))
                    .map_err(cuda("cuStreamEndCapture"))?;
                res?;
                let g = g.ok_or_else(|| Error::Cuda {
                    call: "cuStreamEndCapture".into(),
                    detail: "empty graph".into(),
                })?;
                g.upload().map_err(cuda("cuGraphUpload"))?;
                g.launch().map_err(cuda("cuGraphLaunch"))?;
                e.graph = Some(g);
            } else {
                for k in 0..2 * rot {
                    call(&e.imp, k, count)?;
                }
            }
        }
        stream.synchronize().map_err(cuda("cuStreamSynchronize"))?;
        comm.check()?;
        barrier(&format!("t{step}"))?;
        // The entries take turns rep by rep, so a slow spell of the machine
        // (clocks, a noisy neighbour) falls on all of them alike and their
        // ratios stay fair.
        let mut times = vec![Vec::with_capacity(args.reps); entries.len()];
        for _ in 0..args.reps {
            for (e, t) in entries.iter().zip(times.iter_mut()) {
                ev0.record(&stream).map_err(cuda("cuEventRecord"))?;
                match &e.graph {
                    Some(g) => g.launch().map_err(cuda("cuGraphLaunch"))?,
                    None => {
                        for k in 0..iters {
                            call(&e.imp, k, count)?;
                        }
                    }
                }
                ev1.record(&stream).map_err(cuda("cuEventRecord"))?;
                ev1.synchronize().map_err(cuda("cuEventSynchronize"))?;
                t.push(
                    ev0.elapsed_ms(&ev1).map_err(cuda("cuEventElapsedTime"))? as f64 * 1000.0
                        / iters as f64,
                );
            }
        }
        comm.check()?;
        for (e, t) in entries.iter().zip(times) {
            // Check: poison every output, run once more, compare each with
            // the float64 reference.
            for o in outs.iter_mut() {
                stream
                    .memcpy_htod(&poison[..bytes], &mut o.slice_mut(..bytes))
                    .map_err(cuda("cuMemcpyHtoD"))?;
            }
            match &e.graph {
                Some(g) => g.launch().map_err(cuda("cuGraphLaunch"))?,
                None => {
                    for k in 0..rot.max(iters) {
                        call(&e.imp, k, count)?;
                    }
                }
            }
            stream.synchronize().map_err(cuda("cuStreamSynchronize"))?;
            comm.check()?;
            let mut wrong = 0;
            let (mut rel_rms, mut max_rel) = (None, None);
            let mut host = vec![0u8; bytes];
            let written = if e.graph.is_some() {
                rot.min(iters)
            } else {
                rot
            };
            for (k, o) in outs.iter().enumerate().take(written) {
                stream
                    .memcpy_dtoh(&o.slice(..bytes), &mut host[..])
                    .map_err(cuda("cuMemcpyDtoH"))?;
                stream.synchronize().map_err(cuda("cuStreamSynchronize"))?;
                let ins_k: Vec<&[u8]> = inputs[k].iter().map(|v| &v[..bytes]).collect();
                if let Impl::Quant(w) = &e.imp {
                    // Against the CPU model (one buffer: the model is slow).
                    if k == 0 {
                        let c = super::quant::check(dtype, *w, &host, &ins_k);
                        wrong += c.wrong;
                        rel_rms = Some(c.rel_rms);
                        max_rel = Some(c.max_rel);
                    }
                    continue;
                }
                wrong += count_wrong_par(dtype, &host, &ins_k, world, workers);
            }
            let t = median(t);
            let algbw = bytes as f64 / (t * 1e-6) / 1e9;
            rows.push(Row {
                bytes: bytes as u64,
                count,
                dtype: dtype.name().to_string(),
                algo: e.name.clone(),
                mode: e.mode.clone(),
                time_us: t,
                algbw_gbps: algbw,
                busbw_gbps: algbw * 2.0 * (world - 1) as f64 / world as f64,
                wrong,
                rel_rms,
                max_rel,
            });
        }
    }
    barrier("end")?;
    Ok(RankOut { info, rows })
}

/// The selector every rank uses for `--algos auto`: the table the parent
/// process resolved (checked against its fingerprint), else the class defaults.
fn auto_selector(args: &GpuBenchArgs) -> Result<select::Selector> {
    let class = args
        .class
        .as_deref()
        .map(crate::machine::parse_class)
        .transpose()?
        .unwrap_or(tpcomm::topology::MachineClass::Nvlink);
    match (&args.table, &args.fingerprint) {
        (Some(t), Some(fp)) => select::load_for(
            t,
            &select::Machine {
                fingerprint: fp.clone(),
                class,
                driver: None,
                nccl: None,
            },
        ),
        _ => Ok(select::Selector::for_class(class)),
    }
}

fn nccl_comm(
    rank: usize,
    world: usize,
    rv: &Rendezvous,
    timeout: Duration,
    info: &mut RankInfo,
) -> Option<NcclComm> {
    // Every rank learns whether every rank loaded NCCL, so all skip it together.
    let loaded = Nccl::load();
    if let Err(e) = &loaded {
        eprintln!("rank {rank}: NCCL rows skipped: {e}");
    }
    let id = match (&loaded, rank) {
        (Ok(n), 0) => n.unique_id().ok(),
        _ => None,
    };
    let mine: Vec<u8> = match (&loaded, id) {
        (Ok(_), Some(id)) => id.0.to_vec(),
        (Ok(_), None) => vec![1],
        (Err(_), _) => vec![],
    };
    let all = rv.exchange("nccl-id", rank, world, &mine, timeout).ok()?;
    if all.iter().any(|v| v.is_empty()) || all[0].len() != 128 {
        return None;
    }
    let nccl = loaded.ok()?;
    let mut id = [0u8; 128];
    id.copy_from_slice(&all[0]);
    info.nccl = Some(nccl.version().to_string());
    match nccl.comm_init_rank(world, &UniqueId(id), rank) {
        Ok(c) => Some(c),
        Err(e) => {
            eprintln!("rank {rank}: NCCL rows skipped: {e}");
            None
        }
    }
}
