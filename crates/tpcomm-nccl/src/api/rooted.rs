//! `ncclReduce`, `ncclGather`, `ncclScatter` and `ncclAlltoAll`: served by
//! standalone/rooted.rs on a standalone communicator, forwarded to the real
//! NCCL unchanged on any other (tpcomm's communicator beside NCCL's does not
//! take them).

use crate::standalone::rooted::{rooted, What};
use crate::types::*;
use std::ffi::{c_int, c_void};

/// Defines a rooted call as nccl.h spells them (the buffers, the count and
/// the type, then `$extra`, then the communicator and the stream), served on
/// a standalone communicator by `rooted($what, .., $root)`.
macro_rules! rooted_call {
    ($name:ident ( $($extra:ident : $ty:ty),* ) => $what:expr, $root:expr) => {
        served_or_forwarded! {
            fn $name(
                sendbuff: *const c_void,
                recvbuff: *mut c_void,
                count: usize,
                datatype: NcclDataType,
                $($extra: $ty,)*
                comm: NcclComm,
                stream: CudaStream,
            ) on comm;
            standalone a => {
                let bufs = buffers(sendbuff, recvbuff, count, datatype, stream);
                rooted($what, &a, &bufs, $root)
            };
        }
    };
}

rooted_call!(ncclReduce(op: NcclRedOp, root: c_int) => What::Reduce(op), root);
rooted_call!(ncclGather(root: c_int) => What::Gather, root);
rooted_call!(ncclScatter(root: c_int) => What::Scatter, root);
rooted_call!(ncclAlltoAll() => What::AllToAll, 0);
