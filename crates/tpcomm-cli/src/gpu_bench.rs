//! `tpcomm bench` on GPUs (`--device gpu`, or auto with 2+ GPUs; the hidden
//! `gpu-bench` spelling runs the same): every tpcomm GPU all-reduce algorithm
//! and NCCL, eager and inside CUDA graphs, in one run, every result checked
//! against a float64 reference. One process per GPU (the command re-executes
//! itself as workers, through `gpu-bench`) or one thread per GPU
//! (`--launch threads`). The JSON is `tpcomm::report::BenchReport`, as the
//! CPU bench writes.

use clap::{Args, ValueEnum};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;
use tpcomm::cuda::cudarc::driver::{sys, CudaContext, CudaSlice, DevicePtr};
use tpcomm::cuda::verify::{count_wrong_against, random_bytes, Rng};
use tpcomm::cuda::{open_context, Algo, CudaConfig, GpuComm, Rendezvous, ThreadGroup, Transport};
use tpcomm::nccl::{Nccl, NcclComm, UniqueId};
use tpcomm::report::{utc_now, BenchMeta, BenchReport, BenchRow, Machine};
use tpcomm::select;
use tpcomm::{ByteSize, DType, Error, ReduceOp, Result};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Launch {
    /// One process per GPU, buffers shared by CUDA IPC.
    #[value(alias = "processes")]
    Procs,
    /// One thread per GPU in this process, buffers shared by peer access.
    Threads,
}

#[derive(Args, Clone, Debug)]
pub struct GpuBenchArgs {
    /// How ranks run: a process per GPU (CUDA IPC) or a thread per GPU (peer access).
    #[arg(long, value_enum, default_value = "procs")]
    launch: Launch,
    /// GPU transport: cuda (P2P), host (through pinned host memory, no P2P
    /// needed; one-shot = LL words, two-shot = chunked), auto (host when any
    /// pair lacks P2P).
    #[arg(long, default_value = "auto")]
    transport: Transport,
    /// Number of GPUs (ranks); default: every GPU, at most 8.
    #[arg(long)]
    gpus: Option<usize>,
    /// Element type: bf16, f16 or f32.
    #[arg(long, default_value = "bf16")]
    dtype: DType,
    /// Smallest message.
    #[arg(long, default_value = "1KiB")]
    min: ByteSize,
    /// Largest message (also the communicator's buffer size).
    #[arg(long, default_value = "64MiB")]
    max: ByteSize,
    /// Algorithms, comma separated: one-shot, two-shot, auto, nccl. `auto` runs what
    /// the library's selection picks at each size and mode (rows `auto:<choice>`).
    #[arg(long, value_delimiter = ',', default_value = "one-shot,two-shot,nccl")]
    algos: Vec<String>,
    /// Modes, comma separated: eager, graph.
    #[arg(long, value_delimiter = ',', default_value = "eager,graph")]
    modes: Vec<String>,
    /// Calls per timed repetition (and per captured graph).
    #[arg(long, default_value_t = 20)]
    iters: usize,
    /// Timed repetitions; the median is reported.
    #[arg(long, default_value_t = 25)]
    reps: usize,
    /// Input/output buffer pairs rotated through, so caches do not flatter.
    #[arg(long, default_value_t = 4)]
    rotate: usize,
    /// Bound on every wait, in milliseconds.
    #[arg(long, default_value_t = 20_000)]
    timeout_ms: u64,
    /// Write the results as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Also measure the midpoints between powers of two (1.5 x each), as `tpcomm tune` does.
    #[arg(long)]
    midpoints: bool,
    /// Tuning table for `--algos auto` (else $TPCOMM_TUNING_TABLE, then the
    /// default location for this machine's fingerprint, then the class defaults).
    #[arg(long, value_name = "FILE")]
    table: Option<PathBuf>,
    #[arg(long, hide = true)]
    fingerprint: Option<String>,
    #[arg(long, hide = true)]
    class: Option<String>,
    #[arg(long, hide = true)]
    worker_rank: Option<usize>,
    #[arg(long, hide = true)]
    rendezvous: Option<PathBuf>,
}

#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub(crate) struct Row {
    pub(crate) bytes: u64,
    pub(crate) count: usize,
    pub(crate) dtype: String,
    pub(crate) algo: String,
    pub(crate) mode: String,
    pub(crate) time_us: f64,
    pub(crate) algbw_gbps: f64,
    pub(crate) busbw_gbps: f64,
    pub(crate) wrong: usize,
}

#[derive(Clone, Debug, Default, Serialize, serde::Deserialize)]
pub(crate) struct RankInfo {
    pub(crate) gpu: String,
    pub(crate) arch: String,
    pub(crate) nvrtc: String,
    pub(crate) nccl: Option<String>,
    pub(crate) memory: String,
    #[serde(default)]
    pub(crate) transport: String,
}

