//! Reading catalog entries from TOML tables, field by field.

use super::types::{
    Attention, Draft, DraftShape, Efficiency, Gpu, GpuClass, Machine, Model, Moe, Published,
    PublishedEfficiency, Sourced, Tree,
};
use crate::error::{PlanError, Result};
use crate::fields::Fields;
use crate::latency::LatencyTable;
use toml::{Table, Value};
use tpcomm::ByteSize;

/// The `[[kind]]` tables of one file; nothing else may be at the top level.
pub(super) fn entries(file: &str, text: &str, kind: &str) -> Result<Vec<Table>> {
    let top: Table = text.parse().map_err(|e: toml::de::Error| PlanError::Toml {
        file: file.into(),
        detail: e.to_string(),
    })?;
    let mut out = Vec::new();
    for (key, value) in top {
        if key != kind {
            return Err(PlanError::Toml {
                file: file.into(),
                detail: format!(
                    "unexpected top-level key `{key}`: this file holds only [[{kind}]] entries"
                ),
            });
        }
        match value {
            Value::Array(items) => {
                for (i, item) in items.into_iter().enumerate() {
                    match item {
                        Value::Table(t) => out.push(t),
                        _ => {
                            return Err(PlanError::Toml {
                                file: file.into(),
                                detail: format!("{kind} #{} is not a table", i + 1),
                            })
                        }
                    }
                }
            }
            _ => {
                return Err(PlanError::Toml {
                    file: file.into(),
                    detail: format!("`{kind}` must be written as [[{kind}]] tables"),
                })
            }
        }
    }
    if out.is_empty() {
        return Err(PlanError::Toml {
            file: file.into(),
            detail: format!("no [[{kind}]] entries"),
        });
    }
    Ok(out)
}

pub(super) fn parse_model(f: &Fields) -> Result<Model> {
    let name = f.entry().to_string();
    let source = f.string("source")?;
    let _hf_id = f.opt_string("hf_id")?;
    let layers = f.pos("layers")?;
    let hidden = f.pos("hidden")?;
    let vocab = f.pos("vocab")?;
    let intermediate = f.pos("intermediate")?;
    let tie_embeddings = f.bool_or("tie_embeddings", false)?;
    let mtp_layers = f.count_or_zero("mtp_layers")?;
    let a = f.sub("attention")?.ok_or_else(|| {
        f.err(
            "attention",
            "missing (a table with kind = \"gqa\" or \"mla\")",
        )
    })?;
    let attention = match a.string("kind")?.as_str() {
        "gqa" => {
            let heads = a.pos("heads")?;
            let kv_heads = a.pos("kv_heads")?;
            let head_dim = match a.opt_pos("head_dim")? {
                Some(d) => d,
                None => {
                    if hidden % heads != 0 {
                        return Err(a.err(
                            "heads",
                            format!("hidden ({hidden}) is not a multiple of heads ({heads}); give head_dim"),
                        ));
                    }
                    hidden / heads
                }
            };
            if heads % kv_heads != 0 {
                return Err(a.err(
                    "kv_heads",
                    format!("heads ({heads}) must be a multiple of kv_heads ({kv_heads})"),
                ));
            }
            let explicit_dim = a.bool_or("head_dim_differs_from_hidden", false)?;
            let q_dim = heads
                .checked_mul(head_dim)
                .ok_or_else(|| a.err("head_dim", "heads x head_dim does not fit in 64 bits"))?;
            if q_dim != hidden && !explicit_dim {
                return Err(a.err(
                    "head_dim",
                    format!(
                        "heads x head_dim = {q_dim} but hidden = {hidden}; if that is intended (as in Qwen3), set head_dim_differs_from_hidden = true"
                    ),
                ));
            }
            let qkv_bias = a.bool_or("qkv_bias", false)?;
            let qk_norm = a.bool_or("qk_norm", false)?;
            a.finish()?;
            Attention::Gqa {
                heads,
                kv_heads,
                head_dim,
                qkv_bias,
                qk_norm,
            }
        }
        "mla" => {
            let at = Attention::Mla {
                heads: a.pos("heads")?,
                q_lora_rank: a.opt_pos("q_lora_rank")?,
                kv_lora_rank: a.pos("kv_lora_rank")?,
                qk_nope_head_dim: a.pos("qk_nope_head_dim")?,
                qk_rope_head_dim: a.pos("qk_rope_head_dim")?,
                v_head_dim: a.pos("v_head_dim")?,
            };
            a.finish()?;
            at
        }
        other => {
            return Err(a.err(
                "kind",
                format!("unknown attention kind {other:?} (use \"gqa\" or \"mla\")"),
            ))
        }
    };
    let moe = match f.sub("moe")? {
        None => None,
        Some(m) => {
            let moe = Moe {
                experts: m.pos("experts")?,
                active: m.pos("active")?,
                shared: m.count_or_zero("shared")?,
                expert_intermediate: m.pos("expert_intermediate")?,
                dense_layers: m.count_or_zero("dense_layers")?,
                router_bias: m.bool_or("router_bias", false)?,
            };
            if moe.active > moe.experts {
                return Err(m.err(
                    "active",
                    format!(
                        "{} active experts but only {} experts",
                        moe.active, moe.experts
                    ),
                ));
            }
            if moe.dense_layers >= layers {
                return Err(m.err(
                    "dense_layers",
                    format!(
                        "{} dense layers leaves no MoE layer of {layers}",
                        moe.dense_layers
                    ),
                ));
            }
            m.finish()?;
            Some(moe)
        }
    };
    let published = match f.sub("published")? {
        None => None,
        Some(p) => {
            let pb = Published {
                total_params: p.opt_pos("total_params")?,
                active_params: p.opt_pos("active_params")?,
                tolerance_pct: p.pos_f64("tolerance_pct")?,
                source: p.string("source")?,
            };
            if let (Some(t), Some(a)) = (pb.total_params, pb.active_params) {
                if a > t {
                    return Err(p.err("active_params", "larger than total_params"));
                }
            }
            p.finish()?;
            Some(pb)
        }
    };
    f.finish()?;
    let m = Model {
        name,
        source,
        layers,
        hidden,
        vocab,
        intermediate,
        tie_embeddings,
        attention,
        moe,
        mtp_layers,
        published,
    };
    // Every count the planner takes from this shape must fit in 64 bits.
    crate::arch::model_params(&m).map_err(|e| f.err("layers", e.to_string()))?;
    Ok(m)
}

