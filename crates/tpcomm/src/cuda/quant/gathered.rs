//! The quantized all-reduce's gathered form (kernels/quant_gathered.cu):
//! pack this rank's codes and scales into its block of a device buffer, move
//! every rank's block to every rank with the transport's ordinary all-gather
//! (whose producer/consumer design keeps the link full), then dequantize and
//! sum the blocks in rank order. Three launches, no protocol of its own; the
//! arithmetic is the one-shot kernel's, so the result is
//! `quant::model::all_reduce_bits` bit for bit.
//!
//! It moves the one-shot kernel's bytes plus one more pass over the blocks
//! in device memory. Opt-in (`CudaConfig::wire_algo = QuantAlgo::Gathered`):
//! on one H200 with 2 ranks sharing it over the host path it was faster
//! than the one-shot kernel at 16 MiB only and much slower from 32 MiB,
//! where the host-path all-gather itself slows down (bench/results/quantized.md).
//! The buffer holds one block per rank, allocated at creation and reported.

use super::{format_index, round_up, QuantAlgo, QuantComm, GATHER_BLOCK};
use crate::algo::Collective;
use crate::cuda::call::{Call, GpuTransport};
use crate::cuda::gpu_comm::GpuComm;
use crate::cuda::kernel_args::QuantGatherArgs;
use crate::cuda::loader::dtype_index;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::quant::{Format, Wire, MIN_GROUP};
use crate::sys::cuda::{self as raw, CUdeviceptr};

/// QG_PACK_OCTETS in kernels/quant_gathered.cu: the neighbouring octets of
/// elements one pack thread takes (all in one group of at least 32; an
/// unpack-sum thread takes one octet).
pub(super) const PACK_OCTETS: usize = 2;

/// Where one call's codes and scales sit in a rank's block: codes from byte
/// 0 (one per element), then an f32 scale per group. Both parts are whole
/// 16-byte vectors, so blocks stay 16-byte aligned and the all-gather moves
/// whole vectors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GatherLayout {
    pub scales_off: usize,
    pub block_bytes: usize,
}

impl GatherLayout {
    pub fn of(count: usize, group: u32) -> Self {
        let scales_off = round_up(count, 16);
        let scales = 4 * count.div_ceil(group.max(1) as usize);
        Self {
            scales_off,
            block_bytes: round_up(scales_off + scales, 16),
        }
    }

    /// The largest block a message of at most `max_bytes` needs: 2-byte
    /// elements (the most per byte) and the smallest group (the most scales).
    pub fn max_block(max_bytes: usize) -> usize {
        Self::of(max_bytes.div_ceil(2), MIN_GROUP).block_bytes
    }
}

/// One gathered call, as [`QuantComm::gathered_call`] planned it.
#[derive(Clone, Copy, Debug)]
pub struct GatherCall {
    pub layout: GatherLayout,
    pub count: usize,
    pub dtype: DType,
    format: Format,
    group: u32,
    /// Block 0 of the gathered buffer (the all-gather's output).
    pub blocks: CUdeviceptr,
    /// This rank's block (the all-gather's input).
    pub own_block: CUdeviceptr,
}

impl GatherCall {
    /// The all-gather's count, in f32 words per rank.
    pub fn gather_count(&self) -> usize {
        self.layout.block_bytes / 4
    }
    /// The all-gather's element type: f32 words, none of which is all ones
    /// (the P2P slots' sentinel, which they would send as another value;
    /// quant_gathered.cu says why no word is).
    pub const GATHER_DTYPE: DType = DType::F32;
}

impl QuantComm {
    /// Whether this communicator has the gathered buffer.
    pub fn has_gathered(&self) -> bool {
        self.gathered.is_some()
    }

    /// The algorithm a call of `count` elements runs when asked for `algo`:
    /// `Auto` is two-shot above 2 ranks where every rank owns a chunk, else
    /// one-shot. `Gathered` needs the buffer that creation allocates only
    /// when `CudaConfig::wire_algo` asks for it; without, an error.
    pub fn resolve(&self, algo: QuantAlgo, count: usize) -> Result<QuantAlgo> {
        Ok(match algo {
            QuantAlgo::Gathered if !self.has_gathered() => {
                return Err(Error::Unsupported(
                    "the gathered quantized all-reduce on a communicator created without its buffer; create it with CudaConfig::wire_algo = QuantAlgo::Gathered".into(),
                ))
            }
            QuantAlgo::Gathered => QuantAlgo::Gathered,
            a if a.runs_twoshot(count, self.world) => QuantAlgo::TwoShot,
            _ => QuantAlgo::OneShot,
        })
    }

