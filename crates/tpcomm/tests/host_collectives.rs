//! The host all-gather, reduce-scatter and broadcast, with ranks as threads
//! (world sizes 2 to 8) and as processes: every output element checked
//! against the inputs (sums against a float64 reference), bit-identical
//! across ranks, mismatches and missing ranks reported.

mod common;

use common::{config, run_threads, run_threads_with, seed};
use half::{bf16, f16};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tpcomm::verify::{random_input, Reference};
use tpcomm::{Algo, ByteSize, Element, Error, HostCommunicator, ReduceOp};

const T: Duration = Duration::from_secs(20);
const CHILD: &str = "TPCOMM_TEST_COLL_CHILD";

fn bits<E: Element>(v: &[E]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits_u32()).collect()
}

/// One round of every collective at `n` elements per rank block, each output
/// checked on this rank; returns the bits every rank must agree on (the
/// gathered and broadcast outputs), folded with `fold`.
fn round<E: Element>(c: &mut HostCommunicator, call: u64, n: usize, fold: &mut Vec<u32>) {
    let (me, world) = (c.rank(), c.world());
    let what = |s: &str| format!("{s} {n} x {:?} world {world} rank {me}", E::DTYPE);

    // All-gather, out of place then in place: every element must be the
    // sender's exact bits.
    let inputs: Vec<Vec<E>> = (0..world).map(|r| random_input(seed(call, r), n)).collect();
    let expected: Vec<u32> = inputs.iter().flat_map(|v| bits(v)).collect();
    let mut out = vec![E::from_f32(7.0); world * n];
    c.all_gather(&inputs[me], &mut out).unwrap();
    assert_eq!(bits(&out), expected, "{}", what("all-gather"));
    let mut buf = vec![E::from_f32(-3.0); world * n];
    buf[me * n..(me + 1) * n].copy_from_slice(&inputs[me]);
    c.all_gather_in_place(&mut buf).unwrap();
    assert_eq!(bits(&buf), expected, "{}", what("in-place all-gather"));
    fold.extend(bits(&out));

    // Reduce-scatter: against the float64 reference of this rank's block,
    // and bit for bit against the same block of an all-reduce.
    for op in ReduceOp::ALL {
        let inputs: Vec<Vec<E>> = (0..world)
            .map(|r| random_input(seed(call + 1000, r), world * n))
            .collect();
        let blocks: Vec<&[E]> = inputs.iter().map(|v| &v[me * n..(me + 1) * n]).collect();
        let mut out = vec![E::from_f32(7.0); n];
        c.reduce_scatter(&inputs[me], &mut out, op).unwrap();
        let wrong = Reference::new(&blocks, op).count_wrong(&out, world);
        assert_eq!(wrong, 0, "{} {op}: {wrong} wrong", what("reduce-scatter"));
        let mut inplace = inputs[me].clone();
        c.reduce_scatter_in_place(&mut inplace, op).unwrap();
        assert_eq!(
            bits(&inplace[me * n..(me + 1) * n]),
            bits(&out),
            "{} {op}",
            what("in-place reduce-scatter")
        );
        assert_eq!(
            bits(&inplace[..me * n]),
            bits(&inputs[me][..me * n]),
            "{}: blocks before this rank's were changed",
            what("in-place reduce-scatter")
        );
        let mut all = vec![E::from_f32(0.0); world * n];
        c.all_reduce(&inputs[me], &mut all, op, Algo::OneShot)
            .unwrap();
        assert_eq!(
            bits(&all[me * n..(me + 1) * n]),
            bits(&out),
            "{} {op}: differs from the all-reduce's block",
            what("reduce-scatter")
        );
    }

    // Broadcast from every root.
    for root in 0..world {
        let sent: Vec<E> = random_input(seed(call + 2000, root), n);
        let mut buf = if me == root {
            sent.clone()
        } else {
            vec![E::from_f32(5.0); n]
        };
        c.broadcast(&mut buf, root).unwrap();
        assert_eq!(bits(&buf), bits(&sent), "{} from {root}", what("broadcast"));
        fold.extend(bits(&buf));
    }
}

