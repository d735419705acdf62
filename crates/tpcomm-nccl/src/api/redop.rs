//! `ncclRedOpCreatePreMulSum` and `ncclRedOpDestroy`: NCCL's on a
//! communicator NCCL made; on a standalone one, served here
//! (standalone/premul.rs keeps the ops, standalone/gathered.rs runs them).

use crate::ffi::{call_real, guard, Fail};
use crate::standalone::{self, premul, registry};
use crate::types::*;
use std::ffi::{c_int, c_void};

#[no_mangle]
pub unsafe extern "C" fn ncclRedOpCreatePreMulSum(
    op: *mut NcclRedOp,
    scalar: *mut c_void,
    datatype: NcclDataType,
    residence: c_int,
    comm: NcclComm,
) -> NcclResult {
    const CALL: &str = "ncclRedOpCreatePreMulSum";
    guard(CALL, || {
        let Some(a) = registry::lookup(comm) else {
            if let Some(r) = registry::unknown(CALL, comm) {
                return r;
            }
            return call_real!(
                ncclRedOpCreatePreMulSum(op, scalar, datatype, residence, comm)
                    as fn(*mut NcclRedOp, *mut c_void, NcclDataType, c_int, NcclComm) -> NcclResult
            )
            .unwrap_or_else(|_| NcclResult::missing());
        };
        if op.is_null() {
            return standalone::fail(INVALID_ARGUMENT, format!("{CALL}: the op pointer is NULL"));
        }
        // SAFETY: NCCL's contract: a host scalar points to one element of
        // `datatype`, read during the call; a device one is only kept.
        match unsafe { premul::scalar_of(scalar, datatype, residence) } {
            Ok(p) => {
                let v = a.premul.create(p);
                // SAFETY: non-null, the caller's ncclRedOp_t.
                unsafe { *op = v };
                SUCCESS
            }
            Err(text) => standalone::fail(INVALID_ARGUMENT, text),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclRedOpDestroy(op: NcclRedOp, comm: NcclComm) -> NcclResult {
    const CALL: &str = "ncclRedOpDestroy";
    guard(CALL, || {
        let Some(a) = registry::lookup(comm) else {
            if let Some(r) = registry::unknown(CALL, comm) {
                return r;
            }
            return call_real!(ncclRedOpDestroy(op, comm) as fn(NcclRedOp, NcclComm) -> NcclResult)
                .unwrap_or_else(|_| NcclResult::missing());
        };
        if a.premul.destroy(op) {
            SUCCESS
        } else {
            standalone::fail(
                INVALID_ARGUMENT,
                format!("{CALL}: ncclRedOp {op} is not an op ncclRedOpCreatePreMulSum made on this communicator (a built-in op, one destroyed, or another communicator's)"),
            )
        }
    })
}
