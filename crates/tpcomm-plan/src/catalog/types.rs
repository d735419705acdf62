//! What the catalog holds: models, GPUs, machines and drafts, as the
//! planners read them (parse.rs makes them from the TOML files).

use crate::latency::LatencyTable;
use serde::Serialize;
use tpcomm::ByteSize;

/// How a model stores attention keys and values.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Attention {
    /// Grouped-query (or multi-head when kv_heads == heads) attention.
    Gqa {
        heads: u64,
        kv_heads: u64,
        head_dim: u64,
        /// Biases on the q, k and v projections (Qwen2 family).
        qkv_bias: bool,
        /// RMSNorm on q and k per head (Qwen3 family).
        qk_norm: bool,
    },
    /// Multi-head latent attention (DeepSeek-V2/V3, Kimi K2): the cache holds
    /// one compressed latent plus the decoupled RoPE key per token and layer.
    Mla {
        heads: u64,
        /// None when queries are not low-rank compressed.
        q_lora_rank: Option<u64>,
        kv_lora_rank: u64,
        qk_nope_head_dim: u64,
        qk_rope_head_dim: u64,
        v_head_dim: u64,
    },
}

impl Attention {
    pub fn heads(&self) -> u64 {
        match self {
            Attention::Gqa { heads, .. } | Attention::Mla { heads, .. } => *heads,
        }
    }
}

/// Mixture-of-experts shape. Layers `0..dense_layers` use the dense MLP.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Moe {
    pub experts: u64,
    pub active: u64,
    pub shared: u64,
    pub expert_intermediate: u64,
    pub dense_layers: u64,
    /// A per-expert routing bias (DeepSeek-V3's aux-loss-free balancing).
    pub router_bias: bool,
}

/// A published figure to check the architecture against.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Published {
    pub total_params: Option<u64>,
    pub active_params: Option<u64>,
    /// How far (in percent) a count computed from the architecture may be
    /// from the published one; published counts are rounded ("671B", "1T").
    pub tolerance_pct: f64,
    pub source: String,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Model {
    pub name: String,
    pub source: String,
    pub layers: u64,
    pub hidden: u64,
    pub vocab: u64,
    /// Width of the dense MLP (all layers of a dense model, the first
    /// `moe.dense_layers` of an MoE model).
    pub intermediate: u64,
    pub tie_embeddings: bool,
    pub attention: Attention,
    pub moe: Option<Moe>,
    /// Multi-token-prediction layers shipped with the checkpoint (not part of
    /// the main model's count; usable as a draft).
    pub mtp_layers: u64,
    pub published: Option<Published>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Gpu {
    pub name: String,
    /// Total memory as the device reports it (nvidia-smi's MiB).
    pub memory: ByteSize,
    /// Where the memory figure comes from.
    pub memory_source: String,
    /// Datasheet memory bandwidth, bytes per second.
    pub bandwidth_bytes_per_s: f64,
    /// Dense (no sparsity) bf16 tensor-core peak, FLOP per second.
    pub bf16_flops_per_s: f64,
    pub source: String,
    /// Measured efficiencies, when someone measured them.
    pub measured: Option<Efficiency>,
    /// Efficiencies taken from publications (`[gpu.published]`), each
    /// figure with its source; used where there is no measured block.
    pub published: Option<PublishedEfficiency>,
    /// The chip class this GPU belongs to (`class`, with `class_source`
    /// saying why), e.g. the H100, H200 and H20 are all GH100 parts.
    pub class: Option<GpuClass>,
    /// A per-layer cost measured on another GPU of the same class, which
    /// this GPU uses when it has no `[gpu.measured]` block of its own; filled
    /// in when the catalog is loaded (never written in the TOML).
    pub class_layer: Option<ClassLayerCost>,
}

/// A chip class (one die, cut down or paired with other memory), and why
/// the GPU is counted in it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GpuClass {
    pub name: String,
    pub source: String,
}

/// A per-layer cost measured on one GPU of a class and applied to another
/// GPU of the class that has no measurement of its own.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ClassLayerCost {
    pub class: String,
    /// The catalog GPU it was measured on.
    pub measured_on: String,
    pub layer_us: f64,
    /// The measurement's own source.
    pub source: String,
}

