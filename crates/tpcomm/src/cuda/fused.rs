//! All-reduce fused with the residual add and RMSNorm that follow it
//! ([`P2pTransport::all_reduce_residual_rmsnorm`]), the unfused add +
//! RMSNorm kernel it replaces ([`add_rmsnorm`]), and the kernel module they
//! live in (its source is `compile::FUSED_SRC`).

use super::call_word;
use super::compile;
use super::kernel_args::FusedArgs;
use super::launch_shape::{self, grid_cap, Shape, FUSED_PUSH_VECS, NORM_BLOCK_MAX};
use super::loader::{compile_and_load, per_device, per_type, resident_blocks_per_sm, PerDevice};
use super::pdl::{self, Launch};
use super::transport::p2p::P2pTransport;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::sys::cuda::{self as raw, CUdeviceptr, CUstream, Function, Module};
use crate::units::ByteSize;
use cudarc::driver::CudaContext;
use std::sync::Arc;

/// Calls of at most this many rows spread their stores by default. In the
/// forward benchmark on 2 x H200 (bench/results/2026-11-30-h200x2-host-delta/spread/)
/// spreading took 0.14-0.24 us off a site at 1 token, changed nothing at 4,
/// and cost 0.13-0.17 us at 8 and 0.4 us at 16 (more blocks, each with a
/// row's worth of threads, to launch and retire).
const FUSED_SPREAD_MAX_ROWS: usize = 1;

/// Whether the fused kernel spreads its stores to the peers over up to one
/// block per SM in pieces of FUSED_PUSH_VECS vectors, or has each row's
/// owner block push it: TPCOMM_FUSED_SPREAD=1 always, 0 never, unset by the
/// row count (up to FUSED_SPREAD_MAX_ROWS). The variable is read once.
fn fused_spread(rows: usize) -> bool {
    static SPREAD: std::sync::OnceLock<Option<bool>> = std::sync::OnceLock::new();
    let forced = *SPREAD.get_or_init(|| crate::env::FUSED_SPREAD.checked_value());
    forced.unwrap_or(rows <= FUSED_SPREAD_MAX_ROWS)
}

/// The functions of the module on one device, loaded once per process.
pub(crate) struct FusedKernels {
    fused: [Function; 3],
    add_rmsnorm: [Function; 3],
    cubin_bytes: usize,
    /// Blocks of the fused kernel one SM holds at its largest block
    /// (NORM_BLOCK_MAX threads): what sizes its grid on a shared GPU.
    fused_blocks_per_sm: u32,
    /// Compute capability major: programmatic dependent launch from 9 on.
    arch_major: i32,
    _module: Module,
    // Keeps the primary context (and so the module) alive for the process.
    _ctx: Arc<CudaContext>,
}

use super::loader::dtype_index;

pub(crate) fn fused_kernels(ctx: &Arc<CudaContext>) -> Result<Arc<FusedKernels>> {
    static CACHE: PerDevice<FusedKernels> = PerDevice::new();
    per_device(&CACHE, ctx, || {
        let l = compile_and_load(ctx, compile::FUSED_SRC, "fused.cu", "the fused kernels")?;
        let fused = per_type(&l.module, "tpcomm_fused_rmsnorm")?;
        Ok(FusedKernels {
            fused_blocks_per_sm: resident_blocks_per_sm(&fused, NORM_BLOCK_MAX)?,
            fused,
            add_rmsnorm: per_type(&l.module, "tpcomm_add_rmsnorm")?,
            arch_major: l.arch.0,
            cubin_bytes: l.cubin_bytes,
            _module: l.module,
            _ctx: ctx.clone(),
        })
    })
}

impl FusedKernels {
    /// Makes `ctx` current and launches `f` on `norm`'s stream as it asks.
    ///
    /// # Safety
    /// As `sys::cuda::launch`.
    unsafe fn launch(
        &self,
        ctx: &CudaContext,
        f: Function,
        shape: Shape,
        args: &FusedArgs,
        norm: &NormCall,
    ) -> Result<()> {
        raw::set_current(ctx.cu_ctx())?;
        // SAFETY: forwarded from the caller; every kernel of fused.cu starts
        // with wait_for_previous_kernel, as an overlapped launch requires.
        unsafe { pdl::launch(f, shape, args, norm.stream, norm.launch, self.arch_major) }
    }
}

