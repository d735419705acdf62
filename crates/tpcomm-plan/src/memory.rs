//! The memory planner: per GPU, every term that takes memory before the KV
//! cache, and what is left for the cache in bytes and in tokens.

use crate::arch::{
    draft_arch, kv_bytes_per_token, model_params, weight_bytes_per_rank, KvType, QuantScope,
    WeightType,
};
use crate::catalog::{Attention, Draft, DraftShape, Model};
use crate::error::{PlanError, Result};
use serde::Serialize;
use tpcomm::ByteSize;

/// The planner's model of tpcomm's buffers (DESIGN.md, "The protocol" and
/// "Memory"): each rank's receive area holds one slot of the maximum message
/// size per peer, for each of the rotating epoch buffers, plus a small area
/// for flags and epoch counters. The communicator's own memory report is the
/// authority; pass its total with `--comm-bytes` when you have it.
pub const TPCOMM_EPOCH_BUFFERS: u64 = 3;
/// Flags, epoch counters and timeout state per rank (planner's allowance).
pub const TPCOMM_SIGNAL_BYTES: ByteSize = ByteSize::kib(64);

/// NCCL's default per-connection buffer for its Simple protocol
/// (NCCL_BUFFSIZE, 4 MiB, NCCL environment-variable documentation).
pub const NCCL_BUFFSIZE: ByteSize = ByteSize::mib(4);

/// tpcomm's buffer bytes on one rank for a given maximum message size.
pub fn tpcomm_buffer_bytes(world: u64, max_message: ByteSize) -> Result<ByteSize> {
    let slots = max_message.checked_mul(TPCOMM_EPOCH_BUFFERS * world.saturating_sub(1))?;
    Ok(slots.checked_add(TPCOMM_SIGNAL_BYTES)?)
}

/// An estimate of NCCL's buffers on one rank: for each channel, one
/// NCCL_BUFFSIZE receive buffer from each ring neighbour. Other protocols'
/// buffers and NCCL's internal allocations come on top; measure when it matters.
pub fn nccl_buffer_estimate(channels: u64) -> Result<ByteSize> {
    Ok(NCCL_BUFFSIZE.checked_mul(channels * 2)?)
}

/// Which communication buffers to reserve.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum CommChoice {
    Tpcomm {
        max_message: ByteSize,
    },
    Nccl {
        channels: u64,
    },
    /// tpcomm plus NCCL as its fallback (the usual deployment).
    Both {
        max_message: ByteSize,
        channels: u64,
    },
    /// A figure the user measured (e.g. the communicator's memory report).
    Bytes {
        bytes: ByteSize,
    },
}

