//! Communicator creation and management: creation and destruction (to pair
//! a tpcomm communicator with each real one, forward/paired.rs, or to make
//! and end a standalone one, standalone/create.rs and registry.rs), and the
//! queries a standalone communicator answers itself.

use crate::ffi::{call_real, guard, ConfigCopy, Fail};
use crate::forward::paired;
use crate::forward::wait_ready::wait_ready;
use crate::group;
use crate::settings::{self, info, warn, Standalone};
use crate::standalone;
use crate::standalone::auto_mode;
use crate::standalone::create;
use crate::standalone::registry;
use crate::types::*;
use std::cell::RefCell;
use std::ffi::c_int;
use tpcomm::cuda::{KeptContext, SavedContext};

thread_local! {
    /// Communicators created inside a group (with the census records to
    /// remove once made): NCCL makes them at ncclGroupEnd.
    pub(crate) static PENDING: RefCell<Vec<(usize, &'static str, Option<auto_mode::Tidy>)>> =
        const { RefCell::new(Vec::new()) };
}

/// An auto-mode creation inside a group whose census decides at
/// ncclGroupEnd ([`decide_pending`]): what it needs to be made then, by
/// tpcomm or by NCCL inside NCCL's still-open group.
struct Undecided {
    call: &'static str,
    /// The caller's `ncclComm_t*` (NCCL's contract keeps it valid until the
    /// group ends), holding `pending` until then.
    out: usize,
    /// The handle reserved and written at the call.
    pending: usize,
    nranks: c_int,
    rank: c_int,
    device: usize,
    /// ncclCommInitRankConfig's config, copied at the call; `None` for
    /// ncclCommInitRank.
    config: Option<ConfigCopy>,
    /// The thread's context at the call: NCCL takes the rank's GPU from
    /// the current one, and the thread may have selected another since.
    context: KeptContext,
}

thread_local! {
    static UNDECIDED: RefCell<Vec<(Undecided, auto_mode::Undecided)>> =
        const { RefCell::new(Vec::new()) };
}

/// At the outermost ncclGroupEnd, before NCCL's group closes: decides this
/// thread's undecided creations (auto_mode::decide_group, rank 0s first)
/// and makes each: a standalone one joins the group's standalone creations
/// under its reserved handle (create::finish_group, after NCCL's group), an
/// NCCL one goes to the real ncclCommInitRank(Config) now, on the context
/// of its call and inside the group, so NCCL makes it at the group's end
/// and PENDING sets tpcomm up beside it. NCCL writes its own handle to the
/// caller's pointer; the reserved one is forgotten. The first failure's
/// code, or success.
pub(crate) fn decide_pending() -> NcclResult {
    let asked = UNDECIDED.with_borrow_mut(std::mem::take);
    if asked.is_empty() {
        return SUCCESS;
    }
    let (asked, census): (Vec<Undecided>, Vec<auto_mode::Undecided>) = asked.into_iter().unzip();
    let decided = auto_mode::decide_group(census);
    let mut first = SUCCESS;
    for (u, creator) in asked.into_iter().zip(decided) {
        let r = make_decided(u, creator);
        // A non-blocking config's forward may say ncclInProgress: not a
        // failure (ncclGroupEnd's own result reports it).
        if !ok(r) && first == SUCCESS {
            first = r;
        }
    }
    first
}

/// One undecided creation, now decided.
fn make_decided(mut u: Undecided, creator: auto_mode::Creator) -> NcclResult {
    let out = u.out as *mut NcclComm;
    let pending = u.pending as NcclComm;
    let (rank, world) = (u.rank as usize, u.nranks as usize);
    let refused = |r: NcclResult| {
        registry::unreserve(pending);
        // SAFETY: the caller's non-null ncclComm_t*, valid until the group
        // ends (NCCL's contract).
        unsafe { *out = std::ptr::null_mut() };
        r
    };
    let (id, after) = match creator {
        auto_mode::Creator::Standalone(s) => {
            create::defer_reserved(u.call, out, pending, rank, world, s, u.device);
            return SUCCESS;
        }
        auto_mode::Creator::Nccl { id, after } => (UniqueId { internal: id }, after),
        auto_mode::Creator::Failed(r) => return refused(r),
        auto_mode::Creator::Undecided(_) => {
            return refused(standalone::fail(
                INTERNAL_ERROR,
                format!(
                "{} rank {rank}/{world}: the census left the creation undecided at ncclGroupEnd",
                u.call
            ),
            ))
        }
    };
    registry::unreserve(pending);
    // SAFETY: as above; NCCL writes its handle there.
    unsafe { *out = std::ptr::null_mut() };
    let back = SavedContext::save();
    if let Err(e) = u.context.bind() {
        return standalone::fail(
            SYSTEM_ERROR,
            format!("{} rank {rank}/{world}: the CUDA context of the creation call could not be made current again at ncclGroupEnd to hand the communicator to NCCL ({e})", u.call),
        );
    }
    let r = match u.config.as_mut() {
        None => call_real!(ncclCommInitRank(out, u.nranks, id, u.rank)
            as fn(*mut NcclComm, c_int, UniqueId, c_int) -> NcclResult),
        Some(c) => call_real!(
            ncclCommInitRankConfig(out, u.nranks, id, u.rank, c.as_ptr())
                as fn(*mut NcclComm, c_int, UniqueId, c_int, Opaque) -> NcclResult
        ),
    };
    drop(back);
    let r = r.unwrap_or_else(|_| NcclResult::missing());
    // SAFETY: as above.
    created(r, unsafe { *out }, u.call, after);
    r
}

pub(crate) fn ok(r: NcclResult) -> bool {
    r == SUCCESS || r == IN_PROGRESS
}

/// After the real creation of `comm` returned `r`: once NCCL has made it
/// (now, at the end of the enclosing group, or when a non-blocking creation
/// is ready), remove the census records of `after` and set tpcomm up. A
/// failed creation leaves the records (its peers may still read them).
fn created(r: NcclResult, comm: NcclComm, origin: &'static str, after: Option<auto_mode::Tidy>) {
    if !ok(r) || comm.is_null() {
        return;
    }
    registry::note_foreign(comm);
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
pub(crate) fn made(comm: NcclComm, origin: &'static str, after: Option<auto_mode::Tidy>) {
    if let Some(t) = after {
        t.done(SUCCESS);
    }
    if !settings::get().disabled {
        paired::set_up(comm, origin);
    }
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
    blocking: create::Blocking,
    config: Option<Opaque>,
) -> Result<(UniqueId, Option<auto_mode::Tidy>), NcclResult> {
    if let Some(secret) = standalone::parse(&id.internal) {
        if let Err(why) = standalone::check_host(&id.internal) {
            return Err(standalone::fail(
                standalone::INVALID_USAGE,
                format!("{call} rank {rank}: {why}"),
            ));
        }
        return Err(create::create(call, comm, nranks, secret, rank, blocking));
    }
    match auto_mode::choose_creator(call, &id.internal, nranks, rank) {
        auto_mode::Creator::Nccl { id, after } => Ok((UniqueId { internal: id }, after)),
        auto_mode::Creator::Standalone(secret) => {
            Err(create::create(call, comm, nranks, secret, rank, blocking))
        }
        auto_mode::Creator::Failed(r) => Err(r),
        auto_mode::Creator::Undecided(census) => Err(defer(call, comm, config, census)),
    }
}

/// Inside a group, a census posted and undecided: the handle is reserved
/// and written now (NCCL writes it at the call too), and the creation is
/// decided and made at the outermost ncclGroupEnd ([`decide_pending`]).
fn defer(
    call: &'static str,
    comm: *mut NcclComm,
    config: Option<Opaque>,
    census: auto_mode::Undecided,
) -> NcclResult {
    let (rank, world) = (census.rank(), census.world());
    if comm.is_null() {
        auto_mode::abandon(census, "its communicator pointer is NULL");
        return standalone::fail(
            INVALID_ARGUMENT,
            format!("{call} rank {rank}/{world}: the communicator pointer is NULL"),
        );
    }
    // The census named this rank's GPU, so a context is current.
    let Some(device) = tpcomm::cuda::current_device() else {
        auto_mode::abandon(census, "no CUDA context is current on its thread");
        return standalone::fail(
            CUDA_ERROR,
            format!("{call} rank {rank}/{world}: no CUDA context is current on this thread"),
        );
    };
    let pending = create::reserve_in_group(comm, rank, world, census.secret(), device);
    info!("{call} rank {rank}/{world} GPU {device}: inside a group; the census decides at ncclGroupEnd, when every rank this thread creates has posted");
    let u = Undecided {
        call,
        out: comm as usize,
        pending: pending as usize,
        nranks: world as c_int,
        rank: rank as c_int,
        device,
        config: config.map(ConfigCopy::of),
        context: KeptContext::current(),
    };
    UNDECIDED.with_borrow_mut(|v| v.push((u, census)));
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommInitRank(
    comm: *mut NcclComm,
    nranks: c_int,
    comm_id: UniqueId,
    rank: c_int,
) -> NcclResult {
    guard("ncclCommInitRank", || {
        let (comm_id, after) = match nccl_id_or_served(
            "ncclCommInitRank",
            comm,
            nranks,
            &comm_id,
            rank,
            create::Blocking::of_config(std::ptr::null_mut()),
            None,
        ) {
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
        // The config's only field that matters to a standalone communicator
        // is `blocking`: a non-blocking one is made on a thread of its own
        // and the call returns ncclInProgress. Auto mode's census blocks even
        // a non-blocking creation (at most the census wait on rank 0).
        let (comm_id, after) = match nccl_id_or_served(
            "ncclCommInitRankConfig",
            comm,
            nranks,
            &comm_id,
            rank,
            create::Blocking::of_config(config),
            Some(config),
        ) {
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
        // Auto mode: outside a group, a census under the first id (every
        // rank is given the same ids) decides, as ncclCommInitRank's does;
        // the marks are taken off a copy of the ids for NCCL. Inside a group
        // the creation is NCCL's.
        let mut unmarked: Vec<UniqueId> = Vec::new();
        let mut after = None;
        if !comm_ids.is_null() && n_id > 0 {
            // SAFETY: non-null, and nccl.h's contract gives `n_id` ids there.
            let ids = unsafe { std::slice::from_raw_parts(comm_ids, n_id as usize) };
            // Every rank is given the same ids; standalone ranks meet
            // under the first, as ncclCommInitRank's do under theirs.
            const CALL: &str = "ncclCommInitRankScalable";
            let served = if let Some(secret) = standalone::parse(&ids[0].internal) {
                if let Err(why) = standalone::check_host(&ids[0].internal) {
                    return standalone::fail(
                        standalone::INVALID_USAGE,
                        format!("{CALL} rank {myrank}: {why}"),
                    );
                }
                Some(secret)
            } else if group::depth() == 0 && auto_mode::read_mark(&ids[0].internal).is_some() {
                match auto_mode::choose_creator(CALL, &ids[0].internal, nranks, myrank) {
                    auto_mode::Creator::Standalone(secret) => Some(secret),
                    auto_mode::Creator::Failed(r) => return r,
                    auto_mode::Creator::Nccl { after: a, .. } => {
                        after = a;
                        None
                    }
                    // Only a creation inside a group is left undecided.
                    auto_mode::Creator::Undecided(c) => {
                        auto_mode::abandon(c, "a scalable creation decides at the call");
                        None
                    }
                }
            } else {
                None
            };
            if let Some(secret) = served {
                return create::create(
                    CALL,
                    comm,
                    nranks,
                    secret,
                    myrank,
                    create::Blocking::of_config(config),
                );
            }
            if ids
                .iter()
                .any(|i| auto_mode::read_mark(&i.internal).is_some())
            {
                unmarked = ids
                    .iter()
                    .map(|i| UniqueId {
                        internal: auto_mode::unmarked(&i.internal),
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
            created(r, unsafe { *comm }, "ncclCommInitRankScalable", after);
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
        // Standalone mode, or auto mode with two ranks on one GPU (all the
        // ranks are this call's, so no census is needed): the ranks are
        // made here, one thread each; NCCL would refuse ranks sharing a GPU.
        let standalone = match settings::get().standalone {
            Standalone::Always => true,
            // SAFETY: nccl.h's contract: `devlist`, when non-NULL, holds `ndev` ordinals.
            Standalone::Auto => unsafe { shares_a_gpu(ndev, devlist) },
            Standalone::Never => false,
        };
        if standalone {
            info!("ncclCommInitAll: {ndev} ranks, two of them on one GPU: made by tpcomm (standalone), since NCCL refuses ranks that share a GPU");
            return create::create_all(comms, ndev, devlist);
        }
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
            paired::set_up_all(&cs, &devs);
        }
        r
    })
}

/// Whether `ncclCommInitAll`'s device list puts two ranks on one GPU
/// (NULL means 0..ndev, which never does; so does a count of 1 or less).
///
/// # Safety
/// `devlist`, when non-NULL, points to `ndev` ints.
unsafe fn shares_a_gpu(ndev: c_int, devlist: *const c_int) -> bool {
    if devlist.is_null() || ndev < 2 {
        return false;
    }
    // SAFETY: the caller's contract.
    let d = unsafe { std::slice::from_raw_parts(devlist, ndev as usize) };
    let mut seen = std::collections::HashSet::new();
    d.iter().any(|x| !seen.insert(*x))
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
        if let Some(a) = registry::lookup(comm) {
            return create::split(&a, color, key, newcomm);
        }
        if let Some(r) = registry::unknown("ncclCommSplit", comm) {
            return r;
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
        if let Some(a) = registry::lookup(comm) {
            return create::shrink(&a, exclude_ranks, exclude_count, newcomm);
        }
        if let Some(r) = registry::unknown("ncclCommShrink", comm) {
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
        if let Some(a) = registry::lookup(comm) {
            return registry::finalize(&a);
        }
        if let Some(r) = registry::unknown("ncclCommFinalize", comm) {
            return r;
        }
        // No collective may follow a finalize: stop routing to tpcomm now.
        if paired::remove(comm, true) {
            info!("ncclCommFinalize: tpcomm communicator released");
        }
        call_real!(ncclCommFinalize(comm) as fn(NcclComm) -> NcclResult)
            .unwrap_or_else(|_| NcclResult::missing())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommDestroy(comm: NcclComm) -> NcclResult {
    guard("ncclCommDestroy", || {
        if registry::lookup(comm).is_some() {
            return registry::release("ncclCommDestroy", comm, true);
        }
        if let Some(r) = registry::unknown("ncclCommDestroy", comm) {
            return r;
        }
        registry::forget_foreign(comm);
        if paired::remove(comm, true) {
            info!("ncclCommDestroy: tpcomm communicator released");
        }
        call_real!(ncclCommDestroy(comm) as fn(NcclComm) -> NcclResult)
            .unwrap_or_else(|_| NcclResult::missing())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommAbort(comm: NcclComm) -> NcclResult {
    guard("ncclCommAbort", || {
        if registry::lookup(comm).is_some() {
            return registry::release("ncclCommAbort", comm, false);
        }
        if let Some(r) = registry::unknown("ncclCommAbort", comm) {
            return r;
        }
        registry::forget_foreign(comm);
        if paired::remove(comm, false) {
            info!("ncclCommAbort: tpcomm communicator retired (its buffers stay allocated until the process exits, so that abort never waits for a tpcomm kernel)");
        }
        call_real!(ncclCommAbort(comm) as fn(NcclComm) -> NcclResult)
            .unwrap_or_else(|_| NcclResult::missing())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclGetUniqueId(unique_id: *mut UniqueId) -> NcclResult {
    guard("ncclGetUniqueId", || {
        if settings::get().standalone == Standalone::Always {
            if unique_id.is_null() {
                return standalone::fail(
                    INVALID_ARGUMENT,
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
            match auto_mode::mark(id) {
                Ok(Some(_)) => info!("ncclGetUniqueId: NCCL's id, marked for auto standalone mode"),
                Ok(None) => info!("ncclGetUniqueId: NCCL's id has data in its last 64 bytes; left unmarked (no auto standalone mode for it)"),
                Err(e) => warn!("ncclGetUniqueId: NCCL's id left unmarked, so no auto standalone mode for it ({e})"),
            }
        }
        r
    })
}

/// Defines the integer queries on a communicator: a standalone one answers
/// from its own state, any other is forwarded.
macro_rules! int_query {
    ($($name:ident => |$a:ident| $v:expr;)*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(comm: NcclComm, out: *mut c_int) -> NcclResult {
            guard(stringify!($name), || {
                if let Some($a) = registry::lookup(comm) {
                    return registry::write_int(stringify!($name), $v, out);
                }
                if let Some(r) = registry::unknown(stringify!($name), comm) {
                    return r;
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

#[cfg(test)]
mod tests {
    use super::shares_a_gpu;

    #[test]
    fn init_all_is_served_standalone_in_auto_mode_only_when_two_ranks_share_a_gpu() {
        // SAFETY: each list is read within its length.
        let yes = |d: &[i32]| unsafe { shares_a_gpu(d.len() as i32, d.as_ptr()) };
        assert!(yes(&[0, 0]));
        assert!(yes(&[0, 1, 2, 1]));
        assert!(yes(&[3, 3, 3, 3, 3, 3, 3, 3]));
        assert!(!yes(&[0, 1, 2, 3]));
        assert!(!yes(&[5]));
        // NULL is 0..ndev; a bad count is NCCL's to refuse.
        // SAFETY: NULL is not read; counts below 2 read nothing.
        unsafe {
            assert!(!shares_a_gpu(4, std::ptr::null()));
            assert!(!shares_a_gpu(-1, [0, 0].as_ptr()));
            assert!(!shares_a_gpu(0, [0, 0].as_ptr()));
        }
    }
}
