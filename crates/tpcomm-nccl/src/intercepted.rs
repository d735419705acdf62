//! The NCCL functions this library does more than forward: communicator
//! creation and destruction (to keep a tpcomm communicator beside each real
//! one, or to make and end a standalone one: created.rs and served.rs), group brackets (to
//! know when NCCL's group semantics apply), and the queries a standalone
//! communicator answers itself. All-reduce itself is in allreduce.rs.

use crate::auto;
use crate::created;
use crate::ffi::{call_real, guard, Fail};
use crate::group;
use crate::ready::wait_ready;
use crate::served;
use crate::settings::{self, info, warn, Standalone};
use crate::standalone;
use crate::state;
use crate::types::*;
use std::cell::RefCell;
use std::ffi::{c_char, c_int};

/// Every function this library does more than forward (defined here, in
/// allreduce.rs and in collectives.rs), by name.
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
];

thread_local! {
    /// Communicators created inside a group (with the census records to
    /// remove once made): NCCL makes them at ncclGroupEnd.
    static PENDING: RefCell<Vec<(usize, &'static str, Option<auto::Tidy>)>> =
        const { RefCell::new(Vec::new()) };
}

fn ok(r: NcclResult) -> bool {
    r == SUCCESS || r == IN_PROGRESS
}

/// After the real creation of `comm` returned `r`: once NCCL has made it
/// (now, at the end of the enclosing group, or when a non-blocking creation
/// is ready), remove the census records of `after` and set tpcomm up. A
/// failed creation leaves the records (its peers may still read them).
fn created(r: NcclResult, comm: NcclComm, origin: &'static str, after: Option<auto::Tidy>) {
    if !ok(r) || comm.is_null() {
        return;
    }
    if group::depth() > 0 {
        info!("{origin}: inside a group; tpcomm set-up waits for ncclGroupEnd");
        PENDING.with_borrow_mut(|p| p.push((comm as usize, origin, after)));
        return;
    }
    if r == IN_PROGRESS && !wait_ready(comm) {
        return;
    }
    made(comm, origin, after);
}

/// NCCL has made `comm`: its census records go, and tpcomm is set up beside
/// it (unless tpcomm is disabled).
fn made(comm: NcclComm, origin: &'static str, after: Option<auto::Tidy>) {
    if let Some(t) = after {
        t.done(SUCCESS);
    }
    if !settings::get().disabled {
        state::set_up(comm, origin);
    }
}

#[no_mangle]
pub unsafe extern "C" fn ncclGetErrorString(result: NcclResult) -> *const c_char {
    guard("ncclGetErrorString", || {
        call_real!(ncclGetErrorString(result) as fn(NcclResult) -> *const c_char)
            .unwrap_or_else(|_| error_string(result).as_ptr())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclGroupStart() -> NcclResult {
    guard("ncclGroupStart", || {
        // Standalone mode has no real NCCL to group with: calls on a
        // standalone communicator run in order as they come. Auto mode
        // groups with NCCL (its real communicators keep NCCL's group
        // semantics); calls on a served communicator inside the group still
        // run at once (served::lookup comes first) and never reach NCCL.
        if settings::get().standalone == Standalone::Always {
            group::enter();
            return SUCCESS;
        }
        match call_real!(ncclGroupStart() as fn() -> NcclResult) {
            Ok(r) => {
                if r == SUCCESS {
                    group::enter();
                }
                r
            }
            Err(_) => NcclResult::missing(),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclGroupEnd() -> NcclResult {
    guard("ncclGroupEnd", || {
        if settings::get().standalone == Standalone::Always {
            group::leave();
            return SUCCESS;
        }
        let r = match call_real!(ncclGroupEnd() as fn() -> NcclResult) {
            Ok(r) => r,
            Err(_) => return NcclResult::missing(),
        };
        // NCCL leaves the group whatever the result.
        group::leave();
        if group::depth() == 0 {
            for (comm, origin, after) in PENDING.take() {
                let comm = comm as NcclComm;
                if ok(r) && (r == SUCCESS || wait_ready(comm)) {
                    made(comm, origin, after);
                }
            }
        }
        r
    })
}

/// What ncclCommInitRank and ncclCommInitRankConfig do before the real
/// NCCL: a standalone id (`TPCOMM_STANDALONE=1`) or auto mode's decision to
/// serve the group makes the communicator here, or fails it (`Err`, the
/// call's result); otherwise `Ok`: the id to hand NCCL (a marked one as
/// NCCL made it, any other untouched) and the census records to tidy once
/// NCCL has made the communicator.
fn nccl_id_or_served(
    call: &'static str,
    comm: *mut NcclComm,
    nranks: c_int,
    id: &UniqueId,
    rank: c_int,
) -> Result<(UniqueId, Option<auto::Tidy>), NcclResult> {
    if let Some(secret) = standalone::parse(&id.internal) {
        if let Err(why) = standalone::check_host(&id.internal) {
            return Err(standalone::fail(
                standalone::INVALID_USAGE,
                format!("{call} rank {rank}: {why}"),
            ));
        }
        return Err(created::create(call, comm, nranks, secret, rank));
    }
    match auto::route(call, &id.internal, nranks, rank) {
        auto::Route::Nccl { id, after } => Ok((UniqueId { internal: id }, after)),
        auto::Route::Standalone(secret) => Err(created::create(call, comm, nranks, secret, rank)),
        auto::Route::Failed(r) => Err(r),
    }
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommInitRank(
    comm: *mut NcclComm,
    nranks: c_int,
    comm_id: UniqueId,
    rank: c_int,
) -> NcclResult {
    guard("ncclCommInitRank", || {
        let (comm_id, after) =
            match nccl_id_or_served("ncclCommInitRank", comm, nranks, &comm_id, rank) {
                Ok(to_nccl) => to_nccl,
                Err(served) => return served,
            };
        let r = match call_real!(ncclCommInitRank(comm, nranks, comm_id, rank)
            as fn(*mut NcclComm, c_int, UniqueId, c_int) -> NcclResult)
        {
            Ok(r) => r,
            Err(_) => return NcclResult::missing(),
        };
        if !comm.is_null() {
            // SAFETY: non-null, and NCCL wrote the communicator there.
            created(r, unsafe { *comm }, "ncclCommInitRank", after);
        }
        r
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommInitRankConfig(
    comm: *mut NcclComm,
    nranks: c_int,
    comm_id: UniqueId,
    rank: c_int,
    config: Opaque,
) -> NcclResult {
    guard("ncclCommInitRankConfig", || {
        // The config's only field that matters here is `blocking`, and a
        // standalone communicator is always ready when creation returns;
        // the census blocks even a non-blocking creation (at most the
        // census wait on rank 0).
        let (comm_id, after) =
            match nccl_id_or_served("ncclCommInitRankConfig", comm, nranks, &comm_id, rank) {
                Ok(to_nccl) => to_nccl,
                Err(served) => return served,
            };
        let r = match call_real!(ncclCommInitRankConfig(comm, nranks, comm_id, rank, config)
            as fn(*mut NcclComm, c_int, UniqueId, c_int, Opaque) -> NcclResult)
        {
            Ok(r) => r,
            Err(_) => return NcclResult::missing(),
        };
        // In progress (non-blocking): the records go once it is ready.
        if !comm.is_null() {
            // SAFETY: non-null, and NCCL wrote the communicator there.
            created(r, unsafe { *comm }, "ncclCommInitRankConfig", after);
        }
        r
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommInitRankScalable(
    comm: *mut NcclComm,
    nranks: c_int,
    myrank: c_int,
    n_id: c_int,
    comm_ids: *mut UniqueId,
    config: Opaque,
) -> NcclResult {
    guard("ncclCommInitRankScalable", || {
        // Auto mode's marks are taken off a copy of the ids (no census:
        // this creation is always NCCL's).
        let mut unmarked: Vec<UniqueId> = Vec::new();
        if !comm_ids.is_null() && n_id > 0 {
            // SAFETY: non-null, and nccl.h's contract gives `n_id` ids there.
            let ids = unsafe { std::slice::from_raw_parts(comm_ids, n_id as usize) };
            if standalone::parse(&ids[0].internal).is_some() {
                return standalone::unservable(
                    "ncclCommInitRankScalable",
                    "a standalone id is made for ncclCommInitRank and ncclCommInitRankConfig",
                );
            }
            if ids.iter().any(|i| auto::read_mark(&i.internal).is_some()) {
                unmarked = ids
                    .iter()
                    .map(|i| UniqueId {
                        internal: auto::unmarked(&i.internal),
                    })
                    .collect();
            }
        }
        let comm_ids = if unmarked.is_empty() {
            comm_ids
        } else {
            unmarked.as_mut_ptr()
        };
        let r = match call_real!(ncclCommInitRankScalable(
            comm, nranks, myrank, n_id, comm_ids, config
        )
            as fn(*mut NcclComm, c_int, c_int, c_int, *mut UniqueId, Opaque) -> NcclResult)
        {
            Ok(r) => r,
            Err(_) => return NcclResult::missing(),
        };
        if !comm.is_null() {
            // SAFETY: non-null, and NCCL wrote the communicator there.
            created(r, unsafe { *comm }, "ncclCommInitRankScalable", None);
        }
        r
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommInitAll(
    comms: *mut NcclComm,
    ndev: c_int,
    devlist: *const c_int,
) -> NcclResult {
    guard("ncclCommInitAll", || {
        let r = match call_real!(ncclCommInitAll(comms, ndev, devlist)
            as fn(*mut NcclComm, c_int, *const c_int) -> NcclResult)
        {
            Ok(r) => r,
            Err(_) => return NcclResult::missing(),
        };
        if r == SUCCESS && !comms.is_null() && ndev > 0 && !settings::get().disabled {
            let n = ndev as usize;
            // NCCL filled `ndev` communicators; `devlist`, when given, holds
            // `ndev` device ordinals (NULL means 0..ndev).
            // SAFETY: as said above.
            let cs: Vec<NcclComm> = unsafe { std::slice::from_raw_parts(comms, n) }.to_vec();
            let devs: Vec<usize> = if devlist.is_null() {
                (0..n).collect()
            } else {
                // SAFETY: as said above.
                unsafe { std::slice::from_raw_parts(devlist, n) }
                    .iter()
                    .map(|&d| d.max(0) as usize)
                    .collect()
            };
            state::set_up_all(&cs, &devs);
        }
        r
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommSplit(
    comm: NcclComm,
    color: c_int,
    key: c_int,
    newcomm: *mut NcclComm,
    config: Opaque,
) -> NcclResult {
    guard("ncclCommSplit", || {
        if let Some(a) = served::lookup(comm) {
            return created::split(&a, color, key, newcomm);
        }
        let r = match call_real!(ncclCommSplit(comm, color, key, newcomm, config)
            as fn(NcclComm, c_int, c_int, *mut NcclComm, Opaque) -> NcclResult)
        {
            Ok(r) => r,
            Err(_) => return NcclResult::missing(),
        };
        // Ranks split off with NCCL_SPLIT_NOCOLOR get no communicator.
        if !newcomm.is_null() {
            // SAFETY: non-null, and NCCL wrote the communicator there.
            created(r, unsafe { *newcomm }, "ncclCommSplit", None);
        }
        r
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommShrink(
    comm: NcclComm,
    exclude_ranks: *mut c_int,
    exclude_count: c_int,
    newcomm: *mut NcclComm,
    config: Opaque,
    shrink_flags: c_int,
) -> NcclResult {
    guard("ncclCommShrink", || {
        if let Some(r) = served::refused("ncclCommShrink", comm) {
            return r;
        }
        let r = match call_real!(ncclCommShrink(
            comm,
            exclude_ranks,
            exclude_count,
            newcomm,
            config,
            shrink_flags
        )
            as fn(NcclComm, *mut c_int, c_int, *mut NcclComm, Opaque, c_int) -> NcclResult)
        {
            Ok(r) => r,
            Err(_) => return NcclResult::missing(),
        };
        if !newcomm.is_null() {
            // SAFETY: non-null, and NCCL wrote the communicator there.
            created(r, unsafe { *newcomm }, "ncclCommShrink", None);
        }
        r
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommFinalize(comm: NcclComm) -> NcclResult {
    guard("ncclCommFinalize", || {
        if let Some(a) = served::lookup(comm) {
            return served::finalize(&a);
        }
        // No collective may follow a finalize: stop routing to tpcomm now.
        if state::remove(comm, true) {
            info!("ncclCommFinalize: tpcomm communicator released");
        }
        call_real!(ncclCommFinalize(comm) as fn(NcclComm) -> NcclResult)
            .unwrap_or_else(|_| NcclResult::missing())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommDestroy(comm: NcclComm) -> NcclResult {
    guard("ncclCommDestroy", || {
        if served::lookup(comm).is_some() {
            return served::release("ncclCommDestroy", comm, true);
        }
        if state::remove(comm, true) {
            info!("ncclCommDestroy: tpcomm communicator released");
        }
        call_real!(ncclCommDestroy(comm) as fn(NcclComm) -> NcclResult)
            .unwrap_or_else(|_| NcclResult::missing())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommAbort(comm: NcclComm) -> NcclResult {
    guard("ncclCommAbort", || {
        if served::lookup(comm).is_some() {
            return served::release("ncclCommAbort", comm, false);
        }
        if state::remove(comm, false) {
            info!("ncclCommAbort: tpcomm communicator retired (its buffers stay allocated until the process exits, so that abort never waits for a tpcomm kernel)");
        }
        call_real!(ncclCommAbort(comm) as fn(NcclComm) -> NcclResult)
            .unwrap_or_else(|_| NcclResult::missing())
    })
}

/// The NCCL version this library's API is (nccl.h 2.28): what
/// ncclGetVersion says in standalone mode when no real NCCL is there.
const API_VERSION: c_int = 22800;

#[no_mangle]
pub unsafe extern "C" fn ncclGetVersion(version: *mut c_int) -> NcclResult {
    guard("ncclGetVersion", || {
        match call_real!(ncclGetVersion(version) as fn(*mut c_int) -> NcclResult) {
            Ok(r) => r,
            Err(_) if settings::get().standalone == Standalone::Always && !version.is_null() => {
                // SAFETY: non-null, the caller's int.
                unsafe { *version = API_VERSION };
                SUCCESS
            }
            Err(_) => NcclResult::missing(),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclGetUniqueId(unique_id: *mut UniqueId) -> NcclResult {
    guard("ncclGetUniqueId", || {
        if settings::get().standalone == Standalone::Always {
            if unique_id.is_null() {
                return standalone::fail(
                    served::INVALID_ARGUMENT,
                    "ncclGetUniqueId: the id pointer is NULL".into(),
                );
            }
            return match standalone::new_id() {
                Ok(id) => {
                    // SAFETY: non-null, the caller's ncclUniqueId.
                    unsafe { (*unique_id).internal = id };
                    SUCCESS
                }
                Err(e) => standalone::fail(
                    SYSTEM_ERROR,
                    format!("ncclGetUniqueId: no standalone id ({e})"),
                ),
            };
        }
        let r = call_real!(ncclGetUniqueId(unique_id) as fn(*mut UniqueId) -> NcclResult)
            .unwrap_or_else(|_| NcclResult::missing());
        let s = settings::get();
        if s.standalone == Standalone::Auto && s.nccl_comm_id {
            info!("ncclGetUniqueId: NCCL_COMM_ID is set, so the ranks may not share this id; left unmarked (no auto standalone mode for it)");
        } else if r == SUCCESS && !unique_id.is_null() && s.standalone == Standalone::Auto {
            // SAFETY: non-null, the caller's ncclUniqueId, which NCCL has
            // just written.
            let id = unsafe { &mut (*unique_id).internal };
            match auto::mark(id) {
                Ok(Some(_)) => info!("ncclGetUniqueId: NCCL's id, marked for auto standalone mode"),
                Ok(None) => info!("ncclGetUniqueId: NCCL's id has data in its last 64 bytes; left unmarked (no auto standalone mode for it)"),
                Err(e) => warn!("ncclGetUniqueId: NCCL's id left unmarked, so no auto standalone mode for it ({e})"),
            }
        }
        r
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclGetLastError(comm: NcclComm) -> *const c_char {
    guard("ncclGetLastError", || {
        // Standalone mode's own text for its communicators, and for the
        // calls that take none (creation, ids) when it is on; in auto mode
        // for those when tpcomm failed the last creation (a census, a
        // standalone communicator: one handed to NCCL clears the text).
        let mode = settings::get().standalone;
        let ours = served::lookup(comm).is_some()
            || (comm.is_null() && mode == Standalone::Always)
            || (comm.is_null() && mode == Standalone::Auto && standalone::has_last_error());
        if ours {
            return standalone::last_error_ptr();
        }
        call_real!(ncclGetLastError(comm) as fn(NcclComm) -> *const c_char).unwrap_or_else(|_| {
            if standalone::has_last_error() {
                standalone::last_error_ptr()
            } else {
                <*const c_char>::missing()
            }
        })
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommGetAsyncError(
    comm: NcclComm,
    async_error: *mut NcclResult,
) -> NcclResult {
    guard("ncclCommGetAsyncError", || {
        if let Some(a) = served::lookup(comm) {
            return served::async_error(&a, async_error);
        }
        call_real!(
            ncclCommGetAsyncError(comm, async_error) as fn(NcclComm, *mut NcclResult) -> NcclResult
        )
        .unwrap_or_else(|_| NcclResult::missing())
    })
}

/// Defines the integer queries on a communicator: a standalone one answers
/// from its own state, any other is forwarded.
macro_rules! int_query {
    ($($name:ident => |$a:ident| $v:expr;)*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(comm: NcclComm, out: *mut c_int) -> NcclResult {
            guard(stringify!($name), || {
                if let Some($a) = served::lookup(comm) {
                    return served::write_int(stringify!($name), $v, out);
                }
                call_real!($name(comm, out) as fn(NcclComm, *mut c_int) -> NcclResult)
                    .unwrap_or_else(|_| NcclResult::missing())
            })
        }
    )*};
}

int_query! {
    ncclCommCount => |a| a.world;
    ncclCommUserRank => |a| a.rank;
    ncclCommCuDevice => |a| a.device;
}
