//! The standalone communicator's direct paths (docs/standalone.md): sums of
//! f32, f16 and bf16 (all-reduce, reduce-scatter) and all-gathers and
//! broadcasts of bytes that may travel as floats, on tpcomm's collective
//! kernels; a communicator of one rank copies. Every other type and op goes
//! to gathered.rs.

use crate::settings;
use crate::standalone;
use crate::standalone::comm::{live, run, StandaloneComm, StandaloneGpu};
use crate::standalone::gathered;
use crate::types::*;
use std::ffi::c_int;
use tpcomm::cuda::{CUstream, Call, Collective, GpuComm, GpuTransport, Rows, Staging};
use tpcomm::DType;

/// A call on a communicator of one rank: `b.count` elements of `b.dtype`
/// copied from `b.send` to `b.recv` on `b.stream` (nothing when they are the
/// same buffer), which is every collective's result with one rank.
pub(crate) fn solo_copy(call: &str, a: &StandaloneComm, solo: &Staging, b: &Buffers) -> NcclResult {
    let Buffers {
        send,
        recv,
        count,
        dtype: datatype,
        stream,
    } = *b;
    let Some(bytes) = type_size(datatype).and_then(|z| z.checked_mul(count)) else {
        return standalone::unservable(call, &format!("ncclDataType {datatype}"));
    };
    if bytes == 0 || send == recv {
        return SUCCESS;
    }
    run(call, a, stream, || {
        // SAFETY: the call's contract: device buffers of this GPU holding
        // `count` elements, valid until the stream runs the copy, and a
        // stream of this GPU's context (the staging buffer's).
        unsafe { solo.copy(recv, send, bytes, stream as CUstream) }
    })
}

/// The ops that leave one rank's values as they are (sum, prod, max, min,
/// avg); pre-multiplied sums scale them.
pub(crate) fn identity_alone(op: NcclRedOp) -> bool {
    (0..=4).contains(&op)
}

/// The kernel type the NCCL type `t` travels as through the collective
/// kernels of an all-gather or broadcast (which only copy): f32 as f32, f16
/// and bf16 as f16 (an all-ones word arrives as a NaN with its sign bit
/// cleared there, still a NaN of these types, but it would change an
/// integer, f64 or fp8 value); every other type goes byte-exact. It depends on the
/// type alone, never on an address, so every rank picks the same kernels.
pub(crate) fn travels_as(t: NcclDataType) -> Option<DType> {
    match t {
        7 => Some(DType::F32),
        6 | 9 => Some(DType::F16),
        _ => None,
    }
}

