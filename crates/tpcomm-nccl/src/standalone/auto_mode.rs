//! Auto standalone mode (docs/standalone.md), `TPCOMM_STANDALONE` unset:
//! NCCL makes the unique id and, where its ranks are all on one host and
//! two of them share a GPU (which NCCL refuses: "Duplicate GPU detected"),
//! tpcomm serves the communicator itself, as standalone mode does.
//!
//! Whether ranks share a GPU is only known at creation, so the id carries
//! both: NCCL's bytes as NCCL made them, and in its tail, which NCCL leaves
//! zero, a mark (a magic, a secret from the kernel's random source, the
//! creator's host). Creation with a marked id meets the other ranks of this
//! host through the standalone rendezvous of that secret (standalone/mod.rs:
//! a 0700 directory of this user, every record tagged with the secret):
//!
//! - every rank posts its GPU's identity (its census record);
//! - rank 0 waits at most `TPCOMM_STANDALONE_WAIT_S` for all of them and
//!   decides: standalone when all came and two share a GPU, else NCCL;
//! - the decision is one record that only its first writer writes
//!   (`standalone::post_first`), and every rank follows whatever it says.
//!   Rank 0 writes it after its census; any other rank may write "NCCL"
//!   first, when it cannot take part (no GPU to name,
//!   `TPCOMM_STANDALONE=0`) or after waiting `TPCOMM_TIMEOUT_S` for rank 0
//!   (rank 0 on another host, or never coming). A rank that gives up can
//!   thus never go to NCCL while rank 0 goes standalone: both read the one
//!   record.
//! - inside ncclGroupStart/End (one thread may create several ranks, rank
//!   0 before or after the others) a creation posts its record and waits
//!   for nothing; its decision, and the creation, come at ncclGroupEnd
//!   (`decide_group`: rank 0s first), when every rank the thread creates
//!   has posted.
//!
//! Standalone needs every rank's census record, so a rank that posts none
//! can only make the decision NCCL. An id made on another host, or a group
//! of one rank or more than `MAX_WORLD`, goes to NCCL at once on every rank
//! (the same bytes and sizes on every rank: no meeting needed). NCCL is
//! always given the id with its tail zero again, as NCCL made it.
#![forbid(unsafe_code)]

use crate::settings::{self, info, Standalone};
use crate::standalone::{self, Secret};
use census::Census;
use creator::CENSUS;
pub use creator::{Creator, Tidy, Undecided};
use std::ffi::c_int;
use std::path::PathBuf;
use std::time::Duration;
use tpcomm::cuda::share::DeviceIdentity;
use tpcomm::transport::MAX_WORLD;

/// The first 8 bytes of the mark.
pub const MAGIC: &[u8; 8] = b"TPCHYBR1";
/// Where the mark starts. NCCL zeroes the id and writes its bootstrap
/// handle (a magic and a socket address, about 40 bytes) at the start, so
/// bytes 64.. are zero in every id it makes; an id whose tail is not zero is
/// left as it is (no auto mode for it).
const TAIL: usize = 64;
/// What a marked id carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mark {
    /// The standalone rendezvous's secret.
    pub secret: Secret,
    /// `standalone::host_hash` of the host that made the id.
    pub host: u64,
}

/// Marks `id`, an id NCCL just made, with a fresh secret and this host;
/// `None` (the id untouched) when its tail is not all zero.
pub fn mark(id: &mut [u8; 128]) -> tpcomm::Result<Option<Mark>> {
    if id[TAIL..].iter().any(|&b| b != 0) {
        return Ok(None);
    }
    let m = Mark {
        secret: Secret::random()?,
        host: standalone::host_hash(),
    };
    write_mark(id, &m);
    Ok(Some(m))
}

fn write_mark(id: &mut [u8; 128], m: &Mark) {
    id[TAIL..TAIL + 8].copy_from_slice(MAGIC);
    id[TAIL + 8..TAIL + 24].copy_from_slice(&m.secret.to_bytes());
    id[TAIL + 24..TAIL + 32].copy_from_slice(&m.host.to_le_bytes());
}

