// tpcomm quantized all-reduce, its arithmetic: the operations that
// src/quant/model.rs (the bit-exact CPU model) mirrors, in its order and
// rounding: change both together. Compiled after common.cuh and before
// quant.cu (the one-shot and two-shot protocol kernels) and
// quant_gathered.cu (the gathered form's local kernels), which both use it:
// - explicitly rounded f32 operations, the e4m3 and int8 codes;
// - the element types' loads and stores of 8 elements as f32;
// - a group's scale, its codes, and the rank-ordered sum of codes.

#define Q_INT8 0
#define Q_FP8 1

// ---------------------------------------------------------------- arithmetic

// Explicitly rounded f32 operations: the compiler never contracts these into
// a fused multiply-add, so the results are the CPU model's.
#define Q_BINARY(NAME, PTX)                                     \
    __device__ __forceinline__ float NAME(float a, float b) {   \
        float r;                                                \
        asm(PTX " %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));    \
        return r;                                               \
    }
Q_BINARY(q_mul, "mul.rn.f32")
Q_BINARY(q_add, "add.rn.f32")
Q_BINARY(q_div, "div.rn.f32")
// NaN loses: max(x, NaN) = x, as the model's f32::max.
Q_BINARY(q_max, "max.f32")
#undef Q_BINARY
// Round half to even; saturating, NaN gives 0 (Rust's `as i32` does the same).
__device__ __forceinline__ int q_rni(float a) {
    int r;
    asm("cvt.rni.s32.f32 %0, %1;" : "=r"(r) : "f"(a));
    return r;
}
__device__ __forceinline__ float q_abs(float a) {
    return __uint_as_float(__float_as_uint(a) & 0x7fffffffu);
}
__device__ __forceinline__ float q_shfl_xor(float v, u32 lane_mask) {
    float r;
    asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=f"(r) : "f"(v), "r"(lane_mask));
    return r;
}

// Below 2^-96 a group is sent as zeros (so Q / amax stays finite).
#define Q_MIN_AMAX_BITS (31u << 23)

template <int FMT>
__device__ __forceinline__ float q_code_max() {
    return FMT == Q_INT8 ? 127.0f : 448.0f;
}

// f32 to e4m3 (bias 7, no infinities, largest 448), ties to even,
// saturating; NaN gives 0. From sm_89 the conversion instruction does it
// (round to nearest even, .satfinite clamps to 448, subnormal codes
// included, the sign kept for zero); only NaN, which it keeps as a NaN code,
// is mapped to 0 by hand. Below sm_89 the same rounding is written out.
__device__ __forceinline__ u32 e4m3_encode(float y) {
#if __CUDA_ARCH__ >= 890
    unsigned short pair;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(pair) : "f"(0.0f), "f"(y));
    return y != y ? 0u : (u32)(pair & 0xffu);
#else
    const u32 bits = __float_as_uint(y);
    const u32 sign = (bits >> 24) & 0x80u;
    const u32 ab = bits & 0x7fffffffu;
    if (ab > 0x7f800000u) return 0u;
    const float a = __uint_as_float(ab);
    u32 mag;
    if (a >= 448.0f) {
        mag = 0x7eu;
    } else if (ab < (121u << 23)) {
        mag = (u32)q_rni(q_mul(a, 512.0f));  // subnormal codes m * 2^-9
    } else {
        const u32 u = ab + 0x7ffffu + ((ab >> 20) & 1u);
        mag = (u >> 20) - (120u << 3);
    }
    return sign | mag;
#endif
}

// The code's 7 magnitude bits placed at f32's exponent and mantissa (so
// exponent e with bias 127 instead of 7, subnormals included), times 2^120:
// exact for every code (a power of two, results from 2^-9 up, normal in
// f32), so the same bits as the definition (CPU test in quant/model.rs).
// Codes 1-7 make f32 subnormals: q_mul's mul.rn.f32 has no .ftz, and
// NVRTC's default keeps them.
__device__ __forceinline__ float e4m3_decode(u32 c) {
    const float shifted = __uint_as_float(((c & 0x80u) << 24) | ((c & 0x7fu) << 20));
    return q_mul(shifted, __uint_as_float(0x7b800000u));  // 2^120
}

template <int FMT>
__device__ __forceinline__ u32 q_encode(float x, float inv) {
    const float y = q_mul(x, inv);
    if (FMT == Q_INT8) {
        int r = q_rni(y);
        r = r < -127 ? -127 : (r > 127 ? 127 : r);
        return (u32)r & 0xffu;
    }
    return e4m3_encode(y);
}

template <int FMT>
__device__ __forceinline__ float q_decode(u32 c) {
    if (FMT == Q_INT8) return (float)(int)(signed char)(unsigned char)c;
    return e4m3_decode(c);
}

// ---------------------------------------------------------------- element types

// Eight elements at element index e0 (a multiple of 8) as f32; elements at
// or past n read as 0 (they never reach the output).
struct QF32 {
    static __device__ __forceinline__ void load8(u64 in, u64 e0, u64 n, float* x) {
        if (e0 + 8 <= n) {
            const V16 a = ((const V16*)in)[e0 / 4];
            const V16 b = ((const V16*)in)[e0 / 4 + 1];
            x[0] = __uint_as_float(a.x);
            x[1] = __uint_as_float(a.y);
            x[2] = __uint_as_float(a.z);
            x[3] = __uint_as_float(a.w);
            x[4] = __uint_as_float(b.x);
            x[5] = __uint_as_float(b.y);
            x[6] = __uint_as_float(b.z);
            x[7] = __uint_as_float(b.w);
            return;
        }
        const u32* p = (const u32*)in;
#pragma unroll
        for (int k = 0; k < 8; k++) x[k] = e0 + k < n ? __uint_as_float(p[e0 + k]) : 0.0f;
    }
    static __device__ __forceinline__ void store8(u64 out, u64 e0, u64 n, const float* x) {
        if (e0 + 8 <= n) {
            V16 a, b;
            a.x = __float_as_uint(x[0]);
            a.y = __float_as_uint(x[1]);
            a.z = __float_as_uint(x[2]);
            a.w = __float_as_uint(x[3]);
            b.x = __float_as_uint(x[4]);
            b.y = __float_as_uint(x[5]);
            b.z = __float_as_uint(x[6]);
            b.w = __float_as_uint(x[7]);
            ((V16*)out)[e0 / 4] = a;
            ((V16*)out)[e0 / 4 + 1] = b;
            return;
        }
        u32* p = (u32*)out;
        for (int k = 0; k < 8; k++)
            if (e0 + k < n) p[e0 + k] = __float_as_uint(x[k]);
    }
};

// 16-bit types: H is common.cuh's BF16 or F16 (its to_f32 and from_f32).
template <typename H>
struct QHalf {
    static __device__ __forceinline__ void load8(u64 in, u64 e0, u64 n, float* x) {
        if (e0 + 8 <= n) {
            const V16 v = ((const V16*)in)[e0 / 8];
            const u32 w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
            for (int k = 0; k < 4; k++) {
                x[2 * k] = H::to_f32(w[k] & 0xffffu);
                x[2 * k + 1] = H::to_f32(w[k] >> 16);
            }
            return;
        }
        const u16* p = (const u16*)in;
#pragma unroll
        for (int k = 0; k < 8; k++) x[k] = e0 + k < n ? H::to_f32((u32)p[e0 + k]) : 0.0f;
    }
    static __device__ __forceinline__ void store8(u64 out, u64 e0, u64 n, const float* x) {
        if (e0 + 8 <= n) {
            u32 w[4];
#pragma unroll
            for (int k = 0; k < 4; k++) w[k] = H::from_f32(x[2 * k]) | (H::from_f32(x[2 * k + 1]) << 16);
            ((V16*)out)[e0 / 8] = v16_of(w);
            return;
        }
        u16* p = (u16*)out;
        for (int k = 0; k < 8; k++)
            if (e0 + k < n) p[e0 + k] = (u16)H::from_f32(x[k]);
    }
};

typedef QHalf<BF16> QBF16;
typedef QHalf<F16> QF16;

// ---------------------------------------------------------------- groups

// The scale of a group whose elements' largest magnitude this thread holds
// in amax (its share of the group) and the other lanes of the group theirs;
// every lane of the warp must call it together. inv is what values are
// multiplied by before they are coded (0 for a group sent as zeros).
template <int FMT>
__device__ __forceinline__ float group_scale(float amax, u32 lanes, float* inv_out) {
    for (u32 s = 1u; s < lanes; s <<= 1) amax = q_max(amax, q_shfl_xor(amax, s));
    float scale = 0.0f, inv = 0.0f;
    if (__float_as_uint(amax) >= Q_MIN_AMAX_BITS) {
        scale = q_div(amax, q_code_max<FMT>());
        inv = q_div(q_code_max<FMT>(), amax);
    }
    *inv_out = inv;
    return scale;
}

// The 8 codes of 8 values, the first in the lowest byte.
template <int FMT>
__device__ __forceinline__ u64 encode8(const float* x, float inv) {
    u32 lo = 0u, hi = 0u;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        lo |= q_encode<FMT>(x[k], inv) << (8 * k);
        hi |= q_encode<FMT>(x[k + 4], inv) << (8 * k);
    }
    return (u64)lo | ((u64)hi << 32);
}

// Quantizes 8 f32 values (zeros past the message) in the lanes of their
// group, as quantize8 does with the input.
template <int FMT>
__device__ __forceinline__ u64 quantize8_values(const float* x, u32 lanes, float* scale_out) {
    float amax = 0.0f;
#pragma unroll
    for (int k = 0; k < 8; k++) amax = q_max(amax, q_abs(x[k]));
    float inv;
    *scale_out = group_scale<FMT>(amax, lanes, &inv);
    return encode8<FMT>(x, inv);
}

// Adds an octet's 8 dequantized values (codes times the group's scale) to
// the rank-ordered sums in acc; rank 0's (`first`) start them. The CPU
// model's operations, in its order.
template <int FMT>
__device__ __forceinline__ void add_octet(float* acc, u64 codes, float scale, bool first) {
#pragma unroll
    for (int k = 0; k < 8; k++) {
        const float v = q_mul(q_decode<FMT>((u32)(codes >> (8 * k)) & 0xffu), scale);
        acc[k] = first ? v : q_add(acc[k], v);
    }
}
