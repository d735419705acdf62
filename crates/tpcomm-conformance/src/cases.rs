//! The patterns: what each rank (or the one thread driving every rank) does, and the checks.

use crate::reference::{check_exact, check_reduction, Dt, Inputs, Op};
use crate::sys::{self, Bufs, Comm, Config, DevBuf, Gpu, Nccl, Stream, UniqueId};
use std::time::{Duration, Instant};

/// What a case came to on one rank (or for the whole case): Ok(detail) passes, `Err` fails;
/// an Ok detail starting with `SKIP:` is a skip.
pub type Verdict = Result<String, String>;

/// How a pattern runs.
#[derive(Clone, Copy)]
pub enum Body {
    /// Every rank runs this, as a thread or as a process.
    PerRank(fn(&Rank) -> Verdict),
    /// One thread drives every rank of the world (threads mode only).
    OneThread(fn(&Nccl, usize, u64, i32, Duration) -> Verdict),
    /// Supervision self-tests (hidden; no GPU, no drop-in).
    SelfTest(&'static str),
}

pub struct Pattern {
    pub name: String,
    pub body: Body,
    pub hidden: bool,
}

/// One rank's surroundings.
pub struct Rank {
    pub nccl: Nccl,
    pub rank: usize,
    pub world: usize,
    pub seed: u64,
    pub id: UniqueId,
    /// A second id, for the cases that need a communicator besides the main one.
    pub id2: UniqueId,
    pub gpu: Gpu,
    /// Bound on every wait of the rank (the drop-in's timeout plus a margin).
    pub limit: Duration,
    /// Elements-per-rank bytes of the "past the creation-time buffer" count.
    pub big_bytes: usize,
    /// Whether this rank is a process of its own (`procs` mode) rather than a thread.
    pub own_process: bool,
}

pub fn patterns() -> Vec<Pattern> {
    let mut v = Vec::new();
    let mut per = |name: &str, f: fn(&Rank) -> Verdict| {
        v.push(Pattern {
            name: name.into(),
            body: Body::PerRank(f),
            hidden: false,
        })
    };
    per("create.initrank", create_initrank);
    per("create.initrankconfig", create_initrank_config);
    per("create.scalable", create_scalable);
    per("create.nonblocking", create_nonblocking);
    per("create.split", create_split);
    per("create.shrink", create_shrink);
    per("create.teardown-orders", create_teardown);
    let mut v2: Vec<Pattern> = v;
    let one = |name: &str, f: fn(&Nccl, usize, u64, i32, Duration) -> Verdict| Pattern {
        name: name.into(),
        body: Body::OneThread(f),
        hidden: false,
    };
    v2.push(one("create.group-initrank", |n, w, s, d, l| {
        one_thread(n, w, s, d, l, Creation::GroupInitRank)
    }));
    v2.push(one("create.group-initrankconfig", |n, w, s, d, l| {
        one_thread(n, w, s, d, l, Creation::GroupInitRankConfig)
    }));
    v2.push(one("create.nonblocking-in-turn", |n, w, s, d, l| {
        one_thread(n, w, s, d, l, Creation::NonBlockingInTurn)
    }));
    v2.push(one("create.initall", |n, w, s, d, l| {
        one_thread(n, w, s, d, l, Creation::InitAll)
    }));
    v2.push(one("calls.one-thread-group", |n, w, s, d, l| {
        one_thread(n, w, s, d, l, Creation::GroupCalls)
    }));
    v2.push(one("calls.one-thread-graph", |n, w, s, d, l| {
        one_thread(n, w, s, d, l, Creation::GroupGraphs)
    }));
    macro_rules! by_type {
        ($prefix:literal, $coll:expr) => {
            for t in 0..12 {
                let f: fn(&Rank) -> Verdict = match t {
                    0 => |r| reductions(r, $coll, Dt(0)),
                    1 => |r| reductions(r, $coll, Dt(1)),
                    2 => |r| reductions(r, $coll, Dt(2)),
                    3 => |r| reductions(r, $coll, Dt(3)),
                    4 => |r| reductions(r, $coll, Dt(4)),
                    5 => |r| reductions(r, $coll, Dt(5)),
                    6 => |r| reductions(r, $coll, Dt(6)),
                    7 => |r| reductions(r, $coll, Dt(7)),
                    8 => |r| reductions(r, $coll, Dt(8)),
                    9 => |r| reductions(r, $coll, Dt(9)),
                    10 => |r| reductions(r, $coll, Dt(10)),
                    _ => |r| reductions(r, $coll, Dt(11)),
                };
                v2.push(Pattern {
                    name: format!("{}.{}", $prefix, Dt(t).name()),
                    body: Body::PerRank(f),
                    hidden: false,
                });
            }
        };
    }
    by_type!("allreduce", Red::AllReduce);
    by_type!("reduce", Red::Reduce);
    by_type!("reducescatter", Red::ReduceScatter);
    let mut per = |name: &str, f: fn(&Rank) -> Verdict| {
        v2.push(Pattern {
            name: name.into(),
            body: Body::PerRank(f),
            hidden: false,
        })
    };
    per("allgather", allgather);
    per("broadcast", broadcast);
    per("graph.first-calls", first_calls_captured);
    per("sendrecv.self", |r| sendrecv(r, P2p::SelfSend));
    per("sendrecv.ring", |r| sendrecv(r, P2p::Ring));
    per("sendrecv.uneven", |r| sendrecv(r, P2p::Uneven));
    per("sendrecv.alltoall", |r| sendrecv(r, P2p::AllToAll));
    per("sendrecv.pairs", |r| sendrecv_apart(r, Apart::Pairs));
    per("sendrecv.chain", |r| sendrecv_apart(r, Apart::Chain));
    per("alltoall", alltoall);
    per("gather", |r| rooted(r, true));
    per("scatter", |r| rooted(r, false));
    per("memory", memory);
    per("queries", queries);
    per("bad.null-pointers", bad_null);
    per("bad.destroyed-handle", |r| bad_handle(r, true));
    per("bad.bogus-handle", |r| bad_handle(r, false));
    per("bad.count", bad_count);
    per("bad.type-op", bad_type_op);
    per("bad.root-peer", bad_root_peer);
    per("bad.mismatch-count", |r| mismatch(r, Mismatch::Count));
    per("bad.mismatch-type", |r| mismatch(r, Mismatch::Type));
    per("bad.mismatch-op", |r| mismatch(r, Mismatch::Op));
    per("bad.mismatch-collective", |r| {
        mismatch(r, Mismatch::Collective)
    });
    per("syncwork.sweep", syncwork);
    per("fault.rank-leaves", rank_leaves);
    for t in ["hang", "crash", "fail", "pass"] {
        v2.push(Pattern {
            name: format!("selftest.{t}"),
            body: Body::SelfTest(t),
            hidden: true,
        });
    }
    v2
}

// ---------------------------------------------------------------------------------------
// helpers

fn code_name(r: i32) -> &'static str {
    match r {
        0 => "ncclSuccess",
        1 => "ncclUnhandledCudaError",
        2 => "ncclSystemError",
        3 => "ncclInternalError",
        4 => "ncclInvalidArgument",
        5 => "ncclInvalidUsage",
        6 => "ncclRemoteError",
        7 => "ncclInProgress",
        _ => "unknown",
    }
}

fn missing(name: &str) -> String {
    format!("missing-symbol {name}")
}

/// A call that must succeed.
/// Runs `call` on `s` once, after `prep` has set its buffers: eagerly, or
/// (`graph`) captured into a CUDA graph, then, `prep` run again (the capture
/// must not have run it), replayed. The graph it returns must live until the
/// stream is synchronised.
fn eager_or_replayed(
    n: &Nccl,
    s: &Stream,
    graph: bool,
    what: &str,
    prep: &dyn Fn() -> Result<(), String>,
    call: &dyn Fn() -> sys::Call,
) -> Result<Option<sys::Graph>, String> {
    prep()?;
    if !graph {
        ok(n, call(), what)?;
        return Ok(None);
    }
    s.begin_capture()?;
    let c = call();
    let g = s.end_capture();
    ok(n, c, &format!("{what} (captured)"))?;
    let g = g?;
    prep()?;
    g.launch(s)?;
    Ok(Some(g))
}

/// The `len` bytes at `ptr` once the stream has run what `g` (or the eager
/// call before it) queued; `g` is dropped after the wait.
fn read_back(
    r: &Rank,
    s: &Stream,
    g: Option<sys::Graph>,
    len: usize,
    ptr: u64,
    what: &str,
) -> Result<Vec<u8>, String> {
    let mut out = vec![0u8; len];
    s.download(&mut out, ptr)?;
    s.sync(r.limit).map_err(|e| format!("{what}: {e}"))?;
    drop(g);
    Ok(out)
}

/// `out` must be `want` to the bit; the error counts what is not.
fn exactly(dt: Dt, want: &[u8], out: &[u8], what: &str, graph: bool) -> Result<(), String> {
    let (wrong, first) = check_exact(dt, want, out);
    if wrong == 0 {
        return Ok(());
    }
    Err(format!(
        "{what}{}: {wrong} wrong; {}",
        if graph { " (graph)" } else { "" },
        first.unwrap_or_default()
    ))
}

fn ok(n: &Nccl, c: sys::Call, what: &str) -> Result<(), String> {
    match c {
        Err(name) => Err(missing(name)),
        Ok(0) => Ok(()),
        Ok(r) => Err(format!(
            "{what}: expected 0 (ncclSuccess), got {r} ({}); last error: {}",
            code_name(r),
            last(n)
        )),
    }
}

fn last(n: &Nccl) -> String {
    n.last_error(0)
        .ok()
        .flatten()
        .unwrap_or_else(|| "(none)".into())
}

