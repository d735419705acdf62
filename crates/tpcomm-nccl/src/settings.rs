//! What the environment asks of the library, read once per process.

use std::sync::OnceLock;
use std::time::Duration;
use tpcomm::ByteSize;

/// How much the library says on stderr.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Nothing, not even errors (`TPCOMM_LOG=off`).
    Off,
    /// Errors, and the one line per communicator with the bytes it took (default).
    Warn,
    /// Every decision at creation and the first all-reduce of each size class.
    Info,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// `TPCOMM_DISABLE=1`: forward every call to the real NCCL and set nothing up.
    pub disabled: bool,
    pub level: Level,
    /// `TPCOMM_MAX_BYTES`: the largest all-reduce tpcomm runs; buffers are sized for it.
    pub max_bytes: ByteSize,
    /// `TPCOMM_TIMEOUT_S`: bound on every wait (set-up and kernels).
    pub timeout: Duration,
    /// `TPCOMM_REAL_NCCL`: the real library's path.
    pub real_nccl: Option<String>,
}

pub const DEFAULT_MAX_BYTES: ByteSize = ByteSize::mib(16);
/// As long as PyTorch's NCCL watchdog waits by default: a rank may reach its
/// first all-reduce minutes after its peer (compilation, weight loading).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

impl Settings {
    /// Reads the variables through `get`, so tests need not touch the process
    /// environment. Returns the settings and the complaints about bad values
    /// (which fall back to their defaults).
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> (Settings, Vec<String>) {
        let mut bad = Vec::new();
        let disabled = match get("TPCOMM_DISABLE").as_deref().map(str::trim) {
            None | Some("") | Some("0") | Some("false") | Some("no") => false,
            Some(_) => true,
        };
        let level = match get("TPCOMM_LOG").as_deref().map(str::trim) {
            None | Some("") | Some("warn") | Some("error") => Level::Warn,
            Some("off") | Some("none") | Some("0") => Level::Off,
            Some("info") | Some("debug") | Some("1") => Level::Info,
            Some(other) => {
                bad.push(format!(
                    "TPCOMM_LOG={other:?} is not one of off, warn, info; using warn"
                ));
                Level::Warn
            }
        };
        let max_bytes = match get("TPCOMM_MAX_BYTES") {
            None => DEFAULT_MAX_BYTES,
            Some(v) => match v.parse::<ByteSize>() {
                Ok(b) if b.bytes() > 0 => b,
                _ => {
                    bad.push(format!(
                        "TPCOMM_MAX_BYTES={v:?} is not a size above 0 such as \"16 MiB\"; using {DEFAULT_MAX_BYTES}"
                    ));
                    DEFAULT_MAX_BYTES
                }
            },
        };
        let timeout = match get("TPCOMM_TIMEOUT_S") {
            None => DEFAULT_TIMEOUT,
            Some(v) => match v.trim().parse::<f64>() {
                Ok(s) if s.is_finite() && s > 0.0 => Duration::from_secs_f64(s),
                _ => {
                    bad.push(format!(
                        "TPCOMM_TIMEOUT_S={v:?} is not a positive number of seconds; using {}",
                        DEFAULT_TIMEOUT.as_secs()
                    ));
                    DEFAULT_TIMEOUT
                }
            },
        };
        let real_nccl = get("TPCOMM_REAL_NCCL").filter(|v| !v.is_empty());
        (
            Settings {
                disabled,
                level,
                max_bytes,
                timeout,
                real_nccl,
            },
            bad,
        )
    }
}

/// The process's settings, from its environment at the first call.
pub fn get() -> &'static Settings {
    static S: OnceLock<Settings> = OnceLock::new();
    S.get_or_init(|| {
        let (s, bad) = Settings::from_vars(|k| std::env::var(k).ok());
        if s.level > Level::Off {
            for b in bad {
                emit(format_args!("{b}"));
            }
        }
        s
    })
}

/// Writes one log line with a single write, so that the lines of the ranks
/// (processes sharing a terminal) do not interleave mid-line.
pub fn emit(msg: std::fmt::Arguments) {
    use std::io::Write;
    let line = format!("tpcomm: {msg}\n");
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// Logs at info level (`TPCOMM_LOG=info`).
macro_rules! info {
    ($($t:tt)*) => {
        if $crate::settings::get().level >= $crate::settings::Level::Info {
            $crate::settings::emit(format_args!($($t)*));
        }
    };
}

/// Logs unless `TPCOMM_LOG=off`: errors and the bytes each communicator took.
macro_rules! warn_ {
    ($($t:tt)*) => {
        if $crate::settings::get().level >= $crate::settings::Level::Warn {
            $crate::settings::emit(format_args!($($t)*));
        }
    };
}
pub(crate) use {info, warn_ as warn};

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn with(vars: &[(&str, &str)]) -> (Settings, Vec<String>) {
        let m: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Settings::from_vars(|k| m.get(k).cloned())
    }

    #[test]
    fn defaults_enable_tpcomm_with_16_mib_buffers() {
        let (s, bad) = with(&[]);
        assert!(!s.disabled && bad.is_empty());
        assert_eq!(s.level, Level::Warn);
        assert_eq!(s.max_bytes, ByteSize::mib(16));
        assert_eq!(s.real_nccl, None);
    }

    #[test]
    fn disable_accepts_one_and_rejects_zero() {
        assert!(with(&[("TPCOMM_DISABLE", "1")]).0.disabled);
        assert!(with(&[("TPCOMM_DISABLE", "yes")]).0.disabled);
        assert!(!with(&[("TPCOMM_DISABLE", "0")]).0.disabled);
        assert!(!with(&[("TPCOMM_DISABLE", "")]).0.disabled);
    }

    #[test]
    fn bad_values_fall_back_and_are_reported() {
        let (s, bad) = with(&[
            ("TPCOMM_MAX_BYTES", "lots"),
            ("TPCOMM_LOG", "loud"),
            ("TPCOMM_TIMEOUT_S", "-3"),
        ]);
        assert_eq!(s.max_bytes, DEFAULT_MAX_BYTES);
        assert_eq!(s.level, Level::Warn);
        assert_eq!(s.timeout, DEFAULT_TIMEOUT);
        assert_eq!(bad.len(), 3, "{bad:?}");
    }

    #[test]
    fn sizes_and_levels_parse() {
        let (s, bad) = with(&[
            ("TPCOMM_MAX_BYTES", "4 MiB"),
            ("TPCOMM_LOG", "info"),
            ("TPCOMM_TIMEOUT_S", "2.5"),
            ("TPCOMM_REAL_NCCL", "/x/libnccl.so.2"),
        ]);
        assert!(bad.is_empty(), "{bad:?}");
        assert_eq!(s.max_bytes, ByteSize::mib(4));
        assert_eq!(s.level, Level::Info);
        assert_eq!(s.timeout, Duration::from_millis(2500));
        assert_eq!(s.real_nccl.as_deref(), Some("/x/libnccl.so.2"));
    }
}
