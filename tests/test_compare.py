"""kernelkit.attention.comparison.accuracy end to end, CompareReport I/O, and measure()."""

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from kernelkit.attention.comparison import CompareReport, compare, measure
from kernelkit.attention.comparison.report import ROW_KEYS
from kernelkit_math import attention as ref

METHODS = ("softmax", "elu+1", "favor+:8", "nystrom:4", "kernel:rbf")


def small_qkv(rng, B=1, H=2, T=12, S=12, D=4, Dv=3):
    return (rng.standard_normal((B, H, T, D)), rng.standard_normal((B, H, S, D)),
            rng.standard_normal((B, H, S, Dv)))


@pytest.fixture(scope="module")
def report():
    rng = np.random.default_rng(3)
    q, k, v = small_qkv(rng)
    return compare(q, k, v, METHODS, seeds=(0, 1, 2), measure=False, plot_index=(0, 1)), (q, k, v)


def _mean_rel(O, O_ref):
    return np.mean(np.linalg.norm(O - O_ref, axis=(-2, -1)) / np.linalg.norm(O_ref, axis=(-2, -1)))


# ------------------------------------------------------------------------ report content
def test_rows_have_the_documented_keys(report):
    rep, _ = report
    assert [r["method"] for r in rep.rows] == list(METHODS)
    for r in rep.rows:
        assert set(r) == set(ROW_KEYS)
        assert r["n_rows"] == 1 * 2 * 12 * 3  # rows of all seeds pooled
        assert r["seeds"] == [0, 1, 2] and r["status"] == "not measured"
        assert math.isnan(r["time_ms"]) and r["peak_bytes"] == -1


def test_softmax_row_is_exact(report):
    row = report[0].rows[0]
    for key in ("output_rel_error", "output_rel_error_std", "weights_rel_error", "tv_max",
                "kl_max"):
        assert row[key] == 0.0
    assert row["kl_inf_rows"] == 0 and row["nonpositive_denominators"] == 0


def test_errors_match_an_independent_computation(report):
    rep, (q, k, v) = report
    O_ref = ref.softmax_attention(q, k, v)
    elu = ref.linear_attention(q, k, v, "elu+1", eps=1e-6)
    rbf = ref.kernel_smoother(q, k, v, "rbf", eps=1e-6)
    favor = [_mean_rel(ref.linear_attention(q, k, v, "favor+:8", eps=1e-6, seed=s), O_ref)
             for s in (0, 1, 2)]
    rows = {r["method"]: r for r in rep.rows}
    np.testing.assert_allclose(rows["elu+1"]["output_rel_error"], _mean_rel(elu, O_ref),
                               rtol=1e-12)
    np.testing.assert_allclose(rows["kernel:rbf"]["output_rel_error"], _mean_rel(rbf, O_ref),
                               rtol=1e-12)
    np.testing.assert_allclose(rows["favor+:8"]["output_rel_error"], np.mean(favor), rtol=1e-12)
    np.testing.assert_allclose(rows["favor+:8"]["output_rel_error_std"], np.std(favor),
                               rtol=1e-9)


def test_seed_spread(report):
    rows = {r["method"]: r for r in report[0].rows}
    assert rows["favor+:8"]["output_rel_error_std"] > 0
    assert rows["nystrom:4"]["output_rel_error_std"] > 0
    assert rows["elu+1"]["output_rel_error_std"] == 0
    assert rows["kernel:rbf"]["output_rel_error_std"] == 0


