//! The one routing decision: where an all-reduce runs (tpcomm's kernels with
//! which algorithm, or NCCL), and why.
//!
//! [`decide`] is the decision itself, a pure function of the selector (this
//! machine's tuning table or its class's built-in defaults), the group (its
//! transport from the P2P verdict, world size, buffer size, whether NCCL is
//! loaded) and the query (type, bytes, eager or graph). A communicator calls
//! it once per size class at creation ([`RouteTable::resolve`]); a call is
//! then [`RouteTable::route`]: two comparisons and an array index, no
//! allocation, no system call. `tpcomm explain`, `tpcomm bench --algos auto`,
//! `cuda::Communicator` and the drop-in all hold a `RouteTable` built here,
//! and all answer with the one [`Route`] its [`RouteTable::lookup`] gives
//! (tpcomm with transport, algorithm and wire, or NCCL with the reason).
//!
//! Size classes: the message sizes are cut into classes of four steps per
//! octave, (lo, hi] with hi in 1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, ...
//! (every power of two and 1.25, 1.5, 1.75 times it). A class is decided at
//! its upper edge, or at the buffer size for the class that holds it. Tables
//! written by `tpcomm tune` measure powers of two and 1.5 times them, and
//! every class rule's threshold is a power of two, so each of them is a
//! class edge and is decided exactly.

use super::query::{Candidate, Decision, Mode, Query};
use super::selector::Selector;
use crate::algo::Algo;
use crate::dtype::{DType, ReduceOp};
use crate::error::{Error, Result};
use crate::transport::Transport;
use crate::units::ByteSize;
use crate::wire::Wire;
use std::fmt;

/// Where one call runs: tpcomm's kernels (on which transport, with which
/// algorithm, on which wire), or NCCL and why. The one route type: the
/// route table's lookup ([`RouteTable::lookup`]), `cuda::Communicator`'s
/// all-reduce and collectives, `tpcomm explain` and the drop-in all answer
/// with it, and print it with its `Display`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Route {
    Tpcomm {
        /// The kernels' transport, `Cuda` (P2P) or `Host` (through pinned
        /// host memory); never `Nccl` or `Auto`.
        transport: Transport,
        /// The exact all-reduce's algorithm (never `Auto`); `None` where the
        /// call has no such choice: the collectives (one kernel each) and
        /// the quantized wire (whose communicator picks its own algorithm).
        algo: Option<Algo>,
        /// `Wire::Exact`, or the quantized wire the sum travels on.
        wire: Wire,
    },
    Nccl(NcclReason),
}

/// Why a call runs on NCCL rather than on tpcomm's kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NcclReason {
    /// TPCOMM_DISABLE is set (the drop-in).
    Disabled,
    /// No tpcomm communicator beside this NCCL one: another machine, a
    /// set-up failure, a communicator made before the drop-in was loaded.
    NotSetUp,
    /// Between ncclGroupStart and ncclGroupEnd, where NCCL fuses the group.
    InGroup,
    /// The kernels take f32, f16 and bf16 only.
    DType,
    /// The kernels only sum.
    Op,
    /// Zero elements (the drop-in leaves them to NCCL).
    Empty,
    /// The message (a collective's block) is larger than the kernels'
    /// buffers (`max_bytes`; the drop-in's TPCOMM_MAX_BYTES), or through
    /// pinned host memory its blocks do not fit the areas.
    TooLarge,
    /// The tuning table or the class's defaults say NCCL is faster at this
    /// size.
    Faster,
}

impl NcclReason {
    /// The size and op rules alone (what the kernels can take, before any
    /// decision): `None` for a sum within the buffers, else why NCCL runs it.
    pub fn of(bytes: u64, max_bytes: ByteSize, op: ReduceOp) -> Option<NcclReason> {
        if op != ReduceOp::Sum {
            Some(NcclReason::Op)
        } else if bytes > max_bytes.bytes() {
            Some(NcclReason::TooLarge)
        } else {
            None
        }
    }

    /// The reason in words, as `Route`'s `Display` prints it.
    pub fn text(self) -> &'static str {
        match self {
            NcclReason::Disabled => "TPCOMM_DISABLE is set",
            NcclReason::NotSetUp => "no tpcomm communicator beside this one",
            NcclReason::InGroup => "inside ncclGroupStart/ncclGroupEnd",
            NcclReason::DType => "data type other than f32/f16/bf16",
            NcclReason::Op => "reduce op other than sum: the kernels only sum",
            NcclReason::Empty => "zero elements",
            NcclReason::TooLarge => "message above tpcomm's buffers, max_bytes or TPCOMM_MAX_BYTES",
            NcclReason::Faster => {
                "faster than tpcomm at this size, by this machine's table or class defaults"
            }
        }
    }
}

