//! `ncclSend` and `ncclRecv`: served by standalone/p2p.rs on a standalone
//! communicator (kept until the group ends), forwarded to the real NCCL
//! unchanged on any other.

use crate::standalone::p2p;
use crate::types::*;
use std::ffi::{c_int, c_void};

/// Defines ncclSend (`$send` true) or ncclRecv as nccl.h spells them: the
/// buffer `$buff`, then the count, type, peer, communicator and stream.
macro_rules! p2p_call {
    ($name:ident ( $buff:ident : $ty:ty ), send: $send:expr) => {
        served_or_forwarded! {
            fn $name(
                $buff: $ty,
                count: usize,
                datatype: NcclDataType,
                peer: c_int,
                comm: NcclComm,
                stream: CudaStream,
            ) on comm;
            standalone a => p2p::call($send, a, $buff, count, datatype, peer, stream);
        }
    };
}

p2p_call!(ncclSend(sendbuff: *const c_void), send: true);
p2p_call!(ncclRecv(recvbuff: *mut c_void), send: false);
