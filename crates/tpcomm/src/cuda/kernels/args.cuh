// Generated from src/cuda/kernel_args.rs (check_header); do not edit.
// A unit test there fails when this file differs from what it generates:
// run `TPCOMM_WRITE_ARGS_HEADER=1 cargo test -p tpcomm --lib kernel_args`
// to write it again after changing a struct there.
//
// One macro per kernel-argument struct, invoked by its .cu file right
// after the struct: compile-time checks that its size, every field's
// size and alignment, the order of its fields and so every field's
// offset are the Rust struct's.

// Where C places a field that follows one ending at `end`.
__device__ constexpr unsigned long long tpcomm_args_at(unsigned long long end, unsigned long long align) {
    return (end + align - 1) / align * align;
}

// struct Args (allreduce.cu) is KernelArgs in src/cuda/kernel_args.rs.
#define TPCOMM_ARGS_CHECK_Args \
    static_assert(sizeof(struct Args) == 160, "struct Args: size differs from KernelArgs in src/cuda/kernel_args.rs"); \
    static_assert(sizeof(Args::in) == 8 && alignof(decltype(Args::in)) == 8, "Args.in: size or alignment differs from KernelArgs.input"); \
    static_assert(sizeof(Args::out) == 8 && alignof(decltype(Args::out)) == 8, "Args.out: size or alignment differs from KernelArgs.output"); \
    static_assert(tpcomm_args_at(0 + sizeof(Args::in), alignof(decltype(Args::out))) == 8, "Args.out: offset differs from KernelArgs.output"); \
    static_assert(sizeof(Args::nbytes) == 8 && alignof(decltype(Args::nbytes)) == 8, "Args.nbytes: size or alignment differs from KernelArgs.nbytes"); \
    static_assert(tpcomm_args_at(8 + sizeof(Args::out), alignof(decltype(Args::nbytes))) == 16, "Args.nbytes: offset differs from KernelArgs.nbytes"); \
    static_assert(sizeof(Args::bufs) == 64 && alignof(decltype(Args::bufs)) == 8, "Args.bufs: size or alignment differs from KernelArgs.bufs"); \
    static_assert(tpcomm_args_at(16 + sizeof(Args::nbytes), alignof(decltype(Args::bufs))) == 24, "Args.bufs: offset differs from KernelArgs.bufs"); \
    static_assert(sizeof(Args::epoch_stride) == 8 && alignof(decltype(Args::epoch_stride)) == 8, "Args.epoch_stride: size or alignment differs from KernelArgs.epoch_stride"); \
    static_assert(tpcomm_args_at(24 + sizeof(Args::bufs), alignof(decltype(Args::epoch_stride))) == 88, "Args.epoch_stride: offset differs from KernelArgs.epoch_stride"); \
    static_assert(sizeof(Args::slot_stride) == 8 && alignof(decltype(Args::slot_stride)) == 8, "Args.slot_stride: size or alignment differs from KernelArgs.slot_stride"); \
    static_assert(tpcomm_args_at(88 + sizeof(Args::epoch_stride), alignof(decltype(Args::slot_stride))) == 96, "Args.slot_stride: offset differs from KernelArgs.slot_stride"); \
    static_assert(sizeof(Args::shard_stride) == 8 && alignof(decltype(Args::shard_stride)) == 8, "Args.shard_stride: size or alignment differs from KernelArgs.shard_stride"); \
    static_assert(tpcomm_args_at(96 + sizeof(Args::slot_stride), alignof(decltype(Args::shard_stride))) == 104, "Args.shard_stride: offset differs from KernelArgs.shard_stride"); \
    static_assert(sizeof(Args::ag_offset) == 8 && alignof(decltype(Args::ag_offset)) == 8, "Args.ag_offset: size or alignment differs from KernelArgs.ag_offset"); \
    static_assert(tpcomm_args_at(104 + sizeof(Args::shard_stride), alignof(decltype(Args::ag_offset))) == 112, "Args.ag_offset: offset differs from KernelArgs.ag_offset"); \
    static_assert(sizeof(Args::ctl) == 8 && alignof(decltype(Args::ctl)) == 8, "Args.ctl: size or alignment differs from KernelArgs.ctl"); \
    static_assert(tpcomm_args_at(112 + sizeof(Args::ag_offset), alignof(decltype(Args::ctl))) == 120, "Args.ctl: offset differs from KernelArgs.ctl"); \
    static_assert(sizeof(Args::status) == 8 && alignof(decltype(Args::status)) == 8, "Args.status: size or alignment differs from KernelArgs.status"); \
    static_assert(tpcomm_args_at(120 + sizeof(Args::ctl), alignof(decltype(Args::status))) == 128, "Args.status: offset differs from KernelArgs.status"); \
    static_assert(sizeof(Args::timeout_ns) == 8 && alignof(decltype(Args::timeout_ns)) == 8, "Args.timeout_ns: size or alignment differs from KernelArgs.timeout_ns"); \
    static_assert(tpcomm_args_at(128 + sizeof(Args::status), alignof(decltype(Args::timeout_ns))) == 136, "Args.timeout_ns: offset differs from KernelArgs.timeout_ns"); \
    static_assert(sizeof(Args::call) == 8 && alignof(decltype(Args::call)) == 8, "Args.call: size or alignment differs from KernelArgs.call"); \
    static_assert(tpcomm_args_at(136 + sizeof(Args::timeout_ns), alignof(decltype(Args::call))) == 144, "Args.call: offset differs from KernelArgs.call"); \
    static_assert(sizeof(Args::rank) == 4 && alignof(decltype(Args::rank)) == 4, "Args.rank: size or alignment differs from KernelArgs.rank"); \
    static_assert(tpcomm_args_at(144 + sizeof(Args::call), alignof(decltype(Args::rank))) == 152, "Args.rank: offset differs from KernelArgs.rank"); \
    static_assert(sizeof(Args::world) == 4 && alignof(decltype(Args::world)) == 4, "Args.world: size or alignment differs from KernelArgs.world"); \
    static_assert(tpcomm_args_at(152 + sizeof(Args::rank), alignof(decltype(Args::world))) == 156, "Args.world: offset differs from KernelArgs.world"); \
    __device__ constexpr bool tpcomm_args_order_Args() { struct Args a{}; return (const void*)&a.in < (const void*)&a.out && (const void*)&a.out < (const void*)&a.nbytes && (const void*)&a.nbytes < (const void*)&a.bufs && (const void*)&a.bufs < (const void*)&a.epoch_stride && (const void*)&a.epoch_stride < (const void*)&a.slot_stride && (const void*)&a.slot_stride < (const void*)&a.shard_stride && (const void*)&a.shard_stride < (const void*)&a.ag_offset && (const void*)&a.ag_offset < (const void*)&a.ctl && (const void*)&a.ctl < (const void*)&a.status && (const void*)&a.status < (const void*)&a.timeout_ns && (const void*)&a.timeout_ns < (const void*)&a.call && (const void*)&a.call < (const void*)&a.rank && (const void*)&a.rank < (const void*)&a.world; } \
    static_assert(tpcomm_args_order_Args(), "struct Args: fields in another order than in KernelArgs");

