use super::*;

/// Each family's own files, as they are on disk.
const FAMILY_FILES: &[(&str, &str)] = &[
    ("allreduce.cu", include_str!("../kernels/allreduce.cu")),
    ("fused.cu", include_str!("../kernels/fused.cu")),
    (
        "host_allreduce.cu",
        include_str!("../kernels/host_allreduce.cu"),
    ),
    ("quant_math.cu", include_str!("../kernels/quant_math.cu")),
    ("quant.cu", include_str!("../kernels/quant.cu")),
    (
        "quant_gathered.cu",
        include_str!("../kernels/quant_gathered.cu"),
    ),
    ("collectives.cu", include_str!("../kernels/collectives.cu")),
    (
        "host_collectives.cu",
        include_str!("../kernels/host_collectives.cu"),
    ),
    ("gathered.cu", include_str!("../kernels/gathered.cu")),
];

/// The names a CUDA source defines at file level: typedefs, macros,
/// structs and functions (a function's name is the word before its first
/// parenthesis on a line that declares it `__device__` or `__global__`).
/// Good enough for these files' one-definition-per-line style.
fn defined_names(src: &str) -> Vec<String> {
    let word_before = |s: &str| -> Option<String> {
        let s = s.trim_end();
        let start = s
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .map_or(0, |i| i + 1);
        (start < s.len()).then(|| s[start..].to_string())
    };
    let mut names = Vec::new();
    for line in src.lines() {
        let l = line.trim_start();
        if let Some(rest) = l.strip_prefix("typedef ") {
            names.extend(word_before(rest.trim_end_matches(';')));
        } else if let Some(rest) = l.strip_prefix("#define ") {
            names.extend(rest.split_whitespace().next().map(str::to_string));
        } else if let Some(rest) = l.strip_prefix("struct ") {
            if let Some(head) = rest.split('{').next().filter(|_| rest.contains('{')) {
                names.extend(word_before(head));
            }
        } else if (l.starts_with("__device__") || l.contains("__global__")) && l.contains('(') {
            // Skip the attribute arguments: __launch_bounds__(N), __align__(N).
            let mut body = l;
            while let Some(i) = body.find('(') {
                let head = &body[..i];
                if head.ends_with("__launch_bounds__") || head.ends_with("__align__") {
                    body = &body[i + 1..];
                    body = &body[body.find(')').map_or(body.len(), |j| j + 1)..];
                } else {
                    names.extend(word_before(head));
                    break;
                }
            }
        }
    }
    names
}

#[test]
fn the_name_finder_sees_every_kind_of_definition() {
    let src = "typedef unsigned int u32;\n#define N 8\nstruct __align__(16) V {\n\
               __device__ __forceinline__ u32 f(u32 x) {\n\
               template <typename T>\n__device__ __noinline__ V g(const V* p,\n\
               extern \"C\" __global__ void __launch_bounds__(512, 1) k(A a) {}\n\
               static __device__ __forceinline__ void unpack(V v) {\n    f(1);\n";
    let mut found = defined_names(src);
    found.sort();
    assert_eq!(found, ["N", "V", "f", "g", "k", "u32"]);
}

#[test]
fn no_family_file_defines_again_what_common_cuh_defines() {
    let common = defined_names(COMMON_SRC);
    for helper in [
        "u32",
        "u64",
        "u16",
        "V16",
        "TPCOMM_V16_ALIGN",
        "TPCOMM_MAX_WORLD",
        "TPCOMM_EPOCH_SHIFT",
        "TPCOMM_EPOCH_UNIT",
        "ld_acquire_sys_u32",
        "st_release_sys_u32",
        "F32",
        "Halves",
        "BF16",
        "F16",
        "sentinel_vec",
        "words_have_sentinel",
        "canon_word32",
        "halves_have_sentinel",
        "canon_halves",
        "canon",
        "ld_volatile_v4",
        "ld_volatile_u32",
        "ld_volatile_u64",
        "globaltimer",
        "Status",
        "bf16_to_f32",
        "f32_to_bf16",
        "f16_to_f32",
        "f32_to_f16",
        "load_input",
        "store_output",
    ] {
        assert!(
            common.iter().any(|n| n == helper),
            "common.cuh should define {helper}; found {common:?}"
        );
    }
    let mut again = Vec::new();
    for (file, src) in FAMILY_FILES {
        for name in defined_names(src) {
            if common.contains(&name) {
                again.push(format!("{file} defines {name}, which common.cuh defines"));
            }
        }
    }
    assert!(again.is_empty(), "{}", again.join("\n"));
}

#[test]
fn every_family_is_common_cuh_then_its_own_files() {
    for (name, src) in SOURCES {
        let at = src
            .find(COMMON_SRC)
            .unwrap_or_else(|| panic!("{name} lacks common.cuh"));
        assert!(
            !src[at + COMMON_SRC.len()..].contains(COMMON_SRC),
            "{name} has common.cuh twice"
        );
        assert!(
            src[at..].contains(&format!("#line 1 \"{name}\"")),
            "{name}: its own file must follow common.cuh"
        );
    }
    // Only the host path (and the family built on its file) asks for
    // the forms it was verified with.
    for (name, src) in SOURCES {
        let defines = &src[..src.find(COMMON_SRC).unwrap()];
        assert_eq!(
            defines.contains("#define TPCOMM_HOST_FORMS"),
            *name == "host_allreduce.cu" || *name == "host_collectives.cu",
            "{name}: {defines:?}"
        );
    }
    for (file, own) in FAMILY_FILES {
        assert!(
            SOURCES.iter().any(|(_, src)| src.contains(own)),
            "{file} is in no family"
        );
    }
}
