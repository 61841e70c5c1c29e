"""Time and peak memory of attention methods over sequence length, and the crossover length.

:func:`sweep` runs each method's fast path
(:meth:`kernelkit.attention.comparison.methods.Method.run`, the
public :mod:`kernelkit.attention` API) on synthetic q, k, v at each length, measures it with
:func:`kernelkit.attention.comparison.measurement.measure` and returns a :class:`SweepReport`. The
crossover of a
method is the length from which it is faster than softmax attention (:func:`crossover_lengths`).
torch is imported only when a sweep runs.
"""

from __future__ import annotations

import json
import math
import os
import platform
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from kernelkit._util.atomic import write_text_atomic
from kernelkit.attention.comparison import memory
from kernelkit.attention.comparison.report import _encode
from kernelkit_math.attention import resolve_is_causal

__all__ = ["sweep", "sweep_seconds", "SweepReport", "SweepInterrupted", "crossover_lengths",
           "DTYPES"]

#: dtypes a sweep can run in.
DTYPES = ("float32", "float16", "bfloat16")
#: Default lengths: 512 ... 65536 on a GPU; small ones on the CPU, where softmax is O(T²) in
#: plain PyTorch (and far slower under the Triton interpreter).
GPU_LENGTHS = tuple(2**i for i in range(9, 17))
CPU_LENGTHS = (128, 256, 512, 1024, 2048)
BASELINE = "softmax"
_MIB = 2.0**20
_TIME_KEYS = ("time_ms", "time_min_ms", "time_max_ms")
_ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2}
#: (B, H, T, T) float32 arrays the plain-PyTorch path of a method holds at its peak (forward;
#: one more with backward): measured with measure() at T = 256, 512 (2.1 and 4.1 arrays).
#: "local" (local + summary attention): its twin measured 3.0 arrays at T = 512 (compare on
#: the real heads, forward); its Triton forward is O(T), its backward the twin's.
QUADRATIC_ARRAYS = {"softmax": 3, "kernel": 5, "local": 4}
#: (B, H, T, M + D) float32 arrays a method with M features (or landmarks) holds at its peak:
#: measure() on the CPU gave 3.0-9.0 for elu+1, favor+:128, taylor2 and nystrom:32 at D = 16
#: and 64, T = 1024 and 4096, causal or not, forward or forward + backward.
LINEAR_ARRAYS = 10
#: Seconds of one forward call on the plain-PyTorch CPU path, for :func:`sweep_seconds`, per
#: B·H·T²·D for the methods of :data:`QUADRATIC_ARRAYS` and per B·H·T·(M + D)·D for a method
#: with M features (or landmarks). A 2-core CPU shared with other jobs (H = 8, D = 64, T = 1024
#: to 4096, causal) took 2.1e-10 to 6.6e-10 for softmax and 7.7e-10 to 1.5e-9 for kernel:rbf;
#: 0.9e-9 (taylor2) to 6.7e-9 (elu+1) per feature unit, nystrom:64 up to 10 times more.
CPU_SECONDS = {"quadratic": 6e-10, "features": 5e-9}
#: Forward + backward over forward alone: 3.5 for softmax on that CPU, 0.8 to 2.3 for the
#: feature maps.
BACKWARD_COST = 3


# -------------------------------------------------------------------------------- crossover
def _speed_ratio(row, base):
    """method time / softmax time at one length; 0 when only the method ran, inf when only
    softmax ran, None when neither did."""
    ran, base_ran = row["status"] == "ok", base["status"] == "ok"
    if ran and base_ran:
        return row["time_ms"] / base["time_ms"]
    if ran:
        return 0.0
    if base_ran:
        return math.inf
    return None


def _overlap(row, base):
    """True when the [min, max] time ranges of two rows that ran overlap (medians stand in for
    rows without a spread)."""
    lo, hi = (row.get(k, row["time_ms"]) for k in ("time_min_ms", "time_max_ms"))
    base_lo, base_hi = (base.get(k, base["time_ms"]) for k in ("time_min_ms", "time_max_ms"))
    return lo <= base_hi and base_lo <= hi


