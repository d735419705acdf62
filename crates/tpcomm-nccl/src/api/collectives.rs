//! `ncclAllGather`, `ncclReduceScatter`, `ncclBroadcast` and `ncclBcast`:
//! run by tpcomm's collective kernels where the all-reduce's route rule
//! allows (set up beside this communicator, outside a group, f32/f16/bf16,
//! sum for reduce-scatter, a non-empty block within TPCOMM_MAX_BYTES), by
//! NCCL otherwise, with the caller's arguments unchanged. A standalone
//! communicator is served by standalone/collectives.rs and gathered.rs and never forwarded. The
//! rule is a pure function of the call, so every rank routes it the same way.

use crate::ffi::{call_real, guard, Fail};
use crate::forward::paired;

use crate::settings::{self, info, warn};
use crate::standalone::args::{self, Args};
use crate::standalone::registry;
use crate::types::dtype_of;
use crate::types::*;
use std::ffi::{c_int, c_void};
use tpcomm::cuda::{collective_route, Collective, GpuTransport};
use tpcomm::select::{NcclReason, Route};
use tpcomm::ReduceOp;

/// Every function defined here, by name (they are in `INTERCEPTED` too).
#[cfg_attr(not(test), allow(dead_code))]
pub const COLLECTIVES: &[&str] = &[
    "ncclAllGather",
    "ncclReduceScatter",
    "ncclBroadcast",
    "ncclBcast",
];

