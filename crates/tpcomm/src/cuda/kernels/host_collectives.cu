// tpcomm all-gather, reduce-scatter and broadcast between GPUs without
// peer-to-peer access, through the host-path all-reduce's pinned host areas
// and epoch. Compiled after host_allreduce.cu (compile.rs,
// HOST_COLLECTIVES_SRC), whose HArgs, HCtl, element types, read_epoch,
// epoch_tag, wait_over, end_call and release/acquire helpers these kernels
// use, so they mix with its all-reduces, in CUDA graphs too.
//
// The rules are the chunked all-reduce's (host_allreduce.cu): each rank
// writes only its own area, in the half its epoch's parity picks: data
// chunks, then one flag per chunk holding the epoch's tag, stored with
// release after a system fence. Readers wait for a chunk's flag of every
// rank (their own too: an in-place call must not overwrite input its own
// producers still read) and then read. Every rank writes every flag of every
// call, so a rank starts call e + 2 only after every peer has finished call e
// and a half is never rewritten while a peer still reads it:
// - all-gather: each rank writes its block (and into its own block of the
//   output); readers copy every peer's block out;
// - reduce-scatter: each rank writes all `world` blocks of its input, block q
//   at q x the block's vectors; rank r reads block r of every area and sums
//   the ranks in rank order (its own from its input), as the chunked
//   all-reduce sums, so the bits equal that block of its all-reduce;
// - broadcast: the root writes the message; the others write the flags only
//   (tokens), and copy the root's chunks out.
// Blocks [0, producers) write, the others read, as in the chunked kernel.
// `HArgs::nbytes` is one rank's block. Blocks of the gathered output and the
// scattered input sit nbytes apart, so they are read and written in 16-bit
// steps where not 16-byte aligned.

#define HC_WAIT_ALL_GATHER 8u
#define HC_WAIT_REDUCE_SCATTER 9u
#define HC_WAIT_BROADCAST 10u
#define HC_ALL_GATHER 0
#define HC_REDUCE_SCATTER 1
#define HC_BROADCAST 2

// `HostCollArgs` in src/cuda/kernel_args.rs.
struct HCollArgs {
    HArgs base;
    u32 root;  // broadcast: the rank whose block every rank receives
    u32 pad;
};
TPCOMM_ARGS_CHECK_HCollArgs

