//! `ncclAllGather`, `ncclReduceScatter`, `ncclBroadcast` and `ncclBcast`:
//! run by tpcomm's collective kernels where the all-reduce's route rule
//! allows (set up beside this communicator, outside a group, f32/f16/bf16,
//! sum for reduce-scatter, a non-empty block within TPCOMM_MAX_BYTES), by
//! NCCL otherwise, with the caller's arguments unchanged. A standalone
//! communicator is served by standalone/collectives.rs and gathered.rs and never forwarded. The
//! rule is a pure function of the call, so every rank routes it the same way.

use crate::forward::paired;

use crate::settings::{self, info, warn};
use crate::standalone::args::{self, Args};
use crate::standalone::comm::StandaloneComm;
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

/// Serves `what` with tpcomm's kernels on the communicator set up beside
/// `comm` when the route allows ([`route_of`], and for a broadcast a root
/// that is a rank: a bad root goes to NCCL, which reports it), with the
/// caller's CUDA context restored after; `None`: the real NCCL runs it (the
/// route is logged, but for a broadcast's). A failure is not forwarded (the
/// peers launched tpcomm kernels, and an NCCL call here would never pair up).
///
/// # Safety
/// `bufs` as NCCL's contract for `name` gives them: device buffers of the
/// communicator's GPU of the sizes `what` reads and writes, valid until the
/// stream runs the call, and a stream of that GPU.
unsafe fn served_beside(
    name: &'static str,
    comm: NcclComm,
    what: Collective,
    bufs: &Buffers,
    op: NcclRedOp,
) -> Option<NcclResult> {
    let s = settings::get();
    let beside = if s.disabled {
        None
    } else {
        paired::lookup(comm)
    };
    let broadcast = matches!(what, Collective::Broadcast { .. });
    if let Collective::Broadcast { root } = what {
        if root >= beside.as_ref().map_or(0, |b| b.comm().gpu().world()) {
            return None;
        }
    }
    let route = route_of(s.disabled, beside.as_deref(), what, bufs, op);
    let (Route::Tpcomm { .. }, Some(b), Some(dt)) = (route, &beside, dtype_of(bufs.dtype)) else {
        if !broadcast {
            log_first(name, comm, route);
        }
        return None;
    };
    let _restore = crate::cuda::SavedContext::save();
    // SAFETY: the buffers and stream are as the caller's contract gives them.
    match unsafe { b.comm().gpu().run_collective(what, &kernel_call(bufs, dt)) } {
        Ok(()) => {
            log_first(name, comm, route);
            Some(SUCCESS)
        }
        Err(e) => {
            warn!("{name}: tpcomm failed ({e}); returning ncclInternalError");
            Some(INTERNAL_ERROR)
        }
    }
}

served_or_forwarded! {
    fn ncclAllGather(
        sendbuff: *const c_void,
        recvbuff: *mut c_void,
        sendcount: usize,
        datatype: NcclDataType,
        comm: NcclComm,
        stream: CudaStream,
    ) on comm;
    standalone a => {
        let args = Args {
            span: a.world,
            ..Args::plain(sendbuff, recvbuff, sendcount, datatype)
        };
        if let Err(r) = args::check("ncclAllGather", &a, &args) {
            return r;
        }
        let bufs = buffers(sendbuff, recvbuff, sendcount, datatype, stream);
        crate::standalone::collectives::all_gather(&a, &bufs)
    };
    beside => {
        let bufs = buffers(sendbuff, recvbuff, sendcount, datatype, stream);
        let what = Collective::AllGather;
        // SAFETY: NCCL's contract for ncclAllGather is the kernels': device
        // buffers of the communicator's GPU, sendbuff of sendcount and
        // recvbuff of world x sendcount elements (or sendbuff inside
        // recvbuff at this rank's block), valid until the stream runs
        // the call, and a stream of that GPU.
        if let Some(r) = unsafe { served_beside("ncclAllGather", comm, what, &bufs, OP_SUM) } {
            return r;
        }
    }
}

