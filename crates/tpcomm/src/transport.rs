//! Where the bytes of a GPU collective travel: the one `Transport` of the
//! crate, named by the communicator's configuration (`CudaConfig::transport`,
//! where `Auto` lets the group's P2P verdict choose), by routing
//! (`select::Candidate`, `select::Group`) and by the reports. `select::Transport`
//! and `cuda::Transport` are this type.

use crate::error::{Error, Result};

/// Largest world size the GPU transports take (their kernels' argument
/// block has 8 slots).
pub const MAX_WORLD: usize = 8;

/// Where GPU all-reduce data travels.
///
/// The order (`Cuda`, `Host`, `Nccl`, `Auto`) is the order candidates sort in
/// tuning tables, and so in the files `tpcomm tune` writes.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum Transport {
    /// Peer-to-peer: GPUs write into each other's memory (NVLink or PCIe P2P).
    Cuda,
    /// Through pinned host memory that every GPU maps; needs no P2P.
    Host,
    /// NCCL, loaded at run time: a route (`select`), never a communicator's
    /// configured transport.
    Nccl,
    /// A configuration only: P2P (`Cuda`) when every GPU of the group can
    /// access every other and the P2P check passes, else `Host`.
    #[default]
    Auto,
}

impl Transport {
    pub const fn name(self) -> &'static str {
        match self {
            Transport::Auto => "auto",
            Transport::Cuda => "cuda",
            Transport::Host => "host",
            Transport::Nccl => "nccl",
        }
    }

    /// The kernels' transport routing decides for: `Auto`, unresolved, as
    /// `Cuda` (what it resolves to where P2P works); the others unchanged.
    pub fn for_routes(self) -> Transport {
        match self {
            Transport::Auto => Transport::Cuda,
            t => t,
        }
    }
}

/// Parses what a communicator can be configured with: `auto`, `cuda` (or
/// `p2p`), `host`. NCCL is not a configured transport (it is a route, taken
/// with `nccl_fallback`), so `nccl` is refused here with a message saying so.
impl std::str::FromStr for Transport {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "auto" => Ok(Transport::Auto),
            "cuda" | "p2p" => Ok(Transport::Cuda),
            "host" => Ok(Transport::Host),
            "nccl" => Err(Error::invalid(
                "transport",
                "nccl is not a transport of tpcomm's kernels (expected auto, cuda or host); NCCL runs the calls its routes give it when the communicator has NCCL beside it (nccl_fallback)",
            )),
            other => Err(Error::invalid(
                "transport",
                format!("{other:?} (expected auto, cuda or host)"),
            )),
        }
    }
}

display_by_name!(Transport);

#[cfg(test)]
mod tests;
