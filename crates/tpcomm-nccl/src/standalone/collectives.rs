//! The standalone communicator's direct paths (docs/standalone.md): sums of
//! f32, f16 and bf16 (all-reduce, reduce-scatter) and all-gathers and
//! broadcasts of bytes that may travel as floats, on tpcomm's collective
//! kernels; a communicator of one rank copies. Every other type and op goes
//! to gathered.rs.

use crate::settings;
use crate::standalone;
use crate::standalone::comm::{live, run, StandaloneComm, StandaloneGpu};
use crate::standalone::gathered;
use crate::standalone::registry::INVALID_ARGUMENT;
use crate::types::*;
use std::ffi::{c_int, c_void};
use tpcomm::cuda::{CUstream, Collective, GpuComm, Launch, Staging, StreamAllReduce};
use tpcomm::{Algo, DType, ReduceOp};

/// A call on a communicator of one rank: `count` elements of `datatype`
/// copied from `send` to `recv` on the stream (nothing when they are the
/// same buffer), which is every collective's result with one rank.
#[allow(clippy::too_many_arguments)]
fn solo_copy(
    call: &str,
    a: &StandaloneComm,
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
pub(crate) fn as_bytes(t: NcclDataType, count: usize, ptrs: &[usize]) -> Option<(DType, usize)> {
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
    a: &'a StandaloneComm,
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    datatype: NcclDataType,
    op: NcclRedOp,
    stream: CudaStream,
) -> Result<(DType, &'a StandaloneGpu), NcclResult> {
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
    a: &StandaloneComm,
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
    if gathered::takes(a, datatype, op) {
        return gathered::all_reduce_gathered(a, send, recv, count, datatype, op, stream);
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
    a: &StandaloneComm,
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
        .filter(|&(dt, _)| gathered::floats_travel_as(datatype, dt));
    let Some((dt, n)) = direct else {
        let Some(nbytes) = type_size(datatype).and_then(|z| z.checked_mul(count)) else {
            return standalone::unservable(CALL, &format!("ncclDataType {datatype}"));
        };
        return gathered::exact_bytes(CALL, a, l, send, recv, nbytes, None, stream);
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
    a: &StandaloneComm,
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    datatype: NcclDataType,
    op: NcclRedOp,
    stream: CudaStream,
) -> NcclResult {
    const CALL: &str = "ncclReduceScatter";
    // As ncclAllReduce: the kernels sum f32, f16 and bf16; every other type
    // and op gathers the blocks and reduces this rank's (gathered.rs).
    if gathered::takes(a, datatype, op) {
        return gathered::reduce_scatter_gathered(a, send, recv, count, datatype, op, stream);
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
    a: &StandaloneComm,
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
        .filter(|&(dt, _)| gathered::floats_travel_as(datatype, dt));
    let Some((dt, total)) = direct else {
        let Some(nbytes) = type_size(datatype).and_then(|z| z.checked_mul(count)) else {
            return standalone::unservable(call, &format!("ncclDataType {datatype}"));
        };
        return gathered::exact_bytes(call, a, l, send, recv, nbytes, Some(root as usize), stream);
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