served_or_forwarded! {
    fn ncclReduceScatter(
        sendbuff: *const c_void,
        recvbuff: *mut c_void,
        recvcount: usize,
        datatype: NcclDataType,
        op: NcclRedOp,
        comm: NcclComm,
        stream: CudaStream,
    ) on comm;
    standalone a => {
        let args = Args {
            op: Some(op),
            span: a.world,
            ..Args::plain(sendbuff, recvbuff, recvcount, datatype)
        };
        if let Err(r) = args::check("ncclReduceScatter", &a, &args) {
            return r;
        }
        let bufs = buffers(sendbuff, recvbuff, recvcount, datatype, stream);
        crate::standalone::collectives::reduce_scatter(&a, &bufs, op)
    };
    beside => {
        let bufs = buffers(sendbuff, recvbuff, recvcount, datatype, stream);
        let what = Collective::ReduceScatter;
        // SAFETY: as in ncclAllGather, with sendbuff of world x recvcount
        // and recvbuff of recvcount elements (or at this rank's block).
        if let Some(r) = unsafe { served_beside("ncclReduceScatter", comm, what, &bufs, op) } {
            return r;
        }
    }
}

/// `name` (ncclBroadcast, or ncclBcast in place) on a standalone
/// communicator: the arguments checked (only the root reads `bufs.send`),
/// then the broadcast.
fn broadcast_standalone(
    name: &'static str,
    a: &StandaloneComm,
    bufs: &Buffers,
    root: c_int,
) -> NcclResult {
    let (send, recv) = (bufs.send as usize, bufs.recv as usize);
    let args = Args {
        root: Some(root),
        send_used: a.rank as c_int == root,
        ..Args::plain(
            send as *const c_void,
            recv as *mut c_void,
            bufs.count,
            bufs.dtype,
        )
    };
    if let Err(r) = args::check(name, a, &args) {
        return r;
    }
    crate::standalone::collectives::broadcast(name, a, bufs, root)
}

/// A broadcast from `root` (a negative root is no rank either, so NCCL
/// takes it and reports it).
fn broadcast(root: c_int) -> Collective {
    Collective::Broadcast {
        root: usize::try_from(root).unwrap_or(usize::MAX),
    }
}

served_or_forwarded! {
    fn ncclBroadcast(
        sendbuff: *const c_void,
        recvbuff: *mut c_void,
        count: usize,
        datatype: NcclDataType,
        root: c_int,
        comm: NcclComm,
        stream: CudaStream,
    ) on comm;
    standalone a => {
        let bufs = buffers(sendbuff, recvbuff, count, datatype, stream);
        broadcast_standalone("ncclBroadcast", &a, &bufs, root)
    };
    beside => {
        let bufs = buffers(sendbuff, recvbuff, count, datatype, stream);
        let what = broadcast(root);
        // SAFETY: as in ncclAllGather, with both buffers of count
        // elements (the same or disjoint); only the root's sendbuff is read.
        if let Some(r) = unsafe { served_beside("ncclBroadcast", comm, what, &bufs, OP_SUM) } {
            return r;
        }
    }
}

served_or_forwarded! {
    fn ncclBcast(
        buff: *mut c_void,
        count: usize,
        datatype: NcclDataType,
        root: c_int,
        comm: NcclComm,
        stream: CudaStream,
    ) on comm;
    standalone a => {
        let bufs = buffers(buff, buff, count, datatype, stream);
        broadcast_standalone("ncclBcast", &a, &bufs, root)
    };
    beside => {
        let bufs = buffers(buff, buff, count, datatype, stream);
        let what = broadcast(root);
        // SAFETY: as in ncclBroadcast, in place.
        if let Some(r) = unsafe { served_beside("ncclBcast", comm, what, &bufs, OP_SUM) } {
            return r;
        }
    }
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
