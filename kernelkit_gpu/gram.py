"""Fused Triton Gram matrices K(X, Y) for every registry kernel.

Layers (see ARCHITECTURE.md): ``_gram_kernel`` (the one tiled ``@triton.jit`` body), ``gram_fwd``
(the launcher: grid, autotuned configs) and ``gram`` (the public function: validation, data
preparation through :mod:`kernelkit_gpu._prepare`). The pairwise tiles and the per-kernel epilogues
are shared with :mod:`kernelkit_gpu.matvec` through :mod:`kernelkit_gpu._epilogues`.
"""

from __future__ import annotations

import triton
import triton.language as tl
import torch

from kernelkit_gpu import _epilogues as E
from kernelkit_gpu import _prepare as P
from kernelkit_gpu._epilogues import _epilogue, _load_params, _pairwise_tile

__all__ = ["gram", "gram_fwd"]

GROUP_M = tl.constexpr(8)


def _gram_configs():
    if P.INTERPRET:
        return [triton.Config({"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16}, num_warps=4, num_stages=1)]
    # Square tiles only: the triangular launch maps program ids onto the upper block triangle.
    # Register use checked with ptxas for sm_90: 128 x 128 needs 8 warps under tf32x3 (with 4 it
    # spills hundreds of bytes); 64 x 64 with 4 warps fits without spilling; BLOCK_K = 64 for
    # large D. Three configs keep the first-call autotuning short.
    return [
        triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32}, num_warps=8, num_stages=3),
        triton.Config({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32}, num_warps=4, num_stages=3),
        triton.Config({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64}, num_warps=4, num_stages=4),
    ]


#: The config used when autotuning is off (KERNELKIT_GPU_AUTOTUNE=0): 64 x 64, no spills anywhere.
_DEFAULT_CONFIG = 1


def _prune_configs(configs, named_args, **kwargs):
    """Direct-difference tiles ignore BLOCK_K: keep one BLOCK_K per tile shape there."""
    args = dict(named_args)
    args.update(kwargs)
    direct = args.get("MODE") == E.MODE_DIRECT.value
    return P.pick_configs(configs, _DEFAULT_CONFIG,
                          (lambda c: c.kwargs.get("BLOCK_K") == 32) if direct else None)


@triton.autotune(
    configs=_gram_configs(),
    key=["D_BUCKET", "KIND", "PAIRWISE", "MODE", "TRIANGLE", "DOT_PREC"],
    prune_configs_by={"early_config_prune": _prune_configs},
)
@triton.jit(do_not_specialize=["N", "D", "DEG"])
def _gram_kernel(
    x_ptr, y_ptr, nx_ptr, ny_ptr, prm_ptr, out_ptr,
    N, M, D, DEG,
    stride_xm, stride_xk, stride_ym, stride_yk, stride_om, stride_on,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    KIND: tl.constexpr, PAIRWISE: tl.constexpr, MODE: tl.constexpr, TRIANGLE: tl.constexpr,
    DIAG: tl.constexpr, STATIONARY: tl.constexpr, DOT_PREC: tl.constexpr, DK: tl.constexpr,
    D_BUCKET: tl.constexpr, TAU_: tl.constexpr,
):
    """One (BLOCK_M, BLOCK_N) tile of K: pairwise quantity over D, epilogue ``KIND``, masked store.

    DIAG (K(X, X)): the diagonal is written exactly: k(0) for stationary kernels, the epilogue of
    the row norms ``nx`` for dot-product kernels.
    TRIANGLE (K(X, X) with MODE_MMA): programs cover the upper block triangle only; each tile is
    stored at (i, j) and transposed at (j, i), keeping elements with row <= column, so K is exactly
    symmetric at half the arithmetic. MODE_DIRECT covers every tile instead (Triton would
    rematerialise the whole direct-difference tile in the transposed store's layout, so mirroring
    saves nothing there); its per-pair arithmetic is bitwise symmetric in (x, y) — (a - b)² ==
    (b - a)², |a - b| == |b - a|, a b == b a, accumulated in the same feature order — so K is
    exactly symmetric there too.
    """
    ACC: tl.constexpr = out_ptr.dtype.element_ty
    pid = tl.program_id(0)
    if TRIANGLE:
        # pid -> (a, b) with 0 <= b <= a: pid = a (a + 1) / 2 + b; tile (row block b, column block a).
        p = pid.to(tl.int64)
        a = ((tl.sqrt((8 * p + 1).to(tl.float32)) - 1.0) * 0.5).to(tl.int64)
        a = tl.where(a * (a + 1) // 2 > p, a - 1, a)
        a = tl.where((a + 1) * (a + 2) // 2 <= p, a + 1, a)
        pid_m = (p - a * (a + 1) // 2).to(tl.int32)
        pid_n = a.to(tl.int32)
    else:
        # Grouped ordering: GROUP_M row blocks share each column block while it is in L2.
        num_pid_m = tl.cdiv(N, BLOCK_M)
        num_pid_n = tl.cdiv(M, BLOCK_N)
        group = GROUP_M * num_pid_n
        first_m = (pid // group) * GROUP_M
        size_m = tl.minimum(num_pid_m - first_m, GROUP_M)
        pid_m = first_m + (pid % group) % size_m
        pid_n = (pid % group) // size_m

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    # N is not specialised (no recompilation when only N changes); M is, on divisibility by 16,
    # so that column masks are constant over vectors and stores vectorise. Under TRIANGLE N == M,
    # and masking rows by M lets the transposed store vectorise too.
    mask_m = offs_m < (M if TRIANGLE else N)
    mask_n = offs_n < M

    USE_NORMS: tl.constexpr = (PAIRWISE == E.PW_SQEUCLIDEAN and MODE == E.MODE_MMA) or \
        (DIAG and PAIRWISE == E.PW_DOT)
    if USE_NORMS:
        nx = tl.load(nx_ptr + offs_m, mask=mask_m, other=0.0)
        ny = tl.load(ny_ptr + offs_n, mask=mask_n, other=0.0)
    else:
        nx = tl.zeros((BLOCK_M,), ACC)
        ny = tl.zeros((BLOCK_N,), ACC)

    s = _pairwise_tile(x_ptr, y_ptr, nx, ny, offs_m, offs_n, mask_m, mask_n, D,
                       stride_xm, stride_xk, stride_ym, stride_yk,
                       BLOCK_M, BLOCK_N, BLOCK_K, PAIRWISE, MODE, DK, DOT_PREC, DIAG, TAU_, False, ACC)

    if DIAG:
        on_diag = offs_m[:, None] == offs_n[None, :]
        if PAIRWISE == E.PW_DOT:
            s = tl.where(on_diag, nx[:, None] + tl.zeros_like(s), s)
        else:
            s = tl.where(on_diag, 0.0, s)

    p0, p1, p2 = _load_params(prm_ptr)
    k = _epilogue(s, p0, p1, p2, DEG, KIND)
    if DIAG and STATIONARY:
        k = tl.where(on_diag, 1.0, k)  # k(0) = 1 for every stationary registry kernel
    k = k.to(out_ptr.dtype.element_ty)

    rows = offs_m.to(tl.int64)
    cols = offs_n.to(tl.int64)
    mask = mask_m[:, None] & mask_n[None, :]
    if TRIANGLE:
        # Stores sit inside the branch so that off-diagonal tiles keep a mask that is constant
        # along rows and columns (vectorised stores); diagonal tiles keep row <= column only.
        if pid_m == pid_n:
            tri = mask & (offs_m[:, None] <= offs_n[None, :])
            tl.store(out_ptr + rows[:, None] * stride_om + cols[None, :] * stride_on, k, mask=tri)
            tl.store(out_ptr + cols[None, :] * stride_om + rows[:, None] * stride_on, k, mask=tri)
        else:
            tl.store(out_ptr + rows[:, None] * stride_om + cols[None, :] * stride_on, k, mask=mask)
            tl.store(out_ptr + cols[None, :] * stride_om + rows[:, None] * stride_on, k, mask=mask)
    else:
        tl.store(out_ptr + rows[:, None] * stride_om + cols[None, :] * stride_on, k, mask=mask)


def gram_fwd(ops, plan, out, symmetric, config=None):
    """Launch ``_gram_kernel`` on prepared operands (:func:`kernelkit_gpu._prepare.prepare`).

    ``config``: a ``triton.Config`` to launch with, bypassing the autotuner (tests run every config).
    """
    n, m = ops.n, ops.m
    triangle = symmetric and ops.mode == E.MODE_MMA.value

    def grid(meta):
        if triangle:
            nb = triton.cdiv(n, meta["BLOCK_M"])
            return (nb * (nb + 1) // 2,)
        return (triton.cdiv(n, meta["BLOCK_M"]) * triton.cdiv(m, meta["BLOCK_N"]),)

    launcher = _gram_kernel if config is None else _gram_kernel.fn
    extra = {} if config is None else config.all_kwargs()
    launcher[grid](
        ops.x, ops.y, ops.nx, ops.ny, ops.prm, out,
        n, m, ops.d, plan.deg,
        ops.stride_x[0], ops.stride_x[1], ops.stride_y[0], ops.stride_y[1],
        out.stride(0), out.stride(1),
        KIND=plan.kind, PAIRWISE=plan.pairwise, MODE=ops.mode, TRIANGLE=triangle, DIAG=symmetric,
        STATIONARY=plan.stationary, DOT_PREC=ops.dot_prec, DK=ops.dk, D_BUCKET=ops.d_bucket,
        TAU_=E.TAU, **extra,
    )
    return out


def gram(x, y=None, kernel="rbf", *, precision="accurate", out=None, **params):
    r"""Gram matrix K(X, Y) of a registry kernel, fused in one Triton kernel.

    Equivalent to ``kernelkit_math.registry.get_kernel(kernel).value(X, Y, **params)`` (the float64
    references in :mod:`kernelkit_math.kernels`, e.g. ``kernelkit_math.kernels.rbf(X, Y, gamma)``)
    up to dtype tolerance.

    Parameters
    ----------
    x : torch.Tensor, shape (N, D)
        float32, float64, float16 or bfloat16; on a CUDA device, or on the CPU when the Triton
        interpreter is on (``TRITON_INTERPRET=1`` set before import).
    y : torch.Tensor, shape (M, D), optional
        Same dtype and device as ``x``. ``None`` (or ``y is x``) computes K(X, X): exactly
        symmetric with an exact diagonal; for D > 16 only the upper block triangle is computed.
    kernel : str
        A registry name: linear, polynomial, rbf, laplacian, matern, rational_quadratic, cosine,
        sigmoid, exponential.
    precision : {"accurate", "fast"}
        "accurate" (default): float32 dot products on tensor cores in split precision (tf32x3,
        near-IEEE float32), relative Frobenius error <= 1e-6 against the float64 reference, also
        for data offset far from the origin and for near-duplicate points (checked under the
        Triton interpreter, whose products are IEEE float32; on the GPU by ``pytest --device cuda``).
        "fast": plain TF32 dot products on centred data (a third of the tensor-core work; each
        input rounded to 10 explicit mantissa bits, so errors of order 1e-4 in K are expected).
        Its measured error on the GPU is the ``fast_rel_fro`` column that ``benchmarks/gram.py``
        writes next to its timings (results in ``benchmarks/results/``).
        Both modes compute D <= 16 and the L1 distance (laplacian) with exact float32 differences.
        float64 input always uses IEEE float64 arithmetic; float16 / bfloat16 input uses the native
        16-bit tensor-core product with float32 accumulation (exact products); per-feature scales
        and cosine upcast 16-bit input to float32 first.
    out : torch.Tensor, shape (N, M), optional
        Written in place and returned: float32 (float64 for float64 input), same device; any strides.
    **params
        Kernel parameters with scikit-learn names, validated by the registry: ``gamma`` (rbf,
        laplacian: scalar or one per feature; polynomial, sigmoid; None means 1 / D), ``degree``,
        ``coef0``, ``scale`` (exponential; None means 1 / sqrt(D)), ``length_scale`` (matern,
        rational_quadratic; scalar or per feature), ``nu`` in {0.5, 1.5, 2.5}, ``alpha``.
        For rbf, gamma = 1 / (2 length_scale²).

    Returns
    -------
    torch.Tensor, shape (N, M)
        float32, or float64 for float64 input.

    Raises
    ------
    TypeError
        ``x``, ``y`` or ``out`` not a tensor or of the wrong dtype; unknown parameter names or
        parameters of the wrong type.
    ValueError
        Wrong shapes, mismatched devices, a CPU tensor without the interpreter, unknown kernel,
        parameters out of range, bad ``precision``.

    Notes
    -----
    Squared distances are :math:`\|\tilde x\|^2 + \|\tilde y\|^2 - 2 \tilde x \cdot \tilde y` on
    centred data (:math:`\tilde x = x - \bar x`), clamped at 0, with a per-tile fallback to direct
    differences where the expansion would cancel (near-duplicates, tight clusters: a tile with one
    pair closer than 1/32 of its norms is recomputed; correct always, slower on such data).
    16-bit input is not centred (centred values would have to be rounded to 16 bits again); the
    same fallback covers data far from the origin. For D <= 16 and the L1 distance the differences
    are formed directly, one feature at a time. Dot-product kernels (linear, polynomial, sigmoid,
    exponential) are not centred. Cosine normalises rows first (zero rows stay zero, like
    scikit-learn).

    Examples
    --------
    >>> import os; os.environ.setdefault("TRITON_INTERPRET", "1")  # CPU: the Triton interpreter
    '1'
    >>> import torch, kernelkit_gpu
    >>> x = torch.randn(5, 3)
    >>> K = kernelkit_gpu.gram(x, kernel="rbf", gamma=0.5)
    >>> K.shape, bool(torch.equal(K, K.T)), bool((K.diagonal() == 1).all())
    (torch.Size([5, 5]), True, True)
    """
    P.check_pair(x, y)
    P.check_precision(precision)
    symmetric = y is None or y is x
    plan = P.kernel_plan(kernel, x.shape[1], params)
    P.check_triton_device(x)
    n, m = x.shape[0], (x.shape[0] if symmetric else y.shape[0])
    acc = P.acc_dtype(x.dtype)
    if out is None:
        out = torch.empty((n, m), dtype=acc, device=x.device)
    else:
        P.check_out(out, (n, m), acc, x.device)
    if n == 0 or m == 0:
        return out
    ops = P.prepare(x, None if symmetric else y, plan, precision, symmetric, want_diag=symmetric)
    return gram_fwd(ops, plan, out, symmetric)
