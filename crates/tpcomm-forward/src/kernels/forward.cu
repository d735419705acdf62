// The element-wise pieces of the benchmark forward (crates/tpcomm-forward):
// the SiLU-gated MLP activation and random initialisation. bf16 only.
// Compiled appended to the library's common.cuh (src/kernels.rs), whose bf16
// conversions it uses.
// Each kernel takes one struct (the launcher passes a single argument).

struct SiluArgs {
    u64 in;    // rows x (2 * inter): the gate, then the up projection
    u64 out;   // rows x inter
    u32 rows;
    u32 inter;
};

// out[t][j] = silu(gate[t][j]) * up[t][j].
extern "C" __global__ void tpcomm_silu_mul_bf16(SiluArgs a) {
    const u16* in = (const u16*)a.in;
    u16* out = (u16*)a.out;
    const u64 n = (u64)a.rows * a.inter;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        const u64 t = i / a.inter, j = i % a.inter;
        const float g = bf16_to_f32(in[t * 2 * a.inter + j]);
        const float u = bf16_to_f32(in[t * 2 * a.inter + a.inter + j]);
        out[i] = (u16)f32_to_bf16(g / (1.f + __expf(-g)) * u);
    }
}

struct FillArgs {
    u64 out;
    u64 n;
    u64 seed;
    float offset;
    float scale;
};

__device__ __forceinline__ u32 mix32(u64 x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return (u32)x;
}

// Uniform in [offset - scale, offset + scale), a pure function of (seed,
// index), so every rank can make the same values without a copy.
extern "C" __global__ void tpcomm_fill_uniform_bf16(FillArgs a) {
    u16* out = (u16*)a.out;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < a.n; i += (u64)gridDim.x * blockDim.x) {
        const u32 h = mix32(a.seed * 0x9e3779b97f4a7c15ull + i);
        const float u = (float)(h >> 8) * (1.f / 16777216.f);
        out[i] = (u16)f32_to_bf16(a.offset + (2.f * u - 1.f) * a.scale);
    }
}
