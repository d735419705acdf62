//! Byte-exact collectives for the drop-in's standalone mode
//! (kernels/gathered.cu).
//!
//! tpcomm's collective kernels send an all-ones 16- or 32-bit word as a NaN
//! with its sign bit cleared (the all-ones word is their arrival sentinel):
//! right for floats, wrong for integer bytes. Integer data therefore travels
//! *expanded*, every byte b as the 16-bit word 0x00bb ([`Kernels::convert`]
//! there and back, the collective kernels moving f16 words between).
//! An all-reduce of a type or op the collective kernels do not sum
//! (integers, f64, fp8; prod, max, min, avg) gathers every rank's expanded
//! block and reduces the `world` blocks element by element in rank order
//! ([`Kernels::reduce`]), over the same bytes in the same order on every
//! rank, so every rank gets the same bits. A pre-multiplied sum
//! ([`Kernels::reduce_premul`]) is the same with each block multiplied by
//! the scalar its rank put beside it ([`Kernels::put_immediate`], or
//! [`Kernels::convert`] from device memory). None of these kernels waits.

use super::compile;
use super::fp8::Fp8;
use super::kernel_args::{BytesArgs, GatheredArgs};
use super::launch_shape;
use super::loader::{compile_and_load, per_device, PerDevice};
use crate::error::{Error, Result};
use crate::sys::cuda::{self as raw, CUstream, Function, Module};
use cudarc::driver::CudaContext;
use std::sync::Arc;

/// Element types, in NCCL's numbering where NCCL has them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Elem {
    I8,
    U8,
    I32,
    U32,
    I64,
    U64,
    F16,
    F32,
    F64,
    Bf16,
    /// `ncclFloat8e4m3` (10): see fp8.rs.
    F8E4M3,
    /// `ncclFloat8e5m2` (11).
    F8E5M2,
}

impl Elem {
    pub const ALL: [Elem; 12] = [
        Elem::I8,
        Elem::U8,
        Elem::I32,
        Elem::U32,
        Elem::I64,
        Elem::U64,
        Elem::F16,
        Elem::F32,
        Elem::F64,
        Elem::Bf16,
        Elem::F8E4M3,
        Elem::F8E5M2,
    ];

    /// The type of `ncclDataType_t` value `t` (0 to 11), if it is one of these.
    pub fn from_nccl(t: i32) -> Option<Elem> {
        usize::try_from(t)
            .ok()
            .and_then(|i| Elem::ALL.get(i).copied())
    }

    pub fn size(self) -> usize {
        match self {
            Elem::I8 | Elem::U8 | Elem::F8E4M3 | Elem::F8E5M2 => 1,
            Elem::F16 | Elem::Bf16 => 2,
            Elem::I32 | Elem::U32 | Elem::F32 => 4,
            Elem::I64 | Elem::U64 | Elem::F64 => 8,
        }
    }

    fn kernel(self) -> &'static str {
        match self {
            Elem::I8 => "tpcomm_reduce_gathered_i8",
            Elem::U8 => "tpcomm_reduce_gathered_u8",
            Elem::I32 => "tpcomm_reduce_gathered_i32",
            Elem::U32 => "tpcomm_reduce_gathered_u32",
            Elem::I64 => "tpcomm_reduce_gathered_i64",
            Elem::U64 => "tpcomm_reduce_gathered_u64",
            Elem::F16 => "tpcomm_reduce_gathered_f16",
            Elem::F32 => "tpcomm_reduce_gathered_f32",
            Elem::F64 => "tpcomm_reduce_gathered_f64",
            Elem::Bf16 => "tpcomm_reduce_gathered_bf16",
            Elem::F8E4M3 => "tpcomm_reduce_gathered_f8e4m3",
            Elem::F8E5M2 => "tpcomm_reduce_gathered_f8e5m2",
        }
    }
}

/// Which way [`Kernels::convert`] goes between plain bytes and the
/// expanded form (every byte a 16-bit word 0x00bb).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Form {
    Expand,
    Compact,
}

