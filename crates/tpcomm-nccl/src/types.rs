//! NCCL's C types and constants (values from nccl.h, stable since 2.x).

use std::ffi::{c_int, c_void};
use tpcomm::DType;

pub type NcclResult = c_int;
pub type NcclComm = *mut c_void;
pub type NcclDataType = c_int;
pub type NcclRedOp = c_int;
pub type CudaStream = *mut c_void;
/// `ncclConfig_t*`, `ncclSimInfo_t*`, `ncclWindow_t`: only passed through.
pub type Opaque = *mut c_void;

pub const SUCCESS: NcclResult = 0;
pub const SYSTEM_ERROR: NcclResult = 2;
pub const INTERNAL_ERROR: NcclResult = 3;
pub const IN_PROGRESS: NcclResult = 7;
/// `ncclInvalidArgument`.
pub const INVALID_ARGUMENT: NcclResult = 4;
/// `ncclRemoteError`: what the async error query reports for a lost peer.
pub const REMOTE_ERROR: NcclResult = 6;
/// `ncclUnhandledCudaError`.
pub const CUDA_ERROR: NcclResult = 1;

/// The size of an NCCL data type (0 to 11), for the calls that move bytes.
pub(crate) fn type_size(t: NcclDataType) -> Option<usize> {
    match t {
        0 | 1 | 10 | 11 => Some(1),
        6 | 9 => Some(2),
        2 | 3 | 7 => Some(4),
        4 | 5 | 8 => Some(8),
        _ => None,
    }
}

/// One NCCL collective's buffers (device addresses), element count,
/// `ncclDataType_t` and stream: what an export builds once from its
/// arguments and passes by reference to what serves it.
pub use tpcomm::nccl::Buffers;

/// The [`Buffers`] of an export's arguments.
pub(crate) fn buffers(
    send: *const c_void,
    recv: *const c_void,
    count: usize,
    datatype: NcclDataType,
    stream: CudaStream,
) -> Buffers {
    Buffers {
        send: send as u64,
        recv: recv as u64,
        count,
        dtype: datatype,
        stream,
    }
}

/// tpcomm's kernel call of all of `b`, its elements counted as `dt`: a sum,
/// `Algo::Auto`, an ordinary launch (`tpcomm::cuda::Call::new`), whose call
/// word says the caller's NCCL type.
pub(crate) fn kernel_call(b: &Buffers, dt: DType) -> tpcomm::cuda::Call {
    let stream = b.stream as tpcomm::cuda::CUstream;
    tpcomm::cuda::Call::new(b.send, b.recv, b.count, dt, stream)
        .with_signature(signature(b.dtype, OP_SUM, None))
}

/// What the call words of a served call say the caller asked for (ranks
/// that asked for different calls are caught, even when the kernels move
/// the same bytes): its NCCL type, its op (a pre-multiplied sum as 5, an op
/// value out of range as 7: the checks refuse those before any launch) and
/// a rooted call's root.
pub(crate) fn signature(
    datatype: NcclDataType,
    op: NcclRedOp,
    root: Option<usize>,
) -> tpcomm::cuda::Signature {
    tpcomm::cuda::Signature {
        nccl_type: u8::try_from(datatype)
            .ok()
            .filter(|t| *t < 16)
            .unwrap_or(15),
        op: match op {
            0..=4 => op as u8,
            o if o >= 5 => 5,
            _ => 7,
        },
        root: root.and_then(|r| u8::try_from(r).ok()),
    }
}

/// `ncclSum`: the only op the tpcomm kernels reduce with.
pub const OP_SUM: NcclRedOp = 0;

/// `ncclUniqueId`, passed by value (128 bytes, so in memory on x86-64).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct UniqueId {
    pub internal: [u8; 128],
}

/// `ncclUint8`: the type the set-up exchange all-gathers bytes as.
pub const UINT8: NcclDataType = 1;

/// The tpcomm element type of an NCCL data type, if its kernels take it.
pub fn dtype_of(t: NcclDataType) -> Option<DType> {
    match t {
        6 => Some(DType::F16),
        7 => Some(DType::F32),
        9 => Some(DType::Bf16),
        _ => None,
    }
}

/// `ncclGetErrorString`'s text, for when the real library is not there to say it.
pub fn error_string(r: NcclResult) -> &'static std::ffi::CStr {
    match r {
        0 => c"no error",
        1 => c"unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
        2 => c"unhandled system error (tpcomm: is the real NCCL library found? run with TPCOMM_LOG=info)",
        3 => c"internal error - please report this issue to the NCCL developers",
        4 => c"invalid argument (run with NCCL_DEBUG=WARN for details)",
        5 => c"invalid usage (run with NCCL_DEBUG=WARN for details)",
        6 => c"remote process exited or there was a network error",
        7 => c"NCCL operation in progress",
        _ => c"unknown result code",
    }
}
