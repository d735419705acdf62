use super::*;
use crate::cuda::wait::{wait_what, WAIT_ALL_GATHER, WAIT_BROADCAST, WAIT_REDUCE_SCATTER};

#[test]
fn coll_args_match_the_cuda_struct_size() {
    // struct Args (160 bytes) and two u32.
    assert_eq!(std::mem::size_of::<CollArgs>(), 160 + 8);
}

#[test]
fn wait_codes_match_the_kernel_source() {
    let src = include_str!("../kernels/collectives.cu");
    for (name, code) in [
        ("TPCOMM_WAIT_COLL_ALL_GATHER", WAIT_ALL_GATHER),
        ("TPCOMM_WAIT_COLL_REDUCE_SCATTER", WAIT_REDUCE_SCATTER),
        ("TPCOMM_WAIT_COLL_BROADCAST", WAIT_BROADCAST),
    ] {
        assert!(src.contains(&format!("#define {name} {code}u")), "{name}");
        assert!(wait_what(code).is_some());
    }
    // The all-reduce and fused kernels use codes 1 to 4.
    assert!(!include_str!("../kernels/allreduce.cu").contains(" 5u\n"));
}

#[test]
fn routes_send_what_the_kernels_cannot_take_to_nccl() {
    let max = ByteSize::mib(8);
    let of = |bytes, op, fits| collective_route(Transport::Host, bytes, max, op, fits);
    let tpcomm = Route::Tpcomm {
        transport: Transport::Host,
        algo: None,
        wire: Wire::Exact,
    };
    assert_eq!(of(max.bytes(), ReduceOp::Sum, true), tpcomm);
    assert_eq!(tpcomm.to_string(), "tpcomm host");
    assert_eq!(
        of(max.bytes() + 1, ReduceOp::Sum, true),
        Route::Nccl(NcclReason::TooLarge)
    );
    assert_eq!(of(16, ReduceOp::Max, true), Route::Nccl(NcclReason::Op));
    assert_eq!(
        of(16, ReduceOp::Sum, false),
        Route::Nccl(NcclReason::TooLarge)
    );
}
