//! One-shot and two-shot all-reduce on the segment (docs/protocol.md,
//! "Algorithms"). Each piece of a message (at most one slot) is one epoch.

use super::layout::*;
use super::reduce::reduce;
use super::wait::Backoff;
use super::HostCommunicator;
use crate::algo::Algo;
use crate::dtype::{DType, Element, ReduceOp};
use crate::error::{Error, Result};
use crate::meet::identity::pid_alive;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::time::Instant;

/// What every rank publishes beside its arrival flag; ranks that disagree on
/// any field fail with `Error::Mismatch` instead of reducing.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) struct Desc {
    pub(super) count: u64,
    /// dtype | op << 8 | algo << 16 | collective << 24 | root << 32
    /// (collective and root: collectives.rs; 0 for an all-reduce).
    pub(super) meta: u64,
    pub(super) seq: u64,
    pub(super) offset: u64,
}

pub(super) fn dtype_code(d: DType) -> u64 {
    match d {
        DType::F32 => 1,
        DType::F16 => 2,
        DType::Bf16 => 3,
    }
}

pub(super) fn op_code(op: ReduceOp) -> u64 {
    match op {
        ReduceOp::Sum => 1,
        ReduceOp::Max => 2,
        ReduceOp::Min => 3,
    }
}

/// Collective codes in a descriptor's meta word (bits 24..32); 0 is the
/// all-reduce.
pub(super) const ALL_GATHER: u64 = 1;
pub(super) const REDUCE_SCATTER: u64 = 2;
pub(super) const BROADCAST: u64 = 3;

/// Text for a descriptor of a collective other than the all-reduce.
fn describe_collective(code: u64, root: u64, op: &str) -> String {
    match code {
        ALL_GATHER => "all-gather".to_string(),
        REDUCE_SCATTER => format!("reduce-scatter, {op}"),
        BROADCAST => format!("broadcast from rank {root}"),
        _ => "an unknown collective".to_string(),
    }
}

impl Desc {
    fn describe(&self) -> String {
        let dt = match self.meta & 0xff {
            1 => "f32",
            2 => "f16",
            3 => "bf16",
            _ => "?",
        };
        let op = match (self.meta >> 8) & 0xff {
            1 => "sum",
            2 => "max",
            3 => "min",
            _ => "?",
        };
        let algo = match (self.meta >> 16) & 0xff {
            1 => "one-shot",
            2 => "two-shot",
            _ => "?",
        };
        let what = match (self.meta >> 24) & 0xff {
            0 => format!("all-reduce, {op}, {algo}"),
            c => describe_collective(c, self.meta >> 32, op),
        };
        format!(
            "{} x {dt}, {what} (call #{}, piece at element {})",
            self.count, self.seq, self.offset
        )
    }
}

fn abort_message(word: u64) -> String {
    let kind = match word >> 56 {
        ABORT_TIMEOUT => "found that a peer did not arrive within the timeout",
        ABORT_MISMATCH => "found ranks calling different collectives",
        ABORT_SETUP => "could not join during set-up",
        _ => "failed",
    };
    format!(
        "rank {} {kind} (rank {}) at epoch {}",
        (word >> 48) & 0xff,
        (word >> 40) & 0xff,
        word & EPOCH_MASK
    )
}

/// Elements `[start, end)` of a piece of `len` elements that `rank` reduces
/// in two-shot. Shards are whole multiples of `unit` elements (64 bytes) so
/// no two ranks write the same cache line.
pub fn shard_range(len: usize, world: usize, rank: usize, unit: usize) -> (usize, usize) {
    let per = len.div_ceil(world).div_ceil(unit) * unit;
    let s0 = (rank * per).min(len);
    (s0, (s0 + per).min(len))
}

impl HostCommunicator {
    /// # Safety
    /// `src` and `dst` are valid for `count` elements; they are either the
    /// same pointer or do not overlap at all.
    pub(super) unsafe fn run<T: Element>(
        &mut self,
        src: *const T,
        dst: *mut T,
        count: usize,
        op: ReduceOp,
        algo: Algo,
    ) -> Result<()> {
        if let Some(why) = &self.poisoned {
            return Err(Error::Aborted(why.clone()));
        }
        let algo = self.resolve(T::DTYPE, count, algo)?;
        let per_piece = self.seg.layout.slot_bytes / std::mem::size_of::<T>();
        let meta = dtype_code(T::DTYPE) | op_code(op) << 8 | algo.code() << 16;
        // A zero-length call still takes one epoch so its descriptor is checked.
        self.each_piece(count, per_piece, meta, |c, ep, desc, off, len| {
            // SAFETY: off + len <= count, so both pieces lie inside the
            // caller's buffers (the contract above), and alias as they do.
            unsafe {
                match algo {
                    Algo::TwoShot => c.two_shot(ep, desc, src.add(off), dst.add(off), len, op),
                    _ => c.one_shot(ep, desc, src.add(off), dst.add(off), len, op),
                }
            }
        })
    }

