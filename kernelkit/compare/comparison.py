r"""How far is an attention approximation from softmax on given q, k, v: :func:`compare`.

The reference is float64 softmax attention. Every method (see :mod:`kernelkit.compare.methods`)
is evaluated in float64 for accuracy, once per seed when it is random, and, unless
``measure=False``, run once more through its fast torch / Triton path for time and peak memory
(:func:`kernelkit.compare.measurement.measure`). The result is a
:class:`kernelkit.compare.report.CompareReport`.

Cost: the metrics hold the (B, H, T, S) weight matrices in float64 and take one SVD per
(batch, head), so compare() is meant for heads of up to a few thousand positions; the timing
side (:func:`kernelkit.compare.sweeps.sweep`) is the tool for long sequences.
"""

from __future__ import annotations

import datetime
import math
import numbers
import os
import sys

import numpy as np

from kernelkit.compare import metrics
from kernelkit.compare.methods import parse_method
from kernelkit.compare.report import CompareReport
from kernelkit_math.attention import resolve_is_causal

__all__ = ["compare", "HEATMAP_SIZE"]

#: Heatmaps keep at most this many leading queries and keys.
HEATMAP_SIZE = 256
#: Float64 (B, H, T, S) arrays compare() holds at its peak: the reference weights, one method's
#: weights, the SVD factors and the temporaries of the metrics (tracemalloc measured 6.8 for
#: T = S = 1500 with softmax, elu+1, favor+:64 and nystrom:32; 8 leaves a margin).
WEIGHT_MATRICES_AT_PEAK = 8

_LEGEND = {2: "(T, D)", 3: "(H, T, D)", 4: "(B, H, T, D)"}


# ------------------------------------------------------------------------------- validation
def _is_tensor(x):
    return type(x).__module__.split(".")[0] == "torch" and hasattr(x, "detach")


def _to_numpy(x, name):
    """(float64 ndarray, the torch tensor or None)."""
    if _is_tensor(x):
        import torch

        if x.is_complex() or x.dtype == torch.bool:
            raise TypeError(f"{name} must hold real numbers; got dtype {x.dtype}")
        return x.detach().to("cpu", torch.float64).numpy(), x
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name} must be a NumPy array or a torch.Tensor of shape (B, H, T, D), "
                        f"(H, T, D) or (T, D); got {type(x).__name__}")
    if x.dtype.kind not in "iuf":
        raise TypeError(f"{name} must hold real numbers; got dtype {x.dtype} (shape {x.shape})")
    return x.astype(np.float64, copy=False), None


def _inputs(q, k, v, causal):
    arrays, tensors = {}, {}
    for name, x in (("q", q), ("k", k), ("v", v)):
        arrays[name], tensors[name] = _to_numpy(x, name)
        a = arrays[name]
        if a.ndim not in _LEGEND:
            raise ValueError(f"{name} must have shape (B, H, T, D), (H, T, D) or (T, D); got "
                             f"shape {a.shape}")
        if 0 in a.shape:
            raise ValueError(f"{name} must not be empty; got shape {a.shape}")
        if not np.all(np.isfinite(a)):
            raise ValueError(f"{name} holds NaN or infinite values (shape {a.shape})")
    qa, ka, va = arrays["q"], arrays["k"], arrays["v"]
    for name, a in (("k", ka), ("v", va)):
        if a.ndim != qa.ndim:
            raise ValueError(f"{name} must have as many dimensions as q: q is {_LEGEND[qa.ndim]} "
                             f"with shape {qa.shape}, {name} has shape {a.shape}")
        if a.shape[:-2] != qa.shape[:-2]:
            raise ValueError(f"{name} must have the leading (batch, head) shape of q "
                             f"{qa.shape[:-2]}; got shape {a.shape}")
    if ka.shape[-1] != qa.shape[-1]:
        raise ValueError(f"k must have the head dim D = {qa.shape[-1]} of q (shape {qa.shape}); "
                         f"got shape {ka.shape}")
    if va.shape[-2] != ka.shape[-2]:
        raise ValueError(f"v must have the key length S = {ka.shape[-2]} of k (shape "
                         f"{ka.shape}); got shape {va.shape}")
    if causal and ka.shape[-2] != qa.shape[-2]:
        raise ValueError(f"causal comparison needs as many keys as queries: q has T = "
                         f"{qa.shape[-2]} (shape {qa.shape}), k has S = {ka.shape[-2]} "
                         f"(shape {ka.shape})")
    input_shape = qa.shape
    four = [a.reshape((1,) * (4 - a.ndim) + a.shape) for a in (qa, ka, va)]
    return four, tensors, input_shape


