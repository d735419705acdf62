//! Where everything lives inside the segment (docs/protocol.md, "Segment
//! layout"), and typed access to it.

use crate::error::{Error, Result};
use crate::memory::{MemoryLine, MemoryReport, Place};
use crate::sys::shm::Mapping;
use crate::units::{ByteSize, UnitsError};
use std::sync::atomic::AtomicU64;

pub(crate) const MAGIC: u64 = u64::from_le_bytes(*b"TPCOMMH1");
pub(crate) const VERSION: u64 = 2;
/// Fewest buffers the epochs rotate through. Two suffice: a rank can start
/// epoch e + 2 only after every peer has published a flag of epoch e + 1,
/// which each peer does only after it finished reading everything of epoch e.
/// The segment holds room for 2 x max_message per rank; cut into pieces
/// smaller than max_message it becomes more buffers of one piece each.
pub(crate) const MIN_BUFFERS: usize = 2;
/// Bound on buffers (and so on the signal area): max_message / piece <= 2048.
const MAX_BUFFERS: usize = 4096;
/// Largest world the header has room for.
pub(crate) const MAX_WORLD: usize = 64;
/// Flags sit on their own 128-byte block: adjacent-line prefetch pulls 64-byte
/// lines in pairs, so 64 bytes apart would still share traffic.
const LINE: usize = 128;
const PAGE: usize = 4096;
const HEADER_BYTES: usize = PAGE;
/// Per rank and buffer: line A (arrival flag + descriptor), line B (reduced flag).
const SIGNAL_BYTES: usize = 2 * LINE;

// Header words (byte offsets).
pub(crate) const H_MAGIC: usize = 0;
pub(crate) const H_VERSION: usize = 8;
pub(crate) const H_ID0: usize = 16;
pub(crate) const H_ID1: usize = 24;
pub(crate) const H_WORLD: usize = 32;
pub(crate) const H_SLOT: usize = 40;
pub(crate) const H_TOTAL: usize = 48;
pub(crate) const H_CREATOR: usize = 56;
/// Hash of the job key (two words): a rank attaches only when it equals its own.
pub(crate) const H_KEY0: usize = 64;
pub(crate) const H_KEY1: usize = 72;
/// The largest message (page-aligned) the segment was made for.
pub(crate) const H_MAX: usize = 80;
pub(crate) const H_ATTACHED: usize = LINE;
pub(crate) const H_READY: usize = 2 * LINE;
pub(crate) const H_ABORT: usize = 3 * LINE;
/// One word per rank: its pid with bit 63 set once the rank has claimed it.
pub(crate) const H_PIDS: usize = 4 * LINE;
const _: () = assert!(H_PIDS + 8 * MAX_WORLD <= HEADER_BYTES);

// Abort word (at H_ABORT): kind << 56 | rank << 48 | peer << 40 | epoch (low
// 40 bits). Never 0 once set (kind >= 1); allreduce.rs sets and decodes it.
pub(super) const ABORT_TIMEOUT: u64 = 1;
pub(super) const ABORT_MISMATCH: u64 = 2;
/// Set by a rank that could not join during set-up (rendezvous.rs).
pub(super) const ABORT_SETUP: u64 = 3;
pub(super) const EPOCH_MASK: u64 = (1 << 40) - 1;

// Descriptor words inside line A, after the flag.
pub(crate) const D_COUNT: usize = 8;
pub(crate) const D_META: usize = 16;
pub(crate) const D_SEQ: usize = 24;
pub(crate) const D_OFFSET: usize = 32;

/// Sizes of the segment's parts for a world and slot size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    pub world: usize,
    /// Buffers the epochs rotate through.
    pub nbuf: usize,
    /// The largest message, page-aligned.
    pub max: usize,
    /// One rank's slot in one buffer: the largest piece one epoch carries.
    pub slot_bytes: usize,
    pub signal_bytes: usize,
    pub data_offset: usize,
    pub total: usize,
}

impl Layout {
    pub(crate) fn new(world: usize, max_message: ByteSize, piece: ByteSize) -> Result<Self> {
        let page = ByteSize::b(PAGE as u64);
        let max = max_message.align_up(page)?.as_usize()?;
        let slot = piece.align_up(page)?.as_usize()?.min(max);
        let nbuf = MIN_BUFFERS * max.div_ceil(slot);
        if nbuf > MAX_BUFFERS {
            return Err(Error::invalid(
                "piece size",
                format!(
                    "{piece} cuts {max_message} into more than {} pieces; use a larger piece",
                    MAX_BUFFERS / 2
                ),
            ));
        }
        let signal_bytes = (world * nbuf * SIGNAL_BYTES).div_ceil(PAGE) * PAGE;
        let data_offset = HEADER_BYTES + signal_bytes;
        let data = slot
            .checked_mul(world * nbuf)
            .ok_or_else(|| UnitsError::Overflow(format!("{world} ranks x {nbuf} x {piece}")))?;
        let total = data_offset
            .checked_add(data)
            .ok_or_else(|| UnitsError::Overflow("segment size".into()))?;
        Ok(Layout {
            world,
            nbuf,
            max,
            slot_bytes: slot,
            signal_bytes,
            data_offset,
            total,
        })
    }

