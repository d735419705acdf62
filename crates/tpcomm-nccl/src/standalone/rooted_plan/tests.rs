//! rooted_plan.rs's tests: every rank's plan run in a host model of the
//! steps (the collectives pairing up across ranks, the staging buffer and
//! the caller's buffers exactly as large as the call allows, so a step out
//! of bounds fails the test), against the answer computed directly.

use super::model::{noise, run, Mem};
use super::*;
use tpcomm::cuda::gathered::{reference, Elem, Op};

/// A rank's memory for `send` and `recv` bytes (the receive area at
/// `recv_at` of the send area when `recv_at` is given: in place).
fn mem_of(s: Shape, send: Vec<u8>, recv: usize, recv_at: Option<usize>) -> Mem {
    let stage = vec![0xee; s.staging_bytes()];
    match recv_at {
        Some(at) => Mem {
            send: (0, send.len()),
            recv: (at, recv),
            user: send,
            ops: vec![],
            stage,
        },
        None => {
            let n = send.len();
            let mut user = send;
            user.resize(n + recv, 0xdd);
            Mem {
                user,
                send: (0, n),
                recv: (n, recv),
                ops: vec![],
                stage,
            }
        }
    }
}

fn recv_of(m: &Mem) -> Vec<u8> {
    m.user[m.recv.0..m.recv.0 + m.recv.1].to_vec()
}

const BLOCKS: [usize; 3] = [16, 48, 4096];
const COUNTS: [usize; 5] = [0, 1, 7, 33, 301];

#[test]
fn pieces_cover_the_call_once_in_order_and_none_for_nothing() {
    assert_eq!(pieces(0, 4).count(), 0);
    assert_eq!(pieces(1, 5).collect::<Vec<_>>(), [(0, 1)]);
    assert_eq!(pieces(10, 4).collect::<Vec<_>>(), [(0, 4), (4, 4), (8, 2)]);
    assert_eq!(pieces(8, 4).collect::<Vec<_>>(), [(0, 4), (4, 4)]);
    assert_eq!(pieces(3, 0).count(), 3, "a piece is at least one unit");
}

#[test]
fn a_staging_buffer_too_small_for_one_piece_gives_no_plan() {
    let s = Shape {
        rank: 0,
        world: 8,
        block: 8,
    };
    assert_eq!(plan(Kind::AllToAll, s, 3, 4), None);
    assert_eq!(plan(Kind::Scatter { root: 0 }, s, 3, 4), None);
    let r = Kind::Reduce {
        root: 0,
        elem: 8,
        recv_aligned: true,
    };
    assert_eq!(plan(r, s, 3, 8), None);
    assert!(plan(Kind::Gather { root: 0 }, s, 3, 4).is_some());
    // Nothing to move is an empty plan, not a refusal.
    assert_eq!(plan(Kind::Gather { root: 1 }, s, 0, 4), Some(vec![]));
}

