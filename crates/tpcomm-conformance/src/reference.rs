//! Element types, seeded inputs (never zero) and the CPU reference with NCCL's semantics.
//!
//! Floating types are reduced in float64 and compared with a tolerance of
//! `(world + 2) * u * sum|terms|` where `u` is the type's unit roundoff (fp32 2^-24,
//! fp64 2^-53, fp16 2^-11, bf16 2^-8, fp8 e4m3 2^-4, e5m2 2^-3): it covers a reduction in
//! the element type rounded at every step, in any order, and avg's pre-multiplication by
//! 1/world. max and min are exact; integers are exact (wrapping in their width, avg = sum
//! in the type then division truncating toward zero, as NCCL's SumPostDiv).

use half::{bf16, f16};

pub const NAMES: [&str; 12] = [
    "int8", "uint8", "int32", "uint32", "int64", "uint64", "fp16", "fp32", "fp64", "bf16",
    "fp8e4m3", "fp8e5m2",
];
pub const OPS: [&str; 5] = ["sum", "prod", "max", "min", "avg"];

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Dt(pub i32);

impl Dt {
    pub fn name(self) -> &'static str {
        NAMES[self.0 as usize]
    }
    pub fn size(self) -> usize {
        [1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1][self.0 as usize]
    }
    pub fn is_float(self) -> bool {
        self.0 >= 6
    }
    fn signed(self) -> bool {
        matches!(self.0, 0 | 2 | 4)
    }
    pub fn unit_roundoff(self) -> f64 {
        match self.0 {
            6 => 2f64.powi(-11),
            7 => 2f64.powi(-24),
            8 => 2f64.powi(-53),
            9 => 2f64.powi(-8),
            10 => 2f64.powi(-4),
            11 => 2f64.powi(-3),
            _ => 0.0,
        }
    }
    /// The value of one element's bytes (floats decoded; integers as their exact value).
    pub fn decode(self, b: &[u8]) -> f64 {
        let u = self.bits(b);
        match self.0 {
            0 => u as u8 as i8 as f64,
            1 => u as u8 as f64,
            2 => u as u32 as i32 as f64,
            3 => u as u32 as f64,
            4 => u as i64 as f64,
            5 => u as f64,
            6 => f16::from_bits(u as u16).to_f64(),
            7 => f32::from_bits(u as u32) as f64,
            8 => f64::from_bits(u),
            9 => bf16::from_bits(u as u16).to_f64(),
            10 => fp8_e4m3(u as u8),
            _ => fp8_e5m2(u as u8),
        }
    }
    /// The element's bytes as an unsigned number (little endian).
    pub fn bits(self, b: &[u8]) -> u64 {
        let mut v = 0u64;
        for (i, x) in b[..self.size()].iter().enumerate() {
            v |= (*x as u64) << (8 * i);
        }
        v
    }
    fn mask(self) -> u64 {
        if self.size() == 8 {
            u64::MAX
        } else {
            (1u64 << (8 * self.size())) - 1
        }
    }
    /// Sign-extended integer value of `bits`.
    fn int(self, bits: u64) -> i128 {
        let w = 8 * self.size() as u32;
        if self.signed() {
            ((bits << (64 - w)) as i64 >> (64 - w)) as i128
        } else {
            bits as i128
        }
    }
    /// The table of values inputs are drawn from, as (bits, value): never zero, exact in the
    /// type, magnitudes 0.5..2 for floats so products of 8 stay in range.
    pub fn table(self) -> Vec<(u64, f64)> {
        match self.0 {
            0 | 2 | 4 => [-3i64, -2, -1, 1, 2, 3]
                .iter()
                .map(|&v| ((v as u64) & self.mask(), v as f64))
                .collect(),
            1 | 3 | 5 => (1u64..=6).map(|v| (v, v as f64)).collect(),
            7 | 8 => (0..64)
                .flat_map(|k| {
                    let v = (512 + 24 * k) as f64 / 1024.0;
                    [v, -v]
                })
                .map(|v| {
                    (
                        if self.0 == 7 {
                            (v as f32).to_bits() as u64
                        } else {
                            v.to_bits()
                        },
                        v,
                    )
                })
                .collect(),
            _ => {
                let n = if self.size() == 1 { 256u64 } else { 65536 };
                (0..n)
                    .map(|b| {
                        let bytes = b.to_le_bytes();
                        (b, self.decode(&bytes))
                    })
                    .filter(|(_, v)| v.is_finite() && v.abs() >= 0.5 && v.abs() <= 2.0)
                    .collect()
            }
        }
    }
    /// Bytes of `v` (exact only for values of the table and small scalars).
    pub fn encode(self, v: f64) -> u64 {
        match self.0 {
            0..=5 => (v as i64 as u64) & self.mask(),
            6 => f16::from_f64(v).to_bits() as u64,
            7 => (v as f32).to_bits() as u64,
            8 => v.to_bits(),
            9 => bf16::from_f64(v).to_bits() as u64,
            _ => (0u64..256)
                .filter(|b| self.decode(&b.to_le_bytes()).is_finite())
                .min_by(|a, b| {
                    let da = (self.decode(&a.to_le_bytes()) - v).abs();
                    let db = (self.decode(&b.to_le_bytes()) - v).abs();
                    da.total_cmp(&db)
                })
                .unwrap_or(0),
        }
    }
}

