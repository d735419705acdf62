//! Compiles every kernel family (common.cuh and the family's files, as the
//! loaders compile them) with NVRTC for every architecture tpcomm supports,
//! and checks that each kernel the loaders look up is in the cubin. Needs no
//! GPU: CI runs it with NVRTC from the `nvidia-cuda-nvrtc` wheel
//! (scripts/install_nvrtc.sh). It skips only when NVRTC cannot be loaded and
//! TPCOMM_REQUIRE_NVRTC is unset, and says so.

use tpcomm::cuda::compile::{compile_uncached, SOURCES};

const ARCHS: &[(i32, i32)] = &[(8, 0), (9, 0), (10, 0), (12, 0)];

/// (family, kernel name stems without the type suffix, suffixes).
const KERNELS: &[(&str, &[&str], &[&str])] = &[
    (
        "allreduce.cu",
        &["tpcomm_oneshot", "tpcomm_oneshot_small", "tpcomm_twoshot"],
        &["f32", "f16", "bf16"],
    ),
    (
        "fused.cu",
        &["tpcomm_fused_rmsnorm", "tpcomm_add_rmsnorm"],
        &["f32", "f16", "bf16"],
    ),
    (
        "host_allreduce.cu",
        &[
            "tpcomm_host_push",
            "tpcomm_host_delta",
            "tpcomm_host_ll",
            "tpcomm_host_chunked",
        ],
        &["f32", "f16", "bf16"],
    ),
    (
        "quant.cu",
        &[
            "tpcomm_quant_oneshot_int8",
            "tpcomm_quant_oneshot_fp8",
            "tpcomm_quant_twoshot_int8",
            "tpcomm_quant_twoshot_fp8",
        ],
        &["f32", "f16", "bf16"],
    ),
    (
        "collectives.cu",
        &[
            "tpcomm_all_gather",
            "tpcomm_reduce_scatter",
            "tpcomm_broadcast",
        ],
        &["f32", "f16", "bf16"],
    ),
    (
        "host_collectives.cu",
        &[
            "tpcomm_host_all_gather",
            "tpcomm_host_reduce_scatter",
            "tpcomm_host_broadcast",
        ],
        &["f32", "f16", "bf16"],
    ),
    ("p2p_check.cu", &["tpcomm_p2p_check"], &["store", "verify"]),
];

/// FNV-1a of the cubin.
fn fingerprint(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf29ce484222325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100000001b3)
    })
}

#[test]
fn every_kernel_compiles_for_every_architecture_without_warnings() {
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
    let (maj, min) = tpcomm::cuda::nvrtc_version().expect("nvrtcVersion");
    let families: Vec<&str> = SOURCES.iter().map(|(n, _)| *n).collect();
    for (family, _, _) in KERNELS {
        assert!(families.contains(family), "no family {family} in SOURCES");
    }
    let mut failures = Vec::new();
    for (name, src) in SOURCES {
        for &arch in ARCHS {
            let c = match compile_uncached(src, name, arch) {
                Ok(c) if c.log.is_empty() => c,
                Ok(c) => {
                    failures.push(format!(
                        "{name} sm_{}{} compiled with warnings:\n{}",
                        arch.0, arch.1, c.log
                    ));
                    continue;
                }
                Err(e) => {
                    failures.push(format!("{name} sm_{}{}: {e}", arch.0, arch.1));
                    continue;
                }
            };
            // The fingerprint lets a refactor of the sources show that the
            // machine code did not change (run with --nocapture before and
            // after, and compare).
            eprintln!(
                "{name} sm_{}{}: {} bytes of cubin, fingerprint {:016x} (NVRTC {maj}.{min})",
                arch.0,
                arch.1,
                c.cubin.len(),
                fingerprint(&c.cubin)
            );
            for (_, stems, types) in KERNELS.iter().filter(|(f, _, _)| f == name) {
                for stem in *stems {
                    for t in *types {
                        let sym = format!("{stem}_{t}");
                        if !c.cubin.windows(sym.len()).any(|w| w == sym.as_bytes()) {
                            failures.push(format!(
                                "{name} sm_{}{}: kernel {sym} missing from the cubin",
                                arch.0, arch.1
                            ));
                        }
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
