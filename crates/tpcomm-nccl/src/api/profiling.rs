//! NCCL's profiling names: libnccl exports every API function twice, as
//! `ncclX` and `pncclX` (the second for tools that wrap the first), and a
//! program or interposer may bind either. Each `pncclX` here calls this
//! library's `ncclX` with its arguments as given; the compiler holds each
//! signature to the function it calls.

use crate::api::device::Team;
use crate::types::*;
use std::ffi::{c_char, c_int, c_void};

macro_rules! profiling_names {
    ($( $path:ident :: $name:ident ( $($arg:ident : $ty:ty),* ) -> $ret:ty; )*) => {
        $(
            #[allow(non_snake_case)]
            mod $name {
                use super::*;
                #[doc = concat!("`p", stringify!($name), "`: `", stringify!($name), "`.")]
                ///
                /// # Safety
                /// That of the function it calls (nccl.h's contract).
                #[export_name = concat!("p", stringify!($name))]
                pub unsafe extern "C" fn alias($($arg: $ty),*) -> $ret {
                    // SAFETY: the caller's contract is the called function's.
                    unsafe { crate::api::$path::$name($($arg),*) }
                }
            }
        )*
        /// The functions that have a `pncclX` name, by their `ncclX` name.
        #[cfg_attr(not(test), allow(dead_code))]
        pub const ALIASED: &[&str] = &[$(stringify!($name),)* "ncclGroupSimulateEnd", "ncclResetDebugInit",
            "ncclLsaBarrierCreateRequirement", "ncclLLA2ACreateRequirement"];
    };
}

profiling_names! {
    errors::ncclGetErrorString(result: NcclResult) -> *const c_char;
    errors::ncclGetVersion(version: *mut c_int) -> NcclResult;
    errors::ncclGetLastError(comm: NcclComm) -> *const c_char;
    errors::ncclCommGetAsyncError(comm: NcclComm, async_error: *mut NcclResult) -> NcclResult;
    init::ncclGetUniqueId(unique_id: *mut UniqueId) -> NcclResult;
    init::ncclCommCount(comm: NcclComm, out: *mut c_int) -> NcclResult;
    init::ncclCommUserRank(comm: NcclComm, out: *mut c_int) -> NcclResult;
    init::ncclCommCuDevice(comm: NcclComm, out: *mut c_int) -> NcclResult;
    group::ncclGroupStart() -> NcclResult;
    group::ncclGroupEnd() -> NcclResult;
    init::ncclCommInitRank(comm: *mut NcclComm, nranks: c_int, comm_id: UniqueId, rank: c_int) -> NcclResult;
    init::ncclCommInitRankConfig(comm: *mut NcclComm, nranks: c_int, comm_id: UniqueId, rank: c_int, config: Opaque) -> NcclResult;
    init::ncclCommInitRankScalable(comm: *mut NcclComm, nranks: c_int, myrank: c_int, n_id: c_int, comm_ids: *mut UniqueId, config: Opaque) -> NcclResult;
    init::ncclCommInitAll(comms: *mut NcclComm, ndev: c_int, devlist: *const c_int) -> NcclResult;
    init::ncclCommSplit(comm: NcclComm, color: c_int, key: c_int, newcomm: *mut NcclComm, config: Opaque) -> NcclResult;
    init::ncclCommShrink(comm: NcclComm, exclude_ranks: *mut c_int, exclude_count: c_int, newcomm: *mut NcclComm, config: Opaque, shrink_flags: c_int) -> NcclResult;
    init::ncclCommFinalize(comm: NcclComm) -> NcclResult;
    init::ncclCommDestroy(comm: NcclComm) -> NcclResult;
    init::ncclCommAbort(comm: NcclComm) -> NcclResult;
    all_reduce::ncclAllReduce(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: NcclDataType, op: NcclRedOp, comm: NcclComm, stream: CudaStream) -> NcclResult;
    collectives::ncclAllGather(sendbuff: *const c_void, recvbuff: *mut c_void, sendcount: usize, datatype: NcclDataType, comm: NcclComm, stream: CudaStream) -> NcclResult;
    collectives::ncclReduceScatter(sendbuff: *const c_void, recvbuff: *mut c_void, recvcount: usize, datatype: NcclDataType, op: NcclRedOp, comm: NcclComm, stream: CudaStream) -> NcclResult;
    collectives::ncclBroadcast(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: NcclDataType, root: c_int, comm: NcclComm, stream: CudaStream) -> NcclResult;
    collectives::ncclBcast(buff: *mut c_void, count: usize, datatype: NcclDataType, root: c_int, comm: NcclComm, stream: CudaStream) -> NcclResult;
    rooted::ncclReduce(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: NcclDataType, op: NcclRedOp, root: c_int, comm: NcclComm, stream: CudaStream) -> NcclResult;
    rooted::ncclGather(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: NcclDataType, root: c_int, comm: NcclComm, stream: CudaStream) -> NcclResult;
    rooted::ncclScatter(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: NcclDataType, root: c_int, comm: NcclComm, stream: CudaStream) -> NcclResult;
    rooted::ncclAlltoAll(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: NcclDataType, comm: NcclComm, stream: CudaStream) -> NcclResult;
    p2p::ncclSend(sendbuff: *const c_void, count: usize, datatype: NcclDataType, peer: c_int, comm: NcclComm, stream: CudaStream) -> NcclResult;
    p2p::ncclRecv(recvbuff: *mut c_void, count: usize, datatype: NcclDataType, peer: c_int, comm: NcclComm, stream: CudaStream) -> NcclResult;
    memory::ncclMemAlloc(ptr: *mut *mut c_void, size: usize) -> NcclResult;
    memory::ncclMemFree(ptr: *mut c_void) -> NcclResult;
    memory::ncclCommRegister(comm: NcclComm, buff: *mut c_void, size: usize, handle: *mut *mut c_void) -> NcclResult;
    memory::ncclCommDeregister(comm: NcclComm, handle: *mut c_void) -> NcclResult;
    memory::ncclCommWindowRegister(comm: NcclComm, buff: *mut c_void, size: usize, win: *mut Opaque, win_flags: c_int) -> NcclResult;
    memory::ncclCommWindowDeregister(comm: NcclComm, win: Opaque) -> NcclResult;
    redop::ncclRedOpCreatePreMulSum(op: *mut NcclRedOp, scalar: *mut c_void, datatype: NcclDataType, residence: c_int, comm: NcclComm) -> NcclResult;
    redop::ncclRedOpDestroy(op: NcclRedOp, comm: NcclComm) -> NcclResult;
    device::ncclCommRevoke(comm: NcclComm, revoke_flags: c_int) -> NcclResult;
    device::ncclDevCommCreate(comm: NcclComm, reqs: Opaque, out_dev_comm: Opaque) -> NcclResult;
    device::ncclDevCommDestroy(comm: NcclComm, dev_comm: Opaque) -> NcclResult;
    device::ncclGinBarrierCreateRequirement(comm: NcclComm, team: Team, n_barriers: c_int, out_handle: Opaque, out_req: Opaque) -> NcclResult;
    device::ncclTeamWorld(comm: NcclComm) -> Team;
    device::ncclTeamLsa(comm: NcclComm) -> Team;
    device::ncclTeamRail(comm: NcclComm) -> Team;
    device::ncclTeamRankToWorld(comm: NcclComm, team: Team, rank: c_int) -> c_int;
    device::ncclTeamRankToLsa(comm: NcclComm, team: Team, rank: c_int) -> c_int;
    device::ncclLLA2ACalcSlots(max_elts: c_int, max_elt_size: c_int) -> c_int;
}

