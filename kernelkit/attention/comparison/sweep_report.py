"""The result of a sweep: :class:`SweepReport` and the crossover lengths it reports.

The crossover of a method is the length from which it is faster than softmax attention
(:func:`crossover_lengths`). A report is written as JSON, Markdown and plots, and read back
from its JSON.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from kernelkit._util.atomic import write_text_atomic
from kernelkit.attention.comparison.report import _encode

__all__ = ["SweepReport", "crossover_lengths"]

BASELINE = "softmax"
_MIB = 2.0**20
_TIME_KEYS = ("time_ms", "time_min_ms", "time_max_ms")


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
    """The result of a sweep: one row per (method, length), the crossovers and the setup.

    Returned by :func:`~kernelkit.attention.comparison.sweeps.sweep`.

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
