//! Swapping set-up data between the ranks through the real NCCL
//! communicator itself: an all-gather of a fixed-size slot per rank.
//!
//! Every rank must make the same number of all-gathers, or they pair up
//! wrongly and NCCL hangs. A rank can leave the set-up early (a local
//! failure, or a peer's failure seen in a slot), so the set-up ends with
//! [`finish`]: every rank posts "finished" (ok or failed) until one
//! all-gather in which every slot says "finished". A rank still inside the
//! set-up sees a "finished" slot as a peer's failure and leaves too, so all
//! ranks reach that all-gather together, whatever step each left at, and all
//! take the same decision from it.

use crate::cuda::Scratch;
use crate::ffi::call_real;
use crate::types::{CudaStream, NcclComm, NcclDataType, NcclResult, IN_PROGRESS, SUCCESS, UINT8};
use std::ffi::c_void;
use std::time::Duration;
use tpcomm::{Error, Result};

/// Bytes each rank posts per exchange: a status byte, a 2-byte length, data.
pub const SLOT: usize = 256;
const POSTED: u8 = 1;
const FAILED: u8 = 2;
const FINISHED_OK: u8 = 3;
const FINISHED_FAILED: u8 = 4;
/// Rounds of [`finish`] before giving up; ranks normally agree in one or two.
const MAX_FINISH_ROUNDS: usize = 64;

pub struct NcclExchange {
    comm: usize,
    rank: usize,
    world: usize,
    scratch: Scratch,
}

impl std::fmt::Debug for NcclExchange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NcclExchange")
            .field("rank", &self.rank)
            .field("world", &self.world)
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
                "rank {r} left the tpcomm set-up before step {key:?} (see its log)"
            )));
        }
        out.push(s[3..3 + len].to_vec());
    }
    Ok(out)
}

/// One all-gather of a [`SLOT`]-byte slot per rank: `world * SLOT` bytes back.
pub type RawGather<'a> = dyn Fn(&[u8; SLOT]) -> Result<Vec<u8>> + 'a;

/// The set-up step every rank ends with (see the module notes): returns
/// whether every rank finished ok, the same answer on every rank.
pub fn finish(raw: &RawGather, world: usize, ok: bool) -> Result<bool> {
    let mut slot = [0u8; SLOT];
    slot[0] = if ok { FINISHED_OK } else { FINISHED_FAILED };
    for _ in 0..MAX_FINISH_ROUNDS {
        let all = raw(&slot)?;
        let states: Vec<u8> = (0..world)
            .map(|r| all.get(r * SLOT).copied().unwrap_or(0))
            .collect();
        if states
            .iter()
            .all(|&s| s == FINISHED_OK || s == FINISHED_FAILED)
        {
            return Ok(states.iter().all(|&s| s == FINISHED_OK));
        }
    }
    Err(Error::Aborted(format!(
        "the ranks did not finish the tpcomm set-up together in {MAX_FINISH_ROUNDS} all-gathers"
    )))
}

/// One exchange over `raw`: posts `mine` (`None`: this rank failed) and
/// returns every rank's data, or the error of the first rank that did not post.
pub fn gather_over(
    raw: &RawGather,
    key: &str,
    world: usize,
    mine: Option<&[u8]>,
) -> Result<Vec<Vec<u8>>> {
    // A blob too large still takes part, as "failed".
    let (slot, local_err) = match encode(mine) {
        Ok(s) => (s, None),
        Err(e) => (encode(None)?, Some(e)),
    };
    let all = raw(&slot)?;
    if let Some(e) = local_err {
        return Err(e);
    }
    decode(key, &all, world)
}

impl NcclExchange {
    /// Needs the communicator's device context current.
    pub fn new(comm: NcclComm, rank: usize, world: usize) -> Result<Self> {
        Ok(Self {
            comm: comm as usize,
            rank,
            world,
            scratch: Scratch::new(world * SLOT)?,
        })
    }

    /// One exchange (see [`gather_over`]).
    pub fn gather(
        &self,
        key: &str,
        mine: Option<&[u8]>,
        timeout: Duration,
    ) -> Result<Vec<Vec<u8>>> {
        gather_over(&|slot| self.raw(slot, key, timeout), key, self.world, mine)
    }

    /// The last step of the set-up (see [`finish`]).
    pub fn finish(&self, ok: bool, timeout: Duration) -> Result<bool> {
        finish(&|slot| self.raw(slot, "finish", timeout), self.world, ok)
    }

