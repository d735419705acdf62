//! A bench rank's GPU, shared by `tpcomm bench --device gpu` and
//! `tpcomm bench forward`: the device (round-robin over the visible ones, so
//! more ranks than GPUs share them), its context and the one stream the rank
//! works on; and how a cudarc driver error becomes tpcomm's.

use std::sync::Arc;
use tpcomm::cuda::cudarc::driver::{
    sys, CudaContext, CudaEvent, CudaGraph, CudaStream, DriverError,
};
use tpcomm::cuda::open_context;
use tpcomm::{Error, Result};

/// A failed driver call `call` as tpcomm's error.
pub(crate) fn cuda(call: &'static str) -> impl Fn(DriverError) -> Error {
    move |e| Error::Cuda {
        call: call.into(),
        detail: e.to_string(),
    }
}

/// Microseconds per call of `calls` calls that `run` enqueues on `stream`,
/// between events `ev0` and `ev1` (waited for here).
pub(crate) fn time_us(
    (ev0, ev1): (&CudaEvent, &CudaEvent),
    stream: &CudaStream,
    calls: usize,
    run: impl FnOnce() -> Result<()>,
) -> Result<f64> {
    ev0.record(stream).map_err(cuda("cuEventRecord"))?;
    run()?;
    ev1.record(stream).map_err(cuda("cuEventRecord"))?;
    ev1.synchronize().map_err(cuda("cuEventSynchronize"))?;
    Ok(ev0.elapsed_ms(ev1).map_err(cuda("cuEventElapsedTime"))? as f64 * 1000.0 / calls as f64)
}

/// The graph of what `record` enqueues on `stream` (captured thread-local),
/// uploaded: the capture ends even when `record` fails (its error then
/// comes after a failure to end the capture).
pub(crate) fn capture_graph(
    stream: &Arc<CudaStream>,
    record: impl FnOnce() -> Result<()>,
) -> Result<CudaGraph> {
    stream
        .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .map_err(cuda("cuStreamBeginCapture"))?;
    let recorded = record();
    let graph = stream
        .end_capture(sys::CUgraphInstantiate_flags(0))
        .map_err(cuda("cuStreamEndCapture"))?;
    recorded?;
    let graph = graph.ok_or_else(|| Error::Cuda {
        call: "cuStreamEndCapture".into(),
        detail: "empty graph".into(),
    })?;
    graph.upload().map_err(cuda("cuGraphUpload"))?;
    Ok(graph)
}

/// This rank's GPU: (the visible GPUs, its ordinal, its context, its stream).
pub(crate) struct RankDevice {
    pub gpus: usize,
    pub device: usize,
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
}

/// Opens rank `rank`'s GPU, `rank % visible GPUs`, and a stream on it.
/// The caller uses every buffer it makes on that one stream only.
pub(crate) fn open_rank_device(rank: usize) -> Result<RankDevice> {
    let gpus = CudaContext::device_count()
        .map_err(cuda("cuDeviceGetCount"))?
        .max(1) as usize;
    let device = rank % gpus;
    let ctx = open_context(device)?;
    // SAFETY: the rank uses every buffer on its one stream (the contract
    // above), so cudarc's per-buffer events are not needed (and must not be
    // recorded into graphs).
    unsafe { ctx.disable_event_tracking() };
    let stream = ctx.new_stream().map_err(cuda("cuStreamCreate"))?;
    Ok(RankDevice {
        gpus,
        device,
        ctx,
        stream,
    })
}
