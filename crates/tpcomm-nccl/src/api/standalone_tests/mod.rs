//! registry.rs's tests (and create.rs's and standalone/collectives.rs's): handles without a
//! GPU side through the exports; gpu.rs holds the ignored GPU test of ranks
//! sharing one GPU.

use crate::standalone;
use crate::standalone::collectives::travels_as;
use crate::standalone::comm::StandaloneComm;
use crate::standalone::create::{create, split_place, Blocking, NO_COLOR};
use crate::standalone::registry::*;
use crate::standalone::{Secret, INVALID_USAGE};
use crate::types::*;
use std::ffi::{c_int, c_void};
use tpcomm::DType;

/// A handle as ncclCommInitRank would give, without a GPU side.
pub(crate) fn hollow(rank: usize, world: usize) -> NcclComm {
    hollow_with(
        rank,
        world,
        standalone::parse(&standalone::new_id().unwrap()).unwrap(),
    )
}

pub(crate) fn hollow_with(rank: usize, world: usize, secret: Secret) -> NcclComm {
    insert(StandaloneComm {
        rank,
        world,
        device: 0,
        secret,
        splits: Default::default(),
        p2p_groups: Default::default(),
        pairs: Default::default(),
        premul: Default::default(),
        live: None,
        solo: None,
    })
}

/// Three ranks split through the exports: the ranks meet where the
/// parent's met; a rank without a colour gets NULL, and a colour of one
/// or two ranks goes on to creation with the new rank and size (which
/// needs a GPU: without one it fails at once, naming the driver).
#[test]
fn a_split_meets_through_the_parent_and_places_every_rank() {
    // Each run is a parent communicator of its own (its own id).
    let run = |colors: [c_int; 3]| -> Vec<(NcclResult, bool, String)> {
        let secret = standalone::parse(&standalone::new_id().unwrap()).unwrap();
        // The split meets in the parent's directory; gone when the run ends.
        let _meeting = standalone::TestDir(standalone::meeting_path(
            &standalone::runtime_base(),
            &secret,
        ));
        let hs: Vec<usize> = (0..3).map(|r| hollow_with(r, 3, secret) as usize).collect();
        let out = std::thread::scope(|s| {
            let ts: Vec<_> = (0..3)
                .map(|r| {
                    let h = hs[r];
                    s.spawn(move || {
                        let h = h as NcclComm;
                        let mut c: NcclComm = std::ptr::null_mut();
                        // SAFETY: a handle of the table and a live out-pointer.
                        let r = unsafe {
                            crate::api::init::ncclCommSplit(
                                h,
                                colors[r],
                                0,
                                &mut c,
                                std::ptr::null_mut(),
                            )
                        };
                        (r, c.is_null(), standalone::last_error())
                    })
                })
                .collect();
            ts.into_iter().map(|t| t.join().unwrap()).collect()
        });
        for h in hs {
            release("ncclCommDestroy", h as NcclComm, true);
        }
        out
    };
    let out = run([0, NO_COLOR, 1]);
    assert_eq!(out[1].0, SUCCESS);
    assert!(out[1].1);
    if tpcomm::cuda::ensure_driver().is_err() {
        // Colours of one rank each: rank 0 of 1 on either side.
        for r in [0, 2] {
            assert_eq!(out[r].0, CUDA_ERROR, "{:?}", out[r]);
            assert!(out[r].2.contains("ncclCommSplit rank 0/1"), "{:?}", out[r]);
        }
        let out = run([0, NO_COLOR, 0]);
        assert_eq!(out[1].0, SUCCESS);
        for r in [0, 2] {
            assert_eq!(out[r].0, CUDA_ERROR, "{:?}", out[r]);
            assert!(out[r].2.contains("ncclCommSplit rank") && out[r].2.contains("needs a GPU"));
        }
    }
}

