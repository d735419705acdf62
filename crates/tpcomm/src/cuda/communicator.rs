//! The GPU communicator users hold: tpcomm's kernels for the all-reduces they
//! take, NCCL for the rest (messages above the buffers, ops the kernels lack,
//! and sizes where the decision says NCCL is faster).
//!
//! Every call is routed by the communicator's `select::RouteTable`, resolved
//! at creation by `select::decide` from this machine's tuning table or its
//! class's defaults: what `tpcomm explain` prints for the same group.
//!
//! The kernels' buffers are sized once at creation and never grow, so a
//! message larger than `max_bytes` cannot run on them. Rather than fail, a
//! communicator created with `nccl_fallback` hands such calls to an NCCL
//! communicator it set up beside its own, on the same ranks and stream.
//!
//! This is the one composition of the transports (`GpuComm`), the route
//! table, the quantized wire (`QuantComm`) and the staging buffer: the
//! library's users, the drop-in's paired communicators and its standalone
//! ones all hold a `Communicator`. What differs is the NCCL behind it
//! ([`NcclFallback`]): its own, the caller's (the drop-in's real
//! communicator: calls routed to NCCL come back as `Route::Nccl` for the
//! caller to run), or none (standalone: nothing routes to NCCL).

use super::call::{Call, GpuTransport};
use super::config::CudaConfig;
use super::gpu_comm::GpuComm;
use super::quant::{agree_wire, resolve_wire, wire_for, QuantAlgo, QuantComm};
use super::rendezvous::Rendezvous;
use super::stream_all_reduce::StreamAllReduce;
use crate::algo::Algo;
use crate::dtype::ReduceOp;
use crate::error::{Error, Result};
use crate::nccl::{Nccl, NcclComm, UniqueId};
use crate::quant::Wire;
use crate::select::{Mode, RouteTable};
use crate::sys::cuda::scratch::Staging;
use crate::units::ByteSize;
use std::time::Duration;

/// Where one call runs, and why: the one route type (`select::route`),
/// which every method here returns.
pub use crate::select::{NcclReason, Route};

/// The NCCL a [`Communicator`] hands the calls its kernels do not take.
pub enum NcclFallback {
    /// An NCCL communicator of its own on the same ranks, set up at creation
    /// (`CudaConfig::nccl_fallback`): it runs those calls.
    Own(NcclComm),
    /// The caller's (the drop-in's real NCCL communicator): the routes
    /// include NCCL, and a call routed there is not run but returned as
    /// `Route::Nccl(reason)`, for the caller to run on its own communicator.
    Caller,
    /// None (a standalone communicator): nothing routes to NCCL, and a call
    /// the kernels cannot take is an error that says so.
    None,
}

/// Which [`NcclFallback`] [`Communicator::create`] sets up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fallback {
    /// [`NcclFallback::Own`]: an NCCL communicator made over the rendezvous.
    Own,
    /// [`NcclFallback::Caller`].
    Caller,
    /// [`NcclFallback::None`].
    None,
}

/// What [`Communicator::create`] puts beside the kernels, besides what its
/// `CudaConfig` says: the NCCL behind them, and whether a staging buffer of
/// `max_bytes` is kept for calls whose buffers are not 16-byte aligned
/// (copied in, reduced there in place, copied out).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Setup {
    pub fallback: Fallback,
    pub staging: bool,
}

impl Setup {
    /// What [`Communicator::new`] sets up: its own NCCL when
    /// `cfg.nccl_fallback` asks for it, no staging buffer.
    pub fn of(cfg: &CudaConfig) -> Setup {
        Setup {
            fallback: if cfg.nccl_fallback {
                Fallback::Own
            } else {
                Fallback::None
            },
            staging: false,
        }
    }
}

