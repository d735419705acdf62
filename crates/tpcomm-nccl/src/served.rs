//! Standalone communicators (docs/standalone.md): made by ncclCommInitRank
//! from a standalone unique id and served by tpcomm alone, with no real NCCL
//! under them (none need be loaded).
//!
//! A handle is the address of this library's own state, and is only ever
//! looked up in the table here, never dereferenced: a handle that is not in
//! the table (a real NCCL communicator) goes on to NCCL as before. Every
//! export that takes a communicator asks [`lookup`] first; with no
//! standalone communicator alive that is one atomic load.

use crate::alone::{live, run, Alone, Live};
use crate::exact;
use crate::settings::{self, info, warn};
use crate::standalone::{self, Secret, INVALID_USAGE};
use crate::types::*;
use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;
use tpcomm::cuda::gathered;
use tpcomm::cuda::{
    CUstream, Collective, CudaConfig, GpuComm, Launch, Rendezvous, SavedContext, Staging,
    StreamAllReduce, MAX_WORLD,
};
use tpcomm::{Algo, DType, ReduceOp};

/// `ncclInvalidArgument`.
pub const INVALID_ARGUMENT: NcclResult = 4;
/// `ncclRemoteError`: what the async error query reports for a lost peer.
pub const REMOTE_ERROR: NcclResult = 6;
/// `ncclUnhandledCudaError`.
pub const CUDA_ERROR: NcclResult = 1;

type Table = RwLock<HashMap<usize, Arc<Alone>>>;

fn table() -> &'static Table {
    static T: OnceLock<Table> = OnceLock::new();
    T.get_or_init(|| RwLock::new(HashMap::new()))
}

/// How many standalone communicators are alive: lets [`lookup`] skip the
/// table's lock for programs that never make one.
static ALIVE: AtomicUsize = AtomicUsize::new(0);

/// The standalone communicator `comm` is the handle of, if it is one.
pub fn lookup(comm: NcclComm) -> Option<Arc<Alone>> {
    if ALIVE.load(Ordering::Acquire) == 0 || comm.is_null() {
        return None;
    }
    // A poisoned lock still holds a valid table (every update is one map
    // operation): reading on keeps a standalone handle from ever being
    // taken for a foreign one and forwarded.
    let t = table().read().unwrap_or_else(|e| e.into_inner());
    t.get(&(comm as usize)).cloned()
}

/// Keeps `a` and gives its handle.
fn insert(a: Alone) -> NcclComm {
    let a = Arc::new(a);
    let h = Arc::as_ptr(&a) as usize;
    let mut t = table().write().unwrap_or_else(|e| e.into_inner());
    t.insert(h, a);
    ALIVE.fetch_add(1, Ordering::AcqRel);
    h as NcclComm
}

/// Forgets `comm`; with `free`, its GPU memory is freed (once no call is
/// using it), without, kept until the process exits (after an abort a
/// kernel may still wait for a peer that is gone).
fn remove(comm: NcclComm, free: bool) -> bool {
    let gone = table()
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&(comm as usize));
    match gone {
        Some(a) => {
            ALIVE.fetch_sub(1, Ordering::AcqRel);
            if free {
                // Freeing binds the communicator's context; the caller's is
                // put back after (only a GPU side has anything to free).
                let _ctx = (a.live.is_some() || a.solo.is_some()).then(SavedContext::save);
                drop(a);
            } else {
                std::mem::forget(a);
            }
            true
        }
        None => false,
    }
}

/// The standalone rendezvous as the library's [`Rendezvous::Custom`].
#[derive(Debug)]
struct Meet {
    dir: PathBuf,
    secret: Secret,
}

impl tpcomm::cuda::Exchange for Meet {
    fn exchange(
        &self,
        key: &str,
        rank: usize,
        world: usize,
        mine: &[u8],
        timeout: Duration,
    ) -> tpcomm::Result<Vec<Vec<u8>>> {
        standalone::exchange(&self.dir, &self.secret, key, rank, world, mine, timeout)
    }
}

/// `ncclCommInitRank(Config)` with a standalone id: makes this rank's
/// communicator on the current device, meeting the other ranks through the
/// id, and writes its handle to `out`. Every failure is an error code with
/// ncclGetLastError's text saying what to do; nothing is forwarded.
pub fn create(
    call: &'static str,
    out: *mut NcclComm,
    nranks: c_int,
    secret: Secret,
    rank: c_int,
) -> NcclResult {
    if out.is_null() {
        return standalone::fail(
            INVALID_ARGUMENT,
            format!("{call}: the communicator pointer is NULL"),
        );
    }
    if !(1..=MAX_WORLD as c_int).contains(&nranks) {
        return standalone::fail(
            INVALID_USAGE,
            format!("{call}: a standalone communicator has 1 to {MAX_WORLD} ranks, not {nranks}; unset TPCOMM_STANDALONE to use NCCL"),
        );
    }
    if !(0..nranks).contains(&rank) {
        return standalone::fail(
            INVALID_ARGUMENT,
            format!("{call}: rank {rank} is not one of 0..{nranks}"),
        );
    }
    let (rank, world) = (rank as usize, nranks as usize);
    if let Err(e) = tpcomm::cuda::ensure_driver() {
        return standalone::fail(
            CUDA_ERROR,
            format!("{call} rank {rank}/{world}: standalone mode needs a GPU and its driver ({e})"),
        );
    }
    let Some(device) = tpcomm::cuda::current_device() else {
        return standalone::fail(
            CUDA_ERROR,
            format!("{call} rank {rank}/{world}: no CUDA context is current on this thread; select the rank's GPU first (cudaSetDevice, torch.cuda.set_device)"),
        );
    };
    // SAFETY: `out` is non-null: the caller's ncclComm_t.
    unsafe { create_on(call, &mut *out, rank, world, secret, device) }
}