/// One call of the norm kernels: `rows` rows of `hidden` elements of
/// `dtype`, whose residual stream is updated in place and normalised into
/// `normed`, on `stream`, launched as `launch` says (an ordinary or an
/// overlapped, programmatic dependent, launch; the results are the same).
/// Every pointer is device memory of the call's device, 16-byte aligned:
/// `residual` and `normed` of `rows * hidden` elements, `weight` of `hidden`.
#[derive(Clone, Copy, Debug)]
pub struct NormCall {
    /// The residual stream, `residual += addend` in place.
    pub residual: CUdeviceptr,
    /// The norm's weight.
    pub weight: CUdeviceptr,
    /// Where `rmsnorm(residual) * weight` goes.
    pub normed: CUdeviceptr,
    pub rows: usize,
    pub hidden: usize,
    pub dtype: DType,
    pub eps: f32,
    /// The caller's CUDA stream (null: the legacy default stream).
    pub stream: CUstream,
    pub launch: Launch,
}

impl NormCall {
    /// The norm's fields of the kernels' argument, for a row of `row_vecs`
    /// vectors (the all-reduce's, the addend and the spreading zero).
    fn args(&self, row_vecs: usize) -> FusedArgs {
        FusedArgs {
            residual: self.residual,
            weight: self.weight,
            normed: self.normed,
            rows: self.rows as u32,
            row_vecs: row_vecs as u32,
            eps: self.eps,
            inv_hidden: 1.0 / self.hidden as f32,
            ..Default::default()
        }
    }
}

/// The shape checks both norm kernels share; returns (row bytes, vectors per row).
fn check_rows(rows: usize, hidden: usize, dtype: DType, ptrs: &[CUdeviceptr]) -> Result<usize> {
    let row_bytes = hidden
        .checked_mul(dtype.size())
        .ok_or_else(|| Error::invalid("hidden size", format!("{hidden} overflows")))?;
    if hidden == 0 || !row_bytes.is_multiple_of(16) {
        return Err(Error::invalid(
            "hidden size",
            format!(
                "{hidden} {} elements: a row must be a non-empty multiple of 16 bytes",
                dtype.name()
            ),
        ));
    }
    if rows == 0 || rows > u32::MAX as usize {
        return Err(Error::invalid("rows", format!("{rows} (1 to 2^32-1)")));
    }
    if ptrs.iter().any(|p| !p.is_multiple_of(16)) {
        return Err(Error::invalid(
            "buffer address",
            "every buffer must be 16-byte aligned",
        ));
    }
    Ok(row_bytes / 16)
}

/// `residual += addend` (when given), then `normed = rmsnorm(residual) * weight`,
/// on the rows of `norm`: the unfused sequence that follows an all-reduce,
/// bit-identical to what the fused kernel computes.
///
/// # Safety
/// Every pointer must be device memory of `ctx`'s device, 16-byte aligned,
/// as [`NormCall`] says (`addend` of `rows * hidden` elements); all must stay
/// valid until `norm.stream` (of `ctx`) has run the kernel.
pub unsafe fn add_rmsnorm(
    ctx: &Arc<CudaContext>,
    addend: Option<CUdeviceptr>,
    norm: &NormCall,
) -> Result<()> {
    let (rows, dtype) = (norm.rows, norm.dtype);
    let ptrs = [norm.residual, addend.unwrap_or(0), norm.weight, norm.normed];
    let row_vecs = check_rows(rows, norm.hidden, dtype, &ptrs)?;
    let k = fused_kernels(ctx)?;
    let sms = raw::sm_count(ctx.ordinal() as i32)? as usize;
    let args = FusedArgs {
        addend: addend.unwrap_or(0),
        ..norm.args(row_vecs)
    };
    let f = k.add_rmsnorm[dtype_index(dtype)];
    let shape = launch_shape::add_rmsnorm(rows, row_vecs, sms);
    // SAFETY: FusedArgs mirrors the kernel's parameter; pointer validity is
    // the caller's contract above.
    unsafe { k.launch(ctx, f, shape, &args, norm) }
}

/// Compiles (or reads from the cache) and loads the fused module on `ctx`'s
/// device now, so a later [`add_rmsnorm`] loads nothing (inside a CUDA graph
/// capture, for one); returns the size of the kernel image. For
/// communicators without [`P2pTransport::prepare_fused`] (the host path).
pub fn prepare(ctx: &Arc<CudaContext>) -> Result<ByteSize> {
    Ok(ByteSize::from_usize(fused_kernels(ctx)?.cubin_bytes))
}

