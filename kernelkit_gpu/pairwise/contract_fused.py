r"""Hyperparameter-derivative contractions of a kernel matrix, tile by tile (the GP gradient).

For probe / solve pairs U, W of shape (n, t) the BBMM gradient of a Gaussian process
(Gardner et al. 2018) needs, for every log-hyperparameter theta_j,

.. math::

    c_j = \sum_i u_i^T \frac{\partial K}{\partial \log\theta_j} w_i
        = \sum_{a,b} \frac{\partial K_{ab}}{\partial \log\theta_j} G_{ab},\qquad G = U W^T,

and often K V in the same pass. ``_contract_kernel`` computes them from X without forming K, dK
or G: each program owns BLOCK_M rows and sweeps all columns in BLOCK_N tiles.

Per tile (stationary kernels, D <= 16): the scaled distance s_ab from direct differences of the
centred, per-feature scaled operands x~ (float64 centring and scaling rounded once: no
cancellation at offset 1e5), K = the kernel's epilogue (:func:`kernelkit_gpu.epilogues._epilogue`),
G = U_a W_b^T on tensor cores (tf32x3 for float32, IEEE for float64), then
P = phi(s) o G with phi the derivative factor below, and per feature k the row sums of
P o (x~_ak - x~_bk)^2 (|.| for the L1 distance), again by direct differences. K o G gives the
contraction for a multiplicative amplitude (ConstantKernel) and, for a kernel with a second
fused hyperparameter (rational quadratic's alpha), psi o G the one for it. Each tile's row sums
(BLOCK_N terms, in the operands' dtype) are added into float64 per-row accumulators, and the
per-row sums in float64 across rows: at n = 1e6 float32 accumulators across the 31 250 column
tiles put errors of up to 550 on gradient entries of ~100 (the GP of benchmarks/gp.py at its
fitted theta; docs/benchmarks.md, "Figures behind choices in the code").

The kernels covered, and their factors phi and psi, come from the epilogue table: a kernel whose
row of :data:`kernelkit_gpu.epilogues.EPILOGUES` names its ``fused_derivatives`` has a branch in
:func:`kernelkit_gpu.epilogues._log_derivative` (and :func:`~kernelkit_gpu.epilogues.
_extra_log_derivative`), whose docstring tabulates them.

A scalar (isotropic) parameter's derivative is the sum of its per-feature columns.
"""

from __future__ import annotations


import numpy as np
import torch

from kernelkit_gpu import _launch
from kernelkit_gpu import epilogues as E
from kernelkit_gpu import prepare as P
from kernelkit_gpu._launch import tl, triton
from kernelkit_gpu.pairwise.contract_naive import (Contractions, check_contraction_args,
                                                  kernel_contractions_naive)
from kernelkit_math.registry import fill_doc, get_kernel, kernel_list_doc

__all__ = ["Contractions", "kernel_contractions", "contract_fwd", "FUSED_KERNELS"]

#: Registry kernels with a Triton contraction (others: the torch twin): those whose row of
#: :data:`kernelkit_gpu.epilogues.EPILOGUES` has ``fused_derivatives``.
FUSED_KERNELS = tuple(name for name, row in E.EPILOGUES.items() if row.fused_derivatives)
#: Columns of U / W (and of V) per launch; wider inputs take several launches.
MAX_BLOCK_T = 64
#: tl.dot precision of G = U W^T and K @ V for float32 input: "tf32x3" (tensor cores, about
#: float32 accuracy) or "ieee" (FMA-path dots): tf32x3 was 5-9x faster at the same gradient
#: error (docs/benchmarks.md, "Figures behind choices in the code");
#: benchmarks/gp_contractions.py times both.
DOT_PREC_F32 = "tf32x3"