pub(super) fn parse_gpu(f: &Fields) -> Result<Gpu> {
    let mib = f.pos("memory_mib")?;
    let memory = ByteSize::mib(1)
        .checked_mul(mib)
        .map_err(|_| f.err("memory_mib", format!("{mib} MiB does not fit in 64 bits")))?;
    let measured = match f.sub("measured")? {
        None => None,
        Some(m) => {
            let e = Efficiency {
                bandwidth_bytes_per_s: m.pos_f64("bandwidth_gb_s")? * 1e9,
                layer_us: m.nonneg_f64("layer_us")?,
                layer_us_for_class: m.bool_or("layer_us_for_class", false)?,
                source: m.string("source")?,
            };
            m.finish()?;
            Some(e)
        }
    };
    let published = match f.sub("published")? {
        None => None,
        Some(p) => {
            let e = parse_published(&p)?;
            p.finish()?;
            Some(e)
        }
    };
    let class = match (f.opt_string("class")?, f.opt_string("class_source")?) {
        (None, None) => None,
        (Some(name), Some(source)) => Some(GpuClass { name, source }),
        (Some(_), None) => {
            return Err(f.err(
                "class",
                "a class needs its source: add class_source (why this GPU is that chip)",
            ))
        }
        (None, Some(_)) => {
            return Err(f.err(
                "class_source",
                "a source without its class: add class or remove class_source",
            ))
        }
    };
    if let Some(m) = &measured {
        if m.layer_us_for_class && class.is_none() {
            return Err(f.err(
                "measured.layer_us_for_class",
                "this GPU has no class: add class and class_source, or remove layer_us_for_class",
            ));
        }
    }
    let g = Gpu {
        name: f.entry().to_string(),
        memory,
        memory_source: f.string("memory_source")?,
        bandwidth_bytes_per_s: f.pos_f64("bandwidth_gb_s")? * 1e9,
        bf16_flops_per_s: f.pos_f64("bf16_dense_tflops")? * 1e12,
        source: f.string("source")?,
        measured,
        published,
        class,
        class_layer: None,
    };
    for (field, x) in [
        ("bandwidth_gb_s", g.bandwidth_bytes_per_s),
        ("bf16_dense_tflops", g.bf16_flops_per_s),
    ] {
        if !x.is_finite() {
            return Err(f.err(field, "is too large"));
        }
    }
    if let Some(m) = &g.measured {
        if m.bandwidth_bytes_per_s > g.bandwidth_bytes_per_s {
            return Err(f.err(
                "measured.bandwidth_gb_s",
                format!(
                    "{} GB/s is above the datasheet's {} GB/s",
                    m.bandwidth_bytes_per_s / 1e9,
                    g.bandwidth_bytes_per_s / 1e9
                ),
            ));
        }
    }
    let published_bw = g
        .published
        .as_ref()
        .and_then(|p| p.bandwidth_bytes_per_s.as_ref());
    if let Some(b) = published_bw {
        if b.value > g.bandwidth_bytes_per_s {
            return Err(f.err(
                "published.bandwidth_gb_s",
                format!(
                    "{} GB/s is above the datasheet's {} GB/s",
                    b.value / 1e9,
                    g.bandwidth_bytes_per_s / 1e9
                ),
            ));
        }
    }
    f.finish()?;
    Ok(g)
}

