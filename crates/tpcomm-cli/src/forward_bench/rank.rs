//! One rank of the forward benchmark: builds the model and the
//! communicators, then captures and times the forward once per token count
//! and mode.

use super::*;
use std::sync::Arc;
use tpcomm::cuda::cudarc::driver::{CudaEvent, CudaGraph, CudaStream};
use tpcomm::cuda::quant::{QuantAlgo, QuantComm};
use tpcomm::cuda::StreamAllReduce;

pub(super) fn rank_main(
    rank: usize,
    world: usize,
    args: &ForwardBenchArgs,
    rv: Rendezvous,
) -> Result<RankOut> {
    let timeout = Duration::from_millis(args.timeout_ms);
    let (setup, info) = set_up(rank, world, args, &rv, timeout)?;
    let new_event = || {
        setup
            .ctx
            .new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(cuda("cuEventCreate"))
    };
    let (ev0, ev1) = (new_event()?, new_event()?);
    let f = Forward {
        rank,
        world,
        args,
        rv: &rv,
        timeout,
        s: &setup,
        ev0,
        ev1,
    };
    let mut rows = Vec::new();
    for &tokens in &args.tokens {
        // NCCL's output at this token count, for the modes after it.
        let mut nccl_h: Option<Vec<u8>> = None;
        let mut refs = References::default();
        for (mi, &mode) in setup.modes.iter().enumerate() {
            let key = format!("t{tokens}m{mi}");
            let graph = f.capture(tokens, mode, &key)?;
            f.barrier(&format!("{key}-timed"))?;
            let times = f.time(&graph)?;
            let (row, h) = f.row(tokens, mode, times, &mut nccl_h)?;
            refs.keep(rows.len(), mode, h);
            rows.push(row);
        }
        refs.compare(&mut rows);
    }
    f.barrier("end")?;
    Ok(RankOut { info, rows })
}

/// One token count's final hidden states that the quantized rows are
/// compared with, and the quantized rows' own, until every mode has run.
#[derive(Default)]
pub(super) struct References {
    nccl: Option<Vec<u8>>,
    /// The first exact tpcomm mode's name and output.
    exact: Option<(String, Vec<u8>)>,
    /// Index in the rows and output of each quantized row.
    quant: Vec<(usize, Vec<u8>)>,
}

impl References {
    /// Keeps `h`, the output of `mode` (row `index`), where a comparison
    /// needs it.
    pub(super) fn keep(&mut self, index: usize, mode: Mode, h: Vec<u8>) {
        match mode {
            Mode::Nccl => self.nccl = Some(h),
            Mode::Quant(_) => self.quant.push((index, h)),
            m if m.is_exact_tpcomm() && self.exact.is_none() => {
                self.exact = Some((mode_name(m), h))
            }
            _ => {}
        }
    }

    /// Fills in each quantized row's reference and relative error: against
    /// NCCL's output when NCCL ran at this token count, else against the
    /// first exact tpcomm mode's (`modes_for` puts one before every
    /// quantized mode).
    pub(super) fn compare(self, rows: &mut [RankRow]) {
        let reference = match (self.nccl, self.exact) {
            (Some(h), _) => Some(("nccl".to_string(), h)),
            (None, exact) => exact,
        };
        let Some((name, r)) = reference else {
            return;
        };
        for (i, h) in self.quant {
            rows[i].reference = Some(name.clone());
            rows[i].rel_diff_vs_reference = Some(rel_diff(&h, &r));
        }
    }
}

/// This rank's GPU, communicators and model, and the modes it runs. The
/// fields drop in the order rank_main's locals did: the model and NCCL
/// before tpcomm's communicators (the quantized one first), the stream and
/// the context.
struct Setup {
    model: Model,
    nccl: Option<NcclComm>,
    /// The quantized all-reduce, only when a quantized mode runs.
    quant: Option<QuantComm>,
    comm: GpuComm,
    stream: Arc<CudaStream>,
    ctx: Arc<CudaContext>,
    modes: Vec<Mode>,
}

