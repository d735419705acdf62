use super::*;
use proptest::prelude::*;
use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::time::Duration;

fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<OsString> {
    let m: HashMap<String, OsString> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), OsString::from(v)))
        .collect();
    move |k| m.get(k).cloned()
}

#[test]
fn flags_take_only_the_documented_spellings_in_any_case() {
    for on in ["1", "true", "TRUE", "Yes", "on", " ON "] {
        assert_eq!(DISABLE.parse(on), Ok(Some(true)), "{on}");
    }
    for off in ["0", "false", "No", "OFF", "off"] {
        assert_eq!(DISABLE.parse(off), Ok(Some(false)), "{off}");
    }
    assert_eq!(DISABLE.parse(""), Ok(None));
    assert_eq!(DISABLE.parse("  "), Ok(None));
    for bad in ["2", "y", "enable", "disabled", "maybe", "1.0", "o n"] {
        let e = DISABLE.parse(bad).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("TPCOMM_DISABLE") && msg.contains("yes") && msg.contains("off"),
            "{bad}: {msg}"
        );
    }
}

#[test]
fn timeouts_beyond_the_range_are_errors_not_panics() {
    assert_eq!(
        TIMEOUT_S.parse("2.5"),
        Ok(Some(Duration::from_millis(2500)))
    );
    assert_eq!(TIMEOUT_S.parse("600"), Ok(Some(Duration::from_secs(600))));
    for bad in [
        "1e20",
        "18446744073709551616",
        "1e400",
        "inf",
        "NaN",
        "-3",
        "0",
        "0.0001",
        "604801",
        "2^64",
        "ten",
    ] {
        let e = TIMEOUT_S.parse(bad).unwrap_err().to_string();
        assert!(
            e.contains("TPCOMM_TIMEOUT_S") && e.contains("604800"),
            "{bad}: {e}"
        );
    }
}

#[test]
fn sizes_are_range_checked() {
    assert_eq!(MAX_BYTES.parse("16 MiB"), Ok(Some(ByteSize::mib(16))));
    assert_eq!(MAX_BYTES.parse("4k"), Ok(Some(ByteSize::kib(4))));
    for bad in ["0", "1", "5 GiB", "99999999999999999999", "lots", "-1"] {
        let e = MAX_BYTES.parse(bad).unwrap_err().to_string();
        assert!(
            e.contains("TPCOMM_MAX_BYTES") && e.contains("4 GiB"),
            "{bad}: {e}"
        );
    }
    assert!(HOST_CHUNK.parse("1 MiB").is_err());
    assert_eq!(HOST_CHUNK.parse("64KiB"), Ok(Some(ByteSize::kib(64))));
}

#[test]
fn counts_take_whole_numbers_in_range_and_step() {
    assert_eq!(P2P_BLOCK.parse("128"), Ok(Some(128)));
    for bad in ["0", "16", "100", "2048", "+32", "32.0", "-32", "many"] {
        let e = P2P_BLOCK.parse(bad).unwrap_err().to_string();
        assert!(e.contains("a multiple of 32 from 32 to 1024"), "{bad}: {e}");
    }
    assert_eq!(HOST_PRODUCERS.parse("1"), Ok(Some(1)));
    assert!(HOST_PRODUCERS.parse("0").is_err());
}

#[test]
fn lists_take_every_item_in_range_or_nothing() {
    assert_eq!(TEST_WORLDS.parse("2, 3,8"), Ok(Some(vec![2, 3, 8])));
    for bad in ["1", "2,9", "2,,3", "2,x", "2;3"] {
        let e = TEST_WORLDS.parse(bad).unwrap_err().to_string();
        assert!(
            e.contains("TPCOMM_TEST_WORLDS") && e.contains("from 2 to 8"),
            "{bad}: {e}"
        );
    }
}

#[test]
fn choices_answer_with_their_own_spelling() {
    assert_eq!(LOG.parse("INFO"), Ok(Some("info")));
    let e = LOG.parse("loud").unwrap_err().to_string();
    assert!(e.contains("one of off, warn, info"), "{e}");
}

