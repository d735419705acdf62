// Byte-exact collectives for the drop-in's standalone mode
// (src/cuda/gathered.rs).
//
// tpcomm's collective kernels detect arrival by the sentinel (an all-ones
// 16- or 32-bit word) and send an all-ones element as the same NaN with its
// sign bit cleared: right for floats (a NaN stays a NaN), wrong for integer
// bytes (an int32 -1 would arrive as 0x7fffffff). So integer data travels
// *expanded*: every byte b as the 16-bit word 0x00bb, which is never all
// ones. tpcomm_expand_bytes writes that form, the collective kernels move it
// as f16 words, and tpcomm_compact_bytes takes the bytes back.
//
// An all-reduce whose type or op the collective kernels do not sum
// (integers, f64; prod, max, min, avg) is an all-gather of every rank's
// expanded block into one area, then tpcomm_reduce_gathered_* on each rank:
//
//   out[i] = in[0][i] op in[1][i] op ... op in[world - 1][i]
//
// in rank order, over the same gathered bytes on every rank, so every rank
// computes the same bits. No kernel here waits on anything: each only reads
// what the kernels before it on the stream left.
//
// Arithmetic: integers in their own type (sum and prod wrap around, as in
// unsigned arithmetic of that width); f32 and f64 in their own type; f16,
// bf16 and the two fp8 types in f32 (each value decoded exactly), rounded
// once at the end. avg is the sum divided by world (integers: truncated
// toward zero). max and min keep the first of equal values; a NaN on the
// right of a comparison is skipped, one on the left stays.
//
// The pre-multiplied sum (TPCOMM_GOP_PREMUL, ncclRedOpCreatePreMulSum):
//
//   out[i] = s[0] * in[0][i] + s[1] * in[1][i] + ... + s[world - 1] * in[world - 1][i]
//
// in rank order, where s[r] is rank r's scalar, of the element type,
// expanded as the elements are, at byte `scalar` of rank r's block (each
// rank put its own there before the all-gather). Multiplications and sums
// are separately rounded (__fmul_rn, __dmul_rn: never fused), so the CPU
// model (gathered.rs, reference_premul) gives the same bits.

// Ops, numbered as NCCL numbers ncclRedOp_t.
#define TPCOMM_GOP_SUM 0u
#define TPCOMM_GOP_PROD 1u
#define TPCOMM_GOP_MAX 2u
#define TPCOMM_GOP_MIN 3u
#define TPCOMM_GOP_AVG 4u
// The pre-multiplied sum: this kernel's number for it (NCCL gives such ops
// values of 5 and up per communicator, which the drop-in maps to this).
#define TPCOMM_GOP_PREMUL 5u

typedef signed char i8;
typedef unsigned char u8;
typedef int i32;
typedef long long i64;

// `GatheredArgs` in src/cuda/kernel_args.rs.
struct GatheredArgs {
    u64 in;      // world expanded blocks (2 bytes per byte), `stride` bytes apart
    u64 out;     // count elements (plain bytes)
    u64 count;   // elements per block
    u64 stride;  // bytes between two ranks' expanded blocks
    u64 scalar;  // TPCOMM_GOP_PREMUL: bytes from a block's start to its expanded scalar
    u32 world;
    u32 op;
};
TPCOMM_ARGS_CHECK_GatheredArgs

// `BytesArgs` in src/cuda/kernel_args.rs.
struct BytesArgs {
    u64 in;
    u64 out;
    u64 nbytes;     // plain bytes per block
    u64 in_stride;  // bytes between blocks in `in`
    u64 out_stride; // bytes between blocks in `out`
    u32 blocks;
    u32 pad;
};
TPCOMM_ARGS_CHECK_BytesArgs

// out (expanded, u16 per byte) from in (plain bytes), block by block.
extern "C" __global__ void tpcomm_expand_bytes(const BytesArgs a) {
    const u64 step = (u64)gridDim.x * blockDim.x;
    for (u32 b = 0; b < a.blocks; b++) {
        const u8* in = (const u8*)(a.in + b * a.in_stride);
        u16* out = (u16*)(a.out + b * a.out_stride);
        for (u64 j = (u64)blockIdx.x * blockDim.x + threadIdx.x; j < a.nbytes; j += step) out[j] = in[j];
    }
}

// out (plain bytes) from in (expanded), block by block.
extern "C" __global__ void tpcomm_compact_bytes(const BytesArgs a) {
    const u64 step = (u64)gridDim.x * blockDim.x;
    for (u32 b = 0; b < a.blocks; b++) {
        const u16* in = (const u16*)(a.in + b * a.in_stride);
        u8* out = (u8*)(a.out + b * a.out_stride);
        for (u64 j = (u64)blockIdx.x * blockDim.x + threadIdx.x; j < a.nbytes; j += step) out[j] = (u8)in[j];
    }
}

