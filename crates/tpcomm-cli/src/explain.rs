//! `tpcomm explain`: the route a communicator takes for an all-reduce of a
//! given size (its `select::RouteTable`, resolved as the communicator
//! resolves it), the table row or rule behind it, and what the alternatives
//! would cost.

use clap::builder::RangedU64ValueParser;
use clap::Args;
use std::fmt::Write as _;
use std::path::PathBuf;
use tpcomm::cuda::quant::wire_for;
use tpcomm::quant::Wire;
use tpcomm::select::{
    self, Decision, Group, NcclReason, Query, Route, RouteTable, Selector, Table, Transport,
};
use tpcomm::transport::MAX_WORLD;
use tpcomm::{ByteSize, DType, Error, ReduceOp, Result};

#[derive(Args, Debug)]
pub struct ExplainArgs {
    /// Message size ("64KiB", "1048576"): a whole number of --dtype elements.
    #[arg(long)]
    bytes: ByteSize,
    /// Element type: bf16, f16 or f32.
    #[arg(long, default_value = "bf16")]
    dtype: DType,
    /// Launched inside a CUDA graph (default: eager).
    #[arg(long)]
    graph: bool,
    /// Number of ranks, 2 to 8 (default: the table's, else 2).
    #[arg(long, value_parser = RangedU64ValueParser::<usize>::new().range(2..=MAX_WORLD as u64))]
    world: Option<usize>,
    /// Use this machine class's defaults instead of probing this machine
    /// (nvlink, pcie-p2p, pcie-nop2p, mixed, single-gpu); needs no GPU.
    #[arg(long, conflicts_with = "table")]
    class: Option<String>,
    /// Use this tuning table (as written by `tpcomm tune`) instead of probing
    /// this machine; needs no GPU. The machine fingerprint is not checked.
    #[arg(long, value_name = "FILE")]
    table: Option<PathBuf>,
    /// The kernels' transport: cuda (P2P) or host (pinned host memory); auto
    /// (default; any is the same) takes the one the communicator's P2P
    /// verdict gives: host when a pair of this machine's GPUs (or of the
    /// class) lacks P2P.
    #[arg(long, default_value = "auto", value_parser = ["auto", "any", "cuda", "host"])]
    transport: String,
    /// The communicator has no NCCL beside it: every sum that fits the
    /// buffers runs on the kernels.
    #[arg(long)]
    no_nccl: bool,
    /// The communicator's buffer size (`CudaConfig::max_bytes`; the drop-in's
    /// TPCOMM_MAX_BYTES): larger messages go to NCCL.
    #[arg(long, default_value = "8MiB")]
    max_bytes: ByteSize,
    /// Reduce op: sum, max or min (the kernels only sum).
    #[arg(long, default_value = "sum")]
    op: ReduceOp,
}

/// Said when probing this machine fails (no driver, no GPU): the two
/// options that answer without one.
const NO_GPU_HINT: &str = "without a GPU here, name a machine class (--class nvlink, pcie-p2p, pcie-nop2p, mixed or single-gpu: its built-in defaults) or a tuning table (--table FILE, as `tpcomm tune` writes it); neither needs a GPU";

pub fn run(args: ExplainArgs) -> i32 {
    // Refused before this machine is probed, with the usage status.
    if let Err(e) = crate::checks::message_size("--bytes", args.bytes, args.dtype) {
        eprintln!("tpcomm explain: {e}");
        return crate::checks::USAGE;
    }
    let picked = selector_and_transport(&args).map_err(|e| {
        if args.class.is_none() && args.table.is_none() {
            format!("{e}\ntpcomm explain: {NO_GPU_HINT}")
        } else {
            e.to_string()
        }
    });
    match picked.and_then(|picked| run_inner(&args, picked).map_err(|e| e.to_string())) {
        Ok(text) => {
            print!("{text}");
            0
        }
        Err(e) => {
            eprintln!("tpcomm explain: {e}");
            1
        }
    }
}

/// The selector and the transport the communicator would have here.
fn selector_and_transport(args: &ExplainArgs) -> Result<(Selector, Transport)> {
    let (selector, verdict) = match (&args.table, &args.class) {
        (Some(path), _) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| Error::io(format!("read tuning table {}", path.display()), e))?;
            let t = Table::parse(&text, &path.display().to_string())?;
            let class = t.machine_class;
            (
                Selector::with_table(t, path.display().to_string()),
                select::transport_of_class(class),
            )
        }
        (None, Some(c)) => {
            let class = crate::machine::parse_class(c)?;
            (
                Selector::for_class(class),
                select::transport_of_class(class),
            )
        }
        (None, None) => {
            // What a communicator created here finds (select::for_this_machine).
            let (machine, topo) = crate::machine::this_machine(None)?;
            let verdict = select::transport_of(&topo);
            (select::for_probed(&machine, verdict)?, verdict)
        }
    };
    let transport = match args.transport.as_str() {
        "cuda" => Transport::Cuda,
        "host" => Transport::Host,
        _ => verdict,
    };
    Ok((selector, transport))
}

