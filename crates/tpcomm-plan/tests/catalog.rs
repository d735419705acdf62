//! The catalog loads, its figures reproduce published ones, and every kind
//! of bad entry is rejected with the file, entry and field named.

mod common;
use common::*;
use tpcomm::ByteSize;
use tpcomm_plan::arch::{kv_bytes_per_token, model_params, KvType};
use tpcomm_plan::catalog::Catalog;
use tpcomm_plan::PlanError;

#[test]
fn builtin_catalog_has_the_required_entries() {
    let c = Catalog::builtin().unwrap();
    for m in [
        "kimi-k2.5",
        "deepseek-v3",
        "llama-3.1-8b",
        "llama-3.1-70b",
        "qwen3-32b",
        "qwen3-235b-a22b",
    ] {
        c.model(m).unwrap();
    }
    for g in [
        "h100-sxm",
        "h200-sxm",
        "b200",
        "rtx-pro-6000-blackwell",
        "rtx-4090",
        "rtx-5090",
        "l40s",
    ] {
        c.gpu(g).unwrap();
    }
    assert!(!c.machines.is_empty() && !c.drafts.is_empty());
    for m in &c.machines {
        assert!(!m.tables.is_empty() && m.tables.iter().all(|t| !t.source.is_empty()));
    }
}

/// Parameter counts computed from the architecture match the published
/// totals and active counts within each entry's stated tolerance.
#[test]
fn parameter_counts_match_published_figures() {
    let c = Catalog::builtin().unwrap();
    let mut checked = 0;
    for m in &c.models {
        let p = model_params(m).unwrap();
        let pb = m
            .published
            .as_ref()
            .expect("every catalog model has published figures");
        for (what, computed, published) in [
            ("total", p.total().unwrap(), pb.total_params),
            ("active", p.active().unwrap(), pb.active_params),
        ] {
            if let Some(published) = published {
                let off = 100.0 * (computed as f64 - published as f64).abs() / published as f64;
                assert!(
                    off <= pb.tolerance_pct,
                    "{} {what}: computed {computed}, published {published} ({off:.2}% > {}%)",
                    m.name,
                    pb.tolerance_pct
                );
                checked += 1;
            }
        }
    }
    assert!(checked >= 9, "only {checked} published figures checked");
}

/// The precise published counts: Llama-3.1-8B has 8.03B parameters and
/// DeepSeek-V3 671B (its report); both within 0.1% here.
#[test]
fn tight_parameter_counts() {
    let c = Catalog::builtin().unwrap();
    let l8 = model_params(c.model("llama-3.1-8b").unwrap())
        .unwrap()
        .total()
        .unwrap() as f64;
    assert!((l8 / 8.03e9 - 1.0).abs() < 1e-3, "{l8}");
    let ds = model_params(c.model("deepseek-v3").unwrap())
        .unwrap()
        .total()
        .unwrap() as f64;
    assert!((ds / 671e9 - 1.0).abs() < 1e-3, "{ds}");
}

/// KV bytes per token: MLA caches (d_c + d_h^R) = 4.5 x d_h = 576 elements
/// per layer (DeepSeek-V2 paper, Table 1, with d_h = 128); Llama-3.1-70B in
/// bf16 caches 2 x 80 layers x 8 KV heads x 128 x 2 bytes = 320 KiB.
#[test]
fn kv_bytes_per_token_match_published_formulas() {
    let c = Catalog::builtin().unwrap();
    let ds = c.model("deepseek-v3").unwrap();
    assert_eq!(
        kv_bytes_per_token(ds, 1, KvType::Bf16).unwrap(),
        ByteSize::b(61 * 576 * 2)
    );
    // MLA's latent is replicated: the same bytes on every rank at any TP.
    assert_eq!(
        kv_bytes_per_token(ds, 8, KvType::Bf16).unwrap(),
        ByteSize::b(61 * 576 * 2)
    );
    let l70 = c.model("llama-3.1-70b").unwrap();
    assert_eq!(
        kv_bytes_per_token(l70, 1, KvType::Bf16).unwrap(),
        ByteSize::kib(320)
    );
    // Split over 8 ranks: one KV head each.
    assert_eq!(
        kv_bytes_per_token(l70, 8, KvType::Bf16).unwrap(),
        ByteSize::kib(40)
    );
    assert_eq!(
        kv_bytes_per_token(l70, 8, KvType::Fp8).unwrap(),
        ByteSize::kib(20)
    );
    // Qwen3-235B has 4 KV heads: at TP 8 each rank holds one whole head (replicated).
    let q = c.model("qwen3-235b-a22b").unwrap();
    assert_eq!(
        kv_bytes_per_token(q, 8, KvType::Bf16).unwrap(),
        ByteSize::b(94 * 2 * 128 * 2)
    );
    assert!(kv_bytes_per_token(q, 3, KvType::Bf16).is_err());
}

