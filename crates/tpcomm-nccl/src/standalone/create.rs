//! Making standalone communicators (docs/standalone.md): `ncclCommInitRank`
//! with a standalone id (the ranks meet through the id, check they share a
//! host and make the GPU side all or none) and `ncclCommSplit` of one (the
//! parent's ranks meet again and each colour makes a new one). The handles
//! go into registry.rs's table.

use crate::ffi::config_nonblocking;
use crate::settings::{self, info, warn};
use crate::standalone::comm::{StandaloneComm, StandaloneGpu};
use crate::standalone::registry::{self, insert};
use crate::standalone::{self, launch_gate, Secret, INVALID_USAGE};
use crate::types::*;
use std::ffi::c_int;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tpcomm::cuda::communicator::{Fallback, Setup};
use tpcomm::cuda::gathered;
use tpcomm::cuda::{Communicator, Rendezvous, SavedContext, Staging, Turn};
use tpcomm::transport::MAX_WORLD;

/// The standalone rendezvous as the library's [`Rendezvous::Custom`].
#[derive(Debug)]
struct Meet {
    dir: PathBuf,
    secret: Secret,
}

impl tpcomm::cuda::Exchange for Meet {
    fn exchange(&self, turn: Turn<'_>) -> tpcomm::Result<Vec<Vec<u8>>> {
        standalone::exchange(&self.dir, &self.secret, turn)
    }
}

/// How a creation call returns: once the communicator is made, or at once
/// (a config with `blocking = 0`), the communicator being made on a thread
/// of its own while ncclCommGetAsyncError says ncclInProgress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blocking {
    Yes,
    No,
}

impl Blocking {
    /// As NCCL decides it: `NCCL_COMM_BLOCKING` when it is 0 or 1, else the
    /// `blocking` field of the `ncclConfig_t*` (NULL or unset: blocking).
    pub fn of_config(config: Opaque) -> Blocking {
        Blocking::decide(
            settings::get().nccl_comm_blocking.as_deref(),
            config_nonblocking(config),
        )
    }

    /// `env`: NCCL_COMM_BLOCKING's value; `config_says_no`: the config has
    /// `blocking = 0`. The variable wins when it is 0 or 1 (NCCL reads it
    /// as an integer and ignores other values).
    pub(crate) fn decide(env: Option<&str>, config_says_no: bool) -> Blocking {
        match env.map(str::trim).and_then(|v| v.parse::<i64>().ok()) {
            Some(0) => Blocking::No,
            Some(1) => Blocking::Yes,
            _ if config_says_no => Blocking::No,
            _ => Blocking::Yes,
        }
    }
}

/// `ncclCommInitRank(Config)` with a standalone id: makes this rank's
/// communicator on the current device, meeting the other ranks through the
/// id, and writes its handle to `out`. Every failure is an error code with
/// ncclGetLastError's text saying what to do; nothing is forwarded.
pub fn create(
    call: &'static str,
    out: *mut NcclComm,
    nranks: c_int,
    secret: Secret,
    rank: c_int,
    blocking: Blocking,
) -> NcclResult {
    if out.is_null() {
        return standalone::fail(
            INVALID_ARGUMENT,
            format!("{call}: the communicator pointer is NULL"),
        );
    }
    if !(1..=MAX_WORLD as c_int).contains(&nranks) {
        return standalone::fail(
            INVALID_USAGE,
            format!("{call}: a standalone communicator has 1 to {MAX_WORLD} ranks, not {nranks}; unset TPCOMM_STANDALONE to use NCCL"),
        );
    }
    if !(0..nranks).contains(&rank) {
        return standalone::fail(
            INVALID_ARGUMENT,
            format!("{call}: rank {rank} is not one of 0..{nranks}"),
        );
    }
    let (rank, world) = (rank as usize, nranks as usize);
    if let Err(e) = tpcomm::cuda::ensure_driver() {
        return standalone::fail(
            CUDA_ERROR,
            format!("{call} rank {rank}/{world}: standalone mode needs a GPU and its driver ({e})"),
        );
    }
    let Some(device) = tpcomm::cuda::current_device() else {
        return standalone::fail(
            CUDA_ERROR,
            format!("{call} rank {rank}/{world}: no CUDA context is current on this thread; select the rank's GPU first (cudaSetDevice, torch.cuda.set_device)"),
        );
    };
    if crate::group::depth() > 0 {
        // NCCL makes a communicator created inside a group at ncclGroupEnd,
        // and one thread may be creating every rank: each would wait for
        // ranks not yet asked for. So the ranks are made together there
        // (finish_group), each on a thread of its own.
        info!("{call} rank {rank}/{world} GPU {device}: inside a group; made at ncclGroupEnd");
        // NCCL writes the handle now and completes it at ncclGroupEnd;
        // programs keep the value they read here, so the handle is reserved
        // now and the made communicator put under it then.
        let pending = reserve_in_group(out, rank, world, secret, device);
        defer_reserved(call, out, pending, rank, world, secret, device);
        return SUCCESS;
    }
    if blocking == Blocking::No {
        return create_in_background(call, out, rank, world, secret, device);
    }
    // SAFETY: `out` is non-null: the caller's ncclComm_t.
    unsafe { create_on(call, &mut *out, rank, world, secret, device) }
}

