//! The planner's rules: worked examples measured or reasoned on an H200 (132
//! SMs), and the limits every shape keeps over a sweep of inputs.

use super::*;

const H200: u32 = 132;

/// Message sizes from one byte to 64 MiB: every size to 1 KiB, then around
/// every power of two.
fn sizes() -> Vec<usize> {
    let mut v: Vec<usize> = (1..=1024).collect();
    for s in 10..=26 {
        let p = 1usize << s;
        v.extend([p - 16, p - 1, p, p + 1, p + 16, p + p / 3]);
    }
    v
}

const CAPS: [usize; 10] = [1, 2, 3, 7, 16, 33, 66, 78, 132, 264];
const MAX_BLOCKS: [u32; 6] = [32, 64, 128, 256, 480, 512];

/// What every shape keeps: not zero, no dynamic shared memory.
fn sane(s: Shape) {
    assert!(s.grid >= 1 && s.block >= 1, "{s:?}");
    assert_eq!(s.shared_bytes, 0, "{s:?}");
}

#[test]
fn oneshot_blocks_spread_over_the_sms_with_one_vector_per_thread() {
    // 132 SMs (H200), blocks of up to 512.
    assert_eq!(oneshot_block(64, 132, 512), 128); // 1 KiB: one block (trimmed to 64 below)
    assert_eq!(oneshot_block(4096, 132, 512), 128); // 64 KiB: 32 blocks
    assert_eq!(oneshot_block(16384, 132, 512), 128); // 256 KiB: 128 blocks
    assert_eq!(oneshot_block(32768, 132, 512), 256); // 512 KiB: 128 blocks of 256
    assert_eq!(oneshot_block(65536, 132, 512), 512); // 1 MiB: 128 blocks of 512
    assert_eq!(oneshot_block(1 << 22, 132, 512), 512); // larger: threads loop
                                                       // A smaller limit wins; whole warps always.
    assert_eq!(oneshot_block(65536, 132, 64), 64);
    for nvec in [1usize, 33, 1000, 17_000, 70_000] {
        let b = oneshot_block(nvec, 132, 512);
        assert!(b.is_multiple_of(32) && (128..=512).contains(&b));
        if nvec <= 132 * 512 {
            assert!(nvec.div_ceil(b) <= 132, "{nvec}: {b}");
        }
    }
}

#[test]
fn p2p_all_reduce_shapes_on_an_h200() {
    // 1 KiB: 64 vectors, one block of two warps.
    assert_eq!(p2p_all_reduce(1024, false, H200, 512), Shape::new(1, 64));
    // 64 KiB: 32 blocks of 128; 1 MiB: 128 blocks of 512.
    assert_eq!(
        p2p_all_reduce(64 << 10, false, H200, 512),
        Shape::new(32, 128)
    );
    assert_eq!(
        p2p_all_reduce(1 << 20, false, H200, 512),
        Shape::new(128, 512)
    );
    // Larger: the cap, threads loop.
    assert_eq!(
        p2p_all_reduce(8 << 20, false, H200, 512),
        Shape::new(132, 512)
    );
    // Two-shot takes the full block from the start.
    assert_eq!(
        p2p_all_reduce(64 << 10, true, H200, 512),
        Shape::new(8, 512)
    );
    // Two ranks sharing the GPU: half the SMs each.
    assert_eq!(p2p_all_reduce(8 << 20, true, 66, 512), Shape::new(66, 512));
    // The one-vector-per-thread kernel runs where the grid covers the message.
    assert!(p2p_all_reduce(1 << 20, false, H200, 512).threads() >= (1 << 20) / 16);
    assert!(p2p_all_reduce(8 << 20, false, H200, 512).threads() < (8 << 20) / 16);
}