def crossover_lengths(rows, baseline=BASELINE):
    """The sequence length from which each method is faster than ``baseline``.

    Parameters
    ----------
    rows : list of dict
        Sweep rows with keys ``method``, ``T``, ``time_ms`` and ``status`` (``"ok"`` when the
        method ran; its time is then used), and optionally ``time_min_ms`` and ``time_max_ms``
        (the spread of the repeats). A length where only the method ran counts as faster, one
        where only the baseline ran as slower; lengths where neither ran are left out.
    baseline : str, default="softmax"
        The ``method`` of the reference rows.

    Returns
    -------
    dict
        ``{method: {"measured": T or None, "estimate": float or None, "noisy": bool or None}}``
        for each method other than the baseline. ``measured`` is the smallest swept T from
        which the method is strictly faster at every longer swept T (None when it is not
        faster at the longest).
        ``estimate`` interpolates time ratio against T on log-log axes between the last slower
        length and ``measured``, where both methods ran; None when the method was faster from the
        shortest length (the crossover lies below the swept range) or never crossed. Empty when
        no row belongs to the baseline. ``noisy`` is True when the crossover rests on timings
        whose [min, max] ranges overlap those of the baseline at ``measured`` or at the last
        slower length before it (so repeats could order them either way), False when they are
        apart, None without a measured crossover.

    Examples
    --------
    >>> rows = [dict(method=m, T=T, time_ms=t, status="ok") for m, T, t in [
    ...     ("softmax", 100, 1.0), ("softmax", 1000, 10.0),
    ...     ("elu+1", 100, 10.0), ("elu+1", 1000, 1.0)]]
    >>> crossover_lengths(rows)  # ratio 10 at T=100, 0.1 at T=1000: equal at sqrt(100 * 1000)
    {'elu+1': {'measured': 1000, 'estimate': 316.22776601683796, 'noisy': False}}
    """
    base = {r["T"]: r for r in rows if r["method"] == baseline}
    if not base:
        return {}
    result = {}
    for method in dict.fromkeys(r["method"] for r in rows if r["method"] != baseline):
        points = []
        for row in sorted((r for r in rows if r["method"] == method), key=lambda r: r["T"]):
            ratio = _speed_ratio(row, base[row["T"]]) if row["T"] in base else None
            if ratio is not None:
                points.append((row["T"], ratio))
        measured = estimate = noisy = None
        first_fast = len(points)
        while first_fast > 0 and points[first_fast - 1][1] < 1.0:
            first_fast -= 1
        if first_fast < len(points):
            measured = points[first_fast][0]
            if first_fast > 0:
                (t_a, r_a), (t_b, r_b) = points[first_fast - 1], points[first_fast]
                if 0.0 < r_b and math.isfinite(r_a):  # both methods ran at both lengths
                    frac = math.log(r_a) / (math.log(r_a) - math.log(r_b))
                    estimate = math.exp(math.log(t_a) + frac * (math.log(t_b) - math.log(t_a)))
        if measured is not None:
            bracket = [T for T, _ in points[max(first_fast - 1, 0):first_fast + 1]]
            by_t = {r["T"]: r for r in rows if r["method"] == method}
            noisy = any(by_t[T]["status"] == base[T]["status"] == "ok"
                        and _overlap(by_t[T], base[T]) for T in bracket)
        result[method] = {"measured": measured, "estimate": estimate, "noisy": noisy}
    return result


# ----------------------------------------------------------------------------------- report
def _fmt(x):
    return f"{x:.4g}" if abs(x) < 1e4 else f"{x:.0f}"


def _cell(row, key):
    if row is None:
        return ""
    if row["status"] != "ok":
        return row["status"]
    if key != "time":
        return _fmt(row["peak_bytes"] / _MIB)
    lo, hi = row.get("time_min_ms", math.nan), row.get("time_max_ms", math.nan)
    spread = f" ({_fmt(lo)}–{_fmt(hi)})" if math.isfinite(lo) and math.isfinite(hi) else ""
    return _fmt(row["time_ms"]) + spread


