//! One GPU collective call as a value ([`Call`]), and the trait every GPU
//! transport runs calls through ([`GpuTransport`]): P2P
//! ([`P2pTransport`](super::P2pTransport)), pinned host memory
//! ([`PinnedTransport`](super::PinnedTransport)), either of the two
//! ([`GpuComm`](super::GpuComm)), and NCCL ([`NcclComm`]).
//!
//! A `Call` is built once on the caller's stack and passed by reference down
//! to the kernel launch: no transport takes the arguments one by one.

use super::call_word::{Kind, Signature};
use super::pdl::Launch;
use crate::algo::{Algo, Collective};
use crate::dtype::{DType, ReduceOp};
use crate::error::{Error, Result};
use crate::nccl::NcclComm;
use crate::sys::cuda::{CUdeviceptr, CUstream};
use crate::units::ByteSize;

/// What one collective call asks for: where the data is, how much of it,
/// of which type and reduction, on which stream and how launched.
///
/// `count` follows NCCL: for the all-reduce the whole message; for
/// all-gather, reduce-scatter and broadcast one rank's block (the
/// all-gather's input, the reduce-scatter's output, the broadcast's
/// message). The input and output are equal for an in-place call.
#[derive(Clone, Copy, Debug)]
pub struct Call {
    pub input: CUdeviceptr,
    pub output: CUdeviceptr,
    /// Elements (see the type's docs for which buffer they count).
    pub count: usize,
    pub dtype: DType,
    /// The reduction (all-reduce, reduce-scatter); `Sum` for the others.
    pub op: ReduceOp,
    /// The all-reduce algorithm asked for (`Auto`: the route table picks).
    pub algo: Algo,
    /// The broadcast's root rank (0 for the other calls).
    pub root: usize,
    /// The caller's CUDA stream (null: the legacy default stream).
    pub stream: CUstream,
    /// Ordinary or overlapped launch of tpcomm's kernels (NCCL launches as
    /// NCCL does).
    pub launch: Launch,
    /// What the caller asked for when the kernels carry it as another type
    /// or collective (the drop-in's NCCL type, op and root): it goes into
    /// the call word, so ranks that asked for different calls are caught.
    /// `None`: `dtype` and `op` say it.
    pub signature: Option<Signature>,
}

impl Call {
    /// A sum of `count` elements of `dtype` from `input` into `output` on
    /// `stream`: `Algo::Auto`, root 0, an ordinary launch. Change the rest
    /// with the `with_*` methods.
    pub fn new(
        input: CUdeviceptr,
        output: CUdeviceptr,
        count: usize,
        dtype: DType,
        stream: CUstream,
    ) -> Self {
        Call {
            input,
            output,
            count,
            dtype,
            op: ReduceOp::Sum,
            algo: Algo::Auto,
            root: 0,
            stream,
            launch: Launch::Ordinary,
            signature: None,
        }
    }

    pub fn with_op(self, op: ReduceOp) -> Self {
        Call { op, ..self }
    }
    pub fn with_algo(self, algo: Algo) -> Self {
        Call { algo, ..self }
    }
    pub fn with_root(self, root: usize) -> Self {
        Call { root, ..self }
    }
    pub fn with_launch(self, launch: Launch) -> Self {
        Call { launch, ..self }
    }
    pub fn with_signature(self, signature: Signature) -> Self {
        Call {
            signature: Some(signature),
            ..self
        }
    }

    /// What the call word says this call is: the caller's signature, or
    /// the call's own type and op.
    pub fn signature(&self) -> Signature {
        self.signature
            .unwrap_or_else(|| Signature::of(self.dtype, self.op))
    }

    /// This call's word for a kernel of `kind` moving `nbytes` (`aux`: the
    /// kind's own value, a broadcast's root), or 0 when the communicator
    /// does not `check` calls (`call_word::word_if` with [`Self::signature`]).
    pub(crate) fn word(&self, check: bool, kind: Kind, nbytes: u64, aux: u64) -> Result<u64> {
        super::call_word::word_if(check, kind, self.signature(), nbytes, aux)
    }

    /// The call's data in bytes (`count` elements of `dtype`), or an error
    /// when that overflows.
    pub fn bytes(&self) -> Result<u64> {
        (self.count as u64)
            .checked_mul(self.dtype.size() as u64)
            .ok_or_else(|| Error::invalid("count", format!("{} elements overflow", self.count)))
    }
}

/// A GPU transport: runs [`Call`]s on the caller's stream, asynchronously.
///
/// # Safety (of every method)
/// `call.input` and `call.output` must be device memory of the transport's
/// device (or mapped into it), 16-byte aligned for tpcomm's kernels, sized
/// for the call (see [`Call`]: `world * count` elements for the all-gather's
/// output and the reduce-scatter's input, `count` otherwise), either
/// disjoint or in place at this rank's block, and stay valid until the
/// stream has run the call; `call.stream` must belong to that device's
/// primary context (or be null).
pub trait GpuTransport {
    /// What an all-reduce ran: the algorithm (P2P), the kernel (pinned host
    /// memory), or nothing said (`GpuComm`, NCCL).
    type Ran;

