//! GPU test of the fused all-reduce + residual add + RMSNorm: it must equal
//! the unfused sequence (one-shot all-reduce, then add + RMSNorm) and a
//! float64 reference. One thread per GPU; needs 2+ GPUs with peer access and
//! runs only with TPCOMM_GPU_TESTS=1 (else it prints that it was skipped).
//!
//! Tolerances: fused vs unfused, every element within one rounding of the
//! element type (`DType::tolerance`, relative: bf16 2^-7); in practice both
//! kernels run the same arithmetic in the same order and the test also
//! reports how many elements are bit-identical. Against the float64
//! reference, 4 roundings relative to the row's RMS-normalised scale.

use std::sync::Arc;
use std::time::{Duration, Instant};
use tpcomm::cuda::cudarc::driver::{CudaSlice, CudaStream, DevicePtr};
use tpcomm::cuda::fused::{add_rmsnorm, NormCall};
use tpcomm::cuda::Launch;
use tpcomm::cuda::StreamAllReduce;
use tpcomm::cuda::{Call, CudaConfig, P2pTransport, Rendezvous, ThreadGroup};
use tpcomm::verify::{element, random_bytes, Rng};
use tpcomm::{Algo, ByteSize, DType, Error};

const EPS: f32 = 1e-6;

mod gpu_common;
use gpu_common::{describe, device_of};

fn gpu_worlds() -> Option<Vec<usize>> {
    gpu_common::gpu_worlds("a GPU; ranks share GPUs round-robin")
}

struct Case {
    dtype: DType,
    rows: usize,
    hidden: usize,
}

/// Row counts cover one block per row and more rows than SMs (blocks loop).
fn cases() -> Vec<Case> {
    let c = |dtype, rows, hidden| Case {
        dtype,
        rows,
        hidden,
    };
    vec![
        c(DType::Bf16, 1, 7168),
        c(DType::Bf16, 16, 7168),
        c(DType::Bf16, 200, 4104),
        c(DType::F16, 5, 2048),
        c(DType::F32, 3, 5000),
    ]
}

/// Host images of one case: every rank's partial sums, the shared residual
/// and weight.
struct Inputs {
    partials: Vec<Vec<u8>>,
    residual: Vec<u8>,
    weight: Vec<u8>,
}

fn inputs(c: &Case, world: usize, seed: u64) -> Inputs {
    let n = c.rows * c.hidden;
    Inputs {
        partials: (0..world)
            .map(|r| random_bytes(c.dtype, n, &mut Rng::new(seed + r as u64)))
            .collect(),
        residual: random_bytes(c.dtype, n, &mut Rng::new(seed + 100)),
        weight: random_bytes(c.dtype, c.hidden, &mut Rng::new(seed + 200)),
    }
}

/// (residual, normed) in float64.
fn reference(c: &Case, inp: &Inputs) -> (Vec<f64>, Vec<f64>) {
    let n = c.rows * c.hidden;
    let mut res = vec![0.0; n];
    let mut out = vec![0.0; n];
    for row in 0..c.rows {
        let mut ss = 0.0;
        for j in 0..c.hidden {
            let i = row * c.hidden + j;
            let sum: f64 = inp.partials.iter().map(|p| element(c.dtype, p, i)).sum();
            res[i] = sum + element(c.dtype, &inp.residual, i);
            ss += res[i] * res[i];
        }
        let scale = 1.0 / (ss / c.hidden as f64 + EPS as f64).sqrt();
        for j in 0..c.hidden {
            let i = row * c.hidden + j;
            out[i] = res[i] * scale * element(c.dtype, &inp.weight, j);
        }
    }
    (res, out)
}

/// Device buffers of one rank for one case.
struct Bufs {
    partial: CudaSlice<u8>,
    reduced: CudaSlice<u8>,
    res_u: CudaSlice<u8>,
    res_f: CudaSlice<u8>,
    norm_u: CudaSlice<u8>,
    norm_f: CudaSlice<u8>,
    res_o: CudaSlice<u8>,
    norm_o: CudaSlice<u8>,
    weight: CudaSlice<u8>,
}