@dataclass(repr=False)
class SweepReport:
    """The result of :func:`sweep`: one row per (method, length), the crossovers and the setup.

    Attributes
    ----------
    rows : list of dict
        Keys ``method`` (spec), ``label``, ``T``, ``batch``, ``time_ms`` (median, NaN when it did
        not run), ``time_min_ms`` and ``time_max_ms`` (the fastest and slowest of the repeats,
        NaN when it did not run), ``peak_bytes`` (-1 when it did not run), ``status``
        (``"ok"``, ``"oom"`` or ``"skipped"``) and ``note`` (why it did not run; empty when it
        ran).
    crossover : dict
        ``{method: {"measured": T or None, "estimate": float or None, "noisy": bool or None}}``,
        see :func:`crossover_lengths`.
    meta : dict
        The sweep's settings (methods, lengths, heads, d, causal, backward, dtype, device...),
        the device name, library versions and a timestamp.
    """

    rows: list = field(default_factory=list)
    crossover: dict = field(default_factory=dict)
    meta: dict = field(default_factory=dict)

    def to_json(self, path=None):
        """The report as strict JSON (NaN as null, infinity as ``"inf"``).

        With ``path``, also write it there atomically (a temporary file renamed when complete).
        """
        text = json.dumps(
            _encode({"kind": "sweep", "rows": self.rows, "crossover": self.crossover,
                     "meta": self.meta}),
            indent=2, allow_nan=False,
        )
        if path is not None:
            write_text_atomic(os.fspath(path), text + "\n")
        return text

    @classmethod
    def from_json(cls, text_or_path):
        """Rebuild a report from :meth:`to_json` output: a JSON string or a file path."""
        if isinstance(text_or_path, str) and text_or_path.lstrip().startswith("{"):
            text = text_or_path
        elif isinstance(text_or_path, (str, os.PathLike)):
            text = Path(text_or_path).read_text(encoding="utf-8")
        else:
            raise TypeError(f"text_or_path must be JSON text or a path; got {text_or_path!r}")
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("kind") != "sweep":
            raise ValueError("not a sweep report: expected a JSON object with kind 'sweep'")
        rows = [dict(r, **{key: math.nan if r[key] is None else float(r[key])
                           for key in _TIME_KEYS if key in r}) for r in data["rows"]]
        return cls(rows=rows, crossover=data["crossover"], meta=data["meta"])

    def methods(self):
        """The methods' specs in sweep order, each with its label: ``[(spec, label), ...]``."""
        return list(dict.fromkeys((r["method"], r["label"]) for r in self.rows))

    def _table(self, key, unit):
        methods = self.methods()
        by = {(r["method"], r["T"]): r for r in self.rows}
        lengths = sorted({(r["T"], r["batch"]) for r in self.rows})
        head = "| T (tokens) | batch | " + " | ".join(f"{label} ({unit})" for _, label in methods)
        lines = [head + " |", "|" + "---:|" * (2 + len(methods))]
        for T, batch in lengths:
            cells = [_cell(by.get((spec, T)), key) for spec, _ in methods]
            lines.append(f"| {T} | {batch} | " + " | ".join(cells) + " |")
        return lines

    def _crossover_lines(self):
        if not self.crossover:
            if [spec for spec, _ in self.methods()] == [BASELINE]:
                return [f"No crossover: {BASELINE} is the reference of the crossover and the "
                        "only method swept; sweep other methods with it (e.g. elu+1, "
                        "favor+:256) to get the length from which each is faster."]
            return [f"No crossover: the sweep has no {BASELINE!r} rows to compare with."]
        labels = dict(self.methods())
        lengths = sorted({r["T"] for r in self.rows})
        lines = [f"| method | faster than {BASELINE} from T (measured) | crossover T (log-log "
                 "estimate) | timing ranges |", "|---|---:|---:|---|"]
        for spec, c in self.crossover.items():
            if c["measured"] is None:
                measured, estimate = f"not up to T = {lengths[-1]}", "-"
            elif c["estimate"] is None:
                measured, estimate = str(c["measured"]), f"≤ {c['measured']} (below the range)"
            else:
                measured, estimate = str(c["measured"]), f"{c['estimate']:.0f}"
            ranges = {None: "-", False: "apart", True: "overlap (noisy)"}
            lines.append(f"| {labels.get(spec, spec)} | {measured} | {estimate} | "
                         f"{ranges[c.get('noisy')]} |")
        if any(c.get("noisy") for c in self.crossover.values()):
            lines += ["", f"A crossover marked noisy rests on lengths where the method's and "
                      f"{BASELINE}'s min–max times overlap: on a busy machine they can swap "
                      "order between runs."]
        return lines

    def to_markdown(self):
        """Markdown: the setup, a time table (ms), a peak-memory table (MiB) and the crossovers."""
        m = self.meta
        pass_ = "forward + backward" if m.get("backward") else "forward"
        setup = (
            f"Device: {m.get('device_name', m.get('device', '?'))} ({m.get('device', '?')}), "
            f"{m.get('dtype', '?')}, H = {m.get('heads', '?')}, D = {m.get('d', '?')}, "
            f"{'causal' if m.get('causal') else 'non-causal'}, {pass_}; "
            f"median (min–max) of {m.get('repeat', '?')} runs."
        )
        lines = ["## Attention sweep", "", setup, ""]
        stopped = m.get("interrupted")
        if stopped:
            at = f"T = {stopped['T']}"
            if stopped["method"] is not None:
                at = f"{dict(self.methods()).get(stopped['method'], stopped['method'])}, {at}"
            lines += [f"Interrupted (Ctrl-C) at {at}: the tables hold the runs finished "
                      "before it.", ""]
        lines += ["### Time (median, min–max)", ""]
        lines += self._table("time", "ms")
        lines += ["", "### Peak memory (beyond the inputs)", ""]
        lines += self._table("memory", "MiB")
        lines += ["", "### Crossover", ""]
        lines += self._crossover_lines()
        return "\n".join(lines) + "\n"

    def plot(self, out_dir, formats=("png", "svg")):
        """Write the time and memory plots (see
        :func:`kernelkit.attention.comparison.plots.plot_sweep`)."""
        from kernelkit.attention.comparison.plots import plot_sweep

        return plot_sweep(self, out_dir, formats)

    def __str__(self):
        return self.to_markdown()

    __repr__ = __str__


