//! All-gather, reduce-scatter and broadcast beside the all-reduce: on the
//! P2P communicator's own receive buffers and epoch (kernels/collectives.cu,
//! no memory beyond what creation allocated), and on [`Communicator`] with
//! NCCL behind them for what the kernels cannot take.
//!
//! Sizes follow NCCL: `count` is one rank's block (the all-gather's input,
//! the reduce-scatter's output, the broadcast's message), at most the
//! communicator's `max_bytes`.

use super::call::{Call, GpuTransport};
use super::call_word;
use super::communicator::{Communicator, NcclFallback};
use super::compile;
use super::gpu_comm::GpuComm;
use super::kernel_args::CollArgs;
use super::launch_shape::{self, grid_cap};
use super::loader::{kernel_family, pick};
use super::transport::p2p::P2pTransport;
use crate::dtype::{DType, ReduceOp};
use crate::error::{Error, Result};
use crate::select::{NcclReason, Route, Transport};
use crate::units::ByteSize;
use crate::wire::Wire;

/// Threads per block at most (TPCOMM_BLOCK in allreduce.cu's launch bounds).
const BLOCK: u32 = 512;

/// Which collective (defined beside `Algo`, so that the quantized gathered
/// form can name the all-gather without importing this module).
pub use crate::algo::Collective;

kernel_family! {
    /// The collective kernels of one device: `fns` is [all-gather,
    /// reduce-scatter, broadcast] (see [`pick`]).
    fn coll_kernels = 3 of compile::COLLECTIVES_SRC, "collectives.cu", "the collective kernels",
        ["tpcomm_all_gather", "tpcomm_reduce_scatter", "tpcomm_broadcast"], BLOCK
}

impl P2pTransport {
    /// Compiles (or reads from the cache) and loads the collective kernels
    /// now, so the first all-gather, reduce-scatter or broadcast loads
    /// nothing (inside a CUDA graph capture, for one) and takes no memory a
    /// server has not seen. Returns the size of the kernel image (loaded
    /// once per device and process). Call it right after creation.
    pub fn prepare_collectives(&self) -> Result<ByteSize> {
        Ok(ByteSize::from_usize(
            coll_kernels(self.context())?.cubin_bytes,
        ))
    }

    /// All-gather, reduce-scatter or broadcast on the receive buffers (the
    /// transport's [`GpuTransport`] methods): an all-gather puts every
    /// rank's `input` (`count` elements) into `output` (`world * count`) in
    /// rank order, the same bytes on every rank (an element whose bits are
    /// all ones, a NaN, arrives as the same NaN with its sign bit cleared,
    /// on every rank including the sender), in place when
    /// `input == output + rank * count * size`; a reduce-scatter (sum) gives
    /// every rank in `output` (`count`) the sum of block `rank` of the
    /// ranks' `input` (`world * count`), with the bits of that block of a
    /// tpcomm all-reduce of the same inputs, in place when
    /// `output == input + rank * count * size`; a broadcast copies `input`
    /// of rank `root` into `output` of every rank (other ranks' `input` is
    /// not read).
    ///
    /// # Safety
    /// As [`GpuTransport`]'s methods.
    pub(crate) unsafe fn collective(&self, what: Collective, call: &Call) -> Result<()> {
        let Some(bytes) = self.collective_bytes(what, call)? else {
            return Ok(());
        };
        let dtype = call.dtype;
        let p = self.protocol_parts();
        let k = coll_kernels(p.ctx)?;
        let grid = grid_cap(p.sms as usize, k.blocks_per_sm as usize, p.sharing)?;
        let mut shape = launch_shape::p2p_collective(bytes, grid, k.block);
        if p.check_calls {
            shape = launch_shape::with_idle_checker(shape, bytes, grid as u32, k.block);
        }
        let (f, root, kind) = pick(&k, what, dtype, call_word::P2P_COLLECTIVES);
        let word = call.word(p.check_calls, kind, bytes as u64, root as u64)?;
        let args = CollArgs {
            base: p.kernel_args(call.input, call.output, bytes as u64, word),
            root,
            pad: 0,
        };
        // SAFETY: CollArgs mirrors the kernel's parameter; the receive
        // buffers, control words and status belong to `self`, which callers
        // keep alive until their streams finish; the pointers are the
        // caller's contract; every kernel of collectives.cu starts with
        // wait_for_previous_kernel, as an overlapped launch requires.
        unsafe { call.launch_kernel(p.ctx, f, shape, &args, k.arch.0) }
    }
}

/// Where a collective of a block of `bytes` runs: tpcomm's kernels on
/// `transport` when they can take it, else NCCL and why. Pure, tested
/// without a GPU. `fits`: the transport's buffers hold the call's blocks
/// (always on P2P below `max_bytes`; see `transport::pinned::collectives::fits`).
pub fn collective_route(
    transport: Transport,
    bytes: u64,
    max_bytes: ByteSize,
    op: ReduceOp,
    fits: bool,
) -> Route {
    match NcclReason::of(bytes, max_bytes, op) {
        Some(why) => Route::Nccl(why),
        None if !fits => Route::Nccl(NcclReason::TooLarge),
        None => Route::Tpcomm {
            transport,
            algo: None,
            wire: Wire::Exact,
        },
    }
}

