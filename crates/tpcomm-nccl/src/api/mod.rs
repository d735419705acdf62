//! The exported C functions this library does more than forward, grouped as
//! nccl.h groups them: communicator creation and management (init.rs), group
//! calls (group.rs), errors and version queries (errors.rs), the
//! collectives (all_reduce.rs, collectives.rs). The functions forwarded
//! unchanged are in forward/passthrough.rs.

pub(crate) mod all_reduce;
pub(crate) mod collectives;
pub(crate) mod errors;
pub(crate) mod group;
pub(crate) mod init;
pub(crate) mod memory;
pub(crate) mod p2p;
pub(crate) mod redop;
pub(crate) mod rooted;

/// Standalone communicators driven through the exported functions.
#[cfg(test)]
pub(crate) mod standalone_tests;

/// Every function this library does more than forward (defined in this
/// folder), by name.
#[cfg_attr(not(test), allow(dead_code))]
pub const INTERCEPTED: &[&str] = &[
    "ncclGetErrorString",
    "ncclGetVersion",
    "ncclGetUniqueId",
    "ncclGetLastError",
    "ncclCommGetAsyncError",
    "ncclCommCount",
    "ncclCommUserRank",
    "ncclCommCuDevice",
    "ncclGroupStart",
    "ncclGroupEnd",
    "ncclCommInitRank",
    "ncclCommInitRankConfig",
    "ncclCommInitRankScalable",
    "ncclCommInitAll",
    "ncclCommSplit",
    "ncclCommShrink",
    "ncclCommFinalize",
    "ncclCommDestroy",
    "ncclCommAbort",
    "ncclAllReduce",
    // collectives.rs
    "ncclAllGather",
    "ncclReduceScatter",
    "ncclBroadcast",
    "ncclBcast",
    // rooted.rs
    "ncclReduce",
    "ncclGather",
    "ncclScatter",
    "ncclAlltoAll",
    // p2p.rs
    "ncclSend",
    "ncclRecv",
    // memory.rs
    "ncclMemAlloc",
    "ncclMemFree",
    "ncclCommRegister",
    "ncclCommDeregister",
    "ncclCommWindowRegister",
    "ncclCommWindowDeregister",
    // redop.rs
    "ncclRedOpCreatePreMulSum",
    "ncclRedOpDestroy",
];