// struct CollArgs (collectives.cu) is CollArgs in src/cuda/kernel_args.rs.
#define TPCOMM_ARGS_CHECK_CollArgs \
    static_assert(sizeof(struct CollArgs) == 168, "struct CollArgs: size differs from CollArgs in src/cuda/kernel_args.rs"); \
    static_assert(sizeof(CollArgs::base) == 160 && alignof(decltype(CollArgs::base)) == 8, "CollArgs.base: size or alignment differs from CollArgs.base"); \
    static_assert(sizeof(CollArgs::root) == 4 && alignof(decltype(CollArgs::root)) == 4, "CollArgs.root: size or alignment differs from CollArgs.root"); \
    static_assert(tpcomm_args_at(0 + sizeof(CollArgs::base), alignof(decltype(CollArgs::root))) == 160, "CollArgs.root: offset differs from CollArgs.root"); \
    static_assert(sizeof(CollArgs::pad) == 4 && alignof(decltype(CollArgs::pad)) == 4, "CollArgs.pad: size or alignment differs from CollArgs.pad"); \
    static_assert(tpcomm_args_at(160 + sizeof(CollArgs::root), alignof(decltype(CollArgs::pad))) == 164, "CollArgs.pad: offset differs from CollArgs.pad"); \
    __device__ constexpr bool tpcomm_args_order_CollArgs() { struct CollArgs a{}; return (const void*)&a.base < (const void*)&a.root && (const void*)&a.root < (const void*)&a.pad; } \
    static_assert(tpcomm_args_order_CollArgs(), "struct CollArgs: fields in another order than in CollArgs");

// struct FusedArgs (fused.cu) is FusedArgs in src/cuda/kernel_args.rs.
#define TPCOMM_ARGS_CHECK_FusedArgs \
    static_assert(sizeof(struct FusedArgs) == 216, "struct FusedArgs: size differs from FusedArgs in src/cuda/kernel_args.rs"); \
    static_assert(sizeof(FusedArgs::base) == 160 && alignof(decltype(FusedArgs::base)) == 8, "FusedArgs.base: size or alignment differs from FusedArgs.base"); \
    static_assert(sizeof(FusedArgs::residual) == 8 && alignof(decltype(FusedArgs::residual)) == 8, "FusedArgs.residual: size or alignment differs from FusedArgs.residual"); \
    static_assert(tpcomm_args_at(0 + sizeof(FusedArgs::base), alignof(decltype(FusedArgs::residual))) == 160, "FusedArgs.residual: offset differs from FusedArgs.residual"); \
    static_assert(sizeof(FusedArgs::addend) == 8 && alignof(decltype(FusedArgs::addend)) == 8, "FusedArgs.addend: size or alignment differs from FusedArgs.addend"); \
    static_assert(tpcomm_args_at(160 + sizeof(FusedArgs::residual), alignof(decltype(FusedArgs::addend))) == 168, "FusedArgs.addend: offset differs from FusedArgs.addend"); \
    static_assert(sizeof(FusedArgs::weight) == 8 && alignof(decltype(FusedArgs::weight)) == 8, "FusedArgs.weight: size or alignment differs from FusedArgs.weight"); \
    static_assert(tpcomm_args_at(168 + sizeof(FusedArgs::addend), alignof(decltype(FusedArgs::weight))) == 176, "FusedArgs.weight: offset differs from FusedArgs.weight"); \
    static_assert(sizeof(FusedArgs::normed) == 8 && alignof(decltype(FusedArgs::normed)) == 8, "FusedArgs.normed: size or alignment differs from FusedArgs.normed"); \
    static_assert(tpcomm_args_at(176 + sizeof(FusedArgs::weight), alignof(decltype(FusedArgs::normed))) == 184, "FusedArgs.normed: offset differs from FusedArgs.normed"); \
    static_assert(sizeof(FusedArgs::rows) == 4 && alignof(decltype(FusedArgs::rows)) == 4, "FusedArgs.rows: size or alignment differs from FusedArgs.rows"); \
    static_assert(tpcomm_args_at(184 + sizeof(FusedArgs::normed), alignof(decltype(FusedArgs::rows))) == 192, "FusedArgs.rows: offset differs from FusedArgs.rows"); \
    static_assert(sizeof(FusedArgs::row_vecs) == 4 && alignof(decltype(FusedArgs::row_vecs)) == 4, "FusedArgs.row_vecs: size or alignment differs from FusedArgs.row_vecs"); \
    static_assert(tpcomm_args_at(192 + sizeof(FusedArgs::rows), alignof(decltype(FusedArgs::row_vecs))) == 196, "FusedArgs.row_vecs: offset differs from FusedArgs.row_vecs"); \
    static_assert(sizeof(FusedArgs::eps) == 4 && alignof(decltype(FusedArgs::eps)) == 4, "FusedArgs.eps: size or alignment differs from FusedArgs.eps"); \
    static_assert(tpcomm_args_at(196 + sizeof(FusedArgs::row_vecs), alignof(decltype(FusedArgs::eps))) == 200, "FusedArgs.eps: offset differs from FusedArgs.eps"); \
    static_assert(sizeof(FusedArgs::inv_hidden) == 4 && alignof(decltype(FusedArgs::inv_hidden)) == 4, "FusedArgs.inv_hidden: size or alignment differs from FusedArgs.inv_hidden"); \
    static_assert(tpcomm_args_at(200 + sizeof(FusedArgs::eps), alignof(decltype(FusedArgs::inv_hidden))) == 204, "FusedArgs.inv_hidden: offset differs from FusedArgs.inv_hidden"); \
    static_assert(sizeof(FusedArgs::push_vecs) == 4 && alignof(decltype(FusedArgs::push_vecs)) == 4, "FusedArgs.push_vecs: size or alignment differs from FusedArgs.push_vecs"); \
    static_assert(tpcomm_args_at(204 + sizeof(FusedArgs::inv_hidden), alignof(decltype(FusedArgs::push_vecs))) == 208, "FusedArgs.push_vecs: offset differs from FusedArgs.push_vecs"); \
    static_assert(sizeof(FusedArgs::pad) == 4 && alignof(decltype(FusedArgs::pad)) == 4, "FusedArgs.pad: size or alignment differs from FusedArgs.pad"); \
    static_assert(tpcomm_args_at(208 + sizeof(FusedArgs::push_vecs), alignof(decltype(FusedArgs::pad))) == 212, "FusedArgs.pad: offset differs from FusedArgs.pad"); \
    __device__ constexpr bool tpcomm_args_order_FusedArgs() { struct FusedArgs a{}; return (const void*)&a.base < (const void*)&a.residual && (const void*)&a.residual < (const void*)&a.addend && (const void*)&a.addend < (const void*)&a.weight && (const void*)&a.weight < (const void*)&a.normed && (const void*)&a.normed < (const void*)&a.rows && (const void*)&a.rows < (const void*)&a.row_vecs && (const void*)&a.row_vecs < (const void*)&a.eps && (const void*)&a.eps < (const void*)&a.inv_hidden && (const void*)&a.inv_hidden < (const void*)&a.push_vecs && (const void*)&a.push_vecs < (const void*)&a.pad; } \
    static_assert(tpcomm_args_order_FusedArgs(), "struct FusedArgs: fields in another order than in FusedArgs");