impl GpuComm {
    /// Loads the collective kernels of its transport now (see
    /// [`P2pTransport::prepare_collectives`]); returns the image's size.
    pub fn prepare_collectives(&self) -> Result<ByteSize> {
        match self {
            GpuComm::P2p(c) => c.prepare_collectives(),
            GpuComm::Pinned(c) => c.prepare_collectives(),
        }
    }

    /// Whether a block of `count` elements of `dtype` fits this transport's
    /// buffers for `what` (the P2P kernels take any block up to the
    /// buffers; the pinned host path also needs its blocks to fit its area).
    pub fn collective_fits(&self, what: Collective, count: usize, dtype: DType) -> bool {
        match self {
            GpuComm::P2p(c) => count
                .checked_mul(dtype.size())
                .is_some_and(|b| b as u64 <= c.max_bytes().bytes()),
            GpuComm::Pinned(h) => h.collective_fits(what, count, dtype),
        }
    }
}

impl Communicator {
    /// Loads the collective kernels of its transport now (see
    /// [`P2pTransport::prepare_collectives`]); returns the image's size.
    pub fn prepare_collectives(&self) -> Result<ByteSize> {
        self.gpu().prepare_collectives()
    }

    fn route_collective(
        &self,
        what: Collective,
        count: usize,
        dtype: DType,
        op: ReduceOp,
    ) -> Result<Route> {
        let bytes = dtype.bytes_of(count)? as u64;
        let fits = self.gpu().collective_fits(what, count, dtype);
        let transport = self.gpu().transport().for_routes();
        let route = collective_route(transport, bytes, self.gpu().max_bytes(), op, fits);
        if let (Route::Nccl(why), NcclFallback::None) = (route, self.fallback()) {
            return Err(Error::Unsupported(format!(
                "this {} ({} x {dtype}, {op}) cannot run on tpcomm's kernels: {}; create the communicator with nccl_fallback to run it on NCCL",
                what.name(),
                count,
                why.text(),
            )));
        }
        Ok(route)
    }

    /// Runs a collective where `route_collective` sends it: on the
    /// transport's kernels, or on NCCL (`ncclAllGather`, `ncclReduceScatter`,
    /// `ncclBroadcast`, same arguments; with `NcclFallback::Caller` a
    /// `Route::Nccl` is returned unrun, for the caller's NCCL). `what` names
    /// the broadcast's root; `call.op` counts for the reduce-scatter only.
    ///
    /// # Safety
    /// As [`GpuTransport`]'s methods, for `what`.
    pub unsafe fn run_collective(&self, what: Collective, call: &Call) -> Result<Route> {
        let op = match what {
            // Only sums reach the kernels: any other op routes to NCCL.
            Collective::ReduceScatter => call.op,
            _ => ReduceOp::Sum,
        };
        let route = self.route_collective(what, call.count, call.dtype, op)?;
        // SAFETY: the caller's contract, passed on unchanged; NCCL reads and
        // writes the same ranges on the same stream.
        unsafe {
            match (route, self.fallback()) {
                (Route::Tpcomm { .. }, _) => self.gpu().run_collective(what, call)?,
                (_, NcclFallback::Own(n)) => GpuTransport::run_collective(n, what, call)?,
                (_, NcclFallback::Caller) => {}
                (_, NcclFallback::None) => return Err(no_route()),
            }
        }
        Ok(route)
    }

    /// All-gather of `call` (see [`P2pTransport::collective`]) on tpcomm's
    /// kernels where they take it, else on NCCL (`ncclAllGather`, same
    /// arguments).
    ///
    /// # Safety
    /// As [`GpuTransport::all_gather`].
    pub unsafe fn all_gather(&self, call: &Call) -> Result<Route> {
        // SAFETY: the caller's contract.
        unsafe { self.run_collective(Collective::AllGather, call) }
    }

    /// Reduce-scatter of `call` by `call.op` (see
    /// [`P2pTransport::collective`]); max and min, and what the kernels
    /// cannot take, on NCCL (`ncclReduceScatter`).
    ///
    /// # Safety
    /// As [`GpuTransport::reduce_scatter`].
    pub unsafe fn reduce_scatter(&self, call: &Call) -> Result<Route> {
        // SAFETY: the caller's contract.
        unsafe { self.run_collective(Collective::ReduceScatter, call) }
    }

    /// Broadcast of `call` from `call.root` (see
    /// [`P2pTransport::collective`]); on NCCL (`ncclBroadcast`) where the
    /// kernels cannot take it.
    ///
    /// # Safety
    /// As [`GpuTransport::broadcast`].
    pub unsafe fn broadcast(&self, call: &Call) -> Result<Route> {
        let what = Collective::Broadcast { root: call.root };
        // SAFETY: the caller's contract.
        unsafe { self.run_collective(what, call) }
    }
}

/// Unreachable in practice: `route_collective` refuses non-tpcomm routes
/// without NCCL.
fn no_route() -> Error {
    Error::Unsupported("no route for this collective (tpcomm bug: please report)".into())
}

#[cfg(test)]
mod tests;
