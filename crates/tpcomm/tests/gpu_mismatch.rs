//! GPU tests of all-reduces whose ranks disagree (mismatched calls), ranks as threads sharing GPUs round-robin, at every world size of
//! TPCOMM_TEST_WORLDS. One rank (rank 0, then the last rank) asks for a
//! different element count, element type or algorithm than the others, or
//! does not call at all; every communicator has a 300 ms timeout.
//!
//! What every rank must see, asserted per rank: its call ends (the stream
//! synchronizes) within the timeout plus a margin, and then either its
//! output is the exact sum of what it asked for (its count of elements, in
//! its type, from every rank's input) or `check()` reports a timeout or a
//! mismatch naming another rank. Never a wrong output with a clean status.
//!
//! Inputs are small non-zero integers (-8..=8), exact in f32, f16 and bf16,
//! so "the sum it asked for" is one integer per element whatever the type,
//! and every rank's input is filled beyond its own count (up to the largest
//! count of the case), so a rank that reads a peer past that peer's count
//! reads real data. Each case prints what every rank saw.
//!
//! Every case runs on both GPU transports (P2P and pinned host memory).
//!
//! Each call carries a word saying what it is (kernels/common.cuh, "call
//! words": bytes, algorithm or collective, element type), sent to every peer
//! when the call starts and compared before the call counts as done. Before
//! it, a receiver only waited until the vectors it expected were no longer
//! the sentinel, and these cases got sums with a clean status (measured on
//! an H200, bench/results/2026-12-02-h200x1-call-words/): counts that differ
//! inside the last 16-byte vector, two-shot calls whose counts differ, f16
//! against bf16, a shorter type against a longer one. Now such a call ends
//! in `Error::Mismatch` naming the peer, or a timeout where the odd call
//! leaves a wait unanswered first.

use std::sync::mpsc;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};
use tpcomm::cuda::PinnedTransport;
use tpcomm::cuda::{Call, CudaConfig, P2pTransport, Rendezvous, ThreadGroup};
use tpcomm::verify::Rng;
use tpcomm::{Algo, ByteSize, DType, Error};

mod gpu_common;
use gpu_common::{describe, device_of, Rank, TestComm};

const TIMEOUT: Duration = Duration::from_millis(300);
/// How long after the timeout a rank's call may still take to end (a
/// shared GPU runs every rank's kernel; give-up is polled every 32 rounds).
const MARGIN: Duration = Duration::from_secs(2);
/// The whole case, every rank included, or the test fails as hung.
const CASE_LIMIT: Duration = Duration::from_secs(30);
const MAX: ByteSize = ByteSize::mib(1);

fn gpu_worlds() -> Option<Vec<usize>> {
    gpu_common::gpu_worlds("a GPU; ranks share GPUs round-robin")
}

/// The transport a case runs over: every case runs on both.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Via {
    P2p,
    Host,
}

const VIAS: [Via; 2] = [Via::P2p, Via::Host];

/// A GPU communicator as the cases create it.
trait Comm: TestComm + 'static {
    fn create(cfg: &CudaConfig, group: &Arc<ThreadGroup>) -> Self;
}

impl Comm for P2pTransport {
    fn create(cfg: &CudaConfig, group: &Arc<ThreadGroup>) -> Self {
        P2pTransport::new(cfg, &Rendezvous::Threads(group.clone())).expect("create communicator")
    }
}

impl Comm for PinnedTransport {
    fn create(cfg: &CudaConfig, group: &Arc<ThreadGroup>) -> Self {
        PinnedTransport::new(cfg, &Rendezvous::Threads(group.clone()))
            .expect("create host-path communicator")
    }
}

/// What one rank asks for; `None`: it does not call.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Ask {
    dtype: DType,
    count: usize,
    algo: Algo,
}

/// What a rank saw.
#[derive(Debug)]
enum Seen {
    /// Did not call (the absent rank).
    Absent,
    /// The call was refused at once (before any kernel ran).
    Refused(Error),
    /// The call ran; `check()` after the stream synchronized.
    Ran {
        took: Duration,
        status: Result<(), Error>,
        /// Elements of the output that differ from the exact sum asked for.
        wrong: usize,
        first_wrong: Option<(usize, f64, f64)>,
    },
}

