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

use super::host_path::GpuComm;
use super::quant::{agree_wire, resolve_wire, wire_for, QuantAlgo, QuantComm};
use super::{Call, CudaConfig, GpuTransport, Rendezvous, StreamAllReduce};
use crate::algo::Algo;
use crate::dtype::ReduceOp;
use crate::error::{Error, Result};
use crate::nccl::{Nccl, NcclComm, UniqueId};
use crate::quant::Wire;
use crate::select::{Mode, RouteTable};
use crate::units::ByteSize;
use std::time::Duration;

/// Where one call runs, and why: the one route type (`select::route`),
/// which every method here returns.
pub use crate::select::{NcclReason, Route};

/// A GPU communicator with NCCL behind it (see the module docs).
pub struct Communicator {
    gpu: GpuComm,
    nccl: Option<NcclComm>,
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
        let nccl = if cfg.nccl_fallback {
            Some(nccl_over_rendezvous(
                cfg.rank,
                cfg.world,
                rendezvous,
                cfg.timeout,
            )?)
        } else {
            None
        };
        let transport = gpu.transport().for_routes();
        let routes = cfg.agreed_routes(gpu.selector(), transport, nccl.is_some(), rendezvous)?;
        if let (Some(n), 0) = (routes.note(), cfg.rank) {
            say_once(n);
        }
        Ok(Self {
            gpu,
            nccl,
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

    /// The NCCL communicator behind it, if it was asked for.
    pub fn nccl(&self) -> Option<&NcclComm> {
        self.nccl.as_ref()
    }
}

/// On tpcomm's kernels when they can take the call and on NCCL otherwise;
/// `Ran` says where it ran. Without the NCCL fallback, a call the kernels
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
    Ok(route)
}

/// One all-reduce of [`Communicator`], as [`Lanes`]. Made only inside
/// `Communicator::route`, whose caller vouched for the pointers and stream.
struct CallLanes<'a> {
    comm: &'a Communicator,
    call: &'a Call,
}

impl Lanes for CallLanes<'_> {
    fn kernels(&self, algo: Algo) -> Result<()> {
        // SAFETY: built only in `Communicator::route`, whose caller's
        // contract (StreamAllReduce::all_reduce_call) covers the call.
        unsafe { GpuTransport::all_reduce(&self.comm.gpu, &self.call.with_algo(algo)) }
    }

    fn quantized(&self, wire: Wire) -> Result<()> {
        // SAFETY: as above.
        unsafe {
            self.comm
                .all_reduce_quant(self.call, wire, self.comm.wire_algo)
                .map(|_| ())
        }
    }

    fn nccl(&self) -> Option<Result<()>> {
        let nccl = self.comm.nccl.as_ref()?;
        // SAFETY: as above; NCCL reads and writes the same ranges on the
        // same stream.
        Some(unsafe { GpuTransport::all_reduce(nccl, self.call) })
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
