//! Counted: 1,000+ malformed inputs across every parser
//! (byte sizes, environment values, tuning tables, catalogs, config.json,
//! bench JSON, probe JSON) with 0 panics and 0 silently accepted.
//!
//! Unlike the property tests beside it (fuzz.rs here, and the parsers' own
//! proptests in the library), whose inputs may or may not be valid, every
//! input made here is wrong by construction: a value of the wrong type or
//! outside its range, a number that overflows, a text cut short, junk after
//! a unit. So the one right answer is an error, and anything else is
//! counted: a panic, or an input taken as if it were good (a plan built on
//! it would be silently wrong). Each error must also say something.
//! Deterministic (no random seed) and bounded: a few thousand parses.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use tpcomm::report::{latency_rows, parse_rows, BenchRow, RowFilter, RowLabels};
use tpcomm::select::{Table, BUILTIN_NVLINK_TOML};
use tpcomm::topology::Topology;
use tpcomm::{ByteSize, DType};
use tpcomm_plan::hf::model_from_config_str;
use tpcomm_plan::latency::LatencyTable;

mod common;
use common::{load, DEEPSEEK_V3, DRAFTS, GPUS, LLAMA_8B, MACHINES, MODELS};

/// What became of one malformed input.
enum Outcome {
    Refused,
    Accepted,
    Panicked(String),
    /// An error whose message is empty or misses what it must name.
    Unhelpful(String),
}

