//! `ncclAllReduce`: run by tpcomm when the route allows, by NCCL otherwise.

use crate::ffi::{call_real, guard, Fail};
use crate::forward::paired;
use crate::route::{aligned, route, size_class, Call, Route, Why};
use crate::settings::{self, info, warn};
use crate::types::*;
use std::collections::HashSet;
use std::ffi::c_void;
use std::sync::{Mutex, OnceLock};
use tpcomm::cuda::{CUstream, StreamAllReduce};
use tpcomm::ReduceOp;

/// Logs the first all-reduce of each (communicator, size class, type,
/// route); `what` is only formatted then.
fn log_first(
    comm: NcclComm,
    bytes: usize,
    dtype: NcclDataType,
    route: u8,
    what: impl Fn() -> String,
) {
    if settings::get().level < settings::Level::Info {
        return;
    }
    type Seen = HashSet<(usize, u32, i32, u8)>;
    static SEEN: OnceLock<Mutex<Seen>> = OnceLock::new();
    let seen = SEEN.get_or_init(|| Mutex::new(HashSet::new()));
    let key = (comm as usize, size_class(bytes), dtype, route);
    if seen.lock().map(|mut s| s.insert(key)).unwrap_or(false) {
        info!(
            "ncclAllReduce comm {comm:p}: {bytes} bytes, ncclDataType {dtype}: {}",
            what()
        );
    }
}

