//! The host all-reduce with ranks as separate processes: this test binary
//! re-runs itself as each rank (the `child` test below does the rank's work
//! when TPCOMM_TEST_CHILD is set, and nothing otherwise).

mod common;

use common::{config, seed};
use half::bf16;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tpcomm::verify::{random_input, Reference};
use tpcomm::{Algo, ByteSize, Element, HostCommunicator, ReduceOp};

const CHILD: &str = "TPCOMM_TEST_CHILD";

/// Starts one rank. Ranks of one job share a job key, as a launcher gives
/// them; here the key is made from the meeting directory's name, which is
/// fresh for every job.
fn spawn(
    scenario: &str,
    rank: usize,
    world: usize,
    dir: &std::path::Path,
    timeout_ms: u64,
) -> Child {
    let key = format!("{:032x}", {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        dir.hash(&mut h);
        h.finish() | 1
    });
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child", "--nocapture", "--test-threads=1", "-q"])
        .env(tpcomm::meet::JOB_KEY_ENV, key)
        .env(
            CHILD,
            format!("{scenario} {rank} {world} {} {timeout_ms}", dir.display()),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

/// Kills children left running when a test fails.
struct Kids(Vec<Child>);

impl Drop for Kids {
    fn drop(&mut self) {
        for k in &mut self.0 {
            let _ = k.kill();
            let _ = k.wait();
        }
    }
}

/// The lines a child printed that start with `tag`, with the tag removed.
fn tagged(out: &str, tag: &str) -> Vec<String> {
    out.lines()
        .filter_map(|l| l.strip_prefix(tag))
        .map(|s| s.trim().to_string())
        .collect()
}

/// A rank's work; runs only inside a child process.
#[test]
fn child() {
    let Ok(spec) = std::env::var(CHILD) else {
        return;
    };
    let f: Vec<&str> = spec.split(' ').collect();
    let (scenario, rank, world) = (f[0], f[1].parse().unwrap(), f[2].parse().unwrap());
    let timeout = Duration::from_millis(f[4].parse().unwrap());
    let cfg = config(
        rank,
        world,
        std::path::Path::new(f[3]),
        ByteSize::kib(16),
        timeout,
    );
    let mut c = HostCommunicator::new(cfg).unwrap();
    match scenario {
        "sweep" => {
            let mut digest: u64 = 0xcbf2_9ce4_8422_2325;
            for (call, n) in [1usize, 5, 4097, 9000, 40_000].into_iter().enumerate() {
                for algo in [Algo::OneShot, Algo::TwoShot] {
                    digest = check::<f32>(&mut c, call as u64, n, algo, digest);
                    digest = check::<bf16>(&mut c, call as u64 + 100, n, algo, digest);
                }
            }
            println!("DIGEST {digest:016x}");
        }
        "forever" => {
            // Until a peer fails; the deadline only guards against a test
            // that forgot its children.
            let deadline = Instant::now() + Duration::from_secs(60);
            let mut v = random_input::<f32>(seed(0, rank), 3000);
            for i in 0u64.. {
                if Instant::now() > deadline {
                    println!("ERROR no peer failed within 60 s");
                    std::process::exit(4);
                }
                let algo = if i % 2 == 0 {
                    Algo::OneShot
                } else {
                    Algo::TwoShot
                };
                if let Err(e) = c.all_reduce_in_place(&mut v, ReduceOp::Max, algo) {
                    println!("ERROR {e}");
                    std::process::exit(3);
                }
                if i == 100 {
                    println!("RUNNING");
                }
            }
        }
        other => panic!("unknown scenario {other}"),
    }
}

/// One checked all-reduce; folds the output bits into `digest`.
fn check<E: Element>(
    c: &mut HostCommunicator,
    call: u64,
    n: usize,
    algo: Algo,
    mut digest: u64,
) -> u64 {
    let world = c.world();
    let inputs: Vec<Vec<E>> = (0..world).map(|r| random_input(seed(call, r), n)).collect();
    let mut out = vec![E::from_f32(0.0); n];
    c.all_reduce(&inputs[c.rank()], &mut out, ReduceOp::Sum, algo)
        .unwrap();
    let refs: Vec<&[E]> = inputs.iter().map(|v| v.as_slice()).collect();
    assert_eq!(
        Reference::new(&refs, ReduceOp::Sum).count_wrong(&out, world),
        0
    );
    for x in out {
        digest = (digest ^ x.to_bits_u32() as u64).wrapping_mul(0x100_0000_01b3);
    }
    digest
}

fn sweep_in_processes(world: usize) {
    let dir = tempfile::tempdir().unwrap();
    let kids: Vec<Child> = (0..world)
        .map(|r| spawn("sweep", r, world, dir.path(), 20_000))
        .collect();
    let digests: Vec<String> = kids
        .into_iter()
        .enumerate()
        .map(|(r, k)| {
            let out = k.wait_with_output().unwrap();
            let text = String::from_utf8_lossy(&out.stdout).to_string();
            assert!(out.status.success(), "rank {r} failed: {text}");
            tagged(&text, "DIGEST")
                .pop()
                .unwrap_or_else(|| panic!("rank {r} printed no digest: {text}"))
        })
        .collect();
    assert!(
        digests.iter().all(|d| *d == digests[0]),
        "ranks differ: {digests:?}"
    );
}

#[test]
fn two_processes_reduce_correctly_and_identically() {
    sweep_in_processes(2);
}

#[test]
fn four_processes_on_few_cores_reduce_correctly_and_identically() {
    sweep_in_processes(4);
}

#[test]
fn killing_a_rank_mid_run_makes_every_other_rank_fail_promptly_naming_it() {
    for world in [2, 3] {
        // Long enough that meeting the bound below needs the early
        // dead-process check, not the timeout.
        let timeout = Duration::from_secs(5);
        let dir = tempfile::tempdir().unwrap();
        let mut kids = Kids(
            (0..world)
                .map(|r| spawn("forever", r, world, dir.path(), timeout.as_millis() as u64))
                .collect(),
        );
        let kids = &mut kids.0;
        // Wait until every rank is well into its loop.
        let mut readers: Vec<_> = kids
            .iter_mut()
            .map(|k| BufReader::new(k.stdout.take().unwrap()))
            .collect();
        for (r, rd) in readers.iter_mut().enumerate() {
            // The child's test harness prints its own lines first.
            let started = rd
                .lines()
                .map_while(|l| l.ok())
                .any(|l| l.trim() == "RUNNING");
            assert!(started, "rank {r} did not start");
        }
        // Not reaped until the others are done: a dead rank's process stays
        // a zombie, as it would under a launcher that is slow to reap.
        kids[1].kill().unwrap();
        let killed = Instant::now();
        for r in (0..world).filter(|&r| r != 1) {
            let status = kids[r].wait().unwrap();
            let took = killed.elapsed();
            let mut rest = String::new();
            std::io::Read::read_to_string(&mut readers[r], &mut rest).unwrap();
            assert_eq!(status.code(), Some(3), "world {world} rank {r}: {rest}");
            let err = tagged(&rest, "ERROR").pop().unwrap();
            assert!(
                err.contains("rank 1"),
                "world {world} rank {r}: error does not name rank 1: {err}"
            );
            // Said as a peer that did not arrive, not as a timeout of however
            // long this rank happened to wait before seeing the death.
            assert!(
                err.contains("did not arrive within the timeout") && !err.contains("timed out"),
                "world {world} rank {r}: {err}"
            );
            assert!(
                took < timeout + Duration::from_secs(1),
                "world {world} rank {r} took {took:?}"
            );
        }
    }
}
