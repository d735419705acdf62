//! The kinds of value an environment variable takes: one [`Parse`]
//! implementation per kind (boolean, size, seconds, count, list, wire,
//! choice, path, text). Each says what it accepts, for the error a bad value
//! gets and for docs/environment.md.

use crate::units::ByteSize;
use crate::wire::Wire;
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

/// How a value is read: one implementation per type of variable.
pub trait Parse: Sync {
    type Value;
    /// The value, or `None` when `raw` (already trimmed, not empty) is not one.
    fn parse(&self, raw: &str) -> Option<Self::Value>;
    /// What the variable takes, for messages and the documentation.
    fn accepted(&self) -> String;
    /// Reads a value that is not valid UTF-8 (only paths take such values).
    fn parse_os(&self, _raw: &OsString) -> Option<Self::Value> {
        None
    }
}

/// A boolean: `1`, `true`, `yes`, `on` or `0`, `false`, `no`, `off`.
#[derive(Clone, Copy, Debug)]
pub struct Flag;

/// The spellings a [`Flag`] accepts, true ones first.
pub const FLAG_TRUE: [&str; 4] = ["1", "true", "yes", "on"];
pub const FLAG_FALSE: [&str; 4] = ["0", "false", "no", "off"];

impl Parse for Flag {
    type Value = bool;
    fn parse(&self, raw: &str) -> Option<bool> {
        if FLAG_TRUE.iter().any(|t| raw.eq_ignore_ascii_case(t)) {
            Some(true)
        } else if FLAG_FALSE.iter().any(|f| raw.eq_ignore_ascii_case(f)) {
            Some(false)
        } else {
            None
        }
    }
    fn accepted(&self) -> String {
        format!(
            "a boolean: {} to turn it on, {} to turn it off",
            FLAG_TRUE.join(", "),
            FLAG_FALSE.join(", ")
        )
    }
}

/// A byte size such as `16 MiB` (see [`ByteSize`]) within `min..=max`.
#[derive(Clone, Copy, Debug)]
pub struct Size {
    pub min: ByteSize,
    pub max: ByteSize,
}

impl Parse for Size {
    type Value = ByteSize;
    fn parse(&self, raw: &str) -> Option<ByteSize> {
        let b: ByteSize = raw.parse().ok()?;
        (self.min..=self.max).contains(&b).then_some(b)
    }
    fn accepted(&self) -> String {
        format!(
            "a size from {} to {} (e.g. \"64 KiB\", \"16MiB\", \"4096\")",
            self.min, self.max
        )
    }
}

/// A number of seconds (decimals allowed) within `min_ms..=max_s`.
#[derive(Clone, Copy, Debug)]
pub struct Seconds {
    pub min_ms: u64,
    pub max_s: u64,
}

impl Parse for Seconds {
    type Value = Duration;
    fn parse(&self, raw: &str) -> Option<Duration> {
        // Only plain decimal numbers: Rust's float parser also takes "inf",
        // "NaN" and exponents, which are not durations anyone means.
        if !raw.chars().all(|c| c.is_ascii_digit() || c == '.') {
            return None;
        }
        let s: f64 = raw.parse().ok()?;
        let (min, max) = (self.min_ms as f64 / 1e3, self.max_s as f64);
        // Checked before the conversion, which panics on overflow.
        if !(s.is_finite() && (min..=max).contains(&s)) {
            return None;
        }
        Duration::try_from_secs_f64(s).ok()
    }
    fn accepted(&self) -> String {
        format!(
            "a number of seconds from {} to {} (e.g. \"30\", \"2.5\")",
            self.min_ms as f64 / 1e3,
            self.max_s
        )
    }
}

/// A whole number within `min..=max` that is a multiple of `step`.
#[derive(Clone, Copy, Debug)]
pub struct Count {
    pub min: u64,
    pub max: u64,
    pub step: u64,
}

impl Parse for Count {
    type Value = u64;
    fn parse(&self, raw: &str) -> Option<u64> {
        if !raw.chars().all(|c| c.is_ascii_digit()) {
            return None;
        }
        let n: u64 = raw.parse().ok()?;
        ((self.min..=self.max).contains(&n) && n.is_multiple_of(self.step.max(1))).then_some(n)
    }
    fn accepted(&self) -> String {
        if self.step > 1 {
            format!(
                "a multiple of {} from {} to {}",
                self.step, self.min, self.max
            )
        } else {
            format!("a whole number from {} to {}", self.min, self.max)
        }
    }
}

/// A comma-separated list of whole numbers, each within `min..=max`.
#[derive(Clone, Copy, Debug)]
pub struct List {
    pub min: u64,
    pub max: u64,
}

impl Parse for List {
    type Value = Vec<u64>;
    fn parse(&self, raw: &str) -> Option<Vec<u64>> {
        let item = Count {
            min: self.min,
            max: self.max,
            step: 1,
        };
        raw.split(',').map(|w| item.parse(w.trim())).collect()
    }
    fn accepted(&self) -> String {
        format!(
            "a comma-separated list of whole numbers from {} to {} (e.g. \"2,3,4\")",
            self.min, self.max
        )
    }
}

/// A quantized wire: `exact`, `int8` or `fp8`, optionally `/GROUP`
/// ([`Wire::parse`], whose rules it takes).
#[derive(Clone, Copy, Debug)]
pub struct WireKind;

impl Parse for WireKind {
    type Value = Wire;
    fn parse(&self, raw: &str) -> Option<Wire> {
        Wire::parse(raw).ok()
    }
    fn accepted(&self) -> String {
        "exact, int8 or fp8, optionally /GROUP with GROUP 32, 64 or 128 (e.g. \"int8/64\")".into()
    }
}

/// One word of a fixed list; the value is the list's spelling.
#[derive(Clone, Copy, Debug)]
pub struct Choice(pub &'static [&'static str]);

impl Parse for Choice {
    type Value = &'static str;
    fn parse(&self, raw: &str) -> Option<&'static str> {
        self.0.iter().copied().find(|c| raw.eq_ignore_ascii_case(c))
    }
    fn accepted(&self) -> String {
        format!("one of {}", self.0.join(", "))
    }
}

/// A file or directory path (any bytes the system allows).
#[derive(Clone, Copy, Debug)]
pub struct Path;

impl Parse for Path {
    type Value = PathBuf;
    fn parse(&self, raw: &str) -> Option<PathBuf> {
        Some(PathBuf::from(raw))
    }
    fn accepted(&self) -> String {
        "a path".into()
    }
    fn parse_os(&self, raw: &OsString) -> Option<PathBuf> {
        Some(PathBuf::from(raw))
    }
}

/// Free text, read as it is.
#[derive(Clone, Copy, Debug)]
pub struct Text;

impl Parse for Text {
    type Value = String;
    fn parse(&self, raw: &str) -> Option<String> {
        Some(raw.to_string())
    }
    fn accepted(&self) -> String {
        "any text".into()
    }
}
