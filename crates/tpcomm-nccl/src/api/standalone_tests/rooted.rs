//! standalone/rooted.rs's argument checks, through the exports on handles
//! without a GPU side: a bad argument is refused with NCCL's code and a
//! last error naming the call and the argument, before any GPU work; a
//! buffer only the root uses may be NULL on the other ranks.

use super::*;
use crate::api::rooted::{ncclAlltoAll, ncclGather, ncclReduce, ncclScatter};
use crate::standalone::rooted::{check, What};
use crate::standalone::rooted_plan::Kind;
use crate::types::{buffers, Buffers};

fn p(x: usize) -> *mut c_void {
    x as *mut c_void
}

/// A rooted call's buffers (`check` does not read the stream).
fn bufs(send: *mut c_void, recv: *mut c_void, count: usize, datatype: i32) -> Buffers {
    buffers(send, recv, count, datatype, p(0))
}

#[test]
fn rooted_calls_refuse_bad_roots_types_ops_and_counts_by_name() {
    let h = hollow(1, 3);
    let st = p(0);
    // SAFETY: a handle of the table; a refused call touches no buffer.
    unsafe {
        for (root, text) in [(3, "root 3 is not a rank"), (-1, "root -1 is not a rank")] {
            assert_eq!(ncclReduce(p(16), p(32), 4, 7, 0, root, h, st), 4);
            let t = standalone::last_error();
            assert!(t.contains("ncclReduce") && t.contains(text), "{t}");
            assert_eq!(ncclGather(p(16), p(32), 4, 7, root, h, st), 4);
            assert!(standalone::last_error().contains("ncclGather: root"));
            assert_eq!(ncclScatter(p(16), p(32), 4, 7, root, h, st), 4);
            assert!(standalone::last_error().contains("ncclScatter: root"));
        }
        assert_eq!(ncclReduce(p(16), p(32), 4, 12, 0, 0, h, st), 4);
        assert!(standalone::last_error().contains("ncclDataType 12"));
        assert_eq!(ncclAlltoAll(p(16), p(32), 4, -1, h, st), 4);
        assert!(standalone::last_error().contains("ncclAlltoAll: ncclDataType -1"));
        for op in [5, 99, -1] {
            assert_eq!(ncclReduce(p(16), p(32), 4, 7, op, 0, h, st), 4);
            let t = standalone::last_error();
            assert!(t.contains(&format!("ncclRedOp {op}")), "{t}");
        }
        // fp8 reduces and fp8 bytes are served (both only fail here for
        // want of a GPU side).
        assert_eq!(ncclReduce(p(16), p(32), 4, 10, 0, 0, h, st), 5);
        assert!(standalone::last_error().contains("no GPU side"));
        assert_eq!(ncclGather(p(16), p(32), 4, 11, 0, h, st), 5);
        assert!(standalone::last_error().contains("no GPU side"));
        for count in [usize::MAX, 1 << 62] {
            assert_eq!(ncclAlltoAll(p(16), p(32), count, 4, h, st), 4);
            assert!(standalone::last_error().contains("overflows"));
        }
        assert_eq!(crate::api::init::ncclCommDestroy(h), SUCCESS);
    }
}

#[test]
fn only_the_buffers_a_rank_uses_must_be_non_null() {
    let null = std::ptr::null_mut();
    let some = p(0x1000);
    let chk =
        |what, rank, send: *mut c_void, recv| check(what, rank, 3, 1, &bufs(send, recv, 5, 2));
    // The root's receive buffer (reduce, gather) and send buffer (scatter).
    for what in [What::Reduce(0), What::Gather] {
        assert!(chk(what, 0, some, null).is_ok(), "{what:?}");
        assert_eq!(chk(what, 1, some, null), Err(4));
        assert!(standalone::last_error().contains("recvbuff is NULL"));
        assert_eq!(chk(what, 0, null, some), Err(4));
        assert!(standalone::last_error().contains("sendbuff is NULL"));
    }
    assert!(chk(What::Scatter, 2, null, some).is_ok());
    assert_eq!(chk(What::Scatter, 1, null, some), Err(4));
    assert_eq!(chk(What::Scatter, 0, some, null), Err(4));
    assert_eq!(chk(What::AllToAll, 0, null, some), Err(4));
    assert_eq!(chk(What::AllToAll, 2, some, null), Err(4));
    // Nothing to move: nothing is read or written, NULL or not.
    assert!(check(What::AllToAll, 0, 3, 0, &bufs(null, null, 0, 2)).is_ok());
    assert!(check(What::Reduce(4), 1, 3, 1, &bufs(null, null, 0, 8)).is_ok());
    // The kind carries the root and, for a reduce, whether the root's
    // receive buffer is aligned to the element.
    let k = check(What::Reduce(2), 1, 3, 1, &bufs(some, p(0x1004), 5, 8));
    assert_eq!(
        k,
        Ok(Kind::Reduce {
            root: 1,
            elem: 8,
            recv_aligned: false
        })
    );
    assert_eq!(
        check(What::Scatter, 0, 3, 2, &bufs(null, some, 5, 1)),
        Ok(Kind::Scatter { root: 2 })
    );
    // An all-to-all has no root: whatever is passed is not read.
    assert_eq!(
        check(What::AllToAll, 0, 3, -7, &bufs(some, some, 5, 1)),
        Ok(Kind::AllToAll)
    );
}
