//! The CPU all-reduce between ranks (processes or threads)
//! of one machine through one POSIX shared-memory segment.
//!
//! docs/protocol.md states the rules this code follows.

mod allreduce;
mod collectives;
#[forbid(unsafe_code)]
mod job;
mod layout;
#[forbid(unsafe_code)]
mod notice;
mod reduce;
#[forbid(unsafe_code)]
mod rendezvous;
#[forbid(unsafe_code)]
mod room;
#[forbid(unsafe_code)]
mod wait;

pub use crate::meet::identity::sweep_stale_segments;
use crate::meet::JobKey;

/// Memory the kernel reports as available now (`MemAvailable`), if known:
/// for front ends that check a run fits before starting it.
pub fn available_memory() -> Option<ByteSize> {
    room::mem_available().map(ByteSize::b)
}

use crate::algo::Algo;
use crate::dtype::{DType, Element, ReduceOp};
use crate::error::{Error, Result};
use crate::memory::MemoryReport;
use crate::units::ByteSize;
use layout::{Layout, Segment, MAX_WORLD};
use std::path::PathBuf;
use std::time::Duration;

/// Default largest message that fits the segment in one piece.
pub const DEFAULT_MAX_MESSAGE: ByteSize = ByteSize::mib(8);
/// Default piece: the most one epoch carries (capped at `max_message`).
/// Smaller pieces let a rank reduce piece k while its peer copies in piece
/// k + 1 and keep pieces in cache, but on the shared 2-core machine of
/// bench/results/ runs with 256 KiB, 1 MiB and 8 MiB pieces differed less
/// than run-to-run noise, so the default keeps one piece per max_message.
pub const DEFAULT_PIECE: ByteSize = ByteSize::mib(8);
/// Default bound on every wait.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// How to create one rank's host communicator.
#[derive(Clone, Debug)]
pub struct HostConfig {
    /// This rank, in `0..world`.
    pub rank: usize,
    /// Number of ranks.
    pub world: usize,
    /// Where ranks meet: a file path, or a directory (the file
    /// `tpcomm.rendezvous` inside it). Every rank gives the same path; one
    /// communicator at a time per path.
    pub rendezvous: PathBuf,
    /// Largest message reduced in one piece; larger ones are split. Fixes the
    /// segment size (see [`HostCommunicator::memory_report`]).
    pub max_message: ByteSize,
    /// Bound on every wait (creation and each step of a call).
    pub timeout: Duration,
    /// Most bytes one epoch carries (at most `max_message`). The segment is
    /// the same size whatever the piece: its 2 x `max_message` per rank is cut
    /// into 2 x `max_message / piece` buffers.
    pub piece: ByteSize,
    /// The secret every rank of this job shares and no other job knows
    /// (docs/protocol.md, "Meeting"). `None`: the key in `TPCOMM_JOB_KEY`
    /// if set; else ranks that are threads of one process share a key made
    /// by their rank 0 in memory, and a rank in another process is refused
    /// (it could not tell this job's rank 0 from another job's).
    pub job_key: Option<JobKey>,
}

impl HostConfig {
    pub fn new(rank: usize, world: usize, rendezvous: impl Into<PathBuf>) -> Self {
        HostConfig {
            rank,
            world,
            rendezvous: rendezvous.into(),
            max_message: DEFAULT_MAX_MESSAGE,
            timeout: DEFAULT_TIMEOUT,
            piece: DEFAULT_PIECE,
            job_key: None,
        }
    }

    /// Checks this configuration as [`HostCommunicator::new`] does before
    /// it meets the other ranks (ranges of the sizes, the piece count the
    /// segment can hold), without creating or opening anything: a command can
    /// refuse a bad `max_message` or `piece` once, before it starts ranks that
    /// would each refuse it.
    pub fn check(&self) -> Result<()> {
        self.validate()?;
        Layout::new(self.world, self.max_message, self.piece).map(|_| ())
    }

    fn validate(&self) -> Result<()> {
        if self.world == 0 || self.world > MAX_WORLD {
            return Err(Error::invalid(
                "world size",
                format!("{} is not in 1..={MAX_WORLD}", self.world),
            ));
        }
        if self.rank >= self.world {
            return Err(Error::invalid(
                "rank",
                format!(
                    "{} is not in 0..{} (world size {})",
                    self.rank, self.world, self.world
                ),
            ));
        }
        if self.max_message < ByteSize::kib(4) {
            return Err(Error::invalid(
                "maximum message size",
                format!("{} is below the minimum of 4 KiB", self.max_message),
            ));
        }
        if self.max_message > ByteSize::gib(16) {
            return Err(Error::invalid(
                "maximum message size",
                format!(
                    "{} is above 16 GiB; larger messages are split into pieces anyway",
                    self.max_message
                ),
            ));
        }
        if self.piece < ByteSize::kib(4) {
            return Err(Error::invalid(
                "piece size",
                format!("{} is below the minimum of 4 KiB", self.piece),
            ));
        }
        if self.timeout.is_zero() {
            return Err(Error::invalid("timeout", "must be above zero"));
        }
        if self.rendezvous.as_os_str().is_empty() {
            return Err(Error::invalid(
                "rendezvous path",
                "is empty; give a file or directory path every rank can see",
            ));
        }
        Ok(())
    }
}

/// One rank's handle on a host communicator.
pub struct HostCommunicator {
    cfg: HostConfig,
    seg: Segment,
    /// Next epoch to use; every rank runs the same sequence of epochs.
    epoch: u64,
    /// Calls made so far (published in descriptors to catch skipped calls).
    seq: u64,
    /// Set after the first failure: the communicator cannot be used again.
    poisoned: Option<String>,
    /// Peer pids, for noticing a dead process before the timeout (0 = same
    /// process as us, so not checked).
    peer_pids: Vec<u32>,
}

