//! How `tpcomm bench`'s options land on each device (no GPU needed).

use super::*;
use crate::{Cli, Command};
use clap::Parser;

fn opts(args: &[&str]) -> BenchOpts {
    let cli = Cli::try_parse_from(["tpcomm", "bench"].iter().chain(args)).unwrap();
    match cli.command {
        Command::Bench(b) => {
            assert!(b.sub.is_none());
            b.opts
        }
        _ => panic!("not bench"),
    }
}

fn no_gpu() -> Result<usize, String> {
    Err("the CUDA driver (libcuda.so.1) was not found".into())
}

fn cpu(args: &[&str]) -> String {
    match resolve(&opts(args), no_gpu).unwrap() {
        Run::Cpu(a) => format!("{a:?}"),
        Run::Gpu(a) => panic!("GPU for {args:?}: {a:?}"),
    }
}

fn gpu(args: &[&str]) -> String {
    match resolve(&opts(args), || Ok(2)).unwrap() {
        Run::Gpu(a) => format!("{a:?}"),
        Run::Cpu(a) => panic!("CPU for {args:?}: {a:?}"),
    }
}

/// The GPU bench's arguments as its own clap definition parses them (what
/// the older `tpcomm gpu-bench` spelling took).
fn legacy_gpu(args: &[&str]) -> String {
    #[derive(Parser)]
    struct Gpu {
        #[command(flatten)]
        args: GpuBenchArgs,
    }
    let a = Gpu::try_parse_from(["gpu-bench"].iter().chain(args))
        .unwrap()
        .args;
    format!("{a:?}")
}

fn err(args: &[&str], gpus: Result<usize, String>) -> String {
    resolve(&opts(args), || gpus).unwrap_err()
}

#[test]
fn auto_takes_gpus_only_when_there_are_two_or_more() {
    assert!(matches!(resolve(&opts(&[]), || Ok(2)), Ok(Run::Gpu(_))));
    assert!(matches!(resolve(&opts(&[]), || Ok(8)), Ok(Run::Gpu(_))));
    assert!(matches!(resolve(&opts(&[]), || Ok(1)), Ok(Run::Cpu(_))));
    assert!(matches!(resolve(&opts(&[]), no_gpu), Ok(Run::Cpu(_))));
    // An explicit device is not second-guessed (and nothing is probed).
    let probed = |_: &str| -> Result<usize, String> { panic!("probed") };
    assert!(matches!(
        resolve(&opts(&["--device", "gpu"]), || probed("")),
        Ok(Run::Gpu(_))
    ));
    assert!(matches!(
        resolve(&opts(&["--device", "cpu"]), || probed("")),
        Ok(Run::Cpu(_))
    ));
}

#[test]
fn gpu_runs_get_exactly_what_gpu_bench_would_have_parsed() {
    assert_eq!(gpu(&[]), legacy_gpu(&[]));
    let same = [
        "--launch",
        "threads",
        "--transport",
        "host",
        "--gpus",
        "2",
        "--dtype",
        "f16",
        "--algos",
        "one-shot,two-shot,auto,nccl",
        "--modes",
        "graph",
        "--iters",
        "7",
        "--reps",
        "9",
        "--rotate",
        "2",
        "--json",
        "/tmp/x.json",
        "--midpoints",
        "--table",
        "/tmp/t.toml",
    ];
    let mut new = same.to_vec();
    new.extend(["--min", "4KiB", "--max", "2MiB", "--timeout-ms", "1234"]);
    let mut old = same.to_vec();
    old.extend(["--min", "4096", "--max", "2097152", "--timeout-ms", "1234"]);
    assert_eq!(gpu(&new), legacy_gpu(&old));
}

