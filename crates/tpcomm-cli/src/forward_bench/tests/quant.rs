//! The forward bench's quantized modes (int8, fp8): parsing, the reference
//! each quantized row is compared with, and the report's columns.

use super::*;

/// int8 and fp8 name the quantized all-reduce at the default group (64),
/// spelled back as given; no default mode list holds them.
#[test]
fn quantized_modes_parse_at_the_default_group_and_no_default_names_them() {
    assert_eq!(
        Mode::parse("int8").unwrap(),
        Mode::Quant(Wire::Int8 { group: 64 })
    );
    assert_eq!(
        Mode::parse("fp8").unwrap(),
        Mode::Quant(Wire::Fp8 { group: 64 })
    );
    for m in ["int8", "fp8"] {
        assert_eq!(mode_name(Mode::parse(m).unwrap()), m);
        assert!(!ALL_MODES.contains(&m));
    }
    let e = Mode::parse("int4").unwrap_err().to_string();
    assert!(e.contains("int8 or fp8"), "{e}");
}

/// int8/G and fp8/G name the group (32, 64 or 128); the name is spelled
/// back with the group unless it is the default; a bad group is an error
/// naming --modes and the groups there are.
#[test]
fn quantized_modes_take_a_group_and_refuse_a_bad_one() {
    assert_eq!(
        Mode::parse("int8/128").unwrap(),
        Mode::Quant(Wire::Int8 { group: 128 })
    );
    assert_eq!(
        Mode::parse("fp8/32").unwrap(),
        Mode::Quant(Wire::Fp8 { group: 32 })
    );
    for m in ["int8/32", "int8/128", "fp8/32", "fp8/128"] {
        assert_eq!(mode_name(Mode::parse(m).unwrap()), m);
    }
    assert_eq!(mode_name(Mode::parse("int8/64").unwrap()), "int8");
    for bad in ["int8/48", "int8/256", "fp8/x", "int8/"] {
        let e = Mode::parse(bad).unwrap_err().to_string();
        assert!(e.contains("--modes"), "{bad}: {e}");
        assert!(e.contains("32") || e.contains("number"), "{bad}: {e}");
    }
    let a = parse(&["--modes", "one-shot,int8/128,int8"]);
    let (modes, _) = modes_for(a.modes.as_deref(), a.transport).unwrap();
    assert_eq!(
        modes[1..],
        [
            Mode::Quant(Wire::Int8 { group: 128 }),
            Mode::Quant(Wire::int8())
        ]
    );
}

/// Without --modes no quantized mode runs, on any transport; asked for,
/// they run in the order given.
#[test]
fn quantized_modes_stay_out_of_the_defaults() {
    for t in [Transport::Cuda, Transport::Host, Transport::Auto] {
        let (modes, _) = modes_for(None, t).unwrap();
        assert!(
            !modes.iter().any(|m| matches!(m, Mode::Quant(_))),
            "{t:?}: {modes:?}"
        );
    }
    assert_eq!(parse(&[]).modes, None);
    let a = parse(&["--modes", "one-shot,int8,fp8"]);
    let (modes, _) = modes_for(a.modes.as_deref(), a.transport).unwrap();
    assert_eq!(
        modes,
        vec![
            Mode::Tp(Algo::OneShot, Launch::Ordinary),
            Mode::Quant(Wire::int8()),
            Mode::Quant(Wire::fp8())
        ]
    );
}

