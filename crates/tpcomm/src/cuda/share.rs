//! Ranks that share one GPU: who shares it, and how many blocks each rank's
//! kernels may launch so that the grids which wait on each other all fit on
//! the device at once.
//!
//! Every block of tpcomm's kernels may spin until a peer's data arrives, and
//! the peer's data is written by blocks of the peer's grid. On separate GPUs
//! each grid has a device to itself. When k ranks share a device, a grid that
//! took every SM could leave no room for the peer grid it waits on, and the
//! spinning blocks would never yield: a deadlock. So each rank launches at
//! most `resident capacity / k` blocks, where the capacity comes from the
//! occupancy API for the kernels as compiled.

use crate::error::{Error, Result};
use std::sync::atomic::{AtomicU64, Ordering};

/// What a rank tells its peers about its GPU at creation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceIdentity {
    /// The GPU's UUID (the same in every process, whatever the ordinal).
    pub uuid: [u8; 16],
    /// The process the rank runs in (for messages).
    pub pid: u32,
    /// A random number drawn once per process: with `pid`, what tells two
    /// processes apart (a pid alone repeats across PID namespaces, e.g. two
    /// containers on one GPU).
    pub process: u64,
}

impl DeviceIdentity {
    pub const BYTES: usize = 28;

    /// This process's identity on the GPU of UUID `uuid`.
    pub fn here(uuid: [u8; 16]) -> Self {
        static PROCESS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
        Self {
            uuid,
            pid: std::process::id(),
            process: *PROCESS.get_or_init(rand::random::<u64>),
        }
    }

    /// This process's identity on CUDA device `device` (its UUID asked of
    /// the driver, which must be loaded): what a rank tells its peers.
    pub fn of_device(device: usize) -> Result<Self> {
        let ordinal = i32::try_from(device)
            .map_err(|_| Error::invalid("CUDA device", format!("ordinal {device} is too large")))?;
        Ok(Self::here(crate::sys::cuda::device_uuid(ordinal)?))
    }

    /// Whether `other` runs in the same process (same address space, same
    /// CUDA contexts): its device pointers are valid here as they are.
    pub fn same_process(&self, other: &Self) -> bool {
        self.pid == other.pid && self.process == other.process
    }

    pub fn to_bytes(self) -> [u8; Self::BYTES] {
        let mut b = [0u8; Self::BYTES];
        b[..16].copy_from_slice(&self.uuid);
        b[16..20].copy_from_slice(&self.pid.to_le_bytes());
        b[20..].copy_from_slice(&self.process.to_le_bytes());
        b
    }

    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        let uuid: [u8; 16] = b.get(..16)?.try_into().ok()?;
        let pid = u32::from_le_bytes(b.get(16..20)?.try_into().ok()?);
        let process = u64::from_le_bytes(b.get(20..28)?.try_into().ok()?);
        Some(Self { uuid, pid, process })
    }
}

/// How the group's ranks sit on this rank's GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sharing {
    /// Ranks on this rank's GPU, itself included (1 on a GPU of its own).
    pub ranks_on_device: usize,
    /// Whether some rank on this GPU runs in another process (then their
    /// kernels run at once only under MPS).
    pub other_processes: bool,
    /// Ranks on this rank's GPU in this rank's process, itself included:
    /// more than one means ranks as threads sharing the GPU, whose kernels
    /// run at once only when their streams sit in different hardware
    /// queues (see [`queue_warning`]).
    pub in_this_process: usize,
}

impl Sharing {
    /// This rank's view of `all` (every rank's identity, in rank order).
    pub fn of(all: &[DeviceIdentity], rank: usize) -> Self {
        let me = all[rank];
        let same: Vec<_> = all.iter().filter(|d| d.uuid == me.uuid).collect();
        Self {
            ranks_on_device: same.len(),
            other_processes: same.iter().any(|d| !d.same_process(&me)),
            in_this_process: same.iter().filter(|d| d.same_process(&me)).count(),
        }
    }

    pub fn shared(&self) -> bool {
        self.ranks_on_device > 1
    }

    /// "" on a GPU of its own, else a note for logs and reports.
    pub fn label(&self) -> String {
        if self.shared() {
            format!("shared GPU: {} ranks on this device", self.ranks_on_device)
        } else {
            String::new()
        }
    }
}