/// What [`Kernels::convert`] reads and writes: `blocks` blocks of `nbytes`
/// plain bytes (or their expanded form), from `input` (blocks `in_stride`
/// bytes apart) to `output` (blocks `out_stride` bytes apart).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ByteBlocks {
    pub input: u64,
    pub in_stride: u64,
    pub output: u64,
    pub out_stride: u64,
    /// Plain bytes of one block (an expanded block is twice as long).
    pub nbytes: usize,
    pub blocks: usize,
}

impl ByteBlocks {
    /// One block of `nbytes` plain bytes from `input` to `output`.
    pub fn one(input: u64, output: u64, nbytes: usize) -> Self {
        ByteBlocks {
            input,
            in_stride: 0,
            output,
            out_stride: 0,
            nbytes,
            blocks: 1,
        }
    }
}

/// What [`Kernels::reduce`] and [`Kernels::reduce_premul`] read and write:
/// `world` expanded blocks `stride` bytes apart from `input`, reduced
/// element by element into `count` elements of `elem` at `output`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReduceBlocks {
    pub input: u64,
    pub stride: u64,
    pub world: usize,
    pub output: u64,
    pub count: usize,
    pub elem: Elem,
}

/// Ops, numbered as NCCL numbers `ncclRedOp_t` (TPCOMM_GOP_* in the kernel).
/// The pre-multiplied sum is not one of these: NCCL numbers those ops per
/// communicator, and [`Kernels::reduce_premul`] runs them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Sum = 0,
    Prod = 1,
    Max = 2,
    Min = 3,
    Avg = 4,
}

impl Op {
    pub const ALL: [Op; 5] = [Op::Sum, Op::Prod, Op::Max, Op::Min, Op::Avg];

    /// The op of `ncclRedOp_t` value `op` (0 to 4), if it is one of these.
    pub fn from_nccl(op: i32) -> Option<Op> {
        usize::try_from(op)
            .ok()
            .and_then(|i| Op::ALL.get(i).copied())
    }
}

/// The kernel's number for the pre-multiplied sum (TPCOMM_GOP_PREMUL).
const OP_PREMUL: u32 = 5;

/// Bytes an expanded scalar takes (the widest element, 8 bytes, expanded).
pub const SCALAR_BYTES: usize = 16;

/// The family loaded on one device.
pub struct Kernels {
    fns: [Function; 12],
    expand: Function,
    immediate: Function,
    compact: Function,
    /// Bytes of the loaded image (for memory reports).
    pub cubin_bytes: usize,
    sms: u32,
    _module: Module,
    _ctx: Arc<CudaContext>,
}

/// The family for `ctx`'s device, compiled (or read from the disk cache)
/// and loaded the first time. Call it at set-up: a later call then never
/// compiles or loads anything (CUDA graph capture forbids loading).
pub fn kernels(ctx: &Arc<CudaContext>) -> Result<Arc<Kernels>> {
    static CACHE: PerDevice<Kernels> = PerDevice::new();
    per_device(&CACHE, ctx, || {
        let l = compile_and_load(
            ctx,
            compile::GATHERED_SRC,
            "gathered.cu",
            "the gathered-block reduction kernels",
        )?;
        let mut fns = Vec::with_capacity(Elem::ALL.len());
        for e in Elem::ALL {
            fns.push(l.module.function(e.kernel())?);
        }
        let fns: [Function; 12] = fns
            .try_into()
            .map_err(|_| Error::invalid("gathered kernels", "not 12 functions"))?;
        let sms = raw::sm_count(ctx.ordinal() as i32)? as u32;
        Ok(Kernels {
            fns,
            expand: l.module.function("tpcomm_expand_bytes")?,
            immediate: l.module.function("tpcomm_expand_immediate")?,
            compact: l.module.function("tpcomm_compact_bytes")?,
            cubin_bytes: l.cubin_bytes,
            sms,
            _module: l.module,
            _ctx: ctx.clone(),
        })
    })
}

