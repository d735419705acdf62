//! Calling the real NCCL, and keeping panics and missing libraries from
//! crossing the C boundary.

use crate::settings;
use crate::types::{NcclResult, Opaque, INTERNAL_ERROR, SYSTEM_ERROR};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicPtr, Ordering};

/// What an exported function returns when tpcomm cannot do its part.
pub trait Fail {
    /// The real NCCL (or one of its functions) is not there.
    fn missing() -> Self;
    /// Something panicked inside tpcomm.
    fn internal() -> Self;
}

impl Fail for NcclResult {
    fn missing() -> Self {
        SYSTEM_ERROR
    }
    fn internal() -> Self {
        INTERNAL_ERROR
    }
}

impl Fail for *const c_char {
    fn missing() -> Self {
        c"tpcomm: the real NCCL library was not found (set TPCOMM_REAL_NCCL)".as_ptr()
    }
    fn internal() -> Self {
        c"tpcomm: internal error".as_ptr()
    }
}

impl Fail for () {
    fn missing() {}
    fn internal() {}
}

/// Runs an exported function's body; a panic becomes `R::internal()` and a log line.
///
/// Nothing after a caught panic may panic again (that would unwind into C,
/// which aborts the process): the log line is written by level without
/// reading the settings (reading them may be what panicked), the message is
/// built from plain strings, and the payload is dropped under a second
/// `catch_unwind` (a payload's destructor may itself panic).
pub fn guard<R: Fail>(name: &str, f: impl FnOnce() -> R) -> R {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => {
            let what = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            let _ = catch_unwind(AssertUnwindSafe(move || drop(p)));
            if settings::logs(settings::Level::Warn) {
                settings::emit(format_args!(
                    "{name}: tpcomm failed internally ({what}); returning ncclInternalError"
                ));
            }
            R::internal()
        }
    }
}

/// The real function `name`, looked up once and kept in `cache`.
pub fn cached(cache: &AtomicPtr<c_void>, name: &'static CStr) -> Result<*mut c_void, String> {
    let p = cache.load(Ordering::Acquire);
    if !p.is_null() {
        return Ok(p);
    }
    let p = crate::real_nccl::symbol(name)?;
    cache.store(p, Ordering::Release);
    Ok(p)
}

/// Calls the real NCCL function `$name` with the C prototype spelled after
/// `as`; `Err` (a message, already logged) when it cannot be found.
macro_rules! call_real {
    ($name:ident ( $($arg:expr),* $(,)? ) as fn ( $($ty:ty),* $(,)? ) -> $ret:ty) => {{
        static P: std::sync::atomic::AtomicPtr<std::ffi::c_void> =
            std::sync::atomic::AtomicPtr::new(std::ptr::null_mut());
        const NAME: &std::ffi::CStr =
            match std::ffi::CStr::from_bytes_with_nul(concat!(stringify!($name), "\0").as_bytes()) {
                Ok(c) => c,
                Err(_) => panic!("symbol names hold no NUL"),
            };
        match $crate::ffi::cached(&P, NAME) {
            Ok(p) => {
                // SAFETY: `p` is the real NCCL's exported function of this
                // name, and the prototype spelled here is nccl.h's for it.
                let f: unsafe extern "C" fn($($ty),*) -> $ret = unsafe { std::mem::transmute(p) };
                // SAFETY: the arguments are the caller's, passed on unchanged
                // under the same C contract.
                Ok(unsafe { f($($arg),*) })
            }
            Err(e) => Err(e),
        }
    }};
}
pub(crate) use call_real;

/// Defines exported functions that only forward to the real NCCL (none of
/// them takes a communicator), and lists them.
macro_rules! forward {
    ($( fn $name:ident ( $($arg:ident : $ty:ty),* $(,)? ) -> $ret:ty ; )*) => {
        $(
            #[no_mangle]
            pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
                $crate::ffi::guard(stringify!($name), || {
                    match $crate::ffi::call_real!($name($($arg),*) as fn($($ty),*) -> $ret) {
                        Ok(r) => r,
                        Err(_) => <$ret as $crate::ffi::Fail>::missing(),
                    }
                })
            }
        )*
        /// Every function exported by [`forward!`], by name.
        #[cfg_attr(not(test), allow(dead_code))]
        pub const FORWARDED: &[&str] = &[$(stringify!($name)),*];
    };
}
pub(crate) use forward;

/// `NCCL_CONFIG_UNDEF_INT`: a config field the caller left at its default.
const CONFIG_UNDEF_INT: c_int = c_int::MIN;
/// `ncclConfig_t.magic` as `NCCL_CONFIG_INITIALIZER` writes it.
const CONFIG_MAGIC: u32 = 0xcafe_beef;

/// Whether an `ncclConfig_t*` asks for a non-blocking communicator
/// (`blocking = 0`). The config's head is the same in every NCCL 2.x:
/// `size_t size; unsigned magic; unsigned version; int blocking; ...`. A NULL
/// config, one without NCCL's magic (not made by `NCCL_CONFIG_INITIALIZER`)
/// or a field left undefined is blocking, NCCL's default.
pub(crate) fn config_nonblocking(config: Opaque) -> bool {
    #[repr(C)]
    struct Head {
        size: usize,
        magic: u32,
        version: u32,
        blocking: c_int,
    }
    if config.is_null() {
        return false;
    }
    // SAFETY: non-null, and nccl.h's contract makes it an ncclConfig_t,
    // whose head is `Head`; only the head is read.
    let head = unsafe { std::ptr::read_unaligned(config as *const Head) };
    head.magic == CONFIG_MAGIC
        && head.size >= std::mem::size_of::<Head>()
        && head.blocking != CONFIG_UNDEF_INT
        && head.blocking == 0
}

