// All-reduce fused with the residual add and RMSNorm that follow it in every
// transformer layer, and the same add + RMSNorm as a kernel of its own (the
// unfused sequence it replaces).
//
// This file is compiled appended to common.cuh and allreduce.cu (see
// src/cuda/compile.rs, FUSED_SRC): it reuses allreduce.cu's element types,
// sentinel words, bounded waits and epoch handling, and runs the one-shot
// protocol on the communicator's own receive slots and epoch word, so fused
// and plain calls can be mixed on one communicator.
//
// Rows are tokens: one block owns a row at a time, because RMSNorm needs the
// sum of squares of the whole row. Every thread handles the same vector
// indices in the fused and the unfused kernel, and both reduce the sum of
// squares in the same order, so the fused result equals the unfused one bit
// for bit (the tests allow one bf16 rounding). Blocks have up to 1024 threads
// (launch bounds), so a grid of at most one block per SM is co-resident.

#define TPCOMM_WAIT_FUSED 4u

// Kernel argument, passed by value: `FusedArgs` in src/cuda/kernel_args.rs.
struct FusedArgs {
    Args base;     // base.in: the partial sums; base.nbytes: rows * row bytes
    u64 residual;  // read, then overwritten with residual + all-reduced sum
    u64 addend;    // unfused kernel only: what is added (0: nothing)
    u64 weight;    // RMSNorm weight, one row
    u64 normed;    // RMSNorm output
    u32 rows;
    u32 row_vecs;  // 16-byte vectors per row
    float eps;
    float inv_hidden;  // 1 / elements per row
    u32 push_vecs;     // fused: vectors per push piece, spread over the grid (0: by row owner)
    u32 pad;
};
TPCOMM_ARGS_CHECK_FusedArgs

// Sum over the block; every thread gets the same value, summed in the same
// order. blockDim.x is a multiple of 32. The first barrier keeps a fast warp
// from overwriting a partial sum of the previous row still being read.
__device__ __forceinline__ float block_sum(float v) {
    __shared__ float s_part[32];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads();
    if ((threadIdx.x & 31u) == 0u) s_part[threadIdx.x >> 5] = v;
    __syncthreads();
    float t = 0.f;
    const u32 warps = blockDim.x >> 5;
    for (u32 w = 0; w < warps; w++) t += s_part[w];
    return t;
}

template <typename T>
__device__ __forceinline__ float square_sum(V16 v) {
    float r[T::E];
    T::unpack(v, r);
    float ss = 0.f;
#pragma unroll
    for (int k = 0; k < T::E; k++) ss = __fmaf_rn(r[k], r[k], ss);
    return ss;
}

// residual[i] = round(x + residual[i]); returns the rounded new residual's
// sum of squares contribution.
template <typename T>
__device__ __forceinline__ float add_into_residual(V16 sum, V16* residual, u64 i) {
    float x[T::E], r[T::E];
    T::unpack(sum, x);
    T::unpack(residual[i], r);
#pragma unroll
    for (int k = 0; k < T::E; k++) r[k] = x[k] + r[k];
    V16 nr = T::pack(r);
    residual[i] = nr;
    return square_sum<T>(nr);
}

template <typename T>
__device__ __forceinline__ void write_normed(const FusedArgs& f, u64 i, u32 j, float scale) {
    float r[T::E], w[T::E];
    T::unpack(((const V16*)f.residual)[i], r);
    T::unpack(((const V16*)f.weight)[j], w);
#pragma unroll
    for (int k = 0; k < T::E; k++) r[k] = __fmul_rn(__fmul_rn(r[k], scale), w[k]);
    ((V16*)f.normed)[i] = T::pack(r);
}

