// tpcomm all-reduce kernels: one-shot push and two-shot (reduce-scatter +
// all-gather) over peer-mapped receive buffers. docs/protocol-gpu.md states the
// rules; this file follows them.
//
// common.cuh (integer names, limits, V16, volatile loads, the timeout Status,
// the element types F32, BF16 and F16, message access) is compiled in front
// of this file.
//
// Arrival is detected by self-validating words. Every receive slot holds the
// sentinel (all bits one: a NaN in f32, f16 and bf16 alike) when it is idle.
// Senders replace an element that happens to be all-ones by the same NaN with
// its sign bit cleared, so a NaN stays a NaN and every other value is sent
// unchanged. A receiver waits until no element of its 16-byte vector is the
// sentinel; each element is written exactly once per epoch, so the first
// non-sentinel value it sees is the final one and no flag or fence is needed
// for the data. After reading, the receiver writes the sentinel back, with a
// strong (relaxed, system-scope) store like the senders': a plain store
// racing with a peer's later write to the same slot is a data race in the
// PTX memory model. (Made strong while chasing the shared-GPU graph-replay
// timeout of ranks sharing one GPU; that timeout remains with strong resets too.)

// Timeout codes written to Status::code (mirrored in src/cuda/transport/p2p/comm.rs).
#define TPCOMM_WAIT_ONESHOT 1u
#define TPCOMM_WAIT_REDUCE_SCATTER 2u
#define TPCOMM_WAIT_ALL_GATHER 3u

// Per-rank control words in device memory, right behind the receive slots.
// Peers write only `calls` (each its own entry); the rest is this rank's.
struct Ctl {
    // Every call adds exactly TPCOMM_EPOCH_UNIT here once all its blocks are done
    // (block 0 adds TPCOMM_EPOCH_UNIT - (blocks - 1), every other block 1), so at the
    // start of a call arrivals / TPCOMM_EPOCH_UNIT is the number of calls completed:
    // the epoch. No block waits for an atomic's result.
    u64 arrivals;
    u32 unused;
    u32 abort;  // set once a wait timed out: every later wait gives up at once
    // Diagnosis (read by CudaCommunicator::timeout_detail, never by a
    // kernel's logic): when this rank's latest call started (block 0, with
    // its epoch) and when block 0 of a call last finished, all in
    // %globaltimer ns, the same clock for every rank of a machine.
    u64 started_ns;
    u64 started_epoch;
    u64 ended_ns;
    // Written by the first wait that times out: when, the slot as an atomic
    // read sees it then (a stale poll would differ from the last value
    // polled), and the peer's own words (its Ctl, at the same offset in its
    // allocation as ours in ours): had it started, or finished, the call?
    u64 gave_up_ns;
    u32 reread[4];
    u64 peer_arrivals;
    u64 peer_started_epoch;
    u64 peer_started_ns;
    u64 peer_ended_ns;
    // calls[epoch parity][peer]: peer's call word (common.cuh, call_word) of
    // its latest call of that parity, written by the peer when the call
    // starts, read by block 0 before the call counts as done.
    u64 calls[2][TPCOMM_MAX_WORLD];
};

// Kernel arguments, passed by value: `KernelArgs` in src/cuda/kernel_args.rs,
// whose layout TPCOMM_ARGS_CHECK_Args (args.cuh) checks.
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
    u64 call;                    // what this call is (common.cuh, call words)
    u32 rank;
    u32 world;
};
TPCOMM_ARGS_CHECK_Args

// ---------------------------------------------------------------- memory ops

// Stores to a peer go out as system-scope relaxed writes so they are not kept
// in this SM's L1 and reach the peer while this kernel still runs.
__device__ __forceinline__ void st_relaxed_sys(V16* p, V16 v) {
    asm volatile("st.relaxed.sys.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(v.x), "r"(v.y),
                 "r"(v.z), "r"(v.w)
                 : "memory");
}

