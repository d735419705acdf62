//! Where NCCL is looked for when `$TPCOMM_NCCL_LIBRARY` is not set.

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::path::{Path, PathBuf};

/// Set to the full path of `libnccl.so.2` to use that library and no other.
pub const NCCL_LIBRARY_ENV: &str = "TPCOMM_NCCL_LIBRARY";

/// The sonames handed to the dynamic loader, most specific first: pip's and
/// most distributions' NCCL ships only `libnccl.so.2` (the unversioned name
/// comes with development packages).
const SONAMES: [&str; 2] = ["libnccl.so.2", "libnccl.so"];

/// Folders where NCCL is often installed off the loader's search path.
const SYSTEM_DIRS: [&str; 5] = [
    "/usr/local/cuda/lib64",
    "/usr/local/cuda/targets/x86_64-linux/lib",
    "/usr/local/nccl/lib",
    "/opt/nccl/lib",
    "/usr/lib64",
];

/// The `site-packages/<this>` folders where NVIDIA's wheels put NCCL.
const WHEEL_DIRS: [&str; 3] = ["nvidia/nccl/lib", "nvidia/cu13/lib", "nvidia/cu12/lib"];

/// One place to try.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Candidate {
    /// A bare name for the dynamic loader's own search.
    Soname(&'static str),
    /// A file path, opened as is.
    Path(PathBuf),
}

impl Candidate {
    pub(super) fn as_os_str(&self) -> &OsStr {
        match self {
            Candidate::Soname(s) => OsStr::new(s),
            Candidate::Path(p) => p.as_os_str(),
        }
    }
}

impl fmt::Display for Candidate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Candidate::Soname(s) => f.write_str(s),
            Candidate::Path(p) => write!(f, "{}", p.display()),
        }
    }
}

/// The places tried when `$TPCOMM_NCCL_LIBRARY` is not set, in order: the
/// sonames, then the files that exist among the well-known folders.
pub fn candidates() -> Vec<Candidate> {
    let prefixes = python_prefixes(
        crate::env::VIRTUAL_ENV
            .checked_value()
            .map(PathBuf::into_os_string),
        crate::env::CONDA_PREFIX
            .checked_value()
            .map(PathBuf::into_os_string),
        crate::env::HOME
            .checked_value()
            .map(PathBuf::into_os_string),
    );
    candidates_in(&prefixes, |p| p.is_file())
}

/// Python install prefixes, the active environment first.
fn python_prefixes(
    venv: Option<OsString>,
    conda: Option<OsString>,
    home: Option<OsString>,
) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    out.extend(venv.filter(|v| !v.is_empty()).map(PathBuf::from));
    out.extend(conda.filter(|v| !v.is_empty()).map(PathBuf::from));
    out.push(PathBuf::from("/usr/local"));
    out.push(PathBuf::from("/usr"));
    out.extend(
        home.filter(|v| !v.is_empty())
            .map(|h| PathBuf::from(h).join(".local")),
    );
    out
}

/// The candidate list for the given Python prefixes, keeping the paths for
/// which `exists` holds (a parameter so tests need no real files).
pub(super) fn candidates_in(
    prefixes: &[PathBuf],
    exists: impl Fn(&Path) -> bool,
) -> Vec<Candidate> {
    let mut out: Vec<Candidate> = SONAMES.iter().map(|s| Candidate::Soname(s)).collect();
    let mut paths: Vec<PathBuf> = SYSTEM_DIRS
        .iter()
        .map(|d| Path::new(d).join(SONAMES[0]))
        .collect();
    for prefix in prefixes {
        for site in site_dirs(prefix) {
            for wheel in WHEEL_DIRS {
                paths.push(site.join(wheel).join(SONAMES[0]));
            }
        }
    }
    for p in paths {
        if exists(&p) && !out.contains(&Candidate::Path(p.clone())) {
            out.push(Candidate::Path(p));
        }
    }
    out
}

/// `<prefix>/lib/python3.*/{site,dist}-packages` and Debian's
/// `<prefix>/lib/python3/dist-packages`, newest Python first.
fn site_dirs(prefix: &Path) -> Vec<PathBuf> {
    let lib = prefix.join("lib");
    let mut versions: Vec<String> = std::fs::read_dir(&lib)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| n.starts_with("python3"))
                .collect()
        })
        .unwrap_or_default();
    // "python3.12" before "python3.9": compare the minor version as a number.
    versions.sort_by_key(|n| {
        std::cmp::Reverse(
            n.strip_prefix("python3.")
                .and_then(|m| m.parse::<u32>().ok())
                .unwrap_or(0),
        )
    });
    let mut out = Vec::new();
    for v in versions {
        for kind in ["site-packages", "dist-packages"] {
            out.push(lib.join(&v).join(kind));
        }
    }
    out
}

#[cfg(test)]
mod tests;