    /// Sums (or reduces by `call.op`, where the transport has it)
    /// `call.count` elements over all ranks into `call.output`.
    ///
    /// # Safety
    /// See the trait's docs.
    unsafe fn all_reduce(&self, call: &Call) -> Result<Self::Ran>;

    /// All-gather, reduce-scatter or broadcast as `what` says (`what`
    /// names the broadcast's root; `call.root` is not read).
    ///
    /// # Safety
    /// See the trait's docs.
    unsafe fn run_collective(&self, what: Collective, call: &Call) -> Result<()>;

    /// All-gather: every rank's `call.input` (`count` elements) lands in
    /// `call.output` (`world * count`) in rank order.
    ///
    /// # Safety
    /// See the trait's docs.
    unsafe fn all_gather(&self, call: &Call) -> Result<()> {
        // SAFETY: the caller's contract, passed on unchanged.
        unsafe { self.run_collective(Collective::AllGather, call) }
    }

    /// Reduce-scatter: block `rank` (`count` elements) of the reduction
    /// (`call.op`) over the ranks' `call.input` (`world * count`) lands in
    /// `call.output`.
    ///
    /// # Safety
    /// See the trait's docs.
    unsafe fn reduce_scatter(&self, call: &Call) -> Result<()> {
        // SAFETY: as for all_gather.
        unsafe { self.run_collective(Collective::ReduceScatter, call) }
    }

    /// Broadcast: `call.input` of rank `call.root` lands in `call.output`
    /// of every rank.
    ///
    /// # Safety
    /// See the trait's docs.
    unsafe fn broadcast(&self, call: &Call) -> Result<()> {
        let what = Collective::Broadcast { root: call.root };
        // SAFETY: as for all_gather.
        unsafe { self.run_collective(what, call) }
    }
}

/// The error of a message (`what`: nothing, or which block) of `bytes`
/// above the communicator's `max_bytes`.
fn above_max(what: String, bytes: usize, max_bytes: ByteSize) -> Error {
    Error::invalid(
        "message size",
        format!(
            "{what}{} is above this communicator's maximum {max_bytes}; create it with a larger max_bytes",
            ByteSize::from_usize(bytes)
        ),
    )
}

/// The checks every all-reduce of tpcomm's kernels makes before launching:
/// only sum, a count whose bytes fit `max_bytes`, 16-byte aligned buffers.
/// Returns the message's bytes. `kernels` names the family in the error.
pub(crate) fn check_all_reduce(kernels: &str, call: &Call, max_bytes: ByteSize) -> Result<usize> {
    let op = call.op;
    if op != ReduceOp::Sum {
        return Err(Error::Unsupported(format!(
            "reduce op {op:?} in {kernels} (only sum); use NCCL for it"
        )));
    }
    let bytes = call.dtype.bytes_of(call.count)?;
    if bytes as u64 > max_bytes.bytes() {
        return Err(above_max(String::new(), bytes, max_bytes));
    }
    if !call.input.is_multiple_of(16) || !call.output.is_multiple_of(16) {
        return Err(Error::invalid(
            "buffer address",
            "input and output must be 16-byte aligned",
        ));
    }
    Ok(bytes)
}

/// The checks every tpcomm transport makes before a collective; returns one
/// rank's block in bytes.
pub(crate) fn check_collective(
    what: Collective,
    call: &Call,
    world: usize,
    max_bytes: ByteSize,
) -> Result<usize> {
    if what == Collective::ReduceScatter && call.op != ReduceOp::Sum {
        return Err(Error::Unsupported(format!(
            "reduce op {} in tpcomm's reduce-scatter kernels (only sum); use Communicator with nccl_fallback for it",
            call.op
        )));
    }
    let count = call.count;
    let bytes = count
        .checked_mul(call.dtype.size())
        .filter(|b| b.checked_mul(world).is_some())
        .ok_or_else(|| Error::invalid("count", format!("{count} elements overflow")))?;
    if bytes as u64 > max_bytes.bytes() {
        return Err(above_max(
            format!("a {} block of ", what.name()),
            bytes,
            max_bytes,
        ));
    }
    if let Collective::Broadcast { root } = what {
        if root >= world {
            return Err(Error::invalid(
                "broadcast root",
                format!("{root} is not a rank of this communicator (0..{world})"),
            ));
        }
    }
    if count > 0
        && [call.input, call.output]
            .iter()
            .any(|p| *p == 0 || !p.is_multiple_of(2))
    {
        return Err(Error::invalid(
            "buffer address",
            format!(
                "{} buffers must be non-null device addresses aligned to 2 bytes",
                what.name()
            ),
        ));
    }
    Ok(bytes)
}

