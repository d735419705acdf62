//! ncclSend and ncclRecv on a standalone communicator (docs/standalone.md).
//!
//! A call is checked and kept until its group ends (the outermost
//! ncclGroupEnd; a call outside any group is a group of its own). There the
//! calls run pair by pair: on a communicator of two ranks the pair is the
//! communicator itself; on a larger one each peer's calls run on the
//! two-rank communicator of this rank and that peer (create.rs's
//! `make_pair`, made at their first group), so ranks that send and receive
//! nothing in a group need not take part, as in NCCL. Per pair, the two
//! ranks swap the lengths of their streams through the pair's meeting place,
//! both check that sender and receiver agree, and each launches its part of
//! p2p_plan.rs's all-to-all-v on the calls' stream. Sends to itself are
//! copies on the stream. A rank runs its pairs in one order shared by every
//! rank (the pair's lower rank, then the higher), so no two ranks each wait
//! for the other's next pair; a pair's sends and receives are matched in
//! the order their groups end, as NCCL matches them. A peer that never comes
//! makes its partner fail after TPCOMM_TIMEOUT_S, naming it.
//!
//! One thread may issue every rank's calls inside one group (ranks as
//! threads sharing a GPU): at the group's end each communicator's part runs
//! on a thread of its own, as create.rs makes a group's ranks, so no rank
//! waits for a rank its thread has not reached yet.

use crate::standalone::comm::{live, run, StandaloneComm};
use crate::standalone::create::make_pair;
use crate::standalone::gathered::{expanded_block, staged_plan, staging_too_small};
use crate::standalone::p2p_plan::{pair_order, plan, sizes, sizes_of, Calls};
use crate::standalone::rooted::launch;
use crate::standalone::rooted_plan::{Loc, Shape, Step};
use crate::standalone::{self, INVALID_USAGE};
use crate::types::*;
use std::ffi::{c_int, c_void};
use std::sync::Arc;
use tpcomm::cuda::CUstream;

/// What the group's end names in its errors.
const END: &str = "ncclGroupEnd (ncclSend/ncclRecv)";

/// A send or receive waiting for its group's end.
struct Pending {
    a: Arc<StandaloneComm>,
    send: bool,
    peer: usize,
    ptr: u64,
    bytes: usize,
    stream: usize,
}

