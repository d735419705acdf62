//! How long one exchange through a meeting directory takes (the host-side
//! step of every standalone send/recv group, `Rendezvous::Dir`): RANKS
//! threads exchange an 8-byte record ROUNDS times, each round under a key of
//! its own (as the drop-in's groups are keyed), and rank 0 times each round.
//! Prints the median with the 10th and 90th percentiles, over REPS repeats
//! the median of their medians with the lowest and highest.
//!
//! cargo run --release -p tpcomm --example rendezvous_latency [-- RANKS ROUNDS REPS]

use std::time::{Duration, Instant};
use tpcomm::cuda::Rendezvous;

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn one(ranks: usize, rounds: usize) -> Result<(f64, f64, f64), String> {
    let dir = std::env::temp_dir().join(format!("tpcomm-rv-latency-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let threads: Vec<_> = (0..ranks)
        .map(|r| {
            let rv = Rendezvous::Dir(dir.clone());
            std::thread::spawn(move || -> Result<Vec<f64>, String> {
                let mut us = Vec::with_capacity(rounds);
                for n in 0..rounds {
                    let t = Instant::now();
                    let all = rv
                        .exchange(
                            &format!("p2p-{n}"),
                            r,
                            ranks,
                            &(n as u64).to_le_bytes(),
                            Duration::from_secs(10),
                        )
                        .map_err(|e| e.to_string())?;
                    us.push(t.elapsed().as_secs_f64() * 1e6);
                    if all.iter().any(|v| v[..] != (n as u64).to_le_bytes()) {
                        return Err(format!("round {n}: a record of another round"));
                    }
                }
                Ok(us)
            })
        })
        .collect();
    let mut per: Vec<Vec<f64>> = Vec::new();
    for t in threads {
        per.push(
            t.join()
                .map_err(|_| "a rank thread panicked".to_string())??,
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    let v = &mut per[0];
    Ok((pct(v, 0.5), pct(v, 0.1), pct(v, 0.9)))
}

fn main() {
    let arg = |i: usize, d: usize| {
        std::env::args()
            .nth(i)
            .and_then(|s| s.parse().ok())
            .unwrap_or(d)
    };
    let (ranks, rounds, reps) = (arg(1, 2), arg(2, 2000), arg(3, 5));
    println!("{ranks} ranks (threads), {rounds} exchanges each, {reps} repeats; rank 0's time per exchange");
    let mut medians = Vec::new();
    for rep in 0..reps {
        match one(ranks, rounds) {
            Ok((m, lo, hi)) => {
                println!("repeat {rep}: median {m:.1} us (p10 {lo:.1}, p90 {hi:.1})");
                medians.push(m);
            }
            Err(e) => {
                eprintln!("rendezvous_latency: {e}");
                std::process::exit(1);
            }
        }
    }
    let (lo, hi) = (
        medians.iter().cloned().fold(f64::INFINITY, f64::min),
        medians.iter().cloned().fold(0.0, f64::max),
    );
    println!(
        "median of medians {:.1} us ({lo:.1}-{hi:.1})",
        pct(&mut medians, 0.5)
    );
}
