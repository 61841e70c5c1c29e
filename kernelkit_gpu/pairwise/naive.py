"""Plain-PyTorch versions of :func:`kernelkit_gpu.gram` and :func:`kernelkit_gpu.kernel_matvec`.

Same signatures, any device (CPU included, no Triton), float64-capable, chunked over rows so that
no more than about 2^27 kernel values exist at once. Differentiable with torch.autograd when
``out`` is not given. They serve as CPU fallback, gradient-check partner and eager baseline: the
squared distances use the eager formula (|x|^2 + |y|^2 - 2 x.y of centred data in one GEMM,
clamped at 0), so near-duplicate points keep only float32 accuracy in d² (the Triton kernels
recompute those pairs by direct differences). Float16 / bfloat16 input is computed in float32.

:func:`pairwise_quantity` is the one torch form of the pairwise quantities (dot products,
squared and L1 distances, from direct differences or the expansion): these twins and the Gaussian
process's kernel-tree blocks (:mod:`kernelkit.operators.covariance`) compute them with it.
"""

from __future__ import annotations

import contextlib

import torch

from kernelkit_gpu import checks
from kernelkit_gpu import epilogues as E
from kernelkit_gpu import prepare as P

__all__ = ["gram_naive", "kernel_matvec_naive", "pairwise_quantity", "squared_distances",
           "same_point_mask"]

#: Kernel values materialised per chunk of rows.
CHUNK_ELEMENTS = 1 << 27
#: The registry's names of the plans' pairwise quantities.
_PAIRWISE = {E.PW_DOT.value: "dot", E.PW_SQEUCLIDEAN.value: "sqeuclidean",
             E.PW_MANHATTAN.value: "manhattan"}


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


def same_point_mask(m, n, diagonal_offset, device):
    """Boolean (m, n) mask of the pairs (i, offset + i): the same point of K(X[lo:hi], X) with
    ``diagonal_offset = lo`` (none where the offset is None)."""
    mask = torch.zeros((m, n), dtype=torch.bool, device=device)
    if diagonal_offset is not None:
        rows = torch.arange(m, device=device)
        keep = rows + diagonal_offset < n
        mask[rows[keep], rows[keep] + diagonal_offset] = True
    return mask


def _feature_sum(a, b, absolute):
    """sum_k (a_k - b_k)^2, or sum_k |a_k - b_k| with ``absolute``: one feature at a time, out
    of place, so differentiable by either mode of automatic differentiation (torch.cdist has no
    forward mode)."""
    s = torch.zeros((a.shape[0], b.shape[0]), dtype=a.dtype, device=a.device)
    for k in range(a.shape[1]):
        t = a[:, k, None] - b[None, :, k]
        s = s + (t.abs() if absolute else t * t)
    return s


def _direct_squared_distances(a, b):
    """||a_i - b_j||^2 from direct differences (no autograd; 0 for equal rows, symmetric for
    a = b). On the CPU torch.cdist without the matrix-product form, squared (one pass, a few
    eps from the summed squares: 3-5x faster than the loop, 4000 x 1024 x 8); on CUDA, where
    that kernel is slow (float64, 2e4 x 1024 x 8: 30 ms), two in-place passes per feature
    (2.1 ms)."""
    if a.device.type == "cpu":
        return torch.cdist(a, b, compute_mode="donot_use_mm_for_euclid_dist").square_()
    s = torch.zeros((a.shape[0], b.shape[0]), dtype=a.dtype, device=a.device)
    t = torch.empty_like(s)
    for k in range(a.shape[1]):
        torch.sub(a[:, k, None], b[None, :, k], out=t)
        s.addcmul_(t, t)
    return s


class _SquaredDistances64(torch.autograd.Function):
    r"""Float64 direct squared distances whose backward is two GEMMs and two row sums,

    .. math:: \partial/\partial a_i = 2 (a_i \textstyle\sum_j g_{ij} - \sum_j g_{ij} b_j)

    (and likewise for b), instead of autograd through one n x m difference per feature (d
    saved temporaries and d backward passes). The expansion loses about eps64 (|a| + |b|) /
    |a - b| relative per term, harmless in float64; float32 keeps the per-feature autograd."""

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return _direct_squared_distances(a, b)

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        grad_a = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_a = 2.0 * (a * g.sum(1, keepdim=True) - g @ b)
        if ctx.needs_input_grad[1]:
            grad_b = 2.0 * (b * g.sum(0)[:, None] - g.T @ a)
        return grad_a, grad_b


def squared_distances(a, b, diagonal_offset=None, direct=True, forward_ad=False):
    """||a_i - b_j||^2 of prepared operands (shape (len(a), len(b)), in their dtype).

    ``direct`` (and up to :data:`kernelkit_gpu.prepare.DIRECT_MAX_D` features): from direct
    differences, exact for the operands whatever their offset and spread (without autograd
    :func:`_direct_squared_distances`; float64 under reverse-mode autograd
    :class:`_SquaredDistances64`; otherwise, and always with ``forward_ad``, at any width, the
    per-feature sums). Else the expansion |a|^2 + |b|^2 - 2 a.b as one GEMM of the augmented rows
    [a, |a|^2, 1] . [-2 b, 1, |b|^2] (no n x m broadcast sums forward or reductions backward),
    clamped at 0, absolute rounding about eps |a|^2; the pairs (i, ``diagonal_offset`` + i), the
    same point, are set to 0.
    """
    if forward_ad:
        return _feature_sum(a, b, False)
    if direct and a.shape[1] <= P.DIRECT_MAX_D:
        if not (a.requires_grad or b.requires_grad):
            return _direct_squared_distances(a, b)
        if a.dtype == torch.float64:
            return _SquaredDistances64.apply(a, b)
        return _feature_sum(a, b, False)
    a2, b2 = (a * a).sum(1, keepdim=True), (b * b).sum(1, keepdim=True)
    s = (torch.cat([a, a2, torch.ones_like(a2)], 1)
         @ torch.cat([-2.0 * b, torch.ones_like(b2), b2], 1).T).clamp_min(0.0)
    if diagonal_offset is not None:
        s = s.masked_fill(same_point_mask(a.shape[0], b.shape[0], diagonal_offset, a.device),
                          0.0)
    return s


def pairwise_quantity(a, b, pairwise, *, direct=True, diagonal_offset=None, forward_ad=False):
    """The quantity a kernel is a function of, for prepared operands a, b: ``"dot"`` (a.b; the
    cosine kernel's on normalised rows), ``"sqeuclidean"`` (:func:`squared_distances`, the
    other arguments as there) or ``"manhattan"`` (|a - b|_1: per-feature sums when ``direct``,
    else torch.cdist).

    The one torch form of every pairwise quantity: the twins here and the Gaussian process's
    kernel-tree blocks (:mod:`kernelkit.operators.covariance`) both call it.
    """
    if pairwise == "dot":
        return a @ b.T
    if pairwise == "sqeuclidean":
        return squared_distances(a, b, diagonal_offset, direct, forward_ad)
    if direct or forward_ad:
        return _feature_sum(a, b, True)
    return torch.cdist(a, b, p=1.0)


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
        if plan.pairwise == E.PW_DOT.value and self.diag_dot is None:
            self.diag_dot = (x * x).sum(dim=1)
        self.x, self.y, self.plan = x, y, plan

    def pairwise(self, lo, hi):
        return pairwise_quantity(self.x[lo:hi], self.y, _PAIRWISE[self.plan.pairwise],
                                 direct=self.direct, forward_ad=self.direct)

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
