//! `tpcomm._tpcomm`: the Rust half of the Python package (python/tpcomm).
//!
//! It holds a [`tpcomm::cuda::Communicator`] and takes tensors as what torch
//! gives without linking libtorch: a device address (`data_ptr()`), an
//! element count, an element type name and a CUDA stream handle
//! (`torch.cuda.current_stream().cuda_stream`). The checks that need torch
//! (device, contiguity, sizes of the tensors) live in `tpcomm/torch.py`; this
//! module is private to the package, and its callers vouch for the addresses.
//!
//! The ranks swap their set-up data through a Python callable (`exchange`),
//! so any channel the ranks already share serves: `tpcomm.torch` passes an
//! all-gather over a `torch.distributed` process group.
//!
//! Every library error becomes a Python exception of the matching class
//! (`tpcomm.TpcommError` and its subclasses) carrying the Rust message.
// Unsafe only where torch hands over raw device addresses and streams;
// every block says which of the caller's promises makes it sound.
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

use pyo3::create_exception;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tpcomm::cuda::fused::{add_rmsnorm, NormCall};
use tpcomm::cuda::{
    Call, Communicator as RustCommunicator, CudaConfig, Exchange, GpuComm, Launch, Rendezvous,
    StreamAllReduce, Transport, Turn,
};
use tpcomm::{Algo, ByteSize, DType, Error, ReduceOp};

create_exception!(
    _tpcomm,
    TpcommError,
    PyRuntimeError,
    "Base class of every error tpcomm raises; the message says what to do."
);
create_exception!(
    _tpcomm,
    InvalidArgumentError,
    TpcommError,
    "A value given to tpcomm is not valid."
);
create_exception!(
    _tpcomm,
    PeerTimeoutError,
    TpcommError,
    "A peer rank did not arrive within the timeout."
);
create_exception!(
    _tpcomm,
    MismatchError,
    TpcommError,
    "Ranks called a collective with different arguments."
);
create_exception!(
    _tpcomm,
    AbortedError,
    TpcommError,
    "The communicator can no longer be used; create new ones on every rank."
);
create_exception!(
    _tpcomm,
    OutOfMemoryError,
    TpcommError,
    "Not enough memory for what was asked."
);
create_exception!(
    _tpcomm,
    LibraryError,
    TpcommError,
    "A shared library (CUDA driver, NVRTC, NCCL, NVML) could not be loaded or used."
);
create_exception!(_tpcomm, CudaError, TpcommError, "A CUDA call failed.");
create_exception!(
    _tpcomm,
    DeviceError,
    TpcommError,
    "A kernel or a device-side wait reported an error."
);
create_exception!(
    _tpcomm,
    UnsupportedError,
    TpcommError,
    "Something this build or machine does not support."
);
create_exception!(
    _tpcomm,
    SystemCallError,
    TpcommError,
    "An operating system call failed."
);

/// The Python exception class of a library error, by variant.
fn to_py(e: Error) -> PyErr {
    let msg = e.to_string();
    match e {
        Error::InvalidArgument { .. } | Error::Units(_) => InvalidArgumentError::new_err(msg),
        Error::PeerTimeout { .. } => PeerTimeoutError::new_err(msg),
        Error::Mismatch { .. } => MismatchError::new_err(msg),
        Error::Aborted(_) => AbortedError::new_err(msg),
        Error::OutOfMemory { .. } => OutOfMemoryError::new_err(msg),
        Error::Os { .. } => SystemCallError::new_err(msg),
        Error::Library { .. } => LibraryError::new_err(msg),
        Error::Cuda { .. } => CudaError::new_err(msg),
        Error::Device { .. } => DeviceError::new_err(msg),
        Error::Unsupported(_) => UnsupportedError::new_err(msg),
        // The enum is non-exhaustive: a variant added later is still a tpcomm error.
        _ => TpcommError::new_err(msg),
    }
}

