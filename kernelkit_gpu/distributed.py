"""Row sharding over a ``torch.distributed`` process group: detection, collectives, K @ V.

kernelkit runs distributed when a process group with more than one rank is initialised
(``torch.distributed.init_process_group``, as ``torchrun`` sets up): every rank makes the same
call with the same full arguments, computes a contiguous block of output rows, and the
collectives give every rank the same full result. :func:`local` switches this off inside a
block (the distributed code itself runs its per-rank work inside it).

Collectives run on the device the backend needs (CUDA for NCCL, the CPU for gloo); every
reduction is float64. A Python exception on one rank is shared by :func:`agree`: every rank
raises the same error naming the rank, at once, with no hang. :func:`check_same` compares
:func:`digest` s of the arguments, so ranks that passed different data or arguments all get the
same ValueError. A rank that dies outright leaves the others in their next collective until the
process group's timeout (``torchrun`` stops them first). No shared memory is assumed.

Everything here is plain PyTorch; the per-rank products are the single-GPU kernels, unchanged.
"""

from __future__ import annotations

import builtins
import contextlib
import hashlib
import os
import threading
import warnings

import numpy as np
import torch

__all__ = [
    "active", "local", "world", "shard", "agree", "check_same", "digest", "all_reduce",
    "all_gather_rows", "broadcast", "broadcast_text", "broadcast_object", "sharded_rows",
    "DistributedError",
]

_state = threading.local()
#: Bytes of an error message shared by :func:`agree` (longer ones are cut).
_MESSAGE_BYTES = 4096
#: Bytes per rank of one all-gather in :func:`all_gather_rows`.
GATHER_BYTES = 256 * 2**20
#: Exception types :func:`agree` raises again on every rank: the failing rank's type where it is
#: a built-in one of these (or a built-in subclass) that takes one message, else the nearest such
#: base class in its MRO, else DistributedError.
_SHARED_TYPES = (ValueError, TypeError, MemoryError, OSError, ImportError, ArithmeticError,
                 IndexError, KeyError, NotImplementedError)
#: Bytes of one :func:`digest`.
DIGEST_BYTES = 16
#: Most named arguments one :func:`check_same` compares (every call gathers this many digests).
MAX_ARGUMENTS = 15
#: 8-byte words the checksum of :func:`digest` mixes per step (bounds its temporaries: 32 MiB).
CHECKSUM_WORDS = 2**22
#: The 64-bit constants of the checksum (the golden ratio and SplitMix64's multipliers), as
#: signed int64 values.
_GOLDEN, _MIX1, _MIX2 = (c - 2**64 for c in (0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9,
                                               0x94D049BB133111EB))


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


def broadcast_object(obj, src=0):
    """Rank ``src``'s picklable ``obj`` (a small value: a decision) on every rank."""
    box = [obj]
    torch.distributed.broadcast_object_list(box, src=src, device=_comm_device())
    return box[0]


def _shared_type_name(error):
    """The name of the exception type every rank raises for ``error``: the nearest class in its
    MRO that is a built-in (sub)class of :data:`_SHARED_TYPES` and can be built from one message
    (UnicodeDecodeError, which needs five arguments, gives UnicodeError; sklearn's
    NotFittedError gives ValueError), else ``"DistributedError"``."""
    for cls in type(error).__mro__:
        if (cls.__module__ == "builtins" and issubclass(cls, _SHARED_TYPES)
                and getattr(builtins, cls.__name__, None) is cls):
            try:
                cls("")
            except Exception:  # noqa: BLE001 - a constructor that wants more than a message
                continue
            return cls.__name__
    return DistributedError.__name__


def _raise_as(type_name, message):
    """Raise ``type_name`` (from :func:`_shared_type_name`) with ``message``."""
    cls = getattr(builtins, type_name, None)
    if isinstance(cls, type) and issubclass(cls, _SHARED_TYPES):
        raise cls(message)
    raise DistributedError(message)


