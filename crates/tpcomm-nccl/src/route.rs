//! Where an `ncclAllReduce` runs, decided once per call by [`decide`]: a pure
//! function of the call, the communicator's `tpcomm::select::RouteTable`
//! (the library's decision, resolved at set-up and agreed by every rank) and
//! its wire (TPCOMM_WIRE, agreed by every rank at set-up), so every rank
//! (same call, same communicator) decides the same way. It answers the
//! library's [`Route`], which the drop-in's first-call log prints as
//! `tpcomm explain` does; the one fact only the drop-in has, whether
//! unaligned buffers go through staging, is [`aligned`], asked apart.

use crate::types::{dtype_of, NcclDataType, NcclRedOp, OP_SUM};
use tpcomm::cuda::quant::wire_for;
use tpcomm::quant::Wire;
use tpcomm::select::{Mode, NcclReason, Route, RouteTable};
use tpcomm::{Algo, ByteSize, ReduceOp};

/// The launch mode the drop-in routes for: it cannot tell an eager call from
/// one being captured into a graph without a driver call per all-reduce, so
/// it routes as the library's communicator does by default.
pub const MODE: Mode = Mode::Graph;

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

impl Call {
    /// The call's size in bytes for logs: `count` elements of its type
    /// (one byte each for a type tpcomm does not know), saturating.
    pub fn bytes(&self) -> usize {
        let elem = dtype_of(self.dtype).map_or(1, |d| d.size());
        self.count.saturating_mul(elem)
    }
}

/// What [`decide`] reads of the tpcomm communicator paired with a real one.
#[derive(Clone, Copy, Debug)]
pub struct Paths<'a> {
    /// Where each exact all-reduce goes, NCCL included.
    pub routes: &'a RouteTable,
    /// The wire every rank agreed on (TPCOMM_WIRE; `Wire::Exact` when unset)
    /// and the size it applies from (TPCOMM_WIRE_MIN_BYTES).
    pub wire: Wire,
    pub wire_min: ByteSize,
}

/// The route of one call: TPCOMM_DISABLE (`disabled`), the paired
/// communicator (`paths`, `None` when there is none), the group, the type,
/// op and size rules the drop-in adds, then the library's one lookup
/// (`RouteTable::lookup`: the buffers, the quantized wire, which takes every
/// sum the kernels can, NCCL-is-faster sizes included, then the route
/// table). Two comparisons, an array index and the wire's size test: no
/// allocation, no lock, no system call.
pub fn decide(disabled: bool, paths: Option<Paths>, c: &Call) -> Route {
    if disabled {
        return Route::Nccl(NcclReason::Disabled);
    }
    let Some(p) = paths else {
        return Route::Nccl(NcclReason::NotSetUp);
    };
    if c.group_depth > 0 {
        return Route::Nccl(NcclReason::InGroup);
    }
    let Some(dtype) = dtype_of(c.dtype) else {
        return Route::Nccl(NcclReason::DType);
    };
    if c.op != OP_SUM {
        return Route::Nccl(NcclReason::Op);
    }
    if c.count == 0 {
        return Route::Nccl(NcclReason::Empty);
    }
    let Some(bytes) = c.count.checked_mul(dtype.size()) else {
        return Route::Nccl(NcclReason::TooLarge);
    };
    let wire = wire_for(p.wire, p.wire_min, bytes as u64);
    p.routes
        .lookup(bytes as u64, dtype, ReduceOp::Sum, Algo::Auto, MODE, wire)
}