/// Sizes from nothing to several pieces of the 4 KiB slots the tests use
/// (reduce-scatter cuts a slot into one sub-piece per rank).
const SIZES: [usize; 9] = [0, 1, 3, 17, 255, 1000, 1025, 2049, 5000];

fn sweep(c: &mut HostCommunicator) -> Vec<u32> {
    let mut fold = Vec::new();
    for (i, &n) in SIZES.iter().enumerate() {
        let call = 10 * i as u64;
        round::<f32>(c, call, n, &mut fold);
        round::<f16>(c, call + 1, n, &mut fold);
        round::<bf16>(c, call + 2, n, &mut fold);
    }
    fold
}

#[test]
fn every_collective_is_exact_and_identical_on_every_rank_for_worlds_2_to_8() {
    for world in 2..=8 {
        let results = run_threads(world, ByteSize::kib(4), T, sweep);
        for r in 1..world {
            assert!(
                results[r] == results[0],
                "world {world}: rank {r}'s gathered and broadcast bits differ from rank 0's"
            );
        }
    }
}

#[test]
fn collectives_interleaved_with_all_reduces_over_many_rotating_buffers() {
    // 4 KiB pieces of a 16 KiB maximum: 8 buffers rotate, and calls of
    // every kind and size take turns in them.
    let world = 3;
    let done = run_threads_with(world, ByteSize::kib(16), ByteSize::kib(4), T, |c| {
        let mut fold = Vec::new();
        for call in 0..300u64 {
            let n = 1 + (call.wrapping_mul(2_654_435_761) % 3000) as usize;
            match call % 4 {
                0 => round::<f32>(c, call * 10, n, &mut fold),
                1 => round::<bf16>(c, call * 10, n, &mut fold),
                _ => {
                    let mut v: Vec<f32> = random_input(seed(call, c.rank()), n);
                    c.all_reduce_in_place(&mut v, ReduceOp::Sum, Algo::TwoShot)
                        .unwrap();
                }
            }
        }
        fold
    });
    assert!(done.iter().all(|f| *f == done[0] && !f.is_empty()));
}

#[test]
fn bad_buffers_and_roots_are_clear_errors_that_leave_the_communicator_usable() {
    let results = run_threads(2, ByteSize::kib(4), T, |c| {
        let what = |r: tpcomm::Result<()>| match r {
            Err(Error::InvalidArgument { what, .. }) => what,
            other => panic!("expected InvalidArgument, got {other:?}"),
        };
        let a = what(c.all_gather(&[1f32; 4], &mut [0f32; 7]));
        let b = what(c.reduce_scatter(&[1f32; 7], &mut [0f32; 4], ReduceOp::Sum));
        let d = what(c.broadcast(&mut [1f32; 4], 2));
        let e = what(c.all_gather_in_place(&mut [1f32; 5]));
        // Nothing was started, so the ranks still agree.
        let mut v = [c.rank() as f32; 4];
        c.broadcast(&mut v, 1).unwrap();
        assert_eq!(v, [1.0; 4]);
        [a, b, d, e]
    });
    assert_eq!(
        results[0],
        [
            "all-gather buffers",
            "reduce-scatter buffers",
            "broadcast root",
            "all-gather buffer"
        ]
    );
}

#[test]
fn ranks_calling_different_collectives_all_get_mismatch_naming_both_calls() {
    for case in 0..3 {
        let results = run_threads(2, ByteSize::kib(64), T, |c| {
            let mut v = [1f32; 8];
            match (case, c.rank()) {
                (0, 0) => c.all_gather(&[1f32; 4], &mut v),
                (0, _) => c.all_reduce_in_place(&mut v, ReduceOp::Sum, Algo::OneShot),
                (1, r) => c.broadcast(&mut v, r),
                (_, 0) => c.reduce_scatter(&[1f32; 16], &mut v, ReduceOp::Sum),
                (_, _) => c.reduce_scatter(&[1f32; 16], &mut v, ReduceOp::Max),
            }
        });
        for (rank, r) in results.into_iter().enumerate() {
            match r {
                Err(e @ Error::Mismatch { .. }) => {
                    let text = e.to_string();
                    let names = match case {
                        0 => ["all-gather", "all-reduce"],
                        1 => ["broadcast from rank 0", "broadcast from rank 1"],
                        _ => ["reduce-scatter, sum", "reduce-scatter, max"],
                    };
                    for name in names {
                        assert!(text.contains(name), "case {case} rank {rank}: {text}");
                    }
                }
                other => panic!("case {case} rank {rank}: expected Mismatch, got {other:?}"),
            }
        }
    }
}

