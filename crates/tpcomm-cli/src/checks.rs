//! The checks every command makes on its options before any work starts
//! (before a rank is started, a GPU is looked for or a measurement runs), so
//! a bad value is refused once, by the parent, in one message that names the
//! flag and says what it takes. A [`CheckError`] is a usage error: the
//! command exits with [`USAGE`] (2), as clap does for the options it refuses
//! itself; a run that started and failed exits 1.
//!
//! - output paths (`--json`, `--out`, `--plot`): the directory they go in
//!   exists and this user may write there; nothing is created or left;
//! - message sizes (`--bytes`, `--min-bytes`/`--min`, `--max-bytes`/`--max`):
//!   at least one element, a whole number of elements, smallest at most
//!   largest;
//! - the CPU bench's `--max-message` and `--piece`: as the host communicator
//!   of each rank would check them (`tpcomm::HostConfig::check`);
//! - more CPU ranks than cores: a warning, not an error ([`cores_warning`]).

use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use tpcomm::{ByteSize, DType, HostConfig};

/// The exit status of a usage error: an option refused before any work.
pub(crate) const USAGE: i32 = 2;

/// The exit status of subcommand `name`: [`USAGE`] when `options` (the checks
/// made before any work) refused, else 0 or, when `run` fails, 1; each
/// error printed after `tpcomm {name}: `.
pub(crate) fn exit_status<E: std::fmt::Display, F: std::fmt::Display>(
    name: &str,
    options: Result<(), E>,
    run: impl FnOnce() -> Result<(), F>,
) -> i32 {
    if let Err(e) = options {
        eprintln!("tpcomm {name}: {e}");
        return USAGE;
    }
    match run() {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("tpcomm {name}: {e}");
            1
        }
    }
}

/// An option refused before the run starts.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CheckError {
    /// An output file or folder whose directory does not exist.
    #[error("{flag} {}: the directory {} does not exist; create it first (mkdir -p {}) or give a path in an existing directory", .path.display(), .dir.display(), .dir.display())]
    NoDirectory {
        flag: &'static str,
        path: PathBuf,
        dir: PathBuf,
    },
    /// A part of the path that should be a directory is something else.
    #[error("{flag} {}: {} is not a directory; give a path in an existing directory", .path.display(), .dir.display())]
    NotADirectory {
        flag: &'static str,
        path: PathBuf,
        dir: PathBuf,
    },
    /// An output file that is a directory.
    #[error("{flag} {}: is a directory; give the path of a file to write, e.g. {}", .path.display(), .path.join("out.json").display())]
    IsADirectory { flag: &'static str, path: PathBuf },
    /// A place this user may not write to (or cannot look at).
    #[error("{flag} {}: cannot write to {} ({why}); give a path in a directory you can write to", .path.display(), .dir.display())]
    NotWritable {
        flag: &'static str,
        path: PathBuf,
        dir: PathBuf,
        why: std::io::Error,
    },
    /// An empty path.
    #[error("{flag}: the path is empty; give a file path")]
    EmptyPath { flag: &'static str },
    /// A value out of its range: `why` says what the flag takes.
    #[error("{flag} {value}: {why}")]
    Value {
        flag: &'static str,
        value: String,
        why: String,
    },
    /// The smallest message above the largest.
    #[error("{min_flag} {min} is above {max_flag} {max}; give {min_flag} at most {max_flag}")]
    MinAboveMax {
        min_flag: &'static str,
        min: ByteSize,
        max_flag: &'static str,
        max: ByteSize,
    },
}

impl CheckError {
    /// The flag refused.
    pub(crate) fn flag(&self) -> &'static str {
        match self {
            CheckError::NoDirectory { flag, .. }
            | CheckError::NotADirectory { flag, .. }
            | CheckError::IsADirectory { flag, .. }
            | CheckError::NotWritable { flag, .. }
            | CheckError::EmptyPath { flag }
            | CheckError::Value { flag, .. } => flag,
            CheckError::MinAboveMax { min_flag, .. } => min_flag,
        }
    }

    /// The message after the flag, for error types that name it themselves
    /// (`invalid FLAG: DETAIL`).
    pub(crate) fn detail(&self) -> String {
        let flag = self.flag();
        let text = self.to_string();
        text.strip_prefix(flag)
            .unwrap_or(&text)
            .trim_start_matches([' ', ':'])
            .to_string()
    }
}

