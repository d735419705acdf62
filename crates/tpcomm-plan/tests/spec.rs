//! The speculative-decoding planner: hand-computed cycles, break-even
//! points, monotonic behaviour, and a PCIe scenario (an 8-GPU box without NVLink).

use proptest::prelude::*;
use tpcomm::ByteSize;
use tpcomm_plan::arch::{KvType, QuantScope, WeightType};
use tpcomm_plan::catalog::Tree;
use tpcomm_plan::catalog::{
    Attention, Catalog, ClassLayerCost, Draft, DraftShape, Gpu, Model, PublishedEfficiency, Sourced,
};
use tpcomm_plan::latency::LatencySource;
use tpcomm_plan::latency::LatencyTable;
use tpcomm_plan::spec::{expected_tokens, BreakEven, Overhead, Planner, SpecInput, Which};

/// A model small enough to cost by hand: 1 layer, hidden 64, two 32-wide
/// heads, MLP 512, vocabulary 1000. Weights one of two TP ranks reads per
/// forward (bf16, no embedding): LM head 64,000 / 2 + norms 192 (whole) +
/// attention 16,384 / 2 + MLP 98,304 / 2 = 89,536 parameters = 179,072 bytes.
fn tiny_model(layers: u64) -> Model {
    Model {
        name: "tiny".into(),
        source: "test".into(),
        layers,
        hidden: 64,
        vocab: 1000,
        intermediate: 512,
        tie_embeddings: false,
        attention: Attention::Gqa {
            heads: 2,
            kv_heads: 2,
            head_dim: 32,
            qkv_bias: false,
            qk_norm: false,
        },
        moe: None,
        mtp_layers: 0,
        published: None,
    }
}

/// One EAGLE-3 layer, on one of two TP ranks: q/k/v from 2 x 64 inputs
/// (24,576) + o (4,096) split in two, fc 3 x 64 x 64 (12,288, whole), MLP
/// (24,576) and 100-token head (6,400) split in two, norms (256, whole) =
/// 42,368 parameters = 84,736 bytes.
fn tiny_draft(acceptance: Vec<f64>) -> Draft {
    Draft {
        name: "tiny-eagle".into(),
        target: "tiny".into(),
        shape: DraftShape::Eagle3 {
            layers: 1,
            hidden: 64,
            heads: 2,
            kv_heads: 2,
            head_dim: 32,
            intermediate: 128,
            draft_vocab: 100,
        },
        source: "test".into(),
        acceptance,
        acceptance_source: "test".into(),
        trees: Vec::new(),
    }
}

/// 1 GB/s and (practically) unlimited FLOPs: every microsecond is 1000 bytes.
fn slow_gpu() -> Gpu {
    Gpu {
        name: "slow".into(),
        memory: ByteSize::gib(1),
        memory_source: "test".into(),
        bandwidth_bytes_per_s: 1e9,
        bf16_flops_per_s: 1e30,
        source: "test".into(),
        measured: None,
        published: None,
        class: None,
        class_layer: None,
    }
}

fn tiny_input<'a>(
    model: &'a Model,
    draft: &'a Draft,
    gpu: &'a Gpu,
    spec_us: f64,
    plain_us: Option<f64>,
    overhead: Overhead,
) -> SpecInput<'a> {
    SpecInput {
        model,
        draft,
        gpu,
        tp: 2,
        weights: WeightType::Bf16,
        scope: QuantScope::Linear,
        draft_weights: WeightType::Bf16,
        kv: KvType::Bf16,
        context: 0,
        spec_latency: LatencySource::Flat { us: spec_us },
        plain_latency: plain_us.map(|us| LatencySource::Flat { us }),
        overhead,
        max_steps: 8,
        trees: Vec::new(),
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs().max(1.0)
}

#[test]
fn expected_tokens_by_hand() {
    assert_eq!(expected_tokens(&[0.8, 0.5], 0), 1.0);
    assert!(close(expected_tokens(&[0.8, 0.5], 1), 1.8));
    assert!(close(expected_tokens(&[0.8, 0.5], 2), 2.2));
    assert!(close(expected_tokens(&[1.0; 4], 4), 5.0));
}

