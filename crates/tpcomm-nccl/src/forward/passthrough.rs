//! The NCCL functions this library only forwards (those taking a
//! communicator refuse a standalone one: see registry.rs): with them exported, a
//! program that opens the library by path (vLLM's and SGLang's pynccl) finds
//! the whole API it calls. (ncclAllGather, ncclReduceScatter, ncclBroadcast
//! and ncclBcast are in api/collectives.rs, ncclReduce, ncclGather,
//! ncclScatter and ncclAlltoAll in api/rooted.rs, ncclSend and ncclRecv in
//! api/p2p.rs, the memory calls in
//! api/memory.rs.) nccl.h (2.28) gives each prototype.

use crate::ffi::forward;
use crate::types::{NcclComm, NcclDataType, NcclRedOp, NcclResult, Opaque};
use std::ffi::{c_int, c_void};

forward! {
    fn ncclRedOpCreatePreMulSum(op: *mut NcclRedOp, scalar: *mut c_void, datatype: NcclDataType, residence: c_int, comm: NcclComm) -> NcclResult, refused on comm;
    fn ncclRedOpDestroy(op: NcclRedOp, comm: NcclComm) -> NcclResult, refused on comm;
    fn ncclGroupSimulateEnd(sim_info: Opaque) -> NcclResult;
}
