//! The CPU side of the check: every rank's inputs, and the float64
//! comparison, spread over this rank's share of the cores.

use tpcomm::verify::{count_wrong_against, random_bytes, Rng};
use tpcomm::DType;

/// Threads each rank may use for CPU-side work (making inputs, the float64
/// check): the machine's cores shared by the `world` ranks, which all do it at
/// once.
pub(super) fn cpu_workers(world: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    (cores / world.max(1)).max(1)
}

/// `inputs[k][p]`: rank `p`'s input of rotation buffer `k`, `count` random
/// elements seeded by (k, p) alone, so every rank and every worker count makes
/// the same bytes. Buffers are made by up to `workers` threads at once.
pub(crate) fn random_inputs(
    dtype: DType,
    count: usize,
    rot: usize,
    world: usize,
    workers: usize,
) -> Vec<Vec<Vec<u8>>> {
    let one =
        |k: usize, p: usize| random_bytes(dtype, count, &mut Rng::new(1 + (k * 64 + p) as u64));
    let jobs: Vec<(usize, usize)> = (0..rot)
        .flat_map(|k| (0..world).map(move |p| (k, p)))
        .collect();
    let mut flat: Vec<Vec<u8>> = Vec::with_capacity(jobs.len());
    for batch in jobs.chunks(workers.max(1)) {
        let made: Vec<Vec<u8>> = std::thread::scope(|s| {
            let hs: Vec<_> = batch
                .iter()
                .map(|&(k, p)| (k, p, s.spawn(move || one(k, p))))
                .collect();
            // A worker that panicked (allocation failure) is retried here, so
            // the inputs are complete or this thread fails the same way.
            hs.into_iter()
                .map(|(k, p, h)| h.join().unwrap_or_else(|_| one(k, p)))
                .collect()
        });
        flat.extend(made);
    }
    let mut it = flat.into_iter();
    (0..rot)
        .map(|_| it.by_ref().take(world).collect())
        .collect()
}

/// [`count_wrong_against`] over `workers` threads, each taking a contiguous
/// range of elements. The check of an element reads only that element of the
/// output and of each input, so the count equals the one-thread count; this
/// only divides the float64 work (at 64 MiB, 32 M elements per buffer, the
/// bulk of a large point's time) by the cores this rank may use.
pub(crate) fn count_wrong_par(
    dtype: DType,
    out: &[u8],
    inputs: &[&[u8]],
    world: usize,
    workers: usize,
) -> usize {
    let size = dtype.size();
    let n = out.len() / size;
    // Under 64 Ki elements per thread, starting threads costs more than it saves.
    let workers = workers.min(n / (64 << 10)).max(1);
    if workers == 1 {
        return count_wrong_against(dtype, out, inputs, world);
    }
    let per = n.div_ceil(workers);
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..workers)
            .map(|w| {
                let (a, b) = ((w * per).min(n), ((w + 1) * per).min(n));
                let o = &out[a * size..b * size];
                let ins: Vec<&[u8]> = inputs.iter().map(|i| &i[a * size..b * size]).collect();
                (
                    b - a,
                    s.spawn(move || count_wrong_against(dtype, o, &ins, world)),
                )
            })
            .collect();
        // A worker that panicked checked nothing: count its range as wrong.
        hs.into_iter().map(|(len, h)| h.join().unwrap_or(len)).sum()
    })
}
