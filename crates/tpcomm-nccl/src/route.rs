//! Which library runs an all-reduce: a pure function of the call and the
//! communicator's `tpcomm::select::RouteTable` (the library's one decision,
//! resolved at set-up and agreed by every rank), so every rank (same call,
//! same communicator) decides the same way.

use crate::types::{dtype_of, NcclDataType, NcclRedOp, OP_SUM};
use tpcomm::select::{self, Mode, RouteTable};
use tpcomm::{Algo, DType, ReduceOp};

/// The launch mode the drop-in routes for: it cannot tell an eager call from
/// one being captured into a graph without a driver call per all-reduce, so
/// it routes as the library's communicator does by default.
pub const MODE: Mode = Mode::Graph;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// tpcomm's kernels, with this algorithm (never `Auto`).
    Tpcomm(DType, Algo),
    Nccl(Why),
}

/// Why an all-reduce goes to NCCL.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Why {
    Disabled,
    /// No tpcomm state beside this communicator (another machine, a set-up
    /// failure, a communicator made before the library was loaded).
    NotSetUp,
    /// Between ncclGroupStart and ncclGroupEnd, NCCL fuses the group.
    InGroup,
    DType,
    Op,
    Empty,
    TooLarge,
    /// The tuning table or the class's defaults say NCCL is faster here.
    Faster,
}

impl Why {
    pub fn text(self) -> &'static str {
        match self {
            Why::Disabled => "TPCOMM_DISABLE is set",
            Why::NotSetUp => "no tpcomm communicator beside this one",
            Why::InGroup => "inside ncclGroupStart/ncclGroupEnd",
            Why::DType => "data type other than f32/f16/bf16",
            Why::Op => "reduce op other than sum",
            Why::Empty => "zero elements",
            Why::TooLarge => "above TPCOMM_MAX_BYTES",
            Why::Faster => {
                "faster than tpcomm at this size, by this machine's table or class defaults"
            }
        }
    }
}

/// One `ncclAllReduce` call, as routing sees it.
#[derive(Clone, Copy, Debug)]
pub struct Call {
    pub send: usize,
    pub recv: usize,
    pub count: usize,
    pub dtype: NcclDataType,
    pub op: NcclRedOp,
    pub group_depth: u32,
}

pub fn route(disabled: bool, routes: Option<&RouteTable>, c: &Call) -> Route {
    if disabled {
        return Route::Nccl(Why::Disabled);
    }
    let Some(routes) = routes else {
        return Route::Nccl(Why::NotSetUp);
    };
    if c.group_depth > 0 {
        return Route::Nccl(Why::InGroup);
    }
    let Some(dt) = dtype_of(c.dtype) else {
        return Route::Nccl(Why::DType);
    };
    if c.op != OP_SUM {
        return Route::Nccl(Why::Op);
    }
    if c.count == 0 {
        return Route::Nccl(Why::Empty);
    }
    let Some(bytes) = c.count.checked_mul(dt.size()) else {
        return Route::Nccl(Why::TooLarge);
    };
    // Alignment is not asked: it can differ between ranks (a tensor view on
    // one, a whole tensor on another), and ranks that route one call apart
    // never meet. Unaligned buffers go through the staging buffer instead.
    let r = routes.lookup(bytes as u64, dt, ReduceOp::Sum, Algo::Auto, MODE);
    match (r.route, r.algo) {
        (select::Route::Tpcomm, Some(a)) => Route::Tpcomm(dt, a),
        (select::Route::NcclFaster, _) => Route::Nccl(Why::Faster),
        _ => Route::Nccl(Why::TooLarge),
    }
}

/// Whether the kernels can read and write the call's buffers in place (16-byte
/// vectors); otherwise the call goes through the staging buffer.
pub fn aligned(c: &Call) -> bool {
    c.send.is_multiple_of(16) && c.recv.is_multiple_of(16)
}

