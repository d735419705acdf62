//! Every call into NCCL lives here; the wrapper above (`nccl/mod.rs`) calls
//! the collectives' `unsafe fn`s with its caller's device pointers.
//!
//! NCCL is opened with `dlopen` at run time (so tpcomm builds and runs on
//! machines without it) and its C functions are looked up by name. The
//! signatures below are those of `nccl.h` for NCCL 2.x, whose C ABI has been
//! stable across the 2.x series; `Api::open` refuses any other major version.

use super::cstr_to_string;
use libloading::Library;
use std::ffi::{c_char, c_int, c_void, OsStr};

/// `ncclComm_t`: an opaque pointer owned by NCCL.
pub(crate) type RawComm = *mut c_void;

/// A communicator created by [`Api::comm_init_rank`] and not yet freed. Only
/// `nccl/mod.rs` holds one, always next to the `Api` that made it.
pub(crate) struct OwnedComm(RawComm);

// SAFETY: an NCCL communicator may be used from any thread, one thread at a
// time. `OwnedComm` is not `Sync`, and its owner calls NCCL through `&self` of
// a single value, so moving it to another thread is sound.
unsafe impl Send for OwnedComm {}

impl OwnedComm {
    pub(crate) fn raw(&self) -> RawComm {
        self.0
    }
}

/// `ncclUniqueId`: 128 opaque bytes, passed by value to `ncclCommInitRank`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct RawUniqueId {
    pub internal: [c_char; 128],
}

/// `ncclResult_t` values that tpcomm treats specially.
pub(crate) const NCCL_SUCCESS: c_int = 0;
pub(crate) const NCCL_UNHANDLED_CUDA_ERROR: c_int = 1;

type GetVersionFn = unsafe extern "C" fn(*mut c_int) -> c_int;
type GetUniqueIdFn = unsafe extern "C" fn(*mut RawUniqueId) -> c_int;
type CommInitRankFn = unsafe extern "C" fn(*mut RawComm, c_int, RawUniqueId, c_int) -> c_int;
type AllReduceFn = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    c_int,
    c_int,
    RawComm,
    *mut c_void,
) -> c_int;
type AllGatherFn =
    unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, RawComm, *mut c_void) -> c_int;
type ReduceScatterFn = AllReduceFn;
/// The same C signature, the root in the op's place.
type BroadcastFn = AllReduceFn;
type CommFn = unsafe extern "C" fn(RawComm) -> c_int;

/// `f` (ncclAllReduce, ncclReduceScatter or ncclBroadcast) on `b` with `arg`
/// (the op, or the root).
///
/// # Safety
/// `f`'s contract (`Api::all_reduce` says it).
unsafe fn call_on(f: AllReduceFn, b: &Buffers, arg: c_int, comm: RawComm) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        f(
            b.send_ptr(),
            b.recv_ptr(),
            b.count,
            b.dtype,
            arg,
            comm,
            b.stream,
        )
    }
}
type GetErrorStringFn = unsafe extern "C" fn(c_int) -> *const c_char;
type GetLastErrorFn = unsafe extern "C" fn(RawComm) -> *const c_char;

/// The opened library and the functions tpcomm uses.
///
/// The function pointers point into `_lib`'s mapping; they are private and
/// only called through `&self`, so they can never outlive the library.
pub(crate) struct Api {
    _lib: Library,
    get_version: GetVersionFn,
    get_unique_id: GetUniqueIdFn,
    comm_init_rank: CommInitRankFn,
    all_reduce: AllReduceFn,
    /// The other collectives (collectives.rs); looked up but not required,
    /// so a library lacking one still serves the all-reduce.
    all_gather: Option<AllGatherFn>,
    reduce_scatter: Option<ReduceScatterFn>,
    broadcast: Option<BroadcastFn>,
    comm_destroy: CommFn,
    comm_abort: CommFn,
    get_error_string: GetErrorStringFn,
    /// `ncclGetLastError` appeared in NCCL 2.13; older libraries lack it.
    get_last_error: Option<GetLastErrorFn>,
}

/// The data of one NCCL collective: send and receive buffers (device
/// addresses), element count and `ncclDataType_t`, and the stream it is
/// enqueued on. Public as `tpcomm::nccl::Buffers`: the drop-in's exports
/// build one per call and pass it to what serves the call.
#[derive(Clone, Copy, Debug)]
pub struct Buffers {
    pub send: u64,
    pub recv: u64,
    pub count: usize,
    pub dtype: c_int,
    pub stream: *mut c_void,
}

