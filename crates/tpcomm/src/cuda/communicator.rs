//! The GPU communicator users hold: tpcomm's kernels for the all-reduces they
//! take, NCCL for the rest (messages above the buffers, ops the kernels lack).
//!
//! The kernels' buffers are sized once at creation and never grow, so a
//! message larger than `max_bytes` cannot run on them. Rather than fail, a
//! communicator created with `nccl_fallback` hands such calls to an NCCL
//! communicator it set up beside its own, on the same ranks and stream.

use super::host_path::GpuComm;
use super::quant::{agree_wire, resolve_wire, wire_for, QuantComm};
use super::raw::{CUdeviceptr, CUstream};
use super::{CudaConfig, Launch, Rendezvous, StreamAllReduce};
use crate::algo::Algo;
use crate::dtype::{DType, ReduceOp};
use crate::error::{Error, Result};
use crate::nccl::{Nccl, NcclComm, UniqueId};
use crate::quant::Wire;
use crate::units::ByteSize;
use std::time::Duration;

/// Where one all-reduce runs, and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// tpcomm's kernels.
    Tpcomm,
    /// tpcomm's quantized kernels (int8 / fp8 on the wire): the communicator
    /// was created with a quantized wire and the message is large enough.
    TpcommQuantized,
    /// NCCL, because the message is larger than the communicator's buffers.
    NcclTooLarge,
    /// NCCL, because the kernels only sum.
    NcclOp,
}

impl Route {
    /// Decides the route of a call from what the kernels can do; pure, so the
    /// rule is tested without a GPU.
    pub fn of(bytes: u64, max_bytes: ByteSize, op: ReduceOp) -> Route {
        if op != ReduceOp::Sum {
            Route::NcclOp
        } else if bytes > max_bytes.bytes() {
            Route::NcclTooLarge
        } else {
            Route::Tpcomm
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Route::Tpcomm => "tpcomm",
            Route::TpcommQuantized => "tpcomm (quantized wire)",
            Route::NcclTooLarge => "nccl (message above the buffers)",
            Route::NcclOp => "nccl (op not in the kernels)",
        }
    }
}

/// A GPU communicator with NCCL behind it (see the module docs).
pub struct Communicator {
    gpu: GpuComm,
    nccl: Option<NcclComm>,
    max_bytes: ByteSize,
    /// The quantized wire's kernels and buffers, when one is enabled.
    quant: Option<QuantComm>,
    wire: Wire,
    wire_min_bytes: ByteSize,
}

impl Communicator {
    /// Creates tpcomm's communicator (transport as `cfg.transport` says) and,
    /// when `cfg.nccl_fallback` is set, an NCCL communicator on the same ranks
    /// (rank 0's unique id goes to every rank through `rendezvous`). Every rank
    /// calls this with the same configuration.
    pub fn new(cfg: &CudaConfig, rendezvous: &Rendezvous) -> Result<Self> {
        let (wire, wire_min_bytes) = resolve_wire(cfg)?;
        let gpu = GpuComm::new(cfg, rendezvous)?;
        agree_wire(cfg, rendezvous, wire, wire_min_bytes)?;
        let quant = match wire {
            Wire::Exact => None,
            _ => Some(QuantComm::new(cfg, gpu.transport(), rendezvous)?),
        };
        let nccl = if cfg.nccl_fallback {
            Some(nccl_over_rendezvous(
                cfg.rank,
                cfg.world,
                rendezvous,
                cfg.timeout,
            )?)
        } else {
            None
        };
        Ok(Self {
            gpu,
            nccl,
            max_bytes: cfg.max_bytes,
            quant,
            wire,
            wire_min_bytes,
        })
    }

    /// tpcomm's own communicator (memory report, transport, checks).
    pub fn gpu(&self) -> &GpuComm {
        &self.gpu
    }

    /// The quantized wire's communicator (its memory report shows the
    /// quantized layout), when one is enabled.
    pub fn quant(&self) -> Option<&QuantComm> {
        self.quant.as_ref()
    }

    /// The wire a sum of `bytes` travels on: what `explain` prints.
    pub fn wire_for(&self, bytes: u64) -> Wire {
        wire_for(self.wire, self.wire_min_bytes, bytes)
    }

    /// An all-reduce on the given wire, whatever the communicator's default
    /// (`Wire::Exact` runs the ordinary route). A quantized wire needs the
    /// buffers a quantized communicator allocated at creation, and only sums.
    ///
    /// # Safety
    /// As [`StreamAllReduce::all_reduce_launched`].
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn all_reduce_wire(
        &self,
        input: CUdeviceptr,
        output: CUdeviceptr,
        count: usize,
        dtype: DType,
        op: ReduceOp,
        wire: Wire,
        stream: CUstream,
        how: Launch,
    ) -> Result<Route> {
        if wire == Wire::Exact {
            // SAFETY: the caller's contract is passed on unchanged.
            return unsafe {
                self.route_exact(input, output, count, dtype, op, Algo::Auto, stream, how)
            };
        }
        let Some(q) = &self.quant else {
            return Err(Error::Unsupported(format!(
                "the {} wire on a communicator created without one; create it with CudaConfig::wire (or TPCOMM_WIRE) set so its buffers are allocated",
                wire.label()
            )));
        };
        if op != ReduceOp::Sum {
            return Err(Error::Unsupported(format!(
                "reduce op {op} on the {} wire (only sum)",
                wire.label()
            )));
        }
        self.gpu.check()?;
        // SAFETY: as above.
        unsafe { q.all_reduce(input, output, count, dtype, wire, stream, how)? };
        Ok(Route::TpcommQuantized)
    }

