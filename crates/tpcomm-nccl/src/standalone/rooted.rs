//! ncclReduce, ncclGather, ncclScatter and ncclAlltoAll on a standalone
//! communicator (docs/standalone.md): the arguments checked, then the plan
//! of rooted_plan.rs launched on the caller's stream (the byte-exact
//! all-gather or broadcast of expanded words through the staging buffer,
//! compacted or reduced in rank order), in pieces that fit the staging
//! buffer, so any count is served. Nothing here synchronises the host or
//! reads device memory, so every call can be captured in a CUDA graph; a
//! communicator of one rank copies.

use crate::standalone::collectives::solo_copy;
use crate::standalone::comm::{live, run, StandaloneComm, StandaloneGpu};
use crate::standalone::gathered::{self, expanded_block, staged_plan, staging_too_small};
use crate::standalone::rooted_plan::{plan, Kind, Loc, Step};
use crate::standalone::{self};
use crate::types::*;
use std::ffi::c_int;
use tpcomm::cuda::gathered::{ByteBlocks, Elem, Op, ReduceBlocks};
use tpcomm::cuda::{CUstream, Call, Collective, GpuTransport, Signature};
use tpcomm::DType;

/// Which call, as the exports name it (with the reduce's op).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum What {
    Reduce(NcclRedOp),
    Gather,
    Scatter,
    AllToAll,
}

impl What {
    pub(crate) fn name(self) -> &'static str {
        match self {
            What::Reduce(_) => "ncclReduce",
            What::Gather => "ncclGather",
            What::Scatter => "ncclScatter",
            What::AllToAll => "ncclAlltoAll",
        }
    }
}

/// Which buffers `rank` uses in `kind`: `(send, recv)`.
fn used(kind: Kind, rank: usize) -> (bool, bool) {
    match kind {
        Kind::Reduce { root, .. } | Kind::Gather { root } => (true, rank == root),
        Kind::Scatter { root } => (rank == root, true),
        Kind::AllToAll => (true, true),
    }
}

/// The checks every one of these calls makes first, in NCCL's codes
/// (ncclInvalidArgument for a root out of range, an unknown type or op, a
/// count whose buffers overflow, a NULL buffer this rank uses; `root` is
/// not read for an all-to-all); pre-multiplied sums are refused
/// (ncclInvalidUsage) as the all-reduce refuses them. `Ok` is the plan's
/// kind; every failure has its text for ncclGetLastError. `b.stream` is
/// not read.
pub(crate) fn check(
    what: What,
    rank: usize,
    world: usize,
    root: c_int,
    b: &Buffers,
) -> Result<Kind, NcclResult> {
    let (count, datatype, send, recv) = (b.count, b.dtype, b.send, b.recv);
    let call = what.name();
    let bad = |why: String| Err(standalone::fail(INVALID_ARGUMENT, format!("{call}: {why}")));
    if what != What::AllToAll && (root < 0 || root as usize >= world) {
        return bad(format!(
            "root {root} is not a rank of this {world}-rank communicator"
        ));
    }
    let r = root.max(0) as usize;
    let Some(z) = type_size(datatype) else {
        return bad(format!(
            "ncclDataType {datatype} is not an NCCL data type (0 to 11)"
        ));
    };
    if let What::Reduce(op) = what {
        if Op::from_nccl(op).is_none() {
            return bad(format!("ncclRedOp {op} is not an op of this communicator (neither built in, 0 to 4, nor made by ncclRedOpCreatePreMulSum on it)"));
        }
        if Elem::from_nccl(datatype).is_none() {
            return Err(standalone::unservable(
                call,
                &format!("ncclDataType {datatype} (tpcomm reduces types 0 to 11)"),
            ));
        }
    }
    let fits = count
        .checked_mul(z)
        .and_then(|b| b.checked_mul(world))
        .is_some_and(|b| b <= isize::MAX as usize);
    if !fits {
        return bad(format!(
            "count {count} of ncclDataType {datatype} overflows the buffers"
        ));
    }
    let kind = match what {
        What::Reduce(_) => Kind::Reduce {
            root: r,
            elem: z,
            recv_aligned: (recv as usize).is_multiple_of(z),
        },
        What::Gather => Kind::Gather { root: r },
        What::Scatter => Kind::Scatter { root: r },
        What::AllToAll => Kind::AllToAll,
    };
    let (s, rv) = used(kind, rank);
    if count > 0 && s && send == 0 {
        return bad("sendbuff is NULL".into());
    }
    if count > 0 && rv && recv == 0 {
        return bad("recvbuff is NULL".into());
    }
    Ok(kind)
}

/// The bytes of one gathered area of the staging buffer for `kind`: the
/// expanded all-gather's, shrunk further until a broadcast of a whole area
/// fits the transport too (scatter).
fn block_for(l: &StandaloneGpu, world: usize, kind: Kind) -> Option<usize> {
    let mut block = expanded_block(l, world)?;
    if let Kind::Scatter { root } = kind {
        let what = Collective::Broadcast { root };
        while block >= 16 && !l.gpu().collective_fits(what, block / 2, DType::F16) {
            block = (block / 2) / 16 * 16;
        }
    }
    (block >= 16).then_some(block)
}

