//! cuBLAS, the one C library this crate calls itself (loaded at run time by
//! cudarc, checked for presence first because its loader panics): a handle
//! bound to one stream and the bf16 GEMM of the forward. Every other call
//! to CUDA goes through the library (`tpcomm::cuda`).

use cudarc::cublas::result as blas;
use cudarc::cublas::sys as bsys;
use tpcomm::cuda::{CUdeviceptr, CUstream};
use tpcomm::{Error, Result};

fn blas_err(call: &str) -> impl Fn(blas::CublasError) -> Error + '_ {
    move |e| Error::Library {
        library: "cuBLAS".into(),
        detail: format!("{call} failed: {e}"),
    }
}

/// Checks that cuBLAS can be loaded, so cudarc's loader will not panic.
pub fn ensure_cublas() -> Result<()> {
    // SAFETY: only tries to dlopen cuBLAS's file names; loads no symbol.
    if unsafe { bsys::is_culib_present() } {
        Ok(())
    } else {
        Err(Error::Library {
            library: "cuBLAS".into(),
            detail: "libcublas.so was not found. The forward benchmark runs its GEMMs through cuBLAS: install it (`pip install nvidia-cublas` for CUDA 13, or the CUDA toolkit) and add its lib directory (e.g. site-packages/nvidia/cu13/lib) to LD_LIBRARY_PATH".into(),
        })
    }
}

/// The dimensions of one GEMM: `rows` rows of `k` inputs to `n` outputs.
#[derive(Clone, Copy, Debug)]
pub struct Dims {
    pub rows: usize,
    pub k: usize,
    pub n: usize,
}

/// A cuBLAS handle bound to one stream, with a fixed workspace so that
/// nothing is allocated while a CUDA graph is being captured.
pub struct Blas {
    handle: bsys::cublasHandle_t,
}

// SAFETY: the handle is used by one thread at a time (the rank that owns it);
// cuBLAS handles may move between threads.
unsafe impl Send for Blas {}

impl Blas {
    /// Creates the handle in the current context, on `stream`, using
    /// `workspace_bytes` at `workspace` (device memory the caller keeps alive
    /// as long as this handle).
    pub fn new(stream: CUstream, workspace: CUdeviceptr, workspace_bytes: usize) -> Result<Self> {
        ensure_cublas()?;
        let handle = blas::create_handle().map_err(blas_err("cublasCreate"))?;
        let b = Self { handle };
        // SAFETY: the handle was just created; the stream belongs to the
        // current context (the caller's contract).
        unsafe { blas::set_stream(b.handle, stream as bsys::cudaStream_t) }
            .map_err(blas_err("cublasSetStream"))?;
        // SAFETY: the workspace is device memory of `workspace_bytes` that the
        // caller keeps alive as long as the handle.
        unsafe {
            bsys::cublasSetWorkspace_v2(b.handle, workspace as *mut _, workspace_bytes).result()
        }
        .map_err(blas_err("cublasSetWorkspace"))?;
        Ok(b)
    }

    /// Row-major bf16 `y[t][n] = sum_k x[t][k] * w[k][n]` for `t < rows`
    /// (the dimensions `d`); `x` has leading dimension `ldx` elements, `w`
    /// and `y` are dense.
    ///
    /// # Safety
    /// `x` holds `rows` rows of `ldx >= k` elements, `w` `k * n` elements and
    /// `y` `rows * n` elements, all device memory of this handle's device,
    /// valid until the stream has run the GEMM.
    pub unsafe fn gemm_bf16(
        &self,
        x: CUdeviceptr,
        ldx: usize,
        w: CUdeviceptr,
        y: CUdeviceptr,
        d: Dims,
    ) -> Result<()> {
        let Dims { rows, k, n } = d;
        let (alpha, beta) = (1.0f32, 0.0f32);
        let dim = |v: usize| {
            i32::try_from(v).map_err(|_| Error::invalid("GEMM dimension", format!("{v}")))
        };
        // cuBLAS is column-major: y^T (n x rows) = w^T (n x k) * x^T (k x rows),
        // where row-major w is column-major w^T with leading dimension n.
        // SAFETY: sizes and pointers are the caller's contract; alpha and beta
        // are host scalars read before the call returns.
        unsafe {
            blas::gemm_ex(
                self.handle,
                bsys::cublasOperation_t::CUBLAS_OP_N,
                bsys::cublasOperation_t::CUBLAS_OP_N,
                dim(n)?,
                dim(rows)?,
                dim(k)?,
                &alpha as *const f32 as *const _,
                w as *const _,
                bsys::cudaDataType::CUDA_R_16BF,
                dim(n)?,
                x as *const _,
                bsys::cudaDataType::CUDA_R_16BF,
                dim(ldx)?,
                &beta as *const f32 as *const _,
                y as *mut _,
                bsys::cudaDataType::CUDA_R_16BF,
                dim(n)?,
                bsys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                bsys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .map_err(blas_err("cublasGemmEx"))
    }
}

impl Drop for Blas {
    fn drop(&mut self) {
        // SAFETY: created in new(), destroyed once.
        let _ = unsafe { blas::destroy_handle(self.handle) };
    }
}
