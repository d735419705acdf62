//! `ncclReduce`, `ncclGather`, `ncclScatter` and `ncclAlltoAll`: served by
//! standalone/rooted.rs on a standalone communicator, forwarded to the real
//! NCCL unchanged on any other (tpcomm's communicator beside NCCL's does not
//! take them).

use crate::ffi::{call_real, guard, Fail};
use crate::standalone::registry;
use crate::standalone::rooted::{rooted, What};
use crate::types::*;
use std::ffi::{c_int, c_void};

#[no_mangle]
pub unsafe extern "C" fn ncclReduce(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: NcclDataType,
    op: NcclRedOp,
    root: c_int,
    comm: NcclComm,
    stream: CudaStream,
) -> NcclResult {
    guard("ncclReduce", || {
        if let Some(a) = registry::lookup(comm) {
            let what = What::Reduce(op);
            let bufs = buffers(sendbuff, recvbuff, count, datatype, stream);
            return rooted(what, &a, &bufs, root);
        }
        if let Some(r) = registry::unknown("ncclReduce", comm) {
            return r;
        }
        call_real!(
            ncclReduce(sendbuff, recvbuff, count, datatype, op, root, comm, stream)
                as fn(
                    *const c_void,
                    *mut c_void,
                    usize,
                    NcclDataType,
                    NcclRedOp,
                    c_int,
                    NcclComm,
                    CudaStream,
                ) -> NcclResult
        )
        .unwrap_or_else(|_| NcclResult::missing())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclGather(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: NcclDataType,
    root: c_int,
    comm: NcclComm,
    stream: CudaStream,
) -> NcclResult {
    guard("ncclGather", || {
        if let Some(a) = registry::lookup(comm) {
            let what = What::Gather;
            let bufs = buffers(sendbuff, recvbuff, count, datatype, stream);
            return rooted(what, &a, &bufs, root);
        }
        if let Some(r) = registry::unknown("ncclGather", comm) {
            return r;
        }
        call_real!(
            ncclGather(sendbuff, recvbuff, count, datatype, root, comm, stream)
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
pub unsafe extern "C" fn ncclScatter(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: NcclDataType,
    root: c_int,
    comm: NcclComm,
    stream: CudaStream,
) -> NcclResult {
    guard("ncclScatter", || {
        if let Some(a) = registry::lookup(comm) {
            let what = What::Scatter;
            let bufs = buffers(sendbuff, recvbuff, count, datatype, stream);
            return rooted(what, &a, &bufs, root);
        }
        if let Some(r) = registry::unknown("ncclScatter", comm) {
            return r;
        }
        call_real!(
            ncclScatter(sendbuff, recvbuff, count, datatype, root, comm, stream)
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
pub unsafe extern "C" fn ncclAlltoAll(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: NcclDataType,
    comm: NcclComm,
    stream: CudaStream,
) -> NcclResult {
    guard("ncclAlltoAll", || {
        if let Some(a) = registry::lookup(comm) {
            let what = What::AllToAll;
            let bufs = buffers(sendbuff, recvbuff, count, datatype, stream);
            return rooted(what, &a, &bufs, 0);
        }
        if let Some(r) = registry::unknown("ncclAlltoAll", comm) {
            return r;
        }
        call_real!(
            ncclAlltoAll(sendbuff, recvbuff, count, datatype, comm, stream)
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