def _check_bool(value, name):
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False; got {value!r}")


def _check_seeds(seeds):
    if isinstance(seeds, (str, bytes)) or not hasattr(seeds, "__iter__"):
        raise TypeError(f"seeds must be a sequence of non-negative integers; got {seeds!r}")
    seeds = list(seeds)
    if not seeds:
        raise ValueError("seeds must hold at least one seed")
    for s in seeds:
        if isinstance(s, bool) or not isinstance(s, numbers.Integral) or s < 0:
            raise ValueError(f"seeds must be non-negative integers; got {s!r}")
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be distinct; got {seeds}")
    return [int(s) for s in seeds]


def _check_scale(scale, d):
    if scale is None:
        return 1.0 / math.sqrt(d), None
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real) or not (
            math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be a positive finite number or None; got {scale!r}")
    return float(scale), float(scale)


def _check_index(plot_index, B, H):
    ok = (isinstance(plot_index, (tuple, list)) and len(plot_index) == 2
          and all(isinstance(i, numbers.Integral) and not isinstance(i, bool) for i in plot_index))
    if not ok or not (0 <= plot_index[0] < B and 0 <= plot_index[1] < H):
        raise ValueError(f"plot_index must be a pair (b, h) with 0 <= b < B = {B} and "
                         f"0 <= h < H = {H}; got {plot_index!r}")
    return int(plot_index[0]), int(plot_index[1])


def _check_ranks(ranks, methods, T, S):
    top = min(T, S)
    if ranks is None:
        feats = {m.n_features for m in methods if m.n_features is not None}
        powers = {1 << i for i in range(top.bit_length()) if (1 << i) <= top}
        return sorted(r for r in feats | powers if r <= top)
    if isinstance(ranks, (str, bytes)) or not hasattr(ranks, "__iter__"):
        raise TypeError(f"ranks must be None or a sequence of integers; got {ranks!r}")
    out = []
    for r in ranks:
        if isinstance(r, bool) or not isinstance(r, numbers.Integral) or not 1 <= r <= top:
            raise ValueError(f"ranks must be integers in [1, min(T, S)] = [1, {top}]; got {r!r}")
        out.append(int(r))
    return sorted(set(out))


def _parse_methods(methods, d):
    if isinstance(methods, str) or not hasattr(methods, "__iter__"):
        raise TypeError(f"methods must be a sequence of method specs such as "
                        f"('softmax', 'favor+:256'); got {methods!r}")
    parsed = [parse_method(m, d) for m in methods]
    if not parsed:
        raise ValueError("methods must name at least one method")
    specs = [m.spec for m in parsed]
    repeated = sorted({s for s in specs if specs.count(s) > 1})
    if repeated:
        raise ValueError(f"methods must be distinct; repeated: {', '.join(repeated)}")
    return parsed


def available_memory():
    """Memory available to a new allocation in bytes (``MemAvailable`` of /proc/meminfo, else
    the free physical pages), or None where neither can be read."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def _check_memory(B, H, T, S):
    """Refuse sizes whose float64 (B, H, T, S) weight matrices do not fit in available memory,
    before any of them is allocated."""
    one = B * H * T * S * 8
    needed = WEIGHT_MATRICES_AT_PEAK * one
    available = available_memory()
    if available is not None and needed > available:
        raise ValueError(
            f"comparing B x H x T x S = {B} x {H} x {T} x {S} attention weights needs about "
            f"{needed / 2**30:.1f} GiB ({WEIGHT_MATRICES_AT_PEAK} float64 arrays of "
            f"{one / 2**30:.1f} GiB) but {available / 2**30:.1f} GiB of memory is available; "
            "compare a slice (fewer heads, or the first few thousand positions of q, k, v), or "
            "use 'kernelkit attention sweep' for time and memory at long sequence lengths"
        )


# ---------------------------------------------------------------------------------- metrics
def _metrics_of(A_ref, O_ref, A, O, den):
    """The per-seed numbers of one method."""
    return {
        "output": float(np.mean(metrics.relative_error(O, O_ref))),
        "weights": float(np.mean(metrics.relative_error(A, A_ref))),
        "tv": metrics.total_variation(A, A_ref).ravel(),
        "kl": metrics.kl_divergence(A_ref, A).ravel(),
        "nonpositive": int(np.count_nonzero(den <= 0)),
    }


def _aggregate(per_seed):
    """Pool per-seed numbers into the metric keys of a report row."""
    out = np.array([p["output"] for p in per_seed])
    tv = np.concatenate([p["tv"] for p in per_seed])
    kl = np.concatenate([p["kl"] for p in per_seed])
    finite = kl[np.isfinite(kl)]
    return {
        "output_rel_error": float(out.mean()),
        "output_rel_error_std": float((out - out[0]).std()),  # exactly 0 for equal values
        "weights_rel_error": float(np.mean([p["weights"] for p in per_seed])),
        "tv_mean": float(tv.mean()),
        "tv_max": float(tv.max()),
        "kl_mean": float(finite.mean()) if finite.size else math.inf,
        "kl_max": float(finite.max()) if finite.size else math.inf,
        "kl_inf_rows": int(kl.size - finite.size),
        "nonpositive_denominators": int(sum(p["nonpositive"] for p in per_seed)),
        "n_rows": int(tv.size),
    }


def _context(A_ref, O_ref, v, causal, ranks, progress_bar):
    B, H, T, S = A_ref.shape
    A_u = np.broadcast_to(metrics.uniform_weights(T, S, causal), A_ref.shape)
    uniform = _aggregate([_metrics_of(A_ref, O_ref, A_u, A_u @ v, np.ones((B, H, T)))])
    uniform.update(method="uniform", label="uniform attention")
    ent = metrics.entropy(A_ref)
    visible = np.count_nonzero(A_u, axis=-1)  # keys each row sees
    many = visible > 1
    svd = np.linalg.svd(A_ref, full_matrices=False)
    floor = []
    for r in ranks:
        A_r = metrics.best_rank_approximation(A_ref, r, svd=svd)
        floor.append({
            "rank": int(r),
            "weights_rel_error": float(np.mean(metrics.svd_floor(A_ref, r, svd=svd))),
            "output_rel_error": float(np.mean(metrics.relative_error(A_r @ v, O_ref))),
        })
    progress_bar.update(1)
    return {
        "uniform": uniform,
        "entropy_mean": float(ent.mean()),
        "entropy_normalized": float(np.mean(ent[many] / np.log(visible[many])))
        if many.any() else 0.0,
        "peakiness": float(metrics.peakiness(A_ref).mean()),
        "n_rows": int(B * H * T),
        "svd_floor": floor,
    }


# ---------------------------------------------------------------------------------- timing
def _timing_tensors(arrays, tensors, where):
    """q, k, v as 4-D torch tensors on ``where``: a torch input keeps its dtype (float16,
    bfloat16 or float32; float64 and integers become float32), NumPy input becomes float32."""
    import torch

    out = []
    for a, t, name in zip(arrays, (tensors["q"], tensors["k"], tensors["v"]), "qkv"):
        if t is not None and t.dtype in (torch.float16, torch.bfloat16, torch.float32):
            x = t.detach().reshape(a.shape)
        else:
            x = torch.as_tensor(a, dtype=torch.float32)
        out.append(x.to(where).contiguous())
    return out


def _versions():
    import kernelkit

    out = {"kernelkit": kernelkit.__version__, "numpy": np.__version__,
           "python": sys.version.split()[0]}
    for name in ("torch", "triton"):
        if name in sys.modules:
            out[name] = getattr(sys.modules[name], "__version__", "unknown")
    return out


def compare(q, k, v, methods=("softmax", "elu+1", "favor+:256"), *, is_causal=False, scale=None,
            seeds=(0, 1, 2), device="auto", plot_index=(0, 0), ranks=None, measure=True,
            progress=None, causal=None):
    r"""Compare attention methods with float64 softmax attention on given q, k, v.

    For every method and seed (one evaluation for deterministic methods):

    - output relative error :math:`\lVert O' - O\rVert_F / \lVert O\rVert_F` per (batch, head),
      then averaged; its mean and standard deviation (ddof 0) over the seeds;
    - weights relative error :math:`\lVert A' - A\rVert_F / \lVert A\rVert_F`, same averaging;
    - per-row total variation :math:`\tfrac12\sum_j |A'_{ij} - A_{ij}|` (mean, max) and
      KL(A_i || A'_i) in nats (mean and max over the rows where it is finite; ``kl_inf_rows``
      counts the rows where A' gives weight <= 0 to a key that A attends to);
    - the number of denominators <= 0 (guarded as max(den, 1e-6));
    - time and peak memory of the method's fast path (:func:`~kernelkit.compare.measurement.measure`).

    Row statistics and counts pool the rows of all seeds; ``n_rows`` says how many.

    Parameters
    ----------
    q : ndarray or torch.Tensor of shape (B, H, T, D), (H, T, D) or (T, D)
    k : ndarray or torch.Tensor of shape (B, H, S, D), (H, S, D) or (S, D)
    v : ndarray or torch.Tensor of shape (B, H, S, Dv), (H, S, Dv) or (S, Dv)
        Real numbers, finite; k and v with q's leading shape. Never modified.
    methods : sequence of str or objects
        Method specs (:func:`kernelkit.compare.methods.method_names`): ``"softmax"``,
        ``"elu+1"``, ``"favor+:256"``, ``"kernel:rbf(gamma=0.5)"``, ``"nystrom:64"``..., or
        kernelkit kernel / FeatureMap objects. Distinct.
    is_causal : bool, default=False
        Top-left aligned causal mask (key j visible to query i iff j <= i); needs S == T.
        ``causal`` is the deprecated name of ``is_causal`` (FutureWarning).
    scale : float or None, default=None
        Softmax scale; None means 1 / sqrt(D). Also the scale of the exponential-kernel
        approximations (FAVOR+, taylor2, Nyström).
    seeds : sequence of int, default=(0, 1, 2)
        Seeds of the random methods.
    device : {"auto", "cpu", "cuda"}, default="auto"
        Where the timed runs go ("auto": the GPU when present).
    plot_index : (int, int), default=(0, 0)
        The (batch, head) whose weights go to ``report.heatmaps`` (at most 256 x 256).
    ranks : sequence of int or None, default=None
        Ranks M of the SVD floor; None means every method's feature count plus the powers of two,
        up to min(T, S).
    measure : bool, default=True
        Time and measure memory; False leaves ``time_ms`` NaN, ``peak_bytes`` -1 and
        ``status`` "not measured" (torch is then not needed for NumPy input).
    progress : bool or None, default=None
        A tqdm progress bar on stderr, one step per method; None shows it only on a terminal.

    Returns
    -------
    kernelkit.compare.report.CompareReport

    Raises
    ------
    TypeError
        Inputs that are not NumPy arrays / torch tensors of real numbers, a non-bool flag.
    ValueError
        Shapes that do not fit (the message names the array and its shape), NaN or inf input,
        an unknown method, bad seeds, scale, plot_index, ranks or device; or sizes whose
        float64 weight matrices (about :data:`WEIGHT_MATRICES_AT_PEAK` arrays of B x H x T x S)
        exceed the available memory, checked before any is allocated.

    Examples
    --------
    >>> import numpy as np
    >>> from kernelkit.compare import compare
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = (rng.standard_normal((2, 32, 8)) for _ in range(3))
    >>> report = compare(q, k, v, ["softmax", "elu+1", "favor+:16"], measure=False)
    >>> [row["method"] for row in report.rows]
    ['softmax', 'elu+1', 'favor+:16']
    >>> report.rows[0]["output_rel_error"]
    0.0
    """
    causal = resolve_is_causal(is_causal, causal, "compare")
    from tqdm import tqdm

    from kernelkit._device import resolve_device

    _check_bool(causal, "is_causal")
    _check_bool(measure, "measure")
    if progress is not None and not isinstance(progress, bool):
        raise TypeError(f"progress must be True, False or None; got {progress!r}")
    (q4, k4, v4), tensors, input_shape = _inputs(q, k, v, causal)
    B, H, T, D = q4.shape
    S, Dv = k4.shape[2], v4.shape[3]
    scale_value, scale_arg = _check_scale(scale, D)
    seeds = _check_seeds(seeds)
    b, h = _check_index(plot_index, B, H)
    parsed = _parse_methods(methods, D)
    ranks = _check_ranks(ranks, parsed, T, S)
    where = resolve_device(device)
    _check_memory(B, H, T, S)

    reference = parse_method("softmax", D)
    A_ref, _ = reference.weights(q4, k4, is_causal=causal, scale=scale_arg)
    O_ref = reference.output(q4, k4, v4, is_causal=causal, scale=scale_arg)
    crop = (b, h, slice(0, HEATMAP_SIZE), slice(0, HEATMAP_SIZE))
    heatmaps = {"index": (b, h), "softmax": A_ref[crop].copy()}
    timing = _timing_tensors((q4, k4, v4), tensors, where) if measure else None

    rows = []
    bar = tqdm(total=len(parsed) + 1, desc="compare", unit="method", leave=False,
               disable=(None if progress is None else not progress))
    with bar:
        for method in parsed:
            bar.set_postfix_str(method.label)
            per_seed = []
            for seed in (seeds if method.random else seeds[:1]):
                kw = dict(is_causal=causal, seed=seed, scale=scale_arg)
                A, den = method.weights(q4, k4, **kw)
                per_seed.append(_metrics_of(A_ref, O_ref, A, method.output(q4, k4, v4, **kw),
                                            den))
                if len(per_seed) == 1:
                    heatmaps[method.spec] = A[crop].copy()
                del A, den
            if not method.random:
                per_seed = per_seed * len(seeds)
            row = {"method": method.spec, "label": method.label, "family": method.family,
                   "n_features": method.n_features}
            row.update(_aggregate(per_seed))
            row.update(_timing(method, timing, causal, seeds[0], scale_arg, where))
            row["seeds"] = list(seeds)
            rows.append(row)
            bar.update(1)
        bar.set_postfix_str("context")
        context = _context(A_ref, O_ref, v4, causal, ranks, bar)

    meta = {
        "shape": {"B": B, "H": H, "T": T, "S": S, "D": D, "Dv": Dv},
        "input_shape": list(input_shape),
        "causal": causal,
        "scale": scale_value,
        "seeds": list(seeds),
        "dtype": str(timing[0].dtype).replace("torch.", "") if timing else None,
        "device": where,
        "measured": measure,
        "versions": _versions(),
        "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    return CompareReport(rows=rows, context=context, heatmaps=heatmaps, meta=meta)


def _timing(method, timing, causal, seed, scale, where):
    if timing is None:
        return {"time_ms": math.nan, "peak_bytes": -1, "device": where, "status": "not measured"}
    from kernelkit.compare.measurement import measure

    q, k, v = timing
    m = measure(lambda: method.run(q, k, v, is_causal=causal, seed=seed, scale=scale), device=where)
    return {"time_ms": m.time_ms, "peak_bytes": m.peak_bytes, "device": m.device,
            "status": m.status}
