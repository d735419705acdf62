//! The compiled host-path kernels of a device and their by-value argument.

use super::super::compile::HOST_ALLREDUCE_SRC;
pub(super) use super::super::kernel_args::HostKernelArgs;
use super::super::loader::{
    common_block, compile_and_load, per_device, per_type, resident_blocks_per_sm, PerDevice,
};
use crate::error::Result;
use crate::sys::cuda::{Function, Module};
use cudarc::driver::CudaContext;
use std::sync::Arc;

// HG_BLOCK in host_allreduce.cu, whose launch bounds fit the registers to it.
const BLOCK: u32 = 512;

pub(super) struct HostKernels {
    pub delta: [Function; 3],
    pub chunked: [Function; 3],
    pub block: u32,
    /// Blocks of `block` threads one SM holds at once, for the kernel that
    /// fits fewest (sizes the grids when ranks share a GPU).
    pub blocks_per_sm: u32,
    pub nvrtc: (i32, i32),
    pub arch: (i32, i32),
    pub cubin_bytes: usize,
    _module: Module,
    // Keeps the primary context (and so the module) alive for the process.
    _ctx: Arc<CudaContext>,
}

pub(super) use super::super::loader::dtype_index;

/// Compiles (or loads from the disk cache) and loads the kernels once per
/// device and process.
pub(super) fn host_kernels_for(ctx: &Arc<CudaContext>) -> Result<Arc<HostKernels>> {
    static CACHE: PerDevice<HostKernels> = PerDevice::new();
    per_device(&CACHE, ctx, || {
        let l = compile_and_load(
            ctx,
            HOST_ALLREDUCE_SRC,
            "host_allreduce.cu",
            "the host-path kernels",
        )?;
        let delta = per_type(&l.module, "tpcomm_host_delta")?;
        let chunked = per_type(&l.module, "tpcomm_host_chunked")?;
        let block = common_block(
            delta.iter().chain(&chunked),
            BLOCK,
            "the host-path kernels",
            l.arch,
        )?;
        let blocks_per_sm = resident_blocks_per_sm(delta.iter().chain(&chunked), block)?;
        Ok(HostKernels {
            blocks_per_sm,
            delta,
            chunked,
            block,
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
        // 23 u64 words and three u32, padded to 8 bytes: the size `struct
        // HArgs` has.
        assert_eq!(std::mem::size_of::<HostKernelArgs>(), 23 * 8 + 16);
        assert_eq!(std::mem::align_of::<HostKernelArgs>(), 8);
    }
}