#[derive(Clone, Debug)]
pub struct MemoryInput<'a> {
    pub model: &'a Model,
    pub draft: Option<&'a Draft>,
    pub tp: u64,
    pub gpu_memory: ByteSize,
    pub weights: WeightType,
    pub scope: QuantScope,
    /// Weight type of the draft (EAGLE heads ship in bf16; MTP layers are
    /// quantized like the target).
    pub draft_weights: WeightType,
    pub kv: KvType,
    pub comm: CommChoice,
    /// CUDA context, cuBLAS workspaces, allocator slack (estimate).
    pub runtime_reserve: ByteSize,
    /// Captured CUDA graphs (estimate).
    pub graph_reserve: ByteSize,
    /// Most tokens in one forward (the prefill chunk), for activations.
    pub max_batch_tokens: u64,
    /// Rows of logits kept at once (sequences sampled per step).
    pub logit_rows: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Term {
    pub name: String,
    pub bytes: ByteSize,
    pub how: String,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MemoryPlan {
    pub gpu_memory: ByteSize,
    pub terms: Vec<Term>,
    /// What the KV cache (target plus draft) gets.
    pub kv_budget: ByteSize,
    pub kv_per_token_target: ByteSize,
    pub kv_per_token_draft: ByteSize,
    pub kv_tokens: u64,
    pub kv_target: ByteSize,
    pub kv_draft: ByteSize,
}

fn activation_bytes(m: &Model, tp: u64, tokens: u64, logit_rows: u64) -> u64 {
    let qkv = match m.attention {
        Attention::Gqa {
            heads,
            kv_heads,
            head_dim,
            ..
        } => (heads + 2 * kv_heads) * head_dim,
        Attention::Mla {
            heads,
            kv_lora_rank,
            qk_nope_head_dim,
            qk_rope_head_dim,
            ..
        } => heads * (qk_nope_head_dim + qk_rope_head_dim) + kv_lora_rank + qk_rope_head_dim,
    };
    let mlp = match &m.moe {
        None => m.intermediate,
        Some(moe) => m
            .intermediate
            .max(moe.expert_intermediate * (moe.active + moe.shared)),
    };
    // Residual and normed input (whole), q/k/v and gate/up (sharded) in
    // bf16, plus f32 logits for the sampled rows (vocab-sharded).
    let per_token = 2 * m.hidden + qkv.div_ceil(tp) + 2 * mlp.div_ceil(tp);
    tokens * per_token * 2 + logit_rows * m.vocab.div_ceil(tp) * 4
}

pub fn plan_memory(inp: &MemoryInput) -> Result<MemoryPlan> {
    if inp.tp == 0 {
        return Err(PlanError::invalid(
            "tensor-parallel size",
            "must be at least 1",
        ));
    }
    let m = inp.model;
    let mut terms = Vec::new();
    terms.push(Term {
        name: "runtime reserve".into(),
        bytes: inp.runtime_reserve,
        how: "CUDA context, library workspaces, allocator slack (estimate; --runtime-reserve)"
            .into(),
    });
    let params = model_params(m);
    terms.push(Term {
        name: "target weights".into(),
        bytes: weight_bytes_per_rank(&params, inp.tp, inp.weights, inp.scope),
        how: format!(
            "{:.1}B params; {} on {}, the rest bf16; split over TP {}",
            params.total() as f64 / 1e9,
            inp.weights.describe(),
            match inp.scope {
                QuantScope::Experts => "routed experts",
                QuantScope::Linear => "all linear layers",
            },
            inp.tp
        ),
    });
    let (comm_bytes, comm_how) = match inp.comm {
        CommChoice::Tpcomm { max_message } => (
            tpcomm_buffer_bytes(inp.tp, max_message)?,
            format!(
                "tpcomm: {TPCOMM_EPOCH_BUFFERS} epochs x {} peers x {max_message} + {TPCOMM_SIGNAL_BYTES} flags",
                inp.tp - 1
            ),
        ),
        CommChoice::Nccl { channels } => (
            nccl_buffer_estimate(channels)?,
            format!("NCCL estimate: {channels} channels x 2 neighbours x NCCL_BUFFSIZE {NCCL_BUFFSIZE}"),
        ),
        CommChoice::Both {
            max_message,
            channels,
        } => (
            tpcomm_buffer_bytes(inp.tp, max_message)?
                .checked_add(nccl_buffer_estimate(channels)?)?,
            format!(
                "tpcomm ({TPCOMM_EPOCH_BUFFERS} x {} x {max_message} + {TPCOMM_SIGNAL_BYTES}) + NCCL estimate ({channels} x 2 x {NCCL_BUFFSIZE})",
                inp.tp - 1
            ),
        ),
        CommChoice::Bytes { bytes } => (bytes, "given with --comm-bytes".into()),
    };
    terms.push(Term {
        name: "communication buffers".into(),
        bytes: if inp.tp == 1 {
            ByteSize::ZERO
        } else {
            comm_bytes
        },
        how: if inp.tp == 1 {
            "none at TP 1".into()
        } else {
            comm_how
        },
    });
    terms.push(Term {
        name: "CUDA graphs".into(),
        bytes: inp.graph_reserve,
        how: "captured graphs' private memory (estimate; --graph-reserve)".into(),
    });
    terms.push(Term {
        name: "activations".into(),
        bytes: ByteSize::b(activation_bytes(
            m,
            inp.tp,
            inp.max_batch_tokens,
            inp.logit_rows,
        )),
        how: format!(
            "{} tokens x (2 x hidden + qkv/TP + 2 x mlp/TP) x 2 B + {} logit rows x vocab/TP x 4 B",
            inp.max_batch_tokens, inp.logit_rows
        ),
    });
    let kv_per_token_target = kv_bytes_per_token(m, inp.tp, inp.kv)?;
    let mut kv_per_token_draft = ByteSize::ZERO;
    if let Some(d) = inp.draft {
        let a = draft_arch(d, m, inp.tp, inp.kv)?;
        let scope = match d.shape {
            DraftShape::Mtp { .. } => inp.scope,
            DraftShape::Eagle3 { .. } => QuantScope::Linear,
        };
        terms.push(Term {
            name: "draft weights".into(),
            bytes: weight_bytes_per_rank(&a.params, inp.tp, inp.draft_weights, scope),
            how: format!(
                "{} ({:.2}B params, {})",
                d.name,
                a.params.total() as f64 / 1e9,
                inp.draft_weights.describe()
            ),
        });
        kv_per_token_draft = a.kv_per_token;
    }
    let mut left = inp.gpu_memory;
    for t in &terms {
        left = left
            .checked_sub(t.bytes)
            .map_err(|_| PlanError::DoesNotFit {
                term: t.name.clone(),
                needed: t.bytes,
                available: left,
                short: ByteSize::b(t.bytes.bytes() - left.bytes()),
                hint: "use more GPUs (--tp), a smaller weight type, or lower the estimates".into(),
            })?;
    }
    let per_token = kv_per_token_target.checked_add(kv_per_token_draft)?;
    let kv_tokens = left.div_floor(per_token)?;
    if kv_tokens == 0 {
        return Err(PlanError::DoesNotFit {
            term: "KV cache (one token)".into(),
            needed: per_token,
            available: left,
            short: ByteSize::b(per_token.bytes() - left.bytes()),
            hint: "nothing is left for the KV cache after the terms above".into(),
        });
    }
    Ok(MemoryPlan {
        gpu_memory: inp.gpu_memory,
        terms,
        kv_budget: left,
        kv_per_token_target,
        kv_per_token_draft,
        kv_tokens,
        kv_target: kv_per_token_target.checked_mul(kv_tokens)?,
        kv_draft: kv_per_token_draft.checked_mul(kv_tokens)?,
    })
}
