//! The memory planner: per GPU, every term that takes memory before the KV
//! cache, and what is left for the cache in bytes and in tokens.

use crate::arch::{
    draft_arch, kv_bytes_per_token, model_params, weight_bytes_per_rank, KvType, QuantScope,
    WeightType,
};
use crate::catalog::{Attention, Draft, DraftShape, Model};
use crate::ck::ck;
use crate::error::{PlanError, Result};
use serde::Serialize;
use tpcomm::plan_layout::{planned_report, PlannedTransport, DEFAULT_GRANULARITY};
use tpcomm::{ByteSize, Place};

/// NCCL's default per-connection buffer for its Simple protocol
/// (NCCL_BUFFSIZE, 4 MiB, NCCL environment-variable documentation).
pub const NCCL_BUFFSIZE: ByteSize = ByteSize::mib(4);

/// Which of tpcomm's GPU transports the buffers are for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum TpcommTransport {
    /// Peer-to-peer device memory (NVLink, PCIe P2P).
    #[default]
    P2p,
    /// Pinned host memory (no P2P), with the default delta kernel.
    Host,
}

/// tpcomm's device memory on one rank for a group of `world` ranks and
/// messages up to `max_message`: the library's own layout code
/// ([`tpcomm::plan_layout`]), rounded to the driver's allocation granularity
/// (2 MiB assumed), as free memory drops by. Returns the bytes and a line
/// saying how they were computed. At TP 1 there is no communicator.
pub fn tpcomm_buffer_bytes(
    transport: TpcommTransport,
    world: u64,
    max_message: ByteSize,
) -> Result<(ByteSize, String)> {
    if world <= 1 {
        return Ok((ByteSize::ZERO, "no communicator at TP 1".into()));
    }
    // Checked here, in the planner's words: the layout code's own check
    // would say "world size", which is no option of `tpcomm plan`.
    let max = tpcomm::transport::MAX_WORLD;
    let world_us = usize::try_from(world)
        .ok()
        .filter(|&w| w <= max)
        .ok_or_else(|| {
            PlanError::invalid(
                "tensor-parallel size (--tp)",
                format!(
                    "{world} ranks: tpcomm's GPU communicator takes 2 to {max}; give --tp {max} or fewer, or count only NCCL's buffers (--comm nccl) or bytes you measured (--comm-bytes)"
                ),
            )
        })?;
    let planned = match transport {
        TpcommTransport::P2p => PlannedTransport::P2p,
        TpcommTransport::Host => PlannedTransport::Host { processes: true },
    };
    let report = planned_report(
        planned,
        world_us,
        max_message.as_usize()?,
        DEFAULT_GRANULARITY,
        0,
    )?;
    let lines = report
        .lines
        .iter()
        .filter(|l| l.place == Place::Device)
        .map(|l| format!("{} {}", l.name, l.bytes))
        .collect::<Vec<_>>()
        .join(" + ");
    Ok((
        report.device_reserved(),
        format!(
            "tpcomm {} transport, {world} ranks, {max_message} max message (library layout code): {lines}, in {} granules",
            match transport {
                TpcommTransport::P2p => "P2P",
                TpcommTransport::Host => "host-memory",
            },
            ByteSize::from_usize(DEFAULT_GRANULARITY)
        ),
    ))
}

/// An estimate of NCCL's buffers on one rank: for each channel, one
/// NCCL_BUFFSIZE receive buffer from each ring neighbour. Other protocols'
/// buffers and NCCL's internal allocations come on top; measure when it matters.
pub fn nccl_buffer_estimate(channels: u64) -> Result<ByteSize> {
    let n = channels.checked_mul(2).ok_or_else(|| PlanError::Overflow {
        what: "the NCCL channel count".into(),
    })?;
    Ok(NCCL_BUFFSIZE.checked_mul(n)?)
}