def test_context(report):
    rep, (q, k, v) = report
    c = rep.context
    O_ref = ref.softmax_attention(q, k, v)
    uniform_out = np.broadcast_to(v.mean(axis=-2, keepdims=True), O_ref.shape)
    np.testing.assert_allclose(c["uniform"]["output_rel_error"], _mean_rel(uniform_out, O_ref),
                               rtol=1e-12)
    s = np.einsum("bhtd,bhsd->bhts", q, k) / 2.0
    A = np.exp(s) / np.exp(s).sum(-1, keepdims=True)
    np.testing.assert_allclose(c["peakiness"], A.max(-1).mean(), rtol=1e-12)
    np.testing.assert_allclose(c["entropy_mean"], -(A * np.log(A)).sum(-1).mean(), rtol=1e-12)
    np.testing.assert_allclose(c["entropy_normalized"], c["entropy_mean"] / np.log(12),
                               rtol=1e-12)
    ranks = [f["rank"] for f in c["svd_floor"]]
    assert ranks == [1, 2, 4, 8]  # the powers of two up to min(T, S); feature counts 4 and 8
    full = compare(q, k, v, ["softmax"], ranks=[12], measure=False).context["svd_floor"][0]
    assert full["weights_rel_error"] < 1e-12 and full["output_rel_error"] < 1e-12
    errors = [f["weights_rel_error"] for f in c["svd_floor"]]
    assert errors == sorted(errors, reverse=True)


def test_heatmaps(report):
    rep, (q, k, _) = report
    assert rep.heatmaps["index"] == (0, 1)
    assert set(rep.heatmaps) == {"index", "softmax", *METHODS}
    s = q[0, 1] @ k[0, 1].T / 2.0
    np.testing.assert_allclose(rep.heatmaps["softmax"], np.exp(s) / np.exp(s).sum(-1)[:, None],
                               rtol=1e-12)


def test_heatmaps_are_cropped(rng):
    q, k, v = (rng.standard_normal((300, 2)) for _ in range(3))
    rep = compare(q, k, v, ["softmax", "elu+1"], seeds=[0], measure=False, ranks=[1])
    assert rep.heatmaps["elu+1"].shape == (256, 256)


def test_meta(report):
    m = report[0].meta
    assert m["shape"] == {"B": 1, "H": 2, "T": 12, "S": 12, "D": 4, "Dv": 3}
    assert m["scale"] == 0.5 and m["causal"] is False and m["seeds"] == [0, 1, 2]
    assert {"versions", "timestamp", "device", "dtype"} <= set(m)


@pytest.mark.parametrize("shape", [(12, 4), (2, 12, 4)], ids=["2d", "3d"])
def test_lower_rank_inputs(rng, shape):
    q, k, v = (rng.standard_normal(shape) for _ in range(3))
    rep = compare(q, k, v, ["softmax", "elu+1"], measure=False, is_causal=True)
    expected = _mean_rel(ref.linear_attention(q, k, v, is_causal=True, eps=1e-6),
                         ref.softmax_attention(q, k, v, is_causal=True))
    np.testing.assert_allclose(rep.rows[1]["output_rel_error"], expected, rtol=1e-12)
    assert rep.meta["input_shape"] == list(shape)


def test_torch_inputs_equal_numpy_inputs(rng):
    q, k, v = (x.astype(np.float32) for x in small_qkv(rng))
    a = compare(q, k, v, ["elu+1"], measure=False)
    b = compare(*(torch.from_numpy(x) for x in (q, k, v)), ["elu+1"], measure=False)
    assert a.rows[0]["output_rel_error"] == b.rows[0]["output_rel_error"]


def test_scale_and_causal_reach_every_method(rng):
    q, k, v = small_qkv(rng)
    rep = compare(q, k, v, ["favor+:8"], seeds=[1], scale=0.3, is_causal=True, measure=False)
    O_ref = ref.softmax_attention(q, k, v, scale=0.3, is_causal=True)
    from kernelkit_math.random_features import FavorPlusMap

    O = ref.linear_attention(q, k, v, FavorPlusMap(4, 8, scale=0.3, seed=1), is_causal=True,
                             eps=1e-6)
    np.testing.assert_allclose(rep.rows[0]["output_rel_error"], _mean_rel(O, O_ref), rtol=1e-12)


