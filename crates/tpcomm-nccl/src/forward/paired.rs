//! The tpcomm communicators kept beside real NCCL communicators, how they
//! are set up, and how one of them runs an `ncclAllReduce` ([`all_reduce`]).

use crate::cuda::SavedContext;
use crate::ffi::call_real;
use crate::forward::setup_exchange::{AsRendezvous, NcclExchange};
use crate::route::{decide, Call, Paths};
use crate::settings::{self, info, warn};
use crate::types::dtype_of;
use crate::types::{NcclComm, NcclResult, SUCCESS};
use std::collections::HashMap;
use std::ffi::c_int;
use std::sync::{Arc, OnceLock, RwLock};
use tpcomm::cuda::communicator::{Fallback, Setup};
use tpcomm::cuda::{CUstream, Communicator, CudaConfig, Rendezvous, ThreadGroup};
use tpcomm::select::{NcclReason, Route};
use tpcomm::transport::MAX_WORLD;
use tpcomm::{Error, Result};

/// tpcomm's side of one NCCL communicator.
pub struct Paired {
    /// The library's communicator, with the real NCCL communicator as its
    /// fallback (`NcclFallback::Caller`: calls routed to NCCL are forwarded
    /// by [`all_reduce`]'s caller): the kernels on the transport the group's
    /// P2P verdict gave (P2P, or pinned host memory on boxes without P2P),
    /// the route table agreed by every rank, the quantized wire
    /// (TPCOMM_WIRE) when enabled, and the staging buffer for unaligned
    /// buffers (TPCOMM_MAX_BYTES). Private: [`Paired::new`] checks that it
    /// holds no NCCL communicator of its own.
    comm: Communicator,
}

// SAFETY: a `Communicator` is `Sync` but for its own NCCL communicator
// (`NcclFallback::Own`, which NCCL lets one thread at a time use), and
// `Paired::new` takes only one without (the caller's NCCL or none); every
// other part (the kernels, routes, wire and staging) is `Sync`, as they
// were when this struct held them one by one.
unsafe impl Sync for Paired {}

impl Paired {
    /// Pairs `comm` with a real communicator; `comm` must leave the calls
    /// routed to NCCL to the caller (`Fallback::Caller`), as [`make`] sets
    /// it up, so that it holds no NCCL communicator of its own.
    fn new(comm: Communicator) -> Result<Paired> {
        if comm.nccl().is_some() {
            return Err(Error::invalid(
                "paired communicator",
                "it has an NCCL communicator of its own; the real one is the caller's",
            ));
        }
        Ok(Paired { comm })
    }

    /// The library's communicator paired with the real one.
    pub fn comm(&self) -> &Communicator {
        &self.comm
    }
}

/// What became of an all-reduce offered to [`all_reduce`].
#[derive(Debug)]
pub enum Outcome {
    /// tpcomm's kernels took it (the route, a `Route::Tpcomm`), enqueued
    /// on the caller's stream.
    Served(Route),
    /// The real NCCL is to run it (the caller forwards it).
    Forward(NcclReason),
    /// tpcomm's launch on the route failed. Not forwarded: the peers have
    /// launched tpcomm kernels, and an NCCL call here would never pair up.
    Failed(Route, Error),
}

/// One `ncclAllReduce` on the real communicator `comm`: the paired tpcomm
/// communicator (one map lookup, none under TPCOMM_DISABLE), the one
/// decision ([`decide`]), and tpcomm's run when it takes the call.
///
/// # Safety
/// NCCL's contract for ncclAllReduce: `call.send` and `call.recv` are
/// device buffers of the communicator's GPU holding `call.count` elements,
/// valid until `stream` (a stream of that GPU) runs the call.
pub unsafe fn all_reduce(comm: NcclComm, call: &Call, stream: CUstream) -> Outcome {
    let disabled = settings::get().disabled;
    let paired = if disabled { None } else { lookup(comm) };
    match (
        decide(disabled, paired.as_deref().map(Paired::paths), call),
        paired,
    ) {
        (route @ Route::Tpcomm { .. }, Some(p)) => {
            let _restore = SavedContext::save();
            // SAFETY: the caller's contract, passed on.
            match unsafe { p.run(route, call, stream) } {
                Ok(()) => Outcome::Served(route),
                Err(e) => Outcome::Failed(route, e),
            }
        }
        (Route::Nccl(why), _) => Outcome::Forward(why),
        // `decide` gives tpcomm only a call with a paired communicator.
        (Route::Tpcomm { .. }, None) => Outcome::Forward(NcclReason::NotSetUp),
    }
}

