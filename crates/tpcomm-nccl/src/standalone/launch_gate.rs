//! Ranks that are threads of one process on one GPU: keeping a rank's
//! ordinary CUDA work from waiting on a kernel that waits for it.
//!
//! Threads of one process share the GPU's primary context. A synchronous
//! copy, `cudaDeviceSynchronize` or any work on the legacy default stream
//! waits for everything already queued on the context's blocking streams,
//! and work queued after it waits for it. A collective kernel spins until
//! every rank's data has arrived. So if rank 0's kernel of a call is queued
//! while rank 1's thread is still in a synchronous copy before that call,
//! the copy waits for rank 0's kernel, which waits for rank 1, which is
//! stuck in the copy; and if rank 0 returns and queues such work before rank
//! 1 has launched, rank 1's kernel is queued behind it, with the same end.
//!
//! The gate orders the host side of each call around that: no local rank
//! launches call `n` before every other rank of this process on this GPU
//! has reached call `n` (it is then inside the call, past its own earlier
//! work), and none returns before every one has launched it. Both waits are
//! bounded by TPCOMM_TIMEOUT_S and end in an error naming the rank that did
//! not come. Ranks in other processes (MPS) have contexts of their own and
//! need no gate; calls inside ncclGroupStart/End pass it (one thread may be
//! issuing every rank's call, and would wait for itself).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};
use tpcomm::transport::MAX_WORLD;

/// What the ranks of one communicator on one GPU of this process share.
#[derive(Default)]
pub struct Shared {
    /// The ranks that joined (before their communicator's first exchange).
    members: Mutex<Vec<usize>>,
    /// Per rank, the last call it reached; then the last it launched.
    arrived: [AtomicU64; MAX_WORLD],
    launched: [AtomicU64; MAX_WORLD],
    /// Per rank, the thread (its [`thread_tag`]) that made its last call
    /// inside a group; 0 before any.
    drivers: [AtomicU64; MAX_WORLD],
}

/// A number of the calling thread, never 0, the same for its whole life.
fn thread_tag() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local! {
        static TAG: u64 = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    TAG.with(|t| *t)
}

type Key = ([u8; 16], usize);

fn table() -> &'static Mutex<HashMap<Key, Weak<Shared>>> {
    static T: OnceLock<Mutex<HashMap<Key, Weak<Shared>>>> = OnceLock::new();
    T.get_or_init(Default::default)
}

/// Rank `rank` of the communicator met under `id` joins the ranks of this
/// process on `device`. Called before the ranks' first exchange, so that
/// once creation has completed on any rank every local rank has joined.
pub fn join(id: [u8; 16], device: usize, rank: usize) -> Arc<Shared> {
    let mut t = table().lock().unwrap_or_else(|p| p.into_inner());
    t.retain(|_, w| w.strong_count() > 0);
    let shared = match t.get(&(id, device)).and_then(Weak::upgrade) {
        Some(s) => s,
        None => {
            let s = Arc::new(Shared::default());
            t.insert((id, device), Arc::downgrade(&s));
            s
        }
    };
    let mut m = shared.members.lock().unwrap_or_else(|p| p.into_inner());
    if !m.contains(&rank) {
        m.push(rank);
    }
    drop(m);
    shared
}

/// One rank's gate: the other local ranks on its GPU, and its call count.
pub struct Gate {
    shared: Arc<Shared>,
    rank: usize,
    peers: Vec<usize>,
    calls: AtomicU64,
    timeout: Duration,
}

impl Gate {
    /// The gate of `rank` once its communicator is made (every local rank
    /// has joined); `None` when no other rank of this process shares its GPU.
    pub fn new(shared: Arc<Shared>, rank: usize, timeout: Duration) -> Option<Gate> {
        let peers: Vec<usize> = {
            let m = shared.members.lock().unwrap_or_else(|p| p.into_inner());
            m.iter().copied().filter(|&r| r != rank).collect()
        };
        if peers.is_empty() || rank >= MAX_WORLD || peers.iter().any(|&p| p >= MAX_WORLD) {
            return None;
        }
        Some(Gate {
            shared,
            rank,
            peers,
            calls: AtomicU64::new(0),
            timeout,
        })
    }