#[test]
fn a_rank_that_never_calls_makes_every_collective_time_out_naming_it() {
    let timeout = Duration::from_millis(300);
    for which in 0..3 {
        let results = run_threads(3, ByteSize::kib(64), timeout, |c| {
            if c.rank() == 2 {
                std::thread::sleep(timeout * 4);
                return None;
            }
            let mut v = vec![1f32; 300];
            let t0 = Instant::now();
            let e = match which {
                0 => c.all_gather(&[1f32; 100], &mut v),
                1 => c.reduce_scatter(&[1f32; 300], &mut v[..100], ReduceOp::Sum),
                _ => c.broadcast(&mut v, 0),
            }
            .unwrap_err();
            Some((e, t0.elapsed()))
        });
        for (rank, r) in results.iter().take(2).enumerate() {
            let (e, took) = r.as_ref().unwrap();
            // The first to give up reports a timeout; the other may see its
            // abort first. Both name rank 2.
            assert!(
                matches!(e, Error::PeerTimeout { peer: 2, .. } | Error::Aborted(_)),
                "collective {which} rank {rank}: {e:?}"
            );
            assert!(e.to_string().contains("rank 2"), "{e}");
            assert!(*took < timeout + Duration::from_secs(1), "took {took:?}");
        }
    }
}

/// A rank's work when this binary runs as a child process.
#[test]
fn child() {
    let Ok(spec) = std::env::var(CHILD) else {
        return;
    };
    let f: Vec<&str> = spec.split(' ').collect();
    let (rank, world): (usize, usize) = (f[0].parse().unwrap(), f[1].parse().unwrap());
    let cfg = config(rank, world, std::path::Path::new(f[2]), ByteSize::kib(4), T);
    let mut c = HostCommunicator::new(cfg).unwrap();
    let fold = sweep(&mut c);
    let digest = fold.iter().fold(0xcbf2_9ce4_8422_2325u64, |d, &x| {
        (d ^ x as u64).wrapping_mul(0x100_0000_01b3)
    });
    println!("DIGEST {digest:016x} {}", fold.len());
}

#[test]
fn four_processes_gather_scatter_and_broadcast_exactly_and_identically() {
    let world = 4;
    let dir = tempfile::tempdir().unwrap();
    let key = format!("{:032x}", std::process::id() as u128 * 7919 + 1);
    let kids: Vec<_> = (0..world)
        .map(|r| {
            Command::new(std::env::current_exe().unwrap())
                .args(["--exact", "child", "--nocapture", "--test-threads=1", "-q"])
                .env(tpcomm::meet::JOB_KEY_ENV, &key)
                .env(CHILD, format!("{r} {world} {}", dir.path().display()))
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .unwrap()
        })
        .collect();
    let digests: Vec<String> = kids
        .into_iter()
        .enumerate()
        .map(|(r, k)| {
            let out = k.wait_with_output().unwrap();
            let text = String::from_utf8_lossy(&out.stdout).to_string();
            assert!(out.status.success(), "rank {r} failed: {text}");
            text.lines()
                .find_map(|l| l.trim().strip_prefix("DIGEST ").map(str::to_string))
                .unwrap_or_else(|| panic!("rank {r} printed no digest: {text}"))
        })
        .collect();
    assert!(
        digests.iter().all(|d| *d == digests[0]),
        "ranks differ: {digests:?}"
    );
}
