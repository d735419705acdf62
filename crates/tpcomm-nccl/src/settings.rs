//! What the environment asks of the library, read once per process.

use std::ffi::OsString;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::OnceLock;
use std::time::Duration;
use tpcomm::env::{self, EnvError};
use tpcomm::ByteSize;

/// How much the library says on stderr.
#[repr(u8)]
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
    /// `TPCOMM_DISABLE=1`, or a bad value of any variable: forward every
    /// call to the real NCCL and set nothing up.
    pub disabled: bool,
    pub level: Level,
    /// `TPCOMM_MAX_BYTES`: the largest all-reduce tpcomm runs; buffers are sized for it.
    pub max_bytes: ByteSize,
    /// `TPCOMM_TIMEOUT_S`: bound on every wait (set-up and kernels).
    pub timeout: Duration,
    /// `TPCOMM_REAL_NCCL`: the real library's path.
    pub real_nccl: Option<String>,
    /// `TPCOMM_STANDALONE`: when tpcomm serves a communicator itself, with
    /// no real NCCL under it (docs/standalone.md).
    pub standalone: Standalone,
    /// `TPCOMM_STANDALONE_WAIT_S`: how long rank 0's census waits in auto mode.
    pub standalone_wait: Duration,
    /// `TPCOMM_RUNTIME_DIR`: where standalone ranks meet, when given.
    pub runtime_dir: Option<std::path::PathBuf>,
    /// `NCCL_COMM_BLOCKING`'s text, when set and text (NCCL's variable:
    /// create.rs's `Blocking::decide` reads it as NCCL does).
    pub nccl_comm_blocking: Option<String>,
    /// `NCCL_COMM_ID` is set: ranks may each make their own unique id, so
    /// auto mode leaves ids unmarked (a census needs one shared id).
    pub nccl_comm_id: bool,
}

/// `TPCOMM_STANDALONE`'s three values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Standalone {
    /// `1`: unique ids are standalone ones, and their communicators are
    /// served with no real NCCL.
    Always,
    /// Unset: unique ids are NCCL's, marked (auto_mode.rs); a communicator made
    /// with a marked id whose ranks are all on this host and share a GPU is
    /// served standalone, any other is NCCL's.
    Auto,
    /// `0`, or tpcomm stepping aside (`TPCOMM_DISABLE=1`, a bad value):
    /// plain interception, ids untouched, no census.
    Never,
}

pub const DEFAULT_MAX_BYTES: ByteSize = ByteSize::mib(16);
/// As long as PyTorch's NCCL watchdog waits by default: a rank may reach its
/// first all-reduce minutes after its peer (compilation, weight loading).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);
/// Long enough for ranks started together to reach creation together, short
/// enough to add little to a creation whose ranks do not all come (ranks of
/// other hosts on rank 0's host).
pub const DEFAULT_STANDALONE_WAIT: Duration = Duration::from_secs(5);

impl Settings {
    /// Reads the variables (declared in `tpcomm::env`) through `get`, so
    /// tests need not touch the process environment. Returns the settings
    /// and the errors about bad values. A bad value is never replaced by a
    /// guess: with any error, tpcomm stays out of the way (`disabled`, every
    /// call goes to the real NCCL) and the errors are logged, because a
    /// drop-in must not fail the program that loaded it over a setting of
    /// its own. Parsing cannot panic (every range is checked first).
    pub fn from_vars(get: impl Fn(&str) -> Option<OsString>) -> (Settings, Vec<EnvError>) {
        let mut bad = Vec::new();
        let disabled = take(&mut bad, env::DISABLE.read_with(&get)).unwrap_or(false);
        let level = match take(&mut bad, env::LOG.read_with(&get)) {
            Some("off") => Level::Off,
            Some("info") => Level::Info,
            _ => Level::Warn,
        };
        let max_bytes = take(&mut bad, env::MAX_BYTES.read_with(&get)).unwrap_or(DEFAULT_MAX_BYTES);
        let timeout = take(&mut bad, env::TIMEOUT_S.read_with(&get)).unwrap_or(DEFAULT_TIMEOUT);
        let real_nccl = take(&mut bad, env::REAL_NCCL.read_with(&get))
            .map(|p| p.to_string_lossy().into_owned());
        let standalone = take(&mut bad, env::STANDALONE.read_with(&get));
        let standalone_wait = take(&mut bad, env::STANDALONE_WAIT_S.read_with(&get))
            .unwrap_or(DEFAULT_STANDALONE_WAIT);
        let runtime_dir = take(&mut bad, env::RUNTIME_DIR.read_with(&get));
        // NCCL's variable: any value (even one that is not text) counts as
        // set, and none is an error of tpcomm's.
        let nccl_comm_id = !matches!(env::NCCL_COMM_ID.read_with(&get), Ok(None));
        let nccl_comm_blocking = env::NCCL_COMM_BLOCKING.read_with(&get).ok().flatten();
        let standalone = match standalone {
            _ if disabled || !bad.is_empty() => Standalone::Never,
            Some(true) => Standalone::Always,
            Some(false) => Standalone::Never,
            None => Standalone::Auto,
        };
        (
            Settings {
                disabled: disabled || !bad.is_empty(),
                level,
                max_bytes,
                timeout,
                real_nccl,
                standalone,
                standalone_wait,
                runtime_dir,
                nccl_comm_blocking,
                nccl_comm_id,
            },
            bad,
        )
    }

