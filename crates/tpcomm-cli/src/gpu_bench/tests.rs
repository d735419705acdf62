use super::launch::worker_argv;
use super::report::bench_report;
use super::*;
use clap::Parser;
use tpcomm::report::BenchReport;
use tpcomm::verify::{count_wrong_against, random_bytes, Rng};

#[derive(Parser)]
struct Cmd {
    #[command(flatten)]
    args: GpuBenchArgs,
}

fn parse(args: &[&str]) -> GpuBenchArgs {
    Cmd::parse_from(std::iter::once("gpu-bench").chain(args.iter().copied())).args
}

#[test]
fn defaults_are_valid() {
    validate(&parse(&[])).unwrap();
}

#[test]
fn unknown_algorithms_and_modes_are_refused_before_any_gpu_work() {
    let e = validate(&parse(&["--algos", "one-shot,ring"])).unwrap_err();
    assert!(e.to_string().contains("\"ring\""), "{e}");
    let e = validate(&parse(&["--modes", "eager,lazy"])).unwrap_err();
    assert!(e.to_string().contains("\"lazy\""), "{e}");
}

#[test]
fn transport_is_parsed_and_unknown_ones_refused() {
    assert_eq!(parse(&[]).transport, Transport::Auto);
    assert_eq!(parse(&["--transport", "host"]).transport, Transport::Host);
    let r = Cmd::try_parse_from(["gpu-bench", "--transport", "pcie"]);
    assert!(r.is_err());
}

/// What a worker process parses from the command line the parent builds
/// is the parent's measurement, plus its rank and meeting place.
#[test]
fn workers_parse_back_the_parents_arguments() {
    let parent = parse(&[
        "--launch",
        "procs",
        "--transport",
        "host",
        "--dtype",
        "f16",
        "--min",
        "3KiB",
        "--max",
        "2MiB",
        "--algos",
        "one-shot,auto,nccl",
        "--modes",
        "graph",
        "--iters",
        "7",
        "--reps",
        "9",
        "--rotate",
        "2",
        "--timeout-ms",
        "1234",
        "--midpoints",
        "--table",
        "/tmp/t.toml",
        "--class",
        "nvlink",
        "--fingerprint",
        "abc",
        "--json",
        "/tmp/out.json",
    ]);
    let dir = std::path::Path::new("/tmp/rv dir");
    let argv = worker_argv(&parent, 2, 1, dir);
    let job = crate::parse(std::iter::once("tpcomm".into()).chain(argv).collect()).unwrap();
    let crate::Job::GpuBenchWorker(w) = job else {
        panic!("workers must run the GPU bench")
    };
    assert_eq!(w.worker_rank, Some(1));
    assert_eq!(w.gpus, Some(2));
    assert_eq!(w.rendezvous.as_deref(), Some(dir));
    // Everything else is the parent's, except where the JSON goes
    // (the parent writes it) and the worker fields above.
    let strip = |mut a: GpuBenchArgs| {
        // Workers run one rank each; they do not launch others.
        a.launch = None;
        a.worker_rank = None;
        a.rendezvous = None;
        a.gpus = None;
        a.json = None;
        format!("{a:?}")
    };
    assert_eq!(strip(w), strip(parent));
}

fn rank_out(gpu: &str, wrong: usize, nccl: Option<&str>) -> RankOut {
    RankOut {
        info: RankInfo {
            gpu: gpu.into(),
            arch: "sm_90".into(),
            nvrtc: "13.0 (/usr/lib/libnvrtc.so)".into(),
            nccl: nccl.map(str::to_string),
            memory: String::new(),
            transport: "host".into(),
            ranks_on_device: 1,
        },
        rows: vec![Row {
            bytes: 4096,
            count: 2048,
            dtype: "bf16".into(),
            algo: "nccl".into(),
            mode: "graph".into(),
            time_us: 12.5,
            algbw_gbps: 0.32768,
            busbw_gbps: 0.32768,
            wrong,
            rel_rms: None,
            max_rel: None,
        }],
    }
}