// out (expanded) from the bytes of the value `in` itself (its low `nbytes`
// bytes, little-endian): a scalar the host gave, written in stream order.
extern "C" __global__ void tpcomm_expand_immediate(const BytesArgs a) {
    u16* out = (u16*)a.out;
    for (u64 j = (u64)blockIdx.x * blockDim.x + threadIdx.x; j < a.nbytes && j < 8; j += (u64)gridDim.x * blockDim.x)
        out[j] = (u16)((a.in >> (8 * j)) & 0xffull);
}

// ---------------------------------------------------------------- fp8
//
// ncclFloat8e4m3 (NCCL type 10): sign, 4 exponent bits (bias 7), 3
// mantissa bits; no infinities, S.1111.111 is NaN (0x7f, 0xff), the largest
// value 448 (0x7e). ncclFloat8e5m2 (11): sign, 5 exponent bits (bias 15), 2
// mantissa bits, IEEE-like: S.11111.00 is infinity, S.11111.xx (xx > 0) NaN,
// the largest finite value 57344 (0x7b). Both have subnormals (exponent
// field 0: mantissa x 2^(1 - bias - mantissa bits)).
//
// Decoding is exact (every code is an f32). Encoding rounds to nearest,
// ties to even, with CUDA's __nv_fp8_e4m3 / __nv_fp8_e5m2 constructors'
// saturation (__NV_SATFINITE): a magnitude that rounds past the largest
// finite value, infinity included, gives the largest finite value with its
// sign; NaN gives 0x7f; a magnitude below half the smallest subnormal gives
// a zero with the sign. Written with integer operations only, so every
// architecture gives the same bits (the CPU model: src/cuda/fp8.rs).

template <u32 MB, u32 BIAS>
__device__ __forceinline__ float fp8_to_f32(u32 c) {
    const u32 sign = (c & 0x80u) << 24;
    const u32 mag = c & 0x7fu;
    const u32 exp = mag >> MB;
    const u32 man = mag & ((1u << MB) - 1u);
    if (MB == 3u && mag == 0x7fu) return __uint_as_float(sign | 0x7fc00000u);
    if (MB == 2u && exp == 31u) return __uint_as_float(sign | (man == 0u ? 0x7f800000u : 0x7fc00000u));
    if (exp == 0u) {
        // man x 2^(1 - BIAS - MB): exact (at least 2^-16, normal in f32).
        const float v = __fmul_rn((float)man, __uint_as_float((128u - BIAS - MB) << 23));
        return __uint_as_float(sign | __float_as_uint(v));
    }
    return __uint_as_float(sign | ((mag << (23u - MB)) + ((127u - BIAS) << 23)));
}

template <u32 MB, u32 BIAS, u32 MAXCODE>
__device__ __forceinline__ u32 f32_to_fp8(float f) {
    const u32 x = __float_as_uint(f);
    const u32 sign = (x >> 24) & 0x80u;
    const u32 ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return 0x7fu;
    u32 code;
    if (ax >= ((128u - BIAS) << 23)) {
        // The normal codes: rebias, round the mantissa to MB bits (a carry
        // moves into the exponent), saturate.
        const u32 sh = 23u - MB;
        u32 t = ax - ((127u - BIAS) << 23);
        t += (1u << (sh - 1u)) - 1u + ((t >> sh) & 1u);
        code = t >> sh;
        if (code > MAXCODE) code = MAXCODE;
    } else if (ax >= 0x00800000u) {
        // The subnormal codes: the value m x 2^(e - 150) in units of the
        // smallest subnormal 2^(1 - BIAS - MB) is m >> s, rounded.
        const u32 m = (ax & 0x7fffffu) | 0x800000u;
        const u32 s = 151u - BIAS - MB - (ax >> 23);
        if (s > 24u) {
            code = 0u;  // below a quarter of the smallest subnormal
        } else {
            code = m >> s;
            const u32 rem = m & ((1u << s) - 1u);
            const u32 half = 1u << (s - 1u);
            if (rem > half || (rem == half && (code & 1u))) code++;
        }
    } else {
        code = 0u;  // zero, or an f32 subnormal
    }
    return sign | code;
}

// The value whose bit pattern is the low sizeof(S) bytes of `bits`.
template <typename S>
__device__ __forceinline__ S from_bits(unsigned long long bits) { return (S)bits; }
template <>
__device__ __forceinline__ float from_bits<float>(unsigned long long bits) { return __uint_as_float((u32)bits); }
template <>
__device__ __forceinline__ double from_bits<double>(unsigned long long bits) {
    return __longlong_as_double((long long)bits);
}

// Element i of an expanded block at `base`: its bytes are the low bytes of
// sizeof(S) consecutive 16-bit words (little-endian, as the plain bytes were).
template <typename S>
__device__ __forceinline__ S load_expanded(u64 base, u64 i) {
    const u16* w = (const u16*)base + i * sizeof(S);
    unsigned long long bits = 0ull;
#pragma unroll
    for (int k = 0; k < (int)sizeof(S); k++) bits |= (unsigned long long)(w[k] & 0xffu) << (8 * k);
    return from_bits<S>(bits);
}