pub fn fp8_e4m3(b: u8) -> f64 {
    let s = if b & 0x80 != 0 { -1.0 } else { 1.0 };
    let e = ((b >> 3) & 0xf) as i32;
    let m = (b & 7) as f64;
    if e == 15 && m == 7.0 {
        return f64::NAN;
    }
    if e == 0 {
        s * m / 8.0 * 2f64.powi(-6)
    } else {
        s * (1.0 + m / 8.0) * 2f64.powi(e - 7)
    }
}

pub fn fp8_e5m2(b: u8) -> f64 {
    let s = if b & 0x80 != 0 { -1.0 } else { 1.0 };
    let e = ((b >> 2) & 0x1f) as i32;
    let m = (b & 3) as f64;
    if e == 31 {
        return if m == 0.0 {
            s * f64::INFINITY
        } else {
            f64::NAN
        };
    }
    if e == 0 {
        s * m / 4.0 * 2f64.powi(-14)
    } else {
        s * (1.0 + m / 4.0) * 2f64.powi(e - 15)
    }
}

/// A counter-based generator: element `i` of rank `rank`'s input for `salt` under `seed`.
pub fn mix(seed: u64, salt: u64, rank: u64, i: u64) -> u64 {
    let mut z = seed
        ^ salt.wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ rank.wrapping_mul(0xbf58_476d_1ce4_e5b9)
        ^ i.wrapping_mul(0x94d0_49bb_1331_11eb);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A rank's input: `count` elements drawn from the type's table.
pub struct Inputs {
    pub dt: Dt,
    pub seed: u64,
    pub salt: u64,
    table: Vec<(u64, f64)>,
}

impl Inputs {
    pub fn new(dt: Dt, seed: u64, salt: u64) -> Inputs {
        Inputs {
            dt,
            seed,
            salt,
            table: dt.table(),
        }
    }
    pub fn pick(&self, rank: usize, i: usize) -> (u64, f64) {
        let t = &self.table;
        t[(mix(self.seed, self.salt, rank as u64, i as u64) % t.len() as u64) as usize]
    }
    /// Bytes of rank `rank`'s elements `start..start+count`.
    pub fn bytes(&self, rank: usize, start: usize, count: usize) -> Vec<u8> {
        let sz = self.dt.size();
        let mut v = vec![0u8; count * sz];
        for i in 0..count {
            let b = self.pick(rank, start + i).0.to_le_bytes();
            v[i * sz..(i + 1) * sz].copy_from_slice(&b[..sz]);
        }
        v
    }
}

/// A reduction: one of NCCL's ops, or a pre-multiplied sum with each rank's scalar.
#[derive(Clone, Debug)]
pub enum Op {
    Builtin(i32),
    PreMulSum(Vec<f64>),
}

impl Op {
    pub fn name(&self) -> &'static str {
        match self {
            Op::Builtin(o) => OPS[*o as usize],
            Op::PreMulSum(_) => "premulsum",
        }
    }
}

/// Checks `got` (count elements) against the reduction over `world` ranks of input elements
/// `start..start+count` (at most 64 ranks); returns (wrong elements, first wrong description).
/// Large outputs are checked in slices on several threads (about one per core the `world`
/// ranks leave free: every rank checks its own output at once); only a wrong element is
/// described in words.
pub fn check_reduction(
    inp: &Inputs,
    op: &Op,
    world: usize,
    start: usize,
    got: &[u8],
) -> (usize, Option<String>) {
    let sz = inp.dt.size();
    let n = got.len() / sz;
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    let parts = (cores / world.max(1))
        .clamp(1, 16)
        .min(n.div_ceil(1 << 16))
        .max(1);
    if parts == 1 {
        return check_slice(inp, op, world, start, 0, &got[..n * sz]);
    }
    let per = n.div_ceil(parts);
    let results: Vec<(usize, Option<String>)> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..parts)
            .map(|p| {
                let lo = (p * per).min(n);
                let hi = ((p + 1) * per).min(n);
                let slice = &got[lo * sz..hi * sz];
                sc.spawn(move || check_slice(inp, op, world, start, lo, slice))
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| (1, Some("a checking thread panicked".into())))
            })
            .collect()
    });
    let wrong = results.iter().map(|r| r.0).sum();
    let first = results.into_iter().find_map(|r| r.1);
    (wrong, first)
}

