//! All-gather, reduce-scatter and broadcast on the segment the all-reduce
//! already has (docs/protocol.md, "Other collectives"): no new memory.
//!
//! Every call follows the all-reduce's epoch rule: in each epoch a rank
//! writes only its own slot, publishes its arrival flag with a descriptor,
//! waits for every peer's flag of that epoch (checking their descriptors),
//! then reads. A rank publishes epoch e + 1 only after it finished reading
//! epoch e, so the buffer rotation that keeps the all-reduce safe keeps these
//! safe too, whatever mix of collectives the ranks run, as long as every rank
//! runs the same sequence (a rank that does not is told by `Error::Mismatch`).

use super::allreduce::{dtype_code, op_code, Desc, ALL_GATHER, BROADCAST, REDUCE_SCATTER};
use super::reduce::reduce;
use super::HostCommunicator;
use crate::dtype::{Element, ReduceOp};
use crate::error::{Error, Result};

impl HostCommunicator {
    /// All-gather: every rank gives `input` (the same length on every rank)
    /// and receives in `output` every rank's input in rank order: rank r's
    /// at `output[r * n..(r + 1) * n]` with `n = input.len()`. Identical bit
    /// for bit on every rank.
    pub fn all_gather<T: Element>(&mut self, input: &[T], output: &mut [T]) -> Result<()> {
        let n = input.len();
        self.check_gathered("all-gather", n, output.len())?;
        // SAFETY: `input` and `output` are distinct live slices (one is
        // borrowed mutably) of n and world * n elements.
        unsafe { self.gather(input.as_ptr(), output.as_mut_ptr(), n) }
    }

    /// In-place all-gather: `buf` holds `world * n` elements and this rank's
    /// input is already at `buf[rank * n..(rank + 1) * n]`; the other blocks
    /// are filled in.
    pub fn all_gather_in_place<T: Element>(&mut self, buf: &mut [T]) -> Result<()> {
        let n = self.block_len("all-gather", buf.len())?;
        let p = buf.as_mut_ptr();
        // SAFETY: the source is this rank's block of `buf`, which the gather
        // reads and never writes; every other block is only written.
        unsafe { self.gather(p.add(self.cfg.rank * n) as *const T, p, n) }
    }

    /// Reduce-scatter: every rank gives `input` of `world * n` elements and
    /// receives in `output` (n elements) the reduction of block `rank` of
    /// every rank's input. The bits equal those of block `rank` of an
    /// all-reduce of the same inputs (the same rank-order reduction).
    pub fn reduce_scatter<T: Element>(
        &mut self,
        input: &[T],
        output: &mut [T],
        op: ReduceOp,
    ) -> Result<()> {
        let n = output.len();
        self.check_gathered("reduce-scatter", n, input.len())?;
        // SAFETY: distinct live slices of world * n and n elements.
        unsafe { self.scatter(input.as_ptr(), output.as_mut_ptr(), n, op) }
    }

    /// In-place reduce-scatter: `buf` holds `world * n` elements; the result
    /// lands in `buf[rank * n..(rank + 1) * n]` and the other blocks are left
    /// as they were.
    pub fn reduce_scatter_in_place<T: Element>(
        &mut self,
        buf: &mut [T],
        op: ReduceOp,
    ) -> Result<()> {
        let n = self.block_len("reduce-scatter", buf.len())?;
        let p = buf.as_mut_ptr();
        // SAFETY: the output is exactly this rank's block of the input, which
        // `reduce` allows (each element is read before it is written); the
        // other blocks are only read.
        unsafe { self.scatter(p as *const T, p.add(self.cfg.rank * n), n, op) }
    }

    /// Broadcast: `buf` of rank `root` is copied into `buf` of every other
    /// rank (every rank gives the same length and root).
    pub fn broadcast<T: Element>(&mut self, buf: &mut [T], root: usize) -> Result<()> {
        if root >= self.cfg.world {
            return Err(Error::invalid(
                "broadcast root",
                format!(
                    "{root} is not a rank of this communicator (0..{})",
                    self.cfg.world
                ),
            ));
        }
        // SAFETY: `buf` is live for buf.len() elements; the root only reads
        // it, the others only write it.
        unsafe { self.bcast(buf.as_mut_ptr(), buf.len(), root) }
    }

    fn check_gathered(&self, what: &str, n: usize, whole: usize) -> Result<()> {
        let world = self.cfg.world;
        if n.checked_mul(world) != Some(whole) {
            let (small, big) = if what == "all-gather" {
                ("input", "output")
            } else {
                ("output", "input")
            };
            return Err(Error::invalid(
                format!("{what} buffers"),
                format!(
                    "the {big} has {whole} elements but must be {world} ranks x the {small}'s {n}"
                ),
            ));
        }
        Ok(())
    }

    fn block_len(&self, what: &str, len: usize) -> Result<usize> {
        let world = self.cfg.world;
        if !len.is_multiple_of(world) {
            return Err(Error::invalid(
                format!("{what} buffer"),
                format!("{len} elements is not a whole number of blocks for {world} ranks"),
            ));
        }
        Ok(len / world)
    }

