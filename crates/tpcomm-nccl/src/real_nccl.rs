//! Finding the real NCCL behind this library and its functions.
//!
//! Where it is looked for, in order (the first that answers wins):
//! 1. `$TPCOMM_REAL_NCCL`, a path; when set, nothing else is tried.
//! 2. The next definition after this library in the process's global scope
//!    (`dlsym(RTLD_NEXT)`): the NCCL a program links, when this library is
//!    preloaded in front of it.
//! 3. A `libnccl.so.2` the process has already loaded (`RTLD_NOLOAD`): the one
//!    PyTorch opened, when this library was itself opened by path.
//! 4. tpcomm's own NCCL search (`$TPCOMM_NCCL_LIBRARY`, the sonames, pip's folders).
//!
//! A library that turns out to be this one (a copy renamed `libnccl.so.2`)
//! is skipped, so forwarding can never call itself.
//!
//! Every `unsafe` call of the crate into the dynamic loader lives here.

use crate::settings;
use std::ffi::{c_void, CStr, CString};
use std::sync::OnceLock;

/// Exported by this library alone: how a loaded object is recognised as us.
#[no_mangle]
pub static tpcomm_nccl_dropin: u8 = 1;

/// Where the real functions come from.
#[derive(Debug)]
pub struct Real {
    /// A `dlopen` handle, or `RTLD_NEXT`.
    handle: usize,
    /// Said in logs and errors.
    pub location: String,
}

fn dlerror_text() -> String {
    // SAFETY: dlerror returns null or a NUL-terminated string owned by the
    // loader, valid until the next dl* call on this thread; copied at once.
    unsafe {
        let e = libc::dlerror();
        if e.is_null() {
            "no error text".into()
        } else {
            CStr::from_ptr(e).to_string_lossy().into_owned()
        }
    }
}

/// Opens `name` (a path or a soname) with `flags`; `None` with the loader's reason.
fn open(name: &str, flags: i32) -> Result<*mut c_void, String> {
    let c = CString::new(name).map_err(|_| format!("{name:?} contains a NUL byte"))?;
    // SAFETY: `c` is a valid C string; dlopen has no other preconditions.
    let h = unsafe { libc::dlopen(c.as_ptr(), flags) };
    if h.is_null() {
        Err(dlerror_text())
    } else {
        Ok(h)
    }
}

fn lookup(handle: *mut c_void, name: &CStr) -> *mut c_void {
    // SAFETY: `handle` is RTLD_NEXT or came from dlopen and is never closed;
    // `name` is NUL-terminated.
    unsafe { libc::dlsym(handle, name.as_ptr()) }
}

/// True when `handle` is an NCCL and not this library under another name.
fn is_real_nccl(handle: *mut c_void) -> bool {
    !lookup(handle, c"ncclGetVersion").is_null() && lookup(handle, c"tpcomm_nccl_dropin").is_null()
}

fn find(explicit: Option<&str>) -> Result<Real, String> {
    const FLAGS: i32 = libc::RTLD_NOW | libc::RTLD_LOCAL;
    if let Some(path) = explicit {
        let h = open(path, FLAGS).map_err(|e| {
            format!("TPCOMM_REAL_NCCL={path} could not be opened ({e}); point it at the real libnccl.so.2 or unset it")
        })?;
        if !is_real_nccl(h) {
            return Err(format!(
                "TPCOMM_REAL_NCCL={path} is not NCCL (no ncclGetVersion) or is this library itself; point it at the real libnccl.so.2"
            ));
        }
        return Ok(Real {
            handle: h as usize,
            location: path.into(),
        });
    }
    // Only the address of the next definition tells whether one exists; the
    // object behind it is not ours by construction of RTLD_NEXT.
    if !lookup(libc::RTLD_NEXT, c"ncclGetVersion").is_null() {
        return Ok(Real {
            handle: libc::RTLD_NEXT as usize,
            location: "the next NCCL in the process (RTLD_NEXT)".into(),
        });
    }
    for soname in ["libnccl.so.2", "libnccl.so"] {
        if let Ok(h) = open(soname, FLAGS | libc::RTLD_NOLOAD) {
            if is_real_nccl(h) {
                return Ok(Real {
                    handle: h as usize,
                    location: format!("{soname} (already loaded)"),
                });
            }
        }
    }
    let mut tried = Vec::new();
    for c in tpcomm::nccl::candidates() {
        let name = c.to_string();
        match open(&name, FLAGS) {
            Ok(h) if is_real_nccl(h) => {
                return Ok(Real {
                    handle: h as usize,
                    location: name,
                })
            }
            Ok(_) => tried.push(format!("{name}: this library itself, skipped")),
            Err(e) => tried.push(e),
        }
    }
    Err(format!(
        "the real NCCL library was not found (tried: {}); install it (`pip install nvidia-nccl-cu13`) or set TPCOMM_REAL_NCCL to the path of libnccl.so.2",
        tried.join("; ")
    ))
}

/// The real NCCL, found once per process; the error is logged once.
pub fn get() -> Result<&'static Real, &'static str> {
    static REAL: OnceLock<Result<Real, String>> = OnceLock::new();
    let r = REAL.get_or_init(|| {
        let found = find(settings::get().real_nccl.as_deref());
        match &found {
            Ok(r) => settings::info!("forwarding to the real NCCL: {}", r.location),
            Err(e) => settings::warn!("{e}"),
        }
        found
    });
    r.as_ref().map_err(|e| e.as_str())
}

/// The address of the real `name` (NUL-terminated), or why there is none.
pub fn symbol(name: &'static CStr) -> Result<*mut c_void, String> {
    let real = get().map_err(str::to_string)?;
    let p = lookup(real.handle as *mut c_void, name);
    if p.is_null() {
        let msg = format!(
            "the real NCCL ({}) has no {}: it is older than the caller expects",
            real.location,
            name.to_string_lossy()
        );
        settings::warn!("{msg}");
        Err(msg)
    } else {
        Ok(p)
    }
}
