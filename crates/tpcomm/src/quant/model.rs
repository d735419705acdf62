//! The bit-exact CPU model of the quantized all-reduce's arithmetic
//! (kernels/quant_math.cu):
//! the same operations in the same order with the same IEEE rounding, so a
//! GPU result can be compared with it bit for bit. Every f32 operation here
//! is one correctly rounded IEEE operation (Rust never contracts a * b + c
//! into a fused multiply-add); the kernel uses `.rn` PTX instructions, which
//! the compiler does not contract either.
//!
//! Per group of G elements (groups start at element 0 of the message; the
//! last one may be short, its missing elements count as 0):
//! 1. `amax` = the largest |x| (NaN ignored, as `max.f32` does; 0 to start).
//! 2. Below [`MIN_AMAX`] the group is all zeros: scale 0, every code 0.
//!    Otherwise `scale = amax / Q` and `inv = Q / amax`, each one correctly
//!    rounded f32 division, with Q = 127 (int8) or 448 (fp8 e4m3).
//! 3. Each element's code: int8 `clamp(round_half_even(x * inv), -127, 127)`
//!    (NaN gives 0); fp8 the e4m3 value nearest `x * inv` (ties to even,
//!    saturating at 448, NaN gives 0).
//! 4. Every rank dequantizes every rank's codes, `decode(code) * scale`, and
//!    sums them in rank order in f32: `((v0 + v1) + v2) + ...`.
//! 5. The f32 sum is rounded once to the element type (ties to even).

use super::Format;
use crate::dtype::DType;

/// Elements per flag-guarded chunk in the kernels: the unit a block
/// quantizes, sends and marks arrived. A multiple of every group size, so no
/// group straddles two chunks (the arithmetic does not depend on it).
pub const CHUNK_ELEMS: usize = 4096;

/// Largest code magnitude: 127 for int8, 448 (the largest finite e4m3) for fp8.
pub fn code_max(f: Format) -> f32 {
    match f {
        Format::Int8 => 127.0,
        Format::Fp8E4m3 => 448.0,
    }
}

/// Groups whose largest magnitude is below 2^-96 are sent as zeros (so
/// `Q / amax` stays finite).
pub const MIN_AMAX: f32 = f32::from_bits((127 - 96) << 23);

/// (scale, inverse scale) of a group with largest magnitude `amax`.
pub fn group_scale(f: Format, amax: f32) -> (f32, f32) {
    if amax < MIN_AMAX {
        return (0.0, 0.0);
    }
    let q = code_max(f);
    (amax / q, q / amax)
}

/// The code of `x` in a group with inverse scale `inv`.
pub fn encode(f: Format, x: f32, inv: f32) -> u8 {
    let y = x * inv;
    match f {
        Format::Int8 => {
            // `as` saturates and maps NaN to 0, as PTX cvt.rni.s32.f32 does.
            let r = (y.round_ties_even() as i32).clamp(-127, 127);
            r as i8 as u8
        }
        Format::Fp8E4m3 => e4m3_from_f32(y),
    }
}

/// The value of `code` before scaling.
pub fn decode(f: Format, code: u8) -> f32 {
    match f {
        Format::Int8 => code as i8 as f32,
        Format::Fp8E4m3 => e4m3_to_f32(code),
    }
}

/// f32 to fp8 e4m3 (OCP "e4m3fn": bias 7, no infinities, largest 448),
/// round to nearest even, saturating; NaN gives 0. Never returns 0x7f/0xff.
pub fn e4m3_from_f32(y: f32) -> u8 {
    let bits = y.to_bits();
    let sign = ((bits >> 24) & 0x80) as u8;
    let a = f32::from_bits(bits & 0x7fff_ffff);
    if a.is_nan() {
        return 0;
    }
    let mag = if a >= 448.0 {
        0x7e
    } else if a < f32::from_bits(121 << 23) {
        // Below 2^-6: subnormal codes m * 2^-9, m = 0..=8 (8 is 2^-6, the
        // smallest normal, whose code is also 8).
        (a * 512.0).round_ties_even() as u8
    } else {
        // Keep 3 mantissa bits, ties to even; a carry moves the exponent.
        let u = a.to_bits();
        let u = u + 0x7ffff + ((u >> 20) & 1);
        ((u >> 20) - (120 << 3)) as u8
    };
    sign | mag
}

