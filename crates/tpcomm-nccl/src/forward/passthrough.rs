//! The NCCL functions this library only forwards (those taking a
//! communicator refuse a standalone one: see registry.rs): with them exported, a
//! program that opens the library by path (vLLM's and SGLang's pynccl) finds
//! the whole API it calls. (ncclAllGather, ncclReduceScatter, ncclBroadcast
//! and ncclBcast are in api/collectives.rs, the memory calls in
//! api/memory.rs, the pre-multiplied sums' in api/redop.rs.) nccl.h (2.28) gives each prototype.

use crate::ffi::forward;
use crate::types::{CudaStream, NcclComm, NcclDataType, NcclRedOp, NcclResult, Opaque};
use std::ffi::{c_int, c_void};

forward! {
    fn ncclReduce(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: NcclDataType, op: NcclRedOp, root: c_int, comm: NcclComm, stream: CudaStream) -> NcclResult, refused on comm;
    fn ncclAlltoAll(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: NcclDataType, comm: NcclComm, stream: CudaStream) -> NcclResult, refused on comm;
    fn ncclGather(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: NcclDataType, root: c_int, comm: NcclComm, stream: CudaStream) -> NcclResult, refused on comm;
    fn ncclScatter(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: NcclDataType, root: c_int, comm: NcclComm, stream: CudaStream) -> NcclResult, refused on comm;
    fn ncclSend(sendbuff: *const c_void, count: usize, datatype: NcclDataType, peer: c_int, comm: NcclComm, stream: CudaStream) -> NcclResult, refused on comm;
    fn ncclRecv(recvbuff: *mut c_void, count: usize, datatype: NcclDataType, peer: c_int, comm: NcclComm, stream: CudaStream) -> NcclResult, refused on comm;
    fn ncclGroupSimulateEnd(sim_info: Opaque) -> NcclResult;
}