/// The mark of `id`, if it has one (the magic, a secret, a host, zeros).
pub fn read_mark(id: &[u8; 128]) -> Option<Mark> {
    if &id[TAIL..TAIL + 8] != MAGIC || id[TAIL + 32..].iter().any(|&b| b != 0) {
        return None;
    }
    let secret = Secret::from_bytes(id[TAIL + 8..TAIL + 24].try_into().ok()?)?;
    let host = u64::from_le_bytes(id[TAIL + 24..TAIL + 32].try_into().ok()?);
    (host != 0).then_some(Mark { secret, host })
}

/// `id` with its tail zero again: the id as NCCL made it.
pub fn stripped(id: &[u8; 128]) -> [u8; 128] {
    let mut out = *id;
    out[TAIL..].fill(0);
    out
}

/// The id as NCCL made it: a marked id stripped, any other as it is.
pub fn unmarked(id: &[u8; 128]) -> [u8; 128] {
    match read_mark(id) {
        Some(_) => stripped(id),
        None => *id,
    }
}

/// What a creation in auto mode needs from around it (tests give their own).
#[derive(Clone, Debug)]
pub struct Place {
    pub mode: Standalone,
    /// Where meeting directories are made (`standalone::runtime_base`).
    pub base: PathBuf,
    /// This host's `standalone::host_hash`.
    pub host: u64,
    /// Rank 0's census wait (`TPCOMM_STANDALONE_WAIT_S`).
    pub wait: Duration,
    /// The other ranks' wait for the decision (`TPCOMM_TIMEOUT_S`).
    pub timeout: Duration,
    /// Whether the creation is inside ncclGroupStart/End (NCCL then makes
    /// communicators at the group's end, so this call must not wait for
    /// ranks the same thread creates after it: it posts its census record
    /// and is decided at ncclGroupEnd).
    pub in_group: bool,
}

impl Place {
    /// This process's settings and this thread's group depth.
    pub fn here() -> Place {
        let s = settings::get();
        Place {
            mode: s.standalone,
            base: standalone::runtime_base(),
            host: standalone::host_hash(),
            wait: s.standalone_wait,
            timeout: s.timeout,
            in_group: crate::group::depth() > 0,
        }
    }
}

/// This rank's GPU: the device of the thread's current context.
pub fn gpu_here() -> tpcomm::Result<DeviceIdentity> {
    tpcomm::cuda::ensure_driver()?;
    let d = tpcomm::cuda::current_device().ok_or_else(|| {
        tpcomm::Error::Unsupported("no CUDA context is current on this thread".into())
    })?;
    DeviceIdentity::of_device(d)
}

/// Where `call` (ncclCommInitRank or ncclCommInitRankConfig) with `id` goes,
/// in this process.
pub fn choose_creator(call: &str, id: &[u8; 128], nranks: c_int, rank: c_int) -> Creator {
    if read_mark(id).is_none() {
        // Every id that is not ours goes on untouched (the common path: one
        // comparison of 8 bytes).
        return Creator::Nccl {
            id: *id,
            after: None,
        };
    }
    route_in(call, id, nranks, rank, &Place::here(), gpu_here)
}

