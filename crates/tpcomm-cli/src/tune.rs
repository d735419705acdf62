//! `tpcomm tune`: measure every candidate (tpcomm's algorithms on the GPU
//! transport in use, and NCCL) at every size, eager and graph, and write this
//! machine's tuning table. `--transport host` measures the host-memory
//! transport's candidates (`host:*` rows) on any machine.
//! `--from-bench` turns GPU bench JSON (`tpcomm bench --json` on GPUs, or an
//! older `tpcomm gpu-bench --json` file) into a table instead (no GPU).

use crate::gpu_bench::{self, GpuBenchArgs, RankOut, Row};
use clap::Args;
use std::path::{Path, PathBuf};
use tpcomm::cuda::Transport as GpuTransport;
use tpcomm::select::{self, Measured, Table};
use tpcomm::topology;
use tpcomm::{ByteSize, DType, Error, Result};

#[derive(Args, Debug)]
pub struct TuneArgs {
    /// Where to write the table; "-" for stdout. Default: the location the
    /// library looks in ($XDG_CONFIG_HOME or
    /// ~/.config)/tpcomm/tuning/FINGERPRINT.toml (FINGERPRINT as `tpcomm probe`
    /// prints it). Missing folders are made.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Make the table from GPU bench JSON files (`tpcomm bench --json` run on
    /// GPUs; older `tpcomm gpu-bench --json` files too) instead of measuring;
    /// needs no GPU.
    #[arg(long, value_name = "FILE", num_args = 1..)]
    from_bench: Vec<PathBuf>,
    /// With --from-bench: the machine class of the measurement.
    #[arg(long, default_value = "nvlink")]
    class: String,
    /// With --from-bench: the fingerprint to key the table by (none: a class default).
    #[arg(long)]
    fingerprint: Option<String>,
    /// How ranks run while measuring: processes (CUDA IPC) or threads (peer access).
    #[arg(long, value_enum, default_value_t = gpu_bench::Launch::Threads)]
    launch: gpu_bench::Launch,
    /// GPU transport measured: auto (what the machine needs: cuda where every
    /// GPU reaches every other peer-to-peer, else host), cuda, or host. Rows
    /// are keyed by candidate (cuda:*, host:*, nccl); NCCL is measured in this
    /// run's environment (e.g. NCCL_P2P_DISABLE=1 for a host-transport table).
    #[arg(long, default_value = "auto")]
    transport: GpuTransport,
    /// Number of GPUs (default: every GPU, at most 8).
    #[arg(long)]
    gpus: Option<usize>,
    /// Element type measured.
    #[arg(long, default_value = "bf16")]
    dtype: DType,
    /// Smallest message (a whole number of --dtype elements).
    #[arg(long, default_value = "1KiB")]
    min: ByteSize,
    /// Largest message (a whole number of --dtype elements): the communicator's
    /// buffer size.
    #[arg(long, default_value = "64MiB")]
    max: ByteSize,
    /// Calls per timed repetition (bounds the time per point).
    #[arg(long, default_value_t = 10)]
    iters: usize,
    /// Timed repetitions per point; the median is kept.
    #[arg(long, default_value_t = 7)]
    reps: usize,
    /// Also write the raw measurement (`tpcomm bench` JSON) here (its directory
    /// must exist).
    #[arg(long)]
    json: Option<PathBuf>,
}

pub fn run(args: TuneArgs) -> i32 {
    // Refused before anything is measured, and with the usage status.
    crate::checks::exit_status("tune", check(&args), || run_inner(&args))
}

/// The options, before any work: where the table goes (its missing folders
/// are made, so the nearest one that exists must be writable) and, when
/// measuring, the GPU bench's checks in tune's words (sizes, `--json`).
fn check(args: &TuneArgs) -> Result<()> {
    if let Some(out) = args.out.as_deref().filter(|p| p.as_os_str() != "-") {
        crate::checks::output_tree("--out", out, false)?;
    }
    if args.from_bench.is_empty() {
        gpu_bench::validate_as(&bench_args(args)?, &gpu_bench::TUNE)?;
    }
    Ok(())
}

