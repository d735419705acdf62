"""tpcomm on ``torch.distributed``: a communicator made from a process group.

    import torch.distributed as dist
    from tpcomm.torch import Communicator

    dist.init_process_group("nccl")            # or "gloo": only the set-up uses it
    torch.cuda.set_device(local_rank)
    comm = Communicator()                      # the default group; or Communicator(group)
    comm.all_reduce(t)                         # in place; or comm.all_reduce(t, out=o)
    normed, residual = comm.fused_add_rmsnorm_all_reduce(x, residual, weight, 1e-6)

Every call runs on torch's current stream of the communicator's device, so
it orders with the kernels around it and can be captured in a CUDA graph.
Tensors go to tpcomm as (address, element count, element type, stream):
tpcomm does not link libtorch, and this module imports torch only when a
communicator is made. Supported element types: bfloat16, float16, float32;
tensors must be contiguous, on the communicator's device, 16-byte aligned.

Errors are tpcomm's own exception classes (``tpcomm.TpcommError`` and its
subclasses, e.g. ``tpcomm.InvalidArgumentError``), carrying the library's
message.
"""

import json

from . import _setup, _tpcomm
from ._tpcomm import InvalidArgumentError

_DTYPE_NAMES = {"torch.bfloat16": "bf16", "torch.float16": "f16", "torch.float32": "f32"}


def _torch():
    try:
        import torch
        import torch.distributed
    except ImportError as e:
        raise ImportError(
            "tpcomm.torch needs PyTorch (pip install torch); the rest of tpcomm "
            f"works without it ({e})"
        ) from e
    return torch


def _dtype_name(t, what):
    name = _DTYPE_NAMES.get(str(t.dtype))
    if name is None:
        raise InvalidArgumentError(
            f"invalid element type: {what} is {t.dtype}; tpcomm takes torch.bfloat16, "
            "torch.float16 and torch.float32"
        )
    return name