    /// Plans a gathered call (after the checks every quantized call makes);
    /// `None` for an empty message.
    pub fn gathered_call(&self, call: &Call, wire: Wire) -> Result<Option<GatherCall>> {
        let Some(buf) = &self.gathered else {
            return Err(Error::Unsupported(
                "this quantized communicator has no gathered buffer".into(),
            ));
        };
        let Some((format, group)) = self.checked_call(call, wire)? else {
            return Ok(None);
        };
        let (count, dtype) = (call.count, call.dtype);
        let layout = GatherLayout::of(count, group);
        if layout.block_bytes > self.gathered_block {
            // checked_call bounds count by max_bytes; this cannot happen
            // unless the layouts disagree.
            return Err(Error::invalid(
                "message size",
                format!(
                    "a gathered block of {} bytes is above the buffer's {} per rank",
                    layout.block_bytes, self.gathered_block
                ),
            ));
        }
        Ok(Some(GatherCall {
            layout,
            count,
            dtype,
            format,
            group,
            blocks: buf.ptr(),
            own_block: buf.ptr() + (self.rank * layout.block_bytes) as u64,
        }))
    }

    /// Quantizes `call.input` into this rank's block, on `call.stream`.
    ///
    /// # Safety
    /// `call.input` holds `c.count` elements of `c.dtype` until the kernel
    /// has run.
    pub unsafe fn pack(&self, c: &GatherCall, call: &Call) -> Result<()> {
        let args = self.gather_args(c, call.input, c.own_block);
        let f = self.kernels.pack[format_index(c.format)][dtype_index(c.dtype)];
        // SAFETY: the caller's contract for `input`; the block lies in the
        // gathered buffer, which lives as long as `self`.
        unsafe { self.launch_local(f, c, &args, PACK_OCTETS, call) }
    }

    /// Dequantizes every rank's block and sums them in rank order into
    /// `call.output`, on `call.stream`.
    ///
    /// # Safety
    /// `call.output` holds `c.count` elements of `c.dtype` until the kernel
    /// has run; the blocks were gathered (stream order) before it.
    pub unsafe fn unpack_sum(&self, c: &GatherCall, call: &Call) -> Result<()> {
        let args = self.gather_args(c, c.blocks, call.output);
        let f = self.kernels.unpack_sum[format_index(c.format)][dtype_index(c.dtype)];
        // SAFETY: as in `pack`.
        unsafe { self.launch_local(f, c, &args, 1, call) }
    }

    fn gather_args(&self, c: &GatherCall, input: u64, output: u64) -> QuantGatherArgs {
        QuantGatherArgs {
            input,
            output,
            count: c.count as u64,
            block_stride: c.layout.block_bytes as u64,
            scales_off: c.layout.scales_off as u64,
            world: self.world as u32,
            group: c.group,
        }
    }