    /// The library's configuration of rank `rank` of `world` on `device`
    /// as the drop-in creates every communicator of its own (beside NCCL
    /// or standalone): its buffer, its timeout, and call words on. Ranks
    /// whose calls disagree (count, NCCL type, op, root, collective) are
    /// caught wherever tpcomm serves a call, on separate GPUs as well as a
    /// shared one, in programs nobody here wrote; TPCOMM_CHECK_CALLS=0
    /// turns the check off (every rank alike: creation fails otherwise).
    pub fn cuda_config(
        &self,
        rank: usize,
        world: usize,
        device: usize,
    ) -> tpcomm::cuda::CudaConfig {
        let mut cfg = tpcomm::cuda::CudaConfig::new(rank, world, device);
        cfg.max_bytes = self.max_bytes;
        cfg.timeout = self.timeout;
        cfg.check_calls = cfg.check_calls.or(Some(true));
        cfg
    }
}

/// The value of one variable; a bad one goes to `bad` and reads as unset.
fn take<T>(bad: &mut Vec<EnvError>, r: Result<Option<T>, EnvError>) -> Option<T> {
    r.map_err(|e| bad.push(e)).ok().flatten()
}

/// The level of the settings once they are read, else `Level::Warn`; what
/// the panic path of `ffi::guard` logs by, so that it never reads the
/// settings itself (reading them is what may have panicked).
static LEVEL: AtomicU8 = AtomicU8::new(Level::Warn as u8);

/// The process's settings, from its environment at the first call.
pub fn get() -> &'static Settings {
    static S: OnceLock<Settings> = OnceLock::new();
    S.get_or_init(|| {
        let (s, bad) = Settings::from_vars(|k| std::env::var_os(k));
        LEVEL.store(s.level as u8, Ordering::Relaxed);
        if s.level > Level::Off {
            for b in bad {
                emit(format_args!(
                    "{b}; tpcomm stays out of the way until it is fixed (every call goes to the real NCCL)"
                ));
            }
        }
        s
    })
}

