// Generated from src/cuda/kernel_args.rs (check_header); do not edit.
// A unit test there fails when this file differs from what it generates:
// run `TPCOMM_WRITE_ARGS_HEADER=1 cargo test -p tpcomm --lib kernel_args`
// to write it again after changing a struct there.
//
// One macro per kernel-argument struct, invoked by its .cu file right
// after the struct: compile-time checks that its size and every field's
// offset are the Rust struct's.

// struct Args (allreduce.cu) is KernelArgs in src/cuda/kernel_args.rs.
#define TPCOMM_ARGS_CHECK_Args \
    static_assert(sizeof(struct Args) == 160, "struct Args: size differs from KernelArgs in src/cuda/kernel_args.rs"); \
    static_assert(__builtin_offsetof(struct Args, in) == 0, "Args.in: offset differs from KernelArgs.input"); \
    static_assert(__builtin_offsetof(struct Args, out) == 8, "Args.out: offset differs from KernelArgs.output"); \
    static_assert(__builtin_offsetof(struct Args, nbytes) == 16, "Args.nbytes: offset differs from KernelArgs.nbytes"); \
    static_assert(__builtin_offsetof(struct Args, bufs) == 24, "Args.bufs: offset differs from KernelArgs.bufs"); \
    static_assert(__builtin_offsetof(struct Args, epoch_stride) == 88, "Args.epoch_stride: offset differs from KernelArgs.epoch_stride"); \
    static_assert(__builtin_offsetof(struct Args, slot_stride) == 96, "Args.slot_stride: offset differs from KernelArgs.slot_stride"); \
    static_assert(__builtin_offsetof(struct Args, shard_stride) == 104, "Args.shard_stride: offset differs from KernelArgs.shard_stride"); \
    static_assert(__builtin_offsetof(struct Args, ag_offset) == 112, "Args.ag_offset: offset differs from KernelArgs.ag_offset"); \
    static_assert(__builtin_offsetof(struct Args, ctl) == 120, "Args.ctl: offset differs from KernelArgs.ctl"); \
    static_assert(__builtin_offsetof(struct Args, status) == 128, "Args.status: offset differs from KernelArgs.status"); \
    static_assert(__builtin_offsetof(struct Args, timeout_ns) == 136, "Args.timeout_ns: offset differs from KernelArgs.timeout_ns"); \
    static_assert(__builtin_offsetof(struct Args, call) == 144, "Args.call: offset differs from KernelArgs.call"); \
    static_assert(__builtin_offsetof(struct Args, rank) == 152, "Args.rank: offset differs from KernelArgs.rank"); \
    static_assert(__builtin_offsetof(struct Args, world) == 156, "Args.world: offset differs from KernelArgs.world");

// struct CollArgs (collectives.cu) is CollArgs in src/cuda/kernel_args.rs.
#define TPCOMM_ARGS_CHECK_CollArgs \
    static_assert(sizeof(struct CollArgs) == 168, "struct CollArgs: size differs from CollArgs in src/cuda/kernel_args.rs"); \
    static_assert(__builtin_offsetof(struct CollArgs, base) == 0, "CollArgs.base: offset differs from CollArgs.base"); \
    static_assert(__builtin_offsetof(struct CollArgs, root) == 160, "CollArgs.root: offset differs from CollArgs.root"); \
    static_assert(__builtin_offsetof(struct CollArgs, pad) == 164, "CollArgs.pad: offset differs from CollArgs.pad");

// struct FusedArgs (fused.cu) is FusedArgs in src/cuda/kernel_args.rs.
#define TPCOMM_ARGS_CHECK_FusedArgs \
    static_assert(sizeof(struct FusedArgs) == 216, "struct FusedArgs: size differs from FusedArgs in src/cuda/kernel_args.rs"); \
    static_assert(__builtin_offsetof(struct FusedArgs, base) == 0, "FusedArgs.base: offset differs from FusedArgs.base"); \
    static_assert(__builtin_offsetof(struct FusedArgs, residual) == 160, "FusedArgs.residual: offset differs from FusedArgs.residual"); \
    static_assert(__builtin_offsetof(struct FusedArgs, addend) == 168, "FusedArgs.addend: offset differs from FusedArgs.addend"); \
    static_assert(__builtin_offsetof(struct FusedArgs, weight) == 176, "FusedArgs.weight: offset differs from FusedArgs.weight"); \
    static_assert(__builtin_offsetof(struct FusedArgs, normed) == 184, "FusedArgs.normed: offset differs from FusedArgs.normed"); \
    static_assert(__builtin_offsetof(struct FusedArgs, rows) == 192, "FusedArgs.rows: offset differs from FusedArgs.rows"); \
    static_assert(__builtin_offsetof(struct FusedArgs, row_vecs) == 196, "FusedArgs.row_vecs: offset differs from FusedArgs.row_vecs"); \
    static_assert(__builtin_offsetof(struct FusedArgs, eps) == 200, "FusedArgs.eps: offset differs from FusedArgs.eps"); \
    static_assert(__builtin_offsetof(struct FusedArgs, inv_hidden) == 204, "FusedArgs.inv_hidden: offset differs from FusedArgs.inv_hidden"); \
    static_assert(__builtin_offsetof(struct FusedArgs, push_vecs) == 208, "FusedArgs.push_vecs: offset differs from FusedArgs.push_vecs"); \
    static_assert(__builtin_offsetof(struct FusedArgs, pad) == 212, "FusedArgs.pad: offset differs from FusedArgs.pad");

