//! The argument checks of every call a standalone communicator serves, made
//! before anything is queued: each bad argument is ncclInvalidArgument with
//! ncclGetLastError naming the call and the argument (docs/drop-in.md, "Bad
//! input"). NCCL checks the same on its own communicators.

use crate::standalone;
use crate::standalone::comm::StandaloneComm;
use crate::types::*;
use std::ffi::c_int;

/// No GPU buffer reaches this many bytes (CUDA's unified address space is
/// 2^47 bytes on every GPU tpcomm runs on): a larger count is a bad value,
/// such as -1 passed as a size_t.
pub const MAX_BYTES: usize = 1 << 47;

/// One call's arguments, as the checks need them.
pub struct Args {
    pub send: usize,
    pub recv: usize,
    pub count: usize,
    pub dtype: NcclDataType,
    /// The reduction, for the calls that take one.
    pub op: Option<NcclRedOp>,
    /// The root, for the rooted calls.
    pub root: Option<c_int>,
    /// Elements of the larger buffer per `count` (the rank count for the
    /// gathered side of an all-gather or reduce-scatter, else 1).
    pub span: usize,
    /// Whether this rank reads `send` (a broadcast's non-root does not).
    pub send_used: bool,
    /// Whether this rank writes `recv`.
    pub recv_used: bool,
}

impl Args {
    /// A call that reads `send` and writes `recv`, `count` elements each,
    /// with no op and no root.
    pub fn plain(
        send: *const std::ffi::c_void,
        recv: *mut std::ffi::c_void,
        count: usize,
        dtype: NcclDataType,
    ) -> Args {
        Args {
            send: send as usize,
            recv: recv as usize,
            count,
            dtype,
            op: None,
            root: None,
            span: 1,
            send_used: true,
            recv_used: true,
        }
    }
}

/// The built-in reductions: sum, prod, max, min, avg.
const BUILTIN_OPS: std::ops::RangeInclusive<NcclRedOp> = 0..=4;

/// Checks `x` for `call` on `a`: `Err` is the call's result.
pub fn check(call: &str, a: &StandaloneComm, x: &Args) -> Result<(), NcclResult> {
    let bad = |what: String| {
        Err(standalone::fail(
            INVALID_ARGUMENT,
            format!("{call}: {what}"),
        ))
    };
    let Some(size) = type_size(x.dtype) else {
        return bad(format!(
            "ncclDataType {} is not an NCCL data type (0 to 11)",
            x.dtype
        ));
    };
    if let Some(op) = x.op {
        if !BUILTIN_OPS.contains(&op) && a.premul.get(op).is_none() {
            return bad(format!(
                "ncclRedOp {op} is not a built-in op (0 to 4: sum, prod, max, min, avg) nor one ncclRedOpCreatePreMulSum made on this communicator"
            ));
        }
    }
    if let Some(root) = x.root {
        if !(0..a.world as c_int).contains(&root) {
            return bad(format!(
                "root {root} is not a rank of this communicator (0 to {})",
                a.world - 1
            ));
        }
    }
    let bytes = x
        .count
        .checked_mul(x.span.max(1))
        .and_then(|n| n.checked_mul(size));
    if bytes.is_none_or(|b| b > MAX_BYTES) {
        return bad(format!(
            "count {} of ncclDataType {} is more than any GPU buffer holds (a negative count passed as size_t?)",
            x.count, x.dtype
        ));
    }
    if x.count > 0 {
        if x.send_used && x.send == 0 {
            return bad("sendbuff is NULL".into());
        }
        if x.recv_used && x.recv == 0 {
            return bad("recvbuff is NULL".into());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::standalone_tests::hollow;
    use crate::standalone::registry::{lookup, release};

    fn args() -> Args {
        Args {
            send: 0x1000,
            recv: 0x2000,
            count: 4,
            dtype: 7,
            op: Some(0),
            root: None,
            span: 1,
            send_used: true,
            recv_used: true,
        }
    }

    #[test]
    fn each_bad_argument_is_invalid_argument_naming_it() {
        let h = hollow(0, 3);
        let a = lookup(h).unwrap();
        assert_eq!(check("ncclAllReduce", &a, &args()), Ok(()));
        let cases: Vec<(Args, &str)> = vec![
            (Args { send: 0, ..args() }, "sendbuff is NULL"),
            (Args { recv: 0, ..args() }, "recvbuff is NULL"),
            (
                Args {
                    dtype: 12,
                    ..args()
                },
                "ncclDataType 12",
            ),
            (
                Args {
                    dtype: -1,
                    ..args()
                },
                "ncclDataType -1",
            ),
            (
                Args {
                    op: Some(5),
                    ..args()
                },
                "ncclRedOp 5",
            ),
            (
                Args {
                    op: Some(-1),
                    ..args()
                },
                "ncclRedOp -1",
            ),
            (
                Args {
                    root: Some(3),
                    ..args()
                },
                "root 3",
            ),
            (
                Args {
                    root: Some(-1),
                    ..args()
                },
                "root -1",
            ),
            (
                Args {
                    count: usize::MAX,
                    ..args()
                },
                "count 18446744073709551615",
            ),
            (
                Args {
                    count: 1 << 60,
                    ..args()
                },
                "count 1152921504606846976",
            ),
            (
                Args {
                    count: 1 << 45,
                    span: 3,
                    ..args()
                },
                "count 35184372088832",
            ),
        ];
        for (x, named) in cases {
            assert_eq!(
                check("ncclAllReduce", &a, &x),
                Err(INVALID_ARGUMENT),
                "{named}"
            );
            let text = standalone::last_error();
            assert!(
                text.starts_with("ncclAllReduce: ") && text.contains(named),
                "{text}"
            );
        }
        // Nothing is read or written for an empty call, nor by a rank
        // that does not use the buffer.
        let empty = Args {
            send: 0,
            recv: 0,
            count: 0,
            ..args()
        };
        assert_eq!(check("ncclAllReduce", &a, &empty), Ok(()));
        let non_root = Args {
            send: 0,
            root: Some(2),
            send_used: false,
            ..args()
        };
        assert_eq!(check("ncclBroadcast", &a, &non_root), Ok(()));
        release("ncclCommDestroy", h, true);
    }
}
