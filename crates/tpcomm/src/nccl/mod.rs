//! NCCL, loaded at run time.
//!
//! tpcomm uses NCCL as the fallback for what its own kernels do not cover and
//! as the yardstick in `tpcomm bench`. It is opened with `dlopen` when first
//! asked for, never linked, so tpcomm builds and runs without it; a missing
//! NCCL is an [`Error::Library`] that says how to install or point to one.
//!
//! Where the library is looked for, in order:
//! 1. `$TPCOMM_NCCL_LIBRARY`, a path. When set, nothing else is tried.
//! 2. `libnccl.so.2`, then `libnccl.so`, through the dynamic loader's own
//!    search (`LD_LIBRARY_PATH`, the `ldconfig` cache, the system folders).
//! 3. A short list of folders where NCCL is commonly installed without being
//!    on the loader's path: the CUDA toolkit's, and the `nvidia/nccl/lib`,
//!    `nvidia/cu13/lib` and `nvidia/cu12/lib` folders of Python installs
//!    (`$VIRTUAL_ENV`, `$CONDA_PREFIX`, `/usr/local`, `/usr`, `~/.local`),
//!    where `pip install nvidia-nccl-cu13` (or PyTorch) puts it.

#[forbid(unsafe_code)]
mod search;

use crate::dtype::{DType, ReduceOp};
use crate::error::{Error, Result};
use crate::sys::nccl as ffi;
use std::ffi::c_int;
use std::fmt;
use std::path::Path;
use std::sync::Arc;

pub use crate::sys::nccl::Buffers;
pub use search::{candidates, Candidate, NCCL_LIBRARY_ENV};

/// A CUDA stream handle as cudarc (and the CUDA driver) spell it; NCCL's
/// `cudaStream_t` is the same object.
pub type CuStream = cudarc::driver::sys::CUstream;

/// The NCCL release tpcomm found, as `ncclGetVersion` reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub struct NcclVersion {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl NcclVersion {
    /// Decodes `ncclGetVersion`'s code: `major*10000 + minor*100 + patch`
    /// since NCCL 2.9, `major*1000 + minor*100 + patch` before.
    pub fn from_code(code: i32) -> NcclVersion {
        let code = code.max(0) as u32;
        if code >= 10000 {
            NcclVersion {
                major: code / 10000,
                minor: (code % 10000) / 100,
                patch: code % 100,
            }
        } else {
            NcclVersion {
                major: code / 1000,
                minor: (code % 1000) / 100,
                patch: code % 100,
            }
        }
    }
}

impl fmt::Display for NcclVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// The oldest NCCL tpcomm accepts: bf16 reductions arrived in 2.10.
pub const MIN_VERSION: NcclVersion = NcclVersion {
    major: 2,
    minor: 10,
    patch: 0,
};

/// The buffers of one NCCL call as `sys::nccl` takes them.
fn buffers(send: u64, recv: u64, count: usize, dtype: DType, stream: CuStream) -> ffi::Buffers {
    ffi::Buffers {
        send,
        recv,
        count,
        dtype: nccl_dtype(dtype),
        stream: stream.cast(),
    }
}

/// `ncclDataType_t` for a tpcomm element type (values from nccl.h).
pub const fn nccl_dtype(dtype: DType) -> i32 {
    match dtype {
        DType::F16 => 6,  // ncclFloat16
        DType::F32 => 7,  // ncclFloat32
        DType::Bf16 => 9, // ncclBfloat16
    }
}

/// `ncclRedOp_t` for a tpcomm reduce op (values from nccl.h).
pub const fn nccl_op(op: ReduceOp) -> i32 {
    match op {
        ReduceOp::Sum => 0, // ncclSum
        ReduceOp::Max => 2, // ncclMax
        ReduceOp::Min => 3, // ncclMin
    }
}

/// The opaque id that every rank of one communicator must share. Rank 0 makes
/// it with [`Nccl::unique_id`] and hands it to the others (a thread's copy, or
/// the bytes through any channel between processes).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct UniqueId(pub [u8; 128]);

impl fmt::Debug for UniqueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("UniqueId(..)")
    }
}

