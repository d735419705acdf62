//! Which GPU transport a communicator uses, and one type over both.

use super::comm::HostGpuCommunicator;
use crate::algo::Algo;
use crate::cuda::{
    raw, CUdeviceptr, CUstream, CudaCommunicator, CudaConfig, Launch, Rendezvous, StreamAllReduce,
};
use crate::dtype::{DType, ReduceOp};
use crate::error::{Error, Result};
use crate::memory::MemoryReport;

/// Where GPU all-reduce data travels.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Transport {
    /// P2P (`cuda`) when every GPU of the group can access every other, else `host`.
    #[default]
    Auto,
    /// Peer-to-peer: GPUs write into each other's memory (NVLink or PCIe P2P).
    Cuda,
    /// Through pinned host memory that every GPU maps; needs no P2P.
    Host,
}

impl Transport {
    pub fn name(self) -> &'static str {
        match self {
            Transport::Auto => "auto",
            Transport::Cuda => "cuda",
            Transport::Host => "host",
        }
    }
}

impl std::str::FromStr for Transport {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "auto" => Ok(Transport::Auto),
            "cuda" | "p2p" => Ok(Transport::Cuda),
            "host" => Ok(Transport::Host),
            other => Err(Error::invalid(
                "transport",
                format!("{other:?} (expected auto, cuda or host)"),
            )),
        }
    }
}

/// `Auto` resolved from every rank's answer to "can my GPU access every
/// peer's?": one no anywhere sends the whole group through host memory.
pub fn resolve_transport(requested: Transport, all_ranks_have_p2p: &[bool]) -> Transport {
    match requested {
        Transport::Auto if all_ranks_have_p2p.iter().all(|&ok| ok) => Transport::Cuda,
        Transport::Auto => Transport::Host,
        t => t,
    }
}

/// A GPU communicator over the transport `CudaConfig::transport` asks for.
#[derive(Debug)]
pub enum GpuComm {
    Cuda(CudaCommunicator),
    Host(HostGpuCommunicator),
}

impl GpuComm {
    /// Creates the communicator on every rank (all ranks call this with the
    /// same configuration and rendezvous). With `Transport::Auto` the ranks
    /// first agree on P2P: each checks cuDeviceCanAccessPeer towards every
    /// peer's GPU and all answers are shared, so every rank picks the same.
    pub fn new(cfg: &CudaConfig, rendezvous: &Rendezvous) -> Result<Self> {
        let transport = match cfg.transport {
            Transport::Auto => {
                crate::cuda::open_context(cfg.device)?;
                let dev = cfg.device as u32;
                let devs = rendezvous.exchange(
                    "transport-devices",
                    cfg.rank,
                    cfg.world,
                    &dev.to_le_bytes(),
                    cfg.timeout,
                )?;
                let mut ok = true;
                for blob in &devs {
                    let peer = u32::from_le_bytes(
                        blob.get(..4)
                            .and_then(|b| b.try_into().ok())
                            .ok_or_else(|| {
                                Error::invalid(
                                    "rendezvous",
                                    "a rank posted a malformed device number",
                                )
                            })?,
                    );
                    if peer != dev && !raw::can_access_peer(dev as i32, peer as i32)? {
                        ok = false;
                    }
                }
                let all = rendezvous.exchange(
                    "transport-p2p",
                    cfg.rank,
                    cfg.world,
                    &[ok as u8],
                    cfg.timeout,
                )?;
                let answers: Vec<bool> = all.iter().map(|b| b.first() == Some(&1)).collect();
                resolve_transport(Transport::Auto, &answers)
            }
            t => t,
        };
        match transport {
            Transport::Host => Ok(GpuComm::Host(HostGpuCommunicator::new(cfg, rendezvous)?)),
            _ => Ok(GpuComm::Cuda(CudaCommunicator::new(cfg, rendezvous)?)),
        }
    }

    /// The transport in use (never `Auto`).
    pub fn transport(&self) -> Transport {
        match self {
            GpuComm::Cuda(_) => Transport::Cuda,
            GpuComm::Host(_) => Transport::Host,
        }
    }
}

/// On the host transport `OneShot` asks for the delta kernel and `TwoShot`
/// for the chunked kernel; the algorithm
/// or kernel that ran is not returned.
impl StreamAllReduce for GpuComm {
    type Ran = ();

    #[allow(clippy::too_many_arguments)]
    unsafe fn all_reduce_launched(
        &self,
        input: CUdeviceptr,
        output: CUdeviceptr,
        count: usize,
        dtype: DType,
        op: ReduceOp,
        algo: Algo,
        stream: CUstream,
        how: Launch,
    ) -> Result<()> {
        // SAFETY: the caller's contract is passed on unchanged.
        unsafe {
            match self {
                GpuComm::Cuda(c) => c
                    .all_reduce_launched(input, output, count, dtype, op, algo, stream, how)
                    .map(|_| ()),
                GpuComm::Host(c) => c
                    .all_reduce_launched(input, output, count, dtype, op, algo, stream, how)
                    .map(|_| ()),
            }
        }
    }
}

impl GpuComm {
    /// The name of the kernel a message of `bytes` runs with under `algo`.
    pub fn algo_name(&self, algo: Algo, bytes: usize) -> &'static str {
        match self {
            GpuComm::Cuda(c) => crate::cuda::resolve_by_size(algo, bytes, c.world()).name(),
            GpuComm::Host(c) => c.resolve(algo, bytes).name(),
        }
    }

    pub fn check(&self) -> Result<()> {
        match self {
            GpuComm::Cuda(c) => c.check(),
            GpuComm::Host(c) => c.check(),
        }
    }
    pub fn memory_report(&self) -> &MemoryReport {
        match self {
            GpuComm::Cuda(c) => c.memory_report(),
            GpuComm::Host(c) => c.memory_report(),
        }
    }
    pub fn compiled_with(&self) -> ((i32, i32), (i32, i32)) {
        match self {
            GpuComm::Cuda(c) => c.compiled_with(),
            GpuComm::Host(c) => c.compiled_with(),
        }
    }
    /// How the group's ranks share this rank's GPU.
    pub fn sharing(&self) -> crate::cuda::share::Sharing {
        match self {
            GpuComm::Cuda(c) => c.sharing(),
            GpuComm::Host(c) => c.sharing(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_goes_through_host_memory_when_any_rank_lacks_p2p() {
        assert_eq!(
            resolve_transport(Transport::Auto, &[true, true]),
            Transport::Cuda
        );
        assert_eq!(
            resolve_transport(Transport::Auto, &[true, false]),
            Transport::Host
        );
        assert_eq!(
            resolve_transport(Transport::Auto, &[false; 8]),
            Transport::Host
        );
        // Forced transports are kept whatever the hardware says.
        assert_eq!(
            resolve_transport(Transport::Host, &[true, true]),
            Transport::Host
        );
        assert_eq!(
            resolve_transport(Transport::Cuda, &[false, false]),
            Transport::Cuda
        );
    }

    #[test]
    fn transport_names_parse_back() {
        for t in [Transport::Auto, Transport::Cuda, Transport::Host] {
            assert_eq!(t.name().parse::<Transport>().unwrap(), t);
        }
        assert!("nvlink".parse::<Transport>().is_err());
    }
}
