use super::*;

#[test]
fn a_notice_is_seen_by_its_job_only_and_swept_once_its_writer_is_gone() {
    let d = tempfile::tempdir().unwrap();
    let file = d.path().join("rv");
    let uid = crate::meet::identity::euid();
    let (mine, theirs) = ([1, 2], [3, 4]);
    let long = Duration::from_secs(60);
    assert_eq!(read(&file, mine, uid, long), None);
    write(&file, mine, 3);
    let n = read(&file, mine, uid, long).unwrap();
    assert_eq!((n.rank, n.writer), (3, Proc::me()));
    assert_eq!(read(&file, theirs, uid, long), None);
    assert_eq!(read(&file, mine, uid + 1, long), None, "another user's");
    // Writer alive: kept. A dead writer's notice goes.
    sweep(&file, uid);
    assert!(path(&file, mine).exists());
    std::fs::write(
        path(&file, theirs),
        format!("tpcomm-abort 1 {} 0 1 1\n", hash_hex(theirs)),
    )
    .unwrap();
    sweep(&file, uid);
    assert!(path(&file, mine).exists() && !path(&file, theirs).exists());
}
