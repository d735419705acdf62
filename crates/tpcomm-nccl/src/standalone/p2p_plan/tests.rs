//! p2p_plan.rs's tests: every rank's plan of a group run in rooted_plan's
//! host model of the steps, every received byte compared with what its
//! sender's calls held.

use super::*;
use crate::standalone::rooted_plan::model::{noise, run, Mem};

/// One call of a group: `(send?, peer, bytes)`.
type Call = (bool, usize, usize);

/// Runs the group `groups[r]` (rank `r`'s calls, in order) at `block`, and
/// checks every receive against the bytes its senders' calls hold.
fn check_group(groups: &[Vec<Call>], block: usize) {
    let w = groups.len();
    // Each rank's memory: its calls' buffers side by side.
    let mut mems = Vec::new();
    let mut all_calls = Vec::new();
    for (r, g) in groups.iter().enumerate() {
        let mut c = Calls::new(w);
        let (mut user, mut ops) = (Vec::new(), Vec::new());
        for (i, &(send, peer, n)) in g.iter().enumerate() {
            let bytes = if send {
                noise((r * 1000 + i) as u64 + 1, n)
            } else {
                vec![0xdd; n]
            };
            ops.push((user.len(), n));
            user.extend_from_slice(&bytes);
            if send {
                c.sends[peer].push((i, n));
            } else {
                c.recvs[peer].push((i, n));
            }
        }
        let shape = Shape {
            rank: r,
            world: w,
            block,
        };
        mems.push(Mem {
            user,
            send: (0, 0),
            recv: (0, 0),
            ops,
            stage: vec![0xee; shape.staging_bytes()],
        });
        all_calls.push(c);
    }
    let records: Vec<Vec<u8>> = all_calls.iter().map(Calls::record).collect();
    let m = sizes(&records).expect("matching sizes");
    let plans: Vec<Vec<Step>> = (0..w)
        .map(|r| {
            let shape = Shape {
                rank: r,
                world: w,
                block,
            };
            plan(shape, &m, &all_calls[r]).expect("a plan")
        })
        .collect();
    run(&plans, &mut mems, None);
    for d in 0..w {
        for (s, group) in groups.iter().enumerate() {
            let sent: Vec<u8> = group
                .iter()
                .enumerate()
                .filter(|(_, c)| c.0 && c.1 == d)
                .flat_map(|(i, c)| noise((s * 1000 + i) as u64 + 1, c.2))
                .collect();
            let got: Vec<u8> = all_calls[d].recvs[s]
                .iter()
                .flat_map(|&(i, _)| {
                    let (at, n) = mems[d].ops[i];
                    mems[d].user[at..at + n].to_vec()
                })
                .collect();
            assert_eq!(got, sent, "world {w} block {block}: rank {d} from rank {s}");
        }
    }
}

const BLOCKS: [usize; 3] = [16, 48, 4096];

#[test]
fn a_self_send_and_a_ring_shift_arrive_whole() {
    for w in 1..=5 {
        for block in BLOCKS {
            let selfs: Vec<Vec<Call>> = (0..w)
                .map(|r| vec![(true, r, 1025), (false, r, 1025)])
                .collect();
            check_group(&selfs, block);
            let ring: Vec<Vec<Call>> = (0..w)
                .map(|r| vec![(true, (r + 1) % w, 301), (false, (r + w - 1) % w, 301)])
                .collect();
            check_group(&ring, block);
            // Uneven: rank r sends (r + 1) * 37 bytes on.
            let uneven: Vec<Vec<Call>> = (0..w)
                .map(|r| {
                    let prev = (r + w - 1) % w;
                    vec![
                        (true, (r + 1) % w, (r + 1) * 37),
                        (false, prev, (prev + 1) * 37),
                    ]
                })
                .collect();
            check_group(&uneven, block);
        }
    }
}

#[test]
fn an_all_to_all_of_grouped_calls_with_uneven_split_counts_matches_call_by_call_order() {
    // Rank s sends size(s, d) bytes to d, split in two calls, which d
    // receives in a different split (the streams meet byte for byte);
    // some pairs send nothing.
    let size = |s: usize, d: usize| ((s * 7 + d * 3) % 11) * 5;
    for w in 1..=5 {
        for block in BLOCKS {
            let groups: Vec<Vec<Call>> = (0..w)
                .map(|r| {
                    let mut g = Vec::new();
                    for q in 0..w {
                        let (n, back) = (size(r, q), size(q, r));
                        g.push((true, q, n / 3));
                        g.push((false, q, back / 2));
                        g.push((true, q, n - n / 3));
                        g.push((false, q, back - back / 2));
                    }
                    g
                })
                .collect();
            check_group(&groups, block);
        }
    }
}

