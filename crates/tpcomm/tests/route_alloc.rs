//! A call's route is a lookup: no allocation. Counted by a global
//! allocator that counts only on the thread that armed it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use tpcomm::quant::Wire;
use tpcomm::select::{Group, Mode, RouteTable, Selector, Transport};
use tpcomm::topology::MachineClass;
use tpcomm::{Algo, ByteSize, DType, ReduceOp};

thread_local! {
    static ARMED: Cell<bool> = const { Cell::new(false) };
    static COUNT: Cell<usize> = const { Cell::new(0) };
}

struct Counting;

// SAFETY: every call is passed on to the system allocator unchanged; the
// counters are thread-locals with const initializers (no allocation).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if ARMED.with(Cell::get) {
            COUNT.with(|c| c.set(c.get() + 1));
        }
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        if ARMED.with(Cell::get) {
            COUNT.with(|c| c.set(c.get() + 1));
        }
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static A: Counting = Counting;

#[test]
fn routing_calls_allocates_nothing() {
    let mut tables = Vec::new();
    for class in [
        MachineClass::Nvlink,
        MachineClass::PcieP2p,
        MachineClass::PcieNop2p,
    ] {
        for transport in [Transport::Cuda, Transport::Host] {
            let g = Group {
                world: 4,
                transport,
                nccl: true,
                max_bytes: ByteSize::mib(8),
            };
            tables.push(RouteTable::resolve(&Selector::for_class(class), g).unwrap());
        }
    }
    // The resolution allocates (it is done once); the calls must not.
    ARMED.with(|a| a.set(true));
    let mut kernels = 0usize;
    for t in &tables {
        for count in (0..24).map(|i| 1usize << i) {
            for dtype in DType::ALL {
                for mode in [Mode::Eager, Mode::Graph] {
                    let r = t.route(count, dtype, ReduceOp::Sum, Algo::Auto, mode, Wire::Exact);
                    if matches!(r, Ok(x) if x.algo().is_some()) {
                        kernels += 1;
                    }
                    let _ = t.lookup(
                        count as u64,
                        dtype,
                        ReduceOp::Max,
                        Algo::Auto,
                        mode,
                        Wire::Exact,
                    );
                }
            }
        }
    }
    ARMED.with(|a| a.set(false));
    assert!(kernels > 0);
    assert_eq!(COUNT.with(Cell::get), 0, "allocations while routing");
    // The counter does count: one allocation while armed is seen.
    ARMED.with(|a| a.set(true));
    let v = std::hint::black_box(vec![1u8; 3]);
    ARMED.with(|a| a.set(false));
    drop(v);
    assert_eq!(COUNT.with(Cell::get), 1);
}
