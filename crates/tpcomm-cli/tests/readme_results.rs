//! The README's result tables are checked against the measurement files they
//! quote, so a number edited by hand (or a file replaced without the table)
//! fails here: the CPU table against the JSON `bench/cpu_vs_openmpi.sh`
//! wrote, the GPU table against what `bench/summarize.py` prints for the
//! files the README names (the command its "Reproduce" block shows).

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .canonicalize()
        .expect("repository root")
}

fn readme() -> String {
    std::fs::read_to_string(root().join("README.md")).expect("README.md")
}

/// The text of the README from the heading `title` to the next heading of
/// the same or a higher level.
fn section(text: &str, title: &str) -> String {
    let start = text
        .find(title)
        .unwrap_or_else(|| panic!("README.md has no heading {title:?}"));
    let level = title.chars().take_while(|c| *c == '#').count();
    let rest = &text[start + title.len()..];
    let end = rest
        .lines()
        .scan(0usize, |at, l| {
            let here = *at;
            *at += l.len() + 1;
            Some((here, l))
        })
        .find(|(_, l)| {
            let n = l.chars().take_while(|c| *c == '#').count();
            n > 0 && n <= level && l.chars().nth(n) == Some(' ')
        })
        .map_or(rest.len(), |(at, _)| at);
    rest[..end].to_string()
}

/// The cells of each body row of the first markdown table in `text`.
fn table_rows(text: &str) -> Vec<Vec<String>> {
    text.lines()
        .filter(|l| l.starts_with('|'))
        .skip(2)
        .map(|l| {
            l.trim_matches('|')
                .split('|')
                .map(|c| c.trim().to_string())
                .collect()
        })
        .collect()
}

/// `"1.02 (0.99-1.11)"` as (1.02, 0.99, 1.11).
fn with_spread(cell: &str) -> (f64, f64, f64) {
    let shape = format!("{cell:?} is not `median (lowest-highest)`");
    let (m, rest) = cell.split_once(" (").expect(&shape);
    let (lo, hi) = rest.trim_end_matches(')').split_once('-').expect(&shape);
    let num = |s: &str| s.trim().parse::<f64>().expect(&shape);
    (num(m), num(lo), num(hi))
}

fn bytes_of(size: &str) -> u64 {
    let (n, unit) = size.split_once(' ').expect("size like `1 KiB`");
    let n: u64 = n.parse().expect("size number");
    n * match unit {
        "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        other => panic!("unknown unit {other}"),
    }
}

/// Within the rounding of a figure printed with two decimals.
fn same_2dp(shown: f64, value: f64) -> bool {
    (shown - value).abs() <= 0.0051
}

#[test]
fn the_cpu_table_is_the_json_it_links() {
    let s = section(&readme(), "### CPU all-reduce against OpenMPI");
    let link = s
        .split(['(', ')'])
        .find(|w| w.starts_with("bench/results/") && w.ends_with(".md"))
        .expect("the CPU section links its results file");
    let json = root().join(link.trim_end_matches(".md").to_string() + ".json");
    let data: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("the linked results JSON"))
            .expect("valid JSON");
    let rows = data["rows"].as_array().expect("rows");
    assert_eq!(
        data["meta"]["wrong_elements_total"], 0,
        "the table says 0 wrong"
    );
    assert!(s.contains(&format!(
        "median of {} rounds",
        data["meta"]["rounds"].as_u64().expect("rounds")
    )));
    let table = table_rows(&s);
    assert!(table.len() >= 4, "the CPU table has rows: {table:?}");
    for r in &table {
        let want = bytes_of(&r[0]);
        let row = rows
            .iter()
            .find(|x| x["bytes"].as_u64() == Some(want))
            .unwrap_or_else(|| panic!("{} is not in {}", r[0], json.display()));
        for (cell, key) in [(&r[1], "openmpi"), (&r[2], "tpcomm")] {
            let (m, lo, hi) = with_spread(cell);
            let t = row[format!("{key}_time_us")].as_f64().unwrap();
            let spread = &row[format!("{key}_spread_us")];
            let (jlo, jhi) = (spread[0].as_f64().unwrap(), spread[1].as_f64().unwrap());
            assert!(
                same_2dp(m, t) && same_2dp(lo, jlo) && same_2dp(hi, jhi),
                "{} {key}: README {cell}, file {t:.2} ({jlo:.2}-{jhi:.2})",
                r[0]
            );
        }
        let ratio: f64 = r[3].parse().expect("ratio");
        assert!(
            same_2dp(ratio, row["time_ratio"].as_f64().unwrap()),
            "{} ratio: README {ratio}, file {}",
            r[0],
            row["time_ratio"]
        );
    }
}