#[test]
fn values_that_are_not_utf8_are_errors_except_for_paths() {
    use std::os::unix::ffi::OsStringExt;
    let bad = OsString::from_vec(vec![0x31, 0xff]);
    let get = |_: &str| Some(bad.clone());
    assert!(matches!(
        TIMEOUT_S.read_with(get),
        Err(EnvError::NotUnicode {
            name: "TPCOMM_TIMEOUT_S",
            ..
        })
    ));
    assert_eq!(
        CACHE_DIR.read_with(get).unwrap(),
        Some(PathBuf::from(bad.clone()))
    );
}

#[test]
fn the_creation_check_names_the_first_bad_library_variable() {
    assert_eq!(check_library_with(&env_of(&[])), Ok(()));
    let ok = env_of(&[("TPCOMM_FUSED_SPREAD", "on"), ("TPCOMM_HOST_CHUNK", "32k")]);
    assert_eq!(check_library_with(&ok), Ok(()));
    let e = check_library_with(&env_of(&[("TPCOMM_FUSED_SPREAD", "sometimes")])).unwrap_err();
    assert_eq!(e.name(), "TPCOMM_FUSED_SPREAD");
    // Drop-in variables are the drop-in's to check, not the library's.
    assert_eq!(
        check_library_with(&env_of(&[("TPCOMM_TIMEOUT_S", "1e20")])),
        Ok(())
    );
    let e =
        crate::Error::from(check_library_with(&env_of(&[("TPCOMM_SELF_TUNE", "2")])).unwrap_err());
    assert!(e.to_string().contains("TPCOMM_SELF_TUNE=\"2\""), "{e}");
}

#[test]
fn every_variable_is_declared_once_with_a_doc_line() {
    let names: BTreeSet<&str> = ALL.iter().map(|v| v.name()).collect();
    assert_eq!(names.len(), ALL.len(), "a variable is declared twice");
    for v in ALL {
        assert!(
            !v.doc().is_empty() && !v.default().is_empty(),
            "{}",
            v.name()
        );
        assert!(!v.doc().contains('\n'), "{}", v.name());
    }
}

/// docs/environment.md holds the generated tables between the markers.
#[test]
fn docs_list_exactly_the_registry() {
    const BEGIN: &str = "<!-- BEGIN generated by tpcomm::env::markdown_tables -->\n";
    const END: &str = "<!-- END generated -->";
    let doc = include_str!("../../../../docs/environment.md");
    let (Some(a), Some(b)) = (doc.find(BEGIN), doc.find(END)) else {
        panic!("docs/environment.md lacks the markers {BEGIN:?} and {END:?}");
    };
    let want = markdown_tables();
    assert!(
        doc[a + BEGIN.len()..b] == want,
        "docs/environment.md's tables differ from the registry (crates/tpcomm/src/env.rs); put this between the markers:\n{want}"
    );
    // And no variable is documented outside the generated block.
    let outside = format!("{}{}", &doc[..a], &doc[b..]);
    for v in ALL {
        assert!(
            !outside.contains(&format!("| `{}", v.name())),
            "{} is documented outside the generated tables",
            v.name()
        );
    }
}

