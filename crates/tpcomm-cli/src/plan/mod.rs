//! `tpcomm plan`: the memory and speculative-decoding planners (tpcomm-plan)
//! on the command line.

/// Prints a line to stdout; a closed pipe (`tpcomm plan ... | head`) ends
/// the output quietly instead of panicking as `println!` would.
macro_rules! outln {
    () => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout());
    }};
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

mod args;
mod print;
pub use args::PlanCommand;
use args::*;
use print::{list, print_spec};

use tpcomm::ByteSize;
use tpcomm_plan::arch::{KvType, QuantScope, WeightType};
use tpcomm_plan::catalog::{Catalog, Gpu, Model};
use tpcomm_plan::latency::{Interp, LatencySource, LatencyTable};
use tpcomm_plan::memory::{plan_memory, CommChoice, MemoryInput, MemoryPlan, TpcommTransport};
use tpcomm_plan::spec::{Overhead, Planner, SpecInput, SpecPlan, MAX_LATENCY_US};
use tpcomm_plan::{PlanError, Result};

pub fn run(cmd: PlanCommand) -> Result<()> {
    match cmd {
        PlanCommand::Memory(a) => memory(*a),
        PlanCommand::Spec(a) => spec(*a),
        PlanCommand::List(a) => list(a),
    }
}

fn load_catalog(a: &CatalogArg) -> Result<Catalog> {
    match &a.catalog {
        Some(dir) => Catalog::from_dir(dir),
        None => Catalog::builtin(),
    }
}

struct Resolved<'c> {
    model: Model,
    gpu: &'c Gpu,
    tp: u64,
    weights: WeightType,
    scope: QuantScope,
    kv: KvType,
    draft: Option<&'c tpcomm_plan::catalog::Draft>,
    draft_weights: WeightType,
}

fn weights(w: WeightsArg) -> WeightType {
    match w {
        WeightsArg::Bf16 => WeightType::Bf16,
        WeightsArg::Fp8 => WeightType::Fp8,
        WeightsArg::Int4 => WeightType::Int4,
    }
}

fn resolve<'c>(c: &Common, draft: Option<&str>, cat: &'c Catalog) -> Result<Resolved<'c>> {
    let model = match (&c.model, &c.config) {
        (Some(name), _) => cat.model(name)?.clone(),
        (None, Some(path)) => tpcomm_plan::hf::model_from_config_path(path)?,
        (None, None) => return Err(PlanError::invalid("model", "give --model or --config")),
    };
    let machine = c.machine.as_deref().map(|m| cat.machine(m)).transpose()?;
    let gpu = match (&c.gpu, machine) {
        (Some(g), _) => cat.gpu(g)?,
        (None, Some(m)) => cat.gpu(&m.gpu)?,
        (None, None) => return Err(PlanError::invalid("GPU", "give --gpu or --machine")),
    };
    let tp = c.tp.or(machine.map(|m| m.count)).unwrap_or(1);
    let scope = match c.quant_scope {
        Some(ScopeArg::Experts) if model.moe.is_some() => QuantScope::Experts,
        Some(ScopeArg::Experts) | Some(ScopeArg::Linear) => QuantScope::Linear,
        None if model.moe.is_some() => QuantScope::Experts,
        None => QuantScope::Linear,
    };
    let draft = draft.map(|d| cat.draft(d)).transpose()?;
    if let Some(d) = draft {
        if !d.target.eq_ignore_ascii_case(&model.name) {
            eprintln!(
                "note: draft {} was made for {}, not {}",
                d.name, d.target, model.name
            );
        }
    }
    Ok(Resolved {
        model,
        gpu,
        tp,
        weights: weights(c.weights),
        scope,
        kv: match c.kv {
            KvArg::Bf16 => KvType::Bf16,
            KvArg::Fp8 => KvType::Fp8,
        },
        draft,
        draft_weights: weights(c.draft_weights),
    })
}