fn field_error(e: PlanError) -> (String, String, String, String) {
    match e {
        PlanError::Field {
            file,
            entry,
            field,
            problem,
            ..
        } => (file, entry, field, problem),
        other => panic!("expected a field error, got: {other}"),
    }
}

fn error_line(e: &PlanError) -> Option<usize> {
    match e {
        PlanError::Field { line, .. } => *line,
        other => panic!("expected a field error, got: {other}"),
    }
}

/// 1-based line of the first line of `text` that starts with `prefix`
/// (after indentation).
fn line_of(text: &str, prefix: &str) -> usize {
    text.lines()
        .position(|l| l.trim_start().starts_with(prefix))
        .expect("prefix present")
        + 1
}

#[test]
fn field_errors_carry_the_line_of_the_field_or_entry() {
    // A bad value: the line that holds it.
    let bad = replace_once(
        MODELS,
        "layers = 32\nhidden = 4096\n",
        "layers = 32\nhidden = -4096\n",
    );
    let e = load(&bad, GPUS, MACHINES, DRAFTS).unwrap_err();
    let want = line_of(&bad, "hidden = -4096");
    assert_eq!(error_line(&e), Some(want));
    assert!(
        e.to_string().starts_with(&format!("models.toml:{want}: ")),
        "{e}"
    );
    // A nested table's field.
    let bad = replace_once(MODELS, "kv_heads = 4\n", "kv_heads = 4\nkv_haeds = 4\n");
    let e = load(&bad, GPUS, MACHINES, DRAFTS).unwrap_err();
    assert_eq!(error_line(&e), Some(line_of(&bad, "kv_haeds")));
    // A field inside an inline table of a list.
    let bad = replace_once(
        MACHINES,
        "{ bytes = \"16 MiB\", us = 949 }",
        "{ bytes = \"16 MiB\", us = -949 }",
    );
    let e = load(MODELS, GPUS, &bad, DRAFTS).unwrap_err();
    assert_eq!(
        error_line(&e),
        Some(line_of(&bad, "{ bytes = \"16 MiB\", us = -949 }"))
    );
    // A missing field: the line of its entry's [[model]] header.
    let bad = replace_once(MODELS, "layers = 80\n", "");
    let e = load(&bad, GPUS, MACHINES, DRAFTS).unwrap_err();
    let entry = line_of(&bad, "name = \"llama-3.1-70b\"") - 1;
    assert_eq!(bad.lines().nth(entry - 1).map(str::trim), Some("[[model]]"));
    assert_eq!(error_line(&e), Some(entry));
    // A reference to a GPU that does not exist: the line of the reference.
    let bad = replace_once(MACHINES, "gpu = \"h200-sxm\"", "gpu = \"h300\"");
    let e = load(MODELS, GPUS, &bad, DRAFTS).unwrap_err();
    assert_eq!(error_line(&e), Some(line_of(&bad, "gpu = \"h300\"")));
}

#[test]
fn bad_toml_names_the_file() {
    let e = load("[[model]\nname = 1", GPUS, MACHINES, DRAFTS).unwrap_err();
    assert!(
        matches!(&e, PlanError::Toml { file, .. } if file == "models.toml"),
        "{e}"
    );
}

