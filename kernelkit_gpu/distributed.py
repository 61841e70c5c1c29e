"""Row sharding over a ``torch.distributed`` process group: detection, collectives, K @ V.

kernelkit runs distributed when a process group with more than one rank is initialised
(``torch.distributed.init_process_group``, as ``torchrun`` sets up): every rank makes the same
call with the same full arguments, computes a contiguous block of output rows, and the
collectives give every rank the same full result. :func:`local` switches this off inside a
block (the distributed code itself runs its per-rank work inside it).

Collectives run on the device the backend needs (CUDA for NCCL, the CPU for gloo); every
reduction is float64. A Python exception on one rank is shared by :func:`agree`: every rank
raises the same error naming the rank, at once, with no hang. A rank that dies outright leaves
the others in their next collective until the process group's timeout (``torchrun`` stops them
first). No shared memory is assumed.

Everything here is plain PyTorch; the per-rank products are the single-GPU kernels, unchanged.
"""

from __future__ import annotations

import builtins
import contextlib
import threading

import torch

__all__ = [
    "active", "local", "world", "shard", "agree", "check_same", "all_reduce", "all_gather_rows",
    "broadcast", "broadcast_text", "sharded_rows", "DistributedError",
]

_state = threading.local()
#: Bytes of an error message shared by :func:`agree` (longer ones are cut).
_MESSAGE_BYTES = 4096
#: Bytes per rank of one all-gather in :func:`all_gather_rows`.
GATHER_BYTES = 256 * 2**20
#: Exception types :func:`agree` raises again as themselves on every rank (others:
#: DistributedError).
_SHARED_TYPES = (ValueError, TypeError, MemoryError, OSError, ImportError, ArithmeticError,
                 IndexError, KeyError, NotImplementedError)


class DistributedError(RuntimeError):
    """A rank failed with an exception that is not a standard one; the message names it."""


def active():
    """True when a process group of more than one rank is initialised and not inside
    :func:`local`."""
    if getattr(_state, "local", 0):
        return False
    dist = torch.distributed
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


@contextlib.contextmanager
def local():
    """Within this block kernelkit ignores the process group (every call is single-process)."""
    _state.local = getattr(_state, "local", 0) + 1
    try:
        yield
    finally:
        _state.local -= 1


def world():
    """``(rank, world_size)`` of the default process group."""
    return torch.distributed.get_rank(), torch.distributed.get_world_size()


def shard(n, rank=None, size=None):
    """``(lo, hi)``: the contiguous rows of ``n`` that ``rank`` owns (sizes differ by at most
    one; ranks past ``n`` own none)."""
    if rank is None:
        rank, size = world()
    return n * rank // size, n * (rank + 1) // size


def _comm_device():
    if torch.distributed.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def all_reduce(t, op="sum"):
    """The float64 sum (or "min" / "max") of tensor ``t`` over the ranks, on ``t``'s device."""
    ops = {"sum": torch.distributed.ReduceOp.SUM, "min": torch.distributed.ReduceOp.MIN,
           "max": torch.distributed.ReduceOp.MAX}
    buf = t.to(device=_comm_device(), dtype=torch.float64, copy=True).contiguous()
    torch.distributed.all_reduce(buf, op=ops[op])
    return buf.to(t.device)


def broadcast(t, src=0):
    """Rank ``src``'s tensor ``t`` on every rank (same shape and dtype on every rank)."""
    buf = t.to(_comm_device(), copy=True).contiguous()  # never the caller's tensor
    torch.distributed.broadcast(buf, src=src)
    return buf.to(t.device)


