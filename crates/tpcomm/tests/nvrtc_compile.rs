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
        &["tpcomm_host_delta", "tpcomm_host_chunked"],
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
    (
        "gathered.cu",
        &["tpcomm_reduce_gathered"],
        &[
            "i8", "u8", "i32", "u32", "i64", "u64", "f16", "f32", "f64", "bf16", "f8e4m3", "f8e5m2",
        ],
    ),
    ("gathered.cu", &["tpcomm_expand"], &["bytes", "immediate"]),
];

/// FNV-1a of the cubin.
fn fingerprint(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf29ce484222325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100000001b3)
    })
}

/// Each (family, source, arch) compiled, in the order given, on as many threads as the
/// machine has cores (NVRTC compiles separate programs concurrently; one at a time this
/// test took 3 minutes of a 2-core CI machine).
fn compile_all(
    jobs: &[(&str, &str, (i32, i32))],
) -> Vec<tpcomm::Result<tpcomm::cuda::compile::Compiled>> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;
    let next = AtomicUsize::new(0);
    let out: Vec<Mutex<Option<_>>> = jobs.iter().map(|_| Mutex::new(None)).collect();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    std::thread::scope(|sc| {
        for _ in 0..threads.min(jobs.len()) {
            sc.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(&(name, src, arch)) = jobs.get(i) else {
                    break;
                };
                let r = compile_uncached(src, name, arch);
                *out[i].lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
            });
        }
    });
    out.into_iter()
        .map(|m| {
            m.into_inner()
                .unwrap_or_else(|p| p.into_inner())
                .expect("every job ran")
        })
        .collect()
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
    let jobs: Vec<(&str, &str, (i32, i32))> = SOURCES
        .iter()
        .flat_map(|&(name, src)| ARCHS.iter().map(move |&arch| (name, src, arch)))
        .collect();
    let compiled = compile_all(&jobs);
    for (&(name, _, arch), result) in jobs.iter().zip(compiled) {
        let c = match result {
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
        for (_, stems, types) in KERNELS.iter().filter(|(f, _, _)| *f == name) {
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
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// One function's machine code in a cubin: the bytes of its `.text.NAME`
/// section and its flags, with the resources the cubin's `.nv.info` records
/// for it and the device functions compiled into it (registers, frame and
/// stack sizes), hashed. Symbol indices, which shift when other kernels are
/// added or deleted, and the inner functions' names, which carry the C++
/// names of their template arguments, are left out.
struct FunctionCode {
    section: String,
    size: u64,
    fingerprint: u64,
}

fn le(bytes: &[u8], at: usize, n: usize) -> Option<u64> {
    let b = bytes.get(at..at + n)?;
    Some(b.iter().rev().fold(0u64, |v, &x| (v << 8) | x as u64))
}

struct Section<'a> {
    name: &'a str,
    flags: u64,
    bytes: &'a [u8],
}

fn c_str(bytes: &[u8], at: usize) -> Option<&str> {
    let tail = bytes.get(at..)?;
    std::str::from_utf8(&tail[..tail.iter().position(|&b| b == 0)?]).ok()
}

/// The sections of an ELF64 file; `None` when it is not one.
fn sections(elf: &[u8]) -> Option<Vec<Section<'_>>> {
    if elf.get(..5)? != b"\x7fELF\x02" {
        return None;
    }
    let shoff = le(elf, 0x28, 8)? as usize;
    let shentsize = le(elf, 0x3a, 2)? as usize;
    let shnum = le(elf, 0x3c, 2)? as usize;
    let shstrndx = le(elf, 0x3e, 2)? as usize;
    let header = |i: usize| shoff + i * shentsize;
    let names_at = le(elf, header(shstrndx) + 0x18, 8)? as usize;
    (0..shnum)
        .map(|i| {
            let h = header(i);
            let nobits = le(elf, h + 4, 4)? == 8;
            let offset = le(elf, h + 0x18, 8)? as usize;
            let size = if nobits {
                0
            } else {
                le(elf, h + 0x20, 8)? as usize
            };
            Some(Section {
                name: c_str(elf, names_at + le(elf, h, 4)? as usize)?,
                flags: le(elf, h + 0x08, 8)?,
                bytes: elf.get(offset..offset + size)?,
            })
        })
        .collect()
}

/// (symbol name, attribute, value) of the `.nv.info` attributes that name a
/// symbol and a 32-bit value (register count, frame and stack sizes).
fn symbol_attributes(all: &[Section]) -> Option<Vec<(String, u8, u32)>> {
    let find = |n: &str| all.iter().find(|s| s.name == n);
    let (Some(info), Some(symtab), Some(strtab)) =
        (find(".nv.info"), find(".symtab"), find(".strtab"))
    else {
        return Some(Vec::new());
    };
    let (b, mut at, mut out) = (info.bytes, 0, Vec::new());
    while at + 2 <= b.len() {
        let (format, attr) = (b[at], b[at + 1]);
        let len = match format {
            // A value of its own size, after a 16-bit size.
            4 => 4 + le(b, at + 2, 2)? as usize,
            3 => 4,
            2 => 3,
            _ => 2,
        };
        if format == 4 && len == 12 {
            let symbol = le(b, at + 4, 4)? as usize;
            let value = le(b, at + 8, 4)? as u32;
            let name = c_str(strtab.bytes, le(symtab.bytes, symbol * 24, 4)? as usize)?;
            out.push((name.to_string(), attr, value));
        }
        at += len;
    }
    Some(out)
}

/// Every function of a cubin; `None` when it is not an ELF64 file.
fn functions(cubin: &[u8]) -> Option<Vec<FunctionCode>> {
    let all = sections(cubin)?;
    let attributes = symbol_attributes(&all)?;
    let mut out = Vec::new();
    for s in all.iter().filter(|s| s.name.starts_with(".text.")) {
        let function = &s.name[".text.".len()..];
        let inner = format!("${function}$");
        let mut tagged = s.bytes.to_vec();
        tagged.extend_from_slice(&s.flags.to_le_bytes());
        let mut own: Vec<(bool, u8, u32)> = attributes
            .iter()
            .filter(|(name, _, _)| name == function || name.starts_with(&inner))
            .map(|(name, attr, value)| (name == function, *attr, *value))
            .collect();
        own.sort_unstable();
        for (itself, attr, value) in own {
            tagged.extend_from_slice(&[itself as u8, attr]);
            tagged.extend_from_slice(&value.to_le_bytes());
        }
        out.push(FunctionCode {
            section: s.name.to_string(),
            size: s.bytes.len() as u64,
            fingerprint: fingerprint(&tagged),
        });
    }
    Some(out)
}

/// Per-function fingerprints of every family's cubin for every
/// architecture, to show that a refactor of the sources left the machine
/// code of every kept kernel (and of each device function it calls)
/// byte-identical. Runs only when asked:
///
/// - `TPCOMM_KERNEL_FINGERPRINTS_OUT=FILE` writes them (before the change);
/// - `TPCOMM_KERNEL_FINGERPRINTS_BASE=FILE` compares with such a file (after
///   it) and fails on any function whose code differs; functions that are
///   gone or new are listed, not failed.
///
/// Both runs need the same NVRTC (the file records its version).
#[test]
fn kept_kernels_compile_to_the_same_machine_code_when_asked() {
    let out = std::env::var_os("TPCOMM_KERNEL_FINGERPRINTS_OUT");
    let base = std::env::var_os("TPCOMM_KERNEL_FINGERPRINTS_BASE");
    if out.is_none() && base.is_none() {
        return;
    }
    tpcomm::cuda::ensure_nvrtc().expect("NVRTC is needed for kernel fingerprints");
    let (maj, min) = tpcomm::cuda::nvrtc_version().expect("nvrtcVersion");
    let mut lines = vec![format!("nvrtc {maj}.{min}")];
    for (name, src) in SOURCES {
        for &(a, b) in ARCHS {
            let c = compile_uncached(src, name, (a, b)).expect("compiles");
            let fns = functions(&c.cubin).expect("the cubin is an ELF64 file");
            for f in fns {
                lines.push(format!(
                    "{name} sm_{a}{b} {} {} {:016x}",
                    f.section, f.size, f.fingerprint
                ));
            }
        }
    }
    if let Some(path) = out {
        std::fs::write(&path, lines.join("\n") + "\n").expect("write the fingerprints");
        eprintln!("wrote {} function fingerprints", lines.len() - 1);
    }
    if let Some(path) = base {
        let text = std::fs::read_to_string(&path).expect("read the base fingerprints");
        let mut recorded = text.lines();
        assert_eq!(
            recorded.next(),
            Some(lines[0].as_str()),
            "the base was made with another NVRTC"
        );
        let key = |l: &str| {
            let f: Vec<&str> = l.split(' ').collect();
            (f[..3].join(" "), f[3..].join(" "))
        };
        let old: std::collections::BTreeMap<String, String> = recorded.map(key).collect();
        let new: std::collections::BTreeMap<String, String> =
            lines[1..].iter().map(|l| key(l)).collect();
        let (mut same, mut differ) = (0, Vec::new());
        for (k, v) in &new {
            match old.get(k) {
                Some(o) if o == v => same += 1,
                Some(o) => differ.push(format!("{k}: {o} -> {v}")),
                None => eprintln!("new: {k}"),
            }
        }
        for k in old.keys().filter(|k| !new.contains_key(*k)) {
            eprintln!("gone: {k}");
        }
        eprintln!("{same} functions byte-identical, {} differ", differ.len());
        assert!(differ.is_empty(), "{}", differ.join("\n"));
    }
}
