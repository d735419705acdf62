// All-reduce between GPUs without peer-to-peer access, through pinned host
// memory that every GPU maps (see docs/protocol-gpu.md, "Host path").
//
// Each rank owns one host area and is its only writer; peers only read it.
// A rank writes its contribution once (a push to host memory serves every
// peer), then reads the peers' contributions and sums all of them in rank
// order, so every rank gets bit-identical results.
//
// Two kernels:
// - delta (messages up to 2 MiB): each rank writes its contribution once
//   into its own area; every element differs from what the buffer held
//   there before (remembered in device-memory shadows), so readers see it
//   land and nothing is ever emptied. See `delta` below.
// - chunked (larger messages): plain data in chunks, one flag per chunk
//   written by the flag's thread after a block barrier and a system-scope
//   fence. Half the blocks (for 2 ranks) only produce: copy the input to
//   host memory, chunk after chunk, never waiting; the other blocks only
//   consume: wait for a chunk's flags, read the peers' chunks and reduce.
//   Device-to-host and host-to-device traffic so run at the same time.
//
// (A push kernel into sentinel-filled slots, an LL kernel with the epoch
// beside the data in every word and a fence by every thread of the chunked
// kernel were measured slower and deleted; git history keeps them.)
//
// Areas have two halves chosen by the epoch's parity: a rank starts call e+2
// only after every peer has written its part of call e+1, which a peer does
// only after it has finished call e, so a half is never rewritten while a
// peer still reads it.
//
// The epoch lives in device memory and is advanced by the kernel itself
// (graph replays stay correct). Every wait is bounded by %globaltimer and
// records which peer and epoch did not arrive in a host-mapped status word.
//
// No CUDA headers: NVRTC alone compiles this. common.cuh (integer names,
// limits, V16, the sentinel, volatile loads and flags, the timeout Status,
// the element types F32, BF16 and F16, message access) is compiled in front
// of this file, with TPCOMM_HOST_FORMS (V16 at 4-byte alignment and the
// 16-bit elements' forms these kernels were verified with; see common.cuh).

#define HG_BLOCK 512
#define HG_WAIT_CHUNK 5u
#define HG_WAIT_DELTA 7u
// Vectors per thread per step of the chunked kernel (loads in flight).
#define HG_UNROLL 4

// `HostKernelArgs` in src/cuda/kernel_args.rs.
struct HArgs {
    u64 in;
    u64 out;
    u64 nbytes;
    u64 areas[TPCOMM_MAX_WORLD];  // device addresses of every rank's host area
    u64 half_stride;          // bytes between the two parity halves
    u64 data_offset;          // chunked data, inside a half
    u64 flag_offset;          // chunk flags (u32 each), inside a half
    u64 chunk_bytes;          // multiple of 16
    u64 ctl;                  // device memory: HCtl
    u64 status;               // host-mapped: Status
    u64 timeout_ns;
    u64 delta_offset;         // the delta kernel's two buffers (after the halves)
    u64 slot_bytes;           // bytes of one delta buffer (multiple of 16)
    u64 shadow;               // delta: device memory, 2 x world shadows of slot_bytes
    u64 call_offset;          // this rank's call word, inside a half
    u64 call;                 // what this call is (common.cuh, call words)
    u32 rank;
    u32 world;
    u32 producers;  // chunked: blocks [0, producers) produce, the rest consume
};
TPCOMM_ARGS_CHECK_HArgs

struct HCtl {
    // Epoch in the bits above TPCOMM_EPOCH_SHIFT, arrivals of the current call below.
    u64 arrivals;
    u32 abort;
    u32 pad;
};

__device__ __forceinline__ void st_volatile_v4(void* p, V16 v) {
    asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(v.x), "r"(v.y),
                 "r"(v.z), "r"(v.w)
                 : "memory");
}

// ---------------------------------------------------------------- epochs, timeouts

// The checker (is_checker, common.cuh) also publishes this call's word in its
// own area's half of the epoch's parity, for the peers to compare (end_call).
__device__ __forceinline__ u64 read_epoch(const HArgs& a) {
    const u64 epoch = (ld_volatile_u64(&((const HCtl*)a.ctl)->arrivals) >> TPCOMM_EPOCH_SHIFT) + 1ull;
    if (a.call != 0ull && is_checker()) {
        volatile u64* w = (volatile u64*)(a.areas[a.rank] + (epoch & 1ull) * a.half_stride + a.call_offset);
        *w = call_word(a.call, epoch);
    }
    return epoch;
}

