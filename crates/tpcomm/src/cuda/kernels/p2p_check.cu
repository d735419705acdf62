// The P2P check at communicator creation (src/cuda/transport/p2p/check.rs). Before a
// group trusts P2P, each rank stores a pattern into every peer's check area
// with the SM stores the all-reduce kernels use (16-byte vector stores
// through the peer's mapped address), and each rank reads back what landed
// in its own area. Boxes exist that report P2P on and move no bytes, and
// patched drivers whose P2P returns wrong data: either sends the group to
// the host transport.
//
// A check area holds one slot per writer rank, P2PC_WORDS words each,
// zeroed by the host before any store. Pattern words are never zero, so a
// slot still zero everywhere means nothing arrived.

#define P2PC_WORDS 1024u
#define P2PC_MAX_WORLD 8
// Verdicts (src/cuda/transport/p2p/check.rs reads them); 0 is a slot never checked.
#define P2PC_OK 1u
#define P2PC_NO_BYTES 2u
#define P2PC_WRONG 3u

// Kernel argument, passed by value: `P2pCheckArgs` in src/cuda/kernel_args.rs.
struct P2pCheckArgs {
    u64 areas[P2PC_MAX_WORLD];  // every rank's check area, as this rank maps it
    u64 status;                 // host-mapped: per writer, u32 verdict and u32 first wrong word
    u64 timeout_ns;             // how long the reader waits for a slot to match
    u32 rank;
    u32 world;
    u32 seed;                   // the same on every rank (agreed at creation)
    u32 pad;
};
TPCOMM_ARGS_CHECK_P2pCheckArgs

// The pattern word `i` that `writer` stores into `reader`'s area: a hash, so
// a slot holding another slot's or another check's bytes does not match.
__device__ __forceinline__ u32 p2pc_word(u32 seed, u32 writer, u32 reader, u32 i) {
    u32 x = seed ^ (writer * 0x9e3779b9u) ^ (reader * 0x85ebca6bu) ^ (i * 0xc2b2ae35u);
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x | 1u;
}

// One block per reader: stores this rank's slot of the reader's area.
extern "C" __global__ void __launch_bounds__(256) tpcomm_p2p_check_store(P2pCheckArgs a) {
    const u32 reader = blockIdx.x;
    if (reader >= a.world || reader == a.rank) return;
    V16* dst = reinterpret_cast<V16*>(a.areas[reader]) + (u64)a.rank * (P2PC_WORDS / 4);
    for (u32 v = threadIdx.x; v < P2PC_WORDS / 4; v += blockDim.x) {
        V16 w;
        w.x = p2pc_word(a.seed, a.rank, reader, 4 * v);
        w.y = p2pc_word(a.seed, a.rank, reader, 4 * v + 1);
        w.z = p2pc_word(a.seed, a.rank, reader, 4 * v + 2);
        w.w = p2pc_word(a.seed, a.rank, reader, 4 * v + 3);
        dst[v] = w;
    }
    __threadfence_system();
}

// One block per writer: waits, within the timeout, until this rank's slot of
// `writer` holds the whole pattern, then writes the verdict. Arrival is the
// data itself (no flag: over PCIe a flag has been seen to land before the
// data it guards).
extern "C" __global__ void __launch_bounds__(256) tpcomm_p2p_check_verify(P2pCheckArgs a) {
    const u32 writer = blockIdx.x;
    if (writer >= a.world || writer == a.rank) return;
    const V16* slot = reinterpret_cast<const V16*>(a.areas[a.rank]) + (u64)writer * (P2PC_WORDS / 4);
    __shared__ u32 wrong;     // words not (yet) matching
    __shared__ u32 nonzero;   // words holding anything at all
    __shared__ u32 first;     // the first word that does not match
    __shared__ int done;
    const u64 start = globaltimer();
    for (;;) {
        if (threadIdx.x == 0) {
            wrong = 0;
            nonzero = 0;
            first = 0xffffffffu;
        }
        __syncthreads();
        for (u32 v = threadIdx.x; v < P2PC_WORDS / 4; v += blockDim.x) {
            const V16 got = ld_volatile_v4(slot + v);
            const u32 w[4] = {got.x, got.y, got.z, got.w};
            for (u32 k = 0; k < 4; ++k) {
                const u32 i = 4 * v + k;
                if (w[k] != 0) atomicAdd(&nonzero, 1u);
                if (w[k] != p2pc_word(a.seed, writer, a.rank, i)) {
                    atomicAdd(&wrong, 1u);
                    atomicMin(&first, i);
                }
            }
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            const bool late = globaltimer() - start > a.timeout_ns;
            done = (wrong == 0 || late) ? 1 : 0;
            if (done) {
                volatile u32* s = reinterpret_cast<volatile u32*>(a.status) + 2 * writer;
                s[0] = wrong == 0 ? P2PC_OK : (nonzero == 0 ? P2PC_NO_BYTES : P2PC_WRONG);
                s[1] = wrong == 0 ? 0u : first;
            }
        }
        __syncthreads();
        if (done) return;
    }
}
