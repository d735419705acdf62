//! What every kernel family shares: compiling a source for the device in
//! hand and loading it, keeping one loaded copy per device and process, the
//! block size all of a family's kernels can launch with, the index of a type
//! in the per-type kernel arrays, and the checks every all-reduce call makes.

use super::call_word::Kind;
use super::compile;
use super::driver_error::cuda_err;
use crate::algo::Collective;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::sys::cuda::{Function, Module};
use cudarc::driver::CudaContext;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// A function `$name(ctx)` that returns the family of kernels `$bases` of
/// source `$src` (file `$file`, named `$what` in errors) on `ctx`'s device,
/// compiled and loaded the first time and then kept for the process
/// (`loader::Family::load`, `loader::per_device`).
macro_rules! kernel_family {
    ($(#[$m:meta])* $vis:vis fn $name:ident = $n:literal of $src:expr, $file:literal, $what:literal,
     [$($base:literal),+ $(,)?], $block:expr) => {
        $(#[$m])*
        $vis fn $name(
            ctx: &std::sync::Arc<cudarc::driver::CudaContext>,
        ) -> crate::error::Result<std::sync::Arc<crate::cuda::loader::Family<$n>>> {
            use crate::cuda::loader::{per_device, Family, PerDevice};
            static CACHE: PerDevice<Family<$n>> = PerDevice::new();
            per_device(&CACHE, ctx, || {
                Family::load(ctx, $src, $file, $what, [$($base),+], $block)
            })
        }
    };
}
pub(crate) use kernel_family;

/// A kernel source compiled for one device and loaded into its context.
pub struct Loaded {
    pub module: Module,
    pub arch: (i32, i32),
    pub nvrtc: (i32, i32),
    pub cubin_bytes: usize,
}

/// Compiles `src` (through the disk cache) for `ctx`'s compute capability and
/// loads it; `what` names the family in the error ("the host-path kernels").
pub fn compile_and_load(
    ctx: &Arc<CudaContext>,
    src: &str,
    name: &str,
    what: &str,
) -> Result<Loaded> {
    let arch = ctx
        .compute_capability()
        .map_err(cuda_err("cuDeviceGetAttribute"))?;
    let compiled = compile::compile_cached(src, name, arch)?;
    let module = Module::load(ctx.cu_ctx(), &compiled.cubin).map_err(|e| Error::Library {
        library: "NVRTC".into(),
        detail: format!(
            "{what} compiled by NVRTC {}.{} for sm_{}{} did not load ({e}); the driver may be older than this NVRTC",
            compiled.nvrtc.0, compiled.nvrtc.1, arch.0, arch.1
        ),
    })?;
    Ok(Loaded {
        module,
        arch,
        nvrtc: compiled.nvrtc,
        cubin_bytes: compiled.cubin.len(),
    })
}

/// A kernel family's loaded copy per device ordinal.
pub type PerDevice<T> = OnceLock<Mutex<HashMap<usize, Arc<T>>>>;

/// The copy of `ctx`'s device in `cache`, made by `make` the first time.
pub fn per_device<T>(
    cache: &'static PerDevice<T>,
    ctx: &Arc<CudaContext>,
    make: impl FnOnce() -> Result<T>,
) -> Result<Arc<T>> {
    let cache = cache.get_or_init(|| Mutex::new(HashMap::new()));
    let mut map = cache
        .lock()
        .map_err(|_| Error::Aborted("kernel cache poisoned by a panic".into()))?;
    if let Some(k) = map.get(&ctx.ordinal()) {
        return Ok(k.clone());
    }
    let k = Arc::new(make()?);
    map.insert(ctx.ordinal(), k.clone());
    Ok(k)
}

/// Threads per block every one of `fns` can launch, at most `max`, rounded
/// down to whole warps (the kernels work with any block size).
pub(crate) fn common_block<'a>(
    fns: impl IntoIterator<Item = &'a Function>,
    max: u32,
    what: &str,
    arch: (i32, i32),
) -> Result<u32> {
    let mut block = max;
    for k in fns {
        block = block.min(k.max_threads_per_block()? / 32 * 32);
    }
    if block == 0 {
        return Err(Error::Unsupported(format!(
            "{what} cannot launch on sm_{}{} (not enough registers for one warp)",
            arch.0, arch.1
        )));
    }
    Ok(block)
}

/// Blocks of `block` threads that one SM holds at once for the kernel of
/// `fns` that fits fewest: what decides how many grids fit on a shared GPU.
pub(crate) fn resident_blocks_per_sm<'a>(
    fns: impl IntoIterator<Item = &'a Function>,
    block: u32,
) -> Result<u32> {
    let mut fewest = u32::MAX;
    for k in fns {
        fewest = fewest.min(k.resident_blocks_per_sm(block)?);
    }
    Ok(if fewest == u32::MAX { 1 } else { fewest.max(1) })
}

