// Helpers every tpcomm kernel family uses: integer names, the limits every
// family shares, the 16-byte vector, the slots' sentinel and the canon form
// of sent data, volatile loads and acquire/release flags, the global timer,
// the timeout status, the element types (bf16/f16 <-> f32 conversions, the
// packing of a vector), and the reading and writing of a message's possibly
// partial last vector.
//
// How a family's source is assembled: src/cuda/compile.rs puts the family's
// defines (if any), then this file, then the family's own files into one
// string, each file preceded by a #line directive so NVRTC's messages name
// the right file and line. That string is what NVRTC compiles and what the
// disk cache's key hashes. The families: allreduce.cu; allreduce.cu +
// fused.cu + forward.cu; host_allreduce.cu (with TPCOMM_HOST_FORMS); quant.cu. A name
// defined here must not be defined again in a family's file (a unit test in
// compile.rs checks that).
//
// No CUDA headers: NVRTC alone must be enough on a user's machine, and the
// nvidia-cuda-nvrtc wheel ships none. Conversions are bit operations or single
// PTX instructions; memory ordering is inline PTX.

typedef unsigned int u32;
typedef unsigned long long u64;
typedef unsigned short u16;

// Ranks of a group, at most (MAX_WORLD in src/cuda/mod.rs).
#define TPCOMM_MAX_WORLD 8

// Every family's control words count an epoch in the bits above this shift
// of an arrivals word (calls completed; the arrivals of the current call
// below it).
#define TPCOMM_EPOCH_SHIFT 20
#define TPCOMM_EPOCH_UNIT (1ull << TPCOMM_EPOCH_SHIFT)

// TPCOMM_HOST_FORMS (defined by compile.rs for the host-path family): the
// forms the host-path kernels were written, measured and verified on a GPU
// with, where they differ from the other families' in machine code only
// (NVRTC 13.0; tests/nvrtc_compile.rs fingerprints every function):
// - V16 at its natural 4-byte alignment (plain V16 accesses and local
//   copies are four 32-bit ones), where the P2P and fused kernels declare it
//   16-byte aligned (single 128-bit accesses);
// - 16-bit elements packed word by word, not in a loop (sm_100, sm_120);
// - 16-bit elements made canon by xor (canon_halves_by_xor), not by masks.
// Moving either family to the other's form changes its machine code, which
// only a run on a GPU can re-verify.
#ifdef TPCOMM_HOST_FORMS
#define TPCOMM_V16_ALIGN 4
#else
#define TPCOMM_V16_ALIGN 16
#endif

struct __align__(TPCOMM_V16_ALIGN) V16 {
    u32 x, y, z, w;
};

// The vector of the four words `w`.
__device__ __forceinline__ V16 v16_of(const u32* w) {
    V16 v;
    v.x = w[0];
    v.y = w[1];
    v.z = w[2];
    v.w = w[3];
    return v;
}

// ---------------------------------------------------------------- blocks

// A rank's block inside a gathered buffer sits nbytes into it, so it is
// 16-byte aligned only when nbytes is (the collective kernels, P2P and host
// path): these read and write it in 16-byte vectors where they can and in
// 16-bit steps where not.

// Vector i of a block of nbytes at `at` (2-byte aligned at least); the part
// of the last vector past the block reads as zeros.
__device__ __forceinline__ V16 block_load(u64 at, u64 nbytes, u64 i) {
    const u64 full = nbytes / 16;
    if (i < full && (at & 15ull) == 0ull) return ((const V16*)at)[i];
    u32 w[4] = {0u, 0u, 0u, 0u};
    const u16* p = (const u16*)(at + 16ull * i);
    const u32 halves = i < full ? 8u : (u32)(nbytes % 16) / 2;
    for (u32 k = 0; k < halves; k++) w[k / 2] |= ((u32)p[k]) << (16 * (k % 2));
    return v16_of(w);
}

