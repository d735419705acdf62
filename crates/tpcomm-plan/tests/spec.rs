//! The speculative-decoding planner: hand-computed cycles, break-even
//! points, monotonic behaviour, and the PCIe scenario of issue 6.

use proptest::prelude::*;
use tpcomm::ByteSize;
use tpcomm_plan::arch::{KvType, QuantScope, WeightType};
use tpcomm_plan::catalog::{Attention, Catalog, Draft, DraftShape, Gpu, Model};
use tpcomm_plan::latency::LatencySource;
use tpcomm_plan::spec::{expected_tokens, BreakEven, Overhead, Planner, SpecInput};

/// A model small enough to cost by hand: 1 layer, hidden 64, one 64-wide
/// head, MLP 128, vocabulary 1000. Weights read per forward (bf16, no
/// embedding): LM head 64,000 + norms 192 + attention 16,384 + MLP 24,576 =
/// 105,152 parameters = 210,304 bytes.
fn tiny_model(layers: u64) -> Model {
    Model {
        name: "tiny".into(),
        source: "test".into(),
        layers,
        hidden: 64,
        vocab: 1000,
        intermediate: 128,
        tie_embeddings: false,
        attention: Attention::Gqa {
            heads: 1,
            kv_heads: 1,
            head_dim: 64,
            qkv_bias: false,
            qk_norm: false,
        },
        moe: None,
        mtp_layers: 0,
        published: None,
    }
}

/// One EAGLE-3 layer: q/k/v from 2 x 64 inputs (24,576) + o (4,096) + fc
/// 3 x 64 x 64 (12,288) + MLP (24,576) + 100-token head (6,400) + norms (256)
/// = 72,192 parameters = 144,384 bytes.
fn tiny_draft(acceptance: Vec<f64>) -> Draft {
    Draft {
        name: "tiny-eagle".into(),
        target: "tiny".into(),
        shape: DraftShape::Eagle3 {
            layers: 1,
            hidden: 64,
            heads: 1,
            kv_heads: 1,
            head_dim: 64,
            intermediate: 128,
            draft_vocab: 100,
        },
        source: "test".into(),
        acceptance,
        acceptance_source: "test".into(),
    }
}

/// 1 GB/s and (practically) unlimited FLOPs: every microsecond is 1000 bytes.
fn slow_gpu() -> Gpu {
    Gpu {
        name: "slow".into(),
        memory: ByteSize::gib(1),
        bandwidth_bytes_per_s: 1e9,
        bf16_flops_per_s: 1e30,
        source: "test".into(),
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
        tp: 1,
        weights: WeightType::Bf16,
        scope: QuantScope::Linear,
        draft_weights: WeightType::Bf16,
        kv: KvType::Bf16,
        context: 0,
        spec_latency: LatencySource::Flat { us: spec_us },
        plain_latency: plain_us.map(|us| LatencySource::Flat { us }),
        overhead,
        max_steps: 8,
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
    assert!(close(plain.compute_us, 210.304));
    assert!(close(plain.comm_us, 30.0));
    assert!(close(plain.tok_s, 1e6 / 240.304));

    let s = p.setting(1, 1.0).unwrap();
    assert_eq!((s.verify_tokens, s.allreduces), (2, 6));
    assert!(close(s.draft_compute_us, 144.384));
    assert!(close(s.draft_comm_us, 30.0));
    assert!(close(s.verify_compute_us, 210.304));
    assert!(close(s.verify_comm_us, 30.0));
    assert!(close(s.cycle_us, 414.688));
    assert!(close(s.tok_s, 1.8e6 / 414.688));

    let s2 = p.setting(2, 1.0).unwrap();
    assert!(close(s2.cycle_us, 2.0 * 174.384 + 240.304));
    assert!(close(s2.tok_s, 2.2e6 / s2.cycle_us));
    assert_eq!(s2.allreduces, 9);
}

/// Break-even with plain decoding scaled alongside:
/// 1.8 / (354.688 + 6L) = 1 / (210.304 + 3L)  =>  L = 23.8592 / 0.6 = 39.765 us.
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
            let want = (1.8 * 210.304 - 354.688) / 0.6;
            assert!((mean_us - want).abs() < 1e-6, "{mean_us} vs {want}");
            assert!((scale - want / 10.0).abs() < 1e-7);
            let s = p.setting(1, scale).unwrap();
            assert!((s.tok_s - p.plain(scale).tok_s).abs() < 1e-6 * s.tok_s);
        }
        other => panic!("{other:?}"),
    }
    // Plain decoding on its own free path: 1.8 / (354.688 + 6L) = 1 / 210.304.
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
            let want = (1.8 * 210.304 - 354.688) / 6.0;
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
    assert!(close(plan.overhead_per_layer_us, 500.0 - 210.304 - 30.0));
    assert!(close(plan.plain.tok_s, 2000.0));
    // The overhead applies to the draft's layer too.
    assert!(close(
        plan.settings[0].draft_compute_us,
        144.384 + plan.overhead_per_layer_us
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
    i.tp = 1;
    i.max_steps = 0;
    assert!(Planner::new(i.clone()).is_err());
    i.max_steps = 8;
    i.overhead = Overhead::PerLayerUs { us: -1.0 };
    assert!(Planner::new(i.clone()).is_err());
    i.overhead = Overhead::CalibrateTokS { tok_s: 0.0 };
    assert!(Planner::new(i).is_err());
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

/// Issue 6: 8-GPU PCIe box, Kimi K2.5 INT4 TP8, EAGLE-3, plain decoding at
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
