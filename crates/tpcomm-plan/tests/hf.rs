//! Models read from Hugging Face config.json files match the catalog, and
//! unusable files give errors that name the file and the problem.

use tpcomm_plan::arch::model_params;
use tpcomm_plan::catalog::{Attention, Catalog};
use tpcomm_plan::hf::{model_from_config_path, model_from_config_str};
use tpcomm_plan::PlanError;

const LLAMA_8B: &str = r#"{
  "architectures": ["LlamaForCausalLM"], "model_type": "llama",
  "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
  "num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 128256,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16"
}"#;

const DEEPSEEK_V3: &str = r#"{
  "model_type": "deepseek_v3", "hidden_size": 7168, "intermediate_size": 18432,
  "moe_intermediate_size": 2048, "num_hidden_layers": 61, "num_attention_heads": 128,
  "num_key_value_heads": 128, "n_shared_experts": 1, "n_routed_experts": 256,
  "num_experts_per_tok": 8, "first_k_dense_replace": 3, "kv_lora_rank": 512,
  "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
  "v_head_dim": 128, "vocab_size": 129280, "topk_method": "noaux_tc",
  "num_nextn_predict_layers": 1, "tie_word_embeddings": false
}"#;

#[test]
fn llama_config_matches_the_catalog_entry() {
    let m = model_from_config_str("llama/config.json", LLAMA_8B).unwrap();
    let c = Catalog::builtin().unwrap();
    let cat = c.model("llama-3.1-8b").unwrap();
    assert_eq!(m.attention, cat.attention);
    assert_eq!(model_params(&m).unwrap(), model_params(cat).unwrap());
}

#[test]
fn deepseek_config_reads_mla_and_moe() {
    let m = model_from_config_str("ds/config.json", DEEPSEEK_V3).unwrap();
    let c = Catalog::builtin().unwrap();
    let cat = c.model("deepseek-v3").unwrap();
    assert!(matches!(
        m.attention,
        Attention::Mla {
            kv_lora_rank: 512,
            ..
        }
    ));
    assert_eq!(m.moe, cat.moe);
    assert_eq!(m.mtp_layers, 1);
    assert_eq!(model_params(&m).unwrap(), model_params(cat).unwrap());
}

/// Kimi K2.5's config nests the language model under text_config.
#[test]
fn multimodal_text_config_is_used() {
    let text = DEEPSEEK_V3
        .replace("\"n_routed_experts\": 256", "\"n_routed_experts\": 384")
        .replace(
            "\"num_attention_heads\": 128",
            "\"num_attention_heads\": 64",
        )
        .replace(
            "\"first_k_dense_replace\": 3",
            "\"first_k_dense_replace\": 1",
        )
        .replace("\"vocab_size\": 129280", "\"vocab_size\": 163840");
    let wrapped = format!(
        "{{\"model_type\": \"kimi_k25\", \"vision_config\": {{}}, \"text_config\": {text}}}"
    );
    let m = model_from_config_str("kimi/config.json", &wrapped).unwrap();
    let c = Catalog::builtin().unwrap();
    assert_eq!(
        model_params(&m).unwrap(),
        model_params(c.model("kimi-k2.5").unwrap()).unwrap()
    );
}

#[test]
fn qwen3_explicit_head_dim_and_qk_norm() {
    let q = r#"{"model_type": "qwen3", "hidden_size": 5120, "intermediate_size": 25600,
      "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128,
      "num_hidden_layers": 64, "vocab_size": 151936, "tie_word_embeddings": false}"#;
    let m = model_from_config_str("q/config.json", q).unwrap();
    let c = Catalog::builtin().unwrap();
    assert_eq!(
        model_params(&m).unwrap(),
        model_params(c.model("qwen3-32b").unwrap()).unwrap()
    );
}

#[test]
fn missing_key_is_named() {
    let bad = LLAMA_8B.replace("\"num_hidden_layers\": 32,", "");
    let e = model_from_config_str("x/config.json", &bad).unwrap_err();
    match &e {
        PlanError::HfConfig { path, problem } => {
            assert_eq!(path, "x/config.json");
            assert!(problem.contains("num_hidden_layers"), "{problem}");
        }
        other => panic!("{other}"),
    }
}

#[test]
fn unparseable_and_wrongly_typed_configs_are_rejected() {
    let e = model_from_config_str("x/config.json", "{ \"hidden_size\": 4096, ").unwrap_err();
    assert!(e.to_string().contains("not valid JSON"), "{e}");
    let e = model_from_config_str("x/config.json", "[1, 2]").unwrap_err();
    assert!(e.to_string().contains("not a JSON object"), "{e}");
    let bad = LLAMA_8B.replace("\"hidden_size\": 4096", "\"hidden_size\": -4096");
    let e = model_from_config_str("x/config.json", &bad).unwrap_err();
    assert!(e.to_string().contains("hidden_size"), "{e}");
    let bad = LLAMA_8B.replace("\"num_key_value_heads\": 8", "\"num_key_value_heads\": 5");
    assert!(model_from_config_str("x/config.json", &bad).is_err());
}

#[test]
fn files_are_read_and_missing_files_reported() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("config.json");
    std::fs::write(&p, LLAMA_8B).unwrap();
    assert_eq!(model_from_config_path(&p).unwrap().layers, 32);
    let e = model_from_config_path(&dir.path().join("nope.json")).unwrap_err();
    assert!(matches!(e, PlanError::Io { .. }), "{e}");
}
