//! What a model's architecture implies: parameter counts, weight bytes per
//! GPU under tensor parallelism and quantization, KV-cache bytes per token,
//! and the bytes and FLOPs of one forward pass (the roofline's inputs).

use crate::catalog::{Attention, Draft, DraftShape, Model};
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
    pub fn bytes(self, n: u64) -> u64 {
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
    pub fn total(&self) -> u64 {
        self.embedding
            + self.lm_head
            + self.norms
            + self.attention_sharded
            + self.attention_replicated
            + self.dense_mlp
            + self.router
            + self.shared_experts
            + self.routed_experts
    }

    /// Parameters one token touches: everything but the routed experts it
    /// is not sent to.
    pub fn active(&self) -> u64 {
        self.total() - self.routed_experts + self.moe_layers * self.active_experts * self.expert
    }
}

/// Parameters of one attention block: (sharded, replicated).
fn attention_params(a: &Attention, hidden: u64, in_dim: u64) -> (u64, u64) {
    match *a {
        Attention::Gqa {
            heads,
            kv_heads,
            head_dim,
            qkv_bias,
            qk_norm,
        } => {
            let q = heads * head_dim;
            let kv = kv_heads * head_dim;
            let mut sharded = in_dim * (q + 2 * kv) + q * hidden;
            if qkv_bias {
                sharded += q + 2 * kv;
            }
            let replicated = if qk_norm { 2 * head_dim } else { 0 };
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
            let qk = qk_nope_head_dim + qk_rope_head_dim;
            let (q_rep, q_sh) = match q_lora_rank {
                Some(r) => (in_dim * r + r, r * heads * qk),
                None => (0, in_dim * heads * qk),
            };
            let kv_rep = in_dim * (kv_lora_rank + qk_rope_head_dim) + kv_lora_rank;
            let kv_sh = kv_lora_rank * heads * (qk_nope_head_dim + v_head_dim);
            let o = heads * v_head_dim * hidden;
            (q_sh + kv_sh + o, q_rep + kv_rep)
        }
    }
}

pub fn model_params(m: &Model) -> Params {
    let h = m.hidden;
    let (att_sh, att_rep) = attention_params(&m.attention, h, h);
    let mut p = Params {
        embedding: m.vocab * h,
        lm_head: if m.tie_embeddings { 0 } else { m.vocab * h },
        norms: m.layers * 2 * h + h,
        attention_sharded: m.layers * att_sh,
        attention_replicated: m.layers * att_rep,
        ..Params::default()
    };
    match &m.moe {
        None => p.dense_mlp = m.layers * 3 * h * m.intermediate,
        Some(moe) => {
            let moe_layers = m.layers - moe.dense_layers;
            let expert = 3 * h * moe.expert_intermediate;
            p.dense_mlp = moe.dense_layers * 3 * h * m.intermediate;
            p.router =
                moe_layers * (h * moe.experts + if moe.router_bias { moe.experts } else { 0 });
            p.shared_experts = moe_layers * moe.shared * expert;
            p.routed_experts = moe_layers * moe.experts * expert;
            p.expert = expert;
            p.moe_layers = moe_layers;
            p.active_experts = moe.active;
        }
    }
    p
}

/// Ranks must split attention heads evenly; KV heads are split when there
/// are at least `tp` of them and replicated (one per rank) when there are
/// fewer, as vLLM and SGLang do.
pub fn kv_heads_per_rank(heads: u64, kv_heads: u64, tp: u64) -> Result<u64> {
    if heads % tp != 0 {
        return Err(PlanError::invalid(
            "tensor-parallel size",
            format!("{heads} attention heads cannot be split evenly over {tp} ranks"),
        ));
    }
    if kv_heads >= tp {
        if kv_heads % tp != 0 {
            return Err(PlanError::invalid(
                "tensor-parallel size",
                format!("{kv_heads} KV heads cannot be split evenly over {tp} ranks"),
            ));
        }
        Ok(kv_heads / tp)
    } else if tp % kv_heads == 0 {
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
        } => 2 * kv_heads_per_rank(heads, kv_heads, tp)? * head_dim,
        // The latent and the RoPE key are shared by all heads, so every rank
        // caches them whole.
        Attention::Mla {
            heads,
            kv_lora_rank,
            qk_rope_head_dim,
            ..
        } => {
            kv_heads_per_rank(heads, heads, tp)?;
            kv_lora_rank + qk_rope_head_dim
        }
    })
}

/// KV-cache bytes one token takes on one rank (all layers).
pub fn kv_bytes_per_token(m: &Model, tp: u64, kv: KvType) -> Result<ByteSize> {
    Ok(ByteSize::b(
        m.layers * kv_elems_per_layer(&m.attention, tp)? * kv.bytes(),
    ))
}

