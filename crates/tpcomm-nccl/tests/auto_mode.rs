//! Auto standalone mode (TPCOMM_STANDALONE unset) through the built
//! libtpcomm_nccl.so, in front of the fake NCCL (compiled here with the
//! system C compiler, as in forwarding.rs): the id NCCL makes is marked in
//! its zero tail, and a creation that goes to NCCL hands NCCL the id as NCCL
//! made it. No GPU here, so the census always ends in NCCL (a rank that
//! cannot name its GPU decides NCCL for every rank at once); the census
//! itself, with ranks as threads and fake GPUs, is tested in src/standalone/auto_mode/.

mod common;
use std::ffi::{c_char, c_int, c_void};
use std::path::{Path, PathBuf};
use std::process::Command;

const CHILD: &str = "TPCOMM_AUTO_CHILD";

#[repr(C)]
struct UniqueId([u8; 128]);

#[test]
fn child_auto() {
    let Ok(fake_path) = std::env::var(CHILD) else {
        return;
    };
    type Ptr = *mut c_void;
    // SAFETY: the libraries are called with NCCL's prototypes; the fake is
    // the object the drop-in opened (same path), so its record is shared.
    unsafe {
        let lib = libloading::Library::new(common::target_dir().join("libtpcomm_nccl.so")).unwrap();
        let fake = libloading::Library::new(fake_path).unwrap();
        let uid: libloading::Symbol<unsafe extern "C" fn(*mut UniqueId) -> c_int> =
            lib.get(b"ncclGetUniqueId").unwrap();
        let init: libloading::Symbol<
            unsafe extern "C" fn(*mut Ptr, c_int, UniqueId, c_int) -> c_int,
        > = lib.get(b"ncclCommInitRank").unwrap();
        let last: libloading::Symbol<unsafe extern "C" fn() -> *const c_char> =
            fake.get(b"fake_last_init_id").unwrap();

        let mut id = UniqueId([0; 128]);
        println!("uid={}", uid(&mut id));
        println!("head42={}", id.0[..40].iter().all(|&b| b == 0x42));
        println!("tail={:?}", String::from_utf8_lossy(&id.0[64..72]));
        let mut comm: Ptr = std::ptr::null_mut();
        // AUTO_CHILD_GROUP=1: the creation inside ncclGroupStart/End, as
        // PyTorch before 2.3 creates its communicators.
        let in_group = std::env::var("AUTO_CHILD_GROUP").is_ok_and(|v| v == "1");
        let bracket = |name: &[u8]| {
            let f: libloading::Symbol<unsafe extern "C" fn() -> c_int> = lib.get(name).unwrap();
            f()
        };
        if in_group {
            println!("group_start={}", bracket(b"ncclGroupStart"));
        }
        let t = std::time::Instant::now();
        // AUTO_CHILD_NONBLOCKING=1: ncclCommInitRankConfig, which the fake
        // answers "in progress" (ready after FAKE_READY_AFTER asks).
        if std::env::var("AUTO_CHILD_NONBLOCKING").is_ok_and(|v| v == "1") {
            let init_config: libloading::Symbol<
                unsafe extern "C" fn(*mut Ptr, c_int, UniqueId, c_int, Ptr) -> c_int,
            > = lib.get(b"ncclCommInitRankConfig").unwrap();
            let mut config = [0u8; 64];
            println!(
                "init={}",
                init_config(&mut comm, 2, id, 0, config.as_mut_ptr().cast())
            );
        } else if std::env::var("AUTO_CHILD_SCALABLE").is_ok_and(|v| v == "1") {
            // AUTO_CHILD_SCALABLE=1: ncclCommInitRankScalable with the one id.
            let scalable: libloading::Symbol<
                unsafe extern "C" fn(*mut Ptr, c_int, c_int, c_int, *mut UniqueId, Ptr) -> c_int,
            > = lib.get(b"ncclCommInitRankScalable").unwrap();
            let mut ids = [id];
            println!(
                "init={}",
                scalable(&mut comm, 2, 0, 1, ids.as_mut_ptr(), std::ptr::null_mut())
            );
        } else {
            println!("init={}", init(&mut comm, 2, id, 0));
        }
        println!("init_ms={}", t.elapsed().as_millis());
        if in_group {
            println!("left_before_group_end={}", listing(&runtime_dir()).len());
            println!("group_end={}", bracket(b"ncclGroupEnd"));
        }
        let journal: libloading::Symbol<unsafe extern "C" fn() -> *const c_char> =
            fake.get(b"fake_journal").unwrap();
        println!(
            "journal={}",
            std::ffi::CStr::from_ptr(journal()).to_string_lossy()
        );
        let got = std::slice::from_raw_parts(last() as *const u8, 128);
        println!("nccl_head42={}", got[..40].iter().all(|&b| b == 0x42));
        println!("nccl_rest_zero={}", got[40..].iter().all(|&b| b == 0));
    }
}