#[test]
fn handles_are_found_only_while_alive_and_foreign_ones_never() {
    let h = hollow(1, 4);
    assert_eq!(lookup(h).map(|a| (a.rank, a.world)), Some((1, 4)));
    assert!(lookup(0x1234 as NcclComm).is_none());
    assert!(lookup(std::ptr::null_mut()).is_none());
    assert_eq!(release("ncclCommDestroy", h, true), SUCCESS);
    assert!(lookup(h).is_none());
}

/// A creation inside a group hands out its handle at the call (programs
/// read `*comm` there, as NCCL writes it); the queries answer on it at
/// once, and at the group's end the made communicator is found under that
/// same handle, its own handle forgotten.
#[test]
fn a_reserved_handle_answers_at_once_and_is_the_made_communicator_after() {
    let secret = standalone::parse(&standalone::new_id().unwrap()).unwrap();
    let pending = reserve(StandaloneComm {
        rank: 2,
        world: 3,
        device: 0,
        secret,
        splits: Default::default(),
        p2p_groups: Default::default(),
        pairs: Default::default(),
        premul: Default::default(),
        live: None,
        solo: None,
    });
    let mut n: c_int = -1;
    // SAFETY: a handle of the table and a live out-pointer.
    let r = unsafe { crate::api::init::ncclCommCount(pending, &mut n) };
    assert_eq!(r, SUCCESS);
    assert_eq!(n, 3);
    // The made communicator (here without a GPU side, told apart by device).
    let made = insert(StandaloneComm {
        rank: 2,
        world: 3,
        device: 7,
        secret,
        splits: Default::default(),
        p2p_groups: Default::default(),
        pairs: Default::default(),
        premul: Default::default(),
        live: None,
        solo: None,
    });
    assert!(settle(pending, made));
    assert_eq!(lookup(pending).map(|a| a.device), Some(7));
    assert!(
        lookup(made).is_none(),
        "the made handle itself is forgotten"
    );
    assert!(!settle(pending, made), "settled once");
    release("ncclCommDestroy", pending, true);
    assert!(lookup(pending).is_none());
    // A failed creation forgets its reserved handle.
    let p2 = hollow(0, 2);
    unreserve(p2);
    assert!(lookup(p2).is_none());
}

#[test]
fn copying_calls_pick_their_kernel_type_from_the_type_alone() {
    // f32 as f32, f16 and bf16 as f16: no address can make two ranks differ.
    assert_eq!(travels_as(7), Some(DType::F32));
    assert_eq!(travels_as(6), Some(DType::F16));
    assert_eq!(travels_as(9), Some(DType::F16));
    // Integers, f64 and fp8 go byte-exact; unknown types nowhere.
    for t in [0, 1, 2, 3, 4, 5, 8, 10, 11, 99] {
        assert_eq!(travels_as(t), None, "type {t}");
    }
}

#[test]
fn creation_refuses_bad_arguments_by_name_before_any_gpu_work() {
    let secret = standalone::parse(&standalone::new_id().unwrap()).unwrap();
    let r = create(
        "ncclCommInitRank",
        std::ptr::null_mut(),
        2,
        secret,
        0,
        Blocking::Yes,
    );
    assert_eq!(r, INVALID_ARGUMENT);
    let mut c: NcclComm = std::ptr::null_mut();
    assert_eq!(
        create("ncclCommInitRank", &mut c, 9, secret, 0, Blocking::Yes),
        INVALID_USAGE
    );
    assert!(standalone::last_error().contains("1 to 8 ranks"));
    assert_eq!(
        create("ncclCommInitRank", &mut c, 2, secret, 2, Blocking::Yes),
        INVALID_ARGUMENT
    );
    assert!(standalone::last_error().contains("rank 2 is not one of 0..2"));
    assert!(c.is_null());
}

