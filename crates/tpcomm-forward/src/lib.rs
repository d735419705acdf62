//! One rank's share of a tensor-parallel transformer forward, for measuring
//! what an all-reduce costs where it lives (`tpcomm bench forward`, in
//! crates/tpcomm-cli). Not part of the library: its GEMMs run in cuBLAS
//! ([`blas`], the one module of this crate that calls a C library), its
//! element-wise kernels ([`kernels`]) are a kernel family of its own, and it
//! takes from the library only what any caller may: device memory, kernel
//! compilation and launch (`tpcomm::cuda::{launch, DeviceAlloc}`, `loader`,
//! `compile`) and the add + RMSNorm kernel (`tpcomm::cuda::fused::add_rmsnorm`).
//!
//! Per layer: `h = rmsnorm(x)` (done by the previous site), QKV GEMM
//! (column-parallel), O GEMM (row-parallel) on the V part of the QKV output,
//! all-reduce site, MLP up GEMM (column-parallel, gate and up together),
//! SiLU-gated activation, MLP down GEMM (row-parallel), all-reduce site. A
//! site is "all-reduce the partial sum, add it to the residual `x`, write
//! `h = rmsnorm(x) * w`": the caller decides how (no communication, NCCL,
//! tpcomm, fused). Attention itself (scores, softmax) is left out: only the
//! GEMM + all-reduce pattern is measured. One set of layer weights serves
//! every layer (a layer's weights are far larger than L2, so reuse does not
//! flatter the GEMMs), so the model fits on small GPUs.

mod blas;
pub mod kernels;

pub use blas::ensure_cublas;

use blas::{Blas, Dims};
use kernels::{forward_kernels, ForwardKernels};
use std::sync::Arc;
use tpcomm::cuda::cudarc::driver::CudaContext;
use tpcomm::cuda::fused::{add_rmsnorm, NormCall};
use tpcomm::cuda::{launch, CUdeviceptr, CUstream, DeviceAlloc, Launch};
use tpcomm::{ByteSize, DType, Error, Result};

/// Sizes of the model and of the largest batch.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct Shape {
    pub layers: usize,
    pub hidden: usize,
    /// MLP intermediate size (whole model, before splitting over ranks).
    pub mlp: usize,
    pub max_tokens: usize,
    pub world: usize,
}

impl Shape {
    /// Most transformer layers the benchmark model builds.
    pub const MAX_LAYERS: usize = 1024;
    /// Most hidden and MLP width: far above any model it stands for, and
    /// within cuBLAS's 32-bit sizes and the element-wise kernels' 32-bit
    /// row widths.
    pub const MAX_WIDTH: usize = 1 << 20;
    /// Most tokens in one forward (the element-wise kernels take the row
    /// count as 32 bits).
    pub const MAX_TOKENS: usize = 1 << 16;
    /// Most ranks: those of tpcomm's GPU communicator.
    pub const MAX_WORLD: usize = tpcomm::transport::MAX_WORLD;

    /// Every size in its range (`tpcomm bench forward` checks its flags
    /// against the same constants) and the widths split evenly into rows of
    /// whole 16-byte vectors per rank.
    pub fn check(&self) -> Result<()> {
        let w = self.world;
        for (what, n, max) in [
            ("layers", self.layers, Self::MAX_LAYERS),
            ("hidden size", self.hidden, Self::MAX_WIDTH),
            ("MLP size", self.mlp, Self::MAX_WIDTH),
            ("tokens per forward", self.max_tokens, Self::MAX_TOKENS),
            ("world", w, Self::MAX_WORLD),
        ] {
            if !(1..=max).contains(&n) {
                return Err(Error::invalid(
                    "forward shape",
                    format!("{what} {n}: give 1 to {max}"),
                ));
            }
        }
        if !self.hidden.is_multiple_of(8 * w) || !self.mlp.is_multiple_of(8 * w) {
            return Err(Error::invalid(
                "forward shape",
                format!(
                    "hidden {} and MLP size {} must be positive multiples of 8 x world ({})",
                    self.hidden,
                    self.mlp,
                    8 * w
                ),
            ));
        }
        Ok(())
    }
    /// Hidden columns per rank.
    fn hs(&self) -> usize {
        self.hidden / self.world
    }
    /// MLP columns per rank.
    fn ms(&self) -> usize {
        self.mlp / self.world
    }
}

/// What one all-reduce site works on (device pointers of bf16 rows).
#[derive(Clone, Copy, Debug)]
pub struct Site {
    /// The row-parallel GEMM's partial output (this rank's share of the sum).
    pub partial: CUdeviceptr,
    /// Scratch of the same size for an out-of-place all-reduce.
    pub reduced: CUdeviceptr,
    /// The residual stream, updated in place.
    pub residual: CUdeviceptr,
    /// The RMSNorm weight.
    pub weight: CUdeviceptr,
    /// Where the normalised hidden state goes (the next GEMM's input).
    pub normed: CUdeviceptr,
    pub rows: usize,
    pub hidden: usize,
    pub eps: f32,
}