impl Kernels {
    /// Launches `form` over `b.blocks` blocks of `b.nbytes` plain bytes:
    /// [`Form::Expand`] writes each byte of a block (`b.in_stride` apart) as
    /// a 16-bit word of an expanded block (`b.out_stride` apart);
    /// [`Form::Compact`] the reverse.
    ///
    /// # Safety
    /// Device memory of this family's device, valid until `stream` has run
    /// the kernel; the expanded side 2-byte aligned, its blocks `2 * nbytes`
    /// long; input and output blocks not overlapping.
    pub unsafe fn convert(&self, form: Form, b: &ByteBlocks, stream: CUstream) -> Result<()> {
        let f = match form {
            Form::Expand => self.expand,
            Form::Compact => self.compact,
        };
        let ByteBlocks {
            input,
            in_stride,
            output,
            out_stride,
            nbytes,
            blocks,
        } = *b;
        if nbytes == 0 || blocks == 0 {
            return Ok(());
        }
        let args = BytesArgs {
            input,
            output,
            nbytes: nbytes as u64,
            in_stride,
            out_stride,
            blocks: u32::try_from(blocks)
                .map_err(|_| Error::invalid("gathered blocks", format!("{blocks}")))?,
            pad: 0,
        };
        let s = launch_shape::gathered(nbytes as u64, self.sms);
        // SAFETY: `BytesArgs` is `struct BytesArgs`; the ranges are the
        // caller's (see # Safety); the kernel waits on nothing.
        unsafe { raw::launch_shared(f, s.grid, s.block, s.shared_bytes, &args, stream) }
    }