/// A GPU communicator with NCCL behind it (see the module docs).
pub struct Communicator {
    gpu: GpuComm,
    nccl: NcclFallback,
    /// Where calls with unaligned buffers are reduced, when kept
    /// ([`Setup::staging`]).
    staging: Option<Staging>,
    /// The quantized wire's kernels and buffers, when one is enabled.
    quant: Option<QuantComm>,
    wire: Wire,
    wire_min_bytes: ByteSize,
    /// `CudaConfig::wire_algo`: what quantized calls run.
    wire_algo: QuantAlgo,
    /// Where each call goes (NCCL included when it is loaded).
    routes: RouteTable,
    mode: Mode,
}

impl Communicator {
    /// Creates tpcomm's communicator (transport as `cfg.transport` says) and,
    /// when `cfg.nccl_fallback` is set, an NCCL communicator on the same ranks
    /// (rank 0's unique id goes to every rank through `rendezvous`). Every rank
    /// calls this with the same configuration.
    pub fn new(cfg: &CudaConfig, rendezvous: &Rendezvous) -> Result<Self> {
        let comm = Self::create(cfg, rendezvous, Setup::of(cfg))?;
        if let (Some(n), 0) = (comm.routes.note(), cfg.rank) {
            say_once(n);
        }
        Ok(comm)
    }

    /// Creates the communicator `setup` describes on the configuration
    /// `cfg` (every rank with the same): the kernels, the wire (`cfg.wire`,
    /// or TPCOMM_WIRE when `None`) agreed by every rank, the NCCL behind
    /// them, their route table (NCCL included unless `Fallback::None`)
    /// agreed by every rank, and the staging buffer when asked for. The
    /// exchanges run over `rendezvous` (the drop-in's own:
    /// `Rendezvous::Custom`). Prints no note of the route table
    /// ([`new`](Self::new) adds it; the drop-in logs its own).
    pub fn create(cfg: &CudaConfig, rendezvous: &Rendezvous, setup: Setup) -> Result<Self> {
        let (wire, wire_min_bytes) = resolve_wire(cfg)?;
        let gpu = GpuComm::new(cfg, rendezvous)?;
        agree_wire(cfg, rendezvous, wire, wire_min_bytes)?;
        let quant = match wire {
            Wire::Exact => None,
            _ => Some(QuantComm::new(cfg, gpu.transport(), rendezvous)?),
        };
        if quant.as_ref().is_some_and(QuantComm::has_gathered) {
            // The gathered form's all-gather: loaded now, not in a first
            // call that may be inside a graph capture.
            gpu.prepare_collectives()?;
        }
        let nccl = match setup.fallback {
            Fallback::Own => NcclFallback::Own(nccl_over_rendezvous(
                cfg.rank,
                cfg.world,
                rendezvous,
                cfg.timeout,
            )?),
            Fallback::Caller => NcclFallback::Caller,
            Fallback::None => NcclFallback::None,
        };
        let transport = gpu.transport().for_routes();
        let has_nccl = !matches!(nccl, NcclFallback::None);
        let routes = cfg.agreed_routes(gpu.selector(), transport, has_nccl, rendezvous)?;
        let staging = if setup.staging {
            Some(Staging::new(gpu.context(), cfg.max_bytes.as_usize()?)?)
        } else {
            None
        };
        Ok(Self {
            gpu,
            nccl,
            staging,
            routes,
            mode: cfg.mode,
            quant,
            wire,
            wire_min_bytes,
            wire_algo: cfg.wire_algo,
        })
    }

    /// tpcomm's own communicator (memory report, transport, checks).
    pub fn gpu(&self) -> &GpuComm {
        &self.gpu
    }

    /// The quantized wire's communicator (its memory report shows the
    /// quantized layout), when one is enabled.
    pub fn quant(&self) -> Option<&QuantComm> {
        self.quant.as_ref()
    }

    /// The wire every rank agreed on (`Wire::Exact` when none), for sums
    /// from [`wire_min_bytes`](Self::wire_min_bytes) up.
    pub fn wire(&self) -> Wire {
        self.wire
    }

    /// The size the quantized wire applies from.
    pub fn wire_min_bytes(&self) -> ByteSize {
        self.wire_min_bytes
    }