/// The smallest GPU memory in a `tpcomm probe --json` file.
fn probe_memory(path: &std::path::Path) -> Result<ByteSize> {
    let topo = tpcomm::topology::Topology::from_path(path)
        .map_err(|e| PlanError::invalid("--from-probe", format!("{}: {e}", path.display())))?;
    topo.gpus
        .iter()
        .filter_map(|g| g.memory)
        .min()
        .ok_or_else(|| {
            PlanError::invalid(
                "--from-probe",
                format!("{}: no GPU with a memory size", path.display()),
            )
        })
}

fn lower(x: impl std::fmt::Debug) -> String {
    format!("{x:?}").to_lowercase()
}

fn json_out<T: serde::Serialize>(v: &T) -> Result<()> {
    let s = serde_json::to_string_pretty(v)
        .map_err(|e| PlanError::invalid("JSON output", e.to_string()))?;
    outln!("{s}");
    Ok(())
}

/// What the communication buffers are sized for: given bytes, or tpcomm's,
/// NCCL's or both communicators' own sizing.
fn comm_choice(a: &MemoryArgs) -> CommChoice {
    let transport = match a.transport {
        TransportArg::P2p => TpcommTransport::P2p,
        TransportArg::Host => TpcommTransport::Host,
    };
    match (a.comm_bytes, a.comm) {
        (Some(bytes), _) => CommChoice::Bytes { bytes },
        (None, CommArg::Tpcomm) => CommChoice::Tpcomm {
            max_message: a.max_message,
            transport,
        },
        (None, CommArg::Nccl) => CommChoice::Nccl {
            channels: a.nccl_channels,
        },
        (None, CommArg::Both) => CommChoice::Both {
            max_message: a.max_message,
            transport,
            channels: a.nccl_channels,
        },
    }
}

/// The memory plan as text: the run, then each term per GPU and what is left
/// for the KV cache.
fn print_memory(r: &Resolved, plan: &MemoryPlan, memory_from: &str) {
    outln!(
        "{} on {} ({} per GPU), TP {}, weights {} ({}), KV {}{}",
        r.model.name,
        r.gpu.name,
        plan.gpu_memory,
        r.tp,
        lower(r.weights),
        lower(r.scope),
        lower(r.kv),
        r.draft
            .map(|d| format!(", draft {}", d.name))
            .unwrap_or_default()
    );
    outln!("GPU memory: {}", memory_from);
    outln!("per GPU:");
    for t in &plan.terms {
        outln!("  {:<24} {:>12}   {}", t.name, t.bytes.to_string(), t.how);
    }
    outln!(
        "  {:<24} {:>12}   {} tokens x ({} target{})",
        "left for the KV cache",
        plan.kv_budget.to_string(),
        plan.kv_tokens,
        plan.kv_per_token_target,
        plus_draft(plan.kv_per_token_draft, "draft")
    );
    outln!(
        "KV cache: {} tokens ({} target KV{}) per GPU; with TP every rank holds the same tokens",
        plan.kv_tokens,
        plan.kv_target,
        plus_draft(plan.kv_draft, "draft KV")
    );
}

/// " + {bytes} {what}" when the draft takes any, else nothing.
fn plus_draft(bytes: ByteSize, what: &str) -> String {
    if bytes > ByteSize::ZERO {
        format!(" + {bytes} {what}")
    } else {
        String::new()
    }
}

