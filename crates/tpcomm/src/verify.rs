//! Checking all-reduce results against a float64 reference, shared by the
//! tests and `tpcomm bench` (whose #wrong column comes from here).

use crate::dtype::{Element, ReduceOp};
use rand::{Rng, SeedableRng};

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

/// The float64 reduction of every rank's input, with what a correct result
/// may differ by.
pub struct Reference {
    op: ReduceOp,
    value: Vec<f64>,
    /// Sum of magnitudes per element: the scale of the rounding error of a sum.
    scale: Vec<f64>,
}

impl Reference {
    /// `inputs[r]` is rank r's input; all the same length.
    pub fn new<T: Element>(inputs: &[&[T]], op: ReduceOp) -> Self {
        let n = inputs.first().map_or(0, |v| v.len());
        let mut value: Vec<f64> = inputs[0].iter().map(|x| x.to_f64()).collect();
        let mut scale: Vec<f64> = value.iter().map(|x| x.abs()).collect();
        for inp in &inputs[1..] {
            assert_eq!(inp.len(), n, "reference inputs differ in length");
            for ((v, s), x) in value.iter_mut().zip(scale.iter_mut()).zip(inp.iter()) {
                let x = x.to_f64();
                *v = op.apply_f64(*v, x);
                *s += x.abs();
            }
        }
        Reference { op, value, scale }
    }

    pub fn len(&self) -> usize {
        self.value.len()
    }

    pub fn is_empty(&self) -> bool {
        self.value.is_empty()
    }

    /// Elements of `out` outside the tolerance of `T` for `world` ranks
    /// (`DType::tolerance`, relative to the sum of magnitudes). Max and min
    /// pick one of the inputs, so they must match exactly.
    pub fn count_wrong<T: Element>(&self, out: &[T], world: usize) -> usize {
        if out.len() != self.value.len() {
            return out.len().max(self.value.len());
        }
        let tol = T::DTYPE.tolerance(world);
        out.iter()
            .zip(self.value.iter().zip(&self.scale))
            .filter(|(o, (v, s))| {
                let o = o.to_f64();
                match self.op {
                    ReduceOp::Sum => {
                        // Written so NaN counts as wrong.
                        let within = (o - *v).abs() <= tol * *s;
                        !within
                    }
                    ReduceOp::Max | ReduceOp::Min => o != **v,
                }
            })
            .count()
    }
}
