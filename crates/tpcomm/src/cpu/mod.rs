//! The CPU all-reduce between ranks (processes or threads)
//! of one machine through one POSIX shared-memory segment.
//!
//! docs/protocol.md states the rules this code follows.

mod allreduce;
mod collectives;
#[forbid(unsafe_code)]
mod config;
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
pub use config::{HostConfig, DEFAULT_MAX_MESSAGE, DEFAULT_PIECE, DEFAULT_TIMEOUT};

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
use layout::{Layout, Segment};

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
