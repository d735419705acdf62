//! How ranks find the segment (docs/protocol.md, "Meeting"). Rank 0 creates
//! it under a fresh name and announces it in the rendezvous file (a ticket,
//! see `meet/ticket.rs`); the other ranks read the ticket, attach, check that the
//! segment is this user's and carries their job key's hash, and claim their
//! rank. Once every rank is attached rank 0 removes the segment's name and
//! the ticket, so nothing is left in /dev/shm or on disk while the run goes on.

use super::config::HostConfig;
use super::job::{failed_error, given_key, local_failure, local_key, Job};
use super::layout::*;
use super::notice;
use super::room;
use super::wait::Backoff;
use crate::error::{Error, Result};
use crate::meet::identity::{euid, JobKey, Proc};
use crate::meet::ticket::{self, Ticket};
use crate::sys::shm;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::time::{Duration, Instant};

/// The file ranks meet through: the path itself, or a fixed name inside it
/// when the path is a directory.
pub(crate) fn rendezvous_file(path: &Path) -> PathBuf {
    if path.is_dir() {
        path.join("tpcomm.rendezvous")
    } else {
        path.to_path_buf()
    }
}

fn claim_word(pid: u32) -> u64 {
    (1 << 63) | pid as u64
}

/// Abort word a rank sets when it fails while attaching (allreduce.rs
/// decodes it): the kind in the top byte, the rank below.
fn setup_abort_word(rank: usize) -> u64 {
    ABORT_SETUP << 56 | (rank as u64) << 48
}

/// Rank 0: create, publish, wait for everyone, then remove the names.
pub(crate) fn create(cfg: &HostConfig, layout: Layout) -> Result<Segment> {
    let file = rendezvous_file(&cfg.rendezvous);
    let job = Job::for_rank_0(cfg, &file)?;
    let r = create_with(cfg, layout, &job);
    match &r {
        Ok(_) => job.set_up(),
        Err(_) => job.failed(0),
    }
    r
}

fn create_with(cfg: &HostConfig, layout: Layout, job: &Job) -> Result<Segment> {
    let file = job.file;
    let me = Proc::me();
    let uid = euid();
    let mut ticket = Ticket {
        name: String::new(),
        id: [rand::random::<u64>() | 1, rand::random::<u64>()],
        key_hash: job.key.hash(),
        world: cfg.world,
        creator: me,
    };
    // Segments whose creator died during set-up, abort notices and
    // temporary tickets whose writer is gone (this user's only).
    crate::meet::identity::sweep_stale_segments();
    notice::sweep(file, uid);
    ticket::sweep_temps(file, uid);
    // Whatever is at the path now: a live job's ticket is never touched.
    if let Some(found) = ticket::read(file, uid)? {
        match &found.ticket {
            Some(t) if t.creator.alive() => return Err(ticket::in_use(file, t)),
            // A dead creator's ticket: its segment, if any, is swept by
            // name above, never unlinked on the ticket's word.
            Some(_) => ticket::remove_if_same(file, &found),
            None if found.old_format => ticket::remove_if_same(file, &found),
            None => {
                return Err(Error::invalid(
                    "rendezvous",
                    format!(
                    "{} exists and is not a tpcomm rendezvous file; remove it or give another path",
                    file.display()
                ),
                ))
            }
        }
    }
    let name = crate::meet::identity::segment_name(uid, me, rand::random());
    let seg = room::check_segment(layout.total, cfg.world)
        .and_then(|()| shm::create(&name, layout.total))
        .and_then(|m| Segment::new(m, layout, &name));
    let seg = seg?;
    // Fresh pages from posix_fallocate are zero, so every flag starts at 0
    // (epochs start at 1) and the abort word is clear.
    seg.word(H_VERSION).store(VERSION, Relaxed);
    seg.word(H_ID0).store(ticket.id[0], Relaxed);
    seg.word(H_ID1).store(ticket.id[1], Relaxed);
    seg.word(H_KEY0).store(ticket.key_hash[0], Relaxed);
    seg.word(H_KEY1).store(ticket.key_hash[1], Relaxed);
    seg.word(H_WORLD).store(cfg.world as u64, Relaxed);
    seg.word(H_SLOT).store(layout.slot_bytes as u64, Relaxed);
    seg.word(H_TOTAL).store(layout.total as u64, Relaxed);
    seg.word(H_MAX).store(layout.max as u64, Relaxed);
    seg.word(H_CREATOR).store(me.pid as u64, Relaxed);
    seg.word(H_PIDS).store(claim_word(me.pid), Relaxed);
    seg.word(H_ATTACHED).store(1, Relaxed);
    // Magic last, with release: whoever reads it sees the whole header.
    seg.word(H_MAGIC).store(MAGIC, Release);

    ticket.name = name.clone();
    let found = ticket::publish_until_free(
        file,
        || ticket::publish(file, &ticket),
        || ticket::read(file, uid),
    )
    .inspect_err(|_| shm::unlink(&name))?;

    let fail = |e: Error| {
        shm::unlink(&name);
        ticket::remove_if_same(file, &found);
        e
    };
    let start = Instant::now();
    let mut backoff = Backoff::new();
    let mut checked = Instant::now();
    while seg.word(H_ATTACHED).load(Acquire) < cfg.world as u64 {
        if backoff.slow() {
            let abort = seg.word(H_ABORT).load(Acquire);
            if abort != 0 {
                return Err(fail(failed_error(((abort >> 48) & 0xff) as usize, 0)));
            }
            if checked.elapsed() > Duration::from_millis(5) {
                checked = Instant::now();
                if let Some(r) = job.failure() {
                    return Err(fail(failed_error(r, 0)));
                }
            }
            if start.elapsed() >= cfg.timeout {
                let missing = (1..cfg.world)
                    .find(|&r| seg.word(H_PIDS + 8 * r).load(Acquire) == 0)
                    .unwrap_or(0);
                return Err(fail(Error::PeerTimeout {
                    rank: 0,
                    peer: missing,
                    epoch: 0,
                    what: format!("attach to the segment announced in {}", file.display()),
                    waited: start.elapsed(),
                }));
            }
        }
        backoff.snooze();
    }
    shm::unlink(&name);
    ticket::remove_if_same(file, &found);
    seg.word(H_READY).store(1, Release);
    Ok(seg)
}