// The 32-bit tag of an epoch, never 0: zeroed memory that was never written
// must not look like a current word even after the counter wraps.
__device__ __forceinline__ u32 epoch_tag(u64 epoch) {
    return 1u + (u32)((epoch - 1ull) % 0xffffffffull);
}

__device__ __forceinline__ bool aborted(const HArgs& a) {
    return ld_volatile_u32(&((const HCtl*)a.ctl)->abort) != 0u;
}

// The first timeout of this rank is recorded; the abort word makes every
// other wait of this rank (this call and later ones) give up at once.
__device__ void report_timeout(const HArgs& a, u32 what, u32 peer, u64 epoch) {
    HCtl* ctl = (HCtl*)a.ctl;
    if (atomicCAS(&ctl->abort, 0u, 1u) == 0u) {
        volatile Status* s = (volatile Status*)a.status;
        s->peer = peer;
        s->epoch = epoch;
        __threadfence_system();
        s->code = what;
        __threadfence_system();
    }
}

// Checked on every 16th spin of a wait: true when the wait must end, because
// this rank gave up already or the wait passed the timeout (recorded as
// `what`, naming `peer` and the epoch).
__device__ __forceinline__ bool wait_over(const HArgs& a, u32 spins, u64 start, u32 what,
                                          u32 peer, u64 epoch) {
    if ((spins & 15u) != 0u) return false;
    if (aborted(a)) return true;
    if (globaltimer() - start > a.timeout_ns) {
        report_timeout(a, what, peer, epoch);
        return true;
    }
    return false;
}

// Each block adds 1 when it is done, block 0 adds one epoch unit minus the
// other blocks' ones: after the whole grid the epoch has advanced by one and
// the arrival bits are back at zero. The next call starts after this kernel
// completes, so all its blocks read the new epoch. An aborted block does not
// arrive, so a failed call never advances the epoch.
__device__ __forceinline__ void end_call(const HArgs& a, u64 epoch, bool ok) {
    // The checker (the thread that published ours in read_epoch) checks
    // that every peer made the same call.
    if (ok && a.call != 0ull && is_checker()) {
        HCtl* ctl = (HCtl*)a.ctl;
        const u64 at = (epoch & 1ull) * a.half_stride + a.call_offset;
        for (u32 q = 0; ok && q < a.world; q++)
            if (q != a.rank)
                ok = peer_call_agrees((const u64*)(a.areas[q] + at), &ctl->abort, a.status,
                                      a.timeout_ns, q, epoch, a.call);
    }
    const int failed = __syncthreads_or(!ok);
    if (threadIdx.x != 0 || failed) return;
    HCtl* ctl = (HCtl*)a.ctl;
    const u64 add = blockIdx.x == 0 ? TPCOMM_EPOCH_UNIT - (u64)(gridDim.x - 1) : 1ull;
    atomicAdd((unsigned long long*)&ctl->arrivals, add);
}

// ---------------------------------------------------------------- delta

// Delta words: no slot is ever emptied. Each rank writes its contribution
// once into its own area (buffer by the epoch's parity), and every element
// written differs from the element that buffer held before at that place,
// so a reader that remembers the previous content sees exactly when new data
// landed. The writer sends the data element itself unless it equals the
// previous content, then the sentinel (all-ones: canon data is never
// all-ones), which a reader decodes as "the previous value again". Both
// sides keep the previous content in device memory (shadows): the writer of
// its own buffers, a reader of every peer's; both started as the sentinel,
// as the host buffers did. Host traffic: the message's bytes once each way,
// no emptying pass. Per element (a 32-bit word, or each 16-bit half).
template <int H>
__device__ __forceinline__ u32 delta_encode_word(u32 w, u32 o) {
    if (!H) return w != o ? w : 0xffffffffu;
    const u32 lo = (w & 0xffffu) != (o & 0xffffu) ? (w & 0xffffu) : 0xffffu;
    const u32 hi = (w >> 16) != (o >> 16) ? (w >> 16) : 0xffffu;
    return lo | (hi << 16);
}

template <int H>
__device__ __forceinline__ bool delta_word_new(u32 x, u32 o) {
    const u32 d = x ^ o;
    if (!H) return d != 0u;
    return (d & 0xffffu) != 0u && (d >> 16) != 0u;
}

template <int H>
__device__ __forceinline__ u32 delta_decode_word(u32 x, u32 o) {
    if (!H) return x == 0xffffffffu ? o : x;
    const u32 lo = (x & 0xffffu) == 0xffffu ? (o & 0xffffu) : (x & 0xffffu);
    const u32 hi = (x >> 16) == 0xffffu ? (o >> 16) : (x >> 16);
    return lo | (hi << 16);
}

