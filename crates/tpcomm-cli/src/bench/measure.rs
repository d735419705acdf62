//! One rank's side of `tpcomm bench`: create the communicator, then for
//! every size and algorithm check one call against the float64 reference and
//! time the rest.

use super::{BenchArgs, WORKER_ENV};
use half::{bf16, f16};
use std::io::Write;
use std::time::Instant;
use tpcomm::report::{BenchRow, RowLabels};
use tpcomm::verify::{random_input, Reference};
use tpcomm::{Algo, ByteSize, DType, Element, HostCommunicator, HostConfig, JobKey, ReduceOp};

pub(super) fn worker_process(args: &BenchArgs, spec: &str) -> Result<(), String> {
    let mut f = spec.splitn(3, ' ');
    let (Some(rank), Some(nonce), Some(path)) = (f.next(), f.next(), f.next()) else {
        return Err(format!("bad {WORKER_ENV}={spec:?}"));
    };
    let rank: usize = rank
        .parse()
        .map_err(|_| format!("bad rank in {WORKER_ENV}"))?;
    let nonce: u64 = nonce
        .parse()
        .map_err(|_| format!("bad nonce in {WORKER_ENV}"))?;
    let stdout = std::io::stdout();
    // The key comes from TPCOMM_JOB_KEY, which the parent set.
    let r = worker(
        args,
        rank,
        std::path::Path::new(path),
        nonce,
        None,
        &mut |row| {
            let mut o = stdout.lock();
            writeln!(o, "{}", serde_json::to_string(&row).unwrap_or_default())
                .and_then(|()| o.flush())
                .is_ok()
        },
    );
    r.map_err(|e| format!("rank {rank}: {e}"))
}

/// One rank's whole benchmark; rank 0 hands each row to `emit`.
pub(super) fn worker(
    args: &BenchArgs,
    rank: usize,
    rendezvous: &std::path::Path,
    nonce: u64,
    key: Option<JobKey>,
    emit: &mut dyn FnMut(BenchRow) -> bool,
) -> Result<(), String> {
    let mut cfg = HostConfig::new(rank, args.ranks, rendezvous);
    cfg.job_key = key;
    cfg.max_message = args.max_message;
    cfg.timeout = args.timeout;
    cfg.piece = args.piece;
    let mut c = HostCommunicator::new(cfg).map_err(|e| e.to_string())?;
    if args.coll != super::coll::Coll::AllReduce {
        return match args.dtype {
            DType::F32 => super::coll::sweep::<f32>(args, &mut c, nonce, emit),
            DType::F16 => super::coll::sweep::<f16>(args, &mut c, nonce, emit),
            DType::Bf16 => super::coll::sweep::<bf16>(args, &mut c, nonce, emit),
        }
        .map_err(|e| e.to_string());
    }
    match args.dtype {
        DType::F32 => sweep::<f32>(args, &mut c, nonce, emit),
        DType::F16 => sweep::<f16>(args, &mut c, nonce, emit),
        DType::Bf16 => sweep::<bf16>(args, &mut c, nonce, emit),
    }
    .map_err(|e| e.to_string())
}

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

fn sweep<T: Element>(
    args: &BenchArgs,
    c: &mut HostCommunicator,
    nonce: u64,
    emit: &mut dyn FnMut(BenchRow) -> bool,
) -> tpcomm::Result<()> {
    let (rank, world) = (c.rank(), c.world());
    let esize = T::DTYPE.size() as u64;
    // Set once `emit` finds nobody reading (a closed stdout): every rank then stops.
    let mut unread = false;
    for (si, &bytes) in args.sizes().iter().enumerate() {
        let count = (bytes / esize).max(1) as usize;
        for (ai, &algo) in args.algos().iter().enumerate() {
            // Correctness: fresh random data for this size and algorithm.
            let seed = |r: usize| nonce ^ ((si as u64) << 40) ^ ((ai as u64) << 32) ^ r as u64;
            let inputs: Vec<Vec<T>> = (0..world).map(|r| random_input(seed(r), count)).collect();
            let mut out = vec![T::from_f32(0.0); count];
            c.all_reduce(&inputs[rank], &mut out, args.op, algo)?;
            let refs: Vec<&[T]> = inputs.iter().map(|v| v.as_slice()).collect();
            let wrong = Reference::new(&refs, args.op).count_wrong(&out, world) as u64;
            // Timing: rotate several inputs (at most ~256 MiB of them) so
            // caches do not flatter; reuse this rank's checked input as one.
            let rot = ((256u64 << 20) / bytes.max(1)).clamp(2, 4) as usize;
            let mut bufs: Vec<Vec<T>> = vec![inputs.into_iter().nth(rank).unwrap_or_default()];
            for k in 1..rot {
                bufs.push(random_input(seed(rank) ^ (k as u64) << 48, count));
            }
            let call = |c: &mut HostCommunicator, i: usize| {
                c.all_reduce(&bufs[i % rot], &mut out, args.op, algo)
            };
            let Some((median, wrong_all)) = time_and_agree(c, args, bytes, unread, wrong, call)?
            else {
                return Ok(());
            };
            if rank == 0 {
                let name = match algo {
                    Algo::Auto => format!(
                        "auto:{}",
                        HostCommunicator::auto_algo(world, ByteSize::b(count as u64 * esize))
                    ),
                    a => a.name().to_string(),
                };
                unread = !emit(BenchRow::new(
                    count as u64 * esize,
                    count as u64,
                    T::DTYPE,
                    RowLabels {
                        op: args.op.name(),
                        algo: &name,
                        mode: "eager",
                    },
                    median,
                    world,
                    wrong_all,
                ));
            }
        }
    }
    Ok(())
}