// struct HArgs (host_allreduce.cu) is HostKernelArgs in src/cuda/kernel_args.rs.
#define TPCOMM_ARGS_CHECK_HArgs \
    static_assert(sizeof(struct HArgs) == 200, "struct HArgs: size differs from HostKernelArgs in src/cuda/kernel_args.rs"); \
    static_assert(sizeof(HArgs::in) == 8 && alignof(decltype(HArgs::in)) == 8, "HArgs.in: size or alignment differs from HostKernelArgs.input"); \
    static_assert(sizeof(HArgs::out) == 8 && alignof(decltype(HArgs::out)) == 8, "HArgs.out: size or alignment differs from HostKernelArgs.output"); \
    static_assert(tpcomm_args_at(0 + sizeof(HArgs::in), alignof(decltype(HArgs::out))) == 8, "HArgs.out: offset differs from HostKernelArgs.output"); \
    static_assert(sizeof(HArgs::nbytes) == 8 && alignof(decltype(HArgs::nbytes)) == 8, "HArgs.nbytes: size or alignment differs from HostKernelArgs.nbytes"); \
    static_assert(tpcomm_args_at(8 + sizeof(HArgs::out), alignof(decltype(HArgs::nbytes))) == 16, "HArgs.nbytes: offset differs from HostKernelArgs.nbytes"); \
    static_assert(sizeof(HArgs::areas) == 64 && alignof(decltype(HArgs::areas)) == 8, "HArgs.areas: size or alignment differs from HostKernelArgs.areas"); \
    static_assert(tpcomm_args_at(16 + sizeof(HArgs::nbytes), alignof(decltype(HArgs::areas))) == 24, "HArgs.areas: offset differs from HostKernelArgs.areas"); \
    static_assert(sizeof(HArgs::half_stride) == 8 && alignof(decltype(HArgs::half_stride)) == 8, "HArgs.half_stride: size or alignment differs from HostKernelArgs.half_stride"); \
    static_assert(tpcomm_args_at(24 + sizeof(HArgs::areas), alignof(decltype(HArgs::half_stride))) == 88, "HArgs.half_stride: offset differs from HostKernelArgs.half_stride"); \
    static_assert(sizeof(HArgs::data_offset) == 8 && alignof(decltype(HArgs::data_offset)) == 8, "HArgs.data_offset: size or alignment differs from HostKernelArgs.data_offset"); \
    static_assert(tpcomm_args_at(88 + sizeof(HArgs::half_stride), alignof(decltype(HArgs::data_offset))) == 96, "HArgs.data_offset: offset differs from HostKernelArgs.data_offset"); \
    static_assert(sizeof(HArgs::flag_offset) == 8 && alignof(decltype(HArgs::flag_offset)) == 8, "HArgs.flag_offset: size or alignment differs from HostKernelArgs.flag_offset"); \
    static_assert(tpcomm_args_at(96 + sizeof(HArgs::data_offset), alignof(decltype(HArgs::flag_offset))) == 104, "HArgs.flag_offset: offset differs from HostKernelArgs.flag_offset"); \
    static_assert(sizeof(HArgs::chunk_bytes) == 8 && alignof(decltype(HArgs::chunk_bytes)) == 8, "HArgs.chunk_bytes: size or alignment differs from HostKernelArgs.chunk_bytes"); \
    static_assert(tpcomm_args_at(104 + sizeof(HArgs::flag_offset), alignof(decltype(HArgs::chunk_bytes))) == 112, "HArgs.chunk_bytes: offset differs from HostKernelArgs.chunk_bytes"); \
    static_assert(sizeof(HArgs::ctl) == 8 && alignof(decltype(HArgs::ctl)) == 8, "HArgs.ctl: size or alignment differs from HostKernelArgs.ctl"); \
    static_assert(tpcomm_args_at(112 + sizeof(HArgs::chunk_bytes), alignof(decltype(HArgs::ctl))) == 120, "HArgs.ctl: offset differs from HostKernelArgs.ctl"); \
    static_assert(sizeof(HArgs::status) == 8 && alignof(decltype(HArgs::status)) == 8, "HArgs.status: size or alignment differs from HostKernelArgs.status"); \
    static_assert(tpcomm_args_at(120 + sizeof(HArgs::ctl), alignof(decltype(HArgs::status))) == 128, "HArgs.status: offset differs from HostKernelArgs.status"); \
    static_assert(sizeof(HArgs::timeout_ns) == 8 && alignof(decltype(HArgs::timeout_ns)) == 8, "HArgs.timeout_ns: size or alignment differs from HostKernelArgs.timeout_ns"); \
    static_assert(tpcomm_args_at(128 + sizeof(HArgs::status), alignof(decltype(HArgs::timeout_ns))) == 136, "HArgs.timeout_ns: offset differs from HostKernelArgs.timeout_ns"); \
    static_assert(sizeof(HArgs::delta_offset) == 8 && alignof(decltype(HArgs::delta_offset)) == 8, "HArgs.delta_offset: size or alignment differs from HostKernelArgs.delta_offset"); \
    static_assert(tpcomm_args_at(136 + sizeof(HArgs::timeout_ns), alignof(decltype(HArgs::delta_offset))) == 144, "HArgs.delta_offset: offset differs from HostKernelArgs.delta_offset"); \
    static_assert(sizeof(HArgs::slot_bytes) == 8 && alignof(decltype(HArgs::slot_bytes)) == 8, "HArgs.slot_bytes: size or alignment differs from HostKernelArgs.slot_bytes"); \
    static_assert(tpcomm_args_at(144 + sizeof(HArgs::delta_offset), alignof(decltype(HArgs::slot_bytes))) == 152, "HArgs.slot_bytes: offset differs from HostKernelArgs.slot_bytes"); \
    static_assert(sizeof(HArgs::shadow) == 8 && alignof(decltype(HArgs::shadow)) == 8, "HArgs.shadow: size or alignment differs from HostKernelArgs.shadow"); \
    static_assert(tpcomm_args_at(152 + sizeof(HArgs::slot_bytes), alignof(decltype(HArgs::shadow))) == 160, "HArgs.shadow: offset differs from HostKernelArgs.shadow"); \
    static_assert(sizeof(HArgs::call_offset) == 8 && alignof(decltype(HArgs::call_offset)) == 8, "HArgs.call_offset: size or alignment differs from HostKernelArgs.call_offset"); \
    static_assert(tpcomm_args_at(160 + sizeof(HArgs::shadow), alignof(decltype(HArgs::call_offset))) == 168, "HArgs.call_offset: offset differs from HostKernelArgs.call_offset"); \
    static_assert(sizeof(HArgs::call) == 8 && alignof(decltype(HArgs::call)) == 8, "HArgs.call: size or alignment differs from HostKernelArgs.call"); \
    static_assert(tpcomm_args_at(168 + sizeof(HArgs::call_offset), alignof(decltype(HArgs::call))) == 176, "HArgs.call: offset differs from HostKernelArgs.call"); \
    static_assert(sizeof(HArgs::rank) == 4 && alignof(decltype(HArgs::rank)) == 4, "HArgs.rank: size or alignment differs from HostKernelArgs.rank"); \
    static_assert(tpcomm_args_at(176 + sizeof(HArgs::call), alignof(decltype(HArgs::rank))) == 184, "HArgs.rank: offset differs from HostKernelArgs.rank"); \
    static_assert(sizeof(HArgs::world) == 4 && alignof(decltype(HArgs::world)) == 4, "HArgs.world: size or alignment differs from HostKernelArgs.world"); \
    static_assert(tpcomm_args_at(184 + sizeof(HArgs::rank), alignof(decltype(HArgs::world))) == 188, "HArgs.world: offset differs from HostKernelArgs.world"); \
    static_assert(sizeof(HArgs::producers) == 4 && alignof(decltype(HArgs::producers)) == 4, "HArgs.producers: size or alignment differs from HostKernelArgs.producers"); \
    static_assert(tpcomm_args_at(188 + sizeof(HArgs::world), alignof(decltype(HArgs::producers))) == 192, "HArgs.producers: offset differs from HostKernelArgs.producers"); \
    __device__ constexpr bool tpcomm_args_order_HArgs() { struct HArgs a{}; return (const void*)&a.in < (const void*)&a.out && (const void*)&a.out < (const void*)&a.nbytes && (const void*)&a.nbytes < (const void*)&a.areas && (const void*)&a.areas < (const void*)&a.half_stride && (const void*)&a.half_stride < (const void*)&a.data_offset && (const void*)&a.data_offset < (const void*)&a.flag_offset && (const void*)&a.flag_offset < (const void*)&a.chunk_bytes && (const void*)&a.chunk_bytes < (const void*)&a.ctl && (const void*)&a.ctl < (const void*)&a.status && (const void*)&a.status < (const void*)&a.timeout_ns && (const void*)&a.timeout_ns < (const void*)&a.delta_offset && (const void*)&a.delta_offset < (const void*)&a.slot_bytes && (const void*)&a.slot_bytes < (const void*)&a.shadow && (const void*)&a.shadow < (const void*)&a.call_offset && (const void*)&a.call_offset < (const void*)&a.call && (const void*)&a.call < (const void*)&a.rank && (const void*)&a.rank < (const void*)&a.world && (const void*)&a.world < (const void*)&a.producers; } \
    static_assert(tpcomm_args_order_HArgs(), "struct HArgs: fields in another order than in HostKernelArgs");

