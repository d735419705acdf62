//! The NCCL functions this library only forwards (those taking a
//! communicator refuse a standalone one: see registry.rs): with them exported, a
//! program that opens the library by path (vLLM's and SGLang's pynccl) finds
//! the whole API it calls. (ncclAllGather, ncclReduceScatter, ncclBroadcast
//! and ncclBcast are in api/collectives.rs, ncclReduce, ncclGather,
//! ncclScatter and ncclAlltoAll in api/rooted.rs, ncclSend and ncclRecv in
//! api/p2p.rs, the memory calls in api/memory.rs, the pre-multiplied sums'
//! in api/redop.rs.) nccl.h (2.28) gives each prototype.

use crate::ffi::forward;
use crate::types::{NcclResult, Opaque};

forward! {
    fn ncclGroupSimulateEnd(sim_info: Opaque) -> NcclResult;
    // Reloads NCCL's logging variables (deprecated in later NCCLs); without
    // the real NCCL it does nothing, as it returns nothing to fail with.
    fn ncclResetDebugInit() -> ();
}