    /// The staging buffer for unaligned buffers, when one was kept.
    pub fn staging(&self) -> Option<&Staging> {
        self.staging.as_ref()
    }

    /// The wire a sum of `bytes` travels on: what `explain` prints.
    pub fn wire_for(&self, bytes: u64) -> Wire {
        wire_for(self.wire, self.wire_min_bytes, bytes)
    }

    /// An all-reduce of `call` on the given wire, whatever the
    /// communicator's default (`Wire::Exact` runs the ordinary route with
    /// `Algo::Auto`; `call.algo` is not read). A quantized wire needs the
    /// buffers a quantized communicator allocated at creation, and only sums.
    ///
    /// # Safety
    /// As [`StreamAllReduce::all_reduce_call`].
    pub unsafe fn all_reduce_wire(&self, call: &Call, wire: Wire) -> Result<Route> {
        if wire == Wire::Exact {
            // SAFETY: the caller's contract is passed on unchanged.
            return unsafe { self.route(&call.with_algo(Algo::Auto), Wire::Exact) };
        }
        // SAFETY: as above.
        unsafe { self.all_reduce_quant(call, wire, self.wire_algo)? };
        Ok(Route::Tpcomm {
            transport: self.routes.group().transport,
            algo: None,
            wire,
        })
    }

    /// A quantized all-reduce (sum) of `call` on `wire` with the algorithm
    /// `algo` asks for; returns the one that ran (`QuantComm::run`).
    /// `call.algo` is not read; `call.op` must be a sum.
    ///
    /// # Safety
    /// As [`StreamAllReduce::all_reduce_call`].
    pub unsafe fn all_reduce_quant(
        &self,
        call: &Call,
        wire: Wire,
        algo: QuantAlgo,
    ) -> Result<QuantAlgo> {
        if call.op != ReduceOp::Sum {
            return Err(Error::Unsupported(format!(
                "reduce op {} on the {} wire (only sum)",
                call.op,
                wire.label()
            )));
        }
        let Some(q) = &self.quant else {
            return Err(Error::Unsupported(format!(
                "the {} wire on a communicator created without one; create it with CudaConfig::wire (or TPCOMM_WIRE) set so its buffers are allocated",
                wire.label()
            )));
        };
        let call = call.with_algo(Algo::Auto);
        // SAFETY: the caller's contract is passed on unchanged.
        unsafe { q.run(&self.gpu, &call, wire, algo) }
    }

    /// Reports a peer that did not arrive, in the exact or the quantized
    /// kernels.
    pub fn check(&self) -> Result<()> {
        self.gpu.check()?;
        self.quant.as_ref().map_or(Ok(()), QuantComm::check)
    }

    /// Where each call goes: what `tpcomm explain` prints for this group.
    pub fn routes(&self) -> &RouteTable {
        &self.routes
    }

    /// Its own NCCL communicator ([`NcclFallback::Own`]), if it has one.
    pub fn nccl(&self) -> Option<&NcclComm> {
        match &self.nccl {
            NcclFallback::Own(n) => Some(n),
            _ => None,
        }
    }

    /// The NCCL behind the kernels.
    pub fn fallback(&self) -> &NcclFallback {
        &self.nccl
    }
}

/// On tpcomm's kernels when they can take the call and on NCCL otherwise;
/// `Ran` says where it ran (with [`NcclFallback::Caller`], a `Route::Nccl`
/// was not run: the caller runs it). Without NCCL, a call the kernels
/// cannot take is an error that says so. An overlapped launch applies to
/// tpcomm's kernels; NCCL calls launch as NCCL does.
impl StreamAllReduce for Communicator {
    type Ran = Route;

    unsafe fn all_reduce_call(&self, call: &Call) -> Result<Route> {
        let wire = self.wire_for(call.bytes()?);
        // SAFETY: the caller's contract is passed on unchanged.
        unsafe { self.route(call, wire) }
    }
}

