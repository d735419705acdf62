//! The quantized wire in the drop-in: TPCOMM_WIRE=int8|fp8 (optionally
//! /GROUP) and TPCOMM_WIRE_MIN_BYTES, read by `tpcomm::quant::wire_from_env`
//! through the library's environment registry (crates/tpcomm/src/env.rs).
//! Opt-in: unset, nothing is allocated and every call runs as before.

use tpcomm::cuda::quant::{agree_wire, QuantAlgo, QuantComm};
use tpcomm::cuda::{Call, CudaConfig, GpuComm, Rendezvous};
use tpcomm::quant::Wire;
use tpcomm::{ByteSize, Result};

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
    /// Runs `call` (a sum) on the quantized `wire` (`QuantComm::run`'s
    /// choice of algorithm; the gathered form's all-gather runs on `exact`).
    ///
    /// # Safety
    /// As `QuantComm::run`; `exact` is the communicator this one was set up beside.
    pub unsafe fn run(&self, exact: &GpuComm, call: &Call, wire: Wire) -> Result<()> {
        // SAFETY: passed on from the caller.
        unsafe { self.comm.run(exact, call, wire, QuantAlgo::Auto) }.map(|_| ())
    }
}