def all_gather_rows(local_rows, n, bounds=None):
    """The ``n`` rows that rank r holds as ``local_rows`` (its rows ``bounds[r]``, by default
    :func:`shard`), on every rank in order, as one tensor on ``local_rows``' device.

    Uneven shards are padded for the collective and trimmed; wide rows travel in column chunks
    of at most :data:`GATHER_BYTES` per rank.
    """
    rank, size = world()
    bounds = [shard(n, r, size) for r in range(size)] if bounds is None else bounds
    width = max(max(hi - lo for lo, hi in bounds), 1)
    dev = _comm_device()
    cols = 1
    for extent in local_rows.shape[1:]:
        cols *= extent
    flat = local_rows.reshape(local_rows.shape[0], cols)
    out = torch.empty((n, cols), dtype=local_rows.dtype, device=local_rows.device)
    step = max(1, GATHER_BYTES // (width * local_rows.element_size()))
    for c0 in range(0, max(cols, 1), step):
        c1 = min(cols, c0 + step)
        buf = torch.zeros((width, c1 - c0), dtype=local_rows.dtype, device=dev)
        buf[:flat.shape[0]] = flat[:, c0:c1].to(dev)
        parts = [torch.empty_like(buf) for _ in range(size)]
        torch.distributed.all_gather(parts, buf)
        for p, (lo, hi) in zip(parts, bounds):
            out[lo:hi, c0:c1] = p[:hi - lo].to(out.device)
    return out.reshape((n,) + tuple(local_rows.shape[1:]))


def broadcast_text(text, src=0):
    """Rank ``src``'s string ``text`` on every rank (at most 4096 bytes of UTF-8 are kept)."""
    data = text.encode()[:_MESSAGE_BYTES]
    buf = torch.zeros(_MESSAGE_BYTES + 2, dtype=torch.uint8)
    buf[0], buf[1] = len(data) // 256, len(data) % 256
    if data:
        buf[2:2 + len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    buf = broadcast(buf, src=src).cpu()
    length = int(buf[0]) * 256 + int(buf[1])
    return bytes(buf[2:2 + length].tolist()).decode(errors="replace")


def _raise_as(type_name, message):
    cls = getattr(builtins, type_name, None)
    if isinstance(cls, type) and issubclass(cls, _SHARED_TYPES):
        raise cls(message)
    raise DistributedError(message)


def agree(fn, *args, **kwargs):
    """Run ``fn(*args, **kwargs)`` on every rank; if it raised on any rank, raise on every rank.

    Every rank raises the error of the lowest failing rank, as the same type when it is a
    standard one (ValueError, TypeError, MemoryError, OSError...; else
    :class:`DistributedError`), with the message ``"rank R of W: <message>"``. Costs one
    all-reduce of one number, and one broadcast of the message on failure.
    """
    rank, size = world()
    error = None
    try:
        result = fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - shared with every rank, then raised
        error = exc
    flag = all_reduce(torch.tensor([float(rank if error is not None else size)]), "min")
    first = int(flag[0])
    if first == size:
        return result
    text = broadcast_text(f"{type(error).__name__}\n{error}" if error is not None else "", first)
    type_name, _, message = text.partition("\n")
    full = f"rank {first} of {size}: {message}"
    if error is not None:
        try:
            _raise_as(type_name, full)
        except Exception as shared:  # noqa: BLE001 - the same error, chained to the local one
            raise shared from error
    _raise_as(type_name, full)


def check_same(name, *values):
    """Raise ValueError on every rank unless ``values`` (shapes, sizes, checksums) are equal on
    every rank: every rank must pass the same full arguments."""
    mine = torch.nan_to_num(torch.tensor([float(v) for v in values], dtype=torch.float64))
    low, high = all_reduce(mine, "min"), all_reduce(mine, "max")
    if not torch.equal(low, high):
        raise ValueError(
            f"{name}: the ranks passed different arguments (shapes, sizes and checksums "
            f"{low.tolist()} to {high.tolist()}); under a process group every rank passes the "
            "same full arguments")


def sharded_rows(single, x, y, v, kernel="rbf", *, transpose=False, precision="accurate",
                 **params):
    """``single(x, y, v, ...)`` (:func:`kernelkit_gpu.kernel_matvec` on one rank) over the
    process group: every rank passes the same full x, y, v; rank r computes its :func:`shard`
    of the output rows against the whole of the other operand, and the rows are all-gathered,
    so every rank returns the full result. ``single`` is passed in to keep imports one-way."""
    tensors = [t for t in (x, y, v) if isinstance(t, torch.Tensor)]
    shapes = [s for t in tensors for s in (t.ndim, *t.shape)]
    sums = [float(torch.sum(t, dtype=torch.float64)) for t in tensors if t.is_floating_point()]
    check_same("kernel_matvec", *shapes, *sums)  # the same data on every rank
    rows = y if transpose else x  # the operand whose rows are the output's rows
    n = rows.shape[0] if isinstance(rows, torch.Tensor) and rows.ndim == 2 else 0
    lo, hi = shard(n)

    def mine():
        with local():
            if transpose:
                return single(x, y[lo:hi] if n else y, v, kernel, transpose=True,
                              precision=precision, **params)
            return single(x[lo:hi] if n else x, y, v, kernel, precision=precision, **params)

    out = agree(mine)
    return all_gather_rows(out, n)
