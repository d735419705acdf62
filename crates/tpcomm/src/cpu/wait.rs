//! Cheap backoff for polling loops: spin briefly (a peer on another core
//! answers within a few hundred nanoseconds), then yield so that ranks sharing
//! a core still progress, then sleep so a long wait does not burn a core.

use std::time::{Duration, Instant};

pub(crate) const SPINS: u32 = 256;
const YIELD_FOR: Duration = Duration::from_millis(2);
const SLEEP: Duration = Duration::from_micros(50);

pub(crate) struct Backoff {
    n: u32,
    start: Option<Instant>,
}

impl Backoff {
    pub(crate) fn new() -> Self {
        Backoff { n: 0, start: None }
    }

    /// Whether the caller has left the spinning phase (time to check slow
    /// conditions: abort word, deadline, peer liveness).
    pub(crate) fn slow(&self) -> bool {
        self.n >= SPINS
    }

    pub(crate) fn snooze(&mut self) {
        self.n = self.n.saturating_add(1);
        if self.n < SPINS {
            std::hint::spin_loop();
            return;
        }
        let start = *self.start.get_or_insert_with(Instant::now);
        if start.elapsed() < YIELD_FOR {
            std::thread::yield_now();
        } else {
            std::thread::sleep(SLEEP);
        }
    }
}