/// `python3 bench/summarize.py FILES`' graph rows: size -> (auto, nccl)
/// cells and the "auto / NCCL" ratio cell.
fn summarized(files: &[String]) -> Vec<(String, String, String, String)> {
    let out = Command::new("python3")
        .arg("bench/summarize.py")
        .args(files)
        .current_dir(root())
        .output()
        .expect("python3 runs bench/summarize.py");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("utf-8");
    // Two tables: times (columns named in the header), then ratios.
    let mut times = Vec::new();
    let mut header: Vec<String> = Vec::new();
    let mut ratios = std::collections::HashMap::new();
    for l in text.lines().filter(|l| l.starts_with('|')) {
        let c: Vec<String> = l
            .trim_matches('|')
            .split('|')
            .map(|x| x.trim().to_string())
            .collect();
        if c[0] == "mode" {
            header = c;
        } else if c[0] == "graph" {
            if header.iter().any(|h| h == "auto / NCCL") {
                let i = header.iter().position(|h| h == "auto / NCCL").unwrap();
                ratios.insert(c[1].clone(), c[i].clone());
            } else {
                let at = |name: &str| {
                    let i = header.iter().position(|h| h == name).expect(name);
                    c[i].clone()
                };
                times.push((c[1].clone(), at("auto"), at("nccl")));
            }
        }
    }
    times
        .into_iter()
        .map(|(size, a, n)| {
            let r = ratios.get(&size).cloned().unwrap_or_default();
            (size, a, n, r)
        })
        .collect()
}

#[test]
fn the_gpu_table_is_what_summarize_prints_for_its_files() {
    let text = readme();
    let s = section(&text, "### GPU all-reduce against NCCL");
    // The reproduce block's two commands, P2P first, then host memory.
    let cmds: Vec<Vec<String>> = s
        .lines()
        .filter(|l| l.starts_with("python3 bench/summarize.py "))
        .map(|l| {
            let arg = l.split_whitespace().nth(2).expect("files");
            // One brace group: prefix{a,b,c}.
            let (pre, rest) = arg.split_once('{').expect("{...}");
            let (alts, post) = rest.split_once('}').expect("{...}");
            alts.split(',').map(|a| format!("{pre}{a}{post}")).collect()
        })
        .collect();
    assert_eq!(cmds.len(), 2, "two reproduce commands");
    let p2p = summarized(&cmds[0]);
    let host = summarized(&cmds[1]);
    let table = table_rows(&s);
    assert!(table.len() >= 4, "the GPU table has rows");
    for r in &table {
        for (cols, from) in [((1, 2, 3), &p2p), ((4, 5, 6), &host)] {
            let (_, auto, nccl, ratio) = from
                .iter()
                .find(|x| x.0 == r[0])
                .unwrap_or_else(|| panic!("{} not in summarize's output", r[0]));
            assert_eq!(&r[cols.0], auto, "{} tpcomm", r[0]);
            assert_eq!(&r[cols.1], nccl, "{} NCCL", r[0]);
            let (m, lo, hi) = with_spread(&r[cols.2]);
            let (jm, jlo, jhi) = with_spread(ratio);
            assert!(
                same_2dp(m, jm) && same_2dp(lo, jlo) && same_2dp(hi, jhi),
                "{} ratio: README {}, summarize {ratio}",
                r[0],
                r[cols.2]
            );
        }
    }
}

#[test]
fn a_changed_number_is_caught() {
    // The checks compare figures, not text: one digit off fails.
    assert!(same_2dp(0.62, 0.6204877830133206));
    assert!(!same_2dp(0.63, 0.6204877830133206));
    assert_eq!(with_spread("1.02 (0.99-1.11)"), (1.02, 0.99, 1.11));
    assert_eq!(bytes_of("64 MiB"), 64 << 20);
    let s = section("# a\n## B\nx\n| h |\n| - |\n| 1 |\n## C\ny\n", "## B");
    assert!(s.contains('x') && !s.contains('y'));
    assert_eq!(table_rows(&s), vec![vec!["1".to_string()]]);
}
