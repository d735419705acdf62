//! What a model's architecture implies: parameter counts, weight bytes per
//! GPU under tensor parallelism and quantization, KV-cache bytes per token,
//! and the bytes and FLOPs of one forward pass (the roofline's inputs).

use crate::catalog::types::{Attention, Draft, DraftShape, Model};
use crate::ck::{ck, Ck};
use crate::error::{PlanError, Result};
use serde::Serialize;
use tpcomm::ByteSize;

/// Storage type of quantized linear weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WeightType {
    Bf16,
    /// 1 byte per weight plus one f32 scale per 128 x 128 block
    /// (`FP8_BLOCK` weights share 4 scale bytes), the layout of DeepSeek-V3's
    /// released FP8 weights.
    Fp8,
    /// Half a byte per weight plus one 2-byte scale per group of
    /// `INT4_GROUP` weights (group-wise symmetric INT4, the layout of Kimi
    /// K2.5's released INT4 expert weights).
    Int4,
}

pub const FP8_BLOCK: u64 = 128 * 128;
pub const FP8_SCALE_BYTES: u64 = 4;
pub const INT4_GROUP: u64 = 32;
pub const INT4_SCALE_BYTES: u64 = 2;
/// Norms, embeddings, LM head, routers and activations stay in bf16.
pub const BF16_BYTES: u64 = 2;

impl WeightType {
    /// Exact bytes to store `n` weights of this type, scales included.
    pub fn bytes(self, n: u64) -> Result<u64> {
        self.bytes_ck(ck(n)).get("weight bytes")
    }

    fn bytes_ck(self, n: Ck) -> Ck {
        match self {
            WeightType::Bf16 => n * 2,
            WeightType::Fp8 => n + n.div_ceil(FP8_BLOCK) * FP8_SCALE_BYTES,
            WeightType::Int4 => n.div_ceil(2) + n.div_ceil(INT4_GROUP) * INT4_SCALE_BYTES,
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            WeightType::Bf16 => "bf16 (2 bytes/weight)",
            WeightType::Fp8 => "fp8 (1 byte/weight + one f32 scale per 128x128 block)",
            WeightType::Int4 => "int4 (0.5 byte/weight + one 2-byte scale per 32 weights)",
        }
    }
}

/// Which linear layers the chosen weight type applies to; the rest stay bf16.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum QuantScope {
    /// Routed experts only (how Kimi K2.5's INT4 checkpoint is quantized).
    Experts,
    /// Every linear layer inside the decoder layers.
    Linear,
}

/// KV-cache element type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum KvType {
    Bf16,
    Fp8,
}

impl KvType {
    pub fn bytes(self) -> u64 {
        match self {
            KvType::Bf16 => 2,
            KvType::Fp8 => 1,
        }
    }
}

/// Parameter counts by part, for the whole model (not per GPU).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Params {
    pub embedding: u64,
    pub lm_head: u64,
    pub norms: u64,
    /// Attention weights that are split across TP ranks.
    pub attention_sharded: u64,
    /// Attention weights every TP rank holds whole (MLA's down-projections
    /// to the q and kv latents, the latents' norms).
    pub attention_replicated: u64,
    pub dense_mlp: u64,
    pub router: u64,
    pub shared_experts: u64,
    pub routed_experts: u64,
    /// One routed expert (gate, up, down).
    pub expert: u64,
    pub moe_layers: u64,
    pub active_experts: u64,
}

impl Params {
    pub fn total(&self) -> Result<u64> {
        (ck(self.embedding)
            + self.lm_head
            + self.norms
            + self.attention_sharded
            + self.attention_replicated
            + self.dense_mlp
            + self.router
            + self.shared_experts
            + self.routed_experts)
            .get("the parameter count")
    }

    /// Parameters one token touches: everything but the routed experts it
    /// is not sent to.
    pub fn active(&self) -> Result<u64> {
        (ck(self.total()?) - self.routed_experts
            + ck(self.moe_layers) * self.active_experts * self.expert)
            .get("the active parameter count")
    }
}