__device__ __forceinline__ void st_relaxed_sys_u64(u64* p, u64 v) {
    asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

// ---------------------------------------------------------------- message access

// load_input and store_output (common.cuh) read and write the message.
__device__ __forceinline__ V16* slot_ptr(u64 base, u64 offset, u64 i) {
    return (V16*)(base + offset) + i;
}

// ---------------------------------------------------------------- bounded wait

// Records the first timeout of this rank (later ones are consequences) and
// raises the abort word so every other waiting thread gives up at once.
// Behind the Status (bytes 0-15) it leaves what a diagnosis needs (bytes
// 16-63, read by CudaCommunicator::timeout_detail): the address of the slot
// waited on, this rank's arrival counter when it gave up, the last value
// read from the slot, and the block and thread that waited.
__device__ void report_timeout(u64 ctl_addr, u64 status, u32 what, u32 peer, u64 epoch,
                               const V16* slot, V16 last, u64 peer_ctl) {
    Ctl* ctl = (Ctl*)ctl_addr;
    if (atomicCAS(&ctl->abort, 0u, 1u) == 0u) {
        ctl->gave_up_ns = globaltimer();
        u32* words = (u32*)slot;
        for (int k = 0; k < 4; k++) ctl->reread[k] = atomicOr(words + k, 0u);
        const Ctl* pc = (const Ctl*)peer_ctl;
        ctl->peer_arrivals = ld_volatile_u64(&pc->arrivals);
        ctl->peer_started_epoch = ld_volatile_u64(&pc->started_epoch);
        ctl->peer_started_ns = ld_volatile_u64(&pc->started_ns);
        ctl->peer_ended_ns = ld_volatile_u64(&pc->ended_ns);
        volatile Status* s = (volatile Status*)status;
        volatile u64* d = (volatile u64*)(status + 16);
        d[0] = (u64)slot;
        d[1] = ld_volatile_u64(&ctl->arrivals);
        volatile u32* w = (volatile u32*)(status + 32);
        w[0] = last.x;
        w[1] = last.y;
        w[2] = last.z;
        w[3] = last.w;
        w[4] = blockIdx.x;
        w[5] = threadIdx.x;
        s->peer = peer;
        s->epoch = epoch;
        __threadfence_system();
        s->code = what;
        __threadfence_system();
    }
}

// Where peer p's Ctl is mapped here: each rank's Ctl sits at the same offset
// of its allocation (right behind the receive slots), so at the offset of
// ours in ours. Read only by a wait that timed out (the diagnosis).
__device__ __forceinline__ u64 peer_ctl(const Args& a, u32 p) {
    return a.bufs[p] + (a.ctl - a.bufs[a.rank]);
}

// Polls the vector at `p` until it holds no sentinel, for at most the
// timeout, and returns it. Called once a first read found the sentinel, so
// the timer is read only on this slow path. When the wait timed out or
// another thread of this rank gave up, the result still holds a sentinel:
// callers test it with has_sentinel. Everything is passed by value: taking
// the address of the kernel's arguments or of the caller's vectors would put
// them in local memory.
template <typename T>
__device__ __noinline__ V16 wait_slow(const V16* p, u64 ctl_addr, u64 status, u64 timeout_ns, u32 what,
                                      u32 peer, u64 epoch, u64 peer_ctl) {
    const u64 start = globaltimer();
    const Ctl* ctl = (const Ctl*)ctl_addr;
    for (u32 spins = 1;; spins++) {
        const V16 v = ld_volatile_v4(p);
        if (!T::has_sentinel(v)) return v;
        // The clock and the abort word are read every 32nd round only, so
        // the common case polls the slot alone.
        if ((spins & 31u) == 0u) {
            if (ld_volatile_u32(&ctl->abort) != 0u) return v;
            if (globaltimer() - start > timeout_ns) {
                report_timeout(ctl_addr, status, what, peer, epoch, p, v, peer_ctl);
                return v;
            }
        }
    }
}

// ---------------------------------------------------------------- epochs


// Every thread reads the epoch when it starts (one broadcast load per warp);
// the blocks of the call advance it as they finish (see Ctl::arrivals). The
// next call on the stream starts only after this kernel has completed, so all
// of its blocks see the new value: the kernel itself keeps the count, which
// is what makes CUDA-graph replays of identical arguments correct.
// docs/protocol-gpu.md argues why two epoch buffers are enough.
__device__ __forceinline__ u64 read_epoch(const Args& a) {
    Ctl* ctl = (Ctl*)a.ctl;
    const u64 epoch = ld_volatile_u64(&ctl->arrivals) >> TPCOMM_EPOCH_SHIFT;
    // For the diagnosis of a timeout: two plain stores to local memory by
    // one thread of the call.
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        ctl->started_ns = globaltimer();
        ctl->started_epoch = epoch;
    }
    // This call's word to every peer (the peer's Ctl sits at the offset of
    // ours: peer_ctl), by the thread that checks the peers' words in
    // end_call (is_checker).
    if (a.call != 0ull && is_checker()) {
        const u64 w = call_word(a.call, epoch);
        const u64 off = (u64)((const char*)&ctl->calls[epoch & 1ull][a.rank] - (const char*)ctl);
        for (u32 p = 0; p < a.world; p++)
            if (p != a.rank) st_relaxed_sys_u64((u64*)(peer_ctl(a, p) + off), w);
    }
    return epoch;
}

