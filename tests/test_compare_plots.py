"""Plots of comparison and sweep reports (kernelkit.attention.comparison.plots)."""

import math
import sys
import xml.etree.ElementTree as ET
from types import SimpleNamespace

import matplotlib
import matplotlib.image
import numpy as np
import pytest

from kernelkit.attention.comparison import plots
from kernelkit.attention.comparison.plots import plot_compare, plot_sweep
from kernelkit.attention.comparison.sweeps import SweepReport, crossover_lengths

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def check_png(path, min_side=200):
    """A real, non-empty PNG: the signature, then an image matplotlib decodes, not blank."""
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE, path
    image = matplotlib.image.imread(path)
    assert image.ndim == 3 and min(image.shape[:2]) >= min_side, image.shape
    assert np.ptp(image[..., :3]) > 0.5  # something was drawn
    return image


def check_svg(path):
    root = ET.parse(path).getroot()
    assert root.tag.endswith("svg")


def softmax(s):
    a = np.exp(s - s.max(-1, keepdims=True))
    return a / a.sum(-1, keepdims=True)


def compare_report(specs=("elu+1", "favor+:16", "favor+:64", "kernel:rbf"), seed=0):
    """A minimal report with CompareReport's attributes (rows, context, heatmaps, meta)."""
    rng = np.random.default_rng(seed)
    A = softmax(3.0 * rng.standard_normal((24, 40)))
    families = {"elu+1": ("elu+1", 16, 0.5), "favor+:16": ("favor+", 16, 0.4),
                "favor+:64": ("favor+", 64, 0.2), "kernel:rbf": ("kernel:rbf", None, 0.3),
                "nystrom:16": ("nystrom", 16, 0.1)}
    rows = [dict(method="softmax", label="softmax", family="softmax", n_features=None,
                 output_rel_error=0.0, output_rel_error_std=0.0, weights_rel_error=0.0)]
    heatmaps = {"index": (1, 2), "softmax": A}
    for spec in specs:
        family, m, err = families[spec]
        rows.append(dict(method=spec, label=spec.upper(), family=family, n_features=m,
                         output_rel_error=err, output_rel_error_std=err / 4,
                         weights_rel_error=1.5 * err))
        heatmaps[spec] = A + err * rng.standard_normal(A.shape) / 40
    context = {"svd_floor": [{"rank": r, "weights_rel_error": 1.0 / r, "output_rel_error": 0.5 / r}
                             for r in (1, 2, 4, 8, 16)]
               + [{"rank": 24, "weights_rel_error": 0.0, "output_rel_error": 2e-15}],
               "uniform": {"output_rel_error": 0.9, "weights_rel_error": 0.95}}
    return SimpleNamespace(rows=rows, context=context, heatmaps=heatmaps,
                           meta={"seeds": [0, 1, 2]})


def sweep_report():
    rows = []
    for T in (256, 512, 1024, 2048):
        rows.append(dict(method="softmax", label="softmax", T=T, batch=1, time_ms=T * T / 2.0**18,
                         peak_bytes=T * T, status="ok" if T < 2048 else "oom", note=""))
        rows.append(dict(method="elu+1", label="elu+1", T=T, batch=1, time_ms=2.0,
                         peak_bytes=64 * T, status="ok", note=""))
    for r in rows:
        if r["status"] != "ok":
            r.update(time_ms=math.nan, peak_bytes=-1)
    meta = dict(heads=8, d=64, dtype="bfloat16", device="cuda", device_name="Test GPU",
                causal=True, backward=False, repeat=5, batch=1)
    return SweepReport(rows=rows, crossover=crossover_lengths(rows), meta=meta)


# --------------------------------------------------------------------------------- files
def test_plot_compare_writes_png_and_svg(tmp_path):
    out = tmp_path / "new" / "dir"
    paths = plot_compare(compare_report(("elu+1", "favor+:16")), out)
    assert [p.name for p in paths] == ["heatmaps.png", "heatmaps.svg", "error_vs_features.png",
                                       "error_vs_features.svg"]
    for p in paths:
        check_png(p) if p.suffix == ".png" else check_svg(p)
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in paths)  # no temp files


def test_heatmap_figure_has_one_row_per_method():
    one = plots._heatmap_figure(compare_report(("elu+1",)))
    four = plots._heatmap_figure(compare_report())
    assert len([ax for ax in one.axes if ax.images]) == 3
    assert len([ax for ax in four.axes if ax.images]) == 12
    assert four.get_size_inches()[1] > 3 * one.get_size_inches()[1]  # the rows keep their size