#[test]
fn missing_field_names_file_entry_and_field() {
    let bad = replace_once(MODELS, "layers = 80\n", "");
    let (file, entry, field, problem) =
        field_error(load(&bad, GPUS, MACHINES, DRAFTS).unwrap_err());
    assert_eq!(
        (file.as_str(), entry.as_str(), field.as_str()),
        ("models.toml", "llama-3.1-70b", "layers")
    );
    assert!(problem.contains("missing"), "{problem}");
}

#[test]
fn negative_and_zero_values_are_rejected() {
    let bad = replace_once(
        MODELS,
        "layers = 32\nhidden = 4096\n",
        "layers = 32\nhidden = -4096\n",
    );
    let (_, entry, field, problem) = field_error(load(&bad, GPUS, MACHINES, DRAFTS).unwrap_err());
    assert_eq!((entry.as_str(), field.as_str()), ("llama-3.1-8b", "hidden"));
    assert!(problem.contains("positive"), "{problem}");

    let bad = replace_once(GPUS, "bandwidth_gb_s = 864", "bandwidth_gb_s = 0");
    let (file, entry, field, _) = field_error(load(MODELS, &bad, MACHINES, DRAFTS).unwrap_err());
    assert_eq!(
        (file.as_str(), entry.as_str(), field.as_str()),
        ("gpus.toml", "l40s", "bandwidth_gb_s")
    );

    let bad = replace_once(GPUS, "memory_mib = 46068", "memory_mib = -1");
    let (_, _, field, _) = field_error(load(MODELS, &bad, MACHINES, DRAFTS).unwrap_err());
    assert_eq!(field, "memory_mib");
    // A size whose bytes overflow 64 bits is an error, not a wrap.
    let bad = replace_once(
        GPUS,
        "memory_mib = 46068",
        "memory_mib = 9223372036854775807",
    );
    let (_, _, field, _) = field_error(load(MODELS, &bad, MACHINES, DRAFTS).unwrap_err());
    assert_eq!(field, "memory_mib");

    let bad = replace_once(
        MACHINES,
        "{ bytes = \"16 MiB\", us = 949 }",
        "{ bytes = \"16 MiB\", us = -949 }",
    );
    let (file, entry, field, _) = field_error(load(MODELS, GPUS, &bad, DRAFTS).unwrap_err());
    assert_eq!(file, "machines.toml");
    assert_eq!(entry, "h200x2-nvlink");
    assert_eq!(field, "allreduce[3].rows[5].us");
}

#[test]
fn wrong_types_and_unknown_fields_are_rejected() {
    let bad = replace_once(MODELS, "vocab = 163840", "vocab = \"lots\"");
    let (_, entry, field, _) = field_error(load(&bad, GPUS, MACHINES, DRAFTS).unwrap_err());
    assert_eq!((entry.as_str(), field.as_str()), ("kimi-k2.5", "vocab"));

    let bad = replace_once(MODELS, "kv_heads = 4\n", "kv_heads = 4\nkv_haeds = 4\n");
    let (_, entry, field, problem) = field_error(load(&bad, GPUS, MACHINES, DRAFTS).unwrap_err());
    assert_eq!(
        (entry.as_str(), field.as_str()),
        ("qwen3-235b-a22b", "attention.kv_haeds")
    );
    assert!(problem.contains("unknown"), "{problem}");
}

#[test]
fn inconsistent_shapes_are_rejected() {
    // 32 heads x 128 = 4096 = hidden; claim 100-wide heads instead.
    let bad = replace_once(
        MODELS,
        "heads = 32\nkv_heads = 8\nhead_dim = 128",
        "heads = 32\nkv_heads = 8\nhead_dim = 100",
    );
    let (_, entry, field, _) = field_error(load(&bad, GPUS, MACHINES, DRAFTS).unwrap_err());
    assert_eq!(
        (entry.as_str(), field.as_str()),
        ("llama-3.1-8b", "attention.head_dim")
    );

    let bad = replace_once(
        MODELS,
        "experts = 128\nactive = 8",
        "experts = 128\nactive = 200",
    );
    let (_, _, field, _) = field_error(load(&bad, GPUS, MACHINES, DRAFTS).unwrap_err());
    assert_eq!(field, "moe.active");

    let bad = replace_once(
        MODELS,
        "heads = 64\nkv_heads = 4",
        "heads = 64\nkv_heads = 5",
    );
    let (_, _, field, _) = field_error(load(&bad, GPUS, MACHINES, DRAFTS).unwrap_err());
    assert_eq!(field, "attention.kv_heads");
}

