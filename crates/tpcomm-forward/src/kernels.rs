//! The forward's element-wise kernels (kernels/forward.cu): the SiLU-gated
//! activation and the random initialisation, bf16 only. A kernel family of
//! its own, laid out as the library lays out its families (common.cuh, the
//! library's helpers, then forward.cu, each after a `#line` directive) and
//! compiled by NVRTC for the device in hand through the library's loader and
//! its disk cache.

use std::sync::{Arc, OnceLock};
use tpcomm::cuda::compile::COMMON_SRC;
use tpcomm::cuda::cudarc::driver::CudaContext;
use tpcomm::cuda::loader::{compile_and_load, per_device, PerDevice};
use tpcomm::cuda::{Function, Module};
use tpcomm::Result;

/// The family's name, as NVRTC and the disk cache know it.
pub const NAME: &str = "forward.cu";

/// forward.cu as it is on disk.
pub const FORWARD_CU: &str = include_str!("kernels/forward.cu");

/// The kernels the forward looks up: the SiLU-gated activation, the fill.
pub const KERNELS: [&str; 2] = ["tpcomm_silu_mul_bf16", "tpcomm_fill_uniform_bf16"];

/// The source NVRTC compiles: common.cuh, then forward.cu.
pub fn source() -> &'static str {
    static SOURCE: OnceLock<String> = OnceLock::new();
    SOURCE.get_or_init(|| {
        format!("#line 1 \"common.cuh\"\n{COMMON_SRC}#line 1 \"{NAME}\"\n{FORWARD_CU}")
    })
}

/// The family loaded on one device, once per process.
pub(crate) struct ForwardKernels {
    pub(crate) silu_mul_bf16: Function,
    pub(crate) fill_uniform_bf16: Function,
    _module: Module,
    // Keeps the primary context (and so the module) alive for the process.
    _ctx: Arc<CudaContext>,
}

pub(crate) fn forward_kernels(ctx: &Arc<CudaContext>) -> Result<Arc<ForwardKernels>> {
    static CACHE: PerDevice<ForwardKernels> = PerDevice::new();
    per_device(&CACHE, ctx, || {
        let l = compile_and_load(ctx, source(), NAME, "the forward's kernels")?;
        Ok(ForwardKernels {
            silu_mul_bf16: l.module.function(KERNELS[0])?,
            fill_uniform_bf16: l.module.function(KERNELS[1])?,
            _module: l.module,
            _ctx: ctx.clone(),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_source_is_common_cuh_then_forward_cu_and_defines_both_kernels() {
        let src = source();
        let common = src.find(COMMON_SRC).expect("common.cuh");
        let own = src.find(FORWARD_CU).expect("forward.cu");
        assert!(common < own, "common.cuh must come first");
        assert!(src[..own].ends_with("#line 1 \"forward.cu\"\n"));
        for k in KERNELS {
            assert!(FORWARD_CU.contains(&format!("__global__ void {k}(")), "{k}");
        }
    }
}