fn memory(a: MemoryArgs) -> Result<()> {
    let cat = load_catalog(&a.common.catalog)?;
    let r = resolve(&a.common, a.draft.as_deref(), &cat)?;
    let comm = comm_choice(&a);
    let (gpu_memory, memory_from) = match (&a.from_probe, a.gpu_memory) {
        (Some(path), _) => (probe_memory(path)?, format!("from {}", path.display())),
        (None, Some(m)) => (m, "given with --gpu-memory".to_string()),
        (None, None) => (r.gpu.memory, r.gpu.memory_source.clone()),
    };
    let inp = MemoryInput {
        model: &r.model,
        draft: r.draft,
        tp: r.tp,
        gpu_memory,
        weights: r.weights,
        scope: r.scope,
        draft_weights: match r.draft.map(|d| &d.shape) {
            Some(tpcomm_plan::catalog::DraftShape::Mtp { .. }) => r.weights,
            _ => r.draft_weights,
        },
        kv: r.kv,
        comm,
        runtime_reserve: a.runtime_reserve,
        graph_reserve: a.graph_reserve,
        max_batch_tokens: a.max_batch_tokens,
        logit_rows: a.logit_rows,
    };
    let plan = plan_memory(&inp)?;
    if a.common.json {
        #[derive(serde::Serialize)]
        struct Out<'a> {
            model: &'a str,
            gpu: &'a str,
            tp: u64,
            weights: WeightType,
            quant_scope: QuantScope,
            kv: KvType,
            draft: Option<&'a str>,
            plan: &'a MemoryPlan,
        }
        return json_out(&Out {
            model: &r.model.name,
            gpu: &r.gpu.name,
            tp: r.tp,
            weights: r.weights,
            quant_scope: r.scope,
            kv: r.kv,
            draft: r.draft.map(|d| d.name.as_str()),
            plan: &plan,
        });
    }
    print_memory(&r, &plan, &memory_from);
    Ok(())
}

fn table_of(
    cat: &Catalog,
    machine: Option<&str>,
    name: &str,
    interp: Interp,
) -> Result<LatencySource> {
    let m =
        machine.ok_or_else(|| PlanError::invalid("--table", "a catalog table needs --machine"))?;
    let m = cat.machine(m)?;
    let t = m
        .tables
        .iter()
        .find(|t| t.name.rsplit('/').next() == Some(name))
        .ok_or_else(|| PlanError::UnknownName {
            kind: "all-reduce table",
            name: format!("{}/{name}", m.name),
            known: m
                .tables
                .iter()
                .map(|t| t.name.clone())
                .collect::<Vec<_>>()
                .join(", "),
        })?;
    Ok(LatencySource::Table {
        table: t.clone(),
        interp,
    })
}

/// Refuses a bench file whose rows for the latency table are not latencies
/// (wrong results, no time): the planner's reader takes only their times.
fn check_bench_rows(
    path: &std::path::Path,
    algo: Option<&str>,
    mode: Option<&str>,
    dtype: &str,
) -> Result<()> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| PlanError::Io {
        path: name.clone(),
        source,
    })?;
    let filter = tpcomm::report::RowFilter {
        algo,
        mode,
        dtype: Some(dtype),
    };
    tpcomm::report::parse_rows(&text, &name)
        .and_then(|rows| tpcomm::report::latency_rows(&rows, &name, filter).map(|_| ()))
        .map_err(|e| PlanError::invalid("--bench", e.to_string()))
}

/// A flat latency given in microseconds, refused outside 0 to MAX_LATENCY_US.
fn flat_latency(flag: &str, us: f64) -> Result<LatencySource> {
    if !(us.is_finite() && (0.0..=MAX_LATENCY_US).contains(&us)) {
        return Err(PlanError::invalid(
            flag,
            format!("{us} (give 0 to {MAX_LATENCY_US} microseconds)"),
        ));
    }
    Ok(LatencySource::Flat { us })
}

