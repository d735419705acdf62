//! `ncclSend` and `ncclRecv`: served by standalone/p2p.rs on a standalone
//! communicator (kept until the group ends), forwarded to the real NCCL
//! unchanged on any other.

use crate::ffi::{call_real, guard, Fail};
use crate::standalone::{p2p, registry};
use crate::types::*;
use std::ffi::{c_int, c_void};

#[no_mangle]
pub unsafe extern "C" fn ncclSend(
    sendbuff: *const c_void,
    count: usize,
    datatype: NcclDataType,
    peer: c_int,
    comm: NcclComm,
    stream: CudaStream,
) -> NcclResult {
    guard("ncclSend", || {
        if let Some(a) = registry::lookup(comm) {
            return p2p::call(true, a, sendbuff, count, datatype, peer, stream);
        }
        if let Some(r) = registry::unknown("ncclSend", comm) {
            return r;
        }
        call_real!(ncclSend(sendbuff, count, datatype, peer, comm, stream)
            as fn(
                *const c_void,
                usize,
                NcclDataType,
                c_int,
                NcclComm,
                CudaStream,
            ) -> NcclResult)
        .unwrap_or_else(|_| NcclResult::missing())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclRecv(
    recvbuff: *mut c_void,
    count: usize,
    datatype: NcclDataType,
    peer: c_int,
    comm: NcclComm,
    stream: CudaStream,
) -> NcclResult {
    guard("ncclRecv", || {
        if let Some(a) = registry::lookup(comm) {
            return p2p::call(false, a, recvbuff, count, datatype, peer, stream);
        }
        if let Some(r) = registry::unknown("ncclRecv", comm) {
            return r;
        }
        call_real!(ncclRecv(recvbuff, count, datatype, peer, comm, stream)
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