#[test]
fn senders_and_receivers_that_disagree_are_named_by_every_rank() {
    let mut a = Calls::new(2);
    let mut b = Calls::new(2);
    a.sends[1].push((0, 8));
    b.recvs[0].push((0, 4));
    let e = sizes(&[a.record(), b.record()]).unwrap_err();
    assert!(
        e.contains("rank 0 sends 8 bytes to rank 1, which receives 4"),
        "{e}"
    );
    let e = sizes(&[a.record(), vec![1, 2, 3]]).unwrap_err();
    assert!(e.contains("rank 1's record"), "{e}");
    b.recvs[0][0].1 = 8;
    assert_eq!(
        sizes(&[a.record(), b.record()]),
        Ok(vec![vec![0, 8], vec![0, 0]])
    );
    // A pair's communicator of ranks 3 and 5 of a larger one names them so.
    b.recvs[0][0].1 = 4;
    let e = sizes_of(&[a.record(), b.record()], &[3, 5]).unwrap_err();
    assert!(
        e.contains("rank 3 sends 8 bytes to rank 5, which receives 4"),
        "{e}"
    );
    let e = sizes_of(&[a.record(), vec![1, 2, 3]], &[3, 5]).unwrap_err();
    assert!(e.contains("rank 5's record"), "{e}");
}

#[test]
fn a_staging_buffer_too_small_for_a_round_gives_no_plan() {
    let s = Shape {
        rank: 0,
        world: 8,
        block: 8,
    };
    assert_eq!(plan(s, &vec![vec![0; 8]; 8], &Calls::new(8)), None);
    // Nothing between ranks: no collective step at all.
    let s = Shape {
        rank: 1,
        world: 3,
        block: 64,
    };
    let mut c = Calls::new(3);
    c.sends[1].push((0, 10));
    c.recvs[1].push((1, 10));
    let mut m = vec![vec![0; 3]; 3];
    m[1][1] = 10;
    let p = plan(s, &m, &c).unwrap();
    assert_eq!(
        p,
        vec![Step::Copy {
            from: Loc::Op(0, 0),
            to: Loc::Op(1, 0),
            bytes: 10
        }]
    );
}

/// Runs every rank's queue of pairs as blocking meetings (a pair completes
/// only when both ranks have it next) and says whether every pair completed.
fn all_complete(mut queues: Vec<std::collections::VecDeque<usize>>) -> bool {
    loop {
        if queues.iter().all(|q| q.is_empty()) {
            return true;
        }
        let met = (0..queues.len()).find(|&r| {
            queues[r]
                .front()
                .is_some_and(|&p| queues[p].front() == Some(&r))
        });
        let Some(r) = met else { return false };
        let p = queues[r].pop_front().unwrap_or(r);
        queues[p].pop_front();
    }
}

/// Every rank's pairs in [`pair_order`]: `links[r][p]` says whether ranks r
/// and p send or receive to each other in the group (symmetric).
fn in_pair_order(links: &[Vec<bool>]) -> Vec<std::collections::VecDeque<usize>> {
    let w = links.len();
    (0..w)
        .map(|r| pair_order(r, (0..w).filter(|&p| links[r][p])).into())
        .collect()
}

#[test]
fn the_pair_order_skips_itself_names_each_peer_once_and_sorts_by_the_pair() {
    assert_eq!(pair_order(2, [5, 0, 2, 3, 0, 1]), vec![0, 1, 3, 5]);
    assert_eq!(pair_order(0, [3, 1, 2]), vec![1, 2, 3]);
    assert_eq!(pair_order(4, [4]), Vec::<usize>::new());
}

#[test]
fn a_ring_of_three_deadlocks_ordered_next_rank_first_but_not_in_the_pair_order() {
    // Every rank with both others. Next rank first (0: 1, 2; 1: 2, 0; 2: 0, 1),
    // every rank waits for a peer that waits elsewhere.
    let w = 3;
    let by_next = (0..w).map(|r| [(r + 1) % w, (r + 2) % w].into()).collect();
    assert!(!all_complete(by_next));
    let links = vec![
        vec![false, true, true],
        vec![true, false, true],
        vec![true, true, false],
    ];
    assert!(all_complete(in_pair_order(&links)));
}

proptest::proptest! {
    #[test]
    fn every_pattern_of_pairs_completes_in_the_pair_order(
        world in 2usize..=8,
        bits in proptest::collection::vec(proptest::bool::ANY, 28),
    ) {
        // bits[k] links the k-th pair (i, j), i < j, in row order.
        let index = |i: usize, j: usize| i * (2 * world - i - 1) / 2 + (j - i - 1);
        let links: Vec<Vec<bool>> = (0..world)
            .map(|r| {
                (0..world)
                    .map(|p| r != p && bits[index(r.min(p), r.max(p))])
                    .collect()
            })
            .collect();
        proptest::prop_assert!(all_complete(in_pair_order(&links)), "{links:?}");
    }
}
