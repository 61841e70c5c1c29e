"""Time and peak memory of attention methods over sequence length, and the crossover length.

:func:`sweep` runs each method's fast path
(:meth:`kernelkit.attention.comparison.methods.Method.run`, the public :mod:`kernelkit.attention`
API) on synthetic q, k, v at each length, measures it with
:func:`kernelkit.attention.comparison.measurement.measure` and returns a :class:`SweepReport`. The
crossover of a method is the length from which it is faster than softmax attention
(:func:`crossover_lengths`). torch is imported only when a sweep runs.

This module runs the sweep. Its plan (checked settings, memory, :func:`sweep_seconds`) is in
:mod:`kernelkit.attention.comparison.sweep_plan`, its report (:class:`SweepReport`,
:func:`crossover_lengths`) in :mod:`kernelkit.attention.comparison.sweep_report`; both are
importable from here too.
"""

from __future__ import annotations

import math
import os
import platform
import sys
import time

from kernelkit.attention.comparison import memory
from kernelkit.attention.comparison.sweep_plan import (
    DTYPES,
    _available,
    _check_int,
    _setup,
    sweep_seconds,
)
from kernelkit.attention.comparison.sweep_report import SweepReport, _cell, crossover_lengths
from kernelkit_math.attention import resolve_is_causal

__all__ = ["sweep", "sweep_seconds", "SweepReport", "SweepInterrupted", "crossover_lengths",
           "DTYPES"]


def _device_name(device):
    if device == "cuda":
        import torch

        return torch.cuda.get_device_name()
    return platform.processor() or platform.machine() or "CPU"


def _inputs(batch, heads, T, d, dtype, device, seed, backward):
    """Standard-normal q, k, v (scores q·k / sqrt(D) of unit spread) and an output gradient."""
    import torch

    gen = torch.Generator(device="cpu").manual_seed(seed)
    tensors = [torch.randn(batch, heads, T, d, generator=gen).to(device=device, dtype=dtype)
               for _ in range(4 if backward else 3)]
    for t in tensors[:3]:
        t.requires_grad_(backward)
    return tensors


def _runner(method, tensors, causal, seed, backward):
    import torch

    q, k, v = tensors[:3]
    if not backward:
        return lambda: method.run(q, k, v, is_causal=causal, seed=seed)

    def forward_backward():
        out = method.run(q, k, v, is_causal=causal, seed=seed)
        torch.autograd.grad(out, (q, k, v), tensors[3])
    return forward_backward


def _row_line(row, done, total):
    """One finished (method, length) as a line of progress for a log or a pipe."""
    if row["status"] == "ok":
        result = (f"{_cell(row, 'time')} ms, {_cell(row, 'memory')} MiB peak beyond the "
                  "inputs")
    else:
        result = f"{row['status']} ({row['note']})"
    return f"sweep {done}/{total}: {row['label']} at T = {row['T']}: {result}"