/// An [`Exchange`] through a Python callable `exchange(key: str, mine: bytes)
/// -> list[bytes]` that returns every rank's bytes, index = rank. The
/// callable blocks until all ranks have posted (an all-gather); its own
/// timeout applies, `timeout` is passed on as a hint.
struct PyExchange {
    callable: Py<PyAny>,
}

impl std::fmt::Debug for PyExchange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PyExchange")
    }
}

impl Exchange for PyExchange {
    fn exchange(&self, turn: Turn<'_>) -> tpcomm::Result<Vec<Vec<u8>>> {
        let (key, rank, world, mine) = (turn.key, turn.rank, turn.world, turn.mine);
        let failed = |detail: String| {
            Error::invalid(
                "rendezvous",
                format!("rank {rank}: the exchange of {key:?} through Python failed: {detail}"),
            )
        };
        let all: Vec<Vec<u8>> = Python::attach(|py| {
            let r = self.callable.call1(
                py,
                (key, PyBytes::new(py, mine), turn.timeout.as_secs_f64()),
            )?;
            r.extract::<Vec<Vec<u8>>>(py)
        })
        .map_err(|e: PyErr| failed(e.to_string()))?;
        if all.len() != world {
            return Err(failed(format!(
                "it returned {} values for a world of {world}",
                all.len()
            )));
        }
        if all[rank] != mine {
            return Err(failed(format!(
                "the value it returned for this rank is not the one posted (posted {} bytes, got {}): are the ranks of the group numbered as tpcomm's?",
                mine.len(),
                all[rank].len()
            )));
        }
        Ok(all)
    }
}

fn parse<T: std::str::FromStr<Err = Error>>(s: &str) -> PyResult<T> {
    s.parse().map_err(to_py)
}

/// One rank of a GPU communicator (see the module docs).
#[pyclass(frozen, module = "tpcomm._tpcomm")]
struct Communicator {
    // A Mutex because the NCCL fallback's handle may be used from one thread
    // at a time only; uncontended, it costs tens of nanoseconds per call.
    inner: Mutex<RustCommunicator>,
    device: usize,
}

impl Communicator {
    fn comm(&self) -> PyResult<MutexGuard<'_, RustCommunicator>> {
        self.inner.lock().map_err(|_| {
            AbortedError::new_err(
                "communicator aborted: a call panicked while holding it; create a new communicator on every rank",
            )
        })
    }
}

// The methods' arguments are the Python signatures (`#[pyo3(signature)]`,
// keyword arguments with defaults) that python/tpcomm/torch.py calls: one
// allow for the block instead of one per method. Inside, each call is one
// `tpcomm::cuda::Call` or `fused::NormCall`.
#[pymethods]
#[allow(clippy::too_many_arguments)]
impl Communicator {
    /// Creates this rank's communicator; every rank of the group calls it
    /// with the same world size, maximum message size and transport. The
    /// fused kernels are loaded here too, so no call compiles or loads code
    /// later (inside a CUDA graph capture, for one).
    #[new]
    #[pyo3(signature = (rank, world, device, exchange, max_bytes = 16 << 20, timeout_s = 600.0, transport = "auto", nccl_fallback = false))]
    fn new(
        rank: usize,
        world: usize,
        device: usize,
        exchange: Py<PyAny>,
        max_bytes: u64,
        timeout_s: f64,
        transport: &str,
        nccl_fallback: bool,
    ) -> PyResult<Self> {
        if !(timeout_s.is_finite() && timeout_s > 0.0) {
            return Err(to_py(Error::invalid(
                "timeout",
                format!("{timeout_s} s: give a positive number of seconds"),
            )));
        }
        let mut cfg = CudaConfig::new(rank, world, device);
        cfg.max_bytes = ByteSize::b(max_bytes);
        cfg.timeout = Duration::from_secs_f64(timeout_s);
        cfg.transport = parse::<Transport>(transport)?;
        cfg.nccl_fallback = nccl_fallback;
        let rendezvous = Rendezvous::Custom(Arc::new(PyExchange { callable: exchange }));
        let inner = RustCommunicator::new(&cfg, &rendezvous).map_err(to_py)?;
        match inner.gpu() {
            GpuComm::P2p(c) => c.prepare_fused().map_err(to_py)?,
            GpuComm::Pinned(c) => tpcomm::cuda::fused::prepare(c.context()).map_err(to_py)?,
        };
        inner.prepare_collectives().map_err(to_py)?;
        Ok(Self {
            inner: Mutex::new(inner),
            device,
        })
    }