impl Paired {
    /// What the decision reads of this communicator.
    fn paths(&self) -> Paths<'_> {
        Paths {
            routes: self.comm.routes(),
            wire: self.comm.wire(),
            wire_min: self.comm.wire_min_bytes(),
        }
    }

    /// Runs a call [`decide`] gave to tpcomm on its `route`
    /// (`Communicator::run_route`: no second lookup): the exact kernels with
    /// the route's algorithm or its quantized wire, in place, or through
    /// the communicator's staging buffer when the buffers are not aligned
    /// (`route::aligned`).
    ///
    /// # Safety
    /// As [`all_reduce`]. Unaligned buffers are copied into the
    /// 16-byte-aligned staging buffer (it holds TPCOMM_MAX_BYTES, and
    /// `decide` kept the call within that), reduced there in place and
    /// copied out, all ordered on `stream`. The quantized wire takes sums
    /// from TPCOMM_WIRE_MIN_BYTES up, aligned or staged (ranks' buffers may
    /// differ in alignment, never in size); every rank agreed on the wire at
    /// set-up, so all take it together.
    unsafe fn run(&self, route: Route, c: &Call, stream: CUstream) -> Result<()> {
        // `decide` gave tpcomm a kernel type only.
        let Some(dtype) = dtype_of(c.dtype) else {
            return Err(Error::Unsupported(format!(
                "ncclDataType {} on tpcomm's kernels",
                c.dtype
            )));
        };
        let call = tpcomm::cuda::Call::new(c.send as u64, c.recv as u64, c.count, dtype, stream);
        // SAFETY: the caller's contract; the staging buffer holds the call.
        unsafe { self.comm.run_route(&call, route) }
    }
}

type Map = RwLock<HashMap<usize, Arc<Paired>>>;

fn map() -> &'static Map {
    static M: OnceLock<Map> = OnceLock::new();
    M.get_or_init(|| RwLock::new(HashMap::new()))
}

/// The tpcomm communicator beside `comm`, if any.
pub fn lookup(comm: NcclComm) -> Option<Arc<Paired>> {
    map().read().ok()?.get(&(comm as usize)).cloned()
}

/// Forgets `comm`. With `free`, its buffers are freed (when the last
/// in-flight user lets go); without, they are kept until the process exits:
/// after an abort a tpcomm kernel may still be waiting for a peer that is
/// gone, and freeing under it would block until its timeout.
pub fn remove(comm: NcclComm, free: bool) -> bool {
    let gone = map()
        .write()
        .ok()
        .and_then(|mut m| m.remove(&(comm as usize)));
    match gone {
        Some(b) if free => {
            let _ctx = SavedContext::save();
            drop(b);
            true
        }
        Some(b) => {
            std::mem::forget(b);
            true
        }
        None => false,
    }
}

fn insert(comm: NcclComm, b: Paired) {
    if let Ok(mut m) = map().write() {
        m.insert(comm as usize, Arc::new(b));
    }
}

fn real_int(
    what: &str,
    comm: NcclComm,
    f: impl FnOnce(NcclComm, *mut c_int) -> std::result::Result<NcclResult, String>,
) -> Result<usize> {
    let mut v: c_int = -1;
    match f(comm, &mut v) {
        Ok(SUCCESS) if v >= 0 => Ok(v as usize),
        Ok(r) => Err(Error::Library {
            library: "NCCL".into(),
            detail: format!("{what} returned {r}"),
        }),
        Err(e) => Err(Error::Library {
            library: "NCCL".into(),
            detail: e,
        }),
    }
}

