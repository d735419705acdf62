//! The P2P check's passes, remembered per group of GPUs, so that a machine
//! pays for the check (a kernel compile the first time, then tens of
//! milliseconds) once per driver rather than at every communicator.
//!
//! What is remembered is only a pass, keyed by the boot, the driver version
//! and the set of GPU UUIDs of the group (whatever ordinals the processes
//! see): a failure is checked again every time, and a reboot (the only way a
//! BIOS, IOMMU or PCIe setting changes), a new driver or another set of GPUs
//! is a new key. Without a boot id (`/proc/sys/kernel/random/boot_id`) no
//! pass is remembered. The file is this user's own (`private_file`: 0600,
//! never through a link, refused when another user could have written it)
//! in the cache directory (`compile::cache_dir`), and its content must be
//! the key's own description, so a file of another key or a damaged one is
//! a miss. Every rank of the group must find the pass for it to count: the
//! ranks agree on that at creation (gpu_comm.rs). Deleting the file
//! makes the next creation check again.

use crate::cuda::compile::{cache_dir, ensure_private_dir, fnv1a};
use std::path::PathBuf;

/// What identifies a group's P2P paths: the driver and the GPUs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Key {
    text: String,
}

impl Key {
    /// The key of a group whose ranks' GPUs are `uuids` (any order, with
    /// repeats when ranks share a GPU) under driver `driver` (major, minor),
    /// in this boot; None when the boot cannot be told apart.
    pub fn here(uuids: &[[u8; 16]], driver: (i32, i32)) -> Option<Key> {
        let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
        let boot = boot.trim();
        (!boot.is_empty()).then(|| Key::new(uuids, driver, boot))
    }

    /// The key of `uuids` under `driver` in the boot `boot`.
    pub fn new(uuids: &[[u8; 16]], driver: (i32, i32), boot: &str) -> Key {
        let mut set: Vec<[u8; 16]> = uuids.to_vec();
        set.sort_unstable();
        set.dedup();
        let gpus: Vec<String> = set
            .iter()
            .map(|u| u.iter().map(|b| format!("{b:02x}")).collect())
            .collect();
        Key {
            text: format!(
                "tpcomm P2P check passed: boot {boot}, driver {}.{}, GPUs {}\n",
                driver.0,
                driver.1,
                gpus.join(" ")
            ),
        }
    }

    /// The file name: a stable hash of the description (the cubin cache's).
    fn file_name(&self) -> String {
        format!("p2p-pass-{:016x}", fnv1a(&[self.text.as_bytes()]))
    }

    fn path(&self) -> Option<PathBuf> {
        cache_dir().map(|d| d.join(self.file_name()))
    }

    /// Whether a pass of this key is remembered (a file of this user holding
    /// exactly this key's description).
    pub fn remembered(&self) -> bool {
        self.path().is_some_and(|p| self.matches(&p))
    }

    fn matches(&self, p: &std::path::Path) -> bool {
        matches!(crate::meet::private_file::read(p), Ok(Some(b)) if b == self.text.as_bytes())
    }

    /// Remembers a pass; a cache that cannot be written only costs a check
    /// next time.
    pub fn remember(&self) {
        if let Some(p) = self.path() {
            if ensure_private_dir(p.parent()) {
                let _ = crate::meet::private_file::write(&p, self.text.as_bytes());
            }
        }
    }

    /// Where the pass is (or would be) remembered, for the log.
    pub fn describe_path(&self) -> String {
        self.path()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "nowhere (no cache directory)".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_is_the_set_of_gpus_and_the_driver() {
        let (a, b) = ([1u8; 16], [2u8; 16]);
        // Order and sharing do not matter; GPUs and driver do.
        let k = |u: &[[u8; 16]], d, boot| Key::new(u, d, boot);
        assert_eq!(k(&[a, b], (13, 0), "x"), k(&[b, a, a], (13, 0), "x"));
        assert_ne!(k(&[a, b], (13, 0), "x"), k(&[a], (13, 0), "x"));
        assert_ne!(k(&[a, b], (13, 0), "x"), k(&[a, b], (13, 1), "x"));
        // A reboot is a new key (BIOS, IOMMU and PCIe settings change only
        // across one).
        assert_ne!(k(&[a, b], (13, 0), "x"), k(&[a, b], (13, 0), "y"));
        assert_ne!(
            k(&[a, b], (13, 0), "x").file_name(),
            k(&[a, b], (12, 8), "x").file_name()
        );
        if std::path::Path::new("/proc/sys/kernel/random/boot_id").exists() {
            assert_eq!(Key::here(&[a], (13, 0)), Key::here(&[a], (13, 0)));
            assert!(Key::here(&[a], (13, 0)).is_some());
        }
    }

    #[test]
    fn only_this_users_exact_description_counts_as_a_pass() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let key = Key::new(&[[7u8; 16]], (13, 0), "boot");
        let f = d.path().join(key.file_name());
        assert!(!key.matches(&f), "no file: no pass");
        crate::meet::private_file::write(&f, key.text.as_bytes()).unwrap();
        assert!(key.matches(&f));
        // Another key's description in this key's file is a miss.
        let other = Key::new(&[[8u8; 16]], (13, 0), "boot");
        crate::meet::private_file::write(&f, other.text.as_bytes()).unwrap();
        assert!(!key.matches(&f));
        // A file others may write is refused, whatever it holds.
        crate::meet::private_file::write(&f, key.text.as_bytes()).unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert!(!key.matches(&f));
        // A link to a file holding the description is refused too.
        let real = d.path().join("real");
        crate::meet::private_file::write(&real, key.text.as_bytes()).unwrap();
        std::fs::remove_file(&f).unwrap();
        std::os::unix::fs::symlink(&real, &f).unwrap();
        assert!(!key.matches(&f));
    }
}
