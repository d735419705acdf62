use super::*;

#[test]
fn dtype_and_op_codes_match_nccl_h() {
    assert_eq!(nccl_dtype(DType::F16), 6);
    assert_eq!(nccl_dtype(DType::F32), 7);
    assert_eq!(nccl_dtype(DType::Bf16), 9);
    assert_eq!(nccl_op(ReduceOp::Sum), 0);
    assert_eq!(nccl_op(ReduceOp::Max), 2);
    assert_eq!(nccl_op(ReduceOp::Min), 3);
}

#[test]
fn version_codes_decode_in_both_schemes() {
    let v = NcclVersion::from_code(22809);
    assert_eq!((v.major, v.minor, v.patch), (2, 28, 9));
    assert_eq!(v.to_string(), "2.28.9");
    let old = NcclVersion::from_code(2804);
    assert_eq!((old.major, old.minor, old.patch), (2, 8, 4));
    assert!(old < MIN_VERSION);
}

fn library_detail(err: Error) -> String {
    match err {
        Error::Library { library, detail } => {
            assert_eq!(library, "NCCL");
            detail
        }
        other => panic!("expected Error::Library, got {other:?}"),
    }
}

#[test]
fn bogus_override_path_is_a_clear_error_not_a_panic() {
    let bogus = "/nonexistent/tpcomm-test/libnccl.so.2";
    let result = Nccl::load_with(Some(bogus.into()));
    let detail = library_detail(result.expect_err("a bogus path must not load"));
    assert!(detail.contains(NCCL_LIBRARY_ENV), "{detail}");
    assert!(detail.contains(bogus), "{detail}");
    assert!(detail.contains("unset it"), "{detail}");
}

#[test]
fn nothing_found_lists_every_attempt_and_says_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("libnccl.so.2");
    std::fs::write(&fake, b"not an ELF file").unwrap();
    let detail = library_detail(
        Nccl::load_first(vec![
            Candidate::Soname("libtpcomm-test-no-such-nccl.so.2"),
            Candidate::Path(fake.clone()),
        ])
        .expect_err("nothing usable"),
    );
    assert!(
        detail.contains("libtpcomm-test-no-such-nccl.so.2"),
        "{detail}"
    );
    assert!(detail.contains(&fake.display().to_string()), "{detail}");
    assert!(detail.contains(NCCL_LIBRARY_ENV), "{detail}");
    assert!(detail.contains("pip install nvidia-nccl-cu13"), "{detail}");
}

#[test]
fn a_file_that_is_not_a_library_is_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("libnccl.so.2");
    std::fs::write(&fake, b"not an ELF file").unwrap();
    let detail = library_detail(Nccl::load_from(&fake).expect_err("garbage must not load"));
    assert!(detail.contains(&fake.display().to_string()), "{detail}");
    assert!(detail.contains("pip install nvidia-nccl-cu13"), "{detail}");
}

#[test]
fn a_library_without_nccl_symbols_names_the_missing_one() {
    // libc is on every Linux machine and has none of NCCL's functions.
    let detail =
        library_detail(Nccl::load_from(Path::new("libc.so.6")).expect_err("libc is not NCCL"));
    assert!(detail.contains("ncclGetVersion"), "{detail}");
    assert!(detail.contains("is this NCCL?"), "{detail}");
}

#[test]
fn rank_outside_world_is_refused_before_nccl_is_called() {
    assert!(matches!(
        check_rank(2, 2),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        check_rank(0, 0),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        check_rank(usize::MAX, 0),
        Err(Error::InvalidArgument { .. })
    ));
    assert_eq!(check_rank(2, 1).unwrap(), (2, 1));
}

#[test]
fn the_loaded_file_is_found_from_a_function_address() {
    // libc stands in for NCCL: any function's address names its file.
    let name =
        ffi::file_of_address(libc::getpid as *const std::ffi::c_void).expect("dladdr knows libc");
    assert!(name.contains("libc"), "{name}");
    assert!(Path::new(&name).exists(), "{name}");
    assert_eq!(ffi::file_of_address(std::ptr::null()), None);
}