    /// Launches `output[i] = op over r of block r's element i`, `i <
    /// b.count`, in rank order, on `stream`; block `r` is expanded (two
    /// bytes per byte) at `b.input + r * b.stride`.
    ///
    /// # Safety
    /// `b.input` must hold `b.world` expanded blocks of `b.count` elements
    /// of `b.elem` (`2 * count * size` bytes each), `b.stride` bytes apart,
    /// and `b.output` `b.count` elements, all device memory of this family's
    /// device valid until `stream` has run the kernel; `input` and `stride`
    /// 2-byte aligned, `output` aligned to the element's size and not
    /// overlapping the blocks.
    pub unsafe fn reduce(&self, b: &ReduceBlocks, op: Op, stream: CUstream) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { self.launch_reduce(b, 0, op as u32, stream) }
    }

    /// Launches the pre-multiplied sum `output[i] = sum over r of s_r *
    /// (block r's element i)`, `i < b.count`, in rank order, on `stream`;
    /// blocks as [`Kernels::reduce`] has them, and block `r`'s scalar `s_r`
    /// (one element of `b.elem`, expanded) at `b.input + r * b.stride +
    /// scalar`. Floats: f32 and f64 in their own type, the others in f32,
    /// each product and sum rounded on its own and the result once; integers
    /// wrap ([`reference_premul`] is the CPU model).
    ///
    /// # Safety
    /// As [`Kernels::reduce`], and every block's scalar (`2 * size` bytes at
    /// `scalar`, 2-byte aligned) inside the same memory.
    pub unsafe fn reduce_premul(
        &self,
        b: &ReduceBlocks,
        scalar: u64,
        stream: CUstream,
    ) -> Result<()> {
        if !scalar.is_multiple_of(2) {
            return Err(Error::invalid(
                "gathered reduction",
                "the expanded scalar must be 2-byte aligned",
            ));
        }
        // SAFETY: forwarded from the caller.
        unsafe { self.launch_reduce(b, scalar, OP_PREMUL, stream) }
    }

    /// Writes the low `nbytes` bytes (at most 8) of `value` (little-endian:
    /// a scalar's bytes) expanded at `output`, on `stream`: a value the
    /// host holds, put in stream order (a CUDA graph keeps it as captured).
    ///
    /// # Safety
    /// `output` holds `2 * nbytes` bytes of device memory of this family's
    /// device, 2-byte aligned, valid until `stream` has run the kernel.
    pub unsafe fn put_immediate(
        &self,
        value: u64,
        nbytes: usize,
        output: u64,
        stream: CUstream,
    ) -> Result<()> {
        if nbytes > 8 || !output.is_multiple_of(2) {
            return Err(Error::invalid(
                "immediate scalar",
                format!("{nbytes} bytes at {output:#x}"),
            ));
        }
        if nbytes == 0 {
            return Ok(());
        }
        let args = BytesArgs {
            input: value,
            output,
            nbytes: nbytes as u64,
            in_stride: 0,
            out_stride: 0,
            blocks: 1,
            pad: 0,
        };
        let s = launch_shape::gathered(nbytes as u64, self.sms);
        // SAFETY: `BytesArgs` is `struct BytesArgs` (the value travels in
        // `input`); the output range is the caller's (see # Safety); the
        // kernel reads no memory and waits on nothing.
        unsafe {
            raw::launch_shared(
                self.immediate,
                s.grid,
                s.block,
                s.shared_bytes,
                &args,
                stream,
            )
        }
    }

    unsafe fn launch_reduce(
        &self,
        b: &ReduceBlocks,
        scalar: u64,
        op: u32,
        stream: CUstream,
    ) -> Result<()> {
        let ReduceBlocks {
            input,
            stride,
            world,
            output,
            count,
            elem,
        } = *b;
        if !(1..=crate::transport::MAX_WORLD).contains(&world) {
            return Err(Error::invalid("world size", format!("{world}")));
        }
        let z = elem.size() as u64;
        if !output.is_multiple_of(z) || !input.is_multiple_of(2) || !stride.is_multiple_of(2) {
            return Err(Error::invalid(
                "gathered reduction",
                format!("the output must be {z}-byte aligned, the expanded blocks 2-byte aligned"),
            ));
        }
        if count == 0 {
            return Ok(());
        }
        let s = launch_shape::gathered(count as u64, self.sms);
        let args = GatheredArgs {
            input,
            output,
            count: count as u64,
            stride,
            scalar,
            world: world as u32,
            op,
        };
        let f = self.fns[Elem::ALL.iter().position(|&e| e == elem).unwrap_or(0)];
        // SAFETY: `GatheredArgs` is `struct GatheredArgs`; the ranges are the
        // caller's (see # Safety); the kernel waits on nothing.
        unsafe { raw::launch_shared(f, s.grid, s.block, s.shared_bytes, &args, stream) }
    }
}

/// The kernel's max (`max`) or min of `acc` and `x`: `x` where it compares
/// above (below) `acc`, else `acc`.
fn extremum<T: PartialOrd>(max: bool, acc: T, x: T) -> T {
    let wins = if max { x > acc } else { x < acc };
    if wins {
        x
    } else {
        acc
    }
}

