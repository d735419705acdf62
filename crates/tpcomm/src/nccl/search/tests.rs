use super::*;

#[test]
fn sonames_come_first_then_only_existing_wheel_files() {
    let dir = tempfile::tempdir().unwrap();
    let site = dir.path().join("lib/python3.12/site-packages");
    std::fs::create_dir_all(site.join("nvidia/nccl/lib")).unwrap();
    std::fs::create_dir_all(dir.path().join("lib/python3.9/site-packages")).unwrap();
    let wanted = site.join("nvidia/nccl/lib/libnccl.so.2");
    let list = candidates_in(&[dir.path().to_path_buf()], |p| p == wanted);
    assert_eq!(
        list,
        vec![
            Candidate::Soname("libnccl.so.2"),
            Candidate::Soname("libnccl.so"),
            Candidate::Path(wanted.clone()),
        ]
    );
}

#[test]
fn newer_python_is_searched_before_older() {
    let dir = tempfile::tempdir().unwrap();
    for v in ["python3.9", "python3.12", "python3.10"] {
        std::fs::create_dir_all(dir.path().join("lib").join(v)).unwrap();
    }
    let sites = site_dirs(dir.path());
    let names: Vec<String> = sites
        .iter()
        .map(|p| {
            p.parent()
                .unwrap()
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    assert_eq!(
        names,
        [
            "python3.12",
            "python3.12",
            "python3.10",
            "python3.10",
            "python3.9",
            "python3.9"
        ]
    );
}

#[test]
fn active_environment_prefixes_come_first() {
    let p = python_prefixes(Some("/venv".into()), None, Some("/home/u".into()));
    assert_eq!(
        p,
        [
            PathBuf::from("/venv"),
            PathBuf::from("/usr/local"),
            PathBuf::from("/usr"),
            PathBuf::from("/home/u/.local")
        ]
    );
}