/// fp8 e4m3 to f32 (exact).
pub fn e4m3_to_f32(c: u8) -> f32 {
    let e = ((c >> 3) & 15) as u32;
    let m = (c & 7) as u32;
    let mag = if e == 0 {
        m as f32 * f32::from_bits((127 - 9) << 23)
    } else {
        f32::from_bits(((e + 120) << 23) | (m << 20))
    };
    if c & 0x80 != 0 {
        -mag
    } else {
        mag
    }
}

/// One rank's contribution as it travels: a code per element, a scale per group.
#[derive(Clone, Debug, PartialEq)]
pub struct Quantized {
    pub codes: Vec<u8>,
    pub scales: Vec<f32>,
}

/// Quantizes `x` in groups of `group` elements (the kernels' step 1-3).
pub fn quantize(f: Format, group: usize, x: &[f32]) -> Quantized {
    let mut codes = Vec::with_capacity(x.len());
    let mut scales = Vec::with_capacity(x.len().div_ceil(group));
    for g in x.chunks(group) {
        let amax = g.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let (scale, inv) = group_scale(f, amax);
        scales.push(scale);
        codes.extend(g.iter().map(|&v| encode(f, v, inv)));
    }
    Quantized { codes, scales }
}

/// Element `i` of a contribution, dequantized.
pub fn dequantized(f: Format, group: usize, q: &Quantized, i: usize) -> f32 {
    decode(f, q.codes[i]) * q.scales[i / group]
}

/// The all-reduce in f32 before the final rounding: every rank's input
/// quantized, dequantized and summed in rank order. `inputs[r]` is rank r's
/// message as f32 (bf16/f16 values convert to f32 exactly).
pub fn all_reduce_f32(f: Format, group: usize, inputs: &[Vec<f32>]) -> Vec<f32> {
    let n = inputs.first().map_or(0, |v| v.len());
    let qs: Vec<Quantized> = inputs.iter().map(|x| quantize(f, group, x)).collect();
    (0..n)
        .map(|i| {
            let mut acc = dequantized(f, group, &qs[0], i);
            for q in &qs[1..] {
                acc += dequantized(f, group, q, i);
            }
            acc
        })
        .collect()
}

/// The two-shot all-reduce in f32 before the final rounding: the one-shot
/// sum (every rank's input quantized, dequantized and summed in rank order),
/// quantized again in groups by the owner of each chunk and dequantized by
/// every rank, the owner included, so every rank holds the same bits.
pub fn all_reduce_twoshot_f32(f: Format, group: usize, inputs: &[Vec<f32>]) -> Vec<f32> {
    let sum = all_reduce_f32(f, group, inputs);
    let q = quantize(f, group, &sum);
    (0..sum.len())
        .map(|i| dequantized(f, group, &q, i))
        .collect()
}

/// The two-shot output as the element bits of `dtype`.
pub fn all_reduce_twoshot_bits(
    f: Format,
    group: usize,
    dtype: DType,
    inputs: &[Vec<f32>],
) -> Vec<u32> {
    all_reduce_twoshot_f32(f, group, inputs)
        .into_iter()
        .map(|v| round_to(dtype, v))
        .collect()
}

/// Whether the kernels run a message of `count` elements two-shot when
/// asked to: every rank must own at least one chunk (each rank then hears
/// from every peer in every call, which the buffer reuse rule needs);
/// smaller messages run one-shot.
pub fn twoshot_fits(count: usize, world: usize) -> bool {
    count.div_ceil(CHUNK_ELEMS) >= world
}