/// What `op` over `world` plain blocks gives for element `i`, on the host,
/// in the kernel's order and arithmetic (the tests' reference).
pub fn reference(elem: Elem, op: Op, blocks: &[&[u8]], i: usize) -> Vec<u8> {
    use half::{bf16, f16};
    let z = elem.size();
    let at = |r: usize| &blocks[r][i * z..(i + 1) * z];
    let world = blocks.len();
    macro_rules! int {
        ($t:ty, $u:ty) => {{
            let v = |r: usize| <$t>::from_le_bytes(at(r).try_into().unwrap_or_default());
            let mut acc = v(0);
            for r in 1..world {
                let x = v(r);
                acc = match op {
                    Op::Prod => (acc as $u).wrapping_mul(x as $u) as $t,
                    Op::Max => extremum(true, acc, x),
                    Op::Min => extremum(false, acc, x),
                    Op::Sum | Op::Avg => (acc as $u).wrapping_add(x as $u) as $t,
                };
            }
            if op == Op::Avg {
                acc /= world as $t;
            }
            acc.to_le_bytes().to_vec()
        }};
    }
    macro_rules! float {
        ($t:ty, $load:expr, $store:expr) => {{
            let v = |r: usize| -> $t { $load(at(r)) };
            let mut acc = v(0);
            for r in 1..world {
                let x = v(r);
                acc = match op {
                    Op::Prod => acc * x,
                    Op::Max => extremum(true, acc, x),
                    Op::Min => extremum(false, acc, x),
                    Op::Sum | Op::Avg => acc + x,
                };
            }
            if op == Op::Avg {
                acc /= world as $t;
            }
            $store(acc)
        }};
    }
    let u16of = |b: &[u8]| u16::from_le_bytes(b.try_into().unwrap_or_default());
    match elem {
        Elem::I8 => int!(i8, u8),
        Elem::U8 => int!(u8, u8),
        Elem::I32 => int!(i32, u32),
        Elem::U32 => int!(u32, u32),
        Elem::I64 => int!(i64, u64),
        Elem::U64 => int!(u64, u64),
        Elem::F32 => float!(
            f32,
            |b: &[u8]| f32::from_le_bytes(b.try_into().unwrap_or_default()),
            |a: f32| a.to_le_bytes().to_vec()
        ),
        Elem::F64 => float!(
            f64,
            |b: &[u8]| f64::from_le_bytes(b.try_into().unwrap_or_default()),
            |a: f64| a.to_le_bytes().to_vec()
        ),
        Elem::F16 => float!(
            f32,
            |b: &[u8]| f16::from_bits(u16of(b)).to_f32(),
            |a: f32| f16::from_f32(a).to_bits().to_le_bytes().to_vec()
        ),
        Elem::Bf16 => float!(
            f32,
            |b: &[u8]| bf16::from_bits(u16of(b)).to_f32(),
            |a: f32| bf16::from_f32(a).to_bits().to_le_bytes().to_vec()
        ),
        Elem::F8E4M3 => float!(f32, |b: &[u8]| Fp8::E4M3.decode(b[0]), |a: f32| vec![
            Fp8::E4M3.encode(a)
        ]),
        Elem::F8E5M2 => float!(f32, |b: &[u8]| Fp8::E5M2.decode(b[0]), |a: f32| vec![
            Fp8::E5M2.encode(a)
        ]),
    }
}