    /// One thread per `octets` octets of elements, whole blocks of
    /// [`GATHER_BLOCK`] threads.
    ///
    /// # Safety
    /// `args` is a pack or unpack-sum argument whose addresses are valid
    /// until the kernel has run.
    unsafe fn launch_local(
        &self,
        f: raw::Function,
        c: &GatherCall,
        args: &QuantGatherArgs,
        octets: usize,
        call: &Call,
    ) -> Result<()> {
        let shape = crate::cuda::launch_shape::quant_local(c.count, octets, GATHER_BLOCK)?;
        // SAFETY: QuantGatherArgs mirrors `struct QGArgs`; addresses per the
        // caller; the kernels start with wait_for_previous_kernel.
        unsafe { call.launch_kernel(&self.ctx, f, shape, args, self.kernels.arch.0) }
    }
    /// A quantized all-reduce (sum) on `wire` with the algorithm `algo` asks
    /// for ([`resolve`](Self::resolve)); returns the one that ran. `exact` is
    /// the group's exact communicator (its failures are checked first; the
    /// gathered form's all-gather runs on it). The gathered form is three
    /// launches on `stream`: pack, `exact`'s all-gather of the blocks,
    /// unpack-sum; where the blocks do not fit the all-gather's buffers (a
    /// tiny `max_bytes`) the one-shot kernel runs instead, with the same bits.
    ///
    /// # Safety
    /// As [`QuantComm::all_reduce_with`]; `exact` is the communicator of the same
    /// ranks this one was created beside, and every rank makes the same calls.
    pub unsafe fn run(
        &self,
        exact: &GpuComm,
        call: &Call,
        wire: Wire,
        algo: QuantAlgo,
    ) -> Result<QuantAlgo> {
        exact.check()?;
        let mut ran = self.resolve(algo, call.count)?;
        if ran == QuantAlgo::Gathered {
            let Some(c) = self.gathered_call(call, wire)? else {
                return Ok(ran);
            };
            let what = Collective::AllGather;
            if exact.collective_fits(what, c.gather_count(), GatherCall::GATHER_DTYPE) {
                // The all-gather of the blocks, on the caller's stream and launch.
                let blocks = Call {
                    input: c.own_block,
                    output: c.blocks,
                    count: c.gather_count(),
                    dtype: GatherCall::GATHER_DTYPE,
                    ..*call
                };
                // SAFETY: the caller's contract for input and output; the
                // blocks live in the quantized communicator's buffer (as
                // long as `self`), in stream order between the launches.
                unsafe {
                    self.pack(&c, call)?;
                    exact.run_collective(what, &blocks)?;
                    self.unpack_sum(&c, call)?;
                }
                return Ok(ran);
            }
            ran = QuantAlgo::OneShot;
        }
        // SAFETY: as above.
        unsafe { self.all_reduce_with(call, wire, ran)? };
        Ok(ran)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gather_args_match_the_cuda_struct() {
        // Five u64 words and two u32: `struct QGArgs`.
        assert_eq!(std::mem::size_of::<QuantGatherArgs>(), 5 * 8 + 8);
        let src = include_str!("../kernels/quant_gathered.cu");
        assert!(src.contains(&format!("#define QG_BLOCK {GATHER_BLOCK}")));
        // Two octets a pack thread: one 16-byte store of codes, and the
        // smallest group (32) still holds whole threads.
        assert!(src.contains(&format!("#define QG_PACK_OCTETS {PACK_OCTETS}")));
        assert!(matches!(PACK_OCTETS, 2 | 4) && 8 * PACK_OCTETS <= MIN_GROUP as usize);
    }

    #[test]
    fn no_code_byte_the_blocks_carry_is_all_ones() {
        // What pack stores, for every input the encoders can see (a sweep of
        // y = x * inv over both signs, the saturating ends, NaN and
        // infinities): int8 codes xor 0x7f (quant_gathered.cu), fp8 codes as
        // they are. No byte 0xff means no f32 word of codes is the P2P
        // slots' sentinel; scales are never negative, so theirs neither.
        let mut ys: Vec<f32> = (-2000..=2000).map(|i| i as f32 * 0.25).collect();
        ys.extend([
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            1e30,
            -1e30,
            -0.0,
        ]);
        for y in ys {
            let int8 = crate::quant::model::encode(Format::Int8, y, 1.0);
            assert_ne!(int8 ^ 0x7f, 0xff, "int8 code of {y}");
            let fp8 = crate::quant::model::encode(Format::Fp8E4m3, y, 1.0);
            assert_ne!(fp8, 0xff, "fp8 code of {y}");
        }
        let src = include_str!("../kernels/quant_gathered.cu");
        assert!(src.contains("#define QG_INT8_XOR 0x7f7f7f7f7f7f7f7full"));
        assert_eq!(GatherCall::GATHER_DTYPE, DType::F32);
    }

    #[test]
    fn blocks_hold_codes_then_scales_in_whole_vectors() {
        // 1 Mi bf16 elements, groups of 64: 1 MiB of codes, 64 KiB of scales.
        let l = GatherLayout::of(1 << 20, 64);
        assert_eq!(l.scales_off, 1 << 20);
        assert_eq!(l.block_bytes, (1 << 20) + (64 << 10));
        // 13 elements, groups of 32: 16 bytes of codes, one scale, padded.
        let l = GatherLayout::of(13, 32);
        assert_eq!((l.scales_off, l.block_bytes), (16, 32));
        for count in [1usize, 7, 8, 9, 4095, 4096, 100_003] {
            for g in [32u32, 64, 128] {
                let l = GatherLayout::of(count, g);
                assert!(
                    l.scales_off >= count.div_ceil(8) * 8,
                    "octet stores stay in the codes"
                );
                assert!(l.block_bytes >= l.scales_off + 4 * count.div_ceil(g as usize));
                assert!(l.scales_off.is_multiple_of(16) && l.block_bytes.is_multiple_of(16));
                // Every message up to max_bytes fits the buffer's block.
                for elem in [2usize, 4] {
                    assert!(GatherLayout::max_block(count * elem) >= l.block_bytes);
                }
            }
        }
    }
}