#[test]
fn both_spellings_of_sizes_launch_algos_and_timeout_work_on_both_devices() {
    // GPU: CPU-bench spellings map to the GPU bench's.
    assert_eq!(
        gpu(&[
            "--min-bytes",
            "2KiB",
            "--max-bytes",
            "1MiB",
            "--launch",
            "processes",
            "--algo",
            "nccl",
            "--timeout",
            "5s"
        ]),
        legacy_gpu(&[
            "--min",
            "2KiB",
            "--max",
            "1MiB",
            "--launch",
            "procs",
            "--algos",
            "nccl",
            "--timeout-ms",
            "5000"
        ])
    );
    assert_eq!(
        gpu(&["--algos", "all"]),
        legacy_gpu(&["--algos", "one-shot,two-shot,nccl"])
    );
    // CPU: GPU-bench spellings map to the CPU bench's.
    let base = cpu(&[
        "--min-bytes",
        "2KiB",
        "--max-bytes",
        "1MiB",
        "--launch",
        "processes",
        "--algo",
        "two-shot",
        "--timeout",
        "0.5s",
    ]);
    assert_eq!(
        cpu(&[
            "--min",
            "2KiB",
            "--max",
            "1MiB",
            "--launch",
            "procs",
            "--algos",
            "two-shot",
            "--timeout-ms",
            "500"
        ]),
        base
    );
    assert!(
        base.contains("launch: Processes") && base.contains("algo: TwoShot"),
        "{base}"
    );
    assert!(base.contains("timeout: 500ms"), "{base}");
    assert!(cpu(&["--algos", "two-shot,one-shot"]).contains("algo: All"));
    assert!(cpu(&["--launch", "threads"]).contains("launch: Threads"));
}

/// On GPUs --launch left out stays open for the GPU bench to decide from the
/// machine (gpu_bench::default_launch); CPU ranks keep processes.
#[test]
fn the_gpu_launch_is_decided_later_unless_given() {
    assert!(gpu(&[]).contains("launch: None"), "{}", gpu(&[]));
    assert!(gpu(&["--launch", "processes"]).contains("launch: Some(Processes)"));
    assert!(gpu(&["--launch", "threads"]).contains("launch: Some(Threads)"));
    assert!(cpu(&[]).contains("launch: Processes"));
}

#[test]
fn cpu_defaults_are_the_cpu_bench_defaults() {
    let d = cpu(&[]);
    assert!(
        d.contains("ranks: 2") && d.contains("dtype: F32") && d.contains("algo: All"),
        "{d}"
    );
    assert!(d.contains("timeout: 10s"), "{d}");
    // The GPU bench keeps its own defaults (bf16, 20 s).
    let g = gpu(&[]);
    assert!(
        g.contains("dtype: Bf16") && g.contains("timeout_ms: 20000"),
        "{g}"
    );
}

#[test]
fn options_of_the_other_device_are_refused_with_the_right_spelling() {
    // On GPUs --ranks counts GPU ranks (round-robin over the GPUs), as --gpus does.
    assert_eq!(gpu(&["--ranks", "4"]), legacy_gpu(&["--gpus", "4"]));
    let e = err(&["--device", "gpu", "--ranks", "4", "--gpus", "4"], Ok(2));
    assert!(e.contains("--ranks") && e.contains("--gpus"), "{e}");
    let e = err(&["--device", "gpu", "--op", "max"], Ok(2));
    assert!(e.contains("sum only"), "{e}");
    // --op sum is what the GPU bench does anyway.
    assert_eq!(gpu(&["--op", "sum"]), legacy_gpu(&[]));
    let e = err(&["--device", "cpu", "--gpus", "2"], Ok(2));
    assert!(e.contains("--gpus") && e.contains("--ranks"), "{e}");
    let e = err(&["--device", "cpu", "--algos", "one-shot,nccl"], Ok(2));
    assert!(e.contains("NCCL rows need GPUs"), "{e}");
    let e = err(&["--device", "cpu", "--modes", "eager,graph"], Ok(2));
    assert!(e.contains("eager only"), "{e}");
    assert!(cpu(&["--modes", "eager"]).contains("ranks: 2"));
    // Auto without GPUs says why it chose CPU ranks.
    let e = err(&["--transport", "host"], no_gpu());
    assert!(
        e.contains("--transport")
            && e.contains("--device auto chose CPU ranks")
            && e.contains("libcuda"),
        "{e}"
    );
    let e = err(&["--algos", "one-shot,two-shot,auto"], Ok(0));
    assert!(e.contains("one of auto, one-shot, two-shot or all"), "{e}");
}