def _nothing_measured(rows):
    """The ValueError of a sweep in which no method ran at any length: each method's reason."""
    first = {}
    for r in rows:
        first.setdefault(r["method"], r)
    reasons = "; ".join(f"{r['label']} at T = {r['T']}: {r['note']}" for r in first.values())
    return ValueError(f"the sweep measured nothing (no method ran at any length): {reasons}")


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C during :func:`sweep`: a KeyboardInterrupt that keeps what was measured before it.

    Attributes
    ----------
    report : SweepReport
        The rows finished before the interrupt (possibly none), their crossovers, and the
        settings; ``report.meta["interrupted"]`` is ``{"method": spec or None, "T": T}``, the
        step that was running.
    """

    def __init__(self, report):
        super().__init__("sweep interrupted")
        self.report = report


def sweep(methods=("softmax", "elu+1"), lengths=None, *, batch=1, heads=8, d=64, is_causal=True,
          backward=False, dtype=None, device="auto", tokens=None, repeat=5, progress=None, seed=0,
          causal=None):
    """Time and peak memory of attention methods over sequence length.

    At each length T, q, k, v of shape (batch, heads, T, d) are drawn from N(0, 1) (so the
    scaled scores have unit spread) and each method's fast path runs under
    :func:`kernelkit.attention.comparison.measurement.measure`: the median time over ``repeat``
    calls after a warm-up, and the peak memory allocated beyond the inputs. Memory is planned
    first (free host memory, :func:`kernelkit.attention.comparison.memory.available_memory`, or
    free GPU memory): a sweep whose inputs at some length do not fit is refused before anything
    is drawn, and a method whose working memory would not fit
    (:data:`~kernelkit.attention.comparison.sweep_plan.QUADRATIC_ARRAYS`,
    :data:`~kernelkit.attention.comparison.sweep_plan.LINEAR_ARRAYS`) is ``"skipped"`` there
    with the reason. A method that still runs out of memory gets status ``"oom"``; both are
    ``"skipped"`` at longer lengths. One that cannot run the setup (a ValueError or
    NotImplementedError, e.g. no backward) is ``"skipped"`` with the reason.
    :func:`sweep_seconds` estimates how long a sweep takes on a CPU.

    Each measurement runs in a worker thread that the calling thread waits for, so Ctrl-C
    stops the sweep at once even inside a long torch call (which never looks at signals):
    :class:`SweepInterrupted` (a KeyboardInterrupt) is raised with the rows finished so far,
    and the abandoned worker finishes its call in the background.

    Parameters
    ----------
    methods : sequence of method specs, default=("softmax", "elu+1")
        Anything :func:`kernelkit.attention.comparison.methods.parse_method` accepts. softmax is the
        reference of the crossovers: include it with other methods to get crossover lengths.
    lengths : sequence of int or None, default=None
        Sequence lengths T = S. None means 512, 1024, ..., 65536 on a GPU and
        128, 256, ..., 2048 on the CPU.
    batch : int, default=1
        Batch size B at every length (see ``tokens``).
    heads, d : int, default=8, 64
        Heads H and head dimension D.
    is_causal : bool, default=True
        Causal (decoder) attention.
        ``causal`` is the deprecated name of ``is_causal`` (FutureWarning).
    backward : bool, default=False
        Time forward + backward (gradients of q, k, v) instead of the forward pass alone.
    dtype : {"float32", "float16", "bfloat16"} or None, default=None
        None means bfloat16 on a GPU and float32 on the CPU.
    device : {"auto", "cpu", "cuda"}, default="auto"
    tokens : int or None, default=None
        Keep B·T constant instead of B: at each length B = tokens // T (rounded down), so
        ``tokens`` must be at least the longest length. Give either ``tokens`` or a ``batch``
        other than 1, not both.
    repeat : int, default=5
        Timed calls per measurement (after one warm-up call).
    progress : bool or None, default=None
        True: a tqdm progress bar on stderr, one step per (length, method). False: nothing.
        None: the bar when stderr is a terminal, otherwise one line per finished (length,
        method) on stderr, flushed at once (so a log or a pipe shows how far the sweep is).
    seed : int, default=0
        Seed of the inputs and of random feature maps.

    Returns
    -------
    SweepReport

    Raises
    ------
    ValueError
        For an unknown method or dtype, bad sizes, repeated methods or lengths, both
        ``tokens`` and ``batch``, ``tokens`` below the longest length, ``device="cuda"``
        without a GPU, inputs that do not fit in the available memory at some length, or a
        sweep in which no method ran at any length (the message gives each method's reason).
    TypeError
        For sizes that are not integers, or flags that are not bools.
    SweepInterrupted
        On Ctrl-C (KeyboardInterrupt), with the report of the rows finished before it.

    Examples
    --------
    >>> from kernelkit.attention.comparison.sweeps import sweep
    >>> report = sweep(["softmax", "elu+1"], [32, 64], heads=2, d=16, device="cpu", repeat=2)
    >>> [(r["method"], r["T"], r["status"]) for r in report.rows][:2]
    [('softmax', 32, 'ok'), ('elu+1', 32, 'ok')]
    >>> sorted(report.crossover)
    ['elu+1']
    """
    causal = resolve_is_causal(is_causal, causal, "sweep")
    _check_int(seed, "seed", minimum=0)
    if not isinstance(causal, bool):
        raise TypeError(f"is_causal must be True or False; got {causal!r}")
    if progress is not None and not isinstance(progress, bool):
        raise TypeError(f"progress must be True, False or None; got {progress!r}")
    setup = _setup(methods, lengths, batch, heads, d, backward, dtype, device, tokens, repeat)
    parsed, where = setup.methods, setup.where

    import torch
    from tqdm import tqdm

    from kernelkit.attention._dispatch import use_triton
    from kernelkit.attention.comparison.accuracy import _interruptible, _versions
    from kernelkit.attention.comparison.measurement import measure

    torch_dtype = getattr(torch, setup.dtype)
    triton = use_triton(torch.empty(0, dtype=torch_dtype, device=where))
    available = _available(where)  # again: importing torch took address space
    meta = {
        "methods": [m.spec for m in parsed], "lengths": list(setup.batches), "batch": batch,
        "tokens": tokens, "heads": heads, "d": d, "causal": causal, "backward": backward,
        "dtype": setup.dtype, "device": where, "device_name": _device_name(where),
        "repeat": repeat, "seed": seed,
        "triton_interpret": os.environ.get("TRITON_INTERPRET") == "1",
        "versions": _versions(), "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "interrupted": None,
    }
    total = len(setup.batches) * len(parsed)
    terminal = callable(getattr(sys.stderr, "isatty", None)) and sys.stderr.isatty()
    lines = progress is None and not terminal
    bar = tqdm(total=total, desc="sweep", unit="run", leave=False,
               disable=not (terminal if progress is None else progress))
    rows, failed, step = [], {}, None
    try:
        for T, B in setup.batches.items():
            step = {"method": None, "T": T}
            try:
                tensors = _inputs(B, heads, T, d, torch_dtype, where, seed, backward)
            except Exception as exc:  # noqa: BLE001 - only failed allocations are absorbed
                if not memory.is_out_of_memory(exc):
                    raise
                tensors = None
            for method in parsed:
                step = {"method": method.spec, "T": T}
                bar.set_postfix_str(f"{method.label} T={T}")
                row = dict(method=method.spec, label=method.label, T=T, batch=B,
                           time_ms=math.nan, time_min_ms=math.nan, time_max_ms=math.nan,
                           peak_bytes=-1, status="ok", note="")
                needed = setup.needed_bytes(method, T, triton)
                if tensors is None:
                    row.update(status="oom", note="the inputs do not fit in memory")
                elif method.spec in failed:
                    row.update(status="skipped", note=failed[method.spec])
                elif available is not None and needed > available:
                    row.update(status="skipped", note=(
                        f"needs about {memory.format_bytes(needed)} of memory, "
                        f"{memory.format_bytes(available)} available"))
                    failed[method.spec] = f"{row['note']} at T = {T}"
                else:
                    try:
                        fn = _runner(method, tensors, causal, seed, backward)
                        got = _interruptible(measure, fn, device=where, warmup=1,
                                             repeat=repeat)
                    except (ValueError, NotImplementedError) as exc:
                        row.update(status="skipped", note=f"{type(exc).__name__}: {exc}")
                        failed[method.spec] = row["note"]
                    else:
                        status = got.status
                        row.update(time_ms=float(got.time_ms), peak_bytes=int(got.peak_bytes),
                                   status=status)
                        if got.times_ms:
                            row.update(time_min_ms=min(got.times_ms),
                                       time_max_ms=max(got.times_ms))
                        if status == "oom":
                            row["note"] = "out of memory"
                            failed[method.spec] = f"out of memory at T = {T}"
                rows.append(row)
                bar.update(1)
                if lines:
                    print(_row_line(row, len(rows), total), file=sys.stderr, flush=True)
            del tensors
    except KeyboardInterrupt:
        meta["interrupted"] = step
        raise SweepInterrupted(SweepReport(rows=rows, crossover=crossover_lengths(rows),
                                           meta=meta)) from None
    finally:
        bar.close()
    if not any(r["status"] == "ok" for r in rows):
        raise _nothing_measured(rows)
    return SweepReport(rows=rows, crossover=crossover_lengths(rows), meta=meta)