// struct HCollArgs (host_collectives.cu) is HostCollArgs in src/cuda/kernel_args.rs.
#define TPCOMM_ARGS_CHECK_HCollArgs \
    static_assert(sizeof(struct HCollArgs) == 208, "struct HCollArgs: size differs from HostCollArgs in src/cuda/kernel_args.rs"); \
    static_assert(sizeof(HCollArgs::base) == 200 && alignof(decltype(HCollArgs::base)) == 8, "HCollArgs.base: size or alignment differs from HostCollArgs.base"); \
    static_assert(sizeof(HCollArgs::root) == 4 && alignof(decltype(HCollArgs::root)) == 4, "HCollArgs.root: size or alignment differs from HostCollArgs.root"); \
    static_assert(tpcomm_args_at(0 + sizeof(HCollArgs::base), alignof(decltype(HCollArgs::root))) == 200, "HCollArgs.root: offset differs from HostCollArgs.root"); \
    static_assert(sizeof(HCollArgs::pad) == 4 && alignof(decltype(HCollArgs::pad)) == 4, "HCollArgs.pad: size or alignment differs from HostCollArgs.pad"); \
    static_assert(tpcomm_args_at(200 + sizeof(HCollArgs::root), alignof(decltype(HCollArgs::pad))) == 204, "HCollArgs.pad: offset differs from HostCollArgs.pad"); \
    __device__ constexpr bool tpcomm_args_order_HCollArgs() { struct HCollArgs a{}; return (const void*)&a.base < (const void*)&a.root && (const void*)&a.root < (const void*)&a.pad; } \
    static_assert(tpcomm_args_order_HCollArgs(), "struct HCollArgs: fields in another order than in HostCollArgs");