# ------------------------------------------------------------------------------------ sweep
def _check_int(value, name, minimum=1):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int; got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}; got {value}")
    return value


def _check_lengths(lengths):
    if isinstance(lengths, (str, bytes)) or not hasattr(lengths, "__iter__"):
        raise TypeError(f"lengths must be a sequence of ints; got {lengths!r}")
    lengths = [_check_int(T, "each length") for T in lengths]
    if not lengths:
        raise ValueError("lengths must hold at least one sequence length")
    if len(set(lengths)) != len(lengths):
        raise ValueError(f"lengths must not repeat a value; got {lengths}")
    return sorted(lengths)


def _parse_methods(methods, d):
    from kernelkit.attention.comparison.methods import parse_method

    if isinstance(methods, str) or not hasattr(methods, "__iter__"):
        methods = [methods]
    parsed = [parse_method(m, d) for m in methods]
    if not parsed:
        raise ValueError("methods must hold at least one method, e.g. ('softmax', 'elu+1')")
    specs = [m.spec for m in parsed]
    repeated = sorted({s for s in specs if specs.count(s) > 1})
    if repeated:
        raise ValueError(f"methods lists {', '.join(map(repr, repeated))} more than once")
    return parsed


def _device_name(device):
    if device == "cuda":
        import torch

        return torch.cuda.get_device_name()
    return platform.processor() or platform.machine() or "CPU"


def _input_bytes(B, heads, T, d, dtype, backward):
    """Bytes of one length's tensors: q, k, v, the output (and with backward the output
    gradient and three input gradients), plus the float32 draw of one of them."""
    n = B * heads * T * d
    return ((8 if backward else 4) * _ITEMSIZE[dtype] + 4) * n


def _method_bytes(method, B, heads, T, d, triton, backward):
    """Bytes a method needs beyond its inputs: :data:`QUADRATIC_ARRAYS` (B, H, T, T) arrays
    for softmax and kernel smoothers on the plain-PyTorch path (``triton`` False; the Triton
    kernels need O(T)), :data:`LINEAR_ARRAYS` (B, H, T, M + D) arrays for a method with M
    features or landmarks."""
    family = method.family.partition(":")[0]
    if family in QUADRATIC_ARRAYS:
        quadratic = not triton or (family == "local" and backward)
        return (QUADRATIC_ARRAYS[family] + backward) * B * heads * T * T * 4 if quadratic else 0
    return LINEAR_ARRAYS * B * heads * T * (method.n_features + d) * 4


def _available(where):
    """Bytes free where the sweep allocates: host memory, or the GPU's free memory."""
    if where == "cuda":
        import torch

        return torch.cuda.mem_get_info()[0]
    return memory.available_memory()


def _check_inputs_fit(batches, heads, d, dtype, backward, tokens, available):
    """Refuse the sweep when the inputs of a length do not fit, before anything is drawn."""
    for T, B in batches.items():
        needed = _input_bytes(B, heads, T, d, dtype, backward)
        if needed > available:
            hint = ("fewer tokens" if tokens is not None else
                    f"shorter lengths: they fit up to about T = {int(available * T // needed)}")
            raise ValueError(
                f"the inputs at T = {T} (B x H x T x D = {B} x {heads} x {T} x {d}, {dtype}"
                f"{', with gradients' if backward else ''}) need about "
                f"{memory.format_bytes(needed)} but {memory.format_bytes(available)} of memory is "
                f"available; sweep {hint}"
            )


@dataclass(frozen=True)
class _Setup:
    """A sweep's checked settings: parsed methods, ``{T: batch}``, and the rest as given."""

    methods: list
    batches: dict
    heads: int
    d: int
    backward: bool
    dtype: str
    where: str

    def needed_bytes(self, method, T, triton):
        """Bytes a method needs at length T: its inputs and its working memory."""
        B = self.batches[T]
        return (_input_bytes(B, self.heads, T, self.d, self.dtype, self.backward)
                + _method_bytes(method, B, self.heads, T, self.d, triton, self.backward))


