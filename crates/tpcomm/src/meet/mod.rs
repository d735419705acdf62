//! What the ranks of one job on one machine meet through, whatever they
//! then run: the job key they share, the identity of a process (pid and
//! start time), and files that only this user can have written (the
//! rendezvous ticket, private files). The CPU all-reduce (`cpu`) and the GPU
//! communicators' rendezvous (`cuda`) both build on it.

#[forbid(unsafe_code)]
pub(crate) mod identity;
#[forbid(unsafe_code)]
pub(crate) mod private_file;
#[forbid(unsafe_code)]
pub(crate) mod ticket;

pub use identity::{JobKey, JOB_KEY_ENV};