#[test]
fn p2p_all_reduce_keeps_the_limits() {
    for bytes in sizes() {
        let nvec = bytes.div_ceil(16);
        for cap in CAPS {
            for max in MAX_BLOCKS {
                for two_shot in [false, true] {
                    let s = p2p_all_reduce(bytes, two_shot, cap as u32, max);
                    sane(s);
                    assert!(s.block.is_multiple_of(32) && s.block <= max, "{s:?}");
                    assert!(s.grid as usize <= cap, "{bytes} {cap}: {s:?}");
                    // No idle warp: never more threads a block than vectors (whole warps).
                    assert!(s.block as usize <= nvec.div_ceil(32) * 32);
                    // No idle block: every block has a vector.
                    assert!((s.grid as usize - 1) * (s.block as usize) < nvec, "{s:?}");
                    // The whole cap is used before threads loop.
                    if s.threads() < nvec as u64 {
                        assert_eq!(s.grid as usize, cap);
                    }
                }
            }
        }
    }
}

#[test]
fn p2p_collectives_give_one_vector_per_thread_within_the_cap() {
    assert_eq!(p2p_collective(16, 132, 512), Shape::new(1, 32));
    assert_eq!(p2p_collective(1 << 20, 132, 512), Shape::new(128, 512));
    assert_eq!(p2p_collective(16 << 20, 132, 512), Shape::new(132, 512));
    for bytes in sizes() {
        let nvec = bytes.div_ceil(16);
        for cap in CAPS {
            for max in MAX_BLOCKS {
                let s = p2p_collective(bytes, cap, max);
                sane(s);
                // At least a warp (a broadcast's token threads), whole warps.
                assert!(s.block >= 32 && s.block.is_multiple_of(32) && s.block <= max);
                assert!(s.grid as usize <= cap);
                assert!((s.grid as usize - 1) * (s.block as usize) < nvec.max(1));
            }
        }
    }
}

#[test]
fn fused_grid_spreads_the_pushes_over_the_sms() {
    let grid = |rows, row_vecs, cap, spread| fused_rmsnorm(rows, row_vecs, cap, spread).grid;
    // 7168 bf16 per row: 896 vectors, 7 pieces of 128.
    assert_eq!(grid(1, 896, 132, true), 7);
    assert_eq!(grid(16, 896, 132, true), 112);
    assert_eq!(grid(64, 896, 132, true), 132);
    // Never fewer blocks than rows (up to the cap), never more than the cap.
    assert_eq!(grid(16, 896, 132, false), 16);
    assert_eq!(grid(200, 896, 132, false), 132);
    assert_eq!(grid(3, 1, 132, true), 3);
}

#[test]
fn norm_block_is_whole_warps_and_at_most_1024() {
    assert_eq!(norm_block(1), 32);
    assert_eq!(norm_block(896), 896);
    assert_eq!(norm_block(897), 928);
    assert_eq!(norm_block(5000), 1024);
    for rows in [1usize, 2, 7, 64, 200] {
        for row_vecs in [1usize, 31, 32, 33, 896, 1024, 1025, 5000] {
            for cap in CAPS {
                for spread in [false, true] {
                    let f = fused_rmsnorm(rows, row_vecs, cap, spread);
                    let u = add_rmsnorm(rows, row_vecs, cap);
                    for s in [f, u] {
                        sane(s);
                        assert!(s.grid as usize <= cap && s.block <= NORM_BLOCK_MAX);
                        assert!(s.block.is_multiple_of(32));
                    }
                    // Both kernels sum a row's squares with the same block.
                    assert_eq!(f.block, u.block);
                    assert_eq!(u.grid as usize, rows.min(cap));
                }
            }
        }
    }
}