/// The GPU JSON is a BenchReport (the CPU bench's shape) that reads
/// back as written, with the GPU facts in the optional meta fields, and
/// that the latency-table reader of tpcomm-plan takes.
#[test]
fn gpu_report_is_a_bench_report_that_round_trips() {
    let args = parse(&["--launch", "threads", "--iters", "7", "--reps", "9"]);
    let outs = vec![
        rank_out("H200", 0, Some("2.27.3")),
        rank_out("H200", 0, None),
    ];
    let doc = bench_report(&args, 2, &outs, &outs[0].rows, "13.0").unwrap();
    let text = serde_json::to_string_pretty(&doc).unwrap();
    let back: BenchReport = serde_json::from_str(&text).unwrap();
    assert_eq!(back, doc);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let m = &v["meta"];
    assert_eq!(m["device"], "gpu");
    assert_eq!(m["transport"], "host");
    assert_eq!(m["world_size"], 2);
    assert_eq!(m["launch"], "threads");
    assert_eq!(m["gpus"], serde_json::json!(["H200", "H200"]));
    assert_eq!(m["arch"], "sm_90");
    assert_eq!(
        (
            m["iters"].as_u64(),
            m["reps"].as_u64(),
            m["rotate"].as_u64()
        ),
        (Some(7), Some(9), Some(4))
    );
    assert_eq!(m["versions"]["driver"], "13.0");
    assert_eq!(m["versions"]["nccl"], "2.27.3");
    assert_eq!(m["versions"]["tpcomm"], env!("CARGO_PKG_VERSION"));
    assert!(m["versions"]["nvrtc"].as_str().unwrap().starts_with("13.0"));
    let r = &v["rows"][0];
    assert_eq!(
        (r["op"].as_str(), r["dtype"].as_str(), r["algo"].as_str()),
        (Some("sum"), Some("bf16"), Some("nccl"))
    );
    assert_eq!(
        (r["count"].as_u64(), r["time_us"].as_f64()),
        (Some(2048), Some(12.5))
    );
    let t = tpcomm_plan::latency::LatencyTable::from_bench_str(
        "gpu.json",
        &text,
        Some("nccl"),
        Some("graph"),
        Some("bf16"),
    )
    .unwrap();
    assert_eq!(t.points.len(), 1);
    // Without NCCL the version is left out, not written empty.
    let outs = vec![rank_out("H200", 0, None), rank_out("H200", 0, None)];
    let doc = bench_report(&args, 2, &outs, &outs[0].rows, "").unwrap();
    assert!(!doc.meta.versions.contains_key("nccl") && !doc.meta.versions.contains_key("driver"));
}

#[test]
fn min_above_max_or_zero_counts_are_refused() {
    assert!(validate(&parse(&["--min", "2MiB", "--max", "1MiB"])).is_err());
    assert!(validate(&parse(&["--reps", "0"])).is_err());
    assert!(validate(&parse(&["--min", "0"])).is_err());
}

/// Every count of the GPU bench (and so of `tpcomm tune`)
/// is bounded on both sides before any GPU work, and the error names the
/// flag and the range; the bounds themselves are accepted.
#[test]
fn counts_out_of_range_are_refused_naming_the_flag() {
    let huge = u64::MAX.to_string();
    for (flag, bad, top) in [
        ("--iters", "0", MAX_CALLS.to_string()),
        ("--iters", &huge, MAX_CALLS.to_string()),
        ("--reps", "0", MAX_REPS.to_string()),
        ("--reps", &huge, MAX_REPS.to_string()),
        ("--rotate", "0", MAX_ROTATE.to_string()),
        ("--rotate", "65", MAX_ROTATE.to_string()),
        ("--timeout-ms", "0", MAX_TIMEOUT_MS.to_string()),
        ("--timeout-ms", &huge, MAX_TIMEOUT_MS.to_string()),
        ("--gpus", "1", "8".to_string()),
        ("--gpus", &huge, "8".to_string()),
    ] {
        let msg = validate(&parse(&[flag, bad])).unwrap_err().to_string();
        let named = if flag == "--gpus" { "--ranks" } else { flag };
        assert!(
            msg.contains(named) && msg.contains(&top) && msg.contains(bad),
            "{flag} {bad}: {msg}"
        );
        validate(&parse(&[flag, &top])).unwrap_or_else(|e| panic!("{flag} {top}: {e}"));
    }
}

#[test]
fn the_parallel_check_counts_exactly_what_one_thread_counts() {
    for dtype in DType::ALL {
        // 200 Ki elements: at most three workers (64 Ki elements or more
        // each), the last range shorter; errors in every range and at both ends.
        let count = 200 << 10;
        let ins = random_inputs(dtype, count, 1, 2, 3).remove(0);
        let refs: Vec<&[u8]> = ins.iter().map(|v| &v[..]).collect();
        let r = tpcomm::verify::reference(dtype, &refs, count);
        let mut vals: Vec<f64> = r.values().to_vec();
        let right = encode(dtype, &vals);
        assert_eq!(count_wrong_par(dtype, &right, &refs, 2, 4), 0, "{dtype}");
        for i in [0, 70_000, 140_000, count - 1] {
            vals[i] += 100.0;
        }
        let wrong = encode(dtype, &vals);
        let one = count_wrong_against(dtype, &wrong, &refs, 2);
        assert_eq!(one, 4, "{dtype}");
        for workers in [1, 2, 3, 4, 16] {
            assert_eq!(
                count_wrong_par(dtype, &wrong, &refs, 2, workers),
                one,
                "{dtype} x{workers}"
            );
        }
    }
}

