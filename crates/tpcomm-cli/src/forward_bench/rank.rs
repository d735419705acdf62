//! One rank of the forward benchmark: builds the model and the
//! communicators, then captures and times the forward once per token count
//! and mode.

use super::*;
use tpcomm::cuda::StreamAllReduce;

pub(super) fn rank_main(
    rank: usize,
    world: usize,
    args: &ForwardBenchArgs,
    rv: Rendezvous,
) -> Result<RankOut> {
    let timeout = Duration::from_millis(args.timeout_ms);
    // Ranks go round-robin over the visible GPUs; more ranks than GPUs share them.
    let gpus = CudaContext::device_count()
        .map_err(cuda("cuDeviceGetCount"))?
        .max(1) as usize;
    let device = rank % gpus;
    let ctx = open_context(device)?;
    // SAFETY: every buffer is used on this one stream, so cudarc's per-buffer
    // events are not needed (and must not be recorded into graphs).
    unsafe { ctx.disable_event_tracking() };
    let stream = ctx.new_stream().map_err(cuda("cuStreamCreate"))?;
    let cs = stream.cu_stream();
    let max_tokens = args.tokens.iter().copied().max().unwrap_or(1);
    let shape = Shape {
        layers: args.layers,
        hidden: args.hidden,
        mlp: args.mlp,
        max_tokens,
        world,
    };
    let mut cfg = CudaConfig::new(rank, world, device);
    cfg.max_bytes = ByteSize::from_usize(max_tokens * args.hidden * 2);
    cfg.timeout = timeout;
    cfg.transport = args.transport;
    // On cuda (P2P) this is CudaCommunicator::new, as before the host
    // transport was offered; every rank resolves auto the same way, so a
    // refused mode fails them all here, before NCCL or the model.
    let comm = GpuComm::new(&cfg, &rv)?;
    let transport = comm.transport();
    let (mut modes, mut skipped) = modes_for(args.modes.as_deref(), transport)?;
    if world > gpus && modes.contains(&Mode::Nccl) {
        // NCCL refuses ranks that share a GPU ("Duplicate GPU detected").
        modes.retain(|m| *m != Mode::Nccl);
        skipped.push("nccl");
    }
    let modes = &modes[..];
    let p2p = match &comm {
        GpuComm::Cuda(c) => Some(c),
        GpuComm::Host(_) => None,
    };
    let fused_image = match p2p {
        Some(c) => Some(c.prepare_fused()?),
        None => None,
    };
    let nccl = if modes.contains(&Mode::Nccl) {
        Some(nccl_comm(rank, world, &rv, timeout)?)
    } else {
        None
    };
    let model = Model::new(&ctx, shape, rank, cs)?;
    stream.synchronize().map_err(cuda("cuStreamSynchronize"))?;
    let arch = ctx
        .compute_capability()
        .map_err(cuda("cuDeviceGetAttribute"))?;
    let info = RankInfo {
        gpu: ctx.name().unwrap_or_default(),
        arch: format!("sm_{}{}", arch.0, arch.1),
        nccl: nccl.as_ref().map(|n| n.nccl().version().to_string()),
        comm_memory: match fused_image {
            Some(image) => format!(
                "{}  fused kernels' image: {image} (shared per device)\n",
                comm.memory_report()
            ),
            None => format!("{}", comm.memory_report()),
        },
        model_bytes: model.device_bytes().bytes(),
        transport: transport.name().to_string(),
        skipped_modes: skipped.iter().map(|s| s.to_string()).collect(),
        ranks_on_device: comm.sharing().ranks_on_device,
    };
    let barrier = |key: &str| rv.exchange(key, rank, world, &[], timeout).map(|_| ());
    let ev0 = ctx
        .new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
        .map_err(cuda("cuEventCreate"))?;
    let ev1 = ctx
        .new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
        .map_err(cuda("cuEventCreate"))?;

    let mut rows = Vec::new();
    for &tokens in &args.tokens {
        let mut nccl_h: Option<Vec<u8>> = None;
        for (mi, &mode) in modes.iter().enumerate() {
            let mut site = |s: &Site| -> Result<()> {
                let count = s.rows * s.hidden;
                // SAFETY: the site's buffers are the model's, sized for this
                // many rows and alive until the end of rank_main, after every
                // synchronization; `cs` is this device's stream.
                unsafe {
                    match mode {
                        Mode::None(how) => model.add_norm(s, s.partial, cs, how),
                        Mode::Nccl => {
                            let n = nccl.as_ref().ok_or_else(|| {
                                Error::Aborted("NCCL mode without a communicator".into())
                            })?;
                            n.all_reduce(
                                s.partial,
                                s.reduced,
                                count,
                                DType::Bf16,
                                ReduceOp::Sum,
                                cs,
                            )?;
                            model.add_norm(s, s.reduced, cs, Launch::Ordinary)
                        }
                        Mode::Tp(algo, how) => {
                            comm.all_reduce_launched(
                                s.partial,
                                s.reduced,
                                count,
                                DType::Bf16,
                                ReduceOp::Sum,
                                algo,
                                cs,
                                how,
                            )?;
                            model.add_norm(s, s.reduced, cs, how)
                        }
                        Mode::Fused(how) => p2p
                            .ok_or_else(|| {
                                Error::Aborted(
                                    "a fused mode on the host transport (modes_for refuses it)"
                                        .into(),
                                )
                            })?
                            .all_reduce_residual_rmsnorm(
                                s.partial,
                                s.residual,
                                s.weight,
                                s.normed,
                                s.rows,
                                s.hidden,
                                DType::Bf16,
                                s.eps,
                                cs,
                                how,
                            ),
                    }
                }
            };
            let key = format!("t{tokens}m{mi}");
            barrier(&format!("{key}-eager"))?;
            // One eager forward first: cuBLAS and NCCL set themselves up
            // outside the capture.
            // SAFETY: `cs` is this context's stream; the model outlives every
            // run of it (all synchronized before rank_main returns).
            unsafe { model.record(tokens, cs, &mut site)? };
            stream.synchronize().map_err(cuda("cuStreamSynchronize"))?;
            comm.check()?;
            stream
                .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
                .map_err(cuda("cuStreamBeginCapture"))?;
            // SAFETY: as the eager run above; the graph is dropped before the model.
            let recorded = unsafe { model.record(tokens, cs, &mut site) };
            let graph = stream
                .end_capture(sys::CUgraphInstantiate_flags(0))
                .map_err(cuda("cuStreamEndCapture"))?;
            recorded?;
            let graph = graph.ok_or_else(|| Error::Cuda {
                call: "cuStreamEndCapture".into(),
                detail: "empty graph".into(),
            })?;
            graph.upload().map_err(cuda("cuGraphUpload"))?;
            for _ in 0..3 {
                graph.launch().map_err(cuda("cuGraphLaunch"))?;
            }
            stream.synchronize().map_err(cuda("cuStreamSynchronize"))?;
            comm.check()?;
            barrier(&format!("{key}-timed"))?;
            let mut times = Vec::with_capacity(args.reps);
            for _ in 0..args.reps {
                ev0.record(&stream).map_err(cuda("cuEventRecord"))?;
                for _ in 0..args.iters {
                    graph.launch().map_err(cuda("cuGraphLaunch"))?;
                }
                ev1.record(&stream).map_err(cuda("cuEventRecord"))?;
                ev1.synchronize().map_err(cuda("cuEventSynchronize"))?;
                times.push(
                    ev0.elapsed_ms(&ev1).map_err(cuda("cuEventElapsedTime"))? as f64 * 1000.0
                        / args.iters as f64,
                );
            }
            stream.synchronize().map_err(cuda("cuStreamSynchronize"))?;
            comm.check()?;
            let (x, h) = model.output(tokens)?;
            let (rel, equal) = match (&nccl_h, mode) {
                (Some(r), Mode::Tp(..) | Mode::Fused(_)) => (Some(rel_diff(&h, r)), Some(h == *r)),
                _ => (None, None),
            };
            if mode == Mode::Nccl {
                nccl_h = Some(h.clone());
            }
            let kernel = match (mode, &comm) {
                (Mode::Tp(algo, how), GpuComm::Host(_)) => {
                    let k = comm.algo_name(algo, tokens * args.hidden * 2);
                    Some(match how {
                        Launch::Ordinary => k.to_string(),
                        Launch::Overlapped => format!("{k}-pdl"),
                    })
                }
                _ => None,
            };
            rows.push(RankRow {
                tokens,
                mode: mode_name(mode),
                kernel,
                forward_us: median(times),
                output_hash: fnv1a(&[&x, &h]),
                rel_diff_vs_nccl: rel,
                bitwise_equal_nccl: equal,
            });
        }
    }
    barrier("end")?;
    Ok(RankOut { info, rows })
}
