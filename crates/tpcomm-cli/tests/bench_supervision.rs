//! `tpcomm bench` (the real binary, CPU ranks as processes) when a rank is
//! killed or stopped during set-up, during calls, or at the end: the parent
//! ends every rank within the ranks' timeout + 1 s, its error names the
//! rank, and no segment of the run is left in /dev/shm. Also: two runs on
//! one rendezvous path never mix ranks, and the bounds on --iters, --warmup
//! and --max-bytes.

use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod procs;
use procs::{assert_run_names, children, shm_of, signal, stat_fields, wait_bounded, wait_until};

const TIMEOUT: Duration = Duration::from_secs(1);

/// A CPU bench of 2 ranks meeting at `rv`, each wait bounded by `timeout`.
fn bench(rv: &Path, iters: &str, max: &str, timeout: &str) -> Child {
    Command::new(env!("CARGO_BIN_EXE_tpcomm"))
        .args([
            "bench", "--device", "cpu", "--ranks", "2", "--algo", "one-shot",
        ])
        .args(["--min-bytes", "1KiB", "--max-bytes", max, "--iters", iters])
        .args([
            "--warmup",
            "0",
            "--max-message",
            "64KiB",
            "--piece",
            "64KiB",
        ])
        .args(["--timeout", timeout, "--rendezvous"])
        .arg(rv)
        .env_remove("TPCOMM_JOB_KEY")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The rank a process of `tpcomm bench` runs as (from its TPCOMM_BENCH_WORKER).
fn rank_of(pid: u32) -> Option<usize> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    env.split(|b| *b == 0).find_map(|var| {
        let spec = var.strip_prefix(b"TPCOMM_BENCH_WORKER=")?;
        String::from_utf8_lossy(spec)
            .split(' ')
            .next()?
            .parse()
            .ok()
    })
}

