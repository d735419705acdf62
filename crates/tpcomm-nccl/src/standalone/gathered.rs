//! The standalone communicator's byte-exact paths (docs/standalone.md):
//! all-reduces of the types and ops the collective kernels do not sum, and
//! all-gathers and broadcasts of bytes that must arrive exactly (integers,
//! f64, fp8), through the expanded form and the reduction of gathered blocks
//! (`tpcomm::cuda::gathered`).

use crate::standalone;
use crate::standalone::comm::{live, run, StandaloneComm, StandaloneGpu};
use crate::standalone::premul::Scalar;
use crate::standalone::rooted_plan::{Shape, Step};
use crate::types::*;
use tpcomm::cuda::gathered::{ByteBlocks, Form, ReduceBlocks, SCALAR_BYTES};
use tpcomm::cuda::{gathered, CUstream, Call, Collective, GpuTransport, Signature};
use tpcomm::DType;

/// `ncclAllReduce` of a type or op the collective kernels do not sum
/// (integers, f64; prod, max, min, avg; f32/f16/bf16 with ops other than
/// sum), in pieces: each rank's piece is expanded into the staging buffer
/// (every byte a 16-bit word, so no value looks like the kernels' arrival
/// sentinel: gathered.rs), all-gathered into the staging buffer ahead of it,
/// and reduced in rank order by the gathered-block kernel into `recv` (the
/// same bits on every rank). The torch barrier's one-element all-reduce
/// takes this path. With a `root` it is `ncclReduce`: every rank gathers,
/// only the root reduces into its `recv` (the others' is not touched), and
/// the call words carry the root.
pub(crate) fn reduce_gathered(
    a: &StandaloneComm,
    b: &Buffers,
    op: NcclRedOp,
    root: Option<usize>,
) -> NcclResult {
    let call = if root.is_some() {
        "ncclReduce"
    } else {
        "ncclAllReduce"
    };
    let reduces = root.is_none_or(|r| r == a.rank);
    let (send, recv) = (b.send, b.recv);
    // Elements per piece: their expanded bytes fill at most one block (less
    // the scalar's place at its end, for a pre-multiplied sum).
    let per_block = |block, z| (block / 2) / z;
    by_pieces(call, a, b, (op, root), reduces, per_block, |p, done, n| {
        let z = p.elem.size();
        let off = (done * z) as u64;
        // SAFETY: ncclAllReduce's contract: device buffers of this GPU
        // of `count` elements, valid until the stream runs the call, on
        // a stream of this GPU; the piece lies inside them. The staging
        // regions (world gathered blocks, then this rank's expanded
        // piece) are disjoint and inside the staging buffer
        // (expanded_block sized them); all on the stream, in order.
        unsafe {
            gather_expanded(p.l, send + off, n * z, &p.area, p.st)?;
            if reduces {
                let blocks = ReduceBlocks {
                    input: p.area.base,
                    stride: p.block as u64,
                    world: a.world,
                    output: recv + off,
                    count: n,
                    elem: p.elem,
                };
                reduce(p.l, p.gop, &blocks, p.scalar_at, p.st)?;
            }
        }
        Ok(())
    })
}