// struct HArgs (host_allreduce.cu) is HostKernelArgs in src/cuda/kernel_args.rs.
#define TPCOMM_ARGS_CHECK_HArgs \
    static_assert(sizeof(struct HArgs) == 200, "struct HArgs: size differs from HostKernelArgs in src/cuda/kernel_args.rs"); \
    static_assert(__builtin_offsetof(struct HArgs, in) == 0, "HArgs.in: offset differs from HostKernelArgs.input"); \
    static_assert(__builtin_offsetof(struct HArgs, out) == 8, "HArgs.out: offset differs from HostKernelArgs.output"); \
    static_assert(__builtin_offsetof(struct HArgs, nbytes) == 16, "HArgs.nbytes: offset differs from HostKernelArgs.nbytes"); \
    static_assert(__builtin_offsetof(struct HArgs, areas) == 24, "HArgs.areas: offset differs from HostKernelArgs.areas"); \
    static_assert(__builtin_offsetof(struct HArgs, half_stride) == 88, "HArgs.half_stride: offset differs from HostKernelArgs.half_stride"); \
    static_assert(__builtin_offsetof(struct HArgs, data_offset) == 96, "HArgs.data_offset: offset differs from HostKernelArgs.data_offset"); \
    static_assert(__builtin_offsetof(struct HArgs, flag_offset) == 104, "HArgs.flag_offset: offset differs from HostKernelArgs.flag_offset"); \
    static_assert(__builtin_offsetof(struct HArgs, chunk_bytes) == 112, "HArgs.chunk_bytes: offset differs from HostKernelArgs.chunk_bytes"); \
    static_assert(__builtin_offsetof(struct HArgs, ctl) == 120, "HArgs.ctl: offset differs from HostKernelArgs.ctl"); \
    static_assert(__builtin_offsetof(struct HArgs, status) == 128, "HArgs.status: offset differs from HostKernelArgs.status"); \
    static_assert(__builtin_offsetof(struct HArgs, timeout_ns) == 136, "HArgs.timeout_ns: offset differs from HostKernelArgs.timeout_ns"); \
    static_assert(__builtin_offsetof(struct HArgs, delta_offset) == 144, "HArgs.delta_offset: offset differs from HostKernelArgs.delta_offset"); \
    static_assert(__builtin_offsetof(struct HArgs, slot_bytes) == 152, "HArgs.slot_bytes: offset differs from HostKernelArgs.slot_bytes"); \
    static_assert(__builtin_offsetof(struct HArgs, shadow) == 160, "HArgs.shadow: offset differs from HostKernelArgs.shadow"); \
    static_assert(__builtin_offsetof(struct HArgs, call_offset) == 168, "HArgs.call_offset: offset differs from HostKernelArgs.call_offset"); \
    static_assert(__builtin_offsetof(struct HArgs, call) == 176, "HArgs.call: offset differs from HostKernelArgs.call"); \
    static_assert(__builtin_offsetof(struct HArgs, rank) == 184, "HArgs.rank: offset differs from HostKernelArgs.rank"); \
    static_assert(__builtin_offsetof(struct HArgs, world) == 188, "HArgs.world: offset differs from HostKernelArgs.world"); \
    static_assert(__builtin_offsetof(struct HArgs, producers) == 192, "HArgs.producers: offset differs from HostKernelArgs.producers");

