"""Host-side data preparation shared by the Triton launchers and the naive versions: the kernel
plan (registry kernel -> epilogue constexprs and parameters) and the prepared operands.

Everything here runs as ordinary torch operations on the input's device; nothing launches Triton.
Argument validation is in :mod:`kernelkit_gpu._checks`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch

from kernelkit_math.registry import get_kernel

from kernelkit_gpu import _epilogues as E
from kernelkit_gpu import _launch

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

    ``prm`` are p0, p1, p2 of :func:`kernelkit_gpu._epilogues._epilogue` (float64 values);
    ``scale`` is a per-column multiplier (float64 array) for per-feature gamma / length_scale,
    applied to the data on the torch side, or None.
    """

    name: str
    kind: int
    pairwise: int
    prm: tuple
    deg: int
    scale: Optional[np.ndarray]
    stationary: bool
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
        stationary=spec.stationary, cosine=(spec.pairwise == "cosine"), params=resolved,
    )


# ------------------------------------------------------------------------------ operands
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


_PRM_CACHE = {}


def _params_tensor(prm, dtype, device):
    key = (prm, dtype, str(device))
    t = _PRM_CACHE.get(key)
    if t is None:
        if len(_PRM_CACHE) > 256:
            _PRM_CACHE.clear()
        t = _PRM_CACHE[key] = torch.tensor(prm, dtype=dtype, device=device)
    return t


def _normalize_rows(x):
    """Rows divided by their Euclidean norm; zero rows stay zero (as sklearn.preprocessing.normalize).

    Returns the normalised rows and a vector that is 1 for non-zero rows, 0 for zero rows (the
    diagonal of the cosine kernel). Each row is first divided by its largest magnitude, so the
    squares summed for the norm neither underflow (rows of 1e-30 in float32) nor overflow (1e30):
    rows of any finite scale are normalised to working precision, as the float64 reference does.
    """
    peak = x.abs().amax(dim=1, keepdim=True)
    nonzero = peak > 0
    xs = x / torch.where(nonzero, peak, torch.ones_like(peak))
    norms = torch.linalg.vector_norm(xs, dim=1, keepdim=True)  # in [1, sqrt(D)] for non-zero rows
    return xs / torch.where(nonzero, norms, torch.ones_like(norms)), nonzero[:, 0].to(x.dtype)


def dot_offsets(x, mean):
    """Per-row b = (x - mean)·mean + ||mean||² / 2 in float64: x·y = (x - mean)·(y - mean) + b_x + b_y.

    Centring dot-product kernels: the tensor cores then only accumulate the small centred
    products, and the large common part is added once, in float64 rounded to the tile's dtype.
    """
    return (x.to(torch.float64) - mean) @ mean + 0.5 * (mean @ mean)


def _row_norms(x, acc):
    xa = x.to(acc)
    return (xa * xa).sum(dim=1)


def _feature_major(x, acc, mean, scale):
    """(D, N) contiguous copy in the accumulation dtype, for per-feature (coalesced) loads.

    With per-feature scales the data are centred and scaled in float64 and rounded once: scaling
    uncentred data would round each coordinate relative to its offset and lose the differences.
    Without scales the raw values are kept, so differences are formed exactly in the kernel.
    """
    if scale is None:
        return x.to(acc).t().contiguous()
    xs = (x.to(torch.float64) - mean) * scale
    return xs.to(acc).t().contiguous()


def _centred(x, mean, scale):
    """(x - mean) * scale, rounded once to x's dtype (float32 or float64; the mean is float64)."""
    if x.dtype == torch.float64:
        xc = x - mean
        return xc * scale if scale is not None else xc
    if scale is None:
        return x - mean.to(torch.float32)
    return ((x.to(torch.float64) - mean) * scale).to(torch.float32)