/// An opened NCCL library. Share it with `Arc`; communicators keep it alive.
pub struct Nccl {
    api: ffi::Api,
    location: String,
    version: NcclVersion,
}

impl fmt::Debug for Nccl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Nccl")
            .field("location", &self.location)
            .field("version", &self.version)
            .finish()
    }
}

const LIBRARY: &str = "NCCL";

fn install_hint() -> String {
    format!(
        "install NCCL (`pip install nvidia-nccl-cu13`, or your distribution's libnccl2 package) \
         or set {NCCL_LIBRARY_ENV} to the full path of libnccl.so.2"
    )
}

impl Nccl {
    /// Finds and opens NCCL as the module documentation describes.
    pub fn load() -> Result<Arc<Nccl>> {
        Nccl::load_with(
            crate::env::NCCL_LIBRARY
                .checked_value()
                .map(std::path::PathBuf::into_os_string),
        )
    }

    /// [`Nccl::load`] with the value of `$TPCOMM_NCCL_LIBRARY` passed in, so
    /// tests need not change the process environment.
    fn load_with(env_override: Option<std::ffi::OsString>) -> Result<Arc<Nccl>> {
        if let Some(path) = env_override.filter(|v| !v.is_empty()) {
            let shown = Path::new(&path).display().to_string();
            return Nccl::open(&Candidate::Path(path.into())).map_err(|e| Error::Library {
                library: LIBRARY.into(),
                detail: format!(
                    "{NCCL_LIBRARY_ENV}={shown} cannot be used: {e}; point it at libnccl.so.2 or unset it to search the usual places"
                ),
            });
        }
        Nccl::load_first(candidates())
    }

    /// Opens the first candidate that is a usable NCCL, or says what each
    /// attempt gave.
    fn load_first(candidates: Vec<Candidate>) -> Result<Arc<Nccl>> {
        let mut tried = Vec::new();
        for candidate in candidates {
            match Nccl::open(&candidate) {
                Ok(nccl) => return Ok(nccl),
                Err(e) => tried.push(format!("{candidate} ({e})")),
            }
        }
        Err(Error::Library {
            library: LIBRARY.into(),
            detail: format!(
                "libnccl.so.2 was not found or could not be opened (tried: {}); {}",
                tried.join("; "),
                install_hint()
            ),
        })
    }

    /// Opens NCCL from an explicit path, with no search.
    pub fn load_from(path: &Path) -> Result<Arc<Nccl>> {
        Nccl::open(&Candidate::Path(path.to_path_buf())).map_err(|e| Error::Library {
            library: LIBRARY.into(),
            detail: format!("{} cannot be used: {e}; {}", path.display(), install_hint()),
        })
    }

    fn open(candidate: &Candidate) -> std::result::Result<Arc<Nccl>, String> {
        let api = ffi::Api::open(candidate.as_os_str())?;
        let (status, code) = api.get_version();
        if status != ffi::NCCL_SUCCESS {
            return Err(format!(
                "ncclGetVersion failed: {}",
                api.describe(status, std::ptr::null_mut())
            ));
        }
        let version = NcclVersion::from_code(code);
        if version.major != 2 || version < MIN_VERSION {
            return Err(format!(
                "it is NCCL {version}, and tpcomm needs 2.x from {MIN_VERSION} on"
            ));
        }
        let location = match (candidate, api.loaded_from()) {
            (Candidate::Soname(name), Some(path)) => format!("{path} (as {name})"),
            _ => candidate.to_string(),
        };
        Ok(Arc::new(Nccl {
            api,
            location,
            version,
        }))
    }

    /// Where the library was opened from: the path given, or for a soname
    /// the file the dynamic loader picked ("/usr/lib/.../libnccl.so.2 (as
    /// libnccl.so.2)").
    pub fn location(&self) -> &str {
        &self.location
    }

    pub fn version(&self) -> NcclVersion {
        self.version
    }

    /// A fresh id for a new communicator (`ncclGetUniqueId`).
    pub fn unique_id(&self) -> Result<UniqueId> {
        let (status, bytes) = self.api.get_unique_id();
        self.check(status, std::ptr::null_mut(), "ncclGetUniqueId")?;
        Ok(UniqueId(bytes))
    }