/// Makes rank `rank` of `world` on `device`, meeting under `secret`, and
/// writes its handle to `out`.
fn create_on(
    call: &'static str,
    out: &mut NcclComm,
    rank: usize,
    world: usize,
    secret: Secret,
    device: usize,
) -> NcclResult {
    if let Err(e) = tpcomm::cuda::ensure_driver() {
        return standalone::fail(
            CUDA_ERROR,
            format!("{call} rank {rank}/{world}: standalone mode needs a GPU and its driver ({e})"),
        );
    }
    let tag = format!("{call} rank {rank}/{world} GPU {device}");
    let _restore = SavedContext::save();
    if world == 1 {
        let solo = tpcomm::cuda::open_context(device).and_then(|c| Staging::new(&c, 16));
        return match solo {
            Ok(st) => {
                info!("{tag}: standalone communicator of one rank (every call is a copy)");
                *out = insert(Alone {
                    rank,
                    world,
                    device,
                    secret,
                    splits: Default::default(),
                    live: None,
                    solo: Some(st),
                });
                SUCCESS
            }
            Err(e) => standalone::fail(
                CUDA_ERROR,
                format!("{tag}: the standalone communicator could not be made ({e})"),
            ),
        };
    }
    match make(&tag, &secret, rank, world, device) {
        Ok(live) => {
            let r = live.gpu.memory_report();
            warn!(
                "{tag}: standalone tpcomm communicator (no real NCCL under it), {} transport; took {} of GPU memory plus {} bytes of staging, and {} bytes of pinned host memory",
                live.gpu.transport().name(),
                r.device_requested(),
                live.staging.bytes(),
                r.total_in(tpcomm::Place::PinnedHost).map_or(0, |b| b.bytes())
            );
            *out = insert(Alone {
                rank,
                world,
                device,
                secret,
                splits: Default::default(),
                live: Some(live),
                solo: None,
            });
            SUCCESS
        }
        Err(e) => standalone::fail(
            SYSTEM_ERROR,
            format!("{tag}: the standalone communicator could not be made ({e})"),
        ),
    }
}

fn make(
    tag: &str,
    secret: &Secret,
    rank: usize,
    world: usize,
    device: usize,
) -> tpcomm::Result<Live> {
    let s = settings::get();
    let dir = standalone::meeting_dir(&standalone::runtime_base(), secret)?;
    let meet = Meet {
        dir: dir.clone(),
        secret: *secret,
    };
    let key = standalone::host_key();
    let hosts = tpcomm::cuda::Exchange::exchange(
        &meet,
        "standalone-hosts",
        rank,
        world,
        key.as_bytes(),
        s.timeout,
    )?;
    if let Some(p) = hosts.iter().position(|h| h != key.as_bytes()) {
        return Err(tpcomm::Error::Unsupported(format!(
            "rank {p} is on another machine ({}); standalone mode serves ranks of one host: unset TPCOMM_STANDALONE to use NCCL",
            String::from_utf8_lossy(&hosts[p])
        )));
    }
    info!("{tag}: all {world} ranks on this machine; creating the standalone communicator");
    let mut cfg = CudaConfig::new(rank, world, device);
    cfg.max_bytes = s.max_bytes;
    cfg.timeout = s.timeout;
    cfg.nccl_fallback = false;
    let rv = Rendezvous::Custom(Arc::new(meet));
    let made = (|| {
        let gpu = GpuComm::new(&cfg, &rv)?;
        // The collective kernels are loaded now: no call (inside a CUDA
        // graph capture, say) ever compiles or loads a module.
        let image = gpu.prepare_collectives()?;
        info!("{tag}: collective kernels loaded ({image} of kernel image)");
        let staging = Staging::new(gpu.context(), cfg.max_bytes.as_usize()?)?;
        let gathered = gathered::kernels(gpu.context())?;
        info!(
            "{tag}: gathered-block reduction kernels loaded ({} of kernel image)",
            tpcomm::ByteSize::from_usize(gathered.cubin_bytes)
        );
        Ok(Live {
            gpu,
            staging,
            gathered,
        })
    })();
    // Either every rank has the communicator or none does.
    let ok = [made.is_ok() as u8];
    let all = rv.exchange("standalone-ready", rank, world, &ok, cfg.timeout)?;
    standalone::tidy(&dir, rank, "standalone-ready");
    if let Some(p) = all.iter().position(|v| v.first() != Some(&1)) {
        if made.is_ok() {
            return Err(tpcomm::Error::Aborted(format!(
                "rank {p} could not make its side (see its log)"
            )));
        }
    }
    made
}

/// A call on a communicator of one rank: `count` elements of `datatype`
/// copied from `send` to `recv` on the stream (nothing when they are the
/// same buffer), which is every collective's result with one rank.
#[allow(clippy::too_many_arguments)]
fn solo_copy(
    call: &str,
    a: &Alone,
    solo: &Staging,
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    datatype: NcclDataType,
    stream: CudaStream,
) -> NcclResult {
    let Some(bytes) = type_size(datatype).and_then(|z| z.checked_mul(count)) else {
        return standalone::unservable(call, &format!("ncclDataType {datatype}"));
    };
    if bytes == 0 || std::ptr::eq(send, recv) {
        return SUCCESS;
    }
    run(call, a, || {
        // SAFETY: the call's contract: device buffers of this GPU holding
        // `count` elements, valid until the stream runs the copy, and a
        // stream of this GPU's context (the staging buffer's).
        unsafe { solo.copy(recv as u64, send as u64, bytes, stream as CUstream) }
    })
}

/// The ops that leave one rank's values as they are (sum, prod, max, min,
/// avg); pre-multiplied sums scale them.
fn identity_alone(op: NcclRedOp) -> bool {
    (0..=4).contains(&op)
}

/// The size of an NCCL data type, for the calls that only move bytes.
pub(crate) fn type_size(t: NcclDataType) -> Option<usize> {
    match t {
        0 | 1 | 10 | 11 => Some(1),
        6 | 9 => Some(2),
        2 | 3 | 7 => Some(4),
        4 | 5 | 8 => Some(8),
        _ => None,
    }
}

/// A kernel type and count that move the same bytes as `count` elements of
/// the NCCL type `t` (all-gather and broadcast only copy, so any type of the
/// same width will do), given the buffers' addresses.
fn as_bytes(t: NcclDataType, count: usize, ptrs: &[usize]) -> Option<(DType, usize)> {
    let bytes = count.checked_mul(type_size(t)?)?;
    let fits = |w: usize| bytes.is_multiple_of(w) && ptrs.iter().all(|p| p.is_multiple_of(w));
    if fits(4) {
        Some((DType::F32, bytes / 4))
    } else if fits(2) {
        Some((DType::F16, bytes / 2))
    } else {
        None
    }
}

