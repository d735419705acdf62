// tpcomm quantized one-shot all-reduce: int8 or fp8 (e4m3) codes with one
// f32 scale per group of G elements (G a power of two, 32-128) on the wire,
// f32 accumulation, the result rounded once to the element type.
// docs/quantized.md states the rules; src/quant/model.rs is the bit-exact CPU
// model of the arithmetic (quant_math.cu: same operations, same order, same
// rounding): change both together.
//
// common.cuh (integer names, limits, V16, volatile loads, acquire/release
// flags, globaltimer, Status, the element types' conversions, launch order)
// and quant_math.cu (the arithmetic the CPU model mirrors: codes, element
// loads and stores, group scales, rank-ordered sums) are compiled in front
// of this file.
//
// One kernel serves both GPU transports; only the addresses differ:
// - each rank writes its codes, scales and per-chunk flags to `ndst`
//   destinations: P2P, its own slot in every peer's receive area (world - 1
//   destinations); host path, its own pinned host area (one destination,
//   which every peer reads);
// - it reads peer p's contribution at `src[p]`: P2P, slot p of its own
//   receive area; host path, peer p's area. Its own codes it computes again
//   from its input instead of reading them back (same function, same bits).
// Each message is cut into chunks of Q_CHUNK elements. One-shot takes them
// Q_STEP at a time (a step): block b quantizes and sends steps b, b + grid,
// ..., and dequantizes and sums each Q_LAG step(s) later; a step's flag (the
// flag of its last chunk) is written after one system-scope fence, so a
// reader that sees it (acquire) sees the codes and scales of every chunk of
// the step. Two-shot flags chunk by chunk the same way.
// Flags carry the call's epoch tag, so they are never reset. Two parities of
// buffers alternate by epoch, for the reason docs/protocol-gpu.md gives for
// the exact kernels: a rank writes parity e % 2 for epoch e + 2 only after it
// finished epoch e + 1, which needed every peer's epoch e + 1 data, which
// each peer sent only after it had finished reading epoch e.

#define Q_CHUNK 4096u
// Timeout code written to Status::code (mirrored in src/cuda/quant/mod.rs).
#define Q_WAIT_QUANT 8u

// Per-rank control words in local device memory; the epoch is advanced by
// the kernel itself (arrivals / TPCOMM_EPOCH_UNIT calls completed), so CUDA graph
// replays stay correct.
struct QCtl {
    u64 arrivals;
    u32 unused;
    u32 abort;  // set once a wait timed out: every later wait gives up at once
};

// Kernel arguments, passed by value: `QuantArgs` in src/cuda/kernel_args.rs.
struct QArgs {
    u64 in;                  // device pointer, 16-byte aligned
    u64 out;                 // device pointer, 16-byte aligned (may equal in)
    u64 count;               // elements
    u64 dst[TPCOMM_MAX_WORLD];    // P2P: this rank's slot in rank q's area at dst[q] (dst[rank] unused); host: dst[0], its own area
    u64 src[TPCOMM_MAX_WORLD];    // where rank p's slot is read
    u64 parity_stride;       // bytes between the two parities of a slot
    u64 scales_off;          // scales (f32 per group) inside a slot
    u64 flags_off;           // flags (u32 per chunk) inside a slot
    u64 ctl;                 // QCtl* in local device memory
    u64 status;              // Status* in host-mapped memory
    u64 timeout_ns;          // bound on every wait
    u64 call_off;            // the sender's call word inside a slot
    u64 call;                // what this call is (common.cuh, call words)
    u32 rank;
    u32 world;
    u32 ndst;                // world (P2P) or 1 (host)
    u32 group;               // elements per scale: 32, 64 or 128
};
TPCOMM_ARGS_CHECK_QArgs

// ---------------------------------------------------------------- bounded wait

__device__ void q_report_timeout(u64 ctl_addr, u64 status, u32 peer, u64 epoch) {
    QCtl* ctl = (QCtl*)ctl_addr;
    if (atomicCAS(&ctl->abort, 0u, 1u) == 0u) {
        volatile Status* s = (volatile Status*)status;
        s->peer = peer;
        s->epoch = epoch;
        __threadfence_system();
        s->code = Q_WAIT_QUANT;
        __threadfence_system();
    }
}