template <typename T, int MODE>
__device__ void host_coll(const HCollArgs& c) {
    const HArgs& a = c.base;
    begin_kernel(a.ctl);
    const u64 epoch = read_epoch(a);
    const u32 e = epoch_tag(epoch);
    const u64 half = (epoch & 1ull) * a.half_stride;
    const u64 nvec = (a.nbytes + 15) / 16;
    const u64 cvec = a.chunk_bytes / 16;
    const u64 cpb = (nvec + cvec - 1) / cvec;  // chunks per block
    const u64 nchunks = MODE == HC_REDUCE_SCATTER ? cpb * a.world : cpb;
    const u32 what = MODE == HC_ALL_GATHER       ? HC_WAIT_ALL_GATHER
                     : MODE == HC_REDUCE_SCATTER ? HC_WAIT_REDUCE_SCATTER
                                                 : HC_WAIT_BROADCAST;
    bool ok = !aborted(a);
    if (blockIdx.x < a.producers) {
        V16* mine = (V16*)(a.areas[a.rank] + half + a.data_offset);
        u32* flags = (u32*)(a.areas[a.rank] + half + a.flag_offset);
        const bool sends = MODE != HC_BROADCAST || a.rank == c.root;
        for (u64 k = blockIdx.x; k < nchunks; k += a.producers) {
            const u64 q = k / cpb;
            const u64 lo = (k % cpb) * cvec;
            const u64 hi = lo + cvec < nvec ? lo + cvec : nvec;
            if (sends) {
                const u64 src = a.in + q * a.nbytes;
                for (u64 i = lo + threadIdx.x; i < hi; i += blockDim.x) {
                    const V16 v = block_load(src, a.nbytes, i);
                    mine[q * nvec + i] = v;
                    if (MODE == HC_ALL_GATHER) block_store(a.out + (u64)a.rank * a.nbytes, a.nbytes, i, v);
                    if (MODE == HC_BROADCAST && a.out != a.in) block_store(a.out, a.nbytes, i, v);
                }
            }
            // The barrier orders every thread's stores before thread 0's
            // fence, which is cumulative: one system fence per chunk.
            __syncthreads();
            if (threadIdx.x == 0) {
                if (sends) __threadfence_system();
                st_release_sys_u32(flags + k, e);
            }
        }
    } else {
        const u32 consumers = gridDim.x - a.producers;
        const u64 first = MODE == HC_REDUCE_SCATTER ? (u64)a.rank * cpb : 0ull;
        for (u64 j = blockIdx.x - a.producers; ok && j < cpb; j += consumers) {
            if (!chunk_wait(a, half, first + j, e, epoch, what)) {
                ok = false;
                break;
            }
            const u64 lo = j * cvec;
            const u64 hi = lo + cvec < nvec ? lo + cvec : nvec;
            if (MODE == HC_ALL_GATHER) {
                for (u32 d = 1; d < a.world; d++) {
                    const u32 q = (a.rank + d) % a.world;
                    const V16* src = (const V16*)(a.areas[q] + half + a.data_offset);
                    for (u64 i = lo + threadIdx.x; i < hi; i += blockDim.x)
                        block_store(a.out + (u64)q * a.nbytes, a.nbytes, i, ld_volatile_v4(src + i));
                }
            } else if (MODE == HC_BROADCAST) {
                if (a.rank != c.root) {
                    const V16* src = (const V16*)(a.areas[c.root] + half + a.data_offset);
                    for (u64 i = lo + threadIdx.x; i < hi; i += blockDim.x)
                        block_store(a.out, a.nbytes, i, ld_volatile_v4(src + i));
                }
            } else {
                const u64 own = a.in + (u64)a.rank * a.nbytes;
                for (u64 i = lo + threadIdx.x; i < hi; i += blockDim.x) {
                    float acc[8];
#pragma unroll
                    for (int k = 0; k < 8; k++) acc[k] = 0.f;
                    for (u32 q = 0; q < a.world; q++) {
                        const V16* src = (const V16*)(a.areas[q] + half + a.data_offset);
                        const V16 v = q == a.rank ? block_load(own, a.nbytes, i)
                                                  : ld_volatile_v4(src + (u64)a.rank * nvec + i);
                        T::add(acc, v);
                    }
                    block_store(a.out, a.nbytes, i, T::pack(acc));
                }
            }
        }
    }
    end_call(a, epoch, ok);
}

HG_KERNEL tpcomm_host_all_gather_f32(HCollArgs c) { host_coll<F32, HC_ALL_GATHER>(c); }
HG_KERNEL tpcomm_host_all_gather_f16(HCollArgs c) { host_coll<F16, HC_ALL_GATHER>(c); }
HG_KERNEL tpcomm_host_all_gather_bf16(HCollArgs c) { host_coll<BF16, HC_ALL_GATHER>(c); }
HG_KERNEL tpcomm_host_reduce_scatter_f32(HCollArgs c) { host_coll<F32, HC_REDUCE_SCATTER>(c); }
HG_KERNEL tpcomm_host_reduce_scatter_f16(HCollArgs c) { host_coll<F16, HC_REDUCE_SCATTER>(c); }
HG_KERNEL tpcomm_host_reduce_scatter_bf16(HCollArgs c) { host_coll<BF16, HC_REDUCE_SCATTER>(c); }
HG_KERNEL tpcomm_host_broadcast_f32(HCollArgs c) { host_coll<F32, HC_BROADCAST>(c); }
HG_KERNEL tpcomm_host_broadcast_f16(HCollArgs c) { host_coll<F16, HC_BROADCAST>(c); }
HG_KERNEL tpcomm_host_broadcast_bf16(HCollArgs c) { host_coll<BF16, HC_BROADCAST>(c); }