impl Buffers {
    fn send_ptr(&self) -> *const c_void {
        self.send as usize as *const c_void
    }
    fn recv_ptr(&self) -> *mut c_void {
        self.recv as usize as *mut c_void
    }
}

impl Api {
    /// Opens `name` (a path, or a bare soname for the dynamic loader's search)
    /// and resolves every function. Errors are plain text for the caller to
    /// wrap, because only the caller knows how the name was chosen.
    pub(crate) fn open(name: &OsStr) -> Result<Api, String> {
        // SAFETY: dlopen runs the library's initialisers. For NCCL these only
        // set up internal state; a library chosen by the user through
        // TPCOMM_NCCL_LIBRARY is trusted the same way LD_PRELOAD would be.
        let lib = unsafe { Library::new(name) }.map_err(|e| e.to_string())?;
        // SAFETY: each symbol is looked up by its nccl.h name and given the
        // signature nccl.h declares for it; the pointer is copied out of the
        // `Symbol` but stored next to `lib`, which keeps the mapping alive.
        unsafe {
            let get_version: GetVersionFn = get(&lib, "ncclGetVersion")?;
            let get_unique_id: GetUniqueIdFn = get(&lib, "ncclGetUniqueId")?;
            let comm_init_rank: CommInitRankFn = get(&lib, "ncclCommInitRank")?;
            let all_reduce: AllReduceFn = get(&lib, "ncclAllReduce")?;
            let all_gather: Option<AllGatherFn> = get(&lib, "ncclAllGather").ok();
            let reduce_scatter: Option<ReduceScatterFn> = get(&lib, "ncclReduceScatter").ok();
            let broadcast: Option<BroadcastFn> = get(&lib, "ncclBroadcast").ok();
            let comm_destroy: CommFn = get(&lib, "ncclCommDestroy")?;
            let comm_abort: CommFn = get(&lib, "ncclCommAbort")?;
            let get_error_string: GetErrorStringFn = get(&lib, "ncclGetErrorString")?;
            let get_last_error: Option<GetLastErrorFn> = get(&lib, "ncclGetLastError").ok();
            Ok(Api {
                _lib: lib,
                get_version,
                get_unique_id,
                comm_init_rank,
                all_reduce,
                all_gather,
                reduce_scatter,
                broadcast,
                comm_destroy,
                comm_abort,
                get_error_string,
                get_last_error,
            })
        }
    }

    /// The file the dynamic loader actually opened (a soname resolves to a
    /// path only here), found from the address of one of its functions.
    pub(crate) fn loaded_from(&self) -> Option<String> {
        file_of_address(self.get_version as *const c_void)
    }

    /// `ncclGetVersion`: the status and the version code.
    pub(crate) fn get_version(&self) -> (c_int, c_int) {
        let mut code: c_int = 0;
        // SAFETY: writes one int through a pointer to a live local.
        let status = unsafe { (self.get_version)(&mut code) };
        (status, code)
    }

    pub(crate) fn get_unique_id(&self) -> (c_int, [u8; 128]) {
        let mut id = RawUniqueId { internal: [0; 128] };
        // SAFETY: NCCL fills the 128-byte struct it is given a pointer to.
        let status = unsafe { (self.get_unique_id)(&mut id) };
        (status, id.internal.map(|c| c as u8))
    }

    /// `ncclCommInitRank`: blocks until all `world` ranks have joined.
    pub(crate) fn comm_init_rank(
        &self,
        world: c_int,
        id: &[u8; 128],
        rank: c_int,
    ) -> (c_int, Option<OwnedComm>) {
        let mut comm: RawComm = std::ptr::null_mut();
        let raw = RawUniqueId {
            internal: id.map(|b| b as c_char),
        };
        // SAFETY: NCCL writes the new communicator through a pointer to a
        // live local; the id is passed by value as nccl.h declares. NCCL
        // checks `world` and `rank` itself and returns an error if invalid.
        let status = unsafe { (self.comm_init_rank)(&mut comm, world, raw, rank) };
        let owned = (status == NCCL_SUCCESS && !comm.is_null()).then_some(OwnedComm(comm));
        (status, owned)
    }

    /// `ncclAllReduce` of `b` by `op`, enqueued on `b.stream`.
    ///
    /// # Safety
    /// `comm` must be a live communicator from [`Api::comm_init_rank`] of this
    /// `Api`, not used by another thread meanwhile; `b.send` and `b.recv` must
    /// be device pointers (or the same pointer, for in place) to at least
    /// `b.count` elements of `b.dtype` on the communicator's device, valid
    /// until the operation completes on `b.stream`; `b.stream` must be a live
    /// stream of the context current on this thread (or null for the legacy
    /// stream).
    pub(crate) unsafe fn all_reduce(&self, b: &Buffers, op: c_int, comm: RawComm) -> c_int {
        // SAFETY: the caller's contract above is ncclAllReduce's.
        unsafe { call_on(self.all_reduce, b, op, comm) }
    }