// Waits until the flag holds `tag`, for at most the timeout; false when it
// timed out (reported) or another wait of this rank gave up.
__device__ __noinline__ bool q_wait_flag(const u32* flag, u32 tag, u64 ctl_addr, u64 status,
                                         u64 timeout_ns, u32 peer, u64 epoch) {
    if (ld_acquire_sys_u32(flag) == tag) return true;
    const u64 start = globaltimer();
    const QCtl* ctl = (const QCtl*)ctl_addr;
    for (u32 spins = 1;; spins++) {
        if (ld_acquire_sys_u32(flag) == tag) return true;
        if ((spins & 31u) == 0u) {
            if (ld_volatile_u32(&ctl->abort) != 0u) return false;
            if (globaltimer() - start > timeout_ns) {
                q_report_timeout(ctl_addr, status, peer, epoch);
                return false;
            }
        }
    }
}

// The epoch of this call; block 0's last thread also sends the call's word
// into this rank's slot at every destination (each peer's area, or the own
// host area), for the peers to compare (q_end_call).
__device__ __forceinline__ u64 q_begin(const QArgs& a) {
    const u64 epoch = ld_volatile_u64(&((const QCtl*)a.ctl)->arrivals) >> TPCOMM_EPOCH_SHIFT;
    if (a.call != 0ull && blockIdx.x == 0 && threadIdx.x == blockDim.x - 1) {
        const u64 at = (epoch & 1ull) * a.parity_stride + a.call_off;
        const u64 w = call_word(a.call, epoch);
        for (u32 q = 0; q < a.ndst; q++)
            if (a.ndst == 1u || q != a.rank) *(volatile u64*)(a.dst[q] + at) = w;
    }
    return epoch;
}

// A block that failed does not count itself, so an aborted call never
// advances the epoch. Block 0's last thread (the one that sent ours in
// q_begin) first checks that every peer made the same call.
__device__ __forceinline__ void q_end_call(const QArgs& a, u64 epoch, bool ok) {
    if (ok && a.call != 0ull && blockIdx.x == 0 && threadIdx.x == blockDim.x - 1) {
        QCtl* ctl = (QCtl*)a.ctl;
        const u64 at = (epoch & 1ull) * a.parity_stride + a.call_off;
        for (u32 p = 0; ok && p < a.world; p++)
            if (p != a.rank)
                ok = peer_call_agrees((const u64*)(a.src[p] + at), &ctl->abort, a.status, a.timeout_ns,
                                      p, epoch, a.call);
    }
    const int failed = __syncthreads_or(!ok);
    if (threadIdx.x != 0 || failed) return;
    QCtl* ctl = (QCtl*)a.ctl;
    const u64 add = blockIdx.x == 0 ? TPCOMM_EPOCH_UNIT - (u64)(gridDim.x - 1) : 1ull;
    atomicAdd(&ctl->arrivals, add);
}

// ---------------------------------------------------------------- one-shot

// Steps a one-shot block sends ahead of the one it sums: its stores to the
// peers (or the host) drain while it reads, so both directions of the link
// work at once. One step (4 chunks) measured faster than two at 16-64 MiB
// over the host path on one H200 (2-5%, bench/results/quantized.md).
#define Q_LAG 1u

// Quantizes the octet at e0 (elements past n count as 0): its 8 codes and
// its group's scale. Every lane of the warp must call it together (the
// group's maximum goes through the lanes of the group).
template <typename T, int FMT>
__device__ __forceinline__ u64 quantize8(const QArgs& a, u64 e0, u32 lanes, float* scale_out) {
    float x[8];
    T::load8(a.in, e0, a.count, x);
    return quantize8_values<FMT>(x, lanes, scale_out);
}