impl HostCommunicator {
    /// Creates this rank's side. Every rank of the world must call this with
    /// the same world, rendezvous path and maximum message size; it returns
    /// once all have attached (or fails after `timeout`).
    pub fn new(cfg: HostConfig) -> Result<Self> {
        cfg.validate()?;
        let layout = Layout::new(cfg.world, cfg.max_message, cfg.piece)?;
        let seg = if cfg.rank == 0 {
            rendezvous::create(&cfg, layout)?
        } else {
            rendezvous::attach(&cfg, layout)?
        };
        let me = std::process::id();
        let peer_pids = (0..cfg.world)
            .map(|r| {
                let w = seg
                    .word(layout::H_PIDS + 8 * r)
                    .load(std::sync::atomic::Ordering::Acquire);
                let pid = (w & 0xffff_ffff) as u32;
                if pid == me {
                    0
                } else {
                    pid
                }
            })
            .collect();
        Ok(HostCommunicator {
            cfg,
            seg,
            epoch: 1,
            seq: 0,
            poisoned: None,
            peer_pids,
        })
    }

    pub fn rank(&self) -> usize {
        self.cfg.rank
    }

    pub fn world(&self) -> usize {
        self.cfg.world
    }

    pub fn config(&self) -> &HostConfig {
        &self.cfg
    }

    /// The name the segment was created under in /dev/shm. It is removed as
    /// soon as every rank has attached, so it only helps to tell runs apart
    /// in logs.
    pub fn segment_name(&self) -> &str {
        &self.seg.name
    }

    /// Every byte of the shared segment, per part.
    pub fn memory_report(&self) -> MemoryReport {
        self.seg.layout.report()
    }

    /// The algorithm `Algo::Auto` picks for a message of `bytes`.
    ///
    /// With 2 ranks on the 2-core machine of bench/results/, one-shot was
    /// faster below 1 KiB (0.20-0.28 us against 0.23-0.34 us: two-shot's
    /// second flag costs more than the reduction it splits), the two were
    /// even at 1 KiB, and two-shot was faster at every size from 2 KiB to
    /// 64 MiB. For more ranks the 64 KiB threshold is a guess not yet
    /// measured on a machine with enough cores.
    pub fn auto_algo(world: usize, bytes: ByteSize) -> Algo {
        let from = if world <= 2 {
            ByteSize::kib(2)
        } else {
            ByteSize::kib(64)
        };
        if world > 1 && bytes >= from {
            Algo::TwoShot
        } else {
            Algo::OneShot
        }
    }

    /// Out-of-place all-reduce: `output` receives the reduction of every
    /// rank's `input`, identical bit for bit on every rank.
    pub fn all_reduce<T: Element>(
        &mut self,
        input: &[T],
        output: &mut [T],
        op: ReduceOp,
        algo: Algo,
    ) -> Result<()> {
        if input.len() != output.len() {
            return Err(Error::invalid(
                "all-reduce buffers",
                format!(
                    "input has {} elements but output has {}",
                    input.len(),
                    output.len()
                ),
            ));
        }
        // SAFETY: `input` and `output` are distinct live slices of the same
        // length (Rust forbids them to overlap: one is borrowed mutably).
        unsafe { self.run(input.as_ptr(), output.as_mut_ptr(), input.len(), op, algo) }
    }

    /// In-place all-reduce of `buf`.
    pub fn all_reduce_in_place<T: Element>(
        &mut self,
        buf: &mut [T],
        op: ReduceOp,
        algo: Algo,
    ) -> Result<()> {
        let p = buf.as_mut_ptr();
        // SAFETY: src == dst exactly; `run` reads each chunk of src into the
        // segment before it writes that chunk of dst.
        unsafe { self.run(p as *const T, p, buf.len(), op, algo) }
    }

    fn resolve(&self, dtype: DType, count: usize, algo: Algo) -> Result<Algo> {
        match algo {
            Algo::Auto => Ok(Self::auto_algo(
                self.cfg.world,
                ByteSize::from_usize(count.saturating_mul(dtype.size())),
            )),
            Algo::OneShot | Algo::TwoShot => Ok(algo),
            #[allow(unreachable_patterns)]
            other => Err(Error::Unsupported(format!(
                "algorithm {other} on the host transport; use auto, one-shot or two-shot"
            ))),
        }
    }
}

#[cfg(test)]
mod config_tests {
    use super::*;

    #[test]
    fn check_refuses_what_new_refuses_and_creates_nothing() {
        let dir = std::env::temp_dir().join("tpcomm-check-never-created");
        let cfg = |max: ByteSize, piece: ByteSize| {
            let mut c = HostConfig::new(0, 2, &dir);
            c.max_message = max;
            c.piece = piece;
            c
        };
        assert!(cfg(DEFAULT_MAX_MESSAGE, DEFAULT_PIECE).check().is_ok());
        for (max, piece) in [
            (ByteSize::kib(1), DEFAULT_PIECE),
            (ByteSize::gib(17), DEFAULT_PIECE),
            (DEFAULT_MAX_MESSAGE, ByteSize::kib(1)),
            // 16 GiB in 4 KiB pieces is more pieces than the segment holds.
            (ByteSize::gib(16), ByteSize::kib(4)),
        ] {
            let e = cfg(max, piece).check().unwrap_err();
            assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
        }
        assert!(!dir.exists());
    }
}
