//! TEMPORARY: the planner's functions against the code they replace, over a
//! large grid of inputs. The old functions are called where they are; the
//! shapes written inline at the launch sites are copied here verbatim from
//! the callers (comm.rs, collectives.rs, host_path/comm.rs, quant/gathered.rs,
//! gathered.rs, p2p_check.rs, fused.rs). Removed with the old code once the
//! callers use the planner.

use super::*;
use crate::cuda::fused::{fused_grid as old_fused_grid, norm_block as old_norm_block};
use crate::cuda::host_path::collectives::{blocks as old_coll_blocks, CollPlan};
use crate::cuda::host_path::layout::{chunk_plan_with, one_pass_blocks, HostChunkShape};
use crate::cuda::layout::oneshot_block as old_oneshot_block;
use crate::cuda::quant::quant_grid as old_quant_grid;
use crate::cuda::share::grid_cap as old_grid_cap;

// comm.rs, P2pTransport::all_reduce (count > 0).
fn old_p2p_all_reduce(bytes: usize, two_shot: bool, grid: u32, max_block: u32) -> (u32, u32) {
    let nvec = bytes.div_ceil(16);
    let block = match two_shot {
        true => max_block as usize,
        _ => old_oneshot_block(nvec, grid as usize, max_block as usize),
    }
    .min(nvec.div_ceil(32) * 32) as u32;
    let blocks = nvec.div_ceil(block as usize).clamp(1, grid as usize) as u32;
    (blocks, block)
}

// collectives.rs, P2pTransport::collective (count > 0).
fn old_p2p_collective(bytes: usize, grid: usize, max_block: u32) -> (u32, u32) {
    let nvec = bytes.div_ceil(16);
    let block = (nvec.div_ceil(32) * 32).clamp(32, max_block as usize) as u32;
    let blocks = nvec.div_ceil(block as usize).clamp(1, grid) as u32;
    (blocks, block)
}

// host_path/comm.rs, PinnedTransport::all_reduce, HostAlgo::Delta.
fn old_host_delta(bytes: usize, grid: usize, max_block: u32, asked: Option<u32>) -> (u32, u32) {
    let nvec = bytes.div_ceil(16);
    let block = asked
        .unwrap_or_else(|| old_oneshot_block(nvec, grid, max_block as usize) as u32)
        .min(nvec.div_ceil(32) as u32 * 32);
    (one_pass_blocks(bytes, block as usize, grid), block)
}

// fused.rs, add_rmsnorm.
fn old_add_rmsnorm(rows: usize, row_vecs: usize, sms: usize) -> (u32, u32) {
    (rows.min(sms) as u32, old_norm_block(row_vecs))
}

// quant/gathered.rs, QuantComm::launch_local.
fn old_quant_local(count: usize, octets: usize, block: u32) -> Result<(u32, u32)> {
    let threads = count.div_ceil(8 * octets);
    let grid = u32::try_from(threads.div_ceil(block as usize))
        .map_err(|_| Error::invalid("count", format!("{} elements need too many blocks", count)))?;
    Ok((grid, block))
}

// gathered.rs, Kernels::grid and THREADS.
fn old_gathered(items: u64, sms: u32) -> (u32, u32) {
    (items.div_ceil(256u64).clamp(1, 4 * sms as u64) as u32, 256)
}

fn pair(s: Shape) -> (u32, u32) {
    assert_eq!(s.shared_bytes, 0);
    (s.grid, s.block)
}

/// Message sizes: every byte count to 4 KiB, around every power of two to
/// 128 MiB, and 2000 spread pseudo-randomly up to 64 MiB.
fn sizes() -> Vec<usize> {
    let mut v: Vec<usize> = (1..=4096).collect();
    for s in 4..=27 {
        let p = 1usize << s;
        v.extend([p - 16, p - 1, p, p + 1, p + 16, p + p / 2]);
    }
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..2000 {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        v.push(1 + (x >> 20) as usize % (64 << 20));
    }
    v.retain(|&b| b > 0);
    v.sort_unstable();
    v.dedup();
    v
}