// Whether destination d receives a send meant for `target` (a rank, or
// Q_ALL for every peer): on the host path the one destination is the own
// area, which every peer reads.
#define Q_ALL 0xffffffffu
__device__ __forceinline__ bool q_sends_to(const QArgs& a, u32 d, u32 target) {
    if (a.ndst == 1u) return true;
    return d != a.rank && (target == Q_ALL || d == target);
}

// Writes one octet's codes (and, from the group's first lane, its scale) to
// the destinations of `target`.
__device__ __forceinline__ void put_octet(const QArgs& a, u64 par, u32 target, u64 e0, u64 codes, float scale,
                                          bool group_head, u32 gshift) {
    for (u32 d = 0; d < a.ndst; d++) {
        if (!q_sends_to(a, d, target)) continue;
        const u64 base = a.dst[d] + par;
        *(u64*)(base + e0) = codes;
        if (group_head) *(u32*)(base + a.scales_off + 4ull * (e0 >> gshift)) = __float_as_uint(scale);
    }
}

// After a chunk's octets: the barrier orders every thread's stores before
// thread 0's fence, which is cumulative: one system fence per chunk, then
// the flags of the destinations of `target`.
__device__ __forceinline__ void flag_chunk(const QArgs& a, u64 par, u32 target, u64 c, u32 tag) {
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence_system();
        for (u32 d = 0; d < a.ndst; d++)
            if (q_sends_to(a, d, target)) st_release_sys_u32((u32*)(a.dst[d] + par + a.flags_off) + c, tag);
    }
}

// Quantizes chunk c of the input and sends it to `target` (Q_ALL: every peer).
template <typename T, int FMT>
__device__ __forceinline__ void send_chunk(const QArgs& a, u64 c, u64 par, u32 tag, u32 lanes, u32 gshift,
                                           u32 target) {
    const bool group_head = (threadIdx.x & (lanes - 1u)) == 0u;
    for (u32 off = 8u * threadIdx.x; off < Q_CHUNK; off += 8u * blockDim.x) {
        const u64 e0 = (u64)c * Q_CHUNK + off;
        float scale;
        const u64 codes = quantize8<T, FMT>(a, e0, lanes, &scale);
        if (e0 < a.count) put_octet(a, par, target, e0, codes, scale, group_head, gshift);
    }
    flag_chunk(a, par, target, c, tag);
}

// Waits (thread 0) until chunk c's flag of every rank in `from` (a bit per
// rank) holds the tag; false, on every thread, when one did not arrive.
__device__ __forceinline__ bool wait_chunk(const QArgs& a, u64 c, u64 par, u32 tag, u32 from, u64 epoch) {
    bool arrived = true;
    if (threadIdx.x == 0) {
        for (u32 p = 0; arrived && p < a.world; p++)
            if ((from >> p) & 1u)
                arrived = q_wait_flag((const u32*)(a.src[p] + par + a.flags_off) + c, tag, a.ctl, a.status,
                                      a.timeout_ns, p, epoch);
    }
    return __syncthreads_and(arrived) != 0;
}

// The rank-ordered f32 sum of every rank's codes of the octet at e0: peer
// p's read from src[p], this rank's own given.
template <int FMT>
__device__ __forceinline__ void sum_octet(const QArgs& a, u64 par, u64 e0, u64 own, float own_scale, u32 gshift,
                                          float* acc) {
    for (u32 p = 0; p < a.world; p++) {
        u64 codes = own;
        float scale = own_scale;
        if (p != a.rank) {
            const u64 base = a.src[p] + par;
            codes = ld_volatile_u64((const u64*)(base + e0));
            scale = __uint_as_float(ld_volatile_u32((const u32*)(base + a.scales_off + 4ull * (e0 >> gshift))));
        }
        add_octet<FMT>(acc, codes, scale, p == 0);
    }
}

// Chunks a block handles at once in one-shot (a step): one octet of each
// per thread, their loads in flight together, one fence, one flag and one
// wait per peer for all of them. Mirrored by STEP_CHUNKS in
// src/cuda/quant/mod.rs. On one H200 with 2 ranks over the host path, 4
// chunks a step with one flag took 0.71-0.83x the time of a chunk at a time
// with a flag each at 4-64 MiB, 0.51-0.63x the exact call's time
// (bench/results/quantized.md, session 12).
#define Q_STEP 4

