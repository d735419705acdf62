//! Standalone communicators (docs/standalone.md): made by ncclCommInitRank
//! from a standalone unique id and served by tpcomm alone, with no real NCCL
//! under them (none need be loaded). This module keeps their handles and
//! answers the exports that only read or end one (the queries, finalize,
//! destroy, abort, the refusals); create.rs makes them (creation, split),
//! standalone/collectives.rs and gathered.rs run their collectives.
//!
//! A handle is the address of this library's own state, and is only ever
//! looked up in the table here, never dereferenced: a handle that is not in
//! the table (a real NCCL communicator) goes on to NCCL as before. Every
//! export that takes a communicator asks [`lookup`] first; with no
//! standalone communicator alive that is one atomic load.

use crate::settings::info;
use crate::standalone;
use crate::standalone::comm::StandaloneComm;
use crate::types::*;
use std::collections::HashMap;
use std::ffi::c_int;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, RwLock};
use tpcomm::cuda::SavedContext;

type Table = RwLock<HashMap<usize, Arc<StandaloneComm>>>;

fn table() -> &'static Table {
    static T: OnceLock<Table> = OnceLock::new();
    T.get_or_init(|| RwLock::new(HashMap::new()))
}

/// How many standalone communicators are alive: lets [`lookup`] skip the
/// table's lock for programs that never make one.
static ALIVE: AtomicUsize = AtomicUsize::new(0);

/// The standalone communicator `comm` is the handle of, if it is one.
pub fn lookup(comm: NcclComm) -> Option<Arc<StandaloneComm>> {
    if ALIVE.load(Ordering::Acquire) == 0 || comm.is_null() {
        return None;
    }
    // A poisoned lock still holds a valid table (every update is one map
    // operation): reading on keeps a standalone handle from ever being
    // taken for a foreign one and forwarded.
    let t = table().read().unwrap_or_else(|e| e.into_inner());
    t.get(&(comm as usize)).cloned()
}

/// Keeps `a` and gives its handle.
pub(crate) fn insert(a: StandaloneComm) -> NcclComm {
    let a = Arc::new(a);
    let h = Arc::as_ptr(&a) as usize;
    let mut t = table().write().unwrap_or_else(|e| e.into_inner());
    t.insert(h, a);
    ALIVE.fetch_add(1, Ordering::AcqRel);
    h as NcclComm
}

/// Gives the handle of a communicator made inside a group before it is
/// made: NCCL writes `*comm` at the creation call, and programs read it
/// there. Until [`settle`] puts the made communicator under it, the handle
/// answers the queries (rank, size, device) and refuses collectives (no
/// GPU side yet).
pub(crate) fn reserve(placeholder: StandaloneComm) -> NcclComm {
    insert(placeholder)
}

/// Puts the communicator of handle `made` under the reserved handle
/// `pending` (which the caller already holds) and forgets the placeholder.
/// False when either is unknown.
pub(crate) fn settle(pending: NcclComm, made: NcclComm) -> bool {
    let mut t = table().write().unwrap_or_else(|e| e.into_inner());
    if !t.contains_key(&(pending as usize)) {
        return false;
    }
    let Some(a) = t.remove(&(made as usize)) else {
        return false;
    };
    // Two entries become one.
    let placeholder = t.insert(pending as usize, a);
    ALIVE.fetch_sub(1, Ordering::AcqRel);
    drop(t);
    drop(placeholder);
    true
}

/// Forgets a reserved handle whose creation failed (it holds no GPU memory).
pub(crate) fn unreserve(pending: NcclComm) {
    remove(pending, true);
}

/// Forgets `comm`; with `free`, its GPU memory is freed (once no call is
/// using it), without, kept until the process exits (after an abort a
/// kernel may still wait for a peer that is gone).
fn remove(comm: NcclComm, free: bool) -> bool {
    creations_lock().remove(&(comm as usize));
    let gone = table()
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&(comm as usize));
    match gone {
        Some(a) => {
            ALIVE.fetch_sub(1, Ordering::AcqRel);
            if free {
                // Freeing binds the communicator's context; the caller's is
                // put back after (only a GPU side has anything to free).
                let _ctx = (a.live.is_some() || a.solo.is_some()).then(SavedContext::save);
                drop(a);
            } else {
                std::mem::forget(a);
            }
            true
        }
        None => false,
    }
}

/// Where a non-blocking creation (a config with `blocking = 0`) stands
/// while its thread makes the communicator under the reserved handle.
#[derive(Debug, Clone)]
enum Creation {
    Running,
    Failed(NcclResult, String),
}

/// Reserved handles whose non-blocking creation is running or failed.
fn creations() -> &'static std::sync::Mutex<HashMap<usize, Creation>> {
    static C: OnceLock<std::sync::Mutex<HashMap<usize, Creation>>> = OnceLock::new();
    C.get_or_init(Default::default)
}

fn creations_lock() -> std::sync::MutexGuard<'static, HashMap<usize, Creation>> {
    creations().lock().unwrap_or_else(|e| e.into_inner())
}

