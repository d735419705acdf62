//! The drop-in's CUDA helpers (saving the caller's context, the set-up
//! all-gather's scratch buffer) are the library's, in its unsafe bottom
//! layer (tpcomm's `sys/cuda/scratch.rs`; the staging buffer, kept there
//! too, is owned by the library's `Communicator`); this crate makes no CUDA
//! driver call of its own.

pub use tpcomm::cuda::{SavedContext, Scratch};