/// Rows of a measurement as table entries; rows with wrong elements are not
/// candidates (a fast wrong answer is no answer), and are counted.
fn measured(transport: &str, rows: &[Row]) -> Result<(Vec<Measured>, usize)> {
    let mut out = Vec::new();
    let mut wrong = 0;
    for r in rows {
        if r.wrong > 0 {
            wrong += 1;
            continue;
        }
        let Some(c) = gpu_bench::row_candidate(transport, &r.algo) else {
            continue;
        };
        out.push(Measured {
            dtype: r.dtype.parse()?,
            mode: r.mode.parse()?,
            bytes: r.bytes,
            candidate: c,
            time_us: r.time_us,
        });
    }
    Ok((out, wrong))
}

fn write_table(table: &Table, out: &Path) -> Result<()> {
    let text = table.to_toml();
    // What is written must read back: a bug here must not leave a table the
    // library then refuses.
    Table::parse(&text, &out.display().to_string())?;
    if out.as_os_str() == "-" {
        print!("{text}");
        return Ok(());
    }
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::io(format!("create {}", dir.display()), e))?;
    }
    std::fs::write(out, text).map_err(|e| Error::io(format!("write {}", out.display()), e))?;
    eprintln!(
        "tpcomm tune: wrote {} ({} rows)",
        out.display(),
        table.rows.len()
    );
    Ok(())
}

fn from_bench(args: &TuneArgs) -> Result<()> {
    let class = crate::machine::parse_class(&args.class)?;
    let mut all = Vec::new();
    let mut header: Option<Table> = None;
    for path in &args.from_bench {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::io(format!("read {}", path.display()), e))?;
        let doc: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| Error::invalid(format!("bench JSON {}", path.display()), e.to_string()))?;
        let (m, wrong, h) = read_bench(&doc, args, class, path)?;
        if wrong > 0 {
            eprintln!(
                "tpcomm tune: {}: {wrong} rows with wrong results left out",
                path.display()
            );
        }
        all.extend(m);
        header.get_or_insert(h);
    }
    let header = header.ok_or_else(|| Error::invalid("--from-bench", "no file given"))?;
    let table = Table::from_measured(header, &all);
    let out = args
        .out
        .clone()
        .ok_or_else(|| Error::invalid("--out", "needed with --from-bench"))?;
    write_table(&table, &out)
}

/// One bench file's rows as table entries, and the table header it implies.
/// Reads both shapes: `tpcomm bench`'s (`world_size`, `versions.driver`,
/// `versions.nccl`, `device: "gpu"`) and older gpu-bench files (`world`,
/// `driver`, `nccl` at the top of meta).
fn read_bench(
    doc: &serde_json::Value,
    args: &TuneArgs,
    class: topology::MachineClass,
    path: &Path,
) -> Result<(Vec<Measured>, usize, Table)> {
    let bad = |why: String| Error::invalid(format!("bench JSON {}", path.display()), why);
    let meta = &doc["meta"];
    if meta["device"] == "cpu" || (meta["world_size"].is_u64() && meta["device"].is_null()) {
        return Err(bad(
            "it measured CPU ranks; tuning tables come from a GPU run (`tpcomm bench --device gpu --json`)".into(),
        ));
    }
    let rows: Vec<Row> =
        serde_json::from_value(doc["rows"].clone()).map_err(|e| bad(e.to_string()))?;
    let transport = meta["transport"].as_str().unwrap_or("cuda");
    let (m, wrong) = measured(transport, &rows)?;
    let s = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
    let new_shape = meta["world_size"].is_u64();
    let (world, driver, nccl, tool) = if new_shape {
        (
            &meta["world_size"],
            &meta["versions"]["driver"],
            &meta["versions"]["nccl"],
            "tpcomm bench --device gpu",
        )
    } else {
        (
            &meta["world"],
            &meta["driver"],
            &meta["nccl"],
            "tpcomm gpu-bench",
        )
    };
    let header = Table {
        fingerprint: args.fingerprint.clone(),
        machine_class: class,
        world: world.as_u64().unwrap_or(2) as usize,
        gpu: meta["gpus"][0].as_str().unwrap_or_default().to_string(),
        driver: s(driver),
        nccl: nccl.as_str().map(str::to_string),
        measured: format!(
            "{tool} --launch {} ({} reps x {} calls, median), from {}",
            s(&meta["launch"]),
            meta["reps"],
            meta["iters"],
            path.file_name().unwrap_or_default().to_string_lossy()
        ),
        rows: Vec::new(),
    };
    Ok((m, wrong, header))
}

