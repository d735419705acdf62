//! Timing one message size of `tpcomm bench` on the CPU path and agreeing
//! with the other ranks on the result (the all-reduce sweep, measure.rs, and
//! the other collectives' sweep, coll.rs).

use super::BenchArgs;
use std::time::Instant;
use tpcomm::{Algo, HostCommunicator, ReduceOp};

/// Times `call` (its `args.warmup` untimed calls first, then the timed ones
/// for a message of `bytes`) and agrees with the other ranks: `None` when
/// some rank's rows are no longer read (`unread`: every rank then stops at
/// this same size), else the slowest rank's median time in microseconds and
/// `wrong` summed over the ranks.
pub(super) fn time_and_agree(
    c: &mut HostCommunicator,
    args: &BenchArgs,
    bytes: u64,
    unread: bool,
    wrong: u64,
    mut call: impl FnMut(&mut HostCommunicator, usize) -> tpcomm::Result<()>,
) -> tpcomm::Result<Option<(f64, u64)>> {
    for i in 0..args.warmup {
        call(c, i)?;
    }
    let iters = args.iters_for(bytes);
    let mut times = Vec::with_capacity(iters);
    for i in 0..iters {
        let t0 = Instant::now();
        call(c, i)?;
        times.push(t0.elapsed().as_secs_f64() * 1e6);
    }
    times.sort_by(|a, b| a.total_cmp(b));
    let median = times[times.len() / 2];
    // Slowest rank's median, and the wrong count summed over ranks (split in
    // two f32-exact halves). With the slowest median, rank 0 says whether
    // anyone still reads the rows (max: any rank's 1 stops every rank).
    let mut stats = [
        median as f32,
        f32::from(u8::from(unread)),
        (wrong >> 20) as f32,
        (wrong & 0xfffff) as f32,
    ];
    c.all_reduce_in_place(&mut stats[..2], ReduceOp::Max, Algo::OneShot)?;
    c.all_reduce_in_place(&mut stats[2..], ReduceOp::Sum, Algo::OneShot)?;
    if stats[1] > 0.0 {
        return Ok(None);
    }
    Ok(Some((
        stats[0] as f64,
        ((stats[2] as u64) << 20) + stats[3] as u64,
    )))
}
