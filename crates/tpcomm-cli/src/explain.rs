//! `tpcomm explain`: which algorithm an all-reduce of a given size gets, the
//! table row or rule behind it, and what the alternatives would cost.

use clap::builder::RangedU64ValueParser;
use clap::Args;
use std::fmt::Write as _;
use std::path::PathBuf;
use tpcomm::cuda::MAX_WORLD;
use tpcomm::select::{self, Decision, Query, Selector, Table};
use tpcomm::{ByteSize, DType, Error, Result};

#[derive(Args, Debug)]
pub struct ExplainArgs {
    /// Message size ("64KiB", "1048576").
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
    /// (nvlink, pcie-p2p, pcie-nop2p, mixed); needs no GPU.
    #[arg(long, conflicts_with = "table")]
    class: Option<String>,
    /// Use this tuning table (as written by `tpcomm tune`) instead of probing
    /// this machine; needs no GPU. The machine fingerprint is not checked.
    #[arg(long, value_name = "FILE")]
    table: Option<PathBuf>,
    /// The transport the communicator runs on: cuda (P2P) or host (pinned
    /// host memory) narrows the choice to that transport's kernels and NCCL,
    /// as the communicator's `Auto` does; any (default) weighs every
    /// candidate.
    #[arg(long, default_value = "any", value_parser = ["any", "cuda", "host"])]
    transport: String,
    /// The communicator has no NCCL beside it (no fallback): leave NCCL out
    /// of the choice. Needs --transport cuda or host.
    #[arg(long)]
    no_nccl: bool,
}

pub fn run(args: ExplainArgs) -> i32 {
    match run_inner(&args) {
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

fn run_inner(args: &ExplainArgs) -> Result<String> {
    let selector = match (&args.table, &args.class) {
        (Some(path), _) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| Error::io(format!("read tuning table {}", path.display()), e))?;
            let t = Table::parse(&text, &path.display().to_string())?;
            Selector::with_table(t, path.display().to_string())
        }
        (None, Some(c)) => Selector::for_class(crate::machine::parse_class(c)?),
        (None, None) => {
            let (machine, _) = crate::machine::this_machine(None)?;
            select::find_table(None, &machine)?.0
        }
    };
    let world = args
        .world
        .or(selector.table().map(|t| t.world))
        .unwrap_or(2);
    let q = Query {
        world,
        dtype: args.dtype,
        bytes: args.bytes.bytes(),
        mode: if args.graph {
            select::Mode::Graph
        } else {
            select::Mode::Eager
        },
    };
    let d =
        match (args.transport.as_str(), args.no_nccl) {
            ("cuda", no_nccl) => selector.choose_on(&q, select::Transport::Cuda, !no_nccl),
            ("host", no_nccl) => selector.choose_on(&q, select::Transport::Host, !no_nccl),
            (_, true) => return Err(Error::invalid(
                "--no-nccl",
                "it narrows the choice of one transport; add --transport cuda or --transport host",
            )),
            _ => selector.choose(&q),
        };
    let mut text = render(&selector, &q, &d);
    if let Some(line) = tpcomm::quant::explain_line(&tpcomm::quant::wire_from_env()?, q.bytes) {
        text.push_str(&line);
        text.push('\n');
    }
    Ok(text)
}

/// The explanation, as printed.
pub(crate) fn render(sel: &Selector, q: &Query, d: &Decision) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "all-reduce of {} ({} bytes) {}, {} ranks, {} mode, machine class {}",
        ByteSize::b(q.bytes),
        q.bytes,
        q.dtype.name(),
        q.world,
        q.mode.name(),
        sel.class()
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
    let _ = writeln!(out, "choice: {}", d.choice);
    let _ = writeln!(out, "why: {}", d.why);
    if d.estimates.is_empty() {
        let _ = writeln!(out, "alternatives: no measured times (a rule decided)");
    } else {
        let best = d.estimates[0].1;
        let _ = writeln!(out, "alternatives (us per call):");
        for (c, t) in &d.estimates {
            let mark = if *c == d.choice {
                "chosen".to_string()
            } else {
                format!("{:+.1}%", (t / best - 1.0) * 100.0)
            };
            let _ = writeln!(out, "  {:<16} {:>10.2}  {}", c.to_string(), t, mark);
        }
    }
    for n in sel.notes() {
        let _ = writeln!(out, "note: {n}");
    }
    out
}
