//! How to create one rank's host communicator: its configuration, the
//! defaults, and the checks made before the ranks meet.

use super::layout::{Layout, MAX_WORLD};
use crate::error::{Error, Result};
use crate::meet::JobKey;
use crate::units::ByteSize;
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

    pub(super) fn validate(&self) -> Result<()> {
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

#[cfg(test)]
mod tests {
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
