//! A bad value of a library variable fails communicator creation with an
//! error naming the variable, before any GPU is touched (so this runs on
//! machines without one). Each case runs in a child process, so the
//! environment of the other tests is left alone.

use std::process::Command;
use tpcomm::cuda::{CudaConfig, P2pTransport, PinnedTransport, Rendezvous, ThreadGroup};

const CHILD: &str = "TPCOMM_ENV_TEST_CHILD";

/// The child: creates a communicator of each GPU transport and prints the errors.
#[test]
fn child_creates_communicators() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let cfg = CudaConfig::new(0, 2, 0);
    let rv = Rendezvous::Threads(ThreadGroup::new(2));
    match P2pTransport::new(&cfg, &rv) {
        Ok(_) => println!("P2P: created"),
        Err(e) => println!("P2P: {e}"),
    }
    match PinnedTransport::new(&cfg, &rv) {
        Ok(_) => println!("HOST: created"),
        Err(e) => println!("HOST: {e}"),
    }
}

fn create_with(name: &str, value: &str) -> String {
    let out = Command::new(std::env::current_exe().expect("test executable"))
        .args(["--exact", "child_creates_communicators", "--nocapture"])
        .env(CHILD, "1")
        .env(name, value)
        .output()
        .expect("run the child");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

#[test]
fn bad_library_variables_fail_creation_naming_the_variable() {
    for (name, value, takes) in [
        ("TPCOMM_FUSED_SPREAD", "sometimes", "a boolean"),
        ("TPCOMM_HOST_CHUNK", "1 MiB", "from 16 KiB to 256 KiB"),
        ("TPCOMM_P2P_BLOCK", "100", "a multiple of 32"),
        ("TPCOMM_SELF_TUNE", "2", "a boolean"),
        ("TPCOMM_NCCL_FALLBACK", "sure", "a boolean"),
        ("TPCOMM_WIRE", "bf8", "exact, int8 or fp8"),
        ("TPCOMM_WIRE_MIN_BYTES", "lots", "a size"),
    ] {
        let out = create_with(name, value);
        for transport in ["P2P: ", "HOST: "] {
            let line = out
                .lines()
                .find(|l| l.starts_with(transport))
                .unwrap_or_else(|| panic!("{name}: no {transport} line in\n{out}"));
            assert!(
                line.contains(&format!(
                    "environment variable {name}={value:?} is not valid"
                )) && line.contains(takes),
                "{name}={value}: {line}"
            );
        }
    }
}