/// A quantized mode needs an exact tpcomm mode before it in --modes (its
/// reference where NCCL does not run); nccl alone is not enough. The error
/// names each quantized mode refused, once, and shows a --modes that works.
#[test]
fn quantized_modes_without_an_exact_mode_before_them_are_refused() {
    for ok in [
        &["one-shot", "int8"][..],
        &["none", "two-shot-pdl", "fp8", "int8"],
        &["fused", "int8"],
        &["nccl", "one-shot-pdl", "int8", "fp8", "nccl"],
        &["two-shot", "none", "fp8", "none-pdl"],
    ] {
        for t in [Transport::Cuda, Transport::Auto] {
            let (modes, _) =
                modes_for(Some(&strings(ok)), t).unwrap_or_else(|e| panic!("{ok:?}: {e}"));
            assert_eq!(modes.len(), ok.len());
        }
    }
    modes_for(Some(&strings(&["one-shot", "fp8"])), Transport::Host).unwrap();
    for (asked, refused, kept, fix) in [
        (
            &["int8"][..],
            &["int8"][..],
            &["fp8"][..],
            "--modes one-shot,int8",
        ),
        (
            &["nccl", "int8"],
            &["int8"],
            &["fp8"],
            "--modes nccl,one-shot,int8",
        ),
        (
            &["none", "fp8", "one-shot", "int8"],
            &["fp8"],
            &["int8"],
            "--modes none,one-shot,fp8,one-shot,int8",
        ),
        (
            &["int8", "fp8", "int8", "two-shot"],
            &["int8 and fp8"],
            &[],
            "--modes one-shot,int8,fp8,int8,two-shot",
        ),
        (
            &["none", "fp8", "none-pdl"],
            &["fp8"],
            &["int8"],
            "--modes none,one-shot,fp8,none-pdl",
        ),
    ] {
        for t in [Transport::Cuda, Transport::Host, Transport::Auto] {
            let e = modes_for(Some(&strings(asked)), t).unwrap_err().to_string();
            assert!(e.contains("--modes"), "{e}");
            assert!(e.contains("exact tpcomm mode"), "{e}");
            assert!(e.contains("nccl alone"), "{e}");
            assert!(e.contains(fix), "{asked:?}: {e}");
            for m in refused {
                assert!(e.contains(m), "{e} should name {m}");
            }
            for m in kept {
                assert!(!e.contains(&format!("{m} is")), "{e} should not name {m}");
            }
        }
    }
    // The refusal is at argument time: the same check run_inner makes
    // before any worker or GPU work.
    let a = parse(&["--modes", "none,int8"]);
    assert!(modes_for(a.modes.as_deref(), a.transport).is_err());
}

fn rank_row(tokens: usize, mode: &str) -> RankRow {
    RankRow {
        tokens,
        mode: mode.into(),
        kernel: None,
        forward_us: 100.0,
        output_hash: 1,
        rel_diff_vs_nccl: None,
        bitwise_equal_nccl: None,
        reference: None,
        rel_diff_vs_reference: None,
    }
}

/// One token count's rows and outputs through `References`: the quantized
/// rows get the reference and relative error, the other rows nothing.
fn compared(modes_and_outputs: &[(&str, &[f32])]) -> Vec<RankRow> {
    let mut rows = Vec::new();
    let mut refs = rank::References::default();
    for (mode, h) in modes_and_outputs {
        refs.keep(rows.len(), Mode::parse(mode).unwrap(), bf16_bytes(h));
        rows.push(rank_row(4, mode));
    }
    refs.compare(&mut rows);
    rows
}

#[test]
fn quantized_rows_are_compared_with_nccl_else_the_first_exact_mode() {
    let exact: &[f32] = &[1.0, -4.0, 2.0];
    let other: &[f32] = &[1.0, -4.0, 3.0];
    let q: &[f32] = &[1.0, -4.0, 2.5];
    // No NCCL: the first exact tpcomm mode, not a later one.
    let rows = compared(&[
        ("none", other),
        ("two-shot-pdl", exact),
        ("one-shot", other),
        ("int8", q),
        ("fp8", other),
    ]);
    for r in &rows[..3] {
        assert_eq!(r.reference, None, "{}", r.mode);
        assert_eq!(r.rel_diff_vs_reference, None, "{}", r.mode);
    }
    assert_eq!(rows[3].reference.as_deref(), Some("two-shot-pdl"));
    assert_eq!(rows[3].rel_diff_vs_reference, Some(0.5 / 4.0));
    assert_eq!(rows[4].reference.as_deref(), Some("two-shot-pdl"));
    assert_eq!(rows[4].rel_diff_vs_reference, Some(1.0 / 4.0));
    // NCCL ran at this token count: NCCL's, wherever it stood in the list.
    for order in [
        &[("nccl", exact), ("one-shot", other), ("int8", q)][..],
        &[("one-shot", other), ("int8", q), ("nccl", exact)],
    ] {
        let rows = compared(order);
        let i = rows.iter().position(|r| r.mode == "int8").unwrap();
        assert_eq!(rows[i].reference.as_deref(), Some("nccl"));
        assert_eq!(rows[i].rel_diff_vs_reference, Some(0.5 / 4.0));
        // The exact rows keep their own fields untouched.
        for r in rows.iter().filter(|r| r.mode != "int8") {
            assert_eq!(r.reference, None);
            assert_eq!(r.rel_diff_vs_nccl, None);
        }
    }
    // A NaN in the quantized output: an infinite error (the report fails it).
    let rows = compared(&[("one-shot", exact), ("fp8", &[1.0, f32::NAN, 2.0])]);
    assert!(rows[1].rel_diff_vs_reference.unwrap().is_infinite());
}