def test_inputs_not_modified(rng):
    q, k, v = small_qkv(rng)
    copies = [x.copy() for x in (q, k, v)]
    tq = torch.from_numpy(q.astype(np.float32))
    tq0 = tq.clone()
    compare(q, k, v, METHODS, measure=False)
    compare(tq, k.astype(np.float32), v.astype(np.float32), ["nystrom:3"], measure=False)
    for x, x0 in zip((q, k, v), copies):
        np.testing.assert_array_equal(x, x0)
    assert torch.equal(tq, tq0)


# ---------------------------------------------------------------------- input validation
@pytest.mark.parametrize("change, error, match", [
    (lambda q, k, v: ([[1.0]], k, v), TypeError, "q must be a NumPy array or a torch.Tensor"),
    (lambda q, k, v: (q[0, 0, 0], k, v), ValueError, r"q must have shape .*got shape \(4,\)"),
    (lambda q, k, v: (q, k[..., :3], v), ValueError,
     r"k must have the head dim D = 4.*\(1, 2, 12, 3\)"),
    (lambda q, k, v: (q, k, v[..., :5, :]), ValueError,
     r"v must have the key length S = 12.*\(1, 2, 5, 3\)"),
    (lambda q, k, v: (q, k[:, :1], v[:, :1]), ValueError,
     r"k must have the leading .*\(1, 1, 12, 4\)"),
    (lambda q, k, v: (q, k[0], v[0]), ValueError, r"k must have as many dimensions as q"),
    (lambda q, k, v: (q, k, v.astype(complex)), TypeError, "v must hold real numbers"),
    (lambda q, k, v: (q, np.where(k > 1, np.nan, k), v), ValueError,
     r"k holds NaN .*\(1, 2, 12, 4\)"),
    (lambda q, k, v: (q[:, :, :0], k, v), ValueError, "q must not be empty"),
], ids=["list", "1d", "D", "S", "heads", "ndim", "complex", "nan", "empty"])
def test_input_errors_name_the_array_and_shape(rng, change, error, match):
    with pytest.raises(error, match=match):
        compare(*change(*small_qkv(rng)), ["elu+1"], measure=False)


def test_causal_needs_square(rng):
    q, k, v = small_qkv(rng, S=10)
    compare(q, k, v, ["elu+1"], measure=False)  # fine without the mask
    with pytest.raises(ValueError, match=r"causal .* T = 12 .* S = 10"):
        compare(q, k, v, ["elu+1"], is_causal=True, measure=False)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(methods=[]), ValueError, "at least one method"),
    (dict(methods="elu+1"), TypeError, "sequence of method specs"),
    (dict(methods=["elu+1", " elu+1"]), ValueError, "'elu\\+1' more than once"),
    (dict(methods=["nope"]), ValueError, "unknown attention method 'nope'"),
    (dict(seeds=[]), ValueError, "at least one seed"),
    (dict(seeds=[0, 0]), ValueError, "distinct"),
    (dict(seeds=[-1]), ValueError, "non-negative"),
    (dict(scale=0.0), ValueError, "scale"),
    (dict(plot_index=(0, 2)), ValueError, "plot_index"),
    (dict(ranks=[13]), ValueError, r"\[1, 12\]"),
    (dict(device="tpu"), ValueError, "device"),
    (dict(is_causal=1), TypeError, "causal"),
    (dict(measure="yes"), TypeError, "measure"),
    (dict(progress="yes"), TypeError, "progress"),
], ids=lambda x: str(x)[:30])
def test_argument_errors(rng, kwargs, error, match):
    kwargs = {"methods": ["elu+1"], "measure": False, **kwargs}
    with pytest.raises(error, match=match):
        compare(*small_qkv(rng), **kwargs)


# ------------------------------------------------------------------------------ JSON, MD
def _strict_loads(text):
    def refuse(token):
        raise AssertionError(f"non-strict JSON token {token}")

    return json.loads(text, parse_constant=refuse)


