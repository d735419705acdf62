//! ncclSend and ncclRecv on a standalone communicator (docs/standalone.md).
//!
//! A call is checked and kept until its group ends (the outermost
//! ncclGroupEnd; a call outside any group is a group of its own). There,
//! per communicator, the ranks swap the lengths of their streams (each
//! rank's bytes to and from every rank) through the meeting place, every
//! rank checks that every sender and receiver agree, and each rank launches
//! its part of p2p_plan.rs's all-to-all-v on the calls' stream. The kernels
//! of every path are collectives of all the communicator's ranks, so every
//! rank must end each group of sends and receives (a rank with nothing to
//! send or receive too cannot know it should: a rank that never comes
//! makes the others fail after TPCOMM_TIMEOUT_S, naming it).
//!
//! One thread may issue every rank's calls inside one group (ranks as
//! threads sharing a GPU): at the group's end each communicator's part runs
//! on a thread of its own, as create.rs makes a group's ranks, so no rank
//! waits for a rank its thread has not reached yet.

use crate::standalone::comm::{live, run, StandaloneComm};
use crate::standalone::gathered::{expanded_block, staged_plan, staging_too_small};
use crate::standalone::p2p_plan::{plan, sizes, Calls};
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

/// One communicator's sends and receives of a group, in call order.
fn end(g: &[Pending]) -> NcclResult {
    let a = &g[0].a;
    let (rank, world) = (a.rank, a.world);
    let tag = format!("{END} rank {rank}/{world}");
    let stream = g[0].stream;
    if g.iter().any(|p| p.stream != stream) {
        return standalone::unservable(
            END,
            "the sends and receives of one communicator in one group must use one stream",
        );
    }
    let mut calls = Calls::new(world);
    for (i, p) in g.iter().enumerate() {
        let side = if p.send {
            &mut calls.sends
        } else {
            &mut calls.recvs
        };
        side[p.peer].push((i, p.bytes));
    }
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
                format!("{tag}: the ranks did not meet to match their sends and receives ({e}); every rank of the communicator must end each group of sends and receives"),
            )
        }
    };
    let m = match sizes(&records) {
        Ok(m) => m,
        Err(e) => return standalone::fail(INVALID_USAGE, format!("{tag}: {e}")),
    };
    let ptrs: Vec<u64> = g.iter().map(|p| p.ptr).collect();
    let st = stream as CUstream;
    if let Some(solo) = &a.solo {
        // One rank: its sends to itself copied onto its receives.
        let shape = Shape {
            rank: 0,
            world: 1,
            block: 16,
        };
        let steps = plan(shape, &m, &calls).unwrap_or_default();
        return run(END, a, stream as CudaStream, || {
            for s in &steps {
                if let Step::Copy {
                    from: Loc::Op(i, x),
                    to: Loc::Op(j, y),
                    bytes,
                } = *s
                {
                    // SAFETY: the calls' contract: device buffers of this
                    // GPU of their counts (the plan's ranges lie inside
                    // them), valid until the stream runs the copy.
                    unsafe { solo.copy(ptrs[j] + y as u64, ptrs[i] + x as u64, bytes, st)? };
                }
            }
            Ok(())
        });
    }
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