impl Communicator {
    /// Routes `call` ([`dispatch`]: the route table's one lookup, with the
    /// quantized `wire` when the sum travels on one) and runs it there.
    ///
    /// # Safety
    /// As [`StreamAllReduce::all_reduce_call`].
    unsafe fn route(&self, call: &Call, wire: Wire) -> Result<Route> {
        let lanes = CallLanes { comm: self, call };
        dispatch(&self.routes, &lanes, call, self.mode, wire)
    }

    /// Runs `call` on `route`, a route its caller already looked up in this
    /// communicator's table ([`routes`](Self::routes), as the drop-in's
    /// `decide` does, with rules of its own before the lookup): no second
    /// lookup. A `Route::Tpcomm` runs on the exact kernels with its
    /// algorithm (one-shot when it names none; `call.algo` is not read) or
    /// on its quantized wire, through the staging buffer when the buffers
    /// are not 16-byte aligned and one was kept; a `Route::Nccl` runs on
    /// its own NCCL, is left to the caller (`NcclFallback::Caller`), or is
    /// an error (no NCCL).
    ///
    /// # Safety
    /// As [`StreamAllReduce::all_reduce_call`]; a staged call also needs
    /// `call.stream` to be a stream of this communicator's context, and the
    /// call to fit the staging buffer (`max_bytes`: the route table sends
    /// nothing larger to the kernels).
    pub unsafe fn run_route(&self, call: &Call, route: Route) -> Result<()> {
        run_on(&CallLanes { comm: self, call }, route)
    }

    /// Runs `run` on `call`, or, when a staging buffer is kept and the
    /// buffers are not 16-byte aligned, on the staging buffer in place: the
    /// input copied in before and the result copied out after, all on the
    /// call's stream.
    ///
    /// # Safety
    /// As [`run_route`](Self::run_route).
    unsafe fn staged(&self, call: &Call, run: impl FnOnce(&Call) -> Result<()>) -> Result<()> {
        let Some(st) = &self.staging else {
            return run(call);
        };
        if call.input.is_multiple_of(16) && call.output.is_multiple_of(16) {
            return run(call);
        }
        let bytes = call.bytes()? as usize;
        let p = st.ptr();
        // SAFETY: the caller's contract: the call's ranges are device
        // memory of this context until its stream runs it, and the call
        // fits the staging buffer.
        unsafe {
            st.copy(p, call.input, bytes, call.stream)?;
            run(&Call {
                input: p,
                output: p,
                ..*call
            })?;
            st.copy(call.output, p, bytes, call.stream)
        }
    }
}

/// The lanes a call can run on, as routing sees them: what [`dispatch`]
/// drives, so that the communicator's routing runs in tests with fakes.
pub trait Lanes {
    /// Runs the call on tpcomm's exact kernels with `algo` (never `Auto`).
    fn kernels(&self, algo: Algo) -> Result<()>;
    /// Runs the call (a sum) on tpcomm's quantized `wire`.
    fn quantized(&self, wire: Wire) -> Result<()>;
    /// Runs the call on NCCL; `None` when no NCCL is loaded.
    fn nccl(&self) -> Option<Result<()>>;
}

/// The whole per-call decision of [`Communicator`]: the call's route from
/// `routes` (`select::RouteTable::route`: op and size rules, the quantized
/// `wire` the sum travels on, `Wire::Exact` when none, then the resolved
/// decision), run on the lane it names. Reads `call`'s count, type, op and
/// algorithm only.
pub fn dispatch(
    routes: &RouteTable,
    lanes: &impl Lanes,
    call: &Call,
    mode: Mode,
    wire: Wire,
) -> Result<Route> {
    let route = routes.route(call.count, call.dtype, call.op, call.algo, mode, wire)?;
    run_on(lanes, route)?;
    Ok(route)
}