impl Route {
    /// tpcomm's exact all-reduce with `algo` on `transport`.
    pub fn exact(transport: Transport, algo: Algo) -> Route {
        Route::Tpcomm {
            transport,
            algo: Some(algo),
            wire: Wire::Exact,
        }
    }

    /// Whether NCCL runs the call.
    pub fn is_nccl(self) -> bool {
        matches!(self, Route::Nccl(_))
    }

    /// Why NCCL runs the call; `None` when tpcomm's kernels do.
    pub fn nccl_reason(self) -> Option<NcclReason> {
        match self {
            Route::Nccl(why) => Some(why),
            Route::Tpcomm { .. } => None,
        }
    }

    /// The exact all-reduce's algorithm, `None` on NCCL and where there is
    /// no choice (see [`Route::Tpcomm`]).
    pub fn algo(self) -> Option<Algo> {
        match self {
            Route::Tpcomm { algo, .. } => algo,
            Route::Nccl(_) => None,
        }
    }

    /// The candidate this route runs, as the decision and `explain` name
    /// it: `cuda:one-shot`, `host:two-shot`, `nccl`.
    pub fn candidate(self) -> Candidate {
        match self {
            Route::Tpcomm {
                transport, algo, ..
            } => Candidate { transport, algo },
            Route::Nccl(_) => Candidate::NCCL,
        }
    }
}

/// What `tpcomm explain`'s `route:` line, the drop-in's first-call log and
/// tpcomm-py's return values print: `tpcomm cuda:one-shot`, `tpcomm cuda`
/// (a collective), `tpcomm cuda on the quantized int8/g64 wire`, or
/// `NCCL (why)`.
impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Route::Nccl(why) => write!(f, "NCCL ({})", why.text()),
            Route::Tpcomm { wire, .. } => {
                write!(f, "tpcomm {}", self.candidate())?;
                if wire != Wire::Exact {
                    write!(f, " on the quantized {} wire", wire.label())?;
                }
                Ok(())
            }
        }
    }
}

/// What a group of ranks routes with, fixed at creation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Group {
    pub world: usize,
    /// The kernels' transport, from the group's P2P verdict: `Cuda` when every
    /// rank maps every peer's memory, `Host` otherwise. Never `Nccl`.
    pub transport: Transport,
    /// Whether NCCL is loaded beside the kernels (else every call the
    /// kernels can take runs on them).
    pub nccl: bool,
    /// The kernels' buffer size: the largest message they take.
    pub max_bytes: ByteSize,
}

/// The decision for one query on one group: the best candidate the group can
/// run (its transport's algorithms, and NCCL when loaded), by the selector's
/// table where it answers and its class's rules otherwise. Pure.
pub fn decide(sel: &Selector, g: &Group, q: &Query) -> Decision {
    sel.choose_on(q, g.transport, g.nccl)
}

/// The kernels' transport a group gets from its P2P verdict on a machine of
/// `class`: `Host` where no pair has P2P, `Cuda` otherwise (a mixed machine's
/// group gets `Host` when one of its pairs lacks P2P: see [`transport_of`]).
pub fn transport_of_class(class: crate::topology::MachineClass) -> Transport {
    match class {
        crate::topology::MachineClass::PcieNop2p => Transport::Host,
        _ => Transport::Cuda,
    }
}

/// The transport a group of every GPU of `topo` gets: `Host` when any pair
/// lacks P2P (the communicator's rule: one no sends the group through host
/// memory), `Cuda` otherwise.
pub fn transport_of(topo: &crate::topology::Topology) -> Transport {
    if topo
        .pairs
        .iter()
        .any(|p| p.link == crate::topology::LinkClass::NoP2p)
    {
        Transport::Host
    } else {
        Transport::Cuda
    }
}

/// Index of the size class holding `bytes` (see the module docs); 0 for 0.
pub fn size_class(bytes: u64) -> usize {
    if bytes <= 4 {
        return bytes as usize;
    }
    let x = bytes - 1;
    let e = 63 - x.leading_zeros() as usize;
    let m = ((x >> (e - 2)) & 3) as usize;
    5 + 4 * (e - 2) + m
}

