//! Byte-exact collectives for the drop-in's standalone mode
//! (kernels/gathered.cu).
//!
//! tpcomm's collective kernels send an all-ones 16- or 32-bit word as a NaN
//! with its sign bit cleared (the all-ones word is their arrival sentinel):
//! right for floats, wrong for integer bytes. Integer data therefore travels
//! *expanded*, every byte b as the 16-bit word 0x00bb ([`Kernels::convert`]
//! there and back, the collective kernels moving f16 words between).
//! An all-reduce of a type or op the collective kernels do not sum
//! (integers, f64; prod, max, min, avg) gathers every rank's expanded block
//! and reduces the `world` blocks element by element in rank order
//! ([`Kernels::reduce`]), over the same bytes in the same order on every
//! rank, so every rank gets the same bits. None of these kernels waits.

use super::compile;
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
}

impl Elem {
    pub const ALL: [Elem; 10] = [
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
    ];

    /// The type of `ncclDataType_t` value `t` (0 to 9), if it is one of these.
    pub fn from_nccl(t: i32) -> Option<Elem> {
        usize::try_from(t)
            .ok()
            .and_then(|i| Elem::ALL.get(i).copied())
    }

    pub fn size(self) -> usize {
        match self {
            Elem::I8 | Elem::U8 => 1,
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

/// Ops, numbered as NCCL numbers `ncclRedOp_t` (TPCOMM_GOP_* in the kernel).
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

/// The family loaded on one device.
pub struct Kernels {
    fns: [Function; 10],
    expand: Function,
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
        let fns: [Function; 10] = fns
            .try_into()
            .map_err(|_| Error::invalid("gathered kernels", "not 10 functions"))?;
        let sms = raw::sm_count(ctx.ordinal() as i32)? as u32;
        Ok(Kernels {
            fns,
            expand: l.module.function("tpcomm_expand_bytes")?,
            compact: l.module.function("tpcomm_compact_bytes")?,
            cubin_bytes: l.cubin_bytes,
            sms,
            _module: l.module,
            _ctx: ctx.clone(),
        })
    })
}

impl Kernels {
    /// Launches `form` over `blocks` blocks of `nbytes` plain bytes:
    /// [`Form::Expand`] writes each byte of a block (`in_stride` apart) as a
    /// 16-bit word of an expanded block (`out_stride` apart);
    /// [`Form::Compact`] the reverse.
    ///
    /// # Safety
    /// Device memory of this family's device, valid until `stream` has run
    /// the kernel; the expanded side 2-byte aligned, its blocks `2 * nbytes`
    /// long; input and output blocks not overlapping.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn convert(
        &self,
        form: Form,
        input: u64,
        in_stride: u64,
        output: u64,
        out_stride: u64,
        nbytes: usize,
        blocks: usize,
        stream: CUstream,
    ) -> Result<()> {
        let f = match form {
            Form::Expand => self.expand,
            Form::Compact => self.compact,
        };
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

    /// Launches `output[i] = op over r of block r's element i`, `i < count`,
    /// in rank order, on `stream`; block `r` is expanded (two bytes per
    /// byte) at `input + r * stride`.
    ///
    /// # Safety
    /// `input` must hold `world` expanded blocks of `count` elements of
    /// `elem` (`2 * count * size` bytes each), `stride` bytes apart, and
    /// `output` `count` elements, all device memory of this family's device
    /// valid until `stream` has run the kernel; `input` and `stride` 2-byte
    /// aligned, `output` aligned to the element's size and not overlapping
    /// the blocks.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn reduce(
        &self,
        input: u64,
        stride: u64,
        world: usize,
        output: u64,
        count: usize,
        elem: Elem,
        op: Op,
        stream: CUstream,
    ) -> Result<()> {
        if !(1..=super::MAX_WORLD).contains(&world) {
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
            world: world as u32,
            op: op as u32,
        };
        let f = self.fns[Elem::ALL.iter().position(|&e| e == elem).unwrap_or(0)];
        // SAFETY: `GatheredArgs` is `struct GatheredArgs`; the ranges are the
        // caller's (see # Safety); the kernel waits on nothing.
        unsafe { raw::launch_shared(f, s.grid, s.block, s.shared_bytes, &args, stream) }
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
                    Op::Max => {
                        if x > acc {
                            x
                        } else {
                            acc
                        }
                    }
                    Op::Min => {
                        if x < acc {
                            x
                        } else {
                            acc
                        }
                    }
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
                    Op::Max => {
                        if x > acc {
                            x
                        } else {
                            acc
                        }
                    }
                    Op::Min => {
                        if x < acc {
                            x
                        } else {
                            acc
                        }
                    }
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
        assert_eq!(Elem::from_nccl(10), None);
        assert_eq!(Elem::from_nccl(-1), None);
        assert_eq!(Op::from_nccl(0), Some(Op::Sum));
        assert_eq!(Op::from_nccl(4), Some(Op::Avg));
        assert_eq!(Op::from_nccl(5), None);
        assert_eq!(Elem::ALL.map(Elem::size), [1, 1, 4, 4, 8, 8, 2, 4, 8, 2]);
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
}
