//! The element-wise reduction every algorithm ends with: for each element,
//! combine the sources in rank order in f32 and round once to the element
//! type. Same order on every rank, so every rank gets the same bits.

use crate::dtype::{Element, ReduceOp};

/// Elements per block. Small on purpose: the two f32 scratch blocks are
/// zeroed on every call, which at 2048 elements cost more than a whole
/// 1 KiB all-reduce; 256 keeps that to 2 KiB while loops stay long enough
/// to vectorise.
const BLOCK: usize = 256;

#[inline(always)]
fn combine(op: ReduceOp, acc: &mut [f32], x: &[f32]) {
    // The match is outside the loops so each loop vectorises.
    match op {
        ReduceOp::Sum => acc.iter_mut().zip(x).for_each(|(a, b)| *a += *b),
        ReduceOp::Max => acc.iter_mut().zip(x).for_each(|(a, b)| *a = a.max(*b)),
        ReduceOp::Min => acc.iter_mut().zip(x).for_each(|(a, b)| *a = a.min(*b)),
    }
}

/// Reduces `len` elements from each of `srcs` (in this order) into `dst`,
/// and into `copy` too when given (saving a second pass over the result).
///
/// # Safety
/// Every `srcs[i]`, `dst` and `copy` is valid for `len` elements, aligned,
/// and not written by anyone else during the call. `dst` may equal one of
/// `srcs` (exactly, not partially overlapping): each block is read from
/// every source before it is written. `copy` overlaps none of the others.
pub(super) unsafe fn reduce<T: Element>(
    srcs: &[*const T],
    dst: *mut T,
    copy: Option<*mut T>,
    len: usize,
    op: ReduceOp,
) {
    let mut acc = [0f32; BLOCK];
    let mut tmp = [0f32; BLOCK];
    let mut i = 0;
    while i < len {
        let n = BLOCK.min(len - i);
        // The slices below are in bounds and aligned per the contract; each
        // is dropped before the next one over the same memory is made, so a
        // shared and a mutable slice of `dst` never coexist.
        // SAFETY: as said above.
        T::load_f32(
            unsafe { std::slice::from_raw_parts(srcs[0].add(i), n) },
            &mut acc[..n],
        );
        for s in &srcs[1..] {
            // SAFETY: as said above.
            T::load_f32(
                unsafe { std::slice::from_raw_parts(s.add(i), n) },
                &mut tmp[..n],
            );
            combine(op, &mut acc[..n], &tmp[..n]);
        }
        // SAFETY: as said above.
        T::store_f32(&acc[..n], unsafe {
            std::slice::from_raw_parts_mut(dst.add(i), n)
        });
        if let Some(c) = copy {
            // SAFETY: `copy` overlaps neither `dst` nor a source (the contract).
            unsafe { std::ptr::copy_nonoverlapping(dst.add(i), c.add(i), n) };
        }
        i += n;
    }
}
