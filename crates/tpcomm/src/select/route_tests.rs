use super::*;
use crate::algo::Algo;
use crate::dtype::DType;
use crate::dtype::ReduceOp;
use crate::topology::MachineClass;
use crate::units::ByteSize;
use crate::wire::Wire;

/// Every selector a communicator can hold without a file: each class's
/// built-in defaults, and the committed NVLink table loaded as a machine's.
fn fixtures() -> Vec<Selector> {
    let mut v: Vec<Selector> = MachineClass::ALL
        .into_iter()
        .map(Selector::for_class)
        .collect();
    let t = Table::parse(BUILTIN_NVLINK_TOML, "default-nvlink.toml").unwrap();
    v.push(Selector::with_table(t, "default-nvlink.toml"));
    v
}

fn group(world: usize, transport: Transport, nccl: bool) -> Group {
    Group {
        world,
        transport,
        nccl,
        max_bytes: ByteSize::mib(8),
    }
}

/// Sizes around every class edge up to the buffer, and a few odd ones.
fn sizes() -> Vec<u64> {
    let mut v = vec![1, 2, 3, 7, 100, 1000, 4095, 4097, 12345, 3 << 20];
    let mut p = 16u64;
    while p <= 8 << 20 {
        v.extend([p - 2, p, p + 2, p + p / 2]);
        p *= 2;
    }
    v.retain(|b| *b <= 8 << 20);
    v
}

#[test]
fn size_classes_cover_every_size_once_with_powers_of_two_and_midpoints_as_edges() {
    let mut b = 1u64;
    while b < 1 << 40 {
        for x in [b, b + 1, b + b / 3] {
            let i = size_class(x);
            assert!(class_floor(i) < x && x <= class_edge(i), "{x} in class {i}");
        }
        assert_eq!(class_edge(size_class(b)), b, "{b} is an edge");
        if b >= 4 {
            assert_eq!(class_edge(size_class(b + b / 2)), b + b / 2);
        }
        b *= 2;
    }
    assert_eq!(size_class(0), 0);
    // The largest size still has a class, and its edge saturates.
    assert_eq!(class_edge(size_class(u64::MAX)), u64::MAX);
    // Four classes per octave.
    assert_eq!(size_class(1 << 21) - size_class(1 << 20), 4);
}

