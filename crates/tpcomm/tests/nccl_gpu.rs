//! NCCL through tpcomm's run-time loader, on real GPUs: one thread per GPU,
//! all-reduce of random data checked element by element against a float64
//! reference. Needs 2 GPUs and NCCL, so it is ignored by default:
//!
//! ```text
//! TPCOMM_GPU_TESTS=1 cargo test -p tpcomm --test nccl_gpu -- --ignored --nocapture
//! ```

use cudarc::driver::{CudaContext, DevicePtr};
use half::{bf16, f16};
use rand::{Rng, SeedableRng};
use std::sync::mpsc;
use std::time::Duration;
use tpcomm::nccl::{Nccl, UniqueId};
use tpcomm::{DType, ReduceOp};

const WORLD: usize = 2;
const COUNTS: [usize; 4] = [1, 1000, 65_537, (1 << 20) + 3];
const CASES: [(DType, ReduceOp); 5] = [
    (DType::Bf16, ReduceOp::Sum),
    (DType::F32, ReduceOp::Sum),
    (DType::F16, ReduceOp::Sum),
    (DType::F32, ReduceOp::Max),
    (DType::Bf16, ReduceOp::Min),
];

/// Rank `rank`'s input for one case: values in [-1, 1), never all zero,
/// exactly representable in `dtype`, so the reference sees what the GPU sees.
fn input(seed: u64, rank: usize, count: usize, dtype: DType) -> Vec<f64> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ ((rank as u64 + 1) << 32));
    (0..count)
        .map(|_| {
            let v: f32 = rng.gen_range(-1.0f32..1.0);
            match dtype {
                DType::F32 => v as f64,
                DType::F16 => f16::from_f32(v).to_f64(),
                DType::Bf16 => bf16::from_f32(v).to_f64(),
            }
        })
        .collect()
}

/// The values as the device stores them: raw bits in a u32 (f32) or u16.
fn encode(values: &[f64], dtype: DType) -> (Vec<u32>, Vec<u16>) {
    match dtype {
        DType::F32 => (
            values.iter().map(|&v| (v as f32).to_bits()).collect(),
            vec![],
        ),
        DType::F16 => (
            vec![],
            values.iter().map(|&v| f16::from_f64(v).to_bits()).collect(),
        ),
        DType::Bf16 => (
            vec![],
            values
                .iter()
                .map(|&v| bf16::from_f64(v).to_bits())
                .collect(),
        ),
    }
}

fn decode(bits32: &[u32], bits16: &[u16], dtype: DType) -> Vec<f64> {
    match dtype {
        DType::F32 => bits32.iter().map(|&b| f32::from_bits(b) as f64).collect(),
        DType::F16 => bits16.iter().map(|&b| f16::from_bits(b).to_f64()).collect(),
        DType::Bf16 => bits16
            .iter()
            .map(|&b| bf16::from_bits(b).to_f64())
            .collect(),
    }
}