// struct QArgs (quant.cu) is QuantArgs in src/cuda/kernel_args.rs.
#define TPCOMM_ARGS_CHECK_QArgs \
    static_assert(sizeof(struct QArgs) == 232, "struct QArgs: size differs from QuantArgs in src/cuda/kernel_args.rs"); \
    static_assert(sizeof(QArgs::in) == 8 && alignof(decltype(QArgs::in)) == 8, "QArgs.in: size or alignment differs from QuantArgs.input"); \
    static_assert(sizeof(QArgs::out) == 8 && alignof(decltype(QArgs::out)) == 8, "QArgs.out: size or alignment differs from QuantArgs.output"); \
    static_assert(tpcomm_args_at(0 + sizeof(QArgs::in), alignof(decltype(QArgs::out))) == 8, "QArgs.out: offset differs from QuantArgs.output"); \
    static_assert(sizeof(QArgs::count) == 8 && alignof(decltype(QArgs::count)) == 8, "QArgs.count: size or alignment differs from QuantArgs.count"); \
    static_assert(tpcomm_args_at(8 + sizeof(QArgs::out), alignof(decltype(QArgs::count))) == 16, "QArgs.count: offset differs from QuantArgs.count"); \
    static_assert(sizeof(QArgs::dst) == 64 && alignof(decltype(QArgs::dst)) == 8, "QArgs.dst: size or alignment differs from QuantArgs.dst"); \
    static_assert(tpcomm_args_at(16 + sizeof(QArgs::count), alignof(decltype(QArgs::dst))) == 24, "QArgs.dst: offset differs from QuantArgs.dst"); \
    static_assert(sizeof(QArgs::src) == 64 && alignof(decltype(QArgs::src)) == 8, "QArgs.src: size or alignment differs from QuantArgs.src"); \
    static_assert(tpcomm_args_at(24 + sizeof(QArgs::dst), alignof(decltype(QArgs::src))) == 88, "QArgs.src: offset differs from QuantArgs.src"); \
    static_assert(sizeof(QArgs::parity_stride) == 8 && alignof(decltype(QArgs::parity_stride)) == 8, "QArgs.parity_stride: size or alignment differs from QuantArgs.parity_stride"); \
    static_assert(tpcomm_args_at(88 + sizeof(QArgs::src), alignof(decltype(QArgs::parity_stride))) == 152, "QArgs.parity_stride: offset differs from QuantArgs.parity_stride"); \
    static_assert(sizeof(QArgs::scales_off) == 8 && alignof(decltype(QArgs::scales_off)) == 8, "QArgs.scales_off: size or alignment differs from QuantArgs.scales_off"); \
    static_assert(tpcomm_args_at(152 + sizeof(QArgs::parity_stride), alignof(decltype(QArgs::scales_off))) == 160, "QArgs.scales_off: offset differs from QuantArgs.scales_off"); \
    static_assert(sizeof(QArgs::flags_off) == 8 && alignof(decltype(QArgs::flags_off)) == 8, "QArgs.flags_off: size or alignment differs from QuantArgs.flags_off"); \
    static_assert(tpcomm_args_at(160 + sizeof(QArgs::scales_off), alignof(decltype(QArgs::flags_off))) == 168, "QArgs.flags_off: offset differs from QuantArgs.flags_off"); \
    static_assert(sizeof(QArgs::ctl) == 8 && alignof(decltype(QArgs::ctl)) == 8, "QArgs.ctl: size or alignment differs from QuantArgs.ctl"); \
    static_assert(tpcomm_args_at(168 + sizeof(QArgs::flags_off), alignof(decltype(QArgs::ctl))) == 176, "QArgs.ctl: offset differs from QuantArgs.ctl"); \
    static_assert(sizeof(QArgs::status) == 8 && alignof(decltype(QArgs::status)) == 8, "QArgs.status: size or alignment differs from QuantArgs.status"); \
    static_assert(tpcomm_args_at(176 + sizeof(QArgs::ctl), alignof(decltype(QArgs::status))) == 184, "QArgs.status: offset differs from QuantArgs.status"); \
    static_assert(sizeof(QArgs::timeout_ns) == 8 && alignof(decltype(QArgs::timeout_ns)) == 8, "QArgs.timeout_ns: size or alignment differs from QuantArgs.timeout_ns"); \
    static_assert(tpcomm_args_at(184 + sizeof(QArgs::status), alignof(decltype(QArgs::timeout_ns))) == 192, "QArgs.timeout_ns: offset differs from QuantArgs.timeout_ns"); \
    static_assert(sizeof(QArgs::call_off) == 8 && alignof(decltype(QArgs::call_off)) == 8, "QArgs.call_off: size or alignment differs from QuantArgs.call_off"); \
    static_assert(tpcomm_args_at(192 + sizeof(QArgs::timeout_ns), alignof(decltype(QArgs::call_off))) == 200, "QArgs.call_off: offset differs from QuantArgs.call_off"); \
    static_assert(sizeof(QArgs::call) == 8 && alignof(decltype(QArgs::call)) == 8, "QArgs.call: size or alignment differs from QuantArgs.call"); \
    static_assert(tpcomm_args_at(200 + sizeof(QArgs::call_off), alignof(decltype(QArgs::call))) == 208, "QArgs.call: offset differs from QuantArgs.call"); \
    static_assert(sizeof(QArgs::rank) == 4 && alignof(decltype(QArgs::rank)) == 4, "QArgs.rank: size or alignment differs from QuantArgs.rank"); \
    static_assert(tpcomm_args_at(208 + sizeof(QArgs::call), alignof(decltype(QArgs::rank))) == 216, "QArgs.rank: offset differs from QuantArgs.rank"); \
    static_assert(sizeof(QArgs::world) == 4 && alignof(decltype(QArgs::world)) == 4, "QArgs.world: size or alignment differs from QuantArgs.world"); \
    static_assert(tpcomm_args_at(216 + sizeof(QArgs::rank), alignof(decltype(QArgs::world))) == 220, "QArgs.world: offset differs from QuantArgs.world"); \
    static_assert(sizeof(QArgs::ndst) == 4 && alignof(decltype(QArgs::ndst)) == 4, "QArgs.ndst: size or alignment differs from QuantArgs.ndst"); \
    static_assert(tpcomm_args_at(220 + sizeof(QArgs::world), alignof(decltype(QArgs::ndst))) == 224, "QArgs.ndst: offset differs from QuantArgs.ndst"); \
    static_assert(sizeof(QArgs::group) == 4 && alignof(decltype(QArgs::group)) == 4, "QArgs.group: size or alignment differs from QuantArgs.group"); \
    static_assert(tpcomm_args_at(224 + sizeof(QArgs::ndst), alignof(decltype(QArgs::group))) == 228, "QArgs.group: offset differs from QuantArgs.group"); \
    __device__ constexpr bool tpcomm_args_order_QArgs() { struct QArgs a{}; return (const void*)&a.in < (const void*)&a.out && (const void*)&a.out < (const void*)&a.count && (const void*)&a.count < (const void*)&a.dst && (const void*)&a.dst < (const void*)&a.src && (const void*)&a.src < (const void*)&a.parity_stride && (const void*)&a.parity_stride < (const void*)&a.scales_off && (const void*)&a.scales_off < (const void*)&a.flags_off && (const void*)&a.flags_off < (const void*)&a.ctl && (const void*)&a.ctl < (const void*)&a.status && (const void*)&a.status < (const void*)&a.timeout_ns && (const void*)&a.timeout_ns < (const void*)&a.call_off && (const void*)&a.call_off < (const void*)&a.call && (const void*)&a.call < (const void*)&a.rank && (const void*)&a.rank < (const void*)&a.world && (const void*)&a.world < (const void*)&a.ndst && (const void*)&a.ndst < (const void*)&a.group; } \
    static_assert(tpcomm_args_order_QArgs(), "struct QArgs: fields in another order than in QuantArgs");

