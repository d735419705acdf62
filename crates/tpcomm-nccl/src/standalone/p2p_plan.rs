//! The plan of a group of ncclSend/ncclRecv calls on a standalone
//! communicator (p2p.rs runs it): pure, so that matching and layout are
//! checked on the host (p2p_plan/tests.rs).
//!
//! Matching: the bytes of this rank's sends to rank `d`, in the order of
//! the calls, are one stream, and so are the bytes of `d`'s receives from
//! this rank; the streams are moved byte for byte, so the k-th send `s -> d`
//! meets the k-th receive at `d` from `s` when their counts agree (as NCCL
//! requires). Every rank knows the whole matrix of stream lengths (p2p.rs
//! exchanges each rank's row of sends and row of receives first), so every
//! rank makes the same collective steps.
//!
//! Layout: an all-to-all-v in rounds over the staging buffer, as
//! rooted_plan.rs's all-to-all: each rank's own area holds `world` slots of
//! `unit` bytes (expanded, `2 * unit` each), slot `d` for the next `unit`
//! bytes of its stream to `d`; the areas are all-gathered, and each rank
//! compacts slot `me` of every sender's area into its receives. The number
//! of rounds is the longest stream between two ranks over `unit`, the same
//! on every rank. A rank's streams to itself are copied, outside the rounds.

use crate::standalone::rooted_plan::{Blocks, Loc, Shape, Step};
use tpcomm::cuda::gathered::Form;

/// One rank's calls of the group: per peer, `(call index, bytes)` in call
/// order, sends and receives apart.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Calls {
    pub sends: Vec<Vec<(usize, usize)>>,
    pub recvs: Vec<Vec<(usize, usize)>>,
}

impl Calls {
    pub fn new(world: usize) -> Calls {
        Calls {
            sends: vec![Vec::new(); world],
            recvs: vec![Vec::new(); world],
        }
    }

    /// This rank's record for the others: the bytes it sends to each rank,
    /// then the bytes it receives from each, as little-endian u64s.
    pub fn record(&self) -> Vec<u8> {
        let total = |v: &Vec<(usize, usize)>| v.iter().map(|c| c.1 as u64).sum::<u64>();
        self.sends
            .iter()
            .chain(&self.recvs)
            .flat_map(|v| total(v).to_le_bytes())
            .collect()
    }
}

/// The matrix of stream lengths from every rank's record: `m[s][d]`, the
/// bytes `s` sends to `d`. `Err` names the first pair whose sender and
/// receiver disagree (every rank finds the same one), or a malformed record.
pub fn sizes(records: &[Vec<u8>]) -> Result<Vec<Vec<usize>>, String> {
    let ranks: Vec<usize> = (0..records.len()).collect();
    sizes_of(records, &ranks)
}

/// [`sizes`] of records whose ranks the caller's program knows by other
/// numbers: record `i` is rank `ranks[i]` in the errors (a pair's
/// communicator names its two ranks as the larger communicator does).
pub fn sizes_of(records: &[Vec<u8>], ranks: &[usize]) -> Result<Vec<Vec<usize>>, String> {
    let w = records.len();
    let name = |i: usize| ranks.get(i).copied().unwrap_or(i);
    let mut sends = vec![vec![0usize; w]; w];
    let mut recvs = vec![vec![0usize; w]; w];
    for (r, rec) in records.iter().enumerate() {
        if rec.len() != 16 * w {
            return Err(format!(
                "rank {}'s record of its sends and receives is malformed",
                name(r)
            ));
        }
        let v = |i: usize| u64::from_le_bytes(rec[8 * i..8 * i + 8].try_into().unwrap_or_default());
        for q in 0..w {
            sends[r][q] = v(q) as usize;
            recvs[r][q] = v(w + q) as usize;
        }
    }
    for s in 0..w {
        for d in 0..w {
            if sends[s][d] != recvs[d][s] {
                return Err(format!(
                    "rank {} sends {} bytes to rank {}, which receives {} bytes from it (every ncclSend needs an ncclRecv of the same count and type in the same group)",
                    name(s), sends[s][d], name(d), recvs[d][s]
                ));
            }
        }
    }
    Ok(sends)
}

