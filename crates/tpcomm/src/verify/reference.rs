//! The float64 reference and the bound a result is checked against, and the
//! typed way in: random inputs of an `Element`.

use crate::dtype::{DType, Element, ReduceOp};
use rand::{Rng as _, SeedableRng};

/// Random values in [-1, -1/64] U [1/64, 1], never zero, rounded to `T`.
/// The same seed gives the same data on every rank, so any rank can rebuild
/// every other rank's input to compute the reference.
pub fn random_input<T: Element>(seed: u64, len: usize) -> Vec<T> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..len)
        .map(|_| {
            let m: f32 = rng.gen_range(1.0 / 64.0..=1.0);
            T::from_f32(if rng.gen::<bool>() { m } else { -m })
        })
        .collect()
}

/// How far a sum may be from its float64 reference `r`, given `s`, the sum
/// of the inputs' magnitudes. Both bounds grow from `DType::tolerance(world)`
/// (one rounding of the type plus the f32 accumulation error); they differ in
/// what the rounding is relative to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SumBound {
    /// `tolerance * s`. The typed checks (CPU transport, `tpcomm bench`).
    Magnitudes,
    /// `(tolerance - acc) * |r| + acc * s`, with `acc` the f32 accumulation
    /// part: one rounding of the type relative to the result, tighter when
    /// inputs cancel. The byte-level checks (GPU tests and benches).
    Result,
}

/// A [`SumBound`] for one type and world size, its factors computed once
/// (the checks run over messages of gigabytes).
#[derive(Clone, Copy, Debug)]
pub(super) struct Check {
    op: ReduceOp,
    bound: SumBound,
    /// `DType::tolerance(world)`.
    tol: f64,
    /// Its f32 accumulation part, and the rest (one rounding of the type).
    acc_eps: f64,
    type_eps: f64,
}

impl Check {
    pub(super) fn new(op: ReduceOp, bound: SumBound, dtype: DType, world: usize) -> Self {
        let tol = dtype.tolerance(world);
        let acc_eps = f32::EPSILON as f64 * world as f64;
        Check {
            op,
            bound,
            tol,
            acc_eps,
            type_eps: tol - acc_eps,
        }
    }

    /// Whether `out` is correct for reference element `(r, s)`. NaN is
    /// always wrong; max and min pick one of the inputs, so they must match
    /// exactly.
    #[inline]
    pub(super) fn accepts(&self, out: f64, (r, s): (f64, f64)) -> bool {
        match (self.op, self.bound) {
            // Written so NaN counts as wrong.
            (ReduceOp::Sum, SumBound::Magnitudes) => (out - r).abs() <= self.tol * s,
            (ReduceOp::Sum, SumBound::Result) => {
                let tol = self.type_eps * r.abs() + self.acc_eps * s + f64::MIN_POSITIVE;
                !(out.is_nan() || (out - r).abs() > tol)
            }
            (ReduceOp::Max | ReduceOp::Min, _) => out == r,
        }
    }
}

/// Element `i`'s float64 reduction over `ranks` inputs and its sum of
/// magnitudes, `at(r)` giving rank r's value. Ranks combine in order, 0
/// first, so every caller rounds the same way.
#[inline]
pub(super) fn reduce_element(op: ReduceOp, ranks: usize, at: impl Fn(usize) -> f64) -> (f64, f64) {
    if ranks == 0 {
        return (0.0, 0.0);
    }
    let first = at(0);
    (1..ranks).fold((first, first.abs()), |(v, s), r| {
        let x = at(r);
        (op.apply_f64(v, x), s + x.abs())
    })
}

/// The float64 reduction of every rank's input, element by element, with
/// the sum of magnitudes (the scale of a sum's rounding error).
#[derive(Clone, Debug)]
pub struct Reference {
    pub(super) op: ReduceOp,
    value: Vec<f64>,
    scale: Vec<f64>,
}

impl Reference {
    /// `inputs[r]` is rank r's input; all the same length.
    pub fn new<T: Element>(inputs: &[&[T]], op: ReduceOp) -> Self {
        let n = inputs[0].len();
        for inp in &inputs[1..] {
            assert_eq!(inp.len(), n, "reference inputs differ in length");
        }
        Self::from_ranks(inputs.len(), n, op, |r, i| inputs[r][i].to_f64())
    }

