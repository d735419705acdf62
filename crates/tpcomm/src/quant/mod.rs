//! Quantized wire formats for the all-reduce in the bandwidth regime: int8
//! or fp8 (e4m3) codes with one f32 scale per group of elements, opt-in
//! only. What travels between ranks is the codes and the scales; every rank
//! dequantizes every rank's contribution (its own included) and sums in rank
//! order in f32, so every rank ends with the same bits.
//!
//! This module is pure Rust (no GPU): the wire setting, its environment
//! variables, and [`model`], the bit-exact CPU model of the kernels'
//! arithmetic (kernels/quant.cu) that tests and docs/quantized.md use.

pub mod model;

use crate::error::{Error, Result};
use crate::units::ByteSize;

/// Smallest and largest group (elements per scale); a power of two.
pub const MIN_GROUP: u32 = 32;
pub const MAX_GROUP: u32 = 128;

/// How an all-reduce's data travels between ranks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Wire {
    /// The element type itself: the exact all-reduce (the default).
    #[default]
    Exact,
    /// int8 codes, one f32 scale per `group` elements (amax / 127).
    Int8 { group: u32 },
    /// fp8 e4m3 codes, one f32 scale per `group` elements (amax / 448).
    Fp8 { group: u32 },
}

/// The code format of a quantized wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    Int8,
    Fp8E4m3,
}

impl Format {
    pub fn name(self) -> &'static str {
        match self {
            Format::Int8 => "int8",
            Format::Fp8E4m3 => "fp8",
        }
    }
}

impl Wire {
    /// The default group of both formats: 64 elements per scale.
    pub const DEFAULT_GROUP: u32 = 64;

    pub fn int8() -> Self {
        Wire::Int8 {
            group: Self::DEFAULT_GROUP,
        }
    }
    pub fn fp8() -> Self {
        Wire::Fp8 {
            group: Self::DEFAULT_GROUP,
        }
    }

    /// (format, group) of a quantized wire; `None` for `Exact`.
    pub fn quantized(self) -> Option<(Format, u32)> {
        match self {
            Wire::Exact => None,
            Wire::Int8 { group } => Some((Format::Int8, group)),
            Wire::Fp8 { group } => Some((Format::Fp8E4m3, group)),
        }
    }

    /// Checks the group: a power of two from MIN_GROUP to MAX_GROUP.
    pub fn checked(self) -> Result<Self> {
        if let Some((f, g)) = self.quantized() {
            if !(MIN_GROUP..=MAX_GROUP).contains(&g) || !g.is_power_of_two() {
                return Err(Error::invalid(
                    "quantized wire group",
                    format!(
                        "{g} for {} (a power of two from {MIN_GROUP} to {MAX_GROUP})",
                        f.name()
                    ),
                ));
            }
        }
        Ok(self)
    }

    /// "exact", "int8/g64", "fp8/g128": what bench rows and `explain` print.
    pub fn label(self) -> String {
        match self.quantized() {
            None => "exact".into(),
            Some((f, g)) => format!("{}/g{g}", f.name()),
        }
    }

    /// Parses "exact", "int8", "fp8", optionally with a group: "int8/64",
    /// "fp8:128", "int8/g32".
    pub fn parse(s: &str) -> Result<Self> {
        let t = s.trim().to_ascii_lowercase();
        let (name, group) = match t.split_once(['/', ':']) {
            Some((n, g)) => {
                let g = g.trim().trim_start_matches('g');
                let g = g.parse::<u32>().map_err(|_| {
                    Error::invalid(
                        "quantized wire",
                        format!("{s:?}: group {g:?} is not a number"),
                    )
                })?;
                (n.trim().to_string(), Some(g))
            }
            None => (t.clone(), None),
        };
        let group = group.unwrap_or(Self::DEFAULT_GROUP);
        let w = match name.as_str() {
            "exact" | "" if group == Self::DEFAULT_GROUP => Wire::Exact,
            "int8" => Wire::Int8 { group },
            "fp8" | "e4m3" | "fp8e4m3" => Wire::Fp8 { group },
            _ => {
                return Err(Error::invalid(
                    "quantized wire",
                    format!("{s:?} (expected exact, int8 or fp8, optionally /GROUP with GROUP 32, 64 or 128)"),
                ))
            }
        };
        w.checked()
    }
}

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
    fn wires_parse_with_and_without_a_group() {
        assert_eq!(Wire::parse("exact").unwrap(), Wire::Exact);
        assert_eq!(Wire::parse("int8").unwrap(), Wire::Int8 { group: 64 });
        assert_eq!(Wire::parse(" FP8/128 ").unwrap(), Wire::Fp8 { group: 128 });
        assert_eq!(Wire::parse("int8:g32").unwrap(), Wire::Int8 { group: 32 });
        for bad in [
            "int4", "int8/48", "int8/16", "int8/256", "fp8/x", "exact/32",
        ] {
            assert!(Wire::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(Wire::Int8 { group: 32 }.label(), "int8/g32");
    }

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