    /// Runs one call as a sequence of epochs over pieces of at most
    /// `per_piece` elements of `count`, like the all-reduce; a zero-length
    /// call still takes one epoch so its descriptor is checked.
    pub(super) fn each_piece(
        &mut self,
        count: usize,
        per_piece: usize,
        meta: u64,
        mut step: impl FnMut(&Self, u64, Desc, usize, usize) -> Result<()>,
    ) -> Result<()> {
        if let Some(why) = &self.poisoned {
            return Err(Error::Aborted(why.clone()));
        }
        self.seq += 1;
        let mut off = 0;
        loop {
            let len = per_piece.min(count - off);
            let desc = Desc {
                count: count as u64,
                meta,
                seq: self.seq,
                offset: off as u64,
            };
            let ep = self.epoch;
            self.epoch += 1;
            if let Err(e) = step(self, ep, desc, off, len) {
                self.fail(&e, ep);
                return Err(e);
            }
            off += len;
            if off >= count {
                return Ok(());
            }
        }
    }

    /// # Safety
    /// `src` is valid for `n` reads, `dst` for `world * n` writes; `src` is
    /// either outside `dst` or exactly block `rank` of it.
    unsafe fn gather<T: Element>(&mut self, src: *const T, dst: *mut T, n: usize) -> Result<()> {
        let per_piece = self.seg.layout.slot_bytes / std::mem::size_of::<T>();
        let meta = dtype_code(T::DTYPE) | ALL_GATHER << 24;
        let (me, world) = (self.cfg.rank, self.cfg.world);
        self.each_piece(n, per_piece, meta, |c, ep, desc, off, len| {
            // SAFETY: the function's contract (above) covers every pointer
            // this piece reads or writes; each step says why it is in bounds
            // and not raced.
            unsafe {
                c.publish(ep, desc, src.add(off), len, (0, 0));
                c.gather_arrivals(ep, desc)?;
                let b = c.buf(ep);
                for p in 0..world {
                    let to = dst.add(p * n + off);
                    if p == me {
                        if !std::ptr::eq(src.add(off), to) {
                            // SAFETY: distinct caller memory (contract above).
                            std::ptr::copy_nonoverlapping(src.add(off), to, len);
                        }
                    } else {
                        // SAFETY: p's slot holds epoch ep's piece (its flag was
                        // acquired) and stays until p publishes epoch ep + 2's
                        // data, which needs this rank's epoch ep + 1 flag.
                        std::ptr::copy_nonoverlapping(c.seg.slot(b, p) as *const T, to, len);
                    }
                }
                Ok(())
            }
        })
    }

    /// # Safety
    /// `src` is valid for `world * n` reads, `dst` for `n` writes; `dst` is
    /// either outside `src` or exactly block `rank` of it.
    unsafe fn scatter<T: Element>(
        &mut self,
        src: *const T,
        dst: *mut T,
        n: usize,
        op: ReduceOp,
    ) -> Result<()> {
        let (me, world) = (self.cfg.rank, self.cfg.world);
        // A slot carries one sub-piece for each rank: `stride` elements each
        // (at least 4 KiB / (64 ranks x 4 bytes) = 16).
        let stride = self.seg.layout.slot_bytes / std::mem::size_of::<T>() / world;
        let meta = dtype_code(T::DTYPE) | op_code(op) << 8 | REDUCE_SCATTER << 24;
        self.each_piece(n, stride, meta, |c, ep, desc, off, len| {
            // SAFETY: the function's contract (above) covers every pointer
            // this piece reads or writes; each step says why it is in bounds
            // and not raced.
            unsafe {
                let b = c.buf(ep);
                let mine = c.seg.slot(b, me) as *mut T;
                for p in (0..world).filter(|&p| p != me) {
                    // SAFETY: sub-piece p lies inside this rank's slot (world x
                    // stride elements); no peer reads it before the flag below,
                    // and peers finished reading this buffer's previous use
                    // before publishing the epoch-(ep - 1) flags this rank saw.
                    std::ptr::copy_nonoverlapping(src.add(p * n + off), mine.add(p * stride), len);
                }
                c.publish(ep, desc, src, 0, (0, 0));
                c.gather_arrivals(ep, desc)?;
                let mut srcs = c.slots::<T>(b);
                for (p, s) in srcs.iter_mut().enumerate().take(world) {
                    *s = if p == me {
                        src.add(me * n + off)
                    } else {
                        s.add(me * stride)
                    };
                }
                // SAFETY: peers' sub-pieces are stable until this rank's next
                // epoch; dst is the caller's and, if inside src, is exactly
                // srcs[me] (allowed by `reduce`).
                reduce(&srcs[..world], dst.add(off), None, len, op);
                Ok(())
            }
        })
    }

    /// # Safety
    /// `buf` is valid for `n` elements.
    unsafe fn bcast<T: Element>(&mut self, buf: *mut T, n: usize, root: usize) -> Result<()> {
        let per_piece = self.seg.layout.slot_bytes / std::mem::size_of::<T>();
        let meta = dtype_code(T::DTYPE) | BROADCAST << 24 | (root as u64) << 32;
        let me = self.cfg.rank;
        self.each_piece(n, per_piece, meta, |c, ep, desc, off, len| {
            // SAFETY: the function's contract (above) covers every pointer
            // this piece reads or writes; each step says why it is in bounds
            // and not raced.
            unsafe {
                // Every rank publishes (the others with no data): the root must
                // know they all finished reading before it reuses a buffer.
                let sent = if me == root { len } else { 0 };
                c.publish(ep, desc, buf.add(off) as *const T, sent, (0, 0));
                c.gather_arrivals(ep, desc)?;
                if me != root {
                    // SAFETY: the root's slot holds this piece (flag acquired)
                    // until the root's epoch ep + 2, which needs our ep + 1 flag.
                    std::ptr::copy_nonoverlapping(
                        c.seg.slot(c.buf(ep), root) as *const T,
                        buf.add(off),
                        len,
                    );
                }
                Ok(())
            }
        })
    }
}
