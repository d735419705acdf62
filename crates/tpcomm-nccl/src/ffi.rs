//! Calling the real NCCL, and keeping panics and missing libraries from
//! crossing the C boundary.

use crate::settings;
use crate::types::{NcclResult, INTERNAL_ERROR, SYSTEM_ERROR};
use std::ffi::{c_char, c_void, CStr};
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