thread_local! {
    static PENDING: std::cell::RefCell<Vec<Pending>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// `ncclSend` (`send`) or `ncclRecv` of `count` elements of `datatype` at
/// `buf` to or from `peer`: checked (ncclInvalidArgument for a peer out of
/// range, an unknown type, an overflowing count, a NULL buffer), then kept
/// for the group's end, which comes at once outside a group.
pub fn call(
    send: bool,
    a: Arc<StandaloneComm>,
    buf: *const c_void,
    count: usize,
    datatype: NcclDataType,
    peer: c_int,
    stream: CudaStream,
) -> NcclResult {
    let name = if send { "ncclSend" } else { "ncclRecv" };
    let (rank, world) = (a.rank, a.world);
    let bad = |why: String| {
        standalone::fail(
            INVALID_ARGUMENT,
            format!("{name} rank {rank}/{world}: {why}"),
        )
    };
    if peer < 0 || peer as usize >= world {
        return bad(format!(
            "peer {peer} is not a rank of this {world}-rank communicator"
        ));
    }
    let Some(z) = type_size(datatype) else {
        return bad(format!(
            "ncclDataType {datatype} is not an NCCL data type (0 to 11)"
        ));
    };
    let Some(bytes) = count.checked_mul(z).filter(|&b| b <= isize::MAX as usize) else {
        return bad(format!(
            "count {count} of ncclDataType {datatype} overflows the buffer"
        ));
    };
    if bytes > 0 && buf.is_null() {
        return bad("the buffer is NULL".into());
    }
    PENDING.with_borrow_mut(|p| {
        p.push(Pending {
            a,
            send,
            peer: peer as usize,
            ptr: buf as u64,
            bytes,
            stream: stream as usize,
        })
    });
    if crate::group::depth() == 0 {
        return finish();
    }
    SUCCESS
}

/// At the end of the outermost group (or of a call outside any): runs this
/// thread's pending sends and receives, each communicator's on a thread of
/// its own when there are several. The result is the first failure's code,
/// with its text for ncclGetLastError on this thread.
pub fn finish() -> NcclResult {
    let all = PENDING.with_borrow_mut(std::mem::take);
    let mut groups: Vec<Vec<Pending>> = Vec::new();
    for p in all {
        match groups.iter_mut().find(|g| Arc::ptr_eq(&g[0].a, &p.a)) {
            Some(g) => g.push(p),
            None => groups.push(vec![p]),
        }
    }
    if groups.len() <= 1 {
        return groups.first().map_or(SUCCESS, |g| end(g));
    }
    let out: Vec<(NcclResult, String)> = std::thread::scope(|s| {
        let ts: Vec<_> = groups
            .iter()
            .map(|g| {
                s.spawn(move || {
                    let r = end(g);
                    let text = if r == SUCCESS {
                        String::new()
                    } else {
                        standalone::last_error()
                    };
                    (r, text)
                })
            })
            .collect();
        ts.into_iter()
            .map(|t| {
                t.join()
                    .unwrap_or_else(|_| (INTERNAL_ERROR, format!("{END}: a rank's part panicked")))
            })
            .collect()
    });
    match out.into_iter().find(|(r, _)| *r != SUCCESS) {
        Some((r, text)) => standalone::fail(r, text),
        None => SUCCESS,
    }
}

/// One communicator's sends and receives of a group, in call order: on the
/// communicator itself when it has one or two ranks, else pair by pair.
fn end(g: &[Pending]) -> NcclResult {
    let a = &g[0].a;
    let (rank, world) = (a.rank, a.world);
    let tag = format!("{END} rank {rank}/{world}");
    if g.iter().any(|p| p.stream != g[0].stream) {
        return standalone::unservable(
            END,
            "the sends and receives of one communicator in one group must use one stream",
        );
    }
    if world <= 2 || a.live.is_none() {
        let ranks: Vec<usize> = (0..world).collect();
        return end_on(a, g, &ranks, &tag);
    }
    let to_self: Vec<&Pending> = g.iter().filter(|p| p.peer == rank).collect();
    if !to_self.is_empty() {
        let r = copy_to_self(a, &to_self, &tag);
        if r != SUCCESS {
            return r;
        }
    }
    for peer in pair_order(rank, g.iter().map(|p| p.peer)) {
        let pair = match pair_with(a, peer, g[0].stream, &tag) {
            Ok(c) => c,
            Err(r) => return r,
        };
        let other = usize::from(rank < peer);
        let calls: Vec<Pending> = g
            .iter()
            .filter(|p| p.peer == peer)
            .map(|p| Pending {
                a: pair.clone(),
                peer: other,
                ..*p
            })
            .collect();
        let ranks = [rank.min(peer), rank.max(peer)];
        let r = end_on(&pair, &calls, &ranks, &format!("{tag} (with rank {peer})"));
        if r != SUCCESS {
            return r;
        }
    }
    SUCCESS
}

/// The pair's communicator of `a`'s rank and `peer`, made at the first call,
/// or the refusal (`tag` naming the group): ncclInvalidUsage while `stream`
/// is being captured into a CUDA graph (making it allocates memory, which a
/// capture forbids), ncclSystemError when it could not be made.
fn pair_with(
    a: &StandaloneComm,
    peer: usize,
    stream: usize,
    tag: &str,
) -> Result<Arc<StandaloneComm>, NcclResult> {
    let mut pairs = a.pairs.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, c)) = pairs.iter().find(|(p, _)| *p == peer) {
        return Ok(c.clone());
    }
    // SAFETY: the calls' stream, a live stream of this rank's GPU by NCCL's
    // contract.
    let captured = unsafe { tpcomm::cuda::stream_is_capturing(stream as CUstream) };
    if captured.unwrap_or(false) {
        return Err(standalone::fail(
            INVALID_USAGE,
            format!("{tag}: this is the first group of sends and receives between ranks {} and {peer}, and it is being captured into a CUDA graph, where the pair's communicator cannot be made (it allocates memory); run one group between them before capturing", a.rank),
        ));
    }
    match make_pair(a, peer) {
        Ok(c) => {
            let c = Arc::new(c);
            pairs.push((peer, c.clone()));
            Ok(c)
        }
        Err(e) => Err(standalone::fail(
            SYSTEM_ERROR,
            format!("{tag}: the two-rank communicator with rank {peer} for their sends and receives could not be made ({e})"),
        )),
    }
}

/// The calls `g` as p2p_plan.rs takes them: per slot (`slot(call)`, a rank
/// of the communicator they run on), `(index in g, bytes)` in call order.
fn calls_of<'a>(
    g: impl IntoIterator<Item = &'a Pending>,
    slots: usize,
    slot: impl Fn(&Pending) -> usize,
) -> Calls {
    let mut calls = Calls::new(slots);
    for (i, p) in g.into_iter().enumerate() {
        let side = if p.send {
            &mut calls.sends
        } else {
            &mut calls.recvs
        };
        side[slot(p)].push((i, p.bytes));
    }
    calls
}