template <typename T>
__device__ void fused_allreduce_rmsnorm(const FusedArgs& f) {
    const Args& a = f.base;
    if (threadIdx.x == 0) prefetch_l2((const void*)a.ctl);
    wait_for_previous_kernel();
    const u64 epoch = read_epoch(a);
    const u64 buf_off = (epoch & 1ull) * a.epoch_stride;
    const u64 my_slot = buf_off + (u64)a.rank * a.slot_stride;
    const V16* in = (const V16*)a.in;
    V16* residual = (V16*)f.residual;

    // Push before waiting for anything: every row this block owns, or, with
    // push_vecs, pieces of that many vectors spread over the whole grid
    // (which may have more blocks than rows: those only push), so more SMs
    // share the stores to the peers.
    if (f.push_vecs == 0u) {
        for (u32 row = blockIdx.x; row < f.rows; row += gridDim.x) {
            for (u32 j = threadIdx.x; j < f.row_vecs; j += blockDim.x) {
                const u64 i = (u64)row * f.row_vecs + j;
                V16 v = canon<T>(in[i]);
                for (u32 p = 0; p < a.world; p++) {
                    if (p != a.rank) st_relaxed_sys(slot_ptr(a.bufs[p], my_slot, i), v);
                }
            }
        }
    } else {
        const u64 nvec = (u64)f.rows * f.row_vecs;
        const u64 step = (u64)gridDim.x * f.push_vecs;
        for (u64 base = (u64)blockIdx.x * f.push_vecs; base < nvec; base += step) {
            for (u32 t = threadIdx.x; t < f.push_vecs && base + t < nvec; t += blockDim.x) {
                const u64 i = base + t;
                V16 v = canon<T>(in[i]);
                for (u32 p = 0; p < a.world; p++) {
                    if (p != a.rank) st_relaxed_sys(slot_ptr(a.bufs[p], my_slot, i), v);
                }
            }
        }
    }

    bool ok = true;
    const u64 mine = a.bufs[a.rank];
    for (u32 row = blockIdx.x; row < f.rows; row += gridDim.x) {
        float ss = 0.f;
        for (u32 j = threadIdx.x; ok && j < f.row_vecs; j += blockDim.x) {
            const u64 i = (u64)row * f.row_vecs + j;
            float acc[T::E];
            float x[T::E];
            for (u32 p = 0; p < a.world; p++) {
                V16 v;
                V16* s = 0;
                if (p == a.rank) {
                    v = canon<T>(in[i]);
                } else {
                    s = slot_ptr(mine, buf_off + (u64)p * a.slot_stride, i);
                    v = ld_volatile_v4(s);
                    if (T::has_sentinel(v)) {
                        v = wait_slow<T>(s, a.ctl, a.status, a.timeout_ns, TPCOMM_WAIT_FUSED, p, epoch, peer_ctl(a, p));
                        if (T::has_sentinel(v)) {
                            ok = false;
                            break;
                        }
                    }
                }
                T::unpack(v, x);
                if (p == 0) {
#pragma unroll
                    for (int k = 0; k < T::E; k++) acc[k] = x[k];
                } else {
#pragma unroll
                    for (int k = 0; k < T::E; k++) acc[k] += x[k];
                }
                if (s) st_relaxed_sys(s, sentinel_vec());
            }
            // Rounded exactly as the one-shot kernel stores its output.
            if (ok) ss += add_into_residual<T>(canon<T>(T::pack(acc)), residual, i);
        }
        // Reached by every thread, also after a failed wait.
        const float scale = rsqrtf(block_sum(ss) * f.inv_hidden + f.eps);
        if (ok) {
            for (u32 j = threadIdx.x; j < f.row_vecs; j += blockDim.x)
                write_normed<T>(f, (u64)row * f.row_vecs + j, j, scale);
        }
    }
    end_call(a, epoch, ok);
}

// The unfused counterpart: residual += addend (when given), then RMSNorm.
template <typename T>
__device__ void add_rmsnorm(const FusedArgs& f) {
    wait_for_previous_kernel();
    V16* residual = (V16*)f.residual;
    const V16* addend = (const V16*)f.addend;
    for (u32 row = blockIdx.x; row < f.rows; row += gridDim.x) {
        float ss = 0.f;
        for (u32 j = threadIdx.x; j < f.row_vecs; j += blockDim.x) {
            const u64 i = (u64)row * f.row_vecs + j;
            ss += addend ? add_into_residual<T>(addend[i], residual, i) : square_sum<T>(residual[i]);
        }
        const float scale = rsqrtf(block_sum(ss) * f.inv_hidden + f.eps);
        for (u32 j = threadIdx.x; j < f.row_vecs; j += blockDim.x)
            write_normed<T>(f, (u64)row * f.row_vecs + j, j, scale);
    }
}

extern "C" __global__ void __launch_bounds__(1024) tpcomm_fused_rmsnorm_f32(FusedArgs f) { fused_allreduce_rmsnorm<F32>(f); }
extern "C" __global__ void __launch_bounds__(1024) tpcomm_fused_rmsnorm_f16(FusedArgs f) { fused_allreduce_rmsnorm<F16>(f); }
extern "C" __global__ void __launch_bounds__(1024) tpcomm_fused_rmsnorm_bf16(FusedArgs f) { fused_allreduce_rmsnorm<BF16>(f); }
extern "C" __global__ void __launch_bounds__(1024) tpcomm_add_rmsnorm_f32(FusedArgs f) { add_rmsnorm<F32>(f); }
extern "C" __global__ void __launch_bounds__(1024) tpcomm_add_rmsnorm_f16(FusedArgs f) { add_rmsnorm<F16>(f); }
extern "C" __global__ void __launch_bounds__(1024) tpcomm_add_rmsnorm_bf16(FusedArgs f) { add_rmsnorm<BF16>(f); }