#[test]
fn host_delta_blocks_give_one_vector_per_thread_up_to_the_cap() {
    let grid = |bytes| host_delta(bytes, 132, 512, Some(512)).grid;
    assert_eq!(grid(16), 1);
    assert_eq!(grid(64 << 10), 8);
    assert_eq!(grid(1 << 20), 128);
    assert_eq!(grid(4 << 20), 132);
    // The rule: as the P2P one-shot.
    assert_eq!(host_delta(64 << 10, 132, 512, None), Shape::new(32, 128));
    // TPCOMM_HOST_BLOCK, never more threads than vectors.
    assert_eq!(host_delta(64, 132, 512, Some(256)), Shape::new(1, 32));
    for bytes in sizes() {
        let nvec = bytes.div_ceil(16);
        for cap in CAPS {
            for max in MAX_BLOCKS {
                for asked in [None, Some(32), Some(max)] {
                    let s = host_delta(bytes, cap, max, asked);
                    sane(s);
                    assert!(s.block.is_multiple_of(32) && s.block <= max);
                    assert!(s.grid as usize <= cap);
                    assert!((s.grid as usize - 1) * (s.block as usize) < nvec);
                }
            }
        }
    }
}

#[test]
fn chunked_blocks_split_the_grid_between_writers_and_readers() {
    let none = Asked::default();
    // 64 MiB on an H200, 2 ranks, 256 chunks: the SMs split in half.
    let s = host_chunked(64 << 20, 2, 132, 256, none);
    assert_eq!((s.producers, s.consumers), (66, 66));
    assert_eq!(s.shape(512), Shape::new(132, 512));
    // More ranks: consumers read world - 1 copies, so they get more blocks.
    let s = host_chunked(64 << 20, 4, 132, 256, none);
    assert_eq!((s.producers, s.consumers), (33, 99));
    // Up to 4 MiB: at most 16 of each, and no block without a chunk.
    let s = host_chunked(1 << 20, 2, 132, 8, none);
    assert_eq!((s.producers, s.consumers), (8, 8));
    let s = host_chunked(4 << 20, 2, 132, 32, none);
    assert_eq!((s.producers, s.consumers), (16, 16));
    let s = host_chunked((4 << 20) + 16, 2, 132, 257, none);
    assert_eq!((s.producers, s.consumers), (66, 66));
    // The overrides win, within the grid.
    let asked = Asked {
        producers: Some(1000),
        consumers: Some(1000),
    };
    let s = host_chunked(64 << 20, 2, 132, 256, asked);
    assert_eq!((s.producers, s.consumers), (131, 1));
    for bytes in sizes() {
        for world in 2..=8 {
            for cap in [2usize, 3, 16, 66, 132] {
                for chunks in [1usize, 2, 7, 64, 4096] {
                    for asked in [none, asked] {
                        let s = host_chunked(bytes, world, cap, chunks, asked);
                        sane(s.shape(512));
                        assert!(s.producers >= 1 && s.consumers >= 1);
                        assert!((s.producers + s.consumers) as usize <= cap);
                        assert!(s.producers as usize <= chunks && s.consumers as usize <= chunks);
                    }
                }
            }
        }
    }
}

#[test]
fn all_gather_readers_share_the_link_and_the_rest_read_one_block_per_chunk() {
    let none = Asked::default();
    let ag = Collective::AllGather;
    let split = |what, chunks, per_block, cap, ranks, asked| {
        let s = host_collective(what, chunks, per_block, cap, ranks, asked);
        (s.producers, s.consumers)
    };
    // 16 MiB per rank: 66 chunks of a block.
    assert_eq!(split(ag, 66, 66, 132, 1, none), (66, 16));
    assert_eq!(split(ag, 66, 66, 132, 2, none), (66, 8));
    assert_eq!(split(ag, 66, 66, 33, 4, none), (16, 4));
    assert_eq!(split(ag, 66, 66, 16, 32, none), (8, 1));
    let bc = Collective::Broadcast { root: 0 };
    assert_eq!(split(bc, 66, 66, 132, 2, none), (66, 66));
    // Fewer chunks than readers: one reader per chunk.
    assert_eq!(split(ag, 3, 3, 132, 1, none), (3, 3));
    // The overrides win, within the grid.
    let set = Asked {
        producers: Some(200),
        consumers: Some(40),
    };
    assert_eq!(split(ag, 66, 66, 64, 2, set), (63, 1));
    let set = Asked {
        producers: None,
        consumers: Some(40),
    };
    assert_eq!(split(ag, 66, 66, 132, 2, set), (66, 40));
    for what in [ag, Collective::ReduceScatter, bc] {
        for per_block in [1usize, 2, 17, 66, 300] {
            for cap in [2usize, 3, 16, 66, 132] {
                for ranks in 1..=8 {
                    let s = host_collective(what, 4 * per_block, per_block, cap, ranks, none);
                    sane(s.shape(512));
                    assert!(s.producers >= 1 && s.consumers >= 1);
                    assert!((s.producers + s.consumers) as usize <= cap);
                }
            }
        }
    }
}

