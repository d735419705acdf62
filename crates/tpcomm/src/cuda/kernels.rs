//! The compiled kernels of a device and their by-value argument.

use super::compile;
use super::cuda_err;
use super::raw::{Function, Module};
use super::MAX_WORLD;
use crate::dtype::DType;
use crate::error::{Error, Result};
use cudarc::driver::CudaContext;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

// Kernel threads per block (TPCOMM_BLOCK in kernels/allreduce.cu, whose
// launch bounds fit the registers to it).
const BLOCK: u32 = 512;

/// The kernels' by-value argument: mirrors `struct Args` in allreduce.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(super) struct KernelArgs {
    pub input: u64,
    pub output: u64,
    pub nbytes: u64,
    pub bufs: [u64; MAX_WORLD],
    pub epoch_stride: u64,
    pub slot_stride: u64,
    pub shard_stride: u64,
    pub ag_offset: u64,
    pub ctl: u64,
    pub status: u64,
    pub timeout_ns: u64,
    pub rank: u32,
    pub world: u32,
}

/// The compiled kernels of one device, loaded once per process.
pub(super) struct Kernels {
    pub oneshot: [Function; 3],
    /// One-shot for at most one vector per thread of the grid.
    pub oneshot_small: [Function; 3],
    pub twoshot: [Function; 3],
    /// Threads per block: BLOCK, or less if a kernel cannot take that many.
    pub block: u32,
    pub nvrtc: (i32, i32),
    pub arch: (i32, i32),
    pub cubin_bytes: usize,
    _module: Module,
    // Keeps the primary context (and so the module) alive for the process:
    // releasing the last reference would destroy the context under the cache.
    _ctx: Arc<CudaContext>,
}

pub(super) fn dtype_index(d: DType) -> usize {
    match d {
        DType::F32 => 0,
        DType::F16 => 1,
        DType::Bf16 => 2,
    }
}

pub(super) fn kernels_for(ctx: &Arc<CudaContext>) -> Result<Arc<Kernels>> {
    static CACHE: OnceLock<Mutex<HashMap<usize, Arc<Kernels>>>> = OnceLock::new();
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
    let compiled = compile::compile_cached(compile::ALLREDUCE_SRC, "allreduce.cu", arch)?;
    let module = Module::load(ctx.cu_ctx(), &compiled.cubin).map_err(|e| Error::Library {
        library: "NVRTC".into(),
        detail: format!(
            "the kernels compiled by NVRTC {}.{} for sm_{}{} did not load ({e}); the driver may be older than this NVRTC",
            compiled.nvrtc.0, compiled.nvrtc.1, arch.0, arch.1
        ),
    })?;
    let f = |n: &str| module.function(n);
    let oneshot = [
        f("tpcomm_oneshot_f32")?,
        f("tpcomm_oneshot_f16")?,
        f("tpcomm_oneshot_bf16")?,
    ];
    let oneshot_small = [
        f("tpcomm_oneshot_small_f32")?,
        f("tpcomm_oneshot_small_f16")?,
        f("tpcomm_oneshot_small_bf16")?,
    ];
    let twoshot = [
        f("tpcomm_twoshot_f32")?,
        f("tpcomm_twoshot_f16")?,
        f("tpcomm_twoshot_bf16")?,
    ];
    let mut block = BLOCK;
    for k in oneshot.iter().chain(&oneshot_small).chain(&twoshot) {
        // Rounded down to whole warps; the kernels work with any block size.
        block = block.min(k.max_threads_per_block()? / 32 * 32);
    }
    if block == 0 {
        return Err(Error::Unsupported(format!(
            "the all-reduce kernels cannot launch on sm_{}{} (not enough registers for one warp)",
            arch.0, arch.1
        )));
    }
    let k = Arc::new(Kernels {
        oneshot,
        oneshot_small,
        twoshot,
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
        // 18 u64 words and two u32: the size `struct Args` has in allreduce.cu.
        assert_eq!(std::mem::size_of::<KernelArgs>(), 18 * 8 + 8);
    }
}