/// Opens this rank's GPU (round-robin over the visible ones: more ranks than
/// GPUs share them), the communicators the modes need and the model.
fn set_up(
    rank: usize,
    world: usize,
    args: &ForwardBenchArgs,
    rv: &Rendezvous,
    timeout: Duration,
) -> Result<(Setup, RankInfo)> {
    let RankDevice {
        gpus,
        device,
        ctx,
        stream,
    } = open_rank_device(rank)?;
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
    // On cuda (P2P) this is P2pTransport::new, as before the host
    // transport was offered; every rank resolves auto the same way, so a
    // refused mode fails them all here, before NCCL or the model.
    let comm = GpuComm::new(&cfg, rv)?;
    let (mut modes, mut skipped) = modes_for(args.modes.as_deref(), comm.transport())?;
    if world > gpus && modes.contains(&Mode::Nccl) {
        // NCCL refuses ranks that share a GPU ("Duplicate GPU detected").
        modes.retain(|m| *m != Mode::Nccl);
        skipped.push("nccl");
    }
    let fused_image = match &comm {
        GpuComm::P2p(c) => Some(c.prepare_fused()?),
        GpuComm::Pinned(_) => None,
    };
    let nccl = if modes.contains(&Mode::Nccl) {
        Some(nccl_comm(rank, world, rv, timeout)?)
    } else {
        None
    };
    // One QuantComm serves both wires: its buffers hold any group from 32 to
    // 128 (sized for the smallest), at the exact communicator's max_bytes.
    let quant = if modes.iter().any(|m| matches!(m, Mode::Quant(_))) {
        Some(QuantComm::new(&cfg, comm.transport(), rv)?)
    } else {
        None
    };
    let model = Model::new(&ctx, shape, rank, stream.cu_stream())?;
    stream.synchronize().map_err(cuda("cuStreamSynchronize"))?;
    let arch = ctx
        .compute_capability()
        .map_err(cuda("cuDeviceGetAttribute"))?;
    let info = RankInfo {
        gpu: ctx.name().unwrap_or_default(),
        arch: format!("sm_{}{}", arch.0, arch.1),
        nccl: nccl.as_ref().map(|n| n.nccl().version().to_string()),
        comm_memory: {
            let mut text = match fused_image {
                Some(image) => format!(
                    "{}  fused kernels' image: {image} (shared per device)\n",
                    comm.memory_report()
                ),
                None => format!("{}", comm.memory_report()),
            };
            if let Some(q) = &quant {
                if !text.ends_with('\n') {
                    text.push('\n');
                }
                text.push_str(&q.memory_report().to_string());
            }
            text
        },
        model_bytes: model.device_bytes().bytes(),
        transport: comm.transport().name().to_string(),
        skipped_modes: skipped.iter().map(|s| s.to_string()).collect(),
        ranks_on_device: comm.sharing().ranks_on_device,
    };
    let setup = Setup {
        model,
        nccl,
        quant,
        comm,
        stream,
        ctx,
        modes,
    };
    Ok((setup, info))
}

/// One rank's forward runs, shared by every token count and mode.
struct Forward<'a> {
    rank: usize,
    world: usize,
    args: &'a ForwardBenchArgs,
    rv: &'a Rendezvous,
    timeout: Duration,
    s: &'a Setup,
    ev0: CudaEvent,
    ev1: CudaEvent,
}

