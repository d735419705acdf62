//! Adversarial tests of the host rendezvous: two jobs on one
//! path, another user's files, symbolic links, planted tickets, a rank 0
//! killed during set-up, ranks without a key. Each test is bounded in time.
//! This binary re-runs itself for ranks that must be separate processes
//! (the `child` test does their work when TPCOMM_RV_CHILD is set).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tpcomm::meet::JOB_KEY_ENV;
use tpcomm::{Algo, ByteSize, Error, HostCommunicator, HostConfig, JobKey, ReduceOp};

const CHILD: &str = "TPCOMM_RV_CHILD";

fn cfg(
    rank: usize,
    world: usize,
    path: &Path,
    key: Option<JobKey>,
    timeout: Duration,
) -> HostConfig {
    let mut c = HostConfig::new(rank, world, path);
    c.max_message = ByteSize::kib(4);
    c.timeout = timeout;
    c.job_key = key;
    c
}

/// A rank in its own process; it prints "CREATED" or "ERROR <message>".
#[test]
fn child() {
    let Ok(spec) = std::env::var(CHILD) else {
        return;
    };
    let f: Vec<&str> = spec.split(' ').collect();
    let (rank, world, timeout_ms): (usize, usize, u64) = (
        f[0].parse().unwrap(),
        f[1].parse().unwrap(),
        f[3].parse().unwrap(),
    );
    let c = cfg(
        rank,
        world,
        Path::new(f[2]),
        None,
        Duration::from_millis(timeout_ms),
    );
    match HostCommunicator::new(c) {
        Ok(_) => println!("CREATED"),
        Err(e) => println!("ERROR {e}"),
    }
}

fn spawn_rank(
    rank: usize,
    world: usize,
    path: &Path,
    key: Option<JobKey>,
    timeout_ms: u64,
) -> Child {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", "child", "--nocapture", "--test-threads=1", "-q"])
        .env(
            CHILD,
            format!("{rank} {world} {} {timeout_ms}", path.display()),
        )
        .env_remove(JOB_KEY_ENV)
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if let Some(k) = key {
        cmd.env(JOB_KEY_ENV, k.to_hex());
    }
    cmd.spawn().unwrap()
}

/// Kills children left running when a test fails.
struct Kid(Child);

impl Drop for Kid {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn shm_names_with(part: &str) -> Vec<String> {
    std::fs::read_dir("/dev/shm")
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(part))
        .collect()
}

