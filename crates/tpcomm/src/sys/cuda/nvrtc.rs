//! NVRTC, opened by tpcomm itself so that it can choose which one: code that
//! an NVRTC newer (by major version) than the driver compiles does not load,
//! so the newest NVRTC whose major version is at most the driver's wins.
//!
//! Looked for, in order: `$TPCOMM_NVRTC_LIBRARY` (a path; nothing else is
//! tried when it is set), then `libnvrtc.so.13`, `.12`, `.11` and
//! `libnvrtc.so` through the dynamic loader (LD_LIBRARY_PATH, ldconfig).
//! Every unsafe call of this file is here, each with why it is sound.

use crate::error::{Error, Result};
use libloading::Library;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::OnceLock;

/// Environment variable naming the NVRTC library to use.
pub const NVRTC_LIBRARY_ENV: &str = "TPCOMM_NVRTC_LIBRARY";

type Prog = *mut c_void;
type VersionFn = unsafe extern "C" fn(*mut c_int, *mut c_int) -> c_int;
type CreateFn = unsafe extern "C" fn(
    *mut Prog,
    *const c_char,
    *const c_char,
    c_int,
    *const *const c_char,
    *const *const c_char,
) -> c_int;
type CompileFn = unsafe extern "C" fn(Prog, c_int, *const *const c_char) -> c_int;
type SizeFn = unsafe extern "C" fn(Prog, *mut usize) -> c_int;
type GetFn = unsafe extern "C" fn(Prog, *mut c_char) -> c_int;
type DestroyFn = unsafe extern "C" fn(*mut Prog) -> c_int;
type ErrStrFn = unsafe extern "C" fn(c_int) -> *const c_char;

struct Api {
    create: CreateFn,
    compile: CompileFn,
    log_size: SizeFn,
    log: GetFn,
    cubin_size: SizeFn,
    cubin: GetFn,
    destroy: DestroyFn,
    err_str: ErrStrFn,
}

/// An opened NVRTC: where it came from, its version, its entry points.
pub struct Nvrtc {
    api: Api,
    pub path: String,
    pub version: (i32, i32),
    // Keeps the functions above loaded.
    _lib: Library,
}