/// A family of per-type kernels loaded on one device: for each of `N` base
/// names its kernel per element type ([`per_type`]), the block size all of
/// them can launch with and how many such blocks an SM holds of the one that
/// fits fewest. One copy per device and process (see [`per_device`]).
pub(crate) struct Family<const N: usize> {
    /// `fns[i][dtype_index(d)]`: base `i`'s kernel for `d`.
    pub fns: [[Function; 3]; N],
    /// Threads per block: the family's maximum, or less if a kernel cannot
    /// take that many.
    pub block: u32,
    /// Blocks of `block` threads one SM holds at once, for the kernel that
    /// fits fewest (the occupancy API on the kernels as compiled): what
    /// sizes the grids when ranks share a GPU.
    pub blocks_per_sm: u32,
    pub nvrtc: (i32, i32),
    pub arch: (i32, i32),
    pub cubin_bytes: usize,
    _module: Module,
    // Keeps the primary context (and so the module) alive for the process:
    // releasing the last reference would destroy the context under the cache.
    _ctx: Arc<CudaContext>,
}

impl<const N: usize> Family<N> {
    /// Compiles `src` (file `name`, named `what` in errors) for `ctx`'s
    /// device and loads it, `bases`' kernels with a common block of at most
    /// `max_block` threads.
    pub(crate) fn load(
        ctx: &Arc<CudaContext>,
        src: &str,
        name: &str,
        what: &str,
        bases: [&str; N],
        max_block: u32,
    ) -> Result<Family<N>> {
        let l = compile_and_load(ctx, src, name, what)?;
        let mut fns = Vec::with_capacity(N);
        for base in bases {
            fns.push(per_type(&l.module, base)?);
        }
        let fns: [[Function; 3]; N] = fns
            .try_into()
            .map_err(|_| Error::invalid("kernel family", "a base name without kernels"))?;
        let block = common_block(fns.iter().flatten(), max_block, what, l.arch)?;
        Ok(Family {
            blocks_per_sm: resident_blocks_per_sm(fns.iter().flatten(), block)?,
            fns,
            block,
            nvrtc: l.nvrtc,
            arch: l.arch,
            cubin_bytes: l.cubin_bytes,
            _module: l.module,
            _ctx: ctx.clone(),
        })
    }
}

/// Index of `d` in a family's per-type kernel arrays ([f32, f16, bf16]).
/// A family's kernel for each element type, `{base}_f32`, `{base}_f16`,
/// `{base}_bf16`, in [`dtype_index`] order.
pub(crate) fn per_type(module: &Module, base: &str) -> Result<[Function; 3]> {
    let f = |t: &str| module.function(&format!("{base}_{t}"));
    Ok([f("f32")?, f("f16")?, f("bf16")?])
}

pub(crate) fn dtype_index(d: DType) -> usize {
    match d {
        DType::F32 => 0,
        DType::F16 => 1,
        DType::Bf16 => 2,
    }
}

/// The kernel of `what` for `dtype` in a family of collective kernels
/// ([all-gather, reduce-scatter, broadcast], on either transport), the root
/// it takes (0 but for the broadcast) and, of `kinds` (in the same order),
/// what its call word says.
pub(crate) fn pick(
    k: &Family<3>,
    what: Collective,
    dtype: DType,
    kinds: [Kind; 3],
) -> (Function, u32, Kind) {
    let (i, root) = match what {
        Collective::AllGather => (0, 0),
        Collective::ReduceScatter => (1, 0),
        Collective::Broadcast { root } => (2, root as u32),
    };
    (k.fns[i][dtype_index(dtype)], root, kinds[i])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dtype_indices_are_distinct_and_dense() {
        let mut seen: Vec<usize> = DType::ALL.iter().map(|&d| dtype_index(d)).collect();
        seen.sort();
        assert_eq!(seen, vec![0, 1, 2]);
    }
}