/// The element bits of `v` rounded to `dtype` (ties to even), as the
/// kernels store them: the low 16 bits for f16 and bf16.
pub fn round_to(dtype: DType, v: f32) -> u32 {
    match dtype {
        DType::F32 => v.to_bits(),
        DType::F16 => half::f16::from_f32(v).to_bits() as u32,
        DType::Bf16 => half::bf16::from_f32(v).to_bits() as u32,
    }
}

/// The value of element bits of `dtype` as f32 (exact).
pub fn value_of(dtype: DType, bits: u32) -> f32 {
    match dtype {
        DType::F32 => f32::from_bits(bits),
        DType::F16 => half::f16::from_bits(bits as u16).to_f32(),
        DType::Bf16 => half::bf16::from_bits(bits as u16).to_f32(),
    }
}

/// The quantized all-reduce's output, as the element bits of `dtype`.
pub fn all_reduce_bits(f: Format, group: usize, dtype: DType, inputs: &[Vec<f32>]) -> Vec<u32> {
    all_reduce_f32(f, group, inputs)
        .into_iter()
        .map(|v| round_to(dtype, v))
        .collect()
}

/// How far a result is from the exact sum.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ErrorStats {
    /// sqrt(sum (y - ref)^2 / sum ref^2).
    pub rel_rms: f64,
    /// max |y - ref| / rms(ref): the worst element, in units of the
    /// reference's RMS (an element-wise ratio is unbounded near zero).
    pub max_rel: f64,
}

/// The error of `out` against `reference` (the float64 sum).
pub fn error_stats(out: &[f32], reference: &[f64]) -> ErrorStats {
    let (mut e2, mut r2, mut emax) = (0.0f64, 0.0f64, 0.0f64);
    for (&y, &r) in out.iter().zip(reference) {
        let e = y as f64 - r;
        e2 += e * e;
        r2 += r * r;
        emax = emax.max(e.abs());
    }
    let n = reference.len().max(1) as f64;
    let rms = (r2 / n).sqrt();
    if r2 == 0.0 {
        return ErrorStats {
            rel_rms: if e2 == 0.0 { 0.0 } else { f64::INFINITY },
            max_rel: if emax == 0.0 { 0.0 } else { f64::INFINITY },
        };
    }
    ErrorStats {
        rel_rms: (e2 / r2).sqrt(),
        max_rel: emax / rms,
    }
}

/// The float64 sum of every rank's input.
pub fn reference_f64(inputs: &[Vec<f32>]) -> Vec<f64> {
    let n = inputs.first().map_or(0, |v| v.len());
    (0..n)
        .map(|i| inputs.iter().map(|x| x[i] as f64).sum())
        .collect()
}

/// Inputs for the error measurements: seeded, so the table is reproducible.
pub mod inputs {
    /// splitmix64.
    pub struct Rng(u64);
    impl Rng {
        pub fn new(seed: u64) -> Self {
            Self(seed)
        }
        pub fn next_u64(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }
        /// Uniform in (0, 1].
        pub fn uniform(&mut self) -> f64 {
            ((self.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64
        }
        /// Standard normal (Box-Muller).
        pub fn gaussian(&mut self) -> f64 {
            let (u, v) = (self.uniform(), self.uniform());
            (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
        }
    }

    /// The input distributions of docs/quantized.md.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Dist {
        /// N(0, 1).
        Gaussian,
        /// N(0, 1) with one element in 1000 replaced by +-100.
        Outliers,
    }

    impl Dist {
        pub fn name(self) -> &'static str {
            match self {
                Dist::Gaussian => "gaussian",
                Dist::Outliers => "outliers 100x (1 in 1000)",
            }
        }
    }

