//! Creating a rank's quantized all-reduce: its kernels, its buffers (own
//! area, the peers' mapped, the gathered blocks when asked for) and its
//! memory report.

use super::gathered::GatherLayout;
use super::*;

impl QuantComm {
    /// Creates this rank's quantized all-reduce over `transport` (`Cuda` or
    /// `Host`, as the group's exact communicator resolved it): compiles the
    /// kernels, allocates and maps every buffer. Every rank calls it with the
    /// same configuration and transport.
    pub fn new(cfg: &CudaConfig, transport: Transport, rendezvous: &Rendezvous) -> Result<Self> {
        let max_bytes = cfg.checked("the quantized all-reduce")?;
        if matches!(transport, Transport::Auto | Transport::Nccl) {
            return Err(Error::invalid(
                "transport",
                format!(
                    "the quantized all-reduce takes the resolved transport (cuda or host), not {transport}"
                ),
            ));
        }
        let ctx = crate::cuda::transport::p2p::open_context(cfg.device)?;
        let kernels = kernels_for(&ctx)?;
        let dev_ord = cfg.device as i32;
        let sms = raw::sm_count(dev_ord)? as u32;
        let layout = QuantLayout::new(max_bytes, cfg.world, transport);
        let host = transport == Transport::Host;
        let area_bytes = layout.area_bytes();
        let dev_bytes = if host {
            CTL_BYTES
        } else {
            area_bytes + CTL_BYTES
        };
        let gathered_block = if cfg.wire_algo == QuantAlgo::Gathered {
            GatherLayout::max_block(max_bytes)
        } else {
            0
        };
        let gathered_bytes = cfg.world * gathered_block;
        let granularity = raw::allocation_granularity(dev_ord)?;
        let (free, _) = raw::mem_get_info()?;
        let needed = round_up(dev_bytes, granularity) + round_up(gathered_bytes, granularity);
        if needed > free {
            return Err(Error::OutOfMemory {
                what: "the quantized all-reduce's buffers".into(),
                needed: ByteSize::from_usize(needed),
                available: ByteSize::from_usize(free),
            });
        }
        let dev = DeviceAlloc::new(ctx.cu_ctx(), dev_bytes)?;
        // Written by pack before any kernel reads it; never read past a
        // call's blocks.
        let gathered = (gathered_bytes > 0)
            .then(|| DeviceAlloc::new(ctx.cu_ctx(), gathered_bytes))
            .transpose()?;
        // Flags start at 0, which no call's tag is; control words at 0.
        dev.fill(0, dev_bytes, 0)?;
        let ctl = dev.ptr() + (dev_bytes - CTL_BYTES) as u64;
        let status = HostMapped::new(ctx.cu_ctx(), STATUS_BYTES)?;
        let threads = matches!(rendezvous, Rendezvous::Threads(_));

        // The own area and what peers need to map it.
        let (own, own_ptr, extra): (OwnArea, u64, Vec<u8>) = if !host {
            let h = if threads {
                Vec::new()
            } else {
                dev.ipc_handle()?.to_vec()
            };
            (OwnArea::Device, dev.ptr(), h)
        } else if threads {
            // Portable pinned memory (zero-filled) has one address in every
            // context of the process.
            let m = HostMapped::new(ctx.cu_ctx(), area_bytes)?;
            let p = m.device_ptr();
            (OwnArea::HostThreads(m), p, Vec::new())
        } else {
            let len = round_up(area_bytes, 1 << 16);
            let (file, path) = SharedFile::create(len)?;
            raw::set_current(ctx.cu_ctx())?;
            // SAFETY: the whole mapping of `file`, kept beside the
            // registration (which drops first: the variant's first field).
            let reg = unsafe { Registered::new(file.base(), len) }?;
            let p = reg.device_ptr();
            (OwnArea::HostProcess(reg, file), p, path.into_bytes())
        };

        let identity = DeviceIdentity::of_device(cfg.device)?;
        const HEAD: usize = DeviceIdentity::BYTES + 12;
        let mut mine = Vec::with_capacity(HEAD + extra.len());
        mine.extend_from_slice(&identity.to_bytes());
        mine.extend_from_slice(&(cfg.device as u32).to_le_bytes());
        mine.extend_from_slice(&own_ptr.to_le_bytes());
        mine.extend_from_slice(&extra);
        let all = rendezvous.exchange("quant-buffers", cfg.rank, cfg.world, &mine, cfg.timeout)?;

        let mut areas = [0u64; MAX_WORLD];
        let mut peers = Vec::new();
        let mut ids = Vec::with_capacity(cfg.world);
        for (p, blob) in all.iter().enumerate() {
            let id = (blob.len() >= HEAD)
                .then(|| DeviceIdentity::from_bytes(blob))
                .flatten();
            ids.push(id.ok_or_else(|| {
                Error::invalid(
                    "rendezvous",
                    format!(
                        "rank {p} posted {} bytes for the quantized buffers, expected at least {HEAD}",
                        blob.len()
                    ),
                )
            })?);
        }
        let sharing = Sharing::of(&ids, cfg.rank);
        crate::cuda::share::note_sharing(sharing, cfg.device);
        let check_calls = call_word::resolve(cfg.check_calls, &ids);
        let cap = grid_cap(sms as usize, kernels.blocks_per_sm as usize, sharing)? as u32;
        let blocks_asked = crate::env::QUANT_BLOCKS.get()?.map(|n| n as u32);
        for (p, blob) in all.iter().enumerate() {
            let at = DeviceIdentity::BYTES;
            let peer_dev =
                u32::from_le_bytes([blob[at], blob[at + 1], blob[at + 2], blob[at + 3]]) as i32;
            let mut ptr_bytes = [0u8; 8];
            ptr_bytes.copy_from_slice(&blob[at + 4..at + 12]);
            let ptr = u64::from_le_bytes(ptr_bytes);
            let rest = &blob[HEAD..];
            if p == cfg.rank {
                areas[p] = own_ptr;
                continue;
            }
            // A rank of this process (threads, or standalone communicators on
            // threads) is mapped as a thread is: an IPC handle cannot be
            // opened in the process that made it.
            let here = threads || ids[p].same_process(&ids[cfg.rank]);
            areas[p] = match (host, here) {
                (false, true) => {
                    if peer_dev != dev_ord {
                        if !raw::can_access_peer(dev_ord, peer_dev)? {
                            return Err(Error::Unsupported(format!(
                                "GPU {dev_ord} cannot access GPU {peer_dev} peer-to-peer; the quantized P2P all-reduce needs it (use the host transport)"
                            )));
                        }
                        let pctx = CudaContext::new(peer_dev as usize)
                            .map_err(cuda_err("cuDevicePrimaryCtxRetain"))?;
                        raw::set_current(ctx.cu_ctx())?;
                        raw::enable_peer_access(pctx.cu_ctx())?;
                        peers.push(PeerMap::Ctx(pctx));
                    }
                    ptr
                }
                (false, false) => {
                    let h: [u8; 64] = rest.try_into().map_err(|_| {
                        Error::invalid(
                            "rendezvous",
                            format!("rank {p} posted no CUDA IPC handle for the quantized buffers"),
                        )
                    })?;
                    let m = IpcMapping::open(ctx.cu_ctx(), &h)?;
                    let ptr = m.ptr();
                    peers.push(PeerMap::Ipc(m));
                    ptr
                }
                (true, true) => ptr,
                (true, false) => {
                    let path = std::str::from_utf8(rest).map_err(|_| {
                        Error::invalid(
                            "rendezvous",
                            format!("rank {p} posted a bad path for its quantized host area"),
                        )
                    })?;
                    let file = SharedFile::open(path)?;
                    raw::set_current(ctx.cu_ctx())?;
                    // SAFETY: as for this rank's own file above.
                    let reg = unsafe { Registered::new(file.base(), file.len()) }?;
                    let ptr = reg.device_ptr();
                    peers.push(PeerMap::Host(reg, file));
                    ptr
                }
            };
        }
        // No rank launches before every rank has mapped every peer; every
        // rank sends and checks call words alike.
        call_word::meet(rendezvous, "quant-mapped", cfg, check_calls)?;

        let (mut dst, mut src) = ([0u64; MAX_WORLD], [0u64; MAX_WORLD]);
        let ndst;
        if host {
            dst[0] = own_ptr;
            ndst = 1;
            src[..cfg.world].copy_from_slice(&areas[..cfg.world]);
        } else {
            // dst[q]: this rank's slot in rank q's area; none for itself
            // (the kernels compute its own codes again rather than reading
            // them back, so slot `rank` of each area stays unused).
            for p in 0..cfg.world {
                src[p] = own_ptr + (p * layout.slot_stride) as u64;
                if p != cfg.rank {
                    dst[p] = areas[p] + (cfg.rank * layout.slot_stride) as u64;
                }
            }
            ndst = cfg.world as u32;
        }

        let slots = if host { 1 } else { cfg.world };
        let detail = format!(
            "2 parities x {slots} slot(s) x {} (codes {}, f32 scales for groups of {MIN_GROUP}, u32 flags per {CHUNK_ELEMS}-element chunk)",
            ByteSize::from_usize(layout.slot_stride),
            ByteSize::from_usize(layout.max_elems)
        );
        let mut lines = Vec::new();
        if host {
            lines.push(
                MemoryLine::pinned_host(
                    "quantized wire: own area (codes, scales, flags)",
                    area_bytes,
                )
                .with_detail(detail),
            );
        } else {
            lines.push(
                MemoryLine::device(
                    "quantized wire: receive slots (codes, scales, flags)",
                    area_bytes,
                )
                .with_detail(detail),
            );
        }
        if gathered_bytes > 0 {
            lines.push(
                MemoryLine::device("quantized wire: gathered blocks", gathered_bytes).with_detail(
                    format!(
                        "{} ranks x {} (codes and f32 scales of the largest message, groups of {MIN_GROUP}), moved by the all-gather",
                        cfg.world,
                        ByteSize::from_usize(gathered_block)
                    ),
                ),
            );
        }
        lines.push(MemoryLine::device(
            "quantized wire: control words (epoch, abort)",
            CTL_BYTES,
        ));
        lines.push(MemoryLine::pinned_host(
            "quantized wire: status (pinned, mapped)",
            STATUS_BYTES,
        ));
        let report = MemoryReport::gpu(
            "the quantized all-reduce",
            lines,
            GpuAllocations {
                device: cfg.device,
                allocations: [dev_bytes, gathered_bytes]
                    .into_iter()
                    .filter(|&b| b > 0)
                    .map(ByteSize::from_usize)
                    .collect(),
                granularity: ByteSize::from_usize(granularity),
                kernel_image: ByteSize::from_usize(kernels.cubin_bytes),
            },
        );

        Ok(Self {
            ctx,
            rank: cfg.rank,
            world: cfg.world,
            max_bytes,
            timeout: cfg.timeout,
            check_calls,
            transport,
            layout,
            kernels,
            grid_cap: cap,
            blocks_asked,
            sharing,
            _dev: dev,
            ctl,
            status,
            dst,
            ndst,
            src,
            gathered,
            gathered_block,
            report,
            _peers: peers,
            _own: own,
        })
    }
}