// Every thread of the block reaches this (also after a failed wait), so the
// barrier is well-defined. A block that failed does not count itself, so an
// aborted call never advances the epoch; the abort word stops the waits of
// later calls.
__device__ __forceinline__ void end_call(const Args& a, u64 epoch, bool ok) {
    // The checker checks that every peer made the same call (read_epoch
    // sent ours). In a small call it has no data and checks while the
    // others work; in a large one the words arrived long before.
    if (ok && a.call != 0ull && is_checker()) {
        Ctl* ctl = (Ctl*)a.ctl;
        for (u32 p = 0; ok && p < a.world; p++)
            if (p != a.rank)
                ok = peer_call_agrees(&ctl->calls[epoch & 1ull][p], &ctl->abort, a.status,
                                      a.timeout_ns, p, epoch, a.call);
    }
    const int failed = __syncthreads_or(!ok);
    if (threadIdx.x != 0 || failed) return;
    Ctl* ctl = (Ctl*)a.ctl;
    if (blockIdx.x == 0) ctl->ended_ns = globaltimer();
    const u64 add = blockIdx.x == 0 ? TPCOMM_EPOCH_UNIT - (u64)(gridDim.x - 1) : 1ull;
    atomicAdd(&ctl->arrivals, add);
}

// ---------------------------------------------------------------- shared steps

// Vectors per thread per loop step: several independent loads in flight per
// thread hide the latency of HBM and of the link.
#define UNROLL 2

// Reduces, in rank order, up to UNROLL vectors: `own` for this rank and, for
// peer p, the local slot at base + p * peer_stride + 16 * k[u]. Resets every
// slot it read to the sentinel. Returns false if a peer did not arrive.
template <typename T>
__device__ __forceinline__ bool reduce_vectors(const Args& a, u64 epoch, u64 base, u64 peer_stride,
                                               const u64* k, int n, const V16* own, V16* result,
                                               u32 what) {
    float acc[UNROLL][T::E];
    for (u32 p = 0; p < a.world; p++) {
        V16 v[UNROLL];
        if (p == a.rank) {
#pragma unroll
            for (int u = 0; u < UNROLL; u++) v[u] = own[u];
        } else {
            V16* slot[UNROLL];
#pragma unroll
            for (int u = 0; u < UNROLL; u++) {
                slot[u] = (V16*)(base + (u64)p * peer_stride) + k[u];
                if (u < n) v[u] = ld_volatile_v4(slot[u]);
            }
#pragma unroll
            for (int u = 0; u < UNROLL; u++) {
                if (u < n && T::has_sentinel(v[u])) {
                    v[u] = wait_slow<T>(slot[u], a.ctl, a.status, a.timeout_ns, what, p, epoch, peer_ctl(a, p));
                    if (T::has_sentinel(v[u])) return false;
                }
            }
#pragma unroll
            for (int u = 0; u < UNROLL; u++)
                if (u < n) st_relaxed_sys(slot[u], sentinel_vec());
        }
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            float x[T::E];
            T::unpack(v[u], x);
            if (p == 0) {
#pragma unroll
                for (int e = 0; e < T::E; e++) acc[u][e] = x[e];
            } else {
#pragma unroll
                for (int e = 0; e < T::E; e++) acc[u][e] += x[e];
            }
        }
    }
#pragma unroll
    for (int u = 0; u < UNROLL; u++) result[u] = canon<T>(T::pack(acc[u]));
    return true;
}

// ---------------------------------------------------------------- one-shot