#[test]
fn quantized_grids_stay_within_the_cap_and_the_units() {
    use crate::cuda::quant::STEP_CHUNKS;
    let grid = |count, unit, cap, max, asked| {
        let s = quant(count, unit, cap, max, asked);
        (s.grid, s.block)
    };
    assert_eq!(grid(1, 1, 132, 512, None), (1, 512));
    assert_eq!(grid(32 << 20, 1, 132, 512, None), (132, 512));
    assert_eq!(grid(32 << 20, 1, 66, 512, None), (66, 512));
    // Two-shot: a block per chunk; one-shot: a block per step of chunks.
    assert_eq!(grid(5 * CHUNK_ELEMS, 1, 66, 512, None), (5, 512));
    assert_eq!(grid(5 * CHUNK_ELEMS, STEP_CHUNKS, 66, 512, None), (2, 512));
    assert_eq!(grid(1 << 20, STEP_CHUNKS, 132, 512, None), (64, 512));
    // One-shot keeps half the cap until blocks have 4 steps each, then
    // takes as few blocks as have the same most steps each: 2M and 4M
    // elements (4 and 8 MiB of bf16; 128 and 256 steps) 64 blocks of 2 and
    // 4 steps (66 would leave 4 and 8 blocks a step short), 8M 128 of 4,
    // 16M 128 of 8 (the cap of 132 would give 8 to most and 7 to some).
    assert_eq!(grid(2 << 20, STEP_CHUNKS, 132, 512, None), (64, 512));
    assert_eq!(grid(4 << 20, STEP_CHUNKS, 132, 512, None), (64, 512));
    assert_eq!(grid(8 << 20, STEP_CHUNKS, 132, 512, None), (128, 512));
    assert_eq!(grid(16 << 20, STEP_CHUNKS, 132, 512, None), (128, 512));
    // 9 steps at a cap of 14: half the cap (7 blocks) has at most 2 steps
    // a block, and 5 blocks have that too.
    assert_eq!(
        grid(9 * 4 * CHUNK_ELEMS, STEP_CHUNKS, 14, 512, None),
        (5, 512)
    );
    // 9 steps at a cap of 4: 3 steps each takes 3 blocks, not 4.
    assert_eq!(
        grid(9 * 4 * CHUNK_ELEMS, STEP_CHUNKS, 4, 512, None),
        (3, 512)
    );
    // Blocks are powers of two (the kernel's chunk loop needs it).
    assert_eq!(grid(1 << 20, 1, 132, 384, None), (132, 256));
    assert_eq!(grid(1 << 20, 1, 0, 512, None), (1, 512));
    // TPCOMM_QUANT_BLOCKS replaces the rule within the units and the cap.
    assert_eq!(grid(4 << 20, STEP_CHUNKS, 132, 512, Some(16)), (16, 512));
    assert_eq!(grid(4 << 20, 1, 132, 512, Some(100)), (100, 512));
    assert_eq!(grid(4 << 20, STEP_CHUNKS, 132, 512, Some(4000)), (132, 512));
    assert_eq!(grid(3 * CHUNK_ELEMS, 1, 132, 512, Some(16)), (3, 512));
    for count in sizes() {
        for unit in [1, STEP_CHUNKS] {
            let units = count.div_ceil(CHUNK_ELEMS * unit);
            for cap in [0u32, 1, 4, 14, 66, 132] {
                for max in [1u32, 32, 100, 512, 1024] {
                    for asked in [None, Some(0), Some(7), Some(5000)] {
                        let s = quant(count, unit, cap, max, asked);
                        sane(s);
                        assert!(s.block.is_power_of_two() && s.block >= 32);
                        assert!(s.block <= max.max(32) && s.block <= QUANT_MAX_BLOCK);
                        assert!(s.grid <= cap.max(1) && s.grid as usize <= units.max(1));
                    }
                }
            }
        }
    }
}

