"""Creating a communicator on ranks that share an all-gather (no torch here).

The Rust side makes its set-up exchanges through a callable
(``exchange(key, mine, timeout_s) -> list[bytes]``); :class:`GatherExchange`
builds it on any all-gather of Python objects, such as
``torch.distributed.all_gather_object``.

Every rank must make the same number of all-gathers, or they pair up wrongly
and hang. A rank can leave the set-up early (a local error, say no GPU), so
the set-up ends with :meth:`GatherExchange.finish`: every rank posts
"finished" (with its error, if any) until one all-gather in which every rank
says "finished". A rank still inside the set-up sees a "finished" entry as a
peer leaving, and leaves too; so all ranks reach that all-gather whatever
step each left at, and all take the same decision: a communicator on every
rank, or an error on every rank.
"""

from . import _tpcomm

_POST = "post"
_FINISHED = "finished"
# Bound on finish rounds; ranks agree in one or two.
_MAX_FINISH_ROUNDS = 64


class PeerLeft(Exception):
    """A peer left the set-up (with the error it reported)."""


class GatherExchange:
    """The set-up channel of one rank: ``gather(obj)`` returns every rank's
    ``obj``, index = rank, as ``all_gather_object`` does."""

    def __init__(self, gather, rank, world):
        self._gather = gather
        self.rank = rank
        self.world = world
        self.peer_left = False

    def _all(self, obj):
        out = list(self._gather(obj))
        if len(out) != self.world:
            raise RuntimeError(
                f"the all-gather returned {len(out)} entries for a world of {self.world}"
            )
        return out

    def __call__(self, key, mine, timeout_s=None):
        entries = self._all((_POST, key, bytes(mine)))
        for r, e in enumerate(entries):
            if e[0] == _FINISHED:
                self.peer_left = True
                raise PeerLeft(f"rank {r} left the set-up: {e[2] or 'it finished'}")
            if e[1] != key:
                raise RuntimeError(
                    f"rank {r} is at set-up step {e[1]!r} while rank {self.rank} is at "
                    f"{key!r}: every rank must create its communicators in the same order"
                )
        return [e[2] for e in entries]

    def finish(self, error):
        """Posts this rank's outcome (None: success, else the error message)
        until every rank has; returns [(rank, message)] of the ranks that
        failed on their own (not because a peer left)."""
        mine = (_FINISHED, error is None, error or "", not self.peer_left)
        for _ in range(_MAX_FINISH_ROUNDS):
            entries = self._all(mine)
            if all(e[0] == _FINISHED for e in entries):
                return [(r, e[2]) for r, e in enumerate(entries) if not e[1] and e[3]]
        raise _tpcomm.AbortedError(
            f"communicator aborted: the ranks did not finish the set-up within "
            f"{_MAX_FINISH_ROUNDS} all-gathers; create a new communicator on every rank"
        )


def create(rank, world, device, gather, **options):
    """A ``tpcomm._tpcomm.Communicator`` for this rank, its set-up data
    swapped through ``gather``; every rank calls this with the same options
    (``max_bytes``, ``timeout_s``, ``transport``, ``nccl_fallback``).

    Raises on every rank when any rank fails: the failing rank its own typed
    error, the others :class:`tpcomm.AbortedError` naming that rank and its
    message."""
    ex = GatherExchange(gather, rank, world)
    comm, error, message = None, None, None
    try:
        comm = _tpcomm.Communicator(rank, world, device, ex, **options)
    except Exception as e:  # noqa: BLE001 - every failure must reach finish()
        error = e
        message = f"{type(e).__name__}: {e}"
    failed = ex.finish(message)
    if not failed and error is None:
        return comm
    comm = None  # frees this rank's buffers; no peer kernel can be using them yet
    if error is not None and not ex.peer_left:
        raise error
    if failed:
        r, msg = failed[0]
        raise _tpcomm.AbortedError(
            f"communicator aborted: rank {r} could not create its communicator "
            f"({msg}), so no rank of the group has one; fix that rank and create "
            "a new communicator on every rank"
        )
    # Only "peer left" failures: cannot happen without a root failure, but say so.
    raise _tpcomm.AbortedError(f"communicator aborted: {error}")
