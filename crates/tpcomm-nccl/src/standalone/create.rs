//! Making standalone communicators (docs/standalone.md): `ncclCommInitRank`
//! with a standalone id (the ranks meet through the id, check they share a
//! host and make the GPU side all or none) and `ncclCommSplit` of one (the
//! parent's ranks meet again and each colour makes a new one). The handles
//! go into registry.rs's table.

use crate::settings::{self, info, warn};
use crate::standalone::comm::{StandaloneComm, StandaloneGpu};
use crate::standalone::registry::{insert, CUDA_ERROR, INVALID_ARGUMENT};
use crate::standalone::{self, launch_gate, Secret, INVALID_USAGE};
use crate::types::*;
use std::ffi::c_int;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tpcomm::cuda::gathered;
use tpcomm::cuda::{CudaConfig, GpuComm, Rendezvous, SavedContext, Staging, MAX_WORLD};

/// The standalone rendezvous as the library's [`Rendezvous::Custom`].
#[derive(Debug)]
struct Meet {
    dir: PathBuf,
    secret: Secret,
}

impl tpcomm::cuda::Exchange for Meet {
    fn exchange(
        &self,
        key: &str,
        rank: usize,
        world: usize,
        mine: &[u8],
        timeout: Duration,
    ) -> tpcomm::Result<Vec<Vec<u8>>> {
        standalone::exchange(&self.dir, &self.secret, key, rank, world, mine, timeout)
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
    // SAFETY: `out` is non-null: the caller's ncclComm_t.
    unsafe { create_on(call, &mut *out, rank, world, secret, device) }
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
                    rank,
                    world,
                    device,
                    secret,
                    splits: Default::default(),
                    live: None,
                    solo: Some(st),
                });
                SUCCESS
            }
            Err(e) => standalone::fail(
                CUDA_ERROR,
                format!("{tag}: the standalone communicator could not be made ({e})"),
            ),
        };
    }
    match make(&tag, &secret, rank, world, device) {
        Ok(live) => {
            let r = live.gpu.memory_report();
            warn!(
                "{tag}: standalone tpcomm communicator (no real NCCL under it), {} transport; took {} of GPU memory plus {} bytes of staging, and {} bytes of pinned host memory",
                live.gpu.transport().name(),
                r.device_requested(),
                live.staging.bytes(),
                r.total_in(tpcomm::Place::PinnedHost).map_or(0, |b| b.bytes())
            );
            *out = insert(StandaloneComm {
                rank,
                world,
                device,
                secret,
                splits: Default::default(),
                live: Some(live),
                solo: None,
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
    let key = standalone::host_key();
    let hosts = tpcomm::cuda::Exchange::exchange(
        &meet,
        "standalone-hosts",
        rank,
        world,
        key.as_bytes(),
        s.timeout,
    )?;
    if let Some(p) = hosts.iter().position(|h| h != key.as_bytes()) {
        return Err(tpcomm::Error::Unsupported(format!(
            "rank {p} is on another machine ({}); standalone mode serves ranks of one host: unset TPCOMM_STANDALONE to use NCCL",
            String::from_utf8_lossy(&hosts[p])
        )));
    }
    info!("{tag}: all {world} ranks on this machine; creating the standalone communicator");
    let mut cfg = CudaConfig::new(rank, world, device);
    cfg.max_bytes = s.max_bytes;
    cfg.timeout = s.timeout;
    cfg.nccl_fallback = false;
    let rv = Rendezvous::Custom(Arc::new(meet));
    let made = (|| -> tpcomm::Result<_> {
        let gpu = GpuComm::new(&cfg, &rv)?;
        // The collective kernels are loaded now: no call (inside a CUDA
        // graph capture, say) ever compiles or loads a module.
        let image = gpu.prepare_collectives()?;
        info!("{tag}: collective kernels loaded ({image} of kernel image)");
        let staging = Staging::new(gpu.context(), cfg.max_bytes.as_usize()?)?;
        let gathered = gathered::kernels(gpu.context())?;
        info!(
            "{tag}: gathered-block reduction kernels loaded ({} of kernel image)",
            tpcomm::ByteSize::from_usize(gathered.cubin_bytes)
        );
        Ok((gpu, staging, gathered))
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
    let (gpu, staging, gathered) = made?;
    let gate = launch_gate::Gate::new(joined, rank, cfg.timeout);
    if let Some(g) = &gate {
        info!(
            "{tag}: ranks {:?} are threads of this process on this GPU too; their launches are ordered with this rank's",
            g.peers()
        );
    }
    Ok(StandaloneGpu {
        gpu,
        staging,
        gathered,
        gate,
    })
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
    let posted =
        standalone::meeting_dir(&standalone::runtime_base(), &parent.secret).and_then(|dir| {
            let all = standalone::exchange(
                &dir,
                &parent.secret,
                &step,
                parent.rank,
                parent.world,
                &mine,
                settings::get().timeout,
            )?;
            standalone::tidy(&dir, parent.rank, &step);
            Ok(all)
        });
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