fn encode(dtype: DType, v: f32, out: &mut Vec<u8>) {
    match dtype {
        DType::F32 => out.extend_from_slice(&v.to_le_bytes()),
        DType::F16 => out.extend_from_slice(&half::f16::from_f32(v).to_bits().to_le_bytes()),
        DType::Bf16 => out.extend_from_slice(&half::bf16::from_f32(v).to_bits().to_le_bytes()),
    }
}

fn decode(dtype: DType, bytes: &[u8], i: usize) -> f64 {
    let s = dtype.size();
    let b = &bytes[i * s..(i + 1) * s];
    match dtype {
        DType::F32 => f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64,
        DType::F16 => half::f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f64(),
        DType::Bf16 => half::bf16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f64(),
    }
}

/// Loads the kernels once (compiling them if the cache lacks them) in a
/// group with a long timeout, so no 300 ms set-up waits on NVRTC.
fn warm_up() {
    static DONE: std::sync::Once = std::sync::Once::new();
    DONE.call_once(|| {
        let group = ThreadGroup::new(2);
        drop(gpu_common::make_ranks(2, 256, move |r| {
            let mut cfg = CudaConfig::new(r, 2, device_of(r));
            cfg.max_bytes = MAX;
            P2pTransport::create(&cfg, &group)
        }));
        let group = ThreadGroup::new(2);
        drop(gpu_common::make_ranks(2, 256, move |r| {
            let mut cfg = CudaConfig::new(r, 2, device_of(r));
            cfg.max_bytes = MAX;
            PinnedTransport::create(&cfg, &group)
        }));
    });
}

/// Runs one call per rank (`asks[r]`, `None`: rank r does not call) on a
/// fresh group and returns what each rank saw, or an error when some rank
/// had not ended within CASE_LIMIT (then its thread is left behind).
fn run_case(world: usize, asks: &[Option<Ask>], seed: u64, via: Via) -> Result<Vec<Seen>, String> {
    warm_up();
    match via {
        Via::P2p => run_case_on::<P2pTransport>(world, asks, seed),
        Via::Host => run_case_on::<PinnedTransport>(world, asks, seed),
    }
}

fn run_case_on<C: Comm>(
    world: usize,
    asks: &[Option<Ask>],
    seed: u64,
) -> Result<Vec<Seen>, String> {
    let group = ThreadGroup::new(world);
    let ranks = gpu_common::make_ranks(world, MAX.bytes() as usize, move |r| {
        let mut cfg = CudaConfig::new(r, world, device_of(r));
        cfg.max_bytes = MAX;
        cfg.timeout = TIMEOUT;
        // On whatever the placement (unset, it is on only when ranks share
        // a GPU).
        cfg.check_calls = Some(true);
        C::create(&cfg, &group)
    });
    // values[r][i]: rank r's input as integers, as many as the largest count.
    let longest = asks.iter().flatten().map(|a| a.count).max().unwrap_or(0);
    let mut rng = Rng::new(seed);
    let values: Arc<Vec<Vec<f32>>> = Arc::new(
        (0..world)
            .map(|_| {
                (0..longest)
                    .map(|_| {
                        let m = 1.0 + rng.below(8) as f32;
                        if rng.below(2) == 0 {
                            m
                        } else {
                            -m
                        }
                    })
                    .collect()
            })
            .collect(),
    );
    let gate = Arc::new(Barrier::new(world));
    let (tx, rx) = mpsc::channel();
    for (r, rank) in ranks.into_iter().enumerate() {
        let (ask, values, gate, tx) = (asks[r], values.clone(), gate.clone(), tx.clone());
        std::thread::spawn(move || {
            let mut rank = rank;
            let seen = one_rank(r, &mut rank, ask, &values, &gate);
            // The rank (its communicator) goes back to the caller, dropped
            // only once every rank's stream is idle.
            let _ = tx.send((r, seen, rank));
        });
    }
    drop(tx);
    let deadline = Instant::now() + CASE_LIMIT;
    let mut seen: Vec<Option<Seen>> = (0..world).map(|_| None).collect();
    let mut keep = Vec::new();
    for _ in 0..world {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok((r, s, rank)) => {
                seen[r] = Some(s);
                keep.push(rank);
            }
            Err(_) => {
                let hung: Vec<usize> = (0..world).filter(|&r| seen[r].is_none()).collect();
                // The ranks still running hold peers' memory: leak every rank.
                std::mem::forget(keep);
                return Err(format!(
                    "ranks {hung:?} had not ended {CASE_LIMIT:?} after the case started (hang)"
                ));
            }
        }
    }
    drop(keep);
    Ok(seen
        .into_iter()
        .map(|s| s.expect("every rank sent"))
        .collect())
}

