//! A host model of rooted_plan.rs's steps, for its tests and p2p_plan.rs's:
//! every rank's plan run with the collectives paired up across ranks, the
//! staging buffer and the caller's buffers exactly as large as the call
//! allows, so a step out of bounds fails the test.

use super::*;
use tpcomm::cuda::gathered::{reference, Elem, Op};

/// One rank's memory: the caller's buffers (send and receive as ranges of
/// one area, so in-place calls alias as on the GPU) and the staging buffer.
pub(crate) struct Mem {
    pub(crate) user: Vec<u8>,
    pub(crate) send: (usize, usize),
    pub(crate) recv: (usize, usize),
    /// The buffers of a group's sends and receives (p2p.rs), as `send`.
    pub(crate) ops: Vec<(usize, usize)>,
    pub(crate) stage: Vec<u8>,
}

impl Mem {
    fn range(&self, l: Loc, len: usize) -> (bool, usize) {
        let inside = |(start, size): (usize, usize), o: usize| {
            assert!(o + len <= size, "{l:?} + {len} outside a buffer of {size}");
            start + o
        };
        match l {
            Loc::Send(o) => (true, inside(self.send, o)),
            Loc::Recv(o) => (true, inside(self.recv, o)),
            Loc::Op(i, o) => (true, inside(self.ops[i], o)),
            Loc::Stage(o) => {
                assert!(o + len <= self.stage.len(), "{l:?} + {len} outside staging");
                (false, o)
            }
        }
    }
    fn read(&self, l: Loc, len: usize) -> Vec<u8> {
        match self.range(l, len) {
            (true, s) => self.user[s..s + len].to_vec(),
            (false, s) => self.stage[s..s + len].to_vec(),
        }
    }
    fn write(&mut self, l: Loc, v: &[u8]) {
        match self.range(l, v.len()) {
            (true, s) => self.user[s..s + v.len()].copy_from_slice(v),
            (false, s) => self.stage[s..s + v.len()].copy_from_slice(v),
        }
    }
}

fn off(l: Loc, o: usize) -> Loc {
    match l {
        Loc::Send(x) => Loc::Send(x + o),
        Loc::Recv(x) => Loc::Recv(x + o),
        Loc::Stage(x) => Loc::Stage(x + o),
        Loc::Op(i, x) => Loc::Op(i, x + o),
    }
}

fn compact(v: &[u8]) -> Vec<u8> {
    v.chunks(2)
        .map(|w| {
            assert_eq!(w[1], 0, "an expanded word with a high byte");
            w[0]
        })
        .collect()
}

/// Runs every rank's plan; a collective step must be the same on every rank.
pub(crate) fn run(plans: &[Vec<Step>], mem: &mut [Mem], red: Option<(Elem, Op)>) {
    let w = plans.len();
    let mut at = vec![0usize; w];
    loop {
        for r in 0..w {
            while let Some(s) = plans[r].get(at[r]) {
                let m = &mut mem[r];
                match *s {
                    Step::Convert(form, c) => {
                        for b in 0..c.blocks {
                            let (from, to) =
                                (off(c.from, b * c.from_stride), off(c.to, b * c.to_stride));
                            let x = match form {
                                Form::Expand => m
                                    .read(from, c.nbytes)
                                    .iter()
                                    .flat_map(|&y| [y, 0])
                                    .collect(),
                                Form::Compact => compact(&m.read(from, 2 * c.nbytes)),
                            };
                            m.write(to, &x);
                        }
                    }
                    Step::Reduce {
                        from,
                        stride,
                        to,
                        count,
                    } => {
                        let (elem, op) = red.expect("a reduce step in a plan without an op");
                        let z = elem.size();
                        let blocks: Vec<Vec<u8>> = (0..w)
                            .map(|q| compact(&m.read(off(from, q * stride), 2 * count * z)))
                            .collect();
                        let refs: Vec<&[u8]> = blocks.iter().map(|b| &b[..]).collect();
                        let out: Vec<u8> = (0..count)
                            .flat_map(|i| reference(elem, op, &refs, i))
                            .collect();
                        m.write(to, &out);
                    }
                    Step::Copy { from, to, bytes } => {
                        let x = m.read(from, bytes);
                        m.write(to, &x);
                    }
                    Step::AllGather { .. } | Step::Broadcast { .. } => break,
                }
                at[r] += 1;
            }
        }
        let now: Vec<Option<&Step>> = (0..w).map(|r| plans[r].get(at[r])).collect();
        if now.iter().all(|s| s.is_none()) {
            return;
        }
        let first = now[0].expect("rank 0 ended while another rank waits in a collective");
        for (r, s) in now.iter().enumerate() {
            let s = s.unwrap_or_else(|| panic!("rank {r} ended while rank 0 waits"));
            let same = match (first, s) {
                (Step::AllGather { words: a, .. }, Step::AllGather { words: b, .. }) => a == b,
                (
                    Step::Broadcast {
                        root: a, words: x, ..
                    },
                    Step::Broadcast {
                        root: b, words: y, ..
                    },
                ) => a == b && x == y,
                _ => false,
            };
            assert!(
                same,
                "rank {r}'s collective {s:?} does not pair with {first:?}"
            );
        }
        match *first {
            Step::AllGather { words, .. } => {
                let ins: Vec<Vec<u8>> = (0..w)
                    .map(|r| match *now[r].unwrap() {
                        Step::AllGather { from, .. } => mem[r].read(from, 2 * words),
                        _ => unreachable!(),
                    })
                    .collect();
                for r in 0..w {
                    let Step::AllGather { to, .. } = *now[r].unwrap() else {
                        unreachable!()
                    };
                    for (q, x) in ins.iter().enumerate() {
                        mem[r].write(off(to, q * 2 * words), x);
                    }
                }
            }
            Step::Broadcast { root, words, .. } => {
                let Step::Broadcast { from, .. } = *now[root].unwrap() else {
                    unreachable!()
                };
                let x = mem[root].read(from, 2 * words);
                for r in 0..w {
                    let Step::Broadcast { to, .. } = *now[r].unwrap() else {
                        unreachable!()
                    };
                    mem[r].write(to, &x);
                }
            }
            _ => unreachable!(),
        }
        for a in at.iter_mut() {
            *a += 1;
        }
    }
}

/// Bytes that differ from rank to rank and call to call (an LCG).
pub(crate) fn noise(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (x >> 56) as u8
        })
        .collect()
}
