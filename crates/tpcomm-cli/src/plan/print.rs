//! Text output of `tpcomm plan spec` and `tpcomm plan list`.

use super::{load_catalog, lower, CatalogArg, Resolved};
use tpcomm_plan::catalog::Draft;
use tpcomm_plan::spec::{BreakEven, SpecPlan};
use tpcomm_plan::Result;

pub(super) fn print_spec(r: &Resolved, draft: &Draft, plan: &SpecPlan, shared: bool) {
    print_spec_header(r, draft, plan);
    outln!();
    print_settings(plan);
    print_verdict(plan, shared);
}

/// The run, where each latency and the bandwidth came from, and plain
/// decoding's rate.
fn print_spec_header(r: &Resolved, draft: &Draft, plan: &SpecPlan) {
    let p = &plan.plain;
    outln!(
        "{} + {} on {} x TP {}, weights {} ({})",
        r.model.name,
        draft.name,
        r.gpu.name,
        r.tp,
        lower(r.weights),
        lower(r.scope)
    );
    outln!("cycle all-reduces: {}", plan.spec_latency);
    outln!("plain all-reduces: {}", plan.plain_latency);
    outln!("memory bandwidth: {}", plan.bandwidth_from);
    outln!(
        "per-layer overhead: {:.1} us ({})",
        plan.overhead_per_layer_us,
        plan.overhead_from
    );
    outln!(
        "plain decoding: {:.1} tok/s = {:.0} us compute + {:.0} us for {} all-reduces of {}",
        p.tok_s,
        p.compute_us,
        p.comm_us,
        p.allreduces,
        p.message
    );
}

/// The table: one line per setting, with its break-even latency.
fn print_settings(plan: &SpecPlan) {
    outln!(
        "{:>5} {:>4} {:>6} {:>8} {:>10} {:>10} {:>10} {:>10} {:>10} {:>5} {:>8} {:>7}  break-even",
        "steps",
        "topk",
        "verify",
        "tok/cyc",
        "draft cmp",
        "draft ar",
        "verify cmp",
        "verify ar",
        "cycle us",
        "ARs",
        "tok/s",
        "vs plain"
    );
    for (i, s) in plan.settings.iter().enumerate() {
        let be = match s.break_even {
            BreakEven::At { mean_us, scale } => {
                format!("below {mean_us:.1} us per all-reduce (x{scale:.3})")
            }
            BreakEven::AlwaysWins => "wins at any latency".into(),
            BreakEven::NeverWins => "loses even with free all-reduces".into(),
        };
        outln!(
            "{:>5} {:>4} {:>6} {:>8.3} {:>10.0} {:>10.0} {:>10.0} {:>10.0} {:>10.0} {:>5} {:>8.1} {:>6.2}x  {}{}",
            s.steps,
            s.topk,
            s.verify_tokens,
            s.tokens_per_cycle,
            s.draft_compute_us,
            s.draft_comm_us,
            s.verify_compute_us,
            s.verify_comm_us,
            s.cycle_us,
            s.allreduces,
            s.tok_s,
            s.speedup,
            be,
            if i == plan.best { "   <- best" } else { "" }
        );
    }
}

