//! A standalone communicator's pre-multiplied sums
//! (`ncclRedOpCreatePreMulSum`, `ncclRedOpDestroy`): the op values it gave
//! out, and what each scales by. As in NCCL, a value is the
//! communicator's own (5 and up, `ncclNumOps` being 5) and stands for a
//! scalar of one data type: a host scalar's bytes are copied at creation, a
//! device scalar is its pointer, read in stream order at every call (so a
//! CUDA graph replay reads its value then). The gathered path
//! (gathered.rs) runs the sum: each rank puts its scalar beside its block
//! before the all-gather, and the reduction kernel scales block r by rank
//! r's.

use crate::types::*;
use std::collections::HashMap;
use std::sync::Mutex;

/// `ncclNumOps`: the first value a created op gets.
pub const FIRST_OP: NcclRedOp = 5;

/// Where a pre-multiplied sum's scalar is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scalar {
    /// `ncclScalarHostImmediate`: the element's bytes (little-endian, low
    /// `size` bytes of the word), copied at creation.
    Host(u64),
    /// `ncclScalarDevice`: a device pointer to one element, read at each call.
    Device(u64),
}

/// One created op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PreMul {
    /// The data type it was created for (the only one it serves).
    pub datatype: NcclDataType,
    pub scalar: Scalar,
}

#[derive(Default)]
struct Table {
    live: HashMap<NcclRedOp, PreMul>,
    /// The value the next creation tries first (0: FIRST_OP).
    next: NcclRedOp,
}

/// A communicator's created ops.
#[derive(Default)]
pub struct PreMulOps(Mutex<Table>);

impl PreMulOps {
    /// A new op value for `p`: values are not handed out again while they
    /// live, nor soon after they are destroyed (each creation takes the next
    /// value, wrapping from `i32::MAX` to 5), so a stale value is found out.
    pub fn create(&self, p: PreMul) -> NcclRedOp {
        let mut t = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let mut v = t.next.max(FIRST_OP);
        while t.live.contains_key(&v) {
            v = if v == NcclRedOp::MAX { FIRST_OP } else { v + 1 };
        }
        t.next = if v == NcclRedOp::MAX { FIRST_OP } else { v + 1 };
        t.live.insert(v, p);
        v
    }

    /// Forgets `op`; false when it is not a live op of this communicator.
    pub fn destroy(&self, op: NcclRedOp) -> bool {
        let mut t = self.0.lock().unwrap_or_else(|e| e.into_inner());
        t.live.remove(&op).is_some()
    }

    /// What `op` is, if it is a live op of this communicator.
    pub fn get(&self, op: NcclRedOp) -> Option<PreMul> {
        let t = self.0.lock().unwrap_or_else(|e| e.into_inner());
        t.live.get(&op).copied()
    }
}

/// What `ncclRedOpCreatePreMulSum` checks and keeps: `Err` is the text for
/// ncclGetLastError (the call returns ncclInvalidArgument).
///
/// # Safety
/// For host residence, `scalar` (non-null) points to one element of
/// `datatype` in host memory, readable for the call.
pub unsafe fn scalar_of(
    scalar: *const std::ffi::c_void,
    datatype: NcclDataType,
    residence: std::ffi::c_int,
) -> Result<PreMul, String> {
    const CALL: &str = "ncclRedOpCreatePreMulSum";
    let Some(z) = type_size(datatype) else {
        return Err(format!("{CALL}: ncclDataType {datatype} is not a type"));
    };
    if scalar.is_null() {
        return Err(format!("{CALL}: the scalar pointer is NULL"));
    }
    let scalar = match residence {
        0 => Scalar::Device(scalar as u64),
        1 => {
            let mut b = [0u8; 8];
            // SAFETY: the caller's contract: one element of `z` bytes.
            unsafe { std::ptr::copy_nonoverlapping(scalar as *const u8, b.as_mut_ptr(), z) };
            Scalar::Host(u64::from_le_bytes(b))
        }
        r => {
            return Err(format!(
                "{CALL}: ncclScalarResidence {r} is neither 0 (device) nor 1 (host immediate)"
            ))
        }
    };
    Ok(PreMul { datatype, scalar })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_start_at_five_are_not_reused_soon_and_skip_live_ones() {
        let ops = PreMulOps::default();
        let p = PreMul {
            datatype: 7,
            scalar: Scalar::Host(0x3f80_0000),
        };
        let a = ops.create(p);
        let b = ops.create(p);
        assert_eq!((a, b), (5, 6));
        assert_eq!(ops.get(a), Some(p));
        assert!(ops.destroy(a));
        assert!(!ops.destroy(a), "destroyed twice");
        assert_eq!(ops.get(a), None);
        assert_eq!(ops.get(4), None);
        assert_eq!(ops.get(-1), None);
        // The next value, not the freed 5.
        assert_eq!(ops.create(p), 7);
        assert_eq!(ops.0.lock().unwrap().live.len(), 2);
        // Wrapping: past i32::MAX back to 5, skipping the live 6 and 7.
        ops.0.lock().unwrap().next = NcclRedOp::MAX;
        assert_eq!(ops.create(p), NcclRedOp::MAX);
        assert_eq!(ops.create(p), 5);
        assert_eq!(ops.create(p), 8);
    }

    #[test]
    fn creation_checks_type_pointer_and_residence() {
        let v = 2.5f64;
        let p = &v as *const f64 as *const std::ffi::c_void;
        // SAFETY: (test) `p` points to an f64 on this stack.
        unsafe {
            assert_eq!(
                scalar_of(p, 8, 1),
                Ok(PreMul {
                    datatype: 8,
                    scalar: Scalar::Host(2.5f64.to_bits())
                })
            );
            let h = 0x3800u16; // f16 0.5
            let hp = &h as *const u16 as *const std::ffi::c_void;
            assert_eq!(scalar_of(hp, 6, 1).unwrap().scalar, Scalar::Host(h as u64));
            let fp8 = 0x38u8;
            let bp = &fp8 as *const u8 as *const std::ffi::c_void;
            assert_eq!(scalar_of(bp, 10, 1).unwrap().scalar, Scalar::Host(0x38));
            assert_eq!(
                scalar_of(0x1000 as *const _, 7, 0).unwrap().scalar,
                Scalar::Device(0x1000)
            );
            assert!(scalar_of(p, 12, 1).unwrap_err().contains("ncclDataType 12"));
            assert!(scalar_of(std::ptr::null(), 7, 1)
                .unwrap_err()
                .contains("NULL"));
            assert!(scalar_of(p, 7, 2)
                .unwrap_err()
                .contains("ncclScalarResidence 2"));
        }
    }
}
