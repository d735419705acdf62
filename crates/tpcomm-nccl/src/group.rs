//! The calling thread's ncclGroupStart nesting, kept as NCCL keeps its own:
//! api/group.rs counts the brackets; creation (auto_mode.rs) and the
//! collectives (api/all_reduce.rs, collectives.rs) ask whether they run inside
//! one.

use std::cell::Cell;

thread_local! {
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// ncclGroupStart nesting on the calling thread.
pub(crate) fn depth() -> u32 {
    DEPTH.get()
}

/// A group bracket opened on this thread.
pub(crate) fn enter() {
    DEPTH.set(DEPTH.get() + 1);
}

/// A group bracket closed on this thread (never below zero).
pub(crate) fn leave() {
    DEPTH.set(DEPTH.get().saturating_sub(1));
}
