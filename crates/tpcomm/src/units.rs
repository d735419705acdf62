//! Byte sizes as a type.
//!
//! A memory calculation that mixes GiB and bytes is the bug this project was
//! born from, so sizes are never bare integers or floats in the API. All
//! arithmetic is checked and integer-only: there is no floating-point GiB
//! anywhere in tpcomm.

use std::fmt;
use std::str::FromStr;

/// What can go wrong with a byte size: reading one, or arithmetic on it.
/// Its own type, so that `units` needs nothing of the library above it;
/// [`crate::Error`] takes it in with `From` (its `Units` variant).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum UnitsError {
    /// A byte size could not be parsed.
    #[error("cannot read {input:?} as a byte size: {reason} (examples: \"4096\", \"8MiB\", \"1.5 GiB\", \"64k\")")]
    Parse { input: String, reason: String },

    /// Arithmetic on byte sizes overflowed.
    #[error("byte size arithmetic overflowed: {0}")]
    Overflow(String),
}

type Result<T, E = UnitsError> = std::result::Result<T, E>;

/// A number of bytes.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ByteSize(u64);

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
const TIB: u64 = 1 << 40;

impl ByteSize {
    pub const ZERO: ByteSize = ByteSize(0);

    pub const fn b(n: u64) -> Self {
        ByteSize(n)
    }
    pub const fn kib(n: u64) -> Self {
        ByteSize(n * KIB)
    }
    pub const fn mib(n: u64) -> Self {
        ByteSize(n * MIB)
    }
    pub const fn gib(n: u64) -> Self {
        ByteSize(n * GIB)
    }

    /// The size in bytes.
    pub const fn bytes(self) -> u64 {
        self.0
    }

    /// The size in bytes as `usize`, for indexing memory on this machine.
    pub fn as_usize(self) -> Result<usize> {
        usize::try_from(self.0).map_err(|_| {
            UnitsError::Overflow(format!(
                "{self} does not fit in this machine's address space"
            ))
        })
    }

    pub fn from_usize(n: usize) -> Self {
        // usize is at most 64 bits on every platform Rust supports.
        ByteSize(n as u64)
    }

    pub fn checked_add(self, rhs: ByteSize) -> Result<ByteSize> {
        self.0
            .checked_add(rhs.0)
            .map(ByteSize)
            .ok_or_else(|| UnitsError::Overflow(format!("{self} + {rhs}")))
    }

    pub fn checked_sub(self, rhs: ByteSize) -> Result<ByteSize> {
        self.0
            .checked_sub(rhs.0)
            .map(ByteSize)
            .ok_or_else(|| UnitsError::Overflow(format!("{self} - {rhs} is negative")))
    }

    pub fn checked_mul(self, n: u64) -> Result<ByteSize> {
        self.0
            .checked_mul(n)
            .map(ByteSize)
            .ok_or_else(|| UnitsError::Overflow(format!("{self} x {n}")))
    }

    /// How many whole `unit`s fit in `self` (e.g. tokens that fit in a KV budget).
    pub fn div_floor(self, unit: ByteSize) -> Result<u64> {
        if unit.0 == 0 {
            return Err(UnitsError::Overflow(format!("{self} / 0 B")));
        }
        Ok(self.0 / unit.0)
    }

    /// Rounds up to a multiple of `align` (which must be non-zero).
    pub fn align_up(self, align: ByteSize) -> Result<ByteSize> {
        if align.0 == 0 {
            return Err(UnitsError::Overflow("alignment of 0 B".into()));
        }
        let rem = self.0 % align.0;
        if rem == 0 {
            Ok(self)
        } else {
            self.checked_add(ByteSize(align.0 - rem))
        }
    }

    /// Sums sizes, failing on overflow.
    pub fn checked_sum<I: IntoIterator<Item = ByteSize>>(iter: I) -> Result<ByteSize> {
        iter.into_iter()
            .try_fold(ByteSize::ZERO, |acc, x| acc.checked_add(x))
    }
}

fn unit_of(suffix: &str) -> Option<u64> {
    let s = suffix.trim().to_ascii_lowercase();
    Some(match s.as_str() {
        "" | "b" | "byte" | "bytes" => 1,
        "k" | "kib" | "ki" => KIB,
        "m" | "mib" | "mi" => MIB,
        "g" | "gib" | "gi" => GIB,
        "t" | "tib" | "ti" => TIB,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        _ => return None,
    })
}

impl FromStr for ByteSize {
    type Err = UnitsError;