/// `ncclReduceScatter` of a type or op the collective kernels do not sum,
/// in pieces of `n` elements of every rank's block: each rank expands the
/// piece of each of its `world` input blocks side by side into its staging
/// block, the expanded pieces are all-gathered, and the reduction kernel
/// reduces, in rank order, this rank's block of every sender into `recv`.
pub(crate) fn reduce_scatter_gathered(
    a: &StandaloneComm,
    b: &Buffers,
    op: NcclRedOp,
) -> NcclResult {
    const CALL: &str = "ncclReduceScatter";
    let (send, recv, count) = (b.send, b.recv, b.count);
    let world = a.world;
    let per_block = |block, z| block / (2 * z * world);
    by_pieces(CALL, a, b, (op, None), true, per_block, |p, done, n| {
        let (z, st) = (p.elem.size(), p.st);
        let off = (done * z) as u64;
        let piece = (2 * n * z) as u64;
        // SAFETY: ncclReduceScatter's contract: sendbuff holds world
        // blocks of `count` elements and recvbuff one (or this rank's
        // block of sendbuff), device memory of this GPU valid until the
        // stream runs the call; the pieces lie inside them (a later
        // piece reads only elements past what an in-place call has
        // written). The expanded pieces (world x `piece` bytes) fit
        // this rank's staging block (per was sized from it); in order.
        unsafe {
            let side_by_side = ByteBlocks {
                input: send + off,
                in_stride: (count * z) as u64,
                output: p.area.mine,
                out_stride: piece,
                nbytes: n * z,
                blocks: world,
            };
            p.l.gathered.convert(Form::Expand, &side_by_side, st)?;
            p.l.gpu()
                .run_collective(Collective::AllGather, &p.area.words(st))?;
            // This rank's piece of every block, and each block's
            // scalar at its end (scalar_at from the block's start).
            let blocks = ReduceBlocks {
                input: p.area.base + a.rank as u64 * piece,
                stride: p.block as u64,
                world,
                output: recv + off,
                count: n,
                elem: p.elem,
            };
            reduce(p.l, p.gop, &blocks, p.scalar_at - a.rank as u64 * piece, st)?;
        }
        Ok(())
    })
}

/// What a piece of a gathered reduction runs with: the checks' result, the
/// staging area, where this rank's scalar sits in its block, the stream.
struct Piecewise<'a> {
    elem: gathered::Elem,
    gop: Reduction,
    l: &'a StandaloneGpu,
    /// Bytes of one rank's expanded block in the staging buffer.
    block: usize,
    area: Area,
    /// The scalar's offset from the start of this rank's staging block
    /// (the last SCALAR_BYTES, which no piece reaches).
    scalar_at: u64,
    st: CUstream,
}

/// What both gathered reductions share: the checks ([`prepare`], with
/// `writes_recv` and `per_block`), then on the stream the op's scalar at
/// the end of this rank's staging block and `piece(p, done, n)` for each
/// piece of `n` elements from element `done`, in order. The call words
/// carry `root`.
fn by_pieces(
    call: &str,
    a: &StandaloneComm,
    b: &Buffers,
    (op, root): (NcclRedOp, Option<usize>),
    writes_recv: bool,
    per_block: impl Fn(usize, usize) -> usize,
    mut piece: impl FnMut(&Piecewise, usize, usize) -> tpcomm::Result<()>,
) -> NcclResult {
    let p = match prepare(call, a, b, op, writes_recv, per_block) {
        Ok(Some(p)) => p,
        Ok(None) => return SUCCESS,
        Err(refused) => return refused,
    };
    let Prepared {
        elem,
        gop,
        l,
        block,
        per,
    } = p;
    let w = Piecewise {
        elem,
        gop,
        l,
        block,
        area: Area::of(l, a.world, block, signature(b.dtype, op, root)),
        scalar_at: (block - SCALAR_BYTES) as u64,
        st: b.stream as CUstream,
    };
    run(call, a, b.stream, || {
        // SAFETY: the last SCALAR_BYTES of this rank's staging block, which
        // no piece reaches (prepare sized `per` without them); in order.
        unsafe { put_scalar(l, gop, elem.size(), w.area.mine + w.scalar_at, w.st)? };
        let mut done = 0;
        while done < b.count {
            let n = per.min(b.count - done);
            piece(&w, done, n)?;
            done += n;
        }
        Ok(())
    })
}

/// The reduction a gathered call runs: a built-in op, or a pre-multiplied
/// sum with where this rank's scalar is (premul.rs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reduction {
    Builtin(gathered::Op),
    PreMul(Scalar),
}