    /// Poisons this communicator and, for failures this rank found itself,
    /// the segment, so peers stop waiting at once.
    pub(super) fn fail(&mut self, e: &Error, ep: u64) {
        self.poisoned = Some(format!("this rank failed earlier: {e}"));
        let (kind, peer) = match e {
            Error::PeerTimeout { peer, .. } => (ABORT_TIMEOUT, *peer),
            Error::Mismatch { peer, .. } => (ABORT_MISMATCH, *peer),
            _ => return,
        };
        let word =
            kind << 56 | (self.cfg.rank as u64) << 48 | (peer as u64) << 40 | (ep & EPOCH_MASK);
        let _ = self
            .seg
            .word(H_ABORT)
            .compare_exchange(0, word, AcqRel, Acquire);
    }

    pub(super) fn buf(&self, ep: u64) -> usize {
        (ep % self.seg.layout.nbuf as u64) as usize
    }

    /// Copies this rank's piece into its slot, except elements `skip` (which
    /// no peer reads), and publishes it.
    pub(super) unsafe fn publish<T: Element>(
        &self,
        ep: u64,
        desc: Desc,
        src: *const T,
        len: usize,
        skip: (usize, usize),
    ) {
        let b = self.buf(ep);
        let me = self.cfg.rank;
        let slot = self.seg.slot(b, me) as *mut T;
        // SAFETY: the slot holds slot_bytes >= len * size_of::<T>() bytes and
        // skip lies within 0..len; no peer reads the slot until the release
        // store below; a peer's reads of the previous use of this buffer
        // (epoch ep - nbuf) ended before that peer published its flag of
        // epoch ep - 1, which this rank has seen.
        unsafe {
            std::ptr::copy_nonoverlapping(src, slot, skip.0);
            std::ptr::copy_nonoverlapping(src.add(skip.1), slot.add(skip.1), len - skip.1);
        }
        self.seg.line_a(me, b, D_COUNT).store(desc.count, Relaxed);
        self.seg.line_a(me, b, D_META).store(desc.meta, Relaxed);
        self.seg.line_a(me, b, D_SEQ).store(desc.seq, Relaxed);
        self.seg.line_a(me, b, D_OFFSET).store(desc.offset, Relaxed);
        self.seg.line_a(me, b, 0).store(ep, Release);
    }

    /// Waits for every peer's piece of epoch `ep` and checks its descriptor.
    pub(super) fn gather_arrivals(&self, ep: u64, desc: Desc) -> Result<()> {
        let b = self.buf(ep);
        for p in (0..self.cfg.world).filter(|&p| p != self.cfg.rank) {
            self.wait(self.seg.line_a(p, b, 0), ep, p, "its data")?;
            let theirs = Desc {
                count: self.seg.line_a(p, b, D_COUNT).load(Relaxed),
                meta: self.seg.line_a(p, b, D_META).load(Relaxed),
                seq: self.seg.line_a(p, b, D_SEQ).load(Relaxed),
                offset: self.seg.line_a(p, b, D_OFFSET).load(Relaxed),
            };
            if theirs != desc {
                return Err(Error::Mismatch {
                    rank: self.cfg.rank,
                    peer: p,
                    epoch: ep,
                    mine: desc.describe(),
                    theirs: theirs.describe(),
                });
            }
        }
        Ok(())
    }

    pub(super) fn slots<T>(&self, b: usize) -> [*const T; MAX_WORLD] {
        let mut s = [std::ptr::null(); MAX_WORLD];
        for (r, p) in s.iter_mut().enumerate().take(self.cfg.world) {
            *p = self.seg.slot(b, r) as *const T;
        }
        s
    }

    unsafe fn one_shot<T: Element>(
        &self,
        ep: u64,
        desc: Desc,
        src: *const T,
        dst: *mut T,
        len: usize,
        op: ReduceOp,
    ) -> Result<()> {
        // SAFETY: `src` holds `len` elements (the caller's contract).
        unsafe { self.publish(ep, desc, src, len, (0, 0)) };
        self.gather_arrivals(ep, desc)?;
        let srcs = self.slots::<T>(self.buf(ep));
        // SAFETY: every slot of this buffer holds epoch ep's piece (flags
        // acquired above) and nobody writes them until this rank publishes
        // epoch ep + 1; dst is the caller's, distinct from the segment.
        unsafe { reduce(&srcs[..self.cfg.world], dst, None, len, op) };
        Ok(())
    }

