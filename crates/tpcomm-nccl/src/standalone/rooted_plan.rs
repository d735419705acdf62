//! The plans of the rooted and all-to-all calls on a standalone
//! communicator (ncclReduce, ncclGather, ncclScatter, ncclAlltoAll): each
//! call becomes, on each rank, a list of steps over the caller's buffers
//! and the staging buffer, built only from what the drop-in already serves
//! byte-exactly (gathered.rs): bytes expanded to 16-bit words, an
//! all-gather or broadcast of those words, compacted back, or reduced in
//! rank order. rooted.rs launches the steps on the caller's stream; this
//! file is pure, so that the layouts and the piece planning are checked on
//! the host (rooted_plan/tests.rs runs every rank's plan in a host model).
//!
//! The staging buffer holds `world` gathered areas of `block` bytes from
//! offset 0 and this rank's own expanded area at `world * block`. A call
//! larger than one piece runs in pieces, each of them every step once; all
//! ranks make the same collective steps with the same sizes (they depend
//! only on the call, never on the rank), so the kernels pair up. A
//! non-root's receive buffer (reduce, gather) and send buffer (scatter)
//! appear in no step.

use tpcomm::cuda::gathered::Form;

/// Where a step reads or writes: a byte offset into the caller's send or
/// receive buffer, or into the staging buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Loc {
    Send(usize),
    Recv(usize),
    Stage(usize),
    /// The buffer of a group's `i`-th send or receive (p2p.rs's plans).
    Op(usize, usize),
}

/// One launch on the caller's stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// `Form::Expand`: the blocks' plain bytes written as 16-bit words
    /// 0x00bb; `Form::Compact`, the reverse (strides and `nbytes` count the
    /// same way).
    Convert(Form, Blocks),
    /// Every rank's `words` 16-bit words at `from` to `to + rank * 2 * words`.
    AllGather { from: Loc, to: Loc, words: usize },
    /// The root's `words` 16-bit words at `from` to every rank's `to`.
    Broadcast {
        root: usize,
        from: Loc,
        to: Loc,
        words: usize,
    },
    /// Element-wise reduction in rank order of `world` expanded blocks of
    /// `count` elements (`stride` bytes apart) into plain elements at `to`.
    Reduce {
        from: Loc,
        stride: usize,
        to: Loc,
        count: usize,
    },
    /// A plain device-to-device copy.
    Copy { from: Loc, to: Loc, bytes: usize },
}

/// `blocks` blocks of `nbytes` bytes: read `from_stride` apart from `from`,
/// written `to_stride` apart at `to`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Blocks {
    pub from: Loc,
    pub from_stride: usize,
    pub to: Loc,
    pub to_stride: usize,
    pub nbytes: usize,
    pub blocks: usize,
}

impl Blocks {
    /// One block of `nbytes` bytes from `from` to `to`.
    pub(crate) fn one(from: Loc, to: Loc, nbytes: usize) -> Blocks {
        Blocks {
            from,
            from_stride: 0,
            to,
            to_stride: 0,
            nbytes,
            blocks: 1,
        }
    }
}

/// Which call, with what only it needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `elem` bytes per element; `recv_aligned`: the root's receive buffer is
    /// aligned to the element (the reduction kernel writes whole elements).
    Reduce {
        root: usize,
        elem: usize,
        recv_aligned: bool,
    },
    Gather {
        root: usize,
    },
    Scatter {
        root: usize,
    },
    AllToAll,
}

/// The communicator's side of a plan: this rank, the ranks, and the bytes
/// of one gathered area of the staging buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub rank: usize,
    pub world: usize,
    pub block: usize,
}

impl Shape {
    /// Where this rank's own expanded area starts in the staging buffer.
    pub(crate) fn mine(&self) -> Loc {
        Loc::Stage(self.world * self.block)
    }

    /// The staging bytes a plan of this shape may touch.
    pub fn staging_bytes(&self) -> usize {
        (self.world + 1) * self.block
    }
}

/// What one piece moves: elements for a reduce, bytes per rank (gather) or
/// per pair of ranks (scatter, all-to-all) otherwise; 0 when the staging
/// buffer holds no piece.
pub fn per_piece(kind: Kind, s: Shape) -> usize {
    match kind {
        Kind::Reduce { elem, .. } => (s.block / 2) / elem.max(1),
        Kind::Gather { .. } => s.block / 2,
        Kind::Scatter { .. } | Kind::AllToAll => s.block / (2 * s.world.max(1)),
    }
}

