//! Shared by the tests that supervise `tpcomm`'s rank processes
//! (bench_supervision.rs for CPU ranks, gpu_supervision.rs for GPU ranks):
//! reading /proc, signalling a rank, bounded waits; gpu_forward.rs for
//! which `tpcomm` to run.
#![allow(dead_code)]

use std::process::Child;
use std::time::{Duration, Instant};

/// The fields of /proc/<pid>/stat after the command name (field 3 onward,
/// so index 19 is the start time), or `None` once the process is gone.
pub fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = s.rsplit_once(')')?;
    Some(rest.split_whitespace().map(String::from).collect())
}

/// Sends "-STOP" or "-KILL" to `pid`, asserting it was delivered.
pub fn signal(pid: u32, sig: &str) {
    let n = match sig {
        "-STOP" => libc::SIGSTOP,
        "-KILL" => libc::SIGKILL,
        other => panic!("signal {other}"),
    };
    // SAFETY: kill(2) on a pid this test's parent process started.
    let r = unsafe { libc::kill(pid as libc::pid_t, n) };
    assert_eq!(
        r,
        0,
        "kill {sig} {pid}: {}",
        std::io::Error::last_os_error()
    );
}

/// Sends SIGKILL to `pid` if it still exists (cleanup; errors ignored).
pub fn kill_quietly(pid: u32) {
    // SAFETY: as in `signal`; the process may be gone already.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
}

/// The child pids of `parent`, oldest first (from /proc/<pid>/task/<pid>/children).
pub fn children(parent: u32) -> Vec<u32> {
    let s = std::fs::read_to_string(format!("/proc/{parent}/task/{parent}/children"))
        .unwrap_or_default();
    let mut v: Vec<u32> = s
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect();
    v.sort();
    v
}

/// The shared-memory segments in /dev/shm that process `pid` made.
pub fn shm_of(pid: u32) -> Vec<String> {
    let tag = format!("-p{pid}-");
    std::fs::read_dir("/dev/shm")
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("tpcomm-u") && n.contains(&tag))
        .collect()
}

/// Waits for `c` at most `limit` (then kills it and fails the test).
pub fn wait_bounded(c: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let t0 = Instant::now();
    loop {
        if let Some(s) = c.try_wait().unwrap() {
            return s;
        }
        if t0.elapsed() > limit {
            let _ = c.kill();
            let _ = c.wait();
            panic!("pid {} still ran after {limit:?}", c.id());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Polls `f` every millisecond for at most `limit`; whether it became true.
pub fn wait_until(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    false
}

/// After a run with a fault: unless the fault came as the run ended and
/// the run still succeeded, the run must have failed, and the supervisor's
/// summary line (the stderr line containing `summary`) must name rank
/// `target` as failed or stopped (at the end, naming it is not required).
pub fn assert_run_names(
    what: &str,
    succeeded: bool,
    err: &str,
    summary: &str,
    target: usize,
    at_end: bool,
) {
    if at_end && succeeded {
        return;
    }
    assert!(!succeeded, "{what}: the run succeeded\n{err}");
    let line = err
        .lines()
        .find(|l| l.contains(summary))
        .unwrap_or_else(|| panic!("{what}: no summary\n{err}"));
    let named = [" failed", " is stopped", " was stopped"]
        .iter()
        .any(|s| line.contains(&format!("rank {target}{s}")));
    assert!(
        named || at_end,
        "{what}: does not name rank {target}: {line}"
    );
}

/// The `tpcomm` to run: the one staged beside this test executable when
/// there is one (bench/device/stage_all.sh puts both in one folder), else
/// the one cargo built with the tests.
pub fn tpcomm() -> std::path::PathBuf {
    let staged = std::env::current_exe()
        .ok()
        .and_then(|e| Some(e.parent()?.join("tpcomm")));
    match staged {
        Some(p) if p.is_file() => p,
        _ => std::path::PathBuf::from(env!("CARGO_BIN_EXE_tpcomm")),
    }
}