def _same(a, b):
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[key], b[key]) for key in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def test_json_round_trip(report, tmp_path):
    rep, _ = report
    path = tmp_path / "report.json"
    text = rep.to_json(path)
    _strict_loads(text)
    assert os.listdir(tmp_path) == ["report.json"]  # no temporary file left
    for source in (text, path, str(path)):
        back = CompareReport.from_json(source)
        assert _same(back.rows, rep.rows)
        assert _same(back.context, rep.context)
        assert _same(back.meta, rep.meta)
        assert back.heatmaps["index"] == (0, 1)
        for key in rep.heatmaps:
            if key != "index":
                np.testing.assert_allclose(back.heatmaps[key], rep.heatmaps[key], rtol=1e-6,
                                           atol=1e-12)


def test_heatmaps_can_live_outside_the_json(report, tmp_path):
    rep, _ = report
    back = CompareReport.from_json(rep.to_json(heatmaps=False))
    assert back.heatmaps == {"index": (0, 1)} and _same(back.rows, rep.rows)
    rep.save_heatmaps(tmp_path / "maps.npz")
    assert os.listdir(tmp_path) == ["maps.npz"]  # no temporary file left
    with np.load(tmp_path / "maps.npz") as maps:
        assert set(maps.files) == set(rep.heatmaps)
        for key in rep.heatmaps:
            np.testing.assert_array_equal(maps[key], np.asarray(rep.heatmaps[key]))
    paths = back.plot(tmp_path / "plots", formats=("png",))
    assert [p.name for p in paths] == ["error_vs_features.png"]  # no maps: no heatmap figure


def test_json_encodes_nan_and_infinity(report):
    rep, _ = report
    row = dict(rep.rows[1], kl_mean=math.inf, kl_max=-math.inf, time_ms=math.nan)
    odd = CompareReport([row], rep.context, rep.heatmaps, rep.meta)
    text = odd.to_json()
    doc = _strict_loads(text)
    assert doc["rows"][0]["kl_mean"] == "inf" and doc["rows"][0]["time_ms"] is None
    back = CompareReport.from_json(text).rows[0]
    assert back["kl_mean"] == math.inf and back["kl_max"] == -math.inf
    assert math.isnan(back["time_ms"]) and back["n_features"] == 4


def test_from_json_refuses_other_documents(tmp_path):
    with pytest.raises(ValueError, match="not a kernelkit comparison report"):
        CompareReport.from_json('{"rows": []}')
    with pytest.raises(ValueError, match="not a JSON comparison report"):
        CompareReport.from_json("{not json")


def test_markdown(report):
    rep, _ = report
    md = rep.to_markdown()
    for label in METHODS:
        assert f"| {label} |" in md
    for unit in ("time (ms)", "peak memory (MiB)", "KL mean / max (nats)", "SVD floor, rank 4",
                 "rows guarded"):
        assert unit in md
    header = next(line for line in md.splitlines() if line.startswith("| method |"))
    rows = [line for line in md.splitlines() if line.startswith(tuple(f"| {m} |" for m in METHODS))]
    assert len(rows) == len(METHODS)
    for row in rows:
        assert row.count("|") == header.count("|")  # every row has every column
    assert str(rep) == md and repr(rep) == md


# ---------------------------------------------------------------------- timing, memory
def test_compare_measures_on_cpu(rng, monkeypatch):
    # the plain PyTorch CPU path (the Triton interpreter is slow and not what is tested here):
    # dispatch reads the flag Triton read at import, so that flag is what is switched
    from kernelkit_gpu import _launch

    monkeypatch.setattr(_launch, "INTERPRET", False)
    q, k, v = small_qkv(rng, T=8, S=8)
    rep = compare(q, k, v, ["softmax", "elu+1", "nystrom:2"], seeds=[0], device="cpu")
    out_bytes = 1 * 2 * 8 * 3 * 4  # the float32 output each run allocates
    for r in rep.rows:
        assert r["status"] == "ok" and r["device"] == "cpu"
        assert r["time_ms"] > 0 and r["peak_bytes"] >= out_bytes
        assert 0 < r["time_min_ms"] <= r["time_ms"] <= r["time_max_ms"]  # spread of 5 calls
    assert rep.meta["dtype"] == "float32"
    text = rep.to_markdown()
    assert "time (ms): median (min–max)" in text
    assert f"({float(rep.rows[0]['time_min_ms']):.3g}–" in text


