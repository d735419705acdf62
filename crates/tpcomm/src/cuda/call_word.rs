//! What a GPU call says it is: the word every rank sends its peers with each
//! call (kernels/common.cuh, "call words"), built here, and the text
//! `check()` gives when two ranks' words disagree.
//!
//! Bits 0-34: the message's bytes (for the collectives, one rank's block);
//! 35-38: the kind of call; 39-42: the caller's element type (NCCL's code:
//! 0-11; the library's own calls give their `DType`'s); 43-45: the caller's
//! op (NCCL's code: 0-4 built in, 5 a pre-multiplied sum); 46-48: the
//! broadcast's root, the quantized wire, or the root of a rooted call served
//! through an all-gather. The kernels add the epoch's tag above bit 49 and
//! compare the rest, so ranks whose calls differ in any of these are caught.

use crate::error::{Error, Result};
use crate::sys::cuda::HostMapped;
use crate::{DType, ReduceOp};
use std::time::Duration;

const BYTES_BITS: u32 = 35;
const KIND_AT: u32 = 35;
const TYPE_AT: u32 = 39;
const OP_AT: u32 = 43;
const AUX_AT: u32 = 46;
/// The largest message a call word can describe (32 GiB less one byte).
pub(crate) const MAX_CALL_BYTES: u64 = (1 << BYTES_BITS) - 1;

/// What the caller asked for beyond the bytes the kernels move: its own
/// element type and op (the drop-in's NCCL type and op, which the kernels
/// may carry as another type: an int32 all-gather moves as f32 words, a
/// max reduction as an all-gather of expanded blocks) and a rooted call's
/// root. Every rank of a call computes it alike from its own arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Signature {
    /// NCCL's data type code, 0 to 11.
    pub nccl_type: u8,
    /// NCCL's op code: 0 sum, 1 prod, 2 max, 3 min, 4 avg, 5 a
    /// pre-multiplied sum.
    pub op: u8,
    /// The root of a rooted call carried by a collective without one (an
    /// all-gather serving ncclReduce), at most 7; `None` otherwise.
    pub root: Option<u8>,
}

impl Signature {
    /// A library call's: its element type and reduction as NCCL codes.
    pub fn of(dtype: DType, op: ReduceOp) -> Signature {
        Signature {
            nccl_type: match dtype {
                DType::F16 => 6,
                DType::F32 => 7,
                DType::Bf16 => 9,
            },
            op: match op {
                ReduceOp::Sum => 0,
                ReduceOp::Max => 2,
                ReduceOp::Min => 3,
            },
            root: None,
        }
    }
}

/// The kinds of call: the algorithm or collective, on its transport. A rank
/// that runs another kind than its peers has made another call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u64)]
pub(crate) enum Kind {
    OneShot = 1,
    TwoShot = 2,
    FusedRmsNorm = 3,
    AllGather = 4,
    ReduceScatter = 5,
    Broadcast = 6,
    HostDelta = 7,
    HostChunked = 8,
    HostAllGather = 9,
    HostReduceScatter = 10,
    HostBroadcast = 11,
    QuantOneShot = 12,
    QuantTwoShot = 13,
}

/// The kinds of the P2P all-gather, reduce-scatter and broadcast, in the
/// order of a collective kernel family (`collectives::pick`).
pub(crate) const P2P_COLLECTIVES: [Kind; 3] =
    [Kind::AllGather, Kind::ReduceScatter, Kind::Broadcast];

/// The same for the host path.
pub(crate) const HOST_COLLECTIVES: [Kind; 3] = [
    Kind::HostAllGather,
    Kind::HostReduceScatter,
    Kind::HostBroadcast,
];

impl Kind {
    const ALL: [Kind; 13] = [
        Kind::OneShot,
        Kind::TwoShot,
        Kind::FusedRmsNorm,
        Kind::AllGather,
        Kind::ReduceScatter,
        Kind::Broadcast,
        Kind::HostDelta,
        Kind::HostChunked,
        Kind::HostAllGather,
        Kind::HostReduceScatter,
        Kind::HostBroadcast,
        Kind::QuantOneShot,
        Kind::QuantTwoShot,
    ];