/// NCCL as a transport: the same calls, on `ncclAllReduce` and the others
/// (`call.algo` and `call.launch` do not apply).
impl GpuTransport for NcclComm {
    type Ran = ();

    unsafe fn all_reduce(&self, call: &Call) -> Result<()> {
        let c = call;
        // SAFETY: the trait's contract is NCCL's for the same call.
        unsafe { NcclComm::all_reduce(self, c.input, c.output, c.count, c.dtype, c.op, c.stream) }
    }

    unsafe fn run_collective(&self, what: Collective, call: &Call) -> Result<()> {
        let c = call;
        // SAFETY: as for all_reduce.
        unsafe {
            match what {
                Collective::AllGather => {
                    NcclComm::all_gather(self, c.input, c.output, c.count, c.dtype, c.stream)
                }
                Collective::ReduceScatter => NcclComm::reduce_scatter(
                    self, c.input, c.output, c.count, c.dtype, c.op, c.stream,
                ),
                Collective::Broadcast { root } => {
                    NcclComm::broadcast(self, c.input, c.output, c.count, c.dtype, root, c.stream)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(input: u64, output: u64, count: usize, dtype: DType) -> Call {
        Call::new(input, output, count, dtype, std::ptr::null_mut())
    }

    #[test]
    fn a_new_call_is_an_ordinary_auto_sum_and_the_with_methods_change_one_field() {
        let c = call(16, 32, 100, DType::Bf16);
        assert_eq!(
            (c.op, c.algo, c.root, c.launch),
            (ReduceOp::Sum, Algo::Auto, 0, Launch::Ordinary)
        );
        let d = c
            .with_op(ReduceOp::Max)
            .with_algo(Algo::TwoShot)
            .with_root(3)
            .with_launch(Launch::Overlapped);
        assert_eq!(
            (d.op, d.algo, d.root, d.launch),
            (ReduceOp::Max, Algo::TwoShot, 3, Launch::Overlapped)
        );
        assert_eq!((d.input, d.output, d.count), (16, 32, 100));
        assert_eq!(d.bytes().unwrap(), 200);
        assert!(call(0, 0, usize::MAX, DType::F32).bytes().is_err());
    }

    #[test]
    fn all_reduces_the_kernels_cannot_take_are_refused_before_launch() {
        let max = ByteSize::kib(64);
        let ok = check_all_reduce("k", &call(256, 512, 1000, DType::Bf16), max);
        assert_eq!(ok.unwrap(), 2000);
        let max_op = call(256, 256, 10, DType::F32).with_op(ReduceOp::Max);
        let op = check_all_reduce("k", &max_op, max).unwrap_err();
        assert!(matches!(op, Error::Unsupported(_)), "{op}");
        let big = check_all_reduce("k", &call(256, 256, 32 * 1024 + 1, DType::F16), max);
        assert!(big.unwrap_err().to_string().contains("max_bytes"));
        let odd = check_all_reduce("k", &call(258, 256, 10, DType::F32), max);
        assert!(odd.unwrap_err().to_string().contains("16-byte"));
        let huge = check_all_reduce("k", &call(0, 0, usize::MAX, DType::F32), max);
        assert!(huge.unwrap_err().to_string().contains("overflow"));
    }

    #[test]
    fn bad_collective_calls_are_refused_before_any_gpu_work() {
        let max = ByteSize::kib(64);
        let ok = check_collective(
            Collective::AllGather,
            &call(16, 32, 100, DType::Bf16),
            4,
            max,
        );
        assert_eq!(ok.unwrap(), 200);
        let e = |r: Result<usize>| r.unwrap_err().to_string();
        let big = check_collective(
            Collective::AllGather,
            &call(16, 32, 40000, DType::F32),
            4,
            max,
        );
        assert!(e(big).contains("above this communicator's maximum"));
        let root = check_collective(
            Collective::Broadcast { root: 4 },
            &call(16, 16, 1, DType::F32),
            4,
            max,
        );
        assert!(e(root).contains("broadcast root"));
        let odd = check_collective(
            Collective::ReduceScatter,
            &call(17, 32, 1, DType::F16),
            2,
            max,
        );
        assert!(e(odd).contains("aligned to 2 bytes"));
        let max_op = call(16, 32, 1, DType::F32).with_op(ReduceOp::Max);
        let op = check_collective(Collective::ReduceScatter, &max_op, 2, max);
        assert!(e(op).contains("only sum"));
        let over = check_collective(
            Collective::AllGather,
            &call(16, 32, usize::MAX / 2, DType::F32),
            2,
            max,
        );
        assert!(e(over).contains("overflow"));
        // Nothing to move: null pointers are fine.
        assert_eq!(
            check_collective(Collective::AllGather, &call(0, 0, 0, DType::F32), 2, max).unwrap(),
            0
        );
    }
}
