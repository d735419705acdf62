//! Which GPU transport a communicator uses, and one type over both.

use crate::algo::{Algo, Collective};
use crate::cuda::call::{Call, GpuTransport};
use crate::cuda::config::CudaConfig;
use crate::cuda::rendezvous::Rendezvous;
use crate::cuda::transport::p2p::P2pTransport;
use crate::cuda::transport::pinned::PinnedTransport;
use crate::dtype::{DType, ReduceOp};
use crate::error::{Error, Result};
use crate::memory::MemoryReport;
use crate::sys::cuda as raw;

/// Where GPU all-reduce data travels: the crate's one transport type
/// (`crate::transport`).
pub use crate::transport::Transport;

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
    P2p(P2pTransport),
    Pinned(PinnedTransport),
}

impl GpuComm {
    /// Creates the communicator on every rank (all ranks call this with the
    /// same configuration and rendezvous). With `Transport::Auto` the ranks
    /// first agree on P2P: each checks cuDeviceCanAccessPeer towards every
    /// peer's GPU and all answers are shared; when all say yes, the P2P
    /// check (`transport::p2p::check::run`: the kernels' own stores, bytes compared)
    /// must pass too, else the group takes the host transport. Every rank
    /// picks the same.
    pub fn new(cfg: &CudaConfig, rendezvous: &Rendezvous) -> Result<Self> {
        // What the P2P check found when it did not simply pass: the memory
        // report's heading says it.
        let mut check_note = None;
        let transport = match cfg.transport {
            Transport::Auto => {
                crate::cuda::transport::p2p::open_context(cfg.device)?;
                let dev = cfg.device as u32;
                // Ordinal (for cuDeviceCanAccessPeer in this process) and
                // UUID (the same GPU in every process: the P2P cache's key).
                let mut mine = dev.to_le_bytes().to_vec();
                mine.extend_from_slice(&raw::device_uuid(dev as i32)?);
                let devs = rendezvous.exchange(
                    "transport-devices",
                    cfg.rank,
                    cfg.world,
                    &mine,
                    cfg.timeout,
                )?;
                let mut ok = true;
                let mut uuids = Vec::with_capacity(devs.len());
                for blob in &devs {
                    let (peer, uuid) = match (
                        blob.get(..4).and_then(|b| <[u8; 4]>::try_from(b).ok()),
                        blob.get(4..20).and_then(|b| <[u8; 16]>::try_from(b).ok()),
                    ) {
                        (Some(p), Some(u)) if blob.len() == 20 => (u32::from_le_bytes(p), u),
                        _ => {
                            return Err(Error::invalid(
                                "rendezvous",
                                "a rank posted a malformed device record: do all ranks run the same tpcomm?",
                            ))
                        }
                    };
                    uuids.push(uuid);
                    if peer != dev && !raw::can_access_peer(dev as i32, peer as i32)? {
                        ok = false;
                    }
                }
                // A pass of the P2P check remembered for these GPUs and this
                // driver (transport/p2p/cache.rs) counts only when every rank has it.
                let key =
                    crate::cuda::transport::p2p::cache::Key::here(&uuids, raw::driver_version()?);
                let passed_before = ok && key.as_ref().is_some_and(|k| k.remembered());
                let all = rendezvous.exchange(
                    "transport-p2p",
                    cfg.rank,
                    cfg.world,
                    &[ok as u8, passed_before as u8],
                    cfg.timeout,
                )?;
                let answers: Vec<bool> = all.iter().map(|b| b.first() == Some(&1)).collect();
                let all_passed_before = all.iter().all(|b| b.get(1) == Some(&1));
                match resolve_transport(Transport::Auto, &answers) {
                    // Every rank remembers a pass for these GPUs and driver.
                    Transport::Cuda if all_passed_before => Transport::Cuda,
                    // The driver allows P2P everywhere: check that it moves
                    // the right bytes with the kernels' own stores
                    // (transport/p2p/check.rs); every rank gets the same verdict.
                    Transport::Cuda => {
                        let v = crate::cuda::transport::p2p::check::run(
                            cfg.rank,
                            cfg.world,
                            cfg.device,
                            rendezvous,
                            cfg.timeout,
                        )?;
                        if let (true, true, Some(k)) = (v.p2p_ok, v.ran, &key) {
                            k.remember();
                        }
                        if !(v.p2p_ok && v.ran) {
                            if cfg.rank == 0 {
                                eprintln!("tpcomm: {}", v.why);
                            }
                            check_note = Some(v.why);
                        }
                        if v.p2p_ok {
                            Transport::Cuda
                        } else {
                            Transport::Host
                        }
                    }
                    t => t,
                }
            }
            t => t,
        };
        let mut comm = match transport {
            Transport::Host => GpuComm::Pinned(PinnedTransport::new(cfg, rendezvous)?),
            Transport::Nccl => return Err(Error::invalid(
                "transport",
                "nccl is not a transport of tpcomm's kernels (use auto, cuda or host); create a cuda::Communicator with nccl_fallback to run calls on NCCL",
            )),
            _ => GpuComm::P2p(P2pTransport::new(cfg, rendezvous)?),
        };
        if let Some(why) = check_note {
            let report = match &mut comm {
                GpuComm::P2p(c) => c.report_mut(),
                GpuComm::Pinned(c) => c.report_mut(),
            };
            report.title = format!("{} ({why})", report.title);
        }
        Ok(comm)
    }