/// Runs `kind` for `b.count` elements of `b.dtype`: one rank copies;
/// otherwise the plan's steps are launched (through the launch gate) on the
/// stream.
fn serve(
    call: &str,
    a: &StandaloneComm,
    kind: Kind,
    b: &Buffers,
    red: Option<(Elem, Op)>,
    sig: Signature,
) -> NcclResult {
    if let Some(solo) = &a.solo {
        return solo_copy(call, a, solo, b);
    }
    let (count, datatype, stream) = (b.count, b.dtype, b.stream);
    let l = match live(a, call) {
        Ok(l) => l,
        Err(r) => return r,
    };
    if count == 0 {
        return SUCCESS;
    }
    let z = type_size(datatype).unwrap_or(1);
    let block = block_for(l, a.world, kind);
    let steps = staged_plan(l, (a.rank, a.world), block, |shape| {
        plan(kind, shape, count, z)
    });
    let Some(steps) = steps else {
        return staging_too_small(call, l, a.world, "piece");
    };
    let (s, r, stage) = (b.send, b.recv, l.staging().ptr());
    let at = move |x: Loc| match x {
        Loc::Send(o) => s + o as u64,
        Loc::Recv(o) => r + o as u64,
        Loc::Stage(o) => stage + o as u64,
        // Not in these plans.
        Loc::Op(..) => 0,
    };
    run(call, a, stream, || {
        // SAFETY: the call's contract (nccl.h): device buffers of this GPU,
        // as large as the call says (rooted_plan.rs's steps stay inside
        // them, and touch a non-root's unused buffer nowhere), valid until
        // the stream has run the call, on a stream of this GPU; the staging
        // offsets stay inside the staging buffer (block_for sized it).
        unsafe { launch(l, a.world, &at, &steps, red, Some(sig), stream as CUstream) }
    })
}

/// Launches `steps` on `st`, in order, each place at the address `at` gives.
///
/// # Safety
/// Every step's range lies inside the buffer it names (at `at`'s address:
/// the caller's buffers or the staging buffer of `l`), device memory of
/// `l`'s GPU valid until `st` has run them.
pub(crate) unsafe fn launch(
    l: &StandaloneGpu,
    world: usize,
    at: &dyn Fn(Loc) -> u64,
    steps: &[Step],
    red: Option<(Elem, Op)>,
    sig: Option<Signature>,
    st: CUstream,
) -> tpcomm::Result<()> {
    let coll = |what, from, to, words| {
        let call = Call::new(at(from), at(to), words, DType::F16, st);
        let call = sig.map_or(call, |s| call.with_signature(s));
        // SAFETY: the caller's contract; the gathered area and this rank's
        // own area of the staging buffer are disjoint.
        unsafe { l.gpu().run_collective(what, &call) }
    };
    for step in steps {
        // SAFETY: the caller's contract covers every range named here.
        unsafe {
            match *step {
                Step::Convert(form, c) => {
                    let b = ByteBlocks {
                        input: at(c.from),
                        in_stride: c.from_stride as u64,
                        output: at(c.to),
                        out_stride: c.to_stride as u64,
                        nbytes: c.nbytes,
                        blocks: c.blocks,
                    };
                    l.gathered.convert(form, &b, st)?
                }
                Step::AllGather { from, to, words } => {
                    coll(Collective::AllGather, from, to, words)?
                }
                Step::Broadcast {
                    root,
                    from,
                    to,
                    words,
                } => coll(Collective::Broadcast { root }, from, to, words)?,
                Step::Reduce {
                    from,
                    stride,
                    to,
                    count,
                } => {
                    let (elem, op) = red.ok_or_else(|| {
                        tpcomm::Error::invalid("standalone reduce", "a reduction without an op")
                    })?;
                    let b = ReduceBlocks {
                        input: at(from),
                        stride: stride as u64,
                        world,
                        output: at(to),
                        count,
                        elem,
                    };
                    l.gathered.reduce(&b, op, st)?
                }
                Step::Copy { from, to, bytes } => l.staging().copy(at(to), at(from), bytes, st)?,
            }
        }
    }
    Ok(())
}

/// `ncclReduce`, `ncclGather`, `ncclScatter` or `ncclAlltoAll` on a
/// standalone communicator (`root` is not read for an all-to-all):
///
/// - reduce: every type 0 to 9 with sum, prod, max, min or avg, reduced in
///   rank order (the gathered all-reduce's arithmetic: integers wrapping,
///   f16/bf16 in f32 rounded once) into the root's receive buffer only;
/// - gather: rank `r`'s block to block `r` of the root's receive buffer;
/// - scatter: block `r` of the root's send buffer to rank `r`;
/// - all-to-all: block `j` of rank `i`'s send buffer to block `i` of rank
///   `j`'s receive buffer;
///
/// any type (the bytes only move, exactly), `b.count` elements a block.
pub fn rooted(what: What, a: &StandaloneComm, b: &Buffers, root: c_int) -> NcclResult {
    if let What::Reduce(op) = what {
        if Op::from_nccl(op).is_none() && a.premul.get(op).is_some() {
            // A pre-multiplied sum: the buffers and root checked as a sum's,
            // then the all-reduce's gathered path, reduced on the root only.
            if let Err(r) = check(What::Reduce(OP_SUM), a.rank, a.world, root, b) {
                return r;
            }
            if a.solo.is_some() {
                return standalone::unservable(
                    what.name(),
                    &format!("ncclRedOp {op} (a pre-multiplied sum) on one rank"),
                );
            }
            return gathered::reduce_gathered(a, b, op, Some(root as usize));
        }
    }
    let kind = match check(what, a.rank, a.world, root, b) {
        Ok(k) => k,
        Err(r) => return r,
    };
    let red = match what {
        What::Reduce(op) => Elem::from_nccl(b.dtype).zip(Op::from_nccl(op)),
        _ => None,
    };
    // Every rank's call words say the NCCL type, op and root it asked for.
    let sig = signature(
        b.dtype,
        match what {
            What::Reduce(op) => op,
            _ => OP_SUM,
        },
        (what != What::AllToAll).then_some(root.max(0) as usize),
    );
    serve(what.name(), a, kind, b, red, sig)
}