/// Elements of `dt` per piece when a call goes through the staging buffer
/// `world + 1` pieces at a time (a block's piece and the world's): a
/// multiple of 16 bytes the transport takes for `what`; 0 when none fits.
fn staged_piece(gpu: &GpuComm, staging: usize, world: usize, what: Collective, dt: DType) -> usize {
    let mut n = (staging / (world + 1)) / 16 * 16 / dt.size();
    while n > 0 && !gpu.collective_fits(what, n, dt) {
        n = ((n / 2) * dt.size()) / 16 * 16 / dt.size();
    }
    n
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
fn summing<'a>(
    call: &str,
    a: &'a StandaloneComm,
    b: &Buffers,
    op: NcclRedOp,
) -> Result<(DType, &'a StandaloneGpu), NcclResult> {
    let datatype = b.dtype;
    if let Some(solo) = &a.solo {
        if !identity_alone(op) {
            // An op this communicator does not have is an invalid argument;
            // a pre-multiplied sum it made is not served on one rank.
            gathered::resolve(call, a, datatype, op)?;
            return Err(standalone::unservable(
                call,
                &format!("ncclRedOp {op} (a pre-multiplied sum) on one rank"),
            ));
        }
        return Err(solo_copy(call, a, solo, b));
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
    if b.count == 0 {
        return Err(SUCCESS);
    }
    Ok((dt, l))
}

/// `ncclAllReduce` on a standalone communicator: sums of f32, f16 and bf16
/// on the kernels, in pieces of at most TPCOMM_MAX_BYTES, through the
/// staging buffer when a buffer is not 16-byte aligned.
pub fn all_reduce(a: &StandaloneComm, b: &Buffers, op: NcclRedOp) -> NcclResult {
    const CALL: &str = "ncclAllReduce";
    // Sums of f32, f16 and bf16 run on the collective kernels; every other
    // type and op gathers the blocks and reduces them (reduce_gathered).
    if gathered::takes(a, b.dtype, op) {
        return gathered::reduce_gathered(a, b, op, None);
    }
    let (dt, l) = match summing(CALL, a, b, op) {
        Ok(run) => run,
        Err(done) => return done,
    };
    let per = (l.staging().bytes() / 16 * 16) / dt.size();
    if per == 0 {
        return standalone::unservable(CALL, "the staging buffer is smaller than 16 bytes");
    }
    let (count, st) = (b.count, b.stream as CUstream);
    run(CALL, a, b.stream, || {
        let mut done = 0;
        while done < count {
            let n = per.min(count - done);
            let off = (done * dt.size()) as u64;
            let (s, r) = (b.send + off, b.recv + off);
            let bytes = n * dt.size();
            // SAFETY: ncclAllReduce's contract: device buffers of this
            // communicator's GPU of `count` elements, valid until the stream
            // runs the call, and a stream of that GPU; this piece is inside
            // them. Unaligned pieces go through the staging buffer, which
            // holds a piece (`per` was sized from it); all on the stream.
            unsafe {
                if s.is_multiple_of(16) && r.is_multiple_of(16) {
                    l.gpu().all_reduce(&Call::new(s, r, n, dt, st))?;
                } else {
                    let p = l.staging().ptr();
                    l.staging().copy(p, s, bytes, st)?;
                    l.gpu().all_reduce(&Call::new(p, p, n, dt, st))?;
                    l.staging().copy(r, p, bytes, st)?;
                }
            }
            done += n;
        }
        Ok(())
    })
}

/// `ncclAllGather` on a standalone communicator: any type (the bytes are
/// only copied), a block within the transport's buffers.
pub fn all_gather(a: &StandaloneComm, b: &Buffers) -> NcclResult {
    const CALL: &str = "ncclAllGather";
    if let Some(solo) = &a.solo {
        return solo_copy(CALL, a, solo, b);
    }
    let (count, datatype) = (b.count, b.dtype);
    let l = match live(a, CALL) {
        Ok(l) => l,
        Err(r) => return r,
    };
    if count == 0 {
        return SUCCESS;
    }
    let Some(dt) = travels_as(datatype) else {
        let Some(nbytes) = type_size(datatype).and_then(|z| z.checked_mul(count)) else {
            return standalone::unservable(CALL, &format!("ncclDataType {datatype}"));
        };
        return gathered::exact_bytes(CALL, a, l, b, nbytes, None);
    };
    let n = count;
    if !l.gpu().collective_fits(Collective::AllGather, n, dt) {
        return staged(Collective::AllGather, a, l, b, dt);
    }
    run(CALL, a, b.stream, || {
        // SAFETY: ncclAllGather's contract is the kernels': device buffers
        // of this GPU, sendbuff of one block and recvbuff of world blocks
        // (or sendbuff at this rank's block of it), valid until the stream
        // runs the call; the block is the same bytes counted as `dt`.
        unsafe {
            l.gpu()
                .run_collective(Collective::AllGather, &kernel_call(b, dt))
        }
    })
}

/// `ncclReduceScatter` on a standalone communicator: sums of f32, f16 and
/// bf16, a block within the transport's buffers.
pub fn reduce_scatter(a: &StandaloneComm, b: &Buffers, op: NcclRedOp) -> NcclResult {
    const CALL: &str = "ncclReduceScatter";
    // As ncclAllReduce: the kernels sum f32, f16 and bf16; every other type
    // and op gathers the blocks and reduces this rank's (gathered.rs).
    if gathered::takes(a, b.dtype, op) {
        return gathered::reduce_scatter_gathered(a, b, op);
    }
    let (dt, l) = match summing(CALL, a, b, op) {
        Ok(run) => run,
        Err(done) => return done,
    };
    if !l
        .gpu()
        .collective_fits(Collective::ReduceScatter, b.count, dt)
    {
        return staged(Collective::ReduceScatter, a, l, b, dt);
    }
    run(CALL, a, b.stream, || {
        // SAFETY: as in all_gather, with sendbuff of world blocks and
        // recvbuff of one (or at this rank's block of sendbuff).
        unsafe {
            l.gpu()
                .run_collective(Collective::ReduceScatter, &kernel_call(b, dt))
        }
    })
}

/// `ncclBroadcast` (and `ncclBcast`, in place) on a standalone
/// communicator: any type, in pieces that fit the transport's buffers.
pub fn broadcast(call: &'static str, a: &StandaloneComm, b: &Buffers, root: c_int) -> NcclResult {
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
        return solo_copy(call, a, solo, b);
    }
    let (count, datatype) = (b.count, b.dtype);
    let l = match live(a, call) {
        Ok(l) => l,
        Err(r) => return r,
    };
    if count == 0 {
        return SUCCESS;
    }
    let direct = travels_as(datatype).map(|dt| (dt, count));
    let Some((dt, total)) = direct else {
        let Some(nbytes) = type_size(datatype).and_then(|z| z.checked_mul(count)) else {
            return standalone::unservable(call, &format!("ncclDataType {datatype}"));
        };
        return gathered::exact_bytes(call, a, l, b, nbytes, Some(root as usize));
    };
    let what = Collective::Broadcast {
        root: root as usize,
    };
    let per = piece(l.gpu(), what, dt);
    run(call, a, b.stream, || {
        let mut done = 0;
        while done < total {
            let n = per.min(total - done);
            let off = (done * dt.size()) as u64;
            // SAFETY: ncclBroadcast's contract: device buffers of this GPU of
            // `count` elements (the same or disjoint), valid until the stream
            // runs the call; this piece is inside them, counted as `dt`.
            unsafe {
                l.gpu().run_collective(
                    what,
                    &Call::new(b.send + off, b.recv + off, n, dt, b.stream as CUstream)
                        .with_signature(signature(b.dtype, OP_SUM, None)),
                )?;
            }
            done += n;
        }
        Ok(())
    })
}