const CAPS: [usize; 18] = [
    1, 2, 3, 4, 5, 7, 8, 15, 16, 33, 41, 66, 78, 108, 114, 132, 144, 264,
];
const MAX_BLOCKS: [u32; 9] = [32, 64, 96, 128, 256, 384, 480, 512, 1024];

#[test]
fn the_planner_gives_the_shapes_the_launch_sites_computed() {
    let sizes = sizes();
    let mut n = 0u64;

    // grid_cap: SMs x occupancy x ranks on the device.
    for sms in 0..=200usize {
        for per_sm in 0..=8usize {
            for k in 0..=17usize {
                let s = Sharing {
                    ranks_on_device: k,
                    other_processes: false,
                    in_this_process: k,
                };
                let (a, b) = (old_grid_cap(sms, per_sm, s), grid_cap(sms, per_sm, s));
                match (a, b) {
                    (Ok(a), Ok(b)) => assert_eq!(a, b),
                    (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
                    (a, b) => panic!("grid_cap({sms}, {per_sm}, {k}): {a:?} vs {b:?}"),
                }
                n += 1;
            }
        }
    }

    for &bytes in &sizes {
        for &cap in &CAPS {
            for &max in &MAX_BLOCKS {
                for two_shot in [false, true] {
                    assert_eq!(
                        old_p2p_all_reduce(bytes, two_shot, cap as u32, max),
                        pair(p2p_all_reduce(bytes, two_shot, cap as u32, max)),
                        "p2p_all_reduce({bytes}, {two_shot}, {cap}, {max})"
                    );
                    n += 1;
                }
                assert_eq!(
                    old_p2p_collective(bytes, cap, max),
                    pair(p2p_collective(bytes, cap, max)),
                    "p2p_collective({bytes}, {cap}, {max})"
                );
                n += 1;
                for asked in [None, Some(32), Some(96), Some(128), Some(512)] {
                    assert_eq!(
                        old_host_delta(bytes, cap, max, asked),
                        pair(host_delta(bytes, cap, max, asked)),
                        "host_delta({bytes}, {cap}, {max}, {asked:?})"
                    );
                    n += 1;
                }
            }
            for sms in [1u32, 2, 16, 78, 132] {
                assert_eq!(
                    old_gathered(bytes as u64, sms),
                    pair(gathered(bytes as u64, sms))
                );
                n += 1;
            }
        }
    }

    // The chunked all-reduce: the plan's blocks, chunks from the plan.
    let shapes = [
        HostChunkShape::default(),
        HostChunkShape {
            chunk_bytes: Some(64 << 10),
            producers: Some(8),
            consumers: Some(16),
        },
        HostChunkShape {
            chunk_bytes: Some(1),
            producers: Some(1000),
            consumers: Some(1000),
        },
        HostChunkShape {
            chunk_bytes: None,
            producers: Some(1),
            consumers: None,
        },
        HostChunkShape {
            chunk_bytes: Some(8 << 20),
            producers: None,
            consumers: Some(3),
        },
    ];
    for &bytes in sizes.iter().step_by(3) {
        for world in 2..=8 {
            for &cap in &CAPS[1..] {
                for group in [cap, (cap / 2).max(2)] {
                    for shape in &shapes {
                        let old = chunk_plan_with(bytes, world, cap, group, shape);
                        let asked = Asked {
                            producers: shape.producers,
                            consumers: shape.consumers,
                        };
                        let new = host_chunked(bytes, world, cap, old.chunks, asked);
                        assert_eq!(
                            (old.producers, old.consumers),
                            (new.producers, new.consumers),
                            "host_chunked({bytes}, {world}, {cap}, {group}, {shape:?})"
                        );
                        assert_eq!(new.shape(512).grid, old.producers + old.consumers);
                        n += 1;
                    }
                }
            }
        }
    }

    // The host collectives: (chunks, chunks a block) as `fits` makes them.
    let whats = [
        Collective::AllGather,
        Collective::ReduceScatter,
        Collective::Broadcast { root: 1 },
    ];
    for per_block in 1..=80usize {
        for world in [1usize, 2, 3, 4, 8] {
            for what in whats {
                let chunks = match what {
                    Collective::ReduceScatter => world * per_block,
                    _ => per_block,
                };
                let plan = CollPlan {
                    chunk_bytes: 16 << 10,
                    chunks,
                    per_block,
                };
                for &grid in &CAPS[1..] {
                    for ranks in 1..=9usize {
                        for shape in &shapes {
                            let old = old_coll_blocks(what, &plan, grid, ranks, shape);
                            let asked = Asked {
                                producers: shape.producers,
                                consumers: shape.consumers,
                            };
                            let new = host_collective(what, chunks, per_block, grid, ranks, asked);
                            assert_eq!(
                                (old.0 as u32, old.1 as u32),
                                (new.producers, new.consumers),
                                "host_collective({what:?}, {per_block}, {grid}, {ranks}, {shape:?})"
                            );
                            n += 1;
                        }
                    }
                }
            }
        }
    }

    // The quantized kernels: counts of elements, one-shot steps and two-shot
    // chunks, caps, block limits and asked counts.
    let counts: Vec<usize> = sizes
        .iter()
        .step_by(2)
        .copied()
        .chain([8 << 20, 16 << 20, 32 << 20])
        .collect();
    for &count in &counts {
        for unit in [1usize, crate::cuda::quant::STEP_CHUNKS] {
            for cap in [0u32, 1, 2, 4, 7, 14, 16, 33, 66, 132, 264] {
                for max in [32u32, 64, 100, 256, 384, 512, 1024] {
                    for asked in [None, Some(1), Some(16), Some(100), Some(4000)] {
                        assert_eq!(
                            old_quant_grid(count, unit, cap, max, asked),
                            pair(quant(count, unit, cap, max, asked)),
                            "quant({count}, {unit}, {cap}, {max}, {asked:?})"
                        );
                        n += 1;
                    }
                }
            }
        }
        for octets in [1usize, 2, 4, 8] {
            for block in [32u32, 128, 256] {
                let old = old_quant_local(count, octets, block).unwrap();
                assert_eq!(old, pair(quant_local(count, octets, block).unwrap()));
                n += 1;
            }
        }
    }
    // Too many blocks: the same error.
    let big = usize::MAX / 2;
    assert_eq!(
        old_quant_local(big, 1, 32).unwrap_err().to_string(),
        quant_local(big, 1, 32).unwrap_err().to_string()
    );

    // The norm kernels: rows x vectors a row x grid cap (or SMs) x spread.
    for rows in 1..=300usize {
        for row_vecs in [
            1usize, 2, 31, 32, 33, 127, 128, 448, 896, 1023, 1024, 1025, 5000,
        ] {
            for &cap in &CAPS {
                for spread in [false, true] {
                    assert_eq!(
                        (
                            old_fused_grid(rows, row_vecs, cap, spread),
                            old_norm_block(row_vecs)
                        ),
                        pair(fused_rmsnorm(rows, row_vecs, cap, spread)),
                        "fused_rmsnorm({rows}, {row_vecs}, {cap}, {spread})"
                    );
                    n += 1;
                }
                assert_eq!(
                    old_add_rmsnorm(rows, row_vecs, cap),
                    pair(add_rmsnorm(rows, row_vecs, cap))
                );
                n += 1;
            }
        }
    }

    // The P2P check: a block per rank, THREADS (p2p_check.rs) each.
    for world in 2..=crate::cuda::MAX_WORLD {
        assert_eq!((world as u32, 256), pair(p2p_check(world)));
        n += 1;
    }

    eprintln!("launch_shape equivalence: {n} inputs");
    assert!(n > 1_000_000, "{n}");
}
