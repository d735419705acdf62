//! The quantized wire in the drop-in: TPCOMM_WIRE=int8|fp8 (optionally
//! /GROUP) and TPCOMM_WIRE_MIN_BYTES, read by `tpcomm::quant::wire_from_env`
//! through the library's environment registry (crates/tpcomm/src/env.rs).
//! Opt-in: unset, nothing is allocated and every call runs as before.

use tpcomm::cuda::quant::{agree_wire, wire_for, QuantAlgo, QuantComm};
use tpcomm::cuda::{CUstream, Call, CudaConfig, GpuComm, Rendezvous};
use tpcomm::quant::Wire;
use tpcomm::{ByteSize, DType, Result};

/// A communicator's quantized wire, beside its exact one.
pub struct QuantBeside {
    pub comm: QuantComm,
    pub wire: Wire,
    pub min_bytes: ByteSize,
}

/// Reads the wire from the environment, checks that every rank read the
/// same (an error on every rank otherwise) and, when it is quantized, sets
/// up its buffers over `exact`'s transport.
/// Every rank calls it, after the exact communicator was made.
pub fn set_up(cfg: &CudaConfig, exact: &GpuComm, rv: &Rendezvous) -> Result<Option<QuantBeside>> {
    let env = tpcomm::quant::wire_from_env()?;
    agree_wire(cfg, rv, env.wire, env.min_bytes)?;
    if env.wire == Wire::Exact {
        return Ok(None);
    }
    // The drop-in's config keeps `wire_algo` at Auto: the kernels, no
    // gathered blocks.
    Ok(Some(QuantBeside {
        comm: QuantComm::new(cfg, exact.transport(), rv)?,
        wire: env.wire,
        min_bytes: env.min_bytes,
    }))
}

impl QuantBeside {
    /// The wire a sum of `bytes` takes.
    pub fn wire_for(&self, bytes: usize) -> Wire {
        wire_for(self.wire, self.min_bytes, bytes as u64)
    }

    /// Runs the sum on the quantized wire when it applies to `bytes`
    /// (`QuantComm::run`'s choice of algorithm; the gathered form's
    /// all-gather runs on `exact`); `None` when the call stays exact.
    ///
    /// # Safety
    /// As `QuantComm::run`; `exact` is the communicator this one was set up beside.
    pub unsafe fn try_all_reduce(
        &self,
        exact: &GpuComm,
        send: u64,
        recv: u64,
        count: usize,
        dtype: DType,
        stream: CUstream,
    ) -> Option<Result<Wire>> {
        let wire = self.wire_for(count.saturating_mul(dtype.size()));
        if wire == Wire::Exact {
            return None;
        }
        // SAFETY: passed on from the caller.
        Some(unsafe {
            let call = Call::new(send, recv, count, dtype, stream);
            self.comm
                .run(exact, &call, wire, QuantAlgo::Auto)
                .map(|_| wire)
        })
    }
}