/// The child's runtime directory (XDG_RUNTIME_DIR, set by `run_child`).
fn runtime_dir() -> PathBuf {
    PathBuf::from(std::env::var("XDG_RUNTIME_DIR").unwrap())
}

/// Runs `child_auto` with `envs` and a runtime directory of its own;
/// gives its output and what it left in that directory.
fn run_child(envs: &[(&str, &str)]) -> (String, Vec<String>) {
    let fake = common::fake_nccl("auto");
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let runtime = common::target_dir().join(format!("auto-runtime-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&runtime);
    std::fs::create_dir_all(&runtime).unwrap();
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", "child_auto", "--nocapture", "--test-threads=1"])
        .env(CHILD, &fake)
        .env("TPCOMM_REAL_NCCL", &fake)
        .env("TPCOMM_LOG", "info")
        .env("XDG_RUNTIME_DIR", &runtime)
        .env("CUDA_VISIBLE_DEVICES", "")
        .env("FAKE_WORLD", "2")
        .env_remove("TPCOMM_STANDALONE")
        .env_remove("TPCOMM_DISABLE")
        .env_remove("LD_PRELOAD");
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "child failed:\n{text}");
    let left = listing(&runtime);
    let _ = std::fs::remove_dir_all(&runtime);
    (text, left)
}

fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = walk(dir)
        .into_iter()
        .map(|p| p.strip_prefix(dir).unwrap().display().to_string())
        .collect();
    v.sort();
    v
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        }
        out.push(p);
    }
    out
}

fn init_ms(out: &str) -> u64 {
    out.lines()
        .find_map(|l| l.strip_prefix("init_ms="))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no init_ms in:\n{out}"))
}

#[test]
fn unset_the_id_is_marked_and_nccl_gets_it_as_it_made_it_without_waiting() {
    // A long census wait: a rank that cannot name its GPU must not wait it.
    let (out, left) = run_child(&[("TPCOMM_STANDALONE_WAIT_S", "60")]);
    for want in [
        "uid=0",
        "head42=true",
        "tail=\"TPCHYBR1\"",
        "init=0",
        "nccl_head42=true",
        "nccl_rest_zero=true",
        "ncclGetUniqueId: NCCL's id, marked for auto standalone mode",
        "this rank cannot name its GPU",
    ] {
        assert!(out.contains(want), "missing {want:?} in:\n{out}");
    }
    assert!(init_ms(&out) < 10_000, "{out}");
    // NCCL made the communicator: the census left nothing behind.
    assert!(left.is_empty(), "left in the runtime directory: {left:?}");
}

#[test]
fn a_scalable_creation_takes_the_census_under_its_first_id_and_nccl_gets_it_unmarked() {
    let (out, left) = run_child(&[
        ("TPCOMM_STANDALONE_WAIT_S", "60"),
        ("AUTO_CHILD_SCALABLE", "1"),
    ]);
    for want in [
        "uid=0",
        "tail=\"TPCHYBR1\"",
        "init=0",
        "initscalable n=2 rank=0 nid=1",
        "nccl_head42=true",
        "nccl_rest_zero=true",
        "ncclCommInitRankScalable rank 0/2",
        "this rank cannot name its GPU",
    ] {
        assert!(out.contains(want), "missing {want:?} in:\n{out}");
    }
    assert!(init_ms(&out) < 10_000, "{out}");
    assert!(left.is_empty(), "left in the runtime directory: {left:?}");
}

