//! `libtpcomm_nccl.so`: a shared library with NCCL's C API that runs tpcomm's
//! all-reduce where it applies and forwards everything else to the real NCCL.
//!
//! Two ways in: preloaded (`LD_PRELOAD`) in front of the NCCL a program
//! links, or opened by path (vLLM's and SGLang's pynccl). docs/drop-in.md
//! says how to use it and what it does not intercept.
//!
//! Every exported function is `unsafe extern "C"` with NCCL's own contract
//! (nccl.h); each body runs under `ffi::guard`, so no panic crosses the C
//! boundary.
#![allow(clippy::missing_safety_doc)] // the contract of every export is nccl.h's
#![allow(non_snake_case)]
// exported names are NCCL's
// Unsafe only at the C boundary: the exports and the calls into the real
// NCCL through its function pointers (ffi's `call_real!` and `forward!`
// macros, used by forward/ too). Every block
// says why it is sound; the modules marked forbid(unsafe_code) hold none.
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

mod api;
mod at_load;
#[forbid(unsafe_code)]
mod cuda;
mod ffi;
mod forward;
mod group;
mod host;
mod real_nccl;
#[forbid(unsafe_code)]
mod route;
#[forbid(unsafe_code)]
mod settings;
mod standalone;
#[forbid(unsafe_code)]
mod types;

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// symbols.txt is what the exports test checks in the built library.
    #[test]
    fn symbols_txt_lists_exactly_the_exported_functions() {
        let listed: BTreeSet<&str> = include_str!("../symbols.txt")
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .collect();
        let defined: BTreeSet<&str> = forward::passthrough::FORWARDED
            .iter()
            .chain(api::INTERCEPTED)
            .copied()
            .collect();
        assert_eq!(
            forward::passthrough::FORWARDED.len() + api::INTERCEPTED.len(),
            defined.len(),
            "a function is both forwarded and intercepted"
        );
        assert_eq!(listed, defined);
    }

    /// The functions vLLM's pynccl wrapper binds (vllm/distributed/
    /// device_communicators/pynccl_wrapper.py) must all be there.
    #[test]
    fn every_function_pynccl_binds_is_exported() {
        let defined: BTreeSet<&str> = forward::passthrough::FORWARDED
            .iter()
            .chain(api::INTERCEPTED)
            .copied()
            .collect();
        for f in [
            "ncclGetErrorString",
            "ncclGetVersion",
            "ncclGetUniqueId",
            "ncclCommInitRank",
            "ncclAllReduce",
            "ncclAllGather",
            "ncclReduceScatter",
            "ncclSend",
            "ncclRecv",
            "ncclBroadcast",
            "ncclCommDestroy",
            "ncclGroupStart",
            "ncclGroupEnd",
            "ncclCommWindowRegister",
            "ncclCommWindowDeregister",
        ] {
            assert!(defined.contains(f), "{f} is not exported");
        }
    }
}
