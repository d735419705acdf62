//! tpcomm-conformance: loads the drop-in NCCL (`libtpcomm_nccl.so`) by its C API through
//! dlopen, as an NCCL program nobody here wrote would, and runs every pattern at the chosen
//! worlds as threads of one process and as processes, each case a supervised child process.

mod cases;
mod reference;
mod supervise;
mod sys;

use cases::{Body, Pattern, Rank, Verdict};
use clap::Parser;
use std::collections::BTreeMap;
use std::io::Write;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};
use supervise::Status;

const HELP: &str = "\
Each case (pattern x world x mode) runs as a child process group with a wall-clock limit:
a case that does not finish is killed and reported HANG, one that dies by a signal CRASH.
Children get TPCOMM_TIMEOUT_S=10 unless it is set, so the drop-in's own waits end first.

Every rank uses GPU (rank % device count); on one GPU all ranks share it. Inputs are
drawn fresh per case from the seed printed at the start (never zeros) and every output
element is checked against a CPU reference (float64 for floating types, with a stated
tolerance per type; exact for integers and for data movement).

Modes: `threads` runs every rank as a thread of one process (one CUDA context per GPU);
`procs` runs every rank as a process. Several processes on one GPU need the CUDA MPS
daemon, which this program does not start:

  export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
  mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
  nvidia-cuda-mps-control -d          # start; `echo quit | nvidia-cuda-mps-control` stops it

Typical runs (ranks sharing one GPU need the drop-in to serve them itself):
  TPCOMM_STANDALONE=1 tpcomm-conformance --modes threads
  TPCOMM_STANDALONE=1 tpcomm-conformance --worlds 2,4,8 --only 'allreduce.*,sendrecv.*'

Output: one line per case, `PASS|FAIL|HANG|CRASH|SKIP <case> world=<n> mode=<m> <detail>`,
then a table (patterns x worlds; one letter per mode: P F H C S, - not run) and totals.
Exit status 0 only when every case that ran passed (skips allowed).";

#[derive(Parser)]
#[command(name = "tpcomm-conformance", about = "Conformance suite for the drop-in NCCL (libtpcomm_nccl.so)", after_help = HELP)]
struct Args {
    /// The library under test, opened with dlopen.
    #[arg(long, default_value = "target/release/libtpcomm_nccl.so")]
    lib: String,
    /// World sizes to run, comma separated.
    #[arg(long, default_value = "1,2,3,4,5,6,7,8", value_delimiter = ',')]
    worlds: Vec<usize>,
    /// Modes to run: threads, procs.
    #[arg(long, default_value = "threads,procs", value_delimiter = ',')]
    modes: Vec<String>,
    /// Only patterns matching one of these globs (comma separated; * and ?).
    #[arg(long)]
    only: Option<String>,
    /// Print the pattern names and exit.
    #[arg(long)]
    list: bool,
    /// Wall-clock limit of one case, seconds.
    #[arg(long, default_value_t = 60.0)]
    case_timeout: f64,
    /// Start no new case after this many seconds (the rest are SKIP budget).
    #[arg(long)]
    budget: Option<f64>,
    /// Seed of the inputs (default: from the clock; printed).
    #[arg(long)]
    seed: Option<u64>,
    /// Also write every result to this JSON file.
    #[arg(long)]
    json: Option<String>,
    /// Bytes (MiB) of the "past the creation-time buffer" count: just past the
    /// drop-in's default TPCOMM_MAX_BYTES (16 MiB); keep it past the value the
    /// cases run with. Larger costs CPU time for the reference check: a
    /// reduction case checks 12 calls of this count (checking one 17 MiB bf16
    /// output of 2 ranks took 0.34 s on one core of a 2-core build machine).
    #[arg(long, default_value_t = 17)]
    big_mib: usize,
    /// Copy the cases' stderr (progress, the drop-in's log) through.
    #[arg(long)]
    verbose: bool,
    #[arg(long, hide = true)]
    run_case: Option<String>,
    #[arg(long, hide = true)]
    rank_proc: Option<String>,
    #[arg(long, hide = true, default_value_t = 1)]
    world: usize,
    #[arg(long, hide = true, default_value_t = 0)]
    rank: usize,
    #[arg(long, hide = true, default_value = "threads")]
    mode: String,
    #[arg(long, hide = true)]
    id: Option<String>,
}