/// A non-blocking creation: the handle is reserved and written to `out` now
/// (answering the queries at once), the communicator is made on a thread of
/// its own and put under it, and the call returns ncclInProgress; one thread
/// can so create every rank of a group in turn, as NCCL allows.
fn create_in_background(
    call: &'static str,
    out: *mut NcclComm,
    rank: usize,
    world: usize,
    secret: Secret,
    device: usize,
) -> NcclResult {
    let pending = registry::reserve(placeholder(rank, world, device, secret));
    registry::creation_started(pending);
    let handle = pending as usize;
    let spawned = std::thread::Builder::new()
        .name(format!("tpcomm-create-{rank}"))
        .spawn(move || {
            let pending = handle as NcclComm;
            let mut made: NcclComm = std::ptr::null_mut();
            let r = create_on(call, &mut made, rank, world, secret, device);
            let result = if r != SUCCESS {
                Err((r, standalone::last_error()))
            } else if registry::settle(pending, made) {
                info!("{call} rank {rank}/{world} GPU {device}: non-blocking creation done");
                Ok(())
            } else {
                // The handle was destroyed while its creation ran.
                registry::release(call, made, true);
                Ok(())
            };
            registry::creation_ended(pending, result);
        });
    if let Err(e) = spawned {
        registry::unreserve(pending);
        return standalone::fail(
            SYSTEM_ERROR,
            format!("{call} rank {rank}/{world}: no thread could be started for a non-blocking creation ({e})"),
        );
    }
    info!("{call} rank {rank}/{world} GPU {device}: non-blocking; ncclInProgress until made");
    // SAFETY: `out` is non-null: the caller's ncclComm_t.
    unsafe { *out = pending };
    IN_PROGRESS
}

/// The state a reserved handle holds until its communicator is made: it
/// answers the queries (rank, size, device) and has no GPU side.
fn placeholder(rank: usize, world: usize, device: usize, secret: Secret) -> StandaloneComm {
    StandaloneComm {
        rank,
        world,
        device,
        secret,
        splits: Default::default(),
        p2p_groups: Default::default(),
        pairs: Default::default(),
        premul: Default::default(),
        live: None,
        solo: None,
    }
}

/// A creation inside a group, standalone (above) or in auto mode before the
/// census decided (api/init.rs): the handle is reserved and written to
/// `out` (non-null) now, and answers the queries until ncclGroupEnd, where
/// [`defer_reserved`]'s creation is made under it, or the decision NCCL
/// forgets it (`registry::unreserve`).
pub fn reserve_in_group(
    out: *mut NcclComm,
    rank: usize,
    world: usize,
    secret: Secret,
    device: usize,
) -> NcclComm {
    let pending = registry::reserve(placeholder(rank, world, device, secret));
    // SAFETY: the caller checked `out` non-null: its ncclComm_t.
    unsafe { *out = pending };
    pending
}

/// A reserved handle's standalone creation, asked for inside a group (in
/// auto mode, decided standalone at its end): made by [`finish_group`]
/// with the group's other standalone ranks, under that handle.
pub fn defer_reserved(
    call: &'static str,
    out: *mut NcclComm,
    pending: NcclComm,
    rank: usize,
    world: usize,
    secret: Secret,
    device: usize,
) {
    DEFERRED.with_borrow_mut(|d| {
        d.push(Deferred {
            call,
            out: out as usize,
            pending: pending as usize,
            rank,
            world,
            secret,
            device,
        })
    });
}