/// Sets tpcomm up beside the real, ready communicator `comm` (every rank of
/// it calls this at the same point). Any failure leaves `comm` to NCCL alone.
pub fn set_up(comm: NcclComm, origin: &str) {
    let s = settings::get();
    if s.disabled || comm.is_null() {
        return;
    }
    let q = |c, p| call_real!(ncclCommCount(c, p) as fn(NcclComm, *mut c_int) -> NcclResult);
    let world = match real_int("ncclCommCount", comm, q) {
        Ok(w) => w,
        Err(e) => return warn!("{origin}: {e}; all-reduces go to NCCL"),
    };
    if !(2..=MAX_WORLD).contains(&world) {
        // Decided from the world size alone, the same on every rank: no exchange.
        return info!(
            "{origin}: {world} rank(s), tpcomm takes 2 to {MAX_WORLD}; all-reduces go to NCCL"
        );
    }
    let q = |c, p| call_real!(ncclCommUserRank(c, p) as fn(NcclComm, *mut c_int) -> NcclResult);
    let rank = real_int("ncclCommUserRank", comm, q);
    let q = |c, p| call_real!(ncclCommCuDevice(c, p) as fn(NcclComm, *mut c_int) -> NcclResult);
    let device = real_int("ncclCommCuDevice", comm, q);
    let (rank, device) = match (rank, device) {
        (Ok(r), Ok(d)) => (r, d),
        (Err(e), _) | (_, Err(e)) => return warn!("{origin}: {e}; all-reduces go to NCCL"),
    };
    let tag = format!("{origin} rank {rank}/{world} GPU {device}");
    if let Err(e) = tpcomm::cuda::ensure_driver() {
        return warn!("{tag}: {e}; all-reduces go to NCCL");
    }
    let _restore = SavedContext::save();
    let ctx = match tpcomm::cuda::open_context(device) {
        Ok(c) => c,
        Err(e) => return warn!("{tag}: {e}; all-reduces go to NCCL"),
    };
    let ex = match NcclExchange::new(comm, rank, world) {
        Ok(x) => Arc::new(x),
        Err(e) => {
            return warn!(
                "{tag}: no scratch buffer for the set-up exchange ({e}); all-reduces go to NCCL"
            )
        }
    };
    match build(&ex, &tag, rank, world, device) {
        Ok(p) => {
            let (gpu, staging) = (p.comm.gpu(), staging_bytes(&p.comm));
            let r = gpu.memory_report();
            warn!(
                "{tag}: tpcomm all-reduce up to {} beside NCCL, {} transport; took {} of GPU memory ({} bytes in {} allocation(s), {} reserved) plus {} bytes of staging for unaligned buffers, and {} bytes of pinned host memory",
                s.max_bytes,
                gpu.transport().name(),
                r.device_requested(),
                r.device_requested().bytes(),
                r.gpu.as_ref().map_or(0, |g| g.allocations.len()),
                r.device_reserved(),
                staging,
                r.total_in(tpcomm::Place::PinnedHost).map_or(0, |b| b.bytes())
            );
            info!("{tag}: {}", p.comm.routes().summary());
            insert(comm, p);
        }
        Err(e) => warn!("{tag}: tpcomm not set up ({e}); all-reduces go to NCCL"),
    }
    // Dropped in reverse order: the exchange's scratch (needs `ctx` current),
    // then `ctx`, then the caller's context is restored.
    let _ = (&ex, &ctx);
}

/// The exchanges every rank makes: preflight (same machine?), the
/// communicator's own (through the rendezvous), and the closing
/// [`NcclExchange::finish`], so that either every rank uses tpcomm on this
/// communicator or none does, whatever step a failure happened at.
fn build(
    ex: &Arc<NcclExchange>,
    tag: &str,
    rank: usize,
    world: usize,
    device: usize,
) -> Result<Paired> {
    let s = settings::get();
    let made = (|| {
        let key = crate::host::key();
        let hosts = ex.gather("preflight", Some(key.as_bytes()), s.timeout)?;
        if let Some(why) = crate::host::other_machine(&hosts, key.as_bytes()) {
            // Every rank sees the same list, so every rank stops here.
            return Err(Error::Unsupported(format!(
                "{why}; tpcomm runs on one machine"
            )));
        }
        info!("{tag}: all {world} ranks on this machine; creating the tpcomm communicator");
        let cfg = s.cuda_config(rank, world, device);
        let rv = Rendezvous::Custom(Arc::new(AsRendezvous(ex.clone())));
        make(&cfg, &rv)
    })();
    if let Err(e) = &made {
        info!("{tag}: this rank leaves the set-up: {e}");
    }
    if ex.finish(made.is_ok(), s.timeout)? {
        made
    } else {
        Err(made.err().unwrap_or_else(|| {
            Error::Aborted("another rank could not set tpcomm up (see its log)".into())
        }))
    }
}

