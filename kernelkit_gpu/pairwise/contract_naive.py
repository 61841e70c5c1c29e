"""Plain-PyTorch twin of :func:`kernelkit_gpu.pairwise.contract_fused.kernel_contractions`.

Same signature, any registry kernel, any device (CPU included, no Triton). Row blocks of K(X, X)
are formed by direct differences (as :mod:`kernelkit_gpu.pairwise.log_gradient` does, from the
same epilogue table), contracted with the matching block of G = U W^T, and differentiated by
forward-mode automatic differentiation (``torch.func.jvp``) along each hyperparameter, the
tangent being the parameter's value: d/dlog p = p d/dp (which also holds for negative
``coef0``). No (n, n) matrix exists at once: memory is one block of ``CHUNK_ELEMENTS`` pairs.
Cost: one pass over all pairs per gradient column, plus one for ``kg`` and one for K @ v.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple, Optional

import numpy as np
import torch

from kernelkit_gpu import checks
from kernelkit_gpu import epilogues as E
from kernelkit_gpu import prepare as P
from kernelkit_gpu.pairwise.log_gradient import _FORWARD_AD_LOCK
from kernelkit_gpu.pairwise.naive import _Prepared
from kernelkit_math.registry import get_kernel

__all__ = ["Contractions", "check_contraction_args", "kernel_contractions_naive"]

#: Kernel values (and their autograd temporaries) per row block.
CHUNK_ELEMENTS = 1 << 22


class Contractions(NamedTuple):
    """Result of :func:`kernel_contractions`.

    Attributes
    ----------
    grad : torch.Tensor, shape (n_hyperparameters,), float64
        sum_ab dK_ab / dlog theta_j G_ab for the registry's hyperparameters in order, a
        per-feature parameter taking one entry per feature (the columns of
        ``get_kernel(kernel).gradient(X, **params)``).
    kg : torch.Tensor, shape (), float64
        sum_ab K_ab G_ab = sum_i u_i^T K w_i: the derivative for a multiplicative amplitude
        s K (dK / dlog s = s K, so multiply by s).
    kv : torch.Tensor of shape (n,) or (n, r), or None
        K @ v when ``v`` was given (float32, or float64 for float64 input).
    """

    grad: torch.Tensor
    kg: torch.Tensor
    kv: Optional[torch.Tensor]


def check_contraction_args(x, u, w, v):
    """Validate; return (x, u2d, w2d, v2d or None, v_was_1d)."""
    checks.check_matrix(x, "x")
    n = x.shape[0]
    out = []
    for t, name in ((u, "u"), (w, "w"), (v, "v")):
        if t is None and name == "v":
            out.append(None)
            continue
        checks.check_tensor(t, name)
        checks.check_floating(t, name)
        if t.device != x.device:
            raise ValueError(f"{name} must be on the same device as x; got {t.device} and "
                             f"{x.device}")
        if t.ndim not in (1, 2) or t.shape[0] != n:
            raise ValueError(f"{name} must have shape (n,) or (n, t) with n = x.shape[0] = {n}; "
                             f"got {tuple(t.shape)}")
        out.append(t[:, None] if t.ndim == 1 else t)
    u2, w2, v2 = out
    if u2.shape != w2.shape:
        raise ValueError(f"u and w must have the same shape; got {tuple(u.shape)} and "
                         f"{tuple(w.shape)}")
    if not checks._ASSUME_FINITE.get():  # kernelkit_gpu.assume_finite(): no check, no wait
        for t, name in ((x, "x"), (u, "u"), (w, "w"), (v, "v")):
            if t is not None:
                checks.check_finite(t, name)
    return x, u2, w2, v2, v is not None and v.ndim == 1


def kernel_contractions_naive(x, u, w, kernel="rbf", *, v=None, **params):
    """Plain-PyTorch :func:`kernelkit_gpu.pairwise.contract_fused.kernel_contractions`.

    Same parameters and return value (a
    :class:`~kernelkit_gpu.pairwise.contract_fused.Contractions`); works for every registry kernel
    and ``x`` of any width. float64 input computes in float64, other input in float32; the sums
    over row blocks are float64.
    """
    x, u, w, v, squeeze = check_contraction_args(x, u, w, v)
    n, d = x.shape
    acc = P.acc_dtype(x.dtype)
    spec = get_kernel(kernel)
    plan = P.kernel_plan(kernel, d, params)
    resolved = spec.explicit(d, plan.params)
    names = [p.name for p in spec.hyperparameters]
    primals = tuple(torch.as_tensor(np.asarray(resolved[k], dtype=np.float64), device=x.device)
                    for k in names)
    u, w = u.to(acc), w.to(acc)
    step = max(1, CHUNK_ELEMENTS // max(1, n))

    def as_t(t):
        return torch.as_tensor(t, dtype=torch.float64, device=x.device)

    def contraction(*hyper):
        """sum_ab K_ab G_ab as a function of the hyperparameter tensors (what jvp differentiates),
        accumulated over row blocks in float64."""
        prm, scale = E.EPILOGUES[spec.name].pack(dict(resolved, **dict(zip(names, hyper))))
        p = dataclasses.replace(plan, prm=tuple(as_t(t) for t in prm),
                                scale=None if scale is None else as_t(scale))
        prep = _Prepared(x, x, p, symmetric=True, direct=True)
        total = torch.zeros((), dtype=torch.float64, device=x.device)
        for lo in range(0, n, step):
            hi = min(n, lo + step)
            block = prep.block(lo, hi).to(acc)
            total = total + (block * (u[lo:hi] @ w.T)).sum(dtype=torch.float64)
        return total

    columns = []
    with _FORWARD_AD_LOCK:
        for i, value in enumerate(primals):
            for j in range(value.numel()):
                tangent = [torch.zeros_like(t) for t in primals]
                tangent[i].view(-1)[j] = value.view(-1)[j]  # d/dlog p = p d/dp
                columns.append(torch.func.jvp(contraction, primals, tuple(tangent))[1])
    grad = torch.stack(columns) if columns else torch.zeros(0, dtype=torch.float64,
                                                              device=x.device)
    kg = contraction(*primals)
    kv = None
    if v is not None:
        prep = _Prepared(x, x, plan, symmetric=True, direct=True)
        kv = torch.zeros((n, v.shape[1]), dtype=acc, device=x.device)
        for lo in range(0, n, step):
            kv[lo:lo + step] = prep.block(lo, min(n, lo + step)).to(acc) @ v.to(acc)
    if kv is not None and squeeze:
        kv = kv[:, 0]
    return Contractions(grad=grad, kg=kg, kv=kv)