#[test]
fn quantized_local_halves_launch_whole_blocks_for_every_octet() {
    assert_eq!(quant_local(1, 1, 256).unwrap(), Shape::new(1, 256));
    assert_eq!(quant_local(8 * 256, 1, 256).unwrap(), Shape::new(1, 256));
    assert_eq!(
        quant_local(8 * 256 + 1, 1, 256).unwrap(),
        Shape::new(2, 256)
    );
    assert_eq!(quant_local(1 << 20, 4, 256).unwrap(), Shape::new(128, 256));
    for count in sizes() {
        for octets in [1usize, 2, 4] {
            let s = quant_local(count, octets, 256).unwrap();
            sane(s);
            assert!(s.threads() >= count.div_ceil(8 * octets) as u64);
            assert!(((s.grid - 1) as u64) * 256 < count.div_ceil(8 * octets) as u64);
        }
    }
    assert!(quant_local(usize::MAX / 2, 1, 32).is_err());
}

#[test]
fn gathered_kernels_take_an_item_a_thread_up_to_four_blocks_an_sm() {
    assert_eq!(gathered(1, 132), Shape::new(1, GATHERED_BLOCK));
    assert_eq!(gathered(256, 132), Shape::new(1, GATHERED_BLOCK));
    assert_eq!(gathered(257, 132), Shape::new(2, GATHERED_BLOCK));
    assert_eq!(gathered(1 << 30, 132), Shape::new(4 * 132, GATHERED_BLOCK));
    // No SM count (never reported): still one block.
    assert_eq!(gathered(1 << 30, 0).grid, 1);
    for items in sizes() {
        for sms in [1u32, 16, 132] {
            let s = gathered(items as u64, sms);
            sane(s);
            assert!(s.grid <= 4 * sms);
        }
    }
}

#[test]
fn the_p2p_check_launches_a_block_per_rank() {
    for world in 1..=crate::transport::MAX_WORLD {
        assert_eq!(p2p_check(world), Shape::new(world as u32, P2P_CHECK_BLOCK));
    }
}

#[test]
fn grid_caps_fit_every_rank_on_the_device_at_once() {
    let sharing = |k| Sharing {
        ranks_on_device: k,
        other_processes: false,
        in_this_process: k,
    };
    for k in 1..=8 {
        for per_sm in 1..=4 {
            let cap = grid_cap(132, per_sm, sharing(k)).unwrap();
            assert!(cap * k <= 132 * per_sm && (1..=132).contains(&cap));
        }
    }
    assert_eq!(grid_cap(132, 4, sharing(1)).unwrap(), 132);
    assert_eq!(grid_cap(132, 1, sharing(8)).unwrap(), 16);
    let e = grid_cap(4, 1, sharing(8)).unwrap_err().to_string();
    assert!(e.contains("at most 4 ranks"), "{e}");
}

