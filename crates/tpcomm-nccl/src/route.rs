//! Which library runs an all-reduce: a pure function of the call, so every
//! rank (same call, same communicator) decides the same way.

use crate::types::{dtype_of, NcclDataType, NcclRedOp, OP_SUM};
use tpcomm::DType;

/// The tpcomm side of a communicator, as far as routing cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capacity {
    pub max_bytes: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    Tpcomm(DType),
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

pub fn route(disabled: bool, cap: Option<Capacity>, c: &Call) -> Route {
    if disabled {
        return Route::Nccl(Why::Disabled);
    }
    let Some(cap) = cap else {
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
    match c.count.checked_mul(dt.size()) {
        Some(b) if b as u64 <= cap.max_bytes => {}
        _ => return Route::Nccl(Why::TooLarge),
    }
    // Alignment is not asked: it can differ between ranks (a tensor view on
    // one, a whole tensor on another), and ranks that route one call apart
    // never meet. Unaligned buffers go through the staging buffer instead.
    Route::Tpcomm(dt)
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

    const CAP: Option<Capacity> = Some(Capacity {
        max_bytes: 16 << 20,
    });

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
        assert_eq!(
            route(false, CAP, &call(4096, 9)),
            Route::Tpcomm(DType::Bf16)
        );
        assert_eq!(route(false, CAP, &call(1, 6)), Route::Tpcomm(DType::F16));
        assert_eq!(
            route(false, CAP, &call(1 << 22, 7)),
            Route::Tpcomm(DType::F32)
        );
    }

    #[test]
    fn disabled_forwards_everything_even_when_set_up() {
        assert_eq!(route(true, CAP, &call(4096, 9)), Route::Nccl(Why::Disabled));
    }

    #[test]
    fn calls_inside_a_group_keep_ncclgroup_semantics() {
        let mut c = call(4096, 9);
        c.group_depth = 1;
        assert_eq!(route(false, CAP, &c), Route::Nccl(Why::InGroup));
    }

    #[test]
    fn what_the_kernels_cannot_do_goes_to_nccl() {
        assert_eq!(route(false, None, &call(8, 9)), Route::Nccl(Why::NotSetUp));
        assert_eq!(route(false, CAP, &call(8, 2)), Route::Nccl(Why::DType)); // int32
        assert_eq!(route(false, CAP, &call(8, 8)), Route::Nccl(Why::DType)); // f64
        let mut c = call(8, 9);
        c.op = 2; // max
        assert_eq!(route(false, CAP, &c), Route::Nccl(Why::Op));
        c.op = 4; // avg
        assert_eq!(route(false, CAP, &c), Route::Nccl(Why::Op));
        assert_eq!(route(false, CAP, &call(0, 9)), Route::Nccl(Why::Empty));
    }

    /// Unaligned buffers stay with tpcomm (through staging): routing must not
    /// depend on an address, which can differ between ranks.
    #[test]
    fn alignment_never_changes_the_route_only_the_staging() {
        let c = call(8, 9);
        assert!(aligned(&c));
        for (ds, dr) in [(2usize, 0usize), (0, 2), (8, 8), (14, 6)] {
            let mut u = c;
            u.send += ds;
            u.recv += dr;
            assert_eq!(route(false, CAP, &u), route(false, CAP, &c));
            assert!(!aligned(&u));
        }
    }

    #[test]
    fn the_size_limit_is_inclusive_and_overflow_safe() {
        assert_eq!(
            route(false, CAP, &call(4 << 20, 7)),
            Route::Tpcomm(DType::F32)
        );
        assert_eq!(
            route(false, CAP, &call((4 << 20) + 1, 7)),
            Route::Nccl(Why::TooLarge)
        );
        assert_eq!(
            route(false, CAP, &call(usize::MAX, 7)),
            Route::Nccl(Why::TooLarge)
        );
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
