//! Ranks created with different sizes get an error that names the setting
//! that differs.

use std::time::Duration;
use tpcomm::{ByteSize, Error, HostCommunicator, HostConfig};

/// Rank 0 with `piece0`/`max0`, rank 1 with `piece1`/`max1`; rank 1's error.
fn rank1_error(max0: ByteSize, piece0: ByteSize, max1: ByteSize, piece1: ByteSize) -> String {
    let dir = tempfile::tempdir().unwrap();
    let cfg = |rank, max, piece| {
        let mut c = HostConfig::new(rank, 2, dir.path());
        c.max_message = max;
        c.piece = piece;
        c.timeout = Duration::from_secs(2);
        c
    };
    std::thread::scope(|s| {
        let r0 = s.spawn(|| HostCommunicator::new(cfg(0, max0, piece0)).err());
        let r1 = s.spawn(|| HostCommunicator::new(cfg(1, max1, piece1)).err());
        let e1: Option<Error> = r1.join().unwrap();
        let _ = r0.join().unwrap();
        e1.expect("rank 1 attached to a segment of other sizes")
            .to_string()
    })
}

#[test]
fn a_different_maximum_message_is_named_as_such() {
    let e = rank1_error(
        ByteSize::mib(1),
        ByteSize::mib(1),
        ByteSize::mib(2),
        ByteSize::mib(2),
    );
    assert!(e.contains("maximum message size"), "{e}");
}

/// The segment's length depends on the piece too (more buffers, a larger
/// signal area): the settings are compared by name before the length, so a
/// different piece is named as such.
#[test]
fn a_different_piece_size_is_named_as_such() {
    let e = rank1_error(
        ByteSize::mib(1),
        ByteSize::mib(1),
        ByteSize::mib(1),
        ByteSize::kib(64),
    );
    assert!(
        e.contains("piece size") && !e.contains("maximum message size"),
        "{e}"
    );
}
