//! The host side of NCCL 2.28's device API (nccl_device/core.h: device
//! communicators, teams, the GIN barrier's requirement) and ncclCommRevoke:
//! the functions of libnccl 2.28 that take a communicator and that the
//! other modules do not define.
//!
//! On a communicator the real NCCL made each is NCCL's. A standalone
//! communicator has no NCCL behind it, so without these a preloaded
//! program's call would reach the real NCCL with a handle that is not
//! NCCL's, which NCCL reads through. Here instead:
//! - ncclDevCommCreate, ncclDevCommDestroy and ncclGinBarrierCreateRequirement
//!   are refused (ncclInvalidUsage, the reason in ncclGetLastError): tpcomm's
//!   kernels are its own, and it gives no device communicator;
//! - the teams say what is true of such a communicator: the world is every
//!   rank (stride 1); the load/store-accessible team (LSA) is the rank
//!   alone, since no device communicator reaches a peer's memory; so the
//!   rail team (the ranks with this LSA index) is the world;
//! - ncclCommRevoke succeeds at once: nothing of a standalone communicator
//!   runs outside the caller's streams, so it is quiescent when the call
//!   returns (NCCL's state goes from ncclInProgress to ncclSuccess then).
//!
//! A handle that is neither (TPCOMM_STANDALONE=1) is refused as every call
//! refuses it: ncclInvalidArgument, or for the teams, which return no code,
//! an empty team (0 ranks) and -1 for a rank, with ncclGetLastError's text.

use crate::ffi::{call_real, guard, Fail};
use crate::standalone::{self, registry};
use crate::types::*;
use std::ffi::c_int;

/// `ncclTeam_t` (nccl_device/core.h): `nRanks`, `rank`, `stride`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Team {
    pub n_ranks: c_int,
    pub rank: c_int,
    pub stride: c_int,
}

/// What a team function answers when it cannot answer: no ranks.
pub const NO_TEAM: Team = Team {
    n_ranks: 0,
    rank: 0,
    stride: 0,
};

impl Fail for Team {
    fn missing() -> Self {
        NO_TEAM
    }
    fn internal() -> Self {
        NO_TEAM
    }
}

/// A rank (or a count) a function returns, -1 when it has none: what
/// [`guard`] gives for it on a panic or without the real NCCL (a plain
/// `c_int` would get an `ncclResult_t`'s code).
struct Rank(c_int);

impl Fail for Rank {
    fn missing() -> Self {
        Rank(-1)
    }
    fn internal() -> Self {
        Rank(-1)
    }
}

/// The three teams of a standalone rank `rank` of `world` (module doc).
pub fn standalone_team(which: Which, rank: usize, world: usize) -> Team {
    let (w, r) = (world as c_int, rank as c_int);
    match which {
        Which::World | Which::Rail => Team {
            n_ranks: w,
            rank: r,
            stride: 1,
        },
        Which::Lsa => Team {
            n_ranks: 1,
            rank: 0,
            stride: 1,
        },
    }
}