def _configs(acc, block_t):
    """Launch configuration for accumulation dtype ``acc`` and ``block_t`` columns of U and W:
    float32 32 x 64 tiles, 64 x 32 where t <= 16, float64 64 x 64 (the float32 shapes the
    fastest of those swept: docs/benchmarks.md, "Figures behind choices in the code")."""
    if _launch.INTERPRET:
        return {"BLOCK_M": 32, "BLOCK_N": 32, "num_warps": 4, "num_stages": 1}
    if acc == torch.float32 and block_t <= 16:
        return {"BLOCK_M": 64, "BLOCK_N": 32, "num_warps": 4, "num_stages": 2}
    if acc == torch.float32:
        return {"BLOCK_M": 32, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2}
    return {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2}


@triton.jit(do_not_specialize=["ROW0", "ROW_END", "N", "T", "R"])
def _contract_kernel(
    x_ptr, u_ptr, w_ptr, v_ptr, prm_ptr, part_ptr, kv_ptr,
    ROW0, ROW_END, N, T, R,
    stride_xk, stride_um, stride_ut, stride_wm, stride_wt, stride_vm, stride_vr,
    stride_pm, stride_kvm, stride_kvr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_R: tl.constexpr,
    BLOCK_D: tl.constexpr, DK: tl.constexpr, KIND: tl.constexpr, L1: tl.constexpr,
    EXTRA: tl.constexpr, HAS_V: tl.constexpr, DOT_PREC: tl.constexpr,
):
    """For the rows ROW0 <= i < ROW_END of K(X, X) (a process's share; 0 and N for all):
    part[i - ROW0, :DK] = per-feature row sums of phi o G o Delta^2; part[i - ROW0, DK] = row
    sums of K o G; part[i - ROW0, DK + 1] (EXTRA) = row sums of psi o G; kv[i - ROW0] = K @ v
    (HAS_V).

    x is feature-major, (DK, N) with unit stride along rows. Every column tile is masked (loads
    give 0 beyond N: G and v vanish there); loop bounds depend on N only.
    """
    ACC: tl.constexpr = x_ptr.dtype.element_ty  # tile arithmetic; part (float64) accumulates
    pid = tl.program_id(0)
    offs_m = ROW0 + pid * BLOCK_M + tl.arange(0, BLOCK_M)
    mask_m = offs_m < ROW_END
    rows = offs_m.to(tl.int64)
    out_rows = rows - ROW0
    offs_t = tl.arange(0, BLOCK_T)
    mask_t = offs_t < T
    offs_d = tl.arange(0, BLOCK_D)
    p0 = tl.load(prm_ptr)
    p1 = tl.load(prm_ptr + 1)
    p2 = tl.load(prm_ptr + 2)
    ua = tl.load(u_ptr + rows[:, None] * stride_um + offs_t[None, :] * stride_ut,
                 mask=mask_m[:, None] & mask_t[None, :], other=0.0).to(ACC)
    acc_d = tl.zeros((BLOCK_M, BLOCK_D), tl.float64)
    acc_kg = tl.zeros((BLOCK_M,), tl.float64)
    acc_a = tl.zeros((BLOCK_M,), tl.float64)
    if HAS_V:
        offs_r = tl.arange(0, BLOCK_R)
        mask_r = offs_r < R
        acc_kv = tl.zeros((BLOCK_M, BLOCK_R), ACC)

    for n0 in range(0, N, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        mask_n = offs_n < N
        cols = offs_n.to(tl.int64)
        # the distance tile in the FMA-dot layout (:func:`kernelkit_gpu.epilogues._layout_anchor`):
        # measured 1.36x (n = 2e4) and 1.77x (n = 2e5) faster than one from tl.zeros
        s = E._layout_anchor(BLOCK_M, BLOCK_N, ACC)
        for k in tl.static_range(DK):
            a = tl.load(x_ptr + k * stride_xk + rows, mask=mask_m, other=0.0)
            b = tl.load(x_ptr + k * stride_xk + cols, mask=mask_n, other=0.0)
            diff = a[:, None] - b[None, :]
            if L1:
                s += tl.abs(diff)
            else:
                s += diff * diff
        kval = E._epilogue(s, p0, p1, p2, 0, KIND)
        wb = tl.load(w_ptr + cols[:, None] * stride_wm + offs_t[None, :] * stride_wt,
                     mask=mask_n[:, None] & mask_t[None, :], other=0.0).to(ACC)
        g = tl.dot(ua, tl.trans(wb), input_precision=DOT_PREC, out_dtype=ACC)
        acc_kg += tl.sum(kval * g, axis=1).to(tl.float64)
        pg = E._log_derivative(kval, s, p0, p1, p2, KIND) * g
        if EXTRA:
            acc_a += tl.sum(E._extra_log_derivative(kval, s, p0, p1, p2, KIND) * g,
                            axis=1).to(tl.float64)
        tile_d = tl.zeros((BLOCK_M, BLOCK_D), ACC)
        for k in tl.static_range(DK):
            a = tl.load(x_ptr + k * stride_xk + rows, mask=mask_m, other=0.0)
            b = tl.load(x_ptr + k * stride_xk + cols, mask=mask_n, other=0.0)
            diff = a[:, None] - b[None, :]
            if L1:
                q = tl.abs(diff)
            else:
                q = diff * diff
            rk = tl.sum(pg * q, axis=1)
            tile_d += tl.where(offs_d[None, :] == k, rk[:, None], 0.0)
        acc_d += tile_d.to(tl.float64)
        if HAS_V:
            vb = tl.load(v_ptr + cols[:, None] * stride_vm + offs_r[None, :] * stride_vr,
                         mask=mask_n[:, None] & mask_r[None, :], other=0.0).to(ACC)
            kmask = tl.where(mask_n[None, :], kval, 0.0)
            acc_kv = tl.dot(kmask, vb, acc_kv, input_precision=DOT_PREC, out_dtype=ACC)

    tl.store(part_ptr + out_rows[:, None] * stride_pm + offs_d[None, :], acc_d,
             mask=mask_m[:, None] & (offs_d[None, :] < DK))
    tl.store(part_ptr + out_rows * stride_pm + DK, acc_kg, mask=mask_m)
    if EXTRA:
        tl.store(part_ptr + out_rows * stride_pm + DK + 1, acc_a, mask=mask_m)
    if HAS_V:
        tl.store(kv_ptr + out_rows[:, None] * stride_kvm + offs_r[None, :] * stride_kvr, acc_kv,
                 mask=mask_m[:, None] & mask_r[None, :])


def contract_fwd(xt, u, w, v, prm, part, kv, kind, l1, extra, rows=None):
    """Launch one pass: ``xt`` (D, n) prepared feature-major operand, ``u``/``w`` (n, t <= 64),
    ``v`` (n, r <= 64) or None, ``prm`` the epilogue numbers, ``part`` (m, D + 2) float64 and
    ``kv`` (m, r) in the operands' dtype: outputs for the m rows ``rows = (first, last)`` of K
    (default all n)."""
    d, n = xt.shape
    first, last = (0, n) if rows is None else rows
    t = u.shape[1]
    r = 0 if v is None else v.shape[1]
    acc = xt.dtype
    block_t = _launch.block_size(t)
    cfg = dict(_configs(acc, block_t))
    dot_prec = "ieee" if acc == torch.float64 else DOT_PREC_F32
    if v is None:
        v = kv = part  # never read (HAS_V False)
    grid = (triton.cdiv(last - first, cfg["BLOCK_M"]),)
    _contract_kernel[grid](
        xt, u, w, v, prm, part, kv,
        first, last, n, t, r,
        xt.stride(0), u.stride(0), u.stride(1), w.stride(0), w.stride(1), v.stride(0),
        v.stride(1), part.stride(0), kv.stride(0), kv.stride(1),
        BLOCK_T=block_t, BLOCK_R=_launch.block_size(max(r, 1)),
        BLOCK_D=_launch.block_size(d, lo=1), DK=d, KIND=kind, L1=l1, EXTRA=extra,
        HAS_V=r > 0, DOT_PREC=dot_prec, **cfg,
    )


def _check_rows(rows, n):
    """``(first, last)`` of ``rows`` (None: all n), checked: 0 <= first <= last <= n."""
    if rows is None:
        return 0, n
    try:
        first, last = (int(r) for r in rows)
    except (TypeError, ValueError):
        raise TypeError(
            f"rows must be None or a pair of ints (first, last); got {rows!r}") from None
    if not 0 <= first <= last <= n:
        raise ValueError(f"rows must satisfy 0 <= first <= last <= n = {n}; got {rows!r}")
    return first, last


def _fused_ok(plan, x):
    return (plan.name in FUSED_KERNELS and _launch.HAS_TRITON and x.shape[1] <= P.DIRECT_MAX_D
            and (x.device.type == "cuda" or (x.device.type == "cpu" and _launch.INTERPRET)))


@fill_doc(fused=kernel_list_doc(FUSED_KERNELS))
def kernel_contractions(x, u, w, kernel="rbf", *, v=None, rows=None, **params):
    r"""Derivative contractions sum_i u_i^T (dK / dlog theta_j) w_i, and K @ v, in one pass.

    K = K(X, X) of a registry kernel; nothing of size n x n is stored. Equivalent, up to dtype
    tolerance, to contracting the float64 reference ``get_kernel(kernel).gradient(X, **params)``
    (K, dK) with G = U W^T: ``grad = einsum("abj,ab->j", dK, G)``, ``kg = (K * G).sum()``,
    ``kv = K @ v``.

    Parameters
    ----------
    x : torch.Tensor, shape (n, d)
        float32, float64, float16 or bfloat16 (computed in float32), finite.
    u, w : torch.Tensor, shape (n,) or (n, t)
        Probe and solve vectors (the same shape), any floating dtype, finite.
    kernel : str
        A registry kernel name. {fused} (:data:`FUSED_KERNELS`) with d <= 16 run the Triton
        kernel (CUDA, or the CPU under ``TRITON_INTERPRET=1``); every other case runs
        the plain-PyTorch twin
        :func:`kernelkit_gpu.pairwise.contract_naive.kernel_contractions_naive` (row blocks and
        autograd: O(n^2 d) work per hyperparameter, block-sized memory).
    v : torch.Tensor, shape (n,) or (n, r), optional
        If given, ``kv = K @ v`` is computed in the same pass.
    rows : tuple of int, optional
        ``(first, last)``: only the rows first <= i < last of K take part (a process's share of
        a row-sharded sum: the sums over i are restricted to those rows, the sums over j stay
        over all n; ``kv`` has last - first rows). Default all n rows.
    **params
        Kernel parameters with the registry's names (``gamma`` for rbf / laplacian with
        gamma = 1 / (2 length_scale^2) resp. 1 / length_scale; ``length_scale`` for matern and
        rational_quadratic); a per-feature array gives one derivative per feature (ARD).

    Returns
    -------
    Contractions
        ``(grad, kg, kv)``: ``grad`` (n_hyperparameters,) float64 in the registry's order;
        ``kg`` = sum_ab K_ab G_ab (float64, the amplitude's derivative); ``kv`` or None.

    Raises
    ------
    TypeError, ValueError
        Naming the argument: non-tensor or non-floating input, shapes that do not match, devices
        that differ, NaN or infinity (not checked inside :func:`kernelkit_gpu.assume_finite`,
        where each check's wait for the GPU is skipped), an unknown kernel or a parameter out of
        range.

    Notes
    -----
    Each pair costs two passes of direct differences over the d features (distance, then the
    per-feature derivative), one exp, a t-long tensor-core dot for G and an r-long one for K V.
    Float32 sums run in float32 within a tile and in float64 across tiles and rows. Errors
    and times measured on a GPU: docs/benchmarks.md, "Figures behind choices in the code".
    To turn gamma derivatives into length-scale ones: dK / dlog l = -2 dK / dlog gamma (rbf).

    Examples
    --------
    >>> import os; os.environ.setdefault("TRITON_INTERPRET", "1")  # CPU: the Triton interpreter
    '1'
    >>> import torch
    >>> from kernelkit_gpu.pairwise.contract_fused import kernel_contractions
    >>> x, u, w = torch.randn(20, 3), torch.randn(20, 2), torch.randn(20, 2)
    >>> res = kernel_contractions(x, u, w, "rbf", v=w, gamma=[0.5, 1.0, 2.0])
    >>> res.grad.shape, res.kv.shape
    (torch.Size([3]), torch.Size([20, 2]))
    """
    x, u2, w2, v2, squeeze = check_contraction_args(x, u, w, v)
    n, d = x.shape
    first, last = _check_rows(rows, n)
    plan = P.kernel_plan(kernel, d, params)
    P.check_params_range(plan, x.dtype)
    if not _fused_ok(plan, x):
        if (first, last) == (0, n):
            return kernel_contractions_naive(x, u, w, kernel, v=v, **params)
        # the twin has no row range: zero u outside the rows (sum_i u_i^T ... restricted)
        keep = torch.zeros((n,) + (1,) * (u.dim() - 1), dtype=u.dtype, device=u.device)
        keep[first:last] = 1
        res = kernel_contractions_naive(x, u * keep, w, kernel, v=v, **params)
        return res._replace(kv=None if res.kv is None else res.kv[first:last])
    spec = get_kernel(kernel)
    acc = P.acc_dtype(x.dtype)
    resolved = spec.explicit(d, plan.params)
    row = E.EPILOGUES[plan.name]
    # always per-feature scales: broadcast a scalar parameter, then sum its columns
    key = row.fused_derivatives[0]
    per_feature = np.ndim(resolved[key]) > 0
    prm, scale = row.pack(dict(resolved, **{key: np.broadcast_to(
        np.asarray(resolved[key], dtype=np.float64), (d,)).copy()}))
    xt = P.centre_and_scale(x, P.column_mean(x), torch.as_tensor(scale, device=x.device), acc)
    xt = xt.T.contiguous()
    prm_t = torch.tensor([float(p) for p in prm], dtype=acc, device=x.device)
    extra = len(row.fused_derivatives) > 1  # a second, scalar hyperparameter (RQ's alpha)
    m = last - first
    part = _launch.alloc((m, d + 2), torch.float64, x.device)
    part_sum = torch.zeros(d + 2, dtype=torch.float64, device=x.device)
    r = 0 if v2 is None else v2.shape[1]
    kv = None if v2 is None else _launch.alloc((m, r), acc, x.device)
    if kv is not None and m == 0:
        kv.zero_()
    t = u2.shape[1]
    step = MAX_BLOCK_T
    for c0 in range(0, max(t, r, 1) if m else 0, step):  # no rows: empty sums, no launch
        uc, wc = u2[:, c0:c0 + step].to(acc), w2[:, c0:c0 + step].to(acc)
        vc = None if c0 >= r else v2[:, c0:c0 + step].to(acc)
        kvc = None if vc is None else kv[:, c0:c0 + step]
        contract_fwd(xt, uc, wc, vc, prm_t, part, kvc, plan.kind,
                     plan.pairwise == E.PW_MANHATTAN.value, extra, rows=(first, last))
        if not extra:
            part[:, d + 1] = 0
        part_sum += part.sum(dim=0, dtype=torch.float64)
    grad = part_sum[:d] if per_feature else part_sum[:d].sum().reshape(1)
    if extra:
        grad = torch.cat([grad, part_sum[d + 1:]])
    if kv is not None and squeeze:
        kv = kv[:, 0]
    return Contractions(grad=grad, kg=part_sum[d], kv=kv)