    fn text(self) -> &'static str {
        match self {
            Kind::OneShot => "one-shot all-reduce",
            Kind::TwoShot => "two-shot all-reduce",
            Kind::FusedRmsNorm => "fused all-reduce + residual + RMSNorm",
            Kind::AllGather => "all-gather",
            Kind::ReduceScatter => "reduce-scatter",
            Kind::Broadcast => "broadcast",
            Kind::HostDelta => "host-path all-reduce (delta)",
            Kind::HostChunked => "host-path all-reduce (chunked)",
            Kind::HostAllGather => "host-path all-gather",
            Kind::HostReduceScatter => "host-path reduce-scatter",
            Kind::HostBroadcast => "host-path broadcast",
            Kind::QuantOneShot => "quantized one-shot all-reduce",
            Kind::QuantTwoShot => "quantized two-shot all-reduce",
        }
    }
}

/// The call word of a call of `kind` moving `nbytes`, as `sig` describes
/// it; `aux` is the broadcast's root or the quantized wire (0 otherwise, at
/// most 7), and a signature's root takes its place when it is 0.
pub(crate) fn word(kind: Kind, sig: Signature, nbytes: u64, aux: u64) -> Result<u64> {
    let aux = match (aux, sig.root) {
        (0, Some(r)) => u64::from(r),
        _ => aux,
    };
    if nbytes > MAX_CALL_BYTES || aux > 7 || sig.nccl_type > 15 || sig.op > 7 {
        return Err(Error::invalid(
            "call",
            format!("{nbytes} bytes (aux {aux}, {sig:?}): a GPU call moves at most {MAX_CALL_BYTES} bytes, a root is at most 7"),
        ));
    }
    Ok(nbytes
        | (kind as u64) << KIND_AT
        | u64::from(sig.nccl_type) << TYPE_AT
        | u64::from(sig.op) << OP_AT
        | aux << AUX_AT)
}

/// [`word`] when `check` is on; 0 (the kernels then neither send nor
/// compare call words) when it is off.
pub(crate) fn word_if(
    check: bool,
    kind: Kind,
    sig: Signature,
    nbytes: u64,
    aux: u64,
) -> Result<u64> {
    if check {
        word(kind, sig, nbytes, aux)
    } else {
        Ok(0)
    }
}

/// Whether a group sends call words: the setting when given, else on
/// exactly when two of its ranks share a GPU (testing a tensor-parallel code
/// path on fewer GPUs, where a mismatch is most likely a bug being chased)
/// and off when every rank has a GPU of its own (serving, where the words
/// cost about 0.7 us per small call on the H200: docs/protocol-gpu.md).
/// Every rank computes the same answer from the same identities.
pub(crate) fn resolve(setting: Option<bool>, ids: &[crate::cuda::share::DeviceIdentity]) -> bool {
    setting.unwrap_or_else(|| {
        ids.iter()
            .enumerate()
            .any(|(i, a)| ids[..i].iter().any(|b| b.uuid == a.uuid))
    })
}

/// The byte a rank posts at creation for its setting (`CudaConfig::check_calls`).
pub(crate) fn setting_byte(check: bool) -> u8 {
    if check {
        2
    } else {
        1
    }
}

/// The last creation meeting of a transport (`key`): no rank returns before
/// every rank got here, and every rank must have resolved `check` alike.
pub(crate) fn meet(
    rendezvous: &crate::cuda::rendezvous::Rendezvous,
    key: &str,
    cfg: &crate::cuda::config::CudaConfig,
    check: bool,
) -> Result<()> {
    let all = rendezvous.exchange(
        key,
        cfg.rank,
        cfg.world,
        &[setting_byte(check)],
        cfg.timeout,
    )?;
    agree_setting(cfg.rank, &all)
}

