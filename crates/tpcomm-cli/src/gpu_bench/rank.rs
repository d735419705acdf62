//! One rank of the GPU bench (its communicators: comms.rs): every size,
//! algorithm and mode timed, every output checked.

use super::check::cpu_workers;
use super::comms::{auto_selector, open_comms, Comms};
use super::device::{capture_graph, cuda, time_us};
use super::{count_wrong_par, random_inputs, select_transport};
use super::{GpuBenchArgs, RankOut, Row};
use crate::bench::coll::Coll;
use std::sync::Arc;
use std::time::Duration;
use tpcomm::cuda::cudarc::driver::{sys, CudaEvent, CudaSlice, CudaStream, DevicePtr};
use tpcomm::cuda::quant::QuantAlgo;
use tpcomm::cuda::{Algo, Call, GpuTransport, Launch, Rendezvous, StreamAllReduce};
use tpcomm::quant::Wire;
use tpcomm::select;
use tpcomm::{ReduceOp, Result};

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
    /// `--coll` other than all-reduce: tpcomm's kernel for it.
    Coll,
    Nccl,
    /// What the library's selection picks for each size and mode.
    Auto,
    /// The quantized all-reduce on this wire.
    Quant(tpcomm::quant::Wire),
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// The inputs every rank makes for every rank (seeded by rank and buffer),
/// so each can check its results against the float64 reference on its own,
/// and this rank's device copies of its own, with output buffers beside.
struct Buffers {
    inputs: Vec<Vec<Vec<u8>>>,
    ins: Vec<CudaSlice<u8>>,
    outs: Vec<CudaSlice<u8>>,
    /// What every output is overwritten with before a check (`max` bytes).
    poison: Vec<u8>,
    /// This rank's share of the CPU cores, for making and checking.
    workers: usize,
}

impl Buffers {
    /// Made once, reused by every size, algorithm and mode; spread over this
    /// rank's share of the cores (at 64 MiB that is rot x world buffers of
    /// 32 M elements each, seconds on one core).
    fn new(
        rank: usize,
        world: usize,
        args: &GpuBenchArgs,
        stream: &Arc<CudaStream>,
    ) -> Result<Self> {
        let max = args.max.as_usize()?;
        let workers = cpu_workers(world);
        let inputs = random_inputs(
            args.dtype,
            max / args.dtype.size(),
            args.rotate,
            world,
            workers,
        );
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
        Ok(Buffers {
            inputs,
            ins,
            outs,
            poison: vec![0xffu8; max],
            workers,
        })
    }
}

/// The message sizes measured: powers of two from --min to --max, or the
/// tuning sizes (midpoints too) with --midpoints.
fn sizes(args: &GpuBenchArgs) -> Result<Vec<usize>> {
    if args.midpoints {
        return Ok(select::tune_sizes(args.min, args.max)
            .into_iter()
            .map(|b| b as usize)
            .collect());
    }
    let max = args.max.as_usize()?;
    let mut v = Vec::new();
    let mut s = args.min.as_usize()?;
    while s <= max {
        v.push(s);
        s *= 2;
    }
    Ok(v)
}