def test_plot_sweep_writes_files(tmp_path):
    paths = sweep_report().plot(tmp_path, ("png", "pdf"))
    assert [p.name for p in paths] == ["sweep.png", "sweep.pdf"]
    check_png(paths[0])
    assert paths[1].read_bytes()[:5] == b"%PDF-"


@pytest.mark.parametrize("formats", [("jpeg",), (), "gif"])
def test_bad_formats(tmp_path, formats):
    with pytest.raises(ValueError, match="formats must be a non-empty sequence of 'png'"):
        plot_sweep(sweep_report(), tmp_path, formats)


def test_out_dir_that_is_a_file(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(ValueError, match="exists and is not a directory"):
        plot_compare(compare_report(), tmp_path / "f")
    with pytest.raises(TypeError, match="out_dir must be a directory path"):
        plot_sweep(sweep_report(), 3)


def test_missing_matplotlib_is_a_clear_import_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(ImportError, match=r"pip install matplotlib \(in a clone of kernelkit: "
                                          r"pip install -e '\.\[plot\]'\)"):
        plot_sweep(sweep_report(), tmp_path)


def test_plotting_leaves_the_pyplot_backend_alone(tmp_path):
    before = matplotlib.get_backend()
    plot_sweep(sweep_report(), tmp_path, ["svg"])
    check_svg(tmp_path / "sweep.svg")
    assert matplotlib.get_backend() == before


# ------------------------------------------------------------------------------- content
def test_sweep_figure_labels_units_and_crossover():
    report = sweep_report()
    # ratios 2/0.25 = 8, 2/1 = 2, 2/4 = 0.5: crossing half way (log-log) from 512 to 1024
    assert report.crossover["elu+1"]["estimate"] == pytest.approx(512 * math.sqrt(2))
    fig = plots._sweep_figure(report)
    ax_t, ax_m = fig.axes
    assert ax_t.get_xlabel() == ax_m.get_xlabel() == "sequence length T (tokens)"
    assert "(ms" in ax_t.get_ylabel() and "(MiB)" in ax_m.get_ylabel()
    assert ax_t.get_xscale() == ax_t.get_yscale() == "log"
    assert "Test GPU" in fig._suptitle.get_text() and "bfloat16" in fig._suptitle.get_text()
    verticals = [line for line in ax_t.lines if len(set(line.get_xdata())) == 1]
    assert len(verticals) == 1
    assert verticals[0].get_xdata()[0] == pytest.approx(512 * math.sqrt(2))
    assert [t.get_text() for t in ax_t.texts] == ["elu+1 faster than softmax from T ≈ 724"]
    # a time crossover: nothing of it on the memory panel
    assert not [line for line in ax_m.lines if len(set(line.get_xdata())) == 1]
    assert len(ax_m.texts) == 0
    assert len(ax_t.collections) == 0  # no spread in these rows: nothing shaded
    legend = [t.get_text() for t in ax_t.get_legend().get_texts()]
    assert legend == ["softmax (oom from T = 2048)", "elu+1"]
    softmax_line = ax_t.lines[0]
    assert list(softmax_line.get_xdata()) == [256, 512, 1024]  # the oom length is left out


def test_sweep_figure_shades_the_spread_and_flags_a_noisy_crossover():
    report = sweep_report()
    for r in report.rows:
        if r["status"] == "ok":
            r.update(time_min_ms=r["time_ms"] / 2, time_max_ms=r["time_ms"] * 2)
    report.crossover = crossover_lengths(report.rows)
    assert report.crossover["elu+1"]["noisy"] is True  # 2 ms vs 1 ms at T = 512, x/2..2x
    ax_t, ax_m = plots._sweep_figure(report).axes
    assert len(ax_t.collections) == 2 and len(ax_m.collections) == 0  # a band per method
    band = ax_t.collections[1].get_paths()[0].vertices
    assert band[:, 1].min() == pytest.approx(1.0) and band[:, 1].max() == pytest.approx(4.0)
    assert [t.get_text() for t in ax_t.texts] == [
        "elu+1 faster than softmax from T ≈ 724 (noisy: time ranges overlap)"]


def test_sweep_crossover_below_range_is_annotated():
    report = sweep_report()
    report.crossover = {"elu+1": {"measured": 256, "estimate": None}}
    ax_t = plots._sweep_figure(report).axes[0]
    assert [t.get_text() for t in ax_t.texts] == ["elu+1 faster than softmax at every T ≥ 256"]


def test_sweep_figure_draws_panels_with_nothing_positive(tmp_path):
    # no run finished (a report read back from JSON): both panels say so instead of failing
    # on a log axis with no positive value; a zero peak leaves the memory panel linear too
    report = sweep_report()
    for r in report.rows:
        r.update(status="skipped", time_ms=math.nan, peak_bytes=-1)
    report.crossover = crossover_lengths(report.rows)
    ax_t, ax_m = plots._sweep_figure(report).axes
    assert ax_t.get_yscale() == ax_m.get_yscale() == "linear"
    assert [t.get_text() for t in ax_t.texts] == ["no method ran: no time to show"]
    assert [t.get_text() for t in ax_m.texts] == ["no positive peak memory to show"]
    assert [p.name for p in plot_sweep(report, tmp_path, ["png"])] == ["sweep.png"]
    check_png(tmp_path / "sweep.png")
    report.rows[0].update(status="ok", time_ms=1.0, peak_bytes=0)
    ax_t, ax_m = plots._sweep_figure(report).axes
    assert (ax_t.get_yscale(), ax_m.get_yscale()) == ("log", "linear")
    plot_sweep(report, tmp_path, ["svg"])
    check_svg(tmp_path / "sweep.svg")


def test_heatmap_scales():
    report = compare_report(("elu+1", "favor+:16"))
    fig = plots._heatmap_figure(report)
    images = [ax.images[0] for ax in fig.axes if ax.images]
    assert len(images) == 6
    weights = [im.get_clim() for i, im in enumerate(images) if i % 3 != 2]
    assert len(set(weights)) == 1  # softmax and every method on one colour scale
    everything = np.concatenate([np.ravel(report.heatmaps[k]) for k in ("softmax", "elu+1",
                                                                         "favor+:16")])
    assert weights[0] == (0.0, pytest.approx(np.quantile(np.abs(everything), 0.995)))
    for spec, im in zip(("elu+1", "favor+:16"), images[2::3]):
        lim = np.quantile(np.abs(report.heatmaps[spec] - report.heatmaps["softmax"]), 0.995)
        assert im.get_clim() == (pytest.approx(-lim), pytest.approx(lim))
    titles = [ax.get_title() for ax in fig.axes if ax.images]
    assert titles[:2] == ["softmax (reference)", "ELU+1"] and titles[2].startswith("ELU+1 - softmax")
    assert "batch 1 head 2" in fig._suptitle.get_text()
    assert [ax.get_xlabel() for ax in fig.axes if ax.images][3:] == ["key position j"] * 3
    assert [ax.get_ylabel() for ax in fig.axes if ax.images][::3] == ["query position i"] * 2


def test_error_figure_curves():
    report = compare_report(("elu+1", "favor+:16", "favor+:64", "kernel:rbf", "nystrom:16"))
    report.rows.append(dict(method="rff:8", label="rff:8", family="rff", n_features=8,
                            output_rel_error=math.nan, output_rel_error_std=math.nan,
                            weights_rel_error=math.nan))
    fig = plots._error_figure(report)
    ax_out, ax_w = fig.axes
    labels = ax_out.get_legend_handles_labels()[1]
    assert set(labels) == {"elu+1", "favor+", "nystrom", "KERNEL:RBF (no feature map)",
                           "best rank-M approximation (SVD floor)", "uniform attention"}
    assert "mean ± std over 3 seeds" in ax_out.get_title()
    assert ax_out.get_xscale() == ax_out.get_yscale() == "log"
    assert "feature count M" in ax_out.get_xlabel()
    by_label = {line.get_label(): line for line in ax_out.lines}
    floor = by_label["best rank-M approximation (SVD floor)"]
    # the full-rank floor (rounding noise) is left out, so it does not squash the axis
    assert list(floor.get_xdata()) == [1, 2, 4, 8, 16]
    np.testing.assert_allclose(floor.get_ydata(), [0.5 / r for r in (1, 2, 4, 8, 16)])
    assert ax_out.get_ylim()[0] > 1e-3
    favor = [c for c in ax_out.containers if c.get_label() == "favor+"][0]
    np.testing.assert_array_equal(favor.lines[0].get_xdata(), [16, 64])
    np.testing.assert_allclose(favor.lines[0].get_ydata(), [0.4, 0.2])
    weights_floor = {line.get_label(): line for line in ax_w.lines}[
        "best rank-M approximation (SVD floor)"]
    np.testing.assert_allclose(weights_floor.get_ydata(), [1.0 / r for r in (1, 2, 4, 8, 16)])