/// Runs the unfused sequence and the fused kernel (ordinary and overlapped
/// launch) on one rank; returns (unfused residual, unfused normed, fused
/// residual, fused normed, overlapped residual, overlapped normed).
fn run_rank(
    comm: &P2pTransport,
    stream: &Arc<CudaStream>,
    c: &Case,
    inp: &Inputs,
    rank: usize,
) -> [Vec<u8>; 6] {
    let up = |v: &[u8]| stream.clone_htod(v).unwrap();
    let bytes = c.rows * c.hidden * c.dtype.size();
    let b = Bufs {
        partial: up(&inp.partials[rank]),
        reduced: stream.alloc_zeros::<u8>(bytes).unwrap(),
        res_u: up(&inp.residual),
        res_f: up(&inp.residual),
        norm_u: stream.alloc_zeros::<u8>(bytes).unwrap(),
        norm_f: stream.alloc_zeros::<u8>(bytes).unwrap(),
        res_o: up(&inp.residual),
        norm_o: stream.alloc_zeros::<u8>(bytes).unwrap(),
        weight: up(&inp.weight),
    };
    let p = |s: &CudaSlice<u8>| s.device_ptr(stream).0;
    let cs = stream.cu_stream();
    let norm = |residual, normed, launch| NormCall {
        residual,
        weight: p(&b.weight),
        normed,
        rows: c.rows,
        hidden: c.hidden,
        dtype: c.dtype,
        eps: EPS,
        stream: cs,
        launch,
    };
    // SAFETY (test): every pointer is a live allocation of this rank's device
    // of the size the call reads or writes; the stream is synchronized below,
    // before the slices drop.
    unsafe {
        comm.all_reduce_call(
            &Call::new(p(&b.partial), p(&b.reduced), c.rows * c.hidden, c.dtype, cs)
                .with_algo(Algo::OneShot),
        )
        .unwrap();
        let unfused = norm(p(&b.res_u), p(&b.norm_u), Launch::Ordinary);
        add_rmsnorm(comm.context(), Some(p(&b.reduced)), &unfused).unwrap();
        let fused = norm(p(&b.res_f), p(&b.norm_f), Launch::Ordinary);
        comm.all_reduce_residual_rmsnorm(p(&b.partial), &fused)
            .unwrap();
        // The same call launched to overlap the previous kernel must give the
        // same result (on sm_90+; an ordinary launch elsewhere).
        let overlapped = norm(p(&b.res_o), p(&b.norm_o), Launch::Overlapped);
        comm.all_reduce_residual_rmsnorm(p(&b.partial), &overlapped)
            .unwrap();
    }
    stream.synchronize().unwrap();
    comm.check().unwrap();
    let down = |s: &CudaSlice<u8>| stream.clone_dtoh(s).unwrap();
    [
        down(&b.res_u),
        down(&b.norm_u),
        down(&b.res_f),
        down(&b.norm_f),
        down(&b.res_o),
        down(&b.norm_o),
    ]
}

