"""Run time and peak memory of one call, on the CPU or a CUDA GPU.

:func:`measure` times a zero-argument callable (median of ``repeat`` runs after ``warmup`` runs,
every run's time kept for the spread) and measures the peak memory of one more run:

- CUDA: CUDA events around each run, and ``torch.cuda.max_memory_allocated`` after
  ``torch.cuda.reset_peak_memory_stats`` minus the memory allocated before the run;
- CPU: ``time.perf_counter``, and the peak of the bytes held by torch tensor storages created
  during the run, tracked by a :class:`torch.utils._python_dispatch.TorchDispatchMode` that adds
  each new storage's size when an operator returns it and subtracts it when the storage is freed
  (``weakref.finalize``). Memory outside torch storages (NumPy arrays, the Triton interpreter's
  buffers) is not counted.

An out-of-memory error gives a :class:`Measurement` with ``status="oom"`` instead of raising.
torch is imported when :func:`measure` is called, not at import.
"""

from __future__ import annotations

import math
import numbers
import statistics
import time
import weakref
from dataclasses import dataclass

from kernelkit.attention.comparison.memory import is_out_of_memory

__all__ = ["measure", "Measurement", "MEASURE_STATUSES"]

#: ``Measurement.status`` values: measured, ran out of memory.
MEASURE_STATUSES = ("ok", "oom")


@dataclass(frozen=True)
class Measurement:
    """The result of :func:`measure`.

    Attributes
    ----------
    time_ms : float
        Median wall-clock (CPU) or CUDA-event (GPU) time of one call, milliseconds; NaN after
        an out-of-memory error.
    peak_bytes : int
        Peak memory allocated during one call above what was allocated before it, bytes; -1
        after an out-of-memory error.
    device : str
        ``"cpu"`` or the CUDA device (``"cuda:0"``).
    status : str
        ``"ok"`` or ``"oom"``.
    times_ms : tuple of float
        Every timed call, milliseconds, in order (the spread of the median); empty after an
        out-of-memory error.
    """

    time_ms: float
    peak_bytes: int
    device: str
    status: str = "ok"
    times_ms: tuple = ()


def _count(value, name, low):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}; got {value!r}")
    return int(value)


def _storage_tracker():
    """A TorchDispatchMode that keeps the live and peak bytes of storages created inside it."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    class StorageTracker(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.live = 0
            self.peak = 0
            self._seen = set()

        def _freed(self, key, nbytes):
            self.live -= nbytes
            self._seen.discard(key)

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            inputs = tree_flatten((args, kwargs))[0]
            # keep the inputs' storage objects alive for the call, so their ids are not reused
            held = [t.untyped_storage() for t in inputs if isinstance(t, torch.Tensor)]
            existing = {id(s) for s in held}
            out = func(*args, **kwargs)
            for t in tree_flatten(out)[0]:
                if not isinstance(t, torch.Tensor) or t.device.type != "cpu":
                    continue
                storage = t.untyped_storage()
                key = id(storage)
                if key in existing or key in self._seen:
                    continue  # an alias of an input or of a storage already counted
                nbytes = storage.nbytes()
                self._seen.add(key)
                self.live += nbytes
                self.peak = max(self.peak, self.live)
                # the storage's Python object lives as long as the storage itself
                weakref.finalize(storage, self._freed, key, nbytes)
            del held
            return out

    return StorageTracker()


def _measure_cpu(fn, warmup, repeat):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    with _storage_tracker() as tracker:
        fn()
    return times, tracker.peak


def _measure_cuda(fn, warmup, repeat, device):
    import torch

    with torch.cuda.device(device):
        for _ in range(warmup):
            fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(repeat):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        fn()
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - before
    return times, max(int(peak), 0)


def measure(fn, *, device, warmup=1, repeat=5):
    """Median time and peak memory of ``fn()``.

    Parameters
    ----------
    fn : callable
        Called with no arguments, ``warmup + repeat + 1`` times; its result is discarded.
    device : str or torch.device
        Where ``fn`` computes: ``"cpu"``, ``"cuda"`` or ``"cuda:N"``.
    warmup : int, default=1
        Untimed calls first (compilation, autotuning, caches).
    repeat : int, default=5
        Timed calls; the median is reported.

    Returns
    -------
    Measurement
        ``status="oom"`` (time NaN, peak -1) if a call ran out of memory.

    Raises
    ------
    TypeError
        If ``fn`` is not callable.
    ValueError
        For a device other than cpu / cuda, ``warmup < 0`` or ``repeat < 1``, or a CUDA device
        when CUDA is not available.

    Examples
    --------
    >>> import torch
    >>> from kernelkit.attention.comparison.measurement import measure
    >>> m = measure(lambda: torch.ones(1000, 250), device="cpu", repeat=3)
    >>> m.peak_bytes, m.status
    (1000000, 'ok')
    """
    import torch

    if not callable(fn):
        raise TypeError(f"fn must be a callable taking no arguments; got {fn!r}")
    warmup = _count(warmup, "warmup", 0)
    repeat = _count(repeat, "repeat", 1)
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N'; got {device!r}") from None
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N'; got {device!r}")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device={device!r} but CUDA is not available")
        if dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
    name = str(dev)
    try:
        if dev.type == "cuda":
            times, peak = _measure_cuda(fn, warmup, repeat, dev)
        else:
            times, peak = _measure_cpu(fn, warmup, repeat)
    except Exception as exc:  # noqa: BLE001 - only out-of-memory errors are absorbed
        if not is_out_of_memory(exc):
            raise
        if dev.type == "cuda":
            torch.cuda.empty_cache()
        return Measurement(math.nan, -1, name, "oom")
    return Measurement(float(statistics.median(times)), int(peak), name, "ok",
                       tuple(float(t) for t in times))