/// [`route`] with its surroundings given.
pub fn route_in(
    call: &str,
    id: &[u8; 128],
    nranks: c_int,
    rank: c_int,
    place: &Place,
    gpu: impl FnOnce() -> tpcomm::Result<DeviceIdentity>,
) -> Creator {
    let Some(m) = read_mark(id) else {
        return Creator::Nccl {
            id: *id,
            after: None,
        };
    };
    let tag = format!("{call} rank {rank}/{nranks}");
    let real = stripped(id);
    let at_once = |why: String| {
        info!("{tag}: {why}; NCCL's communicator");
        standalone::clear_last_error();
        Creator::Nccl {
            id: real,
            after: None,
        }
    };
    if m.host != place.host {
        return at_once(format!(
            "the unique id was made on another host (host tag {:016x}); auto standalone mode serves ranks of one host",
            m.host
        ));
    }
    if !(2..=MAX_WORLD as c_int).contains(&nranks) || !(0..nranks).contains(&rank) {
        return at_once(format!(
            "auto standalone mode takes 2 to {MAX_WORLD} ranks (a rank of 0..{nranks})"
        ));
    }
    let dir = match standalone::meeting_dir(&place.base, &m.secret) {
        Ok(d) => d,
        // Nothing posted: rank 0 cannot decide standalone without this
        // rank's record, so NCCL is every rank's decision too.
        Err(e) => return at_once(format!("no census ({e})")),
    };
    let c = Census {
        tag,
        dir,
        secret: m.secret,
        rank: rank as usize,
        world: nranks as usize,
        real,
    };
    if place.mode == Standalone::Never {
        return c.give_up(
            "TPCOMM_STANDALONE=0 (or tpcomm disabled) on this rank",
            false,
        );
    }
    let me = match gpu() {
        Ok(me) => me,
        Err(e) => return c.give_up(&format!("this rank cannot name its GPU ({e})"), false),
    };
    if let Err(e) = standalone::post(&c.dir, &c.secret, CENSUS, c.rank, &me.to_bytes()) {
        return c.give_up(
            &format!("its census record could not be posted ({e})"),
            false,
        );
    }
    if place.in_group {
        // Inside a group one thread may create several ranks (NCCL's
        // several-devices-per-thread pattern), rank 0 before the others
        // have posted or after them: no wait here. A decision already made
        // (a rank that gave up) is followed now; otherwise the decision
        // waits for ncclGroupEnd (`decide_group`), when every rank this
        // thread creates has posted.
        if c.decided() {
            return c.read_decision();
        }
        return Creator::Undecided(Undecided {
            tag: c.tag,
            dir: c.dir,
            secret: c.secret,
            rank: c.rank,
            world: c.world,
            real: c.real,
            me,
            wait: place.wait,
            timeout: place.timeout,
        });
    }
    if c.rank == 0 {
        c.count(me, place.wait)
    } else {
        c.await_decision(place.timeout)
    }
}

/// At the outermost ncclGroupEnd, before NCCL's group closes: decides the
/// creations this thread left undecided inside the group, every rank 0
/// first (its census finds the records of the ranks this thread created
/// after it, and it publishes the decision those ranks then read at once),
/// then the others, each waiting for its decision as a creation outside a
/// group does (`TPCOMM_TIMEOUT_S`: rank 0 may be another thread's or
/// process's). The creators come back in the order given.
pub fn decide_group(undecided: Vec<Undecided>) -> Vec<Creator> {
    let mut out: Vec<Option<Creator>> = (0..undecided.len()).map(|_| None).collect();
    let mut order: Vec<(usize, Undecided)> = undecided.into_iter().enumerate().collect();
    // Stable: rank 0s first, in the order they were asked for.
    order.sort_by_key(|(_, u)| u.rank != 0);
    for (i, u) in order {
        out[i] = Some(decide(u));
    }
    out.into_iter()
        .map(|c| c.unwrap_or(Creator::Failed(crate::types::INTERNAL_ERROR)))
        .collect()
}

/// One undecided creation's decision: rank 0 counts (at most its census
/// wait), another rank waits for the decision (at most its timeout).
fn decide(u: Undecided) -> Creator {
    let (me, wait, timeout) = (u.me, u.wait, u.timeout);
    let c = census_of(u);
    if c.rank == 0 {
        c.count(me, wait)
    } else {
        c.await_decision(timeout)
    }
}

/// An undecided creation that cannot go on (api/init.rs: no communicator
/// pointer, no current context): decides NCCL for every rank unless a
/// decision is there already, so that rank 0 never counts on this rank
/// for a standalone communicator.
pub fn abandon(u: Undecided, why: &str) {
    let _ = census_of(u).give_up(why, true);
}

fn census_of(u: Undecided) -> Census {
    Census {
        tag: u.tag,
        dir: u.dir,
        secret: u.secret,
        rank: u.rank,
        world: u.world,
        real: u.real,
    }
}

mod census;
mod creator;
#[cfg(test)]
mod tests;
