"""Plots of comparison and sweep reports (matplotlib, imported only when a plot is drawn).

- :func:`plot_compare`: softmax | method | difference heatmaps of the attention weights, and
  error against feature count with the SVD floor.
- :func:`plot_sweep`: time and peak memory against sequence length, crossover marked.

Figures are drawn on :class:`matplotlib.figure.Figure` objects with no pyplot state, so plotting
never changes the caller's matplotlib backend; each file is written beside its final name and
renamed when complete.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

__all__ = ["plot_compare", "plot_sweep", "require_matplotlib", "FORMATS"]

#: File formats the plot functions write.
FORMATS = ("png", "svg", "pdf")
#: Weight heatmaps share a colour scale clipped at this quantile of |weight|, so one large
#: weight (row 0 of a causal matrix is 1.0) does not wash out the rest; each difference map
#: is clipped at this quantile of its own |difference| (its title gives the true maximum).
CLIP_QUANTILE = 0.995
#: Errors at or below this are rounding noise of an exact method (the full-rank SVD floor).
EXACT = 1e-9
_MIB = 2.0**20


def require_matplotlib():
    """Return :class:`matplotlib.figure.Figure`; ImportError with the install hint without it."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError(
            "plots need matplotlib >= 3.7: pip install matplotlib (in a clone of kernelkit: "
            "pip install -e '.[plot]')"
        ) from None
    return Figure


def _check_formats(formats):
    if isinstance(formats, str):
        formats = (formats,)
    formats = tuple(formats)
    bad = [f for f in formats if f not in FORMATS]
    if bad or not formats:
        raise ValueError(
            f"formats must be a non-empty sequence of {', '.join(map(repr, FORMATS))}; "
            f"got {formats!r}"
        )
    return tuple(dict.fromkeys(formats))


def _out_dir(out_dir):
    if not isinstance(out_dir, (str, os.PathLike)):
        raise TypeError(f"out_dir must be a directory path; got {out_dir!r}")
    path = Path(out_dir)
    if path.exists() and not path.is_dir():
        raise ValueError(f"out_dir {str(path)!r} exists and is not a directory")
    path.mkdir(parents=True, exist_ok=True)
    return path


def _save(fig, out_dir, stem, formats):
    from kernelkit._util.atomic import atomic_path

    paths = []
    for fmt in formats:
        path = out_dir / f"{stem}.{fmt}"
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=fmt, dpi=120)
        paths.append(path)
    return paths


def _colors(n):
    from matplotlib import colormaps

    cmap = colormaps["tab10"]
    return [cmap(i % 10) for i in range(n)]


