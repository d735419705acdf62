use super::*;

#[test]
fn configurable_transports_parse_back_and_nccl_is_refused_with_a_reason() {
    for t in [Transport::Auto, Transport::Cuda, Transport::Host] {
        assert_eq!(t.name().parse::<Transport>().unwrap(), t);
    }
    assert_eq!("p2p".parse::<Transport>().unwrap(), Transport::Cuda);
    let e = "nccl".parse::<Transport>().unwrap_err().to_string();
    assert!(e.contains("nccl_fallback"), "{e}");
    assert!("nvlink".parse::<Transport>().is_err());
}

/// Candidates sort by transport, and tables are written in that order:
/// the committed default table must not change when variants are added.
#[test]
fn the_order_is_cuda_host_nccl_then_auto() {
    let mut v = vec![
        Transport::Auto,
        Transport::Nccl,
        Transport::Host,
        Transport::Cuda,
    ];
    v.sort();
    assert_eq!(
        v,
        [
            Transport::Cuda,
            Transport::Host,
            Transport::Nccl,
            Transport::Auto
        ]
    );
    assert_eq!(Transport::default(), Transport::Auto);
    assert_eq!(serde_json::to_string(&Transport::Host).unwrap(), "\"host\"");
}