/// Two ranks' rows at 4 tokens: the floor, an exact mode and both
/// quantized ones (each rank its own error, `rel` scaling them), with
/// NCCL's row when `nccl` (the rows' references as `References` gives them).
fn quant_rank(nccl: bool, rel: f64) -> RankOut {
    let reference = if nccl { "nccl" } else { "one-shot" };
    let row = |mode: &str, us: f64, vs_nccl: Option<f64>, vs_ref: Option<f64>| RankRow {
        forward_us: us,
        output_hash: 9,
        rel_diff_vs_nccl: vs_nccl,
        bitwise_equal_nccl: vs_nccl.map(|d| d == 0.0),
        reference: vs_ref.map(|_| reference.to_string()),
        rel_diff_vs_reference: vs_ref,
        ..rank_row(4, mode)
    };
    let mut rows = vec![row("none", 1000.0, None, None)];
    if nccl {
        rows.push(row("nccl", 1080.0, None, None));
    }
    rows.extend([
        row("one-shot", 1040.0, nccl.then_some(2e-3), None),
        row("int8", 1060.0, None, Some(rel * 6e-3)),
        row("fp8", 1050.0, None, Some(rel * 2.5e-2)),
    ]);
    RankOut {
        info: RankInfo {
            transport: "host".into(),
            ..RankInfo::default()
        },
        rows,
    }
}

/// `bench forward --layers 2 --hidden 64` plus `extra`, the report of `outs`
/// at 2 ranks: its result, JSON and table.
fn quant_report(extra: &[&str], outs: Vec<RankOut>) -> (Result<()>, serde_json::Value, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.json");
    let mut own = vec![
        "--layers",
        "2",
        "--hidden",
        "64",
        "--json",
        path.to_str().unwrap(),
    ];
    own.extend(extra);
    let a = parse(&own);
    let text = report::table(&report::merged_rows(&a, 2, &outs, &mut Vec::new()));
    let done = report::report(&a, 2, outs);
    let doc = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    (done, doc, text)
}

/// The quantized rows carry their reference and error (max over ranks) in
/// the JSON and in a column beside the per-site cost; the exact rows keep
/// theirs, with "-" in the new column.
#[test]
fn quantized_rows_report_their_error_beside_the_per_site_cost() {
    let modes = ["--modes", "none,one-shot,int8,fp8"];
    let (done, doc, text) =
        quant_report(&modes, vec![quant_rank(false, 1.0), quant_rank(false, 2.0)]);
    done.unwrap();
    println!("{text}");
    let rows = doc["rows"].as_array().unwrap();
    let get = |m: &str| rows.iter().find(|r| r["mode"] == m).unwrap();
    for (m, wire, err) in [("int8", "int8/g64", 1.2e-2), ("fp8", "fp8/g64", 5e-2)] {
        let r = get(m);
        assert_eq!(r["reference"], "one-shot", "{r}");
        assert_eq!(r["rel_diff_vs_reference"], err, "{r}");
        assert_eq!(r["wire"], wire, "{r}");
        assert_eq!(r["quant_algo"], "one-shot", "{r}");
        assert!(r["rel_diff_vs_nccl"].is_null(), "{r}");
        assert_eq!(r["ranks_identical"], true, "{r}");
    }
    // 2 layers: 4 sites; (1060 - 1000) / 4.
    assert_eq!(get("int8")["per_site_us"], 15.0);
    for m in ["none", "one-shot"] {
        let r = get(m);
        for k in ["reference", "rel_diff_vs_reference", "wire", "quant_algo"] {
            assert!(r[k].is_null(), "{m}: {k} in {r}");
        }
    }
    assert!(doc["meta"]["rel_diff_vs_reference"]
        .as_str()
        .unwrap()
        .contains("first exact tpcomm mode"));
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("# quantized rows"), "{text}");
    let cols = |l: &str| l.split_whitespace().map(String::from).collect::<Vec<_>>();
    assert_eq!(
        lines[1],
        format!(
            "{:>6} {:>9} {:>12} {:>13} {:>20} {:>13} {:>10} {:>10} {:>14}",
            "tokens",
            "mode",
            "forward(us)",
            "per-site(us)",
            "error (reference)",
            "vs none-pdl",
            "comm share",
            "ranks ==",
            "vs NCCL"
        ),
        "{text}"
    );
    let row = |m: &str| cols(lines.iter().find(|l| cols(l)[1] == m).unwrap());
    assert_eq!(
        row("int8")[2..],
        ["1060.0", "15.00", "1.20e-2", "vs", "one-shot", "-", "5.7%", "yes", "-"]
    );
    assert_eq!(row("fp8")[3..6], ["12.50", "5.00e-2", "vs"]);
    assert_eq!(
        row("one-shot")[2..],
        ["1040.0", "10.00", "-", "-", "3.8%", "yes", "-"]
    );
}

