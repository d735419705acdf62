//! Compiles the host-path kernels (kernels/host_allreduce.cu) with NVRTC for
//! every architecture tpcomm supports. Needs no GPU; skips only when NVRTC
//! cannot be loaded and TPCOMM_REQUIRE_NVRTC is unset, and says so.

use tpcomm::cuda::compile::compile_uncached;
use tpcomm::cuda::host_path::HOST_ALLREDUCE_SRC;

const ARCHS: &[(i32, i32)] = &[(8, 0), (9, 0), (10, 0), (12, 0)];

#[test]
fn host_path_kernels_compile_for_every_architecture_without_warnings() {
    if let Err(e) = tpcomm::cuda::ensure_nvrtc() {
        if std::env::var_os("TPCOMM_REQUIRE_NVRTC").is_some() {
            panic!("TPCOMM_REQUIRE_NVRTC is set but NVRTC cannot be loaded: {e}");
        }
        eprintln!("SKIPPED: NVRTC not found ({e}); run scripts/install_nvrtc.sh and add its directory to LD_LIBRARY_PATH");
        return;
    }
    let mut failures = Vec::new();
    for &arch in ARCHS {
        match compile_uncached(HOST_ALLREDUCE_SRC, "host_allreduce.cu", arch) {
            Ok(c) if c.log.is_empty() => {
                assert!(
                    c.cubin.len() > 1000,
                    "sm_{}{}: cubin of {} bytes",
                    arch.0,
                    arch.1,
                    c.cubin.len()
                );
                for k in ["ll", "chunked"] {
                    for t in ["f32", "f16", "bf16"] {
                        let sym = format!("tpcomm_host_{k}_{t}");
                        assert!(
                            c.cubin.windows(sym.len()).any(|w| w == sym.as_bytes()),
                            "sm_{}{}: kernel {sym} missing from the cubin",
                            arch.0,
                            arch.1
                        );
                    }
                }
            }
            Ok(c) => failures.push(format!(
                "sm_{}{} compiled with warnings:\n{}",
                arch.0, arch.1, c.log
            )),
            Err(e) => failures.push(format!("sm_{}{}: {e}", arch.0, arch.1)),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
