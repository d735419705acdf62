//! How ranks find the segment: rank 0 creates it under a fresh random name and
//! writes that name and the segment's 128-bit id into the rendezvous file;
//! the other ranks read the file, attach, check the id and claim their rank.
//! Once every rank is attached rank 0 removes both the segment's name and the
//! file, so nothing is left in /dev/shm or on disk while the run goes on.

use super::layout::*;
use super::shm;
use super::wait::Backoff;
use super::HostConfig;
use crate::error::{Error, Result};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::time::Instant;

/// The file ranks meet through: the path itself, or a fixed name inside it
/// when the path is a directory.
pub(crate) fn rendezvous_file(path: &Path) -> PathBuf {
    if path.is_dir() {
        path.join("tpcomm.rendezvous")
    } else {
        path.to_path_buf()
    }
}

struct Ticket {
    name: String,
    id: [u64; 2],
    world: usize,
    creator: u32,
}

impl Ticket {
    fn render(&self) -> String {
        format!(
            "tpcomm-rendezvous 1 {} {:016x}{:016x} {} {}\n",
            self.name, self.id[0], self.id[1], self.world, self.creator
        )
    }

    fn parse(s: &str) -> Option<Ticket> {
        let f: Vec<&str> = s.split_whitespace().collect();
        if f.len() != 6 || f[0] != "tpcomm-rendezvous" || f[1] != "1" || f[3].len() != 32 {
            return None;
        }
        Some(Ticket {
            name: f[2].to_string(),
            id: [
                u64::from_str_radix(&f[3][..16], 16).ok()?,
                u64::from_str_radix(&f[3][16..], 16).ok()?,
            ],
            world: f[4].parse().ok()?,
            creator: f[5].parse().ok()?,
        })
    }
}

fn claim_word(pid: u32) -> u64 {
    (1 << 63) | pid as u64
}

/// Rank 0: create, publish, wait for everyone, then remove the names.
pub(crate) fn create(cfg: &HostConfig, layout: Layout) -> Result<Segment> {
    let file = rendezvous_file(&cfg.rendezvous);
    // A file left by a crashed run: remove it and, if its creator is gone,
    // the segment it names (which a crash leaves in /dev/shm).
    if let Ok(old) = std::fs::read_to_string(&file) {
        if let Some(t) = Ticket::parse(&old) {
            if !shm::pid_alive(t.creator) {
                shm::unlink(&t.name);
            }
        }
        let _ = std::fs::remove_file(&file);
    }
    let pid = std::process::id();
    let id = [rand::random::<u64>(), rand::random::<u64>()];
    let name = format!("/tpcomm-{pid}-{:016x}", id[0]);
    let seg = Segment::new(shm::create(&name, layout.total)?, layout, &name)?;
    // Fresh pages from posix_fallocate are zero, so every flag starts at 0
    // (epochs start at 1) and the abort word is clear.
    seg.word(H_VERSION).store(VERSION, Relaxed);
    seg.word(H_ID0).store(id[0], Relaxed);
    seg.word(H_ID1).store(id[1], Relaxed);
    seg.word(H_WORLD).store(cfg.world as u64, Relaxed);
    seg.word(H_SLOT).store(layout.slot_bytes as u64, Relaxed);
    seg.word(H_TOTAL).store(layout.total as u64, Relaxed);
    seg.word(H_CREATOR).store(pid as u64, Relaxed);
    seg.word(H_PIDS).store(claim_word(pid), Relaxed);
    seg.word(H_ATTACHED).store(1, Relaxed);
    // Magic last, with release: whoever reads it sees the whole header.
    seg.word(H_MAGIC).store(MAGIC, Release);

    let ticket = Ticket {
        name: name.clone(),
        id,
        world: cfg.world,
        creator: pid,
    };
    let cleanup = |seg_name: &str| {
        shm::unlink(seg_name);
        let _ = std::fs::remove_file(&file);
    };
    // Write-then-rename so a reader never sees half a file.
    let tmp = file.with_extension(format!("tmp{pid}"));
    if let Err(e) = std::fs::write(&tmp, ticket.render()).and_then(|_| std::fs::rename(&tmp, &file))
    {
        shm::unlink(&name);
        let _ = std::fs::remove_file(&tmp);
        return Err(Error::Os {
            call: format!("writing the rendezvous file {}", file.display()),
            source: e,
            hint: "; give a rendezvous path in a writable directory".into(),
        });
    }

    let start = Instant::now();
    let mut backoff = Backoff::new();
    while seg.word(H_ATTACHED).load(Acquire) < cfg.world as u64 {
        if start.elapsed() >= cfg.timeout {
            cleanup(&name);
            let missing = (1..cfg.world)
                .find(|&r| seg.word(H_PIDS + 8 * r).load(Acquire) == 0)
                .unwrap_or(0);
            return Err(Error::PeerTimeout {
                rank: 0,
                peer: missing,
                epoch: 0,
                what: format!("attach to the segment announced in {}", file.display()),
                waited: start.elapsed(),
            });
        }
        backoff.snooze();
    }
    cleanup(&name);
    seg.word(H_READY).store(1, Release);
    Ok(seg)
}