/// The table a communicator holds answers, for every class fixture, every
/// transport, with and without NCCL, every type and mode, exactly what the
/// decision answers at the size its class is decided at.
#[test]
fn a_route_table_answers_what_the_decision_answers_for_every_fixture() {
    for sel in fixtures() {
        for world in [2, 4, 8] {
            for transport in [Transport::Cuda, Transport::Host] {
                for nccl in [true, false] {
                    let g = group(world, transport, nccl);
                    let t = RouteTable::resolve(&sel, g).unwrap();
                    for dtype in DType::ALL {
                        for mode in [Mode::Eager, Mode::Graph] {
                            for bytes in sizes() {
                                let r = t.lookup(
                                    bytes,
                                    dtype,
                                    ReduceOp::Sum,
                                    Algo::Auto,
                                    mode,
                                    Wire::Exact,
                                );
                                let at = RouteTable::decided_at(size_class(bytes), g.max_bytes);
                                let q = Query {
                                    world,
                                    dtype,
                                    bytes: at,
                                    mode,
                                };
                                let d = decide(&sel, &g, &q);
                                let ctx = format!(
                                    "{} {world} {transport:?} nccl={nccl} {dtype:?} {mode:?} {bytes}: {}",
                                    sel.source(),
                                    d.why
                                );
                                assert_eq!(r.candidate(), d.choice, "{ctx}");
                                if !nccl {
                                    assert!(!r.is_nccl(), "{ctx}");
                                }
                                let (e, why) =
                                    t.explain(&sel, bytes, dtype, ReduceOp::Sum, mode, Wire::Exact);
                                assert_eq!(e, r, "{ctx}");
                                assert_eq!(why.map(|w| w.choice), Some(d.choice), "{ctx}");
                            }
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn pcie_p2p_machines_run_nccl_above_256_kib_when_nccl_is_loaded() {
    let sel = Selector::for_class(MachineClass::PcieP2p);
    let t = RouteTable::resolve(&sel, group(4, Transport::Cuda, true)).unwrap();
    let at = |b| {
        t.lookup(
            b,
            DType::Bf16,
            ReduceOp::Sum,
            Algo::Auto,
            Mode::Eager,
            Wire::Exact,
        )
    };
    assert_eq!(at(256 << 10).algo(), Some(Algo::OneShot));
    assert_eq!(at((256 << 10) + 16).nccl_reason(), Some(NcclReason::Faster));
    assert_eq!(at(8 << 20).nccl_reason(), Some(NcclReason::Faster));
    assert_eq!(at((8 << 20) + 2).nccl_reason(), Some(NcclReason::TooLarge));
    assert!(t.note().is_none());
    // Without NCCL: tpcomm's best, and the note says NCCL would have won.
    let t = RouteTable::resolve(&sel, group(4, Transport::Cuda, false)).unwrap();
    let r = t.lookup(
        1 << 20,
        DType::Bf16,
        ReduceOp::Sum,
        Algo::Auto,
        Mode::Eager,
        Wire::Exact,
    );
    assert!(!r.is_nccl());
    assert!(t.note().unwrap().contains("would run faster on NCCL"));
}

#[test]
fn nvlink_machines_keep_every_size_on_the_kernels_by_the_committed_table() {
    let sel = Selector::for_class(MachineClass::Nvlink);
    let t = RouteTable::resolve(&sel, group(2, Transport::Cuda, true)).unwrap();
    for b in sizes() {
        for mode in [Mode::Eager, Mode::Graph] {
            let r = t.lookup(b, DType::Bf16, ReduceOp::Sum, Algo::Auto, mode, Wire::Exact);
            assert!(!r.is_nccl(), "{b} {mode:?}");
        }
    }
    let r = t.lookup(
        1024,
        DType::Bf16,
        ReduceOp::Sum,
        Algo::Auto,
        Mode::Graph,
        Wire::Exact,
    );
    assert_eq!(r.algo(), Some(Algo::OneShot));
    let r = t.lookup(
        8 << 20,
        DType::Bf16,
        ReduceOp::Sum,
        Algo::Auto,
        Mode::Graph,
        Wire::Exact,
    );
    assert_eq!(r.algo(), Some(Algo::TwoShot));
}

#[test]
fn groups_without_p2p_run_the_host_kernels_small_and_nccl_in_the_middle() {
    let sel = Selector::for_class(MachineClass::PcieNop2p);
    let t = RouteTable::resolve(
        &sel,
        Group {
            max_bytes: ByteSize::mib(32),
            ..group(2, Transport::Host, true)
        },
    )
    .unwrap();
    let at = |b| {
        t.lookup(
            b,
            DType::Bf16,
            ReduceOp::Sum,
            Algo::Auto,
            Mode::Graph,
            Wire::Exact,
        )
    };
    assert_eq!(at(16 << 10).candidate(), Candidate::host(Algo::OneShot));
    assert_eq!(at(2 << 20).candidate(), Candidate::host(Algo::OneShot));
    assert_eq!(at(4 << 20).nccl_reason(), Some(NcclReason::Faster));
    assert_eq!(at(32 << 20).candidate(), Candidate::host(Algo::TwoShot));
}

#[test]
fn op_and_buffer_rules_come_before_the_decision() {
    let max = ByteSize::mib(8);
    assert_eq!(NcclReason::of(1, max, ReduceOp::Sum), None);
    assert_eq!(NcclReason::of(max.bytes(), max, ReduceOp::Sum), None);
    assert_eq!(
        NcclReason::of(max.bytes() + 1, max, ReduceOp::Sum),
        Some(NcclReason::TooLarge)
    );
    for op in [ReduceOp::Max, ReduceOp::Min] {
        assert_eq!(NcclReason::of(16, max, op), Some(NcclReason::Op));
        assert_eq!(
            NcclReason::of(max.bytes() * 2, max, op),
            Some(NcclReason::Op)
        );
    }
    let t = RouteTable::resolve(
        &Selector::for_class(MachineClass::Nvlink),
        group(2, Transport::Cuda, true),
    )
    .unwrap();
    let r = t.route(
        usize::MAX,
        DType::F32,
        ReduceOp::Sum,
        Algo::Auto,
        Mode::Graph,
        Wire::Exact,
    );
    assert!(r.unwrap_err().to_string().contains("overflow"));
    let r = t.route(
        8,
        DType::F32,
        ReduceOp::Max,
        Algo::OneShot,
        Mode::Graph,
        Wire::Exact,
    );
    assert_eq!(r.unwrap(), Route::Nccl(NcclReason::Op));
}

#[test]
fn a_group_on_the_nccl_transport_or_of_one_rank_is_refused_with_a_reason() {
    let sel = Selector::for_class(MachineClass::Nvlink);
    let e = RouteTable::resolve(&sel, group(2, Transport::Nccl, true)).unwrap_err();
    assert!(e.to_string().contains("cuda or host"), "{e}");
    let e = RouteTable::resolve(&sel, group(1, Transport::Cuda, true)).unwrap_err();
    assert!(e.to_string().contains("2 to 8"), "{e}");
}

#[test]
fn ranks_adopt_rank_0s_picks_and_refuse_picks_that_do_not_fit() {
    let g = group(2, Transport::Cuda, true);
    let p2p = RouteTable::resolve(&Selector::for_class(MachineClass::PcieP2p), g).unwrap();
    let mut nv = RouteTable::resolve(&Selector::for_class(MachineClass::Nvlink), g).unwrap();
    assert_ne!(nv.encode(), p2p.encode());
    nv.adopt(&p2p.encode()).unwrap();
    assert_eq!(nv.encode(), p2p.encode());
    let r = nv.lookup(
        1 << 20,
        DType::Bf16,
        ReduceOp::Sum,
        Algo::Auto,
        Mode::Graph,
        Wire::Exact,
    );
    assert_eq!(r.nccl_reason(), Some(NcclReason::Faster));
    let e = nv.adopt(&[1, 2]).unwrap_err();
    assert!(e.to_string().contains("same max_bytes"), "{e}");
    let mut bad = p2p.encode();
    bad[3] = 9;
    let e = nv.adopt(&bad).unwrap_err();
    assert!(e.to_string().contains("route pick 9"), "{e}");
}

#[test]
fn the_summary_lists_the_ranges_the_log_shows() {
    let t = RouteTable::resolve(
        &Selector::for_class(MachineClass::PcieP2p),
        group(4, Transport::Cuda, true),
    )
    .unwrap();
    let s = t.summary();
    assert!(s.contains("cuda:one-shot to 256 KiB, nccl to 8 MiB"), "{s}");
    assert!(s.contains("NCCL loaded"), "{s}");
    assert!(s.contains("above 8 MiB: nccl"), "{s}");
}

/// Resolution runs once at creation, inside the communicator's set-up: it
/// must stay well under the set-up's other costs (kernel loading, buffer
/// mapping). Printed; bounded loosely for a shared CI core.
#[test]
fn resolving_a_table_for_64_mib_buffers_takes_milliseconds() {
    let t = Table::parse(BUILTIN_NVLINK_TOML, "default-nvlink.toml").unwrap();
    let sel = Selector::with_table(t, "default-nvlink.toml");
    let g = Group {
        max_bytes: ByteSize::mib(64),
        ..group(2, Transport::Cuda, false)
    };
    let start = std::time::Instant::now();
    let t = RouteTable::resolve(&sel, g).unwrap();
    let took = start.elapsed();
    eprintln!("RouteTable::resolve (64 MiB, table, without NCCL): {took:?}");
    assert!(t.encode().len() > 500);
    assert!(took < std::time::Duration::from_secs(2), "{took:?}");
}
