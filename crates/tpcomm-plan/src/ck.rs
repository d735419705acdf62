//! Checked integer arithmetic for the planner's formulas. A `Ck` carries
//! either a value or the fact that some step overflowed 64 bits, so a formula
//! reads as arithmetic and is turned into a typed error once, at the end
//! ([`Ck::get`]); release builds never wrap silently.

use crate::error::{PlanError, Result};
use std::ops::{Add, Mul, Sub};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Ck(Option<u64>);

pub(crate) fn ck(x: u64) -> Ck {
    Ck(Some(x))
}

impl Ck {
    /// The value, or an error naming `what` when any step overflowed.
    pub fn get(self, what: &str) -> Result<u64> {
        self.0.ok_or_else(|| PlanError::Overflow {
            what: what.to_string(),
        })
    }

    pub fn div_ceil(self, d: u64) -> Ck {
        Ck(match (self.0, d) {
            (Some(x), d) if d > 0 => Some(x.div_ceil(d)),
            _ => None,
        })
    }

    pub fn div_floor(self, d: u64) -> Ck {
        Ck(self.0.and_then(|x| x.checked_div(d)))
    }
}

impl From<u64> for Ck {
    fn from(x: u64) -> Self {
        ck(x)
    }
}

impl<T: Into<Ck>> Add<T> for Ck {
    type Output = Ck;
    fn add(self, o: T) -> Ck {
        let o = o.into();
        Ck(self.0.zip(o.0).and_then(|(a, b)| a.checked_add(b)))
    }
}

impl<T: Into<Ck>> Mul<T> for Ck {
    type Output = Ck;
    fn mul(self, o: T) -> Ck {
        let o = o.into();
        Ck(self.0.zip(o.0).and_then(|(a, b)| a.checked_mul(b)))
    }
}

impl<T: Into<Ck>> Sub<T> for Ck {
    type Output = Ck;
    fn sub(self, o: T) -> Ck {
        let o = o.into();
        Ck(self.0.zip(o.0).and_then(|(a, b)| a.checked_sub(b)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overflow_anywhere_in_a_formula_is_an_error_naming_it() {
        assert_eq!((ck(3) * 4u64 + 5u64).get("x").unwrap(), 17);
        let e = (ck(u64::MAX / 2) * 3u64 + 1u64).get("weights").unwrap_err();
        assert!(e.to_string().contains("weights"), "{e}");
        assert!((ck(1) - 2u64).get("x").is_err());
        assert!(ck(5).div_ceil(0).get("x").is_err());
        assert_eq!(ck(5).div_ceil(2).get("x").unwrap(), 3);
        assert_eq!(ck(5).div_floor(2).get("x").unwrap(), 2);
        assert!((ck(u64::MAX) + 1u64).get("x").is_err());
    }
}
