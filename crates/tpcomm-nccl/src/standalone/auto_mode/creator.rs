//! What an auto-mode creation decides (who creates the communicator) and
//! the census steps' names: the leaf that auto_mode.rs and census.rs share.

use crate::standalone::{self, Secret};
use crate::types::*;
use std::path::PathBuf;
use std::time::Duration;
use tpcomm::cuda::share::DeviceIdentity;

/// The census records' step.
pub(super) const CENSUS: &str = "auto-census";
/// The decision's step (its record is rank 0's slot, whoever writes it).
pub(super) const DECISION: &str = "auto-decision";

/// Who creates a communicator: the real NCCL or standalone mode (or
/// neither, the creation having failed). Decided once, at creation.
#[derive(Debug)]
pub enum Creator {
    /// To the real NCCL with `id` (a marked id stripped); `after`, once
    /// NCCL has made the communicator, removes this rank's census records.
    Nccl { id: [u8; 128], after: Option<Tidy> },
    /// Served by tpcomm: `created::create` with this secret.
    Standalone(Secret),
    /// Failed; ncclGetLastError's text is recorded.
    Failed(NcclResult),
    /// Not decided yet: a creation inside ncclGroupStart/End that posted
    /// its census record and decides at ncclGroupEnd (`auto_mode::decide_group`),
    /// once every rank its thread creates in the group has posted too.
    Undecided(Undecided),
}

/// A creation's census, posted and waiting for ncclGroupEnd to decide.
#[derive(Debug)]
pub struct Undecided {
    pub(super) tag: String,
    pub(super) dir: PathBuf,
    pub(super) secret: Secret,
    pub(super) rank: usize,
    pub(super) world: usize,
    /// The id as NCCL made it.
    pub(super) real: [u8; 128],
    /// This rank's GPU (rank 0 counts it with the others).
    pub(super) me: DeviceIdentity,
    /// Rank 0's census wait.
    pub(super) wait: Duration,
    /// The other ranks' wait for the decision.
    pub(super) timeout: Duration,
}

impl Undecided {
    /// The rendezvous secret of the id (a standalone communicator's, should
    /// the census decide so).
    pub fn secret(&self) -> Secret {
        self.secret
    }
    pub fn rank(&self) -> usize {
        self.rank
    }
    pub fn world(&self) -> usize {
        self.world
    }
}

/// This rank's records of one census, removed once NCCL has made the
/// communicator: its success means every rank has joined NCCL, which each
/// does only after reading the decision, so no rank still needs them. NCCL
/// has made it when a blocking creation returns success outside a group,
/// when ncclGroupEnd succeeds for a creation inside one, and when a
/// non-blocking creation is ready (api/init.rs calls `done` then).
#[derive(Debug)]
pub struct Tidy {
    pub(super) dir: PathBuf,
    pub(super) rank: usize,
}

impl Tidy {
    /// Once NCCL has made the communicator (`r` SUCCESS): removes this
    /// rank's records (rank 0's include the decision), and the directory
    /// once empty (the last rank's removal succeeds). Any other `r` (a
    /// failed creation, whose peers may still be reading) leaves them.
    pub fn done(self, r: NcclResult) {
        if r == SUCCESS {
            standalone::tidy(&self.dir, self.rank, "");
            let _ = std::fs::remove_dir(&self.dir);
        }
    }
}