/// As the library's error (the GPU benches' checks return it): `invalid
/// FLAG: ...`, the rest of the message unchanged.
impl From<CheckError> for tpcomm::Error {
    fn from(e: CheckError) -> Self {
        tpcomm::Error::invalid(e.flag(), e.detail())
    }
}

/// A file the command will write at `path` (`--json FILE`): refused now when
/// it could not be written then. The file itself need not exist; its
/// directory must, and this user must be able to write there (or to the
/// file, when it exists). Nothing is created.
pub(crate) fn output_file(flag: &'static str, path: &Path) -> Result<(), CheckError> {
    if path.as_os_str().is_empty() {
        return Err(CheckError::EmptyPath { flag });
    }
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => Err(CheckError::IsADirectory {
            flag,
            path: path.to_path_buf(),
        }),
        Ok(_) => writable(flag, path, path, rustix::fs::Access::WRITE_OK),
        Err(_) => existing_dir(flag, path, &parent(path)),
    }
}

/// A folder the command creates (with any missing parents) and writes into
/// (`tune --out FILE`'s directory, `plan spec --plot DIR`): refused now when
/// it could not be made or written then. `path` is the folder when
/// `is_dir`, else a file in it. Nothing is created.
pub(crate) fn output_tree(flag: &'static str, path: &Path, is_dir: bool) -> Result<(), CheckError> {
    if path.as_os_str().is_empty() {
        return Err(CheckError::EmptyPath { flag });
    }
    if !is_dir {
        if let Ok(m) = std::fs::metadata(path) {
            return if m.is_dir() {
                Err(CheckError::IsADirectory {
                    flag,
                    path: path.to_path_buf(),
                })
            } else {
                writable(flag, path, path, rustix::fs::Access::WRITE_OK)
            };
        }
    }
    // The nearest folder that exists, from the folder itself upwards.
    let mut dir = if is_dir {
        path.to_path_buf()
    } else {
        parent(path)
    };
    loop {
        match std::fs::metadata(&dir) {
            Ok(_) => return existing_dir(flag, path, &dir),
            Err(e) if e.kind() == ErrorKind::NotFound => match dir.parent() {
                Some(up) if !up.as_os_str().is_empty() => dir = up.to_path_buf(),
                _ => return existing_dir(flag, path, Path::new(".")),
            },
            Err(_) => return existing_dir(flag, path, &dir),
        }
    }
}

/// The directory a file path names (`.` for a bare file name).
fn parent(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// `dir` (where `path` goes) exists, is a directory, and this user may
/// create files in it.
fn existing_dir(flag: &'static str, path: &Path, dir: &Path) -> Result<(), CheckError> {
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => writable(
            flag,
            path,
            dir,
            rustix::fs::Access::WRITE_OK | rustix::fs::Access::EXEC_OK,
        ),
        Ok(_) => Err(CheckError::NotADirectory {
            flag,
            path: path.to_path_buf(),
            dir: dir.to_path_buf(),
        }),
        Err(e) if e.kind() == ErrorKind::NotFound => Err(CheckError::NoDirectory {
            flag,
            path: path.to_path_buf(),
            dir: dir.to_path_buf(),
        }),
        // A file where a directory should be, on the way to `dir`.
        Err(e) if e.kind() == ErrorKind::NotADirectory => Err(CheckError::NotADirectory {
            flag,
            path: path.to_path_buf(),
            dir: first_non_dir(dir),
        }),
        Err(why) => Err(CheckError::NotWritable {
            flag,
            path: path.to_path_buf(),
            dir: dir.to_path_buf(),
            why,
        }),
    }
}

/// The first part of `dir` that exists and is not a directory.
fn first_non_dir(dir: &Path) -> PathBuf {
    dir.ancestors()
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .find(|p| std::fs::metadata(p).is_ok_and(|m| !m.is_dir()))
        .unwrap_or(dir)
        .to_path_buf()
}