    /// Reports a peer that did not arrive, in the exact or the quantized
    /// kernels.
    pub fn check(&self) -> Result<()> {
        self.gpu.check()?;
        self.quant.as_ref().map_or(Ok(()), QuantComm::check)
    }

    /// The NCCL communicator behind it, if it was asked for.
    pub fn nccl(&self) -> Option<&NcclComm> {
        self.nccl.as_ref()
    }
}

/// On tpcomm's kernels when they can take the call and on NCCL otherwise;
/// `Ran` says where it ran. Without the NCCL fallback, a call the kernels
/// cannot take is an error that says so. An overlapped launch applies to
/// tpcomm's kernels; NCCL calls launch as NCCL does.
impl StreamAllReduce for Communicator {
    type Ran = Route;

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
    ) -> Result<Route> {
        let bytes = (count as u64)
            .checked_mul(dtype.size() as u64)
            .ok_or_else(|| Error::invalid("count", format!("{count} elements overflow")))?;
        let wire = self.wire_for(bytes);
        if wire != Wire::Exact && Route::of(bytes, self.max_bytes, op) == Route::Tpcomm {
            // SAFETY: the caller's contract is passed on unchanged.
            return unsafe {
                self.all_reduce_wire(input, output, count, dtype, op, wire, stream, how)
            };
        }
        // SAFETY: as above.
        unsafe { self.route_exact(input, output, count, dtype, op, algo, stream, how) }
    }
}

impl Communicator {
    /// The exact route: tpcomm's kernels or NCCL.
    ///
    /// # Safety
    /// As [`StreamAllReduce::all_reduce_launched`].
    #[allow(clippy::too_many_arguments)]
    unsafe fn route_exact(
        &self,
        input: CUdeviceptr,
        output: CUdeviceptr,
        count: usize,
        dtype: DType,
        op: ReduceOp,
        algo: Algo,
        stream: CUstream,
        how: Launch,
    ) -> Result<Route> {
        let bytes = (count as u64)
            .checked_mul(dtype.size() as u64)
            .ok_or_else(|| Error::invalid("count", format!("{count} elements overflow")))?;
        let route = Route::of(bytes, self.max_bytes, op);
        match (route, &self.nccl) {
            (Route::Tpcomm, _) => {
                // SAFETY: the caller's contract is passed on unchanged.
                unsafe {
                    self.gpu
                        .all_reduce_launched(input, output, count, dtype, op, algo, stream, how)?
                };
            }
            (_, Some(nccl)) => {
                // SAFETY: as above; NCCL reads and writes the same ranges on
                // the same stream.
                unsafe { nccl.all_reduce(input, output, count, dtype, op, stream)? };
            }
            (Route::NcclOp, None) => {
                return Err(Error::Unsupported(format!(
                    "reduce op {op} in tpcomm's kernels (they only sum); create the communicator with nccl_fallback to run it on NCCL"
                )))
            }
            (Route::TpcommQuantized, None) => {
                return Err(Error::Unsupported(
                    "the quantized wire is not an exact route".into(),
                ))
            }
            (Route::NcclTooLarge, None) => {
                return Err(Error::invalid(
                    "message size",
                    format!(
                        "{} is above this communicator's buffers ({}); create it with a larger max_bytes, or with nccl_fallback to run such messages on NCCL",
                        ByteSize::b(bytes),
                        self.max_bytes
                    ),
                ))
            }
        }
        Ok(route)
    }
}

impl Communicator {}

/// Sets up an NCCL communicator on the ranks of `rendezvous`: rank 0 makes the
/// unique id and every rank receives it there. A rank that cannot load NCCL
/// posts nothing, so every rank fails together instead of waiting in NCCL.
pub fn nccl_over_rendezvous(
    rank: usize,
    world: usize,
    rendezvous: &Rendezvous,
    timeout: Duration,
) -> Result<NcclComm> {
    let loaded = Nccl::load();
    let mine: Vec<u8> = match (&loaded, rank) {
        (Ok(n), 0) => n.unique_id()?.0.to_vec(),
        (Ok(_), _) => vec![1],
        (Err(_), _) => Vec::new(),
    };
    let all = rendezvous.exchange("nccl-fallback-id", rank, world, &mine, timeout)?;
    let nccl = loaded?;
    if let Some(r) = all.iter().position(|v| v.is_empty()) {
        return Err(Error::Library {
            library: "NCCL".into(),
            detail: format!("rank {r} could not load NCCL, so no rank sets up the NCCL fallback; install NCCL there or set TPCOMM_NCCL_LIBRARY"),
        });
    }
    let id: [u8; 128] = all[0].as_slice().try_into().map_err(|_| {
        Error::invalid(
            "rendezvous",
            format!(
                "rank 0 posted {} bytes for the NCCL unique id, expected 128",
                all[0].len()
            ),
        )
    })?;
    nccl.comm_init_rank(world, &UniqueId(id), rank)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_that_fit_run_on_tpcomm() {
        let max = ByteSize::mib(8);
        assert_eq!(Route::of(1, max, ReduceOp::Sum), Route::Tpcomm);
        assert_eq!(Route::of(max.bytes(), max, ReduceOp::Sum), Route::Tpcomm);
    }

    #[test]
    fn messages_above_the_buffers_go_to_nccl() {
        let max = ByteSize::mib(8);
        assert_eq!(
            Route::of(max.bytes() + 1, max, ReduceOp::Sum),
            Route::NcclTooLarge
        );
    }

    #[test]
    fn ops_the_kernels_lack_go_to_nccl_at_any_size() {
        let max = ByteSize::mib(8);
        for op in [ReduceOp::Max, ReduceOp::Min] {
            assert_eq!(Route::of(16, max, op), Route::NcclOp);
            assert_eq!(Route::of(max.bytes() * 2, max, op), Route::NcclOp);
        }
    }
}
