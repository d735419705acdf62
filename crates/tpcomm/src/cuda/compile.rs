//! Run-time compilation of the kernels with NVRTC for the exact compute
//! capability of the device in hand, cached on disk by (source hash,
//! architecture, NVRTC version).

use super::raw;
use crate::error::{Error, Result};
use std::path::PathBuf;

/// One kernel family's source as NVRTC compiles it: the family's defines,
/// then kernels/common.cuh (the helpers every family uses), then the
/// family's own files, each file after a `#line` directive so that compiler
/// messages name the file and line they are about. The disk cache hashes
/// this whole string, so an edit of common.cuh recompiles every family.
macro_rules! family_source {
    ($defines:literal; $($file:literal),+) => {
        concat!(
            $defines,
            "#line 1 \"common.cuh\"\n",
            include_str!("kernels/common.cuh"),
            $("#line 1 \"", $file, "\"\n", include_str!(concat!("kernels/", $file)),)+
        )
    };
}

/// The helpers every kernel family starts with.
pub const COMMON_SRC: &str = include_str!("kernels/common.cuh");

/// The peer-to-peer all-reduce kernels (one-shot, two-shot).
pub const ALLREDUCE_SRC: &str = family_source!(""; "allreduce.cu");

/// The fused all-reduce + residual + RMSNorm kernels, which reuse
/// allreduce.cu's protocol pieces, and the benchmark forward's element-wise
/// kernels, which use its conversions.
pub const FUSED_SRC: &str = family_source!(""; "allreduce.cu", "fused.cu", "forward.cu");

/// The host-memory all-reduce kernels, with V16 at the 4-byte alignment
/// they were verified with (see common.cuh).
pub const HOST_ALLREDUCE_SRC: &str =
    family_source!("#define TPCOMM_V16_ALIGN 4\n"; "host_allreduce.cu");

/// (name, source) of every kernel family, for the compile test; the name is
/// the one NVRTC and the disk cache know the family by.
pub const SOURCES: &[(&str, &str)] = &[
    ("allreduce.cu", ALLREDUCE_SRC),
    ("fused.cu", FUSED_SRC),
    ("host_allreduce.cu", HOST_ALLREDUCE_SRC),
];

/// Options shared by every compilation; part of the cache key.
fn options(arch: (i32, i32)) -> Vec<String> {
    vec![
        format!("--gpu-architecture=sm_{}{}", arch.0, arch.1),
        "--std=c++17".to_string(),
    ]
}

/// A compiled kernel image and how it was made.
pub struct Compiled {
    pub cubin: Vec<u8>,
    pub log: String,
    pub nvrtc: (i32, i32),
    pub from_cache: bool,
}

/// Compiles `src` for `sm_{arch}` without touching the cache (the compile test).
pub fn compile_uncached(src: &str, name: &str, arch: (i32, i32)) -> Result<Compiled> {
    let nvrtc = raw::nvrtc_version()?;
    let (cubin, log) = raw::nvrtc_compile(src, name, &options(arch))?;
    Ok(Compiled {
        cubin,
        log,
        nvrtc,
        from_cache: false,
    })
}

/// The cache directory: $TPCOMM_CACHE_DIR, else $XDG_CACHE_HOME/tpcomm, else
/// ~/.cache/tpcomm. None when no home directory is known.
pub fn cache_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("TPCOMM_CACHE_DIR") {
        return Some(PathBuf::from(d));
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return Some(PathBuf::from(d).join("tpcomm"));
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache").join("tpcomm"))
}

/// FNV-1a: stable across Rust versions, unlike std's hasher, so cache keys
/// survive a rebuild.
fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for p in parts {
        for b in p.iter() {
            h ^= *b as u64;
            h = h.wrapping_mul(0x100000001b3);
        }
        h ^= 0xff;
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

/// Refuses an NVRTC newer (by major version) than the driver: its cubins do
/// not load there.
pub fn check_nvrtc_against_driver() -> Result<((i32, i32), (i32, i32))> {
    let driver = raw::driver_version()?;
    let nvrtc = raw::nvrtc_version()?;
    if nvrtc.0 > driver.0 {
        return Err(Error::Library {
            library: "NVRTC".into(),
            detail: format!(
                "the NVRTC found first (CUDA {}.{}) is newer than the driver (CUDA {}.{}); code it compiles will not load. Put an NVRTC of CUDA {} or older first on LD_LIBRARY_PATH (e.g. pip install 'nvidia-cuda-nvrtc-cu{}') or upgrade the driver",
                nvrtc.0, nvrtc.1, driver.0, driver.1, driver.0, driver.0
            ),
        });
    }
    Ok((driver, nvrtc))
}

/// Compiles `src` for `sm_{arch}`, or reads the cubin a previous run cached.
/// A cache that cannot be read or written only costs a compilation.
pub fn compile_cached(src: &str, name: &str, arch: (i32, i32)) -> Result<Compiled> {
    let (_, nvrtc) = check_nvrtc_against_driver()?;
    let opts = options(arch).join(" ");
    let key = fnv1a(&[src.as_bytes(), opts.as_bytes()]);
    let stem = name.trim_end_matches(".cu");
    let file = format!(
        "{stem}-sm{}{}-nvrtc{}.{}-{key:016x}.cubin",
        arch.0, arch.1, nvrtc.0, nvrtc.1
    );
    let path = cache_dir().map(|d| d.join(&file));
    if let Some(p) = &path {
        if let Ok(cubin) = std::fs::read(p) {
            if !cubin.is_empty() {
                return Ok(Compiled {
                    cubin,
                    log: String::new(),
                    nvrtc,
                    from_cache: true,
                });
            }
        }
    }
    let compiled = compile_uncached(src, name, arch)?;
    if let Some(p) = &path {
        // Written under a unique name and renamed, so a concurrent reader
        // (another rank) never sees half a file.
        if let Some(dir) = p.parent() {
            let _ = std::fs::create_dir_all(dir);
            let tmp = dir.join(format!("{file}.{}.tmp", std::process::id()));
            if std::fs::write(&tmp, &compiled.cubin).is_ok() && std::fs::rename(&tmp, p).is_err() {
                let _ = std::fs::remove_file(&tmp);
            }
        }
    }
    Ok(compiled)
}