    /// `ncclAllGather` of `b` (`b.count`: one rank's block), enqueued on
    /// `b.stream`; `None` when the library has no such function.
    ///
    /// # Safety
    /// As [`Api::all_reduce`], with `b.recv` of `world * count` elements.
    pub(crate) unsafe fn all_gather(&self, b: &Buffers, comm: RawComm) -> Option<c_int> {
        let f = self.all_gather?;
        // SAFETY: the caller's contract above is the NCCL function's.
        Some(unsafe { f(b.send_ptr(), b.recv_ptr(), b.count, b.dtype, comm, b.stream) })
    }

    /// `ncclReduceScatter` of `b` by `op` (`b.count`: one rank's output block).
    ///
    /// # Safety
    /// As [`Api::all_reduce`], with `b.send` of `world * count` elements.
    pub(crate) unsafe fn reduce_scatter(
        &self,
        b: &Buffers,
        op: c_int,
        comm: RawComm,
    ) -> Option<c_int> {
        let f = self.reduce_scatter?;
        // SAFETY: the caller's contract above is the NCCL function's.
        Some(unsafe { call_on(f, b, op, comm) })
    }

    /// `ncclBroadcast` of `b` from `root`.
    ///
    /// # Safety
    /// As [`Api::all_reduce`].
    pub(crate) unsafe fn broadcast(
        &self,
        b: &Buffers,
        root: c_int,
        comm: RawComm,
    ) -> Option<c_int> {
        let f = self.broadcast?;
        // SAFETY: the caller's contract above is the NCCL function's.
        Some(unsafe { call_on(f, b, root, comm) })
    }

    /// `ncclCommDestroy` (or `ncclCommAbort` when `abort`). `comm` must come
    /// from this `Api` (the caller keeps them together).
    pub(crate) fn comm_free(&self, comm: OwnedComm, abort: bool) -> c_int {
        // SAFETY: `OwnedComm` is only made by `comm_init_rank` from a live
        // communicator and is consumed here, so it is freed exactly once.
        unsafe {
            if abort {
                (self.comm_abort)(comm.0)
            } else {
                (self.comm_destroy)(comm.0)
            }
        }
    }

    /// NCCL's description of a status code, plus its last error message when
    /// the library offers one.
    pub(crate) fn describe(&self, status: c_int, comm: RawComm) -> String {
        // SAFETY: ncclGetErrorString returns a pointer to a static string (or
        // null for an unknown code), which is copied out at once.
        let base = unsafe { cstr_to_string((self.get_error_string)(status)) };
        let last = self.get_last_error.and_then(|f| {
            // SAFETY: ncclGetLastError accepts null or a live communicator
            // and returns a pointer to a NUL-terminated thread-local buffer,
            // copied out before any other NCCL call on this thread.
            let s = unsafe { cstr_to_string(f(comm)) };
            (!s.is_empty()).then_some(s)
        });
        let base = if base.is_empty() {
            format!("NCCL status {status}")
        } else {
            base
        };
        match last {
            Some(last) => format!("{base}: {last}"),
            None => base,
        }
    }
}

/// Looks up `name` as a function of type `T`.
///
/// # Safety
/// `T` must be the C signature nccl.h declares for `name`.
unsafe fn get<T: Copy>(lib: &Library, name: &str) -> Result<T, String> {
    // SAFETY: `T` is `name`'s C signature (the caller's contract).
    unsafe { lib.get::<T>(name) }
        .map(|s| *s)
        .map_err(|e| format!("it has no {name} ({e}); is this NCCL?"))
}

/// The shared object that contains `addr`, as the dynamic loader names it.
pub(crate) fn file_of_address(addr: *const c_void) -> Option<String> {
    // SAFETY: all-zero bytes are a valid `Dl_info` (null pointers).
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only reads the loader's tables (any address is
    // accepted); on success `dli_fname` points to a NUL-terminated name
    // owned by the loader, copied out at once.
    unsafe {
        if libc::dladdr(addr, &mut info) == 0 {
            return None;
        }
        let name = cstr_to_string(info.dli_fname);
        (!name.is_empty()).then_some(name)
    }
}
