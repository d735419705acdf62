//! The GPU communicators: the two transports (`transport`: P2P, where peer
//! GPUs write into each other's receive buffers, and pinned host memory),
//! their kernels compiled by NVRTC at run time, and the `Communicator` that
//! composes them with routing, the quantized wire and NCCL.
//!
//! `crate::sys::cuda`, the bottom layer, holds every CUDA driver and NVRTC
//! call (the only `cudarc` `sys` calls of the library), behind safe functions and owning types. Above it,
//! `unsafe` remains only where the API itself takes raw device pointers and
//! streams from the caller (`GpuTransport`'s methods on a `Call`,
//! `StreamAllReduce::all_reduce_call`, and the kernel launches behind them, the fused, quantized, collective and P2P-check
//! entry points): each block there says which caller contract makes it
//! sound. Modules marked `forbid(unsafe_code)` hold none. `loader`,
//! `compile` and the launch, module and allocation types of `sys::cuda`,
//! re-exported here, are public for kernel families outside the library (the benchmark
//! forward's, in crates/tpcomm-forward).

/// The accessors both GPU transports (`P2pTransport`, `PinnedTransport`)
/// give over their fields of the same names; invoked inside each one's
/// `impl`.
macro_rules! transport_accessors {
    () => {
        pub fn rank(&self) -> usize {
            self.rank
        }
        /// How the group's ranks share this rank's GPU.
        pub fn sharing(&self) -> Sharing {
            self.sharing
        }
        pub fn world(&self) -> usize {
            self.world
        }
        pub fn max_bytes(&self) -> ByteSize {
            self.max_bytes
        }
        pub fn context(&self) -> &Arc<CudaContext> {
            &self.ctx
        }
        /// Every byte this communicator took, per buffer.
        pub fn memory_report(&self) -> &MemoryReport {
            &self.report
        }
        /// For `GpuComm::new` to say in the heading why this transport was taken.
        pub(crate) fn report_mut(&mut self) -> &mut MemoryReport {
            &mut self.report
        }
        /// NVRTC version and architecture the kernels were compiled with.
        pub fn compiled_with(&self) -> ((i32, i32), (i32, i32)) {
            (self.kernels.nvrtc, self.kernels.arch)
        }
        /// What every all-reduce of this transport checks first (an earlier
        /// call's failure, then the call for `kernels`:
        /// `call::check_all_reduce`); the message's bytes.
        pub(crate) fn all_reduce_bytes(
            &self,
            kernels: &str,
            call: &crate::cuda::call::Call,
        ) -> Result<usize> {
            self.check()?;
            crate::cuda::call::check_all_reduce(kernels, call, self.max_bytes)
        }
        /// What every collective of this transport checks first (an
        /// earlier call's failure, then the call: `call::check_collective`);
        /// one rank's block in bytes, `None` for an empty call (every rank
        /// gives the same count, so every rank skips together and the epoch
        /// stays in step).
        pub(crate) fn collective_bytes(
            &self,
            what: crate::algo::Collective,
            call: &crate::cuda::call::Call,
        ) -> Result<Option<usize>> {
            self.check()?;
            let bytes =
                crate::cuda::call::check_collective(what, call, self.world(), self.max_bytes())?;
            Ok((call.count > 0).then_some(bytes))
        }
    };
}

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

/// The `Debug` both GPU transports give: rank, world, device, max_bytes.
macro_rules! transport_debug {
    ($t:ident) => {
        impl std::fmt::Debug for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($t))
                    .field("rank", &self.rank)
                    .field("world", &self.world)
                    .field("device", &self.ctx.ordinal())
                    .field("max_bytes", &self.max_bytes)
                    .finish()
            }
        }
    };
}

mod call;
mod call_word;
pub mod collectives;
pub mod communicator;
#[forbid(unsafe_code)]
pub mod compile;
#[forbid(unsafe_code)]
mod config;
#[forbid(unsafe_code)]
pub mod fp8;
pub mod fused;
pub mod gathered;
mod gpu_comm;
#[forbid(unsafe_code)]
mod kernel_args;
mod kernels;
#[forbid(unsafe_code)]
pub mod launch_shape;
#[forbid(unsafe_code)]
pub(crate) mod layout;
#[forbid(unsafe_code)]
pub mod loader;
mod pdl;
pub mod quant;
#[forbid(unsafe_code)]
mod rendezvous;
pub mod self_tune;
#[forbid(unsafe_code)]
pub mod share;
mod stream_all_reduce;
pub mod transport;
#[forbid(unsafe_code)]
mod wait;

/// Kept so `tpcomm::cuda::Algo` still names the shared enum (the GPU bench's
/// rank loop imports it from here).
pub use crate::algo::Algo;
pub use crate::sys::cuda::scratch::{current_device, Rows, SavedContext, Scratch, Staging};
pub use crate::sys::cuda::{
    driver_version, ensure_driver, ensure_nvrtc, mem_get_info, mps_enabled,
    nvrtc::NVRTC_LIBRARY_ENV, nvrtc_path, nvrtc_version, stream_is_capturing, CUdeviceptr,
    CUstream,
};
/// What a kernel family outside the library launches with.
pub use crate::sys::cuda::{launch, DeviceAlloc, Function, Module};
pub use call::{Call, GpuTransport};
pub use call_word::Signature;
pub use collectives::{collective_route, Collective};
pub use communicator::{nccl_over_rendezvous, Communicator, NcclFallback, Route};
pub use config::CudaConfig;
/// The cudarc this crate is built with, so callers use the same types.
pub use cudarc;
pub use gpu_comm::{GpuComm, Transport};
pub use pdl::Launch;
pub use rendezvous::{
    post_first_record, post_record, read_record, Exchange, Rendezvous, ThreadGroup, Turn,
};
pub use stream_all_reduce::StreamAllReduce;
pub use transport::p2p::{open_context, P2pTransport};
pub use transport::pinned::{HostAlgo, PinnedTransport};

use crate::transport::MAX_WORLD;

fn cuda_err(call: &'static str) -> impl Fn(cudarc::driver::DriverError) -> crate::Error {
    move |e| crate::Error::Cuda {
        call: call.into(),
        detail: e.to_string(),
    }
}