/// Elements of `dt` in the largest piece of a contiguous call: within
/// TPCOMM_MAX_BYTES, a multiple of 16 bytes (so pieces keep the buffers'
/// alignment), and fitting the transport's buffers for `what`.
fn piece(gpu: &GpuComm, what: Collective, dt: DType) -> usize {
    let max = settings::get().max_bytes.bytes() as usize;
    let mut n = (max / 16 * 16) / dt.size();
    while n > 16 && !gpu.collective_fits(what, n, dt) {
        n = (n / 2) / 16 * 16;
    }
    n.max(1)
}

/// What the summing calls (all-reduce, reduce-scatter) check first: one
/// rank copies (when the op leaves one value unchanged); otherwise a type the
/// kernels sum, a sum, a GPU side and a non-empty call. `Err` is the call's
/// whole answer; `Ok` gives the element type and the GPU side to run it on.
#[allow(clippy::too_many_arguments)]
fn summing<'a>(
    call: &str,
    a: &'a Alone,
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    datatype: NcclDataType,
    op: NcclRedOp,
    stream: CudaStream,
) -> Result<(DType, &'a Live), NcclResult> {
    if let Some(solo) = &a.solo {
        if !identity_alone(op) {
            return Err(standalone::unservable(
                call,
                &format!("ncclRedOp {op} on one rank"),
            ));
        }
        return Err(solo_copy(
            call, a, solo, send, recv, count, datatype, stream,
        ));
    }
    let Some(dt) = dtype_of(datatype) else {
        return Err(standalone::unservable(
            call,
            &format!("ncclDataType {datatype} (tpcomm sums float, half and bfloat16 only)"),
        ));
    };
    if op != OP_SUM {
        return Err(standalone::unservable(
            call,
            &format!("ncclRedOp {op} (tpcomm's kernels only sum)"),
        ));
    }
    let l = live(a, call)?;
    if count == 0 {
        return Err(SUCCESS);
    }
    Ok((dt, l))
}

/// `ncclAllReduce` on a standalone communicator: sums of f32, f16 and bf16
/// on the kernels, in pieces of at most TPCOMM_MAX_BYTES, through the
/// staging buffer when a buffer is not 16-byte aligned.
#[allow(clippy::too_many_arguments)]
pub fn all_reduce(
    a: &Alone,
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    datatype: NcclDataType,
    op: NcclRedOp,
    stream: CudaStream,
) -> NcclResult {
    const CALL: &str = "ncclAllReduce";
    // Sums of f32, f16 and bf16 run on the collective kernels; every other
    // type and op gathers the blocks and reduces them (all_reduce_gathered).
    if exact::takes(a, datatype, op) {
        return exact::all_reduce_gathered(a, send, recv, count, datatype, op, stream);
    }
    let (dt, l) = match summing(CALL, a, send, recv, count, datatype, op, stream) {
        Ok(run) => run,
        Err(done) => return done,
    };
    let per = (l.staging.bytes() / 16 * 16) / dt.size();
    if per == 0 {
        return standalone::unservable(CALL, "the staging buffer is smaller than 16 bytes");
    }
    let st = stream as CUstream;
    run(CALL, a, || {
        let mut done = 0;
        while done < count {
            let n = per.min(count - done);
            let off = (done * dt.size()) as u64;
            let (s, r) = (send as u64 + off, recv as u64 + off);
            let bytes = n * dt.size();
            // SAFETY: ncclAllReduce's contract: device buffers of this
            // communicator's GPU of `count` elements, valid until the stream
            // runs the call, and a stream of that GPU; this piece is inside
            // them. Unaligned pieces go through the staging buffer, which
            // holds a piece (`per` was sized from it); all on the stream.
            unsafe {
                if s.is_multiple_of(16) && r.is_multiple_of(16) {
                    l.gpu
                        .all_reduce(s, r, n, dt, ReduceOp::Sum, Algo::Auto, st)?;
                } else {
                    let p = l.staging.ptr();
                    l.staging.copy(p, s, bytes, st)?;
                    l.gpu
                        .all_reduce(p, p, n, dt, ReduceOp::Sum, Algo::Auto, st)?;
                    l.staging.copy(r, p, bytes, st)?;
                }
            }
            done += n;
        }
        Ok(())
    })
}

/// `ncclAllGather` on a standalone communicator: any type (the bytes are
/// only copied), a block within the transport's buffers.
pub fn all_gather(
    a: &Alone,
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    datatype: NcclDataType,
    stream: CudaStream,
) -> NcclResult {
    const CALL: &str = "ncclAllGather";
    if let Some(solo) = &a.solo {
        return solo_copy(CALL, a, solo, send, recv, count, datatype, stream);
    }
    let l = match live(a, CALL) {
        Ok(l) => l,
        Err(r) => return r,
    };
    if count == 0 {
        return SUCCESS;
    }
    let direct = as_bytes(datatype, count, &[send as usize, recv as usize])
        .filter(|&(dt, _)| exact::floats_travel_as(datatype, dt));
    let Some((dt, n)) = direct else {
        let Some(nbytes) = type_size(datatype).and_then(|z| z.checked_mul(count)) else {
            return standalone::unservable(CALL, &format!("ncclDataType {datatype}"));
        };
        return exact::exact_bytes(CALL, a, l, send, recv, nbytes, None, stream);
    };
    if !l.gpu.collective_fits(Collective::AllGather, n, dt) {
        return standalone::unservable(
            CALL,
            &format!("a block of {} bytes is larger than this communicator's buffers; raise TPCOMM_MAX_BYTES", n * dt.size()),
        );
    }
    run(CALL, a, || {
        // SAFETY: ncclAllGather's contract is the kernels': device buffers
        // of this GPU, sendbuff of one block and recvbuff of world blocks
        // (or sendbuff at this rank's block of it), valid until the stream
        // runs the call; the block is the same bytes counted as `dt`.
        unsafe {
            l.gpu.collective(
                Collective::AllGather,
                send as u64,
                recv as u64,
                n,
                dt,
                stream as CUstream,
                Launch::Ordinary,
            )
        }
    })
}