#[test]
fn init_all_refuses_bad_arguments_by_name_before_any_gpu_work() {
    use crate::standalone::create::create_all;
    assert_eq!(
        create_all(std::ptr::null_mut(), 2, std::ptr::null()),
        INVALID_ARGUMENT
    );
    assert!(standalone::last_error().contains("communicator array is NULL"));
    let mut cs: [NcclComm; 9] = [std::ptr::null_mut(); 9];
    assert_eq!(
        create_all(cs.as_mut_ptr(), 0, std::ptr::null()),
        INVALID_ARGUMENT
    );
    assert!(standalone::last_error().contains("not ndev = 0"));
    assert_eq!(
        create_all(cs.as_mut_ptr(), 9, std::ptr::null()),
        INVALID_ARGUMENT
    );
    let devs = [0, -1];
    assert_eq!(
        create_all(cs.as_mut_ptr(), 2, devs.as_ptr()),
        INVALID_ARGUMENT
    );
    assert!(standalone::last_error().contains("device -1"));
    assert!(cs.iter().all(|c| c.is_null()));
}

/// Registration on a standalone handle succeeds with a non-NULL handle
/// (vLLM's and SGLang's wrappers register buffers and windows), and so does
/// undoing it; a NULL handle pointer is refused by name.
#[test]
fn buffers_and_windows_register_on_a_standalone_handle() {
    use super::memory::*;
    let c = hollow(0, 2);
    let mut buf = [0u8; 64];
    let b = buf.as_mut_ptr().cast::<std::ffi::c_void>();
    let mut h: *mut std::ffi::c_void = std::ptr::null_mut();
    // SAFETY: a standalone handle of this test; the buffer is never read.
    unsafe {
        assert_eq!(ncclCommRegister(c, b, 64, &mut h), SUCCESS);
        assert!(!h.is_null());
        assert_eq!(ncclCommDeregister(c, h), SUCCESS);
        let mut w: Opaque = std::ptr::null_mut();
        assert_eq!(ncclCommWindowRegister(c, b, 64, &mut w, 0), SUCCESS);
        assert!(!w.is_null());
        assert_eq!(ncclCommWindowDeregister(c, w), SUCCESS);
        assert_eq!(
            ncclCommRegister(c, b, 64, std::ptr::null_mut()),
            INVALID_ARGUMENT
        );
    }
    assert!(standalone::last_error().contains("ncclCommRegister: the handle pointer is NULL"));
    // SAFETY: the handle of this test, released once.
    unsafe { super::init::ncclCommDestroy(c) };
}