/// The rank processes of `parent`, by rank.
fn ranks_of(parent: u32) -> Vec<(usize, u32)> {
    let mut out: Vec<(usize, u32)> = children(parent)
        .into_iter()
        .filter_map(|p| Some((rank_of(p)?, p)))
        .collect();
    out.sort();
    out
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Phase {
    SetUp,
    Calls,
    End,
}

/// One run: act on rank `target` in `phase`; returns false when the run
/// moved past the phase before the test could act (then it is retried).
fn scenario(phase: Phase, target: usize, sig: &str) -> Option<Duration> {
    let dir = tempfile::tempdir().unwrap();
    let rv = dir.path().join("rv");
    let long = phase != Phase::End;
    let mut parent = bench(&rv, if long { "1000000" } else { "200" }, "2KiB", "1s");
    let ppid = parent.id();
    let mut ranks = Vec::new();
    if phase == Phase::SetUp {
        // Stop rank 1 the moment it runs this program, before it can
        // attach, so set-up cannot finish. (Not before its exec: the
        // parent's spawn() waits for that, and no parent can bound it.)
        let mut r1 = None;
        assert!(
            wait_until(Duration::from_secs(10), || {
                r1 = children(ppid).into_iter().find(|&p| rank_of(p) == Some(1));
                r1.is_some()
            }),
            "rank 1 did not start"
        );
        let r1 = r1.unwrap();
        signal(r1, "-STOP");
        // Rank 0 started before rank 1, but on a loaded machine it may have
        // already given up on rank 1 (or be exiting): then the run is past
        // set-up and this try does not count.
        if !wait_until(Duration::from_secs(3), || {
            ranks = ranks_of(ppid);
            ranks.len() == 2
        }) {
            let _ = parent.kill();
            // SAFETY: as in `signal`; the rank may be gone already.
            unsafe { libc::kill(r1 as libc::pid_t, libc::SIGKILL) };
            let _ = parent.wait();
            return None;
        }
    }
    assert!(
        wait_until(Duration::from_secs(10), || {
            ranks = ranks_of(ppid);
            ranks.len() == 2
        }),
        "ranks did not start"
    );
    let pid_in = |ranks: &[(usize, u32)], r: usize| ranks.iter().find(|x| x.0 == r).map(|x| x.1);
    match phase {
        Phase::SetUp => {
            let r1 = pid_in(&ranks, 1).unwrap();
            // If rank 1 was stopped before attaching, rank 0 publishes its
            // ticket and waits (for the 1 s timeout): set-up is caught.
            wait_until(Duration::from_secs(3), || rv.exists());
            if !rv.exists() {
                let _ = parent.kill();
                // SAFETY: as in `signal`; the rank may be gone already.
                unsafe { libc::kill(r1 as libc::pid_t, libc::SIGKILL) };
                let _ = parent.wait();
                return None;
            }
            // Rank 0 made its segment and waits: killing it now is what
            // leaked 64 MiB each time before.
            let r0 = pid_in(&ranks, 0).expect("rank 0 runs");
            assert_eq!(shm_of(r0).len(), 1, "rank 0's segment during set-up");
            // (Rank 1 stays stopped whatever is done to rank 0: the parent
            // must end it anyway.)
            if !(target == 1 && sig == "-STOP") {
                signal(pid_in(&ranks, target).unwrap(), sig);
            }
        }
        Phase::Calls => {
            // Set-up is over once the ticket is gone and the ranks still run.
            std::thread::sleep(Duration::from_millis(300));
            if rv.exists() {
                let _ = parent.kill();
                let _ = parent.wait();
                return None;
            }
            signal(pid_in(&ranks, target).unwrap(), sig);
        }
        Phase::End => {
            // 200 calls of 1 and 2 KiB: act as the ranks finish.
            std::thread::sleep(Duration::from_millis(50));
            match pid_in(&ranks, target) {
                Some(p) if stat_fields(p).is_some() => {
                    // SAFETY: as in `signal`; the rank may have just exited.
                    let n = if sig == "-STOP" {
                        libc::SIGSTOP
                    } else {
                        libc::SIGKILL
                    };
                    unsafe { libc::kill(p as libc::pid_t, n) };
                }
                _ => {}
            }
        }
    }
    let starts: std::collections::HashMap<u32, String> = ranks
        .iter()
        .filter_map(|&(_, p)| Some((p, stat_fields(p)?.get(19)?.clone())))
        .collect();
    let acted = Instant::now();
    let status = wait_bounded(&mut parent, Duration::from_secs(10));
    let took = acted.elapsed();
    let mut err = String::new();
    parent
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let what = format!("{phase:?} {sig} rank {target}");
    assert!(
        took < TIMEOUT + Duration::from_secs(1),
        "{what}: parent took {took:?}\n{err}"
    );
    for (r, p) in &ranks {
        // Gone, or its pid reused by a process started later.
        assert!(
            stat_fields(*p).is_none_or(|f| f.get(19) != starts.get(p)),
            "{what}: rank {r} (pid {p}) still exists"
        );
    }
    if let Some(r0) = pid_in(&ranks, 0) {
        assert!(
            shm_of(r0).is_empty(),
            "{what}: segments left: {:?}",
            shm_of(r0)
        );
    }
    assert_run_names(
        &what,
        status.success(),
        &err,
        "benchmark ranks failed",
        target,
        phase == Phase::End,
    );
    Some(took)
}

fn run(phase: Phase, target: usize, sig: &str) {
    for tries in 1..=5 {
        if let Some(took) = scenario(phase, target, sig) {
            eprintln!("{phase:?} {sig} rank {target}: caught in try {tries}, every rank ended {took:?} after the signal");
            return;
        }
    }
    panic!("{phase:?}: could not catch the run in that phase in 5 tries");
}

#[test]
fn killing_or_stopping_any_rank_during_set_up_ends_the_run_naming_it_and_leaks_nothing() {
    for target in [0, 1] {
        for sig in ["-KILL", "-STOP"] {
            run(Phase::SetUp, target, sig);
        }
    }
}

#[test]
fn killing_or_stopping_any_rank_during_calls_ends_the_run_naming_it_and_leaks_nothing() {
    for target in [0, 1] {
        for sig in ["-KILL", "-STOP"] {
            run(Phase::Calls, target, sig);
        }
    }
}

#[test]
fn killing_or_stopping_a_rank_as_the_run_ends_is_bounded_and_leaks_nothing() {
    for target in [0, 1] {
        for sig in ["-KILL", "-STOP"] {
            run(Phase::End, target, sig);
        }
    }
}

#[test]
fn two_runs_on_one_rendezvous_path_never_mix_ranks() {
    for trial in 0..5 {
        let dir = tempfile::tempdir().unwrap();
        let rv = dir.path().join("rv");
        // A generous timeout: on a loaded 2-core machine a rank of the run
        // that goes on may be slow, and this test is about mixing, not speed.
        let mut a = bench(&rv, "50", "4KiB", "15s");
        let mut b = bench(&rv, "50", "4KiB", "15s");
        let mut outs = Vec::new();
        for c in [&mut a, &mut b] {
            let status = wait_bounded(c, Duration::from_secs(60));
            let mut err = String::new();
            c.stderr.take().unwrap().read_to_string(&mut err).unwrap();
            outs.push((status.success(), err));
        }
        for (ok, err) in &outs {
            assert!(
                !err.contains("were wrong"),
                "trial {trial}: mixed ranks\n{err}"
            );
            if !ok {
                assert!(
                    err.contains("in use by another")
                        || err.contains("belongs to another job")
                        || err.contains("failed during set-up"),
                    "trial {trial}: unexpected failure\n{err}"
                );
            }
        }
        assert!(
            outs.iter().any(|o| o.0),
            "trial {trial}: neither run completed"
        );
    }
}

#[test]
fn huge_iters_warmup_or_max_bytes_are_errors_naming_the_flag() {
    // 64 ranks of 4 GiB messages need terabytes: more than any CI machine.
    // Out-of-range options are usage errors (exit 2); a run too large for
    // this machine is found once the run is sized (exit 1). The segment's
    // size is checked as each rank's communicator would, but once, before
    // any rank starts (src/checks.rs).
    for (flag, value, more, code) in [
        ("--iters", "18446744073709551615", &[][..], 2),
        ("--iters", "1000001", &[], 2),
        ("--warmup", "99999999999", &[], 2),
        ("--max-bytes", "4GiB", &["--ranks", "64"][..], 1),
        // The segment's size comes from --max-message: named when it is
        // out of range (it was blamed on --max-bytes).
        (
            "--max-message",
            "18446744073709551615",
            &["--max-bytes", "1KiB"][..],
            2,
        ),
        // In range, but more than this machine has: found once sized.
        (
            "--max-message",
            "16GiB",
            &["--max-bytes", "1KiB", "--ranks", "64"][..],
            1,
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_tpcomm"))
            .args(["bench", "--device", "cpu", flag, value])
            .args(more)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{flag} {value}: {err}");
        assert!(
            err.contains(flag) && !err.contains("panicked"),
            "{flag} {value}: {err}"
        );
    }
}

#[test]
fn rank_0_failing_at_once_ends_the_run_at_once_not_after_the_timeout() {
    // A rendezvous path whose directory does not exist: rank 0 cannot
    // publish; rank 1 would poll for the whole 10 s timeout.
    let dir = tempfile::tempdir().unwrap();
    let t0 = Instant::now();
    let mut c = Command::new(env!("CARGO_BIN_EXE_tpcomm"))
        .args([
            "bench",
            "--device",
            "cpu",
            "--ranks",
            "2",
            "--timeout",
            "10s",
        ])
        .args(["--max-bytes", "4KiB", "--rendezvous"])
        .arg(dir.path().join("missing/rv"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = wait_bounded(&mut c, Duration::from_secs(15));
    let took = t0.elapsed();
    let mut err = String::new();
    c.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(!status.success());
    assert!(err.contains("rank 0 failed"), "{err}");
    assert!(took < Duration::from_secs(3), "took {took:?}\n{err}");
}
