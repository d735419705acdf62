//! The compiled host-path kernels of a device and their by-value argument.

use crate::cuda::compile::HOST_ALLREDUCE_SRC;
pub(super) use crate::cuda::kernel_args::HostKernelArgs;
use crate::cuda::loader::{kernel_family, Family};

// HG_BLOCK in host_allreduce.cu, whose launch bounds fit the registers to it.
const BLOCK: u32 = 512;

/// The compiled host-path all-reduce kernels of one device: `fns` is
/// [delta, chunked] (see the indices below).
pub(super) type HostKernels = Family<2>;

/// Indices in [`HostKernels`]' `fns`.
pub(super) const DELTA: usize = 0;
pub(super) const CHUNKED: usize = 1;

pub(super) use crate::cuda::loader::dtype_index;

kernel_family! {
    /// Compiles (or loads from the disk cache) and loads the kernels once per
    /// device and process.
    pub(super) fn host_kernels_for = 2 of HOST_ALLREDUCE_SRC, "host_allreduce.cu", "the host-path kernels",
        ["tpcomm_host_delta", "tpcomm_host_chunked"], BLOCK
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_args_match_the_cuda_struct_size() {
        // 23 u64 words and three u32, padded to 8 bytes: the size `struct
        // HArgs` has.
        assert_eq!(std::mem::size_of::<HostKernelArgs>(), 23 * 8 + 16);
        assert_eq!(std::mem::align_of::<HostKernelArgs>(), 8);
    }
}