// struct QGArgs (quant_gathered.cu) is QuantGatherArgs in src/cuda/kernel_args.rs.
#define TPCOMM_ARGS_CHECK_QGArgs \
    static_assert(sizeof(struct QGArgs) == 48, "struct QGArgs: size differs from QuantGatherArgs in src/cuda/kernel_args.rs"); \
    static_assert(sizeof(QGArgs::in) == 8 && alignof(decltype(QGArgs::in)) == 8, "QGArgs.in: size or alignment differs from QuantGatherArgs.input"); \
    static_assert(sizeof(QGArgs::out) == 8 && alignof(decltype(QGArgs::out)) == 8, "QGArgs.out: size or alignment differs from QuantGatherArgs.output"); \
    static_assert(tpcomm_args_at(0 + sizeof(QGArgs::in), alignof(decltype(QGArgs::out))) == 8, "QGArgs.out: offset differs from QuantGatherArgs.output"); \
    static_assert(sizeof(QGArgs::count) == 8 && alignof(decltype(QGArgs::count)) == 8, "QGArgs.count: size or alignment differs from QuantGatherArgs.count"); \
    static_assert(tpcomm_args_at(8 + sizeof(QGArgs::out), alignof(decltype(QGArgs::count))) == 16, "QGArgs.count: offset differs from QuantGatherArgs.count"); \
    static_assert(sizeof(QGArgs::block_stride) == 8 && alignof(decltype(QGArgs::block_stride)) == 8, "QGArgs.block_stride: size or alignment differs from QuantGatherArgs.block_stride"); \
    static_assert(tpcomm_args_at(16 + sizeof(QGArgs::count), alignof(decltype(QGArgs::block_stride))) == 24, "QGArgs.block_stride: offset differs from QuantGatherArgs.block_stride"); \
    static_assert(sizeof(QGArgs::scales_off) == 8 && alignof(decltype(QGArgs::scales_off)) == 8, "QGArgs.scales_off: size or alignment differs from QuantGatherArgs.scales_off"); \
    static_assert(tpcomm_args_at(24 + sizeof(QGArgs::block_stride), alignof(decltype(QGArgs::scales_off))) == 32, "QGArgs.scales_off: offset differs from QuantGatherArgs.scales_off"); \
    static_assert(sizeof(QGArgs::world) == 4 && alignof(decltype(QGArgs::world)) == 4, "QGArgs.world: size or alignment differs from QuantGatherArgs.world"); \
    static_assert(tpcomm_args_at(32 + sizeof(QGArgs::scales_off), alignof(decltype(QGArgs::world))) == 40, "QGArgs.world: offset differs from QuantGatherArgs.world"); \
    static_assert(sizeof(QGArgs::group) == 4 && alignof(decltype(QGArgs::group)) == 4, "QGArgs.group: size or alignment differs from QuantGatherArgs.group"); \
    static_assert(tpcomm_args_at(40 + sizeof(QGArgs::world), alignof(decltype(QGArgs::group))) == 44, "QGArgs.group: offset differs from QuantGatherArgs.group"); \
    __device__ constexpr bool tpcomm_args_order_QGArgs() { struct QGArgs a{}; return (const void*)&a.in < (const void*)&a.out && (const void*)&a.out < (const void*)&a.count && (const void*)&a.count < (const void*)&a.block_stride && (const void*)&a.block_stride < (const void*)&a.scales_off && (const void*)&a.scales_off < (const void*)&a.world && (const void*)&a.world < (const void*)&a.group; } \
    static_assert(tpcomm_args_order_QGArgs(), "struct QGArgs: fields in another order than in QuantGatherArgs");

