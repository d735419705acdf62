//! The by-value arguments of every kernel of this crate, defined once.
//!
//! Each struct is `#[repr(C)]` and is passed whole to `cuLaunchKernel` as
//! the kernel's one parameter; the kernel sources (kernels/*.cu) declare the
//! same struct under its C name, with the C field names given here. The
//! [`kernel_args!`] macro that defines the Rust structs also records their
//! layout (size, and name and offset of every field, as the Rust compiler
//! laid them out), and [`check_header`] turns that record into
//! kernels/args.cuh: one `TPCOMM_ARGS_CHECK_<C name>` macro per struct,
//! `static_assert`s of its size and of every field's offset, which each .cu
//! file invokes right after its struct. So NVRTC refuses to compile a kernel
//! whose struct differs from the Rust one. The tests below fail when the
//! committed header differs from what [`check_header`] produces, when a
//! field's offset under C's layout rules (computed here from the C types)
//! differs from the Rust one, or when a .cu file does not check its struct.

use crate::transport::MAX_WORLD;

/// How C lays out a field's type: its size and alignment under the C rules
/// (fundamental types are their own size and alignment, an array has its
/// element's alignment, a struct the largest alignment of its fields and a
/// size rounded up to it). Computed from the C types alone, so that the
/// tests can compare it with what the Rust compiler did.
#[cfg(test)]
pub(crate) trait CLayout {
    fn c_size() -> usize;
    fn c_align() -> usize;
}

#[cfg(test)]
impl CLayout for u64 {
    fn c_size() -> usize {
        8
    }
    fn c_align() -> usize {
        8
    }
}

#[cfg(test)]
impl CLayout for u32 {
    fn c_size() -> usize {
        4
    }
    fn c_align() -> usize {
        4
    }
}

#[cfg(test)]
impl CLayout for f32 {
    fn c_size() -> usize {
        4
    }
    fn c_align() -> usize {
        4
    }
}

#[cfg(test)]
impl<T: CLayout, const N: usize> CLayout for [T; N] {
    fn c_size() -> usize {
        T::c_size() * N
    }
    fn c_align() -> usize {
        T::c_align()
    }
}

/// One field of a kernel-argument struct.
#[cfg(test)]
pub(crate) struct Field {
    /// The Rust name.
    pub rust: &'static str,
    /// The name the kernel source gives it.
    pub c: &'static str,
    /// Its offset in the Rust struct (`offset_of!`).
    pub offset: usize,
    /// Its size and alignment under C's rules.
    pub c_size: fn() -> usize,
    pub c_align: fn() -> usize,
}

/// The recorded layout of one kernel-argument struct.
#[cfg(test)]
pub(crate) struct ArgsLayout {
    /// The Rust name.
    pub rust: &'static str,
    /// The name of the struct in the kernel source.
    pub c: &'static str,
    /// The .cu file that declares it (under kernels/).
    pub file: &'static str,
    /// `size_of` of the Rust struct.
    pub size: usize,
    pub fields: &'static [Field],
}

#[cfg(test)]
impl ArgsLayout {
    /// (offset of every field, size, alignment) as a C compiler lays the
    /// fields out: each at the next multiple of its alignment, the whole
    /// rounded up to the largest alignment.
    pub(crate) fn c_layout(&self) -> (Vec<usize>, usize, usize) {
        let mut offsets = Vec::with_capacity(self.fields.len());
        let (mut at, mut align) = (0usize, 1usize);
        for f in self.fields {
            let a = (f.c_align)();
            at = at.next_multiple_of(a);
            offsets.push(at);
            at += (f.c_size)();
            align = align.max(a);
        }
        (offsets, at.next_multiple_of(align), align)
    }
}

