// tpcomm all-reduce kernels: one-shot push and two-shot (reduce-scatter +
// all-gather) over peer-mapped receive buffers. docs/protocol-gpu.md states the
// rules; this file follows them.
//
// No CUDA headers: NVRTC alone must be enough on a user's machine, and the
// nvidia-cuda-nvrtc wheel ships none. Conversions are bit operations or single
// PTX instructions; memory ordering is inline PTX.
//
// Arrival is detected by self-validating words. Every receive slot holds the
// sentinel (all bits one: a NaN in f32, f16 and bf16 alike) when it is idle.
// Senders replace an element that happens to be all-ones by the same NaN with
// its sign bit cleared, so a NaN stays a NaN and every other value is sent
// unchanged. A receiver waits until no element of its 16-byte vector is the
// sentinel; each element is written exactly once per epoch, so the first
// non-sentinel value it sees is the final one and no flag or fence is needed
// for the data. After reading, the receiver writes the sentinel back.

typedef unsigned int u32;
typedef unsigned long long u64;
typedef unsigned short u16;

#define TPCOMM_MAX_WORLD 8

// Timeout codes written to Status::code (mirrored in src/cuda/comm.rs).
#define TPCOMM_WAIT_ONESHOT 1u
#define TPCOMM_WAIT_REDUCE_SCATTER 2u
#define TPCOMM_WAIT_ALL_GATHER 3u

struct __align__(16) V16 {
    u32 x, y, z, w;
};

// Per-rank control words in local device memory (never shared with peers).
struct Ctl {
    u64 epoch;  // calls completed on this communicator; parity picks the buffer
    u32 done;   // blocks of the current call that finished (multi-block calls)
    u32 abort;  // set once a wait timed out: every later call exits at once
};

// Host-mapped status, read by the host after the stream is synchronized.
struct Status {
    u32 code;   // 0: fine; otherwise TPCOMM_WAIT_*
    u32 peer;   // the rank whose data did not arrive
    u64 epoch;  // the epoch of the call that timed out
};

// Kernel arguments, passed by value. Layout mirrored by `KernelArgs` in
// src/cuda/comm.rs (repr(C)); keep both in the same order.
struct Args {
    u64 in;                      // device pointer, 16-byte aligned
    u64 out;                     // device pointer, 16-byte aligned (may equal in)
    u64 nbytes;                  // message size in bytes (count * element size)
    u64 bufs[TPCOMM_MAX_WORLD];  // every rank's receive area, mapped here
    u64 epoch_stride;            // bytes between the two epoch buffers
    u64 slot_stride;             // one-shot: bytes between the slots of two senders
    u64 shard_stride;            // two-shot: bytes between the slots of two senders
    u64 ag_offset;               // two-shot: offset of the all-gather area
    u64 ctl;                     // Ctl* in local device memory
    u64 status;                  // Status* in host-mapped memory
    u64 timeout_ns;              // bound on every wait
    u32 rank;
    u32 world;
};

// ---------------------------------------------------------------- memory ops

__device__ __forceinline__ V16 ld_volatile(const V16* p) {
    V16 v;
    asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p)
                 : "memory");
    return v;
}

// Stores to a peer go out as system-scope relaxed writes so they are not kept
// in this SM's L1 and reach the peer while this kernel still runs.
__device__ __forceinline__ void st_relaxed_sys(V16* p, V16 v) {
    asm volatile("st.relaxed.sys.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(v.x), "r"(v.y),
                 "r"(v.z), "r"(v.w)
                 : "memory");
}