// The vector of f(a's word, b's word), word by word.
template <typename F>
__device__ __forceinline__ V16 zip_words(V16 a, V16 b, F f) {
    V16 r;
    r.x = f(a.x, b.x);
    r.y = f(a.y, b.y);
    r.z = f(a.z, b.z);
    r.w = f(a.w, b.w);
    return r;
}

template <typename T>
__device__ __forceinline__ V16 delta_encode(V16 v, V16 o) {
    return zip_words(v, o, [](u32 p, u32 q) { return delta_encode_word<T::HALVES>(p, q); });
}

template <typename T>
__device__ __forceinline__ bool delta_arrived(V16 x, V16 o) {
    return delta_word_new<T::HALVES>(x.x, o.x) && delta_word_new<T::HALVES>(x.y, o.y) &&
           delta_word_new<T::HALVES>(x.z, o.z) && delta_word_new<T::HALVES>(x.w, o.w);
}

template <typename T>
__device__ __forceinline__ V16 delta_decode(V16 x, V16 o) {
    return zip_words(x, o, [](u32 p, u32 q) { return delta_decode_word<T::HALVES>(p, q); });
}

// Waits until every element of the vector at `p` differs from `old`; false
// on timeout or abort.
template <typename T>
__device__ __noinline__ bool delta_wait(const HArgs& a, const V16* p, V16 old, u32 peer,
                                        u64 epoch, V16* out) {
    const u64 start = globaltimer();
    for (u32 spins = 1;; spins++) {
        V16 v = ld_volatile_v4(p);
        if (delta_arrived<T>(v, old)) {
            *out = v;
            return true;
        }
        if (wait_over(a, spins, start, HG_WAIT_DELTA, peer, epoch)) return false;
    }
}

// Buffer b (the epoch's parity) of rank q's area holds q's words of calls
// of that parity. A rank writes buffer b in call e only after finishing call
// e-1, in which it read every peer's words of e-1, which each peer wrote only
// after finishing call e-2: every reader is done with the buffer's previous
// content (the halves' rule). Mixing with the chunked kernel keeps this (its
// calls also read every peer).
template <typename T>
__device__ void delta(const HArgs& a) {
    const u64 nvec = (a.nbytes + 15) / 16;
    const u64 stride = (u64)gridDim.x * blockDim.x;
    const u64 first = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    const u64 cap = a.slot_bytes / 16;
    // The parity is not known before the wait: this rank's shadows of both.
    if (threadIdx.x == 0) prefetch_l2((const void*)a.ctl);
    if (first < nvec) {
        prefetch_l2((const V16*)a.shadow + a.rank * cap + first);
        prefetch_l2((const V16*)a.shadow + (a.world + a.rank) * cap + first);
    }
    wait_for_previous_kernel();
    allow_next_kernel();
    const u64 epoch = read_epoch(a);
    const u64 b = epoch & 1ull;
    V16* shadows = (V16*)a.shadow + b * a.world * cap;
    bool ok = !aborted(a);
    // Publish every vector of this thread before waiting for any.
    V16* mine = (V16*)(a.areas[a.rank] + a.delta_offset) + b * cap;
    V16* my_shadow = shadows + a.rank * cap;
    for (u64 i = first; i < nvec; i += stride) {
        const V16 raw = delta_encode<T>(canon<T>(load_input(a, i)), my_shadow[i]);
        st_volatile_v4(mine + i, raw);
        my_shadow[i] = raw;
    }
    for (u64 i = first; ok && i < nvec; i += stride) {
        float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
        for (u32 q = 0; q < a.world; q++) {
            V16 v;
            if (q == a.rank) {
                v = canon<T>(load_input(a, i));
            } else {
                V16* sh = shadows + q * cap + i;
                const V16 old = *sh;
                const V16* p = (const V16*)(a.areas[q] + a.delta_offset) + b * cap + i;
                V16 x = ld_volatile_v4(p);
                if (!delta_arrived<T>(x, old) && !delta_wait<T>(a, p, old, q, epoch, &x)) {
                    ok = false;
                    break;
                }
                *sh = x;
                v = delta_decode<T>(x, old);
            }
            T::add(acc, v);
        }
        if (ok) store_output(a, i, T::pack(acc));
    }
    end_call(a, epoch, ok);
}

// ---------------------------------------------------------------- chunked

