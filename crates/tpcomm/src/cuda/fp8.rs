//! The two fp8 types NCCL has (`ncclFloat8e4m3` = 10, `ncclFloat8e5m2` =
//! 11), as the gathered reduction kernels decode and encode them
//! (kernels/gathered.cu, `fp8_to_f32` and `f32_to_fp8`): the CPU model of
//! those two functions, step for step, and the tests' proof that they are
//! the formats' definition.
//!
//! - e4m3: sign, 4 exponent bits (bias 7), 3 mantissa bits; no infinities;
//!   S.1111.111 is NaN (0x7f, 0xff); the largest value 448 (0x7e).
//! - e5m2: sign, 5 exponent bits (bias 15), 2 mantissa bits, IEEE-like:
//!   S.11111.00 is infinity, S.11111.xx (xx > 0) NaN; the largest finite
//!   value 57344 (0x7b).
//!
//! Both have subnormals. Decoding is exact. Encoding rounds to nearest,
//! ties to even, and saturates as CUDA's `__nv_fp8_e4m3(float)` and
//! `__nv_fp8_e5m2(float)` do (`__NV_SATFINITE`): a magnitude that rounds
//! past the largest finite value, infinity included, gives the largest
//! finite value with its sign; NaN gives 0x7f; a magnitude of at most half
//! the smallest subnormal gives a zero with its sign.

/// One of the two formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fp8 {
    E4M3,
    E5M2,
}

impl Fp8 {
    /// Mantissa bits.
    pub const fn man_bits(self) -> u32 {
        match self {
            Fp8::E4M3 => 3,
            Fp8::E5M2 => 2,
        }
    }

    /// The exponent's bias.
    pub const fn bias(self) -> u32 {
        match self {
            Fp8::E4M3 => 7,
            Fp8::E5M2 => 15,
        }
    }

    /// The code of the largest finite value.
    pub const fn max_code(self) -> u8 {
        match self {
            Fp8::E4M3 => 0x7e,
            Fp8::E5M2 => 0x7b,
        }
    }

    /// The code every NaN encodes to.
    pub const NAN: u8 = 0x7f;

    /// The f32 value of code `c` (exact: every code is an f32).
    pub fn decode(self, c: u8) -> f32 {
        let (mb, bias) = (self.man_bits(), self.bias());
        let c = c as u32;
        let sign = (c & 0x80) << 24;
        let mag = c & 0x7f;
        let exp = mag >> mb;
        let man = mag & ((1 << mb) - 1);
        if self == Fp8::E4M3 && mag == 0x7f {
            return f32::from_bits(sign | 0x7fc0_0000);
        }
        if self == Fp8::E5M2 && exp == 31 {
            return f32::from_bits(sign | if man == 0 { 0x7f80_0000 } else { 0x7fc0_0000 });
        }
        if exp == 0 {
            let v = man as f32 * f32::from_bits((128 - bias - mb) << 23);
            return f32::from_bits(sign | v.to_bits());
        }
        f32::from_bits(sign | ((mag << (23 - mb)) + ((127 - bias) << 23)))
    }