    /// The all-gather itself, on the real communicator, waited for at most `timeout`.
    fn raw(&self, slot: &[u8; SLOT], key: &str, timeout: Duration) -> Result<Vec<u8>> {
        let offset = self.rank * SLOT;
        self.scratch.upload(offset, slot)?;
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
        if r == IN_PROGRESS && !crate::forward::wait_ready::wait_ready(comm) {
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
        self.scratch.download()
    }
}

/// How P2pTransport::new reaches the other ranks: through this exchange.
#[derive(Debug)]
pub struct AsRendezvous(pub std::sync::Arc<NcclExchange>);

impl tpcomm::cuda::Exchange for AsRendezvous {
    fn exchange(&self, turn: tpcomm::cuda::Turn<'_>) -> Result<Vec<Vec<u8>>> {
        let (rank, world) = (turn.rank, turn.world);
        if rank != self.0.rank || world != self.0.world {
            return Err(Error::invalid(
                "rendezvous",
                format!(
                    "asked for rank {rank} of {world}, the NCCL communicator has rank {} of {}",
                    self.0.rank, self.0.world
                ),
            ));
        }
        self.0.gather(turn.key, Some(turn.mine), turn.timeout)
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

    /// An in-memory all-gather between threads, counting its rounds.
    struct Sim {
        world: usize,
        slots: std::sync::Mutex<Vec<[u8; SLOT]>>,
        barrier: std::sync::Barrier,
    }

    impl Sim {
        fn new(world: usize) -> Self {
            Sim {
                world,
                slots: std::sync::Mutex::new(vec![[0u8; SLOT]; world]),
                barrier: std::sync::Barrier::new(world),
            }
        }
        fn gather(
            &self,
            rank: usize,
            slot: &[u8; SLOT],
            rounds: &std::cell::Cell<usize>,
        ) -> Result<Vec<u8>> {
            rounds.set(rounds.get() + 1);
            self.slots.lock().unwrap()[rank] = *slot;
            self.barrier.wait();
            let all = self.slots.lock().unwrap().concat();
            self.barrier.wait();
            Ok(all)
        }
    }

    /// Rank r makes `steps` exchanges like P2pTransport::new, failing
    /// locally before step `fail_at[r]` (if any), then finishes.
    fn run_ranks(steps: usize, fail_at: Vec<Option<usize>>) -> Vec<(bool, usize)> {
        let world = fail_at.len();
        let sim = std::sync::Arc::new(Sim::new(world));
        let (tx, rx) = std::sync::mpsc::channel();
        for (rank, fail) in fail_at.into_iter().enumerate() {
            let (sim, tx) = (sim.clone(), tx.clone());
            std::thread::spawn(move || {
                let rounds = std::cell::Cell::new(0);
                let raw = |slot: &[u8; SLOT]| sim.gather(rank, slot, &rounds);
                let made: Result<()> = (|| {
                    for step in 0..steps {
                        if fail == Some(step) {
                            return Err(Error::Aborted("local failure".into()));
                        }
                        gather_over(&raw, "step", sim.world, Some(&[rank as u8]))?;
                    }
                    Ok(())
                })();
                let agreed = finish(&raw, sim.world, made.is_ok()).unwrap();
                tx.send((rank, agreed, rounds.get())).unwrap();
            });
        }
        drop(tx);
        let mut out = vec![(false, 0); world];
        for _ in 0..world {
            // A mismatch of rounds would leave a thread in the barrier: bounded here.
            let (rank, agreed, rounds) = rx
                .recv_timeout(std::time::Duration::from_secs(10))
                .expect("the ranks did not finish together (all-gathers paired wrongly)");
            out[rank] = (agreed, rounds);
        }
        out
    }

    #[test]
    fn every_rank_succeeding_agrees_after_one_finish_round() {
        let out = run_ranks(2, vec![None, None, None]);
        assert_eq!(out, vec![(true, 3); 3]);
    }

    #[test]
    fn a_rank_failing_at_any_step_makes_every_rank_give_up_together() {
        for steps in [1, 2, 3, 5] {
            for world in [2, 3, 4] {
                for failer in 0..world {
                    for at in 0..steps {
                        let mut fail_at = vec![None; world];
                        fail_at[failer] = Some(at);
                        let out = run_ranks(steps, fail_at);
                        assert!(
                            out.iter().all(|&(ok, _)| !ok),
                            "{steps} {world} {failer} {at}: {out:?}"
                        );
                        let rounds = out[0].1;
                        assert!(out.iter().all(|&(_, r)| r == rounds), "{out:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn ranks_failing_at_different_steps_still_finish_together() {
        let out = run_ranks(4, vec![Some(3), Some(0), None, Some(1)]);
        assert!(out.iter().all(|&(ok, r)| !ok && r == out[0].1), "{out:?}");
    }

    #[test]
    fn an_all_zero_slot_from_a_rank_that_never_wrote_is_a_failure() {
        let all = [0u8; 2 * SLOT];
        assert!(decode("k", &all, 2).is_err());
    }
}
