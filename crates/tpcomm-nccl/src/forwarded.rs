//! The NCCL functions this library only forwards: with them exported, a
//! program that opens the library by path (vLLM's and SGLang's pynccl) finds
//! the whole API it calls. (ncclAllGather, ncclReduceScatter, ncclBroadcast
//! and ncclBcast are in collectives.rs.) nccl.h (2.28) gives each prototype.

use crate::ffi::forward;
use crate::types::{CudaStream, NcclComm, NcclDataType, NcclRedOp, NcclResult, Opaque, UniqueId};
use std::ffi::{c_char, c_int, c_void};

forward! {
    fn ncclGetVersion(version: *mut c_int) -> NcclResult;
    fn ncclGetUniqueId(unique_id: *mut UniqueId) -> NcclResult;
    fn ncclGetLastError(comm: NcclComm) -> *const c_char;
    fn ncclCommGetAsyncError(comm: NcclComm, async_error: *mut NcclResult) -> NcclResult;
    fn ncclCommCount(comm: NcclComm, count: *mut c_int) -> NcclResult;
    fn ncclCommCuDevice(comm: NcclComm, device: *mut c_int) -> NcclResult;
    fn ncclCommUserRank(comm: NcclComm, rank: *mut c_int) -> NcclResult;
    fn ncclMemAlloc(ptr: *mut *mut c_void, size: usize) -> NcclResult;
    fn ncclMemFree(ptr: *mut c_void) -> NcclResult;
    fn ncclCommRegister(comm: NcclComm, buff: *mut c_void, size: usize, handle: *mut *mut c_void) -> NcclResult;
    fn ncclCommDeregister(comm: NcclComm, handle: *mut c_void) -> NcclResult;
    fn ncclCommWindowRegister(comm: NcclComm, buff: *mut c_void, size: usize, win: *mut Opaque, win_flags: c_int) -> NcclResult;
    fn ncclCommWindowDeregister(comm: NcclComm, win: Opaque) -> NcclResult;
    fn ncclRedOpCreatePreMulSum(op: *mut NcclRedOp, scalar: *mut c_void, datatype: NcclDataType, residence: c_int, comm: NcclComm) -> NcclResult;
    fn ncclRedOpDestroy(op: NcclRedOp, comm: NcclComm) -> NcclResult;
    fn ncclReduce(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: NcclDataType, op: NcclRedOp, root: c_int, comm: NcclComm, stream: CudaStream) -> NcclResult;
    fn ncclAlltoAll(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: NcclDataType, comm: NcclComm, stream: CudaStream) -> NcclResult;
    fn ncclGather(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: NcclDataType, root: c_int, comm: NcclComm, stream: CudaStream) -> NcclResult;
    fn ncclScatter(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: NcclDataType, root: c_int, comm: NcclComm, stream: CudaStream) -> NcclResult;
    fn ncclSend(sendbuff: *const c_void, count: usize, datatype: NcclDataType, peer: c_int, comm: NcclComm, stream: CudaStream) -> NcclResult;
    fn ncclRecv(recvbuff: *mut c_void, count: usize, datatype: NcclDataType, peer: c_int, comm: NcclComm, stream: CudaStream) -> NcclResult;
    fn ncclGroupSimulateEnd(sim_info: Opaque) -> NcclResult;
}
