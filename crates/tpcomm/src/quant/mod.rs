//! Quantized wire formats for the all-reduce in the bandwidth regime: int8
//! or fp8 (e4m3) codes with one f32 scale per group of elements, opt-in
//! only. What travels between ranks is the codes and the scales; every rank
//! dequantizes every rank's contribution (its own included) and sums in rank
//! order in f32, so every rank ends with the same bits.
//!
//! This module is pure Rust (no GPU): the wire setting ([`Wire`], defined in
//! [`crate::wire`]), its environment variables, and [`model`], the bit-exact CPU model of the kernels'
//! arithmetic (kernels/quant.cu) that tests and docs/quantized.md use.

pub mod model;

pub use crate::wire::{Format, Wire, MAX_GROUP, MIN_GROUP};

use crate::error::Result;
use crate::units::ByteSize;

/// What the environment asks for: the wire of messages of at least
/// `min_bytes` (smaller ones stay exact: they are latency-bound and the
/// quantization would only add work).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WireFromEnv {
    pub wire: Wire,
    pub min_bytes: ByteSize,
}

/// Default TPCOMM_WIRE_MIN_BYTES: below a few MiB the all-reduce is latency-
/// bound and halving the bytes buys little.
pub const DEFAULT_WIRE_MIN_BYTES: u64 = 1 << 20;

/// Reads TPCOMM_WIRE (exact | int8 | fp8, optionally /GROUP) and
/// TPCOMM_WIRE_MIN_BYTES (a size: "4MiB", "1048576"), declared in
/// [`crate::env`]. Unset: exact.
pub fn wire_from_env() -> Result<WireFromEnv> {
    Ok(WireFromEnv {
        wire: crate::env::WIRE.get()?.unwrap_or(Wire::Exact),
        min_bytes: crate::env::WIRE_MIN_BYTES
            .get()?
            .unwrap_or(ByteSize::b(DEFAULT_WIRE_MIN_BYTES)),
    })
}

/// [`wire_from_env`] on given values (unit-tested without touching the
/// process environment).
pub fn wire_from_vars(wire: Option<&str>, min_bytes: Option<&str>) -> Result<WireFromEnv> {
    let get = |v: Option<&str>| v.map(std::ffi::OsString::from);
    Ok(WireFromEnv {
        wire: crate::env::WIRE
            .read_with(|_| get(wire))?
            .unwrap_or(Wire::Exact),
        min_bytes: crate::env::WIRE_MIN_BYTES
            .read_with(|_| get(min_bytes))?
            .unwrap_or(ByteSize::b(DEFAULT_WIRE_MIN_BYTES)),
    })
}

/// The line `tpcomm explain` adds when a quantized wire is enabled (`None`
/// when it is not): whether a sum of `bytes` travels on it, in place of the
/// exact route's choice.
pub fn explain_line(env: &WireFromEnv, bytes: u64) -> Option<String> {
    let (f, g) = env.wire.quantized()?;
    Some(if bytes >= env.min_bytes.bytes() && bytes > 0 {
        format!(
            "wire: {} (TPCOMM_WIRE; from {} up, TPCOMM_WIRE_MIN_BYTES): this sum runs tpcomm's quantized one-shot ({} codes, one f32 scale per {g} elements) instead of the choice above; error in docs/quantized.md",
            env.wire.label(),
            env.min_bytes,
            f.name()
        )
    } else {
        format!(
            "wire: exact (TPCOMM_WIRE={} applies from {} up, TPCOMM_WIRE_MIN_BYTES)",
            env.wire.label(),
            env.min_bytes
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explain_names_the_quantized_wire_only_when_it_is_enabled_and_applies() {
        let off = wire_from_vars(None, None).unwrap();
        assert_eq!(explain_line(&off, 64 << 20), None);
        let on = wire_from_vars(Some("int8/32"), Some("4MiB")).unwrap();
        let big = explain_line(&on, 64 << 20).unwrap();
        assert!(
            big.contains("int8/g32") && big.contains("quantized"),
            "{big}"
        );
        let small = explain_line(&on, 1 << 20).unwrap();
        assert!(
            small.starts_with("wire: exact") && small.contains("4 MiB"),
            "{small}"
        );
    }

    #[test]
    fn the_environment_is_exact_unless_asked_and_bad_values_name_the_variable() {
        let d = wire_from_vars(None, None).unwrap();
        assert_eq!(d.wire, Wire::Exact);
        assert_eq!(d.min_bytes.bytes(), DEFAULT_WIRE_MIN_BYTES);
        let d = wire_from_vars(Some("fp8"), Some("4MiB")).unwrap();
        assert_eq!(d.wire, Wire::fp8());
        assert_eq!(d.min_bytes, ByteSize::mib(4));
        let e = wire_from_vars(Some("bf8"), None).unwrap_err().to_string();
        assert!(e.contains("TPCOMM_WIRE"), "{e}");
        let e = wire_from_vars(Some("int8"), Some("lots"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("TPCOMM_WIRE_MIN_BYTES"), "{e}");
    }
}
