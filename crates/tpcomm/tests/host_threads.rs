//! The host all-reduce with ranks as threads: results against a float64
//! reference, bit-identical across ranks, long runs, mismatches, timeouts.

mod common;

use common::{config, run_threads, run_threads_with, seed};
use half::{bf16, f16};
use std::time::{Duration, Instant};
use tpcomm::verify::{random_input, Reference};
use tpcomm::{Algo, ByteSize, Element, Error, HostCommunicator, ReduceOp};

const T: Duration = Duration::from_secs(10);

/// Runs every size, op and algorithm (in and out of place) on one rank;
/// returns the bits of every output so ranks can be compared.
fn sweep<E: Element>(c: &mut HostCommunicator, sizes: &[usize]) -> Vec<u32> {
    let world = c.world();
    let mut bits = Vec::new();
    let mut call = 0u64;
    for &n in sizes {
        for op in ReduceOp::ALL {
            for algo in [Algo::OneShot, Algo::TwoShot, Algo::Auto] {
                for in_place in [false, true] {
                    call += 1;
                    let inputs: Vec<Vec<E>> =
                        (0..world).map(|r| random_input(seed(call, r), n)).collect();
                    let mut out = vec![E::from_f32(7.0); n];
                    if in_place {
                        out.copy_from_slice(&inputs[c.rank()]);
                        c.all_reduce_in_place(&mut out, op, algo).unwrap();
                    } else {
                        c.all_reduce(&inputs[c.rank()], &mut out, op, algo).unwrap();
                    }
                    let refs: Vec<&[E]> = inputs.iter().map(|v| v.as_slice()).collect();
                    let wrong = Reference::new(&refs, op).count_wrong(&out, world);
                    assert_eq!(
                        wrong,
                        0,
                        "{n} x {:?} {op} {algo} in_place={in_place} rank {}: {wrong} wrong",
                        E::DTYPE,
                        c.rank()
                    );
                    bits.extend(out.iter().map(|x| x.to_bits_u32()));
                }
            }
        }
    }
    bits
}

#[test]
fn every_dtype_op_and_size_matches_the_reference_bit_identically_on_every_rank() {
    // 4 KiB slots: the largest sizes take several pieces.
    let max = ByteSize::kib(4);
    let sizes = [
        0,
        1,
        2,
        3,
        7,
        17,
        33,
        255,
        1000,
        1023,
        1024,
        1025,
        4099,
        5 * 1024 + 3,
    ];
    for world in [1, 2, 3] {
        let results = run_threads(world, max, T, |c| {
            (
                sweep::<f32>(c, &sizes),
                sweep::<f16>(c, &sizes),
                sweep::<bf16>(c, &sizes),
            )
        });
        for r in 1..world {
            assert!(
                results[r] == results[0],
                "world {world}: rank {r} differs from rank 0"
            );
        }
    }
}

#[test]
fn ten_thousand_back_to_back_calls_with_changing_sizes() {
    let world = 3;
    // 4 KiB pieces of a 16 KiB maximum: 8 buffers rotate.
    let results = run_threads_with(world, ByteSize::kib(16), ByteSize::kib(4), T, |c| {
        assert!(c.memory_report().lines[2].detail.starts_with("8 buffers"));
        let mut checked = 0usize;
        for call in 0..10_000u64 {
            // Sizes from 1 element to 2.5 pieces, changing every call.
            let n = 1 + (call.wrapping_mul(2_654_435_761) % 2560) as usize;
            let algo = [Algo::OneShot, Algo::TwoShot, Algo::Auto][(call % 3) as usize];
            let inputs: Vec<Vec<f32>> =
                (0..world).map(|r| random_input(seed(call, r), n)).collect();
            let mut out = vec![0f32; n];
            c.all_reduce(&inputs[c.rank()], &mut out, ReduceOp::Sum, algo)
                .unwrap();
            let refs: Vec<&[f32]> = inputs.iter().map(|v| v.as_slice()).collect();
            assert_eq!(
                Reference::new(&refs, ReduceOp::Sum).count_wrong(&out, world),
                0,
                "call {call}"
            );
            checked += n;
        }
        checked
    });
    assert!(results.iter().all(|&n| n == results[0] && n > 10_000));
}

