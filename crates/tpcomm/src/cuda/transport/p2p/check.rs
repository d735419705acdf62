//! The P2P verdict from the kernels' own path, checked at creation.
//!
//! `cuDeviceCanAccessPeer` says whether P2P is allowed, not whether it moves
//! the right bytes: boxes exist that report it on and move nothing, and
//! patched drivers whose P2P returns wrong data. So before a group that the
//! driver lets use P2P takes it (`GpuComm::new` with `Transport::Auto`), each
//! rank stores a pattern into every peer's check area with the SM stores the
//! kernels use, and each rank checks what landed in its own
//! (kernels/p2p_check.cu); every rank's findings are shared and one bad pair
//! sends the whole group to the host transport. The wait is bounded
//! ([`VERIFY_TIMEOUT`] in the kernel, the rendezvous timeout between ranks).
//!
//! A check that cannot run (NVRTC, memory, mapping) changes nothing: the
//! group keeps what the driver said, and the log says the check did not run.

use super::comm::open_context;
use crate::cuda::compile;
use crate::cuda::driver_error::cuda_err;
use crate::cuda::kernel_args::P2pCheckArgs;
use crate::cuda::launch_shape;
use crate::cuda::loader::compile_and_load;
use crate::cuda::rendezvous::Rendezvous;
use crate::cuda::share::DeviceIdentity;
use crate::error::{Error, Result};
use crate::sys::cuda::{self as raw, DeviceAlloc, HostMapped, IpcMapping};
use crate::transport::MAX_WORLD;
use cudarc::driver::CudaContext;
use std::sync::Arc;
use std::time::Duration;

/// Pattern words per (writer, reader) slot (P2PC_WORDS in p2p_check.cu).
pub const WORDS: usize = 1024;
const SLOT_BYTES: usize = WORDS * 4;
/// How long a reader waits for a slot to hold the whole pattern.
pub const VERIFY_TIMEOUT: Duration = Duration::from_millis(20);

// Verdicts the verify kernel writes (P2PC_* in p2p_check.cu); 0: not checked.
const CODE_OK: u32 = 1;
const CODE_NO_BYTES: u32 = 2;
const CODE_WRONG: u32 = 3;

/// What one reader found in one writer's slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PairCheck {
    /// The whole pattern arrived.
    Ok,
    /// Nothing arrived within the timeout.
    NoBytes,
    /// Bytes arrived but not the pattern; the first word that differs.
    Wrong { first_word: u32 },
    /// The slot was never checked (the kernel did not write a verdict).
    NotChecked,
}

impl PairCheck {
    fn from_status(code: u32, first: u32) -> PairCheck {
        match code {
            CODE_OK => PairCheck::Ok,
            CODE_NO_BYTES => PairCheck::NoBytes,
            CODE_WRONG => PairCheck::Wrong { first_word: first },
            _ => PairCheck::NotChecked,
        }
    }
}

/// The group's verdict, the same on every rank.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// Every pair moved the pattern (or the check could not run: see `ran`).
    pub p2p_ok: bool,
    /// Whether every rank ran the check.
    pub ran: bool,
    /// In words, for the creation log.
    pub why: String,
}

/// The pure part: reads the status words a reader's verify kernel wrote
/// (verdict and first wrong word per writer).
pub fn decode(status: &[u32], rank: usize, world: usize) -> Vec<(usize, PairCheck)> {
    (0..world)
        .filter(|&w| w != rank)
        .map(|w| {
            let code = status.get(2 * w).copied().unwrap_or(0);
            let first = status.get(2 * w + 1).copied().unwrap_or(0);
            (w, PairCheck::from_status(code, first))
        })
        .collect()
}

