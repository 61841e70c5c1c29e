r"""How far is an attention approximation from softmax on given q, k, v: :func:`compare`.

The reference is float64 softmax attention. Every method (see
:mod:`kernelkit.attention.comparison.methods`)
is evaluated in float64 for accuracy, once per seed when it is random, and, unless
``measure=False``, run once more through its fast torch / Triton path for time and peak memory
(:func:`kernelkit.attention.comparison.measurement.measure`). The result is a
:class:`kernelkit.attention.comparison.report.CompareReport`.

Cost: the metrics hold the (B, H, T, S) weight matrices in float64 and take one SVD per
(batch, head), so compare() is meant for heads of up to a few thousand positions; the timing
side (:func:`kernelkit.attention.comparison.sweeps.sweep`) is the tool for long sequences.
Memory is
checked (:func:`check_memory`) before the inputs are converted; :func:`context_seconds`
estimates the SVDs' time, and they run in a worker thread so Ctrl-C stops them.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
import numbers
import sys
import threading

import numpy as np

from kernelkit.attention.comparison import memory, metrics
from kernelkit.attention.comparison.methods import EPS, parse_method, parse_methods
from kernelkit.attention.comparison.report import CompareReport
from kernelkit_math.attention import resolve_is_causal

__all__ = ["compare", "check_memory", "planned_memory", "HEATMAP_SIZE"]

#: Heatmaps keep at most this many leading queries and keys.
HEATMAP_SIZE = 256
#: Float64 (B, H, T, S) arrays compare() holds at its peak: the reference weights, one method's
#: weights, the SVD factors and the temporaries of the metrics (tracemalloc measured 6.8 for
#: T = S = 1500 with softmax, elu+1, favor+:64 and nystrom:32; 8 leaves a margin).
WEIGHT_MATRICES_AT_PEAK = 8
#: Float64 copies of q, k and v held at once at most: the caller's arrays (or the synthetic
#: draw, or the file read), their float64 conversion, the timed tensors and one temporary.
INPUT_COPIES = 4
#: Seconds per min(T, S)² max(T, S) of one float64 SVD, for :func:`context_seconds`: 2-core
#: CPUs took 1.7e-9 (T = 3072) to 2.2e-9 (T = 4096) idle and 5.4e-9 (T = 2048) busy.
SVD_SECONDS_PER_CUBE = 2e-9

_LEGEND = {2: "(T, D)", 3: "(H, T, D)", 4: "(B, H, T, D)"}


# ------------------------------------------------------------------------------- validation
def _is_tensor(x):
    return type(x).__module__.split(".")[0] == "torch" and hasattr(x, "detach")


def _shape(x, name):
    """The shape of a NumPy array or torch tensor of real numbers, checked without a copy."""
    if _is_tensor(x):
        import torch

        if x.is_complex() or x.dtype == torch.bool:
            raise TypeError(f"{name} must hold real numbers; got dtype {x.dtype}")
        return tuple(x.shape)
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name} must be a NumPy array or a torch.Tensor of shape (B, H, T, D), "
                        f"(H, T, D) or (T, D); got {type(x).__name__}")
    if x.dtype.kind not in "iuf":
        raise TypeError(f"{name} must hold real numbers; got dtype {x.dtype} (shape {x.shape})")
    return x.shape


def _to_numpy(x):
    if _is_tensor(x):
        import torch

        return x.detach().to("cpu", torch.float64).numpy()
    return x.astype(np.float64, copy=False)


def _inputs(q, k, v, causal):
    """(q, k, v as float64 (B, H, T, D) arrays, the torch tensors or None, q's shape): shapes
    and memory are checked before anything is converted."""
    inputs = {"q": q, "k": k, "v": v}
    shapes = {name: _shape(x, name) for name, x in inputs.items()}
    for name, shape in shapes.items():
        if len(shape) not in _LEGEND:
            raise ValueError(f"{name} must have shape (B, H, T, D), (H, T, D) or (T, D); got "
                             f"shape {shape}")
        if 0 in shape:
            raise ValueError(f"{name} must not be empty; got shape {shape}")
    qs, ks, vs = shapes["q"], shapes["k"], shapes["v"]
    for name, shape in (("k", ks), ("v", vs)):
        if len(shape) != len(qs):
            raise ValueError(f"{name} must have as many dimensions as q: q is {_LEGEND[len(qs)]} "
                             f"with shape {qs}, {name} has shape {shape}")
        if shape[:-2] != qs[:-2]:
            raise ValueError(f"{name} must have the leading (batch, head) shape of q "
                             f"{qs[:-2]}; got shape {shape}")
    if ks[-1] != qs[-1]:
        raise ValueError(f"k must have the head dim D = {qs[-1]} of q (shape {qs}); "
                         f"got shape {ks}")
    if vs[-2] != ks[-2]:
        raise ValueError(f"v must have the key length S = {ks[-2]} of k (shape "
                         f"{ks}); got shape {vs}")
    if causal and ks[-2] != qs[-2]:
        raise ValueError(f"causal comparison needs as many keys as queries: q has T = "
                         f"{qs[-2]} (shape {qs}), k has S = {ks[-2]} (shape {ks})")
    lead = (1,) * (4 - len(qs)) + tuple(qs[:-2])
    check_memory(*lead, qs[-2], ks[-2], qs[-1], vs[-1])
    four, tensors = [], {}
    for name, x in inputs.items():
        a = _to_numpy(x)
        if not np.all(np.isfinite(a)):
            raise ValueError(f"{name} holds NaN or infinite values (shape {a.shape})")
        tensors[name] = x if _is_tensor(x) else None
        four.append(a.reshape(lead + a.shape[-2:]))
    return four, tensors, tuple(qs)


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


def _cap_landmarks(method, S):
    """Nyström with M > S keys uses M = S landmarks (the keys themselves): say so in the row."""
    if method.family != "nystrom" or method.n_features <= S:
        return method
    return dataclasses.replace(method, n_features=S,
                               label=f"{method.spec} (M = {S}: capped at the S = {S} keys)")


def planned_memory(B, H, T, S, D, Dv):
    """Bytes :func:`compare` holds at its peak for these sizes: :data:`WEIGHT_MATRICES_AT_PEAK`
    float64 (B, H, T, S) arrays and :data:`INPUT_COPIES` float64 copies of q, k and v."""
    weights = WEIGHT_MATRICES_AT_PEAK * B * H * T * S * 8
    inputs = INPUT_COPIES * B * H * (T * D + S * D + S * Dv) * 8
    return weights + inputs


def check_memory(B, H, T, S, D, Dv):
    """Refuse sizes whose comparison (:func:`planned_memory`) does not fit in the available
    memory (:func:`kernelkit.attention.comparison.memory.available_memory`), before anything is
    allocated.

    Raises
    ------
    ValueError
        Naming the sizes, the memory needed and the memory available.
    """
    needed = planned_memory(B, H, T, S, D, Dv)
    available = memory.available_memory()
    if available is not None and needed > available:
        raise ValueError(
            f"comparing B x H x T x S = {B} x {H} x {T} x {S} attention weights (D = {D}, Dv = "
            f"{Dv}) needs about {memory.format_bytes(needed)} ({WEIGHT_MATRICES_AT_PEAK} float64 "
            f"arrays of {memory.format_bytes(B * H * T * S * 8)} and the inputs) but "
            f"{memory.format_bytes(available)} of memory is available; compare a slice (fewer "
            "heads, or the first few thousand positions of q, k, v), or use 'kernelkit "
            "attention sweep' for time and memory at long sequence lengths"
        )


# ---------------------------------------------------------------------------------- metrics
def _metrics_of(A_ref, O_ref, A, O, den, floor=EPS):
    """The per-seed numbers of one method (``floor``: what the guard raises a den to)."""
    return {
        "output": float(np.mean(metrics.relative_error(O, O_ref))),
        "weights": float(np.mean(metrics.relative_error(A, A_ref))),
        "tv": metrics.total_variation(A, A_ref).ravel(),
        "kl": metrics.kl_divergence(A_ref, A).ravel(),
        "nonpositive": int(np.count_nonzero(den <= 0)),
        "guarded": int(np.count_nonzero(den < floor)),
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
        "guarded_rows": int(sum(p["guarded"] for p in per_seed)),
        "n_rows": int(tv.size),
    }


#: Done-events of :func:`_interruptible` workers whose function has not returned yet.
_UNFINISHED = set()


def work_left_running():
    """True while a worker of :func:`_interruptible` is still inside its function (abandoned
    after Ctrl-C): the command line then ends the process at once (``kernelkit.cli.entry``),
    because interpreter shutdown joins OpenBLAS's threads and deadlocks while one of them
    serves the abandoned SVD (or a sweep's torch call). ``Thread.is_alive`` can not say it: on
    Python 3.11 a join interrupted by KeyboardInterrupt marks the running thread as stopped
    (bpo-45274's fix)."""
    return any(not done.is_set() for done in list(_UNFINISHED))


def _interruptible(fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` in a worker thread, waited for in steps of 0.1 s: LAPACK and
    torch's kernels never look at signals, so a long SVD (or a sweep's long torch call) in the
    main thread would hold Ctrl-C until it ends; here KeyboardInterrupt reaches the main thread
    at once (the daemon worker is abandoned)."""
    box, done = {}, threading.Event()

    def work():
        try:
            box["result"] = fn(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            box["error"] = exc
        finally:
            done.set()

    _UNFINISHED.add(done)
    threading.Thread(target=work, name="kernelkit-compare-worker", daemon=True).start()
    while not done.wait(0.1):
        pass
    _UNFINISHED.discard(done)
    if "error" in box:
        raise box["error"]
    return box["result"]


def _svd_per_head(A, progress_bar):
    """``np.linalg.svd(A, full_matrices=False)`` one (batch, head) at a time, interruptible,
    with a progress step per head; the factors are written into arrays allocated once."""
    B, H, T, S = A.shape
    r = min(T, S)
    U, s, Vt = np.empty((B, H, T, r)), np.empty((B, H, r)), np.empty((B, H, r, S))
    for i, index in enumerate(np.ndindex(B, H)):
        progress_bar.set_postfix_str(f"context: SVD {i + 1}/{B * H}")
        U[index], s[index], Vt[index] = _interruptible(np.linalg.svd, A[index],
                                                       full_matrices=False)
        progress_bar.update(1)
    return U, s, Vt


def context_seconds(B, H, T, S):
    """Rough seconds of the context step on a CPU: B x H SVDs of T x S weights at
    :data:`SVD_SECONDS_PER_CUBE` x min(T, S)² max(T, S) each."""
    return B * H * min(T, S) ** 2 * max(T, S) * SVD_SECONDS_PER_CUBE


def _context(A_ref, O_ref, v, causal, ranks, progress_bar):
    B, H, T, S = A_ref.shape
    A_u = np.broadcast_to(metrics.uniform_weights(T, S, causal), A_ref.shape)
    uniform = _aggregate([_metrics_of(A_ref, O_ref, A_u, A_u @ v, np.ones((B, H, T)))])
    uniform.update(method="uniform", label="uniform attention")
    ent = metrics.entropy(A_ref)
    visible = np.count_nonzero(A_u, axis=-1)  # keys each row sees
    many = visible > 1
    svd = _svd_per_head(A_ref, progress_bar)
    floor = []
    for r in ranks:
        A_r = metrics.best_rank_approximation(A_ref, r, svd=svd)
        floor.append({
            "rank": int(r),
            "weights_rel_error": float(np.mean(metrics.svd_floor(A_ref, r, svd=svd))),
            "output_rel_error": float(np.mean(metrics.relative_error(A_r @ v, O_ref))),
        })
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
    - the number of denominators <= 0 (guarded as max(den, 1e-6)), and ``guarded_rows``, the
      rows whose denominator the guard raised (den < 1e-6; for the signed maps identity and rff
      den < their guard floor, :data:`kernelkit.attention.comparison.methods.SIGNED_GUARD`);
    - time and peak memory of the method's fast path
      (:func:`~kernelkit.attention.comparison.measurement.measure`).

    Row statistics and counts pool the rows of all seeds; ``n_rows`` says how many.

    Parameters
    ----------
    q : ndarray or torch.Tensor of shape (B, H, T, D), (H, T, D) or (T, D)
    k : ndarray or torch.Tensor of shape (B, H, S, D), (H, S, D) or (S, D)
    v : ndarray or torch.Tensor of shape (B, H, S, Dv), (H, S, Dv) or (S, Dv)
        Real numbers, finite; k and v with q's leading shape. Never modified.
    methods : sequence of str or objects
        Method specs (:func:`kernelkit.attention.comparison.methods.method_names`): ``"softmax"``,
        ``"elu+1"``, ``"favor+:256"``, ``"kernel:rbf(gamma=0.5)"``, ``"nystrom:64"``..., or
        kernelkit kernel / FeatureMap objects. Distinct. ``nystrom:M`` with M > S runs with
        M = S landmarks (the keys themselves); its row's ``n_features`` and ``label`` say so.
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
        A tqdm progress bar on stderr, one step per method and one per (batch, head) SVD of
        the context step; None shows it only on a terminal. Ctrl-C stops any step within 0.1 s
        (the SVDs run in a worker thread).

    Returns
    -------
    kernelkit.attention.comparison.report.CompareReport

    Raises
    ------
    TypeError
        Inputs that are not NumPy arrays / torch tensors of real numbers, a non-bool flag.
    ValueError
        Shapes that do not fit (the message names the array and its shape), NaN or inf input,
        an unknown method, bad seeds, scale, plot_index, ranks or device; or sizes whose
        :func:`planned_memory` (:data:`WEIGHT_MATRICES_AT_PEAK` float64 arrays of
        B x H x T x S, and the inputs) exceeds the available memory, checked before anything
        is converted or allocated.

    Examples
    --------
    >>> import numpy as np
    >>> from kernelkit.attention.comparison import compare
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

    from kernelkit._util.device import resolve_device

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
    parsed = [_cap_landmarks(m, S) for m in parse_methods(methods, D)]
    ranks = _check_ranks(ranks, parsed, T, S)
    where = resolve_device(device)

    reference = parse_method("softmax", D)
    A_ref, _ = reference.weights(q4, k4, is_causal=causal, scale=scale_arg)
    O_ref = reference.output(q4, k4, v4, is_causal=causal, scale=scale_arg)
    crop = (b, h, slice(0, HEATMAP_SIZE), slice(0, HEATMAP_SIZE))
    heatmaps = {"index": (b, h), "softmax": A_ref[crop].copy()}
    timing = _timing_tensors((q4, k4, v4), tensors, where) if measure else None

    rows = []
    bar = tqdm(total=len(parsed) + B * H, desc="compare", unit="step", leave=False,
               disable=(None if progress is None else not progress))
    with bar:
        for method in parsed:
            bar.set_postfix_str(method.label)
            per_seed = []
            for seed in (seeds if method.random else seeds[:1]):
                kw = dict(is_causal=causal, seed=seed, scale=scale_arg)
                A, den = method.weights(q4, k4, **kw)
                per_seed.append(_metrics_of(A_ref, O_ref, A, method.output(q4, k4, v4, **kw),
                                            den, method.floor(q4, k4, **kw)))
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
        return {"time_ms": math.nan, "time_min_ms": math.nan, "time_max_ms": math.nan,
                "peak_bytes": -1, "device": where, "status": "not measured"}
    from kernelkit.attention.comparison.measurement import measure

    q, k, v = timing
    m = measure(lambda: method.run(q, k, v, is_causal=causal, seed=seed, scale=scale), device=where)
    spread = (min(m.times_ms), max(m.times_ms)) if m.times_ms else (math.nan, math.nan)
    return {"time_ms": m.time_ms, "time_min_ms": spread[0], "time_max_ms": spread[1],
            "peak_bytes": m.peak_bytes, "device": m.device, "status": m.status}
