//! The compiled host-path kernels of a device and their by-value argument.

use super::super::compile;
use super::super::cuda_err;
use super::super::raw::{Function, Module};
use super::super::MAX_WORLD;
use crate::dtype::DType;
use crate::error::{Error, Result};
use cudarc::driver::CudaContext;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// The CUDA C source of the host-path kernels.
pub const HOST_ALLREDUCE_SRC: &str = include_str!("../kernels/host_allreduce.cu");

// HG_BLOCK in host_allreduce.cu, whose launch bounds fit the registers to it.
const BLOCK: u32 = 512;

/// Mirrors `struct HArgs` in host_allreduce.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(super) struct HostKernelArgs {
    pub input: u64,
    pub output: u64,
    pub nbytes: u64,
    pub areas: [u64; MAX_WORLD],
    pub half_stride: u64,
    pub data_offset: u64,
    pub flag_offset: u64,
    pub chunk_bytes: u64,
    pub ctl: u64,
    pub status: u64,
    pub timeout_ns: u64,
    pub rank: u32,
    pub world: u32,
    pub producers: u32,
    pub pad: u32,
}

pub(super) struct HostKernels {
    pub ll: [Function; 3],
    pub chunked: [Function; 3],
    pub block: u32,
    pub nvrtc: (i32, i32),
    pub arch: (i32, i32),
    pub cubin_bytes: usize,
    _module: Module,
    // Keeps the primary context (and so the module) alive for the process.
    _ctx: Arc<CudaContext>,
}

pub(super) fn dtype_index(d: DType) -> usize {
    match d {
        DType::F32 => 0,
        DType::F16 => 1,
        DType::Bf16 => 2,
    }
}

/// Compiles (or loads from the disk cache) and loads the kernels once per
/// device and process.
pub(super) fn host_kernels_for(ctx: &Arc<CudaContext>) -> Result<Arc<HostKernels>> {
    static CACHE: OnceLock<Mutex<HashMap<usize, Arc<HostKernels>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    let mut map = cache
        .lock()
        .map_err(|_| Error::Aborted("kernel cache poisoned by a panic".into()))?;
    if let Some(k) = map.get(&ctx.ordinal()) {
        return Ok(k.clone());
    }
    let arch = ctx
        .compute_capability()
        .map_err(cuda_err("cuDeviceGetAttribute"))?;
    let compiled = compile::compile_cached(HOST_ALLREDUCE_SRC, "host_allreduce.cu", arch)?;
    let module = Module::load(ctx.cu_ctx(), &compiled.cubin).map_err(|e| Error::Library {
        library: "NVRTC".into(),
        detail: format!(
            "the host-path kernels compiled by NVRTC {}.{} for sm_{}{} did not load ({e}); the driver may be older than this NVRTC",
            compiled.nvrtc.0, compiled.nvrtc.1, arch.0, arch.1
        ),
    })?;
    let f = |n: &str| module.function(n);
    let ll = [
        f("tpcomm_host_ll_f32")?,
        f("tpcomm_host_ll_f16")?,
        f("tpcomm_host_ll_bf16")?,
    ];
    let chunked = [
        f("tpcomm_host_chunked_f32")?,
        f("tpcomm_host_chunked_f16")?,
        f("tpcomm_host_chunked_bf16")?,
    ];
    let mut block = BLOCK;
    for k in ll.iter().chain(&chunked) {
        // Whole warps; the kernels work with any block size.
        block = block.min(k.max_threads_per_block()? / 32 * 32);
    }
    if block == 0 {
        return Err(Error::Unsupported(format!(
            "the host-path kernels cannot launch on sm_{}{} (not enough registers for one warp)",
            arch.0, arch.1
        )));
    }
    let k = Arc::new(HostKernels {
        ll,
        chunked,
        block,
        nvrtc: compiled.nvrtc,
        arch,
        cubin_bytes: compiled.cubin.len(),
        _module: module,
        _ctx: ctx.clone(),
    });
    map.insert(ctx.ordinal(), k.clone());
    Ok(k)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_args_match_the_cuda_struct_size() {
        // 18 u64 words and four u32: the size `struct HArgs` has.
        assert_eq!(std::mem::size_of::<HostKernelArgs>(), 18 * 8 + 16);
        assert_eq!(std::mem::align_of::<HostKernelArgs>(), 8);
    }
}