/// Ranks 1..world: find the segment, check it is this run's, claim the rank.
pub(crate) fn attach(cfg: &HostConfig, layout: Layout) -> Result<Segment> {
    let file = rendezvous_file(&cfg.rendezvous);
    let start = Instant::now();
    let mut backoff = Backoff::new();
    let mut last_problem = format!("{} does not exist yet", file.display());
    let seg = loop {
        if start.elapsed() >= cfg.timeout {
            return Err(Error::PeerTimeout {
                rank: cfg.rank,
                peer: 0,
                epoch: 0,
                what: format!(
                    "a live segment announced in {} (last seen: {last_problem})",
                    file.display()
                ),
                waited: start.elapsed(),
            });
        }
        match try_attach(cfg, layout, &file)? {
            Ok(seg) => break seg,
            Err(problem) => last_problem = problem,
        }
        backoff.snooze();
    };
    // Claimed and counted; wait for rank 0 to see everyone.
    let mut backoff = Backoff::new();
    while seg.word(H_READY).load(Acquire) == 0 {
        if seg.word(H_ABORT).load(Acquire) != 0 {
            return Err(Error::Aborted(
                "a rank failed while the communicator was being set up".into(),
            ));
        }
        if start.elapsed() >= cfg.timeout {
            let missing = (0..cfg.world)
                .find(|&r| seg.word(H_PIDS + 8 * r).load(Acquire) == 0)
                .unwrap_or(0);
            return Err(Error::PeerTimeout {
                rank: cfg.rank,
                peer: missing,
                epoch: 0,
                what: "attach to the segment".into(),
                waited: start.elapsed(),
            });
        }
        backoff.snooze();
    }
    Ok(seg)
}

/// One attempt. The outer `Result` is a hard error (wrong world size, rank
/// taken); the inner `Err` says why this attempt found nothing usable yet.
fn try_attach(
    cfg: &HostConfig,
    layout: Layout,
    file: &Path,
) -> Result<std::result::Result<Segment, String>> {
    let text = match std::fs::read_to_string(file) {
        Ok(t) => t,
        Err(_) => return Ok(Err(format!("{} does not exist yet", file.display()))),
    };
    let Some(t) = Ticket::parse(&text) else {
        return Ok(Err(format!(
            "{} is not a tpcomm rendezvous file",
            file.display()
        )));
    };
    if !shm::pid_alive(t.creator) {
        return Ok(Err(format!(
            "stale file: its creator (pid {}) is gone",
            t.creator
        )));
    }
    if t.world != cfg.world {
        return Err(Error::invalid(
            "world size",
            format!(
                "rank {} was started with world {} but rank 0 created the communicator with world {}; every rank must use the same world size",
                cfg.rank, cfg.world, t.world
            ),
        ));
    }
    let Some(map) = shm::open(&t.name)? else {
        return Ok(Err(format!("segment {} is gone (stale file)", t.name)));
    };
    if map.len() != layout.total {
        return Err(Error::invalid(
            "maximum message size",
            format!(
                "rank {}'s segment would be {} bytes but rank 0's is {}; every rank must use the same maximum message size",
                cfg.rank, layout.total, map.len()
            ),
        ));
    }
    let seg = Segment::new(map, layout, &t.name)?;
    if seg.word(H_MAGIC).load(Acquire) != MAGIC
        || seg.word(H_VERSION).load(Relaxed) != VERSION
        || seg.word(H_ID0).load(Relaxed) != t.id[0]
        || seg.word(H_ID1).load(Relaxed) != t.id[1]
    {
        return Ok(Err(format!(
            "segment {} does not carry the id in the file",
            t.name
        )));
    }
    if seg.word(H_SLOT).load(Relaxed) != layout.slot_bytes as u64 {
        return Err(Error::invalid(
            "piece size",
            format!(
                "rank {} uses pieces of {} bytes but rank 0 uses {}; every rank must use the same piece size",
                cfg.rank,
                layout.slot_bytes,
                seg.word(H_SLOT).load(Relaxed)
            ),
        ));
    }
    let pid = std::process::id();
    if seg
        .word(H_PIDS + 8 * cfg.rank)
        .compare_exchange(0, claim_word(pid), AcqRel, Acquire)
        .is_err()
    {
        return Err(Error::invalid(
            "rank",
            format!("rank {} is already attached to this communicator; give every rank a distinct rank number", cfg.rank),
        ));
    }
    seg.word(H_ATTACHED).fetch_add(1, AcqRel);
    Ok(Ok(seg))
}
