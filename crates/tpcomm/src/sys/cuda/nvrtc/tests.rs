use super::*;

#[test]
fn a_missing_library_is_an_error_that_names_what_was_tried() {
    let e = choose_from(&["/nonexistent/libnvrtc.so.99".to_string()], None)
        .err()
        .unwrap();
    assert!(
        e.contains("/nonexistent/libnvrtc.so.99") && e.contains("LD_LIBRARY_PATH"),
        "{e}"
    );
}

#[test]
fn an_nvrtc_newer_than_the_driver_is_passed_over() {
    let paths = ["libnvrtc.so.13".to_string()];
    let Ok(n) = open(&paths[0]) else {
        assert!(
            !crate::env::REQUIRE_NVRTC.get_or(false).unwrap(),
            "TPCOMM_REQUIRE_NVRTC is set but libnvrtc.so.13 does not load"
        );
        eprintln!("SKIPPED: libnvrtc.so.13 not found (scripts/install_nvrtc.sh installs it)");
        return;
    };
    assert!(choose_from(&paths, Some(n.version.0)).is_ok());
    let e = choose_from(&paths, Some(n.version.0 - 1)).err().unwrap();
    assert!(e.contains("newer than the driver"), "{e}");
}