/// What a rank posts: `b'k'` then per writer a code byte and the first wrong
/// word, or `b'e'` then why the check could not run here.
pub fn encode(found: &std::result::Result<Vec<(usize, PairCheck)>, String>) -> Vec<u8> {
    match found {
        Ok(pairs) => {
            let mut out = vec![b'k'];
            for (w, c) in pairs {
                let (code, first) = match c {
                    PairCheck::Ok => (CODE_OK, 0),
                    PairCheck::NoBytes => (CODE_NO_BYTES, 0),
                    PairCheck::Wrong { first_word } => (CODE_WRONG, *first_word),
                    PairCheck::NotChecked => (0, 0),
                };
                out.push(*w as u8);
                out.push(code as u8);
                out.extend_from_slice(&first.to_le_bytes());
            }
            out
        }
        Err(e) => {
            let mut out = vec![b'e'];
            out.extend_from_slice(e.as_bytes());
            out
        }
    }
}

/// Every rank's posts (rank order) to the group's verdict: P2P unless a pair
/// failed; a rank that could not run the check, or whose post is
/// unreadable, leaves the driver's answer standing and is named.
pub fn group_verdict(all: &[Vec<u8>]) -> Verdict {
    let mut bad = Vec::new();
    let mut not_run = Vec::new();
    for (reader, blob) in all.iter().enumerate() {
        match blob.split_first() {
            Some((b'k', rest)) if rest.len() % 6 == 0 => {
                for rec in rest.chunks_exact(6) {
                    let writer = rec[0] as usize;
                    let first = u32::from_le_bytes([rec[2], rec[3], rec[4], rec[5]]);
                    match PairCheck::from_status(rec[1] as u32, first) {
                        PairCheck::Ok => {}
                        PairCheck::NoBytes => bad.push(format!(
                            "rank {writer} -> rank {reader}: no bytes arrived within {} ms",
                            VERIFY_TIMEOUT.as_millis()
                        )),
                        PairCheck::Wrong { first_word } => bad.push(format!(
                            "rank {writer} -> rank {reader}: wrong bytes arrived (first at word {first_word})"
                        )),
                        PairCheck::NotChecked => bad.push(format!(
                            "rank {writer} -> rank {reader}: the check wrote no verdict"
                        )),
                    }
                }
            }
            Some((b'e', why)) => {
                not_run.push(format!("rank {reader}: {}", String::from_utf8_lossy(why)))
            }
            _ => not_run.push(format!("rank {reader}: unreadable check result")),
        }
    }
    if !bad.is_empty() {
        return Verdict {
            p2p_ok: false,
            ran: not_run.is_empty(),
            why: format!(
                "the P2P check with the kernels' own stores failed ({}); the group uses the host transport",
                bad.join("; ")
            ),
        };
    }
    if !not_run.is_empty() {
        return Verdict {
            p2p_ok: true,
            ran: false,
            why: format!(
                "the P2P check could not run ({}); P2P is used as cuDeviceCanAccessPeer reports",
                not_run.join("; ")
            ),
        };
    }
    Verdict {
        p2p_ok: true,
        ran: true,
        why: "the P2P check moved the right bytes between every pair".into(),
    }
}

/// This rank's check area and what it needs to store and verify.
struct Local {
    ctx: Arc<CudaContext>,
    area: DeviceAlloc,
    status: HostMapped,
    store: raw::Function,
    verify: raw::Function,
    _module: raw::Module,
}

