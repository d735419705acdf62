//! The arguments of `tpcomm plan memory`, `spec` and `list` (clap).

use clap::{Args, Subcommand, ValueEnum};
use std::path::PathBuf;
use tpcomm::ByteSize;
use tpcomm_plan::catalog::Tree;

#[derive(Subcommand)]
pub enum PlanCommand {
    /// Memory per GPU: weights, communication buffers, CUDA graphs,
    /// activations, draft, and what is left for the KV cache.
    Memory(Box<MemoryArgs>),
    /// Speculative decoding: plain vs speculative tok/s over draft steps,
    /// the best setting, the break-even all-reduce latency.
    Spec(Box<SpecArgs>),
    /// List the catalog's models, GPUs, machines and drafts.
    List(CatalogArg),
}

#[derive(Args)]
pub struct CatalogArg {
    /// Read the catalog from this directory instead of the built-in copy.
    #[arg(long, value_name = "DIR")]
    pub(super) catalog: Option<PathBuf>,
}

#[derive(Clone, Copy, ValueEnum)]
pub(super) enum WeightsArg {
    Bf16,
    Fp8,
    Int4,
}

#[derive(Clone, Copy, ValueEnum)]
pub(super) enum ScopeArg {
    /// Routed experts only (dense models: every linear layer).
    Experts,
    /// Every linear layer of the decoder layers.
    Linear,
}

#[derive(Clone, Copy, ValueEnum)]
pub(super) enum KvArg {
    Bf16,
    Fp8,
}

#[derive(Clone, Copy, ValueEnum)]
pub(super) enum CommArg {
    /// tpcomm's buffers for --max-message.
    Tpcomm,
    /// An estimate of NCCL's buffers.
    Nccl,
    /// Both (tpcomm with NCCL as its fallback).
    Both,
}

#[derive(Clone, Copy, ValueEnum)]
pub(super) enum TransportArg {
    P2p,
    Host,
}

#[derive(Clone, Copy, ValueEnum)]
pub(super) enum InterpArg {
    LogLog,
    Linear,
}

#[derive(Args)]
pub struct Common {
    #[command(flatten)]
    pub(super) catalog: CatalogArg,
    /// Catalog model name (see `tpcomm plan list`).
    #[arg(long, conflicts_with = "config", required_unless_present = "config")]
    pub(super) model: Option<String>,
    /// A Hugging Face config.json instead of a catalog model.
    #[arg(long, value_name = "PATH")]
    pub(super) config: Option<PathBuf>,
    /// Catalog machine (gives the GPU, the GPU count and latency tables).
    #[arg(long)]
    pub(super) machine: Option<String>,
    /// Catalog GPU (when no machine is given).
    #[arg(long)]
    pub(super) gpu: Option<String>,
    /// Tensor-parallel size [default: the machine's GPU count, else 1].
    #[arg(long)]
    pub(super) tp: Option<u64>,
    /// Weight type of the quantized linear layers.
    #[arg(long, value_enum, default_value = "bf16")]
    pub(super) weights: WeightsArg,
    /// Which linear layers --weights applies to [default: experts for MoE
    /// models, linear for dense ones]; the rest stay bf16.
    #[arg(long, value_enum)]
    pub(super) quant_scope: Option<ScopeArg>,
    /// KV-cache element type.
    #[arg(long, value_enum, default_value = "bf16")]
    pub(super) kv: KvArg,
    /// Weight type of an EAGLE draft (MTP drafts follow --weights).
    #[arg(long, value_enum, default_value = "bf16")]
    pub(super) draft_weights: WeightsArg,
    /// Print JSON instead of text.
    #[arg(long)]
    pub(super) json: bool,
}

#[derive(Args)]
pub struct MemoryArgs {
    #[command(flatten)]
    pub(super) common: Common,
    /// Catalog draft (EAGLE-3 head or MTP layers) whose weights and KV cache
    /// to count.
    #[arg(long)]
    pub(super) draft: Option<String>,
    /// Memory of one GPU, overriding the catalog (e.g. "139 GiB").
    #[arg(long, conflicts_with = "from_probe")]
    pub(super) gpu_memory: Option<ByteSize>,
    /// Take the GPU memory from a `tpcomm probe --json` file (the smallest
    /// GPU's, as the CUDA driver reports it).
    #[arg(long, value_name = "FILE")]
    pub(super) from_probe: Option<PathBuf>,
    /// Communication buffers to reserve.
    #[arg(long, value_enum, default_value = "both")]
    pub(super) comm: CommArg,
    /// tpcomm's transport: p2p (NVLink/PCIe P2P) or host (pinned host memory).
    #[arg(long, value_enum, default_value = "p2p")]
    pub(super) transport: TransportArg,
    /// tpcomm's maximum message size (its buffers scale with it).
    #[arg(long, default_value = "8 MiB")]
    pub(super) max_message: ByteSize,
    /// NCCL channels for the NCCL estimate (1 to 64).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=64))]
    pub(super) nccl_channels: u64,
    /// Communication buffer bytes you measured (e.g. the communicator's
    /// memory report); replaces --comm.
    #[arg(long)]
    pub(super) comm_bytes: Option<ByteSize>,
    /// CUDA context, library workspaces, allocator slack (an estimate).
    #[arg(long, default_value = "1 GiB")]
    pub(super) runtime_reserve: ByteSize,
    /// Memory kept by captured CUDA graphs (an estimate).
    #[arg(long, default_value = "512 MiB")]
    pub(super) graph_reserve: ByteSize,
    /// Most tokens in one forward (prefill chunk), for activations (at least 1).
    #[arg(long, default_value_t = 8192, value_parser = clap::value_parser!(u64).range(1..))]
    pub(super) max_batch_tokens: u64,
    /// Rows of logits alive at once (sequences sampled per step; at least 1).
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..))]
    pub(super) logit_rows: u64,
}