/// An all-gather or reduce-scatter whose blocks are larger than the
/// transport's buffers, in pieces of `b.count` (elements of one block) through
/// the staging buffer, which holds `world` pieces and then one:
///
/// - all-gather: this rank's piece is copied in, the pieces all-gathered
///   into the staging buffer, and one strided copy puts each rank's piece at
///   its place in `recv` (in place, this rank's row is the bytes it came
///   from);
/// - reduce-scatter: one strided copy brings the piece of each of this
///   rank's `world` input blocks side by side, the kernels reduce-scatter
///   them, and this rank's summed piece is copied to `recv` (in place, it
///   lands on bytes this piece has already read).
fn staged(
    what: Collective,
    a: &StandaloneComm,
    l: &StandaloneGpu,
    b: &Buffers,
    dt: DType,
) -> NcclResult {
    let call = match what {
        Collective::AllGather => "ncclAllGather",
        _ => "ncclReduceScatter",
    };
    let (z, w) = (dt.size(), a.world);
    let per = staged_piece(l.gpu(), l.staging().bytes(), w, what, dt);
    if per == 0 {
        return standalone::unservable(
            call,
            "the staging buffer holds no piece; raise TPCOMM_MAX_BYTES",
        );
    }
    let (send, recv, count, st) = (b.send, b.recv, b.count, b.stream as CUstream);
    let sig = signature(b.dtype, OP_SUM, None);
    let (many, one) = (l.staging().ptr(), l.staging().ptr() + (w * per * z) as u64);
    run(call, a, b.stream, || {
        let mut done = 0;
        while done < count {
            let n = per.min(count - done);
            let off = (done * z) as u64;
            // The piece of every rank's block of the caller's strided buffer
            // (recv of an all-gather, send of a reduce-scatter) beside the
            // `world` pieces side by side in the staging buffer.
            let rows = |dst: u64, dst_pitch: usize, src: u64, src_pitch: usize| Rows {
                dst,
                dst_pitch,
                src,
                src_pitch,
                width: n * z,
                rows: w,
            };
            // SAFETY: the call's contract: device buffers of this GPU, one
            // block on one side and `world` blocks of `count` elements on
            // the other, valid until the stream runs the call; the piece and
            // every row lie inside them. The staging regions (`world`
            // pieces, then one) are disjoint and inside the staging buffer
            // (staged_piece sized them); all on the stream, in order.
            unsafe {
                if what == Collective::AllGather {
                    l.staging().copy(one, send + off, n * z, st)?;
                    l.gpu().run_collective(
                        what,
                        &Call::new(one, many, n, dt, st).with_signature(sig),
                    )?;
                    let r = rows(recv + off, count * z, many, n * z);
                    l.staging().copy_rows(r, st)?;
                } else {
                    let r = rows(many, n * z, send + off, count * z);
                    l.staging().copy_rows(r, st)?;
                    l.gpu().run_collective(
                        what,
                        &Call::new(many, one, n, dt, st).with_signature(sig),
                    )?;
                    l.staging().copy(recv + off, one, n * z, st)?;
                }
            }
            done += n;
        }
        Ok(())
    })
}