/// A call that must return `want`; Ok(line) describing it.
fn expect(n: &Nccl, c: sys::Call, want: i32, what: &str) -> Result<String, String> {
    match c {
        Err(name) => Err(missing(name)),
        Ok(r) if r == want => {
            let text = last(n);
            Ok(format!("{what}: {r} ok ({text:.60})"))
        }
        Ok(r) => Err(format!(
            "{what}: expected {want} ({}), got {r} ({})",
            code_name(want),
            code_name(r)
        )),
    }
}

fn progress(r: &Rank, what: &str) {
    eprintln!("PROGRESS rank {}/{}: {what}", r.rank, r.world);
}

fn create(r: &Rank) -> Result<Comm, String> {
    create_with(r, &r.id)
}

fn create_with(r: &Rank, id: &UniqueId) -> Result<Comm, String> {
    let (code, comm) = r
        .nccl
        .init_rank(r.world as i32, id, r.rank as i32, false)
        .map_err(missing)?;
    ok(&r.nccl, Ok(code), "ncclCommInitRank")?;
    Ok(comm)
}

fn destroy(r: &Rank, comm: Comm) -> Result<(), String> {
    ok(&r.nccl, r.nccl.destroy(comm), "ncclCommDestroy")
}

/// Checks a communicator's queries against (world, rank, device).
fn check_queries(n: &Nccl, comm: Comm, world: usize, rank: usize, dev: i32) -> Result<(), String> {
    let (c, v) = n.comm_count(comm, false).map_err(missing)?;
    ok(n, Ok(c), "ncclCommCount")?;
    let (c2, rk) = n.comm_user_rank(comm).map_err(missing)?;
    ok(n, Ok(c2), "ncclCommUserRank")?;
    let (c3, d) = n.comm_cu_device(comm).map_err(missing)?;
    ok(n, Ok(c3), "ncclCommCuDevice")?;
    if v != world as i32 || rk != rank as i32 || d != dev {
        return Err(format!(
            "queries: expected count {world} rank {rank} device {dev}, got {v} {rk} {d}"
        ));
    }
    Ok(())
}

