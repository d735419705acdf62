//! The tuning table: measured time per call of every candidate at each size,
//! per element type and launch mode, for one machine. TOML, one line per
//! measured size, written by `tpcomm tune` and read back here.

use super::query::{Candidate, Decision, Mode, Query};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::topology::MachineClass;
use crate::units::ByteSize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use toml::Spanned;

/// The table format this build reads and writes.
pub const FORMAT: u32 = 1;

/// A tuning table.
#[derive(Clone, Debug, PartialEq)]
pub struct Table {
    /// The machine fingerprint (`tpcomm probe`) the table was measured on;
    /// `None` only for the committed per-class defaults.
    pub fingerprint: Option<String>,
    pub machine_class: MachineClass,
    pub world: usize,
    pub gpu: String,
    /// CUDA driver version ("13.0") and NCCL version of the measurement.
    pub driver: String,
    pub nccl: Option<String>,
    /// How the times were measured (command, iterations), for people.
    pub measured: String,
    pub rows: Vec<Row>,
}

/// Times of every candidate at one size.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub dtype: DType,
    pub mode: Mode,
    pub bytes: u64,
    /// Line of the row in the file it was read from (0 when built in memory).
    pub line: usize,
    pub times_us: BTreeMap<Candidate, f64>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTable {
    format: Spanned<u32>,
    fingerprint: Option<String>,
    machine_class: MachineClass,
    world: Spanned<usize>,
    #[serde(default)]
    gpu: String,
    driver: String,
    nccl: Option<String>,
    #[serde(default)]
    measured: String,
    rows: Spanned<Vec<RawRow>>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRow {
    dtype: DType,
    mode: Mode,
    bytes: Spanned<u64>,
    times_us: Spanned<BTreeMap<String, Spanned<f64>>>,
}

/// `text` up to `offset`, moved back to a character boundary (spans come
/// from the parser; slicing inside a character would panic).
fn head(text: &str, offset: usize) -> &str {
    let mut i = offset.min(text.len());
    while !text.is_char_boundary(i) {
        i -= 1;
    }
    &text[..i]
}

fn line_of(text: &str, offset: usize) -> usize {
    head(text, offset).matches('\n').count() + 1
}

/// The key written just before a value that starts at `offset` (`key = value`).
fn key_before(text: &str, offset: usize) -> Option<String> {
    let head = head(text, offset).trim_end();
    let head = head.strip_suffix('=')?.trim_end();
    let key: String = if let Some(h) = head.strip_suffix('"') {
        let start = h.rfind('"')?;
        h[start + 1..].to_string()
    } else {
        // Past the last character that cannot be in a bare key (which may
        // be several bytes long: a panic here was found by the proptest).
        let start = head
            .char_indices()
            .rfind(|&(_, c)| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
            .map_or(0, |(i, c)| i + c.len_utf8());
        head[start..].to_string()
    };
    // A "key" of punctuation alone is a damaged value's quotes, not a key
    // (the proptest found `" = "` named as a field).
    key.chars().any(char::is_alphanumeric).then_some(key)
}

impl Table {
    /// Reads a table; `origin` names the file in messages. Errors name the
    /// line and the field.
    pub fn parse(text: &str, origin: &str) -> Result<Table> {
        let what = || format!("tuning table {origin}");
        let at = |offset: usize, field: &str, msg: String| {
            Error::invalid(
                what(),
                format!("line {}, field `{field}`: {msg}", line_of(text, offset)),
            )
        };
        let raw: RawTable = toml::from_str(text).map_err(|e| {
            let (field, reason) = toml_problem(text, &e);
            match (e.span(), field) {
                (Some(span), Some(Field::Named(f))) => at(span.start, &f, reason),
                (Some(span), Some(Field::After(f))) => Error::invalid(
                    what(),
                    format!(
                        "line {}, after field `{f}`: {reason}",
                        line_of(text, span.start)
                    ),
                ),
                (Some(span), None) => Error::invalid(
                    what(),
                    format!("line {}: {reason}", line_of(text, span.start)),
                ),
                (None, _) => Error::invalid(what(), reason),
            }
        })?;
        if *raw.format.get_ref() != FORMAT {
            return Err(at(
                raw.format.span().start,
                "format",
                format!(
                    "format {}, but this tpcomm reads format {FORMAT}; run `tpcomm tune` again",
                    raw.format.get_ref()
                ),
            ));
        }
        if *raw.world.get_ref() < 2 {
            return Err(at(
                raw.world.span().start,
                "world",
                "must be at least 2".into(),
            ));
        }
        let rows_span = raw.rows.span();
        let raw_rows = raw.rows.into_inner();
        if raw_rows.is_empty() {
            return Err(at(rows_span.start, "rows", "the table has no rows".into()));
        }
        let mut rows: Vec<Row> = Vec::with_capacity(raw_rows.len());
        for r in raw_rows {
            let line = line_of(text, r.bytes.span().start);
            let bytes = *r.bytes.get_ref();
            if bytes == 0 {
                return Err(at(r.bytes.span().start, "bytes", "must be above 0".into()));
            }
            if let Some(prev) = rows
                .iter()
                .find(|p| p.dtype == r.dtype && p.mode == r.mode && p.bytes == bytes)
            {
                return Err(at(
                    r.bytes.span().start,
                    "bytes",
                    format!(
                        "{} {} {bytes} bytes is already measured on line {}",
                        r.dtype.name(),
                        r.mode.name(),
                        prev.line
                    ),
                ));
            }
            let times_span = r.times_us.span();
            let mut times = BTreeMap::new();
            for (name, t) in r.times_us.into_inner() {
                let c: Candidate = name.parse().map_err(|e: Error| {
                    at(t.span().start, &format!("times_us.{name}"), e.to_string())
                })?;
                let v = *t.get_ref();
                if !(v.is_finite() && v > 0.0) {
                    return Err(at(
                        t.span().start,
                        &format!("times_us.{name}"),
                        format!("{v} is not a time in microseconds above 0"),
                    ));
                }
                times.insert(c, v);
            }
            if times.is_empty() {
                return Err(at(
                    times_span.start,
                    "times_us",
                    "no candidate measured".into(),
                ));
            }
            rows.push(Row {
                dtype: r.dtype,
                mode: r.mode,
                bytes,
                line,
                times_us: times,
            });
        }
        rows.sort_by_key(|r| (r.dtype.name(), r.mode, r.bytes));
        Ok(Table {
            fingerprint: raw.fingerprint,
            machine_class: raw.machine_class,
            world: *raw.world.get_ref(),
            gpu: raw.gpu,
            driver: raw.driver,
            nccl: raw.nccl,
            measured: raw.measured,
            rows,
        })
    }

    /// The table as TOML, one line per row (what `parse` reads back).
    pub fn to_toml(&self) -> String {
        let s = |v: &str| toml::Value::String(v.to_string()).to_string();
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# tpcomm tuning table: time per all-reduce call in microseconds, per candidate."
        );
        let _ = writeln!(
            out,
            "# Written by `tpcomm tune`; `tpcomm explain --table FILE` reads it."
        );
        let _ = writeln!(out, "format = {FORMAT}");
        if let Some(fp) = &self.fingerprint {
            let _ = writeln!(out, "fingerprint = {}", s(fp));
        }
        let _ = writeln!(out, "machine_class = {}", s(self.machine_class.name()));
        let _ = writeln!(out, "world = {}", self.world);
        let _ = writeln!(out, "gpu = {}", s(&self.gpu));
        let _ = writeln!(out, "driver = {}", s(&self.driver));
        if let Some(n) = &self.nccl {
            let _ = writeln!(out, "nccl = {}", s(n));
        }
        let _ = writeln!(out, "measured = {}", s(&self.measured));
        let _ = writeln!(out, "rows = [");
        for r in &self.rows {
            let times: Vec<String> = r
                .times_us
                .iter()
                .map(|(c, t)| format!("{} = {:.2}", s(&c.to_string()), t))
                .collect();
            let _ = writeln!(
                out,
                "  {{ dtype = {}, mode = {}, bytes = {}, times_us = {{ {} }} }},",
                s(r.dtype.name()),
                s(r.mode.name()),
                r.bytes,
                times.join(", ")
            );
        }
        let _ = writeln!(out, "]");
        out
    }

    /// Estimated time of each allowed candidate for `q`, from the rows of its
    /// type and mode: the row itself at a measured size, a straight line
    /// between the two measured neighbours in between (time grows about
    /// linearly with bytes), the nearest row outside the measured range.
    /// `Err` says why the table cannot answer (other world size, no row of
    /// this mode).
    pub fn estimate(
        &self,
        q: &Query,
        allowed: &dyn Fn(Candidate) -> bool,
    ) -> std::result::Result<Decision, String> {
        if q.world != self.world {
            return Err(format!(
                "the table was measured with {} ranks, not {}",
                self.world, q.world
            ));
        }
        // Rows of the asked type; else of a type of the same width (f16 and
        // bf16 move the same bytes); else any type.
        let of = |f: &dyn Fn(DType) -> bool| -> Vec<&Row> {
            self.rows
                .iter()
                .filter(|r| r.mode == q.mode && f(r.dtype))
                .collect()
        };
        let mut substitute = None;
        let mut rows = of(&|d| d == q.dtype);
        if rows.is_empty() {
            rows = of(&|d| d.size() == q.dtype.size());
            if rows.is_empty() {
                rows = of(&|_| true);
            }
            substitute = rows.first().map(|r| r.dtype);
            if let Some(d) = substitute {
                rows.retain(|r| r.dtype == d);
            }
        }
        if rows.is_empty() {
            return Err(format!("the table has no {} rows", q.mode.name()));
        }
        // Parsed tables are sorted; a table built in code may not be.
        rows.sort_by_key(|r| r.bytes);
        let lo = rows.iter().rev().find(|r| r.bytes <= q.bytes).copied();
        let hi = rows.iter().find(|r| r.bytes >= q.bytes).copied();
        let mut est: Vec<(Candidate, f64)> = Vec::new();
        let how = match (lo, hi) {
            (Some(a), Some(b)) if a.bytes == b.bytes => {
                est.extend(a.times_us.iter().map(|(c, t)| (*c, *t)));
                format!("table row on line {} ({} bytes, measured)", a.line, a.bytes)
            }
            (Some(a), Some(b)) => {
                let f = (q.bytes - a.bytes) as f64 / (b.bytes - a.bytes) as f64;
                for (c, ta) in &a.times_us {
                    if let Some(tb) = b.times_us.get(c) {
                        est.push((*c, ta + f * (tb - ta)));
                    }
                }
                format!(
                    "interpolated between table rows on lines {} ({} bytes) and {} ({} bytes)",
                    a.line, a.bytes, b.line, b.bytes
                )
            }
            (Some(a), None) => {
                est.extend(a.times_us.iter().map(|(c, t)| (*c, *t)));
                format!(
                    "table row on line {} ({} bytes, the largest measured; nothing above it was measured)",
                    a.line, a.bytes
                )
            }
            (None, Some(b)) => {
                est.extend(b.times_us.iter().map(|(c, t)| (*c, *t)));
                format!(
                    "table row on line {} ({} bytes, the smallest measured)",
                    b.line, b.bytes
                )
            }
            (None, None) => unreachable!("rows is not empty"),
        };
        est.retain(|(c, _)| allowed(*c));
        est.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
        let Some(&(choice, _)) = est.first() else {
            return Err("no allowed candidate was measured at this size".into());
        };
        let sub = substitute
            .map(|d| format!(", using {} rows (no {} rows)", d.name(), q.dtype.name()))
            .unwrap_or_default();
        Ok(Decision {
            choice,
            why: format!("fastest in {} mode: {how}{sub}", q.mode.name()),
            estimates: est,
        })
    }
}

/// The field named in a serde message such as "missing field `bytes`".
fn named_in(msg: &str) -> Option<String> {
    let start = msg.find('`')? + 1;
    let len = msg[start..].find('`')?;
    Some(msg[start..start + len].to_string())
}

/// A message about a key with no letters or digits ("unknown field ``,
/// expected one of ..."), said with the key quoted as TOML writes it
/// ("unknown key \"\", expected one of ..."). The key may itself hold
/// backticks; having no letters or digits, it ends at the last backtick
/// before the first letter or digit of the rest of the message.
fn unnamed_key(msg: &str) -> Option<String> {
    let (words, rest) = [
        ("unknown field `", "unknown key"),
        ("duplicate field `", "duplicate key"),
        ("duplicate key `", "duplicate key"),
    ]
    .iter()
    .find_map(|(p, w)| msg.strip_prefix(p).map(|rest| (*w, rest)))?;
    let tail = rest.find(char::is_alphanumeric).unwrap_or(rest.len());
    let end = rest[..tail].rfind('`')?;
    let key = toml::Value::String(rest[..end].to_string()).to_string();
    Some(format!("{words} {key}{}", &rest[end + 1..]))
}

/// Where a TOML error is.
#[derive(Debug, PartialEq)]
enum Field {
    /// The value of this field is wrong (or the field itself is).
    Named(String),
    /// The text is not TOML somewhere after this field on the same line.
    After(String),
}

/// serde's own messages, about a field or its value; anything else comes
/// from the TOML parser and is about the text.
const SERDE_MESSAGES: [&str; 8] = [
    "missing field",
    "unknown field",
    "duplicate field",
    "duplicate key",
    "invalid type",
    "invalid value",
    "invalid length",
    "unknown variant",
];

/// The field a TOML error is about and its reason on one line. serde names
/// the field in messages about fields ("missing field `bytes`"); a wrong
/// value is the value of the key written before it; a syntax error is
/// located after the last key of its line (its message, such as "expected
/// `}`", names a token, not a field).
fn toml_problem(text: &str, e: &toml::de::Error) -> (Option<Field>, String) {
    let msg = e
        .message()
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(", ");
    let start = e.span().map(|s| s.start);
    let about_field = ["missing field", "unknown field", "duplicate"]
        .iter()
        .any(|p| msg.starts_with(p));
    if about_field {
        if let Some(name) = named_in(&msg).filter(|n| n.chars().any(char::is_alphanumeric)) {
            return (Some(Field::Named(name)), msg);
        }
        // The key as written names no field (`""`, `"'"`): serde's message
        // would name an empty or punctuation-only field (the proptest found
        // "field ``"). Quote the key as TOML writes it and place the error
        // after the last real key of its line.
        let msg = unnamed_key(&msg).unwrap_or(msg);
        let after = start.and_then(|s| last_key_before(text, s));
        return (after.map(Field::After), msg);
    }
    if SERDE_MESSAGES.iter().any(|p| msg.starts_with(p)) {
        let key = start.and_then(|s| key_before(text, s));
        return (key.map(Field::Named), msg);
    }
    let Some(start) = start else {
        return (None, format!("not valid TOML: {msg}"));
    };
    // A key with nothing after its `=`: the parser says nothing at all.
    if msg.is_empty() {
        if let Some(k) = key_before(text, start) {
            return (
                Some(Field::Named(k)),
                "no value after `=` (the text ends or the value is cut short)".into(),
            );
        }
    }
    let reason = if msg.is_empty() {
        "not valid TOML".to_string()
    } else {
        format!("not valid TOML ({msg})")
    };
    (last_key_before(text, start).map(Field::After), reason)
}

/// The last key written before `offset` on its line.
fn last_key_before(text: &str, offset: usize) -> Option<String> {
    let head = head(text, offset);
    let line_start = head.rfind('\n').map_or(0, |i| i + 1);
    let eq = head[line_start..].rfind('=')?;
    key_before(text, line_start + eq + 1)
}

/// One measured time, as `tpcomm tune` and gpu-bench JSON give them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Measured {
    pub dtype: DType,
    pub mode: Mode,
    pub bytes: u64,
    pub candidate: Candidate,
    pub time_us: f64,
}