#[derive(Serialize, serde::Deserialize)]
pub(crate) struct RankOut {
    pub(crate) info: RankInfo,
    pub(crate) rows: Vec<Row>,
}

enum Impl {
    Tp(Algo),
    Nccl,
    /// What the library's selection picks for each size and mode.
    Auto,
}

/// Runs the bench; errors are printed after `name` (the spelling the user typed).
pub fn run(args: GpuBenchArgs, name: &str) -> i32 {
    match run_inner(args) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("{name}: {e}");
            1
        }
    }
}

fn run_inner(args: GpuBenchArgs) -> Result<()> {
    let (args, world, outs) = measure(args)?;
    report(&args, world, outs)
}

/// Runs the measurement (or, in a worker process, one rank of it) and returns
/// every rank's rows; `tpcomm tune` calls this too.
pub(crate) fn measure(mut args: GpuBenchArgs) -> Result<(GpuBenchArgs, usize, Vec<RankOut>)> {
    validate(&args)?;
    if let (Some(rank), Some(dir)) = (args.worker_rank, args.rendezvous.clone()) {
        let world = args
            .gpus
            .ok_or_else(|| Error::invalid("--gpus", "workers need it"))?;
        let out = rank_main(rank, world, &args, Rendezvous::Dir(dir.clone()))?;
        let path = dir.join(format!("result.rank{rank}.json"));
        let text =
            serde_json::to_string(&out).map_err(|e| Error::invalid("result", e.to_string()))?;
        std::fs::write(&path, text)
            .map_err(|e| Error::io(format!("write {}", path.display()), e))?;
        std::process::exit(0);
    }
    tpcomm::cuda::ensure_driver()?;
    let n = CudaContext::device_count().map_err(|e| Error::Cuda {
        call: "cuDeviceGetCount".into(),
        detail: e.to_string(),
    })? as usize;
    let world = args.gpus.unwrap_or(n.min(tpcomm::cuda::MAX_WORLD));
    if args.algos.iter().any(|a| a == "auto") && args.class.is_none() {
        // Resolve the table once here, so every rank (thread or process)
        // loads the same one and checks it against the same fingerprint.
        let (machine, _) = crate::tune::this_machine(None)?;
        let (_, source) = select::find_table(args.table.as_deref(), &machine)?;
        args.table = match source {
            select::TableSource::ClassDefaults => None,
            select::TableSource::Explicit(p)
            | select::TableSource::Env(p)
            | select::TableSource::DefaultLocation(p) => Some(p),
        };
        args.class = Some(machine.class.name().to_string());
        args.fingerprint = Some(machine.fingerprint);
    }
    if world < 2 || world > n {
        return Err(Error::invalid(
            "--gpus",
            format!(
                "{world} ranks, but this machine has {n} GPU(s); the GPU bench needs 2 or more"
            ),
        ));
    }
    let outs: Vec<RankOut> = match args.launch {
        Launch::Threads => {
            let group = ThreadGroup::new(world);
            let hs: Vec<_> = (0..world)
                .map(|r| {
                    let (a, rv) = (args.clone(), Rendezvous::Threads(group.clone()));
                    std::thread::spawn(move || rank_main(r, world, &a, rv))
                })
                .collect();
            hs.into_iter()
                .map(|h| {
                    h.join()
                        .map_err(|_| Error::Aborted("a rank thread panicked".into()))?
                })
                .collect::<Result<_>>()?
        }
        Launch::Procs => run_procs(&args, world)?,
    };
    Ok((args, world, outs))
}

/// Arguments as if given on the command line (for `tpcomm tune`).
pub(crate) fn parse_args(argv: &[String]) -> Result<GpuBenchArgs> {
    #[derive(clap::Parser)]
    struct Wrap {
        #[command(flatten)]
        args: GpuBenchArgs,
    }
    use clap::Parser as _;
    Wrap::try_parse_from(std::iter::once("gpu-bench".to_string()).chain(argv.iter().cloned()))
        .map(|w| w.args)
        .map_err(|e| Error::invalid("gpu-bench arguments", e.to_string()))
}

fn validate(args: &GpuBenchArgs) -> Result<()> {
    if args.min.bytes() == 0 || args.min > args.max {
        return Err(Error::invalid(
            "--min/--max",
            format!("need 0 < min <= max, got {} and {}", args.min, args.max),
        ));
    }
    if args.iters == 0 || args.reps == 0 || args.rotate == 0 {
        return Err(Error::invalid(
            "--iters/--reps/--rotate",
            "must be at least 1",
        ));
    }
    for a in &args.algos {
        if a != "nccl" && a.parse::<Algo>().is_err() {
            return Err(Error::invalid(
                "--algos",
                format!("{a:?} (expected one-shot, two-shot, auto or nccl)"),
            ));
        }
    }
    for m in &args.modes {
        if m != "eager" && m != "graph" {
            return Err(Error::invalid(
                "--modes",
                format!("{m:?} (expected eager or graph)"),
            ));
        }
    }
    Ok(())
}