    #[getter]
    fn rank(&self) -> PyResult<usize> {
        Ok(self.comm()?.gpu().rank())
    }

    #[getter]
    fn world(&self) -> PyResult<usize> {
        Ok(self.comm()?.gpu().world())
    }

    #[getter]
    fn device(&self) -> usize {
        self.device
    }

    #[getter]
    fn max_bytes(&self) -> PyResult<u64> {
        Ok(self.comm()?.gpu().max_bytes().bytes())
    }

    /// "cuda" (peers write each other's memory) or "host" (through pinned
    /// host memory).
    #[getter]
    fn transport(&self) -> PyResult<&'static str> {
        Ok(self.comm()?.gpu().transport().name())
    }

    /// Sums `count` elements of `dtype` at `input` over the ranks into
    /// `output` (the same address: in place) on `stream`, asynchronously.
    /// Returns where it ran, as `tpcomm::select::Route` prints it ("tpcomm cuda:one-shot", "NCCL (why)").
    #[pyo3(signature = (input, output, count, dtype, stream, algo = "auto", overlapped = false))]
    fn all_reduce(
        &self,
        input: u64,
        output: u64,
        count: usize,
        dtype: &str,
        stream: u64,
        algo: &str,
        overlapped: bool,
    ) -> PyResult<String> {
        let dtype = parse::<DType>(dtype)?;
        let algo = parse::<Algo>(algo)?;
        // SAFETY: tpcomm/torch.py passes the addresses of live CUDA tensors
        // of this communicator's device holding `count` elements, and the
        // handle of a stream of that device, and keeps the tensors alive for
        // the stream (torch's caching allocator and graph pools do).
        let route = unsafe {
            self.comm()?.all_reduce_call(
                &Call::new(input, output, count, dtype, stream as _)
                    .with_algo(algo)
                    .with_launch(launch(overlapped)),
            )
        }
        .map_err(to_py)?;
        Ok(route.to_string())
    }

    /// Gathers every rank's `count` elements at `input` into `output`
    /// (`world * count` elements, rank r's block at r * count; `input` may be
    /// this rank's block of `output`) on `stream`, asynchronously. Returns
    /// where it ran, as `tpcomm::select::Route` prints it ("tpcomm cuda", "NCCL (why)").
    #[pyo3(signature = (input, output, count, dtype, stream, overlapped = false))]
    fn all_gather(
        &self,
        input: u64,
        output: u64,
        count: usize,
        dtype: &str,
        stream: u64,
        overlapped: bool,
    ) -> PyResult<String> {
        let dtype = parse::<DType>(dtype)?;
        // SAFETY: tpcomm/torch.py passes live CUDA tensors of this
        // communicator's device (`input` of `count`, `output` of world x
        // `count` elements) and a stream of that device, and keeps them
        // alive for the stream.
        let route = unsafe {
            self.comm()?.all_gather(
                &Call::new(input, output, count, dtype, stream as _)
                    .with_launch(launch(overlapped)),
            )
        }
        .map_err(to_py)?;
        Ok(route.to_string())
    }

    /// Sums `world * count` elements at `input` over the ranks and leaves
    /// this rank's block (`count` elements, at rank * count of the sum) in
    /// `output`, on `stream`. `op`: "sum" on the kernels; "max"/"min" need
    /// `nccl_fallback`.
    #[pyo3(signature = (input, output, count, dtype, stream, op = "sum", overlapped = false))]
    fn reduce_scatter(
        &self,
        input: u64,
        output: u64,
        count: usize,
        dtype: &str,
        stream: u64,
        op: &str,
        overlapped: bool,
    ) -> PyResult<String> {
        let dtype = parse::<DType>(dtype)?;
        let op = parse::<ReduceOp>(op)?;
        // SAFETY: as in all_gather, with `input` of world x `count` and
        // `output` of `count` elements.
        let route = unsafe {
            self.comm()?.reduce_scatter(
                &Call::new(input, output, count, dtype, stream as _)
                    .with_op(op)
                    .with_launch(launch(overlapped)),
            )
        }
        .map_err(to_py)?;
        Ok(route.to_string())
    }

    /// Copies `root`'s `count` elements at `input` to `output` on every rank
    /// (only the root's `input` is read), on `stream`.
    #[pyo3(signature = (input, output, count, dtype, root, stream, overlapped = false))]
    fn broadcast(
        &self,
        input: u64,
        output: u64,
        count: usize,
        dtype: &str,
        root: usize,
        stream: u64,
        overlapped: bool,
    ) -> PyResult<String> {
        let dtype = parse::<DType>(dtype)?;
        // SAFETY: as in all_gather, with both buffers of `count` elements.
        let route = unsafe {
            self.comm()?.broadcast(
                &Call::new(input, output, count, dtype, stream as _)
                    .with_root(root)
                    .with_launch(launch(overlapped)),
            )
        }
        .map_err(to_py)?;
        Ok(route.to_string())
    }

    /// The fused all-reduce + residual add + RMSNorm: sums `partial` over the
    /// ranks (left unchanged), adds it to `residual` in place and writes
    /// `rmsnorm(residual) * weight` to `normed`, on `stream`. On the host
    /// transport (no fused kernel there) it runs the all-reduce into
    /// `scratch` then the add + RMSNorm kernel.
    #[pyo3(signature = (partial, residual, weight, normed, rows, hidden, dtype, eps, stream, scratch = None, overlapped = false))]
    fn fused_add_rmsnorm_all_reduce(
        &self,
        partial: u64,
        residual: u64,
        weight: u64,
        normed: u64,
        rows: usize,
        hidden: usize,
        dtype: &str,
        eps: f32,
        stream: u64,
        scratch: Option<u64>,
        overlapped: bool,
    ) -> PyResult<()> {
        let dtype = parse::<DType>(dtype)?;
        let count = rows.checked_mul(hidden).ok_or_else(|| {
            to_py(Error::invalid(
                "shape",
                format!("{rows} x {hidden} overflows"),
            ))
        })?;
        let norm = NormCall {
            residual,
            weight,
            normed,
            rows,
            hidden,
            dtype,
            eps,
            stream: stream as _,
            launch: launch(overlapped),
        };
        match self.comm()?.gpu() {
            GpuComm::P2p(c) => {
                // SAFETY: as in all_reduce: live tensors of this device, of the
                // sizes tpcomm/torch.py checked, on a stream of this device.
                unsafe { c.all_reduce_residual_rmsnorm(partial, &norm) }.map_err(to_py)
            }
            GpuComm::Pinned(c) => {
                let scratch = scratch.ok_or_else(|| {
                    to_py(Error::invalid(
                        "scratch",
                        "the host transport has no fused kernel and needs a scratch buffer of the partial's size for the all-reduce",
                    ))
                })?;
                // SAFETY: as above; `scratch` holds `count` elements.
                unsafe {
                    c.all_reduce_call(
                        &Call::new(partial, scratch, count, dtype, stream as _)
                            .with_launch(launch(overlapped)),
                    )
                    .map_err(to_py)?;
                    let norm = NormCall {
                        launch: Launch::Ordinary,
                        ..norm
                    };
                    add_rmsnorm(c.context(), Some(scratch), &norm).map_err(to_py)
                }
            }
        }
    }

    /// The unfused half: `residual += addend` (when given), then
    /// `normed = rmsnorm(residual) * weight`, with the kernel the fused op is
    /// checked against (bit for bit, after a one-shot all-reduce).
    #[pyo3(signature = (residual, addend, weight, normed, rows, hidden, dtype, eps, stream))]
    fn add_rmsnorm(
        &self,
        residual: u64,
        addend: Option<u64>,
        weight: u64,
        normed: u64,
        rows: usize,
        hidden: usize,
        dtype: &str,
        eps: f32,
        stream: u64,
    ) -> PyResult<()> {
        let dtype = parse::<DType>(dtype)?;
        let comm = self.comm()?;
        let ctx = match comm.gpu() {
            GpuComm::P2p(c) => c.context(),
            GpuComm::Pinned(c) => c.context(),
        };
        // SAFETY: as in all_reduce.
        unsafe {
            let norm = NormCall {
                residual,
                weight,
                normed,
                rows,
                hidden,
                dtype,
                eps,
                stream: stream as _,
                launch: Launch::Ordinary,
            };
            add_rmsnorm(ctx, addend, &norm)
        }
        .map_err(to_py)
    }

    /// Raises the error a kernel or a peer reported since the last check
    /// (call it after synchronizing the stream); nothing when all is well.
    fn check(&self) -> PyResult<()> {
        self.comm()?.gpu().check().map_err(to_py)
    }

    /// Every buffer this communicator allocated, as JSON (the Rust
    /// `MemoryReport`: title, lines with name, bytes and place, the GPU
    /// allocations with their granularity).
    fn memory_report_json(&self) -> PyResult<String> {
        serde_json::to_string(self.comm()?.gpu().memory_report()).map_err(|e| {
            to_py(Error::invalid(
                "memory report",
                format!("could not be written as JSON: {e}"),
            ))
        })
    }

    /// The same report as the `tpcomm` command prints it.
    fn memory_report_text(&self) -> PyResult<String> {
        Ok(self.comm()?.gpu().memory_report().to_string())
    }

    fn __repr__(&self) -> PyResult<String> {
        Ok(format!(
            "Communicator(rank={}, world={}, device={}, transport={:?}, max_bytes={})",
            self.rank()?,
            self.world()?,
            self.device,
            self.transport()?,
            self.max_bytes()?
        ))
    }
}

