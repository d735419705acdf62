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
use crate::select::{agree, Group, Mode, RouteTable};
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
        let routes = agree(
            RouteTable::resolve(
                gpu.selector(),
                Group {
                    world: cfg.world,
                    transport: gpu.transport().for_routes(),
                    nccl: nccl.is_some(),
                    max_bytes: cfg.max_bytes,
                },
            )?,
            cfg.rank,
            cfg.world,
            rendezvous,
            cfg.timeout,
        )?;
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
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::select::{Selector, Transport};
    use crate::topology::MachineClass;
    use std::cell::RefCell;

    /// Records which lane ran, as a communicator's kernels and NCCL would.
    struct Fake {
        has_nccl: bool,
        ran: RefCell<Vec<String>>,
    }

    impl Lanes for Fake {
        fn kernels(&self, algo: Algo) -> Result<()> {
            self.ran
                .borrow_mut()
                .push(format!("kernels {}", algo.name()));
            Ok(())
        }
        fn quantized(&self, wire: Wire) -> Result<()> {
            self.ran
                .borrow_mut()
                .push(format!("quantized {}", wire.label()));
            Ok(())
        }
        fn nccl(&self) -> Option<Result<()>> {
            self.has_nccl.then(|| {
                self.ran.borrow_mut().push("nccl".into());
                Ok(())
            })
        }
    }

    fn routes(class: MachineClass, nccl: bool) -> RouteTable {
        RouteTable::resolve(
            &Selector::for_class(class),
            Group {
                world: 4,
                transport: Transport::Cuda,
                nccl,
                max_bytes: ByteSize::mib(8),
            },
        )
        .unwrap()
    }

    /// A call of `count` elements of `dtype` reduced by `op`, as routing
    /// reads it (no buffers, no stream: the lanes are fakes).
    fn call(count: usize, dtype: DType, op: ReduceOp) -> Call {
        Call::new(0, 0, count, dtype, std::ptr::null_mut()).with_op(op)
    }

    const ONE_SHOT: Route = Route::Tpcomm {
        transport: Transport::Cuda,
        algo: Some(Algo::OneShot),
        wire: Wire::Exact,
    };

    #[test]
    fn a_pcie_p2p_group_with_nccl_runs_large_sums_on_nccl_and_small_on_the_kernels() {
        let t = routes(MachineClass::PcieP2p, true);
        let f = Fake {
            has_nccl: true,
            ran: RefCell::new(Vec::new()),
        };
        let run = |count: usize, op| {
            dispatch(
                &t,
                &f,
                &call(count, DType::Bf16, op),
                Mode::Graph,
                Wire::Exact,
            )
        };
        assert_eq!(run(1024, ReduceOp::Sum).unwrap(), ONE_SHOT);
        assert_eq!(run(256 << 9, ReduceOp::Sum).unwrap(), ONE_SHOT);
        assert_eq!(
            run((256 << 9) + 8, ReduceOp::Sum).unwrap(),
            Route::Nccl(NcclReason::Faster)
        );
        assert_eq!(run(16, ReduceOp::Max).unwrap(), Route::Nccl(NcclReason::Op));
        assert_eq!(
            run(8 << 20, ReduceOp::Sum).unwrap(),
            Route::Nccl(NcclReason::TooLarge)
        );
        assert_eq!(
            *f.ran.borrow(),
            [
                "kernels one-shot",
                "kernels one-shot",
                "nccl",
                "nccl",
                "nccl"
            ]
        );
    }

    /// A quantized wire takes every sum the kernels can take (NCCL-faster
    /// sizes and an explicit algorithm included), and nothing else.
    #[test]
    fn a_quantized_wire_takes_the_sums_the_kernels_can_take() {
        let t = routes(MachineClass::PcieP2p, true);
        let f = Fake {
            has_nccl: true,
            ran: RefCell::new(Vec::new()),
        };
        let int8 = Wire::int8();
        let on_int8 = Route::Tpcomm {
            transport: Transport::Cuda,
            algo: None,
            wire: int8,
        };
        let run = |c: Call| dispatch(&t, &f, &c, Mode::Graph, int8).unwrap();
        assert_eq!(run(call(1024, DType::Bf16, ReduceOp::Sum)), on_int8);
        assert_eq!(run(call(1 << 20, DType::Bf16, ReduceOp::Sum)), on_int8);
        let two_shot = call(1024, DType::Bf16, ReduceOp::Sum).with_algo(Algo::TwoShot);
        assert_eq!(run(two_shot), on_int8);
        assert_eq!(
            run(call(16, DType::Bf16, ReduceOp::Max)),
            Route::Nccl(NcclReason::Op)
        );
        assert_eq!(
            run(call(8 << 20, DType::Bf16, ReduceOp::Sum)),
            Route::Nccl(NcclReason::TooLarge)
        );
        assert_eq!(
            *f.ran.borrow(),
            [
                "quantized int8/g64",
                "quantized int8/g64",
                "quantized int8/g64",
                "nccl",
                "nccl"
            ]
        );
        assert_eq!(
            on_int8.to_string(),
            "tpcomm cuda on the quantized int8/g64 wire"
        );
    }

    #[test]
    fn without_nccl_calls_the_kernels_cannot_take_are_errors_that_say_what_to_do() {
        let t = routes(MachineClass::PcieP2p, false);
        let f = Fake {
            has_nccl: false,
            ran: RefCell::new(Vec::new()),
        };
        let run = |count: usize, op| {
            dispatch(
                &t,
                &f,
                &call(count, DType::Bf16, op),
                Mode::Graph,
                Wire::Exact,
            )
        };
        // NCCL would be faster at 1 MiB, but none is loaded: the kernels run it.
        assert!(!run(1 << 19, ReduceOp::Sum).unwrap().is_nccl());
        let e = run(16, ReduceOp::Min).unwrap_err().to_string();
        assert!(e.contains("nccl_fallback"), "{e}");
        let e = run(8 << 20, ReduceOp::Sum).unwrap_err().to_string();
        assert!(
            e.contains("max_bytes") && e.contains("nccl_fallback"),
            "{e}"
        );
        assert_eq!(f.ran.borrow().len(), 1);
        assert!(t.note().is_some_and(|n| n.contains("no NCCL is loaded")));
    }

    #[test]
    fn an_explicit_algorithm_is_run_as_asked_where_the_kernels_can_take_it() {
        let t = routes(MachineClass::PcieP2p, true);
        let f = Fake {
            has_nccl: true,
            ran: RefCell::new(Vec::new()),
        };
        let c = call(1 << 20, DType::F32, ReduceOp::Sum).with_algo(Algo::TwoShot);
        let r = dispatch(&t, &f, &c, Mode::Eager, Wire::Exact);
        assert_eq!(r.unwrap(), Route::exact(Transport::Cuda, Algo::TwoShot));
        assert_eq!(*f.ran.borrow(), ["kernels two-shot"]);
    }
}
