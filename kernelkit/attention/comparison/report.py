"""The result of :func:`kernelkit.attention.comparison.accuracy`: a table of methods plus context.

:class:`CompareReport` holds plain Python data (rows of numbers, a context dict, heatmap arrays,
metadata), writes strict JSON (NaN as ``null``, infinities as ``"inf"`` / ``"-inf"``) and reads
it back, renders a Markdown table with units, and draws its plots through
:func:`kernelkit.attention.comparison.plots.plot_compare`.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np

from kernelkit._util.atomic import write_text_atomic

__all__ = ["CompareReport", "ROW_KEYS"]

#: Keys of every row of :attr:`CompareReport.rows`, in table order.
ROW_KEYS = ("method", "label", "family", "n_features", "output_rel_error",
            "output_rel_error_std", "weights_rel_error", "tv_mean", "tv_max", "kl_mean", "kl_max",
            "kl_inf_rows", "nonpositive_denominators", "guarded_rows", "n_rows", "time_ms",
            "time_min_ms", "time_max_ms", "peak_bytes", "device", "status", "seeds")

#: Keys whose JSON ``null`` means NaN (everywhere else ``null`` is None).
_FLOAT_KEYS = frozenset({
    "output_rel_error", "output_rel_error_std", "weights_rel_error", "tv_mean", "tv_max",
    "kl_mean", "kl_max", "time_ms", "time_min_ms", "time_max_ms", "entropy_mean",
    "entropy_normalized", "peakiness",
})
_MIB = 2**20
#: Significant digits of heatmap values in JSON (float32 precision, a third of the size).
_HEATMAP_DIGITS = 7


def _encode(x):
    """JSON-ready copy: NaN -> None, ±inf -> "inf" / "-inf", arrays and tuples -> lists."""
    if isinstance(x, dict):
        return {str(key): _encode(value) for key, value in x.items()}
    if isinstance(x, (list, tuple)):
        return [_encode(value) for value in x]
    if isinstance(x, np.ndarray):
        return _encode(x.tolist())
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        x = float(x)
        if math.isnan(x):
            return None
        if math.isinf(x):
            return "inf" if x > 0 else "-inf"
        return x
    return x


def _decode(x, key=None):
    if isinstance(x, dict):
        return {k: _decode(value, k) for k, value in x.items()}
    if isinstance(x, list):
        return [_decode(value, key) for value in x]
    if x in ("inf", "-inf"):
        return float(x)
    if x is None and key in _FLOAT_KEYS:
        return math.nan
    return x


def _round_heatmap(a):
    flat = [float(f"{value:.{_HEATMAP_DIGITS}g}") for value in np.asarray(a, float).ravel()]
    return np.array(flat).reshape(np.shape(a))


def _fmt(x, digits=3):
    if x is None:
        return "–"
    x = float(x)
    if math.isnan(x):
        return "–"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:.{digits}g}"


class CompareReport:
    """Errors, speed and memory of attention methods against float64 softmax.

    Attributes
    ----------
    rows : list of dict
        One per method, with the keys :data:`ROW_KEYS`: ``method`` (spec), ``label``,
        ``family``, ``n_features``, ``output_rel_error`` (mean over seeds),
        ``output_rel_error_std``, ``weights_rel_error``, ``tv_mean``, ``tv_max``, ``kl_mean``,
        ``kl_max`` (nats, over rows with finite KL), ``kl_inf_rows``,
        ``nonpositive_denominators``, ``guarded_rows`` (rows whose denominator the guard
        raised), ``n_rows`` (rows of all seeds pooled), ``time_ms``
        (median), ``time_min_ms`` and ``time_max_ms`` (the spread of the timed calls),
        ``peak_bytes``, ``device``, ``status`` ("ok", "oom" or "not measured"), ``seeds``.
    context : dict
        ``uniform`` (the metric keys of a row for uniform attention), ``entropy_mean`` (nats),
        ``entropy_normalized`` (entropy / log of the visible keys, rows with >= 2 keys),
        ``peakiness`` (mean of the largest weight per row), ``n_rows`` and ``svd_floor``: a list
        of {``rank``, ``weights_rel_error``, ``output_rel_error``} for the best rank-M
        approximation of the softmax weights.
    heatmaps : dict
        ``"index"``: (b, h); ``"softmax"`` and each method spec: the weights (at most 256 x 256
        leading block) of that batch element and head, first seed.
    meta : dict
        ``shape``, ``input_shape``, ``causal``, ``scale``, ``seeds``, ``dtype`` (of the timed
        runs), ``device``, ``measured``, ``versions``, ``timestamp``.
    """

    def __init__(self, rows, context, heatmaps, meta):
        self.rows = rows
        self.context = context
        self.heatmaps = heatmaps
        self.meta = meta

    # ------------------------------------------------------------------------------ JSON
    def to_json(self, path=None, *, heatmaps=True):
        """Strict JSON text of the report; also written atomically to ``path`` when given.

        NaN becomes ``null`` and infinities ``"inf"`` / ``"-inf"``; heatmap values keep
        7 significant digits. :meth:`from_json` reads it back.

        Parameters
        ----------
        path : str, os.PathLike or None
        heatmaps : bool
            Include the weight maps (up to 256 x 256 per method: megabytes of text for many
            methods); False keeps only their ``index`` (:meth:`save_heatmaps` stores them
            compactly).

        Returns
        -------
        str
        """
        maps = {key: (list(value) if key == "index" else _round_heatmap(value))
                for key, value in self.heatmaps.items() if heatmaps or key == "index"}
        doc = {"kind": "kernelkit.compare", "rows": self.rows, "context": self.context,
               "heatmaps": maps, "meta": self.meta}
        text = json.dumps(_encode(doc), allow_nan=False, indent=1)
        if path is not None:
            write_text_atomic(os.fspath(path), text)
        return text

    def save_heatmaps(self, path):
        """Write the weight maps to a compressed ``.npz`` (one array per method spec, plus
        ``index``), atomically; ``numpy.load(path)`` reads them back."""
        from kernelkit._util.atomic import atomic_path

        arrays = {key: np.asarray(value) for key, value in self.heatmaps.items()}
        with atomic_path(os.fspath(path)) as tmp:
            with open(tmp, "wb") as f:
                np.savez_compressed(f, **arrays)
        return path

    @classmethod
    def from_json(cls, text_or_path):
        """Read a report written by :meth:`to_json`, from JSON text or a file path.

        Raises
        ------
        ValueError
            If the text is not a kernelkit comparison report.
        """
        if isinstance(text_or_path, os.PathLike) or (
                isinstance(text_or_path, str) and not text_or_path.lstrip().startswith("{")):
            text = Path(text_or_path).read_text(encoding="utf-8")
        elif isinstance(text_or_path, str):
            text = text_or_path
        else:
            raise TypeError(f"from_json takes JSON text or a file path; got {text_or_path!r}")
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"not a JSON comparison report: {exc}") from None
        if not isinstance(doc, dict) or doc.get("kind") != "kernelkit.compare":
            raise ValueError("not a kernelkit comparison report (no 'kind': 'kernelkit.compare')")
        doc = _decode(doc)
        maps = {key: (tuple(value) if key == "index" else np.asarray(value, dtype=np.float64))
                for key, value in doc["heatmaps"].items()}
        return cls(rows=doc["rows"], context=doc["context"], heatmaps=maps, meta=doc["meta"])

    # -------------------------------------------------------------------------- Markdown
    def to_markdown(self):
        """The methods table and the context table in Markdown, units in the headers."""
        m = self.meta
        s = m.get("shape", {})
        lines = [
            f"Attention methods vs float64 softmax: B={s.get('B')} H={s.get('H')} "
            f"T={s.get('T')} S={s.get('S')} D={s.get('D')}, causal={m.get('causal')}, "
            f"scale={_fmt(m.get('scale'), 4)}, seeds={m.get('seeds')}; timed in "
            f"{m.get('dtype') or '–'} on {m.get('device')}.",
            "",
            "| method | M | output rel. error (mean ± std) | weights rel. error | "
            "TV mean / max | KL mean / max (nats) | rows KL=inf | den ≤ 0 | rows guarded | "
            "time (ms): median (min–max) | peak memory (MiB) |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in self.rows:
            peak = r.get("peak_bytes")
            mem = "–" if peak is None or peak < 0 else _fmt(peak / _MIB)
            time_cell = (f"{_fmt(r.get('time_ms'))} ({_fmt(r.get('time_min_ms'))}–"
                         f"{_fmt(r.get('time_max_ms'))})" if r.get("status") in ("ok", None)
                         else r["status"])
            lines.append(
                f"| {r['label']} | {r['n_features'] if r['n_features'] is not None else '–'} "
                f"| {_fmt(r['output_rel_error'])} ± {_fmt(r['output_rel_error_std'], 2)} "
                f"| {_fmt(r['weights_rel_error'])} | {_fmt(r['tv_mean'])} / {_fmt(r['tv_max'])} "
                f"| {_fmt(r['kl_mean'])} / {_fmt(r['kl_max'])} "
                f"| {r['kl_inf_rows']} / {r['n_rows']} | {r['nonpositive_denominators']} "
                f"| {r.get('guarded_rows', 0)} | {time_cell} | {mem} |"
            )
        c = self.context
        u = c.get("uniform", {})
        lines += [
            "",
            "| context | value |",
            "|---|---:|",
            f"| uniform attention: output rel. error | {_fmt(u.get('output_rel_error'))} |",
            f"| uniform attention: weights rel. error | {_fmt(u.get('weights_rel_error'))} |",
            f"| uniform attention: TV mean | {_fmt(u.get('tv_mean'))} |",
            f"| uniform attention: KL mean (nats) | {_fmt(u.get('kl_mean'))} |",
            f"| softmax entropy, mean over rows (nats) | {_fmt(c.get('entropy_mean'))} |",
            f"| softmax entropy / log(visible keys) | {_fmt(c.get('entropy_normalized'))} |",
            f"| peakiness: mean of the row maximum weight | {_fmt(c.get('peakiness'))} |",
        ]
        for f in c.get("svd_floor", []):
            lines.append(f"| SVD floor, rank {f['rank']}: weights / output rel. error | "
                         f"{_fmt(f['weights_rel_error'])} / {_fmt(f['output_rel_error'])} |")
        return "\n".join(lines) + "\n"

    def __str__(self):
        return self.to_markdown()

    def __repr__(self):
        return self.to_markdown()

    # ----------------------------------------------------------------------------- plots
    def plot(self, out_dir, formats=("png", "svg")):
        """Heatmaps and error-vs-feature-count plots in ``out_dir``; returns the file paths.

        See :func:`kernelkit.attention.comparison.plots.plot_compare` (needs matplotlib).
        """
        from kernelkit.attention.comparison.plots import plot_compare

        return plot_compare(self, out_dir, formats)
