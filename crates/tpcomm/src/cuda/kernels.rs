//! The compiled kernels of a device and their by-value argument.

use super::compile;
pub(super) use super::kernel_args::KernelArgs;
use super::loader::{
    common_block, compile_and_load, per_device, per_type, resident_blocks_per_sm, PerDevice,
};
use crate::error::Result;
use crate::sys::cuda::{Function, Module};
use cudarc::driver::CudaContext;
use std::sync::Arc;

// Kernel threads per block (TPCOMM_BLOCK in kernels/allreduce.cu, whose
// launch bounds fit the registers to it).
const BLOCK: u32 = 512;

/// The compiled kernels of one device, loaded once per process.
pub(super) struct Kernels {
    pub oneshot: [Function; 3],
    /// One-shot for at most one vector per thread of the grid.
    pub oneshot_small: [Function; 3],
    pub twoshot: [Function; 3],
    /// Threads per block: BLOCK, or less if a kernel cannot take that many.
    pub block: u32,
    /// Blocks of `block` threads one SM holds at once, for the kernel that
    /// fits fewest (the occupancy API on the kernels as compiled).
    pub blocks_per_sm: u32,
    pub nvrtc: (i32, i32),
    pub arch: (i32, i32),
    pub cubin_bytes: usize,
    _module: Module,
    // Keeps the primary context (and so the module) alive for the process:
    // releasing the last reference would destroy the context under the cache.
    _ctx: Arc<CudaContext>,
}

pub(super) use super::loader::dtype_index;

pub(super) fn kernels_for(ctx: &Arc<CudaContext>) -> Result<Arc<Kernels>> {
    static CACHE: PerDevice<Kernels> = PerDevice::new();
    per_device(&CACHE, ctx, || {
        let l = compile_and_load(ctx, compile::ALLREDUCE_SRC, "allreduce.cu", "the kernels")?;
        let oneshot = per_type(&l.module, "tpcomm_oneshot")?;
        let oneshot_small = per_type(&l.module, "tpcomm_oneshot_small")?;
        let twoshot = per_type(&l.module, "tpcomm_twoshot")?;
        let block = common_block(
            oneshot.iter().chain(&oneshot_small).chain(&twoshot),
            BLOCK,
            "the all-reduce kernels",
            l.arch,
        )?;
        let blocks_per_sm =
            resident_blocks_per_sm(oneshot.iter().chain(&oneshot_small).chain(&twoshot), block)?;
        Ok(Kernels {
            oneshot,
            oneshot_small,
            twoshot,
            block,
            blocks_per_sm,
            nvrtc: l.nvrtc,
            arch: l.arch,
            cubin_bytes: l.cubin_bytes,
            _module: l.module,
            _ctx: ctx.clone(),
        })
    })
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