__device__ __forceinline__ u64 ld_volatile_u64(const u64* p) {
    u64 v;
    asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ u32 ld_volatile_u32(const u32* p) {
    u32 v;
    asm volatile("ld.volatile.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ u64 globaltimer() {
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__device__ __forceinline__ V16 sentinel_vec() {
    V16 v;
    v.x = v.y = v.z = v.w = 0xffffffffu;
    return v;
}

// ---------------------------------------------------------------- element types

// Element type traits: E = elements per 16-byte vector.
struct F32 {
    enum { E = 4 };
    static __device__ __forceinline__ void unpack(V16 v, float* f) {
        f[0] = __uint_as_float(v.x);
        f[1] = __uint_as_float(v.y);
        f[2] = __uint_as_float(v.z);
        f[3] = __uint_as_float(v.w);
    }
    static __device__ __forceinline__ V16 pack(const float* f) {
        V16 v;
        v.x = __float_as_uint(f[0]);
        v.y = __float_as_uint(f[1]);
        v.z = __float_as_uint(f[2]);
        v.w = __float_as_uint(f[3]);
        return v;
    }
    static __device__ __forceinline__ bool has_sentinel(V16 v) {
        return v.x == 0xffffffffu || v.y == 0xffffffffu || v.z == 0xffffffffu ||
               v.w == 0xffffffffu;
    }
    static __device__ __forceinline__ u32 canon_word(u32 w) {
        return w == 0xffffffffu ? 0x7fffffffu : w;
    }
};

// Both 16-bit types share the sentinel test and its replacement.
__device__ __forceinline__ bool word_has_half_sentinel(u32 w) {
    return (w & 0xffffu) == 0xffffu || (w >> 16) == 0xffffu;
}
__device__ __forceinline__ u32 canon_halves(u32 w) {
    if ((w & 0xffffu) == 0xffffu) w &= 0xffff7fffu;
    if ((w >> 16) == 0xffffu) w &= 0x7fffffffu;
    return w;
}

__device__ __forceinline__ float bf16_to_f32(u32 h) { return __uint_as_float(h << 16); }

// Round to nearest even; NaN stays a quiet NaN with its sign.
__device__ __forceinline__ u32 f32_to_bf16(float f) {
    u32 u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return ((u >> 16) | 0x40u) & 0xffffu;
    u += 0x7fffu + ((u >> 16) & 1u);
    return u >> 16;
}

__device__ __forceinline__ float f16_to_f32(u32 h) {
    float f;
    unsigned short s = (unsigned short)h;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(s));
    return f;
}

__device__ __forceinline__ u32 f32_to_f16(float f) {
    unsigned short s;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(s) : "f"(f));
    return (u32)s;
}

struct BF16 {
    enum { E = 8 };
    static __device__ __forceinline__ void unpack(V16 v, float* f) {
        u32 w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int k = 0; k < 4; k++) {
            f[2 * k] = bf16_to_f32(w[k] & 0xffffu);
            f[2 * k + 1] = bf16_to_f32(w[k] >> 16);
        }
    }
    static __device__ __forceinline__ V16 pack(const float* f) {
        u32 w[4];
#pragma unroll
        for (int k = 0; k < 4; k++) w[k] = f32_to_bf16(f[2 * k]) | (f32_to_bf16(f[2 * k + 1]) << 16);
        V16 v;
        v.x = w[0];
        v.y = w[1];
        v.z = w[2];
        v.w = w[3];
        return v;
    }
    static __device__ __forceinline__ bool has_sentinel(V16 v) {
        return word_has_half_sentinel(v.x) || word_has_half_sentinel(v.y) ||
               word_has_half_sentinel(v.z) || word_has_half_sentinel(v.w);
    }
    static __device__ __forceinline__ u32 canon_word(u32 w) { return canon_halves(w); }
};

struct F16 {
    enum { E = 8 };
    static __device__ __forceinline__ void unpack(V16 v, float* f) {
        u32 w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int k = 0; k < 4; k++) {
            f[2 * k] = f16_to_f32(w[k] & 0xffffu);
            f[2 * k + 1] = f16_to_f32(w[k] >> 16);
        }
    }
    static __device__ __forceinline__ V16 pack(const float* f) {
        u32 w[4];
#pragma unroll
        for (int k = 0; k < 4; k++) w[k] = f32_to_f16(f[2 * k]) | (f32_to_f16(f[2 * k + 1]) << 16);
        V16 v;
        v.x = w[0];
        v.y = w[1];
        v.z = w[2];
        v.w = w[3];
        return v;
    }
    static __device__ __forceinline__ bool has_sentinel(V16 v) { return BF16::has_sentinel(v); }
    static __device__ __forceinline__ u32 canon_word(u32 w) { return canon_halves(w); }
};

template <typename T>
__device__ __forceinline__ V16 canon(V16 v) {
    v.x = T::canon_word(v.x);
    v.y = T::canon_word(v.y);
    v.z = T::canon_word(v.z);
    v.w = T::canon_word(v.w);
    return v;
}

// ---------------------------------------------------------------- message access

// The last vector of a message may be partial: it is read element-wise (16-bit
// steps; every type's size is a multiple of 2) and padded with zeros, so the
// whole 16 bytes of the slot are written and the receiver's test stays
// per-vector.
__device__ __forceinline__ V16 load_input(const Args& a, u64 i) {
    const V16* in = (const V16*)a.in;
    u64 full = a.nbytes / 16;
    if (i < full) return in[i];
    u32 w[4] = {0u, 0u, 0u, 0u};
    const u16* p = (const u16*)(in + i);
    u32 halves = (u32)(a.nbytes % 16) / 2;
    for (u32 k = 0; k < halves; k++) w[k / 2] |= ((u32)p[k]) << (16 * (k % 2));
    V16 v;
    v.x = w[0];
    v.y = w[1];
    v.z = w[2];
    v.w = w[3];
    return v;
}