impl Forward<'_> {
    fn barrier(&self, key: &str) -> Result<()> {
        self.rv
            .exchange(key, self.rank, self.world, &[], self.timeout)
            .map(|_| ())
    }

    /// Reports a peer that did not arrive in an earlier call, of either of
    /// tpcomm's communicators (synchronize the stream first).
    fn check(&self) -> Result<()> {
        self.s.comm.check()?;
        self.s.quant.as_ref().map_or(Ok(()), QuantComm::check)
    }

    /// tpcomm's communicator when it is the P2P one (the fused modes need it).
    fn p2p(&self) -> Option<&tpcomm::cuda::P2pTransport> {
        match &self.s.comm {
            GpuComm::P2p(c) => Some(c),
            GpuComm::Pinned(_) => None,
        }
    }

    /// One all-reduce site of the forward, done the way `mode` says.
    fn site(&self, mode: Mode, s: &Site) -> Result<()> {
        let (model, cs) = (&self.s.model, self.s.stream.cu_stream());
        let count = s.rows * s.hidden;
        // SAFETY: the site's buffers are the model's, sized for this
        // many rows and alive until the end of rank_main, after every
        // synchronization; `cs` is this device's stream.
        unsafe {
            match mode {
                Mode::None(how) => model.add_norm(s, s.partial, cs, how),
                Mode::Nccl => {
                    let n =
                        self.s.nccl.as_ref().ok_or_else(|| {
                            Error::Aborted("NCCL mode without a communicator".into())
                        })?;
                    n.all_reduce(s.partial, s.reduced, count, DType::Bf16, ReduceOp::Sum, cs)?;
                    model.add_norm(s, s.reduced, cs, Launch::Ordinary)
                }
                Mode::Tp(algo, how) => {
                    let call =
                        tpcomm::cuda::Call::new(s.partial, s.reduced, count, DType::Bf16, cs)
                            .with_algo(algo)
                            .with_launch(how);
                    self.s.comm.all_reduce_call(&call)?;
                    model.add_norm(s, s.reduced, cs, how)
                }
                Mode::Fused(how) => self
                    .p2p()
                    .ok_or_else(|| {
                        Error::Aborted(
                            "a fused mode on the host transport (modes_for refuses it)".into(),
                        )
                    })?
                    .all_reduce_residual_rmsnorm(s.partial, &s.norm(cs, how)),
                Mode::Quant(wire) => {
                    let q = self.s.quant.as_ref().ok_or_else(|| {
                        Error::Aborted("a quantized mode without its communicator".into())
                    })?;
                    let call =
                        tpcomm::cuda::Call::new(s.partial, s.reduced, count, DType::Bf16, cs);
                    q.all_reduce_with(&call, wire, QuantAlgo::Auto)?;
                    model.add_norm(s, s.reduced, cs, Launch::Ordinary)
                }
            }
        }
    }

    /// The forward at `tokens` in one mode, captured in a CUDA graph after
    /// one eager run (cuBLAS and NCCL set themselves up outside the
    /// capture), uploaded and launched three times untimed.
    fn capture(&self, tokens: usize, mode: Mode, key: &str) -> Result<CudaGraph> {
        let (model, stream) = (&self.s.model, &self.s.stream);
        let cs = stream.cu_stream();
        let mut site = |s: &Site| self.site(mode, s);
        self.barrier(&format!("{key}-eager"))?;
        // SAFETY: `cs` is this context's stream; the model outlives every
        // run of it (all synchronized before rank_main returns).
        unsafe { model.record(tokens, cs, &mut site)? };
        stream.synchronize().map_err(cuda("cuStreamSynchronize"))?;
        self.check()?;
        let graph = crate::gpu_bench::capture_graph(stream, || {
            // SAFETY: as the eager run above; the graph is dropped before the
            // model (each mode's graph at the end of its turn in rank_main).
            unsafe { model.record(tokens, cs, &mut site) }
        })?;
        for _ in 0..3 {
            graph.launch().map_err(cuda("cuGraphLaunch"))?;
        }
        stream.synchronize().map_err(cuda("cuStreamSynchronize"))?;
        self.check()?;
        Ok(graph)
    }

    /// Microseconds per forward, one per rep of `--iters` graph launches.
    fn time(&self, graph: &CudaGraph) -> Result<Vec<f64>> {
        let (ev0, ev1, stream) = (&self.ev0, &self.ev1, &self.s.stream);
        let iters = self.args.iters;
        let mut times = Vec::with_capacity(self.args.reps);
        for _ in 0..self.args.reps {
            let run = || (0..iters).try_for_each(|_| graph.launch().map_err(cuda("cuGraphLaunch")));
            times.push(crate::gpu_bench::time_us((ev0, ev1), stream, iters, run)?);
        }
        Ok(times)
    }

    /// The row of one mode: its median time and its output, compared with
    /// NCCL's at the same token count when NCCL ran before it (and kept as
    /// that reference when this mode is NCCL), and the final hidden state
    /// (a quantized row's comparison waits for the token count's end:
    /// `References`).
    fn row(
        &self,
        tokens: usize,
        mode: Mode,
        times: Vec<f64>,
        nccl_h: &mut Option<Vec<u8>>,
    ) -> Result<(RankRow, Vec<u8>)> {
        let comm = &self.s.comm;
        self.s
            .stream
            .synchronize()
            .map_err(cuda("cuStreamSynchronize"))?;
        self.check()?;
        let (x, h) = self.s.model.output(tokens)?;
        let (rel, equal) = match (&*nccl_h, mode) {
            (Some(r), Mode::Tp(..) | Mode::Fused(_)) => (Some(rel_diff(&h, r)), Some(h == *r)),
            _ => (None, None),
        };
        if mode == Mode::Nccl {
            *nccl_h = Some(h.clone());
        }
        let kernel = match (mode, comm) {
            (Mode::Tp(algo, how), GpuComm::Pinned(_)) => {
                let k = comm.algo_name(algo, tokens * self.args.hidden * 2);
                Some(match how {
                    Launch::Ordinary => k.to_string(),
                    Launch::Overlapped => format!("{k}-pdl"),
                })
            }
            _ => None,
        };
        let row = RankRow {
            tokens,
            mode: mode_name(mode),
            kernel,
            forward_us: median(times),
            output_hash: fnv1a(&[&x, &h]),
            rel_diff_vs_nccl: rel,
            bitwise_equal_nccl: equal,
            reference: None,
            rel_diff_vs_reference: None,
        };
        Ok((row, h))
    }
}