// The chunk whose flag stands for the step starting at chunk c0: its last
// (the sender writes only it, the readers wait only for it).
__device__ __forceinline__ u64 step_flag(u64 c0, u64 nchunks) {
    return (c0 + Q_STEP < nchunks ? c0 + Q_STEP : nchunks) - 1;
}

// The most scales a step has (the smallest group, 32 elements).
#define Q_STEP_SCALES (Q_STEP * Q_CHUNK / 32u)

// The scales of step s's chunks that are inside the message: how many
// 16-byte vectors of them, and the index of the first scale.
__device__ __forceinline__ u32 step_scale_vecs(u64 c0, u64 nchunks, u32 gshift) {
    const u64 chunks = (c0 + Q_STEP < nchunks ? c0 + Q_STEP : nchunks) - c0;
    return (u32)((chunks * Q_CHUNK) >> gshift) / 4u;
}

// Quantizes step s's chunks (s * Q_STEP, ...) and sends them to every peer,
// then flags them after one barrier and one system fence. The codes go out
// as each thread makes them; the scales are gathered in shared memory and
// go out after the barrier as whole 16-byte vectors (a group head's 4-byte
// store was a write of 16 bytes a warp over the link).
template <typename T, int FMT>
__device__ __forceinline__ void send_step(const QArgs& a, u64 s, u64 nchunks, u64 par, u32 tag, u32 lanes,
                                          u32 gshift) {
    __shared__ __align__(16) float s_scales[Q_STEP_SCALES];
    const bool group_head = (threadIdx.x & (lanes - 1u)) == 0u;
    const u64 c0 = s * Q_STEP;
    for (u32 off = 8u * threadIdx.x; off < Q_CHUNK; off += 8u * blockDim.x) {
        float x[Q_STEP][8];
#pragma unroll
        for (int j = 0; j < Q_STEP; j++) T::load8(a.in, (c0 + j) * Q_CHUNK + off, a.count, x[j]);
#pragma unroll
        for (int j = 0; j < Q_STEP; j++) {
            const u64 e0 = (c0 + j) * Q_CHUNK + off;
            float scale;
            const u64 codes = quantize8_values<FMT>(x[j], lanes, &scale);
            if (e0 < a.count) put_octet(a, par, Q_ALL, e0, codes, scale, false, gshift);
            if (group_head) s_scales[(j * Q_CHUNK + off) >> gshift] = scale;
        }
    }
    __syncthreads();
    const u32 nvec = step_scale_vecs(c0, nchunks, gshift);
    const u64 first = (c0 * Q_CHUNK) >> gshift;
    for (u32 i = threadIdx.x; i < nvec; i += blockDim.x) {
        const V16 v = ((const V16*)s_scales)[i];
        for (u32 d = 0; d < a.ndst; d++)
            if (q_sends_to(a, d, Q_ALL)) *(V16*)(a.dst[d] + par + a.scales_off + 4ull * first + 16ull * i) = v;
    }
    __syncthreads();
    // One flag per step, its last chunk's: the release after the fence
    // publishes every chunk of the step.
    if (threadIdx.x == 0) {
        __threadfence_system();
        const u64 last = step_flag(c0, nchunks);
        for (u32 d = 0; d < a.ndst; d++)
            if (q_sends_to(a, d, Q_ALL)) st_release_sys_u32((u32*)(a.dst[d] + par + a.flags_off) + last, tag);
    }
}

