//! Runs one case as a child process group with a wall-clock limit: the child's last
//! `RESULT` line is its verdict; expiry is a hang (the group is killed), a signal a crash.

use std::io::{BufRead, BufReader};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Status {
    Pass,
    Fail,
    Hang,
    Crash,
    Skip,
}

impl Status {
    pub fn word(self) -> &'static str {
        match self {
            Status::Pass => "PASS",
            Status::Fail => "FAIL",
            Status::Hang => "HANG",
            Status::Crash => "CRASH",
            Status::Skip => "SKIP",
        }
    }
    pub fn parse(w: &str) -> Option<Status> {
        Some(match w {
            "PASS" => Status::Pass,
            "FAIL" => Status::Fail,
            "HANG" => Status::Hang,
            "CRASH" => Status::Crash,
            "SKIP" => Status::Skip,
            _ => return None,
        })
    }
}

pub struct Outcome {
    pub status: Status,
    pub detail: String,
    pub seconds: f64,
}

/// Runs `cmd` in its own process group, at most `limit`; `echo` copies its stderr through.
pub fn run(mut cmd: Command, limit: Duration, echo: bool) -> Outcome {
    let start = Instant::now();
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .stdin(Stdio::null())
        .process_group(0);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            return Outcome {
                status: Status::Fail,
                detail: format!("cannot start the case process: {e}"),
                seconds: 0.0,
            }
        }
    };
    let result: Arc<Mutex<Option<String>>> = Arc::default();
    let tail: Arc<Mutex<Vec<String>>> = Arc::default();
    let mut readers = Vec::new();
    if let Some(out) = child.stdout.take() {
        let result = result.clone();
        readers.push(std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if let Some(rest) = line.strip_prefix("RESULT ") {
                    *result.lock().unwrap_or_else(|p| p.into_inner()) = Some(rest.to_string());
                }
            }
        }));
    }
    if let Some(err) = child.stderr.take() {
        let tail = tail.clone();
        readers.push(std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                if echo {
                    eprintln!("  | {line}");
                }
                let mut t = tail.lock().unwrap_or_else(|p| p.into_inner());
                t.push(line);
                if t.len() > 3 {
                    t.remove(0);
                }
            }
        }));
    }
    let pid = child.id();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if start.elapsed() < limit => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) => break None,
            Err(_) => break None,
        }
    };
    // Whatever happened, nothing of the case may outlive it (rank processes included).
    crate::sys::kill_group(pid);
    let status = match status {
        Some(s) => Some(s),
        None => {
            let _ = child.wait();
            None
        }
    };
    for r in readers {
        let _ = r.join();
    }
    let seconds = start.elapsed().as_secs_f64();
    let tail = tail.lock().unwrap_or_else(|p| p.into_inner()).join(" / ");
    let result = result.lock().unwrap_or_else(|p| p.into_inner()).clone();
    match status {
        None => Outcome {
            status: Status::Hang,
            detail: format!(
                "no result within {:.0} s, killed; last output: {tail}",
                limit.as_secs_f64()
            ),
            seconds,
        },
        Some(s) if s.signal().is_some() => Outcome {
            status: Status::Crash,
            detail: format!(
                "killed by signal {}; last output: {tail}",
                s.signal().unwrap_or(0)
            ),
            seconds,
        },
        Some(s) => match result
            .as_deref()
            .and_then(|r| r.split_once(' ').or(Some((r, ""))))
        {
            Some((w, d)) if Status::parse(w).is_some() => Outcome {
                status: Status::parse(w).unwrap_or(Status::Fail),
                detail: d.to_string(),
                seconds,
            },
            _ => Outcome {
                status: Status::Fail,
                detail: format!(
                    "case process exited with {} and no result; last output: {tail}",
                    s.code().unwrap_or(-1)
                ),
                seconds,
            },
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut c = Command::new("sh");
        c.arg("-c").arg(script);
        c
    }

    #[test]
    fn a_result_line_is_the_verdict() {
        let o = run(
            sh("echo noise; echo 'RESULT PASS all good'"),
            Duration::from_secs(10),
            false,
        );
        assert_eq!(o.status, Status::Pass);
        assert_eq!(o.detail, "all good");
        let o = run(
            sh("echo 'RESULT FAIL 3 wrong'; exit 1"),
            Duration::from_secs(10),
            false,
        );
        assert_eq!(o.status, Status::Fail);
    }

    #[test]
    fn a_sleeping_child_and_its_children_are_killed_as_a_hang() {
        let start = Instant::now();
        let o = run(
            sh("echo PROGRESS waiting >&2; sleep 30 & sleep 30"),
            Duration::from_millis(500),
            false,
        );
        assert_eq!(o.status, Status::Hang);
        assert!(o.detail.contains("PROGRESS waiting"), "{}", o.detail);
        assert!(start.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn a_signal_is_a_crash_and_silence_is_a_failure() {
        let o = run(sh("kill -SEGV $$"), Duration::from_secs(10), false);
        assert_eq!(o.status, Status::Crash);
        let o = run(sh("exit 3"), Duration::from_secs(10), false);
        assert_eq!(o.status, Status::Fail);
        assert!(o.detail.contains("exited with 3"));
    }
}