// The unsigned type of an integer's width (sums and products wrap there,
// which is defined; signed overflow is not); a float is its own.
template <typename T> struct Wrap { typedef T U; };
template <> struct Wrap<i8> { typedef u8 U; };
template <> struct Wrap<i32> { typedef u32 U; };
template <> struct Wrap<i64> { typedef u64 U; };

// How a stored element is read into the accumulator type and written back.
// load reads the expanded input; store writes plain output.
template <typename S>
struct Plain {
    typedef S Acc;
    static __device__ __forceinline__ S load(u64 base, u64 i) { return load_expanded<S>(base, i); }
    static __device__ __forceinline__ void store(u64 base, u64 i, S v) { ((S*)base)[i] = v; }
};
// A 16-bit float, through its conversion (common.cuh's F16Conversion or
// Bf16Conversion).
template <typename C>
struct Float16 {
    typedef float Acc;
    static __device__ __forceinline__ float load(u64 base, u64 i) {
        return C::to_f32(load_expanded<u16>(base, i));
    }
    static __device__ __forceinline__ void store(u64 base, u64 i, float v) {
        ((u16*)base)[i] = (u16)C::from_f32(v);
    }
};
typedef Float16<F16Conversion> Half16;
typedef Float16<Bf16Conversion> Brain16;

template <u32 MB, u32 BIAS, u32 MAXCODE>
struct Fp8 {
    typedef float Acc;
    static __device__ __forceinline__ float load(u64 base, u64 i) {
        return fp8_to_f32<MB, BIAS>(load_expanded<u8>(base, i));
    }
    static __device__ __forceinline__ void store(u64 base, u64 i, float v) {
        ((u8*)base)[i] = (u8)f32_to_fp8<MB, BIAS, MAXCODE>(v);
    }
};

// a * b, rounded on its own (never fused into a following add); integers
// wrap as in unsigned arithmetic of their width.
template <typename A>
__device__ __forceinline__ A mul_rn(A a, A b) {
    typedef typename Wrap<A>::U U;
    return (A)(U)((U)a * (U)b);
}
template <>
__device__ __forceinline__ float mul_rn<float>(float a, float b) { return __fmul_rn(a, b); }
template <>
__device__ __forceinline__ double mul_rn<double>(double a, double b) { return __dmul_rn(a, b); }

template <typename A>
__device__ __forceinline__ A combine(A acc, A x, u32 op) {
    typedef typename Wrap<A>::U U;
    switch (op) {
        case TPCOMM_GOP_PROD: return mul_rn<A>(acc, x);
        case TPCOMM_GOP_MAX: return x > acc ? x : acc;
        case TPCOMM_GOP_MIN: return x < acc ? x : acc;
        default: return (A)(U)((U)acc + (U)x);  // sum, avg
    }
}

template <typename E>
__device__ void reduce_gathered(const GatheredArgs& a) {
    typedef typename E::Acc A;
    const u64 step = (u64)gridDim.x * blockDim.x;
    if (a.op == TPCOMM_GOP_PREMUL) {
        for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < a.count; i += step) {
            A acc = mul_rn<A>(E::load(a.in + a.scalar, 0), E::load(a.in, i));
            for (u32 r = 1; r < a.world; r++) {
                const u64 block = a.in + r * a.stride;
                acc = combine<A>(acc, mul_rn<A>(E::load(block + a.scalar, 0), E::load(block, i)), TPCOMM_GOP_SUM);
            }
            E::store(a.out, i, acc);
        }
        return;
    }
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < a.count; i += step) {
        A acc = E::load(a.in, i);
        for (u32 r = 1; r < a.world; r++) acc = combine<A>(acc, E::load(a.in + r * a.stride, i), a.op);
        if (a.op == TPCOMM_GOP_AVG) acc = (A)(acc / (A)a.world);
        E::store(a.out, i, acc);
    }
}

typedef Plain<i8> G_i8;
typedef Plain<u8> G_u8;
typedef Plain<i32> G_i32;
typedef Plain<u32> G_u32;
typedef Plain<i64> G_i64;
typedef Plain<u64> G_u64;
typedef Half16 G_f16;
typedef Plain<float> G_f32;
typedef Plain<double> G_f64;
typedef Brain16 G_bf16;
typedef Fp8<3u, 7u, 0x7eu> G_f8e4m3;
typedef Fp8<2u, 15u, 0x7bu> G_f8e5m2;

#define TPCOMM_GATHERED(NAME) \
    extern "C" __global__ void tpcomm_reduce_gathered_##NAME(const GatheredArgs a) { reduce_gathered<G_##NAME>(a); }

TPCOMM_GATHERED(i8)
TPCOMM_GATHERED(u8)
TPCOMM_GATHERED(i32)
TPCOMM_GATHERED(u32)
TPCOMM_GATHERED(i64)
TPCOMM_GATHERED(u64)
TPCOMM_GATHERED(f16)
TPCOMM_GATHERED(f32)
TPCOMM_GATHERED(f64)
TPCOMM_GATHERED(bf16)
TPCOMM_GATHERED(f8e4m3)
TPCOMM_GATHERED(f8e5m2)
