//! `tpcomm bench`: all-reduce timings in the columns nccl-tests users know,
//! every result checked against a float64 reference.
//!
//! With `--launch processes` (the default, as tensor parallelism runs) the
//! command re-runs itself once per rank with the same arguments; the
//! environment variable below tells a child which rank it is and where to
//! meet. Rank 0 sends its rows to the parent as JSON lines on stdout.

pub(crate) mod coll;
pub(crate) mod columns;
mod measure;
mod timed;
pub(crate) mod unified;

use crate::checks;
use crate::workers::{Supervisor, POLL};
use clap::{Args, ValueEnum};
use measure::{worker, worker_process};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;
use tpcomm::report::{utc_now, BenchMeta, BenchReport, BenchRow, Machine};
use tpcomm::{Algo, ByteSize, DType, JobKey, ReduceOp};

/// `tpcomm::env::BENCH_WORKER`, spelled out for the messages.
pub(crate) const WORKER_ENV: &str = "TPCOMM_BENCH_WORKER";
/// Most timed calls (`--iters`) and untimed calls (`--warmup`) per size.
pub(crate) const MAX_CALLS: usize = 1_000_000;

/// Most CPU ranks one bench runs (the host transport's own limit).
const MAX_RANKS: usize = 64;

pub use crate::workers::Launch;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum AlgoChoice {
    Auto,
    OneShot,
    TwoShot,
    /// one-shot and two-shot, one row each.
    All,
}

#[derive(Args, Clone, Debug)]
pub struct BenchArgs {
    /// Collective to time (see `coll.rs` for the size and busbw conventions).
    #[arg(long, value_enum, default_value_t = coll::Coll::AllReduce)]
    pub(crate) coll: coll::Coll,
    /// Number of ranks.
    #[arg(long, default_value_t = 2)]
    ranks: usize,
    /// How ranks run.
    #[arg(long, value_enum, default_value_t = Launch::Processes)]
    launch: Launch,
    /// Smallest message (sizes double up to --max-bytes).
    #[arg(long, default_value = "1KiB")]
    min_bytes: ByteSize,
    /// Largest message.
    #[arg(long, default_value = "64MiB")]
    max_bytes: ByteSize,
    /// Element type: f32, f16, bf16.
    #[arg(long, default_value = "f32")]
    dtype: DType,
    /// Reduce op: sum, max, min.
    #[arg(long, default_value = "sum")]
    op: ReduceOp,
    /// Algorithm(s) to time.
    #[arg(long, value_enum, default_value_t = AlgoChoice::All)]
    algo: AlgoChoice,
    /// Timed calls per size (default: from 1000 for small sizes down to 20
    /// for the largest, about 2 GiB of traffic per size).
    #[arg(long)]
    iters: Option<usize>,
    /// Untimed calls before timing.
    #[arg(long, default_value_t = 5)]
    warmup: usize,
    /// Largest message reduced in one piece (fixes the segment size).
    #[arg(long, default_value = "8MiB")]
    max_message: ByteSize,
    /// Most bytes one epoch carries (larger messages are pipelined in pieces).
    #[arg(long, default_value = "8MiB")]
    piece: ByteSize,
    /// Also write the results as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Where ranks meet (default: a fresh temporary directory).
    #[arg(long)]
    rendezvous: Option<PathBuf>,
    /// Bound on every wait, e.g. "5s", "500ms".
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    timeout: Duration,
}

pub(crate) fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, scale) = if let Some(n) = s.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1.0)
    } else {
        (s, 1.0)
    };
    match num.trim().parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() && v * scale < 86_400.0 => {
            Ok(Duration::from_secs_f64(v * scale))
        }
        _ => Err(format!(
            "{s:?} is not a duration above zero and under one day (examples: \"5s\", \"500ms\", \"2.5\")"
        )),
    }
}

