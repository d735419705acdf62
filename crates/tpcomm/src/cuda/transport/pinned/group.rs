//! What every rank of a host-path group must agree on, checked once at
//! creation: ranks that cut messages into different chunks would wait for
//! flags their peers never write, or read a chunk's bytes before they land. Each rank posts a record; all
//! ranks see the same records, so all accept or all refuse.

use crate::cuda::launch_shape::grid_cap;
use crate::cuda::share::{DeviceIdentity, Sharing};
use crate::error::{Error, Result};

/// One rank's record: its GPU's SM count, how many
/// blocks of the host kernels one of its SMs holds, its chunk size override
/// (TPCOMM_HOST_CHUNK; 0 when unset) and its GPU's identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupRecord {
    pub sms: u32,
    pub blocks_per_sm: u32,
    pub chunk_override: u64,
    /// `CudaConfig::check_calls` as this rank was given it (`None`: by
    /// whether ranks share a GPU); every rank must end up with the same.
    pub check_calls: Option<bool>,
    pub device: DeviceIdentity,
}

const RECORD_BYTES: usize = 1 + 4 + 4 + 8 + 1 + DeviceIdentity::BYTES;
// 3: the one-pass kernel's byte gone (delta is the only one); 4: the call
// words' setting.
const VERSION: u8 = 4;

/// What the records decide for this rank: how its GPU is shared, the most
/// blocks its launches may have, and the smallest such grid of the group
/// (chunks are sized from it, so every rank cuts the same chunks).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Agreed {
    pub sharing: Sharing,
    pub grid: usize,
    pub group_grid: usize,
    /// Whether the group sends call words (every rank agreed).
    pub check_calls: bool,
}

impl GroupRecord {
    pub fn to_bytes(self) -> Vec<u8> {
        let mut b = Vec::with_capacity(RECORD_BYTES);
        b.push(VERSION);
        b.extend_from_slice(&self.sms.to_le_bytes());
        b.extend_from_slice(&self.blocks_per_sm.to_le_bytes());
        b.extend_from_slice(&self.chunk_override.to_le_bytes());
        b.push(
            self.check_calls
                .map_or(0, crate::cuda::call_word::setting_byte),
        );
        b.extend_from_slice(&self.device.to_bytes());
        b
    }

    pub fn parse(b: &[u8]) -> Option<Self> {
        if b.len() != RECORD_BYTES || b[0] != VERSION {
            return None;
        }
        Some(Self {
            sms: u32::from_le_bytes(b[1..5].try_into().ok()?),
            blocks_per_sm: u32::from_le_bytes(b[5..9].try_into().ok()?),
            chunk_override: u64::from_le_bytes(b[9..17].try_into().ok()?),
            check_calls: match b[17] {
                0 => None,
                2 => Some(true),
                1 => Some(false),
                _ => return None,
            },
            device: DeviceIdentity::from_bytes(&b[18..])?,
        })
    }
}