pub(super) fn rank_main(
    rank: usize,
    world: usize,
    args: &GpuBenchArgs,
    rv: Rendezvous,
) -> Result<RankOut> {
    let timeout = Duration::from_millis(args.timeout_ms);
    let (comms, info) = open_comms(rank, world, args, &rv, timeout)?;
    let mut bufs = Buffers::new(rank, world, args, &comms.stream)?;
    let ptr = |s: &CudaSlice<u8>| s.device_ptr(&comms.stream).0;
    let in_ptrs: Vec<u64> = bufs.ins.iter().map(ptr).collect();
    let out_ptrs: Vec<u64> = bufs.outs.iter().map(ptr).collect();
    let new_event = || {
        comms
            .ctx
            .new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(cuda("cuEventCreate"))
    };
    let (ev0, ev1) = (new_event()?, new_event()?);
    let sizes = sizes(args)?;
    let routes = if args.algos.iter().any(|a| a == "auto") {
        let sel = auto_selector(args)?;
        // The routes the library's Communicator resolves for this group.
        let group = select::Group {
            world,
            transport: select_transport(comms.comm.transport()),
            nccl: comms.nccl.is_some(),
            max_bytes: args.max,
        };
        let table = select::RouteTable::resolve(&sel, group)?;
        Some((sel, table))
    } else {
        None
    };
    let r = Rank {
        rank,
        world,
        args,
        rv: &rv,
        timeout,
        c: &comms,
        in_ptrs: &in_ptrs,
        out_ptrs: &out_ptrs,
        routes,
        ev0,
        ev1,
        root_at: std::cell::Cell::new(0),
    };
    let mut rows = Vec::new();
    let mut step = 0usize;
    for &bytes in &sizes {
        // `count`: one rank's block for the collectives (the size column
        // is world x block for all-gather and reduce-scatter, bench/coll.rs).
        let count = match args.coll {
            Coll::AllGather | Coll::ReduceScatter => bytes / args.dtype.size() / world,
            _ => bytes / args.dtype.size(),
        };
        if count == 0 {
            continue;
        }
        step += 1;
        r.measure_size(step, bytes, count, &mut bufs, &mut rows)?;
    }
    r.barrier("end")?;
    Ok(RankOut { info, rows })
}

/// One rank's measurement state, shared by every size.
struct Rank<'a> {
    rank: usize,
    world: usize,
    args: &'a GpuBenchArgs,
    rv: &'a Rendezvous,
    timeout: Duration,
    c: &'a Comms,
    /// Device addresses of the rotated input and output buffers.
    in_ptrs: &'a [u64],
    out_ptrs: &'a [u64],
    /// `--algos auto`'s selector and the routes resolved from it.
    routes: Option<(select::Selector, select::RouteTable)>,
    ev0: CudaEvent,
    ev1: CudaEvent,
    /// Where the broadcast's root is taken from at the size being measured.
    root_at: std::cell::Cell<usize>,
}

