//! The speculative-decoding planner. A chain cycle is `steps` draft forwards
//! of one token each (top-1) followed by one target forward verifying
//! `steps + 1` tokens; its tokens per cycle come from the draft's
//! per-position acceptance rates. A tree cycle (SGLang's EAGLE trees:
//! `steps`, `topk`, `draft_tokens`) is one draft forward of one token, then
//! `steps - 1` of `topk` tokens each, then one target forward verifying
//! `draft_tokens` tokens; its tokens per cycle are a published (or given)
//! acceptance length for exactly that shape, never extrapolated. Under tensor parallelism
//! (TP > 1) every forward ends each attention and MLP block with an
//! all-reduce, plus one after the vocabulary-parallel embedding: 2 x layers
//! plus 1 per forward, each of hidden x tokens x 2 bytes (bf16
//! activations); at TP 1 there are none.
//!
//! Compute time is a roofline: bytes read over the GPU's memory bandwidth
//! (or FLOPs over its peak, whichever is longer), plus a fixed cost per
//! forward. With a `[gpu.measured]` block in the catalog both come from
//! measurements (a streaming copy's bandwidth, a measured per-layer cost).
//! A GPU without one takes the per-layer cost measured on another GPU of its
//! chip class, where the catalog has one (never the bandwidth), and says so.
//! Otherwise a `[gpu.published]` block supplies what it has: a published
//! streaming bandwidth, and a published per-kernel cost times the kernels a
//! forward launches ([`crate::kernels`]). What is still missing falls back
//! to the datasheet bandwidth and no fixed cost, which overestimates decode
//! speed; the plan says which figure it used.

use crate::arch::{
    draft_arch, draft_forward_cost, forward_cost, DraftArch, ForwardCost, KvType, QuantScope,
    WeightType,
};
use crate::catalog::{Draft, DraftShape, Gpu, Model, Tree};
use crate::ck::ck;
use crate::error::{PlanError, Result};
use crate::kernels::{draft_kernels, model_kernels};
use crate::latency::LatencySource;
use serde::Serialize;
use tpcomm::ByteSize;

/// Activations travel in bf16.
pub const ACT_BYTES: u64 = 2;

pub use crate::latency::MAX_LATENCY_US;

/// The overhead added to the roofline (launches, synchronisation, kernels
/// below peak): from the catalog (the GPU's measured per-layer figure, else
/// one measured on another GPU of its chip class, else its published
/// per-kernel cost times the kernels of a forward, else none),
/// given per layer, or fitted per layer to a measured plain-decoding rate.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Overhead {
    Catalog,
    PerLayerUs { us: f64 },
    CalibrateTokS { tok_s: f64 },
}

/// Which cycle a setting is: a chain of `steps`, or the tree at an index of
/// the planner's trees (the draft's catalog trees, then the given ones).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Which {
    Chain { steps: u64 },
    Tree { index: usize },
}