/// The parts of a stream of calls (`(call, bytes)` in order) that fall in
/// `[lo, hi)`: `(call, offset in the call, offset in the stream, bytes)`.
fn parts(calls: &[(usize, usize)], lo: usize, hi: usize) -> Vec<(usize, usize, usize, usize)> {
    let mut out = Vec::new();
    let mut at = 0;
    for &(c, n) in calls {
        let (a, b) = (lo.max(at), hi.min(at + n));
        if a < b {
            out.push((c, a - at, a, b - a));
        }
        at += n;
    }
    out
}

/// Bytes per pair of ranks in one round (0: the staging buffer holds none).
pub fn unit(s: Shape) -> usize {
    s.block / (2 * s.world.max(1))
}

/// Every step of this rank's part of the group: `m` from [`sizes`], `calls`
/// this rank's. `None` when the staging buffer holds no round.
pub fn plan(s: Shape, m: &[Vec<usize>], calls: &Calls) -> Option<Vec<Step>> {
    let (me, w) = (s.rank, s.world);
    let u = unit(s);
    if u == 0 {
        return None;
    }
    let Loc::Stage(mine) = s.mine() else {
        return None;
    };
    let mut v = Vec::new();
    // To itself: the send stream copied onto the receive stream.
    let own = m[me][me];
    for (c, off, pos, n) in parts(&calls.sends[me], 0, own) {
        for (rc, roff, rpos, rn) in parts(&calls.recvs[me], pos, pos + n) {
            v.push(Step::Copy {
                from: Loc::Op(c, off + (rpos - pos)),
                to: Loc::Op(rc, roff),
                bytes: rn,
            });
        }
    }
    let longest = (0..w)
        .flat_map(|a| (0..w).filter(move |&b| b != a).map(move |b| (a, b)))
        .map(|(a, b)| m[a][b])
        .max()
        .unwrap_or(0);
    for k in 0..longest.div_ceil(u) {
        let (lo, hi) = (k * u, (k + 1) * u);
        for d in (0..w).filter(|&d| d != me) {
            for (c, off, pos, n) in parts(&calls.sends[d], lo, hi.min(m[me][d])) {
                let to = Loc::Stage(mine + d * 2 * u + 2 * (pos - lo));
                v.push(Step::Convert(
                    Form::Expand,
                    Blocks::one(Loc::Op(c, off), to, n),
                ));
            }
        }
        v.push(Step::AllGather {
            from: Loc::Stage(mine),
            to: Loc::Stage(0),
            words: w * u,
        });
        for src in (0..w).filter(|&q| q != me) {
            for (c, off, pos, n) in parts(&calls.recvs[src], lo, hi.min(m[src][me])) {
                let from = Loc::Stage(src * 2 * w * u + me * 2 * u + 2 * (pos - lo));
                v.push(Step::Convert(
                    Form::Compact,
                    Blocks::one(from, Loc::Op(c, off), n),
                ));
            }
        }
    }
    Some(v)
}

/// The order in which a rank runs its pairs of a group (p2p.rs): its peers
/// but itself, each once, by (the pair's lower rank, its higher rank). Every
/// rank orders its pairs by this one key, so the pair a rank waits in is
/// never one its peer reaches only after a pair that waits for this rank.
pub fn pair_order(rank: usize, peers: impl IntoIterator<Item = usize>) -> Vec<usize> {
    let mut v: Vec<usize> = peers.into_iter().filter(|&p| p != rank).collect();
    v.sort_by_key(|&p| (p.min(rank), p.max(rank)));
    v.dedup();
    v
}

#[cfg(test)]
mod tests;