class Communicator:
    """One rank's tpcomm communicator over the ranks of ``group`` (default:
    the default process group). Every rank of the group creates it, with
    the same options, in the same order as its other communicators.

    ``device``: the CUDA device (index, ``torch.device`` or None for the
    current one). ``max_bytes``: largest all-reduce it runs; its buffers
    are sized for it at creation (``memory_report()`` lists them).
    ``timeout_s``: bound on every wait, at set-up and inside the kernels.
    ``transport``: "auto" (peer memory when every pair of GPUs has P2P,
    else through pinned host memory), "cuda" or "host". ``nccl_fallback``:
    also set up NCCL, which then runs all-reduces above ``max_bytes``
    instead of their raising an error.

    The set-up swaps a few hundred bytes per rank through the group
    (``all_gather_object``), so any backend serves, gloo included.
    """

    def __init__(
        self,
        group=None,
        *,
        device=None,
        max_bytes=16 << 20,
        timeout_s=600.0,
        transport="auto",
        nccl_fallback=False,
    ):
        torch = _torch()
        dist = torch.distributed
        if not dist.is_available() or not dist.is_initialized():
            raise InvalidArgumentError(
                "invalid process group: torch.distributed is not initialized; call "
                "torch.distributed.init_process_group first"
            )
        rank = dist.get_rank(group)
        world = dist.get_world_size(group)
        if device is None:
            index = torch.cuda.current_device() if torch.cuda.is_available() else 0
        elif isinstance(device, int):
            index = device
        else:
            device = torch.device(device)
            if device.type != "cuda":
                raise InvalidArgumentError(f"invalid device: {device} is not a CUDA device")
            index = device.index if device.index is not None else torch.cuda.current_device()

        def gather(obj):
            out = [None] * world
            dist.all_gather_object(out, obj, group=group)
            return out

        self._torch = torch
        self._comm = _setup.create(
            rank,
            world,
            index,
            gather,
            max_bytes=int(max_bytes),
            timeout_s=float(timeout_s),
            transport=transport,
            nccl_fallback=bool(nccl_fallback),
        )
        self.rank = rank
        self.world = world
        self.device = torch.device("cuda", index)

    @property
    def transport(self):
        """"cuda" (peer memory) or "host" (pinned host memory)."""
        return self._comm.transport

    @property
    def max_bytes(self):
        return self._comm.max_bytes

    def __repr__(self):
        return repr(self._comm)

    def _check(self, t, what, like=None):
        if not isinstance(t, self._torch.Tensor):
            raise InvalidArgumentError(f"invalid {what}: expected a torch.Tensor, got {type(t).__name__}")
        if t.device != self.device:
            raise InvalidArgumentError(
                f"invalid {what}: it is on {t.device}, the communicator on {self.device}"
            )
        if not t.is_contiguous():
            raise InvalidArgumentError(f"invalid {what}: not contiguous; pass .contiguous()")
        name = _dtype_name(t, what)
        if like is not None:
            if t.dtype != like.dtype or t.shape != like.shape:
                raise InvalidArgumentError(
                    f"invalid {what}: {tuple(t.shape)} {t.dtype}, expected "
                    f"{tuple(like.shape)} {like.dtype}"
                )
        return name

    def _stream(self):
        return self._torch.cuda.current_stream(self.device).cuda_stream

    def all_reduce(self, tensor, out=None, *, algo="auto", overlapped=False):
        """Sums ``tensor`` over the ranks, in place or into ``out`` (same
        shape and type), on the current stream; returns the result tensor.
        ``algo``: "auto", "one-shot" or "two-shot". ``overlapped``: launch
        so the kernel overlaps the previous one's tail (sm_90+)."""
        dtype = self._check(tensor, "tensor")
        if out is None:
            out = tensor
        else:
            self._check(out, "out", like=tensor)
        if tensor.numel() == 0:
            return out
        self._comm.all_reduce(
            tensor.data_ptr(),
            out.data_ptr(),
            tensor.numel(),
            dtype,
            self._stream(),
            algo=algo,
            overlapped=overlapped,
        )
        return out

    def all_gather(self, tensor, out=None, *, overlapped=False):
        """Gathers every rank's ``tensor`` into ``out`` (``world`` times its
        elements, rank r's block r-th along the first dimension; allocated
        when not given), on the current stream; returns ``out``. Where the
        blocks fit the communicator's buffers it runs on tpcomm's kernels,
        otherwise on NCCL (``nccl_fallback``) or raises."""
        dtype = self._check(tensor, "tensor")
        if out is None:
            out = self._torch.empty(
                (self.world * tensor.shape[0],) + tuple(tensor.shape[1:])
                if tensor.dim() > 0
                else (self.world,),
                dtype=tensor.dtype,
                device=tensor.device,
            )
        else:
            self._check(out, "out")
            if out.dtype != tensor.dtype or out.numel() != self.world * tensor.numel():
                raise InvalidArgumentError(
                    f"invalid out: {tuple(out.shape)} {out.dtype}, expected {self.world} x "
                    f"{tensor.numel()} elements of {tensor.dtype}"
                )
        if tensor.numel() == 0:
            return out
        self._comm.all_gather(
            tensor.data_ptr(), out.data_ptr(), tensor.numel(), dtype, self._stream(), overlapped=overlapped
        )
        return out

    def reduce_scatter(self, tensor, out=None, *, op="sum", overlapped=False):
        """Sums ``tensor`` (``world`` equal blocks along its elements) over
        the ranks and returns this rank's block of the sum in ``out``
        (``tensor.numel() / world`` elements; allocated when not given), on
        the current stream."""
        dtype = self._check(tensor, "tensor")
        if tensor.numel() % self.world != 0:
            raise InvalidArgumentError(
                f"invalid tensor: {tensor.numel()} elements do not split into {self.world} equal blocks"
            )
        count = tensor.numel() // self.world
        if out is None:
            shape = (
                (tensor.shape[0] // self.world,) + tuple(tensor.shape[1:])
                if tensor.dim() > 0 and tensor.shape[0] % self.world == 0
                else (count,)
            )
            out = self._torch.empty(shape, dtype=tensor.dtype, device=tensor.device)
        else:
            self._check(out, "out")
            if out.dtype != tensor.dtype or out.numel() != count:
                raise InvalidArgumentError(
                    f"invalid out: {tuple(out.shape)} {out.dtype}, expected {count} elements of {tensor.dtype}"
                )
        if count == 0:
            return out
        self._comm.reduce_scatter(
            tensor.data_ptr(), out.data_ptr(), count, dtype, self._stream(), op=op, overlapped=overlapped
        )
        return out

    def broadcast(self, tensor, src=0, *, overlapped=False):
        """Copies rank ``src``'s ``tensor`` into ``tensor`` on every rank, in
        place, on the current stream; returns ``tensor``."""
        dtype = self._check(tensor, "tensor")
        if not (0 <= int(src) < self.world):
            raise InvalidArgumentError(f"invalid src: {src} (ranks are 0 to {self.world - 1})")
        if tensor.numel() == 0:
            return tensor
        self._comm.broadcast(
            tensor.data_ptr(), tensor.data_ptr(), tensor.numel(), dtype, int(src), self._stream(), overlapped=overlapped
        )
        return tensor

    def _rows(self, x, weight):
        if x.dim() < 1 or x.shape[-1] == 0:
            raise InvalidArgumentError(f"invalid hidden size: x has shape {tuple(x.shape)}")
        hidden = x.shape[-1]
        if weight.dim() != 1 or weight.shape[0] != hidden or weight.dtype != x.dtype:
            raise InvalidArgumentError(
                f"invalid weight: {tuple(weight.shape)} {weight.dtype}, expected "
                f"({hidden},) {x.dtype}"
            )
        return x.numel() // hidden, hidden

    def fused_add_rmsnorm_all_reduce(self, x, residual, weight, eps=1e-6, *, out=None, overlapped=False):
        """All-reduces ``x`` (a row-parallel layer's partial output, left
        unchanged), adds it to ``residual`` in place, and returns
        ``(normed, residual)`` with ``normed = rmsnorm(residual) * weight``
        (into ``out`` when given), in one kernel on the current stream.
        ``x`` and ``residual``: [..., hidden], ``weight``: [hidden], one
        element type. Equal, bit for bit, to ``all_reduce(x, algo="one-shot")``
        followed by :meth:`add_rmsnorm`."""
        dtype = self._check(x, "x")
        self._check(residual, "residual", like=x)
        self._check(weight, "weight")
        rows, hidden = self._rows(x, weight)
        if out is None:
            out = self._torch.empty_like(x)
        else:
            self._check(out, "out", like=x)
        scratch = None
        if self._comm.transport == "host":
            scratch = self._torch.empty_like(x).data_ptr()
        self._comm.fused_add_rmsnorm_all_reduce(
            x.data_ptr(),
            residual.data_ptr(),
            weight.data_ptr(),
            out.data_ptr(),
            rows,
            hidden,
            dtype,
            float(eps),
            self._stream(),
            scratch=scratch,
            overlapped=overlapped,
        )
        return out, residual

    def add_rmsnorm(self, residual, weight, eps=1e-6, *, addend=None, out=None):
        """The unfused half, no communication: ``residual += addend`` (when
        given), returns ``(normed, residual)`` with ``normed =
        rmsnorm(residual) * weight``; the kernel the fused op is checked
        against."""
        dtype = self._check(residual, "residual")
        self._check(weight, "weight")
        if addend is not None:
            self._check(addend, "addend", like=residual)
        rows, hidden = self._rows(residual, weight)
        if out is None:
            out = self._torch.empty_like(residual)
        else:
            self._check(out, "out", like=residual)
        self._comm.add_rmsnorm(
            residual.data_ptr(),
            None if addend is None else addend.data_ptr(),
            weight.data_ptr(),
            out.data_ptr(),
            rows,
            hidden,
            dtype,
            float(eps),
            self._stream(),
        )
        return out, residual

    def check(self):
        """Raises what a kernel or a peer reported (synchronize first)."""
        self._comm.check()

    def memory_report(self):
        """Every buffer the communicator allocated: a dict with ``title``,
        ``lines`` (``name``, ``bytes``, ``place``, ``detail``) and ``gpu``
        (device, allocations, granularity, kernel image)."""
        return json.loads(self._comm.memory_report_json())

    def memory_report_text(self):
        return self._comm.memory_report_text()