impl BenchArgs {
    /// The arguments with nothing given: the clap defaults above, spelt out
    /// (`tpcomm bench` starts from these; its tests hold them equal).
    fn defaults() -> Self {
        BenchArgs {
            coll: coll::Coll::AllReduce,
            ranks: 2,
            launch: Launch::Processes,
            min_bytes: ByteSize::kib(1),
            max_bytes: ByteSize::mib(64),
            dtype: DType::F32,
            op: ReduceOp::Sum,
            algo: AlgoChoice::All,
            iters: None,
            warmup: 5,
            max_message: ByteSize::mib(8),
            piece: ByteSize::mib(8),
            json: None,
            rendezvous: None,
            timeout: Duration::from_secs(10),
        }
    }

    fn validate(&self) -> Result<(), String> {
        if !(2..=MAX_RANKS).contains(&self.ranks) {
            return Err(format!(
                "--ranks {}: an all-reduce needs at least 2 ranks, and this bench runs at most {MAX_RANKS}",
                self.ranks
            ));
        }
        checks::size_range(
            ("--min-bytes", self.min_bytes),
            ("--max-bytes", self.max_bytes),
            self.dtype,
        )
        .map_err(|e| e.to_string())?;
        if self.max_bytes > ByteSize::gib(4) {
            return Err(format!(
                "--max-bytes {} is above the 4 GiB this benchmark allows",
                self.max_bytes
            ));
        }
        if self.iters == Some(0) {
            return Err("--iters must be at least 1".into());
        }
        if let Some(n) = self.iters.filter(|&n| n > MAX_CALLS) {
            return Err(format!(
                "--iters {n} is above the {MAX_CALLS} timed calls per size this benchmark allows"
            ));
        }
        if self.warmup > MAX_CALLS {
            return Err(format!(
                "--warmup {} is above the {MAX_CALLS} untimed calls per size this benchmark allows",
                self.warmup
            ));
        }
        // What each rank's communicator would refuse, refused once here.
        checks::host_sizes(self.ranks, self.max_message, self.piece).map_err(|e| e.to_string())?;
        if let Some(p) = &self.json {
            checks::output_file("--json", p).map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// About how much memory the whole run takes at its largest size: per
    /// rank, every rank's input (each rank rebuilds them all to check its
    /// result), its output and a float64 reference (value and scale per
    /// element); plus the shared segment, about 2 x ranks x --max-message.
    fn memory_needed(&self) -> u64 {
        let b = self.max_bytes.bytes();
        let elems = b / self.dtype.size() as u64;
        let per_rank = b
            .saturating_mul(self.ranks as u64 + 1)
            .saturating_add(elems.saturating_mul(16));
        let segment = self
            .max_message
            .bytes()
            .saturating_mul(2 * self.ranks as u64);
        per_rank
            .saturating_mul(self.ranks as u64)
            .saturating_add(segment)
    }

    /// Fails when the run would not fit the memory available now.
    fn check_memory(&self, available: Option<ByteSize>) -> Result<(), String> {
        let needed = self.memory_needed();
        match available {
            Some(a) if needed > a.bytes() => Err(format!(
                "--max-bytes {} and --max-message {} with --ranks {} need about {} of memory (each rank holds every rank's input, its output and a float64 reference; the shared segment about 2 x ranks x --max-message) but {} is available; lower --max-bytes, --max-message or --ranks",
                self.max_bytes,
                self.max_message,
                self.ranks,
                ByteSize::b(needed),
                a
            )),
            _ => Ok(()),
        }
    }

    fn algos(&self) -> Vec<Algo> {
        if self.coll != coll::Coll::AllReduce {
            // The other collectives have one algorithm on the host transport.
            return vec![Algo::Auto];
        }
        match self.algo {
            AlgoChoice::Auto => vec![Algo::Auto],
            AlgoChoice::OneShot => vec![Algo::OneShot],
            AlgoChoice::TwoShot => vec![Algo::TwoShot],
            AlgoChoice::All => Algo::CONCRETE.to_vec(),
        }
    }

    /// Powers of two from min to max (max included even when not a power of two).
    fn sizes(&self) -> Vec<u64> {
        let mut v = Vec::new();
        let mut b = self.min_bytes.bytes();
        while b < self.max_bytes.bytes() {
            v.push(b);
            b = b.saturating_mul(2);
        }
        v.push(self.max_bytes.bytes());
        v
    }

    fn iters_for(&self, bytes: u64) -> usize {
        self.iters
            .unwrap_or_else(|| ((2u64 << 30) / bytes.max(1)).clamp(20, 1000) as usize)
    }
}

/// Entry point of `tpcomm bench` (parent or worker).
pub fn run(args: BenchArgs) -> Result<(), String> {
    args.validate()?;
    if let Some(spec) = tpcomm::env::BENCH_WORKER.checked_value() {
        return worker_process(&args, &spec);
    }
    args.check_memory(tpcomm::cpu::available_memory())?;
    if let Some(w) = checks::cores_warning(args.ranks, checks::cores()) {
        eprintln!("tpcomm bench: {w}");
    }
    // Removed when this returns, and also when a closed stdout unwinds it (pipe.rs).
    let dir = tempdir()?;
    let rendezvous = args
        .rendezvous
        .clone()
        .unwrap_or_else(|| dir.path().to_path_buf());
    let nonce: u64 = rand::random();
    // One fresh key per run: its ranks find each other and no other run's.
    let key = JobKey::random();
    let result = match args.launch {
        Launch::Processes => parent_processes(&args, &rendezvous, nonce, key),
        Launch::Threads => parent_threads(&args, &rendezvous, nonce, key),
    };
    drop(dir);
    let rows = result?;
    let wrong: u64 = rows.iter().map(|r| r.wrong).sum();
    println!("{}", summary(&args, &rows, wrong));
    if let Some(path) = &args.json {
        let report = BenchReport {
            meta: meta(&args),
            rows,
        };
        let text = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
        std::fs::write(path, text + "\n")
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    if wrong > 0 {
        return Err(format!(
            "{wrong} elements were wrong (see the #wrong column)"
        ));
    }
    Ok(())
}

/// The closing line: what was checked and how much of it was wrong.
fn summary(args: &BenchArgs, rows: &[BenchRow], wrong: u64) -> String {
    // Output elements over all ranks: a reduce-scatter's row counts its
    // whole input, of which each rank gets one block.
    let per_rank = |r: &BenchRow| match args.coll {
        coll::Coll::ReduceScatter => r.count / args.ranks as u64,
        _ => r.count,
    };
    let elements: u64 = rows.iter().map(|r| per_rank(r) * args.ranks as u64).sum();
    format!(
        "# checked {} {}s ({} sizes x {} algorithm(s), {} ranks, {} {}) against {}: {} of {} output elements wrong",
        rows.len(),
        args.coll.name(),
        args.sizes().len(),
        args.algos().len(),
        args.ranks,
        args.dtype,
        args.coll.op_label(args.op),
        match args.coll {
            coll::Coll::AllReduce | coll::Coll::ReduceScatter => "a float64 reference",
            _ => "the inputs, bit for bit",
        },
        wrong,
        elements
    )
}

fn meta(args: &BenchArgs) -> BenchMeta {
    BenchMeta {
        machine: Machine::this(),
        cores: std::thread::available_parallelism().map_or(0, |n| n.get()),
        date: utc_now(),
        versions: [("tpcomm".to_string(), env!("CARGO_PKG_VERSION").to_string())].into(),
        transport: "host".into(),
        world_size: args.ranks,
        launch: args.launch.name().into(),
        device: Some("cpu".into()),
        gpus: None,
        arch: None,
        iters: None,
        reps: None,
        rotate: None,
        timing: None,
        shared_gpu: None,
    }
}

fn tempdir() -> Result<crate::pipe::TempDir, String> {
    let d = std::env::temp_dir().join(format!(
        "tpcomm-bench-{}-{:08x}",
        std::process::id(),
        rand::random::<u32>()
    ));
    std::fs::create_dir(&d).map_err(|e| format!("cannot create {}: {e}", d.display()))?;
    Ok(crate::pipe::TempDir::adopt(d))
}

/// Prints the table as rows arrive, with a progress bar on stderr.
struct Table {
    bar: indicatif::ProgressBar,
    rows: Vec<BenchRow>,
}

impl Table {
    fn new(args: &BenchArgs) -> Self {
        let total = (args.sizes().len() * args.algos().len()) as u64;
        let bar = indicatif::ProgressBar::new(total);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} [{elapsed}] {bar:30} {pos}/{len} {msg}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar.set_message(format!("{} ranks ({:?})", args.ranks, args.launch).to_lowercase());
        println!(
            "# tpcomm bench (cpu): {}, host transport, {} ranks as {}, {} {}, timeout {:?}",
            args.coll.name(),
            args.ranks,
            format!("{:?}", args.launch).to_lowercase(),
            args.dtype,
            args.coll.op_label(args.op),
            args.timeout
        );
        println!("{}", columns::header());
        Table {
            bar,
            rows: Vec::new(),
        }
    }

    fn add(&mut self, r: BenchRow) {
        self.bar.suspend(|| println!("{}", columns::line(&r)));
        self.bar.inc(1);
        self.rows.push(r);
    }

    fn finish(self) -> Vec<BenchRow> {
        self.bar.finish_and_clear();
        self.rows
    }
}

fn parent_processes(
    args: &BenchArgs,
    rendezvous: &std::path::Path,
    nonce: u64,
    key: JobKey,
) -> Result<Vec<BenchRow>, String> {
    let exe = std::env::current_exe()
        .map_err(|e| format!("cannot find this program to start ranks: {e}"))?;
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let mut kids = Vec::new();
    for rank in 0..args.ranks {
        let child = Command::new(&exe)
            .args(&argv)
            .env(
                WORKER_ENV,
                format!("{rank} {nonce} {}", rendezvous.display()),
            )
            .env(tpcomm::meet::JOB_KEY_ENV, key.to_hex())
            .stdout(if rank == 0 {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("cannot start rank {rank} ({}): {e}", exe.display()));
        match child {
            Ok(c) => kids.push(c),
            Err(e) => {
                // Dropping the supervisor ends the ranks already started.
                drop(Supervisor::new(kids, args.timeout));
                return Err(e);
            }
        }
    }
    // A stopped rank is given the ranks' own timeout: by then its peers
    // have timed out and failed anyway.
    let mut ranks = Supervisor::new(kids, args.timeout);
    let out = ranks
        .child_mut(0)
        .and_then(|k| k.stdout.take())
        .ok_or("rank 0's output is not connected")?;
    // Rank 0's rows arrive on a thread of their own, so the parent keeps
    // watching every rank while it waits for them.
    let (tx, rx) = std::sync::mpsc::channel::<BenchRow>();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(|l| l.ok()) {
            if let Ok(row) = serde_json::from_str::<BenchRow>(&line) {
                let _ = tx.send(row);
            }
        }
    });
    let mut table = Table::new(args);
    let outcome = loop {
        match rx.recv_timeout(POLL) {
            Ok(row) => table.add(row),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break ranks.wait(),
        }
        match ranks.poll() {
            Ok(false) => {}
            done => break done.map(|_| ()),
        }
    };
    // Every rank has exited or been ended, so rank 0's output is closed.
    let _ = reader.join();
    for row in rx.try_iter() {
        table.add(row);
    }
    let rows = table.finish();
    outcome.map_err(|why| format!("benchmark ranks failed: {why} (their errors are above)"))?;
    Ok(rows)
}

fn parent_threads(
    args: &BenchArgs,
    rendezvous: &std::path::Path,
    nonce: u64,
    key: JobKey,
) -> Result<Vec<BenchRow>, String> {
    let (tx, rx) = std::sync::mpsc::channel::<BenchRow>();
    let mut table = Table::new(args);
    let results: Vec<Result<(), String>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..args.ranks)
            .map(|rank| {
                let tx = tx.clone();
                s.spawn(move || {
                    worker(args, rank, rendezvous, nonce, Some(key), &mut |row| {
                        tx.send(row).is_ok()
                    })
                })
            })
            .collect();
        drop(tx);
        for row in rx {
            table.add(row);
        }
        hs.into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("a rank panicked".into())))
            .collect()
    });
    let rows = table.finish();
    let errors: Vec<String> = results
        .into_iter()
        .enumerate()
        .filter_map(|(r, e)| e.err().map(|e| format!("rank {r}: {e}")))
        .collect();
    if !errors.is_empty() {
        return Err(errors.join("\n"));
    }
    Ok(rows)
}
