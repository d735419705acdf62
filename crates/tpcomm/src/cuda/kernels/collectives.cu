// tpcomm all-gather, reduce-scatter and broadcast over the P2P all-reduce's
// receive buffers and epoch. Compiled after allreduce.cu (compile.rs,
// COLLECTIVES_SRC), whose Args, Ctl, element types, slot_ptr, wait_slow,
// reduce_vectors, read_epoch and end_call these kernels use, so they share
// its epoch counter and mix freely with its all-reduces, in CUDA graphs too.
//
// Rules (docs/protocol-gpu.md, "Other collectives"): in every call each rank
// writes only into its own slot (slot `rank`) of each peer's epoch buffer,
// each receiver resets every slot vector it read to the sentinel, and every
// rank receives something from every peer before it finishes the call. That
// last rule is what makes two epoch buffers enough for the all-reduce, and it
// holds here too: all-gather and reduce-scatter receive data from every peer,
// and in a broadcast the ranks other than the root send every peer a token
// (one zero vector), so the root cannot run two calls ahead of a slow reader.
//
// `Args::nbytes` is one rank's block: the all-gather's input, the
// reduce-scatter's output, the broadcast's message. Blocks of the gathered
// output and of the scattered input sit nbytes apart, so they need not be
// 16-byte aligned: block_load and block_store fall back to 16-bit accesses.

// Timeout codes written to Status::code (mirrored in src/cuda/collectives.rs).
#define TPCOMM_WAIT_COLL_ALL_GATHER 5u
#define TPCOMM_WAIT_COLL_REDUCE_SCATTER 6u
#define TPCOMM_WAIT_COLL_BROADCAST 7u

// Kernel argument, passed by value: `CollArgs` in src/cuda/kernel_args.rs.
struct CollArgs {
    Args base;
    u32 root;  // broadcast: the rank whose input every rank receives
    u32 pad;
};
TPCOMM_ARGS_CHECK_CollArgs

// Waits for vector i of peer p's slot in this rank's buffer, resets it to the
// sentinel and returns it; `ok` turns false when the peer did not arrive.
template <typename T>
__device__ __forceinline__ V16 coll_receive(const Args& a, u64 base, u32 p, u64 i, u64 epoch, u32 what,
                                            bool& ok) {
    V16* s = slot_ptr(base, (u64)p * a.slot_stride, i);
    V16 v = ld_volatile_v4(s);
    if (T::has_sentinel(v)) {
        v = wait_slow<T>(s, a.ctl, a.status, a.timeout_ns, what, p, epoch, peer_ctl(a, p));
        if (T::has_sentinel(v)) {
            ok = false;
            return v;
        }
    }
    st_relaxed_sys(s, sentinel_vec());
    return v;
}

// Where a collective call of this thread stands: the message's vectors, the
// grid's stride, this thread's first vector, the call's epoch, its buffer's
// offset and this rank's slot in it.
struct CollPlace {
    u64 nvec, stride, first, epoch, buf_off, my_slot;
};

// How every collective kernel starts: begin_kernel, then its place.
__device__ __forceinline__ CollPlace coll_begin(const Args& a) {
    begin_kernel(a.ctl);
    CollPlace c;
    c.nvec = (a.nbytes + 15) / 16;
    c.stride = (u64)gridDim.x * blockDim.x;
    c.first = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    c.epoch = read_epoch(a);
    c.buf_off = (c.epoch & 1ull) * a.epoch_stride;
    c.my_slot = c.buf_off + (u64)a.rank * a.slot_stride;
    return c;
}

// Every rank pushes its block into its slot of every peer's buffer and into
// its own block of the output, then copies every peer's slot into that
// peer's block. All ranks write the canon form of each block (an all-ones
// element arrives as the same NaN with the sign bit cleared), so the outputs
// are the same bytes on every rank. In place (in == out + rank * nbytes)
// each thread reads its own vectors before writing them.
template <typename T>
__device__ void coll_all_gather(const CollArgs& c) {
    const Args& a = c.base;
    const auto [nvec, stride, first, epoch, buf_off, my_slot] = coll_begin(a);
    for (u64 i = first; i < nvec; i += stride) {
        const V16 v = canon<T>(block_load(a.in, a.nbytes, i));
        for (u32 p = 0; p < a.world; p++)
            if (p != a.rank) st_relaxed_sys(slot_ptr(a.bufs[p], my_slot, i), v);
        block_store(a.out + (u64)a.rank * a.nbytes, a.nbytes, i, v);
    }
    bool ok = true;
    const u64 base = a.bufs[a.rank] + buf_off;
    for (u32 d = 1; ok && d < a.world; d++) {
        const u32 p = (a.rank + d) % a.world;
        for (u64 i = first; ok && i < nvec; i += stride) {
            const V16 v = coll_receive<T>(a, base, p, i, epoch, TPCOMM_WAIT_COLL_ALL_GATHER, ok);
            if (ok) block_store(a.out + (u64)p * a.nbytes, a.nbytes, i, v);
        }
    }
    end_call(a, epoch, ok);
}