#[test]
#[ignore = "needs a GPU: TPCOMM_GPU_TESTS=1 [TPCOMM_TEST_WORLDS=2,4,8] cargo test -- --ignored"]
fn fused_all_reduce_residual_rmsnorm_equals_the_unfused_sequence() {
    let Some(worlds) = gpu_worlds() else { return };
    for world in worlds {
        let all_cases = cases();
        let max = all_cases
            .iter()
            .map(|c| c.rows * c.hidden * c.dtype.size())
            .max()
            .unwrap();
        let all: Vec<Inputs> = all_cases
            .iter()
            .enumerate()
            .map(|(k, c)| inputs(c, world, 1 + 1000 * k as u64))
            .collect();
        let all = Arc::new(all);
        let group = ThreadGroup::new(world);
        let handles: Vec<_> = (0..world)
            .map(|r| {
                let (rv, all) = (Rendezvous::Threads(group.clone()), all.clone());
                std::thread::spawn(move || {
                    let mut cfg = CudaConfig::new(r, world, device_of(r));
                    cfg.max_bytes = ByteSize::from_usize(max);
                    let comm = P2pTransport::new(&cfg, &rv).expect("create communicator");
                    let ctx = comm.context().clone();
                    // SAFETY (test): each slice is used on this one stream only.
                    unsafe { ctx.disable_event_tracking() };
                    let stream = ctx.new_stream().unwrap();
                    cases()
                        .iter()
                        .zip(all.iter())
                        .map(|(c, inp)| run_rank(&comm, &stream, c, inp, r))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let results: Vec<Vec<[Vec<u8>; 6]>> =
            handles.into_iter().map(|h| h.join().unwrap()).collect();
        for (k, c) in all_cases.iter().enumerate() {
            let (ref_res, ref_norm) = reference(c, &all[k]);
            let tol = c.dtype.tolerance(world);
            let n = c.rows * c.hidden;
            for (rank, res) in results.iter().enumerate() {
                let [res_u, norm_u, res_f, norm_f, res_o, norm_o] = &res[k];
                assert!(
                    res_o == res_f && norm_o == norm_f,
                    "{:?} rows {} rank {rank}: the overlapped launch gave another result",
                    c.dtype,
                    c.rows
                );
                assert_eq!(
                    res_f, res_u,
                    "{:?} rows {} rank {rank}: fused residual differs from unfused",
                    c.dtype, c.rows
                );
                let mut identical = 0;
                for i in 0..n {
                    let (u, f) = (element(c.dtype, norm_u, i), element(c.dtype, norm_f, i));
                    assert!(
                    (u - f).abs() <= tol * u.abs().max(1e-3),
                    "{:?} rows {} rank {rank} element {i}: fused {f} vs unfused {u} (tolerance {tol:e} relative)",
                    c.dtype,
                    c.rows
                );
                    identical += (u.to_bits() == f.to_bits()) as usize;
                    let r = element(c.dtype, res_f, i);
                    assert!(
                        (r - ref_res[i]).abs() <= 4.0 * tol * ref_res[i].abs().max(1.0),
                        "{:?} rows {} rank {rank} element {i}: residual {r} vs float64 {}",
                        c.dtype,
                        c.rows,
                        ref_res[i]
                    );
                    assert!(
                        (f - ref_norm[i]).abs() <= 4.0 * tol * ref_norm[i].abs().max(1.0),
                        "{:?} rows {} rank {rank} element {i}: normed {f} vs float64 {}",
                        c.dtype,
                        c.rows,
                        ref_norm[i]
                    );
                }
                eprintln!(
                "{:?} rows {} hidden {} rank {rank} ({}): {identical}/{n} normed elements bit-identical to unfused",
                c.dtype, c.rows, c.hidden, describe(world)
            );
            }
            // Every rank computes the same sums in the same order.
            for res in &results[1..] {
                assert_eq!(
                    res[k][3], results[0][k][3],
                    "{:?} rows {}: ranks differ",
                    c.dtype, c.rows
                );
            }
        }
    }
}

#[test]
#[ignore = "needs a GPU: TPCOMM_GPU_TESTS=1 [TPCOMM_TEST_WORLDS=2,4,8] cargo test -- --ignored"]
fn fused_call_whose_peer_never_arrives_times_out_naming_it() {
    let Some(_) = gpu_worlds() else { return };
    let timeout = Duration::from_millis(300);
    let group = ThreadGroup::new(2);
    let comms: Vec<P2pTransport> = (0..2)
        .map(|r| {
            let rv = Rendezvous::Threads(group.clone());
            std::thread::spawn(move || {
                let mut cfg = CudaConfig::new(r, 2, device_of(r));
                cfg.max_bytes = ByteSize::mib(1);
                cfg.timeout = timeout;
                P2pTransport::new(&cfg, &rv).expect("create communicator")
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().unwrap())
        .collect();
    let comm = &comms[0];
    let ctx = comm.context().clone();
    ctx.bind_to_thread().unwrap();
    // SAFETY (test): every slice is used on this one stream only.
    unsafe { ctx.disable_event_tracking() };
    let stream = ctx.new_stream().unwrap();
    let (rows, hidden) = (4, 7168);
    let n = rows * hidden;
    let up = |v: &[u8]| stream.clone_htod(v).unwrap();
    let partial = up(&random_bytes(DType::Bf16, n, &mut Rng::new(3)));
    let residual = up(&random_bytes(DType::Bf16, n, &mut Rng::new(4)));
    let weight = up(&random_bytes(DType::Bf16, hidden, &mut Rng::new(5)));
    let normed = stream.alloc_zeros::<u8>(n * 2).unwrap();
    let p = |s: &CudaSlice<u8>| s.device_ptr(&stream).0;
    let call = || {
        // SAFETY (test): live allocations of rank 0's device of the sizes the
        // call uses; the stream is synchronized before they drop.
        unsafe {
            let norm = NormCall {
                residual: p(&residual),
                weight: p(&weight),
                normed: p(&normed),
                rows,
                hidden,
                dtype: DType::Bf16,
                eps: EPS,
                stream: stream.cu_stream(),
                launch: Launch::Ordinary,
            };
            comm.all_reduce_residual_rmsnorm(p(&partial), &norm)
        }
    };
    // Rank 1 never calls: rank 0's kernel must give up on its own.
    let t0 = Instant::now();
    call().unwrap();
    stream.synchronize().unwrap();
    let waited = t0.elapsed();
    let err = comm.check().unwrap_err();
    eprintln!("after {waited:?}: {err}");
    match &err {
        Error::PeerTimeout { rank, peer, .. } => assert_eq!((*rank, *peer), (0, 1)),
        other => panic!("expected a timeout naming rank 1, got {other}"),
    }
    assert!(
        waited >= timeout && waited < timeout + Duration::from_secs(2),
        "{waited:?}"
    );
    // The communicator stays failed: a later call reports at once.
    assert!(matches!(call(), Err(Error::PeerTimeout { peer: 1, .. })));
}
