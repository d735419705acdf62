//! The byte-level way in, for data copied back from GPU buffers: raw
//! little-endian bytes of a [`DType`]. Random data (never zeros) from a
//! small generator of its own, and checks of sums against the shared
//! float64 [`Reference`] with [`SumBound::Result`].

use super::reference::{reduce_element, Check, Reference, SumBound};
use crate::dtype::{DType, ReduceOp};
use half::{bf16, f16};

/// A small, fast generator (xorshift64*): inputs need spread, not crypto.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9e3779b97f4a7c15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545f4914f6cdd1d)
    }
    /// Uniform in [0, hi).
    pub fn below(&mut self, hi: u64) -> u64 {
        self.next_u64() % hi.max(1)
    }
    /// Uniform in [-1, 1), never exactly zero.
    pub fn unit(&mut self) -> f32 {
        loop {
            let v = (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0;
            if v != 0.0 {
                return v;
            }
        }
    }
}

/// `count` random elements of `dtype`, as bytes; every element is nonzero
/// after rounding to the type.
pub fn random_bytes(dtype: DType, count: usize, rng: &mut Rng) -> Vec<u8> {
    let mut out = Vec::with_capacity(count * dtype.size());
    for _ in 0..count {
        let v = rng.unit();
        match dtype {
            DType::F32 => out.extend_from_slice(&v.to_le_bytes()),
            DType::F16 => {
                out.extend_from_slice(&nonzero(f16::from_f32(v).to_bits(), 0x3c00).to_le_bytes())
            }
            DType::Bf16 => {
                out.extend_from_slice(&nonzero(bf16::from_f32(v).to_bits(), 0x3f80).to_le_bytes())
            }
        }
    }
    out
}

fn nonzero(bits: u16, one: u16) -> u16 {
    if bits & 0x7fff == 0 {
        one
    } else {
        bits
    }
}

/// Element `i` of `bytes` as f64.
pub fn element(dtype: DType, bytes: &[u8], i: usize) -> f64 {
    match dtype {
        DType::F32 => f32::from_le_bytes([
            bytes[4 * i],
            bytes[4 * i + 1],
            bytes[4 * i + 2],
            bytes[4 * i + 3],
        ]) as f64,
        DType::F16 => f16::from_bits(u16::from_le_bytes([bytes[2 * i], bytes[2 * i + 1]])).to_f64(),
        DType::Bf16 => {
            bf16::from_bits(u16::from_le_bytes([bytes[2 * i], bytes[2 * i + 1]])).to_f64()
        }
    }
}

/// The exact sum over ranks of each of the first `count` elements, and the
/// sum of magnitudes (the scale of the f32 accumulation error).
pub fn reference(dtype: DType, inputs: &[&[u8]], count: usize) -> Reference {
    Reference::from_ranks(inputs.len(), count, ReduceOp::Sum, |r, i| {
        element(dtype, inputs[r], i)
    })
}

/// How many elements of `out` are not the reference within one rounding of
/// the type plus the f32 accumulation error ([`SumBound::Result`]). NaN is
/// always wrong.
pub fn count_wrong(dtype: DType, out: &[u8], reference: &Reference, world: usize) -> usize {
    let check = Check::new(reference.op, SumBound::Result, dtype, world);
    (0..reference.len())
        .filter(|&i| !check.accepts(element(dtype, out, i), reference.at(i)))
        .count()
}

/// [`count_wrong`] with the reference computed element by element from the
/// ranks' inputs, without holding it in memory (large messages).
pub fn count_wrong_against(dtype: DType, out: &[u8], inputs: &[&[u8]], world: usize) -> usize {
    let check = Check::new(ReduceOp::Sum, SumBound::Result, dtype, world);
    let n = out.len() / dtype.size();
    (0..n)
        .filter(|&i| {
            let r = reduce_element(ReduceOp::Sum, inputs.len(), |p| {
                element(dtype, inputs[p], i)
            });
            !check.accepts(element(dtype, out, i), r)
        })
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_inputs_are_never_zero() {
        let mut rng = Rng::new(7);
        for d in DType::ALL {
            let b = random_bytes(d, 10_000, &mut rng);
            assert!((0..10_000).all(|i| element(d, &b, i) != 0.0), "{d}");
        }
    }

    #[test]
    fn count_wrong_accepts_a_correct_sum_and_catches_a_wrong_one() {
        let mut rng = Rng::new(1);
        for d in DType::ALL {
            let a = random_bytes(d, 100, &mut rng);
            let b = random_bytes(d, 100, &mut rng);
            let r = reference(d, &[&a, &b], 100);
            let encode = |vals: &[f64]| {
                let mut out = Vec::new();
                for &s in vals {
                    match d {
                        DType::F32 => out.extend_from_slice(&(s as f32).to_le_bytes()),
                        DType::F16 => {
                            out.extend_from_slice(&f16::from_f64(s).to_bits().to_le_bytes())
                        }
                        DType::Bf16 => {
                            out.extend_from_slice(&bf16::from_f64(s).to_bits().to_le_bytes())
                        }
                    }
                }
                out
            };
            let mut vals: Vec<f64> = r.values().to_vec();
            assert_eq!(count_wrong(d, &encode(&vals), &r, 2), 0, "{d}");
            vals[5] += 0.5;
            vals[70] = f64::NAN;
            assert_eq!(count_wrong(d, &encode(&vals), &r, 2), 2, "{d}");
            assert_eq!(
                count_wrong_against(d, &encode(&vals), &[&a, &b], 2),
                2,
                "{d}"
            );
        }
    }
}