    /// `n` values of `dist`, rounded to `dtype` and returned as f32.
    pub fn sample(rng: &mut Rng, dist: Dist, dtype: crate::DType, n: usize) -> Vec<f32> {
        (0..n)
            .map(|_| {
                let mut v = rng.gaussian();
                if dist == Dist::Outliers && rng.next_u64().is_multiple_of(1000) {
                    v = if rng.next_u64() & 1 == 0 {
                        100.0
                    } else {
                        -100.0
                    };
                }
                let bits = super::round_to(dtype, v as f32);
                super::value_of(dtype, bits)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_e4m3_code_decodes_and_encodes_back() {
        for c in 0u8..=255 {
            if c & 0x7f == 0x7f {
                continue; // NaN codes, never produced
            }
            let v = e4m3_to_f32(c);
            let back = e4m3_from_f32(v);
            assert_eq!(back, c, "code {c:#04x} = {v}");
        }
        assert_eq!(e4m3_to_f32(0x7e), 448.0);
        assert_eq!(e4m3_to_f32(0x01), 2f32.powi(-9));
        assert_eq!(e4m3_to_f32(0x08), 2f32.powi(-6));
    }

    #[test]
    fn e4m3_decoded_by_one_multiply_is_the_definition_for_every_code() {
        // kernels/quant_math.cu decodes by placing the code's magnitude bits at
        // f32's exponent and mantissa and multiplying by 2^120.
        let two_120 = f32::from_bits((127 + 120) << 23);
        assert_eq!(two_120, 1.329_228e36);
        for c in 0..=255u8 {
            let c32 = u32::from(c);
            let shifted = f32::from_bits(((c32 & 0x80) << 24) | ((c32 & 0x7f) << 20));
            let fast = shifted * two_120;
            assert_eq!(fast.to_bits(), e4m3_to_f32(c).to_bits(), "code {c:#04x}");
        }
    }

    #[test]
    fn e4m3_rounds_ties_to_even_and_saturates() {
        // 1 + 1/16 lies halfway between 1 (even mantissa) and 1 + 1/8.
        assert_eq!(e4m3_to_f32(e4m3_from_f32(1.0625)), 1.0);
        assert_eq!(e4m3_to_f32(e4m3_from_f32(1.1875)), 1.25);
        assert_eq!(e4m3_to_f32(e4m3_from_f32(1.0e9)), 448.0);
        assert_eq!(e4m3_to_f32(e4m3_from_f32(-470.0)), -448.0);
        // Halfway between two subnormals (1.5 * 2^-9) goes to the even one.
        assert_eq!(e4m3_from_f32(1.5 * 2f32.powi(-9)), 2);
        assert_eq!(e4m3_from_f32(f32::NAN), 0);
        // 248 lies halfway between 240 (1.875 * 2^7, odd mantissa) and 256:
        // the tie goes to the even one, in the next binade.
        assert_eq!(e4m3_to_f32(e4m3_from_f32(248.0)), 256.0);
    }

    #[test]
    fn int8_codes_stay_within_127_and_the_group_max_maps_to_127() {
        let x = [0.5f32, -2.0, 1.0, 0.0];
        let q = quantize(Format::Int8, 32, &x);
        assert_eq!(q.scales, vec![2.0 / 127.0]);
        assert_eq!(q.codes[1] as i8, -127);
        assert_eq!(q.codes[3], 0);
        let zeros = quantize(Format::Int8, 32, &[0.0; 40]);
        assert!(zeros.codes.iter().all(|&c| c == 0) && zeros.scales == vec![0.0, 0.0]);
    }

    #[test]
    fn the_sum_runs_in_rank_order() {
        // Scales of 1 (amax 127): codes are the values themselves.
        let a = vec![127.0f32, 1.0];
        let b = vec![127.0f32, -1.0];
        let s = all_reduce_f32(Format::Int8, 32, &[a, b]);
        assert_eq!(s, vec![254.0, 0.0]);
    }

    #[test]
    fn error_stats_are_relative_to_the_reference() {
        let s = error_stats(&[1.0, 2.0], &[1.0, 2.0]);
        assert_eq!(s.rel_rms, 0.0);
        let s = error_stats(&[1.1, 0.0], &[1.0, 0.0]);
        assert!((s.rel_rms - 0.1).abs() < 1e-6);
    }
}