    /// The other ranks of this process on this GPU.
    pub fn peers(&self) -> &[usize] {
        &self.peers
    }

    /// Runs `launch` (which queues the call's kernels) between the two waits.
    /// The error names the rank that did not reach, or did not launch, the
    /// call in time; `launch` does not run when the first wait fails.
    pub fn around<T>(&self, launch: impl FnOnce() -> T) -> Result<T, String> {
        let n = self.calls.fetch_add(1, Ordering::Relaxed) + 1;
        self.shared.arrived[self.rank].store(n, Ordering::Release);
        self.wait(&self.shared.arrived, n, "reach")?;
        let out = launch();
        self.shared.launched[self.rank].store(n, Ordering::Release);
        self.wait(&self.shared.launched, n, "launch")?;
        Ok(out)
    }

    /// Notes that this thread is making this rank's call inside a group
    /// (which passes the gate: one thread may be issuing every rank's
    /// call). Says so (`Some`, what to tell the user) when the layout is one
    /// the gate cannot order: this thread drives another rank of this GPU
    /// in groups too, while a different thread drives a third. Then one
    /// thread's device-synchronizing call between groups can wait for a
    /// kernel of another thread's rank that waits for it.
    pub fn note_grouped(&self) -> Option<String> {
        let me = thread_tag();
        self.shared.drivers[self.rank].store(me, Ordering::Release);
        let drivers: Vec<u64> = self
            .peers
            .iter()
            .map(|&p| self.shared.drivers[p].load(Ordering::Acquire))
            .collect();
        let mine_too = drivers.contains(&me);
        let another = drivers.iter().any(|&d| d != 0 && d != me);
        (mine_too && another).then(|| {
            "ranks of this process share this GPU and several threads each drive several of them inside ncclGroupStart/End; calls in a group pass the launch gate, so a device-synchronizing CUDA call (cudaDeviceSynchronize, cudaFree, a pageable copy) on one thread between groups can wait for another thread's kernel that waits for it, and the ranks stall until TPCOMM_TIMEOUT_S: drive every rank of a GPU from one thread, or each from a thread of its own (docs/drop-in.md)".to_string()
        })
    }