fn one_rank<C: Comm>(
    r: usize,
    rank: &mut Rank<C>,
    ask: Option<Ask>,
    values: &[Vec<f32>],
    gate: &Barrier,
) -> Seen {
    rank.ctx.bind_to_thread().unwrap();
    let Some(ask) = ask else {
        gate.wait();
        return Seen::Absent;
    };
    let n = values[r].len() * ask.dtype.size();
    let mut bytes = Vec::with_capacity(n);
    for &v in &values[r] {
        encode(ask.dtype, v, &mut bytes);
    }
    // Pinned host memory for every copy (docs/shared-gpu.md, two rules: a
    // pageable copy can hold this thread while a peer's kernel waits).
    // SAFETY (test): filled right away, read only after.
    let mut input = unsafe { rank.ctx.alloc_pinned_with_flags::<u8>(n, 0) }.unwrap();
    input.as_mut_slice().unwrap().copy_from_slice(&bytes);
    // SAFETY (test): as above.
    let mut poison = unsafe { rank.ctx.alloc_pinned_with_flags::<u8>(n, 0) }.unwrap();
    poison.as_mut_slice().unwrap().fill(0xa5);
    // SAFETY (test): written by the copy below before it is read.
    let mut out = unsafe { rank.ctx.alloc_pinned_with_flags::<u8>(n, 0) }.unwrap();
    rank.stream
        .memcpy_htod(&input, &mut rank.a.slice_mut(..n))
        .unwrap();
    rank.stream
        .memcpy_htod(&poison, &mut rank.b.slice_mut(..n))
        .unwrap();
    rank.stream.synchronize().unwrap();
    let (pa, pb) = (rank.ptr(&rank.a), rank.ptr(&rank.b));
    gate.wait();
    let t0 = Instant::now();
    // SAFETY: both ranges lie inside this rank's arenas (n <= MAX bytes),
    // which outlive the synchronization below.
    let launched = unsafe {
        rank.comm.all_reduce_call(
            &Call::new(pa, pb, ask.count, ask.dtype, rank.stream.cu_stream()).with_algo(ask.algo),
        )
    };
    if let Err(e) = launched {
        return Seen::Refused(e);
    }
    rank.stream.synchronize().unwrap();
    let took = t0.elapsed();
    let status = rank.comm.status();
    rank.stream
        .memcpy_dtoh(&rank.b.slice(..n), &mut out)
        .unwrap();
    rank.stream.synchronize().unwrap();
    let got = out.as_slice().unwrap();
    let mut wrong = 0;
    let mut first_wrong = None;
    for i in 0..ask.count {
        let want: f64 = values.iter().map(|v| v[i] as f64).sum();
        let have = decode(ask.dtype, got, i);
        if have != want {
            wrong += 1;
            first_wrong.get_or_insert((i, want, have));
        }
    }
    Seen::Ran {
        took,
        status,
        wrong,
        first_wrong,
    }
}

/// Checks what each rank saw against the rule in the file's doc; returns
/// the violations, one line each.
fn judge(what: &str, world: usize, asks: &[Option<Ask>], seen: &[Seen]) -> Vec<String> {
    let mut bad = Vec::new();
    for (r, s) in seen.iter().enumerate() {
        eprintln!("  {what}: rank {r} asked {:?}: {s:?}", asks[r]);
        let mut fail = |why: String| bad.push(format!("{what}: rank {r}: {why}"));
        match s {
            Seen::Absent => {}
            Seen::Refused(e) => fail(format!("call refused at once ({e}); a mismatch cannot be known before the kernels run, so this is unexpected")),
            Seen::Ran {
                took,
                status,
                wrong,
                first_wrong,
            } => {
                if *took > TIMEOUT + MARGIN {
                    fail(format!("the call took {took:?}, over {TIMEOUT:?} + {MARGIN:?}"));
                }
                match status {
                    Ok(()) if *wrong > 0 => fail(format!(
                        "SILENTLY WRONG: check() is clean but {wrong} of {} elements differ from the sum it asked for (first: element {:?}, want/have)",
                        asks[r].map_or(0, |a| a.count),
                        first_wrong
                    )),
                    Ok(()) => {}
                    Err(Error::PeerTimeout { rank, peer, .. }) => {
                        if *rank != r || *peer == r || *peer >= world {
                            fail(format!("the timeout names rank {rank} and peer {peer}"));
                        }
                    }
                    // The calls' words disagreed (kernels/common.cuh).
                    Err(Error::Mismatch { rank, peer, .. }) => {
                        if *rank != r || *peer == r || *peer >= world {
                            fail(format!("the mismatch names rank {rank} and peer {peer}"));
                        }
                    }
                    Err(e) => fail(format!(
                        "check() gave {e}, not a timeout or a mismatch naming a peer"
                    )),
                }
            }
        }
    }
    bad
}

