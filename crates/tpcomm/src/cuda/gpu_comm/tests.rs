use super::*;

#[test]
fn auto_goes_through_host_memory_when_any_rank_lacks_p2p() {
    assert_eq!(
        resolve_transport(Transport::Auto, &[true, true]),
        Transport::Cuda
    );
    assert_eq!(
        resolve_transport(Transport::Auto, &[true, false]),
        Transport::Host
    );
    assert_eq!(
        resolve_transport(Transport::Auto, &[false; 8]),
        Transport::Host
    );
    // Forced transports are kept whatever the hardware says.
    assert_eq!(
        resolve_transport(Transport::Host, &[true, true]),
        Transport::Host
    );
    assert_eq!(
        resolve_transport(Transport::Cuda, &[false, false]),
        Transport::Cuda
    );
}

/// NCCL is a route, not a transport of the kernels: asked for as one, the
/// communicator refuses before any GPU work, saying what to use.
#[test]
fn nccl_as_the_configured_transport_is_refused_with_what_to_do() {
    let mut cfg = CudaConfig::new(0, 2, 0);
    cfg.transport = Transport::Nccl;
    let rv = Rendezvous::Threads(crate::cuda::ThreadGroup::new(2));
    let e = GpuComm::new(&cfg, &rv).unwrap_err().to_string();
    assert!(e.contains("nccl_fallback"), "{e}");
}
