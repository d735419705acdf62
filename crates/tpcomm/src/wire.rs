//! The quantized wire setting, a basic type like `DType`: how an all-reduce's
//! data travels between ranks ([`Wire`]) and the code format of a quantized
//! wire. Below `env`, which parses TPCOMM_WIRE into a [`Wire`]; `quant`
//! (which reads that variable) re-exports it as `quant::Wire`.

use crate::error::{Error, Result};

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

    /// The quantized wire a name asks for ("int8", "fp8/128", ...): `None`
    /// when the name is not int8 or fp8 (an algorithm's or mode's name), the
    /// parse's error when its group is not one.
    pub fn parse_quantized(name: &str) -> Option<Result<Self>> {
        let base = name.split(['/', ':']).next().unwrap_or(name);
        matches!(base, "int8" | "fp8").then(|| Wire::parse(name))
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

/// Which quantized all-reduce algorithm a call runs (`cuda::quant`, which
/// also says when `Auto` runs two-shot: `QuantAlgo::runs_twoshot`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuantAlgo {
    /// Every rank sends all its codes to every peer.
    OneShot,
    /// Quantized reduce-scatter, f32 sum of the own shard, requantized
    /// all-gather (a second rounding, less traffic above 2 ranks). Messages
    /// of fewer 4096-element chunks than ranks run one-shot.
    TwoShot,
    /// Quantize locally, all-gather the codes with the transport's exact
    /// all-gather, dequantize and sum locally (gathered.rs): one-shot's bytes
    /// and bits in three launches. Needs the buffer a communicator allocates
    /// only when `CudaConfig::wire_algo` asks for this algorithm.
    Gathered,
    /// One-shot at 2 ranks (the same traffic, one rounding less), two-shot
    /// above (`QuantComm::resolve`).
    Auto,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantized_names_parse_and_others_are_not_quantized() {
        assert_eq!(
            Wire::parse_quantized("int8").unwrap().unwrap(),
            Wire::int8()
        );
        assert_eq!(
            Wire::parse_quantized("fp8/128").unwrap().unwrap(),
            Wire::Fp8 { group: 128 }
        );
        assert!(Wire::parse_quantized("int8/7").unwrap().is_err());
        assert!(
            Wire::parse_quantized("one-shot").is_none() && Wire::parse_quantized("nccl").is_none()
        );
    }

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
}
