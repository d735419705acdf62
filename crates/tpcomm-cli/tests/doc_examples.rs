//! Every command shown in a fenced block of README.md and docs/ is checked
//! against the built `tpcomm`, so the documented examples cannot drift from
//! the code. The conventions a writer follows are in docs/doc-examples.md;
//! in short:
//!
//! - `$ tpcomm ...` lines are transcripts: the command runs (it must need no
//!   GPU) and its stdout must equal the lines that follow, up to the next
//!   `$ ` line or the end of the block. `[..]` in a line stands for any text
//!   within that line, a line `...` for any number of lines.
//! - Other `tpcomm ...` lines (also `target/release/tpcomm`, `cargo run
//!   --release -- ...`, and after `bench/device/run.sh NAME --`) are command
//!   listings. Those that need no GPU (`plan`, `explain --class/--table`,
//!   `probe --from`) run and must exit 0; the rest are parsed with `--help`
//!   appended, so every flag must exist and take the value shown, and each
//!   item of `--algos`/`--modes` must be named in that command's help.
//! - A block with a command that needs a GPU says so: `gpu` in its info
//!   string (```` ```text gpu ````), and only such blocks do.
//! - Paths of this repository named in any command (`scripts/...`,
//!   `bench/...`) must exist; `cargo run --example` and `cargo test --test`
//!   targets must exist.
//!
//! Harness of our own rather than trycmd: most of the docs' blocks are
//! listings with `# comments`, placeholders and wrappers, not transcripts,
//! and a parse check of those needs the rules above.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .canonicalize()
        .expect("repository root")
}