/// The upper edge of size class `i` (inclusive); saturates at `u64::MAX`.
pub fn class_edge(i: usize) -> u64 {
    if i <= 4 {
        return i as u64;
    }
    let k = i - 5;
    let (e, m) = (k / 4 + 2, (k % 4) as u128);
    u64::try_from((5 + m) << (e - 2).min(100)).unwrap_or(u64::MAX)
}

/// The lower edge of size class `i` (exclusive).
pub fn class_floor(i: usize) -> u64 {
    if i == 0 {
        0
    } else {
        class_edge(i - 1)
    }
}

/// A resolved pick, one byte per (type, mode, size class).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum Pick {
    OneShot = 1,
    TwoShot = 2,
    Nccl = 3,
}

impl Pick {
    fn of(c: Candidate) -> Pick {
        match c.algo {
            _ if c.transport == Transport::Nccl => Pick::Nccl,
            Some(Algo::TwoShot) => Pick::TwoShot,
            _ => Pick::OneShot,
        }
    }
    fn from_u8(b: u8) -> Option<Pick> {
        match b {
            1 => Some(Pick::OneShot),
            2 => Some(Pick::TwoShot),
            3 => Some(Pick::Nccl),
            _ => None,
        }
    }
}

const MODES: [Mode; 2] = [Mode::Eager, Mode::Graph];

fn dtype_index(d: DType) -> usize {
    match d {
        DType::F32 => 0,
        DType::F16 => 1,
        DType::Bf16 => 2,
    }
}

fn mode_index(m: Mode) -> usize {
    match m {
        Mode::Eager => 0,
        Mode::Graph => 1,
    }
}

/// The decision resolved for every size class a group can run: what a
/// communicator holds, and what `explain` reads.
#[derive(Clone, Debug, PartialEq)]
pub struct RouteTable {
    group: Group,
    /// Size classes resolved: 0 ..= size_class(max_bytes).
    classes: usize,
    /// [type][mode][class], `3 * 2 * classes` picks.
    picks: Box<[Pick]>,
    source: String,
    note: Option<String>,
}

impl RouteTable {
    /// Resolves [`decide`] for every (type, mode, size class) up to the
    /// group's buffer size. Takes milliseconds; done once at creation.
    pub fn resolve(sel: &Selector, group: Group) -> Result<RouteTable> {
        if group.transport == Transport::Nccl {
            return Err(Error::invalid(
                "route group",
                "the kernels' transport must be cuda or host (NCCL is a route, not the group's transport)",
            ));
        }
        if !(2..=crate::transport::MAX_WORLD).contains(&group.world) {
            return Err(Error::invalid(
                "world size",
                format!(
                    "{} (tpcomm's kernels take 2 to {} ranks)",
                    group.world,
                    crate::transport::MAX_WORLD
                ),
            ));
        }
        let classes = size_class(group.max_bytes.bytes()) + 1;
        let mut picks = Vec::with_capacity(DType::ALL.len() * MODES.len() * classes);
        let mut nccl_would = 0usize;
        for d in [DType::F32, DType::F16, DType::Bf16] {
            for m in MODES {
                for i in 0..classes {
                    let q = Query {
                        world: group.world,
                        dtype: d,
                        bytes: Self::decided_at(i, group.max_bytes),
                        mode: m,
                    };
                    let c = decide(sel, &group, &q).choice;
                    picks.push(Pick::of(c));
                    if !group.nccl {
                        let with = Group {
                            nccl: true,
                            ..group
                        };
                        if decide(sel, &with, &q).choice == Candidate::NCCL {
                            nccl_would += 1;
                        }
                    }
                }
            }
        }
        let note = (nccl_would > 0).then(|| {
            format!(
                "{} of {} (type, mode, size) classes would run faster on NCCL by {}, but no NCCL is loaded beside the kernels: tpcomm's best algorithm runs them (load NCCL, e.g. CudaConfig::nccl_fallback or TPCOMM_NCCL_FALLBACK=1, to route them there)",
                nccl_would,
                picks.len(),
                sel.source()
            )
        });
        Ok(RouteTable {
            group,
            classes,
            picks: picks.into_boxed_slice(),
            source: sel.source().to_string(),
            note,
        })
    }

    /// The size the decision of class `i` is taken at: its upper edge, the
    /// buffer size for the class holding it, 1 byte for the empty class.
    pub fn decided_at(i: usize, max_bytes: ByteSize) -> u64 {
        class_edge(i).min(max_bytes.bytes()).max(1)
    }