/// Largest per-kernel cost accepted: a launch costs microseconds, not
/// milliseconds; anything larger is a unit mistake.
const MAX_KERNEL_US: f64 = 1000.0;

/// `[gpu.published]`: `bandwidth_gb_s` with `bandwidth_source`, and/or
/// `kernel_us` with `kernel_source`; each figure needs its source and the
/// block at least one figure.
fn parse_published(p: &Fields) -> Result<PublishedEfficiency> {
    let pair = |value: &str, source: &str| -> Result<Option<Sourced>> {
        match (p.has(value), p.has(source)) {
            (false, false) => Ok(None),
            (true, false) => Err(p.err(
                value,
                format!("a published figure needs its source: add {source}"),
            )),
            (false, true) => Err(p.err(
                source,
                format!("a source without its figure: add {value} or remove {source}"),
            )),
            (true, true) => Ok(Some(Sourced {
                value: p.pos_f64(value)?,
                source: p.string(source)?,
            })),
        }
    };
    let bandwidth = pair("bandwidth_gb_s", "bandwidth_source")?.map(|mut s| {
        s.value *= 1e9;
        s
    });
    if let Some(b) = &bandwidth {
        if !b.value.is_finite() {
            return Err(p.err("bandwidth_gb_s", "is too large"));
        }
    }
    let kernel = pair("kernel_us", "kernel_source")?;
    if let Some(k) = &kernel {
        if k.value > MAX_KERNEL_US {
            return Err(p.err(
                "kernel_us",
                format!(
                    "{} us per kernel is beyond any launch cost (at most {MAX_KERNEL_US} us; is it in microseconds?)",
                    k.value
                ),
            ));
        }
    }
    if bandwidth.is_none() && kernel.is_none() {
        return Err(p.err(
            "bandwidth_gb_s",
            "an empty [gpu.published] block: give bandwidth_gb_s and/or kernel_us, each with its source, or remove the block",
        ));
    }
    Ok(PublishedEfficiency {
        bandwidth_bytes_per_s: bandwidth,
        kernel_us: kernel,
    })
}

pub(super) fn parse_machine(f: &Fields) -> Result<Machine> {
    let name = f.entry().to_string();
    let gpu = f.string("gpu")?;
    let count = f.pos("count")?;
    let link = f.string("link")?;
    let source = f.string("source")?;
    let mut tables = Vec::new();
    for (i, t) in f.tables("allreduce")?.into_iter().enumerate() {
        let tf = f.child(&format!("allreduce[{i}]"), t);
        let table_name = tf.string("name")?;
        let table_source = tf.string("source")?;
        let mut points = Vec::new();
        for (j, row) in tf.tables("rows")?.into_iter().enumerate() {
            let rf = tf.child(&format!("rows[{j}]"), row);
            points.push((rf.bytes("bytes")?, rf.pos_f64("us")?));
            rf.finish()?;
        }
        tf.finish()?;
        let table = LatencyTable::new(format!("{name}/{table_name}"), points)
            .map_err(|e| tf.err("rows", e.to_string()))?;
        tables.push(table.with_source(table_source));
    }
    f.finish()?;
    Ok(Machine {
        name,
        gpu,
        count,
        link,
        source,
        tables,
    })
}