fn encode(dtype: DType, vals: &[f64]) -> Vec<u8> {
    let mut out = Vec::new();
    for &v in vals {
        match dtype {
            DType::F32 => out.extend_from_slice(&(v as f32).to_le_bytes()),
            DType::F16 => out.extend_from_slice(&half::f16::from_f64(v).to_bits().to_le_bytes()),
            DType::Bf16 => out.extend_from_slice(&half::bf16::from_f64(v).to_bits().to_le_bytes()),
        }
    }
    out
}

#[test]
fn inputs_do_not_depend_on_how_many_threads_make_them() {
    let one = random_inputs(DType::Bf16, 1000, 3, 2, 1);
    assert_eq!(one.len(), 3);
    assert!(one
        .iter()
        .all(|k| k.len() == 2 && k.iter().all(|b| b.len() == 2000)));
    // Seeded by (buffer, rank): what the one-thread code made before.
    assert_eq!(
        one[2][1],
        random_bytes(DType::Bf16, 1000, &mut Rng::new(1 + 2 * 64 + 1))
    );
    assert_ne!(one[0][0], one[0][1]);
    for w in [2, 4, 7] {
        assert_eq!(
            random_inputs(DType::Bf16, 1000, 3, 2, w),
            one,
            "{w} workers"
        );
    }
}

#[test]
fn bench_rows_map_to_the_candidates_of_their_transport() {
    use tpcomm::select::Candidate;
    assert_eq!(
        row_candidate("cuda", "one-shot"),
        Some(Candidate::cuda(Algo::OneShot))
    );
    assert_eq!(
        row_candidate("cuda", "two-shot"),
        Some(Candidate::cuda(Algo::TwoShot))
    );
    assert_eq!(
        row_candidate("host", "host-delta"),
        Some(Candidate::host(Algo::OneShot))
    );
    // Rows of the deleted push and LL kernels are no measure of one-shot.
    assert_eq!(row_candidate("host", "host-ll"), None);
    assert_eq!(
        row_candidate("host", "host-chunked"),
        Some(Candidate::host(Algo::TwoShot))
    );
    assert_eq!(row_candidate("host", "nccl"), Some(Candidate::NCCL));
    assert_eq!(row_candidate("host", "auto:host:one-shot"), None);
    assert_eq!(row_candidate("cuda", "auto:nccl"), None);
    assert_eq!(row_candidate("cuda", "mystery"), None);
    assert_eq!(select_transport(Transport::Host), select::Transport::Host);
    assert_eq!(select_transport(Transport::Cuda), select::Transport::Cuda);
}

/// `-pdl` names are the same kernels launched overlapped; anything else
/// with the suffix, and unknown names, are refused naming the choices.
#[test]
fn algo_names_with_pdl_parse_to_an_overlapped_launch() {
    use tpcomm::cuda::Launch;
    assert_eq!(
        super::parse_algo("one-shot-pdl").unwrap(),
        (tpcomm::Algo::OneShot, Launch::Overlapped)
    );
    assert_eq!(
        super::parse_algo("two-shot").unwrap(),
        (tpcomm::Algo::TwoShot, Launch::Ordinary)
    );
    for bad in ["auto-pdl", "nccl-pdl", "-pdl", "fast"] {
        let e = super::parse_algo(bad).unwrap_err().to_string();
        assert!(e.contains("one-shot-pdl"), "{bad}: {e}");
    }
    assert!(validate(&parse(&["--algos", "one-shot-pdl,nccl"])).is_ok());
    assert!(validate(&parse(&["--algos", "auto-pdl"])).is_err());
}

/// Without --iters a repetition is 100 calls below 4 MiB and 20 from 4 MiB
/// (the torch anchor's rule), and the report says so; --iters fixes it.
#[test]
fn calls_per_repetition_follow_the_anchor_unless_given() {
    let a = parse(&[]);
    assert_eq!(a.iters_for(1024), 100);
    assert_eq!(a.iters_for((4 << 20) - 2), 100);
    assert_eq!(a.iters_for(4 << 20), 20);
    assert_eq!(a.iters_for(64 << 20), 20);
    assert_eq!(a.iters_text(), "100 (< 4 MiB) / 20");
    let a = parse(&["--iters", "7"]);
    assert_eq!((a.iters_for(1024), a.iters_for(64 << 20)), (7, 7));
    assert_eq!(a.iters_text(), "7");
    assert!(validate(&parse(&["--iters", "0"])).is_err());
}

