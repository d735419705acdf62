//! The exported C functions this library does more than forward, grouped as
//! nccl.h groups them: communicator creation and management (init.rs), group
//! calls (group.rs), errors and version queries (errors.rs), the
//! collectives (all_reduce.rs, collectives.rs), the device API's host side
//! and ncclCommRevoke (device.rs). The functions forwarded
//! unchanged are in forward/passthrough.rs.

/// Defines an exported function that takes a communicator (`$comm`, one of
/// its arguments) and returns an `ncclResult_t`: on a standalone
/// communicator `$standalone` serves the call (with `$a`, the registry's
/// entry, in scope); a communicator that is neither standalone nor NCCL's is
/// refused (`registry::unknown`); on any other `$beside` runs first (it may
/// serve the call and return) and the real NCCL takes the call, with the
/// caller's arguments unchanged. Inside `guard`, so `return` in either
/// block returns from the exported function.
///
/// Defined before the modules below, so in scope in each of them.
macro_rules! served_or_forwarded {
    (
        $(#[$attr:meta])*
        fn $name:ident ( $($arg:ident : $ty:ty),* $(,)? ) on $comm:ident;
        standalone $a:ident => $standalone:expr;
        $(beside => $beside:block)?
    ) => {
        $(#[$attr])*
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $crate::types::NcclResult {
            $crate::ffi::guard(stringify!($name), || {
                if let Some($a) = $crate::standalone::registry::lookup($comm) {
                    return $standalone;
                }
                if let Some(r) = $crate::standalone::registry::unknown(stringify!($name), $comm) {
                    return r;
                }
                $($beside)?
                $crate::ffi::call_real!($name($($arg),*) as fn($($ty),*) -> $crate::types::NcclResult)
                    .unwrap_or_else(|_| <$crate::types::NcclResult as $crate::ffi::Fail>::missing())
            })
        }
    };
}

pub(crate) mod all_reduce;
pub(crate) mod collectives;
pub(crate) mod device;
pub(crate) mod errors;
pub(crate) mod group;
pub(crate) mod init;
pub(crate) mod memory;
pub(crate) mod p2p;
pub(crate) mod profiling;
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
    // device.rs
    "ncclCommRevoke",
    "ncclDevCommCreate",
    "ncclDevCommDestroy",
    "ncclGinBarrierCreateRequirement",
    "ncclTeamWorld",
    "ncclTeamLsa",
    "ncclTeamRail",
    "ncclTeamRankToWorld",
    "ncclTeamRankToLsa",
    "ncclLLA2ACalcSlots",
];