def _setup(methods, lengths, batch, heads, d, backward, dtype, device, tokens, repeat):
    """Check the settings :func:`sweep` and :func:`sweep_seconds` share, and that the inputs of
    every length fit; return them resolved, before torch is imported."""
    from kernelkit._util.device import resolve_device

    for name, value in (("heads", heads), ("d", d), ("batch", batch), ("repeat", repeat)):
        _check_int(value, name)
    if not isinstance(backward, bool):
        raise TypeError(f"backward must be True or False; got {backward!r}")
    if tokens is not None:
        _check_int(tokens, "tokens")
        if batch != 1:
            raise ValueError(f"give tokens or batch, not both; got tokens={tokens}, batch={batch}")
    where = resolve_device(device)
    lengths = _check_lengths(GPU_LENGTHS if lengths is None and where == "cuda" else
                             CPU_LENGTHS if lengths is None else lengths)
    if tokens is not None and tokens < lengths[-1]:
        raise ValueError(f"tokens={tokens} is less than one sequence of the longest length "
                         f"T = {lengths[-1]} (batch = tokens // T would be 0); give tokens >= "
                         f"{lengths[-1]}")
    if dtype is None:
        dtype = "bfloat16" if where == "cuda" else "float32"
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}; got {dtype!r}")
    parsed = _parse_methods(methods, d)
    batches = {T: tokens // T if tokens is not None else batch for T in lengths}
    available = _available(where)
    if available is not None:
        _check_inputs_fit(batches, heads, d, dtype, backward, tokens, available)
    return _Setup(parsed, batches, heads, d, backward, dtype, where)


def _call_seconds(method, B, heads, T, d, backward):
    """Rough seconds of one call on the plain-PyTorch CPU path (:data:`CPU_SECONDS`)."""
    if method.family.partition(":")[0] in QUADRATIC_ARRAYS:
        seconds = CPU_SECONDS["quadratic"] * B * heads * T * T * d
    else:
        seconds = CPU_SECONDS["features"] * B * heads * T * (method.n_features + d) * d
    return seconds * (BACKWARD_COST if backward else 1)


def sweep_seconds(methods=("softmax", "elu+1"), lengths=None, *, batch=1, heads=8, d=64,
                  backward=False, dtype=None, device="auto", tokens=None, repeat=5):
    """Rough seconds :func:`sweep` takes with these arguments on a CPU, to warn before a long run.

    Each (method, length) that the memory plan lets run costs ``repeat + 2`` calls (the
    warm-up, the timed calls, the memory measurement) of :data:`CPU_SECONDS` per unit of work;
    a method is counted up to the first length whose memory would not fit, as :func:`sweep`
    skips it from there.

    Parameters
    ----------
    methods, lengths, batch, heads, d, backward, dtype, device, tokens, repeat
        As :func:`sweep`.

    Returns
    -------
    float or None
        Seconds on the plain-PyTorch CPU path; None where that path does not run: on a GPU (the
        Triton kernels) and under the Triton interpreter (``TRITON_INTERPRET=1``, far slower).

    Raises
    ------
    ValueError, TypeError
        As :func:`sweep`, for the same arguments.
    """
    setup = _setup(methods, lengths, batch, heads, d, backward, dtype, device, tokens, repeat)
    if setup.where != "cpu":
        return None
    import torch

    from kernelkit.attention._dispatch import use_triton

    if use_triton(torch.empty(0, dtype=getattr(torch, setup.dtype))):
        return None
    available = _available("cpu")
    total = 0.0
    for method in setup.methods:
        for T, B in setup.batches.items():
            if available is not None and setup.needed_bytes(method, T, False) > available:
                break  # skipped at this length and every longer one
            total += (repeat + 2) * _call_seconds(method, B, heads, T, d, backward)
    return total


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
    calls after a
    warm-up, and the peak memory allocated beyond the inputs. Memory is planned first (free
    host memory, :func:`kernelkit.attention.comparison.memory.available_memory`, or free GPU
    memory): a
    sweep whose inputs at some length do not fit is refused before anything is drawn, and a
    method whose working memory would not fit (:data:`QUADRATIC_ARRAYS`,
    :data:`LINEAR_ARRAYS`) is ``"skipped"`` there with the reason. A method that still runs out
    of memory gets status ``"oom"``; both are ``"skipped"`` at longer lengths. One that cannot
    run the setup (a ValueError or NotImplementedError, e.g. no backward) is ``"skipped"`` with
    the reason. :func:`sweep_seconds` estimates how long a sweep takes on a CPU.

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