/// Runs the check on every rank of a group whose driver allows P2P between
/// all its GPUs; every rank calls it at the same point with the same world
/// and rendezvous, and gets the same verdict. Errors only when the
/// rendezvous itself fails (a rank gone); a check that cannot run locally is
/// in the verdict.
pub fn run(
    rank: usize,
    world: usize,
    device: usize,
    rendezvous: &Rendezvous,
    timeout: Duration,
) -> Result<Verdict> {
    let threads = matches!(rendezvous, Rendezvous::Threads(_));
    let local = prepare(device, world).map_err(|e| e.to_string());
    let record = match &local {
        Ok(l) => record(l, device, threads).map_err(|e| e.to_string()),
        Err(e) => Err(e.clone()),
    };
    let mine = match &record {
        Ok(r) => r.clone(),
        Err(_) => Vec::new(),
    };
    let all = rendezvous.exchange("p2p-check-areas", rank, world, &mine, timeout)?;
    // Mapping and storing: a rank that fails here still meets the others.
    let mapped = match (&local, &record) {
        (Ok(l), Ok(_)) => map_and_store(l, &all, rank, world, device, threads),
        (Err(e), _) | (_, Err(e)) => Err(Error::invalid("P2P check", e.clone())),
    };
    let stored: &[u8] = if mapped.is_ok() { &[1] } else { &[] };
    let _ = rendezvous.exchange("p2p-check-stored", rank, world, stored, timeout)?;
    let found = match (&local, mapped) {
        (Ok(l), Ok(m)) => verify(l, &m, rank, world).map_err(|e| e.to_string()),
        (_, Err(e)) => Err(e.to_string()),
        (Err(e), _) => Err(e.clone()),
    };
    let all = rendezvous.exchange("p2p-check-found", rank, world, &encode(&found), timeout)?;
    Ok(group_verdict(&all))
}

fn prepare(device: usize, world: usize) -> Result<Local> {
    if !(2..=MAX_WORLD).contains(&world) {
        return Err(Error::invalid(
            "world size",
            format!("{world} (2 to {MAX_WORLD})"),
        ));
    }
    let ctx = open_context(device)?;
    let l = compile_and_load(
        &ctx,
        compile::P2P_CHECK_SRC,
        "p2p_check.cu",
        "the P2P check",
    )?;
    let store = l.module.function("tpcomm_p2p_check_store")?;
    let verify = l.module.function("tpcomm_p2p_check_verify")?;
    let bytes = world * SLOT_BYTES;
    let area = DeviceAlloc::new(ctx.cu_ctx(), bytes)?;
    // Zero: a slot nobody wrote reads as "no bytes arrived".
    area.fill(0, bytes, 0)?;
    let status = HostMapped::new(ctx.cu_ctx(), world * 8)?;
    Ok(Local {
        ctx,
        area,
        status,
        store,
        verify,
        _module: l.module,
    })
}

/// Bytes of a record before the IPC handle: device ordinal, area address,
/// and the process (pid and its random number, share::DeviceIdentity).
const HEAD: usize = 24;

/// Device ordinal, area address and process, and for processes the IPC
/// handle.
fn record(l: &Local, device: usize, threads: bool) -> Result<Vec<u8>> {
    let me = DeviceIdentity::here([0; 16]);
    let mut r = Vec::with_capacity(HEAD + 64);
    r.extend_from_slice(&(device as u32).to_le_bytes());
    r.extend_from_slice(&l.area.ptr().to_le_bytes());
    r.extend_from_slice(&me.pid.to_le_bytes());
    r.extend_from_slice(&me.process.to_le_bytes());
    if !threads {
        r.extend_from_slice(&l.area.ipc_handle()?);
    }
    Ok(r)
}

/// The peers' areas as this rank maps them, and what keeps the mappings.
struct Mapped {
    areas: [u64; MAX_WORLD],
    _peers: Vec<Arc<CudaContext>>,
    _ipc: Vec<IpcMapping>,
}

