//! The group calls: ncclGroupStart and ncclGroupEnd, tracked so that calls
//! inside a group keep NCCL's group semantics, and so that tpcomm's set-up of
//! a communicator created inside a group waits for ncclGroupEnd.

use super::init::{decide_pending, made, ok, PENDING};
use crate::ffi::{call_real, guard, Fail};
use crate::forward::wait_ready::wait_ready;
use crate::group;
use crate::settings::{self, Standalone};
use crate::types::*;

#[no_mangle]
pub unsafe extern "C" fn ncclGroupStart() -> NcclResult {
    guard("ncclGroupStart", || {
        // Standalone mode has no real NCCL to group with: calls on a
        // standalone communicator run in order as they come. Auto mode
        // groups with NCCL (its real communicators keep NCCL's group
        // semantics); calls on a served communicator inside the group still
        // run at once (registry::lookup comes first) and never reach NCCL.
        if settings::get().standalone == Standalone::Always {
            group::enter();
            return SUCCESS;
        }
        match call_real!(ncclGroupStart() as fn() -> NcclResult) {
            Ok(r) => {
                if r == SUCCESS {
                    group::enter();
                }
                r
            }
            Err(_) => NcclResult::missing(),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclGroupEnd() -> NcclResult {
    guard("ncclGroupEnd", || {
        if settings::get().standalone == Standalone::Always {
            group::leave();
            if group::depth() == 0 {
                // A marked id's creations (an id from a process in auto
                // mode) decided now; NCCL has no group open here.
                let decided = decide_pending();
                let made = crate::standalone::create::finish_group();
                // Sends and receives on standalone communicators.
                let moved = crate::standalone::p2p::finish();
                return [decided, made, moved]
                    .into_iter()
                    .find(|&r| r != SUCCESS)
                    .unwrap_or(SUCCESS);
            }
            return SUCCESS;
        }
        // Auto mode's creations of this group that waited for its end to
        // take their census decision: decided now, while NCCL's group is
        // still open, so that those going to NCCL join it.
        let decided = if group::depth() == 1 {
            decide_pending()
        } else {
            SUCCESS
        };
        let r = match call_real!(ncclGroupEnd() as fn() -> NcclResult) {
            Ok(r) => r,
            Err(_) => return NcclResult::missing(),
        };
        // NCCL leaves the group whatever the result.
        group::leave();
        if group::depth() == 0 {
            // Standalone ranks made inside the group (auto mode's marked ids).
            let served = crate::standalone::create::finish_group();
            // Sends and receives on standalone communicators of the group.
            let moved = crate::standalone::p2p::finish();
            // NCCL's communicators of the group get tpcomm's set-up whatever
            // became of the group's standalone parts: NCCL made them.
            for (comm, origin, after) in PENDING.take() {
                let comm = comm as NcclComm;
                if ok(r) && (r == SUCCESS || wait_ready(comm)) {
                    made(comm, origin, after);
                }
            }
            if let Some(bad) = [served, moved, decided].into_iter().find(|&x| x != SUCCESS) {
                return bad;
            }
        }
        r
    })
}
