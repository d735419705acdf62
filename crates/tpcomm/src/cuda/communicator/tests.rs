use super::*;
use crate::dtype::DType;
use crate::select::{Group, Selector, Transport};
use crate::topology::MachineClass;
use std::cell::RefCell;

/// Records which lane ran, as a communicator's kernels and NCCL would.
struct Fake {
    has_nccl: bool,
    ran: RefCell<Vec<String>>,
}

impl Lanes for Fake {
    fn kernels(&self, algo: Algo) -> Result<()> {
        self.ran
            .borrow_mut()
            .push(format!("kernels {}", algo.name()));
        Ok(())
    }
    fn quantized(&self, wire: Wire) -> Result<()> {
        self.ran
            .borrow_mut()
            .push(format!("quantized {}", wire.label()));
        Ok(())
    }
    fn nccl(&self) -> Option<Result<()>> {
        self.has_nccl.then(|| {
            self.ran.borrow_mut().push("nccl".into());
            Ok(())
        })
    }
}

fn routes(class: MachineClass, nccl: bool) -> RouteTable {
    RouteTable::resolve(
        &Selector::for_class(class),
        Group {
            world: 4,
            transport: Transport::Cuda,
            nccl,
            max_bytes: ByteSize::mib(8),
        },
    )
    .unwrap()
}

/// A call of `count` elements of `dtype` reduced by `op`, as routing
/// reads it (no buffers, no stream: the lanes are fakes).
fn call(count: usize, dtype: DType, op: ReduceOp) -> Call {
    Call::new(0, 0, count, dtype, std::ptr::null_mut()).with_op(op)
}

const ONE_SHOT: Route = Route::Tpcomm {
    transport: Transport::Cuda,
    algo: Some(Algo::OneShot),
    wire: Wire::Exact,
};

#[test]
fn a_pcie_p2p_group_with_nccl_runs_large_sums_on_nccl_and_small_on_the_kernels() {
    let t = routes(MachineClass::PcieP2p, true);
    let f = Fake {
        has_nccl: true,
        ran: RefCell::new(Vec::new()),
    };
    let run = |count: usize, op| {
        dispatch(
            &t,
            &f,
            &call(count, DType::Bf16, op),
            Mode::Graph,
            Wire::Exact,
        )
    };
    assert_eq!(run(1024, ReduceOp::Sum).unwrap(), ONE_SHOT);
    assert_eq!(run(256 << 9, ReduceOp::Sum).unwrap(), ONE_SHOT);
    assert_eq!(
        run((256 << 9) + 8, ReduceOp::Sum).unwrap(),
        Route::Nccl(NcclReason::Faster)
    );
    assert_eq!(run(16, ReduceOp::Max).unwrap(), Route::Nccl(NcclReason::Op));
    assert_eq!(
        run(8 << 20, ReduceOp::Sum).unwrap(),
        Route::Nccl(NcclReason::TooLarge)
    );
    assert_eq!(
        *f.ran.borrow(),
        [
            "kernels one-shot",
            "kernels one-shot",
            "nccl",
            "nccl",
            "nccl"
        ]
    );
}

/// A quantized wire takes every sum the kernels can take (NCCL-faster
/// sizes and an explicit algorithm included), and nothing else.
#[test]
fn a_quantized_wire_takes_the_sums_the_kernels_can_take() {
    let t = routes(MachineClass::PcieP2p, true);
    let f = Fake {
        has_nccl: true,
        ran: RefCell::new(Vec::new()),
    };
    let int8 = Wire::int8();
    let on_int8 = Route::Tpcomm {
        transport: Transport::Cuda,
        algo: None,
        wire: int8,
    };
    let run = |c: Call| dispatch(&t, &f, &c, Mode::Graph, int8).unwrap();
    assert_eq!(run(call(1024, DType::Bf16, ReduceOp::Sum)), on_int8);
    assert_eq!(run(call(1 << 20, DType::Bf16, ReduceOp::Sum)), on_int8);
    let two_shot = call(1024, DType::Bf16, ReduceOp::Sum).with_algo(Algo::TwoShot);
    assert_eq!(run(two_shot), on_int8);
    assert_eq!(
        run(call(16, DType::Bf16, ReduceOp::Max)),
        Route::Nccl(NcclReason::Op)
    );
    assert_eq!(
        run(call(8 << 20, DType::Bf16, ReduceOp::Sum)),
        Route::Nccl(NcclReason::TooLarge)
    );
    assert_eq!(
        *f.ran.borrow(),
        [
            "quantized int8/g64",
            "quantized int8/g64",
            "quantized int8/g64",
            "nccl",
            "nccl"
        ]
    );
    assert_eq!(
        on_int8.to_string(),
        "tpcomm cuda on the quantized int8/g64 wire"
    );
}

