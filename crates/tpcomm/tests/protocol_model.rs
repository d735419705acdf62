//! Model check of the host transport's flag and epoch protocol
//! (docs/protocol.md) for 2 and 3 ranks, with shuttle: many schedules of
//! the ranks' steps are tried, randomly and with PCT (which finds bugs that
//! need a few unlucky preemptions).
//!
//! The model mirrors the rules, not the code: every slot word carries the
//! epoch and phase it was written for, and every read asserts it sees the
//! ones it expects. A rank that overwrote a slot a peer still had to read, a
//! wait that returned early, or a result that differs between ranks fails
//! the check; a run that stops progressing fails on shuttle's step limit.
//! `fewer_buffers_than_the_protocol_needs_is_caught` shows the model can fail.

use shuttle::sync::atomic::{
    AtomicU64,
    Ordering::{Acquire, Relaxed, Release},
};
use shuttle::sync::Arc;
use shuttle::thread;

/// Elements per piece: 3 so the two-shot shards of 2 and 3 ranks differ in size.
const LEN: usize = 3;
/// Calls per rank: enough for every buffer to be reused twice.
const CALLS: u64 = 5;

struct Segment {
    world: usize,
    nbuf: usize,
    /// [rank][buf]: arrival flag (epoch), descriptor, reduced flag.
    flag_a: Vec<AtomicU64>,
    desc: Vec<AtomicU64>,
    flag_b: Vec<AtomicU64>,
    /// [buf][rank][element]: tag << 32 | value, tag = epoch * 2 + phase.
    slot: Vec<AtomicU64>,
}

impl Segment {
    fn new(world: usize, nbuf: usize) -> Self {
        let n = |k| (0..k).map(|_| AtomicU64::new(0)).collect();
        Segment {
            world,
            nbuf,
            flag_a: n(world * nbuf),
            desc: n(world * nbuf),
            flag_b: n(world * nbuf),
            slot: n(nbuf * world * LEN),
        }
    }
    fn sig(&self, rank: usize, buf: usize) -> usize {
        rank * self.nbuf + buf
    }
    fn slot(&self, buf: usize, rank: usize, i: usize) -> &AtomicU64 {
        &self.slot[(buf * self.world + rank) * LEN + i]
    }
}

fn word(ep: u64, phase: u64, v: u64) -> u64 {
    (ep * 2 + phase) << 32 | v
}

/// Reads a slot word, asserting it was written for (ep, phase).
fn read(w: &AtomicU64, ep: u64, phase: u64, who: &str) -> u64 {
    let x = w.load(Relaxed);
    assert_eq!(
        x >> 32,
        ep * 2 + phase,
        "{who}: slot overwritten or not yet written (epoch {ep}, phase {phase})"
    );
    x & 0xffff_ffff
}

fn wait(flag: &AtomicU64, ep: u64) {
    while flag.load(Acquire) != ep {
        thread::yield_now();
    }
}

fn shard(world: usize, rank: usize) -> std::ops::Range<usize> {
    let per = LEN.div_ceil(world);
    (rank * per).min(LEN)..((rank + 1) * per).min(LEN)
}

fn input(rank: usize, call: u64, i: usize) -> u64 {
    (rank as u64 + 1) * 1000 + call * 10 + i as u64
}

/// One rank's calls; returns its outputs.
fn rank_main(seg: &Segment, me: usize, two_shot_mask: u64) -> Vec<u64> {
    let mut outputs = Vec::new();
    for call in 0..CALLS {
        let ep = call + 1;
        let b = (ep % seg.nbuf as u64) as usize;
        let who = format!("rank {me} call {call}");
        // Publish: data, descriptor, then the flag with release.
        for i in 0..LEN {
            seg.slot(b, me, i)
                .store(word(ep, 0, input(me, call, i)), Relaxed);
        }
        seg.desc[seg.sig(me, b)].store(call, Relaxed);
        seg.flag_a[seg.sig(me, b)].store(ep, Release);
        for p in (0..seg.world).filter(|&p| p != me) {
            wait(&seg.flag_a[seg.sig(p, b)], ep);
            assert_eq!(
                seg.desc[seg.sig(p, b)].load(Relaxed),
                call,
                "{who}: descriptor from rank {p}"
            );
        }
        let mut out = [0u64; LEN];
        if two_shot_mask >> call & 1 == 0 {
            // One-shot: reduce every slot in rank order.
            for (i, o) in out.iter_mut().enumerate() {
                *o = (0..seg.world)
                    .map(|p| read(seg.slot(b, p, i), ep, 0, &who))
                    .sum();
            }
        } else {
            // Reduce-scatter into this rank's own slot, flag B, then gather.
            for i in shard(seg.world, me) {
                let s: u64 = (0..seg.world)
                    .map(|p| read(seg.slot(b, p, i), ep, 0, &who))
                    .sum();
                seg.slot(b, me, i).store(word(ep, 1, s), Relaxed);
            }
            seg.flag_b[seg.sig(me, b)].store(ep, Release);
            for p in (0..seg.world).filter(|&p| p != me) {
                wait(&seg.flag_b[seg.sig(p, b)], ep);
            }
            for p in 0..seg.world {
                for i in shard(seg.world, p) {
                    out[i] = read(seg.slot(b, p, i), ep, 1, &who);
                }
            }
        }
        for (i, o) in out.iter().enumerate() {
            let want: u64 = (0..seg.world).map(|p| input(p, call, i)).sum();
            assert_eq!(*o, want, "{who}: element {i}");
        }
        outputs.push(out.iter().fold(0, |a, x| a * 31 + x));
    }
    outputs
}

fn world_run(world: usize, nbuf: usize) {
    // Which calls use two-shot: all mixes of the two algorithms over the run.
    for mask in [0b00000, 0b11111, 0b01010, 0b10011] {
        let seg = Arc::new(Segment::new(world, nbuf));
        let hs: Vec<_> = (0..world)
            .map(|r| {
                let seg = seg.clone();
                thread::spawn(move || rank_main(&seg, r, mask))
            })
            .collect();
        let outs: Vec<Vec<u64>> = hs.into_iter().map(|h| h.join().unwrap()).collect();
        assert!(outs.iter().all(|o| *o == outs[0]), "ranks disagree");
    }
}

#[test]
fn two_ranks_two_buffers_random_schedules() {
    shuttle::check_random(|| world_run(2, 2), 10_000);
}

#[test]
fn two_ranks_two_buffers_pct_schedules() {
    shuttle::check_pct(|| world_run(2, 2), 10_000, 3);
}

#[test]
fn three_ranks_two_buffers_random_schedules() {
    shuttle::check_random(|| world_run(3, 2), 5_000);
}

#[test]
fn three_ranks_two_buffers_pct_schedules() {
    shuttle::check_pct(|| world_run(3, 2), 5_000, 3);
}

#[test]
fn fewer_buffers_than_the_protocol_needs_is_caught() {
    // With one buffer a fast rank overwrites its slot while a peer still
    // reads it; the model must find such a schedule.
    let caught = std::panic::catch_unwind(|| shuttle::check_pct(|| world_run(2, 1), 2000, 3));
    assert!(
        caught.is_err(),
        "the model did not catch a single-buffer protocol"
    );
}