fn map_and_store(
    l: &Local,
    all: &[Vec<u8>],
    rank: usize,
    world: usize,
    device: usize,
    threads: bool,
) -> Result<Mapped> {
    let expect = if threads { HEAD } else { HEAD + 64 };
    let me = DeviceIdentity::here([0; 16]);
    let mut m = Mapped {
        areas: [0; MAX_WORLD],
        _peers: Vec::new(),
        _ipc: Vec::new(),
    };
    for (p, blob) in all.iter().enumerate() {
        if blob.len() != expect {
            return Err(Error::invalid(
                "P2P check",
                format!("rank {p} could not set its check area up"),
            ));
        }
        let peer_dev = u32::from_le_bytes([blob[0], blob[1], blob[2], blob[3]]) as usize;
        let ptr = u64::from_le_bytes(blob[4..12].try_into().unwrap_or_default());
        let peer = DeviceIdentity {
            pid: u32::from_le_bytes(blob[12..16].try_into().unwrap_or_default()),
            process: u64::from_le_bytes(blob[16..24].try_into().unwrap_or_default()),
            ..me
        };
        if p == rank {
            m.areas[p] = l.area.ptr();
        } else if threads || peer.same_process(&me) {
            // A rank of this process: the pointer is valid here, and an
            // IPC handle cannot be opened in the process that made it.
            if peer_dev != device {
                let pctx =
                    CudaContext::new(peer_dev).map_err(cuda_err("cuDevicePrimaryCtxRetain"))?;
                raw::set_current(l.ctx.cu_ctx())?;
                raw::enable_peer_access(pctx.cu_ctx())?;
                m._peers.push(pctx);
            }
            m.areas[p] = ptr;
        } else {
            let mut h = [0u8; 64];
            h.copy_from_slice(&blob[HEAD..HEAD + 64]);
            let map = IpcMapping::open(l.ctx.cu_ctx(), &h)?;
            m.areas[p] = map.ptr();
            m._ipc.push(map);
        }
    }
    let args = args(l, &m, rank, world);
    // SAFETY: every area is this rank's allocation or a live mapping of a
    // peer's (kept in `m`, and the peers keep theirs until the last
    // exchange), each `world * SLOT_BYTES` long, of which the kernel writes
    // this rank's slot only; the status is ours. Bounded: the store kernel
    // waits on nothing.
    unsafe { run_kernel(l, l.store, &args, world) }?;
    Ok(m)
}

/// Runs `f` (the store or the verify kernel) on a stream of its own of `l`'s
/// context and waits for it.
///
/// # Safety
/// `args` (`P2pCheckArgs` mirrors `struct P2pCheckArgs`) names memory the
/// kernel may touch until it ends, and the kernel ends.
unsafe fn run_kernel(l: &Local, f: raw::Function, args: &P2pCheckArgs, world: usize) -> Result<()> {
    raw::set_current(l.ctx.cu_ctx())?;
    let stream = l.ctx.new_stream().map_err(cuda_err("cuStreamCreate"))?;
    let s = launch_shape::p2p_check(world);
    // SAFETY: the caller's contract.
    unsafe { raw::launch_shared(f, s.grid, s.block, s.shared_bytes, args, stream.cu_stream())? };
    stream
        .synchronize()
        .map_err(cuda_err("cuStreamSynchronize"))
}

fn args(l: &Local, m: &Mapped, rank: usize, world: usize) -> P2pCheckArgs {
    P2pCheckArgs {
        areas: m.areas,
        status: l.status.device_ptr(),
        timeout_ns: VERIFY_TIMEOUT.as_nanos() as u64,
        rank: rank as u32,
        world: world as u32,
        // The same on every rank; a fixed odd constant keeps every word of a
        // pattern distinct from the zeros of an untouched area.
        seed: 0x7c0f_f1e5,
        pad: 0,
    }
}

fn verify(l: &Local, m: &Mapped, rank: usize, world: usize) -> Result<Vec<(usize, PairCheck)>> {
    let args = args(l, m, rank, world);
    // SAFETY: as for the store kernel; the verify kernel reads this rank's
    // own area and writes the status, both owned by `l`. Bounded by the
    // kernel's own timeout (VERIFY_TIMEOUT per writer).
    unsafe { run_kernel(l, l.verify, &args, world) }?;
    let status: Vec<u32> = (0..2 * world).map(|i| l.status.read_u32(4 * i)).collect();
    Ok(decode(&status, rank, world))
}

#[cfg(test)]
mod tests;
