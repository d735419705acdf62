//! Which wire a communicator's all-reduces take, and every rank agreeing on
//! it (and on the quantized algorithm) at creation.

use crate::cuda::config::CudaConfig;
use crate::cuda::rendezvous::Rendezvous;
use crate::error::{Error, Result};
use crate::quant::Wire;
use crate::units::ByteSize;
use crate::wire::QuantAlgo;

/// The wire a communicator created with `cfg` uses and the smallest message
/// it quantizes: the config's, else the environment's (TPCOMM_WIRE,
/// TPCOMM_WIRE_MIN_BYTES; `crate::quant::wire_from_env`).
pub fn resolve_wire(cfg: &CudaConfig) -> Result<(Wire, ByteSize)> {
    let env = match (cfg.wire, cfg.wire_min_bytes) {
        (Some(w), Some(m)) => return Ok((w.checked()?, m)),
        _ => crate::quant::wire_from_env()?,
    };
    Ok((
        cfg.wire.unwrap_or(env.wire).checked()?,
        cfg.wire_min_bytes.unwrap_or(env.min_bytes),
    ))
}

/// The bytes a rank posts for [`agree_wire`].
fn wire_record(wire: Wire, min_bytes: ByteSize, algo: QuantAlgo) -> Vec<u8> {
    let (kind, group) = match wire {
        Wire::Exact => (0u8, 0u32),
        Wire::Int8 { group } => (1, group),
        Wire::Fp8 { group } => (2, group),
    };
    let mut v = vec![kind];
    v.extend_from_slice(&group.to_le_bytes());
    v.extend_from_slice(&min_bytes.bytes().to_le_bytes());
    v.push(algo as u8);
    v
}

/// Checks that every rank of the group resolved the same wire and minimum
/// size (from its config or its environment) and has the same
/// `CudaConfig::wire_algo`: otherwise ranks would run
/// different kernels and wait for each other until the timeout. A mismatch
/// is an error on every rank, naming the first rank that differs.
pub fn agree_wire(
    cfg: &CudaConfig,
    rendezvous: &Rendezvous,
    wire: Wire,
    min_bytes: ByteSize,
) -> Result<()> {
    let mine = wire_record(wire, min_bytes, cfg.wire_algo);
    let all = rendezvous.exchange("quant-wire", cfg.rank, cfg.world, &mine, cfg.timeout)?;
    match all.iter().position(|r| r != &all[0]) {
        None => Ok(()),
        Some(r) => Err(Error::invalid(
            "quantized wire",
            format!(
                "rank 0 and rank {r} differ in the wire, its minimum size or its algorithm (CudaConfig::wire, TPCOMM_WIRE, TPCOMM_WIRE_MIN_BYTES, CudaConfig::wire_algo; this rank: {} from {min_bytes}, {:?}): give every rank the same",
                wire.label(),
                cfg.wire_algo
            ),
        )),
    }
}

/// The wire a sum of `bytes` travels on, given the communicator's `wire` and
/// `min_bytes`: quantized only when enabled and the message is at least
/// `min_bytes` (below, the call is latency-bound and stays exact).
pub fn wire_for(wire: Wire, min_bytes: ByteSize, bytes: u64) -> Wire {
    if wire != Wire::Exact && bytes >= min_bytes.bytes() && bytes > 0 {
        wire
    } else {
        Wire::Exact
    }
}