/// `ncclReduceScatter` on a standalone communicator: sums of f32, f16 and
/// bf16, a block within the transport's buffers.
#[allow(clippy::too_many_arguments)]
pub fn reduce_scatter(
    a: &Alone,
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    datatype: NcclDataType,
    op: NcclRedOp,
    stream: CudaStream,
) -> NcclResult {
    const CALL: &str = "ncclReduceScatter";
    // As ncclAllReduce: the kernels sum f32, f16 and bf16; every other type
    // and op gathers the blocks and reduces this rank's (exact.rs).
    if exact::takes(a, datatype, op) {
        return exact::reduce_scatter_gathered(a, send, recv, count, datatype, op, stream);
    }
    let (dt, l) = match summing(CALL, a, send, recv, count, datatype, op, stream) {
        Ok(run) => run,
        Err(done) => return done,
    };
    if !l.gpu.collective_fits(Collective::ReduceScatter, count, dt) {
        return standalone::unservable(
            CALL,
            &format!("a block of {} bytes is larger than this communicator's buffers; raise TPCOMM_MAX_BYTES", count * dt.size()),
        );
    }
    run(CALL, a, || {
        // SAFETY: as in all_gather, with sendbuff of world blocks and
        // recvbuff of one (or at this rank's block of sendbuff).
        unsafe {
            l.gpu.collective(
                Collective::ReduceScatter,
                send as u64,
                recv as u64,
                count,
                dt,
                stream as CUstream,
                Launch::Ordinary,
            )
        }
    })
}

/// `ncclBroadcast` (and `ncclBcast`, in place) on a standalone
/// communicator: any type, in pieces that fit the transport's buffers.
#[allow(clippy::too_many_arguments)]
pub fn broadcast(
    call: &'static str,
    a: &Alone,
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    datatype: NcclDataType,
    root: c_int,
    stream: CudaStream,
) -> NcclResult {
    if root < 0 || root as usize >= a.world {
        return standalone::fail(
            INVALID_ARGUMENT,
            format!(
                "{call}: root {root} is not a rank of this {}-rank communicator",
                a.world
            ),
        );
    }
    if let Some(solo) = &a.solo {
        return solo_copy(call, a, solo, send, recv, count, datatype, stream);
    }
    let l = match live(a, call) {
        Ok(l) => l,
        Err(r) => return r,
    };
    if count == 0 {
        return SUCCESS;
    }
    let direct = as_bytes(datatype, count, &[send as usize, recv as usize])
        .filter(|&(dt, _)| exact::floats_travel_as(datatype, dt));
    let Some((dt, total)) = direct else {
        let Some(nbytes) = type_size(datatype).and_then(|z| z.checked_mul(count)) else {
            return standalone::unservable(call, &format!("ncclDataType {datatype}"));
        };
        return exact::exact_bytes(call, a, l, send, recv, nbytes, Some(root as usize), stream);
    };
    let what = Collective::Broadcast {
        root: root as usize,
    };
    let per = piece(&l.gpu, what, dt);
    run(call, a, || {
        let mut done = 0;
        while done < total {
            let n = per.min(total - done);
            let off = (done * dt.size()) as u64;
            // SAFETY: ncclBroadcast's contract: device buffers of this GPU of
            // `count` elements (the same or disjoint), valid until the stream
            // runs the call; this piece is inside them, counted as `dt`.
            unsafe {
                l.gpu.collective(
                    what,
                    send as u64 + off,
                    recv as u64 + off,
                    n,
                    dt,
                    stream as CUstream,
                    Launch::Ordinary,
                )?;
            }
            done += n;
        }
        Ok(())
    })
}

/// `ncclCommGetAsyncError`: the kernels' check (a lost peer is
/// ncclRemoteError, with the text for ncclGetLastError).
pub fn async_error(a: &Alone, out: *mut NcclResult) -> NcclResult {
    if out.is_null() {
        return standalone::fail(
            INVALID_ARGUMENT,
            "ncclCommGetAsyncError: the result pointer is NULL".into(),
        );
    }
    let r = match a.live.as_ref().map(|l| l.gpu.check()) {
        Some(Err(e)) => standalone::fail(REMOTE_ERROR, format!("rank {}/{}: {e}", a.rank, a.world)),
        _ => SUCCESS,
    };
    // SAFETY: non-null, the caller's ncclResult_t.
    unsafe { *out = r };
    SUCCESS
}

/// `ncclCommCount`, `ncclCommUserRank`, `ncclCommCuDevice`: writes `v`.
pub fn write_int(call: &str, v: usize, out: *mut c_int) -> NcclResult {
    if out.is_null() {
        return standalone::fail(
            INVALID_ARGUMENT,
            format!("{call}: the result pointer is NULL"),
        );
    }
    // SAFETY: non-null, the caller's int.
    unsafe { *out = v as c_int };
    SUCCESS
}

/// `ncclCommFinalize`: nothing is queued outside the caller's streams, so
/// there is nothing to flush; the communicator stays until destroyed.
pub fn finalize(a: &Alone) -> NcclResult {
    info!("ncclCommFinalize: standalone rank {}/{}", a.rank, a.world);
    SUCCESS
}

/// `ncclCommDestroy` (frees the GPU memory) or `ncclCommAbort` (keeps it,
/// so that abort never waits for a kernel whose peer is gone).
pub fn release(call: &str, comm: NcclComm, free: bool) -> NcclResult {
    if remove(comm, free) {
        info!("{call}: standalone communicator released");
    }
    SUCCESS
}

/// `NCCL_SPLIT_NOCOLOR`: the ranks that get no communicator from a split.
const NO_COLOR: c_int = -1;

/// Where this rank lands in a split: the ranks of its colour ordered by
/// (key, parent rank), as NCCL orders them. `all` holds every parent rank's
/// (colour, key); `None` for NO_COLOR.
fn split_place(all: &[(c_int, c_int)], me: usize) -> Option<(usize, usize)> {
    let color = all[me].0;
    if color == NO_COLOR {
        return None;
    }
    let mut members: Vec<(c_int, usize)> = (0..all.len())
        .filter(|&r| all[r].0 == color)
        .map(|r| (all[r].1, r))
        .collect();
    members.sort();
    let rank = members.iter().position(|&(_, r)| r == me)?;
    Some((rank, members.len()))
}