impl Rank<'_> {
    fn barrier(&self, key: &str) -> Result<()> {
        self.rv
            .exchange(key, self.rank, self.world, &[], self.timeout)
            .map(|_| ())
    }

    /// Call `k` of one algorithm: buffer pair `k % rotate`, `count` elements.
    fn call(&self, imp: &Impl, k: usize, count: usize) -> Result<()> {
        let rot = self.args.rotate;
        let (i, o) = (self.in_ptrs[k % rot], self.out_ptrs[k % rot]);
        let (dtype, stream) = (self.args.dtype, self.c.stream.cu_stream());
        let coll = self.args.coll;
        if coll != Coll::AllReduce {
            let call = Call::new(i, o, count, dtype, stream).with_root(self.root());
            // SAFETY: as for the all-reduce below; a collective's buffers (world x count for
            // the gathered output and the scattered input) fit `max`, which
            // the size column (world x count) is at most.
            return unsafe {
                match imp {
                    Impl::Nccl => self
                        .c
                        .nccl
                        .as_ref()
                        .map_or(Ok(()), |n| run_collective(n, coll, &call)),
                    _ => run_collective(&self.c.comm, coll, &call),
                }
            };
        }
        // SAFETY: i and o are `max`-byte buffers of this rank's device that
        // live until the end of rank_main, after every sync; count elements
        // fit in them.
        unsafe {
            match imp {
                Impl::Tp(a, how) => self.c.comm.all_reduce_call(
                    &Call::new(i, o, count, dtype, stream)
                        .with_algo(*a)
                        .with_launch(*how),
                ),
                Impl::Nccl => self.c.nccl.as_ref().map_or(Ok(()), |n| {
                    n.all_reduce(i, o, count, dtype, ReduceOp::Sum, stream)
                }),
                Impl::Quant(w) => self.c.quant.as_ref().map_or(Ok(()), |q| {
                    q.all_reduce_with(&Call::new(i, o, count, dtype, stream), *w, QuantAlgo::Auto)
                }),
                Impl::Auto | Impl::Coll => unreachable!("resolved before any call"),
            }
        }
    }

    /// The broadcast's root: it moves with the size (bytes' bit count mod
    /// world), the same on every rank.
    fn root(&self) -> usize {
        self.root_at.get() % self.world
    }

    /// One size: its entries prepared, timed rep by rep, then each checked
    /// and reported as a row.
    fn measure_size(
        &self,
        step: usize,
        bytes: usize,
        count: usize,
        bufs: &mut Buffers,
        rows: &mut Vec<Row>,
    ) -> Result<()> {
        let iters = self.args.iters_for(bytes);
        let mut entries = self.entries(bytes)?;
        self.barrier(&format!("b{step}"))?;
        self.prepare(&mut entries, iters, count)?;
        self.c
            .stream
            .synchronize()
            .map_err(cuda("cuStreamSynchronize"))?;
        self.c.comm.check()?;
        self.barrier(&format!("t{step}"))?;
        let times = self.time(&entries, iters, count)?;
        self.c.comm.check()?;
        for (e, t) in entries.iter().zip(times) {
            let checked = self.check(e, bytes, count, iters, bufs)?;
            rows.push(self.row(e, bytes, count, median(t), checked));
        }
        Ok(())
    }

    /// Every (algorithm, mode) of this size, resolved to what it runs.
    fn entries(&self, bytes: usize) -> Result<Vec<Entry>> {
        let mut entries: Vec<Entry> = Vec::new();
        self.root_at.set(bytes.trailing_zeros() as usize);
        if self.args.coll != Coll::AllReduce {
            // One tpcomm row (whichever tpcomm algorithms were named) and NCCL's.
            let mut imps = Vec::new();
            if self.args.algos.iter().any(|a| a != "nccl") {
                imps.push(("tpcomm", Impl::Coll));
            }
            if self.args.algos.iter().any(|a| a == "nccl") && self.c.nccl.is_some() {
                imps.push(("nccl", Impl::Nccl));
            }
            for (name, imp) in imps {
                for mode in &self.args.modes {
                    entries.push(Entry {
                        name: name.to_string(),
                        mode: mode.clone(),
                        imp: match imp {
                            Impl::Nccl => Impl::Nccl,
                            _ => Impl::Coll,
                        },
                        graph: None,
                    });
                }
            }
            return Ok(entries);
        }
        for algo_name in &self.args.algos {
            let imp = if let Some(w) = Wire::parse_quantized(algo_name) {
                Impl::Quant(w?)
            } else if algo_name == "nccl" {
                match &self.c.nccl {
                    Some(_) => Impl::Nccl,
                    None => continue,
                }
            } else if algo_name == "auto" {
                Impl::Auto
            } else {
                let (algo, how) = super::parse_algo(algo_name)?;
                Impl::Tp(algo, how)
            };
            for mode in &self.args.modes {
                entries.push(self.entry(algo_name, &imp, mode, bytes));
            }
        }
        Ok(entries)
    }

    /// One algorithm in one mode. `auto` runs exactly the route the
    /// library's Communicator takes for this size and mode (its
    /// `RouteTable`, NCCL only when it was loaded): what `tpcomm explain`
    /// prints.
    fn entry(&self, algo_name: &str, imp: &Impl, mode: &str, bytes: usize) -> Entry {
        let comm = &self.c.comm;
        let decision = self.routes.as_ref().map(|(_, t)| {
            let r = t.lookup(
                bytes as u64,
                self.args.dtype,
                tpcomm::ReduceOp::Sum,
                Algo::Auto,
                mode.parse().unwrap_or(select::Mode::Eager),
                tpcomm::quant::Wire::Exact,
            );
            (r, r.candidate())
        });
        let imp = match (imp, &decision) {
            (Impl::Auto, Some((r, _))) if r.is_nccl() => Impl::Nccl,
            (Impl::Auto, Some((r, _))) => {
                Impl::Tp(r.algo().unwrap_or(Algo::Auto), Launch::Ordinary)
            }
            (Impl::Tp(a, how), _) => Impl::Tp(*a, *how),
            (Impl::Nccl, _) => Impl::Nccl,
            (Impl::Quant(w), _) => Impl::Quant(*w),
            (Impl::Auto, None) => Impl::Tp(Algo::Auto, Launch::Ordinary),
            (Impl::Coll, _) => Impl::Coll,
        };
        let name = match (&decision, &imp) {
            (_, Impl::Quant(w)) => w.label(),
            (Some((_, c)), _) if algo_name == "auto" => format!("auto:{c}"),
            (_, Impl::Tp(a, Launch::Ordinary)) => comm.algo_name(*a, bytes).to_string(),
            (_, Impl::Tp(a, Launch::Overlapped)) => {
                format!("{}-pdl", comm.algo_name(*a, bytes))
            }
            _ => "nccl".to_string(),
        };
        Entry {
            name,
            mode: mode.to_string(),
            imp,
            graph: None,
        }
    }

    /// Captures each graph mode's calls once (and runs it once); warms the
    /// eager ones.
    fn prepare(&self, entries: &mut [Entry], iters: usize, count: usize) -> Result<()> {
        let stream = &self.c.stream;
        for e in entries.iter_mut() {
            if e.mode == "graph" {
                let g = capture_graph(stream, || {
                    (0..iters).try_for_each(|k| self.call(&e.imp, k, count))
                })?;
                g.launch().map_err(cuda("cuGraphLaunch"))?;
                e.graph = Some(g);
            } else {
                for k in 0..2 * self.args.rotate {
                    self.call(&e.imp, k, count)?;
                }
            }
        }
        Ok(())
    }

    /// One entry's calls: its graph, or `calls` eager calls.
    fn run_entry(&self, e: &Entry, calls: usize, count: usize) -> Result<()> {
        match &e.graph {
            Some(g) => g.launch().map_err(cuda("cuGraphLaunch")),
            None => (0..calls).try_for_each(|k| self.call(&e.imp, k, count)),
        }
    }

    /// Microseconds per call, one per rep for each entry. The entries take
    /// turns rep by rep, so a slow spell of the machine (clocks, a noisy
    /// neighbour) falls on all of them alike and their ratios stay fair.
    fn time(&self, entries: &[Entry], iters: usize, count: usize) -> Result<Vec<Vec<f64>>> {
        let (ev0, ev1) = (&self.ev0, &self.ev1);
        let mut times = vec![Vec::with_capacity(self.args.reps); entries.len()];
        for _ in 0..self.args.reps {
            for (e, t) in entries.iter().zip(times.iter_mut()) {
                let run = || self.run_entry(e, iters, count);
                t.push(time_us((ev0, ev1), &self.c.stream, iters, run)?);
            }
        }
        Ok(times)
    }

    /// Poisons every output, runs the entry once more and compares each
    /// output it wrote with the float64 reference (quantized wires: the first
    /// against the CPU model, which is slow).
    fn check(
        &self,
        e: &Entry,
        bytes: usize,
        count: usize,
        iters: usize,
        bufs: &mut Buffers,
    ) -> Result<Checked> {
        let (stream, rot, dtype) = (&self.c.stream, self.args.rotate, self.args.dtype);
        // Bytes of one output: a collective's gathered output or one block.
        let coll = self.args.coll;
        let block = count * dtype.size();
        let bytes = match coll {
            Coll::AllReduce => bytes,
            Coll::AllGather => self.world * block,
            _ => block,
        };
        for o in bufs.outs.iter_mut() {
            stream
                .memcpy_htod(&bufs.poison[..bytes], &mut o.slice_mut(..bytes))
                .map_err(cuda("cuMemcpyHtoD"))?;
        }
        self.run_entry(e, rot.max(iters), count)?;
        stream.synchronize().map_err(cuda("cuStreamSynchronize"))?;
        self.c.comm.check()?;
        let mut c = Checked::default();
        let mut host = vec![0u8; bytes];
        let written = if e.graph.is_some() {
            rot.min(iters)
        } else {
            rot
        };
        for (k, o) in bufs.outs.iter().enumerate().take(written) {
            stream
                .memcpy_dtoh(&o.slice(..bytes), &mut host[..])
                .map_err(cuda("cuMemcpyDtoH"))?;
            stream.synchronize().map_err(cuda("cuStreamSynchronize"))?;
            if coll != Coll::AllReduce {
                c.wrong += self.check_collective(&host, &bufs.inputs[k], count, bufs.workers);
                continue;
            }
            let ins_k: Vec<&[u8]> = bufs.inputs[k].iter().map(|v| &v[..bytes]).collect();
            if let Impl::Quant(w) = &e.imp {
                if k == 0 {
                    let q = super::quant::check(dtype, *w, &host, &ins_k);
                    c.wrong += q.wrong;
                    c.rel_rms = Some(q.rel_rms);
                    c.max_rel = Some(q.max_rel);
                }
                continue;
            }
            c.wrong += count_wrong_par(dtype, &host, &ins_k, self.world, bufs.workers);
        }
        Ok(c)
    }

    /// The report row of one entry: its median time and what checking found.
    fn row(&self, e: &Entry, bytes: usize, count: usize, t: f64, c: Checked) -> Row {
        let world = self.world;
        let coll = self.args.coll;
        // nccl-tests' size column: the whole array (bench/coll.rs).
        let (bytes, count) = match coll {
            Coll::AllReduce => (bytes, count),
            _ => {
                let n = coll.total_count(count as u64, world) as usize;
                (n * self.args.dtype.size(), n)
            }
        };
        let algbw = bytes as f64 / (t * 1e-6) / 1e9;
        Row {
            bytes: bytes as u64,
            count,
            dtype: self.args.dtype.name().to_string(),
            algo: e.name.clone(),
            mode: e.mode.clone(),
            time_us: t,
            algbw_gbps: algbw,
            busbw_gbps: algbw * coll.busbw_factor(world),
            wrong: c.wrong,
            rel_rms: c.rel_rms,
            max_rel: c.max_rel,
        }
    }
}