#[test]
fn ranks_that_disagree_all_get_mismatch_and_the_communicator_is_poisoned() {
    // Count, element type and op each differ in turn.
    for case in 0..3 {
        let results = run_threads(2, ByteSize::kib(64), T, |c| {
            let first = match (case, c.rank()) {
                (0, r) => {
                    let v = vec![1f32; 10 + r];
                    let mut o = v.clone();
                    c.all_reduce(&v, &mut o, ReduceOp::Sum, Algo::OneShot)
                }
                (1, 0) => c.all_reduce_in_place(&mut [1f32; 8], ReduceOp::Sum, Algo::OneShot),
                (1, _) => c.all_reduce_in_place(&mut [bf16::ONE; 8], ReduceOp::Sum, Algo::OneShot),
                (_, r) => {
                    let op = if r == 0 { ReduceOp::Sum } else { ReduceOp::Max };
                    c.all_reduce_in_place(&mut [1f32; 8], op, Algo::TwoShot)
                }
            };
            let second = c.all_reduce_in_place(&mut [1f32; 8], ReduceOp::Sum, Algo::OneShot);
            (first, second)
        });
        for (rank, (first, second)) in results.into_iter().enumerate() {
            match first {
                Err(Error::Mismatch { rank: r, peer, .. }) => {
                    assert_eq!(r, rank);
                    assert_eq!(peer, 1 - rank);
                }
                other => panic!("case {case} rank {rank}: expected Mismatch, got {other:?}"),
            }
            assert!(
                matches!(second, Err(Error::Aborted(_))),
                "case {case}: {second:?}"
            );
        }
    }
}

#[test]
fn a_rank_that_never_calls_makes_the_caller_time_out_naming_it() {
    let timeout = Duration::from_millis(300);
    let results = run_threads(2, ByteSize::kib(64), timeout, |c| {
        if c.rank() == 1 {
            // Stay alive past rank 0's deadline without calling.
            std::thread::sleep(timeout * 4);
            return None;
        }
        let t0 = Instant::now();
        let e = c
            .all_reduce_in_place(&mut [1f32; 100], ReduceOp::Sum, Algo::OneShot)
            .unwrap_err();
        Some((e, t0.elapsed()))
    });
    let (e, took) = results[0].as_ref().unwrap();
    match e {
        Error::PeerTimeout {
            rank: 0,
            peer: 1,
            epoch: 1,
            ..
        } => {}
        other => panic!("expected PeerTimeout for rank 1 at epoch 1, got {other:?}"),
    }
    assert!(
        *took >= timeout && *took < timeout + Duration::from_secs(1),
        "took {took:?}"
    );
    assert!(e.to_string().contains("rank 1"), "{e}");
}