// Thread 0 waits for flag `c` of every rank (a chunk's, here and in the
// host-path collectives), naming the wait `what` on timeout; the block
// learns the outcome through the barrier.
__device__ bool chunk_wait(const HArgs& a, u64 half, u64 c, u32 e, u64 epoch, u32 what) {
    __shared__ int ok_shared;
    if (threadIdx.x == 0) {
        int ok = 1;
        // Its own flag too: for an in-place call the producer must have read
        // this chunk of the input before the output overwrites it.
        for (u32 q = 0; ok && q < a.world; q++) {
            const u32* flag = (const u32*)(a.areas[q] + half + a.flag_offset) + c;
            if (ld_acquire_sys_u32(flag) == e) continue;
            const u64 start = globaltimer();
            for (u32 spins = 1;; spins++) {
                if (ld_acquire_sys_u32(flag) == e) break;
                if (wait_over(a, spins, start, what, q, epoch)) {
                    ok = 0;
                    break;
                }
            }
        }
        ok_shared = ok;
    }
    __syncthreads();
    const bool ok = ok_shared != 0;
    __syncthreads();
    return ok;
}

template <typename T>
__device__ void chunked(const HArgs& a) {
    begin_kernel(a.ctl);
    const u64 epoch = read_epoch(a);
    const u32 e = epoch_tag(epoch);
    const u64 half = (epoch & 1ull) * a.half_stride;
    const u64 nvec = (a.nbytes + 15) / 16;
    const u64 cvec = a.chunk_bytes / 16;
    const u64 nchunks = (nvec + cvec - 1) / cvec;
    const u32 producers = a.producers;
    bool ok = !aborted(a);
    if (blockIdx.x < producers) {
        // Producer: input -> own host area, chunk after chunk; a flag per
        // chunk once every thread's stores are fenced at system scope.
        V16* mine = (V16*)(a.areas[a.rank] + half + a.data_offset);
        u32* flags = (u32*)(a.areas[a.rank] + half + a.flag_offset);
        for (u64 c = blockIdx.x; c < nchunks; c += producers) {
            const u64 lo = c * cvec;
            const u64 hi = lo + cvec < nvec ? lo + cvec : nvec;
            for (u64 i = lo + threadIdx.x; i < hi; i += blockDim.x) mine[i] = load_input(a, i);
            // The barrier orders every thread's stores before thread 0's
            // fence, which is cumulative: one system fence per chunk.
            __syncthreads();
            if (threadIdx.x == 0) {
                __threadfence_system();
                st_release_sys_u32(flags + c, e);
            }
        }
    } else {
        const u32 consumers = gridDim.x - producers;
        const u32 me = blockIdx.x - producers;
        for (u64 c = me; ok && c < nchunks; c += consumers) {
            if (!chunk_wait(a, half, c, e, epoch, HG_WAIT_CHUNK)) {
                ok = false;
                break;
            }
            const u64 lo = c * cvec;
            const u64 hi = lo + cvec < nvec ? lo + cvec : nvec;
            for (u64 base = lo + threadIdx.x; base < hi; base += (u64)blockDim.x * HG_UNROLL) {
                float acc[HG_UNROLL][8];
#pragma unroll
                for (int u = 0; u < HG_UNROLL; u++)
#pragma unroll
                    for (int k = 0; k < 8; k++) acc[u][k] = 0.f;
                for (u32 q = 0; q < a.world; q++) {
                    V16 v[HG_UNROLL];
                    const V16* src = (const V16*)(a.areas[q] + half + a.data_offset);
#pragma unroll
                    for (int u = 0; u < HG_UNROLL; u++) {
                        const u64 i = base + (u64)u * blockDim.x;
                        if (i < hi) v[u] = q == a.rank ? load_input(a, i) : ld_volatile_v4(src + i);
                    }
#pragma unroll
                    for (int u = 0; u < HG_UNROLL; u++) {
                        const u64 i = base + (u64)u * blockDim.x;
                        if (i < hi) T::add(acc[u], v[u]);
                    }
                }
#pragma unroll
                for (int u = 0; u < HG_UNROLL; u++) {
                    const u64 i = base + (u64)u * blockDim.x;
                    if (i < hi) store_output(a, i, T::pack(acc[u]));
                }
            }
        }
    }
    end_call(a, epoch, ok);
}

#define HG_KERNEL extern "C" __global__ void __launch_bounds__(HG_BLOCK, 1)

TPCOMM_PER_TYPE(HG_KERNEL, tpcomm_host_delta, HArgs, delta)
TPCOMM_PER_TYPE(HG_KERNEL, tpcomm_host_chunked, HArgs, chunked)