/// The best setting against plain decoding, and up to which all-reduce
/// latency speculation wins; then the plan's notes.
fn print_verdict(plan: &SpecPlan, shared: bool) {
    let p = &plan.plain;
    let b = &plan.settings[plan.best];
    outln!();
    let comm = b.draft_comm_us + b.verify_comm_us;
    outln!(
        "best: {}, {:.1} tok/s vs {:.1} plain ({:.2}x); cycle {:.0} us = {:.0} us compute ({:.0}%) + {:.0} us communication ({:.0}%)",
        b.label(),
        b.tok_s,
        p.tok_s,
        b.speedup,
        b.cycle_us,
        b.cycle_us - comm,
        100.0 * (b.cycle_us - comm) / b.cycle_us,
        comm,
        100.0 * comm / b.cycle_us
    );
    // The most forgiving setting (the plan's, which the plot draws too): the
    // highest latency at which some setting still wins.
    let most = plan
        .most_forgiving
        .and_then(|i| plan.settings.get(i))
        .and_then(|s| match s.break_even {
            BreakEven::At { mean_us, .. } => Some((mean_us, s.label())),
            _ => None,
        });
    if plan
        .settings
        .iter()
        .any(|s| s.break_even == BreakEven::AlwaysWins)
    {
        outln!("speculation wins at any all-reduce latency with some setting");
    } else if let Some((us, label)) = most {
        let verb = if b.speedup < 1.0 {
            "loses here; it would win"
        } else {
            "wins here, and keeps winning"
        };
        outln!(
            "speculation {verb} while the cycle's all-reduces take less than {us:.1} us each (with {}){}",
            label,
            if shared { "; plain decoding's all-reduces are scaled with them" } else { "" }
        );
    } else {
        outln!("speculation loses even with free all-reduces");
    }
    for n in &plan.notes {
        outln!("note: {n}");
    }
}

pub(super) fn list(a: CatalogArg) -> Result<()> {
    let cat = load_catalog(&a)?;
    outln!("models:");
    for m in &cat.models {
        let p = tpcomm_plan::arch::model_params(m)?;
        outln!(
            "  {:<20} {} layers, hidden {}, {:.1}B params ({:.1}B active)",
            m.name,
            m.layers,
            m.hidden,
            p.total()? as f64 / 1e9,
            p.active()? as f64 / 1e9
        );
    }
    outln!("gpus:");
    for g in &cat.gpus {
        outln!(
            "  {:<24} {}, {:.0} GB/s, {:.0} bf16 TFLOP/s, {}",
            g.name,
            g.memory,
            g.bandwidth_bytes_per_s / 1e9,
            g.bf16_flops_per_s / 1e12,
            efficiency_note(g)
        );
    }
    outln!("machines:");
    for m in &cat.machines {
        outln!("  {:<20} {} x {}, {}", m.name, m.count, m.gpu, m.link);
        for t in &m.tables {
            outln!(
                "      table {}",
                t.name.rsplit('/').next().unwrap_or(&t.name)
            );
        }
    }
    outln!("drafts:");
    for d in &cat.drafts {
        outln!(
            "  {:<22} for {}, {} acceptance rates",
            d.name,
            d.target,
            d.acceptance.len()
        );
    }
    Ok(())
}

/// What `plan list` says about a GPU's efficiencies: measured, else the
/// published figures and the per-layer cost measured on another GPU of its
/// class (which replaces a published per-kernel cost), else that it has
/// neither.
fn efficiency_note(g: &tpcomm_plan::catalog::Gpu) -> String {
    if let Some(m) = &g.measured {
        return format!(
            "measured {:.0} GB/s and {:.1} us per layer",
            m.bandwidth_bytes_per_s / 1e9,
            m.layer_us
        );
    }
    let published = g.published.as_ref().map(|p| {
        let mut parts = Vec::new();
        if let Some(b) = &p.bandwidth_bytes_per_s {
            parts.push(format!("{:.0} GB/s", b.value / 1e9));
        }
        if let Some(k) = &p.kernel_us {
            parts.push(format!("{:.2} us per kernel", k.value));
        }
        parts
    });
    let class = g.class_layer.as_ref().map(|c| {
        format!(
            "{:.1} us per layer measured on {} (class {})",
            c.layer_us, c.measured_on, c.class
        )
    });
    match (published, class) {
        (Some(parts), Some(c)) if !parts.is_empty() => {
            format!("published {}; {c}", parts.join(" and "))
        }
        (_, Some(c)) => c,
        (Some(parts), None) if !parts.is_empty() => {
            format!("published {}", parts.join(" and "))
        }
        _ => "no measured or published efficiencies".into(),
    }
}