/// `ncclCommSplit` on a standalone communicator: every rank posts its
/// (colour, key) where the parent's ranks met, and the ranks of one colour
/// make a new standalone communicator meeting under a secret derived from
/// the parent's, the split's number and the colour.
pub fn split(parent: &Alone, color: c_int, key: c_int, newcomm: *mut NcclComm) -> NcclResult {
    const CALL: &str = "ncclCommSplit";
    if newcomm.is_null() {
        return standalone::fail(
            INVALID_ARGUMENT,
            format!("{CALL}: the new communicator pointer is NULL"),
        );
    }
    if color < NO_COLOR {
        return standalone::fail(
            INVALID_ARGUMENT,
            format!("{CALL}: colour {color} is negative (NCCL_SPLIT_NOCOLOR is -1)"),
        );
    }
    let n = parent.splits.fetch_add(1, Ordering::AcqRel);
    let tag = format!("{CALL} #{n} rank {}/{}", parent.rank, parent.world);
    let mut mine = color.to_le_bytes().to_vec();
    mine.extend_from_slice(&key.to_le_bytes());
    let step = format!("split-{n}");
    let posted =
        standalone::meeting_dir(&standalone::runtime_base(), &parent.secret).and_then(|dir| {
            let all = standalone::exchange(
                &dir,
                &parent.secret,
                &step,
                parent.rank,
                parent.world,
                &mine,
                settings::get().timeout,
            )?;
            standalone::tidy(&dir, parent.rank, &step);
            Ok(all)
        });
    let all: Option<Vec<(c_int, c_int)>> = match posted {
        Ok(v) => v
            .iter()
            .map(|b| {
                let w = |i: usize| b.get(i..i + 4)?.try_into().ok().map(c_int::from_le_bytes);
                Some((w(0)?, w(4)?))
            })
            .collect(),
        Err(e) => {
            return standalone::fail(SYSTEM_ERROR, format!("{tag}: the ranks did not meet ({e})"))
        }
    };
    let Some(all) = all else {
        return standalone::fail(
            SYSTEM_ERROR,
            format!("{tag}: a rank posted a malformed colour"),
        );
    };
    // SAFETY: non-null, the caller's ncclComm_t.
    let out = unsafe { &mut *newcomm };
    *out = std::ptr::null_mut();
    let Some((rank, world)) = split_place(&all, parent.rank) else {
        return SUCCESS;
    };
    let secret = parent.secret.derive((n << 32) | color as u32 as u64);
    create_on(CALL, out, rank, world, secret, parent.device)
}

