//! The CPU model of the quantized all-reduce (tpcomm::quant::model): its
//! rounding against brute force, its error bounds per element, and the
//! error bounds docs/quantized.md states, measured on seeded inputs. No GPU.

use proptest::prelude::*;
use tpcomm::quant::model::{
    self, all_reduce_bits, all_reduce_f32, decode, e4m3_from_f32, e4m3_to_f32, encode, error_stats,
    group_scale, inputs, quantize, reference_f64, value_of,
};
use tpcomm::quant::Format;
use tpcomm::DType;

/// Every finite e4m3 value with its code, for brute force.
fn e4m3_table() -> Vec<(u8, f32)> {
    (0u8..=255)
        .filter(|c| c & 0x7f != 0x7f)
        .map(|c| (c, e4m3_to_f32(c)))
        .collect()
}

/// The nearest e4m3 code to `y` by brute force: the smallest distance, ties
/// to the even mantissa (even code), saturating at +-448.
fn e4m3_nearest(table: &[(u8, f32)], y: f32) -> u8 {
    let y = y.clamp(-448.0, 448.0);
    let mut best: Option<(u8, f64)> = None;
    for &(c, v) in table {
        if (v == 0.0) && (c & 0x80 != 0) != y.is_sign_negative() {
            continue; // zero keeps the sign of y
        }
        let d = (v as f64 - y as f64).abs();
        best = match best {
            None => Some((c, d)),
            Some((bc, bd)) if d < bd || (d == bd && c & 1 == 0 && bc & 1 == 1) => Some((c, d)),
            b => b,
        };
    }
    best.map_or(0, |b| b.0)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn e4m3_encoding_is_the_nearest_code_ties_to_even(bits in any::<u32>()) {
        let y = f32::from_bits(bits);
        prop_assume!(y.is_finite());
        let table = e4m3_table();
        let c = e4m3_from_f32(y);
        let want = e4m3_nearest(&table, y);
        prop_assert_eq!(e4m3_to_f32(c), e4m3_to_f32(want), "y = {:e}: {:#04x} vs {:#04x}", y, c, want);
    }

    #[test]
    fn e4m3_encoding_is_exact_near_the_codes(c in 0u8..=0x7e, neg in any::<bool>(), frac in -0.49f32..0.49) {
        // A value a little off a code (less than half a step) gives that code.
        let v = e4m3_to_f32(c);
        let next = e4m3_to_f32(c + 1);
        let y = v + frac.max(0.0) * (next - v) + frac.min(0.0) * (v - if c == 0 { 0.0 } else { e4m3_to_f32(c - 1) });
        let y = if neg { -y } else { y };
        let got = e4m3_from_f32(y);
        prop_assert_eq!(e4m3_to_f32(got).abs(), v, "c = {:#04x}, y = {:e}", c, y);
    }

    #[test]
    fn int8_codes_are_the_nearest_integer_of_the_scaled_value(xs in prop::collection::vec(-1.0e6f32..1.0e6, 1..300), g in prop::sample::select(vec![32usize, 64, 128])) {
        let q = quantize(Format::Int8, g, &xs);
        for (i, &x) in xs.iter().enumerate() {
            let grp = &xs[i / g * g..((i / g + 1) * g).min(xs.len())];
            let amax = grp.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            let (scale, inv) = group_scale(Format::Int8, amax);
            prop_assert_eq!(q.scales[i / g], scale);
            let code = q.codes[i] as i8 as i32;
            prop_assert!(code.abs() <= 127);
            // Nearest to the f32 product (what the kernel rounds).
            let p = (x * inv) as f64;
            prop_assert!((code as f64 - p).abs() <= 0.5, "x {} inv {} code {}", x, inv, code);
            // And so within half a step of x, plus the roundings of the
            // scales (scale * inv is 1 only to a few ulps) and the product.
            let dq = decode(Format::Int8, q.codes[i]) as f64 * scale as f64;
            prop_assert!((dq - x as f64).abs() <= scale as f64 * (0.5 + 1e-3), "x {} dq {} scale {}", x, dq, scale);
        }
    }

    #[test]
    fn fp8_dequantized_values_are_within_a_sixteenth_of_the_input(xs in prop::collection::vec(-1.0e4f32..1.0e4, 1..300)) {
        let g = 32;
        let q = quantize(Format::Fp8E4m3, g, &xs);
        for (i, &x) in xs.iter().enumerate() {
            let scale = q.scales[i / g] as f64;
            let dq = model::dequantized(Format::Fp8E4m3, g, &q, i) as f64;
            // Half an ulp of 3 mantissa bits (2^-4 relative) for normals, half
            // the subnormal step (2^-10 of the scale) below, plus f32 rounding.
            let bound = (x as f64).abs() * (1.0 / 16.0 + 1e-6) + scale * (1.0 / 1024.0) + 1e-30;
            prop_assert!((dq - x as f64).abs() <= bound, "x {} dq {} scale {}", x, dq, scale);
        }
    }

    #[test]
    fn the_sum_is_the_rank_ordered_f32_sum_of_the_dequantized_inputs(
        world in 2usize..=8,
        n in 1usize..400,
        seed in any::<u64>(),
        fp8 in any::<bool>(),
    ) {
        let f = if fp8 { Format::Fp8E4m3 } else { Format::Int8 };
        let mut rng = inputs::Rng::new(seed);
        let xs: Vec<Vec<f32>> = (0..world)
            .map(|_| inputs::sample(&mut rng, inputs::Dist::Outliers, DType::Bf16, n))
            .collect();
        let qs: Vec<_> = xs.iter().map(|x| quantize(f, 64, x)).collect();
        let sum = all_reduce_f32(f, 64, &xs);
        prop_assert_eq!(sum.len(), n);
        for (i, s) in sum.iter().enumerate() {
            let mut acc = model::dequantized(f, 64, &qs[0], i);
            for q in &qs[1..] {
                acc += model::dequantized(f, 64, q, i);
            }
            prop_assert_eq!(s.to_bits(), acc.to_bits());
        }
        // And the output bits are that sum rounded once.
        let bits = all_reduce_bits(f, 64, DType::Bf16, &xs);
        for (b, s) in bits.iter().zip(&sum) {
            prop_assert_eq!(*b, half::bf16::from_f32(*s).to_bits() as u32);
        }
    }
}