fn glob(p: &[u8], s: &[u8]) -> bool {
    match (p.first(), s.first()) {
        (None, None) => true,
        (Some(b'*'), _) => glob(&p[1..], s) || (!s.is_empty() && glob(p, &s[1..])),
        (Some(b'?'), Some(_)) => glob(&p[1..], &s[1..]),
        (Some(a), Some(b)) if a == b => glob(&p[1..], &s[1..]),
        _ => false,
    }
}

fn selected<'a>(all: &'a [Pattern], only: &Option<String>) -> Vec<&'a Pattern> {
    all.iter()
        .filter(|p| match only {
            None => !p.hidden,
            Some(g) => g
                .split(',')
                .any(|g| glob(g.trim().as_bytes(), p.name.as_bytes())),
        })
        .collect()
}

fn limit() -> Duration {
    let t = std::env::var("TPCOMM_TIMEOUT_S")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|t| t.is_finite() && *t > 0.0 && *t < 1e6)
        .unwrap_or(10.0);
    Duration::from_secs_f64(t + 5.0)
}

fn hex(id: &[u8]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<sys::UniqueId> {
    let mut id = [0u8; 128];
    if s.len() != 256 {
        return None;
    }
    for (i, b) in id.iter_mut().enumerate() {
        *b = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(id)
}

fn selftest(what: &str) -> Verdict {
    match what {
        "hang" => loop {
            eprintln!("PROGRESS selftest: sleeping forever");
            std::thread::sleep(Duration::from_secs(3600));
        },
        "crash" => sys::die_by_signal(),
        "fail" => Err("selftest: a failing case".into()),
        _ => Ok("selftest: a passing case".into()),
    }
}

/// What every rank of a case is given.
#[derive(Clone, Copy)]
struct Given {
    world: usize,
    seed: u64,
    ids: [sys::UniqueId; 2],
    /// Bytes of the "past the creation-time buffer" count.
    big: usize,
    /// Ranks are processes (`procs`), not threads.
    own_process: bool,
}

/// One rank's body, in this thread.
fn rank_body(p: &Pattern, nccl: &sys::Nccl, rank: usize, g: Given) -> Verdict {
    let Given {
        world,
        seed,
        ids,
        big,
        own_process,
    } = g;
    match p.body {
        Body::SelfTest(w) => selftest(w),
        Body::OneThread(_) => Err("internal: one-thread pattern run per rank".into()),
        Body::PerRank(f) => {
            let ndev = sys::device_count()?;
            if ndev < 1 {
                return Err("no CUDA device".into());
            }
            let gpu = sys::Gpu::open(rank as i32 % ndev)?;
            let r = Rank {
                nccl: *nccl,
                rank,
                world,
                seed,
                id: ids[0],
                id2: ids[1],
                gpu,
                limit: limit(),
                big_bytes: big,
                own_process,
            };
            f(&r)
        }
    }
}

fn open_for_case(a: &Args) -> Result<sys::Nccl, String> {
    sys::Nccl::open(&a.lib)
}

/// The case process: runs every rank (threads) or starts a process per rank (procs).
fn run_case(a: &Args, p: &Pattern) -> (Status, String) {
    let seed = a.seed.unwrap_or(1);
    let big = a.big_mib << 20;
    let world = a.world;
    if let Body::SelfTest(w) = p.body {
        if a.mode == "threads" {
            return verdict(selftest(w));
        }
    }
    let nccl = match (p.body, open_for_case(a)) {
        (Body::SelfTest(_), _) => None,
        (_, Ok(n)) => Some(n),
        (_, Err(e)) => return (Status::Fail, e),
    };
    if let (Body::OneThread(f), Some(n)) = (p.body, nccl.as_ref()) {
        let ndev = match sys::device_count() {
            Ok(d) if d > 0 => d,
            Ok(_) => return (Status::Fail, "no CUDA device".into()),
            Err(e) => return (Status::Fail, e),
        };
        return verdict(f(n, world, seed, ndev, limit()));
    }
    let mut ids = [[0u8; 128]; 2];
    for id in ids.iter_mut() {
        *id = match nccl.as_ref().map(|n| n.unique_id()) {
            None => [0u8; 128],
            Some(Err(m)) => return (Status::Fail, format!("missing-symbol {m}")),
            Some(Ok((0, id))) => id,
            Some(Ok((c, _))) => return (Status::Fail, format!("ncclGetUniqueId returned {c}")),
        };
    }
    if a.mode == "threads" {
        let n = nccl.unwrap_or_else(unreachable_nccl);
        let results: Vec<Verdict> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..world)
                .map(|r| {
                    let g = Given {
                        world,
                        seed,
                        ids,
                        big,
                        own_process: false,
                    };
                    s.spawn(move || rank_body(p, &n, r, g))
                })
                .collect();
            hs.into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err("rank thread panicked".into()))
                })
                .collect()
        });
        return combine(results.into_iter().map(|v| (v, None)).collect());
    }
    // procs: one process per rank, in this case's process group.
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => return (Status::Fail, format!("cannot find this program: {e}")),
    };
    let mut kids = Vec::new();
    for r in 0..world {
        let mut c = Command::new(&exe);
        c.args([
            "--rank-proc",
            &p.name,
            "--lib",
            &a.lib,
            "--big-mib",
            &a.big_mib.to_string(),
        ])
        .args([
            "--world",
            &world.to_string(),
            "--rank",
            &r.to_string(),
            "--seed",
            &seed.to_string(),
            "--id",
            &format!("{}{}", hex(&ids[0]), hex(&ids[1])),
        ])
        .stdout(std::process::Stdio::piped());
        match c.spawn() {
            Ok(k) => kids.push(k),
            Err(e) => return (Status::Fail, format!("cannot start rank process {r}: {e}")),
        }
    }
    let mut results = Vec::new();
    for (r, k) in kids.into_iter().enumerate() {
        use std::os::unix::process::ExitStatusExt;
        match k.wait_with_output() {
            Ok(o) => {
                let text = String::from_utf8_lossy(&o.stdout).to_string();
                let line = text
                    .lines()
                    .rev()
                    .find_map(|l| l.strip_prefix("RANK ").map(str::to_string));
                let v = match (o.status.signal(), line) {
                    (Some(sig), _) => (
                        Err(format!("rank process {r} killed by signal {sig}")),
                        Some(Status::Crash),
                    ),
                    (None, Some(l)) => match l.split_once(' ').unwrap_or((&l, "")) {
                        ("PASS", d) => (Ok(d.to_string()), None),
                        ("SKIP", d) => (Ok(format!("SKIP:{d}")), None),
                        (_, d) => (Err(d.to_string()), None),
                    },
                    (None, None) => (
                        Err(format!(
                            "rank process {r} exited {} without a result",
                            o.status.code().unwrap_or(-1)
                        )),
                        None,
                    ),
                };
                results.push(v);
            }
            Err(e) => results.push((Err(format!("rank process {r}: {e}")), None)),
        }
    }
    combine(results)
}

