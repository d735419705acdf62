//! The catalog: models, GPUs, machines and speculative drafts, kept as TOML
//! data under `catalog/` at the repository root. The files are compiled into
//! the binary (so `tpcomm plan` works anywhere) and can be replaced by a
//! directory given at run time. Every entry is validated when loaded.

mod parse;

use crate::error::{PlanError, Result};
use crate::fields::Fields;
use crate::latency::LatencyTable;
use parse::{entries, locate, parse_draft, parse_gpu, parse_machine, parse_model};
use serde::Serialize;
use std::path::Path;
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
}

/// What a GPU achieves in practice, measured (never fitted to a decode rate).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Efficiency {
    /// Bytes per second a streaming copy sustains (read + write counted).
    pub bandwidth_bytes_per_s: f64,
    /// Time per decoder layer beyond streaming its bytes at that bandwidth:
    /// kernel launches and tails, norms, small kernels; one token, TP 1.
    pub layer_us: f64,
    pub source: String,
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

#[derive(Clone, Debug, Default, Serialize)]
pub struct Catalog {
    pub models: Vec<Model>,
    pub gpus: Vec<Gpu>,
    pub machines: Vec<Machine>,
    pub drafts: Vec<Draft>,
}

pub const MODELS_FILE: &str = "models.toml";
pub const GPUS_FILE: &str = "gpus.toml";
pub const MACHINES_FILE: &str = "machines.toml";
pub const DRAFTS_FILE: &str = "drafts.toml";

const BUILTIN: [(&str, &str); 4] = [
    (MODELS_FILE, include_str!("../../../../catalog/models.toml")),
    (GPUS_FILE, include_str!("../../../../catalog/gpus.toml")),
    (
        MACHINES_FILE,
        include_str!("../../../../catalog/machines.toml"),
    ),
    (DRAFTS_FILE, include_str!("../../../../catalog/drafts.toml")),
];

fn names<T>(items: &[T], name: impl Fn(&T) -> &str) -> String {
    items.iter().map(name).collect::<Vec<_>>().join(", ")
}

/// Parses every `[[kind]]` entry of one file; a field error gets the line
/// of the field (or of its entry) in that file.
fn parse_all<T>(
    (file, text): (&str, &str),
    kind: &str,
    parse: impl Fn(&Fields) -> Result<T>,
) -> Result<Vec<T>> {
    entries(file, text, kind)?
        .iter()
        .enumerate()
        .map(|(i, t)| {
            Fields::new(file, i, kind, t)
                .and_then(|f| parse(&f))
                .map_err(|e| match e {
                    PlanError::Field {
                        file,
                        line: None,
                        entry,
                        field,
                        problem,
                    } => PlanError::Field {
                        line: locate(text, kind, i, Some(&field)),
                        file,
                        entry,
                        field,
                        problem,
                    },
                    other => other,
                })
        })
        .collect()
}

impl Catalog {
    /// The catalog compiled into this build (catalog/ at build time).
    pub fn builtin() -> Result<Catalog> {
        let [m, g, ma, d] = BUILTIN;
        Catalog::from_texts(
            (&format!("catalog/{}", m.0), m.1),
            (&format!("catalog/{}", g.0), g.1),
            (&format!("catalog/{}", ma.0), ma.1),
            (&format!("catalog/{}", d.0), d.1),
        )
    }

    /// Reads the four catalog files from a directory.
    pub fn from_dir(dir: &Path) -> Result<Catalog> {
        let read = |f: &str| -> Result<(String, String)> {
            let p = dir.join(f);
            let text = std::fs::read_to_string(&p).map_err(|source| PlanError::Io {
                path: p.display().to_string(),
                source,
            })?;
            Ok((p.display().to_string(), text))
        };
        let (m, g, ma, d) = (
            read(MODELS_FILE)?,
            read(GPUS_FILE)?,
            read(MACHINES_FILE)?,
            read(DRAFTS_FILE)?,
        );
        Catalog::from_texts((&m.0, &m.1), (&g.0, &g.1), (&ma.0, &ma.1), (&d.0, &d.1))
    }