#[test]
fn cycle_by_hand() {
    let (m, d, g) = (tiny_model(1), tiny_draft(vec![0.8, 0.5]), slow_gpu());
    let p = Planner::new(tiny_input(
        &m,
        &d,
        &g,
        10.0,
        None,
        Overhead::PerLayerUs { us: 0.0 },
    ))
    .unwrap();
    let plain = p.plain(1.0);
    assert_eq!(plain.allreduces, 3);
    assert_eq!(plain.message, ByteSize::b(128));
    assert!(close(plain.compute_us, 179.072));
    assert!(close(plain.comm_us, 30.0));
    assert!(close(plain.tok_s, 1e6 / 209.072));

    let s = p.setting(1, 1.0).unwrap();
    assert_eq!((s.verify_tokens, s.allreduces), (2, 6));
    assert!(close(s.draft_compute_us, 84.736));
    assert!(close(s.draft_comm_us, 30.0));
    assert!(close(s.verify_compute_us, 179.072));
    assert!(close(s.verify_comm_us, 30.0));
    assert!(close(s.cycle_us, 323.808));
    assert!(close(s.tok_s, 1.8e6 / 323.808));

    let s2 = p.setting(2, 1.0).unwrap();
    assert!(close(s2.cycle_us, 2.0 * 114.736 + 209.072));
    assert!(close(s2.tok_s, 2.2e6 / s2.cycle_us));
    assert_eq!(s2.allreduces, 9);
}