/// Which communication buffers to reserve.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum CommChoice {
    Tpcomm {
        max_message: ByteSize,
        transport: TpcommTransport,
    },
    Nccl {
        channels: u64,
    },
    /// tpcomm plus NCCL as its fallback (the usual deployment).
    Both {
        max_message: ByteSize,
        transport: TpcommTransport,
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

fn activation_bytes(m: &Model, tp: u64, tokens: u64, logit_rows: u64) -> Result<u64> {
    let qkv = match m.attention {
        Attention::Gqa {
            heads,
            kv_heads,
            head_dim,
            ..
        } => (ck(heads) + ck(kv_heads) * 2) * head_dim,
        Attention::Mla {
            heads,
            kv_lora_rank,
            qk_nope_head_dim,
            qk_rope_head_dim,
            ..
        } => {
            ck(heads) * (ck(qk_nope_head_dim) + qk_rope_head_dim) + kv_lora_rank + qk_rope_head_dim
        }
    };
    let mlp = match &m.moe {
        None => ck(m.intermediate),
        Some(moe) => {
            let experts =
                (ck(moe.expert_intermediate) * (ck(moe.active) + moe.shared)).get("activations")?;
            ck(m.intermediate.max(experts))
        }
    };
    // Residual and normed input (whole), q/k/v and gate/up (sharded) in
    // bf16, plus f32 logits for the sampled rows (vocab-sharded).
    let per_token = ck(m.hidden) * 2 + qkv.div_ceil(tp) + mlp.div_ceil(tp) * 2;
    (ck(tokens) * per_token * 2 + ck(logit_rows) * ck(m.vocab).div_ceil(tp) * 4)
        .get("activation bytes (--max-batch-tokens, --logit-rows)")
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
    let params = model_params(m)?;
    terms.push(Term {
        name: "target weights".into(),
        bytes: weight_bytes_per_rank(&params, inp.tp, inp.weights, inp.scope)?,
        how: format!(
            "{:.1}B params; {} on {}, the rest bf16; split over TP {}",
            params.total()? as f64 / 1e9,
            inp.weights.describe(),
            match inp.scope {
                QuantScope::Experts => "routed experts",
                QuantScope::Linear => "all linear layers",
            },
            inp.tp
        ),
    });
    let nccl_how = |channels: u64| {
        format!("NCCL estimate: {channels} channels x 2 ring neighbours x NCCL_BUFFSIZE {NCCL_BUFFSIZE} (Simple protocol only; not computed from NCCL)")
    };
    let (comm_bytes, comm_how) = if inp.tp == 1 {
        (ByteSize::ZERO, "none at TP 1".to_string())
    } else {
        match inp.comm {
            CommChoice::Tpcomm {
                max_message,
                transport,
            } => tpcomm_buffer_bytes(transport, inp.tp, max_message)?,
            CommChoice::Nccl { channels } => (nccl_buffer_estimate(channels)?, nccl_how(channels)),
            CommChoice::Both {
                max_message,
                transport,
                channels,
            } => {
                let (t, how) = tpcomm_buffer_bytes(transport, inp.tp, max_message)?;
                (
                    t.checked_add(nccl_buffer_estimate(channels)?)?,
                    format!("{how}; plus {}", nccl_how(channels)),
                )
            }
            CommChoice::Bytes { bytes } => (bytes, "given with --comm-bytes".into()),
        }
    };
    terms.push(Term {
        name: "communication buffers".into(),
        bytes: comm_bytes,
        how: comm_how,
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
        )?),
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
            bytes: weight_bytes_per_rank(&a.params, inp.tp, inp.draft_weights, scope)?,
            how: format!(
                "{} ({:.2}B params, {})",
                d.name,
                a.params.total()? as f64 / 1e9,
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
                short: ByteSize::b(t.bytes.bytes().saturating_sub(left.bytes())),
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
            short: ByteSize::b(per_token.bytes().saturating_sub(left.bytes())),
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
