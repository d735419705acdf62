//! Swapping set-up data between the ranks through the real NCCL
//! communicator itself: an all-gather of a fixed-size slot per rank.
//!
//! Every rank must make the same number of exchanges in the same order, or
//! the all-gathers pair up wrongly. A rank that fails locally therefore still
//! takes part, posting a "failed" slot; every rank that sees one fails the
//! same exchange, so all of them leave the set-up at the same step.

use crate::cuda::Scratch;
use crate::ffi::call_real;
use crate::types::{CudaStream, NcclComm, NcclDataType, NcclResult, IN_PROGRESS, SUCCESS, UINT8};
use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tpcomm::{Error, Result};

/// Bytes each rank posts per exchange: a status byte, a 2-byte length, data.
pub const SLOT: usize = 256;
const POSTED: u8 = 1;
const FAILED: u8 = 2;

pub struct NcclExchange {
    comm: usize,
    rank: usize,
    world: usize,
    scratch: Scratch,
    done: AtomicUsize,
}

impl std::fmt::Debug for NcclExchange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NcclExchange")
            .field("rank", &self.rank)
            .field("world", &self.world)
            .field("done", &self.done.load(Ordering::Relaxed))
            .finish()
    }
}

/// Packs one rank's slot; `None` posts "failed".
pub fn encode(mine: Option<&[u8]>) -> Result<[u8; SLOT]> {
    let mut slot = [0u8; SLOT];
    match mine {
        None => slot[0] = FAILED,
        Some(d) if d.len() <= SLOT - 3 => {
            slot[0] = POSTED;
            slot[1..3].copy_from_slice(&(d.len() as u16).to_le_bytes());
            slot[3..3 + d.len()].copy_from_slice(d);
        }
        Some(d) => {
            return Err(Error::invalid(
                "exchange",
                format!("{} bytes do not fit a {SLOT}-byte slot", d.len()),
            ))
        }
    }
    Ok(slot)
}

/// Unpacks every rank's slot; the first failed (or garbled) rank is the error.
pub fn decode(key: &str, all: &[u8], world: usize) -> Result<Vec<Vec<u8>>> {
    let mut out = Vec::with_capacity(world);
    for r in 0..world {
        let s = all
            .get(r * SLOT..(r + 1) * SLOT)
            .ok_or_else(|| Error::invalid("exchange", "short all-gather result"))?;
        let len = u16::from_le_bytes([s[1], s[2]]) as usize;
        if s[0] != POSTED || len > SLOT - 3 {
            return Err(Error::Aborted(format!(
                "rank {r} could not take part in the tpcomm set-up step {key:?} (see its log)"
            )));
        }
        out.push(s[3..3 + len].to_vec());
    }
    Ok(out)
}

impl NcclExchange {
    /// Needs the communicator's device context current.
    pub fn new(comm: NcclComm, rank: usize, world: usize) -> Result<Self> {
        Ok(Self {
            comm: comm as usize,
            rank,
            world,
            scratch: Scratch::new(world * SLOT)?,
            done: AtomicUsize::new(0),
        })
    }

    /// How many exchanges this rank has made.
    pub fn done(&self) -> usize {
        self.done.load(Ordering::Acquire)
    }

