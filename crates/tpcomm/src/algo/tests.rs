use super::*;

#[test]
fn names_parse_back_to_the_same_algorithm_and_match_serde() {
    for a in [Algo::Auto, Algo::OneShot, Algo::TwoShot] {
        assert_eq!(a.name().parse::<Algo>().unwrap(), a);
        assert_eq!(a.to_string(), a.name());
        assert_eq!(
            serde_json::to_string(&a).unwrap(),
            format!("\"{}\"", a.name())
        );
        let back: Algo = serde_json::from_str(&format!("\"{}\"", a.name())).unwrap();
        assert_eq!(back, a);
    }
    assert_eq!(Algo::OneShot.name(), "one-shot");
    assert_eq!(Algo::TwoShot.name(), "two-shot");
    assert_eq!(Algo::Auto.name(), "auto");
}

#[test]
fn parsing_takes_the_short_spellings_only_exactly_and_names_the_choices_on_error() {
    assert_eq!("oneshot".parse::<Algo>().unwrap(), Algo::OneShot);
    assert_eq!("twoshot".parse::<Algo>().unwrap(), Algo::TwoShot);
    for bad in ["ring", "AUTO", " one-shot", "two_shot", ""] {
        let e = bad.parse::<Algo>().unwrap_err().to_string();
        assert!(e.contains(&format!("{bad:?}")), "{e}");
        assert!(e.contains("auto, one-shot, two-shot"), "{e}");
    }
}

#[test]
fn call_descriptor_codes_are_distinct() {
    let codes = [Algo::Auto, Algo::OneShot, Algo::TwoShot].map(Algo::code);
    assert_eq!(codes, [0, 1, 2]);
}