/// What a rank whose GPU is shared with ranks of other processes does when
/// no MPS server serves it: the calls stay correct but each costs a time
/// slice (milliseconds), so it says so once.
pub fn time_slice_warning(sharing: Sharing, mps: bool, device: usize) -> Option<String> {
    (sharing.other_processes && !mps).then(|| {
        format!(
            "tpcomm: warning: {} ranks share GPU {device} from different processes without MPS; \
             their kernels run in time slices (milliseconds per call). Start the MPS daemon \
             (`nvidia-cuda-mps-control -d`) before the ranks for microsecond calls",
            sharing.ranks_on_device
        )
    })
}

/// The most hardware work queues CUDA gives a context
/// (`CUDA_DEVICE_MAX_CONNECTIONS`, default 8).
pub const MAX_CONNECTIONS: u32 = 32;

/// CUDA's own variable for a context's hardware work queues.
pub const QUEUES_ENV: &str = "CUDA_DEVICE_MAX_CONNECTIONS";

/// For a process whose ranks are threads sharing a GPU (each rank's stream
/// needs a queue of its own, [`queue_warning`]): sets [`QUEUES_ENV`] to
/// [`MAX_CONNECTIONS`] when it is unset (a value given is kept) and returns
/// what it held before (`None`: unset). CUDA reads it once, when it
/// starts: call this before any thread of the process touches CUDA.
pub fn widen_queues_for_threads() -> Option<std::ffi::OsString> {
    let before = std::env::var_os(QUEUES_ENV);
    if before.is_none() {
        std::env::set_var(QUEUES_ENV, MAX_CONNECTIONS.to_string());
    }
    before
}

/// What a rank whose GPU is shared with other ranks *of its own process*
/// (threads) says when `CUDA_DEVICE_MAX_CONNECTIONS` (`connections`, as
/// read from the environment) is below 32.
///
/// CUDA puts a context's streams round-robin into that many hardware
/// queues, and a queue runs its work in order. Two ranks whose streams
/// share a queue can stall each other: work queued behind one rank's
/// waiting kernel (a copy of its result, say) holds back the other rank's
/// kernel that it waits for, until the timeout. Measured on one H200 with
/// the 10,000-replay tests: with 1 queue every call stalls, with the
/// default 8 a stall came within a few thousand calls at 5 ranks, with 32
/// none at 2 to 8 ranks (bench/results/2026-12-02-h200x1-shared-pinned).
/// Processes under MPS each have queues of their own.
pub fn queue_warning(sharing: Sharing, connections: Option<&str>, device: usize) -> Option<String> {
    if sharing.in_this_process < 2 {
        return None;
    }
    let n = connections.and_then(|v| v.trim().parse::<u32>().ok());
    if n.is_some_and(|n| n >= MAX_CONNECTIONS) {
        return None;
    }
    let now = match connections {
        None => "unset (8 queues)".to_string(),
        Some(v) => format!("{v:?}"),
    };
    Some(format!(
        "tpcomm: warning: {} ranks of this process share GPU {device}; their kernels wait on each other and \
         can stall until the timeout when two ranks' streams share a hardware queue. \
         CUDA_DEVICE_MAX_CONNECTIONS is {now}: set it to {MAX_CONNECTIONS} before CUDA starts, and create \
         the ranks' streams one after another (or run the ranks as processes under MPS)",
        sharing.in_this_process
    ))
}

/// The devices (a bit per ordinal, ordinals from 63 on sharing bit 63) on
/// which this process created a communicator whose GPU other ranks share.
static SHARED_DEVICES: AtomicU64 = AtomicU64::new(0);

fn device_bit(device: usize) -> u64 {
    1u64 << device.min(63)
}

/// Records, at a communicator's creation, that ranks share `device` when
/// they do. Kept for the process's life: a later communicator on that
/// device may share it again, and a kernel queued by one that was dropped
/// may still be running.
pub fn note_sharing(sharing: Sharing, device: usize) {
    if sharing.shared() {
        SHARED_DEVICES.fetch_or(device_bit(device), Ordering::Relaxed);
    }
}

/// Whether this process has had ranks sharing `device` ([`note_sharing`]).
///
/// Programmatic dependent launch is then off on it (`cuda::pdl`): a kernel
/// launched overlapped puts its blocks on the SMs as soon as every block of
/// the kernel before it on its stream is running, and they sit there until
/// that kernel ends. With one rank a GPU that costs nothing. With k ranks
/// on a GPU, each rank's grid is sized to a k-th of what the GPU holds at
/// once ([`grid_cap`](super::launch_shape::grid_cap)), and those early blocks take the room of another
/// rank's grid, which the waiting kernel needs resident: the call stalls
/// until the timeout. Seen on one H200 with 2 and 4 ranks as threads
/// (`tpcomm bench --algos one-shot-pdl,...` failed with a peer timeout
/// after about 150,000 calls; bench/results/2026-12-03-h200x1-quant-variants).
pub fn device_shared(device: usize) -> bool {
    SHARED_DEVICES.load(Ordering::Relaxed) & device_bit(device) != 0
}

