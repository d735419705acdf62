//! Compiles the forward's kernel family (common.cuh then forward.cu, as
//! `kernels::source` gives it to the loader) with NVRTC for every
//! architecture the library's compile test covers, and checks that both
//! kernels the forward looks up are in the cubin. Needs no GPU; skips only
//! when NVRTC cannot be loaded and TPCOMM_REQUIRE_NVRTC is unset, and says so.

use tpcomm::cuda::compile::compile_uncached;
use tpcomm_forward::kernels::{source, KERNELS, NAME};

const ARCHS: &[(i32, i32)] = &[(8, 0), (9, 0), (10, 0), (12, 0)];

/// FNV-1a of the cubin, as the library's compile test prints it.
fn fingerprint(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf29ce484222325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100000001b3)
    })
}

#[test]
fn the_forward_kernels_compile_for_every_architecture_without_warnings() {
    if let Err(e) = tpcomm::cuda::ensure_nvrtc() {
        if tpcomm::env::REQUIRE_NVRTC
            .get_or(false)
            .unwrap_or_else(|e| panic!("{e}"))
        {
            panic!("TPCOMM_REQUIRE_NVRTC is set but NVRTC cannot be loaded: {e}");
        }
        eprintln!("SKIPPED: NVRTC not found ({e}); run scripts/install_nvrtc.sh and add its directory to LD_LIBRARY_PATH");
        return;
    }
    let mut failures = Vec::new();
    for &arch in ARCHS {
        let c = match compile_uncached(source(), NAME, arch) {
            Ok(c) => c,
            Err(e) => {
                failures.push(format!("{NAME} sm_{}{}: {e}", arch.0, arch.1));
                continue;
            }
        };
        if !c.log.is_empty() {
            failures.push(format!(
                "{NAME} sm_{}{} compiled with warnings:\n{}",
                arch.0, arch.1, c.log
            ));
        }
        eprintln!(
            "{NAME} sm_{}{}: {} bytes of cubin, fingerprint {:016x} (NVRTC {}.{})",
            arch.0,
            arch.1,
            c.cubin.len(),
            fingerprint(&c.cubin),
            c.nvrtc.0,
            c.nvrtc.1
        );
        for k in KERNELS {
            if !c.cubin.windows(k.len()).any(|w| w == k.as_bytes()) {
                failures.push(format!(
                    "{NAME} sm_{}{}: kernel {k} missing from the cubin",
                    arch.0, arch.1
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