#[test]
fn a_failed_rank_aborts_peers_long_before_their_own_timeout() {
    // Rank 0 has a short timeout, rank 1 a long one; rank 2 never calls.
    let dir = tempfile::tempdir().unwrap();
    let max = ByteSize::kib(64);
    let timeouts = [
        Duration::from_millis(200),
        Duration::from_secs(30),
        Duration::from_secs(30),
    ];
    let out: Vec<_> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..3)
            .map(|r| {
                let cfg = config(r, 3, dir.path(), max, timeouts[r]);
                s.spawn(move || {
                    let mut c = HostCommunicator::new(cfg).unwrap();
                    if r == 2 {
                        std::thread::sleep(Duration::from_secs(2));
                        return None;
                    }
                    let t0 = Instant::now();
                    let e = c
                        .all_reduce_in_place(&mut [1f32; 64], ReduceOp::Sum, Algo::OneShot)
                        .unwrap_err();
                    Some((e, t0.elapsed()))
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(
        matches!(out[0], Some((Error::PeerTimeout { peer: 2, .. }, _))),
        "{:?}",
        out[0]
    );
    let (e1, took1) = out[1].as_ref().unwrap();
    assert!(matches!(e1, Error::Aborted(_)), "{e1:?}");
    assert!(
        e1.to_string().contains("rank 2"),
        "abort message names the missing rank: {e1}"
    );
    assert!(*took1 < Duration::from_secs(2), "rank 1 took {took1:?}");
}

#[test]
fn creation_times_out_naming_a_rank_that_never_attaches() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(
        0,
        3,
        dir.path(),
        ByteSize::kib(64),
        Duration::from_millis(300),
    );
    let t0 = Instant::now();
    match HostCommunicator::new(cfg) {
        Err(Error::PeerTimeout { peer: 1, .. }) => {}
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("created a communicator without its peers"),
    }
    assert!(t0.elapsed() < Duration::from_secs(2));
    // Nothing left behind: neither the rendezvous file nor a segment name.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn bad_options_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let bad = |cfg| match HostCommunicator::new(cfg) {
        Err(Error::InvalidArgument { what, .. }) => what,
        Err(e) => panic!("expected InvalidArgument, got {e}"),
        Ok(_) => panic!("accepted a bad configuration"),
    };
    let ok = || config(0, 2, dir.path(), ByteSize::mib(1), T);
    assert_eq!(bad(tpcomm::HostConfig { rank: 2, ..ok() }), "rank");
    assert_eq!(bad(tpcomm::HostConfig { world: 0, ..ok() }), "world size");
    assert_eq!(bad(tpcomm::HostConfig { world: 65, ..ok() }), "world size");
    assert_eq!(
        bad(tpcomm::HostConfig {
            max_message: ByteSize::b(100),
            ..ok()
        }),
        "maximum message size"
    );
    assert_eq!(
        bad(tpcomm::HostConfig {
            timeout: Duration::ZERO,
            ..ok()
        }),
        "timeout"
    );
    assert_eq!(
        bad(tpcomm::HostConfig {
            rendezvous: "".into(),
            ..ok()
        }),
        "rendezvous path"
    );

    // Buffers of different lengths, on a working communicator.
    let r = run_threads(1, ByteSize::kib(4), T, |c| {
        c.all_reduce(&[1f32; 3], &mut [0f32; 4], ReduceOp::Sum, Algo::Auto)
    });
    assert!(
        matches!(r[0], Err(Error::InvalidArgument { .. })),
        "{:?}",
        r[0]
    );
}

#[test]
fn ranks_started_with_different_world_sizes_are_told_so() {
    let dir = tempfile::tempdir().unwrap();
    let r: Vec<_> = std::thread::scope(|s| {
        let a = s.spawn(|| {
            HostCommunicator::new(config(
                0,
                2,
                dir.path(),
                ByteSize::kib(64),
                Duration::from_millis(500),
            ))
            .map(|_| ())
        });
        let b = s.spawn(|| {
            HostCommunicator::new(config(
                1,
                3,
                dir.path(),
                ByteSize::kib(64),
                Duration::from_millis(500),
            ))
            .map(|_| ())
        });
        vec![a.join().unwrap(), b.join().unwrap()]
    });
    assert!(
        matches!(&r[1], Err(Error::InvalidArgument { what, .. }) if what == "world size"),
        "{:?}",
        r[1]
    );
    assert!(r[0].is_err());
}

#[test]
fn a_stale_rendezvous_file_is_never_taken_for_a_new_run() {
    let dir = tempfile::tempdir().unwrap();
    // A file from a crashed run: its creator (a process that has exited) is gone.
    let dead = std::process::Command::new("true").spawn().unwrap();
    let dead_pid = dead.id();
    let mut dead = dead;
    dead.wait().unwrap();
    let file = dir.path().join("tpcomm.rendezvous");
    std::fs::write(
        &file,
        format!(
            "tpcomm-rendezvous 1 /tpcomm-stale-test {:032x} 2 {dead_pid}\n",
            42u128
        ),
    )
    .unwrap();
    let (max, t) = (ByteSize::kib(64), Duration::from_secs(5));
    let r: Vec<_> = std::thread::scope(|s| {
        // Rank 1 starts first and must wait for rank 0's new file.
        let b = s.spawn(|| HostCommunicator::new(config(1, 2, dir.path(), max, t)));
        std::thread::sleep(Duration::from_millis(200));
        let a = s.spawn(|| HostCommunicator::new(config(0, 2, dir.path(), max, t)));
        vec![a.join().unwrap(), b.join().unwrap()]
    });
    let mut comms: Vec<HostCommunicator> = r.into_iter().map(|c| c.unwrap()).collect();
    let mut c1 = comms.pop().unwrap();
    let mut c0 = comms.pop().unwrap();
    let h = std::thread::spawn(move || {
        let mut v = [2f32; 5];
        c1.all_reduce_in_place(&mut v, ReduceOp::Sum, Algo::Auto)
            .map(|_| v)
    });
    let mut v = [1f32; 5];
    c0.all_reduce_in_place(&mut v, ReduceOp::Sum, Algo::Auto)
        .unwrap();
    assert_eq!(v, [3f32; 5]);
    assert_eq!(h.join().unwrap().unwrap(), [3f32; 5]);
    assert!(
        !file.exists(),
        "rendezvous file removed once everyone attached"
    );
}

#[test]
fn memory_report_gives_the_exact_segment_bytes_and_no_name_is_left_behind() {
    let r = run_threads(2, ByteSize::mib(8), T, |c| {
        let name = c.segment_name().trim_start_matches('/').to_string();
        assert!(name.starts_with("tpcomm-"), "{name}");
        let leftover = std::path::Path::new("/dev/shm").join(name).exists();
        (c.memory_report(), leftover)
    });
    let (report, leftover) = &r[0];
    assert!(
        !leftover,
        "segment name still in /dev/shm after every rank attached"
    );
    let bytes: Vec<u64> = report.lines.iter().map(|l| l.bytes.bytes()).collect();
    assert_eq!(bytes, vec![4096, 4096, 2 * 2 * 8 * 1024 * 1024]);
    assert_eq!(
        report.total().unwrap(),
        ByteSize::b(8192 + 32 * 1024 * 1024)
    );
    assert!(report.to_string().contains("total"));
}