    /// Parses "4096", "8MiB", "1.5 GiB", "64k" (single letters are binary
    /// units, as in nccl-tests), "2GB" (decimal). The result must be a whole
    /// number of bytes.
    fn from_str(input: &str) -> Result<Self> {
        let err = |reason: &str| UnitsError::Parse {
            input: input.to_string(),
            reason: reason.to_string(),
        };
        let s = input.trim();
        if s.is_empty() {
            return Err(err("it is empty"));
        }
        let num_end = s
            .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_'))
            .unwrap_or(s.len());
        let (num, suffix) = s.split_at(num_end);
        let num: String = num.chars().filter(|&c| c != '_').collect();
        // "." or "_" alone would otherwise read as 0 bytes.
        if !num.chars().any(|c| c.is_ascii_digit()) {
            return Err(err("it does not start with a number"));
        }
        let unit = unit_of(suffix)
            .ok_or_else(|| err("unknown unit (use B, KiB, MiB, GiB, TiB, k, m, g, KB, MB, GB)"))?;
        let (int_part, frac_part) = match num.split_once('.') {
            Some((i, f)) => (i, f),
            None => (num.as_str(), ""),
        };
        if frac_part.contains('.') {
            return Err(err("more than one decimal point"));
        }
        if frac_part.len() > 18 {
            return Err(err("too many decimal places"));
        }
        let int: u64 = if int_part.is_empty() {
            0
        } else {
            int_part
                .parse()
                .map_err(|_| err("the number is too large"))?
        };
        let whole = int
            .checked_mul(unit)
            .ok_or_else(|| err("the size is too large"))?;
        let frac_bytes = if frac_part.is_empty() {
            0
        } else {
            let digits: u128 = frac_part
                .parse()
                .map_err(|_| err("bad digits after the decimal point"))?;
            let denom = 10u128.pow(frac_part.len() as u32);
            let scaled = digits * unit as u128;
            if !scaled.is_multiple_of(denom) {
                return Err(err("that is not a whole number of bytes"));
            }
            (scaled / denom) as u64
        };
        whole
            .checked_add(frac_bytes)
            .map(ByteSize)
            .ok_or_else(|| err("the size is too large"))
    }
}

impl fmt::Display for ByteSize {
    /// Shows the largest binary unit with at most two decimals, e.g. "8 MiB",
    /// "1.5 KiB", "1000 B". Exact values print without decimals.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0;
        let units = [(TIB, "TiB"), (GIB, "GiB"), (MIB, "MiB"), (KIB, "KiB")];
        for (unit, name) in units {
            if n >= unit {
                let whole = n / unit;
                let hundredths = ((n % unit) as u128 * 100 / unit as u128) as u64;
                return if hundredths == 0 {
                    if n.is_multiple_of(unit) {
                        write!(f, "{whole} {name}")
                    } else {
                        write!(f, "{whole}.00 {name}")
                    }
                } else if hundredths.is_multiple_of(10) {
                    write!(f, "{whole}.{} {name}", hundredths / 10)
                } else {
                    write!(f, "{whole}.{hundredths:02} {name}")
                };
            }
        }
        write!(f, "{n} B")
    }
}

impl fmt::Debug for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ByteSize({} = {} B)", self, self.0)
    }
}

impl serde::Serialize for ByteSize {
    /// Serialized as a plain number of bytes, so JSON readers need no parser.
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_u64(self.0)
    }
}