#[derive(Args)]
pub struct SpecArgs {
    #[command(flatten)]
    pub(super) common: Common,
    /// Catalog draft (EAGLE-3 head or MTP layers; see `tpcomm plan list`).
    #[arg(long, required = true)]
    pub(super) draft: String,
    /// Tokens already in the KV cache, read by attention every forward.
    #[arg(long, default_value_t = 4096)]
    pub(super) context: u64,
    /// All-reduce table from `tpcomm bench --json`.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["table", "allreduce_us"])]
    pub(super) bench: Option<PathBuf>,
    /// Rows of --bench to use: algorithm.
    #[arg(long)]
    pub(super) algo: Option<String>,
    /// Rows of --bench to use: eager or graph.
    #[arg(long)]
    pub(super) mode: Option<String>,
    /// Rows of --bench to use: element type.
    #[arg(long, default_value = "bf16")]
    pub(super) dtype: String,
    /// A latency table of the catalog machine (see `tpcomm plan list`).
    #[arg(long, conflicts_with = "allreduce_us")]
    pub(super) table: Option<String>,
    /// A flat latency for every all-reduce of the cycle, in microseconds.
    #[arg(long)]
    pub(super) allreduce_us: Option<f64>,
    /// Plain decoding's own flat all-reduce latency, when its path differs
    /// from the speculative one [default: same as the cycle].
    #[arg(long, conflicts_with = "plain_table")]
    pub(super) plain_allreduce_us: Option<f64>,
    /// Plain decoding's own latency table of the catalog machine.
    #[arg(long)]
    pub(super) plain_table: Option<String>,
    /// How to read between table rows.
    #[arg(long, value_enum, default_value = "log-log")]
    pub(super) interp: InterpArg,
    /// Fit the per-layer overhead to this measured plain-decoding rate.
    #[arg(long, conflicts_with = "overhead_us")]
    pub(super) calibrate_tok_s: Option<f64>,
    /// Per-layer overhead added to the roofline, in microseconds [default:
    /// the catalog's: the GPU's measured figure, else one measured on
    /// another GPU of its chip class, else its published per-kernel cost
    /// times the kernels of a forward, else 0].
    #[arg(long)]
    pub(super) overhead_us: Option<f64>,
    /// Most draft steps to try [default: as many as the draft has
    /// acceptance rates; more than that is reported and capped].
    #[arg(long)]
    pub(super) max_steps: Option<u64>,
    /// A draft tree to plan besides the chains, with its measured acceptance
    /// length: STEPS,TOPK,DRAFT_TOKENS,ACCEPT_LENGTH (SGLang's
    /// --speculative-num-steps, --speculative-eagle-topk,
    /// --speculative-num-draft-tokens, and the average accepted tokens per
    /// cycle it reports, bonus token included). Repeatable.
    #[arg(long, value_name = "S,K,N,TAU", value_parser = parse_tree)]
    pub(super) tree: Vec<Tree>,
    /// Write latency.png and cycle.png here (the folder is made if missing).
    #[arg(long, value_name = "DIR")]
    pub(super) plot: Option<PathBuf>,
}

/// `--tree STEPS,TOPK,DRAFT_TOKENS,ACCEPT_LENGTH`.
pub(super) fn parse_tree(v: &str) -> std::result::Result<Tree, String> {
    let parts: Vec<&str> = v.split(',').map(str::trim).collect();
    let [s, k, n, tau] = parts.as_slice() else {
        return Err(format!(
            "{v:?}: give STEPS,TOPK,DRAFT_TOKENS,ACCEPT_LENGTH, e.g. 5,4,8,3.2"
        ));
    };
    let int = |x: &str, what: &str| {
        x.parse::<u64>()
            .map_err(|_| format!("{what} {x:?} is not a whole number"))
    };
    let tree = Tree {
        steps: int(s, "STEPS")?,
        topk: int(k, "TOPK")?,
        draft_tokens: int(n, "DRAFT_TOKENS")?,
        accept_length: tau
            .parse::<f64>()
            .map_err(|_| format!("ACCEPT_LENGTH {tau:?} is not a number"))?,
        source: "given with --tree".into(),
    };
    tree.check()?;
    Ok(tree)
}
