//! standalone/p2p.rs without a GPU: handles without a GPU side, ranks as
//! threads (or one thread issuing every rank's calls). The group's end
//! swaps the ranks' stream lengths and checks them before it needs the
//! GPU, so a matching group ends in the refusal for want of a GPU side and
//! a group whose sends and receives disagree in the same error on every
//! rank.

use super::*;
use crate::api::p2p::{ncclRecv, ncclSend};
use crate::standalone::p2p::finish;

fn p(x: usize) -> *mut c_void {
    x as *mut c_void
}

/// Three ranks' handles of one communicator, and the guard that removes
/// their meeting directory.
fn three() -> (Vec<usize>, standalone::TestDir) {
    let secret = standalone::parse(&standalone::new_id().unwrap()).unwrap();
    let dir = standalone::TestDir(standalone::meeting_path(
        &standalone::runtime_base(),
        &secret,
    ));
    let hs = (0..3).map(|r| hollow_with(r, 3, secret) as usize).collect();
    (hs, dir)
}

/// Rank `r`'s ring shift inside a group: `n` f32 on, `m` from behind.
fn ring(h: NcclComm, r: usize, n: usize, m: usize) -> NcclResult {
    crate::group::enter();
    // SAFETY: a handle of the table; nothing is launched without a GPU side.
    let (a, b) = unsafe {
        (
            ncclSend(p(0x1000), n, 7, ((r + 1) % 3) as c_int, h, p(0)),
            ncclRecv(p(0x2000), m, 7, ((r + 2) % 3) as c_int, h, p(0)),
        )
    };
    crate::group::leave();
    assert_eq!((a, b), (SUCCESS, SUCCESS), "kept until the group ends");
    finish()
}

#[test]
fn a_group_s_sends_and_receives_meet_at_its_end_and_disagreements_are_named_everywhere() {
    for mismatch in [false, true] {
        let (hs, _dir) = three();
        let out: Vec<(NcclResult, String)> = std::thread::scope(|s| {
            let ts: Vec<_> = (0..3)
                .map(|r| {
                    let h = hs[r];
                    s.spawn(move || {
                        // Rank 0 expects 5 elements from rank 2, which sends 4.
                        let m = if mismatch && r == 0 { 5 } else { 4 };
                        (ring(h as NcclComm, r, 4, m), standalone::last_error())
                    })
                })
                .collect();
            ts.into_iter().map(|t| t.join().unwrap()).collect()
        });
        for (r, (code, text)) in out.iter().enumerate() {
            assert_eq!(*code, INVALID_USAGE, "rank {r}: {text}");
            if mismatch {
                assert!(
                    text.contains("rank 2 sends 16 bytes to rank 0, which receives 20"),
                    "rank {r}: {text}"
                );
            } else {
                assert!(text.contains("no GPU side"), "rank {r}: {text}");
            }
        }
        for h in hs {
            release("ncclCommDestroy", h as NcclComm, true);
        }
    }
}

/// One thread issues every rank's calls inside one group (ranks as threads
/// of one process): the group's end runs each rank's part on a thread of
/// its own, so no rank waits for one its thread has not reached.
#[test]
fn one_thread_ending_a_group_for_every_rank_waits_for_none_of_them() {
    let (hs, _dir) = three();
    let t = std::time::Instant::now();
    crate::group::enter();
    for (r, &h) in hs.iter().enumerate() {
        // SAFETY: as in ring.
        unsafe {
            assert_eq!(
                ncclSend(p(0x1000), 8, 1, ((r + 1) % 3) as c_int, h as NcclComm, p(0)),
                0
            );
            assert_eq!(
                ncclRecv(p(0x2000), 8, 1, ((r + 2) % 3) as c_int, h as NcclComm, p(0)),
                0
            );
        }
    }
    crate::group::leave();
    assert_eq!(finish(), INVALID_USAGE);
    assert!(
        standalone::last_error().contains("no GPU side"),
        "{}",
        standalone::last_error()
    );
    assert!(t.elapsed() < std::time::Duration::from_secs(10));
    for h in hs {
        release("ncclCommDestroy", h as NcclComm, true);
    }
}

#[test]
fn a_bad_peer_type_count_or_buffer_is_refused_at_the_call() {
    let (hs, _dir) = three();
    let h = hs[1] as NcclComm;
    crate::group::enter();
    // SAFETY: as in ring; a refused call is not kept.
    unsafe {
        for peer in [3, -1] {
            assert_eq!(ncclSend(p(0x1000), 4, 7, peer, h, p(0)), 4);
            let t = standalone::last_error();
            assert!(
                t.contains(&format!("ncclSend rank 1/3: peer {peer} is not a rank")),
                "{t}"
            );
        }
        assert_eq!(ncclRecv(p(0x1000), 4, 12, 0, h, p(0)), 4);
        assert!(standalone::last_error().contains("ncclRecv rank 1/3: ncclDataType 12"));
        assert_eq!(ncclRecv(p(0x1000), usize::MAX, 7, 0, h, p(0)), 4);
        assert!(standalone::last_error().contains("overflows"));
        assert_eq!(ncclSend(std::ptr::null(), 4, 7, 0, h, p(0)), 4);
        assert!(standalone::last_error().contains("the buffer is NULL"));
    }
    crate::group::leave();
    // Nothing was kept: the group's end has nothing to do.
    assert_eq!(finish(), SUCCESS);
    for h in hs {
        release("ncclCommDestroy", h as NcclComm, true);
    }
}