/// [`check_reduction`] of output elements `at..` (`got` holds them), numbered from 0 in
/// the output.
fn check_slice(
    inp: &Inputs,
    op: &Op,
    world: usize,
    start: usize,
    at: usize,
    got: &[u8],
) -> (usize, Option<String>) {
    let sz = inp.dt.size();
    let mut wrong = 0;
    let mut first = None;
    for (k, g) in got.chunks_exact(sz).enumerate() {
        let i = at + k;
        if let Some(miss) = check_one(inp, op, world, start + i, g) {
            wrong += 1;
            if first.is_none() {
                first = Some(format!("element {i}: want {miss}"));
            }
        }
    }
    (wrong, first)
}

/// A wrong element: what was wanted and what came, put into words only for the first
/// (formatting every element's text would cost more than the check).
#[derive(Clone, Copy)]
enum Miss {
    Float { want: f64, tol: f64, got: f64 },
    Int { want: i128, got: i128 },
}

impl std::fmt::Display for Miss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Miss::Float { want, tol, got } => write!(f, "{want} (tol {tol:e}) got {got}"),
            Miss::Int { want, got } => write!(f, "{want} got {got}"),
        }
    }
}

/// `None` when `g` is the reduction of input element `e` over `world` ranks; else the miss.
fn check_one(inp: &Inputs, op: &Op, world: usize, e: usize, g: &[u8]) -> Option<Miss> {
    let dt = inp.dt;
    if dt.is_float() {
        let mut buf = [0f64; 64];
        for (r, v) in buf.iter_mut().enumerate().take(world) {
            *v = inp.pick(r, e).1;
        }
        let vals = &buf[..world];
        let (want, mag) = match op {
            Op::Builtin(0) => (
                vals.iter().sum::<f64>(),
                vals.iter().map(|v| v.abs()).sum::<f64>(),
            ),
            Op::Builtin(1) => {
                let p: f64 = vals.iter().product();
                (p, p.abs())
            }
            Op::Builtin(2) => (vals.iter().cloned().fold(f64::MIN, f64::max), 0.0),
            Op::Builtin(3) => (vals.iter().cloned().fold(f64::MAX, f64::min), 0.0),
            Op::Builtin(_) => (
                vals.iter().sum::<f64>() / world as f64,
                vals.iter().map(|v| v.abs()).sum::<f64>() / world as f64,
            ),
            Op::PreMulSum(s) => (
                vals.iter().zip(s).map(|(v, s)| v * s).sum::<f64>(),
                vals.iter().zip(s).map(|(v, s)| (v * s).abs()).sum::<f64>(),
            ),
        };
        let tol = (world as f64 + 2.0) * dt.unit_roundoff() * mag;
        let v = dt.decode(g);
        if (v - want).abs() <= tol {
            None
        } else {
            Some(Miss::Float { want, tol, got: v })
        }
    } else {
        let mut buf = [0u64; 64];
        for (r, v) in buf.iter_mut().enumerate().take(world) {
            *v = inp.pick(r, e).0;
        }
        let bits = &buf[..world];
        let m = dt.mask();
        let want: u64 = match op {
            Op::Builtin(0) | Op::Builtin(4) => {
                let s = bits.iter().fold(0u64, |a, b| a.wrapping_add(*b)) & m;
                if let Op::Builtin(4) = op {
                    ((dt.int(s) / world as i128) as u64) & m
                } else {
                    s
                }
            }
            Op::Builtin(1) => bits.iter().fold(1u64, |a, b| a.wrapping_mul(*b)) & m,
            Op::Builtin(2) => *bits.iter().max_by_key(|b| dt.int(**b)).unwrap_or(&0),
            Op::Builtin(_) => *bits.iter().min_by_key(|b| dt.int(**b)).unwrap_or(&0),
            Op::PreMulSum(s) => {
                bits.iter().zip(s).fold(0u64, |a, (b, s)| {
                    a.wrapping_add(b.wrapping_mul(*s as i64 as u64))
                }) & m
            }
        };
        let v = dt.bits(g);
        if v == want {
            None
        } else {
            Some(Miss::Int {
                want: dt.int(want),
                got: dt.int(v),
            })
        }
    }
}