/// "one-shot bf16 x 4096": what an ask is, for the lines printed.
fn label(a: Option<Ask>) -> String {
    match a {
        Some(a) => format!("{:?} {} x {}", a.algo, a.dtype, a.count),
        None => "no call".into(),
    }
}

/// Every world: for each case `(base, odd)` and each place of the odd rank
/// (0 and the last), the other ranks ask `base` and the odd one `odd`.
/// Asserts, after running every case, that no rank broke the rule.
fn assert_cases(test: &str, cases: &[(Option<Ask>, Option<Ask>)]) {
    let Some(worlds) = gpu_worlds() else { return };
    let mut bad = Vec::new();
    let mut ran = 0;
    for world in worlds {
        for via in VIAS {
            for (k, &(base, odd)) in cases.iter().enumerate() {
                for odd_rank in [0, world - 1] {
                    let mut asks = vec![base; world];
                    asks[odd_rank] = odd;
                    let what = format!(
                        "{via:?}: {} against {} on rank {odd_rank}, {}",
                        label(base),
                        label(odd),
                        describe(world)
                    );
                    eprintln!("{test}: {what}");
                    match run_case(world, &asks, 1 + k as u64, via) {
                        Ok(seen) => bad.extend(judge(&what, world, &asks, &seen)),
                        // Threads are left spinning on the GPU: stop here.
                        Err(hang) => panic!("{test}: {what}: {hang}\n{}", bad.join("\n")),
                    }
                    ran += 1;
                }
            }
        }
    }
    eprintln!("{test}: {ran} cases, {} violations", bad.len());
    assert!(bad.is_empty(), "{test}:\n{}", bad.join("\n"));
}

fn ask(dtype: DType, count: usize, algo: Algo) -> Option<Ask> {
    Some(Ask { dtype, count, algo })
}

/// Counts that differ by whole 16-byte vectors, fewer and more, one-shot
/// and two-shot. One-shot: the ranks with the larger count wait for vectors
/// the shorter call never sends (timeout naming it); the shorter call gets
/// every vector it needs and is right for its count. Two-shot: the shard
/// length depends on the count, so a shard pushed by the odd rank starts at
/// a different element than its owner reads it as; where the lengths still
/// cover every wait (e.g. the odd rank's count is larger), a rank sums
/// misaligned elements and reported success before the call words.
#[test]
#[ignore = "needs a GPU: TPCOMM_GPU_TESTS=1 [TPCOMM_TEST_WORLDS=2,4,8] cargo test -- --ignored"]
fn gpu_mismatched_counts_end_in_time_and_are_right_or_name_a_rank() {
    let mut cases = Vec::new();
    for algo in [Algo::OneShot, Algo::TwoShot] {
        cases.push((ask(DType::Bf16, 4096, algo), ask(DType::Bf16, 2048, algo)));
        cases.push((ask(DType::Bf16, 4096, algo), ask(DType::Bf16, 8192, algo)));
    }
    assert_cases("mismatched counts", &cases);
}

/// Counts that differ inside the last 16-byte vector (bf16: 4096 against
/// 4091, the same 512 vectors): the shorter call sends its last vector
/// zero-padded, every vector arrives, and the ranks that asked for 4096
/// got sums missing the odd rank's last 5 elements with a clean status
/// before the call words (for both algorithms); now a mismatch.
#[test]
#[ignore = "needs a GPU: TPCOMM_GPU_TESTS=1 [TPCOMM_TEST_WORLDS=2,4,8] cargo test -- --ignored"]
fn gpu_counts_that_differ_inside_one_vector_are_right_or_name_a_rank() {
    assert_cases(
        "counts inside one vector",
        &[
            (
                ask(DType::Bf16, 4096, Algo::OneShot),
                ask(DType::Bf16, 4091, Algo::OneShot),
            ),
            (
                ask(DType::Bf16, 4096, Algo::TwoShot),
                ask(DType::Bf16, 4091, Algo::TwoShot),
            ),
        ],
    );
}