// struct HCollArgs (host_collectives.cu) is HostCollArgs in src/cuda/kernel_args.rs.
#define TPCOMM_ARGS_CHECK_HCollArgs \
    static_assert(sizeof(struct HCollArgs) == 208, "struct HCollArgs: size differs from HostCollArgs in src/cuda/kernel_args.rs"); \
    static_assert(__builtin_offsetof(struct HCollArgs, base) == 0, "HCollArgs.base: offset differs from HostCollArgs.base"); \
    static_assert(__builtin_offsetof(struct HCollArgs, root) == 200, "HCollArgs.root: offset differs from HostCollArgs.root"); \
    static_assert(__builtin_offsetof(struct HCollArgs, pad) == 204, "HCollArgs.pad: offset differs from HostCollArgs.pad");

// struct QArgs (quant.cu) is QuantArgs in src/cuda/kernel_args.rs.
#define TPCOMM_ARGS_CHECK_QArgs \
    static_assert(sizeof(struct QArgs) == 232, "struct QArgs: size differs from QuantArgs in src/cuda/kernel_args.rs"); \
    static_assert(__builtin_offsetof(struct QArgs, in) == 0, "QArgs.in: offset differs from QuantArgs.input"); \
    static_assert(__builtin_offsetof(struct QArgs, out) == 8, "QArgs.out: offset differs from QuantArgs.output"); \
    static_assert(__builtin_offsetof(struct QArgs, count) == 16, "QArgs.count: offset differs from QuantArgs.count"); \
    static_assert(__builtin_offsetof(struct QArgs, dst) == 24, "QArgs.dst: offset differs from QuantArgs.dst"); \
    static_assert(__builtin_offsetof(struct QArgs, src) == 88, "QArgs.src: offset differs from QuantArgs.src"); \
    static_assert(__builtin_offsetof(struct QArgs, parity_stride) == 152, "QArgs.parity_stride: offset differs from QuantArgs.parity_stride"); \
    static_assert(__builtin_offsetof(struct QArgs, scales_off) == 160, "QArgs.scales_off: offset differs from QuantArgs.scales_off"); \
    static_assert(__builtin_offsetof(struct QArgs, flags_off) == 168, "QArgs.flags_off: offset differs from QuantArgs.flags_off"); \
    static_assert(__builtin_offsetof(struct QArgs, ctl) == 176, "QArgs.ctl: offset differs from QuantArgs.ctl"); \
    static_assert(__builtin_offsetof(struct QArgs, status) == 184, "QArgs.status: offset differs from QuantArgs.status"); \
    static_assert(__builtin_offsetof(struct QArgs, timeout_ns) == 192, "QArgs.timeout_ns: offset differs from QuantArgs.timeout_ns"); \
    static_assert(__builtin_offsetof(struct QArgs, call_off) == 200, "QArgs.call_off: offset differs from QuantArgs.call_off"); \
    static_assert(__builtin_offsetof(struct QArgs, call) == 208, "QArgs.call: offset differs from QuantArgs.call"); \
    static_assert(__builtin_offsetof(struct QArgs, rank) == 216, "QArgs.rank: offset differs from QuantArgs.rank"); \
    static_assert(__builtin_offsetof(struct QArgs, world) == 220, "QArgs.world: offset differs from QuantArgs.world"); \
    static_assert(__builtin_offsetof(struct QArgs, ndst) == 224, "QArgs.ndst: offset differs from QuantArgs.ndst"); \
    static_assert(__builtin_offsetof(struct QArgs, group) == 228, "QArgs.group: offset differs from QuantArgs.group");

// struct QGArgs (quant_gathered.cu) is QuantGatherArgs in src/cuda/kernel_args.rs.
#define TPCOMM_ARGS_CHECK_QGArgs \
    static_assert(sizeof(struct QGArgs) == 48, "struct QGArgs: size differs from QuantGatherArgs in src/cuda/kernel_args.rs"); \
    static_assert(__builtin_offsetof(struct QGArgs, in) == 0, "QGArgs.in: offset differs from QuantGatherArgs.input"); \
    static_assert(__builtin_offsetof(struct QGArgs, out) == 8, "QGArgs.out: offset differs from QuantGatherArgs.output"); \
    static_assert(__builtin_offsetof(struct QGArgs, count) == 16, "QGArgs.count: offset differs from QuantGatherArgs.count"); \
    static_assert(__builtin_offsetof(struct QGArgs, block_stride) == 24, "QGArgs.block_stride: offset differs from QuantGatherArgs.block_stride"); \
    static_assert(__builtin_offsetof(struct QGArgs, scales_off) == 32, "QGArgs.scales_off: offset differs from QuantGatherArgs.scales_off"); \
    static_assert(__builtin_offsetof(struct QGArgs, world) == 40, "QGArgs.world: offset differs from QuantGatherArgs.world"); \
    static_assert(__builtin_offsetof(struct QGArgs, group) == 44, "QGArgs.group: offset differs from QuantGatherArgs.group");