pub(super) fn parse_draft(f: &Fields) -> Result<Draft> {
    let name = f.entry().to_string();
    let target = f.string("target")?;
    let source = f.string("source")?;
    let shape = match f.string("kind")?.as_str() {
        "eagle3" => {
            let s = DraftShape::Eagle3 {
                layers: f.pos("layers")?,
                hidden: f.pos("hidden")?,
                heads: f.pos("heads")?,
                kv_heads: f.pos("kv_heads")?,
                head_dim: f.pos("head_dim")?,
                intermediate: f.pos("intermediate")?,
                draft_vocab: f.pos("draft_vocab")?,
            };
            if let DraftShape::Eagle3 {
                heads, kv_heads, ..
            } = s
            {
                if heads % kv_heads != 0 {
                    return Err(f.err("kv_heads", "heads must be a multiple of kv_heads"));
                }
            }
            s
        }
        "mtp" => DraftShape::Mtp {
            layers: f.pos("layers")?,
        },
        other => {
            return Err(f.err(
                "kind",
                format!("unknown draft kind {other:?} (use \"eagle3\" or \"mtp\")"),
            ))
        }
    };
    let acceptance = f.pos_f64_list("acceptance")?;
    for (i, a) in acceptance.iter().enumerate() {
        if *a > 1.0 {
            return Err(f.err(
                &format!("acceptance[{i}]"),
                format!("{a} is not a probability in (0, 1]"),
            ));
        }
        if i > 0 && *a > acceptance[i - 1] {
            return Err(f.err(
                &format!("acceptance[{i}]"),
                format!(
                    "{a} is larger than the rate before it ({}); per-position rates must not increase",
                    acceptance[i - 1]
                ),
            ));
        }
    }
    let acceptance_source = f.string("acceptance_source")?;
    let mut trees = Vec::new();
    if f.has("tree") {
        for (i, t) in f.tables("tree")?.into_iter().enumerate() {
            let tf = f.child(&format!("tree[{i}]"), t);
            let tree = Tree {
                steps: tf.pos("steps")?,
                topk: tf.pos("topk")?,
                draft_tokens: tf.pos("draft_tokens")?,
                accept_length: tf.pos_f64("accept_length")?,
                source: tf.string("source")?,
            };
            tree.check().map_err(|e| tf.err("accept_length", e))?;
            tf.finish()?;
            trees.push(tree);
        }
    }
    f.finish()?;
    Ok(Draft {
        name,
        target,
        shape,
        source,
        acceptance,
        acceptance_source,
        trees,
    })
}

/// The 1-based line of entry `index` (its `[[kind]]` header) in `text`, or,
/// given a field path such as `attention.heads` or `allreduce[0].rows[2].us`,
/// the first line of that entry which holds the path's keys in turn; the
/// entry's line when a key is not written (a missing field).
pub(crate) fn locate(text: &str, kind: &str, index: usize, field: Option<&str>) -> Option<usize> {
    let lines: Vec<&str> = text.lines().collect();
    let is_header = |l: &str| {
        let t = l.trim();
        t.strip_prefix("[[")
            .and_then(|r| r.split("]]").next())
            .is_some_and(|k| k.trim() == kind)
    };
    let start = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| is_header(l))
        .nth(index)?
        .0;
    let end = lines[start + 1..]
        .iter()
        .position(|l| is_header(l))
        .map_or(lines.len(), |p| start + 1 + p);
    let mut at = start;
    for comp in field.unwrap_or("").split('.').filter(|c| !c.is_empty()) {
        let (key, index) = match comp.split_once('[') {
            Some((k, rest)) => (k, rest.trim_end_matches(']').parse::<usize>().ok()),
            None => (comp, None),
        };
        let hits: Vec<usize> = (at..end).filter(|&i| holds_key(lines[i], key)).collect();
        let Some(&first) = hits.first() else {
            return Some(at + 1);
        };
        at = match index {
            // An array of tables: the k-th `[[... .key]]` header.
            Some(k) if hits.len() > k => hits[k],
            // An array written one element per line after `key = [`.
            Some(k) if !lines[first].contains(']') && first + 1 + k < end => first + 1 + k,
            _ => first,
        };
    }
    Some(at + 1)
}

/// Whether `line` writes `key` as a key: `key =`, `{ key =`, `, key =`, or
/// a table header `[... .key]`, outside a comment.
fn holds_key(line: &str, key: &str) -> bool {
    let code = line.split('#').next().unwrap_or("");
    let mut from = 0;
    while let Some(p) = code[from..].find(key) {
        let i = from + p;
        let before = code[..i].chars().next_back();
        let after = code[i + key.len()..].trim_start().chars().next();
        let starts = matches!(before, None | Some(' ' | '\t' | '{' | ',' | '.' | '['));
        if starts && matches!(after, Some('=' | ']')) {
            return true;
        }
        from = i + key.len();
    }
    false
}
