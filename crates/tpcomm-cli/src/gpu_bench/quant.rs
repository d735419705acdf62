//! The bench's quantized-wire rows (`--algos int8,fp8`, optionally with a
//! group: `int8/32`; `Wire::parse_quantized` reads the names): their check,
//! which is not the exact one: an output must equal the CPU model of the same arithmetic
//! (tpcomm::quant::model) bit for bit, and its error against the float64
//! sum is reported (rel-RMS, max-rel: docs/quantized.md).

use tpcomm::quant::model;
use tpcomm::quant::Wire;
use tpcomm::DType;

/// What a quantized row's check found.
pub(crate) struct QuantCheck {
    /// Elements that differ from the CPU model.
    pub wrong: usize,
    pub rel_rms: f64,
    pub max_rel: f64,
}

/// Checks `out` (element bytes of `dtype`) against the CPU model of `wire`
/// on `inputs` (every rank's element bytes), as `QuantComm::all_reduce_with`
/// runs it (one-shot or two-shot: `QuantAlgo::Auto`).
pub(crate) fn check(dtype: DType, wire: Wire, out: &[u8], inputs: &[&[u8]]) -> QuantCheck {
    let Some((f, g)) = wire.quantized() else {
        return QuantCheck {
            wrong: 0,
            rel_rms: 0.0,
            max_rel: 0.0,
        };
    };
    let values = |b: &[u8]| -> Vec<f32> {
        b.chunks(dtype.size())
            .map(|c| model::value_of(dtype, bits(c)))
            .collect()
    };
    let xs: Vec<Vec<f32>> = inputs.iter().map(|b| values(b)).collect();
    let count = out.len() / dtype.size();
    let want = if tpcomm::cuda::quant::QuantAlgo::Auto.runs_twoshot(count, inputs.len()) {
        model::all_reduce_twoshot_bits(f, g as usize, dtype, &xs)
    } else {
        model::all_reduce_bits(f, g as usize, dtype, &xs)
    };
    let got: Vec<u32> = out.chunks(dtype.size()).map(bits).collect();
    let wrong = got.iter().zip(&want).filter(|(a, b)| a != b).count();
    let vals: Vec<f32> = got.iter().map(|&b| model::value_of(dtype, b)).collect();
    let e = model::error_stats(&vals, &model::reference_f64(&xs));
    QuantCheck {
        wrong,
        rel_rms: e.rel_rms,
        max_rel: e.max_rel,
    }
}

fn bits(c: &[u8]) -> u32 {
    let mut w = [0u8; 4];
    w[..c.len()].copy_from_slice(c);
    u32::from_le_bytes(w)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_check_accepts_the_model_and_counts_other_bits_wrong() {
        let ins: Vec<Vec<u8>> = (0..2)
            .map(|r| {
                (0..100u16)
                    .flat_map(|i| {
                        half::bf16::from_f32((i as f32 - 50.0) * (r + 1) as f32 / 7.0)
                            .to_bits()
                            .to_le_bytes()
                    })
                    .collect()
            })
            .collect();
        let refs: Vec<&[u8]> = ins.iter().map(|v| &v[..]).collect();
        let xs: Vec<Vec<f32>> = ins
            .iter()
            .map(|b| {
                b.chunks(2)
                    .map(|c| model::value_of(DType::Bf16, bits(c)))
                    .collect()
            })
            .collect();
        let (f, g) = Wire::int8().quantized().unwrap();
        let mut out: Vec<u8> = model::all_reduce_bits(f, g as usize, DType::Bf16, &xs)
            .into_iter()
            .flat_map(|b| (b as u16).to_le_bytes())
            .collect();
        let c = check(DType::Bf16, Wire::int8(), &out, &refs);
        assert_eq!(c.wrong, 0);
        assert!(c.rel_rms < 0.01, "{}", c.rel_rms);
        out[10] ^= 1;
        assert_eq!(check(DType::Bf16, Wire::int8(), &out, &refs).wrong, 1);
    }
}