// Writes vector i of a block of nbytes at `at`: only the block's own bytes.
__device__ __forceinline__ void block_store(u64 at, u64 nbytes, u64 i, V16 v) {
    const u64 full = nbytes / 16;
    if (i < full && (at & 15ull) == 0ull) {
        ((V16*)at)[i] = v;
        return;
    }
    const u32 w[4] = {v.x, v.y, v.z, v.w};
    u16* p = (u16*)(at + 16ull * i);
    const u32 halves = i < full ? 8u : (u32)(nbytes % 16) / 2;
    for (u32 k = 0; k < halves; k++) p[k] = (u16)(w[k / 2] >> (16 * (k % 2)));
}

// ---------------------------------------------------------------- sentinel

// The sentinel of the self-validating slots (P2P, fused and host push
// kernels): all bits one, a NaN in f32, f16 and bf16 alike. Senders replace
// an all-ones element by another NaN (sign bit cleared), so data never looks
// like it; a reader waits until no element of a vector is the sentinel.
__device__ __forceinline__ V16 sentinel_vec() {
    V16 v;
    v.x = v.y = v.z = v.w = 0xffffffffu;
    return v;
}

// 32-bit elements.
__device__ __forceinline__ bool words_have_sentinel(V16 v) {
    return v.x == 0xffffffffu || v.y == 0xffffffffu || v.z == 0xffffffffu || v.w == 0xffffffffu;
}
__device__ __forceinline__ u32 canon_word32(u32 w) { return w == 0xffffffffu ? 0x7fffffffu : w; }

// 16-bit elements, two to a word.
__device__ __forceinline__ bool word_has_half_sentinel(u32 w) {
    return (w & 0xffffu) == 0xffffu || (w >> 16) == 0xffffu;
}
__device__ __forceinline__ bool halves_have_sentinel(V16 v) {
    return word_has_half_sentinel(v.x) || word_has_half_sentinel(v.y) ||
           word_has_half_sentinel(v.z) || word_has_half_sentinel(v.w);
}
__device__ __forceinline__ u32 canon_halves(u32 w) {
    if ((w & 0xffffu) == 0xffffu) w &= 0xffff7fffu;
    if ((w >> 16) == 0xffffu) w &= 0x7fffffffu;
    return w;
}
// canon_halves' value, computed by xor (TPCOMM_HOST_FORMS).
__device__ __forceinline__ u32 canon_halves_by_xor(u32 w) {
    u32 flip = ((w & 0xffffu) == 0xffffu ? 0x8000u : 0u) | ((w >> 16) == 0xffffu ? 0x80000000u : 0u);
    return w ^ flip;
}

// A vector as senders send it: every word through the element type's
// canon_word (canon_word32 or canon_halves, or a form of the same value).
template <typename T>
__device__ __forceinline__ V16 canon(V16 v) {
    v.x = T::canon_word(v.x);
    v.y = T::canon_word(v.y);
    v.z = T::canon_word(v.z);
    v.w = T::canon_word(v.w);
    return v;
}

// ---------------------------------------------------------------- memory ops

__device__ __forceinline__ V16 ld_volatile_v4(const void* p) {
    V16 v;
    asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p)
                 : "memory");
    return v;
}