fn launch(overlapped: bool) -> Launch {
    if overlapped {
        Launch::Overlapped
    } else {
        Launch::Ordinary
    }
}

/// The environment variable the Rust NVRTC loader reads first (a path).
#[pyfunction]
fn nvrtc_library_env() -> &'static str {
    tpcomm::cuda::NVRTC_LIBRARY_ENV
}

/// The version of the Rust crates this module was built from.
#[pyfunction]
fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

#[pymodule]
fn _tpcomm(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<Communicator>()?;
    m.add_function(wrap_pyfunction!(nvrtc_library_env, m)?)?;
    m.add_function(wrap_pyfunction!(version, m)?)?;
    m.add("TpcommError", py.get_type::<TpcommError>())?;
    m.add(
        "InvalidArgumentError",
        py.get_type::<InvalidArgumentError>(),
    )?;
    m.add("PeerTimeoutError", py.get_type::<PeerTimeoutError>())?;
    m.add("MismatchError", py.get_type::<MismatchError>())?;
    m.add("AbortedError", py.get_type::<AbortedError>())?;
    m.add("OutOfMemoryError", py.get_type::<OutOfMemoryError>())?;
    m.add("LibraryError", py.get_type::<LibraryError>())?;
    m.add("CudaError", py.get_type::<CudaError>())?;
    m.add("DeviceError", py.get_type::<DeviceError>())?;
    m.add("UnsupportedError", py.get_type::<UnsupportedError>())?;
    m.add("SystemCallError", py.get_type::<SystemCallError>())?;
    Ok(())
}
