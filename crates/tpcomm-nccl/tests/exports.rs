//! Checks the built libtpcomm_nccl.so itself (no GPU, no NCCL needed):
//! every NCCL function of symbols.txt is exported, and without a real NCCL
//! the library answers ncclSystemError with a clear message instead of
//! crashing.

use std::ffi::{c_char, c_int, CStr};
use std::path::PathBuf;
use std::process::Command;

fn library() -> PathBuf {
    // target/<profile>/deps/exports-<hash> -> target/<profile>/libtpcomm_nccl.so
    let exe = std::env::current_exe().expect("test executable path");
    let dir = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("target directory");
    let lib = dir.join("libtpcomm_nccl.so");
    assert!(
        lib.exists(),
        "{} not built: run `cargo build --release -p tpcomm-nccl` first (scripts/test.sh does)",
        lib.display()
    );
    lib
}

fn symbols() -> Vec<&'static str> {
    include_str!("../symbols.txt")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect()
}

#[test]
fn every_listed_nccl_function_is_exported() {
    // SAFETY: loading the library runs one initialiser of its own
    // (at_load.rs: it may set CUDA_DEVICE_MAX_CONNECTIONS, harmless here);
    // all other state is created lazily at the first call.
    let lib = unsafe { libloading::Library::new(library()) }.expect("load libtpcomm_nccl.so");
    let list = symbols();
    assert!(list.len() >= 35, "symbols.txt lists only {}", list.len());
    for name in list {
        // SAFETY: only the address is looked up, nothing is called.
        let f = unsafe { lib.get::<unsafe extern "C" fn()>(name.as_bytes()) };
        assert!(f.is_ok(), "{name} is not exported by libtpcomm_nccl.so");
    }
}

/// Every function also has NCCL's profiling name, `pnccl...`, and it is the
/// same function: its answer to the same call is the same.
#[test]
fn every_function_has_its_pnccl_profiling_name_and_it_behaves_alike() {
    // SAFETY: as in every_listed_nccl_function_is_exported.
    let lib = unsafe { libloading::Library::new(library()) }.expect("load libtpcomm_nccl.so");
    for name in symbols() {
        let p = format!("p{name}");
        // SAFETY: only the address is looked up, nothing is called.
        let f = unsafe { lib.get::<unsafe extern "C" fn()>(p.as_bytes()) };
        assert!(f.is_ok(), "{p} is not exported by libtpcomm_nccl.so");
    }
    type ErrorString = unsafe extern "C" fn(i32) -> *const std::ffi::c_char;
    // SAFETY: nccl.h's prototype of ncclGetErrorString; the strings are
    // static and NUL-terminated.
    unsafe {
        let a = lib.get::<ErrorString>(b"ncclGetErrorString").unwrap();
        let b = lib.get::<ErrorString>(b"pncclGetErrorString").unwrap();
        for code in 0..8 {
            let (x, y) = (
                std::ffi::CStr::from_ptr(a(code)),
                std::ffi::CStr::from_ptr(b(code)),
            );
            assert_eq!(
                x, y,
                "ncclGetErrorString({code}) and pncclGetErrorString({code}) differ"
            );
        }
    }
}