/// Prints [`queue_warning`] for this process's setting, once per process
/// (every rank of the process would say the same).
pub fn warn_queues_once(sharing: Sharing, device: usize) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    // CUDA's own variable, read as CUDA reads it (not a tpcomm setting).
    let v = std::env::var(QUEUES_ENV).ok();
    if let Some(w) = queue_warning(sharing, v.as_deref(), device) {
        ONCE.call_once(|| eprintln!("{w}"));
    }
}

/// What to add to a failed `cuDevicePrimaryCtxRetain` when an MPS server
/// serves the GPU (`mps`) and refused this process: MPS's own refusals, or
/// out of memory, which is how the H200 said its queue pool was spent (a
/// fourth rank process with 32 queues; docs/shared-gpu.md). `queues`: this
/// process's CUDA_DEVICE_MAX_CONNECTIONS. `None` when nothing points at MPS.
pub fn mps_refusal_hint(
    code: cudarc::driver::sys::CUresult,
    mps: bool,
    queues: Option<&str>,
) -> Option<String> {
    use cudarc::driver::sys::CUresult as R;
    let refused = matches!(
        code,
        R::CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED
            | R::CUDA_ERROR_MPS_MAX_CLIENTS_REACHED
            | R::CUDA_ERROR_MPS_SERVER_NOT_READY
            | R::CUDA_ERROR_MPS_CONNECTION_FAILED
            | R::CUDA_ERROR_MPS_RPC_FAILURE
            | R::CUDA_ERROR_OUT_OF_MEMORY
    );
    (mps && refused).then(|| {
        format!(
            "; an MPS server serves this GPU and did not take this process: its clients share one \
             pool of hardware queues, and this process asks for {} (CUDA_DEVICE_MAX_CONNECTIONS). \
             Start rank processes with it unset or at 8 or less, put fewer processes on the GPU, \
             or, if earlier clients were killed, restart the daemon (`echo quit | \
             nvidia-cuda-mps-control`, then `nvidia-cuda-mps-control -d`)",
            queues.map_or("CUDA's default of 8".to_string(), |q| q.to_string())
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cuda::launch_shape::grid_cap;

    #[test]
    fn a_context_refused_under_mps_says_why_and_what_to_do() {
        use cudarc::driver::sys::CUresult as R;
        let h =
            mps_refusal_hint(R::CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED, true, Some("32")).unwrap();
        assert!(
            h.contains("asks for 32") && h.contains("8 or less") && h.contains("-d"),
            "{h}"
        );
        let h = mps_refusal_hint(R::CUDA_ERROR_OUT_OF_MEMORY, true, None).unwrap();
        assert!(h.contains("CUDA's default of 8"), "{h}");
        // Without MPS, or for an error MPS does not cause, nothing is added.
        assert_eq!(
            mps_refusal_hint(R::CUDA_ERROR_OUT_OF_MEMORY, false, Some("32")),
            None
        );
        assert_eq!(
            mps_refusal_hint(R::CUDA_ERROR_INVALID_VALUE, true, Some("32")),
            None
        );
    }

    fn id(gpu: u8, pid: u32) -> DeviceIdentity {
        DeviceIdentity {
            uuid: [gpu; 16],
            pid,
            process: u64::from(pid) * 31,
        }
    }

    #[test]
    fn ranks_count_only_the_ranks_on_their_own_gpu() {
        // 5 ranks round-robin over 2 GPUs, one process.
        let all: Vec<_> = (0..5).map(|r| id((r % 2) as u8, 7)).collect();
        assert_eq!(Sharing::of(&all, 0).ranks_on_device, 3);
        assert_eq!(Sharing::of(&all, 1).ranks_on_device, 2);
        assert!(!Sharing::of(&all, 0).other_processes);
        let own: Vec<_> = (0..2).map(|r| id(r as u8, 7)).collect();
        assert!(!Sharing::of(&own, 1).shared());
    }

    #[test]
    fn ranks_in_other_processes_on_the_same_gpu_are_noticed() {
        let all = [id(0, 10), id(0, 11), id(1, 12)];
        assert!(Sharing::of(&all, 0).other_processes);
        assert!(!Sharing::of(&all, 2).other_processes);
        let s = Sharing::of(&all, 0);
        assert!(time_slice_warning(s, false, 0).unwrap().contains("MPS"));
        assert!(time_slice_warning(s, true, 0).is_none());
    }

    #[test]
    fn shared_grids_fit_the_device_together() {
        // H200: 132 SMs; the kernels' 512-thread blocks fit once per SM.
        for k in 1..=8 {
            let s = Sharing {
                ranks_on_device: k,
                other_processes: false,
                in_this_process: k,
            };
            for per_sm in 1..=4 {
                let cap = grid_cap(132, per_sm, s).unwrap();
                assert!(cap * k <= 132 * per_sm, "k={k} per_sm={per_sm} cap={cap}");
                assert!(cap <= 132);
            }
        }
        let own = Sharing {
            ranks_on_device: 1,
            other_processes: false,
            in_this_process: 1,
        };
        // A GPU of its own keeps one block per SM, as before.
        assert_eq!(grid_cap(132, 1, own).unwrap(), 132);
        assert_eq!(grid_cap(132, 4, own).unwrap(), 132);
        // 8 ranks at one block per SM: 16 blocks each.
        let eight = Sharing {
            ranks_on_device: 8,
            other_processes: false,
            in_this_process: 8,
        };
        assert_eq!(grid_cap(132, 1, eight).unwrap(), 16);
        assert!(grid_cap(4, 1, eight).is_err());
    }

    #[test]
    fn threads_sharing_a_gpu_are_told_to_raise_the_queue_count() {
        let threads = Sharing::of(&[id(0, 7), id(0, 7), id(1, 7)], 0);
        assert_eq!(threads.in_this_process, 2);
        let w = queue_warning(threads, None, 0).unwrap();
        assert!(
            w.contains("unset") && w.contains("CUDA_DEVICE_MAX_CONNECTIONS"),
            "{w}"
        );
        assert!(queue_warning(threads, Some("8"), 0)
            .unwrap()
            .contains("\"8\""));
        assert!(queue_warning(threads, Some("x"), 0).is_some());
        assert!(queue_warning(threads, Some("32"), 0).is_none());
        // A GPU of its own, or peers in other processes: nothing to say.
        let own = Sharing::of(&[id(0, 7), id(1, 7)], 0);
        assert!(queue_warning(own, None, 0).is_none());
        let procs = Sharing::of(&[id(0, 7), id(0, 8)], 0);
        assert_eq!(procs.in_this_process, 1);
        assert!(queue_warning(procs, None, 0).is_none());
    }

    #[test]
    fn identities_round_trip_and_short_records_are_refused() {
        let d = id(3, 4242);
        assert_eq!(DeviceIdentity::from_bytes(&d.to_bytes()), Some(d));
        assert_eq!(DeviceIdentity::from_bytes(&[0u8; 27]), None);
    }

    #[test]
    fn a_pid_seen_again_in_another_process_is_another_process() {
        // Two containers: both ranks are pid 1, in different processes.
        let (a, b) = (
            id(0, 1),
            DeviceIdentity {
                process: 99,
                ..id(0, 1)
            },
        );
        assert!(!a.same_process(&b));
        assert!(Sharing::of(&[a, b], 0).other_processes);
        let here = DeviceIdentity::here([5; 16]);
        assert!(here.same_process(&DeviceIdentity::here([6; 16])));
        assert_eq!(here.pid, std::process::id());
    }

    /// Devices 41 and 42 (no test creates a communicator on them); the mark
    /// is process-wide, so each assertion names its own device.
    #[test]
    fn only_a_shared_gpu_is_marked_and_the_mark_stays() {
        let own = Sharing::of(&[id(0, 7), id(1, 7)], 0);
        let shared = Sharing::of(&[id(0, 7), id(0, 7)], 0);
        note_sharing(own, 41);
        assert!(!device_shared(41), "a GPU of its own is not marked");
        note_sharing(shared, 42);
        assert!(device_shared(42));
        assert!(!device_shared(41), "the mark is per device");
        note_sharing(own, 42);
        assert!(
            device_shared(42),
            "a later unshared communicator does not clear it"
        );
        assert_eq!(
            device_bit(63),
            device_bit(200),
            "ordinals past 63 share the last bit"
        );
    }
}
