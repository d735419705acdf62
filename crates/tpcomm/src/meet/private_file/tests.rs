use super::*;
use std::os::unix::fs::PermissionsExt;

#[test]
fn files_round_trip_and_links_or_loose_modes_are_refused() {
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("rec");
    assert_eq!(read(&f).unwrap(), None);
    write(&f, b"hello").unwrap();
    assert_eq!(read(&f).unwrap().as_deref(), Some(&b"hello"[..]));
    let meta = std::fs::metadata(&f).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    // Replacing a planted link replaces the link, never its target.
    let victim = d.path().join("victim");
    std::fs::write(&victim, b"keep").unwrap();
    let l = d.path().join("link");
    std::os::unix::fs::symlink(&victim, &l).unwrap();
    assert!(read(&l).unwrap_err().to_string().contains("symbolic link"));
    write(&l, b"new").unwrap();
    assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
    // A file others may write is refused.
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o666)).unwrap();
    assert!(read(&f).unwrap_err().to_string().contains("other users"));
}

#[test]
fn only_the_first_new_file_is_written_and_a_planted_link_is_never_followed() {
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("decision");
    assert!(write_new(&f, b"first").unwrap());
    assert!(!write_new(&f, b"second").unwrap());
    assert_eq!(read(&f).unwrap().as_deref(), Some(&b"first"[..]));
    let meta = std::fs::metadata(&f).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    // A link planted at the name counts as taken; its target is untouched.
    let victim = d.path().join("victim");
    std::fs::write(&victim, b"keep").unwrap();
    let l = d.path().join("planted");
    std::os::unix::fs::symlink(&victim, &l).unwrap();
    assert!(!write_new(&l, b"new").unwrap());
    assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
    // No temporary file is left behind.
    let names: Vec<_> = std::fs::read_dir(d.path()).unwrap().flatten().collect();
    assert_eq!(names.len(), 3, "{names:?}");
    // Racing writers: exactly one wins.
    let g = d.path().join("raced");
    let wins: usize = std::thread::scope(|s| {
        let hs: Vec<_> = (0..8u8)
            .map(|i| {
                let g = &g;
                s.spawn(move || write_new(g, &[i]).unwrap() as usize)
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).sum()
    });
    assert_eq!(wins, 1);
}