/// Checks every rank's record against this rank's (`all[me]`) and decides
/// the grids: each rank's share of its GPU, and the group's smallest, from
/// which the chunked kernel sizes its chunks, so ranks on GPUs with different
/// SM counts, or sharing GPUs unevenly, cut the same chunks.
pub fn agree(me: usize, all: &[Vec<u8>]) -> Result<Agreed> {
    let parse = |p: usize, b: &Vec<u8>| {
        GroupRecord::parse(b).ok_or_else(|| {
            Error::invalid(
                "rendezvous",
                format!("rank {p} posted a malformed host-path record; do all ranks run the same tpcomm?"),
            )
        })
    };
    let mine = parse(
        me,
        all.get(me).ok_or_else(|| {
            Error::invalid("rendezvous", format!("no record of this rank ({me})"))
        })?,
    )?;
    let records = all
        .iter()
        .enumerate()
        .map(|(p, b)| parse(p, b))
        .collect::<Result<Vec<_>>>()?;
    let ids: Vec<_> = records.iter().map(|r| r.device).collect();
    let resolved: Vec<bool> = records
        .iter()
        .map(|r| crate::cuda::call_word::resolve(r.check_calls, &ids))
        .collect();
    let settings: Vec<Vec<u8>> = resolved
        .iter()
        .map(|&c| vec![crate::cuda::call_word::setting_byte(c)])
        .collect();
    crate::cuda::call_word::agree_setting(me, &settings)?;
    let mut group_grid = usize::MAX;
    for (p, r) in records.iter().enumerate() {
        let share = Sharing::of(&ids, p);
        group_grid = group_grid.min(grid_cap(r.sms as usize, r.blocks_per_sm as usize, share)?);
        if r.chunk_override != mine.chunk_override {
            return Err(Error::invalid(
                "TPCOMM_HOST_CHUNK",
                format!(
                    "rank {p} asks for {} and rank {me} for {} (0: unset); set the same value (or none) for every rank",
                    r.chunk_override, mine.chunk_override
                ),
            ));
        }
    }
    let sharing = Sharing::of(&ids, me);
    Ok(Agreed {
        sharing,
        grid: grid_cap(mine.sms as usize, mine.blocks_per_sm as usize, sharing)?,
        group_grid,
        check_calls: resolved[me],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    // Every rank on a GPU of its own (GPU r), one block per SM.
    fn record(sms: u32, chunk: u64, gpu: u8) -> GroupRecord {
        GroupRecord {
            sms,
            blocks_per_sm: 1,
            chunk_override: chunk,
            check_calls: None,
            device: DeviceIdentity {
                uuid: [gpu; 16],
                pid: 1,
                process: 1,
            },
        }
    }

    fn rec(sms: u32, chunk: u64) -> Vec<u8> {
        static NEXT: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);
        let gpu = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        record(sms, chunk, gpu).to_bytes()
    }

    /// The records as `PinnedTransport::new` exchanges them (threads
    /// rendezvous, no GPU): every rank gets the same answer.
    #[test]
    fn ranks_exchanging_records_agree_on_the_smallest_sm_count() {
        use crate::cuda::rendezvous::{Rendezvous, ThreadGroup};
        use std::time::Duration;
        let group = ThreadGroup::new(3);
        let sms = [132u32, 82, 128];
        let hs: Vec<_> = (0..3)
            .map(|r| {
                let rv = Rendezvous::Threads(group.clone());
                std::thread::spawn(move || {
                    let mine = record(sms[r], 0, r as u8);
                    let all = rv
                        .exchange(
                            "host-gpu-mapped",
                            r,
                            3,
                            &mine.to_bytes(),
                            Duration::from_secs(10),
                        )
                        .unwrap();
                    agree(r, &all)
                })
            })
            .collect();
        for (r, h) in hs.into_iter().enumerate() {
            let a = h.join().unwrap().unwrap();
            assert_eq!((a.grid, a.group_grid), (sms[r] as usize, 82));
        }
    }

    #[test]
    fn records_round_trip() {
        let r = record(132, 64 << 10, 5);
        assert_eq!(GroupRecord::parse(&r.to_bytes()), Some(r));
        assert_eq!(GroupRecord::parse(&[1, 2, 3]), None);
        // Another version's record (of the same length or not) is refused.
        let mut bad = rec(1, 0);
        bad[0] = 2;
        assert_eq!(GroupRecord::parse(&bad), None);
    }

    #[test]
    fn a_group_of_different_gpus_cuts_chunks_by_the_smallest() {
        let all = vec![rec(128, 0), rec(82, 0), rec(132, 0)];
        for me in 0..3 {
            assert_eq!(agree(me, &all).unwrap().group_grid, 82);
        }
    }

    #[test]
    fn ranks_sharing_a_gpu_split_what_it_holds_and_cut_the_same_chunks() {
        // 5 ranks: 3 on GPU 0 (132 SMs), 2 on GPU 1 (132 SMs), 2 blocks per SM.
        let all: Vec<_> = (0..5)
            .map(|r| {
                let mut x = record(132, 0, (r % 2) as u8);
                x.blocks_per_sm = 2;
                x.to_bytes()
            })
            .collect();
        let a: Vec<_> = (0..5).map(|me| agree(me, &all).unwrap()).collect();
        assert_eq!(a[0].sharing.ranks_on_device, 3);
        assert_eq!(a[0].grid, 88); // 264 / 3
        assert_eq!(a[1].grid, 132); // 264 / 2, at most one per SM
        assert!(a.iter().all(|x| x.group_grid == 88));
        // 8 ranks on one GPU of 132 SMs at one block per SM: 16 blocks each.
        let all: Vec<_> = (0..8).map(|_| record(132, 0, 0).to_bytes()).collect();
        let a = agree(3, &all).unwrap();
        assert_eq!((a.grid, a.group_grid), (16, 16));
        assert!(a.grid * 8 <= 132);
    }

    #[test]
    fn different_chunk_sizes_are_refused_on_every_rank() {
        let all = vec![rec(132, 65536), rec(132, 0)];
        for me in 0..2 {
            let e = agree(me, &all).unwrap_err().to_string();
            assert!(e.contains("TPCOMM_HOST_CHUNK"), "{e}");
        }
        let all = vec![rec(132, 0), vec![7u8; 3]];
        assert!(agree(0, &all)
            .unwrap_err()
            .to_string()
            .contains("malformed"));
    }

    #[test]
    fn different_call_word_settings_are_refused_on_every_rank() {
        let mut off = record(132, 0, 1);
        off.check_calls = Some(false);
        let back = GroupRecord::parse(&off.to_bytes()).unwrap();
        assert_eq!(back.check_calls, Some(false));
        let mut on = record(132, 0, 0);
        on.check_calls = Some(true);
        let all = vec![on.to_bytes(), off.to_bytes()];
        for me in 0..2 {
            let e = agree(me, &all).unwrap_err().to_string();
            assert!(e.contains("TPCOMM_CHECK_CALLS"), "{e}");
        }
        // Unset on one rank, off on the other, each on a GPU of its own:
        // both off, agreed.
        let all = vec![record(132, 0, 0).to_bytes(), off.to_bytes()];
        assert!(!agree(0, &all).unwrap().check_calls);
        // Unset everywhere, two ranks on one GPU: on.
        let all = vec![record(132, 0, 5).to_bytes(), record(132, 0, 5).to_bytes()];
        assert!(agree(1, &all).unwrap().check_calls);
    }
}
