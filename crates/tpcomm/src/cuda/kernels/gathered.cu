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
// unsigned arithmetic of that width); f32 and f64 in their own type; f16 and
// bf16 in f32, rounded once at the end. avg is the sum divided by world
// (integers: truncated toward zero). max and min keep the first of equal
// values; a NaN on the right of a comparison is skipped, one on the left
// stays.

// Ops, numbered as NCCL numbers ncclRedOp_t.
#define TPCOMM_GOP_SUM 0u
#define TPCOMM_GOP_PROD 1u
#define TPCOMM_GOP_MAX 2u
#define TPCOMM_GOP_MIN 3u
#define TPCOMM_GOP_AVG 4u

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
struct Half16 {
    typedef float Acc;
    static __device__ __forceinline__ float load(u64 base, u64 i) {
        return f16_to_f32(load_expanded<u16>(base, i));
    }
    static __device__ __forceinline__ void store(u64 base, u64 i, float v) {
        ((u16*)base)[i] = (u16)f32_to_f16(v);
    }
};
struct Brain16 {
    typedef float Acc;
    static __device__ __forceinline__ float load(u64 base, u64 i) {
        return bf16_to_f32(load_expanded<u16>(base, i));
    }
    static __device__ __forceinline__ void store(u64 base, u64 i, float v) {
        ((u16*)base)[i] = (u16)f32_to_bf16(v);
    }
};

template <typename A>
__device__ __forceinline__ A combine(A acc, A x, u32 op) {
    typedef typename Wrap<A>::U U;
    switch (op) {
        case TPCOMM_GOP_PROD: return (A)(U)((U)acc * (U)x);
        case TPCOMM_GOP_MAX: return x > acc ? x : acc;
        case TPCOMM_GOP_MIN: return x < acc ? x : acc;
        default: return (A)(U)((U)acc + (U)x);  // sum, avg
    }
}

template <typename E>
__device__ void reduce_gathered(const GatheredArgs& a) {
    typedef typename E::Acc A;
    const u64 step = (u64)gridDim.x * blockDim.x;
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