fn run_procs(args: &GpuBenchArgs, world: usize) -> Result<Vec<RankOut>> {
    let exe = std::env::current_exe().map_err(|e| Error::io("find this executable", e))?;
    let dir = std::env::temp_dir().join(format!(
        "tpcomm-gpu-bench-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    ));
    std::fs::create_dir_all(&dir).map_err(|e| Error::io(format!("create {}", dir.display()), e))?;
    let mut children = Vec::new();
    for r in 0..world {
        let mut cmd = std::process::Command::new(&exe);
        cmd.args(worker_argv(args, world, r, &dir));
        children.push(
            cmd.spawn()
                .map_err(|e| Error::io("start a worker process", e))?,
        );
    }
    let mut failed = Vec::new();
    for (r, mut c) in children.into_iter().enumerate() {
        let status = c.wait().map_err(|e| Error::io("wait for a worker", e))?;
        if !status.success() {
            failed.push(format!("rank {r}: {status}"));
        }
    }
    if !failed.is_empty() {
        return Err(Error::Aborted(format!(
            "worker processes failed ({}); their messages are above",
            failed.join(", ")
        )));
    }
    let outs = (0..world)
        .map(|r| {
            let p = dir.join(format!("result.rank{r}.json"));
            let text = std::fs::read_to_string(&p)
                .map_err(|e| Error::io(format!("read {}", p.display()), e))?;
            serde_json::from_str(&text).map_err(|e| Error::invalid("worker result", e.to_string()))
        })
        .collect::<Result<Vec<RankOut>>>()?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(outs)
}

/// The command line of worker `rank`: the hidden `gpu-bench` spelling with
/// every option that shapes the measurement, so each worker measures exactly
/// what the parent was asked for.
fn worker_argv(
    args: &GpuBenchArgs,
    world: usize,
    rank: usize,
    dir: &std::path::Path,
) -> Vec<std::ffi::OsString> {
    use std::ffi::OsString;
    let strs = |items: &[&str]| items.iter().map(OsString::from).collect::<Vec<_>>();
    let mut v = strs(&[
        "gpu-bench",
        "--gpus",
        &world.to_string(),
        "--worker-rank",
        &rank.to_string(),
        "--rendezvous",
    ]);
    v.push(dir.as_os_str().to_owned());
    v.extend(strs(&[
        "--dtype",
        args.dtype.name(),
        "--min",
        &args.min.bytes().to_string(),
        "--max",
        &args.max.bytes().to_string(),
        "--algos",
        &args.algos.join(","),
        "--modes",
        &args.modes.join(","),
        "--iters",
        &args.iters.to_string(),
        "--reps",
        &args.reps.to_string(),
        "--rotate",
        &args.rotate.to_string(),
        "--timeout-ms",
        &args.timeout_ms.to_string(),
        "--transport",
        args.transport.name(),
    ]));
    if args.midpoints {
        v.push("--midpoints".into());
    }
    if let Some(t) = &args.table {
        v.push("--table".into());
        v.push(t.as_os_str().to_owned());
    }
    if let Some(c) = &args.class {
        v.extend(strs(&["--class", c]));
    }
    if let Some(f) = &args.fingerprint {
        v.extend(strs(&["--fingerprint", f]));
    }
    v
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

fn rank_main(rank: usize, world: usize, args: &GpuBenchArgs, rv: Rendezvous) -> Result<RankOut> {
    let timeout = Duration::from_millis(args.timeout_ms);
    let ctx = open_context(rank)?;
    // SAFETY: every buffer here is used on one stream only, so cudarc's
    // per-buffer events are not needed (and must not be recorded into graphs).
    unsafe { ctx.disable_event_tracking() };
    let stream = ctx.new_stream().map_err(cuda("cuStreamCreate"))?;
    let mut cfg = CudaConfig::new(rank, world, rank);
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
    };
    let nccl = if args.algos.iter().any(|a| a == "nccl") {
        nccl_comm(rank, world, &rv, timeout, &mut info)
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
    for &bytes in &sizes {
        let count = bytes / dtype.size();
        if count == 0 {
            continue;
        }
        for algo_name in &args.algos {
            let imp = if algo_name == "nccl" {
                match &nccl {
                    Some(_) => Impl::Nccl,
                    None => continue,
                }
            } else if algo_name == "auto" {
                Impl::Auto
            } else {
                Impl::Tp(algo_name.parse()?)
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
                    (Impl::Auto, Some(d)) => Impl::Tp(d.choice.algo.unwrap_or(Algo::Auto)),
                    (Impl::Tp(a), _) => Impl::Tp(*a),
                    (Impl::Nccl, _) => Impl::Nccl,
                    (Impl::Auto, None) => Impl::Tp(Algo::Auto),
                };
                let call = |k: usize| -> Result<()> {
                    let (i, o) = (in_ptrs[k % rot], out_ptrs[k % rot]);
                    // SAFETY: i and o are `max`-byte buffers of this rank's device
                    // that live until the end of rank_main, after every sync.
                    unsafe {
                        match &imp {
                            Impl::Tp(a) => comm
                                .all_reduce(
                                    i,
                                    o,
                                    count,
                                    dtype,
                                    ReduceOp::Sum,
                                    *a,
                                    stream.cu_stream(),
                                )
                                .map(|_| ()),
                            Impl::Nccl => nccl.as_ref().map_or(Ok(()), |n| {
                                n.all_reduce(i, o, count, dtype, ReduceOp::Sum, stream.cu_stream())
                            }),
                            Impl::Auto => unreachable!("resolved above"),
                        }
                    }
                };
                let name = match &imp {
                    Impl::Tp(a) => comm.algo_name(*a, bytes).to_string(),
                    _ => "nccl".to_string(),
                };
                let name = match &decision {
                    Some(d) if algo_name == "auto" => format!("auto:{}", d.choice),
                    _ => name,
                };
                step += 1;
                barrier(&format!("b{step}"))?;
                let graph = mode == "graph";
                let mut times = Vec::with_capacity(args.reps);
                let captured = if graph {
                    stream
                        .begin_capture(
                            sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
                        )
                        .map_err(cuda("cuStreamBeginCapture"))?;
                    let mut res = Ok(());
                    for k in 0..args.iters {
                        res = res.and_then(|_| call(k));
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
                    Some(g)
                } else {
                    for k in 0..2 * rot {
                        call(k)?;
                    }
                    None
                };
                stream.synchronize().map_err(cuda("cuStreamSynchronize"))?;
                comm.check()?;
                barrier(&format!("t{step}"))?;
                for _ in 0..args.reps {
                    ev0.record(&stream).map_err(cuda("cuEventRecord"))?;
                    match &captured {
                        Some(g) => g.launch().map_err(cuda("cuGraphLaunch"))?,
                        None => {
                            for k in 0..args.iters {
                                call(k)?;
                            }
                        }
                    }
                    ev1.record(&stream).map_err(cuda("cuEventRecord"))?;
                    ev1.synchronize().map_err(cuda("cuEventSynchronize"))?;
                    times.push(
                        ev0.elapsed_ms(&ev1).map_err(cuda("cuEventElapsedTime"))? as f64 * 1000.0
                            / args.iters as f64,
                    );
                }
                // Check: poison every output, run once more, compare each with
                // the float64 reference.
                for o in outs.iter_mut() {
                    stream
                        .memcpy_htod(&poison[..bytes], &mut o.slice_mut(..bytes))
                        .map_err(cuda("cuMemcpyHtoD"))?;
                }
                match &captured {
                    Some(g) => g.launch().map_err(cuda("cuGraphLaunch"))?,
                    None => {
                        for k in 0..rot.max(args.iters) {
                            call(k)?;
                        }
                    }
                }
                stream.synchronize().map_err(cuda("cuStreamSynchronize"))?;
                comm.check()?;
                let mut wrong = 0;
                let mut host = vec![0u8; bytes];
                let written = if captured.is_some() {
                    rot.min(args.iters)
                } else {
                    rot
                };
                for (k, o) in outs.iter().enumerate().take(written) {
                    stream
                        .memcpy_dtoh(&o.slice(..bytes), &mut host[..])
                        .map_err(cuda("cuMemcpyDtoH"))?;
                    stream.synchronize().map_err(cuda("cuStreamSynchronize"))?;
                    let ins_k: Vec<&[u8]> = inputs[k].iter().map(|v| &v[..bytes]).collect();
                    wrong += count_wrong_par(dtype, &host, &ins_k, world, workers);
                }
                let t = median(times);
                let algbw = bytes as f64 / (t * 1e-6) / 1e9;
                rows.push(Row {
                    bytes: bytes as u64,
                    count,
                    dtype: dtype.name().to_string(),
                    algo: name.clone(),
                    mode: mode.clone(),
                    time_us: t,
                    algbw_gbps: algbw,
                    busbw_gbps: algbw * 2.0 * (world - 1) as f64 / world as f64,
                    wrong,
                });
            }
        }
    }
    barrier("end")?;
    Ok(RankOut { info, rows })
}

/// Threads each rank may use for CPU-side work (making inputs, the float64
/// check): the machine's cores shared by the `world` ranks, which all do it at
/// once.
fn cpu_workers(world: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    (cores / world.max(1)).max(1)
}

/// `inputs[k][p]`: rank `p`'s input of rotation buffer `k`, `count` random
/// elements seeded by (k, p) alone, so every rank and every worker count makes
/// the same bytes. Buffers are made by up to `workers` threads at once.
pub(crate) fn random_inputs(
    dtype: DType,
    count: usize,
    rot: usize,
    world: usize,
    workers: usize,
) -> Vec<Vec<Vec<u8>>> {
    let one =
        |k: usize, p: usize| random_bytes(dtype, count, &mut Rng::new(1 + (k * 64 + p) as u64));
    let jobs: Vec<(usize, usize)> = (0..rot)
        .flat_map(|k| (0..world).map(move |p| (k, p)))
        .collect();
    let mut flat: Vec<Vec<u8>> = Vec::with_capacity(jobs.len());
    for batch in jobs.chunks(workers.max(1)) {
        let made: Vec<Vec<u8>> = std::thread::scope(|s| {
            let hs: Vec<_> = batch
                .iter()
                .map(|&(k, p)| (k, p, s.spawn(move || one(k, p))))
                .collect();
            // A worker that panicked (allocation failure) is retried here, so
            // the inputs are complete or this thread fails the same way.
            hs.into_iter()
                .map(|(k, p, h)| h.join().unwrap_or_else(|_| one(k, p)))
                .collect()
        });
        flat.extend(made);
    }
    let mut it = flat.into_iter();
    (0..rot)
        .map(|_| it.by_ref().take(world).collect())
        .collect()
}

/// [`count_wrong_against`] over `workers` threads, each taking a contiguous
/// range of elements. The check of an element reads only that element of the
/// output and of each input, so the count equals the one-thread count; this
/// only divides the float64 work (at 64 MiB, 32 M elements per buffer, the
/// bulk of a large point's time) by the cores this rank may use.
pub(crate) fn count_wrong_par(
    dtype: DType,
    out: &[u8],
    inputs: &[&[u8]],
    world: usize,
    workers: usize,
) -> usize {
    let size = dtype.size();
    let n = out.len() / size;
    // Under 64 Ki elements per thread, starting threads costs more than it saves.
    let workers = workers.min(n / (64 << 10)).max(1);
    if workers == 1 {
        return count_wrong_against(dtype, out, inputs, world);
    }
    let per = n.div_ceil(workers);
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..workers)
            .map(|w| {
                let (a, b) = ((w * per).min(n), ((w + 1) * per).min(n));
                let o = &out[a * size..b * size];
                let ins: Vec<&[u8]> = inputs.iter().map(|i| &i[a * size..b * size]).collect();
                (
                    b - a,
                    s.spawn(move || count_wrong_against(dtype, o, &ins, world)),
                )
            })
            .collect();
        // A worker that panicked checked nothing: count its range as wrong.
        hs.into_iter().map(|(len, h)| h.join().unwrap_or(len)).sum()
    })
}