fn wait_for(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !cond() {
        assert!(
            t0.elapsed() < limit,
            "{what} did not happen within {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn dead_pid() -> u32 {
    let mut c = Command::new("true").spawn().unwrap();
    let pid = c.id();
    c.wait().unwrap();
    pid
}

/// One trial: jobs A and B (2 ranks each, own keys) start together on one
/// path. Returns, per job, whether it completed, and the time of every
/// failure that said another job holds the path.
fn two_jobs(path: &Path, timeout: Duration) -> ([bool; 2], Vec<Duration>, Vec<String>) {
    let keys = [JobKey::random(), JobKey::random()];
    // Job j's rank r contributes (j * 100 + r + 1); the sums tell jobs apart.
    let expect = |j: usize| (j * 200 + 3) as f32;
    let barrier = std::sync::Barrier::new(4);
    let out: Vec<(usize, Result<f32, Error>, Duration)> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..4)
            .map(|i| {
                let (j, r) = (i % 2, i / 2);
                let c = cfg(r, 2, path, Some(keys[j]), timeout);
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    let t0 = Instant::now();
                    let res = HostCommunicator::new(c).and_then(|mut comm| {
                        let mut v = [(j * 100 + r + 1) as f32; 8];
                        comm.all_reduce_in_place(&mut v, ReduceOp::Sum, Algo::OneShot)?;
                        assert!(v.iter().all(|x| *x == v[0]));
                        Ok(v[0])
                    });
                    (j, res, t0.elapsed())
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut done = [true; 2];
    let mut at_once = Vec::new();
    let mut mixes = Vec::new();
    for (j, res, took) in out {
        match res {
            Ok(v) if v == expect(j) => {}
            Ok(v) => mixes.push(format!("job {j} got {v}, expected {}", expect(j))),
            Err(e) => {
                done[j] = false;
                let m = e.to_string();
                if m.contains("in use by another") || m.contains("belongs to another job") {
                    at_once.push(took);
                }
            }
        }
    }
    (done, at_once, mixes)
}

#[test]
fn two_jobs_on_one_path_never_mix_ranks_in_100_concurrent_trials() {
    let timeout = Duration::from_secs(3);
    let (mut completed, mut refused) = (0, 0);
    let t0 = Instant::now();
    for trial in 0..100 {
        let dir = tempfile::tempdir().unwrap();
        let (done, at_once, mixes) = two_jobs(&dir.path().join("rv"), timeout);
        assert!(mixes.is_empty(), "trial {trial}: mixed ranks: {mixes:?}");
        assert!(done[0] || done[1], "trial {trial}: neither job completed");
        completed += done.iter().filter(|d| **d).count();
        refused += at_once.len();
        for took in at_once {
            assert!(
                took < Duration::from_millis(500),
                "trial {trial}: refusing the later job took {took:?}"
            );
        }
    }
    eprintln!(
        "100 trials: {completed} jobs completed, {refused} ranks refused at once, 0 mixes, {:?}",
        t0.elapsed()
    );
    // Every trial ends in well under the timeout: the later job is told at once.
    assert!(
        t0.elapsed() < Duration::from_secs(30),
        "took {:?}",
        t0.elapsed()
    );
}

#[test]
fn a_symlink_at_the_rendezvous_path_is_refused_and_never_written_through() {
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "precious").unwrap();
    let path = dir.path().join("rv");
    std::os::unix::fs::symlink(&victim, &path).unwrap();
    let t0 = Instant::now();
    let e = HostCommunicator::new(cfg(
        0,
        1,
        &path,
        Some(JobKey::random()),
        Duration::from_secs(5),
    ))
    .err()
    .expect("created a communicator through a symlink");
    assert!(e.to_string().contains("symbolic link"), "{e}");
    assert!(t0.elapsed() < Duration::from_secs(1));
    // Rank 1 refuses it too.
    let e = HostCommunicator::new(cfg(
        1,
        2,
        &path,
        Some(JobKey::random()),
        Duration::from_secs(5),
    ))
    .err()
    .unwrap();
    assert!(e.to_string().contains("symbolic link"), "{e}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");

    // A link planted at the temporary name older versions used
    // (`<file>.tmp<pid>`) is not used: the job works, the victim is intact.
    std::fs::remove_file(&path).unwrap();
    let planted = PathBuf::from(format!("{}.tmp{}", path.display(), std::process::id()));
    std::os::unix::fs::symlink(&victim, &planted).unwrap();
    HostCommunicator::new(cfg(
        0,
        1,
        &path,
        Some(JobKey::random()),
        Duration::from_secs(5),
    ))
    .unwrap();
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
}

#[test]
fn a_planted_ticket_with_a_dead_creator_gets_no_segment_unlinked() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rv");
    let tag = format!("{:016x}", rand::random::<u64>());
    // Someone's segment that is not a tpcomm one, and one named like this
    // user's tpcomm segments whose creator (this process) is alive.
    let start: u64 = std::fs::read_to_string("/proc/self/stat")
        .unwrap()
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .nth(19)
        .unwrap()
        .parse()
        .unwrap();
    let uid = std::fs::metadata("/proc/self").unwrap().uid();
    let victims = [
        format!("victim-{tag}"),
        format!("tpcomm-u{uid}-p{}-s{start}-{tag}", std::process::id()),
    ];
    for v in &victims {
        std::fs::write(Path::new("/dev/shm").join(v), "data").unwrap();
    }
    for v in &victims {
        let ticket = format!(
            "tpcomm-rendezvous 2 /{v} {:032x} {:032x} 2 {} 1\n",
            7u128,
            9u128,
            dead_pid()
        );
        std::fs::write(&path, ticket).unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
        HostCommunicator::new(cfg(
            0,
            1,
            &path,
            Some(JobKey::random()),
            Duration::from_secs(5),
        ))
        .unwrap();
    }
    for v in &victims {
        let p = Path::new("/dev/shm").join(v);
        let kept = p.exists();
        let _ = std::fs::remove_file(&p);
        assert!(kept, "{v} was unlinked on a planted ticket's word");
    }
}

#[test]
fn another_users_rendezvous_file_or_segment_is_refused() {
    // The owner checks compare with this process's euid; to meet a file of
    // another user for real, the test gives its files away, which takes
    // root (CI runs as root). Unit tests in meet::ticket cover the same
    // check through the uid seam without root.
    if std::fs::metadata("/proc/self").unwrap().uid() != 0 {
        eprintln!("skipped: needs root to chown files to another uid");
        return;
    }
    let other = 4242;
    let dir = tempfile::tempdir().unwrap();
    // 1. A ticket another user pre-created at the path (0600 so the mode
    //    check passes): refused at once by rank 0 and by rank 1.
    let path = dir.path().join("my-job");
    std::fs::write(&path, "tpcomm-rendezvous 2 /x 0 0 2 1 1\n").unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    std::os::unix::fs::chown(&path, Some(other), Some(other)).unwrap();
    for rank in [0, 1] {
        let t0 = Instant::now();
        let e = HostCommunicator::new(cfg(
            rank,
            2,
            &path,
            Some(JobKey::random()),
            Duration::from_secs(5),
        ))
        .err()
        .expect("used another user's rendezvous file");
        assert!(e.to_string().contains("uid 4242"), "rank {rank}: {e}");
        assert!(t0.elapsed() < Duration::from_secs(1));
    }
    // 2. A real rank 0 publishes; the segment is then handed to another
    //    user and opened to everyone (as an attacker's would be): rank 1
    //    refuses to attach.
    let path = dir.path().join("rv");
    let key = JobKey::random();
    let mut r0 = Kid(spawn_rank(0, 2, &path, Some(key), 10_000));
    wait_for("rank 0's ticket", Duration::from_secs(10), || path.exists());
    let name = std::fs::read_to_string(&path)
        .unwrap()
        .split_whitespace()
        .nth(2)
        .unwrap()
        .to_string();
    let seg = Path::new("/dev/shm").join(name.trim_start_matches('/'));
    std::os::unix::fs::chown(&seg, Some(other), Some(other)).unwrap();
    std::fs::set_permissions(&seg, std::os::unix::fs::PermissionsExt::from_mode(0o666)).unwrap();
    let t0 = Instant::now();
    let e = HostCommunicator::new(cfg(1, 2, &path, Some(key), Duration::from_secs(10)))
        .err()
        .expect("attached to another user's segment");
    assert!(e.to_string().contains("uid 4242"), "{e}");
    assert!(t0.elapsed() < Duration::from_secs(1));
    // Rank 0 is told (abort notice) and stops well before its 10 s timeout.
    let t0 = Instant::now();
    let out = std::mem::replace(&mut r0.0, Command::new("true").spawn().unwrap());
    let out = out.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("ERROR") && text.contains("rank 1 failed"),
        "{text}"
    );
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
    assert!(!seg.exists(), "rank 0 left its segment's name");
}