// Waits for step s's chunks from every peer, then dequantizes every rank's
// codes and sums them in rank order; this rank's own codes are quantized
// again from its input (the same function, so the same bits) instead of
// read back. False when a peer did not arrive.
template <typename T, int FMT>
__device__ __forceinline__ bool sum_step(const QArgs& a, u64 s, u64 nchunks, u64 par, u32 tag, u32 lanes,
                                         u32 gshift, u64 epoch) {
    const u32 peers = ((1u << a.world) - 1u) & ~(1u << a.rank);
    const u64 c0 = s * Q_STEP;
    // Thread p waits for peer p's flag of the step (its last chunk's), the
    // peers at once.
    bool arrived = true;
    if (threadIdx.x < a.world && ((peers >> threadIdx.x) & 1u)) {
        const u64 last = step_flag(c0, nchunks);
        arrived = q_wait_flag((const u32*)(a.src[threadIdx.x] + par + a.flags_off) + last, tag, a.ctl, a.status,
                              a.timeout_ns, threadIdx.x, epoch);
    }
    if (!__syncthreads_and(arrived)) return false;
    // Per peer: this thread's codes of the step, and the block's copy of
    // the peer's scales of the step in shared memory, read as 16-byte
    // vectors (a warp's groups' scales were one 16-byte read over the
    // link); both reads in flight together, one barrier before the scales
    // are used and one after.
    __shared__ __align__(16) float s_peer_scales[Q_STEP_SCALES];
    const u32 nvec = step_scale_vecs(c0, nchunks, gshift);
    const u64 first = (c0 * Q_CHUNK) >> gshift;
    for (u32 off = 8u * threadIdx.x; off < Q_CHUNK; off += 8u * blockDim.x) {
        u64 own[Q_STEP];
        float own_scale[Q_STEP];
        {
            float x[Q_STEP][8];
#pragma unroll
            for (int j = 0; j < Q_STEP; j++) T::load8(a.in, (c0 + j) * Q_CHUNK + off, a.count, x[j]);
#pragma unroll
            for (int j = 0; j < Q_STEP; j++) own[j] = quantize8_values<FMT>(x[j], lanes, &own_scale[j]);
        }
        float acc[Q_STEP][8];
        for (u32 p = 0; p < a.world; p++) {
            u64 codes[Q_STEP];
            float scale[Q_STEP];
            if (p == a.rank) {
#pragma unroll
                for (int j = 0; j < Q_STEP; j++) {
                    codes[j] = own[j];
                    scale[j] = own_scale[j];
                }
            } else {
#pragma unroll
                for (int j = 0; j < Q_STEP; j++) {
                    const u64 e0 = (c0 + j) * Q_CHUNK + off;
                    codes[j] = e0 < a.count ? ld_volatile_u64((const u64*)(a.src[p] + par + e0)) : 0ull;
                }
                const u64 at = a.src[p] + par + a.scales_off + 4ull * first;
                for (u32 i = threadIdx.x; i < nvec; i += blockDim.x)
                    ((V16*)s_peer_scales)[i] = ld_volatile_v4((const void*)(at + 16ull * i));
                __syncthreads();
#pragma unroll
                for (int j = 0; j < Q_STEP; j++) scale[j] = s_peer_scales[(j * Q_CHUNK + off) >> gshift];
                __syncthreads();
            }
#pragma unroll
            for (int j = 0; j < Q_STEP; j++) add_octet<FMT>(acc[j], codes[j], scale[j], p == 0);
        }
#pragma unroll
        for (int j = 0; j < Q_STEP; j++) {
            const u64 e0 = (c0 + j) * Q_CHUNK + off;
            if (e0 < a.count) T::store8(a.out, e0, a.count, acc[j]);
        }
    }
    return true;
}