#[test]
fn nm_sees_the_exports_as_defined_text_symbols() {
    let Ok(out) = Command::new("nm")
        .arg("-D")
        .arg("--defined-only")
        .arg(library())
        .output()
    else {
        eprintln!("nm is not installed; the libloading test covers the exports");
        return;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    for name in symbols() {
        assert!(
            text.lines().any(|l| l.ends_with(&format!(" T {name}"))),
            "nm -D does not show {name} as a defined function"
        );
    }
}

/// Runs `child_body` in a fresh process with `envs`, so that the library's
/// once-per-process state and stderr belong to this case alone.
fn run_child(case: &str, envs: &[(&str, &str)]) -> (bool, String, String) {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = Command::new(exe);
    cmd.args(["--exact", "child_body", "--nocapture", "--test-threads=1"])
        .env("TPCOMM_DROPIN_CHILD", case)
        .env_remove("LD_PRELOAD");
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run the child test");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The body of the child processes; does nothing in a normal test run.
#[test]
fn child_body() {
    let Ok(case) = std::env::var("TPCOMM_DROPIN_CHILD") else {
        return;
    };
    // SAFETY: as above; the functions are called with NCCL's prototypes.
    let lib = unsafe { libloading::Library::new(library()) }.unwrap();
    type GetVersion = unsafe extern "C" fn(*mut c_int) -> c_int;
    type ErrStr = unsafe extern "C" fn(c_int) -> *const c_char;
    type AllReduce =
        unsafe extern "C" fn(*const u8, *mut u8, usize, c_int, c_int, *mut u8, *mut u8) -> c_int;
    unsafe {
        let get_version: libloading::Symbol<GetVersion> = lib.get(b"ncclGetVersion").unwrap();
        let err_str: libloading::Symbol<ErrStr> = lib.get(b"ncclGetErrorString").unwrap();
        let all_reduce: libloading::Symbol<AllReduce> = lib.get(b"ncclAllReduce").unwrap();
        let mut v: c_int = -1;
        let r = get_version(&mut v);
        println!("case={case} ncclGetVersion={r} version={v}");
        let s = CStr::from_ptr(err_str(r)).to_string_lossy().into_owned();
        println!("ncclGetErrorString={s}");
        // A null communicator: routed to NCCL (nothing set up), which is missing.
        let r = all_reduce(
            std::ptr::null(),
            std::ptr::null_mut(),
            16,
            9,
            0,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        );
        println!("ncclAllReduce={r}");
    }
}

#[test]
fn without_a_real_nccl_calls_return_system_error_and_say_why() {
    let (ok, out, err) = run_child(
        "missing",
        &[
            ("TPCOMM_REAL_NCCL", "/nonexistent/libnccl.so.2"),
            ("TPCOMM_LOG", "info"),
        ],
    );
    assert!(ok, "the child crashed:\n{out}\n{err}");
    assert!(out.contains("ncclGetVersion=2 "), "{out}");
    assert!(out.contains("ncclAllReduce=2"), "{out}");
    assert!(
        out.contains("ncclGetErrorString=unhandled system error"),
        "{out}"
    );
    assert!(
        err.contains("tpcomm: TPCOMM_REAL_NCCL=/nonexistent/libnccl.so.2 could not be opened"),
        "stderr does not explain the failure:\n{err}"
    );
    // Said once, not at every call.
    assert_eq!(err.matches("could not be opened").count(), 1, "{err}");
}

#[test]
fn a_library_that_is_not_nccl_is_refused_by_name() {
    // libtpcomm_nccl.so itself posing as the real NCCL must not be used (it
    // would forward to itself forever).
    let me = library();
    let (ok, out, err) = run_child(
        "itself",
        &[
            ("TPCOMM_REAL_NCCL", me.to_str().unwrap()),
            ("TPCOMM_DISABLE", "1"),
        ],
    );
    assert!(ok, "the child crashed:\n{out}\n{err}");
    assert!(out.contains("ncclGetVersion=2 "), "{out}");
    assert!(err.contains("is not NCCL"), "{err}");
}

/// docs/drop-in.md's table of every exported function lists exactly the
/// functions of symbols.txt, each once.
#[test]
fn the_docs_table_lists_every_export_once() {
    let doc = include_str!("../../../docs/drop-in.md");
    let start = doc
        .find("## Every exported function")
        .expect("docs/drop-in.md has its table of exports");
    let section = &doc[start..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |e| e + 3)];
    let mut rows: Vec<&str> = section
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split_once('`').map(|(name, _)| name))
        .collect();
    let n = rows.len();
    rows.sort_unstable();
    rows.dedup();
    assert_eq!(rows.len(), n, "a function has two rows in docs/drop-in.md");
    let mut want = symbols();
    want.sort_unstable();
    assert_eq!(rows, want, "docs/drop-in.md's table and symbols.txt differ");
    assert!(
        section.contains(&format!(
            "How each of the {} exported functions",
            want.len()
        )),
        "the table's introduction gives another count than {}",
        want.len()
    );
}

/// Preloaded into a shell, the library gives the process CUDA's 32 hardware
/// queues when `CUDA_DEVICE_MAX_CONNECTIONS` is unset and no MPS daemon is in
/// sight, and leaves a given value, an MPS client and `TPCOMM_DISABLE=1`
/// alone (at_load.rs).
#[test]
fn loading_widens_cuda_queues_only_where_it_is_safe() {
    let seen = |vars: &[(&str, &str)]| -> String {
        let mut c = Command::new("sh");
        c.arg("-c")
            .arg("printf %s \"${CUDA_DEVICE_MAX_CONNECTIONS-unset}\"")
            .env("LD_PRELOAD", library())
            .env_remove("CUDA_DEVICE_MAX_CONNECTIONS")
            .env_remove("CUDA_MPS_PIPE_DIRECTORY")
            .env_remove("TPCOMM_DISABLE");
        for (k, v) in vars {
            c.env(k, v);
        }
        let out = c.output().expect("run sh");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let mps_here = std::path::Path::new("/tmp/nvidia-mps").exists();
    assert_eq!(seen(&[]), if mps_here { "unset" } else { "32" });
    assert_eq!(seen(&[("CUDA_DEVICE_MAX_CONNECTIONS", "4")]), "4");
    assert_eq!(
        seen(&[("CUDA_MPS_PIPE_DIRECTORY", "/tmp/some-mps")]),
        "unset"
    );
    assert_eq!(seen(&[("TPCOMM_DISABLE", "1")]), "unset");
}

/// Every function the real NCCL 2.28.9 exports is exported here too, but
/// its internal one: a preloaded program that calls one of them with a
/// standalone communicator must reach this library, never hand NCCL a
/// handle that is not NCCL's.
#[test]
fn every_function_of_nccl_2_28_9_is_exported_but_its_internal_one() {
    let ours = symbols();
    let missing: Vec<&str> = include_str!("nccl_2_28_9_exports.txt")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter(|n| *n != "ncclResetDebugInitInternal" && !ours.contains(n))
        .collect();
    assert!(
        missing.is_empty(),
        "NCCL 2.28.9 exports these and this library does not: {missing:?}"
    );
}
