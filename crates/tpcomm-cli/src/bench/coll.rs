//! `tpcomm bench --coll`: which collective a run measures, nccl-tests' size
//! and bus-bandwidth conventions for each, and the CPU ranks' sweep of the
//! collectives other than the all-reduce (measure.rs times the all-reduce).
//!
//! Sizes as nccl-tests prints them: the size column is the whole array of
//! the collective, `world x block` for all-gather (its output on every rank)
//! and reduce-scatter (its input on every rank), the message for broadcast
//! and all-reduce; count is that size in elements. algbw = size / time;
//! busbw = algbw x 2(n-1)/n (all-reduce), x (n-1)/n (all-gather,
//! reduce-scatter), x 1 (broadcast).

use super::measure::time_and_agree;
use super::BenchArgs;
use clap::ValueEnum;
use tpcomm::report::{BenchRow, RowLabels};
use tpcomm::verify::{random_input, Reference};
use tpcomm::{Element, HostCommunicator, ReduceOp};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Coll {
    #[default]
    AllReduce,
    AllGather,
    ReduceScatter,
    Broadcast,
}

impl Coll {
    pub fn name(self) -> &'static str {
        match self {
            Coll::AllReduce => "all-reduce",
            Coll::AllGather => "all-gather",
            Coll::ReduceScatter => "reduce-scatter",
            Coll::Broadcast => "broadcast",
        }
    }

    /// busbw / algbw for `world` ranks, as nccl-tests computes it.
    pub fn busbw_factor(self, world: usize) -> f64 {
        let n = world as f64;
        if world < 2 {
            return 0.0;
        }
        match self {
            Coll::AllReduce => 2.0 * (n - 1.0) / n,
            Coll::AllGather | Coll::ReduceScatter => (n - 1.0) / n,
            Coll::Broadcast => 1.0,
        }
    }

    /// Elements of one rank's block for a size-column value of `bytes`
    /// (at least one element).
    pub fn block_count(self, bytes: u64, elem: u64, world: usize) -> u64 {
        let total = (bytes / elem).max(1);
        match self {
            Coll::AllGather | Coll::ReduceScatter => (total / world as u64).max(1),
            Coll::AllReduce | Coll::Broadcast => total,
        }
    }

    /// The size column's element count for a block of `block` elements.
    pub fn total_count(self, block: u64, world: usize) -> u64 {
        match self {
            Coll::AllGather | Coll::ReduceScatter => block * world as u64,
            Coll::AllReduce | Coll::Broadcast => block,
        }
    }

    /// The redop column: the op for reducing collectives, "none" otherwise
    /// (as nccl-tests prints it).
    pub fn op_label(self, op: ReduceOp) -> &'static str {
        match self {
            Coll::AllReduce | Coll::ReduceScatter => op.name(),
            Coll::AllGather | Coll::Broadcast => "none",
        }
    }
}

/// A row of `coll` (algo: its name; mode: eager): the size, count and
/// bandwidths by nccl-tests' rules.
pub(crate) fn row(
    coll: Coll,
    block: u64,
    dtype: tpcomm::DType,
    op: ReduceOp,
    time_us: f64,
    world: usize,
    wrong: u64,
) -> BenchRow {
    let count = coll.total_count(block, world);
    let bytes = count * dtype.size() as u64;
    let labels = RowLabels {
        op: coll.op_label(op),
        algo: coll.name(),
        mode: "eager",
    };
    let mut r = BenchRow::new(bytes, count, dtype, labels, time_us, world, wrong);
    r.busbw_gbps = r.algbw_gbps * coll.busbw_factor(world);
    r
}