/// The all-reduce latency of the speculative run: --allreduce-us, a bench
/// file, a catalog table, or none at TP 1; else an error naming the
/// machine's tables.
fn spec_latency(
    a: &SpecArgs,
    r: &Resolved,
    cat: &Catalog,
    interp: Interp,
) -> Result<LatencySource> {
    let machine = a.common.machine.as_deref();
    if let Some(us) = a.allreduce_us {
        return flat_latency("--allreduce-us", us);
    }
    if let Some(path) = &a.bench {
        check_bench_rows(path, a.algo.as_deref(), a.mode.as_deref(), &a.dtype)?;
        return Ok(LatencySource::Table {
            table: LatencyTable::from_bench_json(
                path,
                a.algo.as_deref(),
                a.mode.as_deref(),
                Some(&a.dtype),
            )?,
            interp,
        });
    }
    if let Some(t) = &a.table {
        return table_of(cat, machine, t, interp);
    }
    if r.tp == 1 {
        // No all-reduces at TP 1: nothing to look up.
        return Ok(LatencySource::Flat { us: 0.0 });
    }
    let tables = match machine {
        Some(m) => format!(
            "; machine {m} has tables: {}",
            cat.machine(m)?
                .tables
                .iter()
                .map(|t| t.name.rsplit('/').next().unwrap_or(&t.name).to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        None => String::new(),
    };
    Err(PlanError::invalid(
        "all-reduce latency",
        format!("give --allreduce-us, --bench FILE, or --machine with --table{tables}"),
    ))
}

/// The all-reduce latency of the plain (non-speculative) run, when given
/// apart from the speculative one.
fn plain_latency(a: &SpecArgs, cat: &Catalog, interp: Interp) -> Result<Option<LatencySource>> {
    match (a.plain_allreduce_us, &a.plain_table) {
        (Some(us), _) => flat_latency("--plain-allreduce-us", us).map(Some),
        (None, Some(t)) => table_of(cat, a.common.machine.as_deref(), t, interp).map(Some),
        (None, None) => Ok(None),
    }
}

fn spec(a: SpecArgs) -> Result<()> {
    // Where the plots go (made if missing), checked before any planning.
    if let Some(dir) = &a.plot {
        crate::checks::output_tree("--plot", dir, true)
            .map_err(|e| PlanError::invalid(e.flag(), e.detail()))?;
    }
    let cat = load_catalog(&a.common.catalog)?;
    let r = resolve(&a.common, Some(&a.draft), &cat)?;
    let draft = r
        .draft
        .ok_or_else(|| PlanError::invalid("draft", "give --draft (see `tpcomm plan list`)"))?;
    let interp = match a.interp {
        InterpArg::LogLog => Interp::LogLog,
        InterpArg::Linear => Interp::Linear,
    };
    let spec_latency = spec_latency(&a, &r, &cat, interp)?;
    let plain_latency = plain_latency(&a, &cat, interp)?;
    let overhead = match (a.calibrate_tok_s, a.overhead_us) {
        (Some(tok_s), _) => Overhead::CalibrateTokS { tok_s },
        (None, Some(us)) => Overhead::PerLayerUs { us },
        (None, None) => Overhead::Catalog,
    };
    let draft_weights = match draft.shape {
        tpcomm_plan::catalog::DraftShape::Mtp { .. } => r.weights,
        _ => r.draft_weights,
    };
    let planner = Planner::new(SpecInput {
        model: &r.model,
        draft,
        gpu: r.gpu,
        tp: r.tp,
        weights: r.weights,
        scope: r.scope,
        draft_weights,
        kv: r.kv,
        context: a.context,
        spec_latency,
        plain_latency,
        overhead,
        max_steps: a.max_steps.unwrap_or(draft.acceptance.len() as u64),
        trees: a.tree.clone(),
    })?;
    let plan = planner.plan()?;
    let plots = match &a.plot {
        Some(dir) => tpcomm_plan::plot::draw(dir, &planner, &plan)?,
        None => Vec::new(),
    };
    if a.common.json {
        #[derive(serde::Serialize)]
        struct Out<'a> {
            model: &'a str,
            draft: &'a str,
            gpu: &'a str,
            tp: u64,
            weights: WeightType,
            context: u64,
            plan: &'a SpecPlan,
            plots: Vec<String>,
        }
        return json_out(&Out {
            model: &r.model.name,
            draft: &draft.name,
            gpu: &r.gpu.name,
            tp: r.tp,
            weights: r.weights,
            context: a.context,
            plan: &plan,
            plots: plots.iter().map(|p| p.display().to_string()).collect(),
        });
    }
    print_spec(&r, draft, &plan, planner.shares_latency());
    for p in plots {
        outln!("wrote {}", p.display());
    }
    Ok(())
}

#[cfg(test)]
mod bench_check_tests;
