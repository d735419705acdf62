//! Helpers shared by the host transport tests.
#![allow(dead_code)]

use std::path::Path;
use std::time::Duration;
use tpcomm::{ByteSize, HostCommunicator, HostConfig};

pub fn config(
    rank: usize,
    world: usize,
    dir: &Path,
    max: ByteSize,
    timeout: Duration,
) -> HostConfig {
    let mut c = HostConfig::new(rank, world, dir);
    c.max_message = max;
    c.timeout = timeout;
    c
}

/// Runs `body` on `world` threads, one communicator each, and returns what
/// each rank returned (in rank order).
pub fn run_threads<R: Send>(
    world: usize,
    max: ByteSize,
    timeout: Duration,
    body: impl Fn(&mut HostCommunicator) -> R + Sync,
) -> Vec<R> {
    run_threads_with(world, max, max, timeout, body)
}

/// As `run_threads`, with pieces of `piece` bytes.
pub fn run_threads_with<R: Send>(
    world: usize,
    max: ByteSize,
    piece: ByteSize,
    timeout: Duration,
    body: impl Fn(&mut HostCommunicator) -> R + Sync,
) -> Vec<R> {
    let dir = tempfile::tempdir().unwrap();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..world)
            .map(|r| {
                let mut cfg = config(r, world, dir.path(), max, timeout);
                cfg.piece = piece;
                let body = &body;
                s.spawn(move || {
                    let mut c = HostCommunicator::new(cfg).expect("communicator creation");
                    body(&mut c)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// A seed unique to (call, rank), so any rank can rebuild any input.
pub fn seed(call: u64, rank: usize) -> u64 {
    call.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (rank as u64 + 1)
}
