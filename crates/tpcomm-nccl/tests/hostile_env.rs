//! Hostile values of tpcomm's environment variables, given to a process that
//! loads the built libtpcomm_nccl.so in front of a fake NCCL (compiled here
//! with the system C compiler, as in forwarding.rs): the process must never
//! abort or see a panic, every call must reach the real (fake) NCCL with its
//! arguments unchanged, and the log must name the bad variable and what it
//! takes. `TPCOMM_TIMEOUT_S=1e20` used to abort the process.

mod common;
use std::ffi::{c_char, c_int, c_void, CStr, OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::process::Command;

const CHILD: &str = "TPCOMM_HOSTILE_CHILD";

/// Runs `child_calls_through_the_drop_in` with `envs` added; returns
/// (exit status success, stdout, stderr).
fn run_child(envs: &[(&str, &OsStr)]) -> (bool, String, String) {
    let fake = common::fake_nccl("hostile");
    let mut cmd = Command::new(std::env::current_exe().expect("test executable"));
    cmd.args([
        "--exact",
        "child_calls_through_the_drop_in",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CHILD, &fake)
    .env("TPCOMM_REAL_NCCL", &fake)
    .env("FAKE_WORLD", "2")
    .env_remove("LD_PRELOAD");
    for v in [
        "TPCOMM_DISABLE",
        "TPCOMM_LOG",
        "TPCOMM_MAX_BYTES",
        "TPCOMM_TIMEOUT_S",
    ] {
        cmd.env_remove(v);
    }
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run the child");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[repr(C)]
struct UniqueId([u8; 128]);

/// The child: creates a communicator, all-reduces, destroys it, through the
/// drop-in. Does nothing in a normal test run.
#[test]
fn child_calls_through_the_drop_in() {
    let Some(fake_path) = std::env::var_os(CHILD) else {
        return;
    };
    type Init = unsafe extern "C" fn(*mut *mut c_void, c_int, UniqueId, c_int) -> c_int;
    type AllReduce = unsafe extern "C" fn(
        *const c_void,
        *mut c_void,
        usize,
        c_int,
        c_int,
        *mut c_void,
        *mut c_void,
    ) -> c_int;
    type Destroy = unsafe extern "C" fn(*mut c_void) -> c_int;
    type Journal = unsafe extern "C" fn() -> *const c_char;
    // SAFETY: both libraries are called with NCCL's prototypes; the fake is
    // the object the drop-in opened (same path), so its journal is shared.
    unsafe {
        let lib = libloading::Library::new(common::target_dir().join("libtpcomm_nccl.so"))
            .expect("load libtpcomm_nccl.so");
        let fake = libloading::Library::new(fake_path).expect("load the fake NCCL");
        let init: libloading::Symbol<Init> = lib.get(b"ncclCommInitRank").unwrap();
        let ar: libloading::Symbol<AllReduce> = lib.get(b"ncclAllReduce").unwrap();
        let destroy: libloading::Symbol<Destroy> = lib.get(b"ncclCommDestroy").unwrap();
        let journal: libloading::Symbol<Journal> = fake.get(b"fake_journal").unwrap();
        let mut comm: *mut c_void = std::ptr::null_mut();
        println!("init={}", init(&mut comm, 2, UniqueId([0; 128]), 1));
        let p = |x: usize| x as *mut c_void;
        println!("ar={}", ar(p(0x1000), p(0x2000), 4096, 9, 0, comm, p(0x30)));
        println!("destroy={}", destroy(comm));
        println!("journal={}", CStr::from_ptr(journal()).to_string_lossy());
    }
}

/// Runs the child with `name=value` and checks it survived, forwarded every
/// call, and said which variable is wrong.
fn survives(name: &str, value: &OsStr, also: &[(&str, &OsStr)]) -> String {
    let mut envs = vec![(name, value)];
    envs.extend_from_slice(also);
    let (ok, out, err) = run_child(&envs);
    let shown = value.to_string_lossy();
    assert!(ok, "{name}={shown:?}: the process failed\n{out}\n{err}");
    assert!(
        !err.contains("panicked"),
        "{name}={shown:?}: a panic\n{err}"
    );
    for want in [
        "init=0",
        "ar=0",
        "destroy=0",
        "allreduce 0x1000 0x2000 4096 9 0 0x1234 0x30;",
    ] {
        assert!(
            out.contains(want),
            "{name}={shown:?}: missing {want:?}\n{out}\n{err}"
        );
    }
    assert!(
        err.contains(&format!("environment variable {name}"))
            && err.contains("tpcomm stays out of the way"),
        "{name}={shown:?}: the log does not name the variable\n{err}"
    );
    err
}

#[test]
fn timeouts_too_large_for_a_duration_are_reported_not_fatal() {
    for v in ["1e20", "18446744073709551616", "1e400", "inf", "-1", "0"] {
        let err = survives("TPCOMM_TIMEOUT_S", OsStr::new(v), &[]);
        assert!(err.contains("604800"), "{v}: {err}");
    }
}

#[test]
fn disable_with_a_word_that_is_not_a_boolean_is_reported() {
    for v in ["maybe", "2", "disabled"] {
        let err = survives("TPCOMM_DISABLE", OsStr::new(v), &[]);
        assert!(err.contains("yes") && err.contains("off"), "{v}: {err}");
    }
}

#[test]
fn absurd_sizes_and_levels_are_reported() {
    survives(
        "TPCOMM_MAX_BYTES",
        OsStr::new("99999999999999999999 GiB"),
        &[],
    );
    survives("TPCOMM_MAX_BYTES", OsStr::new("1 TiB"), &[]);
    survives("TPCOMM_LOG", OsStr::new("loud"), &[]);
}

#[test]
fn values_that_are_not_utf8_are_reported() {
    let v = OsString::from(OsStr::from_bytes(&[b'1', 0xff, 0xfe]));
    let err = survives("TPCOMM_TIMEOUT_S", &v, &[]);
    assert!(err.contains("not valid UTF-8"), "{err}");
}

#[test]
fn several_bad_values_are_each_named() {
    let err = survives(
        "TPCOMM_TIMEOUT_S",
        OsStr::new("1e20"),
        &[("TPCOMM_DISABLE", OsStr::new("perhaps"))],
    );
    assert!(err.contains("TPCOMM_DISABLE=\"perhaps\""), "{err}");
}