/// The selection transport of a communicator's transport (`Auto` never
/// comes out of `GpuComm::transport`; it is mapped to CUDA for completeness).
pub(crate) fn select_transport(t: Transport) -> select::Transport {
    match t {
        Transport::Host => select::Transport::Host,
        Transport::Cuda | Transport::Auto => select::Transport::Cuda,
    }
}

/// A bench row's algorithm label as a selection candidate on `transport`
/// (the communicator's, as `RankInfo::transport` names it): the host
/// kernels' names (`host-ll`, `host-chunked`) are the host transport's
/// one-shot and two-shot; `auto:*` rows are not candidates.
pub(crate) fn row_candidate(transport: &str, algo: &str) -> Option<select::Candidate> {
    if algo == "nccl" {
        return Some(select::Candidate::NCCL);
    }
    if algo.starts_with("auto") {
        return None;
    }
    let algo = match algo {
        "host-ll" => "one-shot",
        "host-chunked" => "two-shot",
        a => a,
    };
    format!("{transport}:{algo}").parse().ok()
}

/// The selector every rank uses for `--algos auto`: the table the parent
/// process resolved (checked against its fingerprint), else the class defaults.
fn auto_selector(args: &GpuBenchArgs) -> Result<select::Selector> {
    let class = args
        .class
        .as_deref()
        .map(crate::explain::parse_class)
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

/// Prints the table (and writes the JSON) of a finished measurement.
pub(crate) fn report_rows(args: &GpuBenchArgs, world: usize, outs: Vec<RankOut>) -> Result<()> {
    report(args, world, outs)
}

fn report(args: &GpuBenchArgs, world: usize, outs: Vec<RankOut>) -> Result<()> {
    let mut rows = outs[0].rows.clone();
    // Times are rank 0's; a wrong element on any rank counts.
    for o in &outs[1..] {
        for (r, x) in rows.iter_mut().zip(&o.rows) {
            r.wrong += x.wrong;
        }
    }
    let driver = tpcomm::cuda::driver_version()
        .map(|(a, b)| format!("{a}.{b}"))
        .unwrap_or_default();
    let doc = bench_report(args, world, &outs, &rows, &driver)?;
    eprint!("{}", outs[0].info.memory);
    println!(
        "# tpcomm bench (gpu): {world} x {} ({}), driver CUDA {driver}, NVRTC {}, NCCL {}, transport {}, launch {}, median of {} reps x {} calls, {} rotating buffers",
        outs[0].info.gpu,
        outs[0].info.arch,
        outs[0].info.nvrtc,
        outs[0].info.nccl.clone().unwrap_or_else(|| "not loaded".into()),
        outs[0].info.transport,
        doc.meta.launch,
        args.reps,
        args.iters,
        args.rotate
    );
    println!("{}", crate::bench::columns::header());
    for r in &doc.rows {
        println!("{}", crate::bench::columns::line(r));
    }
    let wrong: u64 = doc.rows.iter().map(|r| r.wrong).sum();
    println!("# total wrong elements: {wrong}");
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&doc)
            .map_err(|e| Error::invalid("json", e.to_string()))?;
        std::fs::write(path, text)
            .map_err(|e| Error::io(format!("write {}", path.display()), e))?;
    }
    if wrong > 0 {
        return Err(Error::Aborted(format!("{wrong} wrong elements")));
    }
    Ok(())
}