/// A standalone creation asked for inside a group, made at its end.
struct Deferred {
    call: &'static str,
    /// The caller's `ncclComm_t*`, written at the group's end.
    out: usize,
    /// The handle reserved at the call (0 for ncclCommInitAll, which
    /// writes the handles only once they are made).
    pending: usize,
    rank: usize,
    world: usize,
    secret: Secret,
    device: usize,
}

thread_local! {
    static DEFERRED: std::cell::RefCell<Vec<Deferred>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// At the end of the outermost group: makes every standalone rank this
/// thread asked for inside it, all at once (a thread each: their creations
/// meet one another), and writes their handles. The result is the first
/// failure's code, with its text for ncclGetLastError on this thread; the
/// ranks that were made keep their handles (NCCL's group leaves them to the
/// caller as well).
pub fn finish_group() -> NcclResult {
    let asked = DEFERRED.with_borrow_mut(std::mem::take);
    make_together(asked)
}

/// `ncclCommInitAll` in standalone mode: `ndev` ranks of a fresh id, rank
/// `i` on device `devlist[i]` (`0..ndev` when NULL), made together as a
/// group's are; their handles go to `comms[0..ndev]`.
pub fn create_all(comms: *mut NcclComm, ndev: c_int, devlist: *const c_int) -> NcclResult {
    const CALL: &str = "ncclCommInitAll";
    if comms.is_null() {
        return standalone::fail(
            INVALID_ARGUMENT,
            format!("{CALL}: the communicator array is NULL"),
        );
    }
    if !(1..=MAX_WORLD as c_int).contains(&ndev) {
        return standalone::fail(
            INVALID_ARGUMENT,
            format!(
                "{CALL}: a standalone communicator has 1 to {MAX_WORLD} ranks, not ndev = {ndev}"
            ),
        );
    }
    let n = ndev as usize;
    let devices: Vec<usize> = if devlist.is_null() {
        (0..n).collect()
    } else {
        // SAFETY: non-null, and nccl.h's contract gives `ndev` ordinals.
        let d = unsafe { std::slice::from_raw_parts(devlist, n) };
        if let Some(bad) = d.iter().find(|&&x| x < 0) {
            return standalone::fail(
                INVALID_ARGUMENT,
                format!("{CALL}: device {bad} in the device list is not a CUDA device ordinal"),
            );
        }
        d.iter().map(|&x| x as usize).collect()
    };
    let secret = match standalone::new_id()
        .ok()
        .and_then(|id| standalone::parse(&id))
    {
        Some(s) => s,
        None => {
            return standalone::fail(
                SYSTEM_ERROR,
                format!("{CALL}: no random id could be drawn for the ranks to meet under"),
            )
        }
    };
    let asked = devices
        .iter()
        .enumerate()
        .map(|(rank, &device)| Deferred {
            call: CALL,
            // SAFETY: `comms` holds `ndev` handles (nccl.h's contract).
            out: unsafe { comms.add(rank) } as usize,
            pending: 0,
            rank,
            world: n,
            secret,
            device,
        })
        .collect();
    make_together(asked)
}

/// Makes the ranks of `asked` at once, a thread each, and writes each
/// handle (NULL for a rank that failed) to its `out`.
fn make_together(asked: Vec<Deferred>) -> NcclResult {
    if asked.is_empty() {
        return SUCCESS;
    }
    let made: Vec<(NcclResult, NcclComm, String)> = std::thread::scope(|s| {
        let threads: Vec<_> = asked
            .iter()
            .map(|d| {
                s.spawn(move || {
                    let mut h: NcclComm = std::ptr::null_mut();
                    let r = create_on(d.call, &mut h, d.rank, d.world, d.secret, d.device);
                    let text = if r == SUCCESS {
                        String::new()
                    } else {
                        standalone::last_error()
                    };
                    (r, h as usize, text)
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|t| match t.join() {
                Ok((r, h, text)) => (r, h as NcclComm, text),
                Err(_) => (
                    INTERNAL_ERROR,
                    std::ptr::null_mut(),
                    "a rank's creation panicked".to_string(),
                ),
            })
            .collect()
    });
    let mut first = SUCCESS;
    for (d, (r, h, text)) in asked.iter().zip(made) {
        let pending = d.pending as NcclComm;
        let h = match (d.pending, r == SUCCESS) {
            (0, _) => h,
            (_, true) if registry::settle(pending, h) => pending,
            (_, true) => {
                // The reserved handle was destroyed inside the group.
                registry::release("ncclGroupEnd", h, true);
                std::ptr::null_mut()
            }
            (_, false) => {
                registry::unreserve(pending);
                std::ptr::null_mut()
            }
        };
        // SAFETY: `out` was the caller's non-null ncclComm_t* at the call,
        // which NCCL's contract keeps valid until the group ends.
        unsafe { *(d.out as *mut NcclComm) = h };
        if r != SUCCESS && first == SUCCESS {
            first = standalone::fail(r, text);
        }
    }
    first
}

/// Makes rank `rank` of `world` on `device`, meeting under `secret`, and
/// writes its handle to `out`.
fn create_on(
    call: &'static str,
    out: &mut NcclComm,
    rank: usize,
    world: usize,
    secret: Secret,
    device: usize,
) -> NcclResult {
    if let Err(e) = tpcomm::cuda::ensure_driver() {
        return standalone::fail(
            CUDA_ERROR,
            format!("{call} rank {rank}/{world}: standalone mode needs a GPU and its driver ({e})"),
        );
    }
    let tag = format!("{call} rank {rank}/{world} GPU {device}");
    let _restore = SavedContext::save();
    if world == 1 {
        let solo = tpcomm::cuda::open_context(device).and_then(|c| Staging::new(&c, 16));
        return match solo {
            Ok(st) => {
                info!("{tag}: standalone communicator of one rank (every call is a copy)");
                *out = insert(StandaloneComm {
                    solo: Some(st),
                    ..placeholder(rank, world, device, secret)
                });
                SUCCESS
            }
            Err(e) => standalone::fail(
                CUDA_ERROR,
                format!("{tag}: the standalone communicator could not be made ({e})"),
            ),
        };
    }
    match make(
        &tag,
        &secret,
        rank,
        world,
        device,
        settings::get().max_bytes,
    ) {
        Ok(live) => {
            warn!(
                "{tag}: standalone tpcomm communicator (no real NCCL under it), {} transport; {}",
                live.gpu().transport().name(),
                memory_taken(&live)
            );
            *out = insert(StandaloneComm {
                live: Some(live),
                ..placeholder(rank, world, device, secret)
            });
            SUCCESS
        }
        Err(e) => standalone::fail(
            SYSTEM_ERROR,
            format!("{tag}: the standalone communicator could not be made ({e})"),
        ),
    }
}

fn make(
    tag: &str,
    secret: &Secret,
    rank: usize,
    world: usize,
    device: usize,
    max_bytes: tpcomm::ByteSize,
) -> tpcomm::Result<StandaloneGpu> {
    let s = settings::get();
    // Joined before the first exchange: once any rank is made, every rank
    // of this process on this GPU has joined (launch_gate.rs).
    let joined = launch_gate::join(secret.0, device, rank);
    let dir = standalone::meeting_dir(&standalone::runtime_base(), secret)?;
    let meet = Meet {
        dir: dir.clone(),
        secret: *secret,
    };
    let key = crate::host::key();
    let turn = Turn {
        key: "standalone-hosts",
        rank,
        world,
        mine: key.as_bytes(),
        timeout: s.timeout,
    };
    let hosts = tpcomm::cuda::Exchange::exchange(&meet, turn)?;
    if let Some(why) = crate::host::other_machine(&hosts, key.as_bytes()) {
        return Err(tpcomm::Error::Unsupported(format!(
            "{why}; standalone mode serves ranks of one host: unset TPCOMM_STANDALONE to use NCCL"
        )));
    }
    info!("{tag}: all {world} ranks on this machine; creating the standalone communicator");
    // Call words on, as in every drop-in communicator (Settings::cuda_config).
    let mut cfg = s.cuda_config(rank, world, device);
    cfg.max_bytes = max_bytes;
    cfg.nccl_fallback = false;
    // The exact wire whatever TPCOMM_WIRE says: standalone mode has no
    // quantized path. A quantized wire asked for is said to be ignored.
    if let Some(text) = ignored_wire(tpcomm::env::WIRE.checked_value()) {
        if rank == 0 {
            warn!("{tag}: {text}");
        }
    }
    cfg.wire = Some(tpcomm::quant::Wire::Exact);
    cfg.wire_min_bytes = Some(tpcomm::ByteSize::b(0));
    let rv = Rendezvous::Custom(Arc::new(meet));
    let made = (|| -> tpcomm::Result<_> {
        // The library's communicator with no NCCL behind it and the staging
        // buffer (TPCOMM_MAX_BYTES); its wire and route table are agreed
        // over the meeting directory like the rest.
        let setup = Setup {
            fallback: Fallback::None,
            staging: true,
        };
        let comm = Communicator::create(&cfg, &rv, setup)?;
        // The collective kernels are loaded now: no call (inside a CUDA
        // graph capture, say) ever compiles or loads a module.
        let image = comm.prepare_collectives()?;
        info!("{tag}: collective kernels loaded ({image} of kernel image)");
        let gathered = gathered::kernels(comm.gpu().context())?;
        info!(
            "{tag}: gathered-block reduction kernels loaded ({} of kernel image)",
            tpcomm::ByteSize::from_usize(gathered.cubin_bytes)
        );
        Ok((comm, gathered))
    })();
    // Either every rank has the communicator or none does.
    let ok = [made.is_ok() as u8];
    let all = rv.exchange("standalone-ready", rank, world, &ok, cfg.timeout)?;
    standalone::tidy(&dir, rank, "standalone-ready");
    if let Some(p) = all.iter().position(|v| v.first() != Some(&1)) {
        if made.is_ok() {
            return Err(tpcomm::Error::Aborted(format!(
                "rank {p} could not make its side (see its log)"
            )));
        }
    }
    let (comm, gathered) = made?;
    let gate = launch_gate::Gate::new(joined, rank, cfg.timeout);
    if let Some(g) = &gate {
        info!(
            "{tag}: ranks {:?} are threads of this process on this GPU too; their launches are ordered with this rank's",
            g.peers()
        );
        if crate::at_load::WIDENED.load(Ordering::Relaxed) {
            info!("{tag}: CUDA_DEVICE_MAX_CONNECTIONS was unset; tpcomm set it to 32 when it was loaded, so the ranks' streams get queues of their own (docs/shared-gpu.md)");
        }
    }
    StandaloneGpu::new(comm, gathered, gate)
}

/// The largest buffer a send/recv pair's communicator sizes itself by
/// ([`make_pair`]): its groups move their streams in rounds through the
/// staging buffer, so a small one serves any count.
const PAIR_MAX_BYTES: tpcomm::ByteSize = tpcomm::ByteSize::mib(4);

/// The two-rank communicator of `parent`'s rank and `peer` that their sends
/// and receives run on (p2p.rs): both ranks make it at their first group
/// with each other, meeting under a secret derived from the parent's and the
/// pair, so the other ranks need not take part. Its buffers are sized by the
/// smaller of TPCOMM_MAX_BYTES and [`PAIR_MAX_BYTES`]; the info log says
/// what it took.
pub(crate) fn make_pair(parent: &StandaloneComm, peer: usize) -> tpcomm::Result<StandaloneComm> {
    let (i, j) = (parent.rank.min(peer), parent.rank.max(peer));
    let rank = usize::from(parent.rank == j);
    // Bit 63 keeps pair salts apart from the splits' (split number << 32 | colour).
    let secret = parent
        .secret
        .derive((1 << 63) | ((i as u64) << 20) | j as u64);
    let tag = format!(
        "ncclSend/ncclRecv rank {}/{} GPU {}: pair with rank {peer}",
        parent.rank, parent.world, parent.device
    );
    let _restore = SavedContext::save();
    let max = settings::get().max_bytes.min(PAIR_MAX_BYTES);
    let live = make(&tag, &secret, rank, 2, parent.device, max)?;
    info!(
        "{tag}: made the pair's two-rank communicator for its sends and receives; {}",
        memory_taken(&live)
    );
    Ok(StandaloneComm {
        live: Some(live),
        ..placeholder(rank, 2, parent.device, secret)
    })
}

/// What a standalone communicator's GPU side took, every byte, as its
/// creation's log line says it.
fn memory_taken(live: &StandaloneGpu) -> String {
    let r = live.gpu().memory_report();
    format!(
        "took {} of GPU memory plus {} bytes of staging, and {} bytes of pinned host memory",
        r.device_requested(),
        live.staging().bytes(),
        r.total_in(tpcomm::Place::PinnedHost)
            .map_or(0, |b| b.bytes())
    )
}

/// `NCCL_SPLIT_NOCOLOR`: the ranks that get no communicator from a split.
pub(crate) const NO_COLOR: c_int = -1;

/// Where this rank lands in a split: the ranks of its colour ordered by
/// (key, parent rank), as NCCL orders them. `all` holds every parent rank's
/// (colour, key); `None` for NO_COLOR.
pub(crate) fn split_place(all: &[(c_int, c_int)], me: usize) -> Option<(usize, usize)> {
    let color = all[me].0;
    if color == NO_COLOR {
        return None;
    }
    let mut members: Vec<(c_int, usize)> = (0..all.len())
        .filter(|&r| all[r].0 == color)
        .map(|r| (all[r].1, r))
        .collect();
    members.sort();
    let rank = members.iter().position(|&(_, r)| r == me)?;
    Some((rank, members.len()))
}

/// `ncclCommSplit` on a standalone communicator: every rank posts its
/// (colour, key) where the parent's ranks met, and the ranks of one colour
/// make a new standalone communicator meeting under a secret derived from
/// the parent's, the split's number and the colour.
pub fn split(
    parent: &StandaloneComm,
    color: c_int,
    key: c_int,
    newcomm: *mut NcclComm,
) -> NcclResult {
    const CALL: &str = "ncclCommSplit";
    if newcomm.is_null() {
        return standalone::fail(
            INVALID_ARGUMENT,
            format!("{CALL}: the new communicator pointer is NULL"),
        );
    }
    if color < NO_COLOR {
        return standalone::fail(
            INVALID_ARGUMENT,
            format!("{CALL}: colour {color} is negative (NCCL_SPLIT_NOCOLOR is -1)"),
        );
    }
    let n = parent.splits.fetch_add(1, Ordering::AcqRel);
    let tag = format!("{CALL} #{n} rank {}/{}", parent.rank, parent.world);
    let mut mine = color.to_le_bytes().to_vec();
    mine.extend_from_slice(&key.to_le_bytes());
    let step = format!("split-{n}");
    let posted = standalone::comm::swap(parent, &step, &mine);
    let all: Option<Vec<(c_int, c_int)>> = match posted {
        Ok(v) => v
            .iter()
            .map(|b| {
                let w = |i: usize| b.get(i..i + 4)?.try_into().ok().map(c_int::from_le_bytes);
                Some((w(0)?, w(4)?))
            })
            .collect(),
        Err(e) => {
            return standalone::fail(SYSTEM_ERROR, format!("{tag}: the ranks did not meet ({e})"))
        }
    };
    let Some(all) = all else {
        return standalone::fail(
            SYSTEM_ERROR,
            format!("{tag}: a rank posted a malformed colour"),
        );
    };
    // SAFETY: non-null, the caller's ncclComm_t.
    let out = unsafe { &mut *newcomm };
    *out = std::ptr::null_mut();
    let Some((rank, world)) = split_place(&all, parent.rank) else {
        return SUCCESS;
    };
    let secret = parent.secret.derive((n << 32) | color as u32 as u64);
    create_on(CALL, out, rank, world, secret, parent.device)
}

/// Where rank `rank` of `world` lands when `exclude` leaves: its new rank
/// and the new size, or why the list is bad (a rank out of range or named
/// twice, this rank itself, or no rank left).
pub(crate) fn shrink_place(
    world: usize,
    rank: usize,
    exclude: &[c_int],
) -> Result<(usize, usize), String> {
    let mut gone = vec![false; world];
    for &e in exclude {
        let Some(slot) = usize::try_from(e).ok().and_then(|i| gone.get_mut(i)) else {
            return Err(format!(
                "excluded rank {e} is not a rank of this {world}-rank communicator"
            ));
        };
        if *slot {
            return Err(format!("rank {e} is excluded twice"));
        }
        *slot = true;
    }
    if gone[rank] {
        return Err(format!(
            "rank {rank} is in its own exclude list (excluded ranks do not call ncclCommShrink)"
        ));
    }
    let new_rank = gone[..rank].iter().filter(|g| !**g).count();
    let new_world = gone.iter().filter(|g| !**g).count();
    Ok((new_rank, new_world))
}

/// `ncclCommShrink` on a standalone communicator: the ranks that stay (every
/// one of them calls it with the same list; the excluded ranks do not) keep
/// their order and make a new standalone communicator on the parent's GPU,
/// meeting under a secret derived from the parent's and the count of the
/// parent's splits and shrinks. No exchange on the parent is needed, so an
/// excluded rank that is gone cannot hold it up. The config and flags are
/// not read (nothing of the parent is aborted: its calls have all returned).
pub fn shrink(
    parent: &StandaloneComm,
    exclude: *const c_int,
    exclude_count: c_int,
    newcomm: *mut NcclComm,
) -> NcclResult {
    const CALL: &str = "ncclCommShrink";
    if newcomm.is_null() {
        return standalone::fail(
            INVALID_ARGUMENT,
            format!("{CALL}: the new communicator pointer is NULL"),
        );
    }
    let list: &[c_int] = match (exclude_count, exclude.is_null()) {
        (0, _) => &[],
        (n, false) if n > 0 => {
            // SAFETY: non-null, and nccl.h's contract gives `exclude_count`
            // ranks there.
            unsafe { std::slice::from_raw_parts(exclude, n as usize) }
        }
        (n, _) => {
            return standalone::fail(
                INVALID_ARGUMENT,
                format!("{CALL}: {n} excluded ranks with the list at {exclude:p}"),
            )
        }
    };
    let (rank, world) = match shrink_place(parent.world, parent.rank, list) {
        Ok(p) => p,
        Err(why) => return standalone::fail(INVALID_ARGUMENT, format!("{CALL}: {why}")),
    };
    let n = parent.splits.fetch_add(1, Ordering::AcqRel);
    // SAFETY: non-null, the caller's ncclComm_t.
    let out = unsafe { &mut *newcomm };
    *out = std::ptr::null_mut();
    // A colour no split can have (splits take 0 and up, or none).
    let secret = parent.secret.derive((n << 32) | 0xffff_fffe);
    create_on(CALL, out, rank, world, secret, parent.device)
}

/// What a standalone communicator says when TPCOMM_WIRE asks for a
/// quantized wire (`asked`: the variable's value, `None` when unset or
/// invalid, which the library's own check reports): it is ignored, since
/// standalone mode sums on the exact wire only. `None` for the exact wire.
fn ignored_wire(asked: Option<tpcomm::quant::Wire>) -> Option<String> {
    let w = asked.filter(|w| *w != tpcomm::quant::Wire::Exact)?;
    Some(format!(
        "TPCOMM_WIRE={} is ignored: a standalone communicator sums on the exact wire only (the quantized wire runs beside a real NCCL communicator, docs/quantized.md)",
        w.label()
    ))
}

#[cfg(test)]
mod tests {
    use super::{ignored_wire, Blocking};
    use tpcomm::quant::Wire;

    #[test]
    fn nccl_comm_blocking_overrides_the_config_as_nccl_does() {
        // Unset or not 0/1: the config decides (NULL or unset: blocking).
        for env in [None, Some(""), Some("2"), Some("-1"), Some("yes")] {
            assert_eq!(Blocking::decide(env, false), Blocking::Yes, "{env:?}");
            assert_eq!(Blocking::decide(env, true), Blocking::No, "{env:?}");
        }
        // 0 or 1 wins over the config either way.
        for cfg in [false, true] {
            assert_eq!(Blocking::decide(Some("0"), cfg), Blocking::No);
            assert_eq!(Blocking::decide(Some(" 0 "), cfg), Blocking::No);
            assert_eq!(Blocking::decide(Some("1"), cfg), Blocking::Yes);
        }
    }

    #[test]
    fn a_quantized_wire_asked_of_a_standalone_communicator_is_said_to_be_ignored() {
        assert_eq!(ignored_wire(None), None);
        assert_eq!(ignored_wire(Some(Wire::Exact)), None);
        for w in [Wire::Int8 { group: 128 }, Wire::Fp8 { group: 64 }] {
            let t = ignored_wire(Some(w)).expect("a quantized wire is warned about");
            assert!(
                t.starts_with(&format!("TPCOMM_WIRE={} is ignored", w.label())),
                "{t}"
            );
            assert!(t.contains("exact wire only"), "{t}");
        }
    }
}
