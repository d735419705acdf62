//! The compiled kernels of a device and their by-value argument.

use super::compile;
pub(super) use super::kernel_args::KernelArgs;
use super::loader::{kernel_family, Family};

// Kernel threads per block (TPCOMM_BLOCK in kernels/allreduce.cu, whose
// launch bounds fit the registers to it).
const BLOCK: u32 = 512;

/// The compiled all-reduce kernels of one device, loaded once per process:
/// `fns` is [one-shot, one-shot for at most one vector per thread of the
/// grid, two-shot] (see the indices below).
pub(super) type Kernels = Family<3>;

/// Indices in [`Kernels`]' `fns`.
pub(super) const ONESHOT: usize = 0;
pub(super) const ONESHOT_SMALL: usize = 1;
pub(super) const TWOSHOT: usize = 2;

pub(super) use super::loader::dtype_index;

kernel_family! {
    pub(super) fn kernels_for = 3 of compile::ALLREDUCE_SRC, "allreduce.cu", "the all-reduce kernels",
        ["tpcomm_oneshot", "tpcomm_oneshot_small", "tpcomm_twoshot"], BLOCK
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_args_match_the_cuda_struct_size() {
        // 18 u64 words and two u32: the size `struct Args` has in allreduce.cu.
        assert_eq!(std::mem::size_of::<KernelArgs>(), 19 * 8 + 8);
    }
}
