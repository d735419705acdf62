//! Model check of the host path's push protocol (docs/host-gpu.md, "Small
//! messages: push slots"; kernels/host_allreduce.cu, `push`) for 2 and 3
//! ranks, with shuttle: random and PCT schedules of the ranks' steps.
//!
//! Each rank's area holds `nbuf` buffers of one slot per sender. A call picks
//! the buffer after the previous push call's, writes its vectors into its
//! slot in every peer's area, puts the sentinel back into the previous call's
//! buffer (as many vectors as that call had), then waits for every peer's
//! vectors and checks that each is the one the peer sent in this call. A
//! vector that is stale (left from an earlier call) fails the check, and so
//! does an emptying that replaces anything but the vector read in the
//! previous call (a peer's newer data, wiped). Sizes change from call to
//! call, so emptying the wrong number of vectors shows too. A run that stops
//! progressing fails on shuttle's step bound.
//!
//! What the model leaves to the hardware: that a kernel's writes land before
//! the writes of the next kernel on the same GPU (kernel completion flushes
//! them; docs/host-gpu.md). Shuttle runs every schedule sequentially
//! consistent, which is that assumption.

use shuttle::scheduler::{PctScheduler, RandomScheduler};
use shuttle::sync::atomic::{AtomicU64, Ordering::Relaxed};
use shuttle::sync::Arc;
use shuttle::{thread, Config, MaxSteps, Runner};

/// The sentinel: all-ones, which no sent vector is.
const EMPTY: u64 = u64::MAX;
/// Vectors per call; each of 3 buffers is reused at least twice.
const SIZES: [usize; 8] = [3, 1, 2, 3, 1, 3, 2, 3];
const MAX_VECS: usize = 3;

struct Areas {
    world: usize,
    nbuf: usize,
    /// [owner][buffer][sender][vector]
    words: Vec<AtomicU64>,
}

impl Areas {
    fn new(world: usize, nbuf: usize) -> Self {
        Areas {
            world,
            nbuf,
            words: (0..world * nbuf * world * MAX_VECS)
                .map(|_| AtomicU64::new(EMPTY))
                .collect(),
        }
    }
    fn at(&self, owner: usize, buf: usize, sender: usize, i: usize) -> &AtomicU64 {
        &self.words[((owner * self.nbuf + buf) * self.world + sender) * MAX_VECS + i]
    }
}

/// What `sender` sends as vector `i` of call `call` (never the sentinel).
fn sent(call: usize, sender: usize, i: usize) -> u64 {
    ((call as u64 + 1) << 32) | ((sender as u64) << 16) | i as u64
}

#[derive(Clone, Copy)]
enum Emptying {
    /// As the kernel does: the previous push call's vectors.
    PreviousCallsSize,
    /// A plausible bug: only as many vectors as this call has.
    ThisCallsSize,
}

fn rank_main(a: &Areas, me: usize, emptying: Emptying) {
    let peers: Vec<usize> = (0..a.world).filter(|&q| q != me).collect();
    // The control words start at zero: buffer 0, nothing to empty.
    let (mut last_buf, mut last_n) = (0usize, 0usize);
    for (call, &n) in SIZES.iter().enumerate() {
        let buf = (last_buf + 1) % a.nbuf;
        for &q in &peers {
            for i in 0..n {
                a.at(q, buf, me, i).store(sent(call, me, i), Relaxed);
            }
        }
        let empty_n = match emptying {
            Emptying::PreviousCallsSize => last_n,
            Emptying::ThisCallsSize => last_n.min(n),
        };
        for &k in &peers {
            for i in 0..empty_n {
                // The kernel's store is blind; the model looks at what it
                // replaces: the vector read in the previous call, or a wipe.
                let old = a.at(me, last_buf, k, i).swap(EMPTY, Relaxed);
                assert_eq!(
                    old,
                    sent(call - 1, k, i),
                    "rank {me} call {call}: emptying wiped vector {i} from rank {k} ({old:#x})"
                );
            }
        }
        for &q in &peers {
            for i in 0..n {
                let got = loop {
                    let v = a.at(me, buf, q, i).load(Relaxed);
                    if v != EMPTY {
                        break v;
                    }
                    thread::yield_now();
                };
                assert_eq!(
                    got,
                    sent(call, q, i),
                    "rank {me} call {call}: vector {i} from rank {q} is {got:#x} (stale)"
                );
            }
        }
        last_buf = buf;
        last_n = n;
    }
}

fn world_run(world: usize, nbuf: usize, emptying: Emptying) {
    let a = Arc::new(Areas::new(world, nbuf));
    let hs: Vec<_> = (0..world)
        .map(|r| {
            let a = a.clone();
            thread::spawn(move || rank_main(&a, r, emptying))
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
}

/// A step bound well above what a correct run takes (a few hundred steps),
/// so a rank waiting for a wiped vector fails fast.
fn config() -> Config {
    let mut c = Config::new();
    c.max_steps = MaxSteps::FailAfter(20_000);
    c
}

fn random(world: usize, nbuf: usize, emptying: Emptying, iterations: usize) {
    Runner::new(RandomScheduler::new(iterations), config())
        .run(move || world_run(world, nbuf, emptying));
}

fn pct(world: usize, nbuf: usize, emptying: Emptying, iterations: usize) {
    Runner::new(PctScheduler::new(3, iterations), config())
        .run(move || world_run(world, nbuf, emptying));
}

/// The message `f` panicked with; "did not fail" when it returned.
fn panic_text(f: impl FnOnce() + std::panic::UnwindSafe) -> String {
    match std::panic::catch_unwind(f) {
        Ok(()) => "did not fail".to_string(),
        Err(p) => p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "a panic without a message".to_string()),
    }
}

#[test]
fn two_ranks_three_buffers_random_schedules() {
    random(2, 3, Emptying::PreviousCallsSize, 5_000);
}

#[test]
fn two_ranks_three_buffers_pct_schedules() {
    pct(2, 3, Emptying::PreviousCallsSize, 5_000);
}

#[test]
fn three_ranks_three_buffers_random_schedules() {
    random(3, 3, Emptying::PreviousCallsSize, 3_000);
}

#[test]
fn three_ranks_three_buffers_pct_schedules() {
    pct(3, 3, Emptying::PreviousCallsSize, 3_000);
}

#[test]
fn two_buffers_let_a_late_emptying_wipe_a_peers_data_and_the_model_catches_it() {
    let caught = panic_text(|| pct(2, 2, Emptying::PreviousCallsSize, 2_000));
    assert!(caught.contains("emptying wiped"), "{caught}");
}

#[test]
fn emptying_only_this_calls_size_leaves_stale_vectors_and_the_model_catches_it() {
    let caught = panic_text(|| random(2, 3, Emptying::ThisCallsSize, 2_000));
    assert!(caught.contains("(stale)"), "{caught}");
}
