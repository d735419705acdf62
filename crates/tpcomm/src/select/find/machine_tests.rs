use super::*;
use crate::select::Transport;

fn machine(class: MachineClass) -> Machine {
    Machine {
        fingerprint: "v1-00000000000000aa".into(),
        class,
        driver: None,
        nccl: None,
    }
}

#[test]
fn a_machine_without_a_table_gets_its_class_defaults() {
    let m = machine(MachineClass::PcieP2p);
    let s = for_machine(Ok(&m), None, None, Transport::Cuda).unwrap();
    assert_eq!(s.class(), MachineClass::PcieP2p);
    assert!(s.source().contains("pcie-p2p"), "{}", s.source());
}

/// A rank that sees one GPU keeps the defaults of its transport's class,
/// never the single-GPU rule (which would send every call to NCCL).
#[test]
fn a_process_that_sees_one_gpu_falls_back_to_its_transports_class() {
    let m = machine(MachineClass::SingleGpu);
    let s = for_machine(Ok(&m), None, None, Transport::Cuda).unwrap();
    assert_eq!(s.class(), MachineClass::Nvlink);
    assert!(s.notes()[0].contains("sees one GPU"), "{:?}", s.notes());
    let s = for_machine(Ok(&m), None, None, Transport::Host).unwrap();
    assert_eq!(s.class(), MachineClass::PcieNop2p);
    let s = for_machine(Err("no driver"), None, None, Transport::Cuda).unwrap();
    assert!(s.notes()[0].contains("could not be probed (no driver)"));
}

#[test]
fn a_named_table_that_cannot_be_checked_is_an_error_saying_what_to_do() {
    let e = for_machine(
        Err("no driver"),
        Some("/t.toml".into()),
        None,
        Transport::Cuda,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains(ENV_TABLE) && e.contains("could not be probed"),
        "{e}"
    );
    assert!(e.contains("unset"), "{e}");
    // On a one-GPU view the named table is read and checked as anywhere.
    let m = machine(MachineClass::SingleGpu);
    let e = for_machine(
        Ok(&m),
        Some("/nonexistent/t.toml".into()),
        None,
        Transport::Cuda,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains(ENV_TABLE) && e.contains("/nonexistent/t.toml"),
        "{e}"
    );
}