impl Rank<'_> {
    /// Wrong elements of one collective output of this rank: gathered and
    /// broadcast bytes against the inputs exactly (every element; the inputs
    /// hold no all-ones element, which the P2P kernels would send as another
    /// NaN), reduce-scatter sums against the float64 reference of this
    /// rank's block.
    fn check_collective(
        &self,
        out: &[u8],
        inputs: &[Vec<u8>],
        count: usize,
        workers: usize,
    ) -> usize {
        let (world, dtype) = (self.world, self.args.dtype);
        let block = count * dtype.size();
        let differ = |a: &[u8], b: &[u8]| {
            a.chunks(dtype.size())
                .zip(b.chunks(dtype.size()))
                .filter(|(x, y)| x != y)
                .count()
        };
        match self.args.coll {
            Coll::AllGather => (0..world)
                .map(|r| differ(&out[r * block..(r + 1) * block], &inputs[r][..block]))
                .sum(),
            Coll::Broadcast => differ(&out[..block], &inputs[self.root()][..block]),
            _ => {
                let me = self.rank;
                let ins: Vec<&[u8]> = inputs
                    .iter()
                    .map(|v| &v[me * block..(me + 1) * block])
                    .collect();
                count_wrong_par(dtype, &out[..block], &ins, world, workers)
            }
        }
    }
}

/// The collective `coll` (not the all-reduce) of `call` on a transport:
/// tpcomm's kernels (either transport) or NCCL.
///
/// # Safety
/// As `GpuTransport`'s methods.
unsafe fn run_collective(t: &impl GpuTransport, coll: Coll, call: &Call) -> Result<()> {
    // SAFETY: the caller's contract.
    unsafe {
        match coll {
            Coll::AllGather => t.all_gather(call),
            Coll::ReduceScatter => t.reduce_scatter(call),
            _ => t.broadcast(call),
        }
    }
}

/// What checking one entry's outputs found.
#[derive(Default)]
struct Checked {
    wrong: usize,
    rel_rms: Option<f64>,
    max_rel: Option<f64>,
}
