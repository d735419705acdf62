//! A GPU bench rank's communicators: its device and stream, tpcomm's
//! communicator for the transport asked, the quantized one when a quantized
//! wire is among the algorithms, NCCL's when nccl is and every rank loaded
//! it; and the selector of `--algos auto`.

use super::device::{open_rank_device, RankDevice};
use super::{GpuBenchArgs, RankInfo};
use std::sync::Arc;
use std::time::Duration;
use tpcomm::cuda::cudarc::driver::{CudaContext, CudaStream};
use tpcomm::cuda::{CudaConfig, GpuComm, Rendezvous};
use tpcomm::nccl::{Nccl, NcclComm, UniqueId};
use tpcomm::quant::Wire;
use tpcomm::select;
use tpcomm::Result;

/// This rank's device, stream and communicators. The fields drop in the
/// order rank_main's locals did: the communicators before the stream and
/// the context.
pub(super) struct Comms {
    pub(super) quant: Option<tpcomm::cuda::quant::QuantComm>,
    pub(super) nccl: Option<NcclComm>,
    pub(super) comm: GpuComm,
    pub(super) stream: Arc<CudaStream>,
    pub(super) ctx: Arc<CudaContext>,
}

/// Opens this rank's GPU (round-robin over the visible ones: more ranks than
/// GPUs share them) and its communicators; fills in `RankInfo`.
pub(super) fn open_comms(
    rank: usize,
    world: usize,
    args: &GpuBenchArgs,
    rv: &Rendezvous,
    timeout: Duration,
) -> Result<(Comms, RankInfo)> {
    let RankDevice {
        gpus,
        device,
        ctx,
        stream,
    } = open_rank_device(rank)?;
    let mut cfg = CudaConfig::new(rank, world, device);
    cfg.max_bytes = args.max;
    cfg.timeout = timeout;
    cfg.transport = args.transport;
    let comm = GpuComm::new(&cfg, rv)?;
    let (nvrtc, arch) = comm.compiled_with();
    let mut info = RankInfo {
        gpu: ctx.name().unwrap_or_default(),
        arch: format!("sm_{}{}", arch.0, arch.1),
        nvrtc: format!(
            "{}.{} ({})",
            nvrtc.0,
            nvrtc.1,
            tpcomm::cuda::nvrtc_path().unwrap_or_default()
        ),
        nccl: None,
        memory: comm.memory_report().to_string(),
        transport: comm.transport().name().to_string(),
        ranks_on_device: comm.sharing().ranks_on_device,
    };
    let nccl = if world > gpus && args.algos.iter().any(|a| a == "nccl") {
        if rank == 0 {
            eprintln!("NCCL rows skipped: NCCL refuses ranks that share a GPU ({world} ranks on {gpus} GPU(s))");
        }
        None
    } else if args.algos.iter().any(|a| a == "nccl") {
        nccl_comm(rank, world, rv, timeout, &mut info)
    } else {
        None
    };
    let quant = if args
        .algos
        .iter()
        .any(|a| Wire::parse_quantized(a).is_some())
    {
        Some(tpcomm::cuda::quant::QuantComm::new(
            &cfg,
            comm.transport(),
            rv,
        )?)
    } else {
        None
    };
    let comms = Comms {
        quant,
        nccl,
        comm,
        stream,
        ctx,
    };
    Ok((comms, info))
}

/// The selector every rank uses for `--algos auto`: the table the parent
/// process resolved (checked against its fingerprint), else the class defaults.
pub(super) fn auto_selector(args: &GpuBenchArgs) -> Result<select::Selector> {
    let class = args
        .class
        .as_deref()
        .map(crate::machine::parse_class)
        .transpose()?
        .unwrap_or(tpcomm::topology::MachineClass::Nvlink);
    match (&args.table, &args.fingerprint) {
        (Some(t), Some(fp)) => select::load_for(
            t,
            &select::Machine {
                fingerprint: fp.clone(),
                class,
                driver: None,
                nccl: None,
            },
        ),
        _ => Ok(select::Selector::for_class(class)),
    }
}

fn nccl_comm(
    rank: usize,
    world: usize,
    rv: &Rendezvous,
    timeout: Duration,
    info: &mut RankInfo,
) -> Option<NcclComm> {
    // Every rank learns whether every rank loaded NCCL, so all skip it together.
    let loaded = Nccl::load();
    if let Err(e) = &loaded {
        eprintln!("rank {rank}: NCCL rows skipped: {e}");
    }
    let id = match (&loaded, rank) {
        (Ok(n), 0) => n.unique_id().ok(),
        _ => None,
    };
    let mine: Vec<u8> = match (&loaded, id) {
        (Ok(_), Some(id)) => id.0.to_vec(),
        (Ok(_), None) => vec![1],
        (Err(_), _) => vec![],
    };
    let all = rv.exchange("nccl-id", rank, world, &mine, timeout).ok()?;
    if all.iter().any(|v| v.is_empty()) || all[0].len() != 128 {
        return None;
    }
    let nccl = loaded.ok()?;
    let mut id = [0u8; 128];
    id.copy_from_slice(&all[0]);
    info.nccl = Some(nccl.version().to_string());
    match nccl.comm_init_rank(world, &UniqueId(id), rank) {
        Ok(c) => Some(c),
        Err(e) => {
            eprintln!("rank {rank}: NCCL rows skipped: {e}");
            None
        }
    }
}
