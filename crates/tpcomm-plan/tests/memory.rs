//! The memory planner's arithmetic on hand-computed cases, its TP sharding
//! rules, and the errors when something does not fit.

use tpcomm::ByteSize;
use tpcomm_plan::arch::{model_params, weight_bytes_per_rank, KvType, QuantScope, WeightType};
use tpcomm_plan::catalog::Catalog;
use tpcomm_plan::memory::{
    nccl_buffer_estimate, plan_memory, tpcomm_buffer_bytes, CommChoice, MemoryInput,
    TpcommTransport,
};
use tpcomm_plan::PlanError;

#[test]
fn weight_types_count_their_scales() {
    // 64 int4 weights: 32 bytes + two 2-byte group scales.
    assert_eq!(WeightType::Int4.bytes(64).unwrap(), 36);
    assert_eq!(WeightType::Int4.bytes(65).unwrap(), 33 + 3 * 2);
    // Two 128x128 fp8 blocks: 32768 bytes + two 4-byte scales.
    assert_eq!(WeightType::Fp8.bytes(2 * 128 * 128).unwrap(), 32768 + 8);
    assert_eq!(WeightType::Bf16.bytes(10).unwrap(), 20);
    // No wrapping in release builds.
    assert!(WeightType::Bf16.bytes(u64::MAX / 2 + 1).is_err());
}

#[test]
fn communication_buffers_come_from_the_library_layout() {
    // The library allocates 2 epochs x max(world x slot, 2 x world
    // x shard): 128 MiB at TP 8 / 8 MiB (+ 256 B of control words, in 2 MiB
    // granules: 130 MiB), 32 MiB at TP 2 (34 MiB).
    let (b, how) = tpcomm_buffer_bytes(TpcommTransport::P2p, 8, ByteSize::mib(8)).unwrap();
    assert_eq!(b, ByteSize::mib(130));
    assert!(how.contains("library layout code"), "{how}");
    let (b, _) = tpcomm_buffer_bytes(TpcommTransport::P2p, 2, ByteSize::mib(8)).unwrap();
    assert_eq!(b, ByteSize::mib(34));
    // Host path: a control granule + delta shadows (2 x 2 ranks x 2 MiB).
    let (b, _) = tpcomm_buffer_bytes(TpcommTransport::Host, 2, ByteSize::mib(8)).unwrap();
    assert_eq!(b, ByteSize::mib(10));
    assert_eq!(
        tpcomm_buffer_bytes(TpcommTransport::P2p, 1, ByteSize::mib(8))
            .unwrap()
            .0,
        ByteSize::ZERO
    );
    // Beyond the library's 8 ranks, or an absurd message: an error.
    // Named as `tpcomm plan` takes it (--tp), not as the library's "world size".
    for tp in [9, 16, u64::MAX] {
        let e = tpcomm_buffer_bytes(TpcommTransport::P2p, tp, ByteSize::mib(8))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--tp") && e.contains("--comm nccl") && !e.contains("world size"),
            "{e}"
        );
    }
    assert!(tpcomm_buffer_bytes(TpcommTransport::P2p, 8, ByteSize::b(u64::MAX)).is_err());
    // 16 channels x 2 neighbours x 4 MiB.
    assert_eq!(nccl_buffer_estimate(16).unwrap(), ByteSize::mib(128));
}

fn input<'a>(c: &'a Catalog, model: &str, tp: u64, mem: ByteSize) -> MemoryInput<'a> {
    MemoryInput {
        model: c.model(model).unwrap(),
        draft: None,
        tp,
        gpu_memory: mem,
        weights: WeightType::Bf16,
        scope: QuantScope::Linear,
        draft_weights: WeightType::Bf16,
        kv: KvType::Bf16,
        comm: CommChoice::Bytes {
            bytes: ByteSize::mib(100),
        },
        runtime_reserve: ByteSize::gib(1),
        graph_reserve: ByteSize::mib(512),
        max_batch_tokens: 0,
        logit_rows: 0,
    }
}

/// Llama-3.1-8B, bf16, TP 1 on an 80 GiB GPU, every term by hand:
/// weights 8,030,261,248 params x 2 B; KV 32 layers x 2 x 8 heads x 128 x 2 B
/// = 128 KiB per token.
#[test]
fn llama_8b_by_hand() {
    let c = Catalog::builtin().unwrap();
    let inp = input(&c, "llama-3.1-8b", 1, ByteSize::gib(80));
    let plan = plan_memory(&inp).unwrap();
    let params: u64 = 2 * 128256 * 4096 // embedding + LM head
        + 32 * (4096 * (4096 + 2 * 1024) + 4096 * 4096) // attention
        + 32 * 3 * 4096 * 14336 // MLP
        + 32 * 2 * 4096 + 4096; // norms
    assert_eq!(params, 8_030_261_248);
    assert_eq!(model_params(inp.model).unwrap().total().unwrap(), params);
    let weights = plan
        .terms
        .iter()
        .find(|t| t.name == "target weights")
        .unwrap();
    assert_eq!(weights.bytes, ByteSize::b(2 * params));
    // TP 1: no communication buffers even though some were asked for.
    let comm = plan
        .terms
        .iter()
        .find(|t| t.name == "communication buffers")
        .unwrap();
    assert_eq!(comm.bytes, ByteSize::ZERO);
    let used = ByteSize::gib(1).bytes() + ByteSize::mib(512).bytes() + 2 * params;
    let left = ByteSize::gib(80).bytes() - used;
    assert_eq!(plan.kv_budget, ByteSize::b(left));
    assert_eq!(plan.kv_per_token_target, ByteSize::kib(128));
    assert_eq!(plan.kv_tokens, left / (128 * 1024));
    assert_eq!(plan.kv_target, ByteSize::b(plan.kv_tokens * 128 * 1024));
    // Every term adds up to the GPU with the KV budget.
    let sum: u64 = plan.terms.iter().map(|t| t.bytes.bytes()).sum::<u64>() + plan.kv_budget.bytes();
    assert_eq!(sum, ByteSize::gib(80).bytes());
}

