//! `tpcomm probe` as a user runs it, on a machine without GPUs (CI).

use std::process::Command;

fn tpcomm() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tpcomm"))
}

#[test]
fn probe_without_a_usable_gpu_fails_with_a_helpful_message_not_a_panic() {
    // An empty CUDA_VISIBLE_DEVICES hides every GPU, so this holds on a
    // machine with GPUs too: either no driver at all or no visible GPU.
    let out = tpcomm()
        .args(["probe", "--no-copy-test"])
        .env("CUDA_VISIBLE_DEVICES", "")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "probe succeeded without GPUs: {stderr}"
    );
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(stderr.starts_with("tpcomm probe: "), "{stderr}");
    assert!(
        stderr.contains("no NVIDIA driver") || stderr.contains("reports no CUDA GPU"),
        "the message should say what is missing: {stderr}"
    );
    assert!(out.stdout.is_empty(), "nothing on stdout on failure");
}

const FILE: &str = r#"
[[gpus]]
index = 0
name = "NVIDIA L40S"
[[gpus]]
index = 1
name = "NVIDIA L40S"
[[pairs]]
a = 0
b = 1
link = "pcie-host-bridge"
"#;

#[test]
fn probe_from_a_file_prints_the_table_and_json() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("box.toml");
    std::fs::write(&path, FILE).unwrap();

    let out = tpcomm()
        .args(["probe", "--from"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("NVIDIA L40S"), "{text}");
    assert!(text.contains("PHB"), "{text}");
    assert!(text.contains("machine class: pcie-p2p"), "{text}");

    let json_path = dir.path().join("out.json");
    let out = tpcomm()
        .args(["probe", "--from"])
        .arg(&path)
        .arg("--json")
        .arg(&json_path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
    assert_eq!(v["machine_class"], "pcie-p2p");
    assert_eq!(v["pairs"][0]["link"], "pcie-host-bridge");

    let out = tpcomm()
        .args(["probe", "--json", "--from"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["fingerprint"].as_str().unwrap().starts_with("v1-"));
}

#[test]
fn probe_from_a_broken_file_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("broken.toml");
    std::fs::write(
        &path,
        "[[gpus]]\nindex = 0\nname = \"A\"\n[[gpus]]\nindex = 1\nname = \"A\"\n",
    )
    .unwrap();
    let out = tpcomm()
        .args(["probe", "--from"])
        .arg(&path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("pair (0, 1) is missing"), "{stderr}");
}