def prepare(x, y, plan, precision, symmetric, want_diag, centre_dot=False):
    """Centre / scale / normalise / transpose the data for the Triton kernel; return :class:`Operands`.

    ``symmetric``: y is x (K(X, X)). ``want_diag``: the launcher needs the row-norm vector of a
    dot-product kernel to write the exact diagonal. ``centre_dot`` (not with ``want_diag``):
    float32 / float64 data of dot-product kernels (not cosine) on the tensor-core path are centred
    as :func:`kernelkit_gpu.gram` does, x·y = x̃·ỹ + b_x + b_y with the float64 per-row offsets
    of :func:`dot_offsets` in ``nx`` / ``ny`` (``bias`` is then True): the kernel must add them.
    """
    acc = acc_dtype(x.dtype)
    dev = x.device
    n, d = x.shape
    if y is None:
        y = x
    m = y.shape[0]
    nx = ny = None
    if plan.cosine:
        x, diag_x = _normalize_rows(x.to(acc))
        y = x if symmetric else _normalize_rows(y.to(acc))[0]
        if want_diag:
            nx = ny = diag_x  # cosine_diag: exactly 1 for non-zero rows, 0 for zero rows
    scale = None  # per-feature column multipliers, float64
    if plan.scale is not None:
        scale = torch.as_tensor(plan.scale, dtype=torch.float64, device=dev)
    mode = E.MODE_DIRECT.value if (plan.pairwise == E.PW_MANHATTAN.value or d <= DIRECT_MAX_D) \
        else E.MODE_MMA.value
    bias = (centre_dot and mode == E.MODE_MMA.value and plan.pairwise == E.PW_DOT.value
            and not plan.cosine and x.dtype in (torch.float32, torch.float64))
    if mode == E.MODE_DIRECT.value:
        mean = None if scale is None else x.to(torch.float64).mean(dim=0)
        xk = _feature_major(x, acc, mean, scale)
        yk = xk if symmetric else _feature_major(y, acc, mean, scale)
        stride_x = (xk.stride(1), xk.stride(0))
        stride_y = (yk.stride(1), yk.stride(0))
        dk = d if d <= DIRECT_MAX_D else 0
        d_bucket = d if d <= DIRECT_MAX_D else _launch.block_size(d, lo=1)
    else:
        if plan.pairwise == E.PW_SQEUCLIDEAN.value:
            if x.dtype in (torch.float16, torch.bfloat16) and scale is None:
                # 16-bit: the raw values go to the native tensor-core product (products of 16-bit
                # numbers are exact in float32). Centring would round the centred values to 16
                # bits again; instead, where the expansion cancels (data far from the origin,
                # near-duplicates) the tile falls back to exact direct differences.
                xk = x.contiguous()
                yk = xk if symmetric else y.contiguous()
            else:
                if x.dtype in (torch.float16, torch.bfloat16):
                    # per-feature scales: scaled values are not 16-bit numbers; use float32
                    x, y = x.to(torch.float32), y.to(torch.float32)
                mean = x.mean(dim=0, dtype=torch.float64)
                xk = _centred(x, mean, scale)
                yk = xk if symmetric else _centred(y, mean, scale)
            nx = _row_norms(xk, acc)
            ny = nx if symmetric else _row_norms(yk, acc)
        elif bias:
            # the mean rounded to the data's dtype: x - mean is then formed exactly (data near
            # the mean) and the offsets use the very same mean, so the identity holds
            mean = x.mean(dim=0, dtype=torch.float64).to(x.dtype).to(torch.float64)
            xk = _centred(x, mean, None)
            yk = xk if symmetric else _centred(y, mean, None)
            nx = dot_offsets(x, mean).to(acc)
            ny = nx if symmetric else dot_offsets(y, mean).to(acc)
        else:
            xk = x.contiguous()
            yk = xk if symmetric else y.contiguous()
        if _launch.INTERPRET and xk.dtype == torch.bfloat16:
            # Triton's interpreter multiplies the bit patterns of bfloat16 tl.dot operands as
            # integers; float32 holds every bfloat16 exactly and its products too.
            xk = xk.to(torch.float32)
            yk = xk if symmetric else yk.to(torch.float32)
        stride_x = (xk.stride(0), xk.stride(1))
        stride_y = (yk.stride(0), yk.stride(1))
        dk = 0
        d_bucket = _launch.block_size(d, lo=1, hi=1024)
    if want_diag and nx is None and plan.pairwise == E.PW_DOT.value:
        nx = ny = _row_norms(x, acc)
    dummy = None
    if nx is None or ny is None:
        dummy = torch.zeros(1, dtype=acc, device=dev)
    if mode == E.MODE_MMA.value and xk.dtype == torch.float32 and \
            not (_launch.INTERPRET and x.dtype == torch.bfloat16):
        dot_prec = "tf32x3" if precision == "accurate" else "tf32"
    else:  # float64, 16-bit, or no tl.dot at all (MODE_DIRECT: one compiled kernel for both)
        dot_prec = "ieee"
    return Operands(
        x=xk, y=yk, stride_x=stride_x, stride_y=stride_y,
        nx=nx if nx is not None else dummy, ny=ny if ny is not None else dummy,
        prm=_params_tensor(plan.prm, acc, dev), mode=mode, dk=dk, d_bucket=d_bucket,
        dot_prec=dot_prec, acc=acc, n=n, m=m, d=d, bias=bias,
    )