impl Site {
    /// The site's add + RMSNorm (bf16) on `stream`, launched as `how` says.
    pub fn norm(&self, stream: CUstream, how: Launch) -> NormCall {
        NormCall {
            residual: self.residual,
            weight: self.weight,
            normed: self.normed,
            rows: self.rows,
            hidden: self.hidden,
            dtype: DType::Bf16,
            eps: self.eps,
            stream,
            launch: how,
        }
    }
}

/// The error of making the model's context current on this thread.
fn bind_err(e: tpcomm::cuda::cudarc::driver::DriverError) -> Error {
    Error::Cuda {
        call: "cuCtxSetCurrent".into(),
        detail: e.to_string(),
    }
}

/// RMSNorm epsilon of the benchmark model.
pub const EPS: f32 = 1e-6;
const WORKSPACE: usize = 32 << 20;

/// One rank's weights, activations and cuBLAS handle.
pub struct Model {
    ctx: Arc<CudaContext>,
    kernels: Arc<ForwardKernels>,
    shape: Shape,
    blas: Blas,
    // Field order: the handle is destroyed before the memory it uses.
    wqkv: DeviceAlloc,
    wo: DeviceAlloc,
    wup: DeviceAlloc,
    wdown: DeviceAlloc,
    wnorm: DeviceAlloc,
    x0: DeviceAlloc,
    x: DeviceAlloc,
    h: DeviceAlloc,
    qkv: DeviceAlloc,
    part: DeviceAlloc,
    reduced: DeviceAlloc,
    up: DeviceAlloc,
    act: DeviceAlloc,
    _workspace: DeviceAlloc,
    bytes: usize,
}

fn bf16_alloc(ctx: &Arc<CudaContext>, elems: usize, total: &mut usize) -> Result<DeviceAlloc> {
    let bytes = elems
        .checked_mul(2)
        .ok_or_else(|| Error::invalid("forward shape", "buffer size overflows"))?;
    *total += bytes;
    DeviceAlloc::new(ctx.cu_ctx(), bytes)
}

impl Model {
    /// Allocates and initialises rank `rank`'s share of the model on `ctx`'s
    /// device: weights uniform random (seeded by rank, scaled so activations
    /// stay of order one), the input `x0` random and identical on every rank.
    pub fn new(
        ctx: &Arc<CudaContext>,
        shape: Shape,
        rank: usize,
        stream: CUstream,
    ) -> Result<Self> {
        shape.check()?;
        ensure_cublas()?;
        let kernels = forward_kernels(ctx)?;
        let (h, hs, ms, t) = (shape.hidden, shape.hs(), shape.ms(), shape.max_tokens);
        let mut total = 0;
        let a = |n: usize, total: &mut usize| bf16_alloc(ctx, n, total);
        let wqkv = a(h * 3 * hs, &mut total)?;
        let wo = a(hs * h, &mut total)?;
        let wup = a(h * 2 * ms, &mut total)?;
        let wdown = a(ms * h, &mut total)?;
        let wnorm = a(h, &mut total)?;
        let x0 = a(t * h, &mut total)?;
        let x = a(t * h, &mut total)?;
        let hh = a(t * h, &mut total)?;
        let qkv = a(t * 3 * hs, &mut total)?;
        let part = a(t * h, &mut total)?;
        let reduced = a(t * h, &mut total)?;
        let up = a(t * 2 * ms, &mut total)?;
        let act = a(t * ms, &mut total)?;
        let workspace = DeviceAlloc::new(ctx.cu_ctx(), WORKSPACE)?;
        total += WORKSPACE;
        ctx.bind_to_thread().map_err(bind_err)?;
        let blas = Blas::new(stream, workspace.ptr(), WORKSPACE)?;
        let m = Self {
            ctx: ctx.clone(),
            kernels,
            shape,
            blas,
            wqkv,
            wo,
            wup,
            wdown,
            wnorm,
            x0,
            x,
            h: hh,
            qkv,
            part,
            reduced,
            up,
            act,
            _workspace: workspace,
            bytes: total,
        };
        // Uniform(-s, s) has variance s^2/3: s = sqrt(3/k) keeps a GEMM over k
        // inputs of unit variance at unit variance; half that keeps the
        // residual stream small over many layers.
        let s = |k: usize| 0.5 * (3.0 / k as f32).sqrt();
        let seed = 1000 * (rank as u64 + 1);
        let fills = [
            (&m.wqkv, h * 3 * hs, seed + 1, 0.0, s(h)),
            (&m.wo, hs * h, seed + 2, 0.0, s(hs)),
            (&m.wup, h * 2 * ms, seed + 3, 0.0, s(h)),
            (&m.wdown, ms * h, seed + 4, 0.0, s(ms)),
            (&m.wnorm, h, 5, 1.0, 0.25),
            (&m.x0, t * h, 6, 0.0, 1.0),
        ];
        for (buf, n, seed, offset, scale) in fills {
            m.fill(buf.ptr(), n, seed, offset, scale, stream)?;
        }
        Ok(m)
    }