/// Runs every case on `rank`'s GPU; returns how many elements were checked.
fn run_rank(nccl: std::sync::Arc<Nccl>, id: UniqueId, rank: usize) -> Result<usize, String> {
    let ctx = CudaContext::new(rank).map_err(|e| format!("rank {rank}: CudaContext: {e}"))?;
    ctx.bind_to_thread().map_err(|e| e.to_string())?;
    let stream = ctx.new_stream().map_err(|e| e.to_string())?;
    let comm = nccl
        .comm_init_rank(WORLD, &id, rank)
        .map_err(|e| format!("rank {rank}: {e}"))?;
    let mut checked = 0;
    for (case, &(dtype, op)) in CASES.iter().enumerate() {
        for (ci, &count) in COUNTS.iter().enumerate() {
            for in_place in [false, true] {
                let seed = (case * 100 + ci * 2 + in_place as usize) as u64;
                let inputs: Vec<Vec<f64>> =
                    (0..WORLD).map(|r| input(seed, r, count, dtype)).collect();
                let (send32, send16) = encode(&inputs[rank], dtype);
                let dev = |v32: &Vec<u32>, v16: &Vec<u16>| {
                    Ok::<_, String>(if dtype == DType::F32 {
                        (
                            Some(stream.clone_htod(v32).map_err(|e| e.to_string())?),
                            None,
                        )
                    } else {
                        (
                            None,
                            Some(stream.clone_htod(v16).map_err(|e| e.to_string())?),
                        )
                    })
                };
                let (s32, s16) = dev(&send32, &send16)?;
                // Out of place: receive into a buffer pre-filled with 7s, so
                // an all-reduce that writes nothing is caught.
                let (r32, r16) = if in_place {
                    (None, None)
                } else {
                    dev(&vec![7.0f32.to_bits(); count], &vec![0x4700; count])?
                };
                let ptr = |a: &Option<cudarc::driver::CudaSlice<u32>>,
                           b: &Option<cudarc::driver::CudaSlice<u16>>| {
                    match (a, b) {
                        (Some(a), _) => a.device_ptr(&stream).0,
                        (_, Some(b)) => b.device_ptr(&stream).0,
                        _ => 0,
                    }
                };
                let send = ptr(&s32, &s16);
                let recv = if in_place { send } else { ptr(&r32, &r16) };
                // SAFETY (test): both buffers hold `count` elements of `dtype`
                // on this rank's device and outlive the synchronize below.
                unsafe { comm.all_reduce(send, recv, count, dtype, op, stream.cu_stream()) }
                    .map_err(|e| format!("rank {rank}: {e}"))?;
                stream.synchronize().map_err(|e| e.to_string())?;
                let (o32, o16) = if in_place { (&s32, &s16) } else { (&r32, &r16) };
                let got = match (o32, o16) {
                    (Some(a), _) => decode(
                        &stream.clone_dtoh(a).map_err(|e| e.to_string())?,
                        &[],
                        dtype,
                    ),
                    (_, Some(b)) => decode(
                        &[],
                        &stream.clone_dtoh(b).map_err(|e| e.to_string())?,
                        dtype,
                    ),
                    _ => unreachable!(),
                };
                let tol = dtype.tolerance(WORLD);
                for i in 0..count {
                    let want = inputs[1..]
                        .iter()
                        .fold(inputs[0][i], |acc, x| op.apply_f64(acc, x[i]));
                    let scale: f64 = inputs.iter().map(|x| x[i].abs()).sum();
                    if (got[i] - want).abs() > tol * scale.max(f64::MIN_POSITIVE) {
                        return Err(format!(
                            "rank {rank}: {dtype} {op} count {count} in_place {in_place}: \
                             element {i} is {} but the float64 reference is {want}",
                            got[i]
                        ));
                    }
                }
                checked += count;
            }
        }
    }
    comm.destroy().map_err(|e| format!("rank {rank}: {e}"))?;
    Ok(checked)
}

#[test]
#[ignore = "needs 2 GPUs and NCCL: TPCOMM_GPU_TESTS=1 cargo test -p tpcomm --test nccl_gpu -- --ignored"]
fn nccl_all_reduce_two_gpus_one_thread_each_matches_float64() {
    assert_eq!(
        tpcomm::env::GPU_TESTS.get(),
        Ok(Some(true)),
        "set TPCOMM_GPU_TESTS=1 to run GPU tests"
    );
    let nccl = Nccl::load().unwrap_or_else(|e| panic!("{e}"));
    println!("NCCL {} from {}", nccl.version(), nccl.location());
    let id = nccl.unique_id().unwrap_or_else(|e| panic!("{e}"));
    let (tx, rx) = mpsc::channel();
    for rank in 0..WORLD {
        let (nccl, tx) = (nccl.clone(), tx.clone());
        std::thread::spawn(move || {
            let _ = tx.send((rank, run_rank(nccl, id, rank)));
        });
    }
    drop(tx);
    let mut total = 0;
    for _ in 0..WORLD {
        // NCCL's own waits are unbounded: a rank that failed would leave the
        // other blocked in ncclCommInitRank or the collective, so bound it here.
        let (rank, result) = rx
            .recv_timeout(Duration::from_secs(120))
            .expect("a rank did not finish within 120 s (NCCL init or all-reduce hung)");
        let checked = result.unwrap_or_else(|e| panic!("{e}"));
        println!("rank {rank}: {checked} elements checked against float64, 0 wrong");
        total += checked;
    }
    let per_rank: usize = COUNTS.iter().sum::<usize>() * 2 * CASES.len();
    assert_eq!(total, per_rank * WORLD);
}