#[test]
fn rank_0_killed_during_set_up_leaves_a_segment_that_the_next_run_removes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rv");
    let mut r0 = Kid(spawn_rank(0, 2, &path, Some(JobKey::random()), 20_000));
    let pid = r0.0.id();
    let mine = format!("-p{pid}-");
    wait_for("rank 0's ticket", Duration::from_secs(10), || path.exists());
    assert_eq!(shm_names_with(&mine).len(), 1, "rank 0 made one segment");
    r0.0.kill().unwrap();
    r0.0.wait().unwrap();
    // The name survives the kill (nothing can unlink in SIGKILL)...
    assert_eq!(shm_names_with(&mine).len(), 1);
    // ...until the next run of this user, on any path, sweeps it.
    let other = dir.path().join("next");
    HostCommunicator::new(cfg(
        0,
        1,
        &other,
        Some(JobKey::random()),
        Duration::from_secs(5),
    ))
    .unwrap();
    assert!(shm_names_with(&mine).is_empty(), "stale segment not swept");
    // And the dead creator's ticket does not block the path.
    HostCommunicator::new(cfg(
        0,
        1,
        &path,
        Some(JobKey::random()),
        Duration::from_secs(5),
    ))
    .unwrap();
}

#[test]
fn a_rank_without_a_key_in_another_process_is_told_to_set_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rv");
    let _r0 = Kid(spawn_rank(0, 2, &path, Some(JobKey::random()), 10_000));
    wait_for("rank 0's ticket", Duration::from_secs(10), || path.exists());
    let mut r1 = spawn_rank(1, 2, &path, None, 10_000);
    let t0 = Instant::now();
    let out = std::mem::replace(&mut r1, Command::new("true").spawn().unwrap())
        .wait_with_output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("ERROR") && text.contains(JOB_KEY_ENV),
        "{text}"
    );
    assert!(t0.elapsed() < Duration::from_secs(3));
}

#[test]
fn rank_0_failing_early_stops_the_other_ranks_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rv");
    let key = JobKey::random();
    // 64 ranks x 2 x 16 GiB does not fit this machine: rank 0 fails its
    // memory check before allocating anything.
    let big = |rank| {
        let mut c = cfg(rank, 64, &path, Some(key), Duration::from_secs(20));
        c.max_message = ByteSize::gib(16);
        c
    };
    let (r0, r1) = std::thread::scope(|s| {
        let b = s.spawn(|| {
            let t0 = Instant::now();
            (HostCommunicator::new(big(1)).err(), t0.elapsed())
        });
        std::thread::sleep(Duration::from_millis(100));
        let a = HostCommunicator::new(big(0)).err();
        (a, b.join().unwrap())
    });
    let e0 = r0.expect("rank 0 allocated 2 TiB").to_string();
    // Checked before allocating: the error is the memory check's, not a
    // failed reservation's.
    assert!(
        e0.contains("needs") && e0.contains("available") && e0.contains("checked against"),
        "{e0}"
    );
    let (e1, took) = r1;
    let e1 = e1.expect("rank 1 joined").to_string();
    assert!(e1.contains("rank 0 failed"), "{e1}");
    assert!(took < Duration::from_secs(2), "rank 1 took {took:?}");
}