/// Break-even with plain decoding scaled alongside:
/// 1.8 / (263.808 + 6L) = 1 / (179.072 + 3L)  =>  L = 58.5216 / 0.6 = 97.536 us.
#[test]
fn break_even_by_hand() {
    let (m, d, g) = (tiny_model(1), tiny_draft(vec![0.8, 0.5]), slow_gpu());
    let p = Planner::new(tiny_input(
        &m,
        &d,
        &g,
        10.0,
        None,
        Overhead::PerLayerUs { us: 0.0 },
    ))
    .unwrap();
    match p.break_even(1).unwrap() {
        BreakEven::At { scale, mean_us } => {
            let want = (1.8 * 179.072 - 263.808) / 0.6;
            assert!((mean_us - want).abs() < 1e-6, "{mean_us} vs {want}");
            assert!((scale - want / 10.0).abs() < 1e-7);
            let s = p.setting(1, scale).unwrap();
            assert!((s.tok_s - p.plain(scale).tok_s).abs() < 1e-6 * s.tok_s);
        }
        other => panic!("{other:?}"),
    }
    // Plain decoding on its own free path: 1.8 / (263.808 + 6L) = 1 / 179.072.
    let p = Planner::new(tiny_input(
        &m,
        &d,
        &g,
        10.0,
        Some(0.0),
        Overhead::PerLayerUs { us: 0.0 },
    ))
    .unwrap();
    match p.break_even(1).unwrap() {
        BreakEven::At { mean_us, .. } => {
            let want = (1.8 * 179.072 - 263.808) / 6.0;
            assert!((mean_us - want).abs() < 1e-6, "{mean_us} vs {want}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn never_and_always_wins() {
    let (m, g) = (tiny_model(1), slow_gpu());
    let d = tiny_draft(vec![0.01]);
    let p = Planner::new(tiny_input(
        &m,
        &d,
        &g,
        10.0,
        None,
        Overhead::PerLayerUs { us: 0.0 },
    ))
    .unwrap();
    assert_eq!(p.break_even(1).unwrap(), BreakEven::NeverWins);
    // Two target layers (5 all-reduces), always-accepted one-layer draft: 8
    // all-reduces buy 2 tokens, so at any latency speculation does fewer per token.
    let m2 = tiny_model(2);
    let d = tiny_draft(vec![1.0]);
    let p = Planner::new(tiny_input(
        &m2,
        &d,
        &g,
        10.0,
        None,
        Overhead::PerLayerUs { us: 0.0 },
    ))
    .unwrap();
    assert_eq!(p.break_even(1).unwrap(), BreakEven::AlwaysWins);
}

#[test]
fn calibration_fits_the_measured_rate() {
    let (m, d, g) = (tiny_model(1), tiny_draft(vec![0.8]), slow_gpu());
    let p = Planner::new(tiny_input(
        &m,
        &d,
        &g,
        10.0,
        None,
        Overhead::CalibrateTokS { tok_s: 2000.0 },
    ))
    .unwrap();
    let plan = p.plan().unwrap();
    assert!(close(plan.overhead_per_layer_us, 500.0 - 179.072 - 30.0));
    assert!(close(plan.plain.tok_s, 2000.0));
    // The overhead applies to the draft's layer too.
    assert!(close(
        plan.settings[0].draft_compute_us,
        84.736 + plan.overhead_per_layer_us
    ));
    // A rate faster than the all-reduces allow cannot be fitted.
    let e = Planner::new(tiny_input(
        &m,
        &d,
        &g,
        10.0,
        None,
        Overhead::CalibrateTokS { tok_s: 1e5 },
    ))
    .err()
    .expect("must fail");
    assert!(e.to_string().contains("too high"), "{e}");
}

#[test]
fn bad_inputs_are_rejected() {
    let (m, d, g) = (tiny_model(1), tiny_draft(vec![0.8]), slow_gpu());
    let mut i = tiny_input(&m, &d, &g, 10.0, None, Overhead::PerLayerUs { us: 0.0 });
    i.tp = 0;
    assert!(Planner::new(i.clone()).is_err());
    i.tp = 2;
    i.max_steps = 0;
    assert!(Planner::new(i.clone()).is_err());
    i.max_steps = 8;
    i.overhead = Overhead::PerLayerUs { us: -1.0 };
    assert!(Planner::new(i.clone()).is_err());
    i.overhead = Overhead::CalibrateTokS { tok_s: 0.0 };
    assert!(Planner::new(i.clone()).is_err());
    i.overhead = Overhead::PerLayerUs { us: 0.0 };
    // 1e308 us per all-reduce once printed NaN; infinite and negative
    // latencies too must be refused, never planned.
    for us in [1e308, f64::INFINITY, f64::NAN, -1.0] {
        i.spec_latency = LatencySource::Flat { us };
        assert!(Planner::new(i.clone()).is_err(), "{us}");
    }
    i.spec_latency = LatencySource::Flat { us: 10.0 };
    i.plain_latency = Some(LatencySource::Flat { us: 1e308 });
    assert!(Planner::new(i.clone()).is_err());
    i.plain_latency = None;
    i.context = u64::MAX;
    assert!(Planner::new(i.clone()).is_err());
    i.context = 0;
    let p = Planner::new(i).unwrap();
    // Steps beyond the draft's rates are an error, not a silent cap.
    assert!(p.setting(2, 1.0).is_err());
    assert!(p.setting(u64::MAX, 1.0).is_err());
    assert!(p.setting(0, 1.0).is_err());
}

#[test]
fn tp_1_has_no_all_reduces() {
    let (m, d, g) = (tiny_model(1), tiny_draft(vec![0.8, 0.5]), slow_gpu());
    let mut i = tiny_input(&m, &d, &g, 10.0, None, Overhead::PerLayerUs { us: 0.0 });
    i.tp = 1;
    let p = Planner::new(i).unwrap();
    let plain = p.plain(1.0);
    assert_eq!((plain.allreduces, plain.comm_us), (0, 0.0));
    let s = p.setting(2, 1.0).unwrap();
    assert_eq!(
        (s.allreduces, s.draft_comm_us, s.verify_comm_us),
        (0, 0.0, 0.0)
    );
    // Latency cannot change anything, so speculation wins or loses at any.
    assert_ne!(p.break_even(1).unwrap(), BreakEven::NeverWins);
    let plan = p.plan().unwrap();
    assert!(
        plan.notes.iter().any(|n| n.contains("TP 1")),
        "{:?}",
        plan.notes
    );
}

#[test]
fn measured_efficiencies_replace_the_datasheet() {
    let (m, d) = (tiny_model(1), tiny_draft(vec![0.8]));
    let mut g = slow_gpu();
    g.measured = Some(tpcomm_plan::catalog::Efficiency {
        bandwidth_bytes_per_s: 0.5e9,
        layer_us: 7.0,
        layer_us_for_class: false,
        source: "test".into(),
    });
    let p = Planner::new(tiny_input(&m, &d, &g, 10.0, None, Overhead::Catalog)).unwrap();
    let plan = p.plan().unwrap();
    // Half the bandwidth doubles the streaming time; 7 us per layer on top.
    assert!(close(plan.plain.compute_us, 2.0 * 179.072 + 7.0));
    assert!(close(plan.overhead_per_layer_us, 7.0));
    assert!(plan.bandwidth_from.starts_with("measured"));
    // Without a measured block: the datasheet and no per-layer cost, said so.
    let g = slow_gpu();
    let p = Planner::new(tiny_input(&m, &d, &g, 10.0, None, Overhead::Catalog)).unwrap();
    let plan = p.plan().unwrap();
    assert!(close(plan.plain.compute_us, 179.072));
    assert!(plan.bandwidth_from.contains("uncalibrated"));
    assert!(plan.overhead_from.contains("uncalibrated"));
}

#[test]
fn steps_beyond_the_rates_are_reported_not_silently_capped() {
    let (m, d, g) = (tiny_model(1), tiny_draft(vec![0.8, 0.5]), slow_gpu());
    let mut i = tiny_input(&m, &d, &g, 10.0, None, Overhead::PerLayerUs { us: 0.0 });
    i.max_steps = 10;
    let plan = Planner::new(i).unwrap().plan().unwrap();
    assert_eq!(plan.settings.len(), 2);
    assert!(
        plan.notes.iter().any(|n| n.contains("--max-steps 10")),
        "{:?}",
        plan.notes
    );
}

fn kimi_planner<'a>(
    c: &'a Catalog,
    spec: LatencySource,
    plain: Option<LatencySource>,
) -> Planner<'a> {
    let machine = c.machine("pcie8-rtxpro6000").unwrap();
    Planner::new(SpecInput {
        model: c.model("kimi-k2.5").unwrap(),
        draft: c.draft("kimi-k2.5-eagle3").unwrap(),
        gpu: c.gpu(&machine.gpu).unwrap(),
        tp: machine.count,
        weights: WeightType::Int4,
        scope: QuantScope::Experts,
        draft_weights: WeightType::Bf16,
        kv: KvType::Bf16,
        context: 4096,
        spec_latency: spec,
        plain_latency: plain,
        overhead: Overhead::CalibrateTokS { tok_s: 89.5 },
        max_steps: 8,
        trees: Vec::new(),
    })
    .unwrap()
}

fn machine_table(c: &Catalog, name: &str) -> LatencySource {
    let m = c.machine("pcie8-rtxpro6000").unwrap();
    LatencySource::Table {
        table: m
            .tables
            .iter()
            .find(|t| t.name.ends_with(name))
            .unwrap()
            .clone(),
        interp: Default::default(),
    }
}

/// An 8-GPU PCIe box, Kimi K2.5 INT4 TP8, EAGLE-3, plain decoding at
/// 89.5 tok/s, the speculative cycle's all-reduces at ~200 us each. The
/// planner must find speculation slower there, and a break-even latency
/// below 200 us under which it wins.
#[test]
fn pcie_scenario_spec_loses_at_200us_and_break_even_is_below() {
    let c = Catalog::builtin().unwrap();
    let p = kimi_planner(
        &c,
        machine_table(&c, "observed-spec"),
        Some(machine_table(&c, "nccl-typical")),
    );
    let plan = p.plan().unwrap();
    assert!(close(plan.plain.tok_s, 89.5));
    assert_eq!(plan.plain.allreduces, 123);
    assert_eq!(plan.plain.message, ByteSize::kib(14));
    for s in &plan.settings {
        assert!(s.tok_s < 89.5, "{} steps: {} tok/s", s.steps, s.tok_s);
        // 123 verify all-reduces + 3 per one-layer draft step.
        assert_eq!(s.allreduces, 123 + 3 * s.steps);
        assert!(close(s.verify_comm_us, 123.0 * 200.0));
    }
    let best = &plan.settings[plan.best];
    assert!(plan.settings.iter().all(|s| s.tok_s <= best.tok_s));
    match best.break_even {
        BreakEven::At { scale, mean_us } => {
            assert!(mean_us > 0.0 && mean_us < 200.0, "{mean_us}");
            assert!(close(mean_us, 200.0 * scale));
            let below = p.setting(best.steps, scale * 0.99).unwrap().tok_s;
            let above = p.setting(best.steps, scale * 1.01).unwrap().tok_s;
            assert!(below > 89.5 && above < 89.5, "{below} {above}");
        }
        other => panic!("{other:?}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// More all-reduce latency never raises speculative tok/s, for any
    /// number of steps, whether latency comes flat or from a table.
    #[test]
    fn more_latency_never_raises_spec_tok_s(a in 0.0f64..2000.0, b in 0.0f64..2000.0, steps in 1u64..=7) {
        let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
        let c = Catalog::builtin().unwrap();
        let p = kimi_planner(&c, LatencySource::Flat { us: 1.0 }, Some(LatencySource::Flat { us: 0.0 }));
        let t_lo = p.setting(steps, lo).unwrap().tok_s;
        let t_hi = p.setting(steps, hi).unwrap().tok_s;
        prop_assert!(t_hi <= t_lo, "{} us: {}, {} us: {}", hi, t_hi, lo, t_lo);
        let m = c.machine("h200x2-nvlink").unwrap();
        let table = LatencySource::Table { table: m.tables[0].clone(), interp: Default::default() };
        let p = kimi_planner(&c, table, Some(LatencySource::Flat { us: 0.0 }));
        prop_assert!(p.setting(steps, hi / 100.0).unwrap().tok_s <= p.setting(steps, lo / 100.0).unwrap().tok_s);
    }
}

fn tree(steps: u64, topk: u64, draft_tokens: u64, accept_length: f64) -> Tree {
    Tree {
        steps,
        topk,
        draft_tokens,
        accept_length,
        source: "test".into(),
    }
}

/// A tree of 2 steps, top-2, verifying 4 tokens, accepting 2.5 per cycle:
/// the draft runs 1 token then 2 (same weight bytes, 84.736 us each), the
/// target verifies 4 (179.072 us), 3 all-reduces of 10 us per forward.
#[test]
fn tree_cycle_by_hand() {
    let (m, d, g) = (tiny_model(1), tiny_draft(vec![0.8, 0.5]), slow_gpu());
    let mut i = tiny_input(&m, &d, &g, 10.0, None, Overhead::PerLayerUs { us: 0.0 });
    i.trees = vec![tree(2, 2, 4, 2.5)];
    let p = Planner::new(i).unwrap();
    let s = p.setting_of(Which::Tree { index: 0 }, 1.0).unwrap();
    assert_eq!(
        (s.steps, s.topk, s.verify_tokens, s.allreduces),
        (2, 2, 4, 9)
    );
    assert!(close(s.draft_compute_us, 2.0 * 84.736));
    assert!(close(s.draft_comm_us, 60.0));
    assert!(close(s.verify_compute_us, 179.072));
    assert!(close(s.cycle_us, 2.0 * 114.736 + 209.072));
    assert!(close(s.tok_s, 2.5e6 / s.cycle_us));
    assert_eq!(s.label(), "tree: 2 steps, topk 2, 4 tokens");
    // The plan holds the chains, then the tree.
    let plan = p.plan().unwrap();
    assert_eq!(plan.settings.len(), 3);
    assert_eq!(plan.settings[2].which, Which::Tree { index: 0 });
    assert!(p.setting_of(Which::Tree { index: 1 }, 1.0).is_err());
}

/// A tree's later draft steps carry `topk` tokens each, so their all-reduce
/// messages are `topk` times larger: with latency growing with size (10 us
/// at 128 B, 80 us at 1 KiB, linear), a top-2 step costs 20 us per all-reduce.
#[test]
fn tree_steps_send_topk_tokens() {
    let (m, d, g) = (tiny_model(1), tiny_draft(vec![0.8, 0.5]), slow_gpu());
    let table = LatencyTable::new(
        "grows",
        vec![(ByteSize::b(128), 10.0), (ByteSize::b(1024), 80.0)],
    )
    .unwrap();
    let mut i = tiny_input(&m, &d, &g, 10.0, None, Overhead::PerLayerUs { us: 0.0 });
    i.spec_latency = LatencySource::Table {
        table,
        interp: tpcomm_plan::latency::Interp::Linear,
    };
    i.trees = vec![tree(2, 2, 4, 2.5)];
    let p = Planner::new(i).unwrap();
    let t = p.setting_of(Which::Tree { index: 0 }, 1.0).unwrap();
    let c = p.setting(2, 1.0).unwrap();
    assert!(close(c.draft_comm_us, 2.0 * 3.0 * 10.0));
    assert!(close(t.draft_comm_us, 3.0 * 10.0 + 3.0 * 20.0));
}

#[test]
fn impossible_trees_are_rejected() {
    let (m, d, g) = (tiny_model(1), tiny_draft(vec![0.8]), slow_gpu());
    for bad in [
        tree(0, 1, 2, 1.5),  // no steps
        tree(2, 0, 2, 1.5),  // no candidates
        tree(2, 2, 1, 1.0),  // nothing verified beyond the root
        tree(2, 2, 99, 2.0), // more tokens than the tree has
        tree(2, 2, 4, 3.5),  // more accepted than steps + 1
        tree(2, 2, 4, 0.5),  // less than the bonus token
        tree(2, 2, 4, f64::NAN),
        tree(u64::MAX, 2, 4, 2.0),
    ] {
        let mut i = tiny_input(&m, &d, &g, 10.0, None, Overhead::PerLayerUs { us: 0.0 });
        i.trees = vec![bad.clone()];
        assert!(Planner::new(i).is_err(), "{bad:?}");
    }
}

/// Kernels per forward, counted from the architecture (kernels.rs): a
/// Llama layer 6 attention + 4 MLP kernels, Qwen3 one more for q/k norm, an
/// MoE block 8 (+4 for shared experts), MLA attention 11 with q_lora; 4
/// outside the layers.
#[test]
fn kernel_counts_by_hand() {
    use tpcomm_plan::kernels::{draft_kernels, model_kernels};
    let c = Catalog::builtin().unwrap();
    let count = |m: &str| model_kernels(c.model(m).unwrap()).unwrap();
    assert_eq!(count("llama-3.1-8b"), 32 * 10 + 4);
    assert_eq!(count("qwen3-8b"), 36 * 11 + 4);
    assert_eq!(count("qwen3-30b-a3b"), 48 * (7 + 8) + 4);
    assert_eq!(count("deepseek-v3"), 3 * (11 + 4) + 58 * (11 + 12) + 4);
    // EAGLE-3: per layer a hidden-state norm + a Llama layer; the fusion
    // GEMM and 4 kernels outside. MTP: 3 + a target layer (MoE here).
    let (m, d) = (tiny_model(1), tiny_draft(vec![0.8]));
    assert_eq!(model_kernels(&m).unwrap(), 14);
    assert_eq!(draft_kernels(&d, &m).unwrap(), 11 + 1 + 4);
    let ds = c.model("deepseek-v3").unwrap();
    let mtp = Draft {
        shape: DraftShape::Mtp { layers: 1 },
        ..tiny_draft(vec![0.8])
    };
    assert_eq!(draft_kernels(&mtp, ds).unwrap(), 3 + 11 + 12 + 4);
    // The counts are checked: an absurd layer count is an error, not a wrap.
    let mut huge = tiny_model(1);
    huge.layers = u64::MAX / 2;
    assert!(model_kernels(&huge).is_err());
}

fn published(bandwidth: Option<f64>, kernel_us: Option<f64>) -> PublishedEfficiency {
    let s = |value: f64| Sourced {
        value,
        source: "published: test".into(),
    };
    PublishedEfficiency {
        bandwidth_bytes_per_s: bandwidth.map(s),
        kernel_us: kernel_us.map(s),
    }
}

#[test]
fn published_efficiencies_replace_the_datasheet() {
    let (m, d) = (tiny_model(1), tiny_draft(vec![0.8]));
    let mut g = slow_gpu();
    g.published = Some(published(Some(0.5e9), Some(2.0)));
    let p = Planner::new(tiny_input(&m, &d, &g, 10.0, None, Overhead::Catalog)).unwrap();
    let plan = p.plan().unwrap();
    // Half the bandwidth doubles the streaming; 14 kernels x 2 us on top.
    assert!(close(plan.plain.compute_us, 2.0 * 179.072 + 28.0));
    assert!(close(plan.overhead_per_layer_us, 28.0));
    assert!(
        plan.bandwidth_from == "published 0 GB/s (published: test)",
        "{}",
        plan.bandwidth_from
    );
    assert!(
        plan.overhead_from
            .starts_with("published: 14 kernels per target forward and 16 per draft forward")
            && plan
                .overhead_from
                .contains("x 2 us per kernel (published: test)"),
        "{}",
        plan.overhead_from
    );
    // A draft step: 2 x 84.736 us streaming + 16 kernels x 2 us; the verify
    // pass: the target's forward again.
    let s = p.setting(1, 1.0).unwrap();
    assert!(close(s.draft_compute_us, 2.0 * 84.736 + 32.0));
    assert!(close(s.verify_compute_us, 2.0 * 179.072 + 28.0));

    // Only a kernel cost published: the datasheet bandwidth, said so.
    g.published = Some(published(None, Some(2.0)));
    let plan = Planner::new(tiny_input(&m, &d, &g, 10.0, None, Overhead::Catalog))
        .unwrap()
        .plan()
        .unwrap();
    assert!(close(plan.plain.compute_us, 179.072 + 28.0));
    assert!(
        plan.bandwidth_from.contains("uncalibrated"),
        "{}",
        plan.bandwidth_from
    );
    assert!(plan.overhead_from.starts_with("published"));

    // Only a bandwidth: no fixed cost, said so.
    g.published = Some(published(Some(0.5e9), None));
    let plan = Planner::new(tiny_input(&m, &d, &g, 10.0, None, Overhead::Catalog))
        .unwrap()
        .plan()
        .unwrap();
    assert!(close(plan.plain.compute_us, 2.0 * 179.072));
    assert!(
        plan.overhead_from.contains("uncalibrated"),
        "{}",
        plan.overhead_from
    );

    // A measured block wins over the published one.
    g.published = Some(published(Some(0.5e9), Some(2.0)));
    g.measured = Some(tpcomm_plan::catalog::Efficiency {
        bandwidth_bytes_per_s: 0.25e9,
        layer_us: 7.0,
        layer_us_for_class: false,
        source: "test".into(),
    });
    let plan = Planner::new(tiny_input(&m, &d, &g, 10.0, None, Overhead::Catalog))
        .unwrap()
        .plan()
        .unwrap();
    assert!(close(plan.plain.compute_us, 4.0 * 179.072 + 7.0));
    assert!(
        plan.bandwidth_from.starts_with("measured") && plan.overhead_from.starts_with("measured")
    );

    // A given overhead replaces the published kernel cost, but the
    // published bandwidth stays.
    g.measured = None;
    let plan = Planner::new(tiny_input(
        &m,
        &d,
        &g,
        10.0,
        None,
        Overhead::PerLayerUs { us: 5.0 },
    ))
    .unwrap()
    .plan()
    .unwrap();
    assert!(close(plan.plain.compute_us, 2.0 * 179.072 + 5.0));
    assert_eq!(plan.overhead_from, "given");
}

/// The built-in H100: its own measurement (2991 GB/s, 39.37 us per layer);
/// without it, its published bandwidth (2.9 TB/s) and the per-layer cost
/// measured on the H200 (the same GH100 chip class) instead of its
/// published 324 kernels x 1.3 us, which it falls back to when its class
/// has no measurement either.
#[test]
fn builtin_h100_uses_its_measurement_then_its_class_then_published() {
    let c = Catalog::builtin().unwrap();
    let (m, g) = (c.model("llama-3.1-8b").unwrap(), c.gpu("h100-sxm").unwrap());
    let d = c.draft("llama-3.1-8b-eagle3").unwrap();
    let run = |g: &Gpu| {
        let mut i = tiny_input(m, d, g, 0.0, None, Overhead::Catalog);
        i.tp = 1;
        Planner::new(i).unwrap().plan().unwrap()
    };
    let measured = g.measured.as_ref().expect("the H100 is measured");
    assert_eq!(
        (measured.bandwidth_bytes_per_s, measured.layer_us),
        (2991e9, 39.37)
    );
    assert!(g.class_layer.is_none(), "a measured GPU is lent nothing");
    let own = run(g);
    assert!(
        own.bandwidth_from.starts_with("measured 2991 GB/s"),
        "{}",
        own.bandwidth_from
    );
    assert!(close(own.overhead_per_layer_us, 39.37));

    // Without its measurement: its class's layer cost, lent by the H200.
    let mut unmeasured = g.clone();
    unmeasured.measured = None;
    unmeasured.class_layer = c.gpu("h20").unwrap().class_layer.clone();
    let g = &unmeasured;
    let lent = g
        .class_layer
        .as_ref()
        .expect("the H200 lends its layer cost");
    let h200 = c.gpu("h200-sxm").unwrap().measured.as_ref().unwrap();
    assert_eq!(
        (
            lent.measured_on.as_str(),
            lent.class.as_str(),
            lent.layer_us
        ),
        ("h200-sxm", "gh100", h200.layer_us)
    );
    let plan = run(g);
    assert!(plan.bandwidth_from.starts_with("published 2900 GB/s"));
    assert!(close(plan.overhead_per_layer_us, lent.layer_us));
    assert!(
        plan.overhead_from
            .starts_with("measured on h200-sxm, not on h100-sxm: applied to h100-sxm as the same chip class gh100")
            && plan.overhead_from.contains("replaces the published 1.3 us per kernel"),
        "{}",
        plan.overhead_from
    );

    // Without the class's figure: the published kernel cost.
    let mut own = g.clone();
    own.class_layer = None;
    let published = run(&own);
    assert!(close(published.overhead_per_layer_us * 32.0, 324.0 * 1.3));
    let mut datasheet = own.clone();
    datasheet.published = None;
    let raw = run(&datasheet);
    let streaming = raw.plain.compute_us * 3350.0 / 2900.0;
    assert!(close(published.plain.compute_us, streaming + 324.0 * 1.3));
    assert!(close(
        plan.plain.compute_us,
        streaming + 32.0 * lent.layer_us
    ));
}

/// The built-in H20 takes the H200's per-layer cost too, with its own
/// bandwidth; the H200 keeps its own measurement, and a GPU of another
/// class gets nothing lent.
#[test]
fn builtin_class_layer_costs_go_to_the_class_only() {
    let c = Catalog::builtin().unwrap();
    let h20 = c.gpu("h20").unwrap();
    let lent = h20.class_layer.as_ref().unwrap();
    assert_eq!(
        (lent.measured_on.as_str(), lent.layer_us),
        ("h200-sxm", 39.24)
    );
    let (m, d) = (
        c.model("qwen3-8b").unwrap(),
        c.draft("qwen3-8b-eagle3").unwrap(),
    );
    let mut i = tiny_input(m, d, h20, 0.0, None, Overhead::Catalog);
    i.tp = 1;
    let plan = Planner::new(i).unwrap().plan().unwrap();
    assert!(close(plan.overhead_per_layer_us, 39.24));
    // The class never lends its bandwidth: the H20's own (published) one.
    assert!(
        plan.bandwidth_from.starts_with("published 3300 GB/s"),
        "{}",
        plan.bandwidth_from
    );
    assert!(c.gpu("h200-sxm").unwrap().class_layer.is_none());
    for g in ["rtx-5090", "rtx-pro-6000-blackwell", "b200", "l40s"] {
        assert!(c.gpu(g).unwrap().class_layer.is_none(), "{g}");
    }
}

/// Precedence of the fixed cost: the GPU's own measurement, then its
/// class's, then its published per-kernel cost.
#[test]
fn class_layer_cost_sits_between_measured_and_published() {
    let (m, d) = (tiny_model(1), tiny_draft(vec![0.8]));
    let mut g = slow_gpu();
    g.published = Some(published(None, Some(2.0)));
    g.class_layer = Some(ClassLayerCost {
        class: "k".into(),
        measured_on: "other".into(),
        layer_us: 9.0,
        source: "measured: test".into(),
    });
    let run = |g: &Gpu| {
        Planner::new(tiny_input(&m, &d, g, 10.0, None, Overhead::Catalog))
            .unwrap()
            .plan()
            .unwrap()
    };
    let plan = run(&g);
    // 9 us per layer instead of 14 kernels x 2 us; the draft's layer too.
    assert!(close(plan.plain.compute_us, 179.072 + 9.0));
    assert!(plan
        .overhead_from
        .starts_with("measured on other, not on slow"));
    let p = Planner::new(tiny_input(&m, &d, &g, 10.0, None, Overhead::Catalog)).unwrap();
    assert!(close(
        p.setting(1, 1.0).unwrap().draft_compute_us,
        84.736 + 9.0
    ));
    // The GPU's own measurement wins.
    g.measured = Some(tpcomm_plan::catalog::Efficiency {
        bandwidth_bytes_per_s: 1e9,
        layer_us: 4.0,
        layer_us_for_class: false,
        source: "measured: own".into(),
    });
    assert!(close(run(&g).plain.compute_us, 179.072 + 4.0));
    // A given overhead replaces both.
    let plan = Planner::new(tiny_input(
        &m,
        &d,
        &g,
        10.0,
        None,
        Overhead::PerLayerUs { us: 1.0 },
    ))
    .unwrap()
    .plan()
    .unwrap();
    assert!(close(plan.plain.compute_us, 179.072 + 1.0));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Published efficiencies only ever slow a plan down: a bandwidth at or
    /// below the datasheet's and a per-kernel cost at or above zero never
    /// raise plain or speculative tok/s, and a larger kernel cost never does.
    #[test]
    fn published_efficiencies_never_speed_up(frac in 0.05f64..=1.0, k in 0.0f64..50.0, more in 0.0f64..50.0, steps in 1u64..=2) {
        let (m, d) = (tiny_model(2), tiny_draft(vec![0.8, 0.5]));
        let g = slow_gpu();
        let base = Planner::new(tiny_input(&m, &d, &g, 10.0, None, Overhead::Catalog)).unwrap();
        let with = |k: f64| {
            let mut g = slow_gpu();
            g.published = Some(published(Some(frac * g.bandwidth_bytes_per_s), Some(k)));
            g
        };
        let (g1, g2) = (with(k), with(k + more));
        let p1 = Planner::new(tiny_input(&m, &d, &g1, 10.0, None, Overhead::Catalog)).unwrap();
        let p2 = Planner::new(tiny_input(&m, &d, &g2, 10.0, None, Overhead::Catalog)).unwrap();
        prop_assert!(p1.plain(1.0).tok_s <= base.plain(1.0).tok_s * (1.0 + 1e-12));
        prop_assert!(p2.plain(1.0).tok_s <= p1.plain(1.0).tok_s * (1.0 + 1e-12));
        let s = |p: &Planner| p.setting(steps, 1.0).unwrap().tok_s;
        prop_assert!(s(&p1) <= s(&base) * (1.0 + 1e-12));
        prop_assert!(s(&p2) <= s(&p1) * (1.0 + 1e-12));
    }
}