/// With NCCL in the run the quantized rows name it as their reference; the
/// exact rows' "vs NCCL" is as before, and a quantized error far above the
/// exact modes' tolerance is reported, not failed.
#[test]
fn quantized_rows_name_nccl_when_it_ran_and_are_not_held_to_its_tolerance() {
    let modes = ["--modes", "none,nccl,one-shot,int8,fp8"];
    let (done, doc, text) =
        quant_report(&modes, vec![quant_rank(true, 1.0), quant_rank(true, 10.0)]);
    done.unwrap();
    let rows = doc["rows"].as_array().unwrap();
    let get = |m: &str| rows.iter().find(|r| r["mode"] == m).unwrap();
    assert_eq!(get("fp8")["reference"], "nccl");
    assert_eq!(get("fp8")["rel_diff_vs_reference"], 0.25);
    assert_eq!(get("one-shot")["rel_diff_vs_nccl"], 2e-3);
    assert!(get("one-shot")["reference"].is_null());
    assert!(text.contains("2.50e-1 vs nccl"), "{text}");
    assert!(text.contains("2.00e-3"), "{text}");
}

/// A table without quantized rows is the one printed before they existed:
/// no extra column, no note.
#[test]
fn tables_without_quantized_rows_keep_their_columns() {
    let mut out = quant_rank(true, 1.0);
    out.rows
        .retain(|r| !matches!(r.mode.as_str(), "int8" | "fp8"));
    let (done, _, text) = quant_report(&["--modes", "none,nccl,one-shot"], vec![out]);
    done.unwrap();
    let first = text.lines().next().unwrap();
    assert_eq!(
        first,
        format!(
            "{:>6} {:>9} {:>12} {:>13} {:>13} {:>10} {:>10} {:>14}",
            "tokens",
            "mode",
            "forward(us)",
            "per-site(us)",
            "vs none-pdl",
            "comm share",
            "ranks ==",
            "vs NCCL"
        )
    );
    assert!(
        !text.contains("error (reference)") && !text.contains("# quantized"),
        "{text}"
    );
}

/// A non-finite error (NaN or infinity in an output) fails the run, naming
/// the row and its reference; the JSON is written first.
#[test]
fn a_non_finite_quantized_error_fails_the_report() {
    let mut bad = quant_rank(false, 1.0);
    bad.rows[2].rel_diff_vs_reference = Some(f64::INFINITY);
    let (done, doc, _) = quant_report(
        &["--modes", "none,one-shot,int8,fp8"],
        vec![quant_rank(false, 1.0), bad],
    );
    let e = done.unwrap_err().to_string();
    assert!(
        e.contains("int8 at 4 tokens") && e.contains("one-shot"),
        "{e}"
    );
    assert!(!e.contains("fp8"), "{e}");
    assert_eq!(doc["rows"][2]["mode"], "int8");
}

/// Over the host transport the mode column shows the kernel that ran
/// (`host-delta` for one-shot); a quantized row's error names its reference
/// the same way, so it points at a row of the table. The JSON keeps the
/// mode's name.
#[test]
fn the_error_column_names_its_reference_as_the_mode_column_shows_it() {
    let host = |rel| {
        let mut out = quant_rank(false, rel);
        for r in out.rows.iter_mut().filter(|r| r.mode == "one-shot") {
            r.kernel = Some("host-delta".into());
        }
        out
    };
    let modes = ["--modes", "none,one-shot,int8,fp8", "--transport", "host"];
    let (done, doc, text) = quant_report(&modes, vec![host(1.0), host(2.0)]);
    done.unwrap();
    let cols = |l: &str| l.split_whitespace().map(String::from).collect::<Vec<_>>();
    let lines: Vec<&str> = text.lines().collect();
    let row = |m: &str| cols(lines.iter().find(|l| cols(l)[1] == m).unwrap());
    assert_eq!(row("int8")[5..7], ["vs", "host-delta"], "{text}");
    assert_eq!(row("fp8")[5..7], ["vs", "host-delta"], "{text}");
    assert!(lines.iter().any(|l| cols(l)[1] == "host-delta"), "{text}");
    assert!(!text.contains("vs one-shot"), "{text}");
    let rows = doc["rows"].as_array().unwrap();
    let int8 = rows.iter().find(|r| r["mode"] == "int8").unwrap();
    assert_eq!(int8["reference"], "one-shot", "{int8}");
}