    /// The code of `f`, rounded to nearest (ties to even), saturated.
    pub fn encode(self, f: f32) -> u8 {
        let (mb, bias) = (self.man_bits(), self.bias());
        let x = f.to_bits();
        let sign = (x >> 24) & 0x80;
        let ax = x & 0x7fff_ffff;
        if ax > 0x7f80_0000 {
            return Self::NAN;
        }
        let code = if ax >= (128 - bias) << 23 {
            // The normal codes: rebias, round the mantissa to `mb` bits (a
            // carry moves into the exponent), saturate.
            let sh = 23 - mb;
            let mut t = ax - ((127 - bias) << 23);
            t += (1 << (sh - 1)) - 1 + ((t >> sh) & 1);
            (t >> sh).min(self.max_code() as u32)
        } else if ax >= 0x0080_0000 {
            // The subnormal codes: the value m x 2^(e - 150) in units of
            // the smallest subnormal, m >> s, rounded.
            let m = (ax & 0x7f_ffff) | 0x80_0000;
            let s = 151 - bias - mb - (ax >> 23);
            if s > 24 {
                0
            } else {
                let mut q = m >> s;
                let rem = m & ((1 << s) - 1);
                let half = 1 << (s - 1);
                if rem > half || (rem == half && q & 1 == 1) {
                    q += 1;
                }
                q
            }
        } else {
            0
        };
        (sign | code) as u8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOTH: [Fp8; 2] = [Fp8::E4M3, Fp8::E5M2];

    /// The format's definition, in f64: (-1)^s x 2^(e - bias) x 1.m, or
    /// 2^(1 - bias) x 0.m for e = 0; NaN and infinity as the module says.
    fn definition(f: Fp8, c: u8) -> f64 {
        let (mb, bias) = (f.man_bits() as i32, f.bias() as i32);
        let s = if c & 0x80 != 0 { -1.0 } else { 1.0 };
        let e = ((c & 0x7f) >> mb) as i32;
        let m = (c & ((1 << mb) - 1)) as f64;
        let all_ones = (1 << (7 - mb)) - 1;
        match f {
            Fp8::E4M3 if c & 0x7f == 0x7f => return f64::NAN,
            Fp8::E5M2 if e == all_ones => {
                return if m == 0.0 {
                    s * f64::INFINITY
                } else {
                    f64::NAN
                }
            }
            _ => {}
        }
        let unit = (1 << mb) as f64;
        if e == 0 {
            s * 2f64.powi(1 - bias) * (m / unit)
        } else {
            s * 2f64.powi(e - bias) * (1.0 + m / unit)
        }
    }

    /// Round to nearest by search: the finite code nearest `x`, of `x`'s
    /// sign; a tie goes to the even code. Past the largest value the grid
    /// goes on one more step (the code after it, whose mantissa is even for
    /// e5m2's infinity and odd for e4m3's NaN slot), and a result there is
    /// saturated: what round-to-nearest-even then saturate gives.
    fn nearest(f: Fp8, x: f64) -> u8 {
        if x.is_nan() {
            return Fp8::NAN;
        }
        let sign = if x.is_sign_negative() { 0x80u8 } else { 0 };
        let a = x.abs();
        let max = f.max_code();
        let top = definition(f, max);
        let ulp = top - definition(f, max - 1);
        // (code, value) of every candidate, the virtual one after max last.
        let mut best: (u8, f64) = (0, 0.0);
        for c in 1..=max + 1 {
            let v = if c == max + 1 {
                top + ulp
            } else {
                definition(f, c)
            };
            let (d, db) = ((v - a).abs(), (best.1 - a).abs());
            if d < db || (d == db && c % 2 == 0) {
                best = (c, v);
            }
        }
        let code = if a.is_infinite() {
            max
        } else {
            best.0.min(max)
        };
        sign | code
    }

    #[test]
    fn every_code_decodes_to_its_definition() {
        for f in BOTH {
            for c in 0..=255u8 {
                let (got, want) = (f.decode(c) as f64, definition(f, c));
                if want.is_nan() {
                    assert!(got.is_nan(), "{f:?} {c:#04x}: {got}");
                } else {
                    assert_eq!(got, want, "{f:?} {c:#04x}");
                    assert_eq!(
                        got.is_sign_negative(),
                        c & 0x80 != 0,
                        "{f:?} {c:#04x}: sign"
                    );
                }
            }
        }
        assert_eq!(Fp8::E4M3.decode(0x7e), 448.0);
        assert_eq!(Fp8::E4M3.decode(0x01), 2f32.powi(-9));
        assert!(Fp8::E4M3.decode(0xff).is_nan());
        assert_eq!(Fp8::E5M2.decode(0x7b), 57344.0);
        assert_eq!(Fp8::E5M2.decode(0x01), 2f32.powi(-16));
        assert_eq!(Fp8::E5M2.decode(0xfc), f32::NEG_INFINITY);
        assert!(Fp8::E5M2.decode(0x7d).is_nan());
    }

    #[test]
    fn all_256_codes_round_trip() {
        for f in BOTH {
            for c in 0..=255u8 {
                let v = f.decode(c);
                let back = f.encode(v);
                if v.is_nan() {
                    assert_eq!(back, Fp8::NAN, "{f:?} {c:#04x}: NaN");
                } else if v.is_infinite() {
                    // e5m2's infinities saturate, as __NV_SATFINITE does.
                    assert_eq!(back, (c & 0x80) | f.max_code(), "{f:?} {c:#04x}");
                } else {
                    assert_eq!(back, c, "{f:?} {c:#04x} ({v})");
                }
            }
        }
    }

    #[test]
    fn ties_go_to_even_and_their_neighbours_to_the_nearer() {
        for f in BOTH {
            for c in 0..f.max_code() {
                for sign in [0u8, 0x80] {
                    let (lo, hi) = (f.decode(sign | c) as f64, f.decode(sign | (c + 1)) as f64);
                    // Every midpoint of two codes is an f32.
                    let mid = ((lo + hi) / 2.0) as f32;
                    assert_eq!(mid as f64, (lo + hi) / 2.0);
                    let even = if c % 2 == 0 { c } else { c + 1 };
                    assert_eq!(f.encode(mid), sign | even, "{f:?} tie {mid}");
                    let towards_zero = f32::from_bits(mid.to_bits() - 1);
                    let away = f32::from_bits(mid.to_bits() + 1);
                    if mid != 0.0 {
                        assert_eq!(f.encode(towards_zero), sign | c, "{f:?} below {mid}");
                        assert_eq!(f.encode(away), sign | (c + 1), "{f:?} above {mid}");
                    }
                }
            }
        }
        // 1 + 1/16 is half way from 1 to e4m3's next (1 + 1/8): even is 1.
        assert_eq!(Fp8::E4M3.encode(1.0625), 0x38);
        assert_eq!(Fp8::E4M3.encode(1.1875), 0x3a);
        // Half the smallest subnormal ties to zero, with the sign.
        assert_eq!(Fp8::E4M3.encode(2f32.powi(-10)), 0x00);
        assert_eq!(Fp8::E4M3.encode(-(2f32.powi(-10))), 0x80);
        assert_eq!(Fp8::E5M2.encode(2f32.powi(-17) * 1.0001), 0x01);
    }

    #[test]
    fn large_magnitudes_saturate_and_nan_is_0x7f() {
        let e = Fp8::E4M3;
        for (x, c) in [
            (448.0, 0x7e),
            (463.9, 0x7e),
            (464.0, 0x7e), // the tie between 448 (even) and the NaN slot
            (464.1, 0x7e),
            (1e30, 0x7e),
            (f32::INFINITY, 0x7e),
            (-500.0, 0xfe),
            (f32::NEG_INFINITY, 0xfe),
            (f32::NAN, 0x7f),
            (-f32::NAN, 0x7f),
        ] {
            assert_eq!(e.encode(x), c, "e4m3 {x}");
        }
        let e = Fp8::E5M2;
        for (x, c) in [
            (57344.0, 0x7b),
            (61439.0, 0x7b),
            (61440.0, 0x7b), // rounds to infinity's slot, then saturates
            (1e9, 0x7b),
            (f32::INFINITY, 0x7b),
            (-70000.0, 0xfb),
            (f32::NEG_INFINITY, 0xfb),
            (f32::NAN, 0x7f),
        ] {
            assert_eq!(e.encode(x), c, "e5m2 {x}");
        }
        assert_eq!(Fp8::E4M3.encode(-0.0), 0x80);
        assert_eq!(Fp8::E5M2.encode(f32::from_bits(1)), 0x00);
    }

    /// The kernel's integer rounding against the search, over f32 bit
    /// patterns from every binade (a fixed pseudo-random walk, both signs).
    #[test]
    fn encoding_is_round_to_nearest_even_for_any_f32() {
        let mut z = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut x = z;
            x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            x ^ (x >> 31)
        };
        for f in BOTH {
            for _ in 0..200_000 {
                let r = next();
                // Exponents around fp8's range (2^-25 .. 2^20) most often.
                let bits = if r & 3 == 0 {
                    r as u32
                } else {
                    let e = 102 + ((r >> 8) % 46) as u32;
                    ((r as u32) & 0x8000_0000) | (e << 23) | ((r >> 32) as u32 & 0x7f_ffff)
                };
                let x = f32::from_bits(bits);
                assert_eq!(
                    f.encode(x),
                    nearest(f, x as f64),
                    "{f:?} {x:e} ({bits:#010x})"
                );
            }
        }
    }
}