#[test]
fn acceptance_rates_must_be_probabilities_that_do_not_increase() {
    let bad = replace_once(DRAFTS, "acceptance = [0.85]", "acceptance = [1.2]");
    let (_, entry, field, _) = field_error(load(MODELS, GPUS, MACHINES, &bad).unwrap_err());
    assert_eq!(
        (entry.as_str(), field.as_str()),
        ("deepseek-v3-mtp", "acceptance[0]")
    );

    let bad = replace_once(DRAFTS, "acceptance = [0.85]", "acceptance = [0.5, 0.6]");
    let (_, _, field, problem) = field_error(load(MODELS, GPUS, MACHINES, &bad).unwrap_err());
    assert_eq!(field, "acceptance[1]");
    assert!(problem.contains("must not increase"), "{problem}");

    let bad = replace_once(DRAFTS, "acceptance = [0.85]", "acceptance = [0.0]");
    let (_, _, field, _) = field_error(load(MODELS, GPUS, MACHINES, &bad).unwrap_err());
    assert_eq!(field, "acceptance[0]");

    let bad = replace_once(DRAFTS, "acceptance = [0.85]", "acceptance = []");
    let (_, _, field, _) = field_error(load(MODELS, GPUS, MACHINES, &bad).unwrap_err());
    assert_eq!(field, "acceptance");
}

#[test]
fn references_and_names_are_checked() {
    let bad = replace_once(MACHINES, "gpu = \"h200-sxm\"", "gpu = \"h900\"");
    let (_, entry, field, _) = field_error(load(MODELS, GPUS, &bad, DRAFTS).unwrap_err());
    assert_eq!((entry.as_str(), field.as_str()), ("h200x2-nvlink", "gpu"));

    let bad = replace_once(
        DRAFTS,
        "target = \"deepseek-v3\"",
        "target = \"deepseek-v9\"",
    );
    let (_, entry, field, _) = field_error(load(MODELS, GPUS, MACHINES, &bad).unwrap_err());
    assert_eq!(
        (entry.as_str(), field.as_str()),
        ("deepseek-v3-mtp", "target")
    );

    let bad = replace_once(GPUS, "name = \"l40s\"", "name = \"rtx-4090\"");
    let (_, entry, field, _) = field_error(load(MODELS, &bad, MACHINES, DRAFTS).unwrap_err());
    assert_eq!((entry.as_str(), field.as_str()), ("rtx-4090", "name"));

    let c = Catalog::builtin().unwrap();
    let e = c.model("gpt-7").unwrap_err();
    assert!(matches!(e, PlanError::UnknownName { kind: "model", .. }));
    assert!(
        e.to_string().contains("kimi-k2.5"),
        "lists the known names: {e}"
    );
    assert!(c.gpu("h900").is_err() && c.machine("x").is_err() && c.draft("y").is_err());
}

#[test]
fn catalog_directory_is_read_and_missing_files_reported() {
    let dir = tempfile::tempdir().unwrap();
    for (f, t) in [
        ("models.toml", MODELS),
        ("gpus.toml", GPUS),
        ("machines.toml", MACHINES),
        ("drafts.toml", DRAFTS),
    ] {
        std::fs::write(dir.path().join(f), t).unwrap();
    }
    let c = Catalog::from_dir(dir.path()).unwrap();
    assert_eq!(c.models.len(), Catalog::builtin().unwrap().models.len());
    std::fs::remove_file(dir.path().join("gpus.toml")).unwrap();
    let e = Catalog::from_dir(dir.path()).unwrap_err();
    assert!(
        matches!(&e, PlanError::Io { path, .. } if path.ends_with("gpus.toml")),
        "{e}"
    );
}