def _log2_axis(ax):
    """A base-2 log x axis labelled with plain integers (512, 1024...) rather than powers."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())


def _positive(xs, ys, floor=0.0):
    """The (x, y) pairs a log-log plot can show: both finite and positive (y above floor)."""
    keep = [(x, y) for x, y in zip(xs, ys)
            if x is not None and y is not None and np.isfinite(x) and np.isfinite(y)
            and x > 0 and y > floor]
    return [p[0] for p in keep], [p[1] for p in keep]


# ------------------------------------------------------------------------------- compare
def _heatmap_figure(report):
    from matplotlib import colormaps

    Figure = require_matplotlib()
    maps = report.heatmaps
    soft = np.asarray(maps["softmax"], dtype=np.float64)
    labels = {r["method"]: r["label"] for r in report.rows}
    specs = [r["method"] for r in report.rows if r["method"] != "softmax" and r["method"] in maps]
    everything = np.concatenate([soft.ravel()] + [np.asarray(maps[s]).ravel() for s in specs])
    vmax = float(np.quantile(np.abs(everything), CLIP_QUANTILE)) or 1.0
    negative = bool(np.any(everything < 0))
    weights_cmap = colormaps["viridis"].with_extremes(under="#ff00ff")
    cbar_label = "weight" + (" (magenta: < 0)" if negative else "")
    b, h = maps.get("index", (0, 0))
    n = max(1, len(specs))
    height = 3.9 * n + 1.0
    # A fixed grid rather than a layout engine (constrained layout costs seconds here):
    # columns softmax | method | colour bar | (space for its labels) | difference | colour bar.
    fig = Figure(figsize=(15, height))
    grid = fig.add_gridspec(n, 6, width_ratios=[1, 1, 0.05, 0.3, 1, 0.05], left=0.05,
                            right=0.93, bottom=0.6 / height, top=1 - 1.1 / height, wspace=0.16,
                            hspace=0.5 / 3.9 * 1.3)
    fig.suptitle(
        f"Attention weights, batch {b} head {h}: leading {soft.shape[0]} x {soft.shape[1]} "
        f"block (colour scales clipped at the {100 * CLIP_QUANTILE:g}th percentile of |value|)",
        y=1 - 0.3 / height,
    )
    for row in range(n):
        spec = specs[row] if specs else None
        approx = np.asarray(maps[spec], dtype=np.float64) if spec else soft
        diff = approx - soft
        lim = float(np.quantile(np.abs(diff), CLIP_QUANTILE)) or float(np.max(np.abs(diff)))
        lim = lim or 1.0
        label = labels.get(spec, spec) if spec else "softmax"
        panels = [
            (0, soft, "softmax (reference)", weights_cmap, 0.0, vmax),
            (1, approx, label, weights_cmap, 0.0, vmax),
            (4, diff, f"{label} - softmax (max |diff| = {np.max(np.abs(diff)):.2g})",
             colormaps["RdBu_r"], -lim, lim),
        ]
        images = []
        for col, data, title, cmap, lo, hi in panels:
            ax = fig.add_subplot(grid[row, col])
            images.append(ax.imshow(data, cmap=cmap, vmin=lo, vmax=hi, aspect="auto",
                                    interpolation="nearest"))
            ax.set_title(title)
            if col == 0:
                ax.set_ylabel("query position i")
            elif col == 1:
                ax.tick_params(labelleft=False)  # same rows as the reference beside it
            if row == n - 1:
                ax.set_xlabel("key position j")
        fig.colorbar(images[1], cax=fig.add_subplot(grid[row, 2]), label=cbar_label,
                     extend="both" if negative else "max")
        fig.colorbar(images[2], cax=fig.add_subplot(grid[row, 5]), label="difference in weight",
                     extend="both")
    return fig


def _family_points(rows, key, std_key=None):
    """{family: (n_features, errors, stds)} sorted by n_features, and the rows with no
    feature count (drawn as horizontal lines)."""
    families, flat = {}, []
    for r in rows:
        if r["method"] == "softmax":
            continue
        if r.get("n_features") is None:
            flat.append(r)
            continue
        families.setdefault(r["family"], []).append(r)
    out = {}
    for family, members in families.items():
        members = sorted(members, key=lambda r: r["n_features"])
        out[family] = (
            [r["n_features"] for r in members],
            [r[key] for r in members],
            [r.get(std_key) or 0.0 for r in members] if std_key else [0.0] * len(members),
        )
    return out, flat


def _error_axes(ax, report, key, std_key, title):
    families, flat = _family_points(report.rows, key, std_key)
    colors = _colors(len(families) + len(flat))
    for color, (family, (ms, errs, stds)) in zip(colors, families.items()):
        keep = [i for i, e in enumerate(errs) if e is not None and np.isfinite(e) and e > EXACT]
        if not keep:
            continue
        xs = [ms[i] for i in keep]
        ys = np.array([errs[i] for i in keep])
        sd = np.array([stds[i] if np.isfinite(stds[i]) else 0.0 for i in keep])
        yerr = np.vstack([np.minimum(sd, 0.999 * ys), sd])  # keep the lower bar above zero
        ax.errorbar(xs, ys, yerr=yerr, marker="o", capsize=3, color=color, label=family)
    for color, r in zip(colors[len(families):], flat):
        e = r.get(key)
        if e is not None and np.isfinite(e) and e > EXACT:
            ax.axhline(e, color=color, linestyle="--", label=f"{r['label']} (no feature map)")
    floor = report.context.get("svd_floor") or []
    # at full rank the floor is 0 up to rounding (1e-15): left out, it would squash the axis
    fx, fy = _positive([f["rank"] for f in floor], [f.get(key) for f in floor], floor=EXACT)
    if fx:
        ax.plot(fx, fy, color="black", marker="s", markersize=4,
                label="best rank-M approximation (SVD floor)")
    uniform = (report.context.get("uniform") or {}).get(key)
    if uniform is not None and np.isfinite(uniform) and uniform > 0:
        ax.axhline(uniform, color="grey", linestyle=":", label="uniform attention")
    _log2_axis(ax)
    ax.set_yscale("log")
    ax.set_xlabel("feature count M (features or landmarks per head)")
    ax.set_ylabel("relative Frobenius error (log scale)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small")
    else:
        ax.text(0.5, 0.5, "no method with a finite positive error", ha="center",
                transform=ax.transAxes)


def _error_figure(report):
    Figure = require_matplotlib()
    seeds = report.meta.get("seeds") or []
    fig = Figure(figsize=(13, 5), layout="constrained")
    ax_out, ax_w = fig.subplots(1, 2)
    _error_axes(ax_out, report, "output_rel_error", "output_rel_error_std",
                "Output error ||O' - O|| / ||O||" + (f" (mean ± std over {len(seeds)} seeds)"
                                                       if len(seeds) > 1 else ""))
    _error_axes(ax_w, report, "weights_rel_error", None, "Attention-weights error ||A' - A|| / ||A||")
    fig.suptitle("Error against softmax attention vs feature count")
    return fig


def plot_compare(report, out_dir, formats=("png", "svg")):
    """Draw a comparison report: weight heatmaps and error vs feature count.

    Parameters
    ----------
    report : kernelkit.attention.comparison.report.CompareReport
        Or any object with the same ``rows``, ``context``, ``heatmaps`` and ``meta``.
    out_dir : str or os.PathLike
        Directory for the files; created if missing.
    formats : sequence of {"png", "svg", "pdf"}, default=("png", "svg")

    Returns
    -------
    list of pathlib.Path
        ``heatmaps.<fmt>`` (one row per method: softmax | method | method - softmax, weights on
        one shared colour scale, the difference on a symmetric diverging scale), then
        ``error_vs_features.<fmt>`` (output and weights error per method family against its
        feature count M, mean ± std over seeds, with the truncated-SVD floor and uniform
        attention; log axes; errors of at most :data:`EXACT`, rounding noise of an exact
        method, are left out).

    Raises
    ------
    ValueError
        For an unknown format, or an ``out_dir`` that is a file.
    ImportError
        Without matplotlib.
    """
    formats = _check_formats(formats)
    out_dir = _out_dir(out_dir)
    paths = []
    figures = [("error_vs_features", _error_figure)]
    if "softmax" in report.heatmaps:  # a report read from JSON written without its maps has none
        figures.insert(0, ("heatmaps", _heatmap_figure))
    for stem, draw in figures:
        paths += _save(draw(report), out_dir, stem, formats)
    return paths


# --------------------------------------------------------------------------------- sweep
def _crossover_x(c):
    if c is None or c.get("measured") is None:
        return None
    return c["estimate"] if c.get("estimate") is not None else c["measured"]


def _sweep_figure(report):
    Figure = require_matplotlib()
    m = report.meta
    fig = Figure(figsize=(13, 5.2), layout="constrained")
    ax_t, ax_m = fig.subplots(1, 2)
    methods = report.methods()
    colors = _colors(len(methods))
    drawn = {ax_t: False, ax_m: False}  # whether a panel shows any positive value
    for color, (spec, label) in zip(colors, methods):
        rows = sorted((r for r in report.rows if r["method"] == spec), key=lambda r: r["T"])
        ok = [r for r in rows if r["status"] == "ok"]
        failed = [r for r in rows if r["status"] != "ok"]
        name = label + (f" ({failed[0]['status']} from T = {failed[0]['T']})" if failed else "")
        for ax, values in ((ax_t, [r["time_ms"] for r in ok]),
                           (ax_m, [r["peak_bytes"] / _MIB for r in ok])):
            xs, ys = _positive([r["T"] for r in ok], values)
            ax.plot(xs, ys, marker="o", color=color, label=name)
            drawn[ax] |= bool(xs)
        spread = [r for r in ok if np.isfinite(r.get("time_min_ms", np.nan))
                  and r["time_min_ms"] > 0]
        if spread:  # the min-max range of the repeats
            ax_t.fill_between([r["T"] for r in spread], [r["time_min_ms"] for r in spread],
                              [r["time_max_ms"] for r in spread], color=color, alpha=0.2,
                              linewidth=0)
        x = _crossover_x(report.crossover.get(spec))
        if x is not None:  # a time crossover: marked on the time panel only
            interpolated = report.crossover[spec].get("estimate") is not None
            text = (f"{label} faster than softmax from T ≈ {x:,.0f}" if interpolated else
                    f"{label} faster than softmax at every T ≥ {x:,.0f}")
            if report.crossover[spec].get("noisy"):
                text += " (noisy: time ranges overlap)"
            ax_t.axvline(x, color=color, linestyle="--", linewidth=1.2)
            ax_t.annotate(text, xy=(x, 0.03), xycoords=("data", "axes fraction"),
                          xytext=(-4, 0), textcoords="offset points", rotation=90,
                          ha="right", va="bottom", fontsize="small", color=color,
                          bbox=dict(facecolor="white", edgecolor="none", alpha=0.8, pad=1))
    pass_ = "forward + backward" if m.get("backward") else "forward"
    batch = f"B·T = {m['tokens']}" if m.get("tokens") else f"B = {m.get('batch', '?')}"
    fig.suptitle(
        f"Attention {pass_}, {'causal' if m.get('causal') else 'non-causal'}, "
        f"{m.get('dtype', '?')}, {batch}, H = {m.get('heads', '?')}, D = {m.get('d', '?')} "
        f"on {m.get('device_name', m.get('device', '?'))}"
    )
    for ax, ylabel, title, nothing in (
        (ax_t, "time per call (ms, median; shaded: min-max)", "Time vs sequence length",
         "no method ran: no time to show"),
        (ax_m, "peak memory beyond the inputs (MiB)", "Peak memory vs sequence length",
         "no positive peak memory to show"),
    ):
        _log2_axis(ax)
        if drawn[ax]:  # a log axis with no positive value cannot be drawn
            ax.set_yscale("log")
        else:
            ax.set_yticks([])
            ax.text(0.5, 0.5, nothing, ha="center", transform=ax.transAxes)
        ax.set_xlabel("sequence length T (tokens)")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize="small", loc="upper left")
    return fig


def plot_sweep(report, out_dir, formats=("png", "svg")):
    """Draw a sweep report: time and peak memory against sequence length.

    Parameters
    ----------
    report : kernelkit.attention.comparison.sweeps.SweepReport
    out_dir : str or os.PathLike
        Directory for the files; created if missing.
    formats : sequence of {"png", "svg", "pdf"}, default=("png", "svg")

    Returns
    -------
    list of pathlib.Path
        ``sweep.<fmt>``: time (ms, median with the min-max range of the repeats shaded) and
        peak memory (MiB) per method against T, log-log, with a dashed vertical line on the
        time panel at each method's crossover with softmax (the log-log estimate, or the
        measured length when the crossover lies below the swept range; "noisy" when the time
        ranges overlap there). Lengths where a
        method did not run are left out and its legend entry says from where.

    Raises
    ------
    ValueError
        For an unknown format, or an ``out_dir`` that is a file.
    ImportError
        Without matplotlib.
    """
    formats = _check_formats(formats)
    out_dir = _out_dir(out_dir)
    return _save(_sweep_figure(report), out_dir, "sweep", formats)