/// README.md, docs/*.md and docs/*/*.md, sorted.
fn pages() -> Vec<PathBuf> {
    let r = root();
    let mut out = vec![r.join("README.md")];
    let mut dirs = vec![r.join("docs")];
    while let Some(dir) = dirs.pop() {
        for e in std::fs::read_dir(&dir).expect("docs/").flatten() {
            let p = e.path();
            if p.is_dir() && dir == r.join("docs") {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "md") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// One fenced block: where it starts, its info string, its lines (the
/// fence's indentation removed) with their line numbers.
#[derive(Debug)]
struct Block {
    file: String,
    line: usize,
    info: String,
    lines: Vec<(usize, String)>,
}

impl Block {
    fn at(&self, line: usize) -> String {
        format!("{}:{}", self.file, line)
    }
    fn tagged_gpu(&self) -> bool {
        self.info.split_whitespace().any(|w| w == "gpu")
    }
}

fn blocks(file: &str, text: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut open: Option<(usize, Block)> = None;
    for (i, raw) in text.lines().enumerate() {
        let indent = raw.len() - raw.trim_start().len();
        let t = raw.trim_start();
        if let Some(rest) = t.strip_prefix("```") {
            match open.take() {
                None => {
                    open = Some((
                        indent,
                        Block {
                            file: file.to_string(),
                            line: i + 1,
                            info: rest.trim().to_string(),
                            lines: Vec::new(),
                        },
                    ))
                }
                Some((_, b)) => out.push(b),
            }
            continue;
        }
        if let Some((ind, b)) = open.as_mut() {
            let cut = raw.len().min(*ind).min(indent);
            b.lines.push((i + 1, raw[cut..].to_string()));
        }
    }
    assert!(open.is_none(), "{file}: a fenced block is not closed");
    out
}

/// Blocks whose lines are shell: no info string, or sh/text/console.
fn is_shell(b: &Block) -> bool {
    matches!(
        b.info.split_whitespace().next().unwrap_or(""),
        "" | "sh" | "text" | "console" | "bash"
    )
}

/// Splits a shell line into words: quotes group, `$(...)` stays one word,
/// an unquoted ` #` starts a comment.
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    let mut depth = 0usize;
    let mut prev_space = true;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => cur.push(c),
            (None, '"' | '\'') => quote = Some(c),
            (None, '#') if prev_space && depth == 0 => break,
            (None, '$') if chars.peek() == Some(&'(') => {
                depth += 1;
                cur.push(c);
            }
            (None, ')') if depth > 0 => {
                depth -= 1;
                cur.push(c);
            }
            (None, c) if c.is_whitespace() && depth == 0 => {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
            }
            (None, c) => cur.push(c),
        }
        prev_space = c.is_whitespace();
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// Commands a shell line may start with (after `NAME=value` words). A line
/// of a shell block that starts otherwise, and is not a comment, a blank or
/// output under a `$ ` line, is refused: output shown without `$ ` cannot be
/// checked.
const KNOWN: &[&str] = &[
    "tpcomm",
    "target/release/tpcomm",
    "target/release/tpcomm-conformance",
    "cargo",
    "mkdir",
    "bash",
    "python",
    "python3",
    "pip",
    "venv/bin/pip",
    "export",
    "torchrun",
    "vllm",
    "echo",
    "nvidia-cuda-mps-control",
    "scripts/build_wheel.sh",
    "scripts/test_wheel.sh",
    "bench/plan/h200_efficiency.sh",
];

fn is_env(w: &str) -> bool {
    w.split_once('=').is_some_and(|(k, _)| {
        !k.is_empty()
            && k.chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
    })
}

/// What a command line is, once parsed.
#[derive(Debug, PartialEq)]
enum Cmd {
    /// `tpcomm` with these arguments.
    Tpcomm(Vec<String>),
    /// Any other command: only its repository paths are checked.
    Other { gpu: bool },
}

/// The command of one (joined) line, None when its first word is unknown.
fn command(w: &[String]) -> Option<Cmd> {
    let mut gpu = false;
    let mut i = 0;
    while i < w.len() && is_env(&w[i]) {
        gpu |= w[i] == "TPCOMM_GPU_TESTS=1";
        i += 1;
    }
    let w = &w[i..];
    let first = w.first()?;
    if first == "tpcomm" || first == "target/release/tpcomm" {
        return Some(Cmd::Tpcomm(w[1..].to_vec()));
    }
    if !KNOWN.contains(&first.as_str()) {
        return None;
    }
    // bench/device/run.sh NAME -- COMMAND: the wrapped command.
    if first == "bash" && w.get(1).is_some_and(|s| s.ends_with("bench/device/run.sh")) {
        let at = w.iter().position(|s| s == "--")?;
        return command(&w[at + 1..]);
    }
    // cargo run --release -- ARGS: tpcomm ARGS.
    if first == "cargo" && w.get(1).is_some_and(|s| s == "run") {
        if let Some(at) = w.iter().position(|s| s == "--") {
            if !w[..at].iter().any(|s| s == "-p" || s == "--example") {
                return Some(Cmd::Tpcomm(w[at + 1..].to_vec()));
            }
        }
    }
    Some(Cmd::Other { gpu })
}

/// The subcommand words of `tpcomm` arguments (before the first flag).
fn subcommand(args: &[String]) -> Vec<&str> {
    args.iter()
        .map(String::as_str)
        .take_while(|a| !a.starts_with('-'))
        .collect()
}

fn has(args: &[String], flag: &str) -> bool {
    args.iter().any(|a| a == flag)
}

/// Whether these `tpcomm` arguments need a GPU to run.
fn needs_gpu(args: &[String]) -> bool {
    match subcommand(args).as_slice() {
        ["plan", ..] => false,
        ["explain", ..] => !has(args, "--class") && !has(args, "--table"),
        ["probe", ..] => !has(args, "--from"),
        ["bench", "forward", ..] | ["tune", ..] => true,
        ["bench", ..] => {
            has(args, "gpu") || has(args, "--transport") || args.iter().any(|a| a == "--modes")
        }
        _ => true,
    }
}

/// Whether the test runs these arguments for real: no GPU needed, quick,
/// and no placeholder left in them.
fn runnable(args: &[String]) -> bool {
    let quick = matches!(
        subcommand(args).as_slice(),
        ["plan", ..] | ["explain", ..] | ["probe", ..]
    );
    quick && !needs_gpu(args) && !args.iter().any(|a| placeholder(a))
}

/// An all-caps word (FILE, DIR, N) or an angle-bracketed one stands for a
/// value the reader fills in.
fn placeholder(a: &str) -> bool {
    let caps = !a.is_empty() && a.chars().all(|c| c.is_ascii_uppercase());
    caps || a.contains('<') || a == "..."
}

/// A listing's `[--flag V]` and `a|b|c` forms as plain argument lists: one
/// per alternative (the i-th alternative of every `|` word together), `N`
/// as the number 2.
fn variants(args: &[String]) -> Vec<Vec<String>> {
    let clean: Vec<String> = args
        .iter()
        .map(|a| a.trim_start_matches('[').trim_end_matches(']').to_string())
        .filter(|a| !a.is_empty())
        .collect();
    let n = clean
        .iter()
        .map(|a| a.split('|').count())
        .max()
        .unwrap_or(1);
    (0..n)
        .map(|i| {
            clean
                .iter()
                .map(|a| {
                    let alts: Vec<&str> = a.split('|').collect();
                    let v = alts[i.min(alts.len() - 1)];
                    if v == "N" {
                        "2".to_string()
                    } else {
                        v.to_string()
                    }
                })
                .collect()
        })
        .collect()
}

/// A directory to run documented commands in: the repository's top-level
/// entries linked in, except docs/, which is a fresh empty tree with the
/// same folders, so a command that writes (`--plot docs/plan`, `--json
/// out.json`) writes there and not into the repository.
fn sandbox() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temporary directory");
    let r = root();
    for e in std::fs::read_dir(&r).expect("root").flatten() {
        let name = e.file_name();
        if name == "docs" || name == "target" || name == ".git" {
            continue;
        }
        std::os::unix::fs::symlink(e.path(), dir.path().join(&name)).expect("link");
    }
    for e in std::fs::read_dir(r.join("docs")).expect("docs").flatten() {
        if e.path().is_dir() {
            std::fs::create_dir_all(dir.path().join("docs").join(e.file_name())).expect("mkdir");
        }
    }
    dir
}

fn tpcomm(args: &[String], cwd: &Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tpcomm"))
        .args(args)
        .current_dir(cwd)
        .env_remove("TPCOMM_TUNING_TABLE")
        .output()
        .expect("run tpcomm")
}

/// Whether `actual` lines match `expected`: `...` lines match any run of
/// lines, `[..]` any text within a line; trailing spaces do not count.
fn matches(expected: &[&str], actual: &[&str]) -> bool {
    match expected.split_first() {
        None => actual.is_empty(),
        Some((&"...", rest)) => (0..=actual.len()).any(|k| matches(rest, &actual[k..])),
        Some((e, rest)) => {
            actual
                .first()
                .is_some_and(|a| line_matches(e.trim_end(), a.trim_end()))
                && matches(rest, &actual[1..])
        }
    }
}

fn line_matches(expected: &str, actual: &str) -> bool {
    let parts: Vec<&str> = expected.split("[..]").collect();
    if parts.len() == 1 {
        return expected == actual;
    }
    let mut rest = actual;
    for (i, p) in parts.iter().enumerate() {
        if i == 0 {
            let Some(r) = rest.strip_prefix(p) else {
                return false;
            };
            rest = r;
        } else if i == parts.len() - 1 {
            return rest.ends_with(p);
        } else {
            let Some(at) = rest.find(p) else { return false };
            rest = &rest[at + p.len()..];
        }
    }
    true
}

/// Repository paths a command names (`scripts/x.sh`, `bench/y.py`, ...),
/// placeholders and globs left out.
fn repo_paths(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    for w in
        line.split(|c: char| c.is_whitespace() || matches!(c, '(' | ')' | '"' | '=' | ':' | '$'))
    {
        let w = w.trim_end_matches([',', ';']);
        let ours = ["scripts/", "bench/", "crates/", "catalog/", "python/"]
            .iter()
            .any(|p| w.starts_with(p));
        if ours && !w.contains(['<', '*', '@']) && !placeholder(w) {
            out.extend(brace_expand(w));
        }
    }
    out
}

/// The shell's brace expansion of one word (`a/{b,c}/d` is `a/b/d` and
/// `a/c/d`), so that each path a command names is checked.
fn brace_expand(w: &str) -> Vec<String> {
    let (Some(open), Some(close)) = (w.find('{'), w.find('}')) else {
        return vec![w.to_string()];
    };
    if close < open {
        return vec![w.to_string()];
    }
    let (head, alts, tail) = (&w[..open], &w[open + 1..close], &w[close + 1..]);
    alts.split(',')
        .flat_map(|a| brace_expand(&format!("{head}{a}{tail}")))
        .collect()
}

/// What the checks of one block found: problems, and how many commands it
/// checked by each way.
#[derive(Default)]
struct Tally {
    problems: Vec<String>,
    transcripts: usize,
    ran: usize,
    parsed: usize,
    other: usize,
}

/// Joins `\`-continued lines; returns (first line number, joined text).
fn logical_lines(lines: &[(usize, String)]) -> Vec<(usize, String)> {
    let mut out: Vec<(usize, String)> = Vec::new();
    let mut cont = false;
    for (n, l) in lines {
        let t = l.trim_end();
        let (body, more) = match t.strip_suffix('\\') {
            Some(b) => (b, true),
            None => (t, false),
        };
        // A synopsis's next line of `[--flag V]` options continues it.
        let synopsis = !out.is_empty() && t.trim_start().starts_with("[-");
        if cont || synopsis {
            let last = out.last_mut().expect("continued line");
            last.1.push(' ');
            last.1.push_str(body.trim());
        } else {
            out.push((*n, body.to_string()));
        }
        cont = more;
    }
    out
}

fn check_block(b: &Block, sandbox: &Path, t: &mut Tally) {
    let r = root();
    let mut gpu_seen = false;
    let mut command_seen = false;
    let lines = logical_lines(&b.lines);
    let mut i = 0;
    while i < lines.len() {
        let (n, text) = (&lines[i].0, lines[i].1.trim());
        i += 1;
        if text.is_empty() || text.starts_with('#') {
            continue;
        }
        let transcript = text.strip_prefix("$ ");
        let w = words(transcript.unwrap_or(text));
        let Some(cmd) = command(&w) else {
            if command_seen || transcript.is_some() {
                t.problems.push(format!(
                    "{}: not a command this test knows, nor a comment; show output under a `$ ` line: {text}",
                    b.at(*n)
                ));
            }
            continue;
        };
        command_seen = true;
        for p in repo_paths(text) {
            if !r.join(&p).exists() {
                t.problems.push(format!("{}: {p} does not exist", b.at(*n)));
            }
        }
        match cmd {
            Cmd::Other { gpu } => {
                gpu_seen |= gpu;
                t.other += 1;
                check_cargo_target(b, *n, &w, t);
            }
            Cmd::Tpcomm(args) => {
                gpu_seen |= needs_gpu(&args);
                if transcript.is_some() {
                    // The output: every line up to the next `$ ` line.
                    let start = i;
                    while i < lines.len() && !lines[i].1.trim_start().starts_with("$ ") {
                        i += 1;
                    }
                    // Raw lines, from the first after the command to the next command.
                    let from = lines.get(start).map_or(usize::MAX, |l| l.0);
                    let to = lines.get(i).map_or(usize::MAX, |l| l.0);
                    let shown: Vec<&str> = b
                        .lines
                        .iter()
                        .filter(|(ln, _)| (from..to).contains(ln))
                        .map(|(_, l)| l.as_str())
                        .collect();
                    check_transcript(b, *n, &args, &shown, sandbox, t);
                } else {
                    check_listing(b, *n, &args, sandbox, t);
                }
            }
        }
    }
    if gpu_seen != b.tagged_gpu() {
        t.problems.push(format!(
            "{}: block {} a command that needs a GPU but {} `gpu` in its info string (```text gpu)",
            b.at(b.line),
            if gpu_seen { "has" } else { "has no" },
            if b.tagged_gpu() { "has" } else { "lacks" }
        ));
    }
}

fn check_cargo_target(b: &Block, n: usize, w: &[String], t: &mut Tally) {
    let Some(c) = w.iter().position(|s| s == "cargo") else {
        return;
    };
    let w = &w[c..];
    let crate_dir = w
        .iter()
        .position(|s| s == "-p")
        .and_then(|i| w.get(i + 1))
        .map(|p| root().join("crates").join(p));
    for (flag, dir) in [("--example", "examples"), ("--test", "tests")] {
        if let Some(name) = w.iter().position(|s| s == flag).and_then(|i| w.get(i + 1)) {
            let found = crate_dir
                .as_ref()
                .is_some_and(|d| d.join(dir).join(format!("{name}.rs")).exists());
            if !found {
                t.problems
                    .push(format!("{}: cargo {flag} {name}: no such target", b.at(n)));
            }
        }
    }
}

fn check_transcript(
    b: &Block,
    n: usize,
    args: &[String],
    shown: &[&str],
    sandbox: &Path,
    t: &mut Tally,
) {
    t.transcripts += 1;
    if !runnable(args) {
        t.problems.push(format!(
            "{}: `$ tpcomm {}` needs a GPU or has placeholders: a transcript must run here",
            b.at(n),
            args.join(" ")
        ));
        return;
    }
    let out = tpcomm(args, sandbox);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mut actual: Vec<&str> = stdout.lines().collect();
    let mut expected = shown.to_vec();
    while actual.last().is_some_and(|l| l.trim().is_empty()) {
        actual.pop();
    }
    while expected.last().is_some_and(|l| l.trim().is_empty()) {
        expected.pop();
    }
    if !out.status.success() {
        t.problems.push(format!(
            "{}: `tpcomm {}` exited {}: {}",
            b.at(n),
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    } else if !matches(&expected, &actual) {
        t.problems.push(format!(
            "{}: output of `tpcomm {}` differs from the doc\n--- doc\n{}\n--- tpcomm prints\n{}",
            b.at(n),
            args.join(" "),
            expected.join("\n"),
            actual.join("\n")
        ));
    }
}

fn check_listing(b: &Block, n: usize, args: &[String], sandbox: &Path, t: &mut Tally) {
    for v in variants(args) {
        if runnable(&v) {
            t.ran += 1;
            let out = tpcomm(&v, sandbox);
            if !out.status.success() {
                t.problems.push(format!(
                    "{}: `tpcomm {}` exited {}: {}",
                    b.at(n),
                    v.join(" "),
                    out.status,
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
            continue;
        }
        t.parsed += 1;
        let mut with_help = v.clone();
        with_help.push("--help".into());
        let out = tpcomm(&with_help, sandbox);
        let help = String::from_utf8_lossy(&out.stdout);
        let usage = format!("Usage: tpcomm {}", subcommand(&v).join(" "));
        if !out.status.success() || !help.contains(usage.trim_end()) {
            t.problems.push(format!(
                "{}: `tpcomm {}` does not parse: {}",
                b.at(n),
                v.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
            continue;
        }
        // Comma lists the parser takes as text: each item must be named in
        // the command's help.
        for (i, a) in v.iter().enumerate() {
            if matches!(a.as_str(), "--algos" | "--algo" | "--modes") {
                for item in v.get(i + 1).map(|s| s.split(',')).into_iter().flatten() {
                    if !help.contains(item) {
                        t.problems.push(format!(
                            "{}: {a} {item}: not named in `tpcomm {} --help`",
                            b.at(n),
                            subcommand(&v).join(" ")
                        ));
                    }
                }
            }
        }
    }
}

/// All blocks of all pages, shell blocks only.
fn shell_blocks() -> Vec<Block> {
    let r = root();
    let mut out = Vec::new();
    for p in pages() {
        let text = std::fs::read_to_string(&p).expect("page");
        let name = p.strip_prefix(&r).unwrap_or(&p).display().to_string();
        out.extend(blocks(&name, &text).into_iter().filter(is_shell));
    }
    out
}

#[test]
fn every_documented_command_matches_the_binary() {
    let sandbox = sandbox();
    let mut t = Tally::default();
    let mut per_file: std::collections::BTreeMap<String, usize> = Default::default();
    for b in shell_blocks() {
        let before = t.transcripts + t.ran + t.parsed + t.other;
        check_block(&b, sandbox.path(), &mut t);
        *per_file.entry(b.file.clone()).or_default() +=
            t.transcripts + t.ran + t.parsed + t.other - before;
    }
    for (f, k) in &per_file {
        if *k > 0 {
            eprintln!("{f}: {k} commands checked");
        }
    }
    eprintln!(
        "{} transcripts compared, {} listed commands run, {} parsed (need a GPU or a placeholder), {} other commands' paths checked",
        t.transcripts, t.ran, t.parsed, t.other
    );
    assert!(
        t.problems.is_empty(),
        "{} doc examples drifted:\n\n{}",
        t.problems.len(),
        t.problems.join("\n\n")
    );
    assert!(t.transcripts >= 4, "the plan transcripts were not found");
}

#[test]
fn elisions_match_only_what_they_stand_for() {
    let actual = ["a 1", "b 2", "c 3"];
    assert!(matches(&["a 1", "...", "c 3"], &actual));
    assert!(matches(&["...", "b 2", "..."], &actual));
    assert!(matches(&["a [..]", "b 2", "[..] 3"], &actual));
    // A changed number, a missing line, or an extra line is a difference.
    assert!(!matches(&["a 1", "b 9", "c 3"], &actual));
    assert!(!matches(&["a 1", "c 3"], &actual));
    assert!(!matches(&["a 1", "b 2", "c 3", "d 4"], &actual));
    // `[..]` stays within its line and keeps the text around it.
    assert!(!matches(&["a [..]", "c 3"], &actual));
    assert!(!line_matches("x [..] 3", "c 3"));
}

#[test]
fn listings_read_wrappers_synopses_and_placeholders() {
    let w = |s: &str| words(s);
    assert_eq!(
        command(&w(
            "REPEAT=3 bash bench/device/run.sh x -- target/release/tpcomm tune --json @JSON"
        )),
        Some(Cmd::Tpcomm(w("tune --json @JSON")))
    );
    assert_eq!(
        command(&w(
            "cargo run --release -- bench --device cpu   # a comment"
        )),
        Some(Cmd::Tpcomm(w("bench --device cpu")))
    );
    assert_eq!(
        command(&w("TPCOMM_GPU_TESTS=1 cargo test --release -p tpcomm")),
        Some(Cmd::Other { gpu: true })
    );
    assert_eq!(command(&w("tpcomm-cli (the `tpcomm` command)")), None);
    assert_eq!(
        variants(&w("bench forward [--gpus N] [--transport auto|cuda]")),
        vec![
            w("bench forward --gpus 2 --transport auto"),
            w("bench forward --gpus 2 --transport cuda")
        ]
    );
    assert!(runnable(&w("explain --class nvlink --bytes 3MiB")));
    assert!(!runnable(&w("explain --bytes 3MiB")));
    assert!(!runnable(&w("probe --from FILE")));
}

#[test]
fn brace_expansion_gives_every_path() {
    assert_eq!(
        brace_expand("bench/r/{a/x.json,b.json}"),
        ["bench/r/a/x.json", "bench/r/b.json"]
    );
    assert_eq!(brace_expand("bench/r/plain.json"), ["bench/r/plain.json"]);
    assert_eq!(
        brace_expand("a/{b,c}/{d,e}"),
        ["a/b/d", "a/b/e", "a/c/d", "a/c/e"]
    );
}
