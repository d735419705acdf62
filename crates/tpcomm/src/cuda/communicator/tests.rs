use super::*;
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

#[test]
fn a_pcie_p2p_group_with_nccl_runs_large_sums_on_nccl_and_small_on_the_kernels() {
    let t = routes(MachineClass::PcieP2p, true);
    let f = Fake {
        has_nccl: true,
        ran: RefCell::new(Vec::new()),
    };
    let call = |count: usize, op| dispatch(&t, &f, count, DType::Bf16, op, Algo::Auto, Mode::Graph);
    assert_eq!(call(1024, ReduceOp::Sum).unwrap(), Route::Tpcomm);
    assert_eq!(call(256 << 9, ReduceOp::Sum).unwrap(), Route::Tpcomm);
    assert_eq!(
        call((256 << 9) + 8, ReduceOp::Sum).unwrap(),
        Route::NcclFaster
    );
    assert_eq!(call(16, ReduceOp::Max).unwrap(), Route::NcclOp);
    assert_eq!(call(8 << 20, ReduceOp::Sum).unwrap(), Route::NcclTooLarge);
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

#[test]
fn without_nccl_calls_the_kernels_cannot_take_are_errors_that_say_what_to_do() {
    let t = routes(MachineClass::PcieP2p, false);
    let f = Fake {
        has_nccl: false,
        ran: RefCell::new(Vec::new()),
    };
    // NCCL would be faster at 1 MiB, but none is loaded: the kernels run it.
    let r = dispatch(
        &t,
        &f,
        1 << 19,
        DType::Bf16,
        ReduceOp::Sum,
        Algo::Auto,
        Mode::Graph,
    );
    assert_eq!(r.unwrap(), Route::Tpcomm);
    let e = dispatch(
        &t,
        &f,
        16,
        DType::Bf16,
        ReduceOp::Min,
        Algo::Auto,
        Mode::Graph,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("nccl_fallback"), "{e}");
    let e = dispatch(
        &t,
        &f,
        8 << 20,
        DType::Bf16,
        ReduceOp::Sum,
        Algo::Auto,
        Mode::Graph,
    )
    .unwrap_err()
    .to_string();
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
    let r = dispatch(
        &t,
        &f,
        1 << 20,
        DType::F32,
        ReduceOp::Sum,
        Algo::TwoShot,
        Mode::Eager,
    );
    assert_eq!(r.unwrap(), Route::Tpcomm);
    assert_eq!(*f.ran.borrow(), ["kernels two-shot"]);
}