    /// `count` elements reduced over `ranks` inputs, `at(r, i)` giving
    /// element i of rank r.
    pub(super) fn from_ranks(
        ranks: usize,
        count: usize,
        op: ReduceOp,
        at: impl Fn(usize, usize) -> f64,
    ) -> Self {
        let (value, scale) = (0..count)
            .map(|i| reduce_element(op, ranks, |r| at(r, i)))
            .unzip();
        Reference { op, value, scale }
    }

    pub fn len(&self) -> usize {
        self.value.len()
    }

    pub fn is_empty(&self) -> bool {
        self.value.is_empty()
    }

    /// The reduced values.
    pub fn values(&self) -> &[f64] {
        &self.value
    }

    /// Element `i`: the reduced value and the sum of magnitudes.
    #[inline]
    pub(super) fn at(&self, i: usize) -> (f64, f64) {
        (self.value[i], self.scale[i])
    }

    /// Elements of `out` outside the tolerance of `T` for `world` ranks
    /// ([`SumBound::Magnitudes`]). Max and min must match exactly. A length
    /// mismatch counts every element of the longer side.
    pub fn count_wrong<T: Element>(&self, out: &[T], world: usize) -> usize {
        if out.len() != self.value.len() {
            return out.len().max(self.value.len());
        }
        let check = Check::new(self.op, SumBound::Magnitudes, T::DTYPE, world);
        out.iter()
            .enumerate()
            .filter(|&(i, o)| !check.accepts(o.to_f64(), self.at(i)))
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::{bf16, f16};

    #[test]
    fn random_input_is_never_zero_and_the_same_for_the_same_seed() {
        let a = random_input::<bf16>(5, 10_000);
        assert!(a.iter().all(|x| x.to_f64().abs() >= 1.0 / 64.0 - 1e-3));
        assert_eq!(a, random_input::<bf16>(5, 10_000));
        assert_ne!(a, random_input::<bf16>(6, 10_000));
    }

    fn typed_case<T: Element>() {
        let world = 3;
        let ins: Vec<Vec<T>> = (0..world as u64)
            .map(|r| random_input::<T>(r, 500))
            .collect();
        let refs: Vec<&[T]> = ins.iter().map(|v| &v[..]).collect();
        for op in ReduceOp::ALL {
            let r = Reference::new(&refs, op);
            assert_eq!(r.len(), 500);
            // What a transport returns: f32 accumulation, one rounding.
            let mut out: Vec<T> = (0..500)
                .map(|i| {
                    let acc = refs[1..]
                        .iter()
                        .fold(refs[0][i].to_f32(), |a, x| op.apply(a, x[i].to_f32()));
                    T::from_f32(acc)
                })
                .collect();
            assert_eq!(r.count_wrong(&out, world), 0, "{} {op}", T::DTYPE);
            out[7] = T::from_f64(out[7].to_f64() + 0.5);
            out[300] = T::from_f32(f32::NAN);
            assert_eq!(r.count_wrong(&out, world), 2, "{} {op}", T::DTYPE);
            assert_eq!(r.count_wrong(&out[1..], world), 500, "length mismatch");
        }
    }

    #[test]
    fn typed_count_wrong_accepts_a_correct_reduction_and_catches_wrong_ones() {
        typed_case::<f32>();
        typed_case::<f16>();
        typed_case::<bf16>();
    }

    #[test]
    fn max_and_min_must_match_exactly() {
        let a = [1.0f32, -2.0];
        let b = [0.5f32, 3.0];
        let r = Reference::new(&[&a[..], &b[..]], ReduceOp::Max);
        assert_eq!(r.values(), &[1.0, 3.0]);
        assert_eq!(r.count_wrong(&[1.0f32, 3.0], 2), 0);
        assert_eq!(r.count_wrong(&[1.0f32, 3.0 + f32::EPSILON * 4.0], 2), 1);
    }

    #[test]
    fn the_result_bound_is_tighter_when_inputs_cancel() {
        // 1 + (-0.99) = 0.01 with sum of magnitudes 1.99: an error of 1e-3 is
        // within bf16's tolerance of the magnitudes but far more than one
        // bf16 rounding of 0.01.
        let (r, s, out) = (0.01, 1.99, 0.011);
        let check = |b| Check::new(ReduceOp::Sum, b, DType::Bf16, 2);
        assert!(check(SumBound::Magnitudes).accepts(out, (r, s)));
        assert!(!check(SumBound::Result).accepts(out, (r, s)));
        for b in [SumBound::Magnitudes, SumBound::Result] {
            assert!(check(b).accepts(r, (r, s)), "{b:?} exact");
            assert!(!check(b).accepts(f64::NAN, (r, s)), "{b:?} NaN");
        }
    }
}