def agree(fn, *args, **kwargs):
    """Run ``fn(*args, **kwargs)`` on every rank; if it raised on any rank, raise on every rank.

    Every rank raises the error of the lowest failing rank with the message
    ``"rank R of W: <message>"``, as the same type: the failing rank's where it is a standard
    one (ValueError, TypeError, MemoryError, OSError... and their built-in subclasses that take
    one message), else its nearest such base class (UnicodeError for a UnicodeDecodeError,
    ValueError for a ValueError subclass of another package), else :class:`DistributedError`.
    ``fn`` must run no collective. Costs one all-reduce of one number, and one broadcast of the
    message on failure.
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
    text = broadcast_text(f"{_shared_type_name(error)}\n{error}" if error is not None else "",
                          first)
    type_name, _, message = text.partition("\n")
    full = f"rank {first} of {size}: {message}"
    if error is not None:
        try:
            _raise_as(type_name, full)
        except Exception as shared:  # noqa: BLE001 - the same error, chained to the local one
            raise shared from error
    _raise_as(type_name, full)


def digest(value):
    """A :data:`DIGEST_BYTES`-byte BLAKE2b digest of ``value``, which changes with any change of
    its contents, their order included.

    Arrays (NumPy arrays and scalars, torch tensors on any device, array-likes with
    ``__array__``) count by dtype, shape and the bytes of their elements in C order (the values
    as passed, not converted), through :func:`_checksum`, computed where the data are; numbers,
    strings and bytes by type and ``repr`` (exact for floats); lists, tuples and dicts item by
    item (dicts in the order of their keys' ``repr``); paths as strings; objects with
    ``get_params`` (estimators, scikit-learn kernels) by type and ``get_params(deep=False)``;
    any other object by its type's (a function's own) qualified name.
    """
    h = hashlib.blake2b(digest_size=DIGEST_BYTES)
    _feed(h, value)
    return h.digest()


def _feed(h, value):
    """Add ``value`` to the hash ``h`` (:func:`digest`)."""
    if isinstance(value, torch.Tensor):
        data = value.detach().resolve_conj().resolve_neg().contiguous().reshape(-1)
        _feed_data(h, "tensor", str(value.dtype), value.shape, data.view(torch.uint8))
    elif isinstance(value, (np.ndarray, np.generic)):
        a = np.asarray(value)
        if a.dtype.hasobject:
            _feed_text(h, f"objects{a.shape}")
            for item in a.ravel():
                _feed(h, item)
        else:
            raw = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
            with warnings.catch_warnings():  # a read-only array: only read here
                warnings.simplefilter("ignore", UserWarning)
                _feed_data(h, "array", a.dtype.str, a.shape, torch.from_numpy(raw))
    elif value is None or isinstance(value, (bool, int, float, complex, str, bytes)):
        _feed_text(h, f"{type(value).__name__}:{value!r}")
    elif isinstance(value, os.PathLike):
        _feed(h, os.fspath(value))
    elif isinstance(value, (list, tuple)):
        _feed_text(h, f"{type(value).__name__}[{len(value)}]")
        for item in value:
            _feed(h, item)
    elif isinstance(value, dict):
        _feed_text(h, f"dict[{len(value)}]")
        for key in sorted(value, key=repr):
            _feed(h, key)
            _feed(h, value[key])
    elif hasattr(value, "get_params") and not isinstance(value, type):
        _feed_text(h, _qualified_name(type(value)))
        _feed(h, value.get_params(deep=False))
    elif hasattr(value, "__array__"):
        _feed(h, np.asarray(value))
    else:
        _feed_text(h, _qualified_name(value if hasattr(value, "__qualname__") else type(value)))


def _feed_text(h, text):
    data = text.encode(errors="surrogatepass")
    h.update(len(data).to_bytes(8, "little"))
    h.update(data)


def _feed_data(h, kind, dtype, shape, data):
    _feed_text(h, f"{kind} {dtype} {tuple(shape)}")
    h.update(_checksum(data))


def _qualified_name(obj):
    return f"{getattr(obj, '__module__', None)}.{getattr(obj, '__qualname__', None)}"


def _shift_right(z, bits):
    """Logical right shift of int64 ``z`` (torch's ``>>`` shifts the sign in)."""
    return (z >> bits) & ((1 << (64 - bits)) - 1)


def _checksum(data):
    """The 8-byte order-sensitive checksum of the bytes ``data`` (a 1-D uint8 tensor), computed
    on its device in exact integer arithmetic, so every device gives the same value.

    Word i (8 bytes, zero-padded at the end) is XORed with i times the golden-ratio constant and
    mixed by SplitMix64's finaliser (a bijection of 64-bit words), and the mixed words are
    summed modulo 2**64: a change of any word, or two words trading places, changes the sum
    (but with probability about 2**-64). :data:`CHECKSUM_WORDS` words at a time.
    """
    total = torch.zeros((), dtype=torch.int64, device=data.device)
    step = 8 * CHECKSUM_WORDS
    for lo in range(0, data.numel(), step):
        part = data[lo:lo + step]
        padded = torch.zeros(-(-part.numel() // 8) * 8, dtype=torch.uint8, device=data.device)
        padded[:part.numel()] = part
        z = padded.view(torch.int64)
        z = z ^ (torch.arange(lo // 8, lo // 8 + z.numel(), dtype=torch.int64,
                              device=data.device) * _GOLDEN)
        z = (z ^ _shift_right(z, 30)) * _MIX1
        z = (z ^ _shift_right(z, 27)) * _MIX2
        total += (z ^ _shift_right(z, 31)).sum()
    return int(total).to_bytes(8, "little", signed=True)


def check_same(name, **arguments):
    """Raise ValueError on every rank unless every rank passed equal ``arguments``.

    The first check of every distributed entry point ``name``: every rank must make the same
    call with the same full arguments. Each rank computes the :func:`digest` of each argument
    (inside :func:`agree`, so an error doing so is raised on every rank); one all-gather of
    ``world x (1 + MAX_ARGUMENTS) x DIGEST_BYTES`` bytes gives every rank every digest, and each
    rank compares them with rank 0's. The error names the lowest rank that differs and the
    first argument it differs in (or that the rank made another call at the same time).
    """
    if len(arguments) > MAX_ARGUMENTS:
        raise ValueError(f"check_same takes at most {MAX_ARGUMENTS} arguments; got "
                         f"{len(arguments)}")
    rank, size = world()
    names = list(arguments)

    def digests():
        record = torch.zeros((MAX_ARGUMENTS + 1, DIGEST_BYTES), dtype=torch.uint8)
        done = {}  # an object passed twice (y=x) is read once
        for i, value in enumerate([(name, names), *arguments.values()]):
            if id(value) not in done:
                done[id(value)] = torch.frombuffer(bytearray(digest(value)), dtype=torch.uint8)
            record[i] = done[id(value)]
        return record

    mine = agree(digests).to(_comm_device())
    records = [torch.empty_like(mine) for _ in range(size)]
    torch.distributed.all_gather(records, mine)
    first = records[0]
    for r, record in enumerate(records[1:], start=1):
        if not torch.equal(record[0], first[0]):
            raise ValueError(
                f"{name}: rank {r} of {size} made another call than rank 0 at the same time; "
                "under a process group every rank makes the same calls in the same order")
        for i, arg in enumerate(names, start=1):
            if not torch.equal(record[i], first[i]):
                raise ValueError(
                    f"{name}: the ranks passed different arguments: rank {r} of {size} passed "
                    f"a different {arg} than rank 0; under a process group every rank passes "
                    "the same full arguments (the same data, in the same order)")


def sharded_rows(single, x, y, v, kernel="rbf", *, transpose=False, precision="accurate",
                 **params):
    """``single(x, y, v, ...)`` (:func:`kernelkit_gpu.kernel_matvec` on one rank) over the
    process group: every rank passes the same full x, y, v (checked first, with the kernel and
    its parameters: :func:`check_same`); rank r computes its :func:`shard`
    of the output rows against the whole of the other operand, and the rows are all-gathered,
    so every rank returns the full result. ``single`` is passed in to keep imports one-way."""
    check_same("kernel_matvec", x=x, y=y, v=v, kernel=kernel, transpose=transpose,
               precision=precision, params=params)  # the same call on every rank
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