// Block b handles steps b, b + grid, ... (step s: chunks s * Q_STEP, ...):
// it sends each and sums the one Q_LAG steps behind, then the last ones.
// Thread t handles the octets t, t + blockDim, ... of a chunk (blockDim a
// power of two from 32 to 512, so a chunk is whole warps and a group's
// G / 8 octets are neighbouring lanes). No wait cycle: sending step s waits
// only for sums of smaller steps, each of which waits only for sends of
// itself (induction on s); every block of every rank is resident
// (quant_grid in src/cuda/quant/mod.rs). In place: a chunk's input is read
// (sent, then quantized again in the sum) before the same block writes its
// output, each thread its own octets.
template <typename T, int FMT>
__device__ void quant_oneshot(const QArgs& a) {
    begin_kernel(a.ctl);
    const u64 nchunks = (a.count + Q_CHUNK - 1) / Q_CHUNK;
    const u64 nsteps = (nchunks + Q_STEP - 1) / Q_STEP;
    const u64 epoch = q_begin(a);
    const u64 par = (epoch & 1ull) * a.parity_stride;
    const u32 tag = (u32)(epoch & 0x3fffffffull) + 1u;  // never 0, the flags' initial value
    const u32 lanes = a.group / 8u;                     // threads per group
    u32 gshift = 0u;  // log2(group): the scale of element e is scales[e >> gshift]
    while ((1u << gshift) < a.group) gshift++;

    bool ok = true;
    u64 next_sum = blockIdx.x;
    u32 step = 0u;
    for (u64 s = blockIdx.x; ok && s < nsteps; s += gridDim.x, step++) {
        send_step<T, FMT>(a, s, nchunks, par, tag, lanes, gshift);
        if (step >= Q_LAG) {
            ok = sum_step<T, FMT>(a, next_sum, nchunks, par, tag, lanes, gshift, epoch);
            next_sum += gridDim.x;
        }
    }
    for (; ok && next_sum < nsteps; next_sum += gridDim.x)
        ok = sum_step<T, FMT>(a, next_sum, nchunks, par, tag, lanes, gshift, epoch);
    q_end_call(a, epoch, ok);
}

// ---------------------------------------------------------------- two-shot

template <typename T, int FMT>
__device__ __forceinline__ void store_dequantized(const QArgs& a, u64 e0, u64 codes, float scale) {
    float v[8];
#pragma unroll
    for (int k = 0; k < 8; k++) v[k] = q_mul(q_decode<FMT>((u32)(codes >> (8 * k)) & 0xffu), scale);
    T::store8(a.out, e0, a.count, v);
}

// Chunk c belongs to rank c % world. Reduce-scatter: every rank quantizes
// the chunks of the others and sends each to its owner. The owner sums its
// chunks in rank order (its own codes computed again from its input, as in
// one-shot), quantizes the f32 sums again, sends those codes to every peer
// (all-gather) and writes their dequantized values (not the sums) as its
// output; every rank dequantizes the owners' codes of the other chunks. So
// every rank's output is the same bits. Needs every rank to own a chunk
// (src/quant/model.rs twoshot_fits; the host runs smaller messages
// one-shot), so each rank hears from every peer in every call, which the
// reuse of the two parities needs. A slot holds both phases: in rank q's
// copy of rank s's slot, chunks q owns carry s's reduce-scatter codes and
// chunks s owns carry s's all-gather codes. Waits: reduce-scatter data is
// sent before any wait; all-gather data after reduce-scatter waits only.
template <typename T, int FMT>
__device__ void quant_twoshot(const QArgs& a) {
    begin_kernel(a.ctl);
    const u64 nchunks = (a.count + Q_CHUNK - 1) / Q_CHUNK;
    const u64 epoch = q_begin(a);
    const u64 par = (epoch & 1ull) * a.parity_stride;
    const u32 tag = (u32)(epoch & 0x3fffffffull) + 1u;
    const u32 lanes = a.group / 8u;
    const bool group_head = (threadIdx.x & (lanes - 1u)) == 0u;
    u32 gshift = 0u;
    while ((1u << gshift) < a.group) gshift++;
    const u32 peers = ((1u << a.world) - 1u) & ~(1u << a.rank);

    // Reduce-scatter sends.
    for (u64 c = blockIdx.x; c < nchunks; c += gridDim.x) {
        const u32 owner = (u32)(c % a.world);
        if (owner != a.rank) send_chunk<T, FMT>(a, c, par, tag, lanes, gshift, owner);
    }
    // The own chunks: sum, quantize again, send to every peer, write.
    bool ok = true;
    for (u64 c = blockIdx.x; ok && c < nchunks; c += gridDim.x) {
        if ((u32)(c % a.world) != a.rank) continue;
        ok = wait_chunk(a, c, par, tag, peers, epoch);
        if (!ok) break;
        for (u32 off = 8u * threadIdx.x; off < Q_CHUNK; off += 8u * blockDim.x) {
            const u64 e0 = (u64)c * Q_CHUNK + off;
            float own_scale;
            const u64 own = quantize8<T, FMT>(a, e0, lanes, &own_scale);
            float acc[8];
            if (e0 < a.count) {
                sum_octet<FMT>(a, par, e0, own, own_scale, gshift, acc);
            } else {
#pragma unroll
                for (int k = 0; k < 8; k++) acc[k] = 0.0f;
            }
            // Past the message the sums are 0 (the inputs are), so they do
            // not change a group's maximum.
#pragma unroll
            for (int k = 0; k < 8; k++)
                if (e0 + k >= a.count) acc[k] = 0.0f;
            float scale;
            const u64 codes = quantize8_values<FMT>(acc, lanes, &scale);
            if (e0 < a.count) {
                put_octet(a, par, Q_ALL, e0, codes, scale, group_head, gshift);
                store_dequantized<T, FMT>(a, e0, codes, scale);
            }
        }
        flag_chunk(a, par, Q_ALL, c, tag);
    }
    // All-gather: the other chunks, from their owners.
    for (u64 c = blockIdx.x; ok && c < nchunks; c += gridDim.x) {
        const u32 owner = (u32)(c % a.world);
        if (owner == a.rank) continue;
        ok = wait_chunk(a, c, par, tag, 1u << owner, epoch);
        if (!ok) break;
        for (u32 off = 8u * threadIdx.x; off < Q_CHUNK; off += 8u * blockDim.x) {
            const u64 e0 = (u64)c * Q_CHUNK + off;
            if (e0 >= a.count) break;
            const u64 base = a.src[owner] + par;
            const u64 codes = ld_volatile_u64((const u64*)(base + e0));
            const float scale =
                __uint_as_float(ld_volatile_u32((const u32*)(base + a.scales_off + 4ull * (e0 >> gshift))));
            store_dequantized<T, FMT>(a, e0, codes, scale);
        }
    }
    q_end_call(a, epoch, ok);
}