/// Ranks 1..world: find the segment, check it is this job's, claim the rank.
pub(crate) fn attach(cfg: &HostConfig, layout: Layout) -> Result<Segment> {
    let file = rendezvous_file(&cfg.rendezvous);
    let given = given_key(cfg)?;
    let r = attach_with(cfg, layout, &file, given);
    if let Err(e) = &r {
        // Timeouts and aborts are seen by every rank anyway; any other
        // failure is told to this job's other ranks, so they stop now.
        if !matches!(e, Error::PeerTimeout { .. } | Error::Aborted(_)) {
            let key = given.or_else(|| local_key(&file));
            if let Some(key) = key {
                Job {
                    file: &file,
                    key,
                    local: given.is_none(),
                    recent: cfg.timeout,
                }
                .failed(cfg.rank);
            }
        }
    }
    r
}

fn attach_with(
    cfg: &HostConfig,
    layout: Layout,
    file: &Path,
    given: Option<JobKey>,
) -> Result<Segment> {
    let start = Instant::now();
    let mut backoff = Backoff::new();
    let mut last_problem = format!("{} does not exist yet", file.display());
    let (seg, creator) = loop {
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
        let failed = match given {
            Some(k) => notice::read(file, k.hash(), euid(), cfg.timeout).map(|n| n.rank),
            None => local_failure(file, cfg.timeout),
        };
        if let Some(r) = failed {
            return Err(failed_error(r, cfg.rank));
        }
        match try_attach(cfg, layout, file, given)? {
            Ok(found) => break found,
            Err(problem) => last_problem = problem,
        }
        // Files are polled at most every 200 us (rank 0 takes far longer
        // than that to create a segment).
        backoff.snooze();
        std::thread::sleep(Duration::from_micros(200));
    };
    // Claimed and counted; wait for rank 0 to see everyone.
    let mut backoff = Backoff::new();
    let mut checked = Instant::now();
    while seg.word(H_READY).load(Acquire) == 0 {
        if backoff.slow() {
            let abort = seg.word(H_ABORT).load(Acquire);
            if abort != 0 {
                return Err(Error::Aborted(format!(
                    "rank {} failed while the communicator was being set up",
                    (abort >> 48) & 0xff
                )));
            }
            if checked.elapsed() > Duration::from_millis(10) {
                checked = Instant::now();
                if !creator.alive() {
                    return Err(Error::Aborted(format!(
                        "rank 0 (pid {}) died while the communicator was being set up",
                        creator.pid
                    )));
                }
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
        }
        backoff.snooze();
    }
    Ok(seg)
}

/// One attempt. The outer `Result` is a hard error (another job's ticket,
/// another user's file, wrong world size, rank taken); the inner `Err` says
/// why this attempt found nothing usable yet.
fn try_attach(
    cfg: &HostConfig,
    layout: Layout,
    file: &Path,
    given: Option<JobKey>,
) -> Result<std::result::Result<(Segment, Proc), String>> {
    let uid = euid();
    let found = match ticket::read(file, uid)? {
        Some(f) => f,
        None => return Ok(Err(format!("{} does not exist yet", file.display()))),
    };
    let Some(t) = found.ticket else {
        if found.old_format {
            return Ok(Err("a rendezvous file of an older tpcomm".into()));
        }
        return Err(Error::invalid(
            "rendezvous",
            format!(
                "{} is not a tpcomm rendezvous file; remove it or give another path",
                file.display()
            ),
        ));
    };
    if !t.creator.alive() {
        return Ok(Err(format!(
            "stale file: its creator (pid {}) is gone",
            t.creator.pid
        )));
    }
    let key = match given {
        Some(k) => k,
        None if t.creator.pid == std::process::id() => {
            match local_key(file) {
                Some(k) => k,
                None => return Ok(Err("a ticket of this process without its key".into())),
            }
        }
        None => {
            return Err(Error::invalid(
                "job key",
                format!(
                    "rank {} was given no job key, and the communicator at {} was created by another process (pid {}): ranks in separate processes must share a key; set {} to the same 32 hex digits in every rank (or HostConfig::job_key); the tpcomm command does this for its ranks",
                    cfg.rank,
                    file.display(),
                    t.creator.pid,
                    crate::meet::identity::JOB_KEY_ENV
                ),
            ))
        }
    };
    if t.key_hash != key.hash() {
        return Err(Error::invalid(
            "rendezvous",
            format!(
                "{} belongs to another job (pid {} created it with a different job key); two jobs cannot share a rendezvous path: give every job its own path",
                file.display(),
                t.creator.pid
            ),
        ));
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
    let seg = Segment::header_only(map, &t.name)?;
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
    if [
        seg.word(H_KEY0).load(Relaxed),
        seg.word(H_KEY1).load(Relaxed),
    ] != t.key_hash
    {
        return Err(Error::invalid(
            "rendezvous",
            format!(
                "segment {} does not carry the job key its ticket names; it was not made by this job's rank 0",
                t.name
            ),
        ));
    }
    // From here on rank 0 is this job's: tell it when this rank cannot join.
    let refuse = |e: Error| {
        let _ = seg
            .word(H_ABORT)
            .compare_exchange(0, setup_abort_word(cfg.rank), AcqRel, Acquire);
        e
    };
    // The settings first, each by name (the segment's length follows from
    // both, so comparing it first would blame the wrong one).
    let theirs_max = seg.word(H_MAX).load(Relaxed);
    if theirs_max != layout.max as u64 {
        return Err(refuse(Error::invalid(
            "maximum message size",
            format!(
                "rank {} was created for messages up to {} bytes but rank 0 for {}; every rank must use the same maximum message size",
                cfg.rank, layout.max, theirs_max
            ),
        )));
    }
    let theirs_slot = seg.word(H_SLOT).load(Relaxed);
    if theirs_slot != layout.slot_bytes as u64 {
        return Err(refuse(Error::invalid(
            "piece size",
            format!(
                "rank {} uses pieces of {} bytes but rank 0 uses {}; every rank must use the same piece size",
                cfg.rank, layout.slot_bytes, theirs_slot
            ),
        )));
    }
    if seg.map_len() != layout.total {
        return Err(refuse(Error::invalid(
            "rendezvous",
            format!(
                "rank {}'s segment would be {} bytes but rank 0's is {}, with the same sizes; do all ranks run the same tpcomm?",
                cfg.rank, layout.total, seg.map_len()
            ),
        )));
    }
    let pid = std::process::id();
    if seg
        .word(H_PIDS + 8 * cfg.rank)
        .compare_exchange(0, claim_word(pid), AcqRel, Acquire)
        .is_err()
    {
        return Err(refuse(Error::invalid(
            "rank",
            format!("rank {} is already attached to this communicator; give every rank a distinct rank number", cfg.rank),
        )));
    }
    seg.word(H_ATTACHED).fetch_add(1, AcqRel);
    Ok(Ok((seg.with_layout(layout)?, t.creator)))
}
