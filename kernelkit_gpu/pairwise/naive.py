"""Plain-PyTorch versions of :func:`kernelkit_gpu.gram` and :func:`kernelkit_gpu.kernel_matvec`.

Same signatures, any device (CPU included, no Triton), float64-capable, chunked over rows so that
no more than about 2^27 kernel values exist at once. Differentiable with torch.autograd when
``out`` is not given. They serve as CPU fallback, gradient-check partner and eager baseline: the
squared distances use the eager formula (row norms + ``addmm`` on centred data, clamped at 0), so
near-duplicate points keep only float32 accuracy in d² (the Triton kernels recompute those pairs
by direct differences). Float16 / bfloat16 input is computed in float32.
"""

from __future__ import annotations

import contextlib

import torch

from kernelkit_gpu import checks
from kernelkit_gpu import epilogues as E
from kernelkit_gpu import prepare as P

__all__ = ["gram_naive", "kernel_matvec_naive"]

#: Kernel values materialised per chunk of rows.
CHUNK_ELEMENTS = 1 << 27


@contextlib.contextmanager
def _matmul_precision(device, precision):
    """IEEE float32 matmuls for "accurate", TF32 allowed for "fast" (CUDA only; restored after)."""
    if device.type != "cuda":
        yield
        return
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = precision == "fast"
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


def epilogue_torch(s, plan):
    """The kernel value from the pairwise quantity: the torch twin in the kernel's row of
    :data:`kernelkit_gpu.epilogues.EPILOGUES`."""
    return E.EPILOGUES[plan.name].torch(s, *plan.prm, plan.deg, plan.kind)


class _Prepared:
    """Data transformed once for all chunks: centred / scaled / normalised as the kernel needs."""

    def __init__(self, x, y, plan, symmetric, direct=False, check=None, names=("x", "y")):
        # direct: distances by direct differences, one feature at a time (exact for
        # near-duplicates, and forward-mode differentiable, which torch.cdist is not).
        # check: a FiniteCheck whose flags `names` (of x, y) are set where the values computed
        # with are non-finite or out of range, and read here: ValueError before any product
        self.direct = direct
        acc = P.acc_dtype(x.dtype)
        x = x.to(acc)
        y = x if symmetric else y.to(acc)
        self.diag_dot = None
        if plan.cosine:
            x, nz = P.normalize_rows(x)
            y = x if symmetric else P.normalize_rows(y)[0]
            self.diag_dot = nz
        if plan.pairwise != E.PW_DOT.value:
            # distances: centred on x's float64 column mean and scaled per feature, rounded once
            # (the values the Triton kernels' preparation forms)
            mean = P.column_mean(x)
            scale = P.feature_scales(plan, x.device)
            x = P.centre_and_scale(x, mean, scale, acc)
            y = x if symmetric else P.centre_and_scale(y, mean, scale, acc)
        if check is not None:
            check.mark(names[0], P.out_of_range(x, acc))
            if not symmetric:
                check.mark(names[1], P.out_of_range(y, acc))
            check.start_read()
            check.raise_if_not_finite()
        if plan.pairwise == E.PW_SQEUCLIDEAN.value:
            self.nx = (x * x).sum(dim=1)
            self.ny = self.nx if symmetric else (y * y).sum(dim=1)
        if plan.pairwise == E.PW_DOT.value and self.diag_dot is None:
            self.diag_dot = (x * x).sum(dim=1)
        self.x, self.y, self.plan = x, y, plan

    def pairwise(self, lo, hi):
        xi = self.x[lo:hi]
        pw = self.plan.pairwise
        if pw == E.PW_DOT.value:
            return xi @ self.y.T
        if self.direct:
            diffs = (xi[:, k, None] - self.y[None, :, k] for k in range(xi.shape[1]))
            if pw == E.PW_SQEUCLIDEAN.value:
                return sum(t * t for t in diffs)
            return sum(t.abs() for t in diffs)
        if pw == E.PW_SQEUCLIDEAN.value:
            base = self.nx[lo:hi, None] + self.ny[None, :]
            return torch.clamp_min(torch.addmm(base, xi, self.y.T, alpha=-2.0), 0.0)
        return torch.cdist(xi, self.y, p=1.0)

    def block(self, lo, hi):
        return epilogue_torch(self.pairwise(lo, hi), self.plan)


