//! Bounded property tests of the catalog and config.json parsers:
//! on malformed input they never panic and never plan silently wrong. Every
//! input either fails with a typed error or gives a model whose every count
//! fits in 64 bits, and the memory planner on it either plans or fails with
//! an error. 1,600 generated inputs in all (4 x 400 cases), plus the cases
//! the issue reported.

use proptest::prelude::*;
use tpcomm::ByteSize;
use tpcomm_plan::arch::{model_params, KvType, QuantScope, WeightType};
use tpcomm_plan::catalog::Catalog;
use tpcomm_plan::hf::model_from_config_str;
use tpcomm_plan::memory::{plan_memory, CommChoice, MemoryInput, TpcommTransport};
use tpcomm_plan::PlanError;

mod common;
use common::{load, DEEPSEEK_V3, DRAFTS, GPUS, LLAMA_8B, MACHINES, MODELS};

/// Plans memory for a model at a few TP sizes with extreme options: it may
/// fail (with an error), never panic, and a plan it gives must add up.
fn plan_everything(model: &tpcomm_plan::catalog::Model) {
    for tp in [1u64, 2, 8, 1 << 40] {
        for (tokens, rows) in [(8192u64, 256u64), (u64::MAX, 1), (1, u64::MAX)] {
            let inp = MemoryInput {
                model,
                draft: None,
                tp,
                gpu_memory: ByteSize::mib(143_771),
                weights: WeightType::Int4,
                scope: QuantScope::Linear,
                draft_weights: WeightType::Bf16,
                kv: KvType::Fp8,
                comm: CommChoice::Both {
                    max_message: ByteSize::mib(8),
                    transport: TpcommTransport::P2p,
                    channels: 16,
                },
                runtime_reserve: ByteSize::gib(1),
                graph_reserve: ByteSize::mib(512),
                max_batch_tokens: tokens,
                logit_rows: rows,
            };
            if let Ok(plan) = plan_memory(&inp) {
                let used = ByteSize::checked_sum(plan.terms.iter().map(|t| t.bytes)).unwrap();
                assert_eq!(used.checked_add(plan.kv_budget).unwrap(), plan.gpu_memory);
                assert!(plan.kv_tokens > 0);
            }
        }
    }
}

/// A number from a mix of ordinary, boundary and absurd values.
fn number() -> impl Strategy<Value = String> {
    prop_oneof![
        (1u64..100_000).prop_map(|n| n.to_string()),
        Just("0".to_string()),
        Just("-1".to_string()),
        Just("9223372036854775807".to_string()),
        Just("4611686018427387904".to_string()),
        Just("18446744073709551615".to_string()),
        Just("1e308".to_string()),
        Just("1.5".to_string()),
        Just("\"7\"".to_string()),
        Just("null".to_string()),
        Just("true".to_string()),
        Just("[]".to_string()),
    ]
}

/// A config.json key the parser reads.
fn hf_key() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "hidden_size",
        "intermediate_size",
        "num_attention_heads",
        "num_hidden_layers",
        "num_key_value_heads",
        "vocab_size",
        "head_dim",
        "moe_intermediate_size",
        "n_routed_experts",
        "num_experts",
        "num_experts_per_tok",
        "first_k_dense_replace",
        "n_shared_experts",
        "kv_lora_rank",
        "q_lora_rank",
        "qk_nope_head_dim",
        "qk_rope_head_dim",
        "v_head_dim",
        "num_nextn_predict_layers",
    ])
}

/// Sets `key` to the raw JSON `value` in a config (adding it when absent).
fn set_json(base: &str, key: &str, value: &str) -> String {
    let mut v: serde_json::Value = serde_json::from_str(base).unwrap();
    let parsed: serde_json::Value =
        serde_json::from_str(value).unwrap_or(serde_json::Value::String(value.into()));
    v.as_object_mut().unwrap().insert(key.into(), parsed);
    v.to_string()
}

/// Replaces the value of the `n`-th `key = value` line of a TOML text.
fn set_toml(base: &str, n: usize, value: &str) -> String {
    let mut lines: Vec<String> = base.lines().map(str::to_string).collect();
    let kv: Vec<usize> = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| {
            let t = l.trim_start();
            !t.starts_with('#') && !t.starts_with('[') && !t.starts_with('{') && t.contains(" = ")
        })
        .map(|(i, _)| i)
        .collect();
    let i = kv[n % kv.len()];
    let key = lines[i].split(" = ").next().unwrap_or("").to_string();
    lines[i] = format!("{key} = {value}");
    lines.join("\n")
}