/// Drafts whose rates were derived from a published average acceptance
/// length reproduce it (to the rounding of the rates, 0.1%).
#[test]
fn derived_acceptance_rates_reproduce_published_tau() {
    use tpcomm_plan::spec::expected_tokens;
    let c = Catalog::builtin().unwrap();
    for (draft, tau) in [
        ("llama-3.1-8b-eagle3", 2.77),
        ("llama-3.3-70b-eagle3", 3.89),
        ("kimi-k2.5-eagle3", 2.77),
    ] {
        let d = c.draft(draft).unwrap();
        let got = expected_tokens(&d.acceptance, 7);
        assert!((got / tau - 1.0).abs() < 1e-3, "{draft}: {got} vs {tau}");
    }
    // AngelSlim's Qwen3 Eagle3 heads: mean accept lengths, reproduced at 6 steps.
    for (draft, tau) in [
        ("qwen3-8b-eagle3", 1.99),
        ("qwen3-14b-eagle3", 1.79),
        ("qwen3-32b-eagle3", 1.91),
        ("qwen3-30b-a3b-eagle3", 2.04),
    ] {
        let d = c.draft(draft).unwrap();
        let got = expected_tokens(&d.acceptance, 6);
        assert!((got / tau - 1.0).abs() < 1e-3, "{draft}: {got} vs {tau}");
    }
    // DeepSeek-V3's MTP: one extra token accepted 85% of the time.
    let d = c.draft("deepseek-v3-mtp").unwrap();
    assert_eq!(expected_tokens(&d.acceptance, 1), 1.85);
}

#[test]
fn an_entry_without_a_name_is_reported_by_position() {
    let bad = replace_once(GPUS, "name = \"l40s\"\n", "");
    let (file, entry, field, _) = field_error(load(MODELS, &bad, MACHINES, DRAFTS).unwrap_err());
    assert_eq!(
        (file.as_str(), entry.as_str(), field.as_str()),
        ("gpus.toml", "gpu #7", "name")
    );
}

/// `[[draft.tree]]` entries are read and checked like every field.
#[test]
fn draft_trees_are_read_and_checked() {
    let with_tree = format!(
        "{DRAFTS}\n[[draft.tree]]\nsteps = 3\ntopk = 2\ndraft_tokens = 6\naccept_length = 2.9\nsource = \"test\"\n"
    );
    let c = load(MODELS, GPUS, MACHINES, &with_tree).unwrap();
    let last = c.drafts.last().unwrap();
    assert_eq!(last.trees.len(), 1);
    assert_eq!((last.trees[0].steps, last.trees[0].topk), (3, 2));
    let bad = with_tree.replace("accept_length = 2.9", "accept_length = 9.5");
    let e = load(MODELS, GPUS, MACHINES, &bad).unwrap_err();
    assert_eq!(error_line(&e), Some(line_of(&bad, "accept_length = 9.5")));
    assert!(e.to_string().contains("accept_length"), "{e}");
}