/// The exports on a standalone handle: the unserved ones refuse with
/// ncclInvalidUsage and a last error naming the call (never reaching a
/// real NCCL: none is loaded in unit tests, so forwarding would give
/// ncclSystemError instead), the queries answer from the handle.
#[test]
fn exports_refuse_or_answer_a_standalone_handle_and_never_forward_it() {
    use std::ffi::CStr;
    let h = hollow(1, 3);
    let p = |x: usize| x as *mut c_void;
    let text = || {
        // SAFETY: ncclGetLastError returns a NUL-terminated string.
        unsafe { CStr::from_ptr(crate::api::errors::ncclGetLastError(h)) }
            .to_string_lossy()
            .into_owned()
    };
    // SAFETY: the handle is only looked up; no buffer is touched by a
    // refused call.
    unsafe {
        // A send is served (at its group's end); a peer out of range is
        // refused at the call.
        assert_eq!(crate::api::p2p::ncclSend(p(0x100), 4, 7, 3, h, p(0)), 4);
        assert!(
            text().contains("ncclSend rank 1/3: peer 3 is not a rank"),
            "{}",
            text()
        );
        assert_eq!(
            crate::api::rooted::ncclAlltoAll(p(0x100), p(0x200), 4, 7, h, p(0)),
            5
        );
        assert!(text().contains("ncclAlltoAll"), "{}", text());
        let mut c: NcclComm = std::ptr::null_mut();
        let r = crate::api::init::ncclCommShrink(
            h,
            std::ptr::null_mut(),
            0,
            &mut c,
            std::ptr::null_mut(),
            0,
        );
        // Served: with no GPU here the new communicator's creation fails
        // at the driver, naming the call and the new rank and size.
        if tpcomm::cuda::ensure_driver().is_err() {
            assert_eq!(r, CUDA_ERROR);
            assert!(
                text().contains("ncclCommShrink rank 1/3") && c.is_null(),
                "{}",
                text()
            );
        }
        // Its own rank excluded: a bad argument.
        let mut me: [c_int; 1] = [1];
        let r = crate::api::init::ncclCommShrink(
            h,
            me.as_mut_ptr(),
            1,
            &mut c,
            std::ptr::null_mut(),
            0,
        );
        assert_eq!(r, INVALID_ARGUMENT);
        assert!(text().contains("own exclude list"), "{}", text());
        // int8 max and fp8 (types 10, 11) are served by the gathered
        // path, which this handle (no GPU side) cannot run; type 12 by
        // none; an op this communicator did not make is an invalid
        // argument (4).
        let r = crate::api::all_reduce::ncclAllReduce(p(0x100), p(0x200), 1, 0, 2, h, p(0));
        assert_eq!(r, 5);
        assert!(
            text().contains("ncclAllReduce") && text().contains("no GPU side"),
            "{}",
            text()
        );
        for t in [10, 11] {
            let r = crate::api::all_reduce::ncclAllReduce(p(0x100), p(0x200), 1, t, 4, h, p(0));
            assert_eq!(r, 5);
            assert!(text().contains("no GPU side"), "{}", text());
        }
        let r = crate::api::all_reduce::ncclAllReduce(p(0x100), p(0x200), 1, 12, 0, h, p(0));
        assert_eq!(r, INVALID_ARGUMENT);
        assert!(text().contains("ncclDataType 12"), "{}", text());
        for op in [5, 6, -1, 1000] {
            let r = crate::api::all_reduce::ncclAllReduce(p(0x100), p(0x200), 1, 7, op, h, p(0));
            assert_eq!(r, INVALID_ARGUMENT, "op {op}");
            assert!(
                text().contains("ncclAllReduce") && text().contains(&format!("ncclRedOp {op} ")),
                "{}",
                text()
            );
        }
        // f32 prod goes to the gathered path (no GPU side here); an
        // unknown op is an invalid argument.
        let r = crate::api::collectives::ncclReduceScatter(p(0x100), p(0x200), 4, 7, 1, h, p(0));
        assert_eq!(r, 5);
        assert!(
            text().contains("ncclReduceScatter") && text().contains("no GPU side"),
            "{}",
            text()
        );
        let r = crate::api::collectives::ncclReduceScatter(p(0x100), p(0x200), 4, 7, 5, h, p(0));
        assert_eq!(r, INVALID_ARGUMENT);
        assert!(
            text().contains("ncclReduceScatter") && text().contains("ncclRedOp 5 "),
            "{}",
            text()
        );
        // A pre-multiplied sum made here: known to the calls (which then
        // need the GPU side), for its own type only; destroyed, unknown.
        let mut op: NcclRedOp = -1;
        let mut two = 2.0f32;
        let s = &mut two as *mut f32 as *mut c_void;
        let r = crate::api::redop::ncclRedOpCreatePreMulSum(&mut op, s, 7, 1, h);
        assert_eq!(r, SUCCESS, "{}", text());
        assert!(op >= 5, "{op}");
        let mut op2: NcclRedOp = -1;
        let r = crate::api::redop::ncclRedOpCreatePreMulSum(&mut op2, p(0x1000), 10, 0, h);
        assert_eq!(r, SUCCESS, "{}", text());
        assert_ne!(op, op2);
        let r = crate::api::all_reduce::ncclAllReduce(p(0x100), p(0x200), 1, 7, op, h, p(0));
        assert_eq!(r, 5);
        assert!(text().contains("no GPU side"), "{}", text());
        let r = crate::api::all_reduce::ncclAllReduce(p(0x100), p(0x200), 1, 8, op, h, p(0));
        assert_eq!(r, INVALID_ARGUMENT);
        assert!(text().contains("for ncclDataType 7, not 8"), "{}", text());
        let r = crate::api::redop::ncclRedOpCreatePreMulSum(std::ptr::null_mut(), s, 7, 1, h);
        assert_eq!(r, INVALID_ARGUMENT);
        let r = crate::api::redop::ncclRedOpCreatePreMulSum(&mut op2, s, 7, 5, h);
        assert_eq!(r, INVALID_ARGUMENT);
        assert!(text().contains("ncclScalarResidence 5"), "{}", text());
        assert_eq!(crate::api::redop::ncclRedOpDestroy(op, h), SUCCESS);
        assert_eq!(crate::api::redop::ncclRedOpDestroy(op, h), INVALID_ARGUMENT);
        assert!(
            text().contains("ncclRedOpDestroy") && text().contains(&format!("ncclRedOp {op} ")),
            "{}",
            text()
        );
        assert_eq!(crate::api::redop::ncclRedOpDestroy(0, h), INVALID_ARGUMENT);
        let r = crate::api::all_reduce::ncclAllReduce(p(0x100), p(0x200), 1, 7, op, h, p(0));
        assert_eq!(r, INVALID_ARGUMENT);
        assert!(text().contains(&format!("ncclRedOp {op} ")), "{}", text());
        let mut v: c_int = -1;
        assert_eq!(crate::api::init::ncclCommCount(h, &mut v), SUCCESS);
        assert_eq!(v, 3);
        assert_eq!(crate::api::init::ncclCommUserRank(h, &mut v), SUCCESS);
        assert_eq!(v, 1);
        assert_eq!(crate::api::init::ncclCommCuDevice(h, &mut v), SUCCESS);
        assert_eq!(v, 0);
        let mut e: NcclResult = -1;
        assert_eq!(
            crate::api::errors::ncclCommGetAsyncError(h, &mut e),
            SUCCESS
        );
        assert_eq!(e, SUCCESS);
        assert_eq!(crate::api::init::ncclCommFinalize(h), SUCCESS);
        assert_eq!(crate::api::init::ncclCommDestroy(h), SUCCESS);
    }
    assert!(lookup(h).is_none());
}