    /// Joins communicator `id` as `rank` of `world` (`ncclCommInitRank`).
    ///
    /// The CUDA device of this rank must be current on the calling thread
    /// (cudarc's `CudaContext::bind_to_thread`). Blocks until every rank has
    /// called it with the same id, as NCCL does.
    pub fn comm_init_rank(
        self: &Arc<Self>,
        world: usize,
        id: &UniqueId,
        rank: usize,
    ) -> Result<NcclComm> {
        let (world_c, rank_c) = check_rank(world, rank)?;
        let (status, raw) = self.api.comm_init_rank(world_c, &id.0, rank_c);
        self.check(status, std::ptr::null_mut(), "ncclCommInitRank")?;
        let comm = raw.ok_or_else(|| Error::Library {
            library: LIBRARY.into(),
            detail: "ncclCommInitRank reported success but returned no communicator".into(),
        })?;
        Ok(NcclComm {
            nccl: Arc::clone(self),
            comm: Some(comm),
            world,
            rank,
        })
    }

    fn check(&self, status: c_int, comm: ffi::RawComm, call: &str) -> Result<()> {
        if status == ffi::NCCL_SUCCESS {
            return Ok(());
        }
        let detail = self.api.describe(status, comm);
        Err(if status == ffi::NCCL_UNHANDLED_CUDA_ERROR {
            Error::Cuda {
                call: call.into(),
                detail: format!("{detail} (reported by NCCL {})", self.version),
            }
        } else {
            Error::Library {
                library: format!("NCCL {}", self.version),
                detail: format!("{call} failed: {detail}"),
            }
        })
    }
}

/// `world` and `rank` as NCCL's `int`s, refused before NCCL sees them when
/// they make no sense.
fn check_rank(world: usize, rank: usize) -> Result<(c_int, c_int)> {
    if world == 0 || rank >= world {
        return Err(Error::invalid(
            "NCCL rank",
            format!("rank {rank} of a world of {world}: rank must be below world"),
        ));
    }
    let world = c_int::try_from(world)
        .map_err(|_| Error::invalid("NCCL world size", format!("{world} is too large")))?;
    // rank < world, so it fits too.
    Ok((world, rank as c_int))
}

/// One rank's NCCL communicator. Destroyed on drop; [`NcclComm::destroy`]
/// does the same and reports NCCL's status.
pub struct NcclComm {
    nccl: Arc<Nccl>,
    /// `None` only after `destroy`/`abort`, which consume `self`.
    comm: Option<ffi::OwnedComm>,
    world: usize,
    rank: usize,
}

impl fmt::Debug for NcclComm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NcclComm")
            .field("rank", &self.rank)
            .field("world", &self.world)
            .finish()
    }
}

impl NcclComm {
    pub fn rank(&self) -> usize {
        self.rank
    }

    pub fn world(&self) -> usize {
        self.world
    }

    pub fn nccl(&self) -> &Arc<Nccl> {
        &self.nccl
    }

    fn raw(&self) -> ffi::RawComm {
        self.comm
            .as_ref()
            .map_or(std::ptr::null_mut(), ffi::OwnedComm::raw)
    }

    /// Enqueues `ncclAllReduce` of `count` elements on `stream`; in place when
    /// `send == recv`. Returns once enqueued; the result is ready when
    /// `stream` reaches it.
    ///
    /// # Safety
    /// `send` and `recv` are device addresses (cudarc's `CUdeviceptr`) of at
    /// least `count` elements of `dtype` each, on this communicator's device,
    /// that stay allocated until the operation completes on `stream`; `stream`
    /// is a live stream of the context current on this thread, or null.
    pub unsafe fn all_reduce(
        &self,
        send: u64,
        recv: u64,
        count: usize,
        dtype: DType,
        op: ReduceOp,
        stream: CuStream,
    ) -> Result<()> {
        let b = buffers(send, recv, count, dtype, stream);
        // SAFETY: this communicator is live and its own; the buffers and
        // the stream are the caller's contract, which is ncclAllReduce's.
        let status = unsafe { self.nccl.api.all_reduce(&b, nccl_op(op), self.raw()) };
        self.nccl.check(status, self.raw(), "ncclAllReduce")
    }