    pub fn group(&self) -> &Group {
        &self.group
    }
    /// Where the decision came from (table path, built-in table or rules).
    pub fn source(&self) -> &str {
        &self.source
    }
    /// Said once in the creation log: NCCL would win somewhere but is not loaded.
    pub fn note(&self) -> Option<&str> {
        self.note.as_deref()
    }

    /// The route of one call: [`lookup`](Self::lookup) by element count.
    /// Without NCCL, a call the kernels cannot take is an error that says
    /// what to do. No allocation, no system call (except in building an
    /// error).
    pub fn route(
        &self,
        count: usize,
        dtype: DType,
        op: ReduceOp,
        algo: Algo,
        mode: Mode,
        wire: Wire,
    ) -> Result<Route> {
        let bytes = dtype.bytes_of(count)? as u64;
        let r = self.lookup(bytes, dtype, op, algo, mode, wire);
        let Route::Nccl(why) = r else {
            return Ok(r);
        };
        if self.group.nccl {
            return Ok(r);
        }
        Err(match why {
            NcclReason::Op => Error::Unsupported(format!(
                "reduce op {op} in tpcomm's kernels (they only sum); create the communicator with nccl_fallback to run it on NCCL"
            )),
            _ => Error::invalid(
                "message size",
                format!(
                    "{} is above this communicator's buffers ({}); create it with a larger max_bytes, or with nccl_fallback to run such messages on NCCL",
                    ByteSize::b(bytes),
                    self.group.max_bytes
                ),
            ),
        })
    }

    /// The one lookup of a call's route, never an error: the op and
    /// buffer-size rules ([`NcclReason::of`]), then the quantized `wire`
    /// (the wire the sum travels on, `Wire::Exact` when none: a quantized
    /// wire is the caller's request and takes every sum the kernels can,
    /// before the decision, which never weighed it), then `algo` when it is
    /// the caller's own (not `Auto`), then the resolved decision for the
    /// call's type, mode and size class. Answers NCCL even when none is
    /// loaded ([`route`](Self::route) makes that an error). Two comparisons
    /// and an array index.
    pub fn lookup(
        &self,
        bytes: u64,
        dtype: DType,
        op: ReduceOp,
        algo: Algo,
        mode: Mode,
        wire: Wire,
    ) -> Route {
        if let Some(why) = NcclReason::of(bytes, self.group.max_bytes, op) {
            return Route::Nccl(why);
        }
        let transport = self.group.transport;
        if wire != Wire::Exact {
            return Route::Tpcomm {
                transport,
                algo: None,
                wire,
            };
        }
        if algo != Algo::Auto {
            return Route::exact(transport, algo);
        }
        // In range: bytes <= max_bytes, so its class was resolved.
        let i = (dtype_index(dtype) * MODES.len() + mode_index(mode)) * self.classes
            + size_class(bytes).min(self.classes - 1);
        match self.picks[i] {
            Pick::Nccl if self.group.nccl => Route::Nccl(NcclReason::Faster),
            // Resolved without NCCL the pick is never NCCL; kept safe anyway.
            Pick::Nccl | Pick::OneShot => Route::exact(transport, Algo::OneShot),
            Pick::TwoShot => Route::exact(transport, Algo::TwoShot),
        }
    }

    /// What `explain` prints for an all-reduce of `bytes` on `wire` (as
    /// [`lookup`](Self::lookup) takes it): the route the communicator takes
    /// (the same lookup) and, when the kernels can take the call, the
    /// decision at the size its class was decided at (with the reason and
    /// the estimates; a quantized wire overrides its choice).
    pub fn explain(
        &self,
        sel: &Selector,
        bytes: u64,
        dtype: DType,
        op: ReduceOp,
        mode: Mode,
        wire: Wire,
    ) -> (Route, Option<Decision>) {
        let r = self.lookup(bytes, dtype, op, Algo::Auto, mode, wire);
        let decided =
            matches!(r, Route::Tpcomm { .. } | Route::Nccl(NcclReason::Faster)).then(|| {
                decide(
                    sel,
                    &self.group,
                    &Query {
                        world: self.group.world,
                        dtype,
                        bytes: Self::decided_at(size_class(bytes), self.group.max_bytes),
                        mode,
                    },
                )
            });
        (r, decided)
    }