    /// The transport in use (never `Auto`).
    pub fn transport(&self) -> Transport {
        match self {
            GpuComm::P2p(_) => Transport::Cuda,
            GpuComm::Pinned(_) => Transport::Host,
        }
    }
}

/// On the pinned transport `OneShot` asks for the delta kernel and
/// `TwoShot` for the chunked kernel; the algorithm or kernel that ran is not
/// returned.
impl GpuTransport for GpuComm {
    type Ran = ();

    unsafe fn all_reduce(&self, call: &Call) -> Result<()> {
        // SAFETY: the caller's contract is passed on unchanged.
        unsafe {
            match self {
                GpuComm::P2p(c) => c.all_reduce(call).map(|_| ()),
                GpuComm::Pinned(c) => c.all_reduce(call).map(|_| ()),
            }
        }
    }

    unsafe fn run_collective(&self, what: Collective, call: &Call) -> Result<()> {
        // SAFETY: as for all_reduce.
        unsafe {
            match self {
                GpuComm::P2p(c) => c.collective(what, call),
                GpuComm::Pinned(c) => c.collective(what, call),
            }
        }
    }
}

impl GpuComm {
    /// The name of the kernel a bf16 message of `bytes` runs with under `algo`.
    pub fn algo_name(&self, algo: Algo, bytes: usize) -> &'static str {
        match self {
            GpuComm::P2p(c) => c
                .routes()
                .lookup(
                    bytes as u64,
                    DType::Bf16,
                    ReduceOp::Sum,
                    algo,
                    c.mode(),
                    crate::wire::Wire::Exact,
                )
                .algo()
                .unwrap_or(Algo::OneShot)
                .name(),
            GpuComm::Pinned(c) => c
                .resolve(c.auto_algo(algo, DType::Bf16, bytes), bytes)
                .name(),
        }
    }

    pub fn check(&self) -> Result<()> {
        match self {
            GpuComm::P2p(c) => c.check(),
            GpuComm::Pinned(c) => c.check(),
        }
    }
    /// What the routes were decided with.
    pub fn selector(&self) -> &std::sync::Arc<crate::select::Selector> {
        match self {
            GpuComm::P2p(c) => c.selector_arc(),
            GpuComm::Pinned(c) => c.selector(),
        }
    }
    /// What `Algo::Auto` runs at each size (the kernels alone, no NCCL).
    pub fn routes(&self) -> &crate::select::RouteTable {
        match self {
            GpuComm::P2p(c) => c.routes(),
            GpuComm::Pinned(c) => c.routes(),
        }
    }
    pub fn rank(&self) -> usize {
        match self {
            GpuComm::P2p(c) => c.rank(),
            GpuComm::Pinned(c) => c.rank(),
        }
    }
    pub fn world(&self) -> usize {
        match self {
            GpuComm::P2p(c) => c.world(),
            GpuComm::Pinned(c) => c.world(),
        }
    }
    /// The largest message its buffers take.
    pub fn max_bytes(&self) -> crate::units::ByteSize {
        match self {
            GpuComm::P2p(c) => c.max_bytes(),
            GpuComm::Pinned(c) => c.max_bytes(),
        }
    }
    pub fn context(&self) -> &std::sync::Arc<cudarc::driver::CudaContext> {
        match self {
            GpuComm::P2p(c) => c.context(),
            GpuComm::Pinned(c) => c.context(),
        }
    }
    pub fn memory_report(&self) -> &MemoryReport {
        match self {
            GpuComm::P2p(c) => c.memory_report(),
            GpuComm::Pinned(c) => c.memory_report(),
        }
    }
    pub fn compiled_with(&self) -> ((i32, i32), (i32, i32)) {
        match self {
            GpuComm::P2p(c) => c.compiled_with(),
            GpuComm::Pinned(c) => c.compiled_with(),
        }
    }
    /// How the group's ranks share this rank's GPU.
    pub fn sharing(&self) -> crate::cuda::share::Sharing {
        match self {
            GpuComm::P2p(c) => c.sharing(),
            GpuComm::Pinned(c) => c.sharing(),
        }
    }
}

#[cfg(test)]
mod tests;
