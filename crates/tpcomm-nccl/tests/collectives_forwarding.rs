//! ncclAllGather, ncclReduceScatter, ncclBroadcast and ncclBcast through
//! libtpcomm_nccl.so: exported, and forwarded to a fake NCCL (the one
//! forwarding.rs builds, compiled here with the system C compiler) with every
//! argument unchanged whenever tpcomm cannot take the call: disabled, not set
//! up (no GPU here), a data type or op its kernels lack, inside a group.

mod common;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::process::Command;

#[repr(C)]
struct UniqueId([u8; 128]);

type Gather = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    c_int,
    *mut c_void,
    *mut c_void,
) -> c_int;
type Scatter = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    c_int,
    c_int,
    *mut c_void,
    *mut c_void,
) -> c_int;
type Bcast =
    unsafe extern "C" fn(*mut c_void, usize, c_int, c_int, *mut c_void, *mut c_void) -> c_int;

#[test]
fn child_collectives() {
    if std::env::var("TPCOMM_COLL_CHILD").is_err() {
        return;
    }
    // SAFETY: both libraries are called with nccl.h's prototypes; the fake is
    // the object the drop-in opened (same path), so its journal is shared.
    unsafe {
        let lib = libloading::Library::new(common::target_dir().join("libtpcomm_nccl.so")).unwrap();
        let fake = libloading::Library::new(std::env::var("FAKE_PATH").unwrap()).unwrap();
        let init: libloading::Symbol<
            unsafe extern "C" fn(*mut *mut c_void, c_int, UniqueId, c_int) -> c_int,
        > = lib.get(b"ncclCommInitRank").unwrap();
        let ag: libloading::Symbol<Gather> = lib.get(b"ncclAllGather").unwrap();
        let rs: libloading::Symbol<Scatter> = lib.get(b"ncclReduceScatter").unwrap();
        let bc: libloading::Symbol<Scatter> = lib.get(b"ncclBroadcast").unwrap();
        let bcast: libloading::Symbol<Bcast> = lib.get(b"ncclBcast").unwrap();
        let gs: libloading::Symbol<unsafe extern "C" fn() -> c_int> =
            lib.get(b"ncclGroupStart").unwrap();
        let ge: libloading::Symbol<unsafe extern "C" fn() -> c_int> =
            lib.get(b"ncclGroupEnd").unwrap();
        let journal: libloading::Symbol<unsafe extern "C" fn() -> *const c_char> =
            fake.get(b"fake_journal").unwrap();
        let mut comm: *mut c_void = std::ptr::null_mut();
        println!("init={}", init(&mut comm, 2, UniqueId([0; 128]), 1));
        let p = |x: usize| x as *mut c_void;
        // What tpcomm would take if set up: bf16, sum, small.
        println!("ag={}", ag(p(0x1000), p(0x2000), 4096, 9, comm, p(0x30)));
        println!("rs={}", rs(p(0x1100), p(0x2100), 333, 7, 0, comm, p(0x31)));
        println!("bc={}", bc(p(0x1200), p(0x2200), 17, 6, 1, comm, p(0x32)));
        println!("bcast={}", bcast(p(0x1300), 5, 9, 0, comm, p(0x33)));
        // What tpcomm never takes: int32, max, a group.
        println!("ag_int={}", ag(p(0x1400), p(0x2400), 8, 2, comm, p(0x34)));
        println!(
            "rs_max={}",
            rs(p(0x1500), p(0x2500), 8, 9, 2, comm, p(0x35))
        );
        gs();
        println!(
            "bc_group={}",
            bc(p(0x1600), p(0x1600), 8, 7, 0, comm, p(0x36))
        );
        ge();
        println!("journal={}", CStr::from_ptr(journal()).to_string_lossy());
    }
}

fn run_child(envs: &[(&str, &str)]) -> String {
    let fake = common::fake_nccl("coll");
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "child_collectives",
        "--nocapture",
        "--test-threads=1",
    ])
    .env("TPCOMM_COLL_CHILD", "1")
    .env("TPCOMM_REAL_NCCL", &fake)
    .env("FAKE_PATH", &fake)
    .env("FAKE_WORLD", "2")
    .env_remove("LD_PRELOAD")
    .env_remove("TPCOMM_DISABLE");
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let o = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "child failed:\n{o}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    o
}

fn expect_forwarded(out: &str) {
    for want in [
        "init=0",
        "ag=0",
        "rs=0",
        "bc=0",
        "bcast=0",
        "ag_int=0",
        "rs_max=0",
        "bc_group=0",
        "allgather 0x1000 0x2000 4096 9 0x1234 0x30;",
        "reducescatter 0x1100 0x2100 333 7 0 0x1234 0x31;",
        "broadcast 0x1200 0x2200 17 6 1 0x1234 0x32;",
        "bcast 0x1300 5 9 0 0x1234 0x33;",
        "allgather 0x1400 0x2400 8 2 0x1234 0x34;",
        "reducescatter 0x1500 0x2500 8 9 2 0x1234 0x35;",
        "groupstart;broadcast 0x1600 0x1600 8 7 0 0x1234 0x36;groupend;",
    ] {
        assert!(out.contains(want), "missing {want:?} in:\n{out}");
    }
}

#[test]
fn disabled_library_forwards_every_collective_unchanged() {
    expect_forwarded(&run_child(&[("TPCOMM_DISABLE", "1")]));
}

#[test]
fn without_tpcomm_set_up_every_collective_goes_to_nccl_unchanged() {
    // No GPU on CI: set-up fails, and every call goes to NCCL.
    expect_forwarded(&run_child(&[
        ("CUDA_VISIBLE_DEVICES", ""),
        ("TPCOMM_LOG", "info"),
    ]));
}