impl Table {
    /// `header` (rows ignored) with rows made of `times`; a candidate measured
    /// twice at one point keeps its faster time.
    pub fn from_measured(header: Table, times: &[Measured]) -> Table {
        let mut rows: BTreeMap<(&'static str, Mode, u64), Row> = BTreeMap::new();
        for m in times {
            let row = rows
                .entry((m.dtype.name(), m.mode, m.bytes))
                .or_insert_with(|| Row {
                    dtype: m.dtype,
                    mode: m.mode,
                    bytes: m.bytes,
                    line: 0,
                    times_us: BTreeMap::new(),
                });
            let t = row.times_us.entry(m.candidate).or_insert(m.time_us);
            *t = t.min(m.time_us);
        }
        Table {
            rows: rows.into_values().collect(),
            ..header
        }
    }
}

/// Sizes `tpcomm tune` measures: powers of two from `min` to `max` and the
/// midpoints between them (1.5 x each power of two), all multiples of 16.
pub fn tune_sizes(min: ByteSize, max: ByteSize) -> Vec<u64> {
    let (min, max) = (min.bytes().max(16), max.bytes());
    let mut out = Vec::new();
    let mut p = min.next_power_of_two();
    if min < p && min <= max {
        out.push(min);
    }
    while p <= max {
        out.push(p);
        let mid = p + p / 2;
        if mid <= max && mid < 2 * p && mid.is_multiple_of(16) {
            out.push(mid);
        }
        p *= 2;
    }
    out
}