// Each rank pushes its whole input into its own slot of every peer's receive
// buffer, then reduces, in rank order, its own input and the slots of the
// others, reading local memory only. Thread t handles vectors t, t + S,
// t + 2S, ... (S = threads in the grid) in both phases, so in-place calls
// read each input vector before overwriting it.
template <typename T>
__device__ void oneshot(const Args& a) {
    begin_kernel(a.ctl);
    const u64 nvec = (a.nbytes + 15) / 16;
    const u64 stride = (u64)gridDim.x * blockDim.x;
    const u64 first = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    // The first input vector is loaded before the epoch so the two loads
    // overlap, and kept for the reduction (most small calls have one).
    V16 v0;
    if (first < nvec) v0 = canon<T>(load_input(a, first));
    const u64 epoch = read_epoch(a);
    const u64 buf_off = (epoch & 1ull) * a.epoch_stride;
    const u64 my_slot = buf_off + (u64)a.rank * a.slot_stride;

    for (u64 i0 = first; i0 < nvec; i0 += UNROLL * stride) {
        V16 v[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            const u64 i = i0 + u * stride;
            if (i < nvec) v[u] = i == first ? v0 : canon<T>(load_input(a, i));
        }
        for (u32 p = 0; p < a.world; p++) {
            if (p == a.rank) continue;
#pragma unroll
            for (int u = 0; u < UNROLL; u++) {
                const u64 i = i0 + u * stride;
                if (i < nvec) st_relaxed_sys(slot_ptr(a.bufs[p], my_slot, i), v[u]);
            }
        }
    }

    bool ok = true;
    const u64 base = a.bufs[a.rank] + buf_off;
    for (u64 i0 = first; ok && i0 < nvec; i0 += UNROLL * stride) {
        V16 own[UNROLL], r[UNROLL];
        u64 k[UNROLL];
        int n = 0;
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            k[u] = i0 + u * stride;
            if (k[u] < nvec) {
                own[u] = k[u] == first ? v0 : canon<T>(load_input(a, k[u]));
                n = u + 1;
            }
        }
        ok = reduce_vectors<T>(a, epoch, base, a.slot_stride, k, n, own, r, TPCOMM_WAIT_ONESHOT);
        if (!ok) break;
#pragma unroll
        for (int u = 0; u < UNROLL; u++)
            if (u < n) store_output(a, k[u], r[u]);
    }
    end_call(a, epoch, ok);
}

// One-shot for messages of at most one vector per thread of the grid: the
// same protocol as oneshot() in straight-line code with no loops over the
// message, so a small call runs few instructions (and misses the instruction
// cache less) on its latency-bound path.
template <typename T>
__device__ void oneshot_small(const Args& a) {
    begin_kernel(a.ctl);
    const u64 nvec = (a.nbytes + 15) / 16;
    const u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    const bool active = i < nvec;
    V16 own;
    if (active) own = canon<T>(load_input(a, i));
    const u64 epoch = read_epoch(a);
    const u64 buf_off = (epoch & 1ull) * a.epoch_stride;
    bool ok = true;
    if (active) {
        const u64 my_slot = buf_off + (u64)a.rank * a.slot_stride;
        for (u32 p = 0; p < a.world; p++)
            if (p != a.rank) st_relaxed_sys(slot_ptr(a.bufs[p], my_slot, i), own);
        const u64 base = a.bufs[a.rank] + buf_off;
        float acc[T::E];
        for (u32 p = 0; p < a.world; p++) {
            V16 v = own;
            if (p != a.rank) {
                V16* s = (V16*)(base + (u64)p * a.slot_stride) + i;
                v = ld_volatile_v4(s);
                if (T::has_sentinel(v)) {
                    v = wait_slow<T>(s, a.ctl, a.status, a.timeout_ns, TPCOMM_WAIT_ONESHOT, p, epoch, peer_ctl(a, p));
                    if (T::has_sentinel(v)) {
                        ok = false;
                        break;
                    }
                }
                st_relaxed_sys(s, sentinel_vec());
            }
            float x[T::E];
            T::unpack(v, x);
#pragma unroll
            for (int e = 0; e < T::E; e++) acc[e] = p == 0 ? x[e] : acc[e] + x[e];
        }
        if (ok) store_output(a, i, canon<T>(T::pack(acc)));
    }
    end_call(a, epoch, ok);
}

// ---------------------------------------------------------------- two-shot