/// The GPU bench arguments a measuring tune runs with: every candidate
/// (one-shot, two-shot, nccl), eager and graph, with midpoints; launch,
/// transport, GPUs, element type, sizes, calls, repetitions and JSON from
/// tune's options; the rest the bench's defaults. Built directly (tests hold
/// it equal to the bench's own parse of the command line it once built).
fn bench_args(args: &TuneArgs) -> Result<GpuBenchArgs> {
    let mut a = GpuBenchArgs::defaults();
    a.launch = Some(args.launch);
    a.transport = args.transport;
    a.gpus = args.gpus;
    a.dtype = args.dtype;
    a.min = args.min;
    a.max = args.max;
    a.algos = ["one-shot", "two-shot", "nccl"].map(String::from).to_vec();
    a.modes = ["eager", "graph"].map(String::from).to_vec();
    a.iters = Some(args.iters);
    a.reps = args.reps;
    a.json = args.json.clone();
    a.midpoints = true;
    Ok(a)
}

fn run_inner(args: &TuneArgs) -> Result<()> {
    if !args.from_bench.is_empty() {
        return from_bench(args);
    }
    let (machine, topo) = crate::machine::this_machine(None)?;
    let bench_args = bench_args(args)?;
    let started = std::time::Instant::now();
    let (bench_args, world, outs): (_, usize, Vec<RankOut>) =
        gpu_bench::measure(bench_args, &gpu_bench::TUNE)?;
    // The transport the communicators ended up on (never auto).
    let transport = outs[0].info.transport.clone();
    let (m, wrong) = measured(&transport, &outs[0].rows)?;
    if wrong > 0 {
        eprintln!("tpcomm tune: {wrong} rows with wrong results left out of the table");
    }
    let info = &outs[0].info;
    let header = Table {
        fingerprint: Some(machine.fingerprint.clone()),
        machine_class: machine.class,
        world,
        gpu: info.gpu.clone(),
        driver: machine.driver.clone().unwrap_or_default(),
        nccl: info.nccl.clone(),
        measured: format!(
            "tpcomm tune --launch {} --transport {transport} ({} reps x {} calls, median, CUDA events on rank 0), {:.0} s",
            args.launch.name(),
            args.reps,
            args.iters,
            started.elapsed().as_secs_f64()
        ),
        rows: Vec::new(),
    };
    let table = Table::from_measured(header, &m);
    let out = match &args.out {
        Some(p) => p.clone(),
        None => select::default_table_path(&machine.fingerprint).ok_or_else(|| {
            Error::invalid(
                "--out",
                "neither XDG_CONFIG_HOME nor HOME is set; give --out",
            )
        })?,
    };
    eprintln!(
        "tpcomm tune: machine {} (class {}, {} GPUs)",
        machine.fingerprint,
        machine.class,
        topo.gpus.len()
    );
    // Keep the GPU bench's own report too (and its JSON), so the numbers are seen.
    gpu_bench::report_rows(&bench_args, world, outs)?;
    write_table(&table, &out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use tpcomm::select::Candidate;
    use tpcomm::Algo;

    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        args: TuneArgs,
    }

    fn parse(argv: &[&str]) -> std::result::Result<TuneArgs, clap::Error> {
        Cmd::try_parse_from(std::iter::once("tune").chain(argv.iter().copied())).map(|c| c.args)
    }

    /// The bench arguments as they were made before tune built them itself:
    /// an argv, parsed by the GPU bench's own clap definition.
    fn round_trip(args: &TuneArgs) -> GpuBenchArgs {
        let mut argv: Vec<String> = vec![
            "--launch".into(),
            args.launch.name().into(),
            "--dtype".into(),
            args.dtype.name().into(),
            "--min".into(),
            args.min.bytes().to_string(),
            "--max".into(),
            args.max.bytes().to_string(),
            "--algos".into(),
            "one-shot,two-shot,nccl".into(),
            "--modes".into(),
            "eager,graph".into(),
            "--iters".into(),
            args.iters.to_string(),
            "--reps".into(),
            args.reps.to_string(),
            "--midpoints".into(),
            "--transport".into(),
            args.transport.name().into(),
        ];
        if let Some(g) = args.gpus {
            argv.extend(["--gpus".into(), g.to_string()]);
        }
        if let Some(j) = &args.json {
            argv.extend(["--json".into(), j.display().to_string()]);
        }
        #[derive(Parser)]
        struct Gpu {
            #[command(flatten)]
            args: GpuBenchArgs,
        }
        Gpu::try_parse_from(std::iter::once("gpu-bench".to_string()).chain(argv))
            .unwrap()
            .args
    }

    #[test]
    fn the_bench_arguments_are_those_the_argv_round_trip_gave() {
        let cases: &[&[&str]] = &[
            &[],
            &["--launch", "procs"],
            &["--launch", "processes"],
            &["--launch", "threads", "--transport", "cuda"],
            &["--transport", "host", "--gpus", "4"],
            &["--dtype", "f32", "--min", "4KiB", "--max", "1GiB"],
            &["--dtype", "f16", "--min", "1", "--max", "1.5MiB"],
            &["--iters", "3", "--reps", "1"],
            &["--json", "raw.json", "--out", "t.toml"],
            &[
                "--launch",
                "procs",
                "--transport",
                "auto",
                "--gpus",
                "8",
                "--dtype",
                "bf16",
                "--min",
                "64k",
                "--max",
                "256MiB",
                "--iters",
                "20",
                "--reps",
                "9",
                "--json",
                "/tmp/tune/raw.json",
            ],
        ];
        for argv in cases {
            let a = parse(argv).unwrap();
            assert_eq!(
                format!("{:?}", bench_args(&a).unwrap()),
                format!("{:?}", round_trip(&a)),
                "{argv:?}"
            );
        }
    }

    #[test]
    fn an_unknown_launch_is_an_error_naming_it() {
        // Refused while parsing, with the one spelling every command shows.
        let Err(e) = parse(&["--launch", "fibers"]) else {
            panic!("--launch fibers was accepted");
        };
        let m = e.to_string();
        assert!(m.contains("--launch") && m.contains("fibers"), "{m}");
        assert!(m.contains("processes") && m.contains("threads"), "{m}");
    }

    /// tune counts ranks with --gpus and has no --ranks: a count out of
    /// range is refused (before any GPU work) naming --gpus.
    #[test]
    fn a_gpu_count_out_of_range_is_refused_naming_tunes_own_flag() {
        for bad in ["1", "9"] {
            let a = bench_args(&parse(&["--gpus", bad]).unwrap()).unwrap();
            let m = gpu_bench::measure(a, &gpu_bench::TUNE)
                .map(|_| ())
                .unwrap_err()
                .to_string();
            assert!(
                m.contains("--gpus") && m.contains(bad) && !m.contains("--ranks"),
                "{m}"
            );
        }
    }

    #[test]
    fn the_transport_defaults_to_auto_and_reaches_the_bench() {
        let a = parse(&[]).unwrap();
        assert_eq!(a.transport, GpuTransport::Auto);
        for (given, want) in [
            ("auto", GpuTransport::Auto),
            ("cuda", GpuTransport::Cuda),
            ("host", GpuTransport::Host),
        ] {
            let b = bench_args(&parse(&["--transport", given]).unwrap()).unwrap();
            assert_eq!(b.transport, want);
            // Still every candidate, eager and graph, with midpoints.
            assert_eq!(b.algos, ["one-shot", "two-shot", "nccl"]);
            assert_eq!(b.modes, ["eager", "graph"]);
            assert!(b.midpoints);
        }
        assert!(parse(&["--transport", "nvlink"]).is_err());
    }

    fn row(algo: &str, t: f64, wrong: usize) -> Row {
        serde_json::from_value(serde_json::json!({
            "bytes": 1024, "count": 512, "dtype": "bf16", "algo": algo, "mode": "graph",
            "time_us": t, "algbw_gbps": 1.0, "busbw_gbps": 1.0, "wrong": wrong
        }))
        .unwrap()
    }

    #[test]
    fn host_runs_become_host_rows_and_auto_or_wrong_rows_are_left_out() {
        let rows = [
            row("host-delta", 4.0, 0),
            row("host-chunked", 9.0, 0),
            row("nccl", 20.0, 0),
            row("auto:host:one-shot", 4.1, 0),
            row("host-chunked", 1.0, 3),
        ];
        let (m, wrong) = measured("host", &rows).unwrap();
        assert_eq!(wrong, 1);
        let got: Vec<(Candidate, f64)> = m.iter().map(|x| (x.candidate, x.time_us)).collect();
        assert_eq!(
            got,
            vec![
                (Candidate::host(Algo::OneShot), 4.0),
                (Candidate::host(Algo::TwoShot), 9.0),
                (Candidate::NCCL, 20.0),
            ]
        );
    }
}