// struct BytesArgs (gathered.cu) is BytesArgs in src/cuda/kernel_args.rs.
#define TPCOMM_ARGS_CHECK_BytesArgs \
    static_assert(sizeof(struct BytesArgs) == 48, "struct BytesArgs: size differs from BytesArgs in src/cuda/kernel_args.rs"); \
    static_assert(__builtin_offsetof(struct BytesArgs, in) == 0, "BytesArgs.in: offset differs from BytesArgs.input"); \
    static_assert(__builtin_offsetof(struct BytesArgs, out) == 8, "BytesArgs.out: offset differs from BytesArgs.output"); \
    static_assert(__builtin_offsetof(struct BytesArgs, nbytes) == 16, "BytesArgs.nbytes: offset differs from BytesArgs.nbytes"); \
    static_assert(__builtin_offsetof(struct BytesArgs, in_stride) == 24, "BytesArgs.in_stride: offset differs from BytesArgs.in_stride"); \
    static_assert(__builtin_offsetof(struct BytesArgs, out_stride) == 32, "BytesArgs.out_stride: offset differs from BytesArgs.out_stride"); \
    static_assert(__builtin_offsetof(struct BytesArgs, blocks) == 40, "BytesArgs.blocks: offset differs from BytesArgs.blocks"); \
    static_assert(__builtin_offsetof(struct BytesArgs, pad) == 44, "BytesArgs.pad: offset differs from BytesArgs.pad");

// struct GatheredArgs (gathered.cu) is GatheredArgs in src/cuda/kernel_args.rs.
#define TPCOMM_ARGS_CHECK_GatheredArgs \
    static_assert(sizeof(struct GatheredArgs) == 40, "struct GatheredArgs: size differs from GatheredArgs in src/cuda/kernel_args.rs"); \
    static_assert(__builtin_offsetof(struct GatheredArgs, in) == 0, "GatheredArgs.in: offset differs from GatheredArgs.input"); \
    static_assert(__builtin_offsetof(struct GatheredArgs, out) == 8, "GatheredArgs.out: offset differs from GatheredArgs.output"); \
    static_assert(__builtin_offsetof(struct GatheredArgs, count) == 16, "GatheredArgs.count: offset differs from GatheredArgs.count"); \
    static_assert(__builtin_offsetof(struct GatheredArgs, stride) == 24, "GatheredArgs.stride: offset differs from GatheredArgs.stride"); \
    static_assert(__builtin_offsetof(struct GatheredArgs, world) == 32, "GatheredArgs.world: offset differs from GatheredArgs.world"); \
    static_assert(__builtin_offsetof(struct GatheredArgs, op) == 36, "GatheredArgs.op: offset differs from GatheredArgs.op");

// struct P2pCheckArgs (p2p_check.cu) is P2pCheckArgs in src/cuda/kernel_args.rs.
#define TPCOMM_ARGS_CHECK_P2pCheckArgs \
    static_assert(sizeof(struct P2pCheckArgs) == 96, "struct P2pCheckArgs: size differs from P2pCheckArgs in src/cuda/kernel_args.rs"); \
    static_assert(__builtin_offsetof(struct P2pCheckArgs, areas) == 0, "P2pCheckArgs.areas: offset differs from P2pCheckArgs.areas"); \
    static_assert(__builtin_offsetof(struct P2pCheckArgs, status) == 64, "P2pCheckArgs.status: offset differs from P2pCheckArgs.status"); \
    static_assert(__builtin_offsetof(struct P2pCheckArgs, timeout_ns) == 72, "P2pCheckArgs.timeout_ns: offset differs from P2pCheckArgs.timeout_ns"); \
    static_assert(__builtin_offsetof(struct P2pCheckArgs, rank) == 80, "P2pCheckArgs.rank: offset differs from P2pCheckArgs.rank"); \
    static_assert(__builtin_offsetof(struct P2pCheckArgs, world) == 84, "P2pCheckArgs.world: offset differs from P2pCheckArgs.world"); \
    static_assert(__builtin_offsetof(struct P2pCheckArgs, seed) == 88, "P2pCheckArgs.seed: offset differs from P2pCheckArgs.seed"); \
    static_assert(__builtin_offsetof(struct P2pCheckArgs, pad) == 92, "P2pCheckArgs.pad: offset differs from P2pCheckArgs.pad");