#[test]
fn a_creation_inside_a_group_leaves_its_census_until_the_group_ends_then_nothing() {
    // NCCL makes a communicator created inside a group at ncclGroupEnd:
    // only then has every rank read the decision, so the records (here
    // rank 0's decision) stay until then, and go with the group's end.
    let (out, left) = run_child(&[("AUTO_CHILD_GROUP", "1")]);
    for want in [
        "group_start=0",
        "init=0",
        "group_end=0",
        "this rank cannot name its GPU",
    ] {
        assert!(out.contains(want), "missing {want:?} in:\n{out}");
    }
    let before: usize = out
        .lines()
        .find_map(|l| l.strip_prefix("left_before_group_end="))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no left_before_group_end in:\n{out}"));
    assert!(
        before > 0,
        "the decision should be there before the group ends:\n{out}"
    );
    assert!(left.is_empty(), "left in the runtime directory: {left:?}");
}

#[test]
fn a_non_blocking_creation_leaves_its_census_until_nccl_reports_it_ready_then_nothing() {
    // ncclCommInitRankConfig in progress: the drop-in asks
    // ncclCommGetAsyncError until the communicator is ready, then removes
    // the records (rank 0's decision), before the call returns.
    let (out, left) = run_child(&[("AUTO_CHILD_NONBLOCKING", "1"), ("FAKE_READY_AFTER", "3")]);
    for want in [
        "init=7",
        "initconfig n=2 rank=0;ready;",
        "this rank cannot name its GPU",
        "nccl_head42=true",
        "nccl_rest_zero=true",
    ] {
        assert!(out.contains(want), "missing {want:?} in:\n{out}");
    }
    assert!(left.is_empty(), "left in the runtime directory: {left:?}");
}

#[test]
fn a_non_blocking_creation_never_ready_keeps_its_census_and_says_so() {
    // Not ready within TPCOMM_TIMEOUT_S: tpcomm is not set up and the
    // records stay (the creation may still complete for the peers, which
    // may still be reading the decision).
    let (out, left) = run_child(&[
        ("AUTO_CHILD_NONBLOCKING", "1"),
        ("FAKE_READY_AFTER", "0"),
        ("TPCOMM_TIMEOUT_S", "0.3"),
    ]);
    for want in ["init=7", "was not ready in time; tpcomm not set up"] {
        assert!(out.contains(want), "missing {want:?} in:\n{out}");
    }
    assert!(!out.contains("ready;"), "the fake never said ready:\n{out}");
    assert!(!left.is_empty(), "the census records should stay:\n{out}");
}

#[test]
fn with_standalone_off_the_id_is_nccl_s_untouched_and_no_census_is_taken() {
    let (out, left) = run_child(&[("TPCOMM_STANDALONE", "0")]);
    for want in [
        "uid=0",
        "head42=true",
        "tail=\"\\0\\0\\0\\0\\0\\0\\0\\0\"",
        "init=0",
        "nccl_head42=true",
        "nccl_rest_zero=true",
    ] {
        assert!(out.contains(want), "missing {want:?} in:\n{out}");
    }
    assert!(!out.contains("census") && !out.contains("marked"), "{out}");
    assert!(left.is_empty(), "left in the runtime directory: {left:?}");
}

#[test]
fn an_id_with_data_in_its_tail_is_left_unmarked() {
    let (out, left) = run_child(&[("FAKE_FULL_ID", "1")]);
    for want in [
        "uid=0",
        "tail=\"BBBBBBBB\"",
        "init=0",
        "left unmarked (no auto standalone mode for it)",
    ] {
        assert!(out.contains(want), "missing {want:?} in:\n{out}");
    }
    assert!(!out.contains("census"), "{out}");
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn with_nccl_comm_id_set_ids_are_left_unmarked() {
    // Ranks may each make their own id then: no shared secret to meet by.
    let (out, left) = run_child(&[("NCCL_COMM_ID", "127.0.0.1:29999")]);
    for want in [
        "uid=0",
        "tail=\"\\0\\0\\0\\0\\0\\0\\0\\0\"",
        "init=0",
        "nccl_rest_zero=true",
        "NCCL_COMM_ID is set",
    ] {
        assert!(out.contains(want), "missing {want:?} in:\n{out}");
    }
    assert!(!out.contains("census"), "{out}");
    assert!(left.is_empty(), "{left:?}");
}
