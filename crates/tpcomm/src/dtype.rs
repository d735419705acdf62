//! Element types and reduce operations.

use crate::error::{Error, Result};
use half::{bf16, f16};
use std::fmt;
use std::str::FromStr;

/// The element types tpcomm reduces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    F32,
    F16,
    Bf16,
}

impl DType {
    pub const ALL: [DType; 3] = [DType::Bf16, DType::F16, DType::F32];

    /// Bytes of `count` elements, or the error of a count that overflows.
    pub(crate) fn bytes_of(self, count: usize) -> Result<usize> {
        count
            .checked_mul(self.size())
            .ok_or_else(|| Error::invalid("count", format!("{count} elements overflow")))
    }

    /// Bytes per element.
    pub const fn size(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::F16 | DType::Bf16 => 2,
        }
    }

    /// The name used on the command line and in JSON.
    pub const fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::Bf16 => "bf16",
        }
    }

    /// Relative tolerance of an all-reduce result against a float64 reference,
    /// for `world` ranks: partial sums are kept in f32 and rounded once to the
    /// element type, so the error is one rounding of the type plus the f32
    /// accumulation error (tiny for the world sizes tpcomm serves).
    pub fn tolerance(self, world: usize) -> f64 {
        let eps = match self {
            DType::F32 => f32::EPSILON as f64,
            DType::F16 => 1.0 / 1024.0,
            DType::Bf16 => 1.0 / 128.0,
        };
        let acc = f32::EPSILON as f64 * world as f64;
        eps + acc
    }
}

display_by_name!(DType);

impl FromStr for DType {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "f32" | "fp32" | "float" | "float32" => Ok(DType::F32),
            "f16" | "fp16" | "half" | "float16" => Ok(DType::F16),
            "bf16" | "bfloat16" => Ok(DType::Bf16),
            other => Err(Error::invalid(
                "element type",
                format!("{other:?} is not one of bf16, f16, f32"),
            )),
        }
    }
}

/// The reduction applied element-wise across ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReduceOp {
    Sum,
    Max,
    Min,
}

impl ReduceOp {
    pub const ALL: [ReduceOp; 3] = [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min];

    pub const fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
        }
    }

    /// Combines two accumulator values.
    #[inline(always)]
    pub fn apply(self, a: f32, b: f32) -> f32 {
        match self {
            ReduceOp::Sum => a + b,
            ReduceOp::Max => a.max(b),
            ReduceOp::Min => a.min(b),
        }
    }

    /// The float64 reference of the same operation.
    pub fn apply_f64(self, a: f64, b: f64) -> f64 {
        match self {
            ReduceOp::Sum => a + b,
            ReduceOp::Max => a.max(b),
            ReduceOp::Min => a.min(b),
        }
    }
}

display_by_name!(ReduceOp);

impl FromStr for ReduceOp {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "sum" => Ok(ReduceOp::Sum),
            "max" => Ok(ReduceOp::Max),
            "min" => Ok(ReduceOp::Min),
            other => Err(Error::invalid(
                "reduce op",
                format!("{other:?} is not one of sum, max, min"),
            )),
        }
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for half::f16 {}
    impl Sealed for half::bf16 {}
}

/// A type tpcomm can all-reduce. Values are combined in f32 (exact for f16
/// and bf16 inputs) and rounded once to the element type.
pub trait Element: sealed::Sealed + Copy + Send + Sync + PartialEq + fmt::Debug + 'static {
    const DTYPE: DType;
    fn to_f32(self) -> f32;
    fn from_f32(v: f32) -> Self;
    fn to_f64(self) -> f64;
    fn from_f64(v: f64) -> Self;
    /// The raw bits, for bit-identical comparisons across ranks.
    fn to_bits_u32(self) -> u32;
    /// Converts a block to f32 (`src.len() == dst.len()`); types with a
    /// faster bulk conversion override it.
    #[inline]
    fn load_f32(src: &[Self], dst: &mut [f32]) {
        dst.iter_mut().zip(src).for_each(|(d, s)| *d = s.to_f32());
    }
    /// Rounds a block of f32 to this type (`src.len() == dst.len()`).
    #[inline]
    fn store_f32(src: &[f32], dst: &mut [Self]) {
        dst.iter_mut()
            .zip(src)
            .for_each(|(d, s)| *d = Self::from_f32(*s));
    }
}

impl Element for f32 {
    const DTYPE: DType = DType::F32;
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self
    }
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        v
    }
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    fn to_bits_u32(self) -> u32 {
        self.to_bits()
    }
}

/// The half crate's 16-bit types, converted by its own functions; `$extra`
/// holds what one type overrides besides.
macro_rules! half_element {
    ($t:ident, $dtype:expr, { $($extra:item)* }) => {
        impl Element for $t {
            const DTYPE: DType = $dtype;
            #[inline(always)]
            fn to_f32(self) -> f32 {
                $t::to_f32(self)
            }
            #[inline(always)]
            fn from_f32(v: f32) -> Self {
                $t::from_f32(v)
            }
            fn to_f64(self) -> f64 {
                $t::to_f64(self)
            }
            fn from_f64(v: f64) -> Self {
                $t::from_f64(v)
            }
            fn to_bits_u32(self) -> u32 {
                self.to_bits() as u32
            }
            $($extra)*
        }
    };
}

half_element!(f16, DType::F16, {
    // half's slice conversion checks for F16C once per call, not per element.
    fn load_f32(src: &[Self], dst: &mut [f32]) {
        half::slice::HalfFloatSliceExt::convert_to_f32_slice(src, dst);
    }
    fn store_f32(src: &[f32], dst: &mut [Self]) {
        half::slice::HalfFloatSliceExt::convert_from_f32_slice(dst, src);
    }
});
half_element!(bf16, DType::Bf16, {});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_and_aliases() {
        assert_eq!("bf16".parse::<DType>().unwrap(), DType::Bf16);
        assert_eq!("FP16".parse::<DType>().unwrap(), DType::F16);
        assert_eq!("float".parse::<DType>().unwrap(), DType::F32);
        assert!("int8".parse::<DType>().is_err());
        assert_eq!("max".parse::<ReduceOp>().unwrap(), ReduceOp::Max);
        assert!("prod".parse::<ReduceOp>().is_err());
    }

    #[test]
    fn sizes_match_the_types() {
        assert_eq!(DType::Bf16.size(), std::mem::size_of::<bf16>());
        assert_eq!(DType::F16.size(), std::mem::size_of::<f16>());
        assert_eq!(DType::F32.size(), std::mem::size_of::<f32>());
    }

    #[test]
    fn ops_reduce_as_named() {
        assert_eq!(ReduceOp::Sum.apply(1.5, 2.0), 3.5);
        assert_eq!(ReduceOp::Max.apply(1.5, 2.0), 2.0);
        assert_eq!(ReduceOp::Min.apply(1.5, 2.0), 1.5);
    }
}