/// Matches this rank's sends to itself with its receives from itself (in
/// call order, as p2p_plan.rs matches every stream) and copies them on the
/// calls' stream.
fn copy_to_self(a: &StandaloneComm, g: &[&Pending], tag: &str) -> NcclResult {
    let calls = calls_of(g.iter().copied(), 1, |_| 0);
    let m = match sizes(&[calls.record()]) {
        Ok(m) => m,
        Err(e) => return standalone::fail(INVALID_USAGE, format!("{tag}: {e}")),
    };
    let Some(staging) = a
        .solo
        .as_ref()
        .or_else(|| a.live.as_ref().map(|l| l.staging()))
    else {
        return standalone::unservable(END, "this communicator has no GPU side");
    };
    let ptrs: Vec<u64> = g.iter().map(|p| p.ptr).collect();
    let shape = Shape {
        rank: 0,
        world: 1,
        block: 16,
    };
    let steps = plan(shape, &m, &calls).unwrap_or_default();
    let st = g[0].stream as CUstream;
    let _restore = tpcomm::cuda::SavedContext::save();
    for s in &steps {
        if let Step::Copy {
            from: Loc::Op(i, x),
            to: Loc::Op(j, y),
            bytes,
        } = *s
        {
            let (to, from) = (ptrs[j] + y as u64, ptrs[i] + x as u64);
            // SAFETY: the calls' contract: device buffers of this GPU of
            // their counts (the plan's ranges lie inside them), valid until
            // the stream runs the copy.
            let copied = unsafe { staging.copy(to, from, bytes, st) };
            if let Err(e) = copied {
                return standalone::fail(INTERNAL_ERROR, format!("{tag}: tpcomm failed ({e})"));
            }
        }
    }
    SUCCESS
}

/// The sends and receives `g` on `a` itself (peers are `a`'s ranks), `tag`
/// naming them in errors, where `a`'s rank `i` is called `ranks[i]` (a
/// pair's communicator: the ranks of the one the program made).
fn end_on(a: &StandaloneComm, g: &[Pending], ranks: &[usize], tag: &str) -> NcclResult {
    if a.solo.is_some() {
        let refs: Vec<&Pending> = g.iter().collect();
        return copy_to_self(a, &refs, tag);
    }
    let (rank, world) = (a.rank, a.world);
    let stream = g[0].stream;
    let calls = calls_of(g, world, |p| p.peer);
    let records = if world == 1 {
        Ok(vec![calls.record()])
    } else {
        swap(a, &calls.record())
    };
    let records = match records {
        Ok(r) => r,
        Err(e) => {
            return standalone::fail(
                SYSTEM_ERROR,
                format!("{tag}: the ranks did not meet to match their sends and receives ({e}); both ranks of a send and its receive must end a group holding them"),
            )
        }
    };
    let m = match sizes_of(&records, ranks) {
        Ok(m) => m,
        Err(e) => return standalone::fail(INVALID_USAGE, format!("{tag}: {e}")),
    };
    let ptrs: Vec<u64> = g.iter().map(|p| p.ptr).collect();
    let st = stream as CUstream;
    let l = match live(a, END) {
        Ok(l) => l,
        Err(r) => return r,
    };
    let block = expanded_block(l, world);
    let steps = staged_plan(l, (rank, world), block, |shape| plan(shape, &m, &calls));
    let Some(steps) = steps else {
        return staging_too_small(END, l, world, "round");
    };
    let stage = l.staging().ptr();
    let at = |x: Loc| match x {
        Loc::Op(i, o) => ptrs[i] + o as u64,
        Loc::Stage(o) => stage + o as u64,
        // Not in these plans.
        Loc::Send(_) | Loc::Recv(_) => 0,
    };
    run(END, a, stream as CudaStream, || {
        // This may be a thread of finish's: the kernels need the context.
        l.gpu()
            .context()
            .bind_to_thread()
            .map_err(|e| tpcomm::Error::Cuda {
                call: "cuCtxSetCurrent".into(),
                detail: e.to_string(),
            })?;
        // SAFETY: the calls' contract (nccl.h): device buffers of this GPU
        // of their counts, valid until the stream has run the group, on a
        // stream of this GPU; the plan's ranges lie inside them and inside
        // the staging buffer (its shape was checked against it above).
        unsafe { launch(l, world, &at, &steps, None, None, st) }
    })
}

/// Swaps this rank's record of its streams' lengths with every rank of the
/// communicator, under the number of this group (every rank ends its groups
/// in the same order).
fn swap(a: &StandaloneComm, mine: &[u8]) -> tpcomm::Result<Vec<Vec<u8>>> {
    let n = a
        .p2p_groups
        .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    standalone::comm::swap(a, &format!("p2p-{n}"), mine)
}
