// tpcomm quantized all-reduce, gathered form: the two local halves around
// an ordinary all-gather of the codes (src/cuda/quant/gathered.rs runs the
// three launches). Compiled after quant_math.cu, whose arithmetic (a
// group's scale and codes, the rank-ordered sum) and element types these
// use, as the one-shot kernel does, so the result is its bit for bit
// (src/quant/model.rs).
//
// - pack: quantizes this rank's input into its block of the gathered
//   buffer: codes (one byte per element), then f32 scales (one per group);
// - the host-path (or P2P) all-gather copies every rank's block to every
//   rank; it moves bytes, so it needs nothing from these kernels;
// - unpack_sum: dequantizes every rank's block and sums them in rank order
//   in f32, rounding once to the element type.
// Neither kernel waits on anything: one thread per QG_PACK_OCTETS octets of
// elements (pack) or per octet (unpack-sum), as many blocks as the message
// needs, no protocol.
//
// The P2P all-gather's slots are self-validating: a 32-bit word 0xffffffff
// is its sentinel and is sent as another value (common.cuh, canon). So no
// word of a block may be all ones, and the all-gather moves the blocks as
// f32 words (src/cuda/quant/gathered.rs): scales are never negative, fp8
// codes never 0xff (q_encode's largest magnitude is 0x7e), and int8 codes
// (never -128) travel xor 0x7f, which maps the unused -128 to 0xff and so
// no code to it.
#define QG_INT8_XOR 0x7f7f7f7f7f7f7f7full

// `QuantGatherArgs` in src/cuda/kernel_args.rs.
struct QGArgs {
    u64 in;            // pack: input elements; unpack_sum: block 0 of the gathered buffer
    u64 out;           // pack: this rank's block; unpack_sum: output elements
    u64 count;         // elements
    u64 block_stride;  // bytes between ranks' blocks (unpack_sum)
    u64 scales_off;    // scales inside a block
    u32 world;
    u32 group;         // elements per scale: 32, 64 or 128
};
TPCOMM_ARGS_CHECK_QGArgs

__device__ __forceinline__ u32 qg_shift(u32 group) {
    u32 s = 0u;
    while ((1u << s) < group) s++;
    return s;
}

// Octets a pack thread takes, side by side: 8 * QG_PACK_OCTETS elements,
// all in one group (groups are 32-128 elements; thread t starts at element
// 8 * QG_PACK_OCTETS * t): one 16-byte store of codes and one group maximum
// for both. Mirrored by PACK_OCTETS in src/cuda/quant/gathered.rs. On one
// H200 (bench/results/quantized.md, session 15) two took the pack from 58%
// to 65% of the copy rate at 8 MiB of bf16 and from 68% to 85% at 64 MiB;
// four were faster only at 4 MiB; for unpack-sum one stayed the fastest.
#define QG_PACK_OCTETS 2

// A thread's octets k and k + 1 as one 16-byte vector (codes of 16
// elements; the start of a pair is 16-byte aligned, and a pair that starts
// inside the message ends inside the codes, rounded up to 16 bytes).
__device__ __forceinline__ void store_pair(u64 at, u64 c0, u64 c1) {
    V16 v;
    v.x = (u32)c0;
    v.y = (u32)(c0 >> 32);
    v.z = (u32)c1;
    v.w = (u32)(c1 >> 32);
    *(V16*)at = v;
}