/// The staging buffer's bytes (every paired communicator keeps one).
fn staging_bytes(comm: &Communicator) -> usize {
    comm.staging().map_or(0, |s| s.bytes())
}

/// Creates one rank's side (every rank calls it with the same world and
/// rendezvous): the library's `Communicator` with the real NCCL as the
/// caller's fallback and a staging buffer (`Communicator::create`): the
/// kernels on the transport the ranks' P2P verdict gives (`Transport::Auto`),
/// the wire read from TPCOMM_WIRE and TPCOMM_WIRE_MIN_BYTES (`cfg.wire`
/// unset) and agreed by every rank, the routes with NCCL beside them,
/// decided by this machine's table or class defaults and agreed by every
/// rank, and the staging buffer of TPCOMM_MAX_BYTES. The collective kernels
/// are loaded too, so no call (inside a CUDA graph capture, say) ever
/// compiles or loads a module.
fn make(cfg: &CudaConfig, rv: &Rendezvous) -> Result<Paired> {
    let setup = Setup {
        fallback: Fallback::Caller,
        staging: true,
    };
    let comm = Communicator::create(cfg, rv, setup)?;
    let image = comm.prepare_collectives()?;
    crate::settings::info!(
        "set-up: all-gather, reduce-scatter and broadcast kernels loaded ({image} of kernel image)"
    );
    Paired::new(comm)
}

/// `ncclCommInitAll`: one process drives every GPU, so the ranks are threads
/// and meet in a [`ThreadGroup`] instead of through NCCL.
pub fn set_up_all(comms: &[NcclComm], devices: &[usize]) {
    let s = settings::get();
    let world = comms.len();
    if s.disabled || !(2..=MAX_WORLD).contains(&world) || devices.len() != world {
        return info!("ncclCommInitAll: {world} GPU(s); all-reduces go to NCCL");
    }
    if let Err(e) = tpcomm::cuda::ensure_driver() {
        return warn!("ncclCommInitAll: {e}; all-reduces go to NCCL");
    }
    let _restore = SavedContext::save();
    let group = ThreadGroup::new(world);
    let made: Vec<Result<Paired>> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..world)
            .map(|rank| {
                let rv = Rendezvous::Threads(group.clone());
                let mut cfg = s.cuda_config(rank, world, devices[rank]);
                // A thread that failed early never posts: keep the others' wait short.
                cfg.timeout = s.timeout.min(std::time::Duration::from_secs(30));
                sc.spawn(move || make(&cfg, &rv))
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(Error::Aborted("set-up thread panicked".into())))
            })
            .collect()
    });
    if let Some(Err(e)) = made.iter().find(|m| m.is_err()) {
        return warn!("ncclCommInitAll: tpcomm not set up ({e}); all-reduces go to NCCL");
    }
    for (comm, p) in comms.iter().zip(made.into_iter().flatten()) {
        let (gpu, staging) = (p.comm.gpu(), staging_bytes(&p.comm));
        let r = gpu.memory_report();
        warn!(
            "ncclCommInitAll rank {}/{world} GPU {}: tpcomm all-reduce up to {} beside NCCL, {} transport; took {} of GPU memory ({} bytes) plus {} bytes of staging for unaligned buffers",
            gpu.rank(),
            devices[gpu.rank()],
            s.max_bytes,
            gpu.transport().name(),
            r.device_requested(),
            r.device_requested().bytes(),
            staging
        );
        info!(
            "ncclCommInitAll rank {}: {}",
            gpu.rank(),
            p.comm.routes().summary()
        );
        insert(*comm, p);
    }
}