/// Parameters of one attention block: (sharded, replicated).
fn attention_params(a: &Attention, hidden: u64, in_dim: u64) -> (Ck, Ck) {
    let (hidden, in_dim) = (ck(hidden), ck(in_dim));
    match *a {
        Attention::Gqa {
            heads,
            kv_heads,
            head_dim,
            qkv_bias,
            qk_norm,
        } => {
            let q = ck(heads) * head_dim;
            let kv = ck(kv_heads) * head_dim;
            let mut sharded = in_dim * (q + kv * 2) + q * hidden;
            if qkv_bias {
                sharded = sharded + q + kv * 2;
            }
            let replicated = ck(if qk_norm { 2 } else { 0 }) * head_dim;
            (sharded, replicated)
        }
        Attention::Mla {
            heads,
            q_lora_rank,
            kv_lora_rank,
            qk_nope_head_dim,
            qk_rope_head_dim,
            v_head_dim,
        } => {
            let qk = ck(qk_nope_head_dim) + qk_rope_head_dim;
            let (q_rep, q_sh) = match q_lora_rank {
                Some(r) => (in_dim * r + r, ck(r) * heads * qk),
                None => (ck(0), in_dim * heads * qk),
            };
            let kv_rep = in_dim * (ck(kv_lora_rank) + qk_rope_head_dim) + kv_lora_rank;
            let kv_sh = ck(kv_lora_rank) * heads * (ck(qk_nope_head_dim) + v_head_dim);
            let o = ck(heads) * v_head_dim * hidden;
            (q_sh + kv_sh + o, q_rep + kv_rep)
        }
    }
}

/// Parameter counts of a model; an error (never a wrapped count) when a
/// size is so large that a count overflows 64 bits, or when the shape is
/// inconsistent (more leading dense layers than layers).
pub fn model_params(m: &Model) -> Result<Params> {
    let h = ck(m.hidden);
    let layers = ck(m.layers);
    let (att_sh, att_rep) = attention_params(&m.attention, m.hidden, m.hidden);
    let what = |part: &str| format!("{}: the {part} parameter count", m.name);
    let embedding = (ck(m.vocab) * h).get(&what("embedding"))?;
    let mut p = Params {
        embedding,
        lm_head: if m.tie_embeddings { 0 } else { embedding },
        norms: (layers * 2 * h + h).get(&what("norm"))?,
        attention_sharded: (layers * att_sh).get(&what("attention"))?,
        attention_replicated: (layers * att_rep).get(&what("attention"))?,
        ..Params::default()
    };
    match &m.moe {
        None => p.dense_mlp = (layers * 3 * h * m.intermediate).get(&what("MLP"))?,
        Some(moe) => {
            if moe.dense_layers >= m.layers {
                return Err(PlanError::invalid(
                    "model",
                    format!(
                        "{}: {} leading dense layers leave no MoE layer of {}",
                        m.name, moe.dense_layers, m.layers
                    ),
                ));
            }
            let moe_layers = m.layers - moe.dense_layers;
            let expert = (h * 3 * moe.expert_intermediate).get(&what("expert"))?;
            p.dense_mlp = (ck(moe.dense_layers) * 3 * h * m.intermediate).get(&what("MLP"))?;
            p.router = (ck(moe_layers)
                * (h * moe.experts + if moe.router_bias { moe.experts } else { 0 }))
            .get(&what("router"))?;
            p.shared_experts =
                (ck(moe_layers) * moe.shared * expert).get(&what("shared expert"))?;
            p.routed_experts =
                (ck(moe_layers) * moe.experts * expert).get(&what("routed expert"))?;
            p.expert = expert;
            p.moe_layers = moe_layers;
            p.active_experts = moe.active;
        }
    }
    p.total()?;
    p.active()?;
    Ok(p)
}

/// Ranks must split attention heads evenly; KV heads are split when there
/// are at least `tp` of them and replicated (one per rank) when there are
/// fewer, as vLLM and SGLang do.
pub fn kv_heads_per_rank(heads: u64, kv_heads: u64, tp: u64) -> Result<u64> {
    if !heads.is_multiple_of(tp) {
        return Err(PlanError::invalid(
            "tensor-parallel size",
            format!("{heads} attention heads cannot be split evenly over {tp} ranks"),
        ));
    }
    if kv_heads >= tp {
        if !kv_heads.is_multiple_of(tp) {
            return Err(PlanError::invalid(
                "tensor-parallel size",
                format!("{kv_heads} KV heads cannot be split evenly over {tp} ranks"),
            ));
        }
        Ok(kv_heads / tp)
    } else if tp.is_multiple_of(kv_heads) {
        Ok(1)
    } else {
        Err(PlanError::invalid(
            "tensor-parallel size",
            format!("{tp} ranks is not a multiple of {kv_heads} KV heads, so they cannot be replicated evenly"),
        ))
    }
}

