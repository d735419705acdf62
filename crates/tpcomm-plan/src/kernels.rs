//! How many GPU kernels one decode forward launches, counted from the
//! architecture: the per-kernel half of the decode-speed model (a per-kernel
//! cost times these counts is the time a forward spends beyond streaming its
//! bytes). The counts are a structural assumption, not a measurement and
//! never fitted to a decode rate: the operations a serving engine with fused
//! residual-add + RMSNorm kernels (SGLang, vLLM) launches per token, one
//! kernel each. A published cross-check: a Rust engine's Qwen3 decode path
//! lists about 11 kernels per layer (norm, Q/K/V GEMVs, attention, O GEMV,
//! residual add, norm, a 2-kernel MLP, residual add;
//! <https://susun-blog.com/blog/pegainfer-4-cuda-graph-part2>); the count
//! here for a Qwen3 dense layer is 11 as well. All-reduces (TP > 1) are not
//! counted: their latency model already holds their launch.

use crate::catalog::{Attention, Draft, DraftShape, Model};
use crate::ck::ck;
use crate::error::Result;

/// Kernels outside the decoder layers: embedding lookup, final norm, LM
/// head, sampling.
pub const OUTSIDE_LAYERS: u64 = 4;

/// Kernels of one attention block: input norm (fused with the previous
/// residual add), projections, rotary embedding, KV-cache write, attention,
/// output projection.
pub fn attention_kernels(a: &Attention) -> u64 {
    match a {
        // norm, fused QKV projection, [q/k norm], rotary, KV write,
        // attention, output projection.
        Attention::Gqa { qk_norm, .. } => 6 + u64::from(*qk_norm),
        // norm, down-projection(s), latent norm(s), [q up-projection],
        // absorbed key up-projection, rotary, KV write, attention, absorbed
        // value up-projection, output projection. With q_lora the q and kv
        // down-projections are one fused GEMM and each latent has its norm.
        Attention::Mla { q_lora_rank, .. } => match q_lora_rank {
            Some(_) => 11,
            None => 10,
        },
    }
}

/// Kernels of a dense MLP block: post-attention norm (fused with the
/// residual add), gate/up projection, SiLU-and-multiply, down projection.
pub const DENSE_MLP: u64 = 4;

/// Kernels of a mixture-of-experts block: post-attention norm, router
/// projection, top-k, token-to-expert sort, grouped gate/up GEMM,
/// SiLU-and-multiply, grouped down GEMM, weighted combine; shared experts
/// add their gate/up, activation, down and an add.
pub fn moe_kernels(shared: u64) -> u64 {
    8 + if shared > 0 { 4 } else { 0 }
}

/// Kernels of one decode forward of the target model (any number of tokens:
/// the count does not grow with them).
pub fn model_kernels(m: &Model) -> Result<u64> {
    let att = attention_kernels(&m.attention);
    let (dense, moe) = match &m.moe {
        Some(moe) => (moe.dense_layers, m.layers.saturating_sub(moe.dense_layers)),
        None => (m.layers, 0),
    };
    let moe_mlp = m.moe.as_ref().map_or(0, |x| moe_kernels(x.shared));
    (ck(dense) * (att + DENSE_MLP) + ck(moe) * (att + moe_mlp) + OUTSIDE_LAYERS)
        .get("the kernels of one forward")
}

/// Kernels of one draft forward (one draft step).
pub fn draft_kernels(d: &Draft, target: &Model) -> Result<u64> {
    match d.shape {
        // Per layer: hidden-state norm, then a dense Llama layer (no q/k
        // norm); per forward: the 3 x hidden -> hidden fusion and the
        // kernels outside the layers.
        DraftShape::Eagle3 { layers, .. } => {
            let per_layer =
                1 + attention_kernels(&Attention::Gqa {
                    heads: 1,
                    kv_heads: 1,
                    head_dim: 1,
                    qkv_bias: false,
                    qk_norm: false,
                }) + DENSE_MLP;
            (ck(layers) * per_layer + 1u64 + OUTSIDE_LAYERS).get("the kernels of one draft forward")
        }
        // Per layer: the embedding and hidden norms and the 2 x hidden ->
        // hidden projection, then a target decoder layer (MoE when the
        // target is).
        DraftShape::Mtp { layers } => {
            let mlp = target
                .moe
                .as_ref()
                .map_or(DENSE_MLP, |x| moe_kernels(x.shared));
            let per_layer = 3 + attention_kernels(&target.attention) + mlp;
            (ck(layers) * per_layer + OUTSIDE_LAYERS).get("the kernels of one draft forward")
        }
    }
}
