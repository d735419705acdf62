//! Choices for machines without a tuning table of their own: the committed
//! default table of a measured class, and rules for the rest (each stated as
//! measured or not in its `why`).

use super::query::{Candidate, Decision, Query};
use super::size_rule::auto_oneshot_max;
use super::table::Table;
use crate::algo::Algo;
use crate::topology::MachineClass;
use crate::units::ByteSize;

/// The NVLink default table: 2 x H200 (NV18), crates/tpcomm/src/select/testdata/2026-11-30-h200x2-v4-gpu-bench-procs.json
/// turned into a table by `tpcomm tune --from-bench` (docs/tuning.md).
pub const BUILTIN_NVLINK_TOML: &str = include_str!("../../tables/default-nvlink.toml");

/// The committed default table of a class, with its name, if the class was measured.
pub fn builtin_table(class: MachineClass) -> Option<(Table, &'static str)> {
    match class {
        MachineClass::Nvlink => {
            // The file is checked by a test; a broken edit shows there, and
            // here falls back to the rules rather than failing a server.
            Table::parse(
                BUILTIN_NVLINK_TOML,
                "crates/tpcomm/tables/default-nvlink.toml",
            )
            .ok()
            .map(|t| (t, "crates/tpcomm/tables/default-nvlink.toml"))
        }
        _ => None,
    }
}

/// The rule of a class for a query no table answers: an ordered preference
/// per size band; the first allowed candidate wins.
pub fn class_rule(class: MachineClass, q: &Query, allowed: &dyn Fn(Candidate) -> bool) -> Decision {
    let b = q.bytes;
    let one = Algo::OneShot;
    let two = Algo::TwoShot;
    let (prefs, why): (Vec<Candidate>, String) = match class {
        MachineClass::Nvlink => {
            let t = auto_oneshot_max(q.world);
            if b <= t.bytes() {
                (
                    vec![Candidate::cuda(one), Candidate::cuda(two), Candidate::NCCL],
                    format!("rule nvlink: cuda one-shot up to {t} for {} ranks (measured for 2 ranks only; above 2 a guess)", q.world),
                )
            } else {
                (
                    vec![Candidate::cuda(two), Candidate::cuda(one), Candidate::NCCL],
                    format!("rule nvlink: cuda two-shot above {t} for {} ranks (measured for 2 ranks only; above 2 a guess)", q.world),
                )
            }
        }
        MachineClass::PcieP2p => {
            let t = ByteSize::kib(256);
            if b <= t.bytes() {
                (
                    vec![Candidate::cuda(one), Candidate::NCCL],
                    format!("rule pcie-p2p (unmeasured, conservative): cuda one-shot up to {t}"),
                )
            } else {
                (
                    vec![Candidate::NCCL, Candidate::cuda(two)],
                    format!("rule pcie-p2p (unmeasured, conservative): NCCL above {t}"),
                )
            }
        }
        MachineClass::PcieNop2p => {
            // Crossovers measured with the host path forced on 2 x H200
            // against NCCL 2.28.3 with NCCL_P2P_DISABLE=1
            // (bench/results/2026-11-30-h200x2-host-delta/final/ and cap2m/): delta
            // words win up to 2 MiB, their largest size (0.36-0.47x NCCL's
            // time up to 256 KiB, 0.65x at 1 MiB, 0.74x at 2 MiB), NCCL from
            // 2 MiB to 16 MiB (chunked 1.19-1.26x its time from 3 to 8 MiB),
            // chunked within 1-4% of NCCL either way from 16 to 64 MiB.
            let src = "measured with the host path forced on 2 x H200, not yet on a PCIe box";
            let (one_pass, nccl_to) = (ByteSize::mib(2), ByteSize::mib(16));
            if b <= one_pass.bytes() {
                (
                    vec![Candidate::host(one), Candidate::NCCL, Candidate::host(two)],
                    format!(
                        "rule pcie-nop2p ({src}): host one-shot (delta words) up to {one_pass}"
                    ),
                )
            } else if b <= nccl_to.bytes() {
                (
                    vec![Candidate::NCCL, Candidate::host(two)],
                    format!("rule pcie-nop2p ({src}): NCCL up to {nccl_to}, else host two-shot"),
                )
            } else {
                (
                    vec![Candidate::host(two), Candidate::NCCL],
                    format!("rule pcie-nop2p ({src}): host two-shot (chunked) above {nccl_to}"),
                )
            }
        }
        MachineClass::Mixed | MachineClass::SingleGpu => {
            // Without NCCL (ranks sharing one GPU, which NCCL refuses, or a
            // communicator made without it) the kernels still run: by the
            // NVLink size rule, what `Auto` ran before classes were told apart.
            let t = auto_oneshot_max(q.world);
            let k = if b <= t.bytes() { one } else { two };
            (
                vec![Candidate::NCCL, Candidate::cuda(k), Candidate::host(k)],
                format!(
                    "rule {class}: NCCL at every size (no tpcomm kernel is written for this class); without NCCL, {} by the NVLink size rule ({} up to {t} for {} ranks)",
                    k.name(),
                    one.name(),
                    q.world
                ),
            )
        }
    };
    let choice = prefs
        .iter()
        .copied()
        .find(|c| allowed(*c))
        // Nothing preferred is allowed: the first allowed tpcomm transport,
        // which callers that narrow the field always offer.
        .or_else(|| {
            [Candidate::cuda(one), Candidate::host(one), Candidate::NCCL]
                .into_iter()
                .find(|c| allowed(*c))
        })
        .unwrap_or(Candidate::NCCL);
    let why = if prefs.first() == Some(&choice) {
        why
    } else {
        format!("{why}; {} not available here, so {choice}", prefs[0])
    };
    Decision {
        choice,
        why,
        estimates: Vec::new(),
    }
}