fn check_catalog(r: Result<Catalog, PlanError>) {
    match r {
        Ok(c) => {
            for m in &c.models {
                let p = model_params(m).expect("a loaded model's counts fit");
                assert!(p.total().is_ok() && p.active().is_ok());
                plan_everything(m);
            }
        }
        Err(e) => {
            let msg = e.to_string();
            assert!(!msg.is_empty());
            // Field errors name their file and line.
            if let PlanError::Field { line, file, .. } = &e {
                assert!(line.is_some(), "{msg}");
                assert!(msg.starts_with(file.as_str()), "{msg}");
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, failure_persistence: None, ..ProptestConfig::default() })]

    /// One key of a real config.json set to an odd value (two bases).
    #[test]
    fn config_json_values(key in hf_key(), value in number(), deepseek in any::<bool>()) {
        let base = if deepseek { DEEPSEEK_V3 } else { LLAMA_8B };
        let text = set_json(base, key, &value);
        if let Ok(m) = model_from_config_str("fuzz/config.json", &text) {
            prop_assert!(model_params(&m).is_ok());
            plan_everything(&m);
        }
    }

    /// Arbitrary bytes, and real configs cut short or with bytes flipped.
    #[test]
    fn config_json_bytes(cut in 0usize..600, flip in 0usize..600, byte in any::<u8>(), junk in ".{0,40}") {
        let mut b = DEEPSEEK_V3.as_bytes().to_vec();
        let at = flip % b.len();
        b[at] = byte;
        b.truncate(cut.max(1).min(b.len()));
        let text = String::from_utf8_lossy(&b).to_string();
        for t in [text.as_str(), junk.as_str()] {
            if let Ok(m) = model_from_config_str("fuzz/config.json", t) {
                prop_assert!(model_params(&m).is_ok());
                plan_everything(&m);
            }
        }
    }

    /// One `key = value` line of one catalog file given an odd value.
    #[test]
    fn catalog_values(file in 0usize..4, n in 0usize..2000, value in number()) {
        let texts = [MODELS, GPUS, MACHINES, DRAFTS];
        let bad = set_toml(texts[file], n, &value);
        let mut t = texts;
        t[file] = &bad;
        check_catalog(load(t[0], t[1], t[2], t[3]));
    }

    /// Catalog files cut short, or with a line dropped or duplicated.
    #[test]
    fn catalog_structure(file in 0usize..4, line in 0usize..400, op in 0u8..3) {
        let texts = [MODELS, GPUS, MACHINES, DRAFTS];
        let mut lines: Vec<&str> = texts[file].lines().collect();
        let i = line % lines.len();
        match op {
            0 => lines.truncate(i),
            1 => { lines.remove(i); }
            _ => { let l = lines[i]; lines.insert(i, l); }
        }
        let bad = lines.join("\n");
        let mut t = texts;
        t[file] = &bad;
        check_catalog(load(t[0], t[1], t[2], t[3]));
    }
}

/// Malformed inputs once reported as planned silently wrong, each an error now.
#[test]
fn issue_17_overflows_are_errors() {
    // layers = 2^63 - 1 gave "0.8B params".
    let t = set_json(LLAMA_8B, "num_hidden_layers", "9223372036854775807");
    let e = model_from_config_str("c.json", &t).unwrap_err();
    assert!(e.to_string().contains("64-bit"), "{e}");
    // vocab_size = 2^62 gave "7.0B params, fits".
    let t = set_json(LLAMA_8B, "vocab_size", "4611686018427387904");
    let e = model_from_config_str("c.json", &t).unwrap_err();
    assert!(e.to_string().contains("64-bit"), "{e}");
    // first_k_dense_replace above the layer count gave 16777215 TiB.
    let t = set_json(DEEPSEEK_V3, "first_k_dense_replace", "100");
    let e = model_from_config_str("c.json", &t).unwrap_err();
    assert!(e.to_string().contains("first_k_dense_replace"), "{e}");
    // The same in the catalog: a huge layer count.
    let bad = common::replace_once(
        MODELS,
        "layers = 32\nhidden = 4096\n",
        "layers = 9223372036854775807\nhidden = 4096\n",
    );
    let e = load(&bad, GPUS, MACHINES, DRAFTS).unwrap_err();
    assert!(e.to_string().contains("64-bit"), "{e}");
}

/// Option values near 2^64 (--max-batch-tokens, --logit-rows) are errors.
#[test]
fn huge_options_are_errors_not_wraps() {
    let c = Catalog::builtin().unwrap();
    let m = c.model("llama-3.1-8b").unwrap();
    let mut inp = MemoryInput {
        model: m,
        draft: None,
        tp: 1,
        gpu_memory: ByteSize::mib(143_771),
        weights: WeightType::Bf16,
        scope: QuantScope::Linear,
        draft_weights: WeightType::Bf16,
        kv: KvType::Bf16,
        comm: CommChoice::Nccl { channels: 16 },
        runtime_reserve: ByteSize::gib(1),
        graph_reserve: ByteSize::mib(512),
        max_batch_tokens: u64::MAX - 1,
        logit_rows: 256,
    };
    let e = plan_memory(&inp).unwrap_err();
    assert!(e.to_string().contains("--max-batch-tokens"), "{e}");
    inp.max_batch_tokens = 8192;
    inp.logit_rows = u64::MAX;
    assert!(plan_memory(&inp).is_err());
    inp.logit_rows = 256;
    inp.tp = 2;
    inp.comm = CommChoice::Nccl { channels: u64::MAX };
    assert!(plan_memory(&inp).is_err());
    inp.comm = CommChoice::Tpcomm {
        max_message: ByteSize::b(u64::MAX),
        transport: TpcommTransport::P2p,
    };
    assert!(plan_memory(&inp).is_err());
}