__device__ __forceinline__ u32 ld_volatile_u32(const u32* p) {
    u32 v;
    asm volatile("ld.volatile.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ u64 ld_volatile_u64(const u64* p) {
    u64 v;
    asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ u64 globaltimer() {
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// Flags: a release store after the data it guards, and the acquire load
// that makes the data visible once the flag is seen (system scope: peers and
// host memory).
__device__ __forceinline__ u32 ld_acquire_sys_u32(const u32* p) {
    u32 v;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ void st_release_sys_u32(u32* p, u32 v) {
    asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// ---------------------------------------------------------------- timeouts

// A rank's host-mapped status, read by the host after the stream is
// synchronized (src/cuda/transport/p2p/comm.rs and src/cuda/transport/pinned read these offsets).
// Each family writes it in its own report_timeout: sharing that function too
// changes the host-path kernels' machine code.
struct Status {
    u32 code;   // 0: fine; otherwise the family's wait code (TPCOMM_WAIT_*, HG_WAIT_*)
    u32 peer;   // the rank whose data did not arrive
    u64 epoch;  // the epoch of the call that timed out
};

// ---------------------------------------------------------------- call words

// Every call says what it is: `call` (built by the host, src/cuda/call_word.rs)
// holds the message's bytes (bits 0-34), the kind of call (35-38: algorithm
// or collective, transport), the caller's element type (39-42), its op
// (43-45) and the broadcast root, the quantized wire or a rooted call's root
// (46-48). One thread of each rank sends it (P2P and host
// path: the grid's last, is_checker below; quantized: block 0's last),
// tagged with the epoch in bits 49-63, to every peer when the call starts;
// before the call counts as done it waits (bounded) for every peer's word of
// this epoch and compares: a rank that called with another count, type,
// algorithm or collective is reported (TPCOMM_CALL_MISMATCH), never summed
// silently. The tag (call_tag) is never 0, so zeroed memory is never a
// current word; a word of epoch e and one of e - 2 (the previous use of the
// same parity) always differ. A call of 0 means checking is off (CudaConfig::check_calls,
// TPCOMM_CHECK_CALLS=0): the kernels neither send nor compare words.
#define TPCOMM_CALL_BITS 49
#define TPCOMM_CALL_MASK ((1ull << TPCOMM_CALL_BITS) - 1ull)
// Status codes of every family (its wait codes stay below 11).
#define TPCOMM_WAIT_CALL 11u
#define TPCOMM_CALL_MISMATCH 12u

// The epoch's tag: its low 14 bits plus one (never 0; epochs e and e - 2
// always differ), a mask rather than a division on the checking thread.
__device__ __forceinline__ u64 call_tag(u64 epoch) { return 1ull + (epoch & 0x3fffull); }

__device__ __forceinline__ u64 call_word(u64 call, u64 epoch) {
    return (call_tag(epoch) << TPCOMM_CALL_BITS) | (call & TPCOMM_CALL_MASK);
}

__device__ __forceinline__ bool call_word_current(u64 word, u64 epoch) {
    return (word >> TPCOMM_CALL_BITS) == call_tag(epoch);
}

// The thread that sends this rank's call word and checks the peers' (P2P
// and host-path kernels; the quantized ones keep block 0's last): the
// grid's last. With call words on, the host gives a small call's launch a
// spare warp or block where every thread would have data
// (launch_shape::with_idle_checker), so this thread has none and its check
// overlaps the data's round trip instead of following it.
__device__ __forceinline__ bool is_checker() {
    return blockIdx.x == gridDim.x - 1 && threadIdx.x == blockDim.x - 1;
}

// Records this rank's first failure (by `abort`): `code` (TPCOMM_WAIT_CALL
// or TPCOMM_CALL_MISMATCH) naming the peer, and in bytes 16-31 of the status
// this rank's call and the peer's word last seen, for check()'s message.
__device__ __forceinline__ void report_call(u32* abort, u64 status, u32 code, u32 peer, u64 epoch,
                                            u64 mine, u64 seen) {
    if (atomicCAS(abort, 0u, 1u) == 0u) {
        volatile Status* s = (volatile Status*)status;
        volatile u64* d = (volatile u64*)(status + 16);
        d[0] = mine & TPCOMM_CALL_MASK;
        d[1] = seen & TPCOMM_CALL_MASK;
        s->peer = peer;
        s->epoch = epoch;
        __threadfence_system();
        s->code = code;
        __threadfence_system();
    }
}

// Waits (bounded by timeout_ns, giving up at once when `abort` is raised)
// until the word at `w` is the one of `epoch`, then compares it with this
// rank's call. False, with the status written, when the peer's word did not
// come (TPCOMM_WAIT_CALL) or says another call (TPCOMM_CALL_MISMATCH).
__device__ __noinline__ bool peer_call_agrees(const u64* w, u32* abort, u64 status, u64 timeout_ns,
                                              u32 peer, u64 epoch, u64 mine) {
    u64 word = ld_volatile_u64(w);
    if (!call_word_current(word, epoch)) {
        const u64 start = globaltimer();
        for (u32 spins = 1;; spins++) {
            word = ld_volatile_u64(w);
            if (call_word_current(word, epoch)) break;
            if ((spins & 31u) == 0u) {
                if (ld_volatile_u32(abort) != 0u) return false;
                if (globaltimer() - start > timeout_ns) {
                    report_call(abort, status, TPCOMM_WAIT_CALL, peer, epoch, mine, word);
                    return false;
                }
            }
        }
    }
    if ((word & TPCOMM_CALL_MASK) == (mine & TPCOMM_CALL_MASK)) return true;
    report_call(abort, status, TPCOMM_CALL_MISMATCH, peer, epoch, mine, word);
    return false;
}

// ---------------------------------------------------------------- conversions

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

// ---------------------------------------------------------------- element types

// One struct per element type, used by every family:
//   E               elements per 16-byte vector;
//   HALVES          1 for 16-bit elements (two to a 32-bit word), else 0;
//   to_f32, from_f32  one element (in the low bits of a word) and f32;
//   unpack, pack    a vector and its E elements as f32;
//   add             a vector's elements added into E f32 accumulators;
//   has_sentinel    whether an element of a vector is the sentinel;
//   canon_word      a word as senders send it (see `canon`).
struct F32 {
    enum { E = 4, HALVES = 0 };
    static __device__ __forceinline__ float to_f32(u32 w) { return __uint_as_float(w); }
    static __device__ __forceinline__ u32 from_f32(float f) { return __float_as_uint(f); }
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
    static __device__ __forceinline__ void add(float* acc, V16 v) {
        acc[0] += __uint_as_float(v.x);
        acc[1] += __uint_as_float(v.y);
        acc[2] += __uint_as_float(v.z);
        acc[3] += __uint_as_float(v.w);
    }
    static __device__ __forceinline__ bool has_sentinel(V16 v) { return words_have_sentinel(v); }
    static __device__ __forceinline__ u32 canon_word(u32 w) { return canon_word32(w); }
};

// The 16-bit types differ only in their conversion `C` (to_f32, from_f32).
template <typename C>
struct Halves {
    enum { E = 8, HALVES = 1 };
    static __device__ __forceinline__ float to_f32(u32 h) { return C::to_f32(h); }
    static __device__ __forceinline__ u32 from_f32(float f) { return C::from_f32(f); }
    static __device__ __forceinline__ void unpack(V16 v, float* f) {
        u32 w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int k = 0; k < 4; k++) {
            f[2 * k] = C::to_f32(w[k] & 0xffffu);
            f[2 * k + 1] = C::to_f32(w[k] >> 16);
        }
    }
    static __device__ __forceinline__ V16 pack(const float* f) {
#ifdef TPCOMM_HOST_FORMS
        V16 v;
        v.x = C::from_f32(f[0]) | (C::from_f32(f[1]) << 16);
        v.y = C::from_f32(f[2]) | (C::from_f32(f[3]) << 16);
        v.z = C::from_f32(f[4]) | (C::from_f32(f[5]) << 16);
        v.w = C::from_f32(f[6]) | (C::from_f32(f[7]) << 16);
        return v;
#else
        u32 w[4];
#pragma unroll
        for (int k = 0; k < 4; k++) w[k] = C::from_f32(f[2 * k]) | (C::from_f32(f[2 * k + 1]) << 16);
        return v16_of(w);
#endif
    }
    static __device__ __forceinline__ void add(float* acc, V16 v) {
        u32 w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int k = 0; k < 4; k++) {
            acc[2 * k] += C::to_f32(w[k] & 0xffffu);
            acc[2 * k + 1] += C::to_f32(w[k] >> 16);
        }
    }
    static __device__ __forceinline__ bool has_sentinel(V16 v) { return halves_have_sentinel(v); }
    static __device__ __forceinline__ u32 canon_word(u32 w) {
#ifdef TPCOMM_HOST_FORMS
        return canon_halves_by_xor(w);
#else
        return canon_halves(w);
#endif
    }
};

struct Bf16Conversion {
    static __device__ __forceinline__ float to_f32(u32 h) { return bf16_to_f32(h); }
    static __device__ __forceinline__ u32 from_f32(float f) { return f32_to_bf16(f); }
};
struct F16Conversion {
    static __device__ __forceinline__ float to_f32(u32 h) { return f16_to_f32(h); }
    static __device__ __forceinline__ u32 from_f32(float f) { return f32_to_f16(f); }
};
typedef Halves<Bf16Conversion> BF16;
typedef Halves<F16Conversion> F16;

// ---------------------------------------------------------------- message access

// `A` is a family's kernel arguments: in and out (device pointers, 16-byte
// aligned) and nbytes. The last vector of a message may be partial: it is
// read element-wise (16-bit steps; every type's size is a multiple of 2) and
// padded with zeros, so a whole 16-byte vector is always sent (the
// receiver's arrival test stays per-vector), and only the message's own
// bytes of the output are written.
template <typename A>
__device__ __forceinline__ V16 load_input(const A& a, u64 i) {
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

template <typename A>
__device__ __forceinline__ void store_output(const A& a, u64 i, V16 v) {
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

// ---------------------------------------------------------------- launch order

// With programmatic dependent launch (sm_90+, opted into per launch by the
// host: src/cuda/pdl.rs), a kernel may start while the previous kernel on the
// stream is still draining: it must not read anything that kernel writes,
// nor the epoch, before this returns. Without that launch attribute it
// returns at once. Everything after it behaves as after an ordinary stream
// dependency. Every kernel calls it first, so any may be launched that way.
__device__ __forceinline__ void wait_for_previous_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Asks L2 for the line holding `p`: no value is read and nothing is ordered,
// so it is safe anywhere, also before wait_for_previous_kernel. A kernel
// prefetches its control words (and the delta kernel its shadows) first:
// between two all-reduces of a forward pass the weights streamed through L2
// have evicted them, and the load after the wait would go to DRAM while the
// wait itself (the previous kernel draining) can hide it. One thread per
// block asks for a shared line: every warp asking for it was measured slower
// at 16 tokens (bench/results/2026-11-30-h200x2-host-delta/).
__device__ __forceinline__ void prefetch_l2(const void* p) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

// Lets the next kernel on the stream, when it was launched overlapped, be
// scheduled now instead of when this grid exits: it then waits in its own
// wait_for_previous_kernel until this grid has finished and its writes are
// visible, so only its launch latency is hidden. Called after this grid's
// blocks are all running (each calls it), so they stay co-resident.
__device__ __forceinline__ void allow_next_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// A family's three entry points NAME_f32, NAME_f16 and NAME_bf16, each
// declared DECL (extern "C" __global__ and the family's launch bounds) and
// running FN for its element type on its argument of type ARGS.
#define TPCOMM_PER_TYPE(DECL, NAME, ARGS, FN)   \
    DECL NAME##_f32(ARGS a) { FN<F32>(a); }   \
    DECL NAME##_f16(ARGS a) { FN<F16>(a); }   \
    DECL NAME##_bf16(ARGS a) { FN<BF16>(a); }

// How a kernel whose control words are at `ctl` starts: one thread per block
// prefetches them, then it waits for the previous kernel and lets the next
// one be scheduled (see the three above).
__device__ __forceinline__ void begin_kernel(u64 ctl) {
    if (threadIdx.x == 0) prefetch_l2((const void*)ctl);
    wait_for_previous_kernel();
    allow_next_kernel();
}
