//! The host path's one-pass kernel choice (TPCOMM_HOST_SMALL): read once at
//! creation, agreed on by every rank (group.rs), used by the communicator.

use crate::error::{Error, Result};

/// Which one-pass kernel `OneShot` (and `Auto` for small messages) runs:
/// delta words unless TPCOMM_HOST_SMALL says `push` or `ll` (kept for
/// measuring one against the other on a machine). Delta sends the message's
/// bytes once each way; push also writes the sentinel back over them (twice
/// the device-to-host bytes), LL words carry twice the bytes both ways.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SmallKernel {
    Push,
    #[default]
    Delta,
    Ll,
}

impl SmallKernel {
    pub const ALL: [Self; 3] = [Self::Delta, Self::Push, Self::Ll];

    /// The name TPCOMM_HOST_SMALL gives it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Push => "push",
            Self::Delta => "delta",
            Self::Ll => "ll",
        }
    }

    /// Reads TPCOMM_HOST_SMALL (`delta`, `push` or `ll`; unset or empty: delta).
    pub fn from_env() -> Result<Self> {
        match std::env::var("TPCOMM_HOST_SMALL") {
            Err(_) => Ok(Self::Delta),
            Ok(v) => match v.trim() {
                "" => Ok(Self::Delta),
                name => Self::ALL
                    .into_iter()
                    .find(|k| k.name() == name)
                    .ok_or_else(|| {
                        Error::invalid(
                            "TPCOMM_HOST_SMALL",
                            format!("{name:?} (expected delta, push or ll, or unset it)"),
                        )
                    }),
            },
        }
    }
}
