// Shared helpers for the planner tests: the catalog files as text, so a test
// can break one field and check the error names it.
#![allow(dead_code)]

use tpcomm_plan::catalog::Catalog;
use tpcomm_plan::PlanError;

pub const MODELS: &str = include_str!("../../../catalog/models.toml");
pub const GPUS: &str = include_str!("../../../catalog/gpus.toml");
pub const MACHINES: &str = include_str!("../../../catalog/machines.toml");
pub const DRAFTS: &str = include_str!("../../../catalog/drafts.toml");

pub fn load(models: &str, gpus: &str, machines: &str, drafts: &str) -> Result<Catalog, PlanError> {
    Catalog::from_texts(
        ("models.toml", models),
        ("gpus.toml", gpus),
        ("machines.toml", machines),
        ("drafts.toml", drafts),
    )
}

/// Replaces exactly one occurrence of `from` (panics if it is not unique, so
/// a test cannot silently stop breaking what it means to break).
pub fn replace_once(text: &str, from: &str, to: &str) -> String {
    assert_eq!(text.matches(from).count(), 1, "{from:?} must occur once");
    text.replacen(from, to, 1)
}

/// Minimal config.json texts (the fields the planner reads) of a dense and
/// an MLA + MoE model, for tests that break them.
pub const LLAMA_8B: &str = r#"{
  "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
  "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
  "vocab_size": 128256
}"#;

pub const DEEPSEEK_V3: &str = r#"{
  "model_type": "deepseek_v3", "hidden_size": 7168, "intermediate_size": 18432,
  "moe_intermediate_size": 2048, "num_hidden_layers": 61, "num_attention_heads": 128,
  "num_key_value_heads": 128, "n_shared_experts": 1, "n_routed_experts": 256,
  "num_experts_per_tok": 8, "first_k_dense_replace": 3, "kv_lora_rank": 512,
  "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
  "v_head_dim": 128, "vocab_size": 129280, "topk_method": "noaux_tc"
}"#;