/// Logs (at TPCOMM_LOG=info) the first call of each (function,
/// communicator, route), the route as `tpcomm explain` prints routes.
fn log_first(name: &'static str, comm: NcclComm, route: Route) {
    use std::collections::HashSet;
    use std::sync::{Mutex, OnceLock};
    if settings::get().level < settings::Level::Info {
        return;
    }
    type Seen = HashSet<(&'static str, usize, Route)>;
    static SEEN: OnceLock<Mutex<Seen>> = OnceLock::new();
    let seen = SEEN.get_or_init(|| Mutex::new(HashSet::new()));
    let key = (name, comm as usize, route);
    if seen.lock().map(|mut s| s.insert(key)).unwrap_or(false) {
        info!("{name} comm {comm:p}: {route}");
    }
}

/// The route of a collective whose block is `bufs.count` elements: the
/// all-reduce's rules for what tpcomm can take (set up, outside a group, a
/// kernel type, sum, not empty), then the library's rule for collectives
/// (`cuda::collective_route`: the block must fit the transport's buffers).
/// A pure function of the call and the set-up, so every rank routes it the
/// same way.
fn route_of(
    disabled: bool,
    beside: Option<&paired::Paired>,
    what: Collective,
    bufs: &Buffers,
    op: NcclRedOp,
) -> Route {
    if disabled {
        return Route::Nccl(NcclReason::Disabled);
    }
    let Some(b) = beside else {
        return Route::Nccl(NcclReason::NotSetUp);
    };
    if crate::group::depth() > 0 {
        return Route::Nccl(NcclReason::InGroup);
    }
    let Some(dt) = dtype_of(bufs.dtype) else {
        return Route::Nccl(NcclReason::DType);
    };
    if op != OP_SUM {
        return Route::Nccl(NcclReason::Op);
    }
    if bufs.count == 0 {
        return Route::Nccl(NcclReason::Empty);
    }
    let bytes = (bufs.count as u64).saturating_mul(dt.size() as u64);
    let fits = b.comm().gpu().collective_fits(what, bufs.count, dt);
    let transport = b.comm().gpu().transport().for_routes();
    collective_route(
        transport,
        bytes,
        b.comm().gpu().max_bytes(),
        ReduceOp::Sum,
        fits,
    )
}

/// Runs `f` (tpcomm's launch on `route`) with the caller's CUDA context
/// restored after; a failure is not forwarded (the peers launched tpcomm
/// kernels, and an NCCL call here would never pair up).
fn on_tpcomm(
    name: &'static str,
    comm: NcclComm,
    route: Route,
    f: impl FnOnce() -> tpcomm::Result<()>,
) -> NcclResult {
    let _restore = crate::cuda::SavedContext::save();
    match f() {
        Ok(()) => {
            log_first(name, comm, route);
            SUCCESS
        }
        Err(e) => {
            warn!("{name}: tpcomm failed ({e}); returning ncclInternalError");
            INTERNAL_ERROR
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn ncclAllGather(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    sendcount: usize,
    datatype: NcclDataType,
    comm: NcclComm,
    stream: CudaStream,
) -> NcclResult {
    guard("ncclAllGather", || {
        let bufs = buffers(sendbuff, recvbuff, sendcount, datatype, stream);
        if let Some(a) = registry::lookup(comm) {
            let args = Args {
                span: a.world,
                ..Args::plain(sendbuff, recvbuff, sendcount, datatype)
            };
            if let Err(r) = args::check("ncclAllGather", &a, &args) {
                return r;
            }
            return crate::standalone::collectives::all_gather(&a, &bufs);
        }
        if let Some(r) = registry::unknown("ncclAllGather", comm) {
            return r;
        }
        let s = settings::get();
        let beside = if s.disabled {
            None
        } else {
            paired::lookup(comm)
        };
        let r = route_of(
            s.disabled,
            beside.as_deref(),
            Collective::AllGather,
            &bufs,
            OP_SUM,
        );
        if let (Route::Tpcomm { .. }, Some(b), Some(dt)) = (r, &beside, dtype_of(datatype)) {
            // SAFETY: NCCL's contract for ncclAllGather is the kernels': device
            // buffers of the communicator's GPU, sendbuff of sendcount and
            // recvbuff of world x sendcount elements (or sendbuff inside
            // recvbuff at this rank's block), valid until the stream runs
            // the call, and a stream of that GPU.
            return on_tpcomm("ncclAllGather", comm, r, || unsafe {
                b.comm()
                    .gpu()
                    .run_collective(Collective::AllGather, &kernel_call(&bufs, dt))
            });
        }
        log_first("ncclAllGather", comm, r);
        call_real!(
            ncclAllGather(sendbuff, recvbuff, sendcount, datatype, comm, stream)
                as fn(
                    *const c_void,
                    *mut c_void,
                    usize,
                    NcclDataType,
                    NcclComm,
                    CudaStream,
                ) -> NcclResult
        )
        .unwrap_or_else(|_| NcclResult::missing())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclReduceScatter(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    recvcount: usize,
    datatype: NcclDataType,
    op: NcclRedOp,
    comm: NcclComm,
    stream: CudaStream,
) -> NcclResult {
    guard("ncclReduceScatter", || {
        let bufs = buffers(sendbuff, recvbuff, recvcount, datatype, stream);
        if let Some(a) = registry::lookup(comm) {
            let args = Args {
                op: Some(op),
                span: a.world,
                ..Args::plain(sendbuff, recvbuff, recvcount, datatype)
            };
            if let Err(r) = args::check("ncclReduceScatter", &a, &args) {
                return r;
            }
            return crate::standalone::collectives::reduce_scatter(&a, &bufs, op);
        }
        if let Some(r) = registry::unknown("ncclReduceScatter", comm) {
            return r;
        }
        let s = settings::get();
        let beside = if s.disabled {
            None
        } else {
            paired::lookup(comm)
        };
        let r = route_of(
            s.disabled,
            beside.as_deref(),
            Collective::ReduceScatter,
            &bufs,
            op,
        );
        if let (Route::Tpcomm { .. }, Some(b), Some(dt)) = (r, &beside, dtype_of(datatype)) {
            // SAFETY: as in ncclAllGather, with sendbuff of world x recvcount
            // and recvbuff of recvcount elements (or at this rank's block).
            return on_tpcomm("ncclReduceScatter", comm, r, || unsafe {
                b.comm()
                    .gpu()
                    .run_collective(Collective::ReduceScatter, &kernel_call(&bufs, dt))
            });
        }
        log_first("ncclReduceScatter", comm, r);
        call_real!(
            ncclReduceScatter(sendbuff, recvbuff, recvcount, datatype, op, comm, stream)
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
    })
}

/// The route of a broadcast when tpcomm takes it, with the element type:
/// the collectives' rule ([`route_of`]), and a root that is a rank (a bad
/// root goes to NCCL, which reports it). `None`: NCCL runs it.
fn broadcast_route(
    s: &settings::Settings,
    beside: Option<&paired::Paired>,
    bufs: &Buffers,
    root: c_int,
) -> Option<(Route, tpcomm::DType)> {
    let world = beside.map_or(0, |b| b.comm().gpu().world());
    if root < 0 || root as usize >= world {
        return None;
    }
    let what = Collective::Broadcast {
        root: root as usize,
    };
    match route_of(s.disabled, beside, what, bufs, OP_SUM) {
        r @ Route::Tpcomm { .. } => Some((r, dtype_of(bufs.dtype)?)),
        Route::Nccl(_) => None,
    }
}

#[no_mangle]
pub unsafe extern "C" fn ncclBroadcast(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: NcclDataType,
    root: c_int,
    comm: NcclComm,
    stream: CudaStream,
) -> NcclResult {
    guard("ncclBroadcast", || {
        let bufs = buffers(sendbuff, recvbuff, count, datatype, stream);
        if let Some(a) = registry::lookup(comm) {
            let args = Args {
                root: Some(root),
                send_used: a.rank as c_int == root,
                ..Args::plain(sendbuff, recvbuff, count, datatype)
            };
            if let Err(r) = args::check("ncclBroadcast", &a, &args) {
                return r;
            }
            return crate::standalone::collectives::broadcast("ncclBroadcast", &a, &bufs, root);
        }
        if let Some(r) = registry::unknown("ncclBroadcast", comm) {
            return r;
        }
        let s = settings::get();
        let beside = if s.disabled {
            None
        } else {
            paired::lookup(comm)
        };
        if let (Some((r, dt)), Some(b)) =
            (broadcast_route(s, beside.as_deref(), &bufs, root), &beside)
        {
            // SAFETY: as in ncclAllGather, with both buffers of count
            // elements (the same or disjoint); only the root's sendbuff is read.
            return on_tpcomm("ncclBroadcast", comm, r, || unsafe {
                b.comm().gpu().run_collective(
                    Collective::Broadcast {
                        root: root as usize,
                    },
                    &kernel_call(&bufs, dt),
                )
            });
        }
        call_real!(
            ncclBroadcast(sendbuff, recvbuff, count, datatype, root, comm, stream)
                as fn(
                    *const c_void,
                    *mut c_void,
                    usize,
                    NcclDataType,
                    c_int,
                    NcclComm,
                    CudaStream,
                ) -> NcclResult
        )
        .unwrap_or_else(|_| NcclResult::missing())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclBcast(
    buff: *mut c_void,
    count: usize,
    datatype: NcclDataType,
    root: c_int,
    comm: NcclComm,
    stream: CudaStream,
) -> NcclResult {
    guard("ncclBcast", || {
        let bufs = buffers(buff, buff, count, datatype, stream);
        if let Some(a) = registry::lookup(comm) {
            let args = Args {
                root: Some(root),
                send_used: a.rank as c_int == root,
                ..Args::plain(buff, buff, count, datatype)
            };
            if let Err(r) = args::check("ncclBcast", &a, &args) {
                return r;
            }
            return crate::standalone::collectives::broadcast("ncclBcast", &a, &bufs, root);
        }
        if let Some(r) = registry::unknown("ncclBcast", comm) {
            return r;
        }
        let s = settings::get();
        let beside = if s.disabled {
            None
        } else {
            paired::lookup(comm)
        };
        if let (Some((r, dt)), Some(b)) =
            (broadcast_route(s, beside.as_deref(), &bufs, root), &beside)
        {
            // SAFETY: as in ncclBroadcast, in place.
            return on_tpcomm("ncclBcast", comm, r, || unsafe {
                b.comm().gpu().run_collective(
                    Collective::Broadcast {
                        root: root as usize,
                    },
                    &kernel_call(&bufs, dt),
                )
            });
        }
        call_real!(ncclBcast(buff, count, datatype, root, comm, stream)
            as fn(
                *mut c_void,
                usize,
                NcclDataType,
                c_int,
                NcclComm,
                CudaStream,
            ) -> NcclResult)
        .unwrap_or_else(|_| NcclResult::missing())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_collective_defined_here_is_listed_as_intercepted() {
        for name in COLLECTIVES {
            assert!(crate::api::INTERCEPTED.contains(name), "{name}");
            assert!(
                !crate::forward::passthrough::FORWARDED.contains(name),
                "{name}"
            );
        }
    }
}