/// One rank with another element type, same count. f16 against bf16: the
/// same bytes and vectors, every vector arrives, each rank reads the
/// other's bits as its own type: every rank reported success with wrong
/// sums before the call words. f32 against bf16: the f32 rank sends
/// twice the vectors; the bf16 ranks' one-shot reads the first half as
/// pairs of bf16 (success, wrong), the f32 rank waits for vectors never
/// sent (timeout).
#[test]
#[ignore = "needs a GPU: TPCOMM_GPU_TESTS=1 [TPCOMM_TEST_WORLDS=2,4,8] cargo test -- --ignored"]
fn gpu_mismatched_types_end_in_time_and_are_right_or_name_a_rank() {
    let mut cases = Vec::new();
    for algo in [Algo::OneShot, Algo::TwoShot] {
        cases.push((ask(DType::Bf16, 4096, algo), ask(DType::F16, 4096, algo)));
        cases.push((ask(DType::Bf16, 4096, algo), ask(DType::F32, 4096, algo)));
    }
    assert_cases("mismatched types", &cases);
}

/// One rank one-shot, the others two-shot (and the reverse), same type and
/// count. The two algorithms use different slots of the same buffers: the
/// two-shot ranks wait for all-gather (or reduce-scatter) slots the
/// one-shot rank never writes, and the one-shot rank for a peer slot no
/// two-shot rank writes at this size (4096 bf16 elements in 1 MiB
/// buffers), so every rank should time out naming a peer.
#[test]
#[ignore = "needs a GPU: TPCOMM_GPU_TESTS=1 [TPCOMM_TEST_WORLDS=2,4,8] cargo test -- --ignored"]
fn gpu_mismatched_algorithms_end_in_time_and_are_right_or_name_a_rank() {
    assert_cases(
        "mismatched algorithms",
        &[
            (
                ask(DType::Bf16, 4096, Algo::TwoShot),
                ask(DType::Bf16, 4096, Algo::OneShot),
            ),
            (
                ask(DType::Bf16, 4096, Algo::OneShot),
                ask(DType::Bf16, 4096, Algo::TwoShot),
            ),
        ],
    );
}

/// One rank does not call (rank 0, then the last): every other rank times
/// out within the timeout + margin naming a rank, at every world size
/// (gpu_allreduce.rs has the 2-rank case with rank 1 absent).
#[test]
#[ignore = "needs a GPU: TPCOMM_GPU_TESTS=1 [TPCOMM_TEST_WORLDS=2,4,8] cargo test -- --ignored"]
fn gpu_rank_that_never_calls_gives_every_other_rank_a_timeout() {
    let Some(worlds) = gpu_worlds() else { return };
    let mut bad = Vec::new();
    for world in worlds {
        for (via, algo) in VIAS
            .into_iter()
            .flat_map(|v| [(v, Algo::OneShot), (v, Algo::TwoShot)])
        {
            for absent in [0, world - 1] {
                let mut asks = vec![ask(DType::Bf16, 4096, algo); world];
                asks[absent] = None;
                let what = format!(
                    "{via:?} {algo:?}, rank {absent} absent, {}",
                    describe(world)
                );
                eprintln!("absent rank: {what}");
                let seen = run_case(world, &asks, 5, via).unwrap_or_else(|e| panic!("{what}: {e}"));
                bad.extend(judge(&what, world, &asks, &seen));
                for (r, s) in seen.iter().enumerate() {
                    if r == absent {
                        continue;
                    }
                    // With a rank missing no call can complete: each must
                    // have timed out (judge checked the naming).
                    // Every wait that cannot end waits on the absent rank
                    // (no other rank's data depends on it in one-shot; in
                    // two-shot no rank reaches its all-gather waits), so the
                    // timeout names it.
                    if !matches!(
                        s,
                        Seen::Ran {
                            status: Err(Error::PeerTimeout { peer, .. }),
                            ..
                        } if *peer == absent
                    ) {
                        bad.push(format!(
                            "{what}: rank {r} did not time out naming rank {absent}: {s:?}"
                        ));
                    }
                }
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}