    /// Device bytes this rank's model took (weights, activations, cuBLAS workspace).
    pub fn device_bytes(&self) -> ByteSize {
        ByteSize::from_usize(self.bytes)
    }

    pub fn shape(&self) -> Shape {
        self.shape
    }

    fn fill(
        &self,
        out: CUdeviceptr,
        n: usize,
        seed: u64,
        offset: f32,
        scale: f32,
        stream: CUstream,
    ) -> Result<()> {
        #[repr(C)]
        struct FillArgs {
            out: u64,
            n: u64,
            seed: u64,
            offset: f32,
            scale: f32,
        }
        let args = FillArgs {
            out,
            n: n as u64,
            seed,
            offset,
            scale,
        };
        self.ctx.bind_to_thread().map_err(bind_err)?;
        // SAFETY: FillArgs mirrors the kernel's struct; `out` is one of this
        // model's allocations of at least `n` bf16 elements.
        unsafe { launch(self.kernels.fill_uniform_bf16, 1024, 256, &args, stream) }
    }

    fn silu_mul(&self, rows: usize, stream: CUstream) -> Result<()> {
        #[repr(C)]
        struct SiluArgs {
            input: u64,
            output: u64,
            rows: u32,
            inter: u32,
        }
        let inter = self.shape.ms();
        let args = SiluArgs {
            input: self.up.ptr(),
            output: self.act.ptr(),
            rows: rows as u32,
            inter: inter as u32,
        };
        let blocks = (rows * inter).div_ceil(256).min(1024) as u32;
        // SAFETY: SiluArgs mirrors the kernel's struct; `up` holds rows x
        // 2*inter and `act` rows x inter elements (rows <= max_tokens).
        unsafe { launch(self.kernels.silu_mul_bf16, blocks, 256, &args, stream) }
    }

    /// Enqueues one forward of `tokens` tokens on `stream` (capturable):
    /// `x = x0`, `h = rmsnorm(x)`, then every layer, calling `site` for each
    /// of the 2 x layers all-reduce sites. Afterwards [`output`](Self::output)
    /// holds the residual stream and the final normalised hidden state.
    ///
    /// # Safety
    /// `stream` belongs to this model's context, and the model outlives
    /// every run of what is enqueued (or captured) here.
    pub unsafe fn record(
        &self,
        tokens: usize,
        stream: CUstream,
        site: &mut dyn FnMut(&Site) -> Result<()>,
    ) -> Result<()> {
        let sh = self.shape;
        if tokens == 0 || tokens > sh.max_tokens {
            return Err(Error::invalid(
                "tokens",
                format!("{tokens} (1 to {})", sh.max_tokens),
            ));
        }
        let (h, hs, ms) = (sh.hidden, sh.hs(), sh.ms());
        self.ctx.bind_to_thread().map_err(bind_err)?;
        let s = Site {
            partial: self.part.ptr(),
            reduced: self.reduced.ptr(),
            residual: self.x.ptr(),
            weight: self.wnorm.ptr(),
            normed: self.h.ptr(),
            rows: tokens,
            hidden: h,
            eps: EPS,
        };
        // SAFETY (every block below): all pointers are this model's
        // allocations, sized for max_tokens >= tokens rows; they live as long
        // as `self`, which the caller keeps until the stream has finished.
        unsafe {
            self.x.copy_from_async(&self.x0, tokens * h * 2, stream)?;
            add_rmsnorm(&self.ctx, None, &s.norm(stream, Launch::Ordinary))?;
        }
        for _ in 0..sh.layers {
            unsafe {
                self.blas.gemm_bf16(
                    self.h.ptr(),
                    h,
                    self.wqkv.ptr(),
                    self.qkv.ptr(),
                    Dims {
                        rows: tokens,
                        k: h,
                        n: 3 * hs,
                    },
                )?;
                // The V third of each QKV row stands in for the attention output.
                let v = self.qkv.ptr() + (2 * hs * 2) as u64;
                self.blas.gemm_bf16(
                    v,
                    3 * hs,
                    self.wo.ptr(),
                    self.part.ptr(),
                    Dims {
                        rows: tokens,
                        k: hs,
                        n: h,
                    },
                )?;
            }
            site(&s)?;
            unsafe {
                self.blas.gemm_bf16(
                    self.h.ptr(),
                    h,
                    self.wup.ptr(),
                    self.up.ptr(),
                    Dims {
                        rows: tokens,
                        k: h,
                        n: 2 * ms,
                    },
                )?;
            }
            self.silu_mul(tokens, stream)?;
            unsafe {
                self.blas.gemm_bf16(
                    self.act.ptr(),
                    ms,
                    self.wdown.ptr(),
                    self.part.ptr(),
                    Dims {
                        rows: tokens,
                        k: ms,
                        n: h,
                    },
                )?;
            }
            site(&s)?;
        }
        Ok(())
    }

