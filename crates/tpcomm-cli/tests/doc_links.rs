//! The README and docs/ name other pages of this project by path
//! (`docs/host-gpu.md`, `bench/results/quantized.md`); every such path must
//! exist, so a reader never follows a reference to a page that was renamed
//! or never written.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).to_path_buf()
}

/// Markdown files whose references are checked: the README, docs/ (one
/// level of subfolders) and bench/results/.
fn pages() -> Vec<PathBuf> {
    let r = root();
    let mut out = vec![r.join("README.md")];
    for dir in ["docs", "docs/plan", "bench/results"] {
        let Ok(entries) = std::fs::read_dir(r.join(dir)) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "md") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

fn path_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/')
}

/// Paths of this project's pages in `text`: `docs/NAME.md`,
/// `docs/DIR/NAME.md` and `bench/results/NAME.md`, not inside a longer path
/// (another repository's `.../docs/x.md`) and not deeper than that (other
/// projects' documentation trees, quoted as sources).
fn page_refs(text: &str) -> Vec<String> {
    let mut refs = Vec::new();
    for prefix in ["docs/", "bench/results/"] {
        let mut from = 0;
        while let Some(at) = text[from..].find(prefix).map(|i| i + from) {
            from = at + prefix.len();
            if text[..at].chars().next_back().is_some_and(path_char) {
                continue;
            }
            let len = text[at..]
                .find(|c: char| !path_char(c))
                .unwrap_or(text.len() - at);
            let path = text[at..at + len].trim_end_matches('.');
            let depth = path.matches('/').count() - prefix.matches('/').count();
            if path.ends_with(".md") && depth <= usize::from(prefix == "docs/") {
                refs.push(path.to_string());
            }
        }
    }
    refs
}

#[test]
fn page_references_are_found_and_nothing_else() {
    let text = "see docs/host-gpu.md, [x](docs/plan/a.md) and bench/results/quantized.md. \
                Not: github.com/o/r/docs/x.md, docs/source/features/deep/eagle.md, docs/plan.png";
    assert_eq!(
        page_refs(text),
        [
            "docs/host-gpu.md",
            "docs/plan/a.md",
            "bench/results/quantized.md"
        ]
    );
}

#[test]
fn every_page_the_docs_name_exists() {
    let r = root();
    let mut missing = Vec::new();
    let pages = pages();
    assert!(pages.len() > 10, "found only {pages:?}");
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        for (n, line) in text.lines().enumerate() {
            for p in page_refs(line) {
                if !r.join(&p).is_file() {
                    missing.push(format!(
                        "{}:{}: {p}",
                        page.strip_prefix(&r).unwrap_or(page).display(),
                        n + 1
                    ));
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "pages named but missing:\n{}",
        missing.join("\n")
    );
}