/// What the pre-multiplied sum over `world` plain blocks gives for element
/// `i`, block `r` scaled by `scalars[r]` (one element's bytes), on the
/// host, in the kernel's order and arithmetic ([`Kernels::reduce_premul`]).
pub fn reference_premul(elem: Elem, scalars: &[&[u8]], blocks: &[&[u8]], i: usize) -> Vec<u8> {
    use half::{bf16, f16};
    let z = elem.size();
    let at = |r: usize| &blocks[r][i * z..(i + 1) * z];
    let sc = |r: usize| &scalars[r][..z];
    let world = blocks.len();
    macro_rules! int {
        ($u:ty) => {{
            let v = |b: &[u8]| <$u>::from_le_bytes(b.try_into().unwrap_or_default());
            let mut acc = v(sc(0)).wrapping_mul(v(at(0)));
            for r in 1..world {
                acc = acc.wrapping_add(v(sc(r)).wrapping_mul(v(at(r))));
            }
            acc.to_le_bytes().to_vec()
        }};
    }
    macro_rules! float {
        ($load:expr, $store:expr) => {{
            let mut acc = $load(sc(0)) * $load(at(0));
            for r in 1..world {
                acc += $load(sc(r)) * $load(at(r));
            }
            $store(acc)
        }};
    }
    let u16of = |b: &[u8]| u16::from_le_bytes(b.try_into().unwrap_or_default());
    match elem {
        Elem::I8 | Elem::U8 => int!(u8),
        Elem::I32 | Elem::U32 => int!(u32),
        Elem::I64 | Elem::U64 => int!(u64),
        Elem::F32 => float!(
            |b: &[u8]| f32::from_le_bytes(b.try_into().unwrap_or_default()),
            |a: f32| a.to_le_bytes().to_vec()
        ),
        Elem::F64 => float!(
            |b: &[u8]| f64::from_le_bytes(b.try_into().unwrap_or_default()),
            |a: f64| a.to_le_bytes().to_vec()
        ),
        Elem::F16 => float!(|b: &[u8]| f16::from_bits(u16of(b)).to_f32(), |a: f32| {
            f16::from_f32(a).to_bits().to_le_bytes().to_vec()
        }),
        Elem::Bf16 => float!(|b: &[u8]| bf16::from_bits(u16of(b)).to_f32(), |a: f32| {
            bf16::from_f32(a).to_bits().to_le_bytes().to_vec()
        }),
        Elem::F8E4M3 => float!(|b: &[u8]| Fp8::E4M3.decode(b[0]), |a: f32| vec![
            Fp8::E4M3.encode(a)
        ]),
        Elem::F8E5M2 => float!(|b: &[u8]| Fp8::E5M2.decode(b[0]), |a: f32| vec![
            Fp8::E5M2.encode(a)
        ]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nccl_numbers_map_to_types_and_ops() {
        assert_eq!(Elem::from_nccl(0), Some(Elem::I8));
        assert_eq!(Elem::from_nccl(4), Some(Elem::I64));
        assert_eq!(Elem::from_nccl(7), Some(Elem::F32));
        assert_eq!(Elem::from_nccl(9), Some(Elem::Bf16));
        assert_eq!(Elem::from_nccl(10), Some(Elem::F8E4M3));
        assert_eq!(Elem::from_nccl(11), Some(Elem::F8E5M2));
        assert_eq!(Elem::from_nccl(12), None);
        assert_eq!(Elem::from_nccl(-1), None);
        assert_eq!(Op::from_nccl(0), Some(Op::Sum));
        assert_eq!(Op::from_nccl(4), Some(Op::Avg));
        assert_eq!(Op::from_nccl(5), None);
        assert_eq!(
            Elem::ALL.map(Elem::size),
            [1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1]
        );
    }

    #[test]
    fn the_reference_wraps_integers_and_rounds_halves_once() {
        let b = |v: &[u8]| v.to_vec();
        let (x, y) = (b(&200u8.to_le_bytes()), b(&100u8.to_le_bytes()));
        let blocks: Vec<&[u8]> = vec![&x, &y];
        assert_eq!(reference(Elem::U8, Op::Sum, &blocks, 0), vec![44]);
        assert_eq!(reference(Elem::U8, Op::Max, &blocks, 0), vec![200]);
        assert_eq!(reference(Elem::U8, Op::Avg, &blocks, 0), vec![22]);
        let (p, q) = ((-7i64).to_le_bytes(), 3i64.to_le_bytes());
        let blocks: Vec<&[u8]> = vec![&p, &q];
        assert_eq!(
            reference(Elem::I64, Op::Min, &blocks, 0),
            (-7i64).to_le_bytes()
        );
        assert_eq!(
            reference(Elem::I64, Op::Prod, &blocks, 0),
            (-21i64).to_le_bytes()
        );
        // avg truncates toward zero: (-7 + 3) / 2 = -2.
        assert_eq!(
            reference(Elem::I64, Op::Avg, &blocks, 0),
            (-2i64).to_le_bytes()
        );
    }

    #[test]
    fn fp8_reductions_decode_reduce_in_f32_and_round_once() {
        // e4m3: 1.0 (0x38), 1.125 (0x39), 0.0625 (0x18).
        let (a, b, c) = ([0x38u8], [0x39u8], [0x18u8]);
        let blocks: Vec<&[u8]> = vec![&a, &b, &c];
        // 2.1875 lies between 2.0 (0x40) and 2.25 (0x41), nearer 2.25.
        assert_eq!(reference(Elem::F8E4M3, Op::Sum, &blocks, 0), vec![0x41]);
        assert_eq!(reference(Elem::F8E4M3, Op::Max, &blocks, 0), vec![0x39]);
        assert_eq!(reference(Elem::F8E4M3, Op::Min, &blocks, 0), vec![0x18]);
        // 2.1875 / 3 = 0.729..: between 0.6875 (0x33) and 0.75 (0x34).
        assert_eq!(reference(Elem::F8E4M3, Op::Avg, &blocks, 0), vec![0x34]);
        // A sum past 448 saturates; e5m2 past 57344 too.
        let big = [0x7eu8];
        let blocks: Vec<&[u8]> = vec![&big, &big];
        assert_eq!(reference(Elem::F8E4M3, Op::Sum, &blocks, 0), vec![0x7e]);
        let big = [0xfbu8];
        let blocks: Vec<&[u8]> = vec![&big, &big];
        assert_eq!(reference(Elem::F8E5M2, Op::Sum, &blocks, 0), vec![0xfb]);
        assert_eq!(reference(Elem::F8E5M2, Op::Prod, &blocks, 0), vec![0x7b]);
    }

    #[test]
    fn the_premul_reference_scales_each_block_by_its_own_scalar() {
        // f32: 0.5 * 3 + 2 * 5 + 1.5 * -1 = 10.
        let f = |v: f32| v.to_le_bytes();
        let (x0, x1, x2) = (f(3.0), f(5.0), f(-1.0));
        let (s0, s1, s2) = (f(0.5), f(2.0), f(1.5));
        let blocks: Vec<&[u8]> = vec![&x0, &x1, &x2];
        let scalars: Vec<&[u8]> = vec![&s0, &s1, &s2];
        assert_eq!(
            reference_premul(Elem::F32, &scalars, &blocks, 0),
            f(10.0).to_vec()
        );
        // i8 wraps: 3 * 100 + 2 * -7 = 286 = 30 (mod 256).
        let (x0, x1) = ([100u8], [(-7i8) as u8]);
        let (s0, s1) = ([3u8], [2u8]);
        let blocks: Vec<&[u8]> = vec![&x0, &x1];
        let scalars: Vec<&[u8]> = vec![&s0, &s1];
        assert_eq!(reference_premul(Elem::I8, &scalars, &blocks, 0), vec![30]);
        // u64 wraps in 64 bits.
        let (x0, x1) = (u64::MAX.to_le_bytes(), 7u64.to_le_bytes());
        let (s0, s1) = (2u64.to_le_bytes(), 3u64.to_le_bytes());
        let blocks: Vec<&[u8]> = vec![&x0, &x1];
        let scalars: Vec<&[u8]> = vec![&s0, &s1];
        assert_eq!(
            reference_premul(Elem::U64, &scalars, &blocks, 0),
            19u64.to_le_bytes().to_vec()
        );
        // bf16 in f32, rounded once: 1.5 * 1.0078125 + 0.5 * 1.0078125
        // = 2.015625, which bf16 (8 bits) rounds to 2.015625 exactly.
        let b = |v: f32| half::bf16::from_f32(v).to_bits().to_le_bytes();
        let (x0, x1) = (b(1.0078125), b(1.0078125));
        let (s0, s1) = (b(1.5), b(0.5));
        let blocks: Vec<&[u8]> = vec![&x0, &x1];
        let scalars: Vec<&[u8]> = vec![&s0, &s1];
        assert_eq!(
            reference_premul(Elem::Bf16, &scalars, &blocks, 0),
            b(2.015625).to_vec()
        );
        // e5m2: 2 * 1.5 + 0.5 * 3 = 4.5, between 4 (0x44) and 5 (0x45):
        // a tie, to the even code 4.
        let e = |v: f32| [Fp8::E5M2.encode(v)];
        let (x0, x1) = (e(1.5), e(3.0));
        let (s0, s1) = (e(2.0), e(0.5));
        let blocks: Vec<&[u8]> = vec![&x0, &x1];
        let scalars: Vec<&[u8]> = vec![&s0, &s1];
        assert_eq!(
            reference_premul(Elem::F8E5M2, &scalars, &blocks, 0),
            vec![0x44]
        );
    }
}