/// KV-cache elements per token per layer on one rank.
fn kv_elems_per_layer(a: &Attention, tp: u64) -> Result<u64> {
    Ok(match *a {
        Attention::Gqa {
            heads,
            kv_heads,
            head_dim,
            ..
        } => (ck(2) * kv_heads_per_rank(heads, kv_heads, tp)? * head_dim)
            .get("KV-cache elements per layer")?,
        // The latent and the RoPE key are shared by all heads, so every rank
        // caches them whole.
        Attention::Mla {
            heads,
            kv_lora_rank,
            qk_rope_head_dim,
            ..
        } => {
            kv_heads_per_rank(heads, heads, tp)?;
            (ck(kv_lora_rank) + qk_rope_head_dim).get("KV-cache elements per layer")?
        }
    })
}

/// KV-cache bytes one token takes on one rank (all layers).
pub fn kv_bytes_per_token(m: &Model, tp: u64, kv: KvType) -> Result<ByteSize> {
    Ok(ByteSize::b(
        (ck(m.layers) * kv_elems_per_layer(&m.attention, tp)? * kv.bytes())
            .get("KV-cache bytes per token")?,
    ))
}

/// Weight bytes on one rank. Expert parallelism is not modelled: each
/// expert is split across the TP ranks like every other linear layer.
pub fn weight_bytes_per_rank(
    p: &Params,
    tp: u64,
    wt: WeightType,
    scope: QuantScope,
) -> Result<ByteSize> {
    let lin = |n: Ck| match scope {
        QuantScope::Linear => wt.bytes_ck(n),
        QuantScope::Experts => WeightType::Bf16.bytes_ck(n),
    };
    let sharded = |n: u64| ck(n).div_ceil(tp);
    let bytes = (sharded(p.embedding) + sharded(p.lm_head) + p.norms + p.router) * BF16_BYTES
        + lin(sharded(p.attention_sharded))
        + lin(ck(p.attention_replicated))
        + lin(sharded(p.dense_mlp))
        + lin(sharded(p.shared_experts))
        + wt.bytes_ck(sharded(p.routed_experts));
    Ok(ByteSize::b(bytes.get("weight bytes per GPU")?))
}

/// Expected number of distinct experts `tokens` tokens are routed to in one
/// layer, each picking `active` of `experts` uniformly and independently.
pub fn expected_distinct_experts(experts: u64, active: u64, tokens: u64) -> f64 {
    if experts == 0 {
        return 0.0;
    }
    let miss = 1.0 - active as f64 / experts as f64;
    experts as f64 * (1.0 - miss.powi(i32::try_from(tokens).unwrap_or(i32::MAX)))
}

/// What one forward pass of `tokens` tokens costs one rank.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct ForwardCost {
    /// Bytes read from GPU memory (weights touched plus the KV cache read).
    pub bytes_read: f64,
    pub flops: f64,
}

/// Roofline inputs of one target forward over `tokens` new tokens attending
/// to `context` cached tokens, on one rank.
pub fn forward_cost(
    m: &Model,
    tp: u64,
    wt: WeightType,
    scope: QuantScope,
    kv: KvType,
    tokens: u64,
    context: u64,
) -> Result<ForwardCost> {
    let p = model_params(m)?;
    // Weights a forward touches: everything but untouched routed experts and
    // the embedding table (only `tokens` rows of it are read).
    let mut touched = p.clone();
    touched.embedding = 0;
    let mut distinct = 0.0;
    if let Some(moe) = &m.moe {
        distinct = expected_distinct_experts(moe.experts, moe.active, tokens);
        touched.routed_experts = 0;
    }
    let base = weight_bytes_per_rank(&touched, tp, wt, scope)?.bytes() as f64;
    let expert_bytes = wt.bytes(ck(p.expert).div_ceil(tp).get("an expert's weights")?)? as f64;
    let experts_read = distinct * expert_bytes * p.moe_layers as f64;
    let kv_read = context as f64 * kv_bytes_per_token(m, tp, kv)?.bytes() as f64;

    let matmul_params = (p.active()? - p.embedding) as f64 / tp as f64;
    let heads = m.attention.heads() as f64 / tp as f64;
    let att_dim = match m.attention {
        Attention::Gqa { head_dim, .. } => 2 * head_dim,
        Attention::Mla {
            kv_lora_rank,
            qk_rope_head_dim,
            ..
        } => 2 * kv_lora_rank + qk_rope_head_dim,
    } as f64;
    let flops = 2.0 * tokens as f64 * matmul_params
        + 2.0 * tokens as f64 * context as f64 * heads * att_dim * m.layers as f64;
    Ok(ForwardCost {
        bytes_read: base + experts_read + kv_read,
        flops,
    })
}

