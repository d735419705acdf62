//! Reads a model's shape from a Hugging Face `config.json` (Llama, Qwen2/3,
//! Qwen3-MoE, DeepSeek-V3 and Kimi K2 style keys; a multimodal config's
//! `text_config` is used when present).

use crate::catalog::{Attention, Model, Moe};
use crate::error::{PlanError, Result};
use serde_json::{Map, Value};
use std::path::Path;

pub fn model_from_config_path(path: &Path) -> Result<Model> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| PlanError::Io {
        path: name.clone(),
        source,
    })?;
    model_from_config_str(&name, &text)
}

pub fn model_from_config_str(path: &str, text: &str) -> Result<Model> {
    let bad = |problem: String| PlanError::HfConfig {
        path: path.to_string(),
        problem,
    };
    let v: Value = serde_json::from_str(text).map_err(|e| bad(format!("not valid JSON: {e}")))?;
    let root = v
        .as_object()
        .ok_or_else(|| bad("the top level is not a JSON object".into()))?;
    let c: &Map<String, Value> = match root.get("text_config").and_then(|t| t.as_object()) {
        Some(t) => t,
        None => root,
    };
    let opt = |k: &str| -> Result<Option<u64>> {
        match c.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(x) => match x.as_u64() {
                Some(n) if n > 0 => Ok(Some(n)),
                Some(_) if k == "first_k_dense_replace" || k == "n_shared_experts" => Ok(Some(0)),
                _ => Err(bad(format!(
                    "key \"{k}\" must be a positive integer, found {x}"
                ))),
            },
        }
    };
    let req = |k: &str| -> Result<u64> {
        opt(k)?.ok_or_else(|| {
            bad(format!(
                "missing key \"{k}\" (needed to size the model; is this a decoder-only LLM config?)"
            ))
        })
    };
    let model_type = c
        .get("model_type")
        .and_then(|x| x.as_str())
        .unwrap_or("")
        .to_string();
    let hidden = req("hidden_size")?;
    let layers = req("num_hidden_layers")?;
    let heads = req("num_attention_heads")?;
    let vocab = req("vocab_size")?;
    let intermediate = req("intermediate_size")?;
    let attention = if c.contains_key("kv_lora_rank") {
        Attention::Mla {
            heads,
            q_lora_rank: opt("q_lora_rank")?,
            kv_lora_rank: req("kv_lora_rank")?,
            qk_nope_head_dim: req("qk_nope_head_dim")?,
            qk_rope_head_dim: req("qk_rope_head_dim")?,
            v_head_dim: req("v_head_dim")?,
        }
    } else {
        let kv_heads = opt("num_key_value_heads")?.unwrap_or(heads);
        let head_dim = match opt("head_dim")? {
            Some(d) => d,
            None if hidden % heads == 0 => hidden / heads,
            None => {
                return Err(bad(format!(
                    "no \"head_dim\" and hidden_size {hidden} is not a multiple of num_attention_heads {heads}"
                )))
            }
        };
        if heads % kv_heads != 0 {
            return Err(bad(format!(
                "num_attention_heads {heads} is not a multiple of num_key_value_heads {kv_heads}"
            )));
        }
        let qkv_bias = c
            .get("attention_bias")
            .and_then(|b| b.as_bool())
            .unwrap_or(model_type.starts_with("qwen2"));
        Attention::Gqa {
            heads,
            kv_heads,
            head_dim,
            qkv_bias,
            qk_norm: model_type.starts_with("qwen3"),
        }
    };
    let experts = match opt("n_routed_experts")? {
        Some(n) => Some(n),
        None => opt("num_experts")?,
    };
    let moe = match experts {
        None => None,
        Some(experts) => {
            let shared = opt("n_shared_experts")?.unwrap_or(0);
            let dense_layers = match opt("first_k_dense_replace")? {
                Some(k) => k,
                None => {
                    if c.get("mlp_only_layers")
                        .and_then(|l| l.as_array())
                        .is_some_and(|l| !l.is_empty())
                    {
                        return Err(bad(
                            "\"mlp_only_layers\" lists dense layers at arbitrary positions; only leading dense layers (first_k_dense_replace) are supported".into(),
                        ));
                    }
                    0
                }
            };
            Some(Moe {
                experts,
                active: req("num_experts_per_tok")?,
                shared,
                expert_intermediate: req("moe_intermediate_size")?,
                dense_layers,
                router_bias: c.get("topk_method").and_then(|t| t.as_str()) == Some("noaux_tc"),
            })
        }
    };
    if let Some(moe) = &moe {
        if moe.dense_layers >= layers {
            return Err(bad(format!(
                "first_k_dense_replace {} leaves no MoE layer of num_hidden_layers {layers}",
                moe.dense_layers
            )));
        }
        if moe.active > moe.experts {
            return Err(bad(format!(
                "num_experts_per_tok {} is above the {} experts",
                moe.active, moe.experts
            )));
        }
    }
    let model = Model {
        name: c
            .get("_name_or_path")
            .and_then(|n| n.as_str())
            .unwrap_or(path)
            .to_string(),
        source: format!("config.json at {path}"),
        layers,
        hidden,
        vocab,
        intermediate,
        tie_embeddings: c
            .get("tie_word_embeddings")
            .and_then(|b| b.as_bool())
            .unwrap_or(false),
        attention,
        moe,
        mtp_layers: opt("num_nextn_predict_layers")?.unwrap_or(0),
        published: None,
    };
    // Every count the planner takes from this shape must fit in 64 bits.
    crate::arch::model_params(&model).map_err(|e| bad(e.to_string()))?;
    Ok(model)
}