/// Runs a call on the lane `route` names (what [`dispatch`] does once it
/// has the route, and [`Communicator::run_route`] with a route its caller
/// looked up).
pub fn run_on(lanes: &impl Lanes, route: Route) -> Result<()> {
    match route {
        Route::Tpcomm {
            wire: Wire::Exact,
            algo,
            ..
        } => lanes.kernels(algo.unwrap_or(Algo::OneShot))?,
        Route::Tpcomm { wire, .. } => lanes.quantized(wire)?,
        Route::Nccl(_) => lanes.nccl().unwrap_or_else(|| {
            // `RouteTable::route` answers NCCL only when NCCL is loaded.
            Err(Error::Unsupported(format!(
                "route {route} on a communicator without NCCL"
            )))
        })?,
    }
    Ok(())
}

/// One all-reduce of [`Communicator`], as [`Lanes`]. Made only inside
/// `Communicator::route`, whose caller vouched for the pointers and stream.
struct CallLanes<'a> {
    comm: &'a Communicator,
    call: &'a Call,
}

impl Lanes for CallLanes<'_> {
    fn kernels(&self, algo: Algo) -> Result<()> {
        // SAFETY: built only in `Communicator::route` and `run_route`, whose
        // callers' contract (StreamAllReduce::all_reduce_call, and the
        // staging buffer's) covers the call.
        unsafe {
            self.comm.staged(self.call, |c| {
                GpuTransport::all_reduce(&self.comm.gpu, &c.with_algo(algo))
            })
        }
    }

    fn quantized(&self, wire: Wire) -> Result<()> {
        // SAFETY: as above.
        unsafe {
            self.comm.staged(self.call, |c| {
                self.comm
                    .all_reduce_quant(c, wire, self.comm.wire_algo)
                    .map(|_| ())
            })
        }
    }

    fn nccl(&self) -> Option<Result<()>> {
        match &self.comm.nccl {
            // SAFETY: as above; NCCL reads and writes the same ranges on
            // the same stream.
            NcclFallback::Own(n) => Some(unsafe { GpuTransport::all_reduce(n, self.call) }),
            // The caller runs it on its own NCCL.
            NcclFallback::Caller => Some(Ok(())),
            NcclFallback::None => None,
        }
    }
}

/// Sets up an NCCL communicator on the ranks of `rendezvous`: rank 0 makes the
/// unique id and every rank receives it there. A rank that cannot load NCCL
/// posts nothing, so every rank fails together instead of waiting in NCCL.
pub fn nccl_over_rendezvous(
    rank: usize,
    world: usize,
    rendezvous: &Rendezvous,
    timeout: Duration,
) -> Result<NcclComm> {
    let loaded = Nccl::load();
    let mine: Vec<u8> = match (&loaded, rank) {
        (Ok(n), 0) => n.unique_id()?.0.to_vec(),
        (Ok(_), _) => vec![1],
        (Err(_), _) => Vec::new(),
    };
    let all = rendezvous.exchange("nccl-fallback-id", rank, world, &mine, timeout)?;
    let nccl = loaded?;
    if let Some(r) = all.iter().position(|v| v.is_empty()) {
        return Err(Error::Library {
            library: "NCCL".into(),
            detail: format!("rank {r} could not load NCCL, so no rank sets up the NCCL fallback; install NCCL there or set TPCOMM_NCCL_LIBRARY"),
        });
    }
    let id: [u8; 128] = all[0].as_slice().try_into().map_err(|_| {
        Error::invalid(
            "rendezvous",
            format!(
                "rank 0 posted {} bytes for the NCCL unique id, expected 128",
                all[0].len()
            ),
        )
    })?;
    nccl.comm_init_rank(world, &UniqueId(id), rank)
}

/// Prints a routing note once per process: a program (or test) that makes
/// many communicators with the same routes hears it once.
fn say_once(note: &str) {
    static SAID: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut said = SAID.lock().unwrap_or_else(|e| e.into_inner());
    if !said.iter().any(|s| s == note) {
        eprintln!("tpcomm: {note}");
        said.push(note.to_string());
    }
}

#[cfg(test)]
mod tests;