fn unreachable_nccl() -> sys::Nccl {
    // Only self-tests run without the library, and they never reach here in threads mode.
    eprintln!("internal: no library opened");
    std::process::exit(70)
}

fn verdict(v: Verdict) -> (Status, String) {
    match v {
        Ok(d) if d.starts_with("SKIP:") => (
            Status::Skip,
            d.trim_start_matches("SKIP:").trim().to_string(),
        ),
        Ok(d) => (Status::Pass, d),
        Err(e) => (Status::Fail, e),
    }
}

/// Every rank's verdict into the case's: any crash, else any failure (naming the ranks).
fn combine(results: Vec<(Verdict, Option<Status>)>) -> (Status, String) {
    if let Some((i, (v, _))) = results
        .iter()
        .enumerate()
        .find(|(_, (_, s))| *s == Some(Status::Crash))
    {
        return (
            Status::Crash,
            format!("rank {i}: {}", v.clone().err().unwrap_or_default()),
        );
    }
    let fails: Vec<String> = results
        .iter()
        .enumerate()
        .filter_map(|(i, (v, _))| v.as_ref().err().map(|e| format!("rank {i}: {e}")))
        .collect();
    if !fails.is_empty() {
        let more = if fails.len() > 2 {
            format!(" (+{} more ranks)", fails.len() - 2)
        } else {
            String::new()
        };
        return (
            Status::Fail,
            format!("{}{more}", fails[..fails.len().min(2)].join(" | ")),
        );
    }
    match results.into_iter().next() {
        Some((v, _)) => verdict(v),
        None => (Status::Fail, "no ranks".into()),
    }
}

struct Row {
    case: String,
    world: usize,
    mode: String,
    status: Status,
    detail: String,
    seconds: f64,
}