/// access(2): whether this user may do `how` to `at` (permissions, a
/// read-only file system).
fn writable(
    flag: &'static str,
    path: &Path,
    at: &Path,
    how: rustix::fs::Access,
) -> Result<(), CheckError> {
    rustix::fs::access(at, how).map_err(|e| CheckError::NotWritable {
        flag,
        path: path.to_path_buf(),
        dir: at.to_path_buf(),
        why: e.into(),
    })
}

/// A message size: at least one element of `dtype`, and a whole number of
/// them.
pub(crate) fn message_size(
    flag: &'static str,
    value: ByteSize,
    dtype: DType,
) -> Result<(), CheckError> {
    let b = value.bytes();
    let e = dtype.size() as u64;
    let why = if b == 0 {
        format!("a message needs at least one element; give {} (one {dtype} element) or more, a multiple of {}", ByteSize::b(e), ByteSize::b(e))
    } else if !b.is_multiple_of(e) {
        let down = b / e * e;
        let up = down + e;
        let near = if down == 0 {
            format!("{}", ByteSize::b(up))
        } else {
            format!("{} or {}", ByteSize::b(down), ByteSize::b(up))
        };
        format!("not a whole number of {dtype} elements ({e} bytes each); give a multiple of {} (nearest: {near})", ByteSize::b(e))
    } else {
        return Ok(());
    };
    Err(CheckError::Value {
        flag,
        value: value.to_string(),
        why,
    })
}

/// The smallest and largest message of a sweep: each a message size of
/// `dtype`, the smallest at most the largest.
pub(crate) fn size_range(
    (min_flag, min): (&'static str, ByteSize),
    (max_flag, max): (&'static str, ByteSize),
    dtype: DType,
) -> Result<(), CheckError> {
    message_size(min_flag, min, dtype)?;
    message_size(max_flag, max, dtype)?;
    if min > max {
        return Err(CheckError::MinAboveMax {
            min_flag,
            min,
            max_flag,
            max,
        });
    }
    Ok(())
}

/// The CPU bench's `--max-message` and `--piece` for `ranks` ranks, as each
/// rank's host communicator would check them, but once and before any rank
/// starts.
pub(crate) fn host_sizes(
    ranks: usize,
    max_message: ByteSize,
    piece: ByteSize,
) -> Result<(), CheckError> {
    // No rendezvous is made or opened: check() only looks at the values.
    let mut cfg = HostConfig::new(0, ranks, ".");
    cfg.max_message = max_message;
    let detail = |e: tpcomm::Error| match e {
        tpcomm::Error::InvalidArgument { detail, .. } => detail,
        other => other.to_string(),
    };
    // --max-message first with the default piece (which fits every
    // --max-message the communicator takes), so each error names its flag.
    cfg.piece = tpcomm::cpu::DEFAULT_PIECE;
    cfg.check().map_err(|e| CheckError::Value {
        flag: "--max-message",
        value: max_message.to_string(),
        why: format!("{}; give 4 KiB to 16 GiB", detail(e)),
    })?;
    cfg.piece = piece;
    cfg.check().map_err(|e| CheckError::Value {
        flag: "--piece",
        value: piece.to_string(),
        why: format!(
            "{}; give at least 4 KiB and at least --max-message / 2048 ({})",
            detail(e),
            ByteSize::b(max_message.bytes().div_ceil(2048).max(4096))
        ),
    })
}

/// The warning for more CPU ranks than this process has cores, or `None`.
/// Ranks spin while they wait for each other, so on shared cores each wait
/// lasts until the peer's next time slice.
pub(crate) fn cores_warning(ranks: usize, cores: Option<usize>) -> Option<String> {
    let cores = cores?;
    (ranks > cores).then(|| {
        format!(
            "warning: --ranks {ranks} is more than the {cores} core{} this process may use; ranks will wait for each other's time slices, so the timings will be unrepresentative (far slower than with a core per rank)",
            if cores == 1 { "" } else { "s" }
        )
    })
}

/// The cores this process may use (affinity and cgroup limits included).
pub(crate) fn cores() -> Option<usize> {
    std::thread::available_parallelism().ok().map(|n| n.get())
}

#[cfg(test)]
mod tests;