def test_measure_peak_is_the_allocated_size():
    m = measure(lambda: torch.ones(1000, 250), device="cpu", repeat=2)
    assert m.peak_bytes == 1000 * 250 * 4 and m.status == "ok" and m.device == "cpu"
    assert m.time_ms > 0
    assert len(m.times_ms) == 2 and m.time_ms == sum(m.times_ms) / 2  # median of two


def test_measure_peak_follows_frees():
    def fn():
        a = torch.empty(1000)  # 4000 bytes
        b = torch.empty(2000)  # 8000 bytes: 12000 live
        del a
        c = torch.empty(500)  # 2000 bytes: 10000 live
        return b, c.view(20, 25)  # a view allocates nothing

    assert measure(fn, device="cpu", repeat=1).peak_bytes == 12000


def test_measure_ignores_inputs_and_their_views():
    x = torch.ones(1000)
    assert measure(lambda: x.view(10, 100).t(), device="cpu", repeat=1).peak_bytes == 0


def test_measure_out_of_memory():
    def fn():
        raise MemoryError("no memory")

    m = measure(fn, device="cpu")
    assert m.status == "oom" and m.peak_bytes == -1 and math.isnan(m.time_ms)


def test_measure_errors():
    with pytest.raises(TypeError, match="callable"):
        measure(3, device="cpu")
    with pytest.raises(ValueError, match="repeat"):
        measure(lambda: None, device="cpu", repeat=0)
    with pytest.raises(ValueError, match="device"):
        measure(lambda: None, device="tpu")
    with pytest.raises(ZeroDivisionError):  # errors other than out-of-memory propagate
        measure(lambda: 1 / 0, device="cpu")


# --------------------------------------------------------------------- attention re-exports
def test_attention_reexports(rng):
    from kernelkit import attention

    q, k, v = small_qkv(rng)
    rep = attention.compare(q, k, v, ["elu+1"], measure=False)
    assert isinstance(rep, CompareReport)
    from kernelkit.attention.comparison import sweep

    assert attention.sweep.__doc__ and callable(sweep)


@pytest.mark.subprocess
def test_kernelkit_attention_import_stays_light():
    code = ("import sys, kernelkit.attention; "
            "print(sorted(m for m in ('torch', 'kernelkit.attention.comparison') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.subprocess
def test_kernelkit_compare_import_does_not_load_torch():
    code = ("import sys, kernelkit.attention.comparison; "
            "print(sorted(m for m in ('torch', 'triton', 'matplotlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


def test_an_interrupted_wait_leaves_its_work_known_as_running():
    # Ctrl-C during compare's context SVD: the main thread stops waiting at once, and the
    # command line must still learn that the abandoned SVD runs (it then ends the process with
    # os._exit: interpreter shutdown deadlocks joining OpenBLAS's threads). Thread.is_alive
    # said False here on Python 3.11, and the CI run hung for 120 s.
    import _thread
    import signal
    import threading
    import time

    from kernelkit.attention.comparison import accuracy as comparison

    # interrupt_main does nothing where SIGINT is ignored (a background job of a shell without
    # job control inherits SIG_IGN, and Python then installs no handler): the test would wait
    # forever, so it sets Python's own handler for its duration
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        release = threading.Event()

        def interrupt_soon():
            time.sleep(0.3)
            _thread.interrupt_main()

        threading.Thread(target=interrupt_soon, daemon=True).start()
        with pytest.raises(KeyboardInterrupt):
            comparison._interruptible(release.wait)
        assert comparison.work_left_running()
        release.set()
        deadline = time.monotonic() + 10
        while comparison.work_left_running() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not comparison.work_left_running()
        assert comparison._interruptible(sum, [1, 2]) == 3 and not comparison.work_left_running()
    finally:
        signal.signal(signal.SIGINT, previous)