#[test]
fn two_shot_is_the_one_shot_sum_quantized_again_by_its_owner() {
    let mut rng = inputs::Rng::new(7);
    let xs: Vec<Vec<f32>> = (0..3)
        .map(|_| inputs::sample(&mut rng, inputs::Dist::Gaussian, DType::F32, 5000))
        .collect();
    let sum = all_reduce_f32(Format::Int8, 64, &xs);
    let again = quantize(Format::Int8, 64, &sum);
    let two = model::all_reduce_twoshot_f32(Format::Int8, 64, &xs);
    for (i, v) in two.iter().enumerate() {
        assert_eq!(
            v.to_bits(),
            model::dequantized(Format::Int8, 64, &again, i).to_bits()
        );
    }
    assert!(model::twoshot_fits(3 * 4096, 3) && !model::twoshot_fits(2 * 4096, 3));
}

#[test]
fn int8_never_produces_minus_128_and_nan_inputs_give_code_zero() {
    assert_eq!(encode(Format::Int8, -1.0e30, 1.0), (-127i8) as u8);
    assert_eq!(encode(Format::Int8, f32::NAN, 1.0), 0);
    assert_eq!(encode(Format::Fp8E4m3, f32::NAN, 1.0), 0);
    assert_eq!(value_of(DType::F16, 0x3c00), 1.0);
}

/// The bounds docs/quantized.md states, at 2, 4 and 8 ranks, measured on the
/// same seeded inputs as `cargo run --example quant_error`.
#[test]
fn measured_errors_are_within_the_documented_bounds() {
    let n = 1 << 16;
    for world in [2usize, 4, 8] {
        for (f, twoshot, bound) in [
            (Format::Int8, false, 0.01),
            (Format::Fp8E4m3, false, 0.03),
            (Format::Int8, true, 0.01),
            (Format::Fp8E4m3, true, 0.04),
        ] {
            for g in [32usize, 64, 128] {
                let mut rng = inputs::Rng::new(0x5eed + world as u64);
                let xs: Vec<Vec<f32>> = (0..world)
                    .map(|_| inputs::sample(&mut rng, inputs::Dist::Gaussian, DType::Bf16, n))
                    .collect();
                let bits = if twoshot {
                    model::all_reduce_twoshot_bits(f, g, DType::Bf16, &xs)
                } else {
                    all_reduce_bits(f, g, DType::Bf16, &xs)
                };
                let out: Vec<f32> = bits.into_iter().map(|b| value_of(DType::Bf16, b)).collect();
                let e = error_stats(&out, &reference_f64(&xs));
                assert!(
                    e.rel_rms <= bound,
                    "{} g{g} two-shot {twoshot} at {world} ranks: rel RMS {:.4} above {bound}",
                    f.name(),
                    e.rel_rms
                );
            }
        }
    }
}