/// The element type and reduction of `datatype` and `op` on `a`, or the
/// call's answer: a type the kernels lack is refused (ncclInvalidUsage); an
/// op that is neither built in (0-4) nor a live pre-multiplied sum of this
/// communicator, or one made for another type, is ncclInvalidArgument;
/// each with the text for ncclGetLastError. A rooted call (ncclReduce) may
/// run the same reduction: resolve, then [`put_scalar`] and [`reduce`].
pub(crate) fn resolve(
    call: &str,
    a: &StandaloneComm,
    datatype: NcclDataType,
    op: NcclRedOp,
) -> Result<(gathered::Elem, Reduction), NcclResult> {
    let r = match gathered::Op::from_nccl(op) {
        Some(g) => Reduction::Builtin(g),
        None => match a.premul.get(op) {
            Some(p) if p.datatype == datatype => Reduction::PreMul(p.scalar),
            Some(p) => {
                return Err(standalone::fail(
                    INVALID_ARGUMENT,
                    format!(
                        "{call}: ncclRedOp {op} was made by ncclRedOpCreatePreMulSum for ncclDataType {}, not {datatype}",
                        p.datatype
                    ),
                ))
            }
            None => {
                return Err(standalone::fail(
                    INVALID_ARGUMENT,
                    format!(
                        "{call}: ncclRedOp {op} is not an op of this communicator (neither built in, 0 to 4, nor made by ncclRedOpCreatePreMulSum on it and not destroyed)"
                    ),
                ))
            }
        },
    };
    let Some(elem) = gathered::Elem::from_nccl(datatype) else {
        return Err(standalone::unservable(
            call,
            &format!("ncclDataType {datatype} with ncclRedOp {op} (tpcomm serves types 0 to 11 with sum, prod, max, min, avg and pre-multiplied sums)"),
        ));
    };
    Ok((elem, r))
}

/// Puts this rank's scalar of a pre-multiplied sum, expanded, at `at` in
/// stream order (a host scalar as the value, a device one copied from its
/// pointer when the stream gets there); nothing for a built-in op.
///
/// # Safety
/// `at` is `SCALAR_BYTES` of this GPU's memory (the staging buffer), valid
/// until the stream runs the call; a device scalar points to one element of
/// `z` bytes of this GPU's memory, valid then.
pub(crate) unsafe fn put_scalar(
    l: &StandaloneGpu,
    r: Reduction,
    z: usize,
    at: u64,
    st: CUstream,
) -> tpcomm::Result<()> {
    // SAFETY: forwarded from the caller.
    unsafe {
        match r {
            Reduction::Builtin(_) => Ok(()),
            Reduction::PreMul(Scalar::Host(v)) => l.gathered.put_immediate(v, z, at, st),
            Reduction::PreMul(Scalar::Device(p)) => {
                l.gathered
                    .convert(Form::Expand, &ByteBlocks::one(p, at, z), st)
            }
        }
    }
}

/// The reduction kernel of `r` over `blocks` (for a pre-multiplied sum,
/// each gathered block with its scalar `scalar` bytes from its start).
///
/// # Safety
/// As `gathered::Kernels::reduce` (and `reduce_premul`) ask.
pub(crate) unsafe fn reduce(
    l: &StandaloneGpu,
    r: Reduction,
    blocks: &ReduceBlocks,
    scalar: u64,
    st: CUstream,
) -> tpcomm::Result<()> {
    // SAFETY: forwarded from the caller.
    unsafe {
        match r {
            Reduction::Builtin(op) => l.gathered.reduce(blocks, op, st),
            Reduction::PreMul(_) => l.gathered.reduce_premul(blocks, scalar, st),
        }
    }
}

/// What a gathered all-reduce or reduce-scatter runs with.
struct Prepared<'a> {
    elem: gathered::Elem,
    gop: Reduction,
    l: &'a StandaloneGpu,
    /// Bytes of one rank's expanded block in the staging buffer.
    block: usize,
    /// Elements per piece (`per_block(block, element size)`), at least 1.
    per: usize,
}