/// The power-of-two size class of a message, for "first call of each size class" logs.
pub fn size_class(bytes: usize) -> u32 {
    usize::BITS - bytes.leading_zeros()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tpcomm::select::{Group, Selector, Transport};
    use tpcomm::topology::MachineClass;
    use tpcomm::ByteSize;

    /// The routes set-up resolves for a group of `world` on this class.
    fn routes(class: MachineClass, transport: Transport, world: usize) -> RouteTable {
        RouteTable::resolve(
            &Selector::for_class(class),
            Group {
                world,
                transport,
                nccl: true,
                max_bytes: ByteSize::mib(16),
            },
        )
        .unwrap()
    }

    fn nvlink() -> RouteTable {
        routes(MachineClass::Nvlink, Transport::Cuda, 2)
    }

    fn call(count: usize, dtype: i32) -> Call {
        Call {
            send: 0x1000,
            recv: 0x2000,
            count,
            dtype,
            op: OP_SUM,
            group_depth: 0,
        }
    }

    #[test]
    fn supported_sum_goes_to_tpcomm_for_each_float_type() {
        let t = nvlink();
        let cap = Some(&t);
        assert_eq!(
            route(false, cap, &call(4096, 9)),
            Route::Tpcomm(DType::Bf16, Algo::OneShot)
        );
        assert_eq!(
            route(false, cap, &call(1, 6)),
            Route::Tpcomm(DType::F16, Algo::OneShot)
        );
        assert_eq!(
            route(false, cap, &call(1 << 22, 7)),
            Route::Tpcomm(DType::F32, Algo::TwoShot)
        );
    }

    #[test]
    fn disabled_forwards_everything_even_when_set_up() {
        let t = nvlink();
        assert_eq!(
            route(true, Some(&t), &call(4096, 9)),
            Route::Nccl(Why::Disabled)
        );
    }

    #[test]
    fn calls_inside_a_group_keep_ncclgroup_semantics() {
        let t = nvlink();
        let mut c = call(4096, 9);
        c.group_depth = 1;
        assert_eq!(route(false, Some(&t), &c), Route::Nccl(Why::InGroup));
    }

    #[test]
    fn what_the_kernels_cannot_do_goes_to_nccl() {
        let t = nvlink();
        let cap = Some(&t);
        assert_eq!(route(false, None, &call(8, 9)), Route::Nccl(Why::NotSetUp));
        assert_eq!(route(false, cap, &call(8, 2)), Route::Nccl(Why::DType)); // int32
        assert_eq!(route(false, cap, &call(8, 8)), Route::Nccl(Why::DType)); // f64
        let mut c = call(8, 9);
        c.op = 2; // max
        assert_eq!(route(false, cap, &c), Route::Nccl(Why::Op));
        c.op = 4; // avg
        assert_eq!(route(false, cap, &c), Route::Nccl(Why::Op));
        assert_eq!(route(false, cap, &call(0, 9)), Route::Nccl(Why::Empty));
    }

    /// Unaligned buffers stay with tpcomm (through staging): routing must not
    /// depend on an address, which can differ between ranks.
    #[test]
    fn alignment_never_changes_the_route_only_the_staging() {
        let t = nvlink();
        let c = call(8, 9);
        assert!(aligned(&c));
        for (ds, dr) in [(2usize, 0usize), (0, 2), (8, 8), (14, 6)] {
            let mut u = c;
            u.send += ds;
            u.recv += dr;
            assert_eq!(route(false, Some(&t), &u), route(false, Some(&t), &c));
            assert!(!aligned(&u));
        }
    }

    #[test]
    fn the_size_limit_is_inclusive_and_overflow_safe() {
        let t = nvlink();
        let cap = Some(&t);
        assert!(matches!(
            route(false, cap, &call(4 << 20, 7)),
            Route::Tpcomm(DType::F32, _)
        ));
        assert_eq!(
            route(false, cap, &call((4 << 20) + 1, 7)),
            Route::Nccl(Why::TooLarge)
        );
        assert_eq!(
            route(false, cap, &call(usize::MAX, 7)),
            Route::Nccl(Why::TooLarge)
        );
    }

    /// A box without P2P: the group's verdict gives the host transport, whose
    /// kernels take small sums and NCCL the middle sizes (issue 16: before,
    /// the drop-in held the P2P communicator only and such boxes sent every
    /// call to NCCL).
    #[test]
    fn without_p2p_small_sums_take_the_host_path_and_middle_sizes_nccl() {
        let t = routes(MachineClass::PcieNop2p, Transport::Host, 4);
        let cap = Some(&t);
        // 16 KiB of bf16: one decode token of a 8192-wide model.
        assert_eq!(
            route(false, cap, &call(8192, 9)),
            Route::Tpcomm(DType::Bf16, Algo::OneShot)
        );
        assert_eq!(
            route(false, cap, &call(1 << 20, 9)),
            Route::Tpcomm(DType::Bf16, Algo::OneShot)
        );
        assert_eq!(
            route(false, cap, &call(4 << 20, 9)),
            Route::Nccl(Why::Faster)
        );
        assert_eq!(t.group().transport, Transport::Host);
    }

    /// A PCIe box with P2P: NCCL by size above 256 KiB (the class default),
    /// the kernels below.
    #[test]
    fn with_pcie_p2p_nccl_takes_the_sizes_where_it_wins() {
        let t = routes(MachineClass::PcieP2p, Transport::Cuda, 8);
        let cap = Some(&t);
        assert_eq!(
            route(false, cap, &call(128 << 10, 9)),
            Route::Tpcomm(DType::Bf16, Algo::OneShot)
        );
        assert_eq!(
            route(false, cap, &call((128 << 10) + 8, 9)),
            Route::Nccl(Why::Faster)
        );
        assert_eq!(
            route(false, cap, &call(1 << 20, 7)),
            Route::Nccl(Why::Faster)
        );
    }

    /// A machine's own table decides where it has rows: here NCCL wins at
    /// 8 KiB and above in graph mode (what the drop-in routes for).
    #[test]
    fn a_machine_table_decides_where_it_has_rows() {
        let text = r#"format = 1
fingerprint = "v1-00000000000000aa"
machine_class = "nvlink"
world = 2
gpu = "Test GPU"
driver = "13.0"
measured = "by hand"
rows = [
  { dtype = "bf16", mode = "graph", bytes = 1024, times_us = { "cuda:one-shot" = 3.0, "cuda:two-shot" = 5.0, "nccl" = 7.0 } },
  { dtype = "bf16", mode = "graph", bytes = 4096, times_us = { "cuda:one-shot" = 10.0, "cuda:two-shot" = 6.0, "nccl" = 8.0 } },
  { dtype = "bf16", mode = "graph", bytes = 8192, times_us = { "cuda:one-shot" = 30.0, "cuda:two-shot" = 20.0, "nccl" = 9.0 } },
]
"#;
        let table = tpcomm::select::Table::parse(text, "t.toml").unwrap();
        let t = RouteTable::resolve(
            &Selector::with_table(table, "t.toml"),
            Group {
                world: 2,
                transport: Transport::Cuda,
                nccl: true,
                max_bytes: ByteSize::mib(16),
            },
        )
        .unwrap();
        let cap = Some(&t);
        assert_eq!(
            route(false, cap, &call(512, 9)),
            Route::Tpcomm(DType::Bf16, Algo::OneShot)
        );
        assert_eq!(
            route(false, cap, &call(2048, 9)),
            Route::Tpcomm(DType::Bf16, Algo::TwoShot)
        );
        assert_eq!(route(false, cap, &call(4096, 9)), Route::Nccl(Why::Faster));
        assert_eq!(
            route(false, cap, &call(1 << 20, 9)),
            Route::Nccl(Why::Faster)
        );
    }

    /// The decision a tpcomm call pays on the CPU: `route` over the resolved
    /// table. Printed; bounded loosely (a shared CI core), so only a lock,
    /// an allocation storm or a system call per call would fail it.
    #[test]
    fn routing_a_call_is_a_lookup_of_nanoseconds() {
        let t = routes(MachineClass::PcieP2p, Transport::Cuda, 8);
        let calls: Vec<Call> = (0..64).map(|i| call(1 << (i % 20), 9)).collect();
        let n = 1_000_000;
        let start = std::time::Instant::now();
        let mut tpcomm = 0usize;
        for i in 0..n {
            let c = std::hint::black_box(&calls[i % calls.len()]);
            if matches!(route(false, Some(&t), c), Route::Tpcomm(..)) {
                tpcomm += 1;
            }
        }
        let ns = start.elapsed().as_nanos() as f64 / n as f64;
        eprintln!("route(): {ns:.1} ns per call ({tpcomm} of {n} to tpcomm)");
        assert!(tpcomm > 0 && tpcomm < n);
        assert!(ns < 2_000.0, "{ns} ns per call");
    }

    #[test]
    fn size_classes_are_powers_of_two() {
        assert_eq!(size_class(1), 1);
        assert_eq!(size_class(1024), 11);
        assert_eq!(size_class(1025), 11);
        assert_eq!(size_class(2047), 11);
        assert_eq!(size_class(2048), 12);
    }
}