/// What a GPU achieves in practice, measured (never fitted to a decode rate).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Efficiency {
    /// Bytes per second a streaming copy sustains (read + write counted).
    pub bandwidth_bytes_per_s: f64,
    /// Time per decoder layer beyond streaming its bytes at that bandwidth:
    /// kernel launches and tails, norms, small kernels; one token, TP 1.
    pub layer_us: f64,
    /// Whether `layer_us` stands for the GPU's whole class
    /// (`layer_us_for_class`): the other GPUs of the class without a
    /// measurement of their own then use it. The bandwidth never does (memory
    /// differs within a class).
    pub layer_us_for_class: bool,
    pub source: String,
}

/// A figure somebody else measured and published, with what exactly was
/// measured and where (never fitted to a decode rate).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Sourced {
    pub value: f64,
    pub source: String,
}

/// What a GPU achieves according to published measurements: either figure
/// may be missing (no publication found), and each carries its own source.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PublishedEfficiency {
    /// Bytes per second a published streaming benchmark sustained.
    pub bandwidth_bytes_per_s: Option<Sourced>,
    /// Microseconds one small kernel costs beyond its memory traffic (launch,
    /// ramp-up and drain; in a CUDA graph where the source says so).
    pub kernel_us: Option<Sourced>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Machine {
    pub name: String,
    pub gpu: String,
    pub count: u64,
    pub link: String,
    pub source: String,
    pub tables: Vec<LatencyTable>,
}

/// How a draft is shaped.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum DraftShape {
    /// An EAGLE-3 head: `layers` decoder layers whose attention reads the
    /// token embedding concatenated with the fused target features (2 x hidden
    /// input), a 3 x hidden -> hidden fusion layer and its own LM head over a
    /// reduced vocabulary. It shares the target's token embedding.
    Eagle3 {
        layers: u64,
        hidden: u64,
        heads: u64,
        kv_heads: u64,
        head_dim: u64,
        intermediate: u64,
        draft_vocab: u64,
    },
    /// Multi-token prediction: `layers` copies of a target decoder layer plus a
    /// 2 x hidden -> hidden projection each; embedding and head are shared.
    Mtp { layers: u64 },
}

/// A draft tree (SGLang's EAGLE settings) with its measured acceptance length.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Tree {
    /// Draft forwards per cycle (`--speculative-num-steps`).
    pub steps: u64,
    /// Candidates kept per step (`--speculative-eagle-topk`).
    pub topk: u64,
    /// Tokens the target verifies, the root included
    /// (`--speculative-num-draft-tokens`; steps + 1 for a chain).
    pub draft_tokens: u64,
    /// Average tokens per cycle, the bonus token included (tau).
    pub accept_length: f64,
    pub source: String,
}

impl Tree {
    /// Whether the shape is possible and the acceptance length fits it.
    pub fn check(&self) -> std::result::Result<(), String> {
        if self.steps == 0 || self.topk == 0 {
            return Err("steps and topk must be at least 1".into());
        }
        if self.steps > 64 || self.topk > 64 {
            return Err(format!(
                "steps {} and topk {} must be at most 64",
                self.steps, self.topk
            ));
        }
        // At most 1 + topk + (steps - 1) x topk^2 candidate nodes (topk
        // children of each of the topk kept per step); at least 2 verified.
        let most = 1 + self.topk + (self.steps - 1) * self.topk * self.topk;
        if self.draft_tokens < 2 || self.draft_tokens > most {
            return Err(format!(
                "draft_tokens {} must lie in 2..={most} for steps {} and topk {}",
                self.draft_tokens, self.steps, self.topk
            ));
        }
        let deepest = (self.steps + 1).min(self.draft_tokens) as f64;
        if !(self.accept_length.is_finite()
            && self.accept_length >= 1.0
            && self.accept_length <= deepest)
        {
            return Err(format!(
                "accept_length {} must lie in 1..={deepest} (the bonus token plus at most one accepted token per step)",
                self.accept_length
            ));
        }
        Ok(())
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Draft {
    pub name: String,
    /// The catalog model this draft belongs to.
    pub target: String,
    pub shape: DraftShape,
    pub source: String,
    /// Per-position conditional acceptance rates a_1, a_2, ...: a_k is the
    /// probability that draft token k is accepted given tokens 1..k-1 were.
    pub acceptance: Vec<f64>,
    pub acceptance_source: String,
    /// Tree shapes with published acceptance lengths (`[[draft.tree]]`).
    pub trees: Vec<Tree>,
}