#[test]
fn bad_values_are_refused_by_the_device_bench_naming_them() {
    let e = err(&["--device", "cpu", "--algo", "three-shot"], Ok(0));
    assert!(e.contains("three-shot"), "{e}");
    assert!(
        Cli::try_parse_from(["tpcomm", "bench", "--timeout", "1s", "--timeout-ms", "5"]).is_err()
    );
    assert!(Cli::try_parse_from(["tpcomm", "bench", "--device", "tpu"]).is_err());
    assert!(Cli::try_parse_from(["tpcomm", "bench", "--launch", "forks"]).is_err());
}

#[test]
fn bench_forward_parses_as_the_forward_bench_and_the_old_spellings_are_gone() {
    let cli = Cli::try_parse_from([
        "tpcomm",
        "bench",
        "forward",
        "--tokens",
        "8",
        "--modes",
        "none,nccl",
    ])
    .unwrap();
    let Command::Bench(b) = cli.command else {
        panic!("not bench")
    };
    let Some(BenchSub::Forward(f)) = b.sub else {
        panic!("not forward")
    };
    #[derive(Parser)]
    struct Forward {
        #[command(flatten)]
        args: ForwardBenchArgs,
    }
    let g = Forward::try_parse_from(["forward", "--tokens", "8", "--modes", "none,nccl"])
        .unwrap()
        .args;
    assert_eq!(format!("{f:?}"), format!("{g:?}"));
    for old in ["gpu-bench", "forward-bench"] {
        assert!(Cli::try_parse_from(["tpcomm", old]).is_err(), "{old}");
    }
    // Bench options and the forward subcommand do not mix.
    assert!(Cli::try_parse_from(["tpcomm", "bench", "--ranks", "2", "forward"]).is_err());
}

#[test]
fn the_spelt_out_defaults_are_the_clap_defaults() {
    #[derive(Parser)]
    struct Cpu {
        #[command(flatten)]
        args: BenchArgs,
    }
    #[derive(Parser)]
    struct Gpu {
        #[command(flatten)]
        args: GpuBenchArgs,
    }
    let cpu = Cpu::try_parse_from(["bench"]).unwrap().args;
    assert_eq!(format!("{:?}", BenchArgs::defaults()), format!("{cpu:?}"));
    let gpu = Gpu::try_parse_from(["gpu-bench"]).unwrap().args;
    assert_eq!(
        format!("{:?}", GpuBenchArgs::defaults()),
        format!("{gpu:?}")
    );
}

#[test]
fn values_the_device_bench_would_refuse_get_its_words() {
    let e = err(&["--device", "cpu", "--algo", "one_shot"], Ok(0));
    assert_eq!(
        e,
        "invalid value 'one_shot' for '--algo <ALGO>' [possible values: auto, one-shot, two-shot, all]"
    );
    let e = err(&["--device", "cpu", "--algos", ""], Ok(0));
    assert_eq!(
        e,
        "a value is required for '--algo <ALGO>' but none was supplied [possible values: auto, one-shot, two-shot, all]"
    );
    // --timeout-ms is refused naming --timeout-ms (the flag typed), not --timeout.
    let e = err(&["--device", "cpu", "--timeout-ms", "0"], Ok(0));
    assert_eq!(
        e,
        "invalid value '0' for '--timeout-ms <TIMEOUT_MS>': give 1 to 86399999 milliseconds (under one day)"
    );
    let e = err(&["--device", "cpu", "--timeout-ms", "86400000"], Ok(0));
    assert!(
        e.contains("'86400000'") && e.contains("--timeout-ms") && !e.contains("--timeout <"),
        "{e}"
    );
    assert!(cpu(&["--timeout-ms", "86399999"]).contains("timeout: 86399.999s"));
    // The GPU bench takes 0 ms as given and rounds a --timeout up to 1 ms.
    assert_eq!(
        gpu(&["--timeout-ms", "0"]),
        legacy_gpu(&["--timeout-ms", "0"])
    );
    assert_eq!(
        gpu(&["--timeout", "0.0001s"]),
        legacy_gpu(&["--timeout-ms", "1"])
    );
    assert_eq!(
        gpu(&["--algos", "all,auto"]),
        legacy_gpu(&["--algos", "one-shot,two-shot,nccl,auto"])
    );
    assert_eq!(gpu(&["--modes", ""]), legacy_gpu(&["--modes", ""]));
}