/// Whether lines of `level` are logged, without reading the settings.
pub fn logs(level: Level) -> bool {
    LEVEL.load(Ordering::Relaxed) >= level as u8
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

    fn with(vars: &[(&str, &str)]) -> (Settings, Vec<EnvError>) {
        let m: HashMap<String, OsString> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), OsString::from(v)))
            .collect();
        Settings::from_vars(|k| m.get(k).cloned())
    }

    #[test]
    fn the_drop_in_checks_calls_unless_told_not_to() {
        let (s, _) = with(&[("TPCOMM_MAX_BYTES", "3 MiB"), ("TPCOMM_TIMEOUT_S", "7")]);
        let cfg = s.cuda_config(1, 3, 0);
        assert_eq!((cfg.rank, cfg.world, cfg.device), (1, 3, 0));
        assert_eq!(cfg.max_bytes, ByteSize::mib(3));
        assert_eq!(cfg.timeout, Duration::from_secs(7));
        // On separate GPUs too (the library alone would leave it off there),
        // unless this process's TPCOMM_CHECK_CALLS says otherwise.
        let asked = tpcomm::env::CHECK_CALLS.checked_value();
        assert_eq!(cfg.check_calls, Some(asked.unwrap_or(true)));
    }

    #[test]
    fn defaults_enable_tpcomm_with_16_mib_buffers() {
        let (s, bad) = with(&[]);
        assert!(!s.disabled && bad.is_empty());
        assert_eq!(s.level, Level::Warn);
        assert_eq!(s.max_bytes, ByteSize::mib(16));
        assert_eq!(s.timeout, DEFAULT_TIMEOUT);
        assert_eq!(s.real_nccl, None);
        assert_eq!(s.standalone, Standalone::Auto);
        assert_eq!(s.standalone_wait, Duration::from_secs(5));
    }

    #[test]
    fn standalone_is_on_off_or_auto_and_yields_to_disable_and_bad_values() {
        let mode = |v: &[(&str, &str)]| with(v).0.standalone;
        assert_eq!(mode(&[("TPCOMM_STANDALONE", "1")]), Standalone::Always);
        assert_eq!(mode(&[("TPCOMM_STANDALONE", "on")]), Standalone::Always);
        assert_eq!(mode(&[("TPCOMM_STANDALONE", "0")]), Standalone::Never);
        assert_eq!(mode(&[("TPCOMM_STANDALONE", "")]), Standalone::Auto);
        assert_eq!(mode(&[]), Standalone::Auto);
        let (s, bad) = with(&[("TPCOMM_STANDALONE", "perhaps")]);
        assert!(s.standalone == Standalone::Never && s.disabled && bad.len() == 1);
        for v in ["1", ""] {
            let (s, _) = with(&[("TPCOMM_STANDALONE", v), ("TPCOMM_DISABLE", "1")]);
            assert!(s.standalone == Standalone::Never && s.disabled, "{v}");
        }
        // A bad value of another variable steps auto mode aside too.
        let (s, _) = with(&[("TPCOMM_MAX_BYTES", "lots")]);
        assert_eq!(s.standalone, Standalone::Never);
        // NCCL_COMM_ID is noticed, and is never a bad value of tpcomm's.
        let (s, bad) = with(&[("NCCL_COMM_ID", "10.0.0.1:5000")]);
        assert!(s.nccl_comm_id && bad.is_empty() && !s.disabled);
        assert!(!with(&[]).0.nccl_comm_id);
    }

    #[test]
    fn the_census_wait_is_seconds_and_a_bad_one_steps_aside_without_a_panic() {
        let (s, bad) = with(&[("TPCOMM_STANDALONE_WAIT_S", "0.25")]);
        assert!(bad.is_empty() && !s.disabled);
        assert_eq!(s.standalone_wait, Duration::from_millis(250));
        for v in ["-1", "0", "1e9", "inf", "soon", "3601"] {
            let (s, bad) = with(&[("TPCOMM_STANDALONE_WAIT_S", v)]);
            assert!(s.disabled && s.standalone == Standalone::Never, "{v}");
            assert_eq!(bad.len(), 1, "{v}");
            assert!(
                bad[0].to_string().contains("TPCOMM_STANDALONE_WAIT_S"),
                "{}",
                bad[0]
            );
            assert_eq!(s.standalone_wait, DEFAULT_STANDALONE_WAIT);
        }
    }

    #[test]
    fn disable_takes_the_documented_booleans_only() {
        for on in ["1", "yes", "TRUE", "on"] {
            let (s, bad) = with(&[("TPCOMM_DISABLE", on)]);
            assert!(s.disabled && bad.is_empty(), "{on}");
        }
        for off in ["0", "", "no", "false", "Off"] {
            let (s, bad) = with(&[("TPCOMM_DISABLE", off)]);
            assert!(!s.disabled && bad.is_empty(), "{off}");
        }
        // Not a boolean: an error naming the variable, and tpcomm stays out
        // of the way (it never guesses which the user meant).
        let (s, bad) = with(&[("TPCOMM_DISABLE", "maybe")]);
        assert!(s.disabled);
        assert_eq!(bad.len(), 1);
        assert!(
            bad[0].to_string().contains("TPCOMM_DISABLE=\"maybe\""),
            "{}",
            bad[0]
        );
    }

    #[test]
    fn bad_values_are_reported_by_name_and_disable_tpcomm() {
        let (s, bad) = with(&[
            ("TPCOMM_MAX_BYTES", "lots"),
            ("TPCOMM_LOG", "loud"),
            ("TPCOMM_TIMEOUT_S", "-3"),
        ]);
        assert!(s.disabled);
        assert_eq!(s.level, Level::Warn, "a bad level still lets errors out");
        let names: Vec<&str> = bad.iter().map(|e| e.name()).collect();
        assert_eq!(
            names,
            ["TPCOMM_LOG", "TPCOMM_MAX_BYTES", "TPCOMM_TIMEOUT_S"],
            "{bad:?}"
        );
    }

    /// These once aborted the process that loaded the drop-in.
    #[test]
    fn huge_timeouts_are_errors_not_panics() {
        for v in ["1e20", "18446744073709551616", "1e309", "inf", "NaN"] {
            let (s, bad) = with(&[("TPCOMM_TIMEOUT_S", v)]);
            assert!(s.disabled, "{v}");
            assert_eq!(s.timeout, DEFAULT_TIMEOUT);
            assert_eq!(bad.len(), 1, "{v}");
            assert!(bad[0].to_string().contains("604800"), "{}", bad[0]);
        }
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
        assert!(!s.disabled);
        assert_eq!(s.max_bytes, ByteSize::mib(4));
        assert_eq!(s.level, Level::Info);
        assert_eq!(s.timeout, Duration::from_millis(2500));
        assert_eq!(s.real_nccl.as_deref(), Some("/x/libnccl.so.2"));
    }
}
