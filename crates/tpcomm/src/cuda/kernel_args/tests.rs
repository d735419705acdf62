use super::*;

const HEADER: &str = include_str!("../kernels/args.cuh");

#[test]
fn the_committed_header_is_what_the_rust_structs_generate() {
    let want = check_header();
    if std::env::var_os("TPCOMM_WRITE_ARGS_HEADER").is_some() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/src/cuda/kernels/args.cuh");
        std::fs::write(path, &want).expect("write kernels/args.cuh");
    }
    assert!(
        HEADER == want,
        "kernels/args.cuh differs from the structs of src/cuda/kernel_args.rs; \
         run `TPCOMM_WRITE_ARGS_HEADER=1 cargo test -p tpcomm --lib kernel_args` to write it"
    );
}

#[test]
fn c_layout_of_the_c_types_equals_the_rust_layout() {
    for l in ALL {
        let (offsets, size, _) = l.c_layout();
        assert_eq!(size, l.size, "{}: C size differs from size_of", l.rust);
        for (f, c) in l.fields.iter().zip(offsets) {
            assert_eq!(
                c, f.offset,
                "{}.{}: C offset differs from offset_of!",
                l.rust, f.rust
            );
        }
    }
}

#[test]
fn the_header_checks_every_field_of_every_struct() {
    for l in ALL {
        let needle = format!("#define TPCOMM_ARGS_CHECK_{} \\\n", l.c);
        let start = HEADER.find(&needle).expect("a macro per struct") + needle.len();
        let body = &HEADER[start..];
        let body = &body[..body.find("\n\n").unwrap_or(body.len())];
        assert!(body.contains(&format!("sizeof(struct {}) == {}", l.c, l.size)));
        assert_eq!(l.fields[0].offset, 0, "{}: first field not at 0", l.rust);
        for f in &l.fields[1..] {
            let check = format!(
                "\"{c}.{fc}: offset differs from {r}.{fr}\"",
                c = l.c,
                fc = f.c,
                r = l.rust,
                fr = f.rust
            );
            assert!(body.contains(&check), "{}: no {check}", l.rust);
        }
    }
}

/// Each struct's .cu file defines it and invokes its check right after
/// the closing brace, so no kernel compiles against a struct that the
/// header does not check.
#[test]
fn every_kernel_source_checks_its_struct_after_defining_it() {
    let sources: &[(&str, &str)] = &[
        ("allreduce.cu", include_str!("../kernels/allreduce.cu")),
        ("collectives.cu", include_str!("../kernels/collectives.cu")),
        ("fused.cu", include_str!("../kernels/fused.cu")),
        (
            "host_allreduce.cu",
            include_str!("../kernels/host_allreduce.cu"),
        ),
        (
            "host_collectives.cu",
            include_str!("../kernels/host_collectives.cu"),
        ),
        ("quant.cu", include_str!("../kernels/quant.cu")),
        (
            "quant_gathered.cu",
            include_str!("../kernels/quant_gathered.cu"),
        ),
        ("gathered.cu", include_str!("../kernels/gathered.cu")),
        ("p2p_check.cu", include_str!("../kernels/p2p_check.cu")),
    ];
    for l in ALL {
        let src = sources
            .iter()
            .find(|(n, _)| *n == l.file)
            .map(|(_, s)| *s)
            .expect("the struct's file is listed");
        let def = format!("\nstruct {} {{\n", l.c);
        let at = src
            .find(&def)
            .unwrap_or_else(|| panic!("{} defines {}", l.file, l.c));
        let after = &src[at + def.len()..];
        let close = after.find("\n};\n").expect("the struct closes") + 4;
        assert!(
            after[close..].starts_with(&format!("TPCOMM_ARGS_CHECK_{}\n", l.c)),
            "{}: struct {} is not followed by TPCOMM_ARGS_CHECK_{}",
            l.file,
            l.c,
            l.c
        );
        // Every field the header names is a field of the C struct.
        let body = &after[..close];
        for f in l.fields {
            assert!(
                body.split(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .any(|w| w == f.c),
                "{}: struct {} has no field {}",
                l.file,
                l.c,
                f.c
            );
        }
    }
}