/// The device API's host calls and ncclCommRevoke on a standalone handle:
/// answered or refused here, never handed to the real NCCL (which would
/// read through a handle that is not its own).
#[test]
fn device_api_calls_and_revoke_answer_a_standalone_handle() {
    use crate::api::device::{self, Team};
    use std::ffi::CStr;
    let h = hollow(2, 4);
    let text = || {
        // SAFETY: ncclGetLastError returns a NUL-terminated string.
        unsafe { CStr::from_ptr(crate::api::errors::ncclGetLastError(h)) }
            .to_string_lossy()
            .into_owned()
    };
    let team = |n, r, s| Team {
        n_ranks: n,
        rank: r,
        stride: s,
    };
    // SAFETY: the handle is only looked up; the refused calls write nothing.
    unsafe {
        assert_eq!(device::ncclTeamWorld(h), team(4, 2, 1));
        assert_eq!(device::ncclTeamLsa(h), team(1, 0, 1));
        assert_eq!(device::ncclTeamRail(h), team(4, 2, 1));
        let world = device::ncclTeamWorld(h);
        assert_eq!(device::ncclTeamRankToWorld(h, world, 3), 3);
        assert_eq!(device::ncclTeamRankToWorld(h, world, 4), -1);
        assert_eq!(device::ncclTeamRankToLsa(h, world, 2), 0);
        assert_eq!(device::ncclTeamRankToLsa(h, world, 1), -1);
        let mut out = [0u64; 64];
        let o = out.as_mut_ptr() as Opaque;
        assert_eq!(device::ncclDevCommCreate(h, o, o), INVALID_USAGE);
        assert!(
            text().contains("ncclDevCommCreate rank 2/4: NCCL's device API is not served"),
            "{}",
            text()
        );
        assert_eq!(device::ncclDevCommDestroy(h, o), INVALID_USAGE);
        assert!(text().contains("ncclDevCommDestroy"), "{}", text());
        assert_eq!(
            device::ncclGinBarrierCreateRequirement(h, world, 1, o, o),
            INVALID_USAGE
        );
        assert_eq!(device::ncclCommRevoke(h, 1), INVALID_ARGUMENT);
        assert!(text().contains("revokeFlags 1"), "{}", text());
        assert_eq!(device::ncclCommRevoke(h, 0), SUCCESS);
        let mut e: NcclResult = -1;
        assert_eq!(
            crate::api::errors::ncclCommGetAsyncError(h, &mut e),
            SUCCESS
        );
        assert_eq!(e, SUCCESS, "quiescent at once");
        assert_eq!(crate::api::init::ncclCommDestroy(h), SUCCESS);
    }
}

