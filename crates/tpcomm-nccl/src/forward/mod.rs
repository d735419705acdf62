//! Forward mode: the real NCCL serves the communicator, and tpcomm runs the
//! all-reduces it takes on a communicator paired with the real one.
//!
//! - paired.rs: the tpcomm communicator kept with each real NCCL
//!   communicator, and its set-up;
//! - setup_exchange.rs: the set-up's exchanges between ranks, over the real
//!   communicator;
//! - wait_ready.rs: waiting for a non-blocking real creation to finish;
//! - passthrough.rs: the exported functions forwarded unchanged.

pub(crate) mod paired;
pub(crate) mod passthrough;
pub(crate) mod setup_exchange;
pub(crate) mod wait_ready;