/// What the first-call log prints for a call: the route as `tpcomm explain`
/// prints it and, when tpcomm takes a call with unaligned buffers, that it
/// goes through staging. Alignment is asked apart from [`decide`] and never
/// changes where the call goes: it can differ between ranks (a tensor view
/// on one, a whole tensor on another), and ranks that route one call apart
/// never meet. Unaligned buffers go through the staging buffer instead (it
/// holds TPCOMM_MAX_BYTES, and the table sends nothing larger to tpcomm).
pub fn log_text(route: Route, c: &Call) -> String {
    match route {
        Route::Tpcomm { .. } if !aligned(c) => {
            format!("{route}, through staging (unaligned buffers)")
        }
        _ => route.to_string(),
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
    use tpcomm::select::{class_edge, Group, Selector, Transport};
    use tpcomm::topology::MachineClass;
    use tpcomm::{ByteSize, DType};

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

    /// The route with the exact wire (TPCOMM_WIRE unset).
    fn exact(disabled: bool, routes: Option<&RouteTable>, c: &Call) -> Route {
        let paths = routes.map(|routes| Paths {
            routes,
            wire: Wire::Exact,
            wire_min: ByteSize::b(0),
        });
        decide(disabled, paths, c)
    }

    /// tpcomm's exact kernels on `transport`.
    fn tp_on(transport: Transport, algo: Algo) -> Route {
        Route::exact(transport, algo)
    }

    fn tp(algo: Algo) -> Route {
        tp_on(Transport::Cuda, algo)
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
        assert_eq!(exact(false, cap, &call(4096, 9)), tp(Algo::OneShot));
        assert_eq!(exact(false, cap, &call(1, 6)), tp(Algo::OneShot));
        assert_eq!(exact(false, cap, &call(1 << 22, 7)), tp(Algo::TwoShot));
    }

    #[test]
    fn disabled_forwards_everything_even_when_set_up() {
        let t = nvlink();
        assert_eq!(
            exact(true, Some(&t), &call(4096, 9)),
            Route::Nccl(NcclReason::Disabled)
        );
    }

    #[test]
    fn calls_inside_a_group_keep_ncclgroup_semantics() {
        let t = nvlink();
        let mut c = call(4096, 9);
        c.group_depth = 1;
        assert_eq!(exact(false, Some(&t), &c), Route::Nccl(NcclReason::InGroup));
    }

    #[test]
    fn what_the_kernels_cannot_do_goes_to_nccl() {
        let t = nvlink();
        let cap = Some(&t);
        assert_eq!(
            exact(false, None, &call(8, 9)),
            Route::Nccl(NcclReason::NotSetUp)
        );
        assert_eq!(
            exact(false, cap, &call(8, 2)),
            Route::Nccl(NcclReason::DType)
        ); // int32
        assert_eq!(
            exact(false, cap, &call(8, 8)),
            Route::Nccl(NcclReason::DType)
        ); // f64
        let mut c = call(8, 9);
        c.op = 2; // max
        assert_eq!(exact(false, cap, &c), Route::Nccl(NcclReason::Op));
        c.op = 4; // avg
        assert_eq!(exact(false, cap, &c), Route::Nccl(NcclReason::Op));
        assert_eq!(
            exact(false, cap, &call(0, 9)),
            Route::Nccl(NcclReason::Empty)
        );
    }

    /// Unaligned buffers stay with tpcomm (through staging): routing must not
    /// depend on an address, which can differ between ranks.
    #[test]
    fn alignment_never_changes_the_route_only_the_staging() {
        let t = nvlink();
        let c = call(8, 9);
        assert!(aligned(&c));
        let r = exact(false, Some(&t), &c);
        assert_eq!(r, tp(Algo::OneShot), "8 bf16 on NVLink go to tpcomm");
        assert_eq!(log_text(r, &c), "tpcomm cuda:one-shot");
        for (ds, dr) in [(2usize, 0usize), (0, 2), (8, 8), (14, 6)] {
            let mut u = c;
            u.send += ds;
            u.recv += dr;
            assert_eq!(exact(false, Some(&t), &u), r);
            assert!(!aligned(&u));
            assert_eq!(
                log_text(r, &u),
                "tpcomm cuda:one-shot, through staging (unaligned buffers)"
            );
        }
    }

    /// The one decision, step by step, on a PCIe box with P2P (tpcomm up to
    /// 128 KiB of bf16, NCCL faster above, buffers of 16 MiB), with and
    /// without the quantized wire (int8 from 64 KiB up), and the line the
    /// first-call log prints for each.
    #[test]
    fn decide_covers_every_step_once() {
        let t = routes(MachineClass::PcieP2p, Transport::Cuda, 8);
        let q = tpcomm::quant::wire_from_vars(Some("int8/32"), Some("64KiB")).unwrap();
        let int8 = Some(Paths {
            routes: &t,
            wire: q.wire,
            wire_min: q.min_bytes,
        });
        let small = call(16 << 10, 9); // 32 KiB of bf16
        let mid = call(1 << 19, 9); // 1 MiB of bf16
        let big = call((8 << 20) + 1, 9); // above 16 MiB
        let too_large = Route::Nccl(NcclReason::TooLarge);

        // TPCOMM_DISABLE wins over everything, even a set-up communicator.
        assert_eq!(decide(true, int8, &mid), Route::Nccl(NcclReason::Disabled));
        // No paired communicator.
        assert_eq!(
            decide(false, None, &small),
            Route::Nccl(NcclReason::NotSetUp)
        );
        // Above the buffers: NCCL, quantized wire or not.
        assert_eq!(exact(false, Some(&t), &big), too_large);
        assert_eq!(decide(false, int8, &big), too_large);
        // NCCL faster by the table, with the exact wire.
        let faster = exact(false, Some(&t), &mid);
        assert_eq!(faster, Route::Nccl(NcclReason::Faster));
        // The quantized wire takes that same call.
        let quant = Route::Tpcomm {
            transport: Transport::Cuda,
            algo: None,
            wire: q.wire,
        };
        assert_eq!(decide(false, int8, &mid), quant);
        // Below TPCOMM_WIRE_MIN_BYTES the exact kernels the table picked run.
        let in_place = tp(Algo::OneShot);
        assert_eq!(decide(false, int8, &small), in_place);
        assert_eq!(exact(false, Some(&t), &small), in_place);
        // Unaligned buffers: the same route, through staging, on either wire.
        let mut odd = small;
        odd.recv += 2;
        assert_eq!(decide(false, int8, &odd), in_place);
        let mut odd_mid = mid;
        odd_mid.send += 4;
        assert_eq!(decide(false, int8, &odd_mid), quant);
        // An unaligned call the kernels do not take stays with NCCL.
        let mut odd_big = big;
        odd_big.send += 2;
        assert_eq!(decide(false, int8, &odd_big), too_large);

        // The log prints the decision.
        assert_eq!(
            log_text(faster, &mid),
            format!("NCCL ({})", NcclReason::Faster.text())
        );
        assert_eq!(log_text(in_place, &small), "tpcomm cuda:one-shot");
        assert_eq!(
            log_text(in_place, &odd),
            "tpcomm cuda:one-shot, through staging (unaligned buffers)"
        );
        assert_eq!(
            log_text(quant, &odd_mid),
            format!(
                "tpcomm cuda on the quantized {} wire, through staging (unaligned buffers)",
                q.wire.label()
            )
        );
        assert_eq!(
            log_text(too_large, &odd_big),
            format!("NCCL ({})", NcclReason::TooLarge.text())
        );
    }

    #[test]
    fn the_size_limit_is_inclusive_and_overflow_safe() {
        let t = nvlink();
        let cap = Some(&t);
        assert!(matches!(
            exact(false, cap, &call(4 << 20, 7)),
            Route::Tpcomm { .. }
        ));
        assert_eq!(
            exact(false, cap, &call((4 << 20) + 1, 7)),
            Route::Nccl(NcclReason::TooLarge)
        );
        assert_eq!(
            exact(false, cap, &call(usize::MAX, 7)),
            Route::Nccl(NcclReason::TooLarge)
        );
    }

    /// A box without P2P: the group's verdict gives the host transport, whose
    /// kernels take small sums and NCCL the middle sizes (before,
    /// the drop-in held the P2P communicator only and such boxes sent every
    /// call to NCCL).
    #[test]
    fn without_p2p_small_sums_take_the_host_path_and_middle_sizes_nccl() {
        let t = routes(MachineClass::PcieNop2p, Transport::Host, 4);
        let cap = Some(&t);
        // 16 KiB of bf16: one decode token of a 8192-wide model.
        assert_eq!(
            exact(false, cap, &call(8192, 9)),
            tp_on(Transport::Host, Algo::OneShot)
        );
        assert_eq!(
            exact(false, cap, &call(1 << 20, 9)),
            tp_on(Transport::Host, Algo::OneShot)
        );
        assert_eq!(
            exact(false, cap, &call(4 << 20, 9)),
            Route::Nccl(NcclReason::Faster)
        );
        assert_eq!(t.group().transport, Transport::Host);
    }

    /// A PCIe box with P2P: NCCL by size above 256 KiB (the class default),
    /// the kernels below.
    #[test]
    fn with_pcie_p2p_nccl_takes_the_sizes_where_it_wins() {
        let t = routes(MachineClass::PcieP2p, Transport::Cuda, 8);
        let cap = Some(&t);
        assert_eq!(exact(false, cap, &call(128 << 10, 9)), tp(Algo::OneShot));
        assert_eq!(
            exact(false, cap, &call((128 << 10) + 8, 9)),
            Route::Nccl(NcclReason::Faster)
        );
        assert_eq!(
            exact(false, cap, &call(1 << 20, 7)),
            Route::Nccl(NcclReason::Faster)
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
        assert_eq!(exact(false, cap, &call(512, 9)), tp(Algo::OneShot));
        assert_eq!(exact(false, cap, &call(2048, 9)), tp(Algo::TwoShot));
        assert_eq!(
            exact(false, cap, &call(4096, 9)),
            Route::Nccl(NcclReason::Faster)
        );
        assert_eq!(
            exact(false, cap, &call(1 << 20, 9)),
            Route::Nccl(NcclReason::Faster)
        );
    }

    /// `tpcomm explain` answers the route the drop-in takes, and prints it
    /// with the same text: for every size class edge (and one byte past
    /// it), type and machine class, on the exact wire and on int8 from
    /// 64 KiB up, the drop-in's decision is the one `RouteTable::explain`
    /// reports for the drop-in's launch mode and the wire of that size.
    #[test]
    fn the_drop_in_takes_the_route_explain_prints() {
        let classes = [
            (MachineClass::Nvlink, Transport::Cuda, 2),
            (MachineClass::PcieP2p, Transport::Cuda, 8),
            (MachineClass::PcieNop2p, Transport::Host, 4),
        ];
        let int8 = tpcomm::quant::wire_from_vars(Some("int8"), Some("64KiB")).unwrap();
        let mut seen = std::collections::HashSet::new();
        for (class, transport, world) in classes {
            let t = routes(class, transport, world);
            let sel = Selector::for_class(class);
            for (wire, wire_min) in [(Wire::Exact, ByteSize::b(0)), (int8.wire, int8.min_bytes)] {
                let paths = Paths {
                    routes: &t,
                    wire,
                    wire_min,
                };
                for (nccl_type, dt) in [(9, DType::Bf16), (6, DType::F16), (7, DType::F32)] {
                    for i in 1..110 {
                        for bytes in [class_edge(i), class_edge(i) + dt.size() as u64] {
                            let count = (bytes as usize).div_ceil(dt.size());
                            let c = call(count, nccl_type);
                            let mine = decide(false, Some(paths), &c);
                            let b = (count * dt.size()) as u64;
                            let on = wire_for(wire, wire_min, b);
                            let (theirs, _) = t.explain(&sel, b, dt, ReduceOp::Sum, MODE, on);
                            assert_eq!(mine, theirs, "{class:?}, {b} bytes of {dt:?}, {on:?}");
                            assert_eq!(log_text(mine, &c), theirs.to_string());
                            seen.insert(theirs);
                        }
                    }
                }
            }
        }
        // Every kind of route was met: the exact kernels, the quantized
        // wire, NCCL faster and above the buffers.
        assert!(seen.contains(&Route::Nccl(NcclReason::Faster)), "{seen:?}");
        assert!(
            seen.contains(&Route::Nccl(NcclReason::TooLarge)),
            "{seen:?}"
        );
        assert!(seen.iter().any(|r| r.algo().is_some()), "{seen:?}");
        let quantized = |r: &Route| matches!(r, Route::Tpcomm { wire, .. } if *wire != Wire::Exact);
        assert!(seen.iter().any(quantized), "{seen:?}");
    }

    /// The decision a tpcomm call pays on the CPU: `decide` over the resolved
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
            if matches!(exact(false, Some(&t), c), Route::Tpcomm { .. }) {
                tpcomm += 1;
            }
        }
        let ns = start.elapsed().as_nanos() as f64 / n as f64;
        eprintln!("decide(): {ns:.1} ns per call ({tpcomm} of {n} to tpcomm)");
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