/// Draft parameters and per-token KV elements (whole model, before TP).
pub struct DraftArch {
    pub params: Params,
    pub layers: u64,
    pub hidden: u64,
    /// KV-cache bytes per token on one rank.
    pub kv_per_token: ByteSize,
}

pub fn draft_arch(d: &Draft, target: &Model, tp: u64, kv: KvType) -> Result<DraftArch> {
    let what = |part: &str| format!("draft {}: the {part} parameter count", d.name);
    match d.shape {
        DraftShape::Eagle3 {
            layers,
            hidden,
            heads,
            kv_heads,
            head_dim,
            intermediate,
            draft_vocab,
        } => {
            let att = Attention::Gqa {
                heads,
                kv_heads,
                head_dim,
                qkv_bias: false,
                qk_norm: false,
            };
            let in_dim = (ck(hidden) * 2).get(&what("attention"))?;
            let (sh, rep) = attention_params(&att, hidden, in_dim);
            let (l, h) = (ck(layers), ck(hidden));
            let params = Params {
                lm_head: (ck(draft_vocab) * h).get(&what("LM head"))?,
                // input, hidden-state and post-attention norms per layer + final.
                norms: (l * 3 * h + h).get(&what("norm"))?,
                attention_sharded: (l * sh).get(&what("attention"))?,
                attention_replicated: (l * rep + h * 3 * h).get(&what("attention"))?,
                dense_mlp: (l * 3 * h * intermediate).get(&what("MLP"))?,
                ..Params::default()
            };
            params.active()?;
            let kv_per_token = ByteSize::b(
                (l * 2 * kv_heads_per_rank(heads, kv_heads, tp)? * head_dim * kv.bytes())
                    .get("draft KV-cache bytes per token")?,
            );
            Ok(DraftArch {
                params,
                layers,
                hidden,
                kv_per_token,
            })
        }
        DraftShape::Mtp { layers } => {
            let t = model_params(target)?;
            let (att_sh, att_rep) =
                attention_params(&target.attention, target.hidden, target.hidden);
            let (l, h) = (ck(layers), ck(target.hidden));
            let mut params = Params {
                norms: (l * 4 * h).get(&what("norm"))?,
                attention_sharded: (l * att_sh).get(&what("attention"))?,
                attention_replicated: (l * att_rep).get(&what("attention"))?,
                dense_mlp: (l * 2 * h * h).get(&what("projection"))?,
                ..Params::default()
            };
            if let Some(moe) = &target.moe {
                let per_moe_layer = |n: u64| ck(n).div_floor(t.moe_layers);
                params.router = (l * per_moe_layer(t.router)).get(&what("router"))?;
                params.shared_experts =
                    (l * per_moe_layer(t.shared_experts)).get(&what("shared expert"))?;
                params.routed_experts = (l * moe.experts * t.expert).get(&what("routed expert"))?;
                params.expert = t.expert;
                params.moe_layers = layers;
                params.active_experts = moe.active;
            } else {
                params.dense_mlp = (ck(params.dense_mlp)
                    + l * ck(t.dense_mlp).div_floor(target.layers))
                .get(&what("MLP"))?;
            }
            params.active()?;
            let kv_per_token = ByteSize::b(
                (l * kv_elems_per_layer(&target.attention, tp)? * kv.bytes())
                    .get("draft KV-cache bytes per token")?,
            );
            Ok(DraftArch {
                params,
                layers,
                hidden: target.hidden,
                kv_per_token,
            })
        }
    }
}

/// Roofline inputs of one draft forward of `tokens` tokens on one rank.
pub fn draft_forward_cost(
    a: &DraftArch,
    tp: u64,
    wt: WeightType,
    scope: QuantScope,
    tokens: u64,
    context: u64,
) -> Result<ForwardCost> {
    let mut touched = a.params.clone();
    let mut experts_read = 0.0;
    if a.params.moe_layers > 0 {
        let experts = ck(a.params.routed_experts)
            .div_floor(a.params.expert)
            .div_floor(a.params.moe_layers)
            .get("draft experts")?;
        let distinct = expected_distinct_experts(experts, a.params.active_experts, tokens);
        experts_read = distinct
            * wt.bytes(ck(a.params.expert).div_ceil(tp).get("draft expert")?)? as f64
            * a.params.moe_layers as f64;
        touched.routed_experts = 0;
    }
    let base = weight_bytes_per_rank(&touched, tp, wt, scope)?.bytes() as f64;
    let kv_read = context as f64 * a.kv_per_token.bytes() as f64;
    Ok(ForwardCost {
        bytes_read: base + experts_read + kv_read,
        flops: 2.0 * tokens as f64 * a.params.active()? as f64 / tp as f64,
    })
}