    /// The routes as ranges, one line per type and mode with the same
    /// ranges merged: what the creation log shows.
    pub fn summary(&self) -> String {
        let mut lines: Vec<(String, Vec<&'static str>)> = Vec::new();
        for d in [DType::Bf16, DType::F16, DType::F32] {
            for m in MODES {
                let mut ranges = String::new();
                let mut prev: Option<(Pick, u64)> = None;
                let base = (dtype_index(d) * MODES.len() + mode_index(m)) * self.classes;
                for i in 1..self.classes {
                    let p = self.picks[base + i];
                    let hi = class_edge(i).min(self.group.max_bytes.bytes());
                    match prev {
                        Some((q, _)) if q == p => prev = Some((p, hi)),
                        Some((q, h)) => {
                            self.push_range(&mut ranges, q, h);
                            prev = Some((p, hi));
                        }
                        None => prev = Some((p, hi)),
                    }
                }
                if let Some((q, h)) = prev {
                    self.push_range(&mut ranges, q, h);
                }
                match lines.iter_mut().find(|(r, _)| *r == ranges) {
                    Some((_, who)) => who.push(label(d, m)),
                    None => lines.push((ranges, vec![label(d, m)])),
                }
            }
        }
        let mut out = format!(
            "routes ({} ranks, {} transport, NCCL {}, by {}):",
            self.group.world,
            self.group.transport.name(),
            if self.group.nccl {
                "loaded"
            } else {
                "not loaded"
            },
            self.source
        );
        for (ranges, who) in lines {
            out.push_str(&format!(" [{}] {ranges};", who.join(" ")));
        }
        out.push_str(&format!(
            " above {}: nccl (message above the buffers)",
            self.group.max_bytes
        ));
        out
    }

    fn push_range(&self, out: &mut String, p: Pick, hi: u64) {
        let what = match p {
            Pick::Nccl if self.group.nccl => "nccl".to_string(),
            Pick::TwoShot => format!("{}:two-shot", self.group.transport.name()),
            _ => format!("{}:one-shot", self.group.transport.name()),
        };
        if !out.is_empty() {
            out.push_str(", ");
        }
        out.push_str(&format!("{what} to {}", ByteSize::b(hi)));
    }

    /// The picks as bytes, so that ranks can check they all resolved the
    /// same routes (a rank that routes a call to NCCL while its peers run
    /// the kernels would wait forever).
    pub fn encode(&self) -> Vec<u8> {
        self.picks.iter().map(|p| *p as u8).collect()
    }

    /// Takes the picks `bytes` encode (another rank's), keeping this table's
    /// group; an error when they do not fit it.
    pub fn adopt(&mut self, bytes: &[u8]) -> Result<()> {
        if bytes.len() != self.picks.len() {
            return Err(Error::invalid(
                "rendezvous",
                format!(
                    "rank 0 posted {} route picks, this rank resolved {}: do all ranks run the same tpcomm with the same max_bytes?",
                    bytes.len(),
                    self.picks.len()
                ),
            ));
        }
        let mut picks = Vec::with_capacity(bytes.len());
        for b in bytes {
            picks.push(Pick::from_u8(*b).ok_or_else(|| {
                Error::invalid(
                    "rendezvous",
                    format!("rank 0 posted route pick {b}; do all ranks run the same tpcomm?"),
                )
            })?);
        }
        self.picks = picks.into_boxed_slice();
        Ok(())
    }
}

fn label(d: DType, m: Mode) -> &'static str {
    match (d, m) {
        (DType::Bf16, Mode::Eager) => "bf16 eager",
        (DType::Bf16, Mode::Graph) => "bf16 graph",
        (DType::F16, Mode::Eager) => "f16 eager",
        (DType::F16, Mode::Graph) => "f16 graph",
        (DType::F32, Mode::Eager) => "f32 eager",
        (DType::F32, Mode::Graph) => "f32 graph",
    }
}

/// Makes the group's routes agree, from every rank's encoded picks
/// (`RouteTable::encode`, in rank order, as the communicator's rendezvous
/// exchanged them: `CudaConfig::agreed_routes`): rank 0's picks are taken by
/// all (each rank read its own table and environment; ranks that route one
/// call apart never meet). A rank whose own picks differed says so on
/// stderr, naming what to align.
pub fn agree(table: RouteTable, rank: usize, all: &[Vec<u8>]) -> Result<RouteTable> {
    let mine = table.encode();
    let first = all
        .first()
        .ok_or_else(|| Error::invalid("rendezvous", "no rank posted route picks"))?;
    if *first == mine {
        return Ok(table);
    }
    let mut table = table;
    table.adopt(first)?;
    eprintln!(
        "tpcomm rank {rank}: this rank's routes ({}) differ from rank 0's; rank 0's are used. Give every rank the same TPCOMM_TUNING_TABLE and environment",
        table.source
    );
    Ok(table)
}