#[test]
fn without_nccl_calls_the_kernels_cannot_take_are_errors_that_say_what_to_do() {
    let t = routes(MachineClass::PcieP2p, false);
    let f = Fake {
        has_nccl: false,
        ran: RefCell::new(Vec::new()),
    };
    let run = |count: usize, op| {
        dispatch(
            &t,
            &f,
            &call(count, DType::Bf16, op),
            Mode::Graph,
            Wire::Exact,
        )
    };
    // NCCL would be faster at 1 MiB, but none is loaded: the kernels run it.
    assert!(!run(1 << 19, ReduceOp::Sum).unwrap().is_nccl());
    let e = run(16, ReduceOp::Min).unwrap_err().to_string();
    assert!(e.contains("nccl_fallback"), "{e}");
    let e = run(8 << 20, ReduceOp::Sum).unwrap_err().to_string();
    assert!(
        e.contains("max_bytes") && e.contains("nccl_fallback"),
        "{e}"
    );
    assert_eq!(f.ran.borrow().len(), 1);
    assert!(t.note().is_some_and(|n| n.contains("no NCCL is loaded")));
}

#[test]
fn an_explicit_algorithm_is_run_as_asked_where_the_kernels_can_take_it() {
    let t = routes(MachineClass::PcieP2p, true);
    let f = Fake {
        has_nccl: true,
        ran: RefCell::new(Vec::new()),
    };
    let c = call(1 << 20, DType::F32, ReduceOp::Sum).with_algo(Algo::TwoShot);
    let r = dispatch(&t, &f, &c, Mode::Eager, Wire::Exact);
    assert_eq!(r.unwrap(), Route::exact(Transport::Cuda, Algo::TwoShot));
    assert_eq!(*f.ran.borrow(), ["kernels two-shot"]);
}

/// `run_on` runs a route its caller looked up (the drop-in's `decide`)
/// without a second lookup: an exact route with no algorithm runs
/// one-shot, a quantized one its wire, and NCCL only where there is one.
#[test]
fn a_route_looked_up_by_the_caller_runs_on_its_lane() {
    let f = Fake {
        has_nccl: false,
        ran: RefCell::new(Vec::new()),
    };
    let exact = Route::Tpcomm {
        transport: Transport::Cuda,
        algo: None,
        wire: Wire::Exact,
    };
    run_on(&f, exact).unwrap();
    run_on(&f, Route::exact(Transport::Cuda, Algo::TwoShot)).unwrap();
    let int8 = Route::Tpcomm {
        transport: Transport::Cuda,
        algo: None,
        wire: Wire::int8(),
    };
    run_on(&f, int8).unwrap();
    let e = run_on(&f, Route::Nccl(NcclReason::Op)).unwrap_err();
    assert!(e.to_string().contains("without NCCL"), "{e}");
    assert_eq!(
        *f.ran.borrow(),
        ["kernels one-shot", "kernels two-shot", "quantized int8/g64"]
    );
}

/// `Communicator::new` sets up its own NCCL only when the config asks,
/// and never a staging buffer (the drop-in's paired and standalone
/// communicators ask for theirs through `create`).
#[test]
fn new_sets_up_what_the_config_asks_for() {
    let mut cfg = CudaConfig::new(0, 2, 0);
    cfg.nccl_fallback = true;
    let own = Setup::of(&cfg);
    assert_eq!((own.fallback, own.staging), (Fallback::Own, false));
    cfg.nccl_fallback = false;
    assert_eq!(Setup::of(&cfg).fallback, Fallback::None);
}