/// The checks both gathered reductions make first: a type and op the
/// reduction kernel has ([`resolve`]), a GPU side, a receive buffer aligned
/// to the type, and a staging buffer that holds a piece; `per_block` is
/// given the bytes of a block the pieces may fill (a block less the
/// scalar's place at its end). `Ok(None)`: nothing to do (no elements);
/// `Err`: the call's refusal.
fn prepare<'a>(
    call: &str,
    a: &'a StandaloneComm,
    b: &Buffers,
    op: NcclRedOp,
    writes_recv: bool,
    per_block: impl Fn(usize, usize) -> usize,
) -> Result<Option<Prepared<'a>>, NcclResult> {
    let (elem, gop) = resolve(call, a, b.dtype, op)?;
    let l = live(a, call)?;
    if b.count == 0 {
        return Ok(None);
    }
    let z = elem.size();
    if writes_recv && !(b.recv as usize).is_multiple_of(z) {
        return Err(standalone::unservable(
            call,
            "the receive buffer is not aligned to its element type",
        ));
    }
    let block = expanded_block(l, a.world).unwrap_or(0);
    let per = if block < 2 * SCALAR_BYTES {
        0
    } else {
        per_block(block - SCALAR_BYTES, z)
    };
    if per == 0 {
        return Err(staging_too_small(call, l, a.world, "piece"));
    }
    Ok(Some(Prepared {
        elem,
        gop,
        l,
        block,
        per,
    }))
}

/// Whether a standalone all-reduce or reduce-scatter of `datatype` and `op`
/// goes to the gathered path: everything but the sums of f32, f16 and bf16
/// the collective kernels take (and a one-rank communicator, which copies).
pub(crate) fn takes(a: &StandaloneComm, datatype: NcclDataType, op: NcclRedOp) -> bool {
    a.solo.is_none() && !(dtype_of(datatype).is_some() && op == OP_SUM)
}

/// `call` refused: the staging buffer holds no `what` (a piece of a call,
/// a round of a group) for `world` ranks.
pub(crate) fn staging_too_small(
    call: &str,
    l: &StandaloneGpu,
    world: usize,
    what: &str,
) -> NcclResult {
    let bytes = l.staging().bytes();
    standalone::unservable(
        call,
        &format!("the staging buffer ({bytes} bytes) holds no {what} for {world} ranks; raise TPCOMM_MAX_BYTES"),
    )
}

/// The steps `plan` makes for this rank (`rank` of `world`) with gathered
/// areas of `block` bytes, when there is a block and the steps' staging
/// offsets (below `Shape::staging_bytes`, rooted_plan.rs) fit the staging
/// buffer.
pub(crate) fn staged_plan(
    l: &StandaloneGpu,
    (rank, world): (usize, usize),
    block: Option<usize>,
    plan: impl FnOnce(Shape) -> Option<Vec<Step>>,
) -> Option<Vec<Step>> {
    let shape = Shape {
        rank,
        world,
        block: block?,
    };
    if shape.staging_bytes() > l.staging().bytes() {
        return None;
    }
    plan(shape)
}

/// Bytes of one rank's expanded block in the staging buffer when it holds
/// `world` gathered blocks and this rank's own: a multiple of 16 that the
/// transport's all-gather takes; None when not even 16 bytes fit.
pub(crate) fn expanded_block(l: &StandaloneGpu, world: usize) -> Option<usize> {
    let mut block = (l.staging().bytes() / (world + 1)) / 16 * 16;
    while block >= 16
        && !l
            .gpu()
            .collective_fits(Collective::AllGather, block / 2, DType::F16)
    {
        block = (block / 2) / 16 * 16;
    }
    (block >= 16).then_some(block)
}

/// Where a gathered call's pieces go in the staging buffer: `world`
/// expanded blocks of `block` bytes at `base`, then this rank's own block
/// at `mine`, and what every rank's call word says the caller asked for.
#[derive(Clone, Copy)]
pub(crate) struct Area {
    pub base: u64,
    pub mine: u64,
    pub block: usize,
    pub sig: Signature,
}