    unsafe fn two_shot<T: Element>(
        &self,
        ep: u64,
        desc: Desc,
        src: *const T,
        dst: *mut T,
        len: usize,
        op: ReduceOp,
    ) -> Result<()> {
        let (me, world) = (self.cfg.rank, self.cfg.world);
        let b = self.buf(ep);
        let unit = (64 / std::mem::size_of::<T>()).max(1);
        // Peers read only their own shards of this rank's slot, so this
        // rank's shard is not copied in: it is reduced straight from `src`.
        let (s0, s1) = shard_range(len, world, me, unit);
        // SAFETY: `src` holds `len` elements (the caller's contract) and the
        // skipped shard lies within them.
        unsafe { self.publish(ep, desc, src, len, (s0, s1)) };
        self.gather_arrivals(ep, desc)?;
        // Reduce-scatter: this rank reduces its shard of every rank's data
        // into its own slot, which no peer reads until flag B.
        let mut srcs = self.slots::<T>(b);
        for s in srcs.iter_mut().take(world) {
            // SAFETY: s0 <= len, within every slot.
            *s = unsafe { s.add(s0) };
        }
        // The result goes to the caller's output and to this rank's slot for
        // the peers. dst may be src (in place): reduce reads each block of
        // every source before writing it.
        let own = srcs[me] as *mut T;
        // SAFETY: s0 <= len, within the caller's input.
        srcs[me] = unsafe { src.add(s0) };
        // SAFETY: dst/src shards are the caller's, `own` is in the segment,
        // so `own` overlaps neither; peers' shards are stable until this
        // rank's next epoch.
        unsafe { reduce(&srcs[..world], dst.add(s0), Some(own), s1 - s0, op) };
        self.seg.flag_b(me, b).store(ep, Release);
        // All-gather: copy every rank's reduced shard out.
        for p in (0..world).filter(|&p| p != me) {
            self.wait(self.seg.flag_b(p, b), ep, p, "its reduced shard")?;
        }
        for p in (0..world).filter(|&p| p != me) {
            let (q0, q1) = shard_range(len, world, p, unit);
            // SAFETY: rank p's shard was written before its flag B (acquired
            // above) and stays until p publishes epoch ep + 1's arrival, which
            // needs this rank's epoch ep + 1 flag; dst is the caller's memory.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    (self.seg.slot(b, p) as *const T).add(q0),
                    dst.add(q0),
                    q1 - q0,
                )
            };
        }
        Ok(())
    }

    /// Waits until `flag` holds `ep`, bounded by the timeout, failing early
    /// if the segment is aborted or `peer`'s process has exited.
    pub(super) fn wait(&self, flag: &AtomicU64, ep: u64, peer: usize, what: &str) -> Result<()> {
        let mut backoff = Backoff::new();
        let mut start: Option<Instant> = None;
        let mut slow_rounds: u32 = 0;
        loop {
            if flag.load(Acquire) == ep {
                return Ok(());
            }
            if backoff.slow() {
                let t0 = *start.get_or_insert_with(Instant::now);
                let abort = self.seg.word(H_ABORT).load(Acquire);
                if abort != 0 {
                    return Err(Error::Aborted(abort_message(abort)));
                }
                slow_rounds = slow_rounds.wrapping_add(1);
                let pid = self.peer_pids[peer];
                let dead = slow_rounds.is_multiple_of(64) && pid != 0 && !pid_alive(pid);
                let waited = t0.elapsed();
                if dead || waited >= self.cfg.timeout {
                    let what = if dead {
                        format!("{what}; its process (pid {pid}) has exited")
                    } else {
                        what.to_string()
                    };
                    return Err(Error::PeerTimeout {
                        rank: self.cfg.rank,
                        peer,
                        epoch: ep,
                        what,
                        waited,
                    });
                }
            }
            backoff.snooze();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{abort_message, shard_range, ABORT_TIMEOUT};

    #[test]
    fn an_abort_for_a_missing_peer_says_it_did_not_arrive() {
        let m = abort_message(ABORT_TIMEOUT << 56 | 2 << 40 | 5);
        assert_eq!(
            m,
            "rank 0 found that a peer did not arrive within the timeout (rank 2) at epoch 5"
        );
    }

    #[test]
    fn shards_cover_every_element_once_in_whole_cache_lines() {
        for world in 1..=5 {
            for len in [0, 1, 15, 16, 17, 100, 1000, 4097] {
                let mut next = 0;
                for r in 0..world {
                    let (a, b) = shard_range(len, world, r, 16);
                    assert_eq!(a, next, "world {world} len {len} rank {r}");
                    assert!(a % 16 == 0 || a == len);
                    next = b;
                }
                assert_eq!(next, len);
            }
        }
    }
}