    fn wait(&self, marks: &[AtomicU64; MAX_WORLD], n: u64, what: &str) -> Result<(), String> {
        let start = Instant::now();
        for &p in &self.peers {
            let mut spins = 0u32;
            while marks[p].load(Ordering::Acquire) < n {
                spins = spins.wrapping_add(1);
                if spins < 256 {
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                    if spins.is_multiple_of(64) && start.elapsed() > self.timeout {
                        return Err(format!(
                            "rank {p}, a thread of this process on the same GPU, did not {what} call {n} within {:?} (TPCOMM_TIMEOUT_S); every rank must make the same calls",
                            self.timeout
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    fn id(tag: u8) -> [u8; 16] {
        [tag; 16]
    }

    #[test]
    fn a_rank_alone_on_its_gpu_has_no_gate() {
        let a = join(id(1), 0, 0);
        let b = join(id(1), 1, 1);
        assert!(Gate::new(a, 0, Duration::from_secs(1)).is_none());
        assert!(Gate::new(b, 1, Duration::from_secs(1)).is_none());
    }

    #[test]
    fn no_rank_launches_before_all_reach_the_call_nor_returns_before_all_launch() {
        let world = 4;
        let shared: Vec<_> = (0..world).map(|r| join(id(2), 0, r)).collect();
        let gates: Vec<_> = shared
            .into_iter()
            .enumerate()
            .map(|(r, s)| Arc::new(Gate::new(s, r, Duration::from_secs(20)).expect("gate")))
            .collect();
        assert_eq!(gates[0].peers().len(), world - 1);
        let launched: Arc<Vec<AtomicU64>> =
            Arc::new((0..world).map(|_| AtomicU64::new(0)).collect());
        let bad = Arc::new(AtomicBool::new(false));
        let calls = 200u64;
        let threads: Vec<_> = (0..world)
            .map(|r| {
                let (g, launched, bad) = (gates[r].clone(), launched.clone(), bad.clone());
                std::thread::spawn(move || {
                    for n in 1..=calls {
                        // Work of uneven length before each call.
                        if (n as usize + r).is_multiple_of(3) {
                            std::thread::sleep(Duration::from_micros(50));
                        }
                        g.around(|| {
                            // Every rank is inside call n: none may still
                            // be before it (at n - 1 launched is fine).
                            for q in 0..world {
                                if launched[q].load(Ordering::SeqCst) + 1 < n {
                                    bad.store(true, Ordering::SeqCst);
                                }
                            }
                            launched[r].store(n, Ordering::SeqCst);
                        })
                        .expect("every rank comes");
                        // Returned: every rank has launched call n.
                        for q in 0..world {
                            if launched[q].load(Ordering::SeqCst) < n {
                                bad.store(true, Ordering::SeqCst);
                            }
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("rank thread");
        }
        assert!(!bad.load(Ordering::SeqCst), "a rank ran ahead of the gate");
    }

    #[test]
    fn several_threads_each_driving_several_ranks_in_groups_are_told_apart() {
        let gates = |tag: u8| -> Vec<Arc<Gate>> {
            let shared: Vec<_> = (0..4).map(|r| join(id(tag), 0, r)).collect();
            shared
                .into_iter()
                .enumerate()
                .map(|(r, s)| Arc::new(Gate::new(s, r, Duration::from_secs(5)).expect("gate")))
                .collect()
        };
        // One thread driving every rank: nothing to say.
        let g = gates(4);
        for _ in 0..2 {
            assert!(g.iter().all(|x| x.note_grouped().is_none()));
        }
        // A thread per rank, each call in a group of its own: nothing.
        let g = gates(5);
        let said: Vec<bool> = (0..4)
            .map(|r| {
                let x = g[r].clone();
                std::thread::spawn(move || (0..2).any(|_| x.note_grouped().is_some()))
                    .join()
                    .expect("rank thread")
            })
            .collect();
        assert_eq!(said, [false; 4]);
        // Two threads, two ranks each: said, naming the way out.
        let g = gates(6);
        let run = |ranks: [usize; 2]| {
            let g = g.clone();
            std::thread::spawn(move || {
                (0..2)
                    .flat_map(|_| ranks.map(|r| g[r].note_grouped()))
                    .flatten()
                    .next()
            })
            .join()
            .expect("driver thread")
        };
        let (a, b) = (run([0, 1]), run([2, 3]));
        assert!(a.is_none(), "the first thread alone saw no other driver");
        let b = b.expect("the second thread sees the first");
        assert!(b.contains("several threads each drive several"), "{b}");
        assert!(
            b.contains("from one thread, or each from a thread of its own"),
            "{b}"
        );
    }

    #[test]
    fn a_rank_that_never_comes_ends_the_wait_with_its_name() {
        let a = join(id(3), 0, 0);
        let _b = join(id(3), 0, 1);
        let g = Gate::new(a, 0, Duration::from_millis(200)).expect("gate");
        let ran = std::sync::atomic::AtomicBool::new(false);
        let t = Instant::now();
        let e = g.around(|| ran.store(true, Ordering::SeqCst)).unwrap_err();
        assert!(e.contains("rank 1") && e.contains("reach call 1"), "{e}");
        assert!(!ran.load(Ordering::SeqCst), "launched without its peer");
        assert!(t.elapsed() < Duration::from_secs(5));
    }
}
