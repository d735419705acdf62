//! The one error type of the library, and the error of a bad environment
//! variable it wraps ([`EnvError`], defined here so that `env` and the types
//! it parses into need nothing of each other). Every message says what went
//! wrong and what the user can do about it.

use crate::units::{ByteSize, UnitsError};
use std::time::Duration;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A value given by the user (option, size, configuration) is not valid.
    #[error("invalid {what}: {detail}")]
    InvalidArgument { what: String, detail: String },

    /// An environment variable holds a value tpcomm does not accept.
    #[error(transparent)]
    Env(#[from] EnvError),

    /// A byte size could not be parsed, or arithmetic on byte sizes overflowed.
    #[error(transparent)]
    Units(#[from] UnitsError),

    /// A peer rank did not arrive within the timeout (or its process was
    /// seen to exit while this rank waited).
    #[error("rank {peer} did not arrive within the timeout: rank {rank} waited for it ({what}) at epoch {epoch}; is rank {peer} alive? Raise the timeout if ranks are merely slow")]
    PeerTimeout {
        rank: usize,
        peer: usize,
        epoch: u64,
        what: String,
        /// How long this rank waited: the timeout, or less when the peer's
        /// process was seen to exit first. Not in the message, which would
        /// otherwise read as a timeout of that length.
        waited: Duration,
    },

    /// Ranks called a collective with different arguments.
    #[error("rank {rank} called {mine}, but rank {peer} called {theirs} at epoch {epoch}: every rank must call the same collective with the same count, type and op; create a new communicator on every rank")]
    Mismatch {
        rank: usize,
        peer: usize,
        epoch: u64,
        mine: String,
        theirs: String,
    },

    /// A peer reported a failure, so this communicator can no longer be used.
    #[error("communicator aborted: {0}; create a new communicator on every rank")]
    Aborted(String),

    /// Not enough memory for what was asked.
    #[error(
        "{what} needs {needed} but only {available} is available; lower the maximum message size"
    )]
    OutOfMemory {
        what: String,
        needed: ByteSize,
        available: ByteSize,
    },

    /// An operating system call failed.
    #[error("{call} failed: {source}{hint}")]
    Os {
        call: String,
        #[source]
        source: std::io::Error,
        hint: String,
    },

    /// A shared library (CUDA driver, NVRTC, NCCL, NVML) could not be loaded or used.
    #[error("{library}: {detail}")]
    Library { library: String, detail: String },

    /// A CUDA call failed.
    #[error("CUDA error in {call}: {detail}")]
    Cuda { call: String, detail: String },

    /// A kernel or device-side wait reported an error.
    #[error("device error on rank {rank}: {detail}")]
    Device { rank: usize, detail: String },

    /// Something this build or machine does not support.
    #[error("not supported: {0}")]
    Unsupported(String),
}

/// A bad value of an environment variable (read through `crate::env`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EnvError {
    #[error("environment variable {name}={value:?} is not valid: it takes {accepted}; fix the value or unset {name}")]
    Invalid {
        name: &'static str,
        value: String,
        accepted: String,
    },
    #[error("environment variable {name} is not valid UTF-8: it takes {accepted}; fix the value or unset {name}")]
    NotUnicode {
        name: &'static str,
        accepted: String,
    },
}

impl EnvError {
    /// The variable the error is about.
    pub fn name(&self) -> &'static str {
        match self {
            EnvError::Invalid { name, .. } | EnvError::NotUnicode { name, .. } => name,
        }
    }
}

impl Error {
    /// The error for a file or segment that another user owns.
    pub(crate) fn foreign_owner(what: &str, owner: u32, me: u32) -> Self {
        Error::invalid(
            "rendezvous",
            format!(
                "{what} belongs to uid {owner}, not to you (uid {me}); someone else created it, so tpcomm will not use it: give a rendezvous path in a directory only you can write (not a shared /tmp name)"
            ),
        )
    }

    pub fn invalid(what: impl Into<String>, detail: impl Into<String>) -> Self {
        Error::InvalidArgument {
            what: what.into(),
            detail: detail.into(),
        }
    }

    /// Wraps the last OS error of a failed libc call.
    pub fn last_os(call: impl Into<String>, hint: impl Into<String>) -> Self {
        Error::Os {
            call: call.into(),
            source: std::io::Error::last_os_error(),
            hint: hint.into(),
        }
    }

    pub fn io(call: impl Into<String>, source: std::io::Error) -> Self {
        Error::Os {
            call: call.into(),
            source,
            hint: String::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A dead peer found after 626 us once read "timed out after 626us".
    #[test]
    fn a_peer_timeout_names_the_peer_and_not_the_time_waited() {
        let e = Error::PeerTimeout {
            rank: 0,
            peer: 1,
            epoch: 7,
            what: "one-shot data; its process (pid 42) has exited".into(),
            waited: Duration::from_micros(626),
        };
        let m = e.to_string();
        assert!(
            m.starts_with("rank 1 did not arrive within the timeout: rank 0 waited for it"),
            "{m}"
        );
        assert!(m.contains("epoch 7") && m.contains("pid 42"), "{m}");
        assert!(!m.contains("626") && !m.contains("timed out"), "{m}");
    }
}
