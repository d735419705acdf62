//! The NCCL functions this library only forwards (those taking a
//! communicator refuse a standalone one: see registry.rs): with them exported, a
//! program that opens the library by path (vLLM's and SGLang's pynccl) finds
//! the whole API it calls. (ncclAllGather, ncclReduceScatter, ncclBroadcast
//! and ncclBcast are in api/collectives.rs, ncclReduce, ncclGather,
//! ncclScatter and ncclAlltoAll in api/rooted.rs, ncclSend and ncclRecv in
//! api/p2p.rs, the memory calls in api/memory.rs, the pre-multiplied sums'
//! in api/redop.rs.) nccl.h (2.28) gives each prototype.

use crate::api::device::Team;
use crate::ffi::forward;
use crate::types::{NcclResult, Opaque};
use std::ffi::c_int;

forward! {
    fn ncclGroupSimulateEnd(sim_info: Opaque) -> NcclResult;
    // The device API's requirement calls that take no communicator
    // (nccl_device/lsa_barrier.h, ll_a2a.h): NCCL's; without it they fail
    // (ncclSystemError). ncclLLA2ACalcSlots, which returns a count, is in
    // api/device.rs.
    fn ncclLsaBarrierCreateRequirement(team: Team, n_barriers: c_int, out_handle: Opaque, out_req: Opaque) -> NcclResult;
    fn ncclLLA2ACreateRequirement(n_blocks: c_int, n_slots: c_int, out_handle: Opaque, out_req: Opaque) -> NcclResult;
    // Reloads NCCL's logging variables (deprecated in later NCCLs); without
    // the real NCCL it does nothing, as it returns nothing to fail with.
    fn ncclResetDebugInit() -> ();
}
