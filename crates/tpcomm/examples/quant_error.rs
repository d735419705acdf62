//! Prints docs/quantized.md's error table: the quantized all-reduce's
//! relative RMS and max error against a float64 reference, computed with the
//! bit-exact CPU model of the kernels (tpcomm::quant::model), at 2, 4 and 8
//! ranks, for Gaussian inputs and Gaussian inputs with 100x outliers, bf16.
//! Also the exact bf16 all-reduce (f32 sum rounded once) for comparison.
//!
//! cargo run --release -p tpcomm --example quant_error [-- ELEMENTS]

use tpcomm::quant::model::{
    all_reduce_bits, all_reduce_twoshot_bits, error_stats, inputs, reference_f64, value_of,
};
use tpcomm::quant::Format;
use tpcomm::DType;

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1 << 20);
    let dtype = DType::Bf16;
    println!("{n} elements per rank, bf16 in and out, seeded inputs (seed 0x5eed + ranks)");
    println!();
    println!("| ranks | inputs | wire | group | rel-RMS | max-rel |");
    println!("|---|---|---|---|---|---|");
    for dist in [inputs::Dist::Gaussian, inputs::Dist::Outliers] {
        for world in [2usize, 4, 8] {
            let mut rng = inputs::Rng::new(0x5eed + world as u64);
            let xs: Vec<Vec<f32>> = (0..world)
                .map(|_| inputs::sample(&mut rng, dist, dtype, n))
                .collect();
            let reference = reference_f64(&xs);
            // Exact: the f32 sum in rank order, rounded once to bf16.
            let exact: Vec<f32> = (0..n)
                .map(|i| {
                    let s = xs[1..].iter().fold(xs[0][i], |a, x| a + x[i]);
                    value_of(dtype, tpcomm::quant::model::round_to(dtype, s))
                })
                .collect();
            let e = error_stats(&exact, &reference);
            println!(
                "| {world} | {} | exact bf16 | - | {:.3}% | {:.3} |",
                dist.name(),
                100.0 * e.rel_rms,
                e.max_rel
            );
            for twoshot in [false, true] {
                for f in [Format::Int8, Format::Fp8E4m3] {
                    for g in [32usize, 64, 128] {
                        let bits = if twoshot {
                            all_reduce_twoshot_bits(f, g, dtype, &xs)
                        } else {
                            all_reduce_bits(f, g, dtype, &xs)
                        };
                        let out: Vec<f32> = bits.into_iter().map(|b| value_of(dtype, b)).collect();
                        let e = error_stats(&out, &reference);
                        println!(
                            "| {world} | {} | {}{} | {g} | {:.3}% | {:.3} |",
                            dist.name(),
                            f.name(),
                            if twoshot { " two-shot" } else { "" },
                            100.0 * e.rel_rms,
                            e.max_rel
                        );
                    }
                }
            }
        }
    }
}