#[test]
fn tp_splits_weights_and_kv_heads() {
    let c = Catalog::builtin().unwrap();
    let one = plan_memory(&input(&c, "llama-3.1-70b", 1, ByteSize::gib(1000))).unwrap();
    let eight = plan_memory(&input(&c, "llama-3.1-70b", 8, ByteSize::gib(1000))).unwrap();
    let w = |p: &tpcomm_plan::memory::MemoryPlan| p.terms[1].bytes.bytes() as f64;
    // Norms stay whole on every rank, so slightly more than 1/8.
    let ratio = w(&eight) / w(&one);
    assert!(ratio > 0.125 && ratio < 0.126, "{ratio}");
    assert_eq!(
        eight.kv_per_token_target.bytes() * 8,
        one.kv_per_token_target.bytes()
    );
}

#[test]
fn int4_experts_scope_quantizes_only_routed_experts() {
    let c = Catalog::builtin().unwrap();
    let m = c.model("kimi-k2.5").unwrap();
    let p = model_params(m).unwrap();
    let experts_only = weight_bytes_per_rank(&p, 8, WeightType::Int4, QuantScope::Experts).unwrap();
    let all = weight_bytes_per_rank(&p, 8, WeightType::Int4, QuantScope::Linear).unwrap();
    assert!(experts_only > all);
    let routed = WeightType::Int4
        .bytes(p.routed_experts.div_ceil(8))
        .unwrap();
    let rest_bf16 = experts_only.bytes() - routed;
    // The non-expert part in bf16: 2 bytes per parameter (sharded parts / 8).
    assert!(rest_bf16 > 2 * (p.total().unwrap() - p.routed_experts) / 8);
}

#[test]
fn a_term_that_does_not_fit_is_named_with_its_shortfall() {
    let c = Catalog::builtin().unwrap();
    // 70B in bf16 on one 80 GiB GPU: the weights do not fit.
    let e = plan_memory(&input(&c, "llama-3.1-70b", 1, ByteSize::gib(80))).unwrap_err();
    match e {
        PlanError::DoesNotFit {
            term,
            needed,
            available,
            short,
            ..
        } => {
            assert_eq!(term, "target weights");
            assert_eq!(available, ByteSize::gib(79));
            assert_eq!(short.bytes(), needed.bytes() - available.bytes());
        }
        other => panic!("{other}"),
    }
}

#[test]
fn nothing_left_for_kv_is_an_error() {
    let c = Catalog::builtin().unwrap();
    let probe = plan_memory(&input(&c, "llama-3.1-8b", 1, ByteSize::gib(80))).unwrap();
    // Exactly the memory the fixed terms take, plus less than one token of KV.
    let fixed: u64 = probe.terms.iter().map(|t| t.bytes.bytes()).sum();
    let mem = ByteSize::b(fixed + 1000);
    let e = plan_memory(&input(&c, "llama-3.1-8b", 1, mem)).unwrap_err();
    match e {
        PlanError::DoesNotFit { term, short, .. } => {
            assert!(term.contains("KV"), "{term}");
            assert_eq!(short, ByteSize::b(128 * 1024 - 1000));
        }
        other => panic!("{other}"),
    }
}

#[test]
fn draft_weights_and_kv_are_counted() {
    let c = Catalog::builtin().unwrap();
    let mut inp = input(&c, "llama-3.1-8b", 1, ByteSize::gib(80));
    let without = plan_memory(&inp).unwrap();
    inp.draft = Some(c.draft("llama-3.1-8b-eagle3").unwrap());
    let with = plan_memory(&inp).unwrap();
    let dw = with
        .terms
        .iter()
        .find(|t| t.name == "draft weights")
        .unwrap();
    // One layer with 2 x hidden input to q/k/v, MLP, fusion fc, 32000-row head.
    let params: u64 = 2 * 4096 * (4096 + 2 * 1024)
        + 4096 * 4096
        + 3 * 4096 * 14336
        + 3 * 4096 * 4096
        + 32000 * 4096
        + 3 * 4096
        + 4096;
    assert_eq!(dw.bytes, ByteSize::b(2 * params));
    // One layer of 8 KV heads: 4 KiB per token.
    assert_eq!(with.kv_per_token_draft, ByteSize::kib(4));
    assert_eq!(with.kv_tokens, with.kv_budget.bytes() / (128 * 1024 + 4096));
    assert!(with.kv_tokens < without.kv_tokens);
}

#[test]
fn bad_tp_is_rejected() {
    let c = Catalog::builtin().unwrap();
    assert!(plan_memory(&input(&c, "llama-3.1-8b", 0, ByteSize::gib(80))).is_err());
    // 32 heads do not split over 3 ranks.
    assert!(plan_memory(&input(&c, "llama-3.1-8b", 3, ByteSize::gib(80))).is_err());
}