__device__ __forceinline__ void store_output(const Args& a, u64 i, V16 v) {
    V16* out = (V16*)a.out;
    u64 full = a.nbytes / 16;
    if (i < full) {
        out[i] = v;
        return;
    }
    u32 w[4] = {v.x, v.y, v.z, v.w};
    u16* p = (u16*)(out + i);
    u32 halves = (u32)(a.nbytes % 16) / 2;
    for (u32 k = 0; k < halves; k++) p[k] = (u16)(w[k / 2] >> (16 * (k % 2)));
}

__device__ __forceinline__ V16* slot_ptr(u64 base, u64 offset, u64 i) {
    return (V16*)(base + offset) + i;
}

// ---------------------------------------------------------------- bounded wait

// Records the first timeout of this rank (later ones are consequences) and
// raises the abort word so every other waiting thread gives up at once.
__device__ void report_timeout(const Args& a, u32 what, u32 peer, u64 epoch) {
    Ctl* ctl = (Ctl*)a.ctl;
    if (atomicCAS(&ctl->abort, 0u, 1u) == 0u) {
        volatile Status* s = (volatile Status*)a.status;
        s->peer = peer;
        s->epoch = epoch;
        __threadfence_system();
        s->code = what;
        __threadfence_system();
    }
}

// Waits until the vector at `p` holds no sentinel. Returns false when the wait
// timed out or another thread of this rank already gave up.
template <typename T>
__device__ __forceinline__ bool wait_vec(const Args& a, const V16* p, V16& v, u32 what, u32 peer,
                                         u64 epoch) {
    v = ld_volatile(p);
    if (!T::has_sentinel(v)) return true;
    const u64 start = globaltimer();
    const Ctl* ctl = (const Ctl*)a.ctl;
    for (;;) {
        v = ld_volatile(p);
        if (!T::has_sentinel(v)) return true;
        if (ld_volatile_u32(&ctl->abort) != 0u) return false;
        if (globaltimer() - start > a.timeout_ns) {
            report_timeout(a, what, peer, epoch);
            return false;
        }
    }
}

// ---------------------------------------------------------------- epochs

// Every block reads the epoch when it starts; the last block to finish
// advances it. The next call on the stream starts only after this kernel has
// completed, so all of its blocks see the new value: the kernel itself keeps
// the count, which is what makes CUDA-graph replays of identical arguments
// correct.
// Thread 0 reads both words and shares them, so a block decides as one (an
// abort raised by another block meanwhile must not split it at a barrier).
__device__ __forceinline__ bool begin_call(const Args& a, u64& epoch) {
    __shared__ u64 s_epoch;
    __shared__ u32 s_abort;
    if (threadIdx.x == 0) {
        const Ctl* ctl = (const Ctl*)a.ctl;
        s_abort = ld_volatile_u32(&ctl->abort);
        s_epoch = ld_volatile_u64(&ctl->epoch);
    }
    __syncthreads();
    epoch = s_epoch;
    return s_abort == 0u;
}

// Every thread reaches this (also after a failed wait), so the barrier is
// well-defined; an aborted call leaves the epoch where it is.
__device__ __forceinline__ void end_call(const Args& a, u64 epoch) {
    __syncthreads();
    if (threadIdx.x != 0) return;
    Ctl* ctl = (Ctl*)a.ctl;
    if (ld_volatile_u32(&ctl->abort) != 0u) return;
    if (gridDim.x == 1) {
        ctl->epoch = epoch + 1;
        return;
    }
    __threadfence();
    u32 prev = atomicAdd(&ctl->done, 1u);
    if (prev == gridDim.x - 1) {
        ctl->done = 0u;
        ctl->epoch = epoch + 1;
    }
}

// ---------------------------------------------------------------- one-shot