    /// Enqueues `ncclAllGather` (`count`: one rank's block; `recv` holds
    /// `world * count`).
    ///
    /// # Safety
    /// As [`all_reduce`](Self::all_reduce), with `recv` of `world * count`
    /// elements.
    pub unsafe fn all_gather(
        &self,
        send: u64,
        recv: u64,
        count: usize,
        dtype: DType,
        stream: CuStream,
    ) -> Result<()> {
        let b = buffers(send, recv, count, dtype, stream);
        // SAFETY: this communicator is live and its own; the buffers and
        // the stream are the caller's contract, which is NCCL's.
        let status = unsafe { self.nccl.api.all_gather(&b, self.raw()) };
        self.collective_status(status, "ncclAllGather")
    }

    /// Enqueues `ncclReduceScatter` (`count`: one rank's output block; `send`
    /// holds `world * count`).
    ///
    /// # Safety
    /// As [`all_reduce`](Self::all_reduce), with `send` of `world * count`
    /// elements.
    pub unsafe fn reduce_scatter(
        &self,
        send: u64,
        recv: u64,
        count: usize,
        dtype: DType,
        op: ReduceOp,
        stream: CuStream,
    ) -> Result<()> {
        let b = buffers(send, recv, count, dtype, stream);
        // SAFETY: this communicator is live and its own; the buffers and
        // the stream are the caller's contract, which is NCCL's.
        let status = unsafe { self.nccl.api.reduce_scatter(&b, nccl_op(op), self.raw()) };
        self.collective_status(status, "ncclReduceScatter")
    }

    /// Enqueues `ncclBroadcast` of `count` elements from `root`.
    ///
    /// # Safety
    /// As [`all_reduce`](Self::all_reduce).
    pub unsafe fn broadcast(
        &self,
        send: u64,
        recv: u64,
        count: usize,
        dtype: DType,
        root: usize,
        stream: CuStream,
    ) -> Result<()> {
        let root = std::ffi::c_int::try_from(root)
            .map_err(|_| Error::invalid("broadcast root", format!("{root} is too large")))?;
        let b = buffers(send, recv, count, dtype, stream);
        // SAFETY: this communicator is live and its own; the buffers and
        // the stream are the caller's contract, which is NCCL's.
        let status = unsafe { self.nccl.api.broadcast(&b, root, self.raw()) };
        self.collective_status(status, "ncclBroadcast")
    }

    fn collective_status(&self, status: Option<std::ffi::c_int>, call: &str) -> Result<()> {
        match status {
            Some(s) => self.nccl.check(s, self.raw(), call),
            None => Err(Error::Library {
                library: "NCCL".into(),
                detail: format!(
                    "{} has no {call}; use an NCCL 2.x library that does (TPCOMM_NCCL_LIBRARY)",
                    self.nccl.location()
                ),
            }),
        }
    }

    /// Frees the communicator (`ncclCommDestroy`), reporting NCCL's status.
    pub fn destroy(mut self) -> Result<()> {
        self.free(false, "ncclCommDestroy")
    }

    /// Tears the communicator down without waiting for peers
    /// (`ncclCommAbort`), for when a peer has failed.
    pub fn abort(mut self) -> Result<()> {
        self.free(true, "ncclCommAbort")
    }

    fn free(&mut self, abort: bool, call: &str) -> Result<()> {
        match self.comm.take() {
            Some(comm) => {
                let status = self.nccl.api.comm_free(comm, abort);
                self.nccl.check(status, std::ptr::null_mut(), call)
            }
            None => Ok(()),
        }
    }
}

impl Drop for NcclComm {
    fn drop(&mut self) {
        // A failure cannot be reported from drop; `destroy` is for callers
        // who want NCCL's status.
        let _ = self.free(false, "ncclCommDestroy");
    }
}

#[cfg(test)]
mod tests;
