use super::*;
use crate::cuda::transport::pinned::wait::{WAIT_ALL_GATHER, WAIT_BROADCAST, WAIT_REDUCE_SCATTER};

#[test]
fn host_coll_args_match_the_cuda_struct_size() {
    // struct HArgs (23 u64 and four u32) and two u32.
    assert_eq!(std::mem::size_of::<HostCollArgs>(), 23 * 8 + 16 + 8);
}

#[test]
fn wait_codes_match_the_kernel_source_and_differ_from_the_all_reduce_ones() {
    let src = include_str!("../../../kernels/host_collectives.cu");
    for (name, code) in [
        ("HC_WAIT_ALL_GATHER", WAIT_ALL_GATHER),
        ("HC_WAIT_REDUCE_SCATTER", WAIT_REDUCE_SCATTER),
        ("HC_WAIT_BROADCAST", WAIT_BROADCAST),
    ] {
        assert!(src.contains(&format!("#define {name} {code}u")), "{name}");
        let all_reduce = include_str!("../../../kernels/host_allreduce.cu");
        assert!(
            !all_reduce.contains(&format!(" {code}u\n")),
            "{code} is taken"
        );
    }
}

#[test]
fn blocks_fit_the_area_the_all_reduce_made() {
    let l = HostLayout::new(8 << 20);
    // All-gather and broadcast: any block up to max_bytes.
    for b in [1, 16, 1000, 8 << 20] {
        let p = fits(Collective::AllGather, b, 4, 132, &l, None).unwrap();
        assert!(p.chunk_bytes >= MIN_CHUNK && p.chunks == p.per_block);
        assert!(p.chunks <= l.max_chunks);
    }
    // Reduce-scatter: all 4 blocks must fit.
    let p = fits(Collective::ReduceScatter, 2 << 20, 4, 132, &l, None).unwrap();
    assert_eq!(p.chunks, 4 * p.per_block);
    assert!(fits(Collective::ReduceScatter, (2 << 20) + 16, 4, 132, &l, None).is_none());
    // Small blocks still cost one flag each: 8 ranks need 8 flags.
    let tiny = HostLayout::new(16 << 10);
    assert_eq!(tiny.max_chunks, 1);
    assert!(fits(Collective::ReduceScatter, 16, 8, 16, &tiny, None).is_none());
    assert!(fits(Collective::AllGather, 16, 8, 16, &tiny, None).is_some());
}