impl P2pTransport {
    /// Compiles (or reads from the cache) and loads the fused kernels now,
    /// so the first [`all_reduce_residual_rmsnorm`](Self::all_reduce_residual_rmsnorm)
    /// takes no memory a server has not already seen. Returns the size of
    /// the kernel image loaded (once per device and process). Call it right
    /// after creating the communicator, before measuring free memory.
    pub fn prepare_fused(&self) -> Result<ByteSize> {
        let k = fused_kernels(self.protocol_parts().ctx)?;
        Ok(ByteSize::from_usize(k.cubin_bytes))
    }

    /// All-reduces `partial` (the row-parallel GEMM's output, `norm.rows`
    /// rows of `norm.hidden` elements; left unchanged) over the ranks, adds it
    /// to `norm.residual` in place, and writes `rmsnorm(residual) * weight` to
    /// `norm.normed`, in one kernel on `norm.stream`. It runs the one-shot protocol on
    /// this communicator's buffers and epoch, so it mixes freely with
    /// [`all_reduce_call`](crate::cuda::StreamAllReduce::all_reduce_call) calls and works inside CUDA graphs.
    /// Results equal `all_reduce` (one-shot) followed by [`add_rmsnorm`].
    /// `norm.launch` picks an ordinary or an overlapped (programmatic
    /// dependent) launch; the results are the same.
    /// Call [`check`](Self::check) after synchronizing to learn whether a
    /// peer failed to arrive.
    ///
    /// # Safety
    /// Every pointer must be device memory of this communicator's device,
    /// 16-byte aligned: `partial`, `residual`, `normed` of `rows * hidden`
    /// elements, `weight` of `hidden`, valid until `stream` has run the call;
    /// `stream` must belong to this device's primary context (or be null).
    pub unsafe fn all_reduce_residual_rmsnorm(
        &self,
        partial: CUdeviceptr,
        norm: &NormCall,
    ) -> Result<()> {
        let (rows, dtype) = (norm.rows, norm.dtype);
        self.check()?;
        let ptrs = [partial, norm.residual, norm.weight, norm.normed];
        let row_vecs = check_rows(rows, norm.hidden, dtype, &ptrs)?;
        let bytes = rows * row_vecs * 16;
        if bytes as u64 > self.max_bytes().bytes() {
            return Err(Error::invalid(
                "message size",
                format!(
                    "{} is above this communicator's maximum {}; create it with a larger max_bytes",
                    ByteSize::from_usize(bytes),
                    self.max_bytes()
                ),
            ));
        }
        let p = self.protocol_parts();
        let k = fused_kernels(p.ctx)?;
        let spread = fused_spread(rows);
        let grid = grid_cap(p.sms as usize, k.fused_blocks_per_sm as usize, p.sharing)?;
        let word = call_word::word_if(
            p.check_calls,
            call_word::Kind::FusedRmsNorm,
            call_word::Signature::of(dtype, crate::ReduceOp::Sum),
            bytes as u64,
            0,
        )?;
        let args = FusedArgs {
            base: p.kernel_args(partial, 0, bytes as u64, word),
            push_vecs: if spread { FUSED_PUSH_VECS as u32 } else { 0 },
            ..norm.args(row_vecs)
        };
        let f = k.fused[dtype_index(dtype)];
        let shape = launch_shape::fused_rmsnorm(rows, row_vecs, grid, spread);
        // SAFETY: FusedArgs mirrors the kernel's parameter; the receive
        // buffers, control words and status belong to `self`, which callers
        // keep alive until their streams finish; the rest is the caller's
        // contract above.
        unsafe { k.launch(p.ctx, f, shape, &args, norm) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cuda::kernels::KernelArgs;

    #[test]
    fn fused_args_match_the_cuda_struct_size() {
        // struct Args (160 bytes), four pointers, two u32, two floats, two u32.
        assert_eq!(std::mem::size_of::<KernelArgs>(), 19 * 8 + 8);
        assert_eq!(std::mem::size_of::<FusedArgs>(), 160 + 4 * 8 + 24);
    }

    #[test]
    fn rows_must_be_multiples_of_16_bytes_and_aligned() {
        assert!(check_rows(1, 7168, DType::Bf16, &[0, 16]).is_ok());
        assert!(check_rows(1, 7, DType::Bf16, &[0]).is_err());
        assert!(check_rows(0, 8, DType::Bf16, &[0]).is_err());
        assert!(check_rows(1, 8, DType::Bf16, &[8]).is_err());
        assert_eq!(check_rows(2, 8, DType::F32, &[]).unwrap(), 2);
    }
}