// ---------------------------------------------------------------- entry points

#define Q_BLOCK 512
// Blocks per SM the register budget must allow (Q_STEP octets per thread in
// flight take registers; one block per SM would halve the grid).
#define Q_MINB 2
#define QKERNEL extern "C" __global__ void __launch_bounds__(Q_BLOCK, Q_MINB)
QKERNEL tpcomm_quant_oneshot_int8_f32(QArgs a) { quant_oneshot<QF32, Q_INT8>(a); }
QKERNEL tpcomm_quant_oneshot_int8_f16(QArgs a) { quant_oneshot<QF16, Q_INT8>(a); }
QKERNEL tpcomm_quant_oneshot_int8_bf16(QArgs a) { quant_oneshot<QBF16, Q_INT8>(a); }
QKERNEL tpcomm_quant_oneshot_fp8_f32(QArgs a) { quant_oneshot<QF32, Q_FP8>(a); }
QKERNEL tpcomm_quant_oneshot_fp8_f16(QArgs a) { quant_oneshot<QF16, Q_FP8>(a); }
QKERNEL tpcomm_quant_oneshot_fp8_bf16(QArgs a) { quant_oneshot<QBF16, Q_FP8>(a); }
QKERNEL tpcomm_quant_twoshot_int8_f32(QArgs a) { quant_twoshot<QF32, Q_INT8>(a); }
QKERNEL tpcomm_quant_twoshot_int8_f16(QArgs a) { quant_twoshot<QF16, Q_INT8>(a); }
QKERNEL tpcomm_quant_twoshot_int8_bf16(QArgs a) { quant_twoshot<QBF16, Q_INT8>(a); }
QKERNEL tpcomm_quant_twoshot_fp8_f32(QArgs a) { quant_twoshot<QF32, Q_FP8>(a); }
QKERNEL tpcomm_quant_twoshot_fp8_f16(QArgs a) { quant_twoshot<QF16, Q_FP8>(a); }
QKERNEL tpcomm_quant_twoshot_fp8_bf16(QArgs a) { quant_twoshot<QBF16, Q_FP8>(a); }