fn run_inner(args: &ExplainArgs, (selector, transport): (Selector, Transport)) -> Result<String> {
    let world = args
        .world
        .or(selector.table().map(|t| t.world))
        .unwrap_or(2);
    let group = Group {
        world,
        transport,
        nccl: !args.no_nccl,
        max_bytes: args.max_bytes,
    };
    let mode = if args.graph {
        select::Mode::Graph
    } else {
        select::Mode::Eager
    };
    // The wire the sum travels on: TPCOMM_WIRE from TPCOMM_WIRE_MIN_BYTES
    // up, as the communicator and the drop-in read it.
    let env = tpcomm::quant::wire_from_env()?;
    let wire = wire_for(env.wire, env.min_bytes, args.bytes.bytes());
    let mut text = answer(
        &selector,
        group,
        args.bytes.bytes(),
        args.dtype,
        args.op,
        mode,
        wire,
    )?
    .1;
    if let Some(line) = tpcomm::quant::explain_line(&env, args.bytes.bytes()) {
        text.push_str(&line);
        text.push('\n');
    }
    Ok(text)
}

/// The route a communicator of `group` holding `sel` takes for one call (its
/// `RouteTable`, the one the communicator resolves at creation), and the
/// explanation as printed.
pub(crate) fn answer(
    sel: &Selector,
    group: Group,
    bytes: u64,
    dtype: DType,
    op: ReduceOp,
    mode: select::Mode,
    wire: Wire,
) -> Result<(Route, String)> {
    let routes = RouteTable::resolve(sel, group)?;
    Ok(answer_with(sel, &routes, bytes, dtype, op, mode, wire))
}

/// [`answer`] with the routes already resolved.
fn answer_with(
    sel: &Selector,
    routes: &RouteTable,
    bytes: u64,
    dtype: DType,
    op: ReduceOp,
    mode: select::Mode,
    wire: Wire,
) -> (Route, String) {
    let group = *routes.group();
    let (route, decision) = routes.explain(sel, bytes, dtype, op, mode, wire);
    let q = Query {
        world: group.world,
        dtype,
        bytes,
        mode,
    };
    (route, render(sel, routes, &q, op, route, decision.as_ref()))
}