/// `pncclGroupSimulateEnd`: `ncclGroupSimulateEnd`, which this library
/// only forwards (forward/passthrough.rs).
///
/// # Safety
/// nccl.h's contract for `ncclGroupSimulateEnd`.
#[export_name = "pncclGroupSimulateEnd"]
pub unsafe extern "C" fn group_simulate_end(sim_info: Opaque) -> NcclResult {
    // SAFETY: the caller's contract is the called function's.
    unsafe { crate::forward::passthrough::ncclGroupSimulateEnd(sim_info) }
}

/// `pncclResetDebugInit`: `ncclResetDebugInit`, which this library only
/// forwards (forward/passthrough.rs).
///
/// # Safety
/// nccl.h's contract for `ncclResetDebugInit` (none).
#[export_name = "pncclResetDebugInit"]
pub unsafe extern "C" fn reset_debug_init() {
    // SAFETY: the caller's contract is the called function's.
    unsafe { crate::forward::passthrough::ncclResetDebugInit() }
}

/// `pncclLsaBarrierCreateRequirement`: `ncclLsaBarrierCreateRequirement`,
/// which this library only forwards (forward/passthrough.rs).
///
/// # Safety
/// nccl_device/lsa_barrier.h's contract for it.
#[export_name = "pncclLsaBarrierCreateRequirement"]
pub unsafe extern "C" fn lsa_barrier_create_requirement(
    team: Team,
    n_barriers: c_int,
    out_handle: Opaque,
    out_req: Opaque,
) -> NcclResult {
    // SAFETY: the caller's contract is the called function's.
    unsafe {
        crate::forward::passthrough::ncclLsaBarrierCreateRequirement(
            team, n_barriers, out_handle, out_req,
        )
    }
}

/// `pncclLLA2ACreateRequirement`: `ncclLLA2ACreateRequirement`, forwarded.
///
/// # Safety
/// nccl_device/ll_a2a.h's contract for it.
#[export_name = "pncclLLA2ACreateRequirement"]
pub unsafe extern "C" fn lla2a_create_requirement(
    n_blocks: c_int,
    n_slots: c_int,
    out_handle: Opaque,
    out_req: Opaque,
) -> NcclResult {
    // SAFETY: the caller's contract is the called function's.
    unsafe {
        crate::forward::passthrough::ncclLLA2ACreateRequirement(
            n_blocks, n_slots, out_handle, out_req,
        )
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_function_this_library_serves_has_its_profiling_name() {
        let exported: Vec<&str> = super::super::INTERCEPTED
            .iter()
            .chain(crate::forward::passthrough::FORWARDED)
            .copied()
            .collect();
        for name in &exported {
            assert!(super::ALIASED.contains(name), "{name} has no p{name}");
        }
        assert_eq!(
            super::ALIASED.len(),
            exported.len(),
            "an alias of a function not exported"
        );
    }
}
