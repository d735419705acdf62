//! `ncclAllReduce`: run by tpcomm when the route allows, by NCCL otherwise.
//! The route is decided once, by `route::decide`, inside the communicator
//! that serves the call (`forward::paired::all_reduce`, or the standalone
//! communicator's own).

use crate::forward::paired::{self, Outcome};
use crate::route::{aligned, log_text, size_class, Call};
use crate::settings::{self, info, warn};
use crate::standalone::args::{self, Args};
use crate::types::*;
use std::collections::HashSet;
use std::ffi::c_void;
use std::sync::{Mutex, OnceLock};
use tpcomm::cuda::CUstream;
use tpcomm::select::Route;

/// Logs the first all-reduce of each (communicator, size class, type,
/// route, staging): the route as `decide` gave it, printed as `tpcomm
/// explain` prints it (`route::log_text`).
fn log_first(comm: NcclComm, call: &Call, route: Route) {
    if settings::get().level < settings::Level::Info {
        return;
    }
    type Seen = HashSet<(usize, u32, i32, Route, bool)>;
    static SEEN: OnceLock<Mutex<Seen>> = OnceLock::new();
    let seen = SEEN.get_or_init(|| Mutex::new(HashSet::new()));
    let (bytes, dtype) = (call.bytes(), call.dtype);
    let key = (
        comm as usize,
        size_class(bytes),
        dtype,
        route,
        aligned(call),
    );
    if seen.lock().map(|mut s| s.insert(key)).unwrap_or(false) {
        let text = log_text(route, call);
        info!("ncclAllReduce comm {comm:p}: {bytes} bytes, ncclDataType {dtype}: {text}");
    }
}

served_or_forwarded! {
    fn ncclAllReduce(
        sendbuff: *const c_void,
        recvbuff: *mut c_void,
        count: usize,
        datatype: NcclDataType,
        op: NcclRedOp,
        comm: NcclComm,
        stream: CudaStream,
    ) on comm;
    standalone a => {
        let args = Args {
            op: Some(op),
            ..Args::plain(sendbuff, recvbuff, count, datatype)
        };
        if let Err(r) = args::check("ncclAllReduce", &a, &args) {
            return r;
        }
        let bufs = buffers(sendbuff, recvbuff, count, datatype, stream);
        crate::standalone::collectives::all_reduce(&a, &bufs, op)
    };
    beside => {
        let call = Call {
            send: sendbuff as usize,
            recv: recvbuff as usize,
            count,
            dtype: datatype,
            op,
            group_depth: crate::group::depth(),
        };
        // SAFETY: NCCL's contract for ncclAllReduce is the one
        // paired::all_reduce asks for: device buffers of the communicator's
        // GPU holding `count` elements, valid until the stream runs the call,
        // and a stream of that GPU.
        match unsafe { paired::all_reduce(comm, &call, stream as CUstream) } {
            Outcome::Served(route) => {
                log_first(comm, &call, route);
                return SUCCESS;
            }
            Outcome::Forward(why) => log_first(comm, &call, Route::Nccl(why)),
            Outcome::Failed(route, e) => {
                warn!("ncclAllReduce: {route} failed ({e}); returning ncclInternalError");
                return INTERNAL_ERROR;
            }
        }
    }
}
