use super::*;

#[test]
fn sizes_need_a_whole_number_of_elements_and_min_at_most_max() {
    let e = message_size("--bytes", ByteSize::b(0), DType::Bf16)
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("--bytes 0 B: ") && e.contains("2 B"), "{e}");
    let e = message_size("--bytes", ByteSize::b(3), DType::Bf16)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("bf16") && e.contains("nearest: 2 B or 4 B"),
        "{e}"
    );
    let e = message_size("--min-bytes", ByteSize::b(3), DType::F32)
        .unwrap_err()
        .to_string();
    assert!(e.contains("nearest: 4 B") && e.contains("f32"), "{e}");
    assert!(message_size("--bytes", ByteSize::b(2), DType::F16).is_ok());
    let e = size_range(
        ("--min", ByteSize::mib(2)),
        ("--max", ByteSize::mib(1)),
        DType::Bf16,
    )
    .unwrap_err()
    .to_string();
    assert_eq!(
        e,
        "--min 2 MiB is above --max 1 MiB; give --min at most --max"
    );
    assert!(size_range(
        ("--min", ByteSize::kib(1)),
        ("--max", ByteSize::kib(1)),
        DType::F32
    )
    .is_ok());
}

#[test]
fn host_sizes_name_the_flag_they_refuse() {
    assert!(host_sizes(2, ByteSize::mib(8), ByteSize::mib(8)).is_ok());
    let e = host_sizes(2, ByteSize::kib(1), ByteSize::mib(8))
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("--max-message 1 KiB: "), "{e}");
    let e = host_sizes(2, ByteSize::mib(8), ByteSize::kib(1))
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("--piece 1 KiB: "), "{e}");
    let e = host_sizes(2, ByteSize::gib(16), ByteSize::kib(4))
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("--piece 4 KiB: ") && e.contains("8 MiB"),
        "{e}"
    );
}

#[test]
fn output_paths_are_checked_without_creating_anything() {
    let base = tempfile::tempdir().unwrap();
    let p = base.path();
    assert!(output_file("--json", &p.join("x.json")).is_ok());
    let e = output_file("--json", &p.join("no/such/x.json")).unwrap_err();
    assert!(
        matches!(&e, CheckError::NoDirectory { dir, .. } if *dir == p.join("no/such")),
        "{e}"
    );
    assert!(matches!(
        output_file("--json", p).unwrap_err(),
        CheckError::IsADirectory { .. }
    ));
    std::fs::write(p.join("f"), "").unwrap();
    let e = output_file("--json", &p.join("f/x.json")).unwrap_err();
    assert!(
        matches!(&e, CheckError::NotADirectory { dir, .. } if *dir == p.join("f")),
        "{e}"
    );
    // An existing file is overwritten, so it is fine.
    assert!(output_file("--json", &p.join("f")).is_ok());
    // Folders that would be made: their nearest existing parent counts.
    assert!(output_tree("--out", &p.join("a/b/t.toml"), false).is_ok());
    assert!(output_tree("--plot", &p.join("a/b"), true).is_ok());
    assert!(output_tree("--plot", &p.join("f/b"), true).is_err());
    assert!(output_tree("--out", p, false).is_err());
    assert!(matches!(
        output_file("--json", Path::new("")).unwrap_err(),
        CheckError::EmptyPath { .. }
    ));
    // Nothing was made.
    let left: Vec<_> = std::fs::read_dir(p).unwrap().collect();
    assert_eq!(left.len(), 1);
}

#[test]
fn more_ranks_than_cores_is_a_warning() {
    assert_eq!(cores_warning(2, Some(2)), None);
    assert_eq!(cores_warning(4, None), None);
    let w = cores_warning(4, Some(2)).unwrap();
    assert!(
        w.contains("--ranks 4") && w.contains("2 cores") && w.contains("unrepresentative"),
        "{w}"
    );
    assert!(!w.contains('\n'));
}