/// Every rank must send and check call words alike: a rank that checks
/// would wait for words a peer never sends. Compares the first byte of
/// every rank's blob (posted with [`setting_byte`]) with this rank's; every
/// rank sees the same blobs, so all fail alike, naming the first rank that
/// differs from it.
pub(crate) fn agree_setting(me: usize, all: &[Vec<u8>]) -> Result<()> {
    let first = |b: &Vec<u8>| b.first().copied();
    let mine = all.get(me).and_then(first);
    let text = |b: Option<u8>| match b {
        Some(2) => "on",
        Some(1) => "off",
        _ => "unknown (another tpcomm?)",
    };
    for (p, b) in all.iter().enumerate() {
        if first(b) != mine {
            return Err(Error::invalid(
                "TPCOMM_CHECK_CALLS",
                format!(
                    "rank {p} has call words {} and rank {me} {}: set CudaConfig::check_calls (or TPCOMM_CHECK_CALLS) alike on every rank",
                    text(first(b)),
                    text(mine)
                ),
            ));
        }
    }
    Ok(())
}

/// NCCL's name of a data type code.
fn type_name(code: u64) -> &'static str {
    const NAMES: [&str; 12] = [
        "int8", "uint8", "int32", "uint32", "int64", "uint64", "f16", "f32", "f64", "bf16",
        "fp8 e4m3", "fp8 e5m2",
    ];
    NAMES
        .get(code as usize)
        .copied()
        .unwrap_or("an unknown type")
}

/// NCCL's name of an op code.
fn op_name(code: u64) -> &'static str {
    const NAMES: [&str; 6] = ["sum", "prod", "max", "min", "avg", "pre-multiplied sum"];
    NAMES.get(code as usize).copied().unwrap_or("an unknown op")
}

/// The text of a call word, for the mismatch message ("one-shot all-reduce
/// (sum) of 8192 bytes of bf16").
pub(crate) fn describe(word: u64) -> String {
    let nbytes = word & MAX_CALL_BYTES;
    let k = (word >> KIND_AT) & 0xf;
    let kind = Kind::ALL
        .iter()
        .find(|x| **x as u64 == k)
        .map_or("an unknown call", |x| x.text());
    let dtype = type_name((word >> TYPE_AT) & 0xf);
    let op = op_name((word >> OP_AT) & 7);
    let aux = (word >> AUX_AT) & 7;
    let extra = match k {
        k if k == Kind::Broadcast as u64 || k == Kind::HostBroadcast as u64 => {
            format!(" from rank {aux}")
        }
        k if k == Kind::QuantOneShot as u64 || k == Kind::QuantTwoShot as u64 => {
            format!(" (wire {aux})")
        }
        _ if aux != 0 => format!(" (root {aux})"),
        _ => String::new(),
    };
    format!("{kind}{extra} ({op}) of {nbytes} bytes of {dtype}")
}

/// The error of a status that says two ranks' calls differed: `mine` and
/// `theirs` are the words the kernel left in the status (bytes 16-31).
pub(crate) fn mismatch(rank: usize, peer: usize, epoch: u64, mine: u64, theirs: u64) -> Error {
    Error::Mismatch {
        rank,
        peer,
        epoch,
        mine: describe(mine),
        theirs: describe(theirs),
    }
}

/// Status codes every family's kernels write (TPCOMM_WAIT_CALL and
/// TPCOMM_CALL_MISMATCH in kernels/common.cuh).
pub(crate) const WAIT_CALL: u32 = 11;
pub(crate) const CALL_MISMATCH: u32 = 12;

