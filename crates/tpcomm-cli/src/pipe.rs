//! A closed stdout (`tpcomm bench | head -3`) ends every command quietly
//! with status 0, as other command-line tools do.
//!
//! Rust ignores SIGPIPE, so a write to a closed pipe fails with EPIPE and
//! `println!` panics ("failed printing to stdout: Broken pipe"). `main` runs
//! the command under [`run`]: the panic hook stays silent for that one
//! panic, the unwind runs every destructor on its way out (the rank
//! supervisor ends the rank processes, [`TempDir`] removes its folder), and
//! `run` turns it into exit status 0. Every other panic keeps its message
//! and its status.

use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};

/// Whether a panic's message is `println!`'s for a closed stdout.
fn is_closed_stdout(msg: &str) -> bool {
    msg.contains("failed printing to stdout") && msg.contains("Broken pipe")
}

fn message(payload: &(dyn std::any::Any + Send)) -> Option<&str> {
    payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
}

/// Runs the command; returns its exit status, 0 when stdout was closed.
pub(crate) fn run(command: impl FnOnce() -> i32) -> i32 {
    let default_hook = panic::take_hook();
    panic::set_hook(Box::new(move |info| {
        if !message(info.payload()).is_some_and(is_closed_stdout) {
            default_hook(info);
        }
    }));
    match panic::catch_unwind(AssertUnwindSafe(command)) {
        Ok(code) => code,
        Err(p) if message(p.as_ref()).is_some_and(is_closed_stdout) => 0,
        Err(p) => panic::resume_unwind(p),
    }
}

/// A folder this command made, removed when dropped (also while unwinding).
pub(crate) struct TempDir(PathBuf);

impl TempDir {
    /// Takes ownership of `path`, which the caller has just created.
    pub(crate) fn adopt(path: PathBuf) -> Self {
        TempDir(path)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_printlns_broken_pipe_counts_as_a_closed_stdout() {
        assert!(is_closed_stdout(
            "failed printing to stdout: Broken pipe (os error 32)"
        ));
        assert!(!is_closed_stdout(
            "failed printing to stdout: No space left"
        ));
        assert!(!is_closed_stdout("Broken pipe"));
    }

    #[test]
    fn temp_dir_is_removed_on_drop() {
        let base = tempfile::tempdir().unwrap();
        let d = base.path().join("x");
        std::fs::create_dir(&d).unwrap();
        std::fs::write(d.join("f"), "1").unwrap();
        drop(TempDir::adopt(d.clone()));
        assert!(!d.exists());
    }
}