// struct BytesArgs (gathered.cu) is BytesArgs in src/cuda/kernel_args.rs.
#define TPCOMM_ARGS_CHECK_BytesArgs \
    static_assert(sizeof(struct BytesArgs) == 48, "struct BytesArgs: size differs from BytesArgs in src/cuda/kernel_args.rs"); \
    static_assert(sizeof(BytesArgs::in) == 8 && alignof(decltype(BytesArgs::in)) == 8, "BytesArgs.in: size or alignment differs from BytesArgs.input"); \
    static_assert(sizeof(BytesArgs::out) == 8 && alignof(decltype(BytesArgs::out)) == 8, "BytesArgs.out: size or alignment differs from BytesArgs.output"); \
    static_assert(tpcomm_args_at(0 + sizeof(BytesArgs::in), alignof(decltype(BytesArgs::out))) == 8, "BytesArgs.out: offset differs from BytesArgs.output"); \
    static_assert(sizeof(BytesArgs::nbytes) == 8 && alignof(decltype(BytesArgs::nbytes)) == 8, "BytesArgs.nbytes: size or alignment differs from BytesArgs.nbytes"); \
    static_assert(tpcomm_args_at(8 + sizeof(BytesArgs::out), alignof(decltype(BytesArgs::nbytes))) == 16, "BytesArgs.nbytes: offset differs from BytesArgs.nbytes"); \
    static_assert(sizeof(BytesArgs::in_stride) == 8 && alignof(decltype(BytesArgs::in_stride)) == 8, "BytesArgs.in_stride: size or alignment differs from BytesArgs.in_stride"); \
    static_assert(tpcomm_args_at(16 + sizeof(BytesArgs::nbytes), alignof(decltype(BytesArgs::in_stride))) == 24, "BytesArgs.in_stride: offset differs from BytesArgs.in_stride"); \
    static_assert(sizeof(BytesArgs::out_stride) == 8 && alignof(decltype(BytesArgs::out_stride)) == 8, "BytesArgs.out_stride: size or alignment differs from BytesArgs.out_stride"); \
    static_assert(tpcomm_args_at(24 + sizeof(BytesArgs::in_stride), alignof(decltype(BytesArgs::out_stride))) == 32, "BytesArgs.out_stride: offset differs from BytesArgs.out_stride"); \
    static_assert(sizeof(BytesArgs::blocks) == 4 && alignof(decltype(BytesArgs::blocks)) == 4, "BytesArgs.blocks: size or alignment differs from BytesArgs.blocks"); \
    static_assert(tpcomm_args_at(32 + sizeof(BytesArgs::out_stride), alignof(decltype(BytesArgs::blocks))) == 40, "BytesArgs.blocks: offset differs from BytesArgs.blocks"); \
    static_assert(sizeof(BytesArgs::pad) == 4 && alignof(decltype(BytesArgs::pad)) == 4, "BytesArgs.pad: size or alignment differs from BytesArgs.pad"); \
    static_assert(tpcomm_args_at(40 + sizeof(BytesArgs::blocks), alignof(decltype(BytesArgs::pad))) == 44, "BytesArgs.pad: offset differs from BytesArgs.pad"); \
    __device__ constexpr bool tpcomm_args_order_BytesArgs() { struct BytesArgs a{}; return (const void*)&a.in < (const void*)&a.out && (const void*)&a.out < (const void*)&a.nbytes && (const void*)&a.nbytes < (const void*)&a.in_stride && (const void*)&a.in_stride < (const void*)&a.out_stride && (const void*)&a.out_stride < (const void*)&a.blocks && (const void*)&a.blocks < (const void*)&a.pad; } \
    static_assert(tpcomm_args_order_BytesArgs(), "struct BytesArgs: fields in another order than in BytesArgs");