impl Area {
    /// The staging buffer of `l` laid out for `world` blocks of `block`.
    pub(crate) fn of(l: &StandaloneGpu, world: usize, block: usize, sig: Signature) -> Area {
        let base = l.staging().ptr();
        Area {
            base,
            mine: base + (world * block) as u64,
            block,
            sig,
        }
    }

    /// The kernels' call moving this rank's expanded block to every rank's
    /// place (an all-gather) or the root's to all (a broadcast), as 16-bit
    /// words.
    fn words(&self, st: CUstream) -> Call {
        Call::new(self.mine, self.base, self.block / 2, DType::F16, st).with_signature(self.sig)
    }
}

/// Expands `bytes` plain bytes at `piece` into this rank's staging block
/// and all-gathers the expanded blocks into the staging area.
///
/// # Safety
/// `piece` holds `bytes` bytes of this GPU's memory; `area` lies inside
/// the staging buffer of `l` (expanded_block sized it), and
/// `2 * bytes <= area.block`.
unsafe fn gather_expanded(
    l: &StandaloneGpu,
    piece: u64,
    bytes: usize,
    area: &Area,
    st: CUstream,
) -> tpcomm::Result<()> {
    // SAFETY: forwarded from the caller; all on `st`, in order.
    unsafe {
        l.gathered
            .convert(Form::Expand, &ByteBlocks::one(piece, area.mine, bytes), st)?;
        l.gpu()
            .run_collective(Collective::AllGather, &area.words(st))
    }
}

/// All-gather (`root` None) or broadcast of bytes that must arrive exactly
/// (integers, f64, fp8, unaligned blocks): in pieces, each rank's (or the
/// root's) piece expanded into the staging buffer, moved as 16-bit words,
/// and compacted into `b.recv`; `nbytes` is the bytes of `b.count` elements.
pub(crate) fn exact_bytes(
    call: &str,
    a: &StandaloneComm,
    l: &StandaloneGpu,
    b: &Buffers,
    nbytes: usize,
    root: Option<usize>,
) -> NcclResult {
    let (send, recv, stream) = (b.send, b.recv, b.stream);
    let Some(block) = expanded_block(l, a.world) else {
        return staging_too_small(call, l, a.world, "piece");
    };
    let per = block / 2;
    let st = stream as CUstream;
    let area = Area::of(l, a.world, block, signature(b.dtype, OP_SUM, None));
    let (base, mine) = (area.base, area.mine);
    run(call, a, stream, || {
        let mut done = 0;
        while done < nbytes {
            let m = per.min(nbytes - done);
            let off = done as u64;
            // SAFETY: the call's contract: device buffers of this GPU
            // (sendbuff of one block, read on the root only for a broadcast;
            // recvbuff of world blocks for an all-gather, one for a
            // broadcast), valid until the stream runs the call; the pieces
            // lie inside them; the staging regions are disjoint and inside
            // the staging buffer (expanded_block sized them); in order.
            unsafe {
                match root {
                    None => {
                        gather_expanded(l, send + off, m, &area, st)?;
                        let every_rank = ByteBlocks {
                            input: base,
                            in_stride: block as u64,
                            output: recv + off,
                            out_stride: nbytes as u64,
                            nbytes: m,
                            blocks: a.world,
                        };
                        l.gathered.convert(Form::Compact, &every_rank, st)?;
                    }
                    Some(r) => {
                        if r == a.rank {
                            let piece = ByteBlocks::one(send + off, mine, m);
                            l.gathered.convert(Form::Expand, &piece, st)?;
                        }
                        l.gpu()
                            .run_collective(Collective::Broadcast { root: r }, &area.words(st))?;
                        let piece = ByteBlocks::one(base, recv + off, m);
                        l.gathered.convert(Form::Compact, &piece, st)?;
                    }
                }
            }
            done += m;
        }
        Ok(())
    })
}