// The message is cut into `world` shards of `per` vectors; rank q owns shard
// q. Reduce-scatter: each rank pushes every other shard into its owner's
// slot. The owner reduces its shard in rank order, writes it to its output
// and pushes the result into every peer's all-gather slot; every rank then
// waits for the other shards. Thread t handles shard offsets t, t + S, ... of
// every shard in every phase, so every thread works in every phase, and an
// in-place call reads each input vector before it overwrites it.
template <typename T>
__device__ void twoshot(const Args& a) {
    begin_kernel(a.ctl);
    const u64 nvec = (a.nbytes + 15) / 16;
    const u64 per = (nvec + a.world - 1) / a.world;
    const u64 stride = (u64)gridDim.x * blockDim.x;
    const u64 first = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    const u64 epoch = read_epoch(a);
    const u64 buf_off = (epoch & 1ull) * a.epoch_stride;
    const u64 mine = a.bufs[a.rank];
    // Vectors in shard q.
#define SHARD_LEN(q) ((u64)(q) * per >= nvec ? 0ull : (nvec - (u64)(q) * per < per ? nvec - (u64)(q) * per : per))

    // Reduce-scatter push: shard q goes to rank q's slot for this rank.
    for (u32 d = 1; d < a.world; d++) {
        const u32 q = (a.rank + d) % a.world;
        const u64 len = SHARD_LEN(q);
        const u64 off = buf_off + (u64)a.rank * a.shard_stride;
        for (u64 j0 = first; j0 < len; j0 += UNROLL * stride) {
            V16 v[UNROLL];
#pragma unroll
            for (int u = 0; u < UNROLL; u++) {
                const u64 j = j0 + u * stride;
                if (j < len) v[u] = canon<T>(load_input(a, q * per + j));
            }
#pragma unroll
            for (int u = 0; u < UNROLL; u++) {
                const u64 j = j0 + u * stride;
                if (j < len) st_relaxed_sys(slot_ptr(a.bufs[q], off, j), v[u]);
            }
        }
    }

    // Reduce the own shard; push the result to every peer's all-gather slot.
    bool ok = true;
    {
        const u64 len = SHARD_LEN(a.rank);
        const u64 lo = (u64)a.rank * per;
        const u64 ag = buf_off + a.ag_offset + (u64)a.rank * a.shard_stride;
        for (u64 j0 = first; ok && j0 < len; j0 += UNROLL * stride) {
            V16 own[UNROLL], r[UNROLL];
            u64 k[UNROLL];
            int n = 0;
#pragma unroll
            for (int u = 0; u < UNROLL; u++) {
                k[u] = j0 + u * stride;
                if (k[u] < len) {
                    own[u] = canon<T>(load_input(a, lo + k[u]));
                    n = u + 1;
                }
            }
            ok = reduce_vectors<T>(a, epoch, mine + buf_off, a.shard_stride, k, n, own, r,
                                   TPCOMM_WAIT_REDUCE_SCATTER);
            if (!ok) break;
            for (u32 p = 0; p < a.world; p++) {
                if (p == a.rank) continue;
#pragma unroll
                for (int u = 0; u < UNROLL; u++)
                    if (u < n) st_relaxed_sys(slot_ptr(a.bufs[p], ag, k[u]), r[u]);
            }
#pragma unroll
            for (int u = 0; u < UNROLL; u++)
                if (u < n) store_output(a, lo + k[u], r[u]);
        }
    }

    // All-gather: wait for every other shard and copy it out.
    for (u32 d = 1; ok && d < a.world; d++) {
        const u32 q = (a.rank + d) % a.world;
        const u64 len = SHARD_LEN(q);
        const u64 off = buf_off + a.ag_offset + (u64)q * a.shard_stride;
        for (u64 j0 = first; ok && j0 < len; j0 += UNROLL * stride) {
            V16 v[UNROLL];
            V16* slot[UNROLL];
#pragma unroll
            for (int u = 0; u < UNROLL; u++) {
                const u64 j = j0 + u * stride;
                slot[u] = slot_ptr(mine, off, j);
                if (j < len) v[u] = ld_volatile_v4(slot[u]);
            }
#pragma unroll
            for (int u = 0; u < UNROLL; u++) {
                const u64 j = j0 + u * stride;
                if (ok && j < len && T::has_sentinel(v[u])) {
                    v[u] = wait_slow<T>(slot[u], a.ctl, a.status, a.timeout_ns, TPCOMM_WAIT_ALL_GATHER, q, epoch, peer_ctl(a, q));
                    ok = !T::has_sentinel(v[u]);
                }
            }
            if (!ok) break;
#pragma unroll
            for (int u = 0; u < UNROLL; u++) {
                const u64 j = j0 + u * stride;
                if (j < len) {
                    st_relaxed_sys(slot[u], sentinel_vec());
                    store_output(a, q * per + j, v[u]);
                }
            }
        }
    }
#undef SHARD_LEN
    end_call(a, epoch, ok);
}

// ---------------------------------------------------------------- entry points

// The host launches TPCOMM_BLOCK threads per block; the bound makes the
// compiler fit the registers to it (a kernel that needs more registers than
// a block of that size can have fails to launch).
#define TPCOMM_BLOCK 512
#define KERNEL extern "C" __global__ void __launch_bounds__(TPCOMM_BLOCK, 1)
TPCOMM_PER_TYPE(KERNEL, tpcomm_oneshot, Args, oneshot)
TPCOMM_PER_TYPE(KERNEL, tpcomm_oneshot_small, Args, oneshot_small)
TPCOMM_PER_TYPE(KERNEL, tpcomm_twoshot, Args, twoshot)