impl<'de> serde::Deserialize<'de> for ByteSize {
    /// Accepts a number of bytes or a string such as "8 MiB".
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = ByteSize;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a number of bytes or a size such as \"8 MiB\"")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> std::result::Result<ByteSize, E> {
                Ok(ByteSize(v))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> std::result::Result<ByteSize, E> {
                u64::try_from(v)
                    .map(ByteSize)
                    .map_err(|_| E::custom("a byte size cannot be negative"))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> std::result::Result<ByteSize, E> {
                v.parse().map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_forms() {
        assert_eq!("4096".parse::<ByteSize>().unwrap(), ByteSize(4096));
        assert_eq!("8MiB".parse::<ByteSize>().unwrap(), ByteSize::mib(8));
        assert_eq!(
            "1.5 GiB".parse::<ByteSize>().unwrap(),
            ByteSize(3 * GIB / 2)
        );
        assert_eq!("64k".parse::<ByteSize>().unwrap(), ByteSize::kib(64));
        assert_eq!("2GB".parse::<ByteSize>().unwrap(), ByteSize(2_000_000_000));
        assert_eq!(" 12 b ".parse::<ByteSize>().unwrap(), ByteSize(12));
        assert_eq!("1_000".parse::<ByteSize>().unwrap(), ByteSize(1000));
    }

    #[test]
    fn rejects_bad_input_with_a_reason() {
        for bad in [
            "",
            "MiB",
            "1.2.3k",
            "8 parsecs",
            "0.1KiB",
            "99999999999999999999",
            "20000000 TiB",
            "-1",
        ] {
            let e = bad.parse::<ByteSize>().unwrap_err();
            assert!(matches!(e, UnitsError::Parse { .. }), "{bad}: {e}");
        }
    }

    #[test]
    fn displays_human_units() {
        assert_eq!(ByteSize::mib(8).to_string(), "8 MiB");
        assert_eq!(ByteSize(1536).to_string(), "1.5 KiB");
        assert_eq!(ByteSize(1000).to_string(), "1000 B");
        assert_eq!(ByteSize(GIB + GIB / 4).to_string(), "1.25 GiB");
        assert_eq!(ByteSize(KIB + 1).to_string(), "1.00 KiB");
    }

    #[test]
    fn arithmetic_is_checked() {
        assert!(ByteSize(u64::MAX).checked_add(ByteSize(1)).is_err());
        assert!(ByteSize(1).checked_sub(ByteSize(2)).is_err());
        assert!(ByteSize(u64::MAX).checked_mul(2).is_err());
        assert_eq!(ByteSize(10).align_up(ByteSize(8)).unwrap(), ByteSize(16));
        assert_eq!(ByteSize::gib(1).div_floor(ByteSize::mib(1)).unwrap(), 1024);
        assert!(ByteSize(1).div_floor(ByteSize::ZERO).is_err());
    }

    #[test]
    fn serde_accepts_numbers_and_strings() {
        let a: ByteSize = serde_json::from_str("\"8 MiB\"").unwrap();
        let b: ByteSize = serde_json::from_str("8388608").unwrap();
        assert_eq!(a, b);
        assert_eq!(serde_json::to_string(&a).unwrap(), "8388608");
    }

    #[test]
    fn a_point_or_an_underscore_alone_is_not_zero_bytes() {
        for bad in [".", "_", "._", " . KiB", "_MiB"] {
            assert!(bad.parse::<ByteSize>().is_err(), "{bad:?}");
        }
        assert_eq!(".5k".parse::<ByteSize>().unwrap(), ByteSize(512));
    }

    const UNITS: [(&str, u64); 12] = [
        ("", 1),
        ("B", 1),
        (" bytes", 1),
        ("k", KIB),
        ("KiB", KIB),
        (" MiB", MIB),
        ("m", MIB),
        ("GiB", GIB),
        (" TiB", TIB),
        ("KB", 1_000),
        ("MB", 1_000_000),
        (" GB", 1_000_000_000),
    ];

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]

        /// Any text: a size or an error, never a panic; and a size only
        /// from text that holds a digit.
        #[test]
        fn any_text_is_a_size_or_an_error(s in "\\PC{0,24}|[0-9._ kKmMgGtTiIbB]{0,12}") {
            if s.parse::<ByteSize>().is_ok() {
                proptest::prop_assert!(s.chars().any(|c| c.is_ascii_digit()), "{:?}", s);
            }
        }

        /// A whole number with a unit is that many bytes, or an error when
        /// it does not fit in 64 bits (checked, never wrapped).
        #[test]
        fn whole_numbers_with_units_are_exact_or_overflow_errors(
            n in proptest::prelude::any::<u64>(),
            small in 0u64..100_000,
            unit in proptest::sample::select(UNITS.to_vec()),
        ) {
            for n in [n, small] {
                let got = format!("{n}{}", unit.0).parse::<ByteSize>();
                match n.checked_mul(unit.1) {
                    Some(b) => proptest::prop_assert_eq!(got.unwrap(), ByteSize(b)),
                    None => proptest::prop_assert!(got.is_err()),
                }
            }
        }

        /// A decimal is accepted exactly when it is a whole number of bytes
        /// that fits in 64 bits, and then it is that number.
        #[test]
        fn decimals_are_exact_or_refused(
            int in 0u64..10_000_000,
            frac in "[0-9]{1,6}",
            unit in proptest::sample::select(UNITS.to_vec()),
        ) {
            let scale = 10u128.pow(frac.len() as u32);
            let f: u128 = frac.parse().unwrap();
            let exact = (int as u128 * scale + f) * unit.1 as u128;
            let want = exact
                .is_multiple_of(scale)
                .then(|| exact / scale)
                .and_then(|b| u64::try_from(b).ok());
            let got = format!("{int}.{frac}{}", unit.0).parse::<ByteSize>().ok();
            proptest::prop_assert_eq!(got, want.map(ByteSize));
        }

        /// What a size shows reads back as at most that size and within a
        /// hundredth of its unit, when it reads back at all (two decimals
        /// may not be a whole number of bytes).
        #[test]
        fn displayed_sizes_read_back_close_below(v in proptest::prelude::any::<u64>()) {
            let shown = ByteSize(v).to_string();
            if let Ok(b) = shown.parse::<ByteSize>() {
                let unit = [TIB, GIB, MIB, KIB, 1].into_iter().find(|&u| v >= u).unwrap_or(1);
                proptest::prop_assert!(b.0 <= v && v - b.0 <= unit / 100 + 1, "{} shown as {}", v, shown);
            }
        }

        #[test]
        fn display_then_parse_round_trips_for_exact_units(n in 0u64..1_000_000, shift in 0u32..4) {
            let v = ByteSize(n << (10 * shift));
            let shown = v.to_string();
            if !shown.contains('.') {
                proptest::prop_assert_eq!(shown.parse::<ByteSize>().unwrap(), v);
            }
        }
    }
}