// Each rank pushes its whole input into its own slot of every peer's receive
// buffer, then reduces, in rank order, its own input and the slots of the
// others, reading local memory only.
template <typename T>
__device__ void oneshot(const Args& a) {
    u64 epoch;
    if (!begin_call(a, epoch)) return;
    const u64 nvec = (a.nbytes + 15) / 16;
    const u64 buf_off = (epoch & 1ull) * a.epoch_stride;
    const u64 stride = (u64)gridDim.x * blockDim.x;
    const u64 first = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    const u64 my_slot = buf_off + (u64)a.rank * a.slot_stride;

    for (u64 i = first; i < nvec; i += stride) {
        V16 v = canon<T>(load_input(a, i));
        for (u32 p = 0; p < a.world; p++) {
            if (p != a.rank) st_relaxed_sys(slot_ptr(a.bufs[p], my_slot, i), v);
        }
    }

    bool ok = true;
    const u64 mine = a.bufs[a.rank];
    for (u64 i = first; ok && i < nvec; i += stride) {
        float acc[T::E];
        float x[T::E];
        for (u32 p = 0; p < a.world; p++) {
            V16 v;
            V16* s = 0;
            if (p == a.rank) {
                v = canon<T>(load_input(a, i));
            } else {
                s = slot_ptr(mine, buf_off + (u64)p * a.slot_stride, i);
                if (!wait_vec<T>(a, s, v, TPCOMM_WAIT_ONESHOT, p, epoch)) {
                    ok = false;
                    break;
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
            if (s) *s = sentinel_vec();
        }
        if (ok) store_output(a, i, canon<T>(T::pack(acc)));
    }
    end_call(a, epoch);
}

// ---------------------------------------------------------------- two-shot

// Reduce-scatter: vector i belongs to shard i / per, owned by that rank; each
// rank pushes the shards of others into the owner's reduce-scatter slot. The
// owner reduces its shard in rank order, writes it to its output and pushes
// the result into every peer's all-gather slot. Then every rank waits for the
// shards of the others. One thread handles the same vector indices in every
// phase, so in-place calls read each input vector before overwriting it.
template <typename T>
__device__ void twoshot(const Args& a) {
    u64 epoch;
    if (!begin_call(a, epoch)) return;
    const u64 nvec = (a.nbytes + 15) / 16;
    const u64 per = (nvec + a.world - 1) / a.world;
    const u64 buf_off = (epoch & 1ull) * a.epoch_stride;
    const u64 stride = (u64)gridDim.x * blockDim.x;
    const u64 first = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    const u64 mine = a.bufs[a.rank];

    for (u64 i = first; i < nvec; i += stride) {
        u32 owner = (u32)(i / per);
        if (owner == a.rank) continue;
        V16 v = canon<T>(load_input(a, i));
        u64 off = buf_off + (u64)a.rank * a.shard_stride;
        st_relaxed_sys(slot_ptr(a.bufs[owner], off, i - owner * per), v);
    }

    bool ok = true;
    for (u64 i = first; ok && i < nvec; i += stride) {
        u32 owner = (u32)(i / per);
        if (owner != a.rank) continue;
        const u64 j = i - owner * per;
        float acc[T::E];
        float x[T::E];
        for (u32 p = 0; p < a.world; p++) {
            V16 v;
            V16* s = 0;
            if (p == a.rank) {
                v = canon<T>(load_input(a, i));
            } else {
                s = slot_ptr(mine, buf_off + (u64)p * a.shard_stride, j);
                if (!wait_vec<T>(a, s, v, TPCOMM_WAIT_REDUCE_SCATTER, p, epoch)) {
                    ok = false;
                    break;
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
            if (s) *s = sentinel_vec();
        }
        if (!ok) break;
        V16 r = canon<T>(T::pack(acc));
        u64 off = buf_off + a.ag_offset + (u64)a.rank * a.shard_stride;
        for (u32 p = 0; p < a.world; p++) {
            if (p != a.rank) st_relaxed_sys(slot_ptr(a.bufs[p], off, j), r);
        }
        store_output(a, i, r);
    }

    for (u64 i = first; ok && i < nvec; i += stride) {
        u32 owner = (u32)(i / per);
        if (owner == a.rank) continue;
        V16* s = slot_ptr(mine, buf_off + a.ag_offset + (u64)owner * a.shard_stride, i - owner * per);
        V16 v;
        if (!wait_vec<T>(a, s, v, TPCOMM_WAIT_ALL_GATHER, owner, epoch)) {
            ok = false;
            break;
        }
        *s = sentinel_vec();
        store_output(a, i, v);
    }
    end_call(a, epoch);
}

// ---------------------------------------------------------------- entry points

extern "C" __global__ void tpcomm_oneshot_f32(Args a) { oneshot<F32>(a); }
extern "C" __global__ void tpcomm_oneshot_f16(Args a) { oneshot<F16>(a); }
extern "C" __global__ void tpcomm_oneshot_bf16(Args a) { oneshot<BF16>(a); }
extern "C" __global__ void tpcomm_twoshot_f32(Args a) { twoshot<F32>(a); }
extern "C" __global__ void tpcomm_twoshot_f16(Args a) { twoshot<F16>(a); }
extern "C" __global__ void tpcomm_twoshot_bf16(Args a) { twoshot<BF16>(a); }