    /// The unfused site without communication: `x += partial`, `h = rmsnorm(x)`.
    /// Also the second half of every unfused site, with `partial` replaced by
    /// the all-reduced sum.
    ///
    /// # Safety
    /// `addend` holds `site.rows * site.hidden` bf16 elements of this device,
    /// valid until the stream has run the kernel.
    pub unsafe fn add_norm(
        &self,
        site: &Site,
        addend: CUdeviceptr,
        stream: CUstream,
        how: Launch,
    ) -> Result<()> {
        // SAFETY: the site's buffers are this model's; `addend` is the
        // caller's contract.
        unsafe { add_rmsnorm(&self.ctx, Some(addend), &site.norm(stream, how)) }
    }

    /// The residual stream and the normalised hidden state of the first
    /// `tokens` rows, as bf16 bytes. Synchronize the stream first.
    pub fn output(&self, tokens: usize) -> Result<(Vec<u8>, Vec<u8>)> {
        let n = tokens.min(self.shape.max_tokens) * self.shape.hidden * 2;
        let (mut x, mut h) = (vec![0u8; n], vec![0u8; n]);
        self.x.read(&mut x)?;
        self.h.read(&mut h)?;
        Ok((x, h))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(hidden: usize, mlp: usize, world: usize) -> Shape {
        Shape {
            layers: 2,
            hidden,
            mlp,
            max_tokens: 4,
            world,
        }
    }

    #[test]
    fn shapes_must_split_evenly_into_16_byte_rows_per_rank() {
        assert!(shape(7168, 18432, 2).check().is_ok());
        assert!(shape(7168, 18432, 8).check().is_ok());
        // 7168 / 3 is not whole; 7172 / 2 = 3586 is not a multiple of 8.
        assert!(shape(7168, 18432, 3).check().is_err());
        assert!(shape(7172, 18432, 2).check().is_err());
        assert!(shape(7168, 0, 2).check().is_err());
        let mut s = shape(7168, 18432, 2);
        s.layers = 0;
        assert!(s.check().is_err());
    }

    /// The library's own bounds, as the CLI's flags have them: every size
    /// is refused above its maximum (typed error naming it) and taken at it.
    #[test]
    fn sizes_above_their_maximum_are_refused_naming_them() {
        let top = Shape {
            layers: Shape::MAX_LAYERS,
            hidden: Shape::MAX_WIDTH,
            mlp: Shape::MAX_WIDTH,
            max_tokens: Shape::MAX_TOKENS,
            world: Shape::MAX_WORLD,
        };
        top.check().unwrap();
        let (l, w, t) = (Shape::MAX_LAYERS, Shape::MAX_WIDTH, Shape::MAX_TOKENS);
        let cases = [
            (
                "layers",
                Shape {
                    layers: l + 1,
                    ..top
                },
            ),
            (
                "hidden size",
                Shape {
                    hidden: w * 2,
                    ..top
                },
            ),
            (
                "MLP size",
                Shape {
                    mlp: usize::MAX - 7,
                    ..top
                },
            ),
            (
                "tokens per forward",
                Shape {
                    max_tokens: t + 1,
                    ..top
                },
            ),
            (
                "world",
                Shape {
                    world: Shape::MAX_WORLD + 1,
                    ..top
                },
            ),
            (
                "world",
                Shape {
                    world: usize::MAX,
                    ..top
                },
            ),
        ];
        for (what, s) in cases {
            let e = s.check().unwrap_err();
            assert!(matches!(e, Error::InvalidArgument { .. }), "{e:?}");
            let m = e.to_string();
            assert!(m.contains(what) && m.contains("give 1 to"), "{what}: {m}");
        }
    }

    #[test]
    fn per_rank_columns_are_the_model_split_by_world() {
        let s = shape(7168, 18432, 2);
        assert_eq!((s.hs(), s.ms()), (3584, 9216));
    }
}