    pub(crate) fn report(&self) -> MemoryReport {
        let b = |n: usize| ByteSize::from_usize(n);
        let line = |name: &str, n: usize| MemoryLine::new(Place::HostShared, name, b(n));
        MemoryReport::host_shared(
            "host shared memory (one segment per communicator)",
            vec![
                line("header", HEADER_BYTES)
                    .with_detail("id, sizes, attach count, abort word, rank pids"),
                line("flags and descriptors", self.signal_bytes).with_detail(format!(
                    "{} ranks x {} buffers x {SIGNAL_BYTES} bytes, rounded up to a page",
                    self.world, self.nbuf
                )),
                line("data slots", self.slot_bytes * self.world * self.nbuf).with_detail(format!(
                    "{} buffers x {} ranks x {} per piece",
                    self.nbuf,
                    self.world,
                    b(self.slot_bytes)
                )),
            ],
        )
    }
}

/// A mapped segment with its layout.
pub(crate) struct Segment {
    map: Mapping,
    /// The POSIX name it was created under (unlinked once all attached).
    pub name: String,
    pub layout: Layout,
}

impl Segment {
    pub(crate) fn new(map: Mapping, layout: Layout, name: &str) -> Result<Self> {
        if map.len() < layout.total {
            return Err(Error::invalid(
                "segment",
                format!("mapped {} bytes, layout needs {}", map.len(), layout.total),
            ));
        }
        Ok(Segment {
            map,
            name: name.to_string(),
            layout,
        })
    }

    /// A segment whose size is not yet checked against this rank's layout:
    /// only its header words are reachable (to check it, or to set the abort
    /// word when this rank cannot join).
    pub(crate) fn header_only(map: Mapping, name: &str) -> Result<Self> {
        if map.len() < HEADER_BYTES {
            return Err(Error::invalid(
                "segment",
                format!("{name} is {} bytes, smaller than a header", map.len()),
            ));
        }
        let layout = Layout {
            world: 0,
            nbuf: 0,
            max: 0,
            slot_bytes: 0,
            signal_bytes: 0,
            data_offset: HEADER_BYTES,
            total: map.len(),
        };
        Ok(Segment {
            map,
            name: name.to_string(),
            layout,
        })
    }

    /// Bytes mapped.
    pub(crate) fn map_len(&self) -> usize {
        self.map.len()
    }

    /// This segment with the full layout (checked against the mapping).
    pub(crate) fn with_layout(self, layout: Layout) -> Result<Self> {
        Segment::new(self.map, layout, &self.name)
    }

    /// A 64-bit word of the header or signal area.
    pub(crate) fn word(&self, off: usize) -> &AtomicU64 {
        assert!(off.is_multiple_of(8) && off + 8 <= self.layout.data_offset);
        // SAFETY: the mapping is page-aligned and at least data_offset long
        // (checked in `new`), `off` is 8-aligned and in bounds; AtomicU64 has
        // the layout of u64; these words are only ever accessed atomically,
        // by every rank; the reference lives no longer than `self.map`.
        unsafe { &*(self.map.base().add(off) as *const AtomicU64) }
    }

    fn signal(&self, rank: usize, buf: usize) -> usize {
        HEADER_BYTES + (rank * self.layout.nbuf + buf) * SIGNAL_BYTES
    }

    /// Arrival flag (line A) of `rank` in buffer `buf`; descriptor words follow it.
    pub(crate) fn line_a(&self, rank: usize, buf: usize, word: usize) -> &AtomicU64 {
        self.word(self.signal(rank, buf) + word)
    }

    /// "My shard is reduced" flag (line B) of `rank` in buffer `buf`.
    pub(crate) fn flag_b(&self, rank: usize, buf: usize) -> &AtomicU64 {
        self.word(self.signal(rank, buf) + LINE)
    }

    /// Start of `rank`'s data slot in buffer `buf` (page-aligned, slot_bytes long).
    pub(crate) fn slot(&self, buf: usize, rank: usize) -> *mut u8 {
        assert!(buf < self.layout.nbuf && rank < self.layout.world);
        let off =
            self.layout.data_offset + (buf * self.layout.world + rank) * self.layout.slot_bytes;
        // SAFETY: in bounds by the layout check in `new`.
        unsafe { self.map.base().add(off) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_cut_the_same_data_area_into_more_buffers() {
        let one = Layout::new(3, ByteSize::mib(8), ByteSize::mib(8)).unwrap();
        assert_eq!((one.nbuf, one.slot_bytes), (2, 8 << 20));
        let cut = Layout::new(3, ByteSize::mib(8), ByteSize::kib(256)).unwrap();
        assert_eq!((cut.nbuf, cut.slot_bytes), (64, 256 << 10));
        let data = |l: &Layout| l.total - l.data_offset;
        assert_eq!(data(&one), data(&cut));
        // A piece above the maximum message is capped at it.
        let big = Layout::new(2, ByteSize::kib(64), ByteSize::mib(1)).unwrap();
        assert_eq!((big.nbuf, big.slot_bytes), (2, 64 << 10));
        // Sizes are rounded up to pages, and the report adds up to the total.
        let odd = Layout::new(2, ByteSize::b(5000), ByteSize::b(5000)).unwrap();
        assert_eq!(odd.slot_bytes, 8192);
        assert_eq!(odd.report().total().unwrap().bytes() as usize, odd.total);
        assert!(Layout::new(2, ByteSize::gib(1), ByteSize::kib(4)).is_err());
    }
}