/// Reads a value of some variable and shows it.
type Reader = dyn Fn(&str) -> Result<Option<String>, EnvError>;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Any text at all: a value or an error naming the variable, never a panic.
    #[test]
    fn any_text_is_a_value_or_an_error_naming_the_variable(s in any::<String>()) {
        let checks: [&Reader; 6] = [
            &|x| TIMEOUT_S.parse(x).map(|v| v.map(|d| format!("{d:?}"))),
            &|x| MAX_BYTES.parse(x).map(|v| v.map(|b| b.to_string())),
            &|x| DISABLE.parse(x).map(|v| v.map(|b| b.to_string())),
            &|x| LOG.parse(x).map(|v| v.map(str::to_string)),
            &|x| P2P_BLOCK.parse(x).map(|v| v.map(|n| n.to_string())),
            &|x| HOST_CHUNK.parse(x).map(|v| v.map(|b| b.to_string())),
        ];
        for c in checks {
            match c(&s) {
                Ok(_) => {}
                Err(e) => prop_assert!(e.to_string().contains("TPCOMM_"), "{}", e),
            }
        }
    }

    /// Number-like text, where overflow would hide: inside the range it is
    /// that many seconds, outside it an error.
    #[test]
    fn timeouts_are_in_range_or_errors(
        int in "[0-9]{1,25}",
        frac in proptest::option::of("[0-9]{0,12}"),
        exp in proptest::option::of(-400i32..400),
    ) {
        let mut s = int.clone();
        if let Some(f) = &frac { s = format!("{s}.{f}"); }
        if let Some(e) = exp { s = format!("{s}e{e}"); }
        match TIMEOUT_S.parse(&s) {
            Ok(Some(d)) => {
                prop_assert!(exp.is_none());
                prop_assert!(d >= Duration::from_micros(999) && d <= Duration::from_secs(604_800));
                let x: f64 = s.parse().unwrap();
                prop_assert!((d.as_secs_f64() - x).abs() <= 1e-6 * x.max(1.0));
            }
            Ok(None) => prop_assert!(false, "{} read as unset", s),
            Err(_) => {
                let x: f64 = s.parse().unwrap_or(f64::INFINITY);
                prop_assert!(exp.is_some() || !(0.001..=604_800.0).contains(&x), "{} refused", s);
            }
        }
    }

    /// Whole numbers: a count is accepted exactly when it is in range and step.
    #[test]
    fn counts_accept_exactly_their_range(n in any::<u64>(), small in 0u64..3000) {
        for n in [n, small] {
            let ok = (32..=1024).contains(&n) && n % 32 == 0;
            prop_assert_eq!(P2P_BLOCK.parse(&n.to_string()).is_ok(), ok);
            if ok {
                prop_assert_eq!(P2P_BLOCK.parse(&format!(" {n} ")), Ok(Some(n)));
            }
        }
    }

    /// Every documented spelling of a flag, in any case, round-trips; any
    /// other word is an error.
    #[test]
    fn flags_round_trip_and_refuse_other_words(word in "[a-zA-Z0-9]{1,6}", upper in any::<bool>()) {
        let w = if upper { word.to_uppercase() } else { word.clone() };
        let lower = word.to_ascii_lowercase();
        let want = if FLAG_TRUE.contains(&lower.as_str()) {
            Some(true)
        } else if FLAG_FALSE.contains(&lower.as_str()) {
            Some(false)
        } else {
            None
        };
        match want {
            Some(b) => prop_assert_eq!(FUSED_SPREAD.parse(&w), Ok(Some(b))),
            None => prop_assert!(FUSED_SPREAD.parse(&w).is_err()),
        }
    }

    /// Sizes written as a number and a unit are that many bytes when in
    /// range, and an error outside it.
    #[test]
    fn sizes_in_range_round_trip(
        n in 0u64..100_000,
        unit in proptest::sample::select(vec![("", 1u64), (" B", 1), ("KiB", 1 << 10), (" MiB", 1 << 20), ("GiB", 1 << 30), ("k", 1 << 10)]),
    ) {
        let b = ByteSize::b(n * unit.1);
        let ok = (ByteSize::kib(4)..=ByteSize::gib(4)).contains(&b);
        match MAX_BYTES.parse(&format!("{n}{}", unit.0)) {
            Ok(Some(v)) => { prop_assert!(ok); prop_assert_eq!(v, b); }
            Ok(None) => prop_assert!(false, "read as unset"),
            Err(_) => prop_assert!(!ok, "{} refused", b),
        }
    }
}

#[test]
fn the_test_worlds_stop_at_the_kernels_largest_world() {
    assert_eq!(TEST_WORLDS.kind.max, crate::transport::MAX_WORLD as u64);
}