/// `[gpu.published]`: the built-in figures are read with their sources, and
/// a bad one is rejected at the line that holds it.
#[test]
fn published_efficiencies_are_read_and_checked() {
    let c = Catalog::builtin().unwrap();
    let h100 = c.gpu("h100-sxm").unwrap().published.as_ref().unwrap();
    let bw = h100.bandwidth_bytes_per_s.as_ref().unwrap();
    assert_eq!(bw.value, 2900e9);
    assert!(
        bw.source.starts_with("published: BabelStream"),
        "{}",
        bw.source
    );
    assert_eq!(h100.kernel_us.as_ref().unwrap().value, 1.3);
    // A slot with nothing published stays empty: no RTX PRO 6000 bandwidth
    // was found.
    let pro = c
        .gpu("rtx-pro-6000-blackwell")
        .unwrap()
        .published
        .as_ref()
        .unwrap();
    assert!(pro.bandwidth_bytes_per_s.is_none() && pro.kernel_us.is_some());
    // The H20's one figure says how weak it is.
    let h20 = c.gpu("h20").unwrap().published.as_ref().unwrap();
    let bw = h20.bandwidth_bytes_per_s.as_ref().unwrap();
    assert_eq!(bw.value, 3300e9);
    assert!(bw.source.starts_with("published, weakly"), "{}", bw.source);
    // Every published figure names a source.
    for g in &c.gpus {
        if let Some(p) = &g.published {
            for s in p.bandwidth_bytes_per_s.iter().chain(p.kernel_us.iter()) {
                assert!(s.source.contains("https://"), "{}: {}", g.name, s.source);
            }
        }
    }

    // The H100's kernel figure, by the start of its source (unique).
    const H: &str = "kernel_source = \"published: Hazy";
    let reject = |from: &str, to: &str, line_prefix: &str, says: &str| {
        let bad = replace_once(GPUS, from, to);
        let e = load(MODELS, &bad, MACHINES, DRAFTS).unwrap_err();
        assert_eq!(error_line(&e), Some(line_of(&bad, line_prefix)), "{e}");
        assert!(e.to_string().contains(says), "{e}");
        assert!(e.to_string().starts_with("gpus.toml:"), "{e}");
    };
    // A negative or zero figure.
    reject(
        &format!("kernel_us = 1.3\n{H}"),
        &format!("kernel_us = -1.3\n{H}"),
        "kernel_us = -1.3",
        "positive",
    );
    reject(
        "bandwidth_gb_s = 2900\n",
        "bandwidth_gb_s = 0\n",
        "bandwidth_gb_s = 0",
        "positive",
    );
    // Not a number.
    reject(
        &format!("kernel_us = 1.3\n{H}"),
        &format!("kernel_us = \"1.3\"\n{H}"),
        "kernel_us = \"1.3\"",
        "number",
    );
    // A unit mistake (milliseconds as microseconds would be 1300).
    reject(
        &format!("kernel_us = 1.3\n{H}"),
        &format!("kernel_us = 1300000\n{H}"),
        "kernel_us = 1300000",
        "beyond any launch cost",
    );
    // Above the datasheet.
    reject(
        "bandwidth_gb_s = 2900\n",
        "bandwidth_gb_s = 3400\n",
        "bandwidth_gb_s = 3400",
        "above the datasheet",
    );
    // A figure without its source, and a source without its figure.
    reject(
        &format!("kernel_us = 1.3\n{H}"),
        &format!(
            "kernel_us = 1.3\n{}",
            H.replace("kernel_source", "kernel_sauce")
        ),
        "kernel_us = 1.3",
        "needs its source",
    );
    reject(
        "bandwidth_gb_s = 2900\n",
        "",
        "bandwidth_source",
        "without its figure",
    );
    // A misspelt key.
    reject(
        &format!("kernel_us = 1.3\n{H}"),
        &format!("kernel_us = 1.3\nkernel_ms = 1.3\n{H}"),
        "kernel_ms",
        "unknown field",
    );
    // An empty block: the line of its header.
    let bad = replace_once(
        GPUS,
        "source = \"NVIDIA L40S datasheet",
        "published = {}\nsource = \"NVIDIA L40S datasheet",
    );
    let e = load(MODELS, &bad, MACHINES, DRAFTS).unwrap_err();
    assert_eq!(error_line(&e), Some(line_of(&bad, "published = {}")), "{e}");
    assert!(e.to_string().contains("empty [gpu.published]"), "{e}");
}