/// What the status words a transport's kernels write say about its
/// latest calls (the layout every kernel family shares: the code at 0, the
/// peer at 4, the epoch at 8, for a mismatch the two call words at 16 and
/// 24): nothing, a call that disagrees with a peer's, or a wait for a peer
/// that timed out after `waited`, on what `what` names for the code.
pub(crate) fn status_check(
    status: &HostMapped,
    rank: usize,
    waited: Duration,
    what: impl FnOnce(u32) -> &'static str,
) -> Result<()> {
    let code = status.read_u32(0);
    if code == 0 {
        return Ok(());
    }
    let (peer, epoch) = (status.read_u32(4) as usize, status.read_u64(8));
    if code == CALL_MISMATCH {
        let (mine, theirs) = (status.read_u64(16), status.read_u64(24));
        return Err(mismatch(rank, peer, epoch, mine, theirs));
    }
    let what = match code {
        WAIT_CALL => "the description of its call",
        c => what(c),
    };
    Err(Error::PeerTimeout {
        rank,
        peer,
        epoch,
        what: what.into(),
        waited,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(d: DType) -> Signature {
        Signature::of(d, ReduceOp::Sum)
    }

    #[test]
    fn the_status_codes_and_bit_places_are_the_kernels() {
        let src = include_str!("kernels/common.cuh");
        for line in [
            format!("#define TPCOMM_WAIT_CALL {WAIT_CALL}u"),
            format!("#define TPCOMM_CALL_MISMATCH {CALL_MISMATCH}u"),
            "#define TPCOMM_CALL_BITS 49".to_string(),
        ] {
            assert!(src.contains(&line), "common.cuh lacks {line:?}");
        }
        // The widest word leaves bit 49 up for the epoch's tag.
        let w = word(Kind::QuantTwoShot, s(DType::Bf16), MAX_CALL_BYTES, 7).unwrap();
        assert!(w < 1 << 49, "{w:#x}");
    }

    #[test]
    fn calls_that_differ_in_any_field_have_different_words() {
        let base = word(Kind::OneShot, s(DType::Bf16), 8192, 0).unwrap();
        let others = [
            word(Kind::OneShot, s(DType::Bf16), 8190, 0),
            word(Kind::OneShot, s(DType::F16), 8192, 0),
            word(Kind::OneShot, s(DType::F32), 8192, 0),
            word(Kind::TwoShot, s(DType::Bf16), 8192, 0),
            word(Kind::AllGather, s(DType::Bf16), 8192, 0),
            word(Kind::OneShot, s(DType::Bf16), 8192, 1),
        ];
        for o in others {
            assert_ne!(o.unwrap(), base);
        }
        assert_eq!(
            describe(base),
            "one-shot all-reduce (sum) of 8192 bytes of bf16"
        );
        assert_eq!(
            describe(word(Kind::Broadcast, s(DType::F32), 4, 3).unwrap()),
            "broadcast from rank 3 (sum) of 4 bytes of f32"
        );
        let e = mismatch(
            1,
            0,
            7,
            base,
            word(Kind::TwoShot, s(DType::F16), 16, 0).unwrap(),
        );
        let text = e.to_string();
        assert!(
            text.contains("one-shot all-reduce (sum) of 8192 bytes of bf16")
                && text.contains("two-shot all-reduce (sum) of 16 bytes of f16")
                && text.contains("rank 0"),
            "{text}"
        );
    }

    #[test]
    fn checking_off_sends_the_word_zero_which_the_kernels_skip() {
        assert_eq!(
            word_if(false, Kind::OneShot, s(DType::F32), 16, 0).unwrap(),
            0
        );
        assert_eq!(
            word_if(true, Kind::OneShot, s(DType::F32), 16, 0).unwrap(),
            word(Kind::OneShot, s(DType::F32), 16, 0).unwrap()
        );
        // Every kind is non-zero, so a real word is never 0.
        assert!(Kind::ALL
            .iter()
            .all(|&k| word(k, s(DType::F32), 0, 0).unwrap() != 0));
        // The kernels test `a.call != 0` before sending or comparing.
        for f in [
            "kernels/allreduce.cu",
            "kernels/host_allreduce.cu",
            "kernels/quant.cu",
        ] {
            let src = match f {
                "kernels/allreduce.cu" => include_str!("kernels/allreduce.cu"),
                "kernels/host_allreduce.cu" => include_str!("kernels/host_allreduce.cu"),
                _ => include_str!("kernels/quant.cu"),
            };
            assert_eq!(src.matches("a.call != 0ull").count(), 2, "{f}");
        }
    }

    #[test]
    fn unset_means_on_exactly_when_ranks_share_a_gpu() {
        use crate::cuda::share::DeviceIdentity;
        let on = |gpu: u8, process: u64| DeviceIdentity {
            uuid: [gpu; 16],
            pid: 1,
            process,
        };
        let own = [on(0, 1), on(1, 2), on(2, 3)];
        let shared = [on(0, 1), on(1, 2), on(0, 3)];
        assert!(!resolve(None, &own));
        assert!(resolve(None, &shared));
        assert!(resolve(Some(true), &own));
        assert!(!resolve(Some(false), &shared));
    }

    #[test]
    fn ranks_must_agree_on_checking_calls() {
        let on = vec![setting_byte(true)];
        let off = vec![setting_byte(false)];
        assert!(agree_setting(0, &[on.clone(), on.clone(), on.clone()]).is_ok());
        assert!(agree_setting(1, &[off.clone(), off.clone()]).is_ok());
        for me in 0..3 {
            let e = agree_setting(me, &[on.clone(), off.clone(), on.clone()]).unwrap_err();
            let t = e.to_string();
            assert!(
                t.contains("TPCOMM_CHECK_CALLS") && t.contains("alike"),
                "{t}"
            );
        }
        assert!(agree_setting(0, &[on.clone(), vec![]]).is_err());
    }

    /// The creation meeting through a threads rendezvous (no GPU): ranks
    /// that resolved alike pass, and when one differs every rank fails.
    #[test]
    fn the_creation_meeting_refuses_ranks_that_differ_on_every_rank() {
        use crate::cuda::config::CudaConfig;
        use crate::cuda::rendezvous::{Rendezvous, ThreadGroup};
        for odd in [None, Some(2)] {
            let group = ThreadGroup::new(3);
            let hs: Vec<_> = (0..3)
                .map(|r| {
                    let rv = Rendezvous::Threads(group.clone());
                    std::thread::spawn(move || {
                        let cfg = CudaConfig::new(r, 3, 0);
                        meet(&rv, "test-mapped", &cfg, odd != Some(r))
                    })
                })
                .collect();
            for h in hs {
                let got = h.join().unwrap();
                match odd {
                    None => assert!(got.is_ok(), "{got:?}"),
                    Some(_) => assert!(
                        got.as_ref()
                            .unwrap_err()
                            .to_string()
                            .contains("TPCOMM_CHECK_CALLS"),
                        "{got:?}"
                    ),
                }
            }
        }
    }

    #[test]
    fn words_out_of_range_are_refused() {
        assert!(word(Kind::OneShot, s(DType::F32), MAX_CALL_BYTES + 1, 0).is_err());
        assert!(word(Kind::Broadcast, s(DType::F32), 16, 8).is_err());
    }

    /// The drop-in's calls: two ranks that move the same bytes but asked
    /// for another NCCL type, another op or another root disagree.
    #[test]
    fn the_callers_type_op_and_root_are_in_the_word() {
        let sig = |nccl_type, op, root| Signature {
            nccl_type,
            op,
            root,
        };
        let base = word(Kind::AllGather, sig(2, 2, Some(1)), 4096, 0).unwrap();
        for other in [
            sig(3, 2, Some(1)), // uint32 for int32: same width
            sig(7, 2, Some(1)), // f32 for int32: same width
            sig(2, 3, Some(1)), // min for max
            sig(2, 5, Some(1)), // a pre-multiplied sum
            sig(2, 2, Some(0)), // root 0 for root 1 ... as no root
            sig(2, 2, Some(2)), // another root
        ] {
            assert_ne!(
                word(Kind::AllGather, other, 4096, 0).unwrap(),
                base,
                "{other:?}"
            );
        }
        assert_eq!(
            describe(base),
            "all-gather (root 1) (max) of 4096 bytes of int32"
        );
        assert_eq!(
            describe(word(Kind::ReduceScatter, sig(10, 5, None), 64, 0).unwrap()),
            "reduce-scatter (pre-multiplied sum) of 64 bytes of fp8 e4m3"
        );
        // A broadcast's own root wins over a signature's.
        let b = word(Kind::Broadcast, sig(0, 0, Some(5)), 8, 3).unwrap();
        assert_eq!(
            describe(b),
            "broadcast from rank 3 (sum) of 8 bytes of int8"
        );
        // Fields out of their bits are refused, never folded into others.
        assert!(word(Kind::AllGather, sig(16, 0, None), 8, 0).is_err());
        assert!(word(Kind::AllGather, sig(0, 8, None), 8, 0).is_err());
        assert!(word(Kind::AllGather, sig(0, 0, Some(8)), 8, 0).is_err());
    }
}
