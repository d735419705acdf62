//! The P2P transport: `P2pTransport` (comm.rs), the check at creation that
//! P2P moves the right bytes (check.rs), and the cache of its passes
//! (cache.rs).

pub mod cache;
pub mod check;
mod comm;

pub use comm::{open_context, P2pTransport};
