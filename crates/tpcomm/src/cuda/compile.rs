//! Run-time compilation of the kernels with NVRTC for the exact compute
//! capability of the device in hand, cached on disk by (source hash,
//! architecture, NVRTC version).

use crate::error::{Error, Result};
use crate::sys::cuda as raw;
use std::path::PathBuf;

/// One kernel family's source as NVRTC compiles it: the family's defines,
/// then kernels/common.cuh (the helpers every family uses), then
/// kernels/args.cuh (the layout checks of the kernel-argument structs,
/// generated from kernel_args.rs), then the family's own files, each file after a `#line` directive so that compiler
/// messages name the file and line they are about. The disk cache hashes
/// this whole string, so an edit of common.cuh or args.cuh recompiles every
/// family.
macro_rules! family_source {
    ($defines:literal; $($file:literal),+) => {
        concat!(
            $defines,
            "#line 1 \"common.cuh\"\n",
            include_str!("kernels/common.cuh"),
            "#line 1 \"args.cuh\"\n",
            include_str!("kernels/args.cuh"),
            $("#line 1 \"", $file, "\"\n", include_str!(concat!("kernels/", $file)),)+
        )
    };
}

/// The helpers every kernel family starts with.
pub const COMMON_SRC: &str = include_str!("kernels/common.cuh");

/// The peer-to-peer all-reduce kernels (one-shot, two-shot).
pub const ALLREDUCE_SRC: &str = family_source!(""; "allreduce.cu");

/// The fused all-reduce + residual + RMSNorm kernels, which reuse
/// allreduce.cu's protocol pieces.
pub const FUSED_SRC: &str = family_source!(""; "allreduce.cu", "fused.cu");

/// The host-memory all-reduce kernels, with the forms they were verified
/// with (TPCOMM_HOST_FORMS: V16 at 4-byte alignment and two 16-bit element
/// forms; see common.cuh).
pub const HOST_ALLREDUCE_SRC: &str =
    family_source!("#define TPCOMM_HOST_FORMS\n"; "host_allreduce.cu");

/// The quantized (int8 / fp8 wire) all-reduce kernels of both GPU
/// transports (src/cuda/quant/mod.rs), and the pack and unpack-sum halves of its
/// gathered form (src/cuda/quant/gathered.rs), both on quant_math.cu's
/// arithmetic (what the CPU model mirrors).
pub const QUANT_SRC: &str = family_source!(""; "quant_math.cu", "quant.cu", "quant_gathered.cu");

/// All-gather, reduce-scatter and broadcast on the P2P all-reduce's buffers
/// and epoch (src/cuda/collectives.rs), which reuse allreduce.cu's protocol
/// pieces.
pub const COLLECTIVES_SRC: &str = family_source!(""; "allreduce.cu", "collectives.cu");

/// All-gather, reduce-scatter and broadcast through pinned host memory
/// (src/cuda/transport/pinned/collectives.rs), which reuse host_allreduce.cu's
/// protocol pieces, with V16 as that family has it.
pub const HOST_COLLECTIVES_SRC: &str =
    family_source!("#define TPCOMM_HOST_FORMS\n"; "host_allreduce.cu", "host_collectives.cu");
/// The P2P check run at communicator creation (src/cuda/transport/p2p/check.rs).
pub const P2P_CHECK_SRC: &str = family_source!(""; "p2p_check.cu");

/// The reduction of gathered blocks, every NCCL type and op
/// (src/cuda/gathered.rs), for the drop-in's standalone mode.
pub const GATHERED_SRC: &str = family_source!(""; "gathered.cu");

/// (name, source) of every kernel family, for the compile test; the name is
/// the one NVRTC and the disk cache know the family by.
pub const SOURCES: &[(&str, &str)] = &[
    ("allreduce.cu", ALLREDUCE_SRC),
    ("fused.cu", FUSED_SRC),
    ("host_allreduce.cu", HOST_ALLREDUCE_SRC),
    ("quant.cu", QUANT_SRC),
    ("collectives.cu", COLLECTIVES_SRC),
    ("host_collectives.cu", HOST_COLLECTIVES_SRC),
    ("p2p_check.cu", P2P_CHECK_SRC),
    ("gathered.cu", GATHERED_SRC),
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
    if let Some(d) = crate::env::CACHE_DIR.checked_value() {
        return Some(d);
    }
    if let Some(d) = crate::env::XDG_CACHE_HOME.checked_value() {
        return Some(d.join("tpcomm"));
    }
    crate::env::HOME
        .checked_value()
        .map(|h| h.join(".cache").join("tpcomm"))
}

/// FNV-1a: stable across Rust versions, unlike std's hasher, so cache keys
/// survive a rebuild.
pub(crate) fn fnv1a(parts: &[&[u8]]) -> u64 {
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
        // Only this user's own files (no links, nobody else may write them):
        // a cubin is code the GPU runs, and a cache directory may be shared
        // (TPCOMM_CACHE_DIR=/tmp/...). Anything else is a miss.
        if let Ok(Some(cubin)) = crate::meet::private_file::read(p) {
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
        // 0600 under an unpredictable name, renamed into place: a concurrent
        // reader (another rank) never sees half a file, and nothing is
        // written through a planted link.
        if ensure_private_dir(p.parent()) {
            let _ = crate::meet::private_file::write(p, &compiled.cubin);
        }
    }
    Ok(compiled)
}

/// Creates `dir` (and its parents) when missing, new ones mode 0700; true
/// when it exists as a directory afterwards.
pub(crate) fn ensure_private_dir(dir: Option<&std::path::Path>) -> bool {
    use std::os::unix::fs::DirBuilderExt;
    let Some(dir) = dir else { return false };
    let _ = std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir);
    dir.is_dir()
}

#[cfg(test)]
mod tests;
