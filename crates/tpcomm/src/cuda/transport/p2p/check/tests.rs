use super::*;

#[test]
fn the_status_codes_match_the_kernel_source() {
    let src = include_str!("../../../kernels/p2p_check.cu");
    for (name, code) in [
        ("P2PC_OK", CODE_OK),
        ("P2PC_NO_BYTES", CODE_NO_BYTES),
        ("P2PC_WRONG", CODE_WRONG),
    ] {
        assert!(src.contains(&format!("#define {name} {code}u")), "{name}");
    }
    assert!(src.contains(&format!("#define P2PC_WORDS {WORDS}u")));
    assert!(src.contains(&format!("#define P2PC_MAX_WORLD {MAX_WORLD}")));
    assert_eq!(std::mem::size_of::<P2pCheckArgs>(), 8 * MAX_WORLD + 32);
}

#[test]
fn a_reader_decodes_each_writers_verdict_and_skips_itself() {
    // Rank 1 of 3: writer 0 fine, writer 2 wrong at word 17.
    let status = [CODE_OK, 0, 0, 0, CODE_WRONG, 17];
    assert_eq!(
        decode(&status, 1, 3),
        vec![(0, PairCheck::Ok), (2, PairCheck::Wrong { first_word: 17 })]
    );
    // A status never written reads as not checked, never as fine.
    assert_eq!(decode(&[0; 4], 0, 2), vec![(1, PairCheck::NotChecked)]);
}

fn post(pairs: &[(usize, PairCheck)]) -> Vec<u8> {
    encode(&Ok(pairs.to_vec()))
}

#[test]
fn every_pair_fine_keeps_p2p() {
    let all = vec![post(&[(1, PairCheck::Ok)]), post(&[(0, PairCheck::Ok)])];
    let v = group_verdict(&all);
    assert!(v.p2p_ok && v.ran, "{}", v.why);
}

#[test]
fn one_pair_that_moves_nothing_or_wrong_bytes_sends_the_group_to_the_host_path() {
    let all = vec![
        post(&[(1, PairCheck::NoBytes), (2, PairCheck::Ok)]),
        post(&[(0, PairCheck::Ok), (2, PairCheck::Ok)]),
        post(&[(0, PairCheck::Ok), (1, PairCheck::Wrong { first_word: 5 })]),
    ];
    let v = group_verdict(&all);
    assert!(!v.p2p_ok);
    assert!(
        v.why.contains("rank 1 -> rank 0: no bytes arrived"),
        "{}",
        v.why
    );
    assert!(v.why.contains("rank 1 -> rank 2: wrong bytes"), "{}", v.why);
    assert!(v.why.contains("host transport"), "{}", v.why);
    let all = vec![
        post(&[(1, PairCheck::NotChecked)]),
        post(&[(0, PairCheck::Ok)]),
    ];
    assert!(!group_verdict(&all).p2p_ok);
}

#[test]
fn a_check_that_could_not_run_leaves_the_drivers_answer_and_says_so() {
    let all = vec![
        encode(&Err("NVRTC not found".into())),
        post(&[(0, PairCheck::Ok)]),
    ];
    let v = group_verdict(&all);
    assert!(v.p2p_ok && !v.ran);
    assert!(v.why.contains("rank 0: NVRTC not found"), "{}", v.why);
    // Garbage from a rank is named, not trusted as a verdict.
    let v = group_verdict(&[vec![b'k', 1], post(&[(0, PairCheck::Ok)])]);
    assert!(v.why.contains("rank 0: unreadable"), "{}", v.why);
    // A failed pair wins over a check that did not run elsewhere.
    let v = group_verdict(&[encode(&Err("x".into())), post(&[(0, PairCheck::NoBytes)])]);
    assert!(!v.p2p_ok);
}