/// A copy of an `ncclConfig_t` for a creation forwarded later (auto mode's
/// creations inside a group reach NCCL at ncclGroupEnd, when the caller's
/// config may be gone: NCCL reads it at the call). The copy is shallow (the
/// config's strings are the caller's); a config whose head is not NCCL's,
/// or NULL, is kept as the pointer it was, for NCCL to judge as it would.
pub(crate) struct ConfigCopy {
    bytes: Vec<u64>,
    original: usize,
}

impl ConfigCopy {
    pub(crate) fn of(config: Opaque) -> ConfigCopy {
        let mut c = ConfigCopy {
            bytes: Vec::new(),
            original: config as usize,
        };
        if config.is_null() {
            return c;
        }
        // SAFETY: non-null, and nccl.h's contract makes it an ncclConfig_t,
        // which starts with its size and magic.
        let (size, magic) = unsafe {
            (
                std::ptr::read_unaligned(config as *const usize),
                std::ptr::read_unaligned((config as *const u8).add(8) as *const u32),
            )
        };
        if magic == CONFIG_MAGIC && (16..=4096).contains(&size) {
            c.bytes = vec![0u64; size.div_ceil(8)];
            // SAFETY: the config holds `size` bytes (its own size field),
            // and the copy has room for them.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    config as *const u8,
                    c.bytes.as_mut_ptr() as *mut u8,
                    size,
                )
            };
        }
        c
    }

    /// The config to hand NCCL: the copy, else the pointer as given.
    pub(crate) fn as_ptr(&mut self) -> Opaque {
        if self.bytes.is_empty() {
            self.original as Opaque
        } else {
            self.bytes.as_mut_ptr() as Opaque
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_config_is_copied_whole_and_anything_else_kept_as_given() {
        // An ncclConfig_t's head (size, magic, version, blocking) and more.
        let mut cfg = [0u8; 40];
        cfg[..8].copy_from_slice(&40usize.to_le_bytes());
        cfg[8..12].copy_from_slice(&CONFIG_MAGIC.to_le_bytes());
        cfg[16..20].copy_from_slice(&0i32.to_le_bytes());
        cfg[36] = 7;
        let mut c = ConfigCopy::of(cfg.as_mut_ptr() as Opaque);
        cfg.fill(0xee);
        let p = c.as_ptr();
        assert_ne!(p, cfg.as_mut_ptr() as Opaque);
        // SAFETY: the copy holds the 40 bytes.
        let got = unsafe { std::slice::from_raw_parts(p as *const u8, 40) };
        assert_eq!(&got[..8], &40usize.to_le_bytes());
        assert_eq!(got[36], 7);
        assert!(config_nonblocking(p));
        assert!(ConfigCopy::of(std::ptr::null_mut()).as_ptr().is_null());
        let mut odd = [0u8; 16];
        let at = odd.as_mut_ptr() as Opaque;
        assert_eq!(ConfigCopy::of(at).as_ptr(), at);
    }

    #[test]
    fn a_panic_inside_an_export_becomes_internal_error() {
        let r: NcclResult = guard("test", || panic!("boom"));
        assert_eq!(r, INTERNAL_ERROR);
        let s: *const c_char = guard("test", || panic!("{}", String::from("boom")));
        assert!(!s.is_null());
    }

    /// A panic payload whose destructor panics too: dropping it outside a
    /// second catch_unwind would unwind into C.
    #[test]
    fn a_payload_that_panics_when_dropped_is_contained() {
        struct Bomb;
        impl Drop for Bomb {
            fn drop(&mut self) {
                panic!("the payload's destructor panicked");
            }
        }
        let r: NcclResult = guard("test", || std::panic::panic_any(Bomb));
        assert_eq!(r, INTERNAL_ERROR);
    }

    /// nccl.h's ncclConfig_t up to `blocking` plus a field after it, as
    /// NCCL_CONFIG_INITIALIZER fills it.
    #[repr(C)]
    struct Config {
        size: usize,
        magic: u32,
        version: u32,
        blocking: c_int,
        cga_cluster_size: c_int,
    }

    fn config(magic: u32, blocking: c_int) -> Config {
        Config {
            size: std::mem::size_of::<Config>(),
            magic,
            version: 22800,
            blocking,
            cga_cluster_size: CONFIG_UNDEF_INT,
        }
    }

    #[test]
    fn only_an_initialized_config_with_blocking_zero_is_non_blocking() {
        let mut c = config(CONFIG_MAGIC, 0);
        assert!(config_nonblocking(&mut c as *mut Config as Opaque));
        let mut c = config(CONFIG_MAGIC, 1);
        assert!(!config_nonblocking(&mut c as *mut Config as Opaque));
        // Left at the initializer's undefined value: NCCL's default, blocking.
        let mut c = config(CONFIG_MAGIC, CONFIG_UNDEF_INT);
        assert!(!config_nonblocking(&mut c as *mut Config as Opaque));
        // Not made by NCCL_CONFIG_INITIALIZER: its fields mean nothing.
        let mut c = config(0x1234_5678, 0);
        assert!(!config_nonblocking(&mut c as *mut Config as Opaque));
        assert!(!config_nonblocking(std::ptr::null_mut()));
    }
}
