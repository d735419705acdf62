//! Selection: which transport and algorithm runs an all-reduce.
//!
//! A pure function of (machine class, world size, element type, bytes, eager
//! or graph), answered from a tuning table written by `tpcomm tune` when this
//! machine has one, from a committed default table for its class when that
//! class was measured, and from stated rules otherwise. Every answer carries
//! the reason (`why`) and the estimated times of the alternatives, so
//! `tpcomm explain` can show them.
//!
//! The selector knows nothing of how a transport moves bytes; transports and
//! algorithms know nothing of selection (as in NCCL, tuning lives apart).

#[forbid(unsafe_code)]
mod defaults;
#[forbid(unsafe_code)]
mod find;
#[forbid(unsafe_code)]
mod query;
#[forbid(unsafe_code)]
mod route;
#[cfg(test)]
mod route_tests;
#[forbid(unsafe_code)]
mod selector;
#[forbid(unsafe_code)]
mod size_rule;
#[forbid(unsafe_code)]
mod table;
#[cfg(test)]
mod tests;

pub use defaults::{builtin_table, class_rule, BUILTIN_NVLINK_TOML};
pub use find::{
    check_machine, default_table_path, find_table, for_probed, for_this_machine, load_for,
    this_machine, Machine, TableSource, ENV_TABLE,
};
pub use query::{Candidate, Decision, Mode, Query};
pub use route::{
    agree, class_edge, class_floor, decide, size_class, transport_of, transport_of_class, Group,
    NcclReason, Route, RouteTable,
};
pub use selector::{select, Selector};
pub use size_rule::{auto_oneshot_max, resolve_by_size};
pub use table::{tune_sizes, Measured, Row, Table, FORMAT};

/// Where the bytes of a collective live and how peers see them: the crate's
/// one transport type (`crate::transport`).
pub use crate::transport::Transport;
