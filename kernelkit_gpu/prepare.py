"""Host-side data preparation shared by the Triton launchers and the naive versions: the kernel
plan (registry kernel -> epilogue constexprs and parameters), the preparation recipe (what is
normalised, centred, scaled, offset) and the prepared operands.

Everything here runs as ordinary torch operations on the input's device; nothing launches Triton.
Argument validation is in :mod:`kernelkit_gpu.checks`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch

from kernelkit_math.registry import get_kernel

from kernelkit_gpu import epilogues as E
from kernelkit_gpu import _launch
from kernelkit_gpu.checks import range_limit

#: Up to this many features the pairwise quantity is formed by direct differences in registers
#: (exact, and as fast as a tensor-core dot at such small D); above it, by tl.dot.
DIRECT_MAX_D = 16


def acc_dtype(dtype):
    """Accumulation and output dtype: float64 for float64 input, float32 otherwise."""
    return torch.float64 if dtype == torch.float64 else torch.float32


# ----------------------------------------------------------------------------- kernel plan
@dataclass(frozen=True)
class KernelPlan:
    """How a registry kernel maps onto the Triton kernel's constexprs and parameters.

    ``prm`` are p0, p1, p2 of :func:`kernelkit_gpu.epilogues._epilogue` (float64 values);
    ``scale`` is a per-column multiplier (float64 array) for per-feature gamma / length_scale,
    applied to the data on the torch side, or None.
    """

    name: str
    kind: int
    pairwise: int
    prm: tuple
    deg: int
    scale: Optional[np.ndarray]
    unit_diag: bool
    cosine: bool
    params: dict


def _as_param(value):
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    return value


def kernel_plan(kernel, n_features, params):
    """Validate ``kernel`` and its parameters through the registry; return a :class:`KernelPlan`.

    Raises
    ------
    ValueError
        Unknown kernel name, or a parameter out of range / of the wrong length.
    TypeError
        Unknown parameter name, or a parameter of the wrong type.
    """
    spec = get_kernel(kernel)
    resolved = spec.resolve(n_features, **{k: _as_param(v) for k, v in params.items()})
    name = spec.name
    pairwise = {"dot": E.PW_DOT, "cosine": E.PW_DOT, "sqeuclidean": E.PW_SQEUCLIDEAN,
                "manhattan": E.PW_MANHATTAN}[spec.pairwise].value
    row = E.EPILOGUES.get(name)
    if row is None:  # pragma: no cover - a registry entry without a GPU epilogue
        raise NotImplementedError(f"kernel {name!r} has no GPU epilogue yet")
    kind = row.kind(resolved)
    prm, scale = row.pack(spec.explicit(n_features, resolved))
    return KernelPlan(
        name=name, kind=int(kind), pairwise=int(pairwise), prm=tuple(float(p) for p in prm),
        deg=int(resolved.get("degree", 0)),
        scale=None if scale is None else np.asarray(scale, dtype=np.float64),
        unit_diag=spec.normalized, cosine=(spec.pairwise == "cosine"), params=resolved,
    )


def check_params_range(plan, dtype):
    """The plan's epilogue numbers (``plan.prm``: parameters with constants such as log2(e)
    folded in) must be numbers of the accumulation dtype of ``dtype`` input; rounded to infinity
    they would make 0 * inf = NaN (rbf with gamma = 3e38 in float32: gamma log2(e) overflows).

    Raises
    ------
    ValueError
        Naming the kernel's scalar parameters and the number that does not fit.
    """
    acc = acc_dtype(dtype)
    big = torch.finfo(acc).max
    for p in plan.prm:
        if not abs(p) <= big:
            shown = ", ".join(f"{k}={v!r}" for k, v in plan.params.items()
                              if np.ndim(v) == 0 and v is not None)
            raise ValueError(
                f"{plan.name} kernel parameters out of range for {str(acc)[6:]} arithmetic "
                f"({shown}): the kernel computes with {p:.3g} (a parameter times a constant such "
                f"as log2(e)), beyond the largest {str(acc)[6:]} number {big:.3g}; use float64 "
                f"input or a parameter within range"
            )


def out_of_range(t, dtype):
    """0-dim boolean tensor (on ``t``'s device, no sync): some row of ``t`` (the last axis) has a
    squared norm in the accumulation dtype of ``dtype`` input above
    :func:`kernelkit_gpu.checks.range_limit`, or a NaN; ``t`` 1-D: some ``|t_i|`` does."""
    limit = range_limit(dtype)
    t = t.to(acc_dtype(dtype))
    size = t.abs() if t.ndim == 1 else (t * t).sum(dim=-1)
    return ~(size <= limit).all()


# ------------------------------------------------------------------------------ operands
@dataclass(frozen=True)
class Recipe:
    """What the preparation does to both operands of one call; decided by :func:`recipe`.

    ``mode``: ``MODE_DIRECT`` (differences feature by feature) or ``MODE_MMA`` (tensor-core dot
    products). ``acc``: accumulation / output dtype. ``dtype``: dtype of the prepared values (the
    16-bit input dtype itself, or ``acc``). ``normalize``: cosine rows scaled to unit norm first.
    ``centre``: a float64 column mean is subtracted (x's from both operands; with ``bias``
    each operand's own, :func:`normalized_inputs`). ``scale``: per-feature multipliers
    (``plan.scale``) after centring. ``bias``: centred dot products, so the kernel adds the
    float64 per-row offsets of :func:`dot_offsets`. ``dot_prec``: "tf32x3", "tf32" or "ieee".
    """

    mode: int
    acc: torch.dtype
    dtype: torch.dtype
    normalize: bool
    centre: bool
    scale: bool
    bias: bool
    dot_prec: str


def recipe(plan, dtype, d, precision):
    """The one place that decides how a Gram-family call prepares its operands.

    Read by :func:`prepare` (matrix-free products, kernel attention) and by the Gram kernel's
    fused preparation (:mod:`kernelkit_gpu.pairwise.gram_fused`), so a numerical fix reaches
    every Triton consumer.

    * D <= 16 and the L1 distance: direct differences of the raw values in ``acc`` (exact), or
      of centred, scaled values with per-feature scales (scaling uncentred data would round each
      coordinate relative to its offset and lose the differences).
    * Tensor cores: squared distances on centred data; dot products of float32 / float64 data
      centred too (x·y = x̃·ỹ + b_x + b_y, ``bias``: every consumer's kernel adds the offsets);
      cosine never (rows are normalised). 16-bit data without
      per-feature scales stay 16-bit and uncentred (products of 16-bit numbers are exact in
      float32; centred values would be rounded to 16 bits again): the kernels recompute tiles
      where the expansion cancels. Under the interpreter bfloat16 goes to tl.dot as float32
      (it multiplies bfloat16 bit patterns as integers; float32 holds them and their products).
    """
    acc = acc_dtype(dtype)
    direct = plan.pairwise == E.PW_MANHATTAN.value or d <= DIRECT_MAX_D
    scale = plan.scale is not None
    sixteen = (not direct and dtype in (torch.float16, torch.bfloat16) and not plan.cosine
               and not scale)
    bias = not direct and plan.pairwise == E.PW_DOT.value and not plan.cosine and not sixteen
    centre = scale or (not direct and not sixteen
                       and (plan.pairwise == E.PW_SQEUCLIDEAN.value or bias))
    if sixteen:
        values = torch.float32 if (_launch.INTERPRET and dtype == torch.bfloat16) else dtype
    else:
        values = acc
    if not direct and values == torch.float32 and not sixteen:
        dot_prec = "tf32x3" if precision == "accurate" else "tf32"
    else:  # float64, 16-bit, or no tl.dot at all
        dot_prec = "ieee"
    return Recipe(mode=(E.MODE_DIRECT if direct else E.MODE_MMA).value, acc=acc, dtype=values,
                  normalize=plan.cosine, centre=centre, scale=scale, bias=bias, dot_prec=dot_prec)


_PRM_CACHE = {}


def _params_tensor(prm, dtype, device):
    key = (prm, dtype, str(device))
    t = _PRM_CACHE.get(key)
    if t is None:
        if len(_PRM_CACHE) > 256:
            _PRM_CACHE.clear()
        t = _PRM_CACHE[key] = torch.tensor(prm, dtype=dtype, device=device)
    return t


def normalize_rows(x):
    """Rows divided by their Euclidean norm; zero rows stay zero (as sklearn.preprocessing.normalize).

    Returns the normalised rows and a vector that is 1 for non-zero rows, 0 for zero rows (the
    diagonal of the cosine kernel). Each row is first divided by its largest magnitude, so the
    squares summed for the norm neither underflow (rows of 1e-30 in float32) nor overflow (1e30):
    rows of any finite scale are normalised to working precision, as the float64 reference does.
    Works on the last axis of any batch shape.
    """
    peak = x.abs().amax(dim=-1, keepdim=True)
    nonzero = peak > 0
    xs = x / torch.where(nonzero, peak, torch.ones_like(peak))
    norms = torch.linalg.vector_norm(xs, dim=-1, keepdim=True)  # in [1, sqrt(D)] for non-zero rows
    return xs / torch.where(nonzero, norms, torch.ones_like(norms)), nonzero[..., 0].to(x.dtype)


def column_mean(x):
    """The float64 mean over rows (the second-to-last axis), kept as a row: what is centred on."""
    return x.mean(dim=-2, dtype=torch.float64, keepdim=True).detach()


def feature_scales(plan, device):
    """The plan's per-feature multipliers as a float64 tensor (a tensor plan.scale passes through,
    with its forward-mode tangent), or None."""
    if plan.scale is None:
        return None
    return torch.as_tensor(plan.scale, dtype=torch.float64, device=device)


def centre_and_scale(x, mean, scale, dtype):
    """(x - mean) * scale formed in float64 and rounded once to ``dtype``; None skips a step.

    The definition of a prepared operand: the Gram kernel's fused preparation computes the very
    same values (``_gram_prep_kernel``; tested bit for bit).
    """
    if mean is None and scale is None:
        return x.to(dtype)
    w = x.to(torch.float64)
    if mean is not None:
        w = w - mean
    if scale is not None:
        w = w * scale
    return w.to(dtype)


def dot_offsets(x, mean, other_mean):
    """Per-row b = (x - mean)·m' + mean·m' / 2 in float64 (m' = ``other_mean``, the centre of the
    other operand): x·y = (x - m_x)·(y - m_y) + b_x + b_y, b_y with the roles swapped.

    Centring dot-product kernels: the tensor cores then only accumulate the small centred
    products, and the large common part is added once, in float64 rounded to the tile's dtype.
    ``mean`` and ``other_mean`` are (1, D) rows of :func:`column_mean` (the same one for K(X, X)).
    """
    mean, other_mean = mean.reshape(-1), other_mean.reshape(-1)
    return (x.to(torch.float64) - mean) @ other_mean + 0.5 * (mean @ other_mean)


def normalized_inputs(x, y, plan, r, symmetric):
    """The first steps of every preparation: cosine rows normalised (in ``r.acc``), then the
    float64 column means (if ``r.centre``) and the per-feature scales (if ``r.scale``).

    Returns ``(x, y, cos_diag, mean, mean_y, scale)``: ``y`` is None when ``symmetric``;
    ``cos_diag`` the cosine kernel's exact diagonal (1, or 0 for zero rows) or None; ``mean`` the
    column mean of x; ``mean_y`` what y is centred on: the same ``mean`` for distances (one
    common shift), y's own column mean for centred dot products (``r.bias``: the offsets of
    :func:`dot_offsets` hold for any two centres, and y far from x's mean, centred on it, would
    cancel the digits of x·y). The values to hand to the kernels are then
    ``centre_and_scale(x, mean, scale, r.dtype)`` and ``centre_and_scale(y, mean_y, ...)``.
    """
    cos_diag = None
    if r.normalize:
        x, cos_diag = normalize_rows(x.to(r.acc))
        y = None if symmetric else normalize_rows(y.to(r.acc))[0]
    elif symmetric:
        y = None
    mean = column_mean(x) if r.centre else None
    mean_y = column_mean(y) if r.bias and not symmetric else mean
    scale = feature_scales(plan, x.device) if r.scale else None
    return x, y, cos_diag, mean, mean_y, scale


@dataclass
class Operands:
    """Tensors and settings handed to a Triton launcher.

    ``nx`` / ``ny``: squared row norms (squared distances on tensor cores), or with ``bias`` the
    per-row offsets of centred dot products (:func:`dot_offsets`), or a dummy.
    """

    x: torch.Tensor
    y: torch.Tensor
    stride_x: tuple
    stride_y: tuple
    nx: torch.Tensor
    ny: torch.Tensor
    prm: torch.Tensor
    mode: int
    dk: int
    d_bucket: int
    dot_prec: str
    acc: torch.dtype
    n: int
    m: int
    d: int
    bias: bool = False


def _row_norms(x, acc):
    xa = x.to(acc)
    return (xa * xa).sum(dim=1)


#: Tensor-core operands get a row length that is a multiple of this many elements (zero
#: columns appended): Triton then knows the row stride is 16-aligned and loads the tiles
#: vectorised (about 3x faster at D = 20 and 28; docs/benchmarks.md).
ROW_ALIGN = 16


def aligned_rows(a):
    """``a`` (N, D) as a contiguous tensor whose rows are zero-padded to a multiple of
    :data:`ROW_ALIGN` elements (itself when already so). Zero columns change no dot product and
    no distance."""
    d = a.shape[1]
    width = -(-d // ROW_ALIGN) * ROW_ALIGN
    if width == d:
        return a.contiguous()
    out = a.new_zeros((a.shape[0], width))
    out[:, :d] = a
    return out


def prepare(x, y, plan, precision, symmetric, check=None, names=("x", "y")):
    """The operands of a Triton launch, as torch tensors, following :func:`recipe`.

    ``symmetric`` (or ``y`` None): y is x (K(X, X)). Tensor-core operands are row-major with
    rows zero-padded to :data:`ROW_ALIGN` elements (``d`` is the padded width);
    direct-difference operands feature-major (D, N) for coalesced per-feature loads. ``check``: a
    :class:`kernelkit_gpu.checks.FiniteCheck` whose flags ``names`` (of x and y) are set where
    the prepared values (and dot-product offsets) are non-finite or out of range
    (:func:`out_of_range`).
    """
    symmetric = symmetric or y is None
    r = recipe(plan, x.dtype, x.shape[1], precision)
    n, d = x.shape
    m = n if symmetric else y.shape[0]
    x, y, _, mean, mean_y, scale = normalized_inputs(x, y, plan, r, symmetric)
    xk = centre_and_scale(x, mean, scale, r.dtype)
    yk = xk if symmetric else centre_and_scale(y, mean_y, scale, r.dtype)
    if check is not None:
        check.mark(names[0], out_of_range(xk, r.acc))
        if not symmetric:
            check.mark(names[1], out_of_range(yk, r.acc))
    nx = ny = None
    if r.mode == E.MODE_DIRECT.value:
        xk = xk.t().contiguous()
        yk = xk if symmetric else yk.t().contiguous()
        stride_x = (xk.stride(1), xk.stride(0))
        stride_y = (yk.stride(1), yk.stride(0))
        dk = d if d <= DIRECT_MAX_D else 0
        d_bucket = d if d <= DIRECT_MAX_D else _launch.block_size(d, lo=1)
    else:
        xk = aligned_rows(xk)
        yk = xk if symmetric else aligned_rows(yk)
        if plan.pairwise == E.PW_SQEUCLIDEAN.value:
            nx = _row_norms(xk, r.acc)
            ny = nx if symmetric else _row_norms(yk, r.acc)
        elif r.bias:
            nx = dot_offsets(x, mean, mean_y).to(r.acc)
            ny = nx if symmetric else dot_offsets(y, mean_y, mean).to(r.acc)
            if check is not None:
                check.mark(names[0], out_of_range(nx, r.acc))
                if not symmetric:
                    check.mark(names[1], out_of_range(ny, r.acc))
        stride_x = (xk.stride(0), xk.stride(1))
        stride_y = (yk.stride(0), yk.stride(1))
        dk = 0
        d = xk.shape[1]
        d_bucket = _launch.block_size(d, lo=1, hi=1024)
    dummy = torch.zeros(1, dtype=r.acc, device=x.device) if nx is None else None
    return Operands(
        x=xk, y=yk, stride_x=stride_x, stride_y=stride_y,
        nx=nx if nx is not None else dummy, ny=ny if ny is not None else dummy,
        prm=_params_tensor(plan.prm, r.acc, x.device), mode=r.mode, dk=dk, d_bucket=d_bucket,
        dot_prec=r.dot_prec, acc=r.acc, n=n, m=m, d=d, bias=r.bias,
    )