/// One rank's sweep of an all-gather, reduce-scatter or broadcast over the
/// sizes: one checked call on fresh random data per size (every output
/// element: gathered and broadcast values exactly, sums against a float64
/// reference), then timed calls on rotated inputs; rank 0 emits the row with
/// the slowest rank's median and every rank's wrong elements.
pub(super) fn sweep<T: Element>(
    args: &BenchArgs,
    c: &mut HostCommunicator,
    nonce: u64,
    emit: &mut dyn FnMut(BenchRow) -> bool,
) -> tpcomm::Result<()> {
    let (rank, world) = (c.rank(), c.world());
    let coll = args.coll;
    let esize = T::DTYPE.size() as u64;
    // Set once `emit` finds nobody reading (a closed stdout): every rank then stops.
    let mut unread = false;
    for (si, &bytes) in args.sizes().iter().enumerate() {
        let n = coll.block_count(bytes, esize, world) as usize;
        let seed = |r: usize, k: u64| nonce ^ ((si as u64) << 40) ^ (k << 32) ^ r as u64;
        // The input of rank r and the output length, per collective.
        let in_len = match coll {
            Coll::ReduceScatter => world * n,
            _ => n,
        };
        let out_len = match coll {
            Coll::AllGather => world * n,
            _ => n,
        };
        let root = si % world;
        let inputs: Vec<Vec<T>> = (0..world)
            .map(|r| random_input(seed(r, 0), in_len))
            .collect();
        let mut out = vec![T::from_f32(0.0); out_len];
        let wrong = match coll {
            Coll::AllGather => {
                c.all_gather(&inputs[rank], &mut out)?;
                let expect = inputs.iter().flatten();
                out.iter()
                    .zip(expect)
                    .filter(|(a, b)| a.to_bits_u32() != b.to_bits_u32())
                    .count()
            }
            Coll::ReduceScatter => {
                c.reduce_scatter(&inputs[rank], &mut out, args.op)?;
                let blocks: Vec<&[T]> = inputs
                    .iter()
                    .map(|v| &v[rank * n..(rank + 1) * n])
                    .collect();
                Reference::new(&blocks, args.op).count_wrong(&out, world)
            }
            _ => {
                out.copy_from_slice(&inputs[rank]);
                c.broadcast(&mut out, root)?;
                out.iter()
                    .zip(&inputs[root])
                    .filter(|(a, b)| a.to_bits_u32() != b.to_bits_u32())
                    .count()
            }
        } as u64;
        let rot = ((256u64 << 20) / (in_len as u64 * esize).max(1)).clamp(2, 4) as usize;
        let mut bufs: Vec<Vec<T>> = vec![inputs.into_iter().nth(rank).unwrap_or_default()];
        for k in 1..rot {
            bufs.push(random_input(seed(rank, k as u64), in_len));
        }
        let call = |c: &mut HostCommunicator, i: usize| -> tpcomm::Result<()> {
            match coll {
                Coll::AllGather => c.all_gather(&bufs[i % rot], &mut out),
                Coll::ReduceScatter => c.reduce_scatter(&bufs[i % rot], &mut out, args.op),
                _ => {
                    let b = &mut bufs[i % rot];
                    c.broadcast(b, root)
                }
            }
        };
        let Some((median, wrong_all)) = time_and_agree(c, args, bytes, unread, wrong, call)? else {
            return Ok(());
        };
        if rank == 0 {
            unread = !emit(row(
                coll,
                n as u64,
                T::DTYPE,
                args.op,
                median,
                world,
                wrong_all,
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tpcomm::DType;

    #[test]
    fn bus_bandwidth_follows_nccl_tests() {
        assert_eq!(Coll::AllReduce.busbw_factor(4), 1.5);
        assert_eq!(Coll::AllGather.busbw_factor(4), 0.75);
        assert_eq!(Coll::ReduceScatter.busbw_factor(8), 0.875);
        assert_eq!(Coll::Broadcast.busbw_factor(8), 1.0);
        // 1 MiB gathered over 4 ranks in 100 us: algbw 10.49 GB/s, busbw x 3/4.
        let r = row(
            Coll::AllGather,
            65_536,
            DType::F32,
            ReduceOp::Sum,
            100.0,
            4,
            0,
        );
        assert_eq!(
            (r.bytes, r.count, r.op.as_str()),
            (1 << 20, 262_144, "none")
        );
        assert!((r.busbw_gbps - r.algbw_gbps * 0.75).abs() < 1e-12);
    }

    #[test]
    fn the_size_column_is_the_whole_gathered_array() {
        // 1 KiB of f32 over 4 ranks: 64 elements per rank, 256 in all.
        assert_eq!(Coll::AllGather.block_count(1024, 4, 4), 64);
        assert_eq!(Coll::AllGather.total_count(64, 4), 256);
        assert_eq!(Coll::ReduceScatter.block_count(1024, 4, 4), 64);
        assert_eq!(Coll::Broadcast.block_count(1024, 4, 4), 256);
        // Never below one element per rank.
        assert_eq!(Coll::AllGather.block_count(4, 4, 8), 1);
    }
}