/// `class`: the H200's measured per-layer cost (`layer_us_for_class`) is
/// lent to the other GH100 parts without a measurement of their own (here
/// the catalog less the H100's), and every way of writing it wrong is
/// refused at its line.
#[test]
fn class_layer_costs_are_lent_and_checked() {
    // The built-in H100 has a measurement of its own, so it keeps it and is
    // lent nothing; without that block it takes the H200's like the H20.
    let c = load(MODELS, GPUS, MACHINES, DRAFTS).unwrap();
    let h100 = c.gpu("h100-sxm").unwrap();
    assert!(h100.class_layer.is_none() && h100.measured.is_some());
    let at = GPUS
        .find("[gpu.measured]\nbandwidth_gb_s = 2991\n")
        .expect("the H100's measured block");
    let len = GPUS[at..].find("\n\n").expect("a blank line after it") + 2;
    let unmeasured = GPUS.replacen(&GPUS[at..at + len], "", 1);
    let gpus = unmeasured.as_str();
    let c = load(MODELS, gpus, MACHINES, DRAFTS).unwrap();
    for g in ["h100-sxm", "h20"] {
        let lent = c.gpu(g).unwrap().class_layer.as_ref().unwrap();
        assert_eq!(
            (lent.class.as_str(), lent.measured_on.as_str()),
            ("gh100", "h200-sxm")
        );
        assert!(lent.source.starts_with("measured: "), "{}", lent.source);
    }
    for g in &c.gpus {
        if let Some(class) = &g.class {
            assert!(
                class.source.contains("GH100"),
                "{}: {}",
                g.name,
                class.source
            );
        }
    }
    // The H200's class lines, by their starts (each unique in the file).
    let line = |start: &str| -> String {
        let at = gpus.find(start).expect("present");
        let end = gpus[at..].find('\n').unwrap() + at + 1;
        gpus[at..end].to_string()
    };
    let h200_class = format!(
        "class = \"gh100\"\n{}",
        line("class_source = \"the PCI ID repository names it 'GH100 [H200")
    );
    let reject = |bad: &str, line_prefix: &str, says: &str| {
        let e = load(MODELS, bad, MACHINES, DRAFTS).unwrap_err();
        assert_eq!(error_line(&e), Some(line_of(bad, line_prefix)), "{e}");
        assert!(e.to_string().contains(says), "{e}");
    };
    // Lending with no class to lend to.
    let bad = replace_once(gpus, &h200_class, "");
    reject(&bad, "layer_us_for_class", "has no class");
    // A class without its source, a source without its class.
    let h100_source = line("class_source = \"NVIDIA, 'NVIDIA Hopper");
    let bad = replace_once(gpus, &h100_source, "");
    reject(&bad, "class = ", "needs its source");
    let bad = replace_once(
        gpus,
        &format!("class = \"gh100\"\n{h100_source}"),
        &h100_source,
    );
    reject(&bad, "class_source", "without its class");
    // Not a boolean.
    let bad = replace_once(
        gpus,
        "\nlayer_us_for_class = true\n",
        "\nlayer_us_for_class = 1\n",
    );
    reject(&bad, "layer_us_for_class", "true or false");

    // A second GPU lending for the same class: refused at the later one.
    let h100_measured = format!(
        "{h100_source}[gpu.measured]\nbandwidth_gb_s = 2800\nlayer_us = 30\nlayer_us_for_class = true\nsource = \"measured: test\"\n"
    );
    let bad = replace_once(gpus, &h100_source, &h100_measured);
    let e = load(MODELS, &bad, MACHINES, DRAFTS).unwrap_err();
    let h200_lends = bad
        .lines()
        .enumerate()
        .filter(|(_, l)| l.starts_with("layer_us_for_class"))
        .nth(1)
        .unwrap()
        .0
        + 1;
    assert_eq!(error_line(&e), Some(h200_lends), "{e}");
    assert!(
        e.to_string()
            .contains("h100-sxm already stands for class \"gh100\""),
        "{e}"
    );

    // A measured GPU that does not lend keeps its own figure and gets none
    // lent; the H20 still gets the H200's.
    let own = replace_once(
        gpus,
        &h100_source,
        &h100_measured.replace("layer_us_for_class = true\n", ""),
    );
    let c = load(MODELS, &own, MACHINES, DRAFTS).unwrap();
    let h100 = c.gpu("h100-sxm").unwrap();
    assert!(h100.class_layer.is_none() && h100.measured.as_ref().unwrap().layer_us == 30.0);
    assert_eq!(
        c.gpu("h20").unwrap().class_layer.as_ref().unwrap().layer_us,
        39.24
    );
    // Class names match whatever their case.
    let upper = replace_once(gpus, &h200_class, &h200_class.replace("gh100", "GH100"));
    let c = load(MODELS, &upper, MACHINES, DRAFTS).unwrap();
    assert!(c.gpu("h20").unwrap().class_layer.is_some());
}