#[no_mangle]
pub unsafe extern "C" fn ncclAllReduce(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: NcclDataType,
    op: NcclRedOp,
    comm: NcclComm,
    stream: CudaStream,
) -> NcclResult {
    guard("ncclAllReduce", || {
        if let Some(a) = crate::standalone::registry::lookup(comm) {
            return crate::standalone::collectives::all_reduce(
                &a, sendbuff, recvbuff, count, datatype, op, stream,
            );
        }
        let s = settings::get();
        let beside = if s.disabled {
            None
        } else {
            paired::lookup(comm)
        };
        let call = Call {
            send: sendbuff as usize,
            recv: recvbuff as usize,
            count,
            dtype: datatype,
            op,
            group_depth: crate::group::depth(),
        };
        let elem = dtype_of(datatype).map(|d| d.size()).unwrap_or(1);
        let bytes = count.saturating_mul(elem);
        let mut r = route(s.disabled, beside.as_ref().map(|b| &b.routes), &call);
        if let (Route::Nccl(Why::Faster), Some(b), Some(dt)) = (r, &beside, dtype_of(datatype)) {
            // A quantized wire is the user's request (TPCOMM_WIRE, agreed by
            // every rank): it takes the sums it applies to before the
            // decision, which never weighed it; the exact algorithm is unused.
            if b.quant
                .as_ref()
                .is_some_and(|q| q.wire_for(bytes) != tpcomm::quant::Wire::Exact)
            {
                r = Route::Tpcomm(dt, tpcomm::Algo::OneShot);
            }
        }
        match (r, beside) {
            (Route::Tpcomm(dt, algo), Some(b)) => {
                let _restore = crate::cuda::SavedContext::save();
                let st = stream as CUstream;
                let staged = !aligned(&call);
                // SAFETY: NCCL's contract for ncclAllReduce gives the same
                // guarantees all_reduce asks for: device buffers of the
                // communicator's GPU holding `count` elements, valid until the
                // stream runs the call, and a stream of that GPU. Aligned
                // buffers are used in place; unaligned ones are copied into
                // the 16-byte-aligned staging buffer (TPCOMM_MAX_BYTES, and
                // `route` kept the call within that), reduced there in place
                // and copied out, all ordered on the caller's stream.
                // The quantized wire (TPCOMM_WIRE) takes sums from
                // TPCOMM_WIRE_MIN_BYTES up, aligned or staged (ranks' buffers
                // may differ in alignment, never in size); every rank agreed
                // on the wire at set-up, so all take it together.
                if let Some(q) = b.quant.as_ref() {
                    // SAFETY: as below; the staging buffer holds the call
                    // (route kept it within TPCOMM_MAX_BYTES).
                    let ran = unsafe {
                        if !staged {
                            q.try_all_reduce(
                                &b.gpu,
                                sendbuff as u64,
                                recvbuff as u64,
                                count,
                                dt,
                                st,
                            )
                        } else if q.wire_for(bytes) != tpcomm::quant::Wire::Exact {
                            let p = b.staging.ptr();
                            Some(
                                b.staging
                                    .copy(p, sendbuff as u64, bytes, st)
                                    .and_then(|_| {
                                        q.try_all_reduce(&b.gpu, p, p, count, dt, st)
                                            .unwrap_or(Ok(tpcomm::quant::Wire::Exact))
                                    })
                                    .and_then(|w| {
                                        b.staging.copy(recvbuff as u64, p, bytes, st).map(|_| w)
                                    }),
                            )
                        } else {
                            None
                        }
                    };
                    match ran {
                        Some(Ok(wire)) => {
                            log_first(comm, bytes, datatype, 200 + staged as u8, || {
                                format!(
                                    "tpcomm on the quantized {} wire (staged: {staged})",
                                    wire.label()
                                )
                            });
                            return SUCCESS;
                        }
                        Some(Err(e)) => {
                            warn!("ncclAllReduce: tpcomm's quantized wire failed ({e}); returning ncclInternalError");
                            return INTERNAL_ERROR;
                        }
                        None => {}
                    }
                }
                // SAFETY: the contract stated at the top of this arm.
                let done = unsafe {
                    if !staged {
                        b.gpu.all_reduce(
                            sendbuff as u64,
                            recvbuff as u64,
                            count,
                            dt,
                            ReduceOp::Sum,
                            algo,
                            st,
                        )
                    } else {
                        let p = b.staging.ptr();
                        b.staging
                            .copy(p, sendbuff as u64, bytes, st)
                            .and_then(|_| {
                                b.gpu.all_reduce(p, p, count, dt, ReduceOp::Sum, algo, st)
                            })
                            .and_then(|_| b.staging.copy(recvbuff as u64, p, bytes, st))
                    }
                };
                match done {
                    Ok(()) => {
                        let key = algo as u8 + if staged { 50 } else { 0 };
                        log_first(comm, bytes, datatype, key, || {
                            let on = format!("tpcomm {}:{}", b.gpu.transport().name(), algo.name());
                            if staged {
                                format!("{on} (unaligned buffer: through staging)")
                            } else {
                                on
                            }
                        });
                        SUCCESS
                    }
                    Err(e) => {
                        // Not forwarded: the peers have launched tpcomm
                        // kernels, and an NCCL call here would never pair up.
                        warn!("ncclAllReduce: tpcomm failed ({e}); returning ncclInternalError");
                        INTERNAL_ERROR
                    }
                }
            }
            (Route::Nccl(why), _) => {
                log_first(comm, bytes, datatype, 100 + why as u8, || {
                    format!("NCCL ({})", why.text())
                });
                // SAFETY: ncclAllReduce's own arguments, passed on unchanged.
                unsafe { forward_all_reduce(sendbuff, recvbuff, count, datatype, op, comm, stream) }
            }
            (Route::Tpcomm(..), None) => {
                // SAFETY: ncclAllReduce's own arguments, passed on unchanged.
                unsafe { forward_all_reduce(sendbuff, recvbuff, count, datatype, op, comm, stream) }
            }
        }
    })
}

unsafe fn forward_all_reduce(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: NcclDataType,
    op: NcclRedOp,
    comm: NcclComm,
    stream: CudaStream,
) -> NcclResult {
    call_real!(
        ncclAllReduce(sendbuff, recvbuff, count, datatype, op, comm, stream)
            as fn(
                *const c_void,
                *mut c_void,
                usize,
                NcclDataType,
                NcclRedOp,
                NcclComm,
                CudaStream,
            ) -> NcclResult
    )
    .unwrap_or_else(|_| NcclResult::missing())
}