/// A non-blocking creation of `pending` has started: until [`creation_ended`],
/// ncclCommGetAsyncError on it says ncclInProgress.
pub(crate) fn creation_started(pending: NcclComm) {
    creations_lock().insert(pending as usize, Creation::Running);
}

/// The non-blocking creation of `pending` ended: with `Ok` its handle is a
/// made communicator; with `Err` ncclCommGetAsyncError reports the failure
/// (code and text) until the handle is destroyed.
pub(crate) fn creation_ended(pending: NcclComm, result: Result<(), (NcclResult, String)>) {
    let mut c = creations_lock();
    match result {
        Ok(()) => {
            c.remove(&(pending as usize));
        }
        // A handle destroyed while its creation ran is not remembered (its
        // address may be reused).
        Err((r, text)) if lookup(pending).is_some() => {
            c.insert(pending as usize, Creation::Failed(r, text));
        }
        Err(_) => {
            c.remove(&(pending as usize));
        }
    }
}

/// `ncclCommGetAsyncError`: a creation still running is ncclInProgress and
/// a failed one its failure; otherwise the kernels' check (a lost peer is
/// ncclRemoteError, with the text for ncclGetLastError).
pub fn async_error(comm: NcclComm, a: &StandaloneComm, out: *mut NcclResult) -> NcclResult {
    if out.is_null() {
        return standalone::fail(
            INVALID_ARGUMENT,
            "ncclCommGetAsyncError: the result pointer is NULL".into(),
        );
    }
    let creation = creations_lock().get(&(comm as usize)).cloned();
    let r = match (creation, a.live.as_ref().map(|l| l.gpu().check())) {
        (Some(Creation::Running), _) => IN_PROGRESS,
        (Some(Creation::Failed(r, text)), _) => standalone::fail(r, text),
        (None, Some(Err(e))) => {
            standalone::fail(REMOTE_ERROR, format!("rank {}/{}: {e}", a.rank, a.world))
        }
        (None, _) => SUCCESS,
    };
    // SAFETY: non-null, the caller's ncclResult_t.
    unsafe { *out = r };
    SUCCESS
}

/// `ncclCommCount`, `ncclCommUserRank`, `ncclCommCuDevice`: writes `v`.
pub fn write_int(call: &str, v: usize, out: *mut c_int) -> NcclResult {
    if out.is_null() {
        return standalone::fail(
            INVALID_ARGUMENT,
            format!("{call}: the result pointer is NULL"),
        );
    }
    // SAFETY: non-null, the caller's int.
    unsafe { *out = v as c_int };
    SUCCESS
}

/// `ncclCommFinalize`: nothing is queued outside the caller's streams, so
/// there is nothing to flush; the communicator stays until destroyed.
pub fn finalize(a: &StandaloneComm) -> NcclResult {
    info!("ncclCommFinalize: standalone rank {}/{}", a.rank, a.world);
    SUCCESS
}

/// `ncclCommDestroy` (frees the GPU memory) or `ncclCommAbort` (keeps it,
/// so that abort never waits for a kernel whose peer is gone).
pub fn release(call: &str, comm: NcclComm, free: bool) -> NcclResult {
    if remove(comm, free) {
        info!("{call}: standalone communicator released");
    }
    SUCCESS
}

/// Handles real NCCL made through this library while `TPCOMM_STANDALONE=1`
/// (a program may still create from an NCCL id it got elsewhere).
fn foreign() -> &'static RwLock<std::collections::HashSet<usize>> {
    static F: OnceLock<RwLock<std::collections::HashSet<usize>>> = OnceLock::new();
    F.get_or_init(Default::default)
}

/// Notes a communicator real NCCL made (api/init.rs), so that under
/// `TPCOMM_STANDALONE=1` it is still forwarded.
pub(crate) fn note_foreign(comm: NcclComm) {
    if crate::settings::get().standalone == crate::settings::Standalone::Always {
        foreign()
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(comm as usize);
    }
}

/// Forgets a communicator real NCCL made (destroyed or aborted).
pub(crate) fn forget_foreign(comm: NcclComm) {
    foreign()
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&(comm as usize));
}

/// For a handle that is not a standalone communicator: under
/// `TPCOMM_STANDALONE=1` every communicator is made by this library, so a
/// handle that is neither a standalone one nor one real NCCL made through
/// it (NULL, destroyed, or never a communicator) is refused with
/// ncclInvalidArgument, naming `call`, instead of being handed to NCCL,
/// which would read through it. `None`: forward it. In the other modes
/// NCCL's own communicators are not all known here, so nothing is refused.
pub fn unknown(call: &str, comm: NcclComm) -> Option<NcclResult> {
    if !is_unknown(comm) {
        return None;
    }
    let what = if comm.is_null() {
        format!("{call}: the communicator is NULL")
    } else {
        format!("{call}: {comm:p} is not a communicator of this process (never made, or already destroyed or aborted)")
    };
    Some(standalone::fail(INVALID_ARGUMENT, what))
}

/// Whether [`unknown`] refuses `comm` (without recording any text).
pub fn is_unknown(comm: NcclComm) -> bool {
    if crate::settings::get().standalone != crate::settings::Standalone::Always {
        return false;
    }
    comm.is_null()
        || !foreign()
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&(comm as usize))
}