#[derive(Clone, Debug)]
pub struct SpecInput<'a> {
    pub model: &'a Model,
    pub draft: &'a Draft,
    pub gpu: &'a Gpu,
    pub tp: u64,
    pub weights: WeightType,
    pub scope: QuantScope,
    pub draft_weights: WeightType,
    pub kv: KvType,
    /// Tokens already in the KV cache (attention reads them every forward).
    pub context: u64,
    /// Latency of the speculative cycle's all-reduces.
    pub spec_latency: LatencySource,
    /// Latency of plain decoding's all-reduces, when it differs (e.g. plain
    /// decoding runs in CUDA graphs and the speculative path does not).
    /// None: the same source as the cycle, scaled with it.
    pub plain_latency: Option<LatencySource>,
    pub overhead: Overhead,
    /// Largest number of draft steps to try (at most the draft's rates).
    pub max_steps: u64,
    /// Tree shapes to plan besides the draft's own catalog trees (e.g. given
    /// on the command line), each with its acceptance length.
    pub trees: Vec<Tree>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Plain {
    pub compute_us: f64,
    pub comm_us: f64,
    pub allreduces: u64,
    pub message: ByteSize,
    pub tok_s: f64,
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum BreakEven {
    /// Speculation wins below this latency. `scale` multiplies the cycle's
    /// latency source; `mean_us` is the mean latency of one of the cycle's
    /// all-reduces at that scale.
    At { scale: f64, mean_us: f64 },
    /// Speculation wins whatever the latency (it does fewer all-reduces per
    /// token than plain decoding, and plain decoding scales with it).
    AlwaysWins,
    /// Speculation loses even with free communication.
    NeverWins,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Setting {
    pub which: Which,
    pub steps: u64,
    /// Candidates per draft step (1: a chain).
    pub topk: u64,
    pub verify_tokens: u64,
    /// Expected tokens produced per cycle (accepted drafts + the bonus token).
    pub tokens_per_cycle: f64,
    pub draft_compute_us: f64,
    pub draft_comm_us: f64,
    pub verify_compute_us: f64,
    pub verify_comm_us: f64,
    pub cycle_us: f64,
    pub allreduces: u64,
    pub tok_s: f64,
    pub speedup: f64,
    pub break_even: BreakEven,
}

impl Setting {
    /// "1 draft step", "4 draft steps", or "tree: 5 steps, topk 4, 8 tokens".
    pub fn label(&self) -> String {
        match self.which {
            Which::Chain { steps } => {
                format!("{steps} draft step{}", if steps == 1 { "" } else { "s" })
            }
            Which::Tree { .. } => format!(
                "tree: {} step{}, topk {}, {} tokens",
                self.steps,
                if self.steps == 1 { "" } else { "s" },
                self.topk,
                self.verify_tokens
            ),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SpecPlan {
    pub plain: Plain,
    /// The target forward's fixed cost over its layers (with per-kernel
    /// costs, the kernels outside the layers are spread over them).
    pub overhead_per_layer_us: f64,
    pub overhead_from: String,
    pub settings: Vec<Setting>,
    /// Index into `settings` of the fastest.
    pub best: usize,
    /// Index into `settings` of the setting that keeps winning up to the
    /// highest all-reduce latency (the one the text and the plot quote).
    pub most_forgiving: Option<usize>,
    /// Where the roofline's bandwidth comes from.
    pub bandwidth_from: String,
    /// Things the user should know (e.g. fewer steps tried than asked).
    pub notes: Vec<String>,
    pub spec_latency: String,
    pub plain_latency: String,
}

/// Expected tokens per cycle from per-position acceptance rates: draft token
/// k survives if it and every token before it is accepted, and the verify
/// pass always adds one token of its own.
pub fn expected_tokens(acceptance: &[f64], steps: usize) -> f64 {
    let mut survive = 1.0;
    let mut sum = 1.0;
    for a in acceptance.iter().take(steps) {
        survive *= a;
        sum += survive;
    }
    sum
}

/// The bandwidth the roofline uses: the measured one when the catalog has
/// it, else a published one, else the datasheet's.
pub fn roofline_bandwidth(gpu: &Gpu) -> (f64, String) {
    let published = gpu
        .published
        .as_ref()
        .and_then(|p| p.bandwidth_bytes_per_s.as_ref());
    match (&gpu.measured, published) {
        (Some(m), _) => (
            m.bandwidth_bytes_per_s,
            format!(
                "measured {:.0} GB/s ({})",
                m.bandwidth_bytes_per_s / 1e9,
                m.source
            ),
        ),
        (None, Some(b)) => (
            b.value,
            format!("published {:.0} GB/s ({})", b.value / 1e9, b.source),
        ),
        (None, None) => (
            gpu.bandwidth_bytes_per_s,
            format!(
                "datasheet {:.0} GB/s (uncalibrated: no measured or published bandwidth for {}; real decoding is slower)",
                gpu.bandwidth_bytes_per_s / 1e9,
                gpu.name
            ),
        ),
    }
}

fn roofline_us(c: ForwardCost, gpu: &Gpu) -> f64 {
    let bw = roofline_bandwidth(gpu).0;
    (c.bytes_read / bw).max(c.flops / gpu.bf16_flops_per_s) * 1e6
}

/// All-reduces of one forward of a model with `layers` layers at `tp`.
pub fn allreduces_per_forward(layers: u64, tp: u64) -> Result<u64> {
    if tp <= 1 {
        return Ok(0);
    }
    (ck(layers) * 2 + 1u64).get("the all-reduce count")
}

/// Everything about the configuration that does not depend on latency.
pub struct Planner<'a> {
    inp: SpecInput<'a>,
    draft: DraftArch,
    target_allreduces: u64,
    draft_allreduces: u64,
    /// Fixed time of one target forward beyond its roofline (per-layer
    /// overhead x layers, or kernels x per-kernel cost).
    target_fixed_us: f64,
    /// The same for one draft forward.
    draft_fixed_us: f64,
    plain_compute_us: f64,
    overhead_from: String,
}

impl<'a> Planner<'a> {
    pub fn new(inp: SpecInput<'a>) -> Result<Self> {
        let m = inp.model;
        if inp.tp == 0 {
            return Err(PlanError::invalid(
                "tensor-parallel size",
                "must be at least 1",
            ));
        }
        if inp.max_steps == 0 {
            return Err(PlanError::invalid("--max-steps", "must be at least 1"));
        }
        for t in inp.draft.trees.iter().chain(&inp.trees) {
            t.check().map_err(|e| PlanError::invalid("tree", e))?;
        }
        for (what, src) in [
            ("cycle all-reduce latency", Some(&inp.spec_latency)),
            ("plain all-reduce latency", inp.plain_latency.as_ref()),
        ] {
            if let Some(LatencySource::Flat { us }) = src {
                if !(us.is_finite() && (0.0..=MAX_LATENCY_US).contains(us)) {
                    return Err(PlanError::invalid(
                        what,
                        format!("{us} us (give 0 to {MAX_LATENCY_US} us)"),
                    ));
                }
            }
        }
        if inp.context > 1 << 40 {
            return Err(PlanError::invalid(
                "--context",
                format!("{} tokens is beyond any model's context", inp.context),
            ));
        }
        let draft = draft_arch(inp.draft, m, inp.tp, inp.kv)?;
        let target_allreduces = allreduces_per_forward(m.layers, inp.tp)?;
        let draft_allreduces = allreduces_per_forward(draft.layers, inp.tp)?;
        // Messages of the largest verify are computed once here, so that
        // no later step can overflow.
        let most_tokens = inp
            .draft
            .trees
            .iter()
            .chain(inp.trees.iter())
            .map(|t| t.draft_tokens.max(t.topk))
            .fold(
                inp.max_steps.min(inp.draft.acceptance.len() as u64) + 1,
                u64::max,
            );
        (ck(m.hidden) * most_tokens * ACT_BYTES).get("the verify pass's all-reduce message")?;
        let plain_roof = roofline_us(
            forward_cost(m, inp.tp, inp.weights, inp.scope, inp.kv, 1, inp.context)?,
            inp.gpu,
        );
        let mut p = Planner {
            draft,
            target_allreduces,
            draft_allreduces,
            target_fixed_us: 0.0,
            draft_fixed_us: 0.0,
            plain_compute_us: plain_roof,
            overhead_from: String::new(),
            inp,
        };
        // A cost per layer, the same for target and draft layers.
        let per_layer = |p: &mut Planner, us: f64| {
            p.target_fixed_us = m.layers as f64 * us;
            p.draft_fixed_us = p.draft.layers as f64 * us;
        };
        let published_kernel = p
            .inp
            .gpu
            .published
            .as_ref()
            .and_then(|x| x.kernel_us.clone());
        match p.inp.overhead {
            Overhead::Catalog => match (
                &p.inp.gpu.measured,
                &p.inp.gpu.class_layer,
                published_kernel,
            ) {
                (Some(e), _, _) => {
                    per_layer(&mut p, e.layer_us);
                    // Catalog sources say "measured: ..." themselves.
                    p.overhead_from = if e.source.starts_with("measured") {
                        e.source.clone()
                    } else {
                        format!("measured ({})", e.source)
                    };
                }
                (None, Some(c), published) => {
                    per_layer(&mut p, c.layer_us);
                    let gpu = &p.inp.gpu.name;
                    let instead = match published {
                        Some(k) => format!(
                            "; it replaces the published {} us per kernel, a launch cost alone",
                            k.value
                        ),
                        None => String::new(),
                    };
                    p.overhead_from = format!(
                        "measured on {}, not on {gpu}: applied to {gpu} as the same chip class {}{instead} ({})",
                        c.measured_on, c.class, c.source
                    );
                }
                (None, None, Some(k)) => {
                    let target = model_kernels(m)?;
                    let draft = draft_kernels(p.inp.draft, m)?;
                    p.target_fixed_us = target as f64 * k.value;
                    p.draft_fixed_us = draft as f64 * k.value;
                    p.overhead_from = format!(
                        "published: {target} kernels per target forward and {draft} per draft forward (counted from the architecture) x {} us per kernel ({})",
                        k.value, k.source
                    );
                }
                (None, None, None) => {
                    p.overhead_from = format!(
                        "none: no measured or published per-kernel cost for {} (uncalibrated; give --overhead-us or --calibrate-tok-s)",
                        p.inp.gpu.name
                    );
                }
            },
            Overhead::PerLayerUs { us } => {
                // Bounded like a latency, so layers x overhead stays finite
                // (1e308 once printed inf and NaN).
                if !(us.is_finite() && (0.0..=MAX_LATENCY_US).contains(&us)) {
                    return Err(PlanError::invalid(
                        "--overhead-us",
                        format!("{us} us per layer (give 0 to {MAX_LATENCY_US} us)"),
                    ));
                }
                per_layer(&mut p, us);
                p.overhead_from = "given".into();
            }
            Overhead::CalibrateTokS { tok_s } => {
                // At most MAX_LATENCY_US per token, so the fitted overhead
                // is bounded as a given one is.
                let slowest = 1e6 / MAX_LATENCY_US;
                if !(tok_s.is_finite() && tok_s >= slowest) {
                    return Err(PlanError::invalid(
                        "--calibrate-tok-s",
                        format!("{tok_s} tok/s (give at least {slowest} tok/s, a measured rate)"),
                    ));
                }
                let measured_us = 1e6 / tok_s;
                let comm = p.plain_comm_us(1.0);
                let spare = measured_us - plain_roof - comm;
                if spare < 0.0 {
                    return Err(PlanError::invalid(
                        "--calibrate-tok-s",
                        format!(
                            "{tok_s} tok/s is {measured_us:.0} us per token, but the roofline alone is {plain_roof:.0} us and plain decoding's all-reduces {comm:.0} us; the plain all-reduce latency is too high for that rate (give the plain path's own latency with --plain-allreduce-us or --plain-table)"
                        ),
                    ));
                }
                per_layer(&mut p, spare / m.layers as f64);
                p.overhead_from = format!("fitted to a measured {tok_s} tok/s plain decoding");
            }
        }
        p.plain_compute_us = plain_roof + p.target_fixed_us;
        Ok(p)
    }

    fn target_message(&self, tokens: u64) -> ByteSize {
        // Checked in `new` for every token count the plan uses; saturates
        // for a caller that asks beyond it.
        ByteSize::b(
            self.inp
                .model
                .hidden
                .saturating_mul(tokens)
                .saturating_mul(ACT_BYTES),
        )
    }

    /// Plain decoding's all-reduce time per token; `scale` applies only when
    /// plain decoding shares the cycle's latency source.
    fn plain_comm_us(&self, scale: f64) -> f64 {
        let msg = self.target_message(1);
        let per = match &self.inp.plain_latency {
            Some(src) => src.latency_us(msg),
            None => scale * self.inp.spec_latency.latency_us(msg),
        };
        self.target_allreduces as f64 * per
    }

    pub fn plain(&self, scale: f64) -> Plain {
        let comm_us = self.plain_comm_us(scale);
        Plain {
            compute_us: self.plain_compute_us,
            comm_us,
            allreduces: self.target_allreduces,
            message: self.target_message(1),
            tok_s: 1e6 / (self.plain_compute_us + comm_us),
        }
    }

    /// Every tree this planner costs: the draft's catalog trees, then the given ones.
    pub fn trees(&self) -> impl Iterator<Item = &Tree> {
        self.inp.draft.trees.iter().chain(self.inp.trees.iter())
    }

    /// One chain cycle of `steps` draft steps with the cycle's latencies
    /// multiplied by `scale`.
    pub fn setting(&self, steps: u64, scale: f64) -> Result<Setting> {
        self.setting_of(Which::Chain { steps }, scale)
    }

    /// One cycle (chain or tree) with the cycle's latencies multiplied by `scale`.
    pub fn setting_of(&self, which: Which, scale: f64) -> Result<Setting> {
        let i = &self.inp;
        let (steps, topk, verify_tokens, tokens) = match which {
            Which::Chain { steps } => {
                if steps == 0 || steps > i.draft.acceptance.len() as u64 {
                    return Err(PlanError::invalid(
                        "draft steps",
                        format!(
                            "{steps}: the draft {} has acceptance rates for 1 to {} steps",
                            i.draft.name,
                            i.draft.acceptance.len()
                        ),
                    ));
                }
                (
                    steps,
                    1,
                    steps + 1,
                    expected_tokens(&i.draft.acceptance, steps as usize),
                )
            }
            Which::Tree { index } => {
                let t = self
                    .trees()
                    .nth(index)
                    .ok_or_else(|| PlanError::invalid("tree", format!("no tree number {index}")))?;
                (t.steps, t.topk, t.draft_tokens, t.accept_length)
            }
        };
        let draft_scope = match i.draft.shape {
            DraftShape::Mtp { .. } => i.scope,
            DraftShape::Eagle3 { .. } => QuantScope::Linear,
        };
        // One draft step over `n` tokens: its compute and its all-reduces.
        let step = |n: u64| -> Result<(f64, f64)> {
            let cost = draft_forward_cost(
                &self.draft,
                i.tp,
                i.draft_weights,
                draft_scope,
                n,
                i.context,
            )?;
            let compute = roofline_us(cost, i.gpu) + self.draft_fixed_us;
            let msg = ByteSize::b(
                self.draft
                    .hidden
                    .saturating_mul(n)
                    .saturating_mul(ACT_BYTES),
            );
            let comm = self.draft_allreduces as f64 * scale * i.spec_latency.latency_us(msg);
            Ok((compute, comm))
        };
        // The first step drafts from one token; a tree's later steps run
        // its `topk` candidates at once.
        let (c1, a1) = step(1)?;
        let (ck_, ak) = if topk == 1 { (c1, a1) } else { step(topk)? };
        let rest = (steps - 1) as f64;
        let (d_compute, d_comm) = (c1 + rest * ck_, a1 + rest * ak);
        let v_cost = forward_cost(
            i.model,
            i.tp,
            i.weights,
            i.scope,
            i.kv,
            verify_tokens,
            i.context,
        )?;
        let v_compute = roofline_us(v_cost, i.gpu) + self.target_fixed_us;
        let v_comm = self.target_allreduces as f64
            * scale
            * i.spec_latency
                .latency_us(self.target_message(verify_tokens));
        let cycle = d_compute + d_comm + v_compute + v_comm;
        let tok_s = tokens * 1e6 / cycle;
        Ok(Setting {
            which,
            steps,
            topk,
            verify_tokens,
            tokens_per_cycle: tokens,
            draft_compute_us: d_compute,
            draft_comm_us: d_comm,
            verify_compute_us: v_compute,
            verify_comm_us: v_comm,
            cycle_us: cycle,
            allreduces: steps
                .saturating_mul(self.draft_allreduces)
                .saturating_add(self.target_allreduces),
            tok_s,
            speedup: tok_s / self.plain(scale).tok_s,
            break_even: BreakEven::NeverWins,
        })
    }

    /// Mean latency of one of the cycle's all-reduces at `scale`.
    pub fn mean_latency_us(&self, steps: u64, scale: f64) -> Result<f64> {
        self.mean_latency_of(Which::Chain { steps }, scale)
    }

    /// Mean latency of one of the cycle's all-reduces at `scale`, any cycle.
    pub fn mean_latency_of(&self, which: Which, scale: f64) -> Result<f64> {
        let s = self.setting_of(which, 1.0)?;
        if s.allreduces == 0 {
            return Ok(0.0);
        }
        Ok(scale * (s.draft_comm_us + s.verify_comm_us) / s.allreduces as f64)
    }

    /// The latency scale at which speculation and plain decoding are equally fast.
    pub fn break_even(&self, steps: u64) -> Result<BreakEven> {
        self.break_even_of(Which::Chain { steps })
    }

    /// The break-even of any cycle.
    pub fn break_even_of(&self, which: Which) -> Result<BreakEven> {
        let gain =
            |s: f64| -> Result<f64> { Ok(self.setting_of(which, s)?.tok_s - self.plain(s).tok_s) };
        if gain(0.0)? <= 0.0 {
            return Ok(BreakEven::NeverWins);
        }
        let mut hi = 1.0;
        while gain(hi)? > 0.0 {
            hi *= 2.0;
            if hi > 1e9 {
                return Ok(BreakEven::AlwaysWins);
            }
        }
        let mut lo = 0.0;
        for _ in 0..200 {
            let mid = 0.5 * (lo + hi);
            if gain(mid)? > 0.0 {
                lo = mid;
            } else {
                hi = mid;
            }
            if hi - lo <= 1e-12 * hi {
                break;
            }
        }
        let scale = 0.5 * (lo + hi);
        Ok(BreakEven::At {
            scale,
            mean_us: self.mean_latency_of(which, scale)?,
        })
    }

    pub fn steps_range(&self) -> std::ops::RangeInclusive<u64> {
        1..=self
            .inp
            .max_steps
            .min(self.inp.draft.acceptance.len() as u64)
    }

    pub fn plan(&self) -> Result<SpecPlan> {
        let mut settings = Vec::new();
        let trees = self.trees().count();
        let whiches = self
            .steps_range()
            .map(|steps| Which::Chain { steps })
            .chain((0..trees).map(|index| Which::Tree { index }));
        for w in whiches {
            let mut s = self.setting_of(w, 1.0)?;
            s.break_even = self.break_even_of(w)?;
            settings.push(s);
        }
        let best = settings
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.tok_s.total_cmp(&b.1.tok_s))
            .map(|(i, _)| i)
            .unwrap_or(0);
        let most_forgiving = settings
            .iter()
            .enumerate()
            .filter_map(|(i, s)| match s.break_even {
                BreakEven::At { mean_us, .. } => Some((i, mean_us)),
                _ => None,
            })
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(i, _)| i);
        let mut notes = Vec::new();
        let rates = self.inp.draft.acceptance.len() as u64;
        if self.inp.max_steps > rates {
            notes.push(format!(
                "--max-steps {} asked for more steps than the {rates} acceptance rates of draft {}; tried 1 to {rates}",
                self.inp.max_steps, self.inp.draft.name
            ));
        }
        if self.inp.tp == 1 {
            notes.push("TP 1: no all-reduces; the latency source is not used".into());
        }
        Ok(SpecPlan {
            most_forgiving,
            bandwidth_from: roofline_bandwidth(self.inp.gpu).1,
            notes,
            plain: self.plain(1.0),
            overhead_per_layer_us: self.target_fixed_us / self.inp.model.layers as f64,
            overhead_from: self.overhead_from.clone(),
            settings,
            best,
            spec_latency: self.inp.spec_latency.describe(),
            plain_latency: match &self.inp.plain_latency {
                Some(s) => s.describe(),
                None => "same as the cycle".into(),
            },
        })
    }

    pub fn shares_latency(&self) -> bool {
        self.inp.plain_latency.is_none()
    }
}