/// The world rank of `team`'s rank `peer`, seen from world rank `me`, as
/// NCCL computes it (a team is evenly strided through the world); -1 when
/// it is not a rank of the team or of a world of `world` ranks.
pub fn team_rank_to_world(me: usize, world: usize, team: Team, peer: c_int) -> c_int {
    if peer < 0 || peer >= team.n_ranks {
        return -1;
    }
    let w = me as i64 + (peer as i64 - team.rank as i64) * team.stride as i64;
    if w < 0 || w >= world as i64 {
        return -1;
    }
    w as c_int
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Which {
    World,
    Lsa,
    Rail,
}

const NOT_SERVED: &str = "NCCL's device API is not served on a tpcomm standalone communicator (tpcomm runs its own kernels and gives no device communicator); give each rank its own GPU and TPCOMM_STANDALONE=0 for NCCL to serve it";

served_or_forwarded! {
    fn ncclDevCommCreate(comm: NcclComm, reqs: Opaque, out_dev_comm: Opaque) on comm;
    standalone a => standalone::fail(
        standalone::INVALID_USAGE,
        format!("ncclDevCommCreate rank {}/{}: {NOT_SERVED}", a.rank, a.world),
    );
}

served_or_forwarded! {
    fn ncclDevCommDestroy(comm: NcclComm, dev_comm: Opaque) on comm;
    standalone a => standalone::fail(
        standalone::INVALID_USAGE,
        format!("ncclDevCommDestroy rank {}/{}: {NOT_SERVED}", a.rank, a.world),
    );
}

served_or_forwarded! {
    fn ncclGinBarrierCreateRequirement(
        comm: NcclComm,
        team: Team,
        n_barriers: c_int,
        out_handle: Opaque,
        out_req: Opaque,
    ) on comm;
    standalone a => standalone::fail(
        standalone::INVALID_USAGE,
        format!("ncclGinBarrierCreateRequirement rank {}/{}: {NOT_SERVED}", a.rank, a.world),
    );
}

served_or_forwarded! {
    fn ncclCommRevoke(comm: NcclComm, revoke_flags: c_int) on comm;
    standalone a => {
        if revoke_flags != 0 {
            return standalone::fail(
                INVALID_ARGUMENT,
                format!("ncclCommRevoke rank {}/{}: revokeFlags {revoke_flags}: only NCCL_REVOKE_DEFAULT (0) is defined", a.rank, a.world),
            );
        }
        crate::settings::info!("ncclCommRevoke rank {}/{}: quiescent at once (nothing runs outside the caller's streams)", a.rank, a.world);
        SUCCESS
    };
}

/// Defines a team function: a standalone communicator's team, an unknown
/// handle's [`NO_TEAM`] (with the text for ncclGetLastError), else NCCL's.
macro_rules! team_fn {
    ($name:ident, $which:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(comm: NcclComm) -> Team {
            guard(stringify!($name), || {
                if let Some(a) = registry::lookup(comm) {
                    return standalone_team($which, a.rank, a.world);
                }
                if registry::unknown(stringify!($name), comm).is_some() {
                    return NO_TEAM;
                }
                call_real!($name(comm) as fn(NcclComm) -> Team).unwrap_or(NO_TEAM)
            })
        }
    };
}

team_fn!(ncclTeamWorld, Which::World);
team_fn!(ncclTeamLsa, Which::Lsa);
team_fn!(ncclTeamRail, Which::Rail);

#[no_mangle]
pub unsafe extern "C" fn ncclTeamRankToWorld(comm: NcclComm, team: Team, rank: c_int) -> c_int {
    guard("ncclTeamRankToWorld", || {
        if let Some(a) = registry::lookup(comm) {
            return Rank(team_rank_to_world(a.rank, a.world, team, rank));
        }
        if registry::unknown("ncclTeamRankToWorld", comm).is_some() {
            return Rank(-1);
        }
        Rank(
            call_real!(ncclTeamRankToWorld(comm, team, rank) as fn(NcclComm, Team, c_int) -> c_int)
                .unwrap_or(-1),
        )
    })
    .0
}

#[no_mangle]
pub unsafe extern "C" fn ncclTeamRankToLsa(comm: NcclComm, team: Team, rank: c_int) -> c_int {
    guard("ncclTeamRankToLsa", || {
        if let Some(a) = registry::lookup(comm) {
            // The LSA team is this rank alone: only this rank has an index
            // in it (0).
            return Rank(match team_rank_to_world(a.rank, a.world, team, rank) {
                w if w >= 0 && w as usize == a.rank => 0,
                _ => -1,
            });
        }
        if registry::unknown("ncclTeamRankToLsa", comm).is_some() {
            return Rank(-1);
        }
        Rank(
            call_real!(ncclTeamRankToLsa(comm, team, rank) as fn(NcclComm, Team, c_int) -> c_int)
                .unwrap_or(-1),
        )
    })
    .0
}

/// NCCL's, as the two requirement calls beside it are (forward/passthrough.rs);
/// -1 without the real NCCL.
#[no_mangle]
pub unsafe extern "C" fn ncclLLA2ACalcSlots(max_elts: c_int, max_elt_size: c_int) -> c_int {
    guard("ncclLLA2ACalcSlots", || {
        Rank(
            call_real!(ncclLLA2ACalcSlots(max_elts, max_elt_size) as fn(c_int, c_int) -> c_int)
                .unwrap_or(-1),
        )
    })
    .0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_standalone_rank_s_teams_are_the_world_itself_alone_and_the_world_as_rail() {
        for world in 1..=8 {
            for rank in 0..world {
                let w = standalone_team(Which::World, rank, world);
                assert_eq!(
                    (w.n_ranks, w.rank, w.stride),
                    (world as c_int, rank as c_int, 1)
                );
                assert_eq!(standalone_team(Which::Rail, rank, world), w);
                let l = standalone_team(Which::Lsa, rank, world);
                assert_eq!((l.n_ranks, l.rank, l.stride), (1, 0, 1));
                // Every world-team rank maps to itself; the LSA team's only
                // rank is this one.
                for p in 0..world as c_int {
                    assert_eq!(team_rank_to_world(rank, world, w, p), p);
                }
                assert_eq!(team_rank_to_world(rank, world, l, 0), rank as c_int);
            }
        }
    }

    #[test]
    fn ranks_outside_the_team_or_the_world_map_to_minus_one() {
        let w = standalone_team(Which::World, 1, 4);
        assert_eq!(team_rank_to_world(1, 4, w, -1), -1);
        assert_eq!(team_rank_to_world(1, 4, w, 4), -1);
        let l = standalone_team(Which::Lsa, 1, 4);
        assert_eq!(team_rank_to_world(1, 4, l, 1), -1);
        // A made-up team that strides past the world.
        let odd = Team {
            n_ranks: 4,
            rank: 0,
            stride: 3,
        };
        assert_eq!(team_rank_to_world(1, 4, odd, 1), -1);
        assert_eq!(team_rank_to_world(0, 4, odd, 1), 3);
    }

    #[test]
    fn team_is_ncclteam_t_three_ints() {
        assert_eq!(
            std::mem::size_of::<Team>(),
            3 * std::mem::size_of::<c_int>()
        );
        assert_eq!(std::mem::align_of::<Team>(), std::mem::align_of::<c_int>());
    }
}