/// Tallies per parser, and the first inputs that went wrong.
#[derive(Default)]
struct Tally {
    rows: Vec<(&'static str, usize, usize)>,
    bad: Vec<String>,
}

impl Tally {
    /// Runs `parse` on every input; `Ok(Some(msg))` is an error message
    /// (checked for `must_name`), `Ok(None)` an accepted input.
    fn run<I: std::fmt::Debug>(
        &mut self,
        parser: &'static str,
        must_name: &str,
        inputs: Vec<I>,
        parse: impl Fn(&I) -> Option<String>,
    ) {
        let mut wrong = 0;
        for input in &inputs {
            let outcome = match catch_unwind(AssertUnwindSafe(|| parse(input))) {
                Err(p) => Outcome::Panicked(
                    p.downcast_ref::<String>()
                        .cloned()
                        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_default(),
                ),
                Ok(None) => Outcome::Accepted,
                Ok(Some(msg)) if msg.trim().is_empty() || !msg.contains(must_name) => {
                    Outcome::Unhelpful(msg)
                }
                Ok(Some(_)) => Outcome::Refused,
            };
            let what = match outcome {
                Outcome::Refused => continue,
                Outcome::Accepted => "accepted".to_string(),
                Outcome::Panicked(m) => format!("panicked: {m}"),
                Outcome::Unhelpful(m) => format!("error without {must_name:?}: {m}"),
            };
            wrong += 1;
            if self.bad.len() < 20 {
                let shown: String = format!("{input:?}").chars().take(300).collect();
                self.bad
                    .push(format!("{parser}: {what}\n    input {shown}"));
            }
        }
        self.rows.push((parser, inputs.len(), wrong));
    }
}

fn err_text<T, E: std::fmt::Display>(r: Result<T, E>) -> Option<String> {
    r.err().map(|e| e.to_string())
}

// ---- byte sizes ------------------------------------------------------------

fn byte_sizes() -> Vec<String> {
    let mut v: Vec<String> = [
        "",
        " ",
        "-1",
        "-1 KiB",
        "KiB",
        "B",
        "1 KiB KiB",
        "1 2",
        "1..5",
        "0x10",
        "NaN",
        "inf",
        "1,5 KiB",
        "½",
        "١٢",
        "+-3",
        "1 KiB 1",
        "--1",
        "1e",
        ".",
        "_",
        "1 _ KiB",
    ]
    .map(String::from)
    .to_vec();
    for n in ["1", "12", "4096", "1.5", "0", "8_192"] {
        for junk in [
            "!", "?", " apples", "KiBKiB", "/s", "%", "#", "\u{0}", "é", " MiB x", "KiB-", "iB",
        ] {
            v.push(format!("{n}{junk}"));
        }
    }
    // One past the largest u64 in each unit.
    for (shift, unit) in [
        (0, ""),
        (10, "KiB"),
        (20, " MiB"),
        (30, "GiB"),
        (40, " TiB"),
    ] {
        let past = (u64::MAX as u128 >> shift) + 1;
        v.push(format!("{past}{unit}"));
        v.push(format!("{past}0{unit}"));
    }
    v.push("99999999999999999999999999999999999999 GiB".into());
    v
}

// ---- environment values ------------------------------------------------------

/// Values no typed variable (flag, size, seconds, count, list, wire, choice)
/// takes.
const BAD_ENV: &[&str] = &[
    "maybe",
    "-1",
    "1e999",
    "99999999999999999999999",
    "NaN",
    "inf",
    "0x10",
    "1,,2",
    "1 2 3",
    "--",
    "ÿÿ",
    "18446744073709551616",
    "1.5.5",
    "½",
    "yes please",
    "true!",
    "+-3",
    "(1)",
    "[]",
    "{}",
    "1;2",
    "off off",
];

fn env_values() -> Vec<(&'static str, OsString)> {
    let mut v = Vec::new();
    for e in tpcomm::env::ALL {
        let accepted = e.accepted();
        // Paths and free text take any value.
        if accepted == "a path" || accepted == "any text" {
            continue;
        }
        for bad in BAD_ENV {
            v.push((e.name(), OsString::from(bad)));
        }
        v.push((e.name(), OsString::from_vec(vec![b'1', 0xff, 0xfe])));
    }
    v
}

// ---- tuning tables -----------------------------------------------------------

/// Replaces the first `from` in `text` (which must hold it) by `to`.
fn swap(text: &str, from: &str, to: &str) -> String {
    assert!(text.contains(from), "{from:?} not in the text");
    text.replacen(from, to, 1)
}

fn tuning_tables() -> Vec<String> {
    let t = BUILTIN_NVLINK_TOML;
    let mut v = Vec::new();
    for world in ["0", "1", "-2", "\"two\"", "2.5", "18446744073709551616"] {
        v.push(swap(t, "world = 2", &format!("world = {world}")));
    }
    for format in ["999", "0", "\"one\"", "-1"] {
        v.push(swap(t, "format = 1", &format!("format = {format}")));
    }
    v.push(swap(t, "machine_class = \"nvlink\"", "machine_class = 7"));
    v.push(swap(t, "world = 2\n", ""));
    v.push(swap(t, "format = 1\n", ""));
    // Each row broken one way, in turn.
    let rows: Vec<&str> = t.lines().filter(|l| l.contains("bytes = ")).collect();
    let breaks: [(&str, &str); 12] = [
        ("bytes = ", "bytes = -"),
        ("bytes = ", "bytes = 0.5 + "),
        ("bytes = ", "bytes = \"KiB\" # "),
        ("\"cuda:one-shot\" = ", "\"cuda:one-shot\" = -"),
        ("\"cuda:two-shot\" = ", "\"cuda:two-shot\" = nan # "),
        ("\"nccl\" = ", "\"nccl\" = inf # "),
        ("\"cuda:one-shot\"", "\"cuda:three-shot\""),
        ("dtype = \"bf16\"", "dtype = \"f64\""),
        ("mode = \"", "mode = \"lazy"),
        ("times_us = {", "times_us = {{"),
        ("\"nccl\" = ", "\"nccl\" = \"fast\" # "),
        (" }", ""),
    ];
    for (i, row) in rows.iter().enumerate() {
        for (k, (from, to)) in breaks.iter().enumerate() {
            if (i + k) % 3 == 0 && row.contains(from) {
                v.push(swap(t, row, &row.replacen(from, to, 1)));
            }
        }
        // The same row twice.
        if i % 4 == 0 {
            v.push(swap(t, row, &format!("{row}\n{row}")));
        }
    }
    // Cut anywhere inside the rows' list: the list is never closed.
    let start = t.find("rows = [").expect("a rows list") + "rows = [".len();
    let end = t.rfind(']').expect("the list's end");
    let mut at = start;
    while at < end {
        if t.is_char_boundary(at) {
            v.push(t[..at].to_string());
        }
        at += 97;
    }
    v
}

// ---- catalogs ----------------------------------------------------------------

/// The four catalog texts with file `file`'s text replaced.
fn catalog_with(file: usize, text: String) -> [String; 4] {
    let mut t = [MODELS, GPUS, MACHINES, DRAFTS].map(String::from);
    t[file] = text;
    t
}

fn catalogs() -> Vec<[String; 4]> {
    let texts = [MODELS, GPUS, MACHINES, DRAFTS];
    let mut v = Vec::new();
    for (file, text) in texts.iter().enumerate() {
        let lines: Vec<&str> = text.lines().collect();
        // Every numeric `key = value` line given a value of the wrong type.
        let numeric: Vec<usize> = (0..lines.len())
            .filter(|&i| {
                let l = lines[i].trim_start();
                !l.starts_with('#')
                    && l.split_once(" = ")
                        .is_some_and(|(_, val)| val.trim().replace('_', "").parse::<f64>().is_ok())
            })
            .collect();
        let wrong_types = ["\"seven\"", "true", "[]", "{ x = 1 }", "\"\""];
        for (n, &i) in numeric.iter().enumerate() {
            let key = lines[i].split(" = ").next().unwrap_or_default();
            let mut broken = lines.clone();
            let line = format!("{key} = {}", wrong_types[n % wrong_types.len()]);
            broken[i] = &line;
            v.push(catalog_with(file, broken.join("\n")));
        }
        // TOML that cannot be read, put between two lines.
        for (n, junk) in ["[[model", "= 5", "key = ", "x = [1, 2", "\"open = 1"]
            .iter()
            .enumerate()
        {
            for at in [n * 7 % lines.len(), lines.len() / 2 + n, lines.len() - 1] {
                let mut broken = lines.clone();
                broken.insert(at, junk);
                v.push(catalog_with(file, broken.join("\n")));
            }
        }
    }
    v
}

// ---- config.json -------------------------------------------------------------

fn set_json(base: &str, key: &str, value: serde_json::Value) -> String {
    let mut v: serde_json::Value = serde_json::from_str(base).expect("a base config");
    v.as_object_mut()
        .expect("an object")
        .insert(key.into(), value);
    v.to_string()
}

fn configs() -> Vec<String> {
    use serde_json::json;
    let mut v = Vec::new();
    let bad_values = [
        json!(-1),
        json!(0),
        json!(1.5),
        json!("7"),
        json!(null),
        json!(true),
        json!([]),
        json!({}),
        json!(1e308),
        json!(i64::MIN),
    ];
    for (base, keys) in [
        (
            LLAMA_8B,
            &[
                "hidden_size",
                "intermediate_size",
                "num_attention_heads",
                "num_hidden_layers",
                "num_key_value_heads",
                "vocab_size",
            ][..],
        ),
        (
            DEEPSEEK_V3,
            &[
                "hidden_size",
                "moe_intermediate_size",
                "num_hidden_layers",
                "n_routed_experts",
                "num_experts_per_tok",
                "kv_lora_rank",
                "qk_rope_head_dim",
                "v_head_dim",
                "vocab_size",
            ][..],
        ),
    ] {
        for key in keys {
            for bad in &bad_values {
                // Null is how Hugging Face writes "not set" for the optional
                // ones (no KV grouping, no routed experts): valid there.
                let optional = ["num_key_value_heads", "n_routed_experts"].contains(key);
                if !(bad.is_null() && optional) {
                    v.push(set_json(base, key, bad.clone()));
                }
            }
        }
        // Cut short anywhere: never a whole JSON object.
        for at in (1..base.len()).step_by(13) {
            v.push(base[..at].to_string());
        }
    }
    // Counts that overflow 64-bit arithmetic, and inconsistent shapes.
    v.push(set_json(LLAMA_8B, "num_hidden_layers", json!(i64::MAX)));
    v.push(set_json(LLAMA_8B, "vocab_size", json!(1u64 << 62)));
    v.push(set_json(DEEPSEEK_V3, "first_k_dense_replace", json!(100)));
    v.push(set_json(DEEPSEEK_V3, "num_experts_per_tok", json!(1000)));
    v.push(set_json(LLAMA_8B, "num_key_value_heads", json!(64)));
    v.push(String::new());
    v.push("[]".into());
    v.push("null".into());
    v
}

// ---- bench JSON ----------------------------------------------------------------

fn row(bytes: u64, algo: &str, time_us: f64, wrong: u64) -> BenchRow {
    BenchRow::new(
        bytes,
        bytes / 2,
        DType::Bf16,
        RowLabels {
            op: "sum",
            algo,
            mode: "graph",
        },
        time_us,
        2,
        wrong,
    )
}

fn good_rows() -> Vec<serde_json::Value> {
    [1024u64, 4096, 65536, 1 << 20]
        .iter()
        .enumerate()
        .map(|(i, &b)| serde_json::to_value(row(b, "one-shot", 3.0 + i as f64, 0)).unwrap())
        .collect()
}

/// Bench files whose taken rows are wrong (a result checked wrong, no
/// time, a time or size that is no measurement), or that are not JSON.
fn bench_files() -> Vec<String> {
    use serde_json::json;
    let mut v = Vec::new();
    let breaks: [(&str, serde_json::Value); 12] = [
        ("wrong", json!(1)),
        ("wrong", json!(2048)),
        ("time_us", json!(-3.0)),
        ("time_us", json!(0.0)),
        ("time_us", json!(null)),
        ("time_us", json!("fast")),
        ("bytes", json!(0)),
        ("bytes", json!(-1024)),
        ("bytes", json!("1KiB")),
        ("time_us", json!(1e300)),
        ("wrong", json!(-1)),
        ("bytes", json!(null)),
    ];
    for at in 0..4 {
        for (key, val) in &breaks {
            let mut rows = good_rows();
            rows[at][*key] = val.clone();
            v.push(json!({ "rows": rows }).to_string());
        }
    }
    let whole = json!({ "rows": good_rows() }).to_string();
    for at in (1..whole.len()).step_by(11) {
        v.push(whole[..at].to_string());
    }
    v.push(json!({ "rows": [] }).to_string());
    v.push(json!({ "rows": 5 }).to_string());
    v.push(json!({ "meta": {} }).to_string());
    v
}

/// The two readers of bench files: the library's rows (`plan --bench`'s
/// check) and the planner's latency table.
fn bench_readers(text: &str) -> [Option<String>; 2] {
    let rows = parse_rows(text, "b.json").and_then(|rows| {
        latency_rows(
            &rows,
            "b.json",
            RowFilter {
                algo: None,
                mode: None,
                dtype: None,
            },
        )
        .map(|taken| taken.len())
    });
    [
        err_text(rows.and_then(|n| {
            if n == 0 {
                Err(tpcomm::Error::invalid("b.json", "no rows"))
            } else {
                Ok(n)
            }
        })),
        err_text(LatencyTable::from_bench_str(
            "b.json", text, None, None, None,
        )),
    ]
}

// ---- probe JSON ----------------------------------------------------------------

const PROBE: &str = include_str!("../../../bench/results/2026-11-30-h200x2-first-runs/probe.json");

fn probe_files() -> Vec<String> {
    let mut v: Vec<String> = (1..PROBE.len())
        .step_by(23)
        .map(|at| PROBE[..at].to_string())
        .collect();
    v.push(swap(PROBE, "\"memory\": ", "\"memory\": -"));
    v.push(swap(PROBE, "\"index\": 0", "\"index\": \"zero\""));
    v.push(swap(
        PROBE,
        "\"machine_class\": \"nvlink\"",
        "\"machine_class\": 3",
    ));
    v
}

#[test]
fn a_thousand_malformed_inputs_are_each_refused_without_a_panic() {
    let started = std::time::Instant::now();
    // The inputs' bases are good: a check that breaking them is what fails.
    assert!("64 KiB".parse::<ByteSize>().is_ok());
    assert!(Table::parse(BUILTIN_NVLINK_TOML, "t.toml").is_ok());
    assert!(load(MODELS, GPUS, MACHINES, DRAFTS).is_ok());
    assert!(model_from_config_str("c.json", LLAMA_8B).is_ok());
    assert!(model_from_config_str("c.json", DEEPSEEK_V3).is_ok());
    let good = serde_json::json!({ "rows": good_rows() }).to_string();
    assert_eq!(bench_readers(&good), [None, None]);
    assert!(Topology::from_json(PROBE).is_ok());

    let mut t = Tally::default();
    t.run("byte size", "", byte_sizes(), |s| {
        err_text(s.parse::<ByteSize>())
    });
    let env = env_values();
    t.run("environment value", "TPCOMM_", env, |(name, value)| {
        let entry = tpcomm::env::ALL
            .iter()
            .find(|e| e.name() == *name)
            .expect("a registered variable");
        let r = entry.check_with(&|n| (n == *name).then(|| value.clone()));
        // The error must name this variable.
        err_text(r).map(|m| if m.contains(name) { m } else { String::new() })
    });
    t.run("tuning table", "t.toml", tuning_tables(), |text| {
        err_text(Table::parse(text, "t.toml"))
    });
    t.run("catalog", ".toml", catalogs(), |[m, g, ma, d]| {
        err_text(load(m, g, ma, d))
    });
    t.run("config.json", "c.json", configs(), |text| {
        err_text(model_from_config_str("c.json", text))
    });
    t.run("bench JSON", "b.json", bench_files(), |text| {
        // Both readers must refuse it.
        match bench_readers(text) {
            [Some(a), Some(b)] => Some(format!("{a}\n{b}")),
            _ => None,
        }
    });
    t.run("probe JSON", "topology", probe_files(), |text| {
        err_text(Topology::from_json(text))
    });

    let total: usize = t.rows.iter().map(|r| r.1).sum();
    let wrong: usize = t.rows.iter().map(|r| r.2).sum();
    for (parser, n, w) in &t.rows {
        eprintln!("{parser:>18}: {n:>4} malformed inputs, {w} not refused cleanly");
    }
    eprintln!(
        "{total} malformed inputs in {:.2} s; {wrong} panicked or were accepted",
        started.elapsed().as_secs_f64()
    );
    assert!(total >= 1000, "only {total} malformed inputs");
    assert!(wrong == 0, "{wrong} inputs:\n{}", t.bad.join("\n"));
}