#[test]
fn a_split_orders_each_colour_by_key_then_parent_rank() {
    // Parent ranks 0..5: colours 0,1,0,-1,1 and keys 5,0,5,0,-2.
    let all = [(0, 5), (1, 0), (0, 5), (NO_COLOR, 0), (1, -2)];
    assert_eq!(split_place(&all, 0), Some((0, 2)));
    assert_eq!(split_place(&all, 2), Some((1, 2)));
    assert_eq!(split_place(&all, 4), Some((0, 2)));
    assert_eq!(split_place(&all, 1), Some((1, 2)));
    assert_eq!(split_place(&all, 3), None);
}

mod gpu;
mod p2p;
mod p2p_gpu;
mod rooted;
mod rooted_gpu;

/// ncclCommInitRankScalable given standalone ids makes a standalone
/// communicator under the first (here, without a GPU, it fails at the
/// driver as ncclCommInitRank does, naming the call), and never reaches
/// NCCL.
#[test]
fn scalable_creation_takes_standalone_ids() {
    if tpcomm::cuda::ensure_driver().is_ok() {
        return;
    }
    let mut ids = [
        UniqueId {
            internal: standalone::new_id().unwrap(),
        },
        UniqueId {
            internal: standalone::new_id().unwrap(),
        },
    ];
    let mut c: NcclComm = std::ptr::null_mut();
    // SAFETY: live out-pointer and two ids.
    let r = unsafe {
        crate::api::init::ncclCommInitRankScalable(
            &mut c,
            2,
            0,
            2,
            ids.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    };
    assert_eq!(r, CUDA_ERROR);
    assert!(c.is_null());
    let text = standalone::last_error();
    assert!(
        text.contains("ncclCommInitRankScalable rank 0/2") && text.contains("needs a GPU"),
        "{text}"
    );
}

/// ncclCommShrink's placement: the ranks that stay keep their order.
#[test]
fn a_shrink_renumbers_the_ranks_that_stay_in_order() {
    use crate::standalone::create::shrink_place;
    assert_eq!(shrink_place(4, 0, &[]), Ok((0, 4)));
    assert_eq!(shrink_place(4, 3, &[1]), Ok((2, 3)));
    assert_eq!(shrink_place(4, 2, &[0, 3]), Ok((1, 2)));
    assert_eq!(shrink_place(8, 7, &[6, 0, 2]), Ok((4, 5)));
    for (exclude, why) in [
        (&[4][..], "excluded rank 4"),
        (&[-1][..], "excluded rank -1"),
        (&[2, 2][..], "excluded twice"),
        (&[1][..], "own exclude list"),
    ] {
        let e = shrink_place(4, 1, exclude).unwrap_err();
        assert!(e.contains(why), "{exclude:?}: {e}");
    }
}
