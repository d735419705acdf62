//! Is there room for a segment? Checked before anything is allocated: the
//! free space of /dev/shm (a tmpfs: its pages are memory) and the memory the
//! kernel reports as available.

use crate::error::{Error, Result};
use crate::units::ByteSize;
use std::path::Path;

/// Free bytes of the file system at `dir` (for an unprivileged user).
pub(crate) fn fs_free(dir: &Path) -> Option<u64> {
    crate::sys::shm::fs_free(dir)
}

/// `MemAvailable` of /proc/meminfo, in bytes.
pub(crate) fn mem_available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib.saturating_mul(1024))
}

/// The check itself, on given figures (`None`: unknown, not checked).
pub(crate) fn check(
    what: &str,
    needed: u64,
    shm_free: Option<u64>,
    mem_free: Option<u64>,
) -> Result<()> {
    for (avail, place) in [
        (shm_free, "free space in /dev/shm"),
        (mem_free, "available memory"),
    ] {
        if let Some(a) = avail {
            if needed > a {
                return Err(Error::OutOfMemory {
                    what: format!("{what} (checked against {place})"),
                    needed: ByteSize::b(needed),
                    available: ByteSize::b(a),
                });
            }
        }
    }
    Ok(())
}

/// Fails when a segment of `needed` bytes does not fit this machine now.
pub(crate) fn check_segment(needed: usize, world: usize) -> Result<()> {
    check(
        &format!("the shared segment of {world} ranks"),
        needed as u64,
        fs_free(Path::new("/dev/shm")),
        mem_available(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn too_big_names_needed_and_available_and_unknown_figures_pass() {
        let e = check("x", 3 << 30, Some(1 << 30), Some(8 << 30))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("3 GiB") && e.contains("1 GiB") && e.contains("/dev/shm"),
            "{e}"
        );
        let e = check("x", 3 << 30, Some(8 << 30), Some(2 << 30))
            .unwrap_err()
            .to_string();
        assert!(e.contains("available memory"), "{e}");
        assert!(check("x", 3 << 30, None, None).is_ok());
        assert!(check("x", 1 << 20, Some(1 << 30), Some(1 << 30)).is_ok());
        assert!(fs_free(Path::new("/dev/shm")).is_some());
        assert!(mem_available().is_some());
    }
}