/// `(offset, length)` of the pieces of `total` units, `per` at most each
/// (`per` at least 1); none for a total of 0.
pub fn pieces(total: usize, per: usize) -> impl Iterator<Item = (usize, usize)> {
    let per = per.max(1);
    (0..total.div_ceil(per)).map(move |i| (i * per, per.min(total - i * per)))
}

/// Every step of `kind` on this rank for `count` elements of `z` bytes (a
/// rank's block: the reduce's and gather's input, the scatter's output, one
/// all-to-all block); empty for `count` 0. `None` when the staging buffer
/// holds no piece.
pub fn plan(kind: Kind, s: Shape, count: usize, z: usize) -> Option<Vec<Step>> {
    let per = per_piece(kind, s);
    if per == 0 {
        return None;
    }
    let (me, w, mine) = (s.rank, s.world, s.mine());
    let nbytes = count * z;
    let mut v = Vec::new();
    match kind {
        Kind::Reduce {
            root, recv_aligned, ..
        } => {
            for (off, n) in pieces(count, per) {
                let (o, b) = (off * z, n * z);
                gather_piece(&mut v, Loc::Send(o), mine, b);
                if me == root {
                    let to = if recv_aligned { Loc::Recv(o) } else { mine };
                    v.push(Step::Reduce {
                        from: Loc::Stage(0),
                        stride: 2 * b,
                        to,
                        count: n,
                    });
                    if !recv_aligned {
                        v.push(Step::Copy {
                            from: mine,
                            to: Loc::Recv(o),
                            bytes: b,
                        });
                    }
                }
            }
        }
        Kind::Gather { root } => {
            for (o, m) in pieces(nbytes, per) {
                gather_piece(&mut v, Loc::Send(o), mine, m);
                if me == root {
                    let every_rank = Blocks {
                        from: Loc::Stage(0),
                        from_stride: 2 * m,
                        to: Loc::Recv(o),
                        to_stride: nbytes,
                        nbytes: m,
                        blocks: w,
                    };
                    v.push(Step::Convert(Form::Compact, every_rank));
                }
            }
        }
        Kind::Scatter { root } => {
            for (o, m) in pieces(nbytes, per) {
                if me == root {
                    v.push(expand(Loc::Send(o), nbytes, mine, 2 * m, m, w));
                }
                v.push(Step::Broadcast {
                    root,
                    from: mine,
                    to: Loc::Stage(0),
                    words: w * m,
                });
                let own = Blocks::one(Loc::Stage(me * 2 * m), Loc::Recv(o), m);
                v.push(Step::Convert(Form::Compact, own));
            }
        }
        Kind::AllToAll => {
            for (o, m) in pieces(nbytes, per) {
                v.push(expand(Loc::Send(o), nbytes, mine, 2 * m, m, w));
                v.push(Step::AllGather {
                    from: mine,
                    to: Loc::Stage(0),
                    words: w * m,
                });
                let every_rank = Blocks {
                    from: Loc::Stage(me * 2 * m),
                    from_stride: 2 * w * m,
                    to: Loc::Recv(o),
                    to_stride: nbytes,
                    nbytes: m,
                    blocks: w,
                };
                v.push(Step::Convert(Form::Compact, every_rank));
            }
        }
    }
    Some(v)
}

/// This rank's `nbytes` at `from` expanded into its own area `mine`, then
/// every rank's expanded piece all-gathered into the gathered areas (rank
/// r's at `r * 2 * nbytes`).
fn gather_piece(v: &mut Vec<Step>, from: Loc, mine: Loc, nbytes: usize) {
    v.push(expand(from, 0, mine, 0, nbytes, 1));
    v.push(Step::AllGather {
        from: mine,
        to: Loc::Stage(0),
        words: nbytes,
    });
}

fn expand(
    from: Loc,
    from_stride: usize,
    to: Loc,
    to_stride: usize,
    nbytes: usize,
    blocks: usize,
) -> Step {
    let b = Blocks {
        from,
        from_stride,
        to,
        to_stride,
        nbytes,
        blocks,
    };
    Step::Convert(Form::Expand, b)
}

#[cfg(test)]
pub(crate) mod model;
#[cfg(test)]
mod tests;