/// One f32 sum all-reduce of `count` elements on `comm` (rank `rank` of `world`), checked.
fn allreduce_check(
    n: &Nccl,
    comm: Comm,
    rank: usize,
    world: usize,
    seed: u64,
    limit: Duration,
    count: usize,
) -> Result<(), String> {
    let dt = Dt(7);
    let inp = Inputs::new(dt, seed, 0xa11 + count as u64);
    let s = Stream::new(false)?;
    let send = DevBuf::new(count * 4)?;
    let recv = DevBuf::new(count * 4)?;
    let host = inp.bytes(rank, 0, count);
    s.upload(send.ptr, &host)?;
    match n.all_reduce(Bufs::new(send.ptr, recv.ptr, count, 7), 0, comm, s.raw) {
        // A non-blocking communicator may answer ncclInProgress: wait for it to settle.
        Ok(7) => wait_ready(n, comm, limit)?,
        c => ok(n, c, "ncclAllReduce")?,
    }
    let mut out = vec![0u8; count * 4];
    s.download(&mut out, recv.ptr)?;
    s.sync(limit)?;
    let (wrong, first) = check_reduction(&inp, &Op::Builtin(0), world, 0, &out);
    if wrong > 0 {
        return Err(format!(
            "all-reduce after creation: {wrong} of {count} wrong; {}",
            first.unwrap_or_default()
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// creation

fn create_initrank(r: &Rank) -> Verdict {
    let comm = create(r)?;
    check_queries(&r.nccl, comm, r.world, r.rank, r.gpu.ordinal)?;
    allreduce_check(&r.nccl, comm, r.rank, r.world, r.seed, r.limit, 1025)?;
    destroy(r, comm)?;
    Ok("created, queried, all-reduce checked".into())
}

fn create_initrank_config(r: &Rank) -> Verdict {
    let mut cfg = Config::initializer();
    cfg.blocking = 1;
    let (code, comm) = r
        .nccl
        .init_rank_config(r.world as i32, &r.id, r.rank as i32, &mut cfg)
        .map_err(missing)?;
    ok(&r.nccl, Ok(code), "ncclCommInitRankConfig")?;
    check_queries(&r.nccl, comm, r.world, r.rank, r.gpu.ordinal)?;
    allreduce_check(&r.nccl, comm, r.rank, r.world, r.seed, r.limit, 1025)?;
    destroy(r, comm)?;
    Ok("blocking config: created and checked".into())
}

fn create_scalable(r: &Rank) -> Verdict {
    let mut ids = [r.id];
    let (code, comm) = r
        .nccl
        .init_scalable(r.world as i32, r.rank as i32, &mut ids)
        .map_err(missing)?;
    ok(&r.nccl, Ok(code), "ncclCommInitRankScalable")?;
    check_queries(&r.nccl, comm, r.world, r.rank, r.gpu.ordinal)?;
    allreduce_check(&r.nccl, comm, r.rank, r.world, r.seed, r.limit, 1025)?;
    destroy(r, comm)?;
    Ok("one id: created and checked".into())
}

/// Polls ncclCommGetAsyncError until it leaves ncclInProgress, at most `limit`.
fn wait_ready(n: &Nccl, comm: Comm, limit: Duration) -> Result<(), String> {
    let end = Instant::now() + limit;
    loop {
        let (c, e) = n.async_error(comm).map_err(missing)?;
        ok(n, Ok(c), "ncclCommGetAsyncError")?;
        match e {
            0 => return Ok(()),
            7 if Instant::now() < end => std::thread::sleep(Duration::from_millis(1)),
            7 => {
                return Err(format!(
                    "non-blocking communicator still ncclInProgress after {limit:?}"
                ))
            }
            e => {
                return Err(format!(
                    "ncclCommGetAsyncError reported {e} ({})",
                    code_name(e)
                ))
            }
        }
    }
}

fn create_nonblocking(r: &Rank) -> Verdict {
    let mut cfg = Config::initializer();
    cfg.blocking = 0;
    let (code, comm) = r
        .nccl
        .init_rank_config(r.world as i32, &r.id, r.rank as i32, &mut cfg)
        .map_err(missing)?;
    if code != 0 && code != 7 {
        return Err(format!("non-blocking ncclCommInitRankConfig: expected 7 (ncclInProgress) or 0, got {code} ({}): {}", code_name(code), last(&r.nccl)));
    }
    wait_ready(&r.nccl, comm, r.limit)?;
    check_queries(&r.nccl, comm, r.world, r.rank, r.gpu.ordinal)?;
    allreduce_check(&r.nccl, comm, r.rank, r.world, r.seed, r.limit, 1025)?;
    wait_ready(&r.nccl, comm, r.limit)?;
    destroy(r, comm)?;
    Ok(format!(
        "creation returned {code} ({}), then ready",
        code_name(code)
    ))
}

fn create_split(r: &Rank) -> Verdict {
    let parent = create(r)?;
    let nocolor = r.world > 2 && r.rank == r.world - 1;
    let color = if nocolor { -1 } else { (r.rank % 2) as i32 };
    let key = (r.world - r.rank) as i32;
    let (code, child) = r.nccl.split(parent, color, key).map_err(missing)?;
    ok(&r.nccl, Ok(code), "ncclCommSplit")?;
    let detail = if nocolor {
        if child != 0 {
            return Err(
                "ncclCommSplit with NCCL_SPLIT_NOCOLOR: expected a NULL communicator".into(),
            );
        }
        "NOCOLOR gave NULL".to_string()
    } else {
        // Members of my colour, ordered by key (descending parent rank).
        let mut members: Vec<usize> = (0..r.world)
            .filter(|&q| !(r.world > 2 && q == r.world - 1) && q % 2 == r.rank % 2)
            .collect();
        members.sort_by_key(|&q| r.world - q);
        let me = members
            .iter()
            .position(|&q| q == r.rank)
            .unwrap_or(usize::MAX);
        check_queries(&r.nccl, child, members.len(), me, r.gpu.ordinal)?;
        allreduce_check(
            &r.nccl,
            child,
            me,
            members.len(),
            r.seed ^ color as u64,
            r.limit,
            513,
        )?;
        destroy(r, child)?;
        format!("colour {color}: rank {me} of {}", members.len())
    };
    allreduce_check(&r.nccl, parent, r.rank, r.world, r.seed, r.limit, 255)?;
    destroy(r, parent)?;
    Ok(detail)
}

fn create_shrink(r: &Rank) -> Verdict {
    let parent = create(r)?;
    let excluded = r.world >= 2 && r.rank == r.world - 1;
    let mut ex: Vec<i32> = if r.world >= 2 {
        vec![(r.world - 1) as i32]
    } else {
        vec![]
    };
    let detail = if excluded {
        "excluded rank: no call".to_string()
    } else {
        let (code, child) = r.nccl.shrink(parent, &mut ex).map_err(missing)?;
        ok(&r.nccl, Ok(code), "ncclCommShrink")?;
        let w = r.world - ex.len();
        check_queries(&r.nccl, child, w, r.rank, r.gpu.ordinal)?;
        allreduce_check(&r.nccl, child, r.rank, w, r.seed, r.limit, 513)?;
        destroy(r, child)?;
        format!("shrunk to {w}")
    };
    destroy(r, parent)?;
    Ok(detail)
}

fn create_teardown(r: &Rank) -> Verdict {
    let comm = create(r)?;
    allreduce_check(&r.nccl, comm, r.rank, r.world, r.seed, r.limit, 1025)?;
    // Ranks leave in reverse order, each its own way.
    std::thread::sleep(Duration::from_millis(40 * (r.world - r.rank) as u64));
    let how = match r.rank % 3 {
        0 => {
            ok(&r.nccl, r.nccl.finalize(comm), "ncclCommFinalize")?;
            destroy(r, comm)?;
            "finalize+destroy"
        }
        1 => {
            destroy(r, comm)?;
            "destroy"
        }
        _ => {
            ok(&r.nccl, r.nccl.abort(comm), "ncclCommAbort")?;
            "abort"
        }
    };
    Ok(how.into())
}

#[derive(Clone, Copy, PartialEq)]
enum Creation {
    GroupInitRank,
    GroupInitRankConfig,
    InitAll,
    GroupCalls,
    /// As nccl-tests' `-g N -G K`: every rank's calls of a group captured
    /// into one graph per rank, then the graphs launched in turn.
    GroupGraphs,
    /// Outside any group, `blocking = 0`: each creation returns before its
    /// peers exist, then every rank is polled until ready.
    NonBlockingInTurn,
}

/// One thread creating (and calling for) every rank.
fn one_thread(
    n: &Nccl,
    world: usize,
    seed: u64,
    ndev: i32,
    limit: Duration,
    how: Creation,
) -> Verdict {
    let gpus: Vec<Gpu> = (0..world)
        .map(|r| Gpu::open(r as i32 % ndev))
        .collect::<Result<_, _>>()?;
    let comms: Vec<Comm> = if how == Creation::InitAll {
        let devs: Vec<i32> = gpus.iter().map(|g| g.ordinal).collect();
        let (code, comms) = n.init_all(&devs).map_err(missing)?;
        ok(n, Ok(code), "ncclCommInitAll")?;
        comms
    } else {
        let (code, id) = n.unique_id().map_err(missing)?;
        ok(n, Ok(code), "ncclGetUniqueId")?;
        let grouped = how != Creation::NonBlockingInTurn;
        if grouped {
            ok(n, n.group_start(), "ncclGroupStart")?;
        }
        let mut comms = Vec::new();
        for (rk, g) in gpus.iter().enumerate() {
            g.make_current()?;
            let (code, c) = match how {
                Creation::GroupInitRankConfig => {
                    let mut cfg = Config::initializer();
                    n.init_rank_config(world as i32, &id, rk as i32, &mut cfg)
                        .map_err(missing)?
                }
                Creation::NonBlockingInTurn => {
                    let mut cfg = Config::initializer();
                    cfg.blocking = 0;
                    n.init_rank_config(world as i32, &id, rk as i32, &mut cfg)
                        .map_err(missing)?
                }
                _ => n
                    .init_rank(world as i32, &id, rk as i32, false)
                    .map_err(missing)?,
            };
            let fine = code == 0 || (code == 7 && !grouped);
            if !fine {
                if grouped {
                    let _ = n.group_end();
                }
                return Err(format!(
                    "creation of rank {rk} ({}): got {code} ({}): {}",
                    if grouped {
                        "inside the group"
                    } else {
                        "non-blocking, in turn"
                    },
                    code_name(code),
                    last(n)
                ));
            }
            comms.push(c);
        }
        if grouped {
            ok(n, n.group_end(), "ncclGroupEnd (creation)")?;
        } else {
            for c in &comms {
                wait_ready(n, *c, limit)?;
            }
        }
        comms
    };
    for (rk, c) in comms.iter().enumerate() {
        check_queries(n, *c, world, rk, gpus[rk].ordinal)?;
    }
    // Calls: one thread issues one all-reduce per rank inside one group (a call per rank
    // outside a group would wait for ranks this thread has not reached).
    let dt = Dt(7);
    let mut detail = String::from("created");
    for (salt, count) in [(1u64, 1usize), (2, 1025), (3, 262_147)] {
        let inp = Inputs::new(dt, seed, salt);
        let mut bufs = Vec::new();
        for (rk, g) in gpus.iter().enumerate() {
            g.make_current()?;
            let s = Stream::new(false)?;
            let send = DevBuf::new(count * 4)?;
            let recv = DevBuf::new(count * 4)?;
            let host = inp.bytes(rk, 0, count);
            s.upload(send.ptr, &host)?;
            s.sync(limit)?;
            bufs.push((s, send, recv));
        }
        ok(n, n.group_start(), "ncclGroupStart")?;
        for (rk, (s, send, recv)) in bufs.iter().enumerate() {
            gpus[rk].make_current()?;
            let c = n.all_reduce(Bufs::new(send.ptr, recv.ptr, count, 7), 0, comms[rk], s.raw);
            if c != Ok(0) {
                let _ = n.group_end();
                return Err(format!(
                    "ncclAllReduce for rank {rk} inside the group: {c:?}: {}",
                    last(n)
                ));
            }
        }
        ok(n, n.group_end(), "ncclGroupEnd (calls)")?;
        for (rk, (s, _, recv)) in bufs.iter().enumerate() {
            gpus[rk].make_current()?;
            let mut out = vec![0u8; count * 4];
            s.download(&mut out, recv.ptr)?;
            s.sync(limit)?;
            let (wrong, first) = check_reduction(&inp, &Op::Builtin(0), world, 0, &out);
            if wrong > 0 {
                return Err(format!(
                    "grouped all-reduce count {count} rank {rk}: {wrong} wrong; {}",
                    first.unwrap_or_default()
                ));
            }
        }
        detail = format!(
            "created; grouped all-reduces of 1, 1025, 262147 fp32 checked on {world} ranks"
        );
    }
    if how == Creation::GroupGraphs {
        for global in [true, false] {
            detail = one_thread_graphs(n, &gpus, &comms, seed, limit, global)?;
        }
        detail = format!("{detail}, in global and thread-local capture");
    }
    for c in comms {
        ok(n, n.destroy(c), "ncclCommDestroy")?;
    }
    Ok(detail)
}

/// nccl-tests' `-g N -G K` on one thread: every rank's stream captured at
/// once (global or thread-local mode), one group holding each rank's
/// pre-multiplied all-reduce (its op created before the call and destroyed
/// right after, inside the capture), in-place all-gather and reduce-scatter;
/// then each rank's graph launched in turn, twice on fresh inputs, each stream
/// polled with `ncclCommGetAsyncError` as nccl-tests waits, and every output
/// element checked.
fn one_thread_graphs(
    n: &Nccl,
    gpus: &[Gpu],
    comms: &[Comm],
    seed: u64,
    limit: Duration,
    global: bool,
) -> Verdict {
    let w = gpus.len();
    let (f32t, bf16) = (Dt(7), Dt(9));
    let (c_ar, c_ag, c_rs) = (4099usize, 1031usize, 515usize);
    let scalars: Vec<f64> = (0..w).map(|q| scalar(f32t, q)).collect();
    struct R {
        s: Stream,
        ar_s: DevBuf,
        ar_r: DevBuf,
        ag: DevBuf,
        rs_s: DevBuf,
        rs_r: DevBuf,
    }
    let mut rk = Vec::new();
    for g in gpus {
        g.make_current()?;
        rk.push(R {
            s: Stream::new(false)?,
            ar_s: DevBuf::new(c_ar * 4)?,
            ar_r: DevBuf::new(c_ar * 4)?,
            ag: DevBuf::new(c_ag * w * 2)?,
            rs_s: DevBuf::new(c_rs * w * 4)?,
            rs_r: DevBuf::new(c_rs * 4)?,
        });
    }
    let mode = if global { "global" } else { "thread-local" };
    for (q, r) in rk.iter().enumerate() {
        gpus[q].make_current()?;
        r.s.begin_capture_in(global)?;
    }
    ok(n, n.group_start(), "ncclGroupStart (captured)")?;
    let mut failed = None;
    for (q, r) in rk.iter().enumerate() {
        gpus[q].make_current()?;
        let mut b = [0u8; 8];
        b[..4].copy_from_slice(&f32t.encode(scalars[q]).to_le_bytes()[..4]);
        let calls = (|| -> Result<(), String> {
            let (code, op) = n.premulsum(&mut b, 7, comms[q]).map_err(missing)?;
            ok(n, Ok(code), "ncclRedOpCreatePreMulSum (captured)")?;
            let ar = n.all_reduce(
                Bufs::new(r.ar_s.ptr, r.ar_r.ptr, c_ar, 7),
                op,
                comms[q],
                r.s.raw,
            );
            ok(n, ar, "ncclAllReduce (pre-multiplied, captured)")?;
            ok(
                n,
                n.redop_destroy(op, comms[q]),
                "ncclRedOpDestroy (right after the call)",
            )?;
            let mine = r.ag.ptr + (q * c_ag * 2) as u64;
            let ag = n.all_gather(Bufs::new(mine, r.ag.ptr, c_ag, 9), comms[q], r.s.raw);
            ok(n, ag, "ncclAllGather (in place, captured)")?;
            let rs = n.reduce_scatter(
                Bufs::new(r.rs_s.ptr, r.rs_r.ptr, c_rs, 7),
                0,
                comms[q],
                r.s.raw,
            );
            ok(n, rs, "ncclReduceScatter (captured)")
        })();
        if let Err(e) = calls {
            failed = Some(format!("rank {q}: {e}"));
            break;
        }
    }
    let end = n.group_end();
    let mut graphs = Vec::new();
    for (q, r) in rk.iter().enumerate() {
        gpus[q].make_current()?;
        graphs.push(r.s.end_capture());
    }
    if let Some(f) = failed {
        return Err(format!("{mode} capture: {f}"));
    }
    ok(n, end, "ncclGroupEnd (captured)")?;
    let graphs: Vec<crate::sys::Graph> = graphs
        .into_iter()
        .enumerate()
        .map(|(q, g)| g.map_err(|e| format!("{mode} capture, rank {q}: {e}")))
        .collect::<Result<_, _>>()?;
    for rep in 0..2u64 {
        let salt = 0x6a00 + rep * 16 + global as u64 * 8;
        let ar = Inputs::new(f32t, seed, salt);
        let ag = Inputs::new(bf16, seed, salt + 1);
        let rs = Inputs::new(f32t, seed, salt + 2);
        for (q, r) in rk.iter().enumerate() {
            gpus[q].make_current()?;
            r.s.upload(r.ar_s.ptr, &ar.bytes(q, 0, c_ar))?;
            r.s.memset(r.ar_r.ptr, 0xff, c_ar * 4)?;
            r.s.memset(r.ag.ptr, 0xff, c_ag * w * 2)?;
            r.s.upload(r.ag.ptr + (q * c_ag * 2) as u64, &ag.bytes(q, 0, c_ag))?;
            r.s.upload(r.rs_s.ptr, &rs.bytes(q, 0, c_rs * w))?;
            r.s.memset(r.rs_r.ptr, 0xff, c_rs * 4)?;
        }
        for (q, r) in rk.iter().enumerate() {
            gpus[q].make_current()?;
            graphs[q].launch(&r.s)?;
        }
        let what = format!("{mode} capture, replay {}", rep + 1);
        poll_streams(
            n,
            gpus,
            comms,
            &rk.iter().map(|r| &r.s).collect::<Vec<_>>(),
            limit,
        )
        .map_err(|e| format!("{what}: {e}"))?;
        let want_ag: Vec<u8> = (0..w).flat_map(|q| ag.bytes(q, 0, c_ag)).collect();
        for (q, r) in rk.iter().enumerate() {
            gpus[q].make_current()?;
            let mut out_ar = vec![0u8; c_ar * 4];
            let mut out_ag = vec![0u8; c_ag * w * 2];
            let mut out_rs = vec![0u8; c_rs * 4];
            r.s.download(&mut out_ar, r.ar_r.ptr)?;
            r.s.download(&mut out_ag, r.ag.ptr)?;
            r.s.download(&mut out_rs, r.rs_r.ptr)?;
            r.s.sync(limit)
                .map_err(|e| format!("{what}, rank {q}: {e}"))?;
            let (wrong, first) =
                check_reduction(&ar, &Op::PreMulSum(scalars.clone()), w, 0, &out_ar);
            if wrong > 0 {
                return Err(format!(
                    "{what}, rank {q}: pre-multiplied all-reduce {wrong} of {c_ar} wrong; {}",
                    first.unwrap_or_default()
                ));
            }
            exactly(
                bf16,
                &want_ag,
                &out_ag,
                &format!("{what}, rank {q}: all-gather (in place)"),
                true,
            )?;
            let (wrong, first) = check_reduction(&rs, &Op::Builtin(0), w, q * c_rs, &out_rs);
            if wrong > 0 {
                return Err(format!(
                    "{what}, rank {q}: reduce-scatter {wrong} of {c_rs} wrong; {}",
                    first.unwrap_or_default()
                ));
            }
        }
    }
    Ok(format!(
        "{w} ranks' pre-multiplied all-reduce, in-place all-gather and reduce-scatter captured from one thread, 2 replays of each rank's graph in turn, 0 wrong"
    ))
}

/// Waits for every stream as nccl-tests does: each polled in turn, with the
/// communicator's `ncclCommGetAsyncError` between polls, within `limit`.
fn poll_streams(
    n: &Nccl,
    gpus: &[Gpu],
    comms: &[Comm],
    streams: &[&Stream],
    limit: Duration,
) -> Result<(), String> {
    let end = std::time::Instant::now() + limit;
    let mut done = vec![false; streams.len()];
    while done.iter().any(|d| !d) {
        for q in 0..streams.len() {
            if done[q] {
                continue;
            }
            gpus[q].make_current()?;
            if streams[q].query().map_err(|e| format!("rank {q}: {e}"))? {
                done[q] = true;
                continue;
            }
            let (code, asy) = n.async_error(comms[q]).map_err(missing)?;
            if code != 0 || asy != 0 {
                return Err(format!(
                    "rank {q}: ncclCommGetAsyncError gave {code}, async error {asy} ({}): {}",
                    code_name(asy),
                    last(n)
                ));
            }
        }
        if std::time::Instant::now() > end {
            let left: Vec<usize> = (0..done.len()).filter(|&q| !done[q]).collect();
            return Err(format!(
                "ranks {left:?}: their graphs did not end within {limit:?}"
            ));
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// reductions: every op (and PreMulSum), counts 0, 1, odd and past the buffer, in and out
// of place, eager and captured in a CUDA graph then replayed.

#[derive(Clone, Copy, PartialEq)]
pub enum Red {
    AllReduce,
    Reduce,
    ReduceScatter,
}

/// Each rank's PreMulSum scalar.
fn scalar(dt: Dt, rank: usize) -> f64 {
    if dt.is_float() {
        [0.5, 1.0, 2.0, 1.5][rank % 4]
    } else {
        [2.0, 3.0, 1.0, 2.0][rank % 4]
    }
}

fn reductions(r: &Rank, red: Red, dt: Dt) -> Verdict {
    let n = &r.nccl;
    let comm = create(r)?;
    let s = Stream::new(false)?;
    let sz = dt.size();
    let w = r.world;
    let big = match red {
        Red::ReduceScatter => r.big_bytes / sz / w + 3,
        _ => r.big_bytes / sz + 3,
    };
    let scalars: Vec<f64> = (0..w).map(|q| scalar(dt, q)).collect();
    let mut checked = 0usize;
    let mut calls = 0usize;
    for (ci, &count) in [0usize, 1, 7, 1025, big].iter().enumerate() {
        let ops: Vec<Op> = if count == big {
            vec![
                Op::Builtin(0),
                Op::Builtin(2),
                Op::PreMulSum(scalars.clone()),
            ]
        } else {
            (0..5)
                .map(Op::Builtin)
                .chain([Op::PreMulSum(scalars.clone())])
                .collect()
        };
        for (oi, op) in ops.iter().enumerate() {
            let root = (ci + oi) % w;
            let (send_n, recv_n) = match red {
                Red::ReduceScatter => (count * w, count),
                _ => (count, count),
            };
            let salt = ((ci as u64) << 8) | oi as u64 | ((red as u64) << 16);
            let inp = Inputs::new(dt, r.seed, salt);
            let host = inp.bytes(r.rank, 0, send_n);
            let sendb = DevBuf::new(send_n * sz)?;
            let recvb = DevBuf::new(recv_n * sz)?;
            for inplace in [false, true] {
                let (sp, rp) = if inplace {
                    let off = if red == Red::ReduceScatter {
                        (r.rank * count * sz) as u64
                    } else {
                        0
                    };
                    (sendb.ptr, sendb.ptr + off)
                } else {
                    (sendb.ptr, recvb.ptr)
                };
                let (opv, created) = match op {
                    Op::Builtin(o) => (*o, false),
                    Op::PreMulSum(sc) => {
                        let mut b = [0u8; 8];
                        b[..sz].copy_from_slice(&dt.encode(sc[r.rank]).to_le_bytes()[..sz]);
                        let (code, o) = n.premulsum(&mut b, dt.0, comm).map_err(missing)?;
                        ok(n, Ok(code), "ncclRedOpCreatePreMulSum")?;
                        (o, true)
                    }
                };
                let what = format!(
                    "{} {} count {count} {} root {root}",
                    dt.name(),
                    op.name(),
                    if inplace { "in-place" } else { "out-of-place" }
                );
                progress(r, &what);
                let call = |st: usize| match red {
                    Red::AllReduce => n.all_reduce(Bufs::new(sp, rp, count, dt.0), opv, comm, st),
                    Red::Reduce => {
                        n.reduce(Bufs::new(sp, rp, count, dt.0), opv, root as i32, comm, st)
                    }
                    Red::ReduceScatter => {
                        n.reduce_scatter(Bufs::new(sp, rp, count, dt.0), opv, comm, st)
                    }
                };
                let prep = || -> Result<(), String> {
                    s.upload(sendb.ptr, &host)?;
                    if !inplace {
                        s.memset(recvb.ptr, 0xff, recv_n * sz)?;
                    }
                    Ok(())
                };
                for graph in [false, true] {
                    let g = eager_or_replayed(n, &s, graph, &what, &prep, &|| call(s.raw))?;
                    calls += 1;
                    let out = read_back(r, &s, g, recv_n * sz, rp, &what)?;
                    if red == Red::Reduce && r.rank != root {
                        continue;
                    }
                    let start = if red == Red::ReduceScatter {
                        r.rank * count
                    } else {
                        0
                    };
                    let (wrong, first) = check_reduction(&inp, op, w, start, &out);
                    checked += recv_n;
                    if wrong > 0 {
                        return Err(format!(
                            "{what}{}: {wrong} of {recv_n} wrong; {}",
                            if graph { " (graph replay)" } else { "" },
                            first.unwrap_or_default()
                        ));
                    }
                }
                if created {
                    ok(n, n.redop_destroy(opv, comm), "ncclRedOpDestroy")?;
                }
            }
        }
    }
    destroy(r, comm)?;
    Ok(format!(
        "{calls} calls, {checked} elements checked, 0 wrong"
    ))
}

// ---------------------------------------------------------------------------------------
// all-gather and broadcast (byte-exact)

fn allgather(r: &Rank) -> Verdict {
    let n = &r.nccl;
    let comm = create(r)?;
    let s = Stream::new(false)?;
    let w = r.world;
    let mut calls = 0;
    for t in [0, 2, 4, 6, 7, 8, 9, 10] {
        let dt = Dt(t);
        let sz = dt.size();
        let mut counts = vec![0usize, 1, 7, 1025];
        if t == 7 || t == 0 {
            counts.push(r.big_bytes / sz / w + 3);
        }
        for count in counts {
            let inp = Inputs::new(dt, r.seed, 0x6a7 + t as u64 * 1000 + count as u64);
            let want: Vec<u8> = (0..w).flat_map(|q| inp.bytes(q, 0, count)).collect();
            let mine = inp.bytes(r.rank, 0, count);
            let sendb = DevBuf::new(count * sz)?;
            let recvb = DevBuf::new(count * w * sz)?;
            for inplace in [false, true] {
                let sp = if inplace {
                    recvb.ptr + (r.rank * count * sz) as u64
                } else {
                    sendb.ptr
                };
                let what = format!(
                    "all-gather {} count {count}{}",
                    dt.name(),
                    if inplace { " in-place" } else { "" }
                );
                progress(r, &what);
                let prep = || -> Result<(), String> {
                    s.memset(recvb.ptr, 0xff, count * w * sz)?;
                    s.upload(sp, &mine)
                };
                let call = || n.all_gather(Bufs::new(sp, recvb.ptr, count, t), comm, s.raw);
                for graph in [false, true] {
                    let g = eager_or_replayed(n, &s, graph, &what, &prep, &call)?;
                    calls += 1;
                    let out = read_back(r, &s, g, count * w * sz, recvb.ptr, &what)?;
                    exactly(dt, &want, &out, &what, graph)?;
                }
            }
        }
    }
    destroy(r, comm)?;
    Ok(format!("{calls} calls, 0 wrong"))
}

fn broadcast(r: &Rank) -> Verdict {
    let n = &r.nccl;
    let comm = create(r)?;
    let s = Stream::new(false)?;
    let w = r.world;
    let mut calls = 0;
    for root in 0..w {
        for (t, count) in [
            (0, 1usize),
            (6, 1025),
            (7, 4097),
            (4, 7),
            (7, r.big_bytes / 4 + 3),
        ] {
            if count > 4097 && root != w - 1 {
                continue;
            }
            let dt = Dt(t);
            let sz = dt.size();
            let inp = Inputs::new(dt, r.seed, 0xb0 + (root * 100 + t as usize) as u64);
            let want = inp.bytes(root, 0, count);
            let mine = inp.bytes(r.rank, 0, count);
            let sendb = DevBuf::new(count * sz)?;
            let recvb = DevBuf::new(count * sz)?;
            for mode in 0..3 {
                // 0: out of place, 1: in place (send == recv), 2: ncclBcast.
                let rp = if mode == 0 { recvb.ptr } else { sendb.ptr };
                let what = format!(
                    "broadcast {} count {count} root {root} {}",
                    dt.name(),
                    ["out-of-place", "in-place", "ncclBcast"][mode]
                );
                progress(r, &what);
                for graph in [false, true] {
                    let prep = || -> Result<(), String> {
                        s.upload(sendb.ptr, &mine)?;
                        s.memset(recvb.ptr, 0xff, count * sz)
                    };
                    let call = || {
                        if mode == 2 {
                            n.bcast(sendb.ptr, count, t, root as i32, comm, s.raw)
                        } else {
                            n.broadcast(
                                Bufs::new(sendb.ptr, rp, count, t),
                                root as i32,
                                comm,
                                s.raw,
                            )
                        }
                    };
                    let g = eager_or_replayed(n, &s, graph, &what, &prep, &call)?;
                    calls += 1;
                    let out = read_back(r, &s, g, count * sz, rp, &what)?;
                    exactly(dt, &want, &out, &what, graph)?;
                }
            }
        }
    }
    destroy(r, comm)?;
    Ok(format!("{calls} calls, every root, 0 wrong"))
}

// ---------------------------------------------------------------------------------------
// a fresh communicator's first calls, all captured in one CUDA graph

/// What a serving engine's forward does when it captures before any eager call: a new
/// communicator's first all-reduce, all-gather, reduce-scatter and broadcast are all made
/// inside one capture (global mode when the rank is a process of its own, as
/// `torch.cuda.graph` captures by default). The graph is replayed twice on fresh inputs
/// and every output checked; then one eager all-reduce shows the communicator still works.
fn first_calls_captured(r: &Rank) -> Verdict {
    let n = &r.nccl;
    let comm = create(r)?;
    let s = Stream::new(false)?;
    let w = r.world;
    let root = w - 1;
    let (f32t, bf16, i32t) = (Dt(7), Dt(9), Dt(2));
    let (c_ar, c_ag, c_rs, c_bc) = (4099usize, 1031usize, 515usize, 2053usize);
    let ar_s = DevBuf::new(c_ar * 4)?;
    let ar_r = DevBuf::new(c_ar * 4)?;
    let ag_s = DevBuf::new(c_ag * 2)?;
    let ag_r = DevBuf::new(c_ag * w * 2)?;
    let rs_s = DevBuf::new(c_rs * w * 4)?;
    let rs_r = DevBuf::new(c_rs * 4)?;
    let bc = DevBuf::new(c_bc * 4)?;
    progress(r, "first calls, captured");
    s.begin_capture()?;
    let calls = [
        n.all_reduce(Bufs::new(ar_s.ptr, ar_r.ptr, c_ar, 7), 0, comm, s.raw),
        n.all_gather(Bufs::new(ag_s.ptr, ag_r.ptr, c_ag, 9), comm, s.raw),
        n.reduce_scatter(Bufs::new(rs_s.ptr, rs_r.ptr, c_rs, 7), 0, comm, s.raw),
        n.broadcast(Bufs::new(bc.ptr, bc.ptr, c_bc, 2), root as i32, comm, s.raw),
    ];
    let g = s.end_capture();
    for (c, what) in calls.into_iter().zip([
        "ncclAllReduce (first call, captured)",
        "ncclAllGather (first call, captured)",
        "ncclReduceScatter (first call, captured)",
        "ncclBroadcast (first call, captured)",
    ]) {
        ok(n, c, what)?;
    }
    let g = g?;
    for rep in 0..2u64 {
        let salt = 0xf1c0 + rep * 16;
        let ar = Inputs::new(f32t, r.seed, salt);
        let ag = Inputs::new(bf16, r.seed, salt + 1);
        let rs = Inputs::new(f32t, r.seed, salt + 2);
        let bi = Inputs::new(i32t, r.seed, salt + 3);
        s.upload(ar_s.ptr, &ar.bytes(r.rank, 0, c_ar))?;
        s.memset(ar_r.ptr, 0xff, c_ar * 4)?;
        s.upload(ag_s.ptr, &ag.bytes(r.rank, 0, c_ag))?;
        s.memset(ag_r.ptr, 0xff, c_ag * w * 2)?;
        s.upload(rs_s.ptr, &rs.bytes(r.rank, 0, c_rs * w))?;
        s.memset(rs_r.ptr, 0xff, c_rs * 4)?;
        s.upload(bc.ptr, &bi.bytes(r.rank, 0, c_bc))?;
        g.launch(&s)?;
        let what = format!("replay {}", rep + 1);
        let mut out_ar = vec![0u8; c_ar * 4];
        let mut out_ag = vec![0u8; c_ag * w * 2];
        let mut out_rs = vec![0u8; c_rs * 4];
        let mut out_bc = vec![0u8; c_bc * 4];
        s.download(&mut out_ar, ar_r.ptr)?;
        s.download(&mut out_ag, ag_r.ptr)?;
        s.download(&mut out_rs, rs_r.ptr)?;
        s.download(&mut out_bc, bc.ptr)?;
        s.sync(r.limit).map_err(|e| format!("{what}: {e}"))?;
        let (wrong, first) = check_reduction(&ar, &Op::Builtin(0), w, 0, &out_ar);
        if wrong > 0 {
            return Err(format!(
                "{what}: all-reduce {wrong} of {c_ar} wrong; {}",
                first.unwrap_or_default()
            ));
        }
        let want: Vec<u8> = (0..w).flat_map(|q| ag.bytes(q, 0, c_ag)).collect();
        exactly(bf16, &want, &out_ag, &format!("{what}: all-gather"), true)?;
        let (wrong, first) = check_reduction(&rs, &Op::Builtin(0), w, r.rank * c_rs, &out_rs);
        if wrong > 0 {
            return Err(format!(
                "{what}: reduce-scatter {wrong} of {c_rs} wrong; {}",
                first.unwrap_or_default()
            ));
        }
        exactly(
            i32t,
            &bi.bytes(root, 0, c_bc),
            &out_bc,
            &format!("{what}: broadcast from {root} (in place)"),
            true,
        )?;
    }
    drop(g);
    allreduce_check(n, comm, r.rank, w, r.seed, r.limit, 1025)?;
    destroy(r, comm)?;
    Ok(format!(
        "4 first calls in one graph ({} capture), 2 replays and an eager all-reduce, 0 wrong",
        if r.own_process {
            "global"
        } else {
            "thread-local"
        }
    ))
}

// ---------------------------------------------------------------------------------------
// point to point and rooted calls

#[derive(Clone, Copy)]
enum P2p {
    SelfSend,
    Ring,
    Uneven,
    AllToAll,
}

/// Ends a group of sends and receives (always, so the library's group
/// depth returns to 0), then reports the first call that `failed`, else the
/// group's end.
fn close_group(n: &Nccl, failed: Option<String>) -> Result<(), String> {
    let end = n.group_end();
    if let Some(f) = failed {
        return Err(f);
    }
    ok(n, end, "ncclGroupEnd")
}

fn sendrecv(r: &Rank, how: P2p) -> Verdict {
    let n = &r.nccl;
    let comm = create(r)?;
    let s = Stream::new(false)?;
    let w = r.world;
    let me = r.rank;
    let dt = Dt(2);
    let sz = dt.size();
    let inp = Inputs::new(dt, r.seed, 0x5e + how as u64);
    // (peer, send elements from offset, recv elements, recv's source rank and offset)
    struct Leg {
        to: usize,
        send_off: usize,
        send_n: usize,
        from: usize,
        recv_n: usize,
        src_off: usize,
    }
    let c = 1025usize;
    let legs: Vec<Leg> = match how {
        P2p::SelfSend => vec![Leg {
            to: me,
            send_off: 0,
            send_n: c,
            from: me,
            recv_n: c,
            src_off: 0,
        }],
        P2p::Ring => vec![Leg {
            to: (me + 1) % w,
            send_off: 0,
            send_n: c,
            from: (me + w - 1) % w,
            recv_n: c,
            src_off: 0,
        }],
        P2p::Uneven => {
            let prev = (me + w - 1) % w;
            vec![Leg {
                to: (me + 1) % w,
                send_off: 0,
                send_n: (me + 1) * 37,
                from: prev,
                recv_n: (prev + 1) * 37,
                src_off: 0,
            }]
        }
        P2p::AllToAll => (0..w)
            .map(|q| Leg {
                to: q,
                send_off: q * c,
                send_n: c,
                from: q,
                recv_n: c,
                src_off: me * c,
            })
            .collect(),
    };
    let total_send = legs
        .iter()
        .map(|l| l.send_off + l.send_n)
        .max()
        .unwrap_or(0);
    let host = inp.bytes(me, 0, total_send);
    let sendb = DevBuf::new(total_send * sz)?;
    let recv_total: usize = legs.iter().map(|l| l.recv_n).sum();
    let recvb = DevBuf::new(recv_total * sz)?;
    s.upload(sendb.ptr, &host)?;
    s.memset(recvb.ptr, 0xff, recv_total * sz)?;
    progress(r, "grouped send/recv");
    ok(n, n.group_start(), "ncclGroupStart")?;
    let mut roff = 0;
    let mut failed = None;
    for l in &legs {
        let a = n.send(
            sendb.ptr + (l.send_off * sz) as u64,
            l.send_n,
            dt.0,
            l.to as i32,
            comm,
            s.raw,
        );
        let b = n.recv(
            recvb.ptr + (roff * sz) as u64,
            l.recv_n,
            dt.0,
            l.from as i32,
            comm,
            s.raw,
        );
        roff += l.recv_n;
        if a != Ok(0) || b != Ok(0) {
            failed = Some(format!(
                "ncclSend to {} -> {a:?}, ncclRecv from {} -> {b:?}: {}",
                l.to,
                l.from,
                last(n)
            ));
            break;
        }
    }
    close_group(n, failed)?;
    let mut out = vec![0u8; recv_total * sz];
    s.download(&mut out, recvb.ptr)?;
    s.sync(r.limit)?;
    let want: Vec<u8> = legs
        .iter()
        .flat_map(|l| inp.bytes(l.from, l.src_off, l.recv_n))
        .collect();
    let (wrong, first) = check_exact(dt, &want, &out);
    if wrong > 0 {
        return Err(format!(
            "{wrong} of {recv_total} received elements wrong; {}",
            first.unwrap_or_default()
        ));
    }
    destroy(r, comm)?;
    Ok(format!(
        "{} legs, {recv_total} elements received, 0 wrong",
        legs.len()
    ))
}

/// Sends and receives in which only some ranks take part at a time.
#[derive(Clone, Copy)]
enum Apart {
    /// Every pair (i, j), i < j, in one shared order: i and j swap in a
    /// group of their own while the others wait (torch.distributed's
    /// send/recv on its world communicator).
    Pairs,
    /// A pipeline: rank r receives from r - 1, then sends to r + 1, each
    /// call a group of its own; rank 0 only sends, the last rank only
    /// receives.
    Chain,
}

/// One call of [`sendrecv_apart`]: a send to or a receive from `peer` of
/// `n` elements.
struct PeerCall {
    send: bool,
    peer: usize,
    n: usize,
}

fn sendrecv_apart(r: &Rank, how: Apart) -> Verdict {
    let n = &r.nccl;
    let comm = create(r)?;
    let s = Stream::new(false)?;
    let (w, me, dt) = (r.world, r.rank, Dt(7));
    let sz = dt.size();
    let inp = Inputs::new(dt, r.seed, 0x9a1 + how as u64);
    // Elements a rank sends to `to`: uneven, so a mix-up of pairs shows.
    let count = |from: usize, to: usize| 251 + 37 * from + 11 * to;
    let mut groups: Vec<Vec<PeerCall>> = Vec::new();
    match how {
        Apart::Pairs => {
            for i in 0..w {
                for j in i + 1..w {
                    if me == i || me == j {
                        let peer = if me == i { j } else { i };
                        groups.push(vec![
                            PeerCall {
                                send: true,
                                peer,
                                n: count(me, peer),
                            },
                            PeerCall {
                                send: false,
                                peer,
                                n: count(peer, me),
                            },
                        ]);
                    }
                }
            }
        }
        Apart::Chain => {
            if me > 0 {
                groups.push(vec![PeerCall {
                    send: false,
                    peer: me - 1,
                    n: count(me - 1, me),
                }]);
            }
            if me + 1 < w {
                groups.push(vec![PeerCall {
                    send: true,
                    peer: me + 1,
                    n: count(me, me + 1),
                }]);
            }
        }
    }
    // Every buffer made before the first call and freed after the last: a
    // free between calls would wait for peers' kernels (docs/shared-gpu.md).
    let all: Vec<Vec<DevBuf>> = groups
        .iter()
        .map(|g| g.iter().map(|l| DevBuf::new(l.n * sz)).collect())
        .collect::<Result<_, _>>()?;
    let mut received = 0usize;
    for (gi, (legs, bufs)) in groups.iter().zip(&all).enumerate() {
        let what = format!("group {gi} of {}", groups.len());
        progress(r, &what);
        ok(n, n.group_start(), "ncclGroupStart")?;
        let mut failed = None;
        for (l, b) in legs.iter().zip(bufs) {
            let rc = if l.send {
                s.upload(b.ptr, &inp.bytes(me, 4096 * l.peer, l.n))?;
                n.send(b.ptr, l.n, dt.0, l.peer as i32, comm, s.raw)
            } else {
                s.memset(b.ptr, 0xff, l.n * sz)?;
                n.recv(b.ptr, l.n, dt.0, l.peer as i32, comm, s.raw)
            };
            if rc != Ok(0) {
                failed = Some(format!(
                    "{what}: {} peer {} -> {rc:?}: {}",
                    if l.send {
                        "ncclSend to"
                    } else {
                        "ncclRecv from"
                    },
                    l.peer,
                    last(n)
                ));
                break;
            }
        }
        close_group(n, failed)?;
        for (l, b) in legs.iter().zip(bufs) {
            if l.send {
                continue;
            }
            let mut out = vec![0u8; l.n * sz];
            s.download(&mut out, b.ptr)?;
            s.sync(r.limit)?;
            let want = inp.bytes(l.peer, 4096 * me, l.n);
            let (wrong, first) = check_exact(dt, &want, &out);
            if wrong > 0 {
                return Err(format!(
                    "{what}: {wrong} of {} elements from rank {} wrong; {}",
                    l.n,
                    l.peer,
                    first.unwrap_or_default()
                ));
            }
            received += l.n;
        }
    }
    s.sync(r.limit)?;
    destroy(r, comm)?;
    Ok(format!(
        "{} groups, {received} elements received, 0 wrong",
        groups.len()
    ))
}

fn alltoall(r: &Rank) -> Verdict {
    let n = &r.nccl;
    let comm = create(r)?;
    let s = Stream::new(false)?;
    let (w, me, dt, c) = (r.world, r.rank, Dt(7), 257usize);
    let inp = Inputs::new(dt, r.seed, 0xa2a);
    let host = inp.bytes(me, 0, c * w);
    let sendb = DevBuf::new(c * w * 4)?;
    let recvb = DevBuf::new(c * w * 4)?;
    s.upload(sendb.ptr, &host)?;
    s.memset(recvb.ptr, 0xff, c * w * 4)?;
    ok(
        n,
        n.all_to_all(Bufs::new(sendb.ptr, recvb.ptr, c, dt.0), comm, s.raw),
        "ncclAlltoAll",
    )?;
    let mut out = vec![0u8; c * w * 4];
    s.download(&mut out, recvb.ptr)?;
    s.sync(r.limit)?;
    let want: Vec<u8> = (0..w).flat_map(|q| inp.bytes(q, me * c, c)).collect();
    let (wrong, first) = check_exact(dt, &want, &out);
    if wrong > 0 {
        return Err(format!(
            "ncclAlltoAll: {wrong} wrong; {}",
            first.unwrap_or_default()
        ));
    }
    destroy(r, comm)?;
    Ok("0 wrong".into())
}

fn rooted(r: &Rank, gather: bool) -> Verdict {
    let n = &r.nccl;
    let comm = create(r)?;
    let s = Stream::new(false)?;
    let (w, me, dt, c) = (r.world, r.rank, Dt(9), 129usize);
    for root in 0..w {
        let inp = Inputs::new(dt, r.seed, 0x6a + root as u64);
        let (send_n, recv_n) = if gather {
            (c, if me == root { c * w } else { 0 })
        } else {
            (if me == root { c * w } else { 0 }, c)
        };
        let host = inp.bytes(me, 0, send_n);
        let sendb = DevBuf::new(send_n * 2)?;
        let recvb = DevBuf::new(recv_n * 2)?;
        s.upload(sendb.ptr, &host)?;
        s.memset(recvb.ptr, 0xff, recv_n * 2)?;
        let name = if gather { "ncclGather" } else { "ncclScatter" };
        let call = if gather {
            n.gather(
                Bufs::new(sendb.ptr, recvb.ptr, c, dt.0),
                root as i32,
                comm,
                s.raw,
            )
        } else {
            n.scatter(
                Bufs::new(sendb.ptr, recvb.ptr, c, dt.0),
                root as i32,
                comm,
                s.raw,
            )
        };
        ok(n, call, &format!("{name} root {root}"))?;
        let mut out = vec![0u8; recv_n * 2];
        s.download(&mut out, recvb.ptr)?;
        s.sync(r.limit)?;
        let want: Vec<u8> = if gather {
            (0..w).flat_map(|q| inp.bytes(q, 0, c)).collect()
        } else {
            inp.bytes(root, me * c, c)
        };
        if recv_n > 0 {
            let (wrong, first) = check_exact(dt, &want, &out);
            if wrong > 0 {
                return Err(format!(
                    "{name} root {root}: {wrong} wrong; {}",
                    first.unwrap_or_default()
                ));
            }
        }
    }
    destroy(r, comm)?;
    Ok("every root, 0 wrong".into())
}

// ---------------------------------------------------------------------------------------
// memory and queries

fn memory(r: &Rank) -> Verdict {
    let n = &r.nccl;
    let comm = create(r)?;
    let bytes = (1 << 20) + 4;
    let (code, buf) = n.mem_alloc(bytes).map_err(missing)?;
    ok(n, Ok(code), "ncclMemAlloc")?;
    if buf == 0 {
        return Err("ncclMemAlloc returned success and a NULL pointer".into());
    }
    let (code, h) = n.register(comm, buf, bytes).map_err(missing)?;
    ok(n, Ok(code), "ncclCommRegister")?;
    let (code, win) = n.window_register(comm, buf, bytes).map_err(missing)?;
    ok(n, Ok(code), "ncclCommWindowRegister")?;
    // The allocation works as a collective's buffer.
    let dt = Dt(7);
    let count = bytes / 4;
    let inp = Inputs::new(dt, r.seed, 0x3e3);
    let s = Stream::new(false)?;
    s.upload(buf, &inp.bytes(r.rank, 0, count))?;
    ok(
        n,
        n.all_reduce(Bufs::new(buf, buf, count, 7), 0, comm, s.raw),
        "ncclAllReduce on ncclMemAlloc memory",
    )?;
    let mut out = vec![0u8; count * 4];
    s.download(&mut out, buf)?;
    s.sync(r.limit)?;
    let (wrong, first) = check_reduction(&inp, &Op::Builtin(0), r.world, 0, &out);
    if wrong > 0 {
        return Err(format!(
            "all-reduce in registered memory: {wrong} wrong; {}",
            first.unwrap_or_default()
        ));
    }
    ok(
        n,
        n.window_deregister(comm, win),
        "ncclCommWindowDeregister",
    )?;
    ok(n, n.deregister(comm, h), "ncclCommDeregister")?;
    ok(n, n.mem_free(buf), "ncclMemFree")?;
    destroy(r, comm)?;
    Ok("alloc, register, window, all-reduce in it, deregister, free".into())
}

fn queries(r: &Rank) -> Verdict {
    let n = &r.nccl;
    let (code, v) = n.version().map_err(missing)?;
    ok(n, Ok(code), "ncclGetVersion")?;
    if v < 20000 {
        return Err(format!(
            "ncclGetVersion: {v}, expected a 2.x code (>= 20000)"
        ));
    }
    for c in 0..8 {
        match n.error_string(c).map_err(missing)? {
            Some(t) if !t.is_empty() => {}
            _ => return Err(format!("ncclGetErrorString({c}): NULL or empty")),
        }
    }
    if n.last_error(0).map_err(missing)?.is_none() {
        return Err("ncclGetLastError(NULL) returned NULL".into());
    }
    let comm = create(r)?;
    check_queries(n, comm, r.world, r.rank, r.gpu.ordinal)?;
    let (c, e) = n.async_error(comm).map_err(missing)?;
    ok(n, Ok(c), "ncclCommGetAsyncError")?;
    if e != 0 {
        return Err(format!(
            "ncclCommGetAsyncError on a fresh communicator: {e}"
        ));
    }
    // NCCL 2.28's device-API host calls, where the library has them: the
    // world team is every rank in order, whoever serves the communicator.
    let mut also = String::new();
    if let Some(t) = n.team_world(comm) {
        let want = crate::sys::Team {
            n_ranks: r.world as i32,
            rank: r.rank as i32,
            stride: 1,
        };
        if t != want {
            return Err(format!("ncclTeamWorld: {t:?}, expected {want:?}"));
        }
        for q in 0..r.world as i32 {
            match n.team_rank_to_world(comm, t, q) {
                Some(w) if w == q => {}
                got => return Err(format!("ncclTeamRankToWorld(world team, {q}): {got:?}")),
            }
        }
        also = ", world team checked".into();
    }
    // ncclCommRevoke, where the library has it: success or in progress,
    // then quiescent (ncclCommGetAsyncError reaches success), then destroyed.
    if let Ok(code) = n.revoke(comm, 0) {
        if code != 0 && code != 7 {
            return Err(format!(
                "ncclCommRevoke: {code} ({}): {}",
                code_name(code),
                last(n)
            ));
        }
        wait_ready(n, comm, r.limit).map_err(|e| format!("after ncclCommRevoke: {e}"))?;
        also.push_str(", revoked");
    }
    destroy(r, comm)?;
    Ok(format!("version {v}{also}"))
}

// ---------------------------------------------------------------------------------------
// bad input: each expects NCCL's own code; the communicator must still work after.

fn still_works(r: &Rank, comm: Comm, mut lines: Vec<String>) -> Verdict {
    allreduce_check(&r.nccl, comm, r.rank, r.world, r.seed, r.limit, 1025)
        .map_err(|e| format!("after the bad calls: {e}"))?;
    destroy(r, comm)?;
    lines.push("then a good all-reduce passed".into());
    Ok(lines.join("; "))
}

fn bad_null(r: &Rank) -> Verdict {
    let n = &r.nccl;
    let mut lines = Vec::new();
    let (code, _) = n
        .init_rank(r.world as i32, &r.id, r.rank as i32, true)
        .map_err(missing)?;
    lines.push(expect(n, Ok(code), 4, "ncclCommInitRank(NULL comm)")?);
    let comm = create(r)?;
    let s = Stream::new(false)?;
    let b = DevBuf::new(64)?;
    lines.push(expect(
        n,
        n.all_reduce(Bufs::new(b.ptr, b.ptr, 4, 7), 0, 0, s.raw),
        4,
        "ncclAllReduce(comm NULL)",
    )?);
    lines.push(expect(
        n,
        n.all_reduce(Bufs::new(0, b.ptr, 4, 7), 0, comm, s.raw),
        4,
        "ncclAllReduce(sendbuff NULL)",
    )?);
    lines.push(expect(
        n,
        n.all_reduce(Bufs::new(b.ptr, 0, 4, 7), 0, comm, s.raw),
        4,
        "ncclAllReduce(recvbuff NULL)",
    )?);
    let (code, _) = n.comm_count(comm, true).map_err(missing)?;
    lines.push(expect(n, Ok(code), 4, "ncclCommCount(count NULL)")?);
    s.sync(r.limit)?;
    still_works(r, comm, lines)
}

fn bad_handle(r: &Rank, destroyed: bool) -> Verdict {
    let n = &r.nccl;
    let s = Stream::new(false)?;
    let b = DevBuf::new(64)?;
    let bogus_store = vec![0xabu8; 4096];
    let handle = if destroyed {
        let c = create_with(r, &r.id2)?;
        destroy(r, c)?;
        c
    } else {
        bogus_store.as_ptr() as usize
    };
    let label = if destroyed { "destroyed" } else { "bogus" };
    let lines = vec![
        expect(
            n,
            n.all_reduce(Bufs::new(b.ptr, b.ptr, 4, 7), 0, handle, s.raw),
            4,
            &format!("ncclAllReduce({label} comm)"),
        )?,
        expect(
            n,
            n.comm_count(handle, false).map(|x| x.0),
            4,
            &format!("ncclCommCount({label} comm)"),
        )?,
    ];
    s.sync(r.limit)?;
    let comm = create(r)?;
    still_works(r, comm, lines)
}

fn bad_count(r: &Rank) -> Verdict {
    let n = &r.nccl;
    let comm = create(r)?;
    let s = Stream::new(false)?;
    let b = DevBuf::new(64)?;
    let lines = vec![
        expect(
            n,
            n.all_reduce(Bufs::new(b.ptr, b.ptr, usize::MAX, 7), 0, comm, s.raw),
            4,
            "ncclAllReduce(count -1 as size_t)",
        )?,
        expect(
            n,
            n.all_reduce(Bufs::new(b.ptr, b.ptr, 1 << 60, 7), 0, comm, s.raw),
            4,
            "ncclAllReduce(count 2^60)",
        )?,
    ];
    s.sync(r.limit)?;
    still_works(r, comm, lines)
}

fn bad_type_op(r: &Rank) -> Verdict {
    let n = &r.nccl;
    let comm = create(r)?;
    let s = Stream::new(false)?;
    let b = DevBuf::new(64)?;
    let lines = vec![
        expect(
            n,
            n.all_reduce(Bufs::new(b.ptr, b.ptr, 4, 12), 0, comm, s.raw),
            4,
            "ncclAllReduce(type 12)",
        )?,
        expect(
            n,
            n.all_reduce(Bufs::new(b.ptr, b.ptr, 4, -1), 0, comm, s.raw),
            4,
            "ncclAllReduce(type -1)",
        )?,
        expect(
            n,
            n.all_reduce(Bufs::new(b.ptr, b.ptr, 4, 7), 5, comm, s.raw),
            4,
            "ncclAllReduce(op 5, none created)",
        )?,
        expect(
            n,
            n.all_reduce(Bufs::new(b.ptr, b.ptr, 4, 7), 99, comm, s.raw),
            4,
            "ncclAllReduce(op 99)",
        )?,
        expect(
            n,
            n.all_gather(Bufs::new(b.ptr, b.ptr, 1, 12), comm, s.raw),
            4,
            "ncclAllGather(type 12)",
        )?,
    ];
    s.sync(r.limit)?;
    still_works(r, comm, lines)
}

fn bad_root_peer(r: &Rank) -> Verdict {
    let n = &r.nccl;
    let comm = create(r)?;
    let s = Stream::new(false)?;
    let b = DevBuf::new(64)?;
    let w = r.world as i32;
    let mut lines = vec![
        expect(
            n,
            n.broadcast(Bufs::new(b.ptr, b.ptr, 4, 7), w, comm, s.raw),
            4,
            "ncclBroadcast(root = world)",
        )?,
        expect(
            n,
            n.broadcast(Bufs::new(b.ptr, b.ptr, 4, 7), -1, comm, s.raw),
            4,
            "ncclBroadcast(root -1)",
        )?,
        expect(
            n,
            n.reduce(Bufs::new(b.ptr, b.ptr, 4, 7), 0, w, comm, s.raw),
            4,
            "ncclReduce(root = world)",
        )?,
    ];
    // A peer out of range inside a group: NCCL refuses it at the call or at ncclGroupEnd.
    ok(n, n.group_start(), "ncclGroupStart")?;
    let a = n.send(b.ptr, 4, 7, w, comm, s.raw);
    let e = n.group_end();
    match (a, e) {
        (Err(m), _) | (_, Err(m)) => return Err(missing(m)),
        (Ok(4), _) | (Ok(0), Ok(4)) => lines.push("ncclSend(peer = world): 4 ok".into()),
        (x, y) => return Err(format!("ncclSend(peer = world): expected 4 (ncclInvalidArgument) at the call or ncclGroupEnd, got {x:?} / {y:?}")),
    }
    s.sync(r.limit)?;
    still_works(r, comm, lines)
}

#[derive(Clone, Copy)]
enum Mismatch {
    Count,
    Type,
    Op,
    Collective,
}

/// Rank 0's call disagrees with the others'. Every rank must see an error (returned, in the
/// stream, or from ncclCommGetAsyncError) within the timeout.
fn mismatch(r: &Rank, how: Mismatch) -> Verdict {
    if r.world < 2 {
        return Ok("SKIP: needs 2 ranks".into());
    }
    let n = &r.nccl;
    let comm = create(r)?;
    let s = Stream::new(false)?;
    let b = DevBuf::new(8 * 4096)?;
    let odd = r.rank == 0;
    let c = 1024usize;
    let call = match how {
        Mismatch::Count => n.all_reduce(
            Bufs::new(b.ptr, b.ptr, if odd { c + 1 } else { c }, 7),
            0,
            comm,
            s.raw,
        ),
        Mismatch::Type => n.all_reduce(
            Bufs::new(b.ptr, b.ptr, c, if odd { 6 } else { 7 }),
            0,
            comm,
            s.raw,
        ),
        Mismatch::Op => n.all_reduce(
            Bufs::new(b.ptr, b.ptr, c, 7),
            if odd { 2 } else { 0 },
            comm,
            s.raw,
        ),
        Mismatch::Collective => {
            if odd {
                n.all_gather(Bufs::new(b.ptr, b.ptr + 4096, c / r.world, 7), comm, s.raw)
            } else {
                n.all_reduce(Bufs::new(b.ptr, b.ptr, c, 7), 0, comm, s.raw)
            }
        }
    };
    let code = call.map_err(missing)?;
    let stream = s.sync(r.limit);
    let (_, asy) = n.async_error(comm).map_err(missing)?;
    let text = last(n);
    let seen = code != 0 || stream.is_err() || asy != 0;
    let detail = format!("expected an error on every rank (ncclInvalidUsage=5 or ncclRemoteError=6, returned or from ncclCommGetAsyncError), got call={code} ({}) stream={} async={asy} ({}); last error: {text:.80}", code_name(code), if stream.is_ok() { "ok" } else { "error" }, code_name(asy));
    let _ = n.abort(comm);
    if seen {
        Ok(detail)
    } else {
        Err(detail)
    }
}

// ---------------------------------------------------------------------------------------
// a checker doing ordinary synchronous CUDA work between calls

fn syncwork(r: &Rank) -> Verdict {
    let n = &r.nccl;
    let comm = create(r)?;
    // A stream that synchronises with the legacy default stream, as cudaStreamCreate gives.
    let s = Stream::new(true)?;
    let start = Instant::now();
    let mut bytes = 8usize;
    let mut sizes = 0;
    // Where this rank's time went in the size before (a peer that waited for
    // it in vain says only that it did not come).
    let mut before = String::from("none");
    while bytes <= 64 << 20 {
        let count = bytes / 4;
        let t = Instant::now();
        let inp = Inputs::new(Dt(7), r.seed, 0x5c + bytes as u64);
        let send = DevBuf::new(bytes)?;
        let recv = DevBuf::new(bytes)?;
        sys::sync_copy_to_device(send.ptr, &inp.bytes(r.rank, 0, count))?;
        let prep = t.elapsed();
        progress(r, &format!("sync-work all-reduce {bytes} B"));
        let t = Instant::now();
        ok(
            n,
            n.all_reduce(Bufs::new(send.ptr, recv.ptr, count, 7), 0, comm, s.raw),
            &format!("ncclAllReduce {bytes} B"),
        )
        .map_err(|e| {
            format!(
                "{e} (after {:.2} s in the call; this size's set-up took {:.2} s; the size before: {before})",
                t.elapsed().as_secs_f64(),
                prep.as_secs_f64()
            )
        })?;
        let call = t.elapsed();
        let t = Instant::now();
        let mut out = vec![0u8; bytes];
        sys::sync_copy_to_host(&mut out, recv.ptr)?;
        let copy = t.elapsed();
        let t = Instant::now();
        let (wrong, first) = check_reduction(&inp, &Op::Builtin(0), r.world, 0, &out);
        if wrong > 0 {
            return Err(format!(
                "{bytes} B: {wrong} wrong; {}",
                first.unwrap_or_default()
            ));
        }
        let check = t.elapsed();
        let t = Instant::now();
        drop((send, recv));
        before = format!(
            "{bytes} B: set-up {:.2} s, call {:.2} s, copy back {:.2} s, check {:.2} s, free {:.2} s",
            prep.as_secs_f64(),
            call.as_secs_f64(),
            copy.as_secs_f64(),
            check.as_secs_f64(),
            t.elapsed().as_secs_f64()
        );
        sizes += 1;
        bytes *= 2;
    }
    destroy(r, comm)?;
    Ok(format!("{sizes} sizes 8 B..64 MiB with cuMemcpyDtoH + cuCtxSynchronize between calls, 0 wrong, {:.1} s; the last, {before}", start.elapsed().as_secs_f64()))
}

// ---------------------------------------------------------------------------------------
// a rank that leaves mid-job

/// The last rank makes the communicator, takes part in one all-reduce, and leaves: as a
/// process it exits at once (nothing destroyed, as a killed rank leaves things), as a thread
/// it stops calling. Every other rank's next all-reduce must end in an error (returned, in
/// the stream, or from ncclCommGetAsyncError) within the timeout, its ncclGetLastError must
/// name the rank that left, and ncclCommAbort must return.
fn rank_leaves(r: &Rank) -> Verdict {
    if r.world < 2 {
        return Ok("SKIP: needs 2 ranks".into());
    }
    let n = &r.nccl;
    let comm = create(r)?;
    allreduce_check(n, comm, r.rank, r.world, r.seed, r.limit, 1025)?;
    let leaver = r.world - 1;
    if r.rank == leaver {
        if r.own_process {
            sys::leave_now("RANK PASS left after one all-reduce (exited, nothing destroyed)");
        }
        // A thread: its communicator stays, unused and never destroyed, until the case ends.
        return Ok("left after one all-reduce (stopped calling)".into());
    }
    let s = Stream::new(false)?;
    let b = DevBuf::new(4 * 1025)?;
    let start = Instant::now();
    let code = n
        .all_reduce(Bufs::new(b.ptr, b.ptr, 1025, 7), 0, comm, s.raw)
        .map_err(missing)?;
    let stream = s.sync(r.limit);
    let (_, asy) = n.async_error(comm).map_err(missing)?;
    let text = last(n);
    let took = start.elapsed();
    let aborted = n.abort(comm).map_err(missing)?;
    let seen = code != 0 || stream.is_err() || asy != 0;
    let named = text.contains(&format!("rank {leaver}"));
    let detail = format!(
        "rank {leaver} left; the next all-reduce: call={code} ({}) stream={} async={asy} ({}) after {:.1} s, ncclCommAbort={aborted}; last error: {text:.160}",
        code_name(code),
        if stream.is_ok() { "ok" } else { "error" },
        code_name(asy),
        took.as_secs_f64()
    );
    if seen && named && took <= r.limit && aborted == 0 {
        Ok(detail)
    } else {
        Err(format!(
            "expected an error naming rank {leaver} within {:?} and ncclCommAbort=0: {detail}",
            r.limit
        ))
    }
}