#[test]
fn gather_puts_every_rank_s_block_in_rank_order_at_the_root_only() {
    for world in 1..=5 {
        for root in 0..world {
            for block in BLOCKS {
                for count in COUNTS {
                    for z in [1, 2, 8] {
                        for inplace in [false, true] {
                            let nb = count * z;
                            let sends: Vec<Vec<u8>> = (0..world)
                                .map(|r| noise((r * 31 + count) as u64, nb))
                                .collect();
                            let mut mem = Vec::new();
                            let mut plans = Vec::new();
                            for (r, send) in sends.iter().enumerate() {
                                let s = Shape {
                                    rank: r,
                                    world,
                                    block,
                                };
                                let k = Kind::Gather { root };
                                plans.push(plan(k, s, count, z).unwrap());
                                mem.push(if r != root {
                                    mem_of(s, send.clone(), 0, None)
                                } else if inplace {
                                    // sendbuff is the root's block of recvbuff.
                                    let mut all = vec![0xcc; nb * world];
                                    all[r * nb..(r + 1) * nb].copy_from_slice(send);
                                    let mut m = mem_of(s, all, nb * world, Some(0));
                                    m.send = (r * nb, nb);
                                    m
                                } else {
                                    mem_of(s, send.clone(), nb * world, None)
                                });
                            }
                            run(&plans, &mut mem, None);
                            let want = sends.concat();
                            let what = format!("world {world} root {root} block {block} count {count} z {z} inplace {inplace}");
                            assert_eq!(recv_of(&mem[root]), want, "{what}");
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn scatter_gives_each_rank_its_block_of_the_root_s_send_only() {
    for world in 1..=5 {
        for root in 0..world {
            for block in BLOCKS {
                for count in COUNTS {
                    for z in [1, 4] {
                        for inplace in [false, true] {
                            let nb = count * z;
                            let all = noise((root * 7 + count) as u64, nb * world);
                            let mut mem = Vec::new();
                            let mut plans = Vec::new();
                            for r in 0..world {
                                let s = Shape {
                                    rank: r,
                                    world,
                                    block,
                                };
                                plans.push(plan(Kind::Scatter { root }, s, count, z).unwrap());
                                mem.push(if r != root {
                                    mem_of(s, vec![], nb, None)
                                } else if inplace {
                                    mem_of(s, all.clone(), nb, Some(r * nb))
                                } else {
                                    mem_of(s, all.clone(), nb, None)
                                });
                            }
                            run(&plans, &mut mem, None);
                            for (r, m) in mem.iter().enumerate() {
                                assert_eq!(
                                    recv_of(m),
                                    &all[r * nb..(r + 1) * nb],
                                    "world {world} root {root} block {block} count {count} z {z} inplace {inplace} rank {r}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn all_to_all_sends_block_j_of_rank_i_to_block_i_of_rank_j() {
    for world in 1..=6 {
        for block in BLOCKS {
            for count in COUNTS {
                for z in [1, 2, 4] {
                    for inplace in [false, true] {
                        let nb = count * z;
                        let sends: Vec<Vec<u8>> = (0..world)
                            .map(|r| noise((r * 13 + count + 1) as u64, nb * world))
                            .collect();
                        let mut mem = Vec::new();
                        let mut plans = Vec::new();
                        for (r, send) in sends.iter().enumerate() {
                            let s = Shape {
                                rank: r,
                                world,
                                block,
                            };
                            plans.push(plan(Kind::AllToAll, s, count, z).unwrap());
                            let at = inplace.then_some(0);
                            mem.push(mem_of(s, send.clone(), nb * world, at));
                        }
                        run(&plans, &mut mem, None);
                        for (j, m) in mem.iter().enumerate() {
                            let want: Vec<u8> = (0..world)
                                .flat_map(|i| sends[i][j * nb..(j + 1) * nb].to_vec())
                                .collect();
                            assert_eq!(
                                recv_of(m),
                                want,
                                "world {world} block {block} count {count} z {z} inplace {inplace} rank {j}"
                            );
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn reduce_gives_the_rank_order_reduction_at_the_root_only() {
    let cases = [
        (Elem::I64, Op::Sum),
        (Elem::U8, Op::Max),
        (Elem::I32, Op::Prod),
        (Elem::F32, Op::Sum),
        (Elem::F16, Op::Avg),
        (Elem::Bf16, Op::Min),
        (Elem::F64, Op::Avg),
    ];
    for world in 1..=5 {
        for root in 0..world {
            for block in BLOCKS {
                for count in [0usize, 1, 7, 129] {
                    for (elem, op) in cases {
                        for (aligned, inplace) in [(true, false), (false, false), (true, true)] {
                            let z = elem.size();
                            let sends: Vec<Vec<u8>> = (0..world)
                                .map(|r| noise((r * 17 + count + z) as u64, count * z))
                                .collect();
                            let k = Kind::Reduce {
                                root,
                                elem: z,
                                recv_aligned: aligned,
                            };
                            let mut plans = Vec::new();
                            let mut mem = Vec::new();
                            for (r, send) in sends.iter().enumerate() {
                                let s = Shape {
                                    rank: r,
                                    world,
                                    block,
                                };
                                let Some(p) = plan(k, s, count, z) else {
                                    assert!(block / 2 < z, "no plan at block {block}");
                                    continue;
                                };
                                plans.push(p);
                                let recv = if r == root { count * z } else { 0 };
                                let at = (inplace && r == root).then_some(0);
                                mem.push(mem_of(s, send.clone(), recv, at));
                            }
                            if plans.len() < world {
                                continue;
                            }
                            run(&plans, &mut mem, Some((elem, op)));
                            let refs: Vec<&[u8]> = sends.iter().map(|v| &v[..]).collect();
                            let want: Vec<u8> = (0..count)
                                .flat_map(|i| reference(elem, op, &refs, i))
                                .collect();
                            assert_eq!(
                                recv_of(&mem[root]),
                                want,
                                "world {world} root {root} block {block} count {count} {elem:?} {op:?} aligned {aligned} inplace {inplace}"
                            );
                        }
                    }
                }
            }
        }
    }
}

/// A non-root's receive buffer (reduce, gather) and send buffer (scatter)
/// may be NULL or garbage: no step of its plan names them.
#[test]
fn a_non_root_plan_never_names_the_buffer_only_the_root_has() {
    let touches = |p: &[Step], recv: bool| {
        let is = |l: Loc| matches!((l, recv), (Loc::Recv(_), true) | (Loc::Send(_), false));
        p.iter().any(|s| match *s {
            Step::Convert(_, Blocks { from, to, .. })
            | Step::AllGather { from, to, .. }
            | Step::Broadcast { from, to, .. }
            | Step::Reduce { from, to, .. }
            | Step::Copy { from, to, .. } => is(from) || is(to),
        })
    };
    let s = Shape {
        rank: 1,
        world: 3,
        block: 64,
    };
    for aligned in [true, false] {
        let k = Kind::Reduce {
            root: 0,
            elem: 4,
            recv_aligned: aligned,
        };
        assert!(!touches(&plan(k, s, 100, 4).unwrap(), true));
        assert!(touches(
            &plan(k, Shape { rank: 0, ..s }, 100, 4).unwrap(),
            true
        ));
    }
    let g = plan(Kind::Gather { root: 2 }, s, 100, 2).unwrap();
    assert!(!touches(&g, true));
    let sc = plan(Kind::Scatter { root: 0 }, s, 100, 2).unwrap();
    assert!(!touches(&sc, false));
    assert!(touches(
        &plan(Kind::Scatter { root: 1 }, s, 100, 2).unwrap(),
        false
    ));
}