fn candidates() -> Vec<String> {
    if let Some(p) = crate::env::NVRTC_LIBRARY.checked_value() {
        return vec![p.to_string_lossy().into_owned()];
    }
    [
        "libnvrtc.so.13",
        "libnvrtc.so.12",
        "libnvrtc.so.11",
        "libnvrtc.so",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn open(path: &str) -> std::result::Result<Nvrtc, String> {
    // SAFETY: dlopen runs the library's initialisers; NVRTC's only set up its
    // own state. The path is one of NVRTC's names or the user's choice.
    let lib = unsafe { Library::new(path) }.map_err(|e| e.to_string())?;
    // The symbol names and C signatures are NVRTC's public API (nvrtc.h),
    // unchanged since CUDA 11; the pointers stay valid while `lib` is loaded,
    // which `Nvrtc` guarantees by owning it.
    let sym = |name: &[u8]| -> std::result::Result<*const c_void, String> {
        // SAFETY: read as a plain pointer, not called (see above).
        unsafe { lib.get::<*const c_void>(name) }
            .map(|s| *s)
            .map_err(|e| format!("{}: {e}", String::from_utf8_lossy(name)))
    };
    // SAFETY: nvrtcVersion has VersionFn's signature (nvrtc.h).
    let version: VersionFn = unsafe { std::mem::transmute(sym(b"nvrtcVersion\0")?) };
    // SAFETY: each symbol has the signature it is transmuted to (nvrtc.h).
    let api = unsafe {
        Api {
            create: std::mem::transmute::<*const c_void, CreateFn>(sym(b"nvrtcCreateProgram\0")?),
            compile: std::mem::transmute::<*const c_void, CompileFn>(sym(
                b"nvrtcCompileProgram\0",
            )?),
            log_size: std::mem::transmute::<*const c_void, SizeFn>(sym(
                b"nvrtcGetProgramLogSize\0",
            )?),
            log: std::mem::transmute::<*const c_void, GetFn>(sym(b"nvrtcGetProgramLog\0")?),
            cubin_size: std::mem::transmute::<*const c_void, SizeFn>(sym(b"nvrtcGetCUBINSize\0")?),
            cubin: std::mem::transmute::<*const c_void, GetFn>(sym(b"nvrtcGetCUBIN\0")?),
            destroy: std::mem::transmute::<*const c_void, DestroyFn>(sym(
                b"nvrtcDestroyProgram\0",
            )?),
            err_str: std::mem::transmute::<*const c_void, ErrStrFn>(sym(b"nvrtcGetErrorString\0")?),
        }
    };
    let (mut major, mut minor) = (0, 0);
    // SAFETY: writes two ints through valid pointers.
    let r = unsafe { version(&mut major, &mut minor) };
    if r != 0 {
        return Err(format!("nvrtcVersion returned {r}"));
    }
    Ok(Nvrtc {
        api,
        path: path.to_string(),
        version: (major, minor),
        _lib: lib,
    })
}

/// Opens the first of `paths` whose major version is at most `max_major`
/// (the driver's; any version when the driver is unknown). The candidates
/// go from newest to oldest, so that is the newest usable one.
fn choose_from(paths: &[String], max_major: Option<i32>) -> std::result::Result<Nvrtc, String> {
    let mut tried = Vec::new();
    for path in paths {
        match open(path) {
            Ok(n) if max_major.is_none_or(|m| n.version.0 <= m) => return Ok(n),
            Ok(n) => tried.push(format!(
                "{path}: CUDA {}.{} is newer than the driver's CUDA {}",
                n.version.0,
                n.version.1,
                max_major.unwrap_or(0)
            )),
            Err(e) => tried.push(format!("{path}: {e}")),
        }
    }
    Err(format!(
        "no usable NVRTC ({}). Install one no newer than the driver (`pip install 'nvidia-cuda-nvrtc==13.0.*'` for a CUDA 13 driver, `nvidia-cuda-nvrtc-cu12` for CUDA 12), add its lib directory (site-packages/nvidia/cu13/lib) to LD_LIBRARY_PATH, or set {NVRTC_LIBRARY_ENV} to the library's path",
        tried.join("; ")
    ))
}

/// The NVRTC of this process, chosen once (against the driver's major
/// version, which `driver_major` reads the first time, when a driver is
/// present).
pub fn get(driver_major: impl FnOnce() -> Option<i32>) -> Result<&'static Nvrtc> {
    static CHOSEN: OnceLock<std::result::Result<Nvrtc, String>> = OnceLock::new();
    CHOSEN
        .get_or_init(|| choose_from(&candidates(), driver_major()))
        .as_ref()
        .map_err(|detail| Error::Library {
            library: "NVRTC".into(),
            detail: detail.clone(),
        })
}

impl Nvrtc {
    fn describe(&self, r: c_int) -> String {
        // SAFETY: nvrtcGetErrorString returns a static string for any code.
        let p = unsafe { (self.api.err_str)(r) };
        if p.is_null() {
            format!("NVRTC error {r}")
        } else {
            // SAFETY: non-null, NUL-terminated and static (NVRTC's own table).
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        }
    }

    /// Compiles `src` and returns (cubin, compiler log); the log holds any
    /// warnings even when compilation succeeds.
    pub fn compile(&self, src: &str, name: &str, options: &[String]) -> Result<(Vec<u8>, String)> {
        let err = |what: &str, detail: String| Error::Library {
            library: format!(
                "NVRTC {}.{} ({})",
                self.version.0, self.version.1, self.path
            ),
            detail: format!("{what}: {detail}"),
        };
        let csrc =
            CString::new(src).map_err(|_| Error::invalid("kernel source", "contains NUL"))?;
        let cname =
            CString::new(name).map_err(|_| Error::invalid("kernel name", "contains NUL"))?;
        let copts: Vec<CString> = options
            .iter()
            .map(|o| {
                CString::new(o.as_str()).map_err(|_| Error::invalid("NVRTC option", "contains NUL"))
            })
            .collect::<Result<_>>()?;
        let ptrs: Vec<*const c_char> = copts.iter().map(|c| c.as_ptr()).collect();
        let mut prog: Prog = std::ptr::null_mut();
        // SAFETY: the strings are NUL-terminated and outlive the call; no headers.
        let r = unsafe {
            (self.api.create)(
                &mut prog,
                csrc.as_ptr(),
                cname.as_ptr(),
                0,
                std::ptr::null(),
                std::ptr::null(),
            )
        };
        if r != 0 {
            return Err(err("nvrtcCreateProgram", self.describe(r)));
        }
        // Destroyed on every path below.
        struct Guard<'a>(Prog, &'a Api);
        impl Drop for Guard<'_> {
            fn drop(&mut self) {
                // SAFETY: created above, destroyed exactly once, here.
                unsafe { (self.1.destroy)(&mut self.0) };
            }
        }
        let g = Guard(prog, &self.api);
        // SAFETY: `ptrs` holds ptrs.len() C strings that outlive the call.
        let compiled = unsafe { (self.api.compile)(g.0, ptrs.len() as c_int, ptrs.as_ptr()) };
        let mut log_len = 0usize;
        // SAFETY: valid program; writes one usize.
        unsafe { (self.api.log_size)(g.0, &mut log_len) };
        let mut log = vec![0u8; log_len.max(1)];
        // SAFETY: the buffer holds the log_len bytes NVRTC asked for.
        unsafe { (self.api.log)(g.0, log.as_mut_ptr() as *mut c_char) };
        let log = CStr::from_bytes_until_nul(&log)
            .map(|c| c.to_string_lossy().trim().to_string())
            .unwrap_or_default();
        if compiled != 0 {
            return Err(err(
                &format!("compiling {name}"),
                format!("{}:\n{log}", self.describe(compiled)),
            ));
        }
        let mut size = 0usize;
        // SAFETY: valid, compiled program; writes one usize.
        let r = unsafe { (self.api.cubin_size)(g.0, &mut size) };
        if r != 0 || size == 0 {
            return Err(err(
                "nvrtcGetCUBINSize (was a real sm_XY architecture given?)",
                self.describe(r),
            ));
        }
        let mut cubin = vec![0u8; size];
        // SAFETY: the buffer holds the `size` bytes NVRTC asked for.
        let r = unsafe { (self.api.cubin)(g.0, cubin.as_mut_ptr() as *mut c_char) };
        if r != 0 {
            return Err(err("nvrtcGetCUBIN", self.describe(r)));
        }
        Ok((cubin, log))
    }
}

#[cfg(test)]
mod tests;