def _chunk_rows(m):
    return max(1, CHUNK_ELEMENTS // max(1, m))


def symmetric_gram(x, plan, direct=False, check=None):
    """K(X, X) for a kernel plan: exactly symmetric (mirrored upper triangle), diagonal exact.

    The plan's ``prm`` and ``scale`` may be torch tensors. With ``direct``, distances are formed
    by direct differences (float64 accuracy for near-duplicate points, as the reference) and
    every operation supports forward-mode automatic differentiation (:mod:`kernelkit_gpu.pairwise.log_gradient`).
    ``check``: the :class:`kernelkit_gpu.checks.FiniteCheck` of x, read before any product.
    """
    n = x.shape[0]
    prep = _Prepared(x, None, plan, symmetric=True, direct=direct, check=check)
    step = _chunk_rows(n)
    K = torch.cat([prep.block(lo, min(n, lo + step)) for lo in range(0, n, step)], dim=0)
    upper = torch.triu(K, diagonal=1)
    if plan.unit_diag:
        diag = torch.ones(n, dtype=K.dtype, device=x.device)
    else:
        diag = epilogue_torch(prep.diag_dot, plan)
    return upper + upper.T + torch.diag(diag)


def gram_naive(x, y=None, kernel="rbf", *, precision="accurate", out=None, **params):
    """Plain-PyTorch K(X, Y); the signature and validation of :func:`kernelkit_gpu.gram`.

    Equivalent to ``kernelkit_math.registry.get_kernel(kernel).value(X, Y, **params)`` up to dtype
    tolerance (near-duplicate points: float32 accuracy of d² only). With ``y=None`` the result is
    exactly symmetric with the diagonal written exactly (k(0), or the kernel of the row norms).
    Runs on any device; float16 / bfloat16 are computed in float32. Raises as
    :func:`kernelkit_gpu.gram` does, non-finite or out-of-range ``x`` / ``y`` and parameters
    that overflow the accumulation dtype included (ValueError; the range is judged on the values
    this twin computes with: distance kernels centred, dot-product kernels raw), before any
    product.
    """
    checks.check_pair(x, y)
    symmetric = y is None or y is x
    operands = {"x": x} if symmetric else {"x": x, "y": y}
    checks.check_precision(precision)
    plan = P.kernel_plan(kernel, x.shape[1], params)
    P.check_params_range(plan, x.dtype)
    n = x.shape[0]
    m = n if symmetric else y.shape[0]
    acc = P.acc_dtype(x.dtype)
    if out is not None:
        checks.check_out(out, (n, m), acc, x.device)
    if n == 0 or m == 0:
        checks.FiniteCheck(**operands).raise_if_not_finite()
        return out if out is not None else torch.empty((n, m), dtype=acc, device=x.device)
    check = checks.FiniteCheck(**operands, deferred=tuple(operands))
    with _matmul_precision(x.device, precision):
        if symmetric:
            K = symmetric_gram(x, plan, check=check)
        else:
            prep = _Prepared(x, y, plan, symmetric=False, check=check)
            step = _chunk_rows(m)
            K = torch.cat([prep.block(lo, min(n, lo + step)) for lo in range(0, n, step)], dim=0)
    if out is not None:
        out.copy_(K)
        return out
    return K


def kernel_matvec_naive(x, y, v, kernel="rbf", *, transpose=False, precision="accurate", **params):
    """Plain-PyTorch K(X, Y) @ V (or K(X, Y).T @ U); the signature of :func:`kernelkit_gpu.kernel_matvec`.

    Equivalent to ``get_kernel(kernel).value(X, Y, **params) @ V`` up to dtype tolerance; K is
    materialised one chunk of rows at a time (about 2^27 values), so memory stays bounded.
    Raises as :func:`kernelkit_gpu.kernel_matvec` does, non-finite ``x`` / ``y`` / ``v`` and
    out-of-range ``x`` / ``y`` included (ValueError, judged as :func:`gram_naive` does).
    """
    from kernelkit_gpu.pairwise.matvec_fused import check_matvec_args

    xe, ye, v2, squeeze, names, finite = check_matvec_args(x, y, v, transpose)
    checks.check_precision(precision)
    plan = P.kernel_plan(kernel, x.shape[1], params)
    P.check_params_range(plan, x.dtype)
    acc = P.acc_dtype(x.dtype)
    n, m = xe.shape[0], ye.shape[0]
    v2 = v2.to(acc)
    if n == 0 or m == 0 or v2.shape[1] == 0:
        finite.mark_non_finite("x", "y")
        finite.start_read()
        finite.raise_if_not_finite()
        res = torch.zeros((n, v2.shape[1]), dtype=acc, device=x.device)
        return res[:, 0] if squeeze else res
    with _matmul_precision(x.device, precision):
        prep = _Prepared(xe, ye, plan, symmetric=False, check=finite, names=names)
        step = _chunk_rows(m)
        parts = [prep.block(lo, min(n, lo + step)) @ v2 for lo in range(0, n, step)]
        res = parts[0] if len(parts) == 1 else torch.cat(parts, dim=0)
    return res[:, 0] if squeeze else res
