//! Waiting for a non-blocking NCCL communicator to finish its creation:
//! what both the interception of the creation calls and the exchange of
//! tpcomm's handles through NCCL need.

use crate::ffi::call_real;
use crate::settings::{self, warn};
use crate::types::*;
use std::time::{Duration, Instant};

/// Waits until a non-blocking communicator is ready (bounded).
pub(crate) fn wait_ready(comm: NcclComm) -> bool {
    let start = Instant::now();
    loop {
        let mut state: NcclResult = IN_PROGRESS;
        let r =
            call_real!(ncclCommGetAsyncError(comm, &mut state)
                as fn(NcclComm, *mut NcclResult) -> NcclResult);
        match r {
            Ok(SUCCESS) if state == SUCCESS => return true,
            Ok(SUCCESS) if state == IN_PROGRESS => {}
            _ => return false,
        }
        if start.elapsed() > settings::get().timeout {
            warn!("a non-blocking NCCL communicator was not ready in time; tpcomm not set up");
            return false;
        }
        std::thread::sleep(Duration::from_micros(100));
    }
}