/// Byte-exact comparison; (wrong elements, first description).
pub fn check_exact(dt: Dt, want: &[u8], got: &[u8]) -> (usize, Option<String>) {
    let sz = dt.size();
    let mut wrong = 0;
    let mut first = None;
    for (i, (w, g)) in want.chunks(sz).zip(got.chunks(sz)).enumerate() {
        if w != g {
            wrong += 1;
            if first.is_none() {
                first = Some(format!(
                    "element {i}: want {} got {}",
                    dt.decode(w),
                    dt.decode(g)
                ));
            }
        }
    }
    (wrong, first)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_are_exact_and_never_zero() {
        for t in 0..12 {
            let dt = Dt(t);
            let tab = dt.table();
            assert!(tab.len() >= 6, "{}", dt.name());
            for (b, v) in tab {
                assert_ne!(v, 0.0);
                assert_eq!(dt.decode(&b.to_le_bytes()), v, "{} bits {b:#x}", dt.name());
                assert_eq!(dt.encode(v), b, "{} value {v}", dt.name());
            }
        }
    }

    #[test]
    fn fp8_decoding_matches_the_formats() {
        assert_eq!(fp8_e4m3(0x7e), 448.0);
        assert!(fp8_e4m3(0x7f).is_nan());
        assert_eq!(fp8_e4m3(0x38), 1.0);
        assert_eq!(fp8_e5m2(0x3c), 1.0);
        assert_eq!(fp8_e5m2(0x7b), 57344.0);
        assert!(fp8_e5m2(0x7c).is_infinite());
    }

    fn reduced(
        inp: &Inputs,
        op: &Op,
        world: usize,
        n: usize,
        f: impl Fn(&[f64]) -> f64,
    ) -> Vec<u8> {
        let dt = inp.dt;
        let mut out = Vec::new();
        for i in 0..n {
            let vals: Vec<f64> = (0..world).map(|r| inp.pick(r, i).1).collect();
            let _ = op;
            out.extend_from_slice(&dt.encode(f(&vals)).to_le_bytes()[..dt.size()]);
        }
        out
    }

    #[test]
    fn a_correct_reduction_passes_and_a_wrong_one_fails() {
        let inp = Inputs::new(Dt(7), 1, 2);
        let good = reduced(&inp, &Op::Builtin(0), 4, 100, |v| v.iter().sum());
        assert_eq!(check_reduction(&inp, &Op::Builtin(0), 4, 0, &good).0, 0);
        let mut bad = good.clone();
        bad[40] ^= 0x40;
        assert_eq!(check_reduction(&inp, &Op::Builtin(0), 4, 0, &bad).0, 1);
        let mx = reduced(&inp, &Op::Builtin(2), 4, 100, |v| {
            v.iter().cloned().fold(f64::MIN, f64::max)
        });
        assert_eq!(check_reduction(&inp, &Op::Builtin(2), 4, 0, &mx).0, 0);
        assert!(check_reduction(&inp, &Op::Builtin(3), 4, 0, &mx).0 > 0);
    }

    #[test]
    fn a_large_output_checked_in_slices_counts_every_wrong_element_and_names_the_first() {
        // One rank: the reduction is the input itself. 300,000 elements are more than one
        // slice wherever the machine has 2 cores or more.
        let inp = Inputs::new(Dt(7), 9, 3);
        let n = 300_000;
        let good = inp.bytes(0, 0, n);
        assert_eq!(
            check_reduction(&inp, &Op::Builtin(0), 1, 0, &good),
            (0, None)
        );
        let mut bad = good.clone();
        for e in [250_000usize, 5, 150_000, 299_999] {
            bad[e * 4 + 3] ^= 0x40;
        }
        let (wrong, first) = check_reduction(&inp, &Op::Builtin(0), 1, 0, &bad);
        assert_eq!(wrong, 4);
        assert!(
            first.as_deref().unwrap_or("").starts_with("element 5:"),
            "{first:?}"
        );
        let mut late = good.clone();
        late[250_000 * 4 + 3] ^= 0x40;
        let (wrong, first) = check_reduction(&inp, &Op::Builtin(0), 1, 0, &late);
        assert_eq!(wrong, 1);
        assert!(
            first
                .as_deref()
                .unwrap_or("")
                .starts_with("element 250000:"),
            "{first:?}"
        );
    }

    #[test]
    fn integer_semantics_wrap_and_truncate() {
        let dt = Dt(0);
        let inp = Inputs::new(dt, 5, 6);
        // int8 product of 8 values up to 3: wraps in 8 bits.
        let mut want = Vec::new();
        let mut avg = Vec::new();
        for i in 0..64 {
            let v: Vec<i64> = (0..8).map(|r| dt.int(inp.pick(r, i).0) as i64).collect();
            want.push(v.iter().fold(1i64, |a, b| a.wrapping_mul(*b)) as i8 as u8);
            avg.push((v.iter().sum::<i64>() as i8 / 8) as u8);
        }
        assert_eq!(check_reduction(&inp, &Op::Builtin(1), 8, 0, &want).0, 0);
        assert_eq!(check_reduction(&inp, &Op::Builtin(4), 8, 0, &avg).0, 0);
    }
}
