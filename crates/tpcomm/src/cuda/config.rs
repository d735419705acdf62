//! `CudaConfig`: what a GPU communicator is created with (every transport:
//! P2P, the host path, the quantized buffers), and the checks every
//! transport makes of it before touching a GPU.

use crate::error::{Error, Result};
use crate::transport::MAX_WORLD;
use crate::units::ByteSize;
use std::sync::Arc;
use std::time::Duration;

/// What a communicator is created with.
#[derive(Clone, Debug)]
pub struct CudaConfig {
    pub rank: usize,
    pub world: usize,
    /// CUDA device ordinal this rank drives.
    pub device: usize,
    /// Largest message an all-reduce may carry; buffers are sized for it.
    pub max_bytes: ByteSize,
    /// Bound on every wait, in the rendezvous and inside the kernels.
    pub timeout: Duration,
    /// What the routes are decided with (`select::decide`). `None`: found at
    /// creation, once per process, by `select::for_this_machine`: the table
    /// named by TPCOMM_TUNING_TABLE, else the one at the default location for
    /// this machine's fingerprint, else the built-in defaults of its class.
    pub selector: Option<Arc<crate::select::Selector>>,
    /// Whether calls are launched eagerly or replayed in a CUDA graph, for
    /// routing (the best route can differ; a communicator cannot tell without
    /// a driver call per all-reduce). Default: graph, where servers spend
    /// their decode steps.
    pub mode: crate::select::Mode,
    /// Time the CUDA algorithms at creation (under a second) and decide with
    /// that when `selector` is `None`. Default: off, or on with
    /// TPCOMM_SELF_TUNE=1.
    pub self_tune: bool,
    /// Which transport `GpuComm::new` builds (`P2pTransport::new` is
    /// always the P2P one).
    pub transport: crate::transport::Transport,
    /// Set up NCCL beside tpcomm's buffers so that `cuda::Communicator` runs
    /// the calls the kernels cannot take (messages above `max_bytes`, max and
    /// min) on NCCL instead of failing. Default: off, or on with
    /// TPCOMM_NCCL_FALLBACK=1.
    pub nccl_fallback: bool,
    /// The wire of `cuda::Communicator`'s all-reduces of at least
    /// `wire_min_bytes` (docs/quantized.md). `None`: TPCOMM_WIRE, exact when
    /// unset. A quantized wire allocates its buffers at creation.
    pub wire: Option<crate::quant::Wire>,
    /// `None`: TPCOMM_WIRE_MIN_BYTES, else 1 MiB.
    pub wire_min_bytes: Option<ByteSize>,
    /// The quantized all-reduce's algorithm for calls that leave it to the
    /// communicator. `Auto` (the default): the one-shot or two-shot kernel.
    /// `Gathered` allocates the gathered form's blocks at creation
    /// (`cuda::quant::gathered`; world x about 0.56 x `max_bytes` of device
    /// memory) and runs every quantized call that way. Every rank must give
    /// the same (checked at creation).
    pub wire_algo: crate::wire::QuantAlgo,
    /// Every call sends its peers a word saying what it is and compares
    /// theirs (docs/protocol-gpu.md, "Call words"): ranks that call with
    /// different counts, types or algorithms get `Error::Mismatch`, not
    /// wrong sums. `None` (TPCOMM_CHECK_CALLS unset): on when two ranks of
    /// the group share a GPU, off when every rank has its own (the words
    /// cost about 0.45 us per small call in a CUDA graph on the H200). Every rank must end up
    /// with the same answer: creation fails on every rank otherwise.
    pub check_calls: Option<bool>,
}

impl CudaConfig {
    /// The routes `selector` gives a group of these ranks, up to this
    /// `max_bytes`, on `transport` (with NCCL behind it or not), agreed
    /// with every rank through `rendezvous` (exchanged here, decided by
    /// `select::agree`).
    pub(crate) fn agreed_routes(
        &self,
        selector: &crate::select::Selector,
        transport: crate::select::Transport,
        nccl: bool,
        rendezvous: &super::rendezvous::Rendezvous,
    ) -> Result<crate::select::RouteTable> {
        let group = crate::select::Group {
            world: self.world,
            transport,
            nccl,
            max_bytes: self.max_bytes,
        };
        let table = crate::select::RouteTable::resolve(selector, group)?;
        let all = rendezvous.exchange(
            "route-table",
            self.rank,
            self.world,
            &table.encode(),
            self.timeout,
        )?;
        crate::select::agree(table, self.rank, &all)
    }

    /// Checks what every transport needs (2 to MAX_WORLD ranks, a rank below
    /// the world size, a buffer above 0 bytes) and returns the buffer size;
    /// `transport` names the caller in the messages.
    pub(crate) fn checked(&self, transport: &str) -> Result<usize> {
        crate::env::check_library()?;
        if !(2..=MAX_WORLD).contains(&self.world) {
            return Err(Error::invalid(
                "world size",
                format!("{} ({transport} takes 2 to {MAX_WORLD} ranks)", self.world),
            ));
        }
        if self.rank >= self.world {
            return Err(Error::invalid(
                "rank",
                format!("{} is not below the world size {}", self.rank, self.world),
            ));
        }
        if self.max_bytes.bytes() == 0 {
            return Err(Error::invalid("max message size", "must be above 0"));
        }
        Ok(self.max_bytes.as_usize()?)
    }

    pub fn new(rank: usize, world: usize, device: usize) -> Self {
        Self {
            rank,
            world,
            device,
            max_bytes: ByteSize::mib(8),
            timeout: Duration::from_secs(10),
            selector: None,
            mode: crate::select::Mode::Graph,
            // A bad value reads as no here; the creation check,
            // `env::check_library`, reports it.
            self_tune: crate::env::SELF_TUNE.checked_value().unwrap_or(false),
            transport: crate::transport::Transport::Auto,
            nccl_fallback: crate::env::NCCL_FALLBACK.checked_value().unwrap_or(false),
            wire: None,
            wire_min_bytes: None,
            wire_algo: crate::wire::QuantAlgo::Auto,
            check_calls: crate::env::CHECK_CALLS.checked_value(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bad shapes are refused before anything touches a GPU, naming the field
    /// and the transport; a good one yields the buffer size.
    #[test]
    fn configs_are_checked_before_any_gpu_work() {
        let ok = CudaConfig::new(1, 2, 1);
        assert_eq!(ok.checked("x").unwrap(), ok.max_bytes.as_usize().unwrap());
        let e = CudaConfig::new(0, 1, 0)
            .checked("the CUDA transport")
            .unwrap_err();
        assert!(
            e.to_string().contains("world size") && e.to_string().contains("the CUDA transport")
        );
        let e = CudaConfig::new(0, MAX_WORLD + 1, 0)
            .checked("t")
            .unwrap_err();
        assert!(e.to_string().contains("world size"), "{e}");
        let e = CudaConfig::new(2, 2, 0).checked("t").unwrap_err();
        assert!(e.to_string().contains("rank"), "{e}");
        let mut zero = CudaConfig::new(0, 2, 0);
        zero.max_bytes = ByteSize::b(0);
        assert!(zero
            .checked("t")
            .unwrap_err()
            .to_string()
            .contains("max message size"));
    }
}