    /// One all-gather: posts `mine` (`None`: this rank failed) and returns
    /// every rank's data, or the error of the first rank that failed.
    pub fn gather(
        &self,
        key: &str,
        mine: Option<&[u8]>,
        timeout: Duration,
    ) -> Result<Vec<Vec<u8>>> {
        self.done.fetch_add(1, Ordering::AcqRel);
        // A blob too large still takes part, as "failed".
        let (slot, local_err) = match encode(mine) {
            Ok(s) => (s, None),
            Err(e) => (encode(None)?, Some(e)),
        };
        let offset = self.rank * SLOT;
        self.scratch.upload(offset, &slot)?;
        let send = (self.scratch.ptr + offset as u64) as *const c_void;
        let recv = self.scratch.ptr as *mut c_void;
        let comm = self.comm as NcclComm;
        let stream = self.scratch.stream as CudaStream;
        let r = call_real!(ncclAllGather(send, recv, SLOT, UINT8, comm, stream)
            as fn(
                *const c_void,
                *mut c_void,
                usize,
                NcclDataType,
                NcclComm,
                CudaStream,
            ) -> NcclResult)
        .map_err(|e| Error::Library {
            library: "NCCL".into(),
            detail: e,
        })?;
        // A non-blocking communicator may still be enqueuing the call.
        if r == IN_PROGRESS && !crate::intercepted::wait_ready(comm) {
            return Err(Error::Library {
                library: "NCCL".into(),
                detail: format!(
                    "ncclAllGather for the tpcomm set-up step {key:?} did not complete"
                ),
            });
        }
        if r != SUCCESS && r != IN_PROGRESS {
            return Err(Error::Library {
                library: "NCCL".into(),
                detail: format!("ncclAllGather for the tpcomm set-up step {key:?} returned {r}"),
            });
        }
        if !self.scratch.wait(timeout)? {
            return Err(Error::PeerTimeout {
                rank: self.rank,
                peer: usize::MAX,
                epoch: 0,
                what: format!("the NCCL all-gather of tpcomm set-up step {key:?}"),
                waited: timeout,
            });
        }
        let all = self.scratch.download()?;
        if let Some(e) = local_err {
            return Err(e);
        }
        decode(key, &all, self.world)
    }

    /// Makes failed exchanges until `total` have been made: the steps this
    /// rank skipped but its peers will still make.
    pub fn pad_to(&self, total: usize, timeout: Duration) {
        while self.done() < total {
            let _ = self.gather("padding", None, timeout);
        }
    }
}

/// How CudaCommunicator::new reaches the other ranks: through this exchange.
#[derive(Debug)]
pub struct AsRendezvous(pub std::sync::Arc<NcclExchange>);

impl tpcomm::cuda::Exchange for AsRendezvous {
    fn exchange(
        &self,
        key: &str,
        rank: usize,
        world: usize,
        mine: &[u8],
        timeout: Duration,
    ) -> Result<Vec<Vec<u8>>> {
        if rank != self.0.rank || world != self.0.world {
            return Err(Error::invalid(
                "rendezvous",
                format!(
                    "asked for rank {rank} of {world}, the NCCL communicator has rank {} of {}",
                    self.0.rank, self.0.world
                ),
            ));
        }
        self.0.gather(key, Some(mine), timeout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_round_trip_in_rank_order() {
        let mut all = Vec::new();
        all.extend_from_slice(&encode(Some(b"zero")).unwrap());
        all.extend_from_slice(&encode(Some(&[7u8; SLOT - 3])).unwrap());
        all.extend_from_slice(&encode(Some(b"")).unwrap());
        let got = decode("k", &all, 3).unwrap();
        assert_eq!(got, vec![b"zero".to_vec(), vec![7u8; SLOT - 3], vec![]]);
    }

    #[test]
    fn a_failed_rank_fails_the_step_for_everyone_and_is_named() {
        let mut all = Vec::new();
        all.extend_from_slice(&encode(Some(b"ok")).unwrap());
        all.extend_from_slice(&encode(None).unwrap());
        let err = decode("cuda-buffers", &all, 2).unwrap_err().to_string();
        assert!(
            err.contains("rank 1") && err.contains("cuda-buffers"),
            "{err}"
        );
    }

    #[test]
    fn oversized_blobs_are_refused_not_truncated() {
        assert!(encode(Some(&[0u8; SLOT - 2])).is_err());
    }

    #[test]
    fn an_all_zero_slot_from_a_rank_that_never_wrote_is_a_failure() {
        let all = [0u8; 2 * SLOT];
        assert!(decode("k", &all, 2).is_err());
    }
}