// Thread t of the grid quantizes its QG_PACK_OCTETS octets (elements past
// the message read as 0, so they change no group's maximum); the G / (8 *
// QG_PACK_OCTETS) threads of a group are neighbouring lanes of one warp
// (blocks are whole warps, G <= 256).
template <typename T, int FMT>
__device__ void quant_pack(const QGArgs& a) {
    wait_for_previous_kernel();
    allow_next_kernel();
    const u64 e0 = 8ull * QG_PACK_OCTETS * ((u64)blockIdx.x * blockDim.x + threadIdx.x);
    const u32 lanes = a.group / (8u * QG_PACK_OCTETS);
    float x[QG_PACK_OCTETS][8];
#pragma unroll
    for (int k = 0; k < QG_PACK_OCTETS; k++) T::load8(a.in, e0 + 8 * k, a.count, x[k]);
    float amax = 0.0f;
#pragma unroll
    for (int k = 0; k < QG_PACK_OCTETS; k++)
#pragma unroll
        for (int j = 0; j < 8; j++) amax = q_max(amax, q_abs(x[k][j]));
    float inv;
    const float scale = group_scale<FMT>(amax, lanes, &inv);
    if (e0 >= a.count) return;
    u64 codes[QG_PACK_OCTETS];
#pragma unroll
    for (int k = 0; k < QG_PACK_OCTETS; k++) {
        codes[k] = encode8<FMT>(x[k], inv);
        if (FMT == Q_INT8) codes[k] ^= QG_INT8_XOR;
    }
#pragma unroll
    for (int k = 0; k < QG_PACK_OCTETS; k += 2)
        if (e0 + 8 * k < a.count) store_pair(a.out + e0 + 8 * k, codes[k], codes[k + 1]);
    if ((threadIdx.x & (lanes - 1u)) == 0u)
        *(u32*)(a.out + a.scales_off + 4ull * (e0 >> qg_shift(a.group))) = __float_as_uint(scale);
}

// Thread t sums octet t of every rank's block, in rank order.
template <typename T, int FMT>
__device__ void quant_unpack_sum(const QGArgs& a) {
    wait_for_previous_kernel();
    allow_next_kernel();
    const u64 e0 = 8ull * ((u64)blockIdx.x * blockDim.x + threadIdx.x);
    if (e0 >= a.count) return;
    const u64 sc = a.scales_off + 4ull * (e0 >> qg_shift(a.group));
    float acc[8];
#pragma unroll 2
    for (u32 p = 0; p < a.world; p++) {
        const u64 base = a.in + (u64)p * a.block_stride;
        const u64 wire = *(const u64*)(base + e0);
        const float scale = __uint_as_float(*(const u32*)(base + sc));
        add_octet<FMT>(acc, FMT == Q_INT8 ? wire ^ QG_INT8_XOR : wire, scale, p == 0);
    }
    T::store8(a.out, e0, a.count, acc);
}

#define QG_BLOCK 256
#define QGKERNEL extern "C" __global__ void __launch_bounds__(QG_BLOCK)
QGKERNEL tpcomm_quant_pack_int8_f32(QGArgs a) { quant_pack<QF32, Q_INT8>(a); }
QGKERNEL tpcomm_quant_pack_int8_f16(QGArgs a) { quant_pack<QF16, Q_INT8>(a); }
QGKERNEL tpcomm_quant_pack_int8_bf16(QGArgs a) { quant_pack<QBF16, Q_INT8>(a); }
QGKERNEL tpcomm_quant_pack_fp8_f32(QGArgs a) { quant_pack<QF32, Q_FP8>(a); }
QGKERNEL tpcomm_quant_pack_fp8_f16(QGArgs a) { quant_pack<QF16, Q_FP8>(a); }
QGKERNEL tpcomm_quant_pack_fp8_bf16(QGArgs a) { quant_pack<QBF16, Q_FP8>(a); }
QGKERNEL tpcomm_quant_unpack_sum_int8_f32(QGArgs a) { quant_unpack_sum<QF32, Q_INT8>(a); }
QGKERNEL tpcomm_quant_unpack_sum_int8_f16(QGArgs a) { quant_unpack_sum<QF16, Q_INT8>(a); }
QGKERNEL tpcomm_quant_unpack_sum_int8_bf16(QGArgs a) { quant_unpack_sum<QBF16, Q_INT8>(a); }
QGKERNEL tpcomm_quant_unpack_sum_fp8_f32(QGArgs a) { quant_unpack_sum<QF32, Q_FP8>(a); }
QGKERNEL tpcomm_quant_unpack_sum_fp8_f16(QGArgs a) { quant_unpack_sum<QF16, Q_FP8>(a); }
QGKERNEL tpcomm_quant_unpack_sum_fp8_bf16(QGArgs a) { quant_unpack_sum<QBF16, Q_FP8>(a); }
