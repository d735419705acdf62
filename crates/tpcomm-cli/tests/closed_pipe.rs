//! A reader that closes its end early (`tpcomm bench | head -3`): every
//! command exits quietly with status 0, prints no panic, ends its rank
//! processes and leaves nothing in the temporary directory.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Runs tpcomm with `args` in a private TMPDIR, reads `lines` lines of its
/// stdout and closes it; returns the exit status, its stderr, the time it
/// took after the close, and what it left in TMPDIR.
fn close_after(args: &[&str], lines: usize) -> (Option<i32>, String, Duration, Vec<String>) {
    let tmp = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tpcomm"))
        .args(args)
        .env("TMPDIR", tmp.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    for _ in 0..lines {
        let mut line = String::new();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "{args:?} ended early"
        );
    }
    drop(out);
    let closed = Instant::now();
    // Bounded: the run would take over a minute if it ignored the closed pipe.
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if closed.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            panic!("{args:?} kept running 30 s after its stdout closed");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let took = closed.elapsed();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    let left = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    (status.code(), err, took, left)
}

fn assert_quiet(args: &[&str], lines: usize) {
    let (code, err, took, left) = close_after(args, lines);
    assert_eq!(code, Some(0), "{args:?}: status {code:?}, stderr:\n{err}");
    for bad in ["panicked", "Broken pipe", "failed printing"] {
        assert!(!err.contains(bad), "{args:?} printed {bad:?}:\n{err}");
    }
    assert!(left.is_empty(), "{args:?} left {left:?} in TMPDIR");
    assert!(
        took < Duration::from_secs(20),
        "{args:?} took {took:?} to stop"
    );
}

#[test]
fn bench_on_rank_processes_stops_quietly_when_its_reader_closes() {
    // The default sweep, 1 KiB to 64 MiB: a minute or more if it ran on.
    assert_quiet(&["bench", "--device", "cpu"], 3);
    assert_quiet(&["bench", "--device", "cpu"], 4);
}

#[test]
fn bench_on_rank_threads_stops_quietly_when_its_reader_closes() {
    assert_quiet(&["bench", "--device", "cpu", "--launch", "threads"], 4);
    assert_quiet(&["bench", "--device", "cpu", "--coll", "all-gather"], 4);
}

#[test]
fn help_and_plan_exit_quietly_on_a_closed_pipe() {
    assert_quiet(&["--help"], 1);
    assert_quiet(&["bench", "--help"], 1);
    assert_quiet(&["explain", "--bytes", "224KiB", "--class", "nvlink"], 1);
}