fn main() -> ExitCode {
    let a = Args::parse();
    let all = cases::patterns();
    let find = |n: &str| all.iter().find(|p| p.name == n);
    if let Some(name) = &a.rank_proc {
        let Some(p) = find(name) else {
            return ExitCode::from(2);
        };
        let id = a.id.as_deref().unwrap_or("");
        let ids = [
            id.get(..256).and_then(unhex).unwrap_or([0u8; 128]),
            id.get(256..).and_then(unhex).unwrap_or([0u8; 128]),
        ];
        let v = match p.body {
            Body::SelfTest(w) => selftest(w),
            _ => match open_for_case(&a) {
                Ok(n) => {
                    // A rank of its own: captures in PyTorch's default (global) mode.
                    sys::set_global_capture(true);
                    let g = Given {
                        world: a.world,
                        seed: a.seed.unwrap_or(1),
                        ids,
                        big: a.big_mib << 20,
                        own_process: true,
                    };
                    rank_body(p, &n, a.rank, g)
                }
                Err(e) => Err(e),
            },
        };
        let (s, d) = verdict(v);
        println!("RANK {} {d}", s.word());
        return ExitCode::SUCCESS;
    }
    if let Some(name) = &a.run_case {
        let Some(p) = find(name) else {
            println!("RESULT FAIL unknown case {name}");
            return ExitCode::from(2);
        };
        let (s, d) = run_case(&a, p);
        println!("RESULT {} {d}", s.word());
        return ExitCode::SUCCESS;
    }
    let chosen = selected(&all, &a.only);
    if a.list {
        for p in &chosen {
            let note = if matches!(p.body, Body::OneThread(_)) {
                "  (threads mode only: one thread drives every rank)"
            } else {
                ""
            };
            println!("{}{note}", p.name);
        }
        return ExitCode::SUCCESS;
    }
    if chosen.is_empty() {
        eprintln!(
            "tpcomm-conformance: no pattern matches --only {:?}; see --list",
            a.only.as_deref().unwrap_or("")
        );
        return ExitCode::from(2);
    }
    if let Some(m) = a.modes.iter().find(|m| *m != "threads" && *m != "procs") {
        eprintln!("tpcomm-conformance: unknown mode {m:?}: use threads, procs");
        return ExitCode::from(2);
    }
    if let Some(w) = a.worlds.iter().find(|w| **w < 1 || **w > 64) {
        eprintln!("tpcomm-conformance: world {w} out of range (1..=64)");
        return ExitCode::from(2);
    }
    let needs_gpu = chosen.iter().any(|p| !matches!(p.body, Body::SelfTest(_)));
    if needs_gpu {
        if !sys::cuda_driver_present() {
            eprintln!("tpcomm-conformance: no CUDA driver (libcuda.so cannot be loaded): run on a machine with an NVIDIA GPU and driver");
            return ExitCode::from(2);
        }
        match sys::device_count() {
            Ok(n) if n > 0 => println!("# {n} CUDA device(s)"),
            Ok(_) => {
                eprintln!("tpcomm-conformance: the CUDA driver sees no device");
                return ExitCode::from(2);
            }
            Err(e) => {
                eprintln!("tpcomm-conformance: CUDA driver present but not usable: {e}");
                return ExitCode::from(2);
            }
        }
        match sys::Nccl::open(&a.lib) {
            Ok(n) => {
                let m = n.missing();
                println!(
                    "# library {} ({} NCCL functions missing{}{})",
                    a.lib,
                    m.len(),
                    if m.is_empty() { "" } else { ": " },
                    m.join(" ")
                );
            }
            Err(e) => {
                eprintln!("tpcomm-conformance: {e} (build it with `cargo build --release -p tpcomm-nccl`, or pass --lib)");
                return ExitCode::from(2);
            }
        }
    }
    let seed = a.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
    });
    println!(
        "# seed {seed} (rerun with --seed {seed}); case timeout {} s; TPCOMM_TIMEOUT_S={}",
        a.case_timeout,
        std::env::var("TPCOMM_TIMEOUT_S").unwrap_or_else(|_| "10 (set for the cases)".into())
    );
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("tpcomm-conformance: cannot find this program's path: {e}");
            return ExitCode::from(2);
        }
    };
    let start = Instant::now();
    let mut rows = Vec::new();
    for p in &chosen {
        for &world in &a.worlds {
            for mode in &a.modes {
                let (status, detail, seconds) =
                    if a.budget.is_some_and(|b| start.elapsed().as_secs_f64() > b) {
                        (Status::Skip, "budget".to_string(), 0.0)
                    } else if mode == "procs" && matches!(p.body, Body::OneThread(_)) {
                        (
                            Status::Skip,
                            "threads mode only (one thread drives every rank)".to_string(),
                            0.0,
                        )
                    } else {
                        let mut c = Command::new(&exe);
                        c.args([
                            "--run-case",
                            &p.name,
                            "--world",
                            &world.to_string(),
                            "--mode",
                            mode,
                            "--lib",
                            &a.lib,
                        ])
                        .args([
                            "--seed",
                            &seed.to_string(),
                            "--big-mib",
                            &a.big_mib.to_string(),
                        ]);
                        if std::env::var_os("TPCOMM_TIMEOUT_S").is_none() {
                            c.env("TPCOMM_TIMEOUT_S", "10");
                        }
                        let o = supervise::run(
                            c,
                            Duration::from_secs_f64(a.case_timeout.max(0.1)),
                            a.verbose,
                        );
                        (o.status, o.detail, o.seconds)
                    };
                println!(
                    "{} {} world={world} mode={mode} {detail} ({seconds:.1} s)",
                    status.word(),
                    p.name
                );
                let _ = std::io::stdout().flush();
                rows.push(Row {
                    case: p.name.clone(),
                    world,
                    mode: mode.clone(),
                    status,
                    detail,
                    seconds,
                });
            }
        }
    }
    summary(&a, &chosen, &rows);
    if let Some(path) = &a.json {
        let v: Vec<_> = rows.iter().map(|r| serde_json::json!({"case": r.case, "world": r.world, "mode": r.mode, "status": r.status.word(), "detail": r.detail, "seconds": r.seconds})).collect();
        let doc = serde_json::json!({"seed": seed, "library": a.lib, "results": v});
        if let Err(e) = std::fs::write(path, serde_json::to_string_pretty(&doc).unwrap_or_default())
        {
            eprintln!("tpcomm-conformance: cannot write {path}: {e}");
            return ExitCode::from(2);
        }
    }
    if rows
        .iter()
        .all(|r| matches!(r.status, Status::Pass | Status::Skip))
    {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn summary(a: &Args, chosen: &[&Pattern], rows: &[Row]) {
    let width = chosen
        .iter()
        .map(|p| p.name.len())
        .max()
        .unwrap_or(8)
        .max(8);
    let cw = a.modes.len().max(1) + 1;
    print!("\n{:width$}", "pattern");
    for w in &a.worlds {
        print!(" {:>cw$}", format!("w{w}"));
    }
    println!("   (one letter per mode: {})", a.modes.join(", "));
    for p in chosen {
        print!("{:width$}", p.name);
        for &w in &a.worlds {
            let cell: String = a
                .modes
                .iter()
                .map(|m| {
                    rows.iter()
                        .find(|r| r.case == p.name && r.world == w && &r.mode == m)
                        .map(|r| r.status.word().chars().next().unwrap_or('?'))
                        .unwrap_or('-')
                })
                .collect();
            print!(" {cell:>cw$}");
        }
        println!();
    }
    let mut totals: BTreeMap<&str, usize> = BTreeMap::new();
    for r in rows {
        *totals.entry(r.status.word()).or_default() += 1;
    }
    let t: Vec<String> = ["PASS", "FAIL", "HANG", "CRASH", "SKIP"]
        .iter()
        .map(|k| format!("{k} {}", totals.get(k).unwrap_or(&0)))
        .collect();
    println!("\ntotal {} cases: {}", rows.len(), t.join(", "));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_select_by_name() {
        assert!(glob(b"allreduce.*", b"allreduce.fp32"));
        assert!(!glob(b"allreduce.*", b"reduce.fp32"));
        assert!(glob(b"?ad.*", b"bad.count"));
        let all = cases::patterns();
        assert!(selected(&all, &None).iter().all(|p| !p.hidden));
        assert_eq!(selected(&all, &Some("selftest.*".into())).len(), 4);
    }

    #[test]
    fn pattern_names_are_unique() {
        let all = cases::patterns();
        let mut names: Vec<&str> = all.iter().map(|p| p.name.as_str()).collect();
        names.sort();
        let n = names.len();
        names.dedup();
        assert_eq!(n, names.len());
    }

    #[test]
    fn ids_round_trip_through_hex() {
        let mut id = [0u8; 128];
        id.iter_mut()
            .enumerate()
            .for_each(|(i, b)| *b = (i * 7) as u8);
        assert_eq!(unhex(&hex(&id)), Some(id));
        assert_eq!(unhex("zz"), None);
    }
}