/// Weight bytes on one rank. Expert parallelism is not modelled: each
/// expert is split across the TP ranks like every other linear layer.
pub fn weight_bytes_per_rank(p: &Params, tp: u64, wt: WeightType, scope: QuantScope) -> ByteSize {
    let lin = |n: u64| match scope {
        QuantScope::Linear => wt.bytes(n),
        QuantScope::Experts => WeightType::Bf16.bytes(n),
    };
    let sharded = |n: u64| n.div_ceil(tp);
    let bytes = BF16_BYTES * (sharded(p.embedding) + sharded(p.lm_head) + p.norms + p.router)
        + lin(sharded(p.attention_sharded))
        + lin(p.attention_replicated)
        + lin(sharded(p.dense_mlp))
        + lin(sharded(p.shared_experts))
        + wt.bytes(sharded(p.routed_experts));
    ByteSize::b(bytes)
}

/// Expected number of distinct experts `tokens` tokens are routed to in one
/// layer, each picking `active` of `experts` uniformly and independently.
pub fn expected_distinct_experts(experts: u64, active: u64, tokens: u64) -> f64 {
    let miss = 1.0 - active as f64 / experts as f64;
    experts as f64 * (1.0 - miss.powi(tokens as i32))
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
    let p = model_params(m);
    // Weights a forward touches: everything but untouched routed experts and
    // the embedding table (only `tokens` rows of it are read).
    let mut touched = p.clone();
    touched.embedding = 0;
    let mut distinct = 0.0;
    if let Some(moe) = &m.moe {
        distinct = expected_distinct_experts(moe.experts, moe.active, tokens);
        touched.routed_experts = 0;
    }
    let base = weight_bytes_per_rank(&touched, tp, wt, scope).bytes() as f64;
    let expert_bytes = wt.bytes(p.expert.div_ceil(tp)) as f64;
    let experts_read = distinct * expert_bytes * p.moe_layers as f64;
    let kv_read = (context * kv_bytes_per_token(m, tp, kv)?.bytes()) as f64;

    let matmul_params = (p.active() - p.embedding) as f64 / tp as f64;
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
            let (sh, rep) = attention_params(&att, hidden, 2 * hidden);
            let params = Params {
                lm_head: draft_vocab * hidden,
                // input, hidden-state and post-attention norms per layer + final.
                norms: layers * 3 * hidden + hidden,
                attention_sharded: layers * sh,
                attention_replicated: layers * rep + 3 * hidden * hidden,
                dense_mlp: layers * 3 * hidden * intermediate,
                ..Params::default()
            };
            let kv_per_token = ByteSize::b(
                layers * 2 * kv_heads_per_rank(heads, kv_heads, tp)? * head_dim * kv.bytes(),
            );
            Ok(DraftArch {
                params,
                layers,
                hidden,
                kv_per_token,
            })
        }
        DraftShape::Mtp { layers } => {
            let t = model_params(target);
            let per_layer = |n: u64| n / target.layers;
            let (att_sh, att_rep) =
                attention_params(&target.attention, target.hidden, target.hidden);
            let h = target.hidden;
            let mut params = Params {
                norms: layers * 4 * h,
                attention_sharded: layers * att_sh,
                attention_replicated: layers * att_rep,
                dense_mlp: layers * 2 * h * h,
                ..Params::default()
            };
            if let Some(moe) = &target.moe {
                let moe_layers = t.moe_layers;
                params.router = layers * (t.router / moe_layers);
                params.shared_experts = layers * (t.shared_experts / moe_layers);
                params.routed_experts = layers * moe.experts * t.expert;
                params.expert = t.expert;
                params.moe_layers = layers;
                params.active_experts = moe.active;
            } else {
                params.dense_mlp += layers * per_layer(t.dense_mlp);
            }
            let kv_per_token =
                ByteSize::b(layers * kv_elems_per_layer(&target.attention, tp)? * kv.bytes());
            Ok(DraftArch {
                params,
                layers,
                hidden: h,
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
) -> ForwardCost {
    let mut touched = a.params.clone();
    let mut experts_read = 0.0;
    if a.params.moe_layers > 0 {
        let distinct = expected_distinct_experts(
            a.params.routed_experts / (a.params.expert * a.params.moe_layers),
            a.params.active_experts,
            tokens,
        );
        experts_read =
            distinct * wt.bytes(a.params.expert.div_ceil(tp)) as f64 * a.params.moe_layers as f64;
        touched.routed_experts = 0;
    }
    let base = weight_bytes_per_rank(&touched, tp, wt, scope).bytes() as f64;
    let kv_read = (context * a.kv_per_token.bytes()) as f64;
    ForwardCost {
        bytes_read: base + experts_read + kv_read,
        flops: 2.0 * tokens as f64 * a.params.active() as f64 / tp as f64,
    }
}