/// The explanation, as printed.
fn render(
    sel: &Selector,
    routes: &RouteTable,
    q: &Query,
    op: ReduceOp,
    route: Route,
    d: Option<&Decision>,
) -> String {
    let g = routes.group();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "all-reduce ({op}) of {} ({} bytes) {}, {} ranks, {} mode, machine class {}",
        ByteSize::b(q.bytes),
        q.bytes,
        q.dtype.name(),
        q.world,
        q.mode.name(),
        sel.class()
    );
    let _ = writeln!(
        out,
        "communicator: {} transport, NCCL {}, buffers {}",
        g.transport.name(),
        if g.nccl { "loaded" } else { "not loaded" },
        g.max_bytes
    );
    let _ = writeln!(out, "source: {}", sel.source());
    if let Some(t) = sel.table() {
        let _ = writeln!(
            out,
            "table: fingerprint {}, {} x {}, driver {}, NCCL {}",
            t.fingerprint.as_deref().unwrap_or("none (class default)"),
            t.world,
            if t.gpu.is_empty() { "?" } else { &t.gpu },
            t.driver,
            t.nccl.as_deref().unwrap_or("not measured")
        );
    }
    if route.is_nccl() && !g.nccl {
        // Communicator::all_reduce returns an error here (RouteTable::route).
        let _ = writeln!(out, "choice: error (no NCCL beside the kernels)");
    } else {
        // The decision's choice (which a quantized wire overrides), else
        // the route's.
        let choice = d.map_or(route.candidate(), |d| d.choice);
        let _ = writeln!(out, "choice: {choice}");
    }
    // The text the drop-in's first-call log prints for the same route.
    let _ = writeln!(out, "route: {route}");
    let Some(d) = d else {
        let why = match route {
            Route::Nccl(NcclReason::Op) => format!("the kernels only sum; {op} runs on NCCL"),
            _ => format!("above the communicator's buffers ({})", g.max_bytes),
        };
        let _ = writeln!(out, "why: {why}");
        return out;
    };
    let i = select::size_class(q.bytes);
    let at = RouteTable::decided_at(i, g.max_bytes);
    let _ = writeln!(
        out,
        "size class: {} < bytes <= {}, decided at {at} bytes",
        select::class_floor(i),
        select::class_edge(i).min(g.max_bytes.bytes())
    );
    let _ = writeln!(out, "why: {}", d.why);
    if d.estimates.is_empty() {
        let _ = writeln!(out, "alternatives: no measured times (a rule decided)");
    } else {
        let best = d.estimates[0].1;
        let _ = writeln!(out, "alternatives (us per call, at {at} bytes):");
        for (c, t) in &d.estimates {
            let mark = if *c == d.choice {
                "chosen".to_string()
            } else {
                format!("{:+.1}%", (t / best - 1.0) * 100.0)
            };
            let _ = writeln!(out, "  {:<16} {:>10.2}  {}", c.to_string(), t, mark);
        }
    }
    if let Some(n) = routes.note() {
        let _ = writeln!(out, "note: {n}");
    }
    for n in sel.notes() {
        let _ = writeln!(out, "note: {n}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use tpcomm::cuda::communicator::{dispatch, Lanes};
    use tpcomm::cuda::Call;
    use tpcomm::topology::MachineClass;
    use tpcomm::Algo;

    /// Records the lane a call ran on, named as explain names candidates.
    struct Fake {
        transport: Transport,
        nccl: bool,
        ran: RefCell<String>,
    }

    impl Lanes for Fake {
        fn kernels(&self, algo: Algo) -> Result<()> {
            *self.ran.borrow_mut() = format!("{}:{}", self.transport.name(), algo.name());
            Ok(())
        }
        fn quantized(&self, wire: Wire) -> Result<()> {
            *self.ran.borrow_mut() = format!("quantized {}", wire.label());
            Ok(())
        }
        fn nccl(&self) -> Option<Result<()>> {
            self.nccl.then(|| {
                *self.ran.borrow_mut() = "nccl".into();
                Ok(())
            })
        }
    }

    fn fixtures() -> Vec<Selector> {
        let mut v: Vec<Selector> = MachineClass::ALL
            .into_iter()
            .map(Selector::for_class)
            .collect();
        let t = Table::parse(select::BUILTIN_NVLINK_TOML, "default-nvlink.toml").unwrap();
        v.push(Selector::with_table(t, "default-nvlink.toml"));
        v
    }

    /// explain prints the route the communicator takes, for every
    /// machine-class fixture, transport, NCCL or not, type, op, eager or
    /// graph, and a grid of sizes through and past the buffers.
    #[test]
    fn explain_answers_the_route_the_communicator_takes() {
        let mut sizes: Vec<u64> = vec![4, 12, 1000, 4100, 3 << 20];
        let mut p = 64u64;
        while p <= 16 << 20 {
            sizes.extend([p - 4, p, p + 4, p + p / 2]);
            p *= 2;
        }
        let mut checked = 0;
        for sel in fixtures() {
            for world in [2, 8] {
                for transport in [Transport::Cuda, Transport::Host] {
                    for nccl in [true, false] {
                        let group = Group {
                            world,
                            transport,
                            nccl,
                            max_bytes: ByteSize::mib(8),
                        };
                        // What Communicator::new resolves for this group.
                        let routes = RouteTable::resolve(&sel, group).unwrap();
                        for dtype in DType::ALL {
                            for op in [ReduceOp::Sum, ReduceOp::Max] {
                                for mode in [select::Mode::Eager, select::Mode::Graph] {
                                    for &bytes in &sizes {
                                        let text = if bytes == 4100 {
                                            // As the command runs it: resolving its own table.
                                            answer(&sel, group, bytes, dtype, op, mode, Wire::Exact)
                                                .unwrap()
                                                .1
                                        } else {
                                            answer_with(
                                                &sel,
                                                &routes,
                                                bytes,
                                                dtype,
                                                op,
                                                mode,
                                                Wire::Exact,
                                            )
                                            .1
                                        };
                                        let line = |name: &str| {
                                            text.lines()
                                                .find_map(|l| l.strip_prefix(name))
                                                .unwrap()
                                                .to_string()
                                        };
                                        let said = line("choice: ");
                                        let fake = Fake {
                                            transport,
                                            nccl,
                                            ran: RefCell::new(String::new()),
                                        };
                                        let count = (bytes / dtype.size() as u64) as usize;
                                        let call =
                                            Call::new(0, 0, count, dtype, std::ptr::null_mut())
                                                .with_op(op);
                                        let did = match dispatch(
                                            &routes,
                                            &fake,
                                            &call,
                                            mode,
                                            Wire::Exact,
                                        ) {
                                            Ok(route) => {
                                                // The same text for the same route.
                                                assert_eq!(line("route: "), route.to_string());
                                                fake.ran.borrow().clone()
                                            }
                                            Err(_) => {
                                                "error (no NCCL beside the kernels)".to_string()
                                            }
                                        };
                                        assert_eq!(said, did, "{text}");
                                        checked += 1;
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        assert!(checked > 10_000, "{checked}");
    }
}