/// Defines `#[repr(C)]` kernel-argument structs, and for each (in test
/// builds, where the header is generated and checked) an `ArgsLayout`
/// constant `LAYOUT` and a `CLayout` impl (so that a struct can be a field
/// of another). Every field is written `name: type = "c name"`.
macro_rules! kernel_args {
    ($(
        $(#[$meta:meta])*
        $vis:vis struct $name:ident as $c:literal in $file:literal {
            $($(#[$fmeta:meta])* $fvis:vis $field:ident: $ty:ty = $cf:literal,)+
        }
    )+) => {$(
        $(#[$meta])*
        #[repr(C)]
        $vis struct $name {
            $($(#[$fmeta])* $fvis $field: $ty,)+
        }

        #[cfg(test)]
        impl $name {
            pub(crate) const LAYOUT: ArgsLayout = ArgsLayout {
                rust: stringify!($name),
                c: $c,
                file: $file,
                size: std::mem::size_of::<$name>(),
                fields: &[$(Field {
                    rust: stringify!($field),
                    c: $cf,
                    offset: std::mem::offset_of!($name, $field),
                    c_size: <$ty as CLayout>::c_size,
                    c_align: <$ty as CLayout>::c_align,
                },)+],
            };
        }

        #[cfg(test)]
        impl CLayout for $name {
                    fn c_size() -> usize {
                Self::LAYOUT.c_layout().1
            }
            fn c_align() -> usize {
                Self::LAYOUT.c_layout().2
            }
        }
    )+};
}

kernel_args! {
    /// The P2P all-reduce kernels' argument (one-shot, two-shot); the
    /// collectives and the fused kernels start with it.
    #[derive(Clone, Copy, Debug, Default)]
    pub(crate) struct KernelArgs as "Args" in "allreduce.cu" {
        pub input: u64 = "in",
        pub output: u64 = "out",
        pub nbytes: u64 = "nbytes",
        pub bufs: [u64; MAX_WORLD] = "bufs",
        pub epoch_stride: u64 = "epoch_stride",
        pub slot_stride: u64 = "slot_stride",
        pub shard_stride: u64 = "shard_stride",
        pub ag_offset: u64 = "ag_offset",
        pub ctl: u64 = "ctl",
        pub status: u64 = "status",
        pub timeout_ns: u64 = "timeout_ns",
        /// What this call is (call.rs): peers compare it with theirs.
        pub call: u64 = "call",
        pub rank: u32 = "rank",
        pub world: u32 = "world",
    }

    /// All-gather, reduce-scatter and broadcast over P2P (collectives.rs).
    #[derive(Clone, Copy, Debug, Default)]
    pub(crate) struct CollArgs as "CollArgs" in "collectives.cu" {
        pub base: KernelArgs = "base",
        pub root: u32 = "root",
        pub pad: u32 = "pad",
    }

    /// The fused all-reduce + residual + RMSNorm kernels (fused.rs).
    #[derive(Clone, Copy, Debug, Default)]
    pub(crate) struct FusedArgs as "FusedArgs" in "fused.cu" {
        pub base: KernelArgs = "base",
        pub residual: u64 = "residual",
        pub addend: u64 = "addend",
        pub weight: u64 = "weight",
        pub normed: u64 = "normed",
        pub rows: u32 = "rows",
        pub row_vecs: u32 = "row_vecs",
        pub eps: f32 = "eps",
        pub inv_hidden: f32 = "inv_hidden",
        pub push_vecs: u32 = "push_vecs",
        pub pad: u32 = "pad",
    }

    /// The pinned-host all-reduce kernels (transport/pinned/kernels.rs).
    #[derive(Clone, Copy, Debug)]
    pub(crate) struct HostKernelArgs as "HArgs" in "host_allreduce.cu" {
        pub input: u64 = "in",
        pub output: u64 = "out",
        pub nbytes: u64 = "nbytes",
        pub areas: [u64; MAX_WORLD] = "areas",
        pub half_stride: u64 = "half_stride",
        pub data_offset: u64 = "data_offset",
        pub flag_offset: u64 = "flag_offset",
        pub chunk_bytes: u64 = "chunk_bytes",
        pub ctl: u64 = "ctl",
        pub status: u64 = "status",
        pub timeout_ns: u64 = "timeout_ns",
        pub delta_offset: u64 = "delta_offset",
        pub slot_bytes: u64 = "slot_bytes",
        pub shadow: u64 = "shadow",
        pub call_offset: u64 = "call_offset",
        /// What this call is (cuda/call.rs): peers compare it with theirs.
        pub call: u64 = "call",
        pub rank: u32 = "rank",
        pub world: u32 = "world",
        pub producers: u32 = "producers",
    }

    /// All-gather, reduce-scatter and broadcast through pinned host memory
    /// (transport/pinned/collectives.rs).
    #[derive(Clone, Copy, Debug)]
    pub(crate) struct HostCollArgs as "HCollArgs" in "host_collectives.cu" {
        pub base: HostKernelArgs = "base",
        pub root: u32 = "root",
        pub pad: u32 = "pad",
    }

    /// The quantized all-reduce kernels of both transports (quant/mod.rs).
    #[derive(Clone, Copy, Debug, Default)]
    pub(crate) struct QuantArgs as "QArgs" in "quant.cu" {
        pub input: u64 = "in",
        pub output: u64 = "out",
        pub count: u64 = "count",
        pub dst: [u64; MAX_WORLD] = "dst",
        pub src: [u64; MAX_WORLD] = "src",
        pub parity_stride: u64 = "parity_stride",
        pub scales_off: u64 = "scales_off",
        pub flags_off: u64 = "flags_off",
        pub ctl: u64 = "ctl",
        pub status: u64 = "status",
        pub timeout_ns: u64 = "timeout_ns",
        pub call_off: u64 = "call_off",
        pub call: u64 = "call",
        pub rank: u32 = "rank",
        pub world: u32 = "world",
        pub ndst: u32 = "ndst",
        pub group: u32 = "group",
    }

    /// The pack and unpack-sum kernels of the quantized gathered form
    /// (quant/gathered.rs).
    #[derive(Clone, Copy, Debug)]
    pub(crate) struct QuantGatherArgs as "QGArgs" in "quant_gathered.cu" {
        pub input: u64 = "in",
        pub output: u64 = "out",
        pub count: u64 = "count",
        pub block_stride: u64 = "block_stride",
        pub scales_off: u64 = "scales_off",
        pub world: u32 = "world",
        pub group: u32 = "group",
    }

    /// The expand and compact kernels of the gathered reduction
    /// (gathered.rs).
    #[derive(Clone, Copy, Debug)]
    pub(crate) struct BytesArgs as "BytesArgs" in "gathered.cu" {
        pub input: u64 = "in",
        pub output: u64 = "out",
        pub nbytes: u64 = "nbytes",
        pub in_stride: u64 = "in_stride",
        pub out_stride: u64 = "out_stride",
        pub blocks: u32 = "blocks",
        pub pad: u32 = "pad",
    }

    /// The reduction of gathered blocks (gathered.rs).
    #[derive(Clone, Copy, Debug)]
    pub(crate) struct GatheredArgs as "GatheredArgs" in "gathered.cu" {
        pub input: u64 = "in",
        pub output: u64 = "out",
        pub count: u64 = "count",
        pub stride: u64 = "stride",
        /// The pre-multiplied sum: bytes from a block's start to its
        /// expanded scalar (read only for that op).
        pub scalar: u64 = "scalar",
        pub world: u32 = "world",
        pub op: u32 = "op",
    }

    /// The P2P check run at communicator creation (transport/p2p/check.rs).
    #[derive(Clone, Copy, Debug, Default)]
    pub(crate) struct P2pCheckArgs as "P2pCheckArgs" in "p2p_check.cu" {
        pub areas: [u64; MAX_WORLD] = "areas",
        pub status: u64 = "status",
        pub timeout_ns: u64 = "timeout_ns",
        pub rank: u32 = "rank",
        pub world: u32 = "world",
        pub seed: u32 = "seed",
        pub pad: u32 = "pad",
    }
}

/// Every kernel-argument struct, in the order kernels/args.cuh lists them.
#[cfg(test)]
pub(crate) const ALL: &[ArgsLayout] = &[
    KernelArgs::LAYOUT,
    CollArgs::LAYOUT,
    FusedArgs::LAYOUT,
    HostKernelArgs::LAYOUT,
    HostCollArgs::LAYOUT,
    QuantArgs::LAYOUT,
    QuantGatherArgs::LAYOUT,
    BytesArgs::LAYOUT,
    GatheredArgs::LAYOUT,
    P2pCheckArgs::LAYOUT,
];

/// The text of kernels/args.cuh: for every struct of [`ALL`], a macro of
/// `static_assert`s, taken from the Rust struct: its size; every field's
/// size and alignment; the fields' order; and every field's offset, as C's
/// rules place it after the previous field. NVRTC has no `offsetof` (no
/// `__builtin_offsetof` either, and no C headers), so the offsets are
/// proven this way instead: a field's offset is the previous one's plus its
/// size, rounded up to the field's alignment, once the fields are known to
/// be in the Rust order.
#[cfg(test)]
pub(crate) fn check_header() -> String {
    let mut s = String::from(
        "// Generated from src/cuda/kernel_args.rs (check_header); do not edit.\n\
         // A unit test there fails when this file differs from what it generates:\n\
         // run `TPCOMM_WRITE_ARGS_HEADER=1 cargo test -p tpcomm --lib kernel_args`\n\
         // to write it again after changing a struct there.\n\
         //\n\
         // One macro per kernel-argument struct, invoked by its .cu file right\n\
         // after the struct: compile-time checks that its size, every field's\n\
         // size and alignment, the order of its fields and so every field's\n\
         // offset are the Rust struct's.\n\
         \n\
         // Where C places a field that follows one ending at `end`.\n\
         __device__ constexpr unsigned long long tpcomm_args_at(unsigned long long end, unsigned long long align) {\n\
         \x20   return (end + align - 1) / align * align;\n\
         }\n",
    );
    for l in ALL {
        let c = l.c;
        s.push_str(&format!(
            "\n// struct {c} ({}) is {} in src/cuda/kernel_args.rs.\n#define TPCOMM_ARGS_CHECK_{c} \\\n",
            l.file, l.rust
        ));
        s.push_str(&format!(
            "    static_assert(sizeof(struct {c}) == {size}, \"struct {c}: size differs from {r} in src/cuda/kernel_args.rs\"); \\\n",
            size = l.size,
            r = l.rust
        ));
        let mut prev: Option<&Field> = None;
        for f in l.fields {
            let (fc, fr) = (f.c, f.rust);
            s.push_str(&format!(
                "    static_assert(sizeof({c}::{fc}) == {sz} && alignof(decltype({c}::{fc})) == {al}, \"{c}.{fc}: size or alignment differs from {r}.{fr}\"); \\\n",
                sz = (f.c_size)(),
                al = (f.c_align)(),
                r = l.rust,
            ));
            // The first field is at 0 in C (and the test below checks that
            // it is in Rust); each later one is placed after the previous.
            if let Some(p) = prev {
                s.push_str(&format!(
                    "    static_assert(tpcomm_args_at({} + sizeof({c}::{}), alignof(decltype({c}::{fc}))) == {off}, \"{c}.{fc}: offset differs from {r}.{fr}\"); \\\n",
                    p.offset,
                    p.c,
                    off = f.offset,
                    r = l.rust,
                ));
            }
            prev = Some(f);
        }
        let order: Vec<String> = l
            .fields
            .windows(2)
            .map(|w| format!("(const void*)&a.{} < (const void*)&a.{}", w[0].c, w[1].c))
            .collect();
        let order = if order.is_empty() {
            "true".to_string()
        } else {
            order.join(" && ")
        };
        s.push_str(&format!(
            "    __device__ constexpr bool tpcomm_args_order_{c}() {{ struct {c} a{{}}; return {order}; }} \\\n\
             \x20   static_assert(tpcomm_args_order_{c}(), \"struct {c}: fields in another order than in {r}\");\n",
            r = l.rust,
        ));
    }
    s
}

#[cfg(test)]
mod tests;