/// Ranks that shared a GPU are said so in the JSON (the most ranks on one
/// device); a run with a GPU per rank writes no such field.
#[test]
fn shared_gpu_runs_say_so_in_the_json_and_others_do_not() {
    let args = parse(&["--launch", "threads", "--ranks", "4"]);
    let mut outs: Vec<_> = (0..4).map(|_| rank_out("H200", 0, None)).collect();
    let own = bench_report(&args, 4, &outs, &outs[0].rows, "").unwrap();
    assert_eq!(own.meta.shared_gpu, None);
    assert!(!serde_json::to_string(&own).unwrap().contains("shared_gpu"));
    for o in &mut outs {
        o.info.ranks_on_device = 4;
    }
    let shared = bench_report(&args, 4, &outs, &outs[0].rows, "").unwrap();
    assert_eq!(shared.meta.shared_gpu, Some(4));
}

#[test]
fn the_collective_reaches_the_workers_and_all_reduce_wires_are_refused_for_it() {
    use crate::bench::coll::Coll;
    assert_eq!(parse(&[]).coll, Coll::AllReduce);
    let parent = parse(&["--coll", "reduce-scatter"]);
    validate(&parent).unwrap();
    let argv = worker_argv(&parent, 2, 1, std::path::Path::new("/tmp/x"));
    let worker = Cmd::parse_from(argv.iter().map(|s| s.to_str().unwrap())).args;
    assert_eq!(worker.coll, Coll::ReduceScatter);
    for algos in ["int8", "one-shot-pdl"] {
        let e = validate(&parse(&["--coll", "all-gather", "--algos", algos])).unwrap_err();
        assert!(e.to_string().contains("all-reduce algorithm"), "{e}");
    }
}

/// Without --launch: processes when every rank has a GPU of its own or MPS
/// serves the GPUs that ranks share; threads when a shared GPU has no MPS
/// (or its MPS state cannot be read), as processes there run in time slices.
#[test]
fn the_default_launch_follows_the_gpus_and_mps() {
    let never = |_: usize| -> Result<bool> { panic!("MPS asked with a GPU per rank") };
    for (world, gpus) in [(2, 2), (2, 8), (8, 8)] {
        let (l, why) = default_launch(world, gpus, never);
        assert_eq!(l, Launch::Processes, "{world} on {gpus}");
        assert!(why.contains("GPU of its own"), "{why}");
    }
    let on = |_: usize| Ok(true);
    let off = |_: usize| Ok(false);
    let (l, why) = default_launch(4, 1, on);
    assert_eq!(l, Launch::Processes);
    assert!(
        why.contains("4 ranks share 1 GPU and an MPS server"),
        "{why}"
    );
    let (l, why) = default_launch(4, 1, off);
    assert_eq!(l, Launch::Threads);
    assert!(
        why.contains("no MPS server serves GPU 0")
            && why.contains("time slices")
            && why.contains("nvidia-cuda-mps-control -d"),
        "{why}"
    );
    // 3 ranks on 2 GPUs: only GPU 0 is shared, so only its MPS matters.
    let (l, _) = default_launch(3, 2, |d| Ok(d != 1));
    assert_eq!(l, Launch::Processes);
    let (l, why) = default_launch(3, 2, |d| Ok(d != 0));
    assert_eq!(l, Launch::Threads);
    assert!(
        why.contains("3 ranks share 2 GPUs") && why.contains("GPU 0"),
        "{why}"
    );
    // A query that fails counts as no MPS, and says why.
    let (l, why) = default_launch(2, 1, |_| {
        Err(Error::Cuda {
            call: "cuDeviceGetAttribute".into(),
            detail: "boom".into(),
        })
    });
    assert_eq!(l, Launch::Threads);
    assert!(why.contains("unknown") && why.contains("boom"), "{why}");
    // No GPU counted: no panic (measure refuses that case before asking).
    assert_eq!(default_launch(2, 0, off).0, Launch::Threads);
}

/// --launch given is kept as given; not given, it stays open until measure()
/// decides (and the JSON then names what was chosen).
#[test]
fn launch_is_open_unless_given() {
    assert_eq!(parse(&[]).launch, None);
    assert_eq!(GpuBenchArgs::defaults().launch, None);
    assert_eq!(
        parse(&["--launch", "procs"]).launch,
        Some(Launch::Processes)
    );
    assert_eq!(
        parse(&["--launch", "processes"]).launch,
        Some(Launch::Processes)
    );
    assert_eq!(
        parse(&["--launch", "threads"]).launch,
        Some(Launch::Threads)
    );
}
