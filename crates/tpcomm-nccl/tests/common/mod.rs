//! What the drop-in's integration tests share: where cargo put the built
//! library, and the fake NCCL (tests/fake/fake_nccl.c) compiled with the
//! system C compiler ($CC, else cc).

use std::path::PathBuf;
use std::process::Command;

/// target/<profile>: the folder above this test executable's `deps/`.
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable's path");
    exe.parent()
        .and_then(|d| d.parent())
        .expect("a test executable under target/<profile>/deps")
        .to_path_buf()
}

/// The fake NCCL, built once per test process (tests run as threads, and a
/// rebuild under a child that is loading the file would break it) under a
/// name of its own (`tag` and the pid), so test executables running at once
/// never write each other's file.
pub fn fake_nccl(tag: &str) -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let dir = target_dir().join("fake-nccl");
            std::fs::create_dir_all(&dir).expect("create the fake NCCL's folder");
            let out = dir.join(format!("libnccl.so.2.{tag}.{}", std::process::id()));
            let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fake/fake_nccl.c");
            let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
            let st = Command::new(&cc)
                .args(["-shared", "-fPIC", "-O1", "-o"])
                .arg(&out)
                .arg(&src)
                .status()
                .unwrap_or_else(|e| {
                    panic!("a C compiler ({cc}) is needed to build the fake NCCL: {e}")
                });
            assert!(st.success(), "compiling {} failed", src.display());
            out
        })
        .clone()
}