/// The refusal of `call` when `comm` is a standalone communicator (every
/// export standalone mode does not serve asks this before forwarding).
pub fn refused(call: &str, comm: NcclComm) -> Option<NcclResult> {
    lookup(comm).map(|_| standalone::unservable(call, "not served in standalone mode"))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A handle as ncclCommInitRank would give, without a GPU side.
    pub(crate) fn hollow(rank: usize, world: usize) -> NcclComm {
        hollow_with(
            rank,
            world,
            standalone::parse(&standalone::new_id().unwrap()).unwrap(),
        )
    }

    fn hollow_with(rank: usize, world: usize, secret: Secret) -> NcclComm {
        insert(Alone {
            rank,
            world,
            device: 0,
            secret,
            splits: Default::default(),
            live: None,
            solo: None,
        })
    }

    /// Three ranks split through the exports: the ranks meet where the
    /// parent's met; a rank without a colour gets NULL, and a colour of one
    /// or two ranks goes on to creation with the new rank and size (which
    /// needs a GPU: without one it fails at once, naming the driver).
    #[test]
    fn a_split_meets_through_the_parent_and_places_every_rank() {
        // Each run is a parent communicator of its own (its own id).
        let run = |colors: [c_int; 3]| -> Vec<(NcclResult, bool, String)> {
            let secret = standalone::parse(&standalone::new_id().unwrap()).unwrap();
            let hs: Vec<usize> = (0..3).map(|r| hollow_with(r, 3, secret) as usize).collect();
            let out = std::thread::scope(|s| {
                let ts: Vec<_> = (0..3)
                    .map(|r| {
                        let h = hs[r];
                        s.spawn(move || {
                            let h = h as NcclComm;
                            let mut c: NcclComm = std::ptr::null_mut();
                            // SAFETY: a handle of the table and a live out-pointer.
                            let r = unsafe {
                                crate::intercepted::ncclCommSplit(
                                    h,
                                    colors[r],
                                    0,
                                    &mut c,
                                    std::ptr::null_mut(),
                                )
                            };
                            (r, c.is_null(), standalone::last_error())
                        })
                    })
                    .collect();
                ts.into_iter().map(|t| t.join().unwrap()).collect()
            });
            for h in hs {
                release("ncclCommDestroy", h as NcclComm, true);
            }
            out
        };
        let out = run([0, NO_COLOR, 1]);
        assert_eq!(out[1].0, SUCCESS);
        assert!(out[1].1);
        if tpcomm::cuda::ensure_driver().is_err() {
            // Colours of one rank each: rank 0 of 1 on either side.
            for r in [0, 2] {
                assert_eq!(out[r].0, CUDA_ERROR, "{:?}", out[r]);
                assert!(out[r].2.contains("ncclCommSplit rank 0/1"), "{:?}", out[r]);
            }
            let out = run([0, NO_COLOR, 0]);
            assert_eq!(out[1].0, SUCCESS);
            for r in [0, 2] {
                assert_eq!(out[r].0, CUDA_ERROR, "{:?}", out[r]);
                assert!(
                    out[r].2.contains("ncclCommSplit rank") && out[r].2.contains("needs a GPU")
                );
            }
        }
    }

    #[test]
    fn handles_are_found_only_while_alive_and_foreign_ones_never() {
        let h = hollow(1, 4);
        assert_eq!(lookup(h).map(|a| (a.rank, a.world)), Some((1, 4)));
        assert!(lookup(0x1234 as NcclComm).is_none());
        assert!(lookup(std::ptr::null_mut()).is_none());
        assert_eq!(release("ncclCommDestroy", h, true), SUCCESS);
        assert!(lookup(h).is_none());
    }

    #[test]
    fn byte_moving_calls_take_any_type_at_the_widest_word_that_fits() {
        assert_eq!(as_bytes(1, 8, &[0x100, 0x200]), Some((DType::F32, 2)));
        assert_eq!(as_bytes(1, 6, &[0x100, 0x200]), Some((DType::F16, 3)));
        assert_eq!(as_bytes(4, 3, &[0x100, 0x202]), Some((DType::F16, 12)));
        assert_eq!(as_bytes(0, 3, &[0x100, 0x200]), None);
        assert_eq!(as_bytes(99, 4, &[0x100, 0x200]), None);
        assert_eq!(as_bytes(7, usize::MAX, &[0, 0]), None);
    }

    #[test]
    fn creation_refuses_bad_arguments_by_name_before_any_gpu_work() {
        let secret = standalone::parse(&standalone::new_id().unwrap()).unwrap();
        let r = create("ncclCommInitRank", std::ptr::null_mut(), 2, secret, 0);
        assert_eq!(r, INVALID_ARGUMENT);
        let mut c: NcclComm = std::ptr::null_mut();
        assert_eq!(
            create("ncclCommInitRank", &mut c, 9, secret, 0),
            INVALID_USAGE
        );
        assert!(standalone::last_error().contains("1 to 8 ranks"));
        assert_eq!(
            create("ncclCommInitRank", &mut c, 2, secret, 2),
            INVALID_ARGUMENT
        );
        assert!(standalone::last_error().contains("rank 2 is not one of 0..2"));
        assert!(c.is_null());
    }

    /// The exports on a standalone handle: the unserved ones refuse with
    /// ncclInvalidUsage and a last error naming the call (never reaching a
    /// real NCCL: none is loaded in unit tests, so forwarding would give
    /// ncclSystemError instead), the queries answer from the handle.
    #[test]
    fn exports_refuse_or_answer_a_standalone_handle_and_never_forward_it() {
        use std::ffi::CStr;
        let h = hollow(1, 3);
        let p = |x: usize| x as *mut c_void;
        let text = || {
            // SAFETY: ncclGetLastError returns a NUL-terminated string.
            unsafe { CStr::from_ptr(crate::intercepted::ncclGetLastError(h)) }
                .to_string_lossy()
                .into_owned()
        };
        // SAFETY: the handle is only looked up; no buffer is touched by a
        // refused call.
        unsafe {
            assert_eq!(crate::forwarded::ncclSend(p(0x100), 4, 7, 0, h, p(0)), 5);
            assert!(text().contains("cannot serve ncclSend"), "{}", text());
            assert_eq!(
                crate::forwarded::ncclAlltoAll(p(0x100), p(0x200), 4, 7, h, p(0)),
                5
            );
            assert!(text().contains("ncclAlltoAll"), "{}", text());
            let mut c: NcclComm = std::ptr::null_mut();
            let r = crate::intercepted::ncclCommShrink(
                h,
                std::ptr::null_mut(),
                0,
                &mut c,
                std::ptr::null_mut(),
                0,
            );
            assert_eq!(r, 5);
            assert!(
                text().contains("ncclCommShrink") && c.is_null(),
                "{}",
                text()
            );
            // int8 max is served by the gathered path, which this handle
            // (no GPU side) cannot run; fp8 (type 10) and a pre-multiplied
            // sum (op 5) are served by no path.
            let r = crate::allreduce::ncclAllReduce(p(0x100), p(0x200), 1, 0, 2, h, p(0));
            assert_eq!(r, 5);
            assert!(
                text().contains("ncclAllReduce") && text().contains("no GPU side"),
                "{}",
                text()
            );
            let r = crate::allreduce::ncclAllReduce(p(0x100), p(0x200), 1, 10, 0, h, p(0));
            assert_eq!(r, 5);
            assert!(
                text().contains("ncclAllReduce") && text().contains("ncclDataType 10"),
                "{}",
                text()
            );
            let r = crate::allreduce::ncclAllReduce(p(0x100), p(0x200), 1, 7, 5, h, p(0));
            assert_eq!(r, 5);
            assert!(text().contains("ncclRedOp 5"), "{}", text());
            // f32 prod goes to the gathered path (no GPU side here); a
            // pre-multiplied sum (op 5) to none.
            let r = crate::collectives::ncclReduceScatter(p(0x100), p(0x200), 4, 7, 1, h, p(0));
            assert_eq!(r, 5);
            assert!(
                text().contains("ncclReduceScatter") && text().contains("no GPU side"),
                "{}",
                text()
            );
            let r = crate::collectives::ncclReduceScatter(p(0x100), p(0x200), 4, 7, 5, h, p(0));
            assert_eq!(r, 5);
            assert!(
                text().contains("ncclReduceScatter") && text().contains("ncclRedOp 5"),
                "{}",
                text()
            );
            let mut v: c_int = -1;
            assert_eq!(crate::intercepted::ncclCommCount(h, &mut v), SUCCESS);
            assert_eq!(v, 3);
            assert_eq!(crate::intercepted::ncclCommUserRank(h, &mut v), SUCCESS);
            assert_eq!(v, 1);
            assert_eq!(crate::intercepted::ncclCommCuDevice(h, &mut v), SUCCESS);
            assert_eq!(v, 0);
            let mut e: NcclResult = -1;
            assert_eq!(
                crate::intercepted::ncclCommGetAsyncError(h, &mut e),
                SUCCESS
            );
            assert_eq!(e, SUCCESS);
            assert_eq!(crate::intercepted::ncclCommFinalize(h), SUCCESS);
            assert_eq!(crate::intercepted::ncclCommDestroy(h), SUCCESS);
        }
        assert!(lookup(h).is_none());
    }

    #[test]
    fn a_split_orders_each_colour_by_key_then_parent_rank() {
        // Parent ranks 0..5: colours 0,1,0,-1,1 and keys 5,0,5,0,-2.
        let all = [(0, 5), (1, 0), (0, 5), (NO_COLOR, 0), (1, -2)];
        assert_eq!(split_place(&all, 0), Some((0, 2)));
        assert_eq!(split_place(&all, 2), Some((1, 2)));
        assert_eq!(split_place(&all, 4), Some((0, 2)));
        assert_eq!(split_place(&all, 1), Some((1, 2)));
        assert_eq!(split_place(&all, 3), None);
    }

    /// On a GPU: 1, 2 and 4 ranks as threads, all on GPU 0 (the case real NCCL
    /// refuses), made through the exports' creation and served through
    /// them: an f32 all-reduce (aligned and not), a u8 all-gather, a u8
    /// broadcast and an f32 reduce-scatter, each compared with the host's
    /// answer, then destroy.
    #[test]
    #[ignore = "needs a GPU: cargo test --release -p tpcomm-nccl --lib standalone_ranks_sharing -- --ignored"]
    fn standalone_ranks_sharing_one_gpu_serve_the_collectives() {
        use tpcomm::cuda::cudarc::driver::DevicePtr;
        // Ranks are threads of this process sharing GPU 0: their streams
        // need hardware queues of their own (docs/shared-gpu.md), and every
        // copy below goes through pinned memory (a pageable copy can hold a
        // rank's thread while a peer's kernel waits for that rank's call).
        if std::env::var_os("CUDA_DEVICE_MAX_CONNECTIONS").is_none() {
            std::env::set_var("CUDA_DEVICE_MAX_CONNECTIONS", "32");
        }
        for world in [1usize, 2, 4] {
            let secret = standalone::parse(&standalone::new_id().unwrap()).unwrap();
            std::thread::scope(|s| {
                for rank in 0..world {
                    s.spawn(move || one_rank(rank, world, secret));
                }
            });
            eprintln!("standalone test: {world} rank(s) on GPU 0 passed");
        }

        fn one_rank(rank: usize, world: usize, secret: Secret) {
            let ctx = tpcomm::cuda::open_context(0).unwrap();
            ctx.bind_to_thread().unwrap();
            // SAFETY: (test) no buffer is shared between streams.
            unsafe { ctx.disable_event_tracking() };
            let stream = ctx.new_stream().unwrap();
            let st = stream.cu_stream() as CudaStream;
            let mut comm: NcclComm = std::ptr::null_mut();
            let r = create("test", &mut comm, world as c_int, secret, rank as c_int);
            assert_eq!(r, SUCCESS, "{}", standalone::last_error());
            let arena = 1 << 20;
            let mut a = stream.alloc_zeros::<u8>(arena).unwrap();
            let mut b = stream.alloc_zeros::<u8>(arena).unwrap();
            let (pa, pb) = (a.device_ptr(&stream).0, b.device_ptr(&stream).0);
            // One pinned buffer for every copy, allocated before any call
            // and freed after the last: freeing pinned memory synchronizes
            // the context, which the ranks (threads) share, so a free
            // between calls would wait for a peer's kernel that waits for
            // this rank's next call.
            // SAFETY: (test) every read of it follows the copy that fills it.
            let host = std::cell::RefCell::new(
                unsafe { ctx.alloc_pinned_with_flags::<u8>(arena, 0) }.unwrap(),
            );
            let fetch = |buf: &tpcomm::cuda::cudarc::driver::CudaSlice<u8>, len: usize| {
                let mut h = host.borrow_mut();
                let h = &mut h.as_mut_slice().unwrap()[..len];
                stream.memcpy_dtoh(&buf.slice(..len), h).unwrap();
                stream.synchronize().unwrap();
                h.to_vec()
            };
            // Copies v into buf at [at, at + v.len()), through the pinned buffer.
            let upload =
                |buf: &mut tpcomm::cuda::cudarc::driver::CudaSlice<u8>, at: usize, v: &[u8]| {
                    let mut h = host.borrow_mut();
                    let h = &mut h.as_mut_slice().unwrap()[..v.len()];
                    h.copy_from_slice(v);
                    stream
                        .memcpy_htod(&*h, &mut buf.slice_mut(at..at + v.len()))
                        .unwrap();
                    stream.synchronize().unwrap();
                };
            let f32s = |v: &[u8]| -> Vec<f32> {
                v.chunks(4)
                    .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                    .collect()
            };
            // All-reduce of 1001 f32, aligned (in a) and 4 bytes off (in b).
            let n = 1001;
            let mine: Vec<u8> = (0..n)
                .flat_map(|i| ((rank * 7 + i) as f32).to_le_bytes())
                .collect();
            let want: Vec<f32> = (0..n)
                .map(|i| (0..world).map(|r| (r * 7 + i) as f32).sum())
                .collect();
            upload(&mut a, 0, &mine);
            upload(&mut b, 4, &mine);
            let p = |x: u64| x as *mut c_void;
            // SAFETY: (test) every range is inside this rank's arenas, which
            // outlive the synchronisation in `fetch`.
            unsafe {
                let r = crate::allreduce::ncclAllReduce(p(pa), p(pa), n, 7, OP_SUM, comm, st);
                assert_eq!(r, SUCCESS, "{}", standalone::last_error());
                let r =
                    crate::allreduce::ncclAllReduce(p(pb + 4), p(pb + 4), n, 7, OP_SUM, comm, st);
                assert_eq!(r, SUCCESS, "{}", standalone::last_error());
            }
            assert_eq!(
                f32s(&fetch(&a, 4 * n)),
                want,
                "rank {rank}: aligned all-reduce"
            );
            assert_eq!(
                f32s(&fetch(&b, 4 + 4 * n)[4..]),
                want,
                "rank {rank}: unaligned all-reduce"
            );
            // All-gather of 6 u8 per rank (counted as 3 f16 words).
            let block: Vec<u8> = (0..6).map(|i| (rank * 16 + i) as u8).collect();
            upload(&mut a, 0, &block);
            // SAFETY: (test) as above.
            let r = unsafe { crate::collectives::ncclAllGather(p(pa), p(pb), 6, 1, comm, st) };
            assert_eq!(r, SUCCESS, "{}", standalone::last_error());
            let want: Vec<u8> = (0..world)
                .flat_map(|r| (0..6).map(move |i| (r * 16 + i) as u8))
                .collect();
            assert_eq!(fetch(&b, 6 * world), want, "rank {rank}: all-gather");
            // Broadcast of 10 u8 from the last rank, in place.
            let root = world - 1;
            let mine: Vec<u8> = (0..10).map(|i| (rank * 3 + i) as u8).collect();
            upload(&mut a, 0, &mine);
            // SAFETY: (test) as above.
            let r = unsafe { crate::collectives::ncclBcast(p(pa), 10, 1, root as c_int, comm, st) };
            assert_eq!(r, SUCCESS, "{}", standalone::last_error());
            let want: Vec<u8> = (0..10).map(|i| (root * 3 + i) as u8).collect();
            assert_eq!(fetch(&a, 10), want, "rank {rank}: broadcast");
            // Reduce-scatter of f32: world blocks of 64, small integers (exact).
            let cnt = 64;
            let mine: Vec<u8> = (0..cnt * world)
                .flat_map(|i| ((rank + i) as f32).to_le_bytes())
                .collect();
            upload(&mut a, 0, &mine);
            // SAFETY: (test) as above.
            let r = unsafe {
                crate::collectives::ncclReduceScatter(p(pa), p(pb), cnt, 7, OP_SUM, comm, st)
            };
            assert_eq!(r, SUCCESS, "{}", standalone::last_error());
            let want: Vec<f32> = (0..cnt)
                .map(|j| (0..world).map(|r| (r + rank * cnt + j) as f32).sum())
                .collect();
            assert_eq!(
                f32s(&fetch(&b, 4 * cnt)),
                want,
                "rank {rank}: reduce-scatter"
            );
            // Types and ops beyond the summing kernels, with values whose
            // words are all ones (-1, 255), which the kernels' sentinel
            // would change if they travelled as floats: each against the
            // host model of the gathered reduction (gathered::reference).
            use tpcomm::cuda::gathered::{reference, Elem, Op};
            let put =
                |buf: &mut tpcomm::cuda::cudarc::driver::CudaSlice<u8>, v: &[u8]| upload(buf, 0, v);
            let block_of = |r: usize, elem: Elem, n: usize| -> Vec<u8> {
                (0..n)
                    .flat_map(|i| {
                        let x = (r * 1000 + i) as i64;
                        match elem {
                            Elem::I64 => (-1 - x).to_le_bytes().to_vec(),
                            Elem::U8 => vec![if r == 0 { 255 } else { (x % 251) as u8 }],
                            Elem::I32 => ((-1 - x) as i32).to_le_bytes().to_vec(),
                            Elem::F64 => (x as f64 * 0.5 - 3.0).to_le_bytes().to_vec(),
                            _ => unreachable!(),
                        }
                    })
                    .collect()
            };
            for (elem, op, n) in [
                (Elem::I64, Op::Sum, 37usize),
                (Elem::U8, Op::Max, 1),
                (Elem::I32, Op::Min, 1001),
                (Elem::F64, Op::Avg, 5),
                (Elem::I64, Op::Prod, 3),
            ] {
                put(&mut a, &block_of(rank, elem, n));
                let t = Elem::ALL.iter().position(|&e| e == elem).unwrap() as c_int;
                // SAFETY: (test) as above.
                let r = unsafe {
                    crate::allreduce::ncclAllReduce(p(pa), p(pb), n, t, op as c_int, comm, st)
                };
                assert_eq!(r, SUCCESS, "{elem:?} {op:?}: {}", standalone::last_error());
                let blocks: Vec<Vec<u8>> = (0..world).map(|r| block_of(r, elem, n)).collect();
                let refs: Vec<&[u8]> = blocks.iter().map(|v| &v[..]).collect();
                let want: Vec<u8> = (0..n).flat_map(|i| reference(elem, op, &refs, i)).collect();
                assert_eq!(
                    fetch(&b, n * elem.size()),
                    want,
                    "rank {rank}: all-reduce {elem:?} {op:?}"
                );
            }
            // Reduce-scatter of the same kinds: this rank's block of every
            // rank's input, reduced in rank order.
            for (elem, op, n) in [(Elem::I64, Op::Max, 33usize), (Elem::U8, Op::Sum, 70)] {
                put(&mut a, &block_of(rank, elem, n * world));
                let t = Elem::ALL.iter().position(|&e| e == elem).unwrap() as c_int;
                // SAFETY: (test) as above.
                let r = unsafe {
                    crate::collectives::ncclReduceScatter(p(pa), p(pb), n, t, op as c_int, comm, st)
                };
                assert_eq!(r, SUCCESS, "{elem:?} {op:?}: {}", standalone::last_error());
                let z = elem.size();
                let blocks: Vec<Vec<u8>> = (0..world)
                    .map(|r| {
                        block_of(r, elem, n * world)[rank * n * z..(rank + 1) * n * z].to_vec()
                    })
                    .collect();
                let refs: Vec<&[u8]> = blocks.iter().map(|v| &v[..]).collect();
                let want: Vec<u8> = (0..n).flat_map(|i| reference(elem, op, &refs, i)).collect();
                assert_eq!(
                    fetch(&b, n * z),
                    want,
                    "rank {rank}: reduce-scatter {elem:?} {op:?}"
                );
            }
            // All-gather of i32 -1s and broadcast of i64 -1s: byte-exact.
            let n = 300;
            put(&mut a, &block_of(rank, Elem::I32, n));
            // SAFETY: (test) as above.
            let r = unsafe { crate::collectives::ncclAllGather(p(pa), p(pb), n, 2, comm, st) };
            assert_eq!(r, SUCCESS, "{}", standalone::last_error());
            let want: Vec<u8> = (0..world).flat_map(|r| block_of(r, Elem::I32, n)).collect();
            assert_eq!(fetch(&b, want.len()), want, "rank {rank}: i32 all-gather");
            put(&mut a, &block_of(rank, Elem::I64, n));
            // SAFETY: (test) as above.
            let r = unsafe { crate::collectives::ncclBroadcast(p(pa), p(pb), n, 4, 0, comm, st) };
            assert_eq!(r, SUCCESS, "{}", standalone::last_error());
            assert_eq!(
                fetch(&b, 8 * n),
                block_of(0, Elem::I64, n),
                "rank {rank}: i64 broadcast"
            );
            let mut e: NcclResult = -1;
            // SAFETY: (test) a live handle and out-pointer.
            unsafe {
                assert_eq!(
                    crate::intercepted::ncclCommGetAsyncError(comm, &mut e),
                    SUCCESS
                );
                assert_eq!(e, SUCCESS);
                assert_eq!(crate::intercepted::ncclCommDestroy(comm), SUCCESS);
            }
        }
    }
}