    /// Parses and validates the four files; (file name for messages, text).
    pub fn from_texts(
        models: (&str, &str),
        gpus: (&str, &str),
        machines: (&str, &str),
        drafts: (&str, &str),
    ) -> Result<Catalog> {
        let cat = Catalog {
            models: parse_all(models, "model", parse_model)?,
            gpus: parse_all(gpus, "gpu", parse_gpu)?,
            machines: parse_all(machines, "machine", parse_machine)?,
            drafts: parse_all(drafts, "draft", parse_draft)?,
        };
        cat.check_references(models, gpus, machines, drafts)?;
        Ok(cat)
    }

    fn check_references(
        &self,
        models: (&str, &str),
        gpus: (&str, &str),
        machines: (&str, &str),
        drafts: (&str, &str),
    ) -> Result<()> {
        for (file, kind, all) in [
            (
                models,
                "model",
                self.models
                    .iter()
                    .map(|m| m.name.as_str())
                    .collect::<Vec<_>>(),
            ),
            (
                gpus,
                "gpu",
                self.gpus.iter().map(|g| g.name.as_str()).collect(),
            ),
            (
                machines,
                "machine",
                self.machines.iter().map(|m| m.name.as_str()).collect(),
            ),
            (
                drafts,
                "draft",
                self.drafts.iter().map(|d| d.name.as_str()).collect(),
            ),
        ] {
            for (i, n) in all.iter().enumerate() {
                if all[..i].iter().any(|m| m.eq_ignore_ascii_case(n)) {
                    return Err(PlanError::Field {
                        file: file.0.into(),
                        line: locate(file.1, kind, i, Some("name")),
                        entry: n.to_string(),
                        field: "name".into(),
                        problem: format!("a second {kind} has this name"),
                    });
                }
            }
        }
        for (i, m) in self.machines.iter().enumerate() {
            if self.gpu(&m.gpu).is_err() {
                return Err(PlanError::Field {
                    file: machines.0.into(),
                    line: locate(machines.1, "machine", i, Some("gpu")),
                    entry: m.name.clone(),
                    field: "gpu".into(),
                    problem: format!(
                        "no gpu named {:?} in the catalog; known: {}",
                        m.gpu,
                        names(&self.gpus, |g| &g.name)
                    ),
                });
            }
        }
        for (i, d) in self.drafts.iter().enumerate() {
            self.model(&d.target).map_err(|_| PlanError::Field {
                file: drafts.0.into(),
                line: locate(drafts.1, "draft", i, Some("target")),
                entry: d.name.clone(),
                field: "target".into(),
                problem: format!(
                    "no model named {:?} in the catalog; known: {}",
                    d.target,
                    names(&self.models, |m| &m.name)
                ),
            })?;
        }
        Ok(())
    }

    pub fn model(&self, name: &str) -> Result<&Model> {
        self.models
            .iter()
            .find(|m| m.name.eq_ignore_ascii_case(name))
            .ok_or_else(|| PlanError::UnknownName {
                kind: "model",
                name: name.into(),
                known: names(&self.models, |m| &m.name),
            })
    }

    pub fn gpu(&self, name: &str) -> Result<&Gpu> {
        self.gpus
            .iter()
            .find(|g| g.name.eq_ignore_ascii_case(name))
            .ok_or_else(|| PlanError::UnknownName {
                kind: "gpu",
                name: name.into(),
                known: names(&self.gpus, |g| &g.name),
            })
    }

    pub fn machine(&self, name: &str) -> Result<&Machine> {
        self.machines
            .iter()
            .find(|m| m.name.eq_ignore_ascii_case(name))
            .ok_or_else(|| PlanError::UnknownName {
                kind: "machine",
                name: name.into(),
                known: names(&self.machines, |m| &m.name),
            })
    }

    pub fn draft(&self, name: &str) -> Result<&Draft> {
        self.drafts
            .iter()
            .find(|d| d.name.eq_ignore_ascii_case(name))
            .ok_or_else(|| PlanError::UnknownName {
                kind: "draft",
                name: name.into(),
                known: names(&self.drafts, |d| &d.name),
            })
    }
}
