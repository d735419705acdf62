//! What every rank of a host-path group must agree on, checked once at
//! creation: ranks that ran different one-pass kernels, or cut messages into
//! different chunks, would wait for words and flags their peers never write,
//! or read a chunk's bytes before they land. Each rank posts a record; all
//! ranks see the same records, so all accept or all refuse.

use super::comm::SmallKernel;
use crate::error::{Error, Result};

/// One rank's record: its one-pass kernel, its GPU's SM count and its chunk
/// size override (TPCOMM_HOST_CHUNK; 0 when unset).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupRecord {
    pub small: SmallKernel,
    pub sms: u32,
    pub chunk_override: u64,
}

const RECORD_BYTES: usize = 1 + 1 + 4 + 8;
const VERSION: u8 = 1;

// A kernel's code in the record: its index in SmallKernel::ALL.
fn small_code(k: SmallKernel) -> u8 {
    SmallKernel::ALL.iter().position(|&x| x == k).unwrap_or(0) as u8
}

impl GroupRecord {
    pub fn to_bytes(self) -> Vec<u8> {
        let mut b = Vec::with_capacity(RECORD_BYTES);
        b.push(VERSION);
        b.push(small_code(self.small));
        b.extend_from_slice(&self.sms.to_le_bytes());
        b.extend_from_slice(&self.chunk_override.to_le_bytes());
        b
    }

    pub fn parse(b: &[u8]) -> Option<Self> {
        if b.len() != RECORD_BYTES || b[0] != VERSION {
            return None;
        }
        let small = *SmallKernel::ALL.get(b[1] as usize)?;
        Some(Self {
            small,
            sms: u32::from_le_bytes(b[2..6].try_into().ok()?),
            chunk_override: u64::from_le_bytes(b[6..14].try_into().ok()?),
        })
    }
}

/// Checks every rank's record against this rank's (`all[me]`) and returns the
/// smallest SM count of the group: the chunked kernel sizes its chunks from
/// it, so ranks on GPUs with different SM counts cut the same chunks.
pub fn agree(me: usize, all: &[Vec<u8>]) -> Result<usize> {
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
    let mut sms = mine.sms;
    for (p, b) in all.iter().enumerate() {
        let r = parse(p, b)?;
        if r.small != mine.small {
            return Err(Error::invalid(
                "TPCOMM_HOST_SMALL",
                format!(
                    "rank {p} runs the {} kernel and rank {me} the {} kernel; set the same value (or none) for every rank",
                    r.small.name(),
                    mine.small.name()
                ),
            ));
        }
        if r.chunk_override != mine.chunk_override {
            return Err(Error::invalid(
                "TPCOMM_HOST_CHUNK",
                format!(
                    "rank {p} asks for {} and rank {me} for {} (0: unset); set the same value (or none) for every rank",
                    r.chunk_override, mine.chunk_override
                ),
            ));
        }
        sms = sms.min(r.sms);
    }
    Ok(sms.max(1) as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(small: SmallKernel, sms: u32, chunk: u64) -> Vec<u8> {
        GroupRecord {
            small,
            sms,
            chunk_override: chunk,
        }
        .to_bytes()
    }

    /// The records as `HostGpuCommunicator::new` exchanges them (threads
    /// rendezvous, no GPU): every rank gets the same answer.
    #[test]
    fn ranks_exchanging_records_agree_on_the_smallest_sm_count() {
        use crate::cuda::{Rendezvous, ThreadGroup};
        use std::time::Duration;
        let group = ThreadGroup::new(3);
        let sms = [132u32, 82, 128];
        let hs: Vec<_> = (0..3)
            .map(|r| {
                let rv = Rendezvous::Threads(group.clone());
                std::thread::spawn(move || {
                    let mine = GroupRecord {
                        small: SmallKernel::Delta,
                        sms: sms[r],
                        chunk_override: 0,
                    };
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
        for h in hs {
            assert_eq!(h.join().unwrap().unwrap(), 82);
        }
    }

    #[test]
    fn records_round_trip() {
        for small in SmallKernel::ALL {
            let r = GroupRecord {
                small,
                sms: 132,
                chunk_override: 64 << 10,
            };
            assert_eq!(GroupRecord::parse(&r.to_bytes()), Some(r));
        }
        assert_eq!(GroupRecord::parse(&[1, 2, 3]), None);
        let mut bad = rec(SmallKernel::Delta, 1, 0);
        bad[1] = 9;
        assert_eq!(GroupRecord::parse(&bad), None);
    }

    #[test]
    fn a_group_of_different_gpus_cuts_chunks_by_the_smallest() {
        let all = vec![
            rec(SmallKernel::Delta, 128, 0),
            rec(SmallKernel::Delta, 82, 0),
            rec(SmallKernel::Delta, 132, 0),
        ];
        for me in 0..3 {
            assert_eq!(agree(me, &all).unwrap(), 82);
        }
    }

    #[test]
    fn different_kernels_or_chunk_sizes_are_refused_on_every_rank() {
        let all = vec![
            rec(SmallKernel::Delta, 132, 0),
            rec(SmallKernel::Push, 132, 0),
        ];
        for me in 0..2 {
            let e = agree(me, &all).unwrap_err().to_string();
            assert!(
                e.contains("TPCOMM_HOST_SMALL") && e.contains("push") && e.contains("delta"),
                "{e}"
            );
        }
        let all = vec![
            rec(SmallKernel::Ll, 132, 65536),
            rec(SmallKernel::Ll, 132, 0),
        ];
        for me in 0..2 {
            let e = agree(me, &all).unwrap_err().to_string();
            assert!(e.contains("TPCOMM_HOST_CHUNK"), "{e}");
        }
        let all = vec![rec(SmallKernel::Ll, 132, 0), vec![7u8; 3]];
        assert!(agree(0, &all)
            .unwrap_err()
            .to_string()
            .contains("malformed"));
    }
}