// Every rank pushes block q of its input into its slot of rank q's buffer,
// then reduces block `rank` over the ranks in rank order (its own from its
// input), exactly as the all-reduce kernels reduce: the result has the bits
// of that block of an all-reduce of the same inputs. In place (out == in +
// rank * nbytes) only block `rank` is written, by the thread that read it.
template <typename T>
__device__ void coll_reduce_scatter(const CollArgs& c) {
    const Args& a = c.base;
    const auto [nvec, stride, first, epoch, buf_off, my_slot] = coll_begin(a);
    for (u32 d = 1; d < a.world; d++) {
        const u32 q = (a.rank + d) % a.world;
        const u64 src = a.in + (u64)q * a.nbytes;
        for (u64 i = first; i < nvec; i += stride)
            st_relaxed_sys(slot_ptr(a.bufs[q], my_slot, i), canon<T>(block_load(src, a.nbytes, i)));
    }
    bool ok = true;
    const u64 own_src = a.in + (u64)a.rank * a.nbytes;
    const u64 base = a.bufs[a.rank] + buf_off;
    for (u64 i0 = first; ok && i0 < nvec; i0 += UNROLL * stride) {
        V16 own[UNROLL], r[UNROLL];
        u64 k[UNROLL];
        int n = 0;
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            k[u] = i0 + u * stride;
            if (k[u] < nvec) {
                own[u] = canon<T>(block_load(own_src, a.nbytes, k[u]));
                n = u + 1;
            }
        }
        ok = reduce_vectors<T>(a, epoch, base, a.slot_stride, k, n, own, r, TPCOMM_WAIT_COLL_REDUCE_SCATTER);
        if (!ok) break;
#pragma unroll
        for (int u = 0; u < UNROLL; u++)
            if (u < n) block_store(a.out, a.nbytes, k[u], r[u]);
    }
    end_call(a, epoch, ok);
}

// The root pushes its block into its slot of every peer's buffer (and its
// canon form into its own output); every other rank sends every peer a
// token in its slot's first vector, waits for the tokens of the ranks other
// than the root and itself (thread p of the grid waits for rank p's), and
// copies the root's slot into its output.
template <typename T>
__device__ void coll_broadcast(const CollArgs& c) {
    const Args& a = c.base;
    const auto [nvec, stride, first, epoch, buf_off, my_slot] = coll_begin(a);
    const u32 root = c.root;
    if (a.rank == root) {
        for (u64 i = first; i < nvec; i += stride) {
            const V16 v = canon<T>(block_load(a.in, a.nbytes, i));
            for (u32 p = 0; p < a.world; p++)
                if (p != a.rank) st_relaxed_sys(slot_ptr(a.bufs[p], my_slot, i), v);
            block_store(a.out, a.nbytes, i, v);
        }
    } else if (first < a.world && first != a.rank) {
        V16 token;
        token.x = token.y = token.z = token.w = 0u;
        st_relaxed_sys(slot_ptr(a.bufs[first], my_slot, 0), token);
    }
    bool ok = true;
    const u64 base = a.bufs[a.rank] + buf_off;
    if (first < a.world && first != a.rank && first != root)
        coll_receive<T>(a, base, (u32)first, 0, epoch, TPCOMM_WAIT_COLL_BROADCAST, ok);
    if (a.rank != root) {
        for (u64 i = first; ok && i < nvec; i += stride) {
            const V16 v = coll_receive<T>(a, base, root, i, epoch, TPCOMM_WAIT_COLL_BROADCAST, ok);
            if (ok) block_store(a.out, a.nbytes, i, v);
        }
    }
    end_call(a, epoch, ok);
}

// KERNEL (allreduce.cu): TPCOMM_BLOCK threads at most, one block per SM.
TPCOMM_PER_TYPE(KERNEL, tpcomm_all_gather, CollArgs, coll_all_gather)
TPCOMM_PER_TYPE(KERNEL, tpcomm_reduce_scatter, CollArgs, coll_reduce_scatter)
TPCOMM_PER_TYPE(KERNEL, tpcomm_broadcast, CollArgs, coll_broadcast)