// struct GatheredArgs (gathered.cu) is GatheredArgs in src/cuda/kernel_args.rs.
#define TPCOMM_ARGS_CHECK_GatheredArgs \
    static_assert(sizeof(struct GatheredArgs) == 48, "struct GatheredArgs: size differs from GatheredArgs in src/cuda/kernel_args.rs"); \
    static_assert(sizeof(GatheredArgs::in) == 8 && alignof(decltype(GatheredArgs::in)) == 8, "GatheredArgs.in: size or alignment differs from GatheredArgs.input"); \
    static_assert(sizeof(GatheredArgs::out) == 8 && alignof(decltype(GatheredArgs::out)) == 8, "GatheredArgs.out: size or alignment differs from GatheredArgs.output"); \
    static_assert(tpcomm_args_at(0 + sizeof(GatheredArgs::in), alignof(decltype(GatheredArgs::out))) == 8, "GatheredArgs.out: offset differs from GatheredArgs.output"); \
    static_assert(sizeof(GatheredArgs::count) == 8 && alignof(decltype(GatheredArgs::count)) == 8, "GatheredArgs.count: size or alignment differs from GatheredArgs.count"); \
    static_assert(tpcomm_args_at(8 + sizeof(GatheredArgs::out), alignof(decltype(GatheredArgs::count))) == 16, "GatheredArgs.count: offset differs from GatheredArgs.count"); \
    static_assert(sizeof(GatheredArgs::stride) == 8 && alignof(decltype(GatheredArgs::stride)) == 8, "GatheredArgs.stride: size or alignment differs from GatheredArgs.stride"); \
    static_assert(tpcomm_args_at(16 + sizeof(GatheredArgs::count), alignof(decltype(GatheredArgs::stride))) == 24, "GatheredArgs.stride: offset differs from GatheredArgs.stride"); \
    static_assert(sizeof(GatheredArgs::scalar) == 8 && alignof(decltype(GatheredArgs::scalar)) == 8, "GatheredArgs.scalar: size or alignment differs from GatheredArgs.scalar"); \
    static_assert(tpcomm_args_at(24 + sizeof(GatheredArgs::stride), alignof(decltype(GatheredArgs::scalar))) == 32, "GatheredArgs.scalar: offset differs from GatheredArgs.scalar"); \
    static_assert(sizeof(GatheredArgs::world) == 4 && alignof(decltype(GatheredArgs::world)) == 4, "GatheredArgs.world: size or alignment differs from GatheredArgs.world"); \
    static_assert(tpcomm_args_at(32 + sizeof(GatheredArgs::scalar), alignof(decltype(GatheredArgs::world))) == 40, "GatheredArgs.world: offset differs from GatheredArgs.world"); \
    static_assert(sizeof(GatheredArgs::op) == 4 && alignof(decltype(GatheredArgs::op)) == 4, "GatheredArgs.op: size or alignment differs from GatheredArgs.op"); \
    static_assert(tpcomm_args_at(40 + sizeof(GatheredArgs::world), alignof(decltype(GatheredArgs::op))) == 44, "GatheredArgs.op: offset differs from GatheredArgs.op"); \
    __device__ constexpr bool tpcomm_args_order_GatheredArgs() { struct GatheredArgs a{}; return (const void*)&a.in < (const void*)&a.out && (const void*)&a.out < (const void*)&a.count && (const void*)&a.count < (const void*)&a.stride && (const void*)&a.stride < (const void*)&a.scalar && (const void*)&a.scalar < (const void*)&a.world && (const void*)&a.world < (const void*)&a.op; } \
    static_assert(tpcomm_args_order_GatheredArgs(), "struct GatheredArgs: fields in another order than in GatheredArgs");

// struct P2pCheckArgs (p2p_check.cu) is P2pCheckArgs in src/cuda/kernel_args.rs.
#define TPCOMM_ARGS_CHECK_P2pCheckArgs \
    static_assert(sizeof(struct P2pCheckArgs) == 96, "struct P2pCheckArgs: size differs from P2pCheckArgs in src/cuda/kernel_args.rs"); \
    static_assert(sizeof(P2pCheckArgs::areas) == 64 && alignof(decltype(P2pCheckArgs::areas)) == 8, "P2pCheckArgs.areas: size or alignment differs from P2pCheckArgs.areas"); \
    static_assert(sizeof(P2pCheckArgs::status) == 8 && alignof(decltype(P2pCheckArgs::status)) == 8, "P2pCheckArgs.status: size or alignment differs from P2pCheckArgs.status"); \
    static_assert(tpcomm_args_at(0 + sizeof(P2pCheckArgs::areas), alignof(decltype(P2pCheckArgs::status))) == 64, "P2pCheckArgs.status: offset differs from P2pCheckArgs.status"); \
    static_assert(sizeof(P2pCheckArgs::timeout_ns) == 8 && alignof(decltype(P2pCheckArgs::timeout_ns)) == 8, "P2pCheckArgs.timeout_ns: size or alignment differs from P2pCheckArgs.timeout_ns"); \
    static_assert(tpcomm_args_at(64 + sizeof(P2pCheckArgs::status), alignof(decltype(P2pCheckArgs::timeout_ns))) == 72, "P2pCheckArgs.timeout_ns: offset differs from P2pCheckArgs.timeout_ns"); \
    static_assert(sizeof(P2pCheckArgs::rank) == 4 && alignof(decltype(P2pCheckArgs::rank)) == 4, "P2pCheckArgs.rank: size or alignment differs from P2pCheckArgs.rank"); \
    static_assert(tpcomm_args_at(72 + sizeof(P2pCheckArgs::timeout_ns), alignof(decltype(P2pCheckArgs::rank))) == 80, "P2pCheckArgs.rank: offset differs from P2pCheckArgs.rank"); \
    static_assert(sizeof(P2pCheckArgs::world) == 4 && alignof(decltype(P2pCheckArgs::world)) == 4, "P2pCheckArgs.world: size or alignment differs from P2pCheckArgs.world"); \
    static_assert(tpcomm_args_at(80 + sizeof(P2pCheckArgs::rank), alignof(decltype(P2pCheckArgs::world))) == 84, "P2pCheckArgs.world: offset differs from P2pCheckArgs.world"); \
    static_assert(sizeof(P2pCheckArgs::seed) == 4 && alignof(decltype(P2pCheckArgs::seed)) == 4, "P2pCheckArgs.seed: size or alignment differs from P2pCheckArgs.seed"); \
    static_assert(tpcomm_args_at(84 + sizeof(P2pCheckArgs::world), alignof(decltype(P2pCheckArgs::seed))) == 88, "P2pCheckArgs.seed: offset differs from P2pCheckArgs.seed"); \
    static_assert(sizeof(P2pCheckArgs::pad) == 4 && alignof(decltype(P2pCheckArgs::pad)) == 4, "P2pCheckArgs.pad: size or alignment differs from P2pCheckArgs.pad"); \
    static_assert(tpcomm_args_at(88 + sizeof(P2pCheckArgs::seed), alignof(decltype(P2pCheckArgs::pad))) == 92, "P2pCheckArgs.pad: offset differs from P2pCheckArgs.pad"); \
    __device__ constexpr bool tpcomm_args_order_P2pCheckArgs() { struct P2pCheckArgs a{}; return (const void*)&a.areas < (const void*)&a.status && (const void*)&a.status < (const void*)&a.timeout_ns && (const void*)&a.timeout_ns < (const void*)&a.rank && (const void*)&a.rank < (const void*)&a.world && (const void*)&a.world < (const void*)&a.seed && (const void*)&a.seed < (const void*)&a.pad; } \
    static_assert(tpcomm_args_order_P2pCheckArgs(), "struct P2pCheckArgs: fields in another order than in P2pCheckArgs");