/// The run as the CPU bench's JSON shape: rank 0's rows (wrong elements
/// already summed over ranks), GPU facts in the optional meta fields.
fn bench_report(
    args: &GpuBenchArgs,
    world: usize,
    outs: &[RankOut],
    rows: &[Row],
    driver: &str,
) -> Result<BenchReport> {
    let info = &outs[0].info;
    let mut versions = BTreeMap::new();
    versions.insert("tpcomm".to_string(), env!("CARGO_PKG_VERSION").to_string());
    if !driver.is_empty() {
        versions.insert("driver".to_string(), driver.to_string());
    }
    versions.insert("nvrtc".to_string(), info.nvrtc.clone());
    if let Some(n) = &info.nccl {
        versions.insert("nccl".to_string(), n.clone());
    }
    let meta = BenchMeta {
        machine: Machine::this(),
        cores: std::thread::available_parallelism().map_or(0, |n| n.get()),
        date: utc_now(),
        versions,
        transport: info.transport.clone(),
        world_size: world,
        launch: match args.launch {
            Launch::Procs => "processes".into(),
            Launch::Threads => "threads".into(),
        },
        device: Some("gpu".into()),
        gpus: Some(outs.iter().map(|o| o.info.gpu.clone()).collect()),
        arch: Some(info.arch.clone()),
        iters: Some(args.iters),
        reps: Some(args.reps),
        rotate: Some(args.rotate),
        timing: Some(
            "CUDA events on rank 0, per-call time = median over reps of (elapsed / iters)".into(),
        ),
    };
    let rows = rows
        .iter()
        .map(|r| {
            Ok(BenchRow {
                bytes: r.bytes,
                count: r.count as u64,
                dtype: r.dtype.parse()?,
                op: ReduceOp::Sum.name().to_string(),
                algo: r.algo.clone(),
                mode: r.mode.clone(),
                time_us: r.time_us,
                algbw_gbps: r.algbw_gbps,
                busbw_gbps: r.busbw_gbps,
                wrong: r.wrong as u64,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(BenchReport { meta, rows })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        args: GpuBenchArgs,
    }

    fn parse(args: &[&str]) -> GpuBenchArgs {
        Cmd::parse_from(std::iter::once("gpu-bench").chain(args.iter().copied())).args
    }

    #[test]
    fn defaults_are_valid() {
        validate(&parse(&[])).unwrap();
    }

    #[test]
    fn unknown_algorithms_and_modes_are_refused_before_any_gpu_work() {
        let e = validate(&parse(&["--algos", "one-shot,ring"])).unwrap_err();
        assert!(e.to_string().contains("\"ring\""), "{e}");
        let e = validate(&parse(&["--modes", "eager,lazy"])).unwrap_err();
        assert!(e.to_string().contains("\"lazy\""), "{e}");
    }

    #[test]
    fn transport_is_parsed_and_unknown_ones_refused() {
        assert_eq!(parse(&[]).transport, Transport::Auto);
        assert_eq!(parse(&["--transport", "host"]).transport, Transport::Host);
        let r = Cmd::try_parse_from(["gpu-bench", "--transport", "pcie"]);
        assert!(r.is_err());
    }

    /// What a worker process parses from the command line the parent builds
    /// is the parent's measurement, plus its rank and meeting place.
    #[test]
    fn workers_parse_back_the_parents_arguments() {
        let parent = parse(&[
            "--launch",
            "procs",
            "--transport",
            "host",
            "--dtype",
            "f16",
            "--min",
            "3KiB",
            "--max",
            "2MiB",
            "--algos",
            "one-shot,auto,nccl",
            "--modes",
            "graph",
            "--iters",
            "7",
            "--reps",
            "9",
            "--rotate",
            "2",
            "--timeout-ms",
            "1234",
            "--midpoints",
            "--table",
            "/tmp/t.toml",
            "--class",
            "nvlink",
            "--fingerprint",
            "abc",
            "--json",
            "/tmp/out.json",
        ]);
        let dir = std::path::Path::new("/tmp/rv dir");
        let argv = worker_argv(&parent, 2, 1, dir);
        let cli = crate::Cli::try_parse_from(std::iter::once("tpcomm".into()).chain(argv)).unwrap();
        let crate::Command::GpuBench(w) = cli.command else {
            panic!("workers must run the GPU bench")
        };
        assert_eq!(w.worker_rank, Some(1));
        assert_eq!(w.gpus, Some(2));
        assert_eq!(w.rendezvous.as_deref(), Some(dir));
        // Everything else is the parent's, except where the JSON goes
        // (the parent writes it) and the worker fields above.
        let strip = |mut a: GpuBenchArgs| {
            a.worker_rank = None;
            a.rendezvous = None;
            a.gpus = None;
            a.json = None;
            format!("{a:?}")
        };
        assert_eq!(strip(w), strip(parent));
    }

    fn rank_out(gpu: &str, wrong: usize, nccl: Option<&str>) -> RankOut {
        RankOut {
            info: RankInfo {
                gpu: gpu.into(),
                arch: "sm_90".into(),
                nvrtc: "13.0 (/usr/lib/libnvrtc.so)".into(),
                nccl: nccl.map(str::to_string),
                memory: String::new(),
                transport: "host".into(),
            },
            rows: vec![Row {
                bytes: 4096,
                count: 2048,
                dtype: "bf16".into(),
                algo: "nccl".into(),
                mode: "graph".into(),
                time_us: 12.5,
                algbw_gbps: 0.32768,
                busbw_gbps: 0.32768,
                wrong,
            }],
        }
    }

    /// The GPU JSON is a BenchReport (the CPU bench's shape) that reads
    /// back as written, with the GPU facts in the optional meta fields, and
    /// that the latency-table reader of tpcomm-plan takes.
    #[test]
    fn gpu_report_is_a_bench_report_that_round_trips() {
        let args = parse(&["--launch", "threads", "--iters", "7", "--reps", "9"]);
        let outs = vec![
            rank_out("H200", 0, Some("2.27.3")),
            rank_out("H200", 0, None),
        ];
        let doc = bench_report(&args, 2, &outs, &outs[0].rows, "13.0").unwrap();
        let text = serde_json::to_string_pretty(&doc).unwrap();
        let back: BenchReport = serde_json::from_str(&text).unwrap();
        assert_eq!(back, doc);
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let m = &v["meta"];
        assert_eq!(m["device"], "gpu");
        assert_eq!(m["transport"], "host");
        assert_eq!(m["world_size"], 2);
        assert_eq!(m["launch"], "threads");
        assert_eq!(m["gpus"], serde_json::json!(["H200", "H200"]));
        assert_eq!(m["arch"], "sm_90");
        assert_eq!(
            (
                m["iters"].as_u64(),
                m["reps"].as_u64(),
                m["rotate"].as_u64()
            ),
            (Some(7), Some(9), Some(4))
        );
        assert_eq!(m["versions"]["driver"], "13.0");
        assert_eq!(m["versions"]["nccl"], "2.27.3");
        assert_eq!(m["versions"]["tpcomm"], env!("CARGO_PKG_VERSION"));
        assert!(m["versions"]["nvrtc"].as_str().unwrap().starts_with("13.0"));
        let r = &v["rows"][0];
        assert_eq!(
            (r["op"].as_str(), r["dtype"].as_str(), r["algo"].as_str()),
            (Some("sum"), Some("bf16"), Some("nccl"))
        );
        assert_eq!(
            (r["count"].as_u64(), r["time_us"].as_f64()),
            (Some(2048), Some(12.5))
        );
        let t = tpcomm_plan::latency::LatencyTable::from_bench_str(
            "gpu.json",
            &text,
            Some("nccl"),
            Some("graph"),
            Some("bf16"),
        )
        .unwrap();
        assert_eq!(t.points.len(), 1);
        // Without NCCL the version is left out, not written empty.
        let outs = vec![rank_out("H200", 0, None), rank_out("H200", 0, None)];
        let doc = bench_report(&args, 2, &outs, &outs[0].rows, "").unwrap();
        assert!(
            !doc.meta.versions.contains_key("nccl") && !doc.meta.versions.contains_key("driver")
        );
    }

    #[test]
    fn min_above_max_or_zero_counts_are_refused() {
        assert!(validate(&parse(&["--min", "2MiB", "--max", "1MiB"])).is_err());
        assert!(validate(&parse(&["--reps", "0"])).is_err());
        assert!(validate(&parse(&["--min", "0"])).is_err());
    }

    #[test]
    fn the_parallel_check_counts_exactly_what_one_thread_counts() {
        for dtype in DType::ALL {
            // 200 Ki elements: at most three workers (64 Ki elements or more
            // each), the last range shorter; errors in every range and at both ends.
            let count = 200 << 10;
            let ins = random_inputs(dtype, count, 1, 2, 3).remove(0);
            let refs: Vec<&[u8]> = ins.iter().map(|v| &v[..]).collect();
            let r = tpcomm::cuda::verify::reference(dtype, &refs, count);
            let mut vals: Vec<f64> = r.iter().map(|x| x.0).collect();
            let right = encode(dtype, &vals);
            assert_eq!(count_wrong_par(dtype, &right, &refs, 2, 4), 0, "{dtype}");
            for i in [0, 70_000, 140_000, count - 1] {
                vals[i] += 100.0;
            }
            let wrong = encode(dtype, &vals);
            let one = count_wrong_against(dtype, &wrong, &refs, 2);
            assert_eq!(one, 4, "{dtype}");
            for workers in [1, 2, 3, 4, 16] {
                assert_eq!(
                    count_wrong_par(dtype, &wrong, &refs, 2, workers),
                    one,
                    "{dtype} x{workers}"
                );
            }
        }
    }

    fn encode(dtype: DType, vals: &[f64]) -> Vec<u8> {
        let mut out = Vec::new();
        for &v in vals {
            match dtype {
                DType::F32 => out.extend_from_slice(&(v as f32).to_le_bytes()),
                DType::F16 => {
                    out.extend_from_slice(&half::f16::from_f64(v).to_bits().to_le_bytes())
                }
                DType::Bf16 => {
                    out.extend_from_slice(&half::bf16::from_f64(v).to_bits().to_le_bytes())
                }
            }
        }
        out
    }

    #[test]
    fn inputs_do_not_depend_on_how_many_threads_make_them() {
        let one = random_inputs(DType::Bf16, 1000, 3, 2, 1);
        assert_eq!(one.len(), 3);
        assert!(one
            .iter()
            .all(|k| k.len() == 2 && k.iter().all(|b| b.len() == 2000)));
        // Seeded by (buffer, rank): what the one-thread code made before.
        assert_eq!(
            one[2][1],
            random_bytes(DType::Bf16, 1000, &mut Rng::new(1 + 2 * 64 + 1))
        );
        assert_ne!(one[0][0], one[0][1]);
        for w in [2, 4, 7] {
            assert_eq!(
                random_inputs(DType::Bf16, 1000, 3, 2, w),
                one,
                "{w} workers"
            );
        }
    }

    #[test]
    fn bench_rows_map_to_the_candidates_of_their_transport() {
        use tpcomm::select::Candidate;
        assert_eq!(
            row_candidate("cuda", "one-shot"),
            Some(Candidate::cuda(Algo::OneShot))
        );
        assert_eq!(
            row_candidate("cuda", "two-shot"),
            Some(Candidate::cuda(Algo::TwoShot))
        );
        assert_eq!(
            row_candidate("host", "host-ll"),
            Some(Candidate::host(Algo::OneShot))
        );
        assert_eq!(
            row_candidate("host", "host-chunked"),
            Some(Candidate::host(Algo::TwoShot))
        );
        assert_eq!(row_candidate("host", "nccl"), Some(Candidate::NCCL));
        assert_eq!(row_candidate("host", "auto:host:one-shot"), None);
        assert_eq!(row_candidate("cuda", "auto:nccl"), None);
        assert_eq!(row_candidate("cuda", "mystery"), None);
        assert_eq!(select_transport(Transport::Host), select::Transport::Host);
        assert_eq!(select_transport(Transport::Cuda), select::Transport::Cuda);
    }
}