#[test]
fn block_override_takes_whole_warps_within_the_kernels_limit() {
    for name in ["TPCOMM_P2P_BLOCK", "TPCOMM_HOST_BLOCK"] {
        assert_eq!(parse_block(name, "128", 512).unwrap(), 128);
        assert_eq!(parse_block(name, " 512 ", 512).unwrap(), 512);
        for bad in ["0", "16", "100", "1024", "many", "-32"] {
            let e = parse_block(name, bad, 512).unwrap_err().to_string();
            assert!(e.contains(name) && e.contains("512"), "{bad}: {e}");
        }
    }
}

#[test]
fn the_checker_gets_a_thread_without_data_where_the_grid_covers_the_message_exactly() {
    // 1 KiB: 64 vectors, one block of 64 threads; the spare warp makes 96.
    let s = p2p_all_reduce(1024, false, 132, 512);
    assert_eq!(s, Shape::new(1, 64));
    assert_eq!(with_idle_checker(s, 1024, 132, 512), Shape::new(1, 96));
    // 64 KiB: 32 blocks of 128 cover 4096 vectors exactly; one more block.
    let s = p2p_all_reduce(64 << 10, false, 132, 512);
    assert_eq!(s, Shape::new(32, 128));
    assert_eq!(
        with_idle_checker(s, 64 << 10, 132, 512),
        Shape::new(33, 128)
    );
    // A block already at its largest: one more block instead.
    assert_eq!(
        with_idle_checker(Shape::new(1, 512), 512 * 16, 132, 512),
        Shape::new(2, 512)
    );
    // At both limits, or where threads loop, or where a thread is idle already: unchanged.
    assert_eq!(
        with_idle_checker(Shape::new(4, 512), 4 * 512 * 16, 4, 512),
        Shape::new(4, 512)
    );
    assert_eq!(
        with_idle_checker(Shape::new(4, 512), 16 << 20, 4, 512),
        Shape::new(4, 512)
    );
    assert_eq!(
        with_idle_checker(Shape::new(1, 64), 1000, 132, 512),
        Shape::new(1, 64)
    );
    for bytes in sizes() {
        let nvec = bytes.div_ceil(16).max(1) as u64;
        for cap in CAPS {
            for max in MAX_BLOCKS {
                for two_shot in [false, true] {
                    let s = p2p_all_reduce(bytes, two_shot, cap as u32, max);
                    let t = with_idle_checker(s, bytes, cap as u32, max);
                    sane(t);
                    assert!(t.block.is_multiple_of(32) && t.block <= max, "{t:?}");
                    assert!(t.grid as usize <= cap, "{bytes} {cap}: {t:?}");
                    // Never fewer threads, so the kernel picked for `s` still fits.
                    assert!(t.threads() >= s.threads());
                    // The grid's last thread has no vector unless the launch is at
                    // both limits or its threads loop over the message.
                    let at_limits = s.grid as usize >= cap && (s.grid > 1 || s.block + 32 > max);
                    if !at_limits && s.threads() >= nvec {
                        assert!(t.threads() > nvec, "{bytes} {cap} {max}: {s:?} -> {t:?}");
                    }
                    if s.threads() != nvec {
                        assert_eq!(t, s);
                    }
                }
            }
            let s = p2p_collective(bytes, cap, 512);
            let t = with_idle_checker(s, bytes, cap as u32, 512);
            assert!(t.grid as usize <= cap && t.block <= 512 && t.threads() >= s.threads());
            // The host path's one-pass all-reduce, with and without a block asked for.
            for asked in [None, Some(64), Some(512)] {
                let s = host_delta(bytes, cap, 512, asked);
                let t = with_idle_checker(s, bytes, cap as u32, 512);
                sane(t);
                assert!(t.grid as usize <= cap && t.block <= 512 && t.block.is_multiple_of(32));
                assert!(t.threads() >= s.threads());
                if s.threads() == nvec && (s.grid as usize) < cap {
                    assert!(
                        t.threads() > nvec,
                        "{bytes} {cap} {asked:?}: {s:?} -> {t:?}"
                    );
                }
            }
        }
    }
}
