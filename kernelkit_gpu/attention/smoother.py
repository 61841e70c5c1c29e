"""Exact kernel-smoother attention in Triton for every registry kernel.

    out_i = sum_j k(q_i, k_j) v_j / max(sum_j k(q_i, k_j), eps)

Layers (see ARCHITECTURE.md): ``_kattn_fwd_kernel`` (one program per BLOCK_M queries of one head,
streaming key tiles: the pairwise tile and the kernel formula are the shared ``@triton.jit``
helpers :func:`kernelkit_gpu.epilogues._pairwise_tile` and :func:`kernelkit_gpu.epilogues._epilogue`,
selected by the ``KIND`` / ``PAIRWISE`` / ``MODE`` constexprs exactly as in the Gram and matrix-free
kernels), ``kattn_fwd`` (launcher; data prepared by :func:`kernelkit_gpu.prepare.prepare`),
``KernelAttentionFunction`` and ``kernel_attention`` (public).

``kernel="exponential"`` is softmax attention without the max subtraction, which overflows for
large scores: it is routed to :func:`kernelkit_gpu.softmax_attention` (online
max) and the eps guard is applied from its log-sum-exp.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernelkit_gpu.attention import _configs as _attn_configs
from kernelkit_gpu import checks
from kernelkit_gpu import epilogues as E
from kernelkit_gpu import _launch
from kernelkit_gpu import prepare as P
from kernelkit_gpu.epilogues import _epilogue, _load_params, _pairwise_tile
from kernelkit_gpu.attention.naive import exponential_scale, guard_from_lse, smoother_rows
from kernelkit_gpu.attention.softmax import softmax_attention
from kernelkit_math.attention import causal_shift
from kernelkit_math.registry import fill_doc, kernel_list_doc

__all__ = ["kernel_attention", "kattn_fwd", "KernelAttentionFunction"]

#: Kernel values recomputed at once per query chunk in the backward (bounds its memory).
BWD_CHUNK_ELEMENTS = 1 << 26


def _kattn_configs():
    if _launch.INTERPRET:
        return [triton.Config({"BLOCK_M": 32, "BLOCK_N": 16, "BLOCK_K": 16}, num_warps=4, num_stages=1)]
    return [
        triton.Config({"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 32}, num_warps=8, num_stages=3),
        triton.Config({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32}, num_warps=4, num_stages=3),
        triton.Config({"BLOCK_M": 128, "BLOCK_N": 32, "BLOCK_K": 32}, num_warps=4, num_stages=3),
        triton.Config({"BLOCK_M": 64, "BLOCK_N": 32, "BLOCK_K": 32}, num_warps=4, num_stages=3),
    ]


#: float32 input (IEEE products on the FMA units): small tiles, or the operand fragments spill.
_FP32_CONFIG = triton.Config({"BLOCK_M": 32, "BLOCK_N": 16, "BLOCK_K": 16}, num_warps=4, num_stages=2)


def _prune_kattn(configs, named_args, **kwargs):
    """Wide value heads: keep the (BLOCK_M, BLOCK_DV) float32 accumulator within registers;
    float32 input: one small FMA-friendly config."""
    if _launch.INTERPRET:
        return configs[:1]
    args = dict(named_args, **kwargs)
    if args.get("DOT_PREC") == "ieee" and args.get("MV_PREC") == "ieee":
        return [_FP32_CONFIG]
    bdv = args["BLOCK_DV"]
    kept = [c for c in configs if c.kwargs["BLOCK_M"] * bdv <= 4096 * c.num_warps]  # <= 128 regs
    kept = kept or [configs[-1]]
    return kept if _attn_configs.AUTOTUNE else kept[:1]


@triton.jit
def _kattn_step(acc, den, x_base, y_base, v_base, nx, ny_base, p0, p1, p2, DEG,
                offs_m, mask_m, offs_dv, mask_dv, n0, S, SHIFT, D,
                stride_xm, stride_xk, stride_ym, stride_yk, stride_vn, stride_vd,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                KIND: tl.constexpr, PAIRWISE: tl.constexpr, MODE: tl.constexpr, DK: tl.constexpr,
                DOT_PREC: tl.constexpr, MV_PREC: tl.constexpr, TAU_: tl.constexpr,
                BIAS: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr):
    """acc += K(q_block, key tile) @ v_tile and den += its row sums.

    BIAS: q and k are centred dot-product operands and nx / ny their per-row offsets
    (q·k = q̃·k̃ + b_q + b_k), added to the tile as the Gram and matrix-free kernels do.
    """
    offs_n = n0 + tl.arange(0, BLOCK_N)
    mask_n = offs_n < S
    if (PAIRWISE == E.PW_SQEUCLIDEAN and MODE == E.MODE_MMA) or BIAS:
        ny = tl.load(ny_base + offs_n, mask=mask_n, other=0.0)
    else:
        ny = tl.zeros((BLOCK_N,), tl.float32)
    s = _pairwise_tile(x_base, y_base, nx, ny, offs_m, offs_n, mask_m, mask_n, D,
                       stride_xm, stride_xk, stride_ym, stride_yk,
                       BLOCK_M, BLOCK_N, BLOCK_K, PAIRWISE, MODE, DK, DOT_PREC, False, TAU_, True,
                       tl.float32)
    if BIAS:
        s = s + (nx[:, None] + ny[None, :])
    w = _epilogue(s, p0, p1, p2, DEG, KIND)
    if MASKED:
        valid = mask_n[None, :]
        if CAUSAL:
            valid = valid & (offs_n[None, :] <= offs_m[:, None] + SHIFT)
        w = tl.where(valid, w, 0.0)
    den += tl.sum(w, axis=1)
    v = tl.load(v_base + offs_n.to(tl.int64)[:, None] * stride_vn + offs_dv[None, :] * stride_vd,
                mask=mask_n[:, None] & mask_dv[None, :], other=0.0)
    acc = tl.dot(w, v, acc, input_precision=MV_PREC)
    return acc, den


@triton.autotune(
    configs=_kattn_configs(),
    key=["D_BUCKET", "BLOCK_DV", "KIND", "PAIRWISE", "MODE", "CAUSAL", "DOT_PREC", "BIAS"],
    prune_configs_by={"early_config_prune": _prune_kattn},
)
@triton.jit(do_not_specialize=["H", "H_KV", "GROUP", "T", "S", "SHIFT"])
def _kattn_fwd_kernel(
    x_ptr, y_ptr, nx_ptr, ny_ptr, prm_ptr, v_ptr, o_ptr,
    H, H_KV, GROUP, T, S, SHIFT, D, DV, DEG, eps,
    stride_xm, stride_xk, stride_ym, stride_yk,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_ob, stride_oh, stride_ot, stride_od,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_DV: tl.constexpr,
    KIND: tl.constexpr, PAIRWISE: tl.constexpr, MODE: tl.constexpr, DK: tl.constexpr,
    DOT_PREC: tl.constexpr, MV_PREC: tl.constexpr, D_BUCKET: tl.constexpr, TAU_: tl.constexpr,
    BIAS: tl.constexpr, CAUSAL: tl.constexpr,
):
    """out[b, h, block] = (K @ V) / max(K @ 1, eps) for BLOCK_M queries; K never stored.

    x / y are the prepared query / key rows of all heads, flattened ((B H T, D) and (B H_kv S, D),
    row- or feature-major as ``MODE`` needs); nx / ny their squared norms (squared distances on
    tensor cores), or with BIAS the per-row offsets of centred dot products. With CAUSAL, query i sees keys j <= i + SHIFT. Key tiles fully visible to
    the block run unmasked; the causal diagonal and the ragged last tile are masked; tiles above
    the diagonal are skipped.
    """
    num_m = tl.cdiv(T, BLOCK_M)
    pid_m = tl.program_id(0)
    if CAUSAL:
        pid_m = num_m - 1 - pid_m
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    bhk = b * H_KV + h // GROUP
    m0 = pid_m * BLOCK_M
    offs_m = m0 + tl.arange(0, BLOCK_M)
    mask_m = offs_m < T
    offs_dv = tl.arange(0, BLOCK_DV)
    mask_dv = offs_dv < DV
    x_base = x_ptr + (bh.to(tl.int64) * T) * stride_xm
    y_base = y_ptr + (bhk.to(tl.int64) * S) * stride_ym
    v_base = v_ptr + b.to(tl.int64) * stride_vb + (h // GROUP).to(tl.int64) * stride_vh
    ny_base = ny_ptr + bhk.to(tl.int64) * S
    if (PAIRWISE == E.PW_SQEUCLIDEAN and MODE == E.MODE_MMA) or BIAS:
        nx = tl.load(nx_ptr + bh.to(tl.int64) * T + offs_m, mask=mask_m, other=0.0)
    else:
        nx = tl.zeros((BLOCK_M,), tl.float32)
    p0, p1, p2 = _load_params(prm_ptr)
    acc = tl.zeros((BLOCK_M, BLOCK_DV), tl.float32)
    den = tl.zeros((BLOCK_M,), tl.float32)
    if CAUSAL:  # key tiles as in the softmax forward kernel (clamped at 0 for SHIFT < 0)
        hi = tl.maximum(tl.minimum(S, m0 + BLOCK_M + SHIFT), 0)
        full_end = (tl.maximum(tl.minimum(S, m0 + 1 + SHIFT), 0) // BLOCK_N) * BLOCK_N
    else:
        hi = S
        full_end = (S // BLOCK_N) * BLOCK_N
    for n0 in range(0, full_end, BLOCK_N):
        acc, den = _kattn_step(acc, den, x_base, y_base, v_base, nx, ny_base, p0, p1, p2, DEG,
                               offs_m, mask_m, offs_dv, mask_dv, n0, S, SHIFT, D,
                               stride_xm, stride_xk, stride_ym, stride_yk, stride_vn, stride_vd,
                               BLOCK_M, BLOCK_N, BLOCK_K, KIND, PAIRWISE, MODE, DK, DOT_PREC,
                               MV_PREC, TAU_, BIAS, False, CAUSAL)
    for n0 in range(full_end, hi, BLOCK_N):
        acc, den = _kattn_step(acc, den, x_base, y_base, v_base, nx, ny_base, p0, p1, p2, DEG,
                               offs_m, mask_m, offs_dv, mask_dv, n0, S, SHIFT, D,
                               stride_xm, stride_xk, stride_ym, stride_yk, stride_vn, stride_vd,
                               BLOCK_M, BLOCK_N, BLOCK_K, KIND, PAIRWISE, MODE, DK, DOT_PREC,
                               MV_PREC, TAU_, BIAS, True, CAUSAL)
    g = tl.maximum(den, eps)
    pos = g > 0.0  # eps = 0 and den <= 0: the row outputs 0 (as the reference)
    out = tl.where(pos[:, None], acc / tl.where(pos, g, 1.0)[:, None], 0.0)
    o_ptrs = o_ptr + b.to(tl.int64) * stride_ob + h.to(tl.int64) * stride_oh \
        + offs_m.to(tl.int64)[:, None] * stride_ot + offs_dv[None, :] * stride_od
    tl.store(o_ptrs, out.to(o_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_dv[None, :])


def kattn_fwd(q, k, v, plan, *, shift, eps):
    """Launch the kernel smoother on validated q (B, H, T, D), k (B, H_kv, S, D), v (B, H_kv, S, Dv);
    ``shift``: None (no mask) or the causal diagonal j <= i + shift."""
    B, H, T, D = q.shape
    H_kv, S, DV = k.shape[1], k.shape[2], v.shape[3]
    out = _launch.alloc((B, H, T, DV), q.dtype, q.device)
    if B * H * T == 0:
        return out
    if S == 0:
        return out.zero_()
    # All heads flattened into one row set: centring by one common mean leaves every distance
    # unchanged (and dot products exact with the offsets), so the shared preparation (centre /
    # scale / normalise / offsets / transpose) applies as is.
    ops = P.prepare(q.reshape(B * H * T, D), k.reshape(B * H_kv * S, D), plan, "accurate",
                    symmetric=False)
    if q.dtype == torch.float32:
        ops.dot_prec = "ieee"  # see _attn_configs.dot_precision: tf32x3 breaks the 2x rule
    v32 = v.to(torch.float32)
    block_dv = _launch.block_size(DV)

    def grid(meta):
        return (triton.cdiv(T, meta["BLOCK_M"]), B * H)

    _kattn_fwd_kernel[grid](
        ops.x, ops.y, ops.nx, ops.ny, ops.prm, v32, out,
        H, H_kv, H // H_kv, T, S, 0 if shift is None else shift, ops.d, DV, plan.deg, eps,
        ops.stride_x[0], ops.stride_x[1], ops.stride_y[0], ops.stride_y[1],
        *v32.stride(), *out.stride(),
        BLOCK_DV=block_dv, KIND=plan.kind, PAIRWISE=plan.pairwise, MODE=ops.mode, DK=ops.dk,
        DOT_PREC=ops.dot_prec, MV_PREC="ieee" if q.dtype == torch.float32 else "tf32x3",
        D_BUCKET=ops.d_bucket, TAU_=E.TAU, BIAS=ops.bias, CAUSAL=shift is not None,
    )
    return out


class KernelAttentionFunction(torch.autograd.Function):
    """Forward: the Triton kernel. Backward: recomputation through the plain-PyTorch smoother
    (:func:`kernelkit_gpu.attention.naive.smoother_rows`) in float32, one chunk of queries at a
    time, differentiated by torch.autograd."""

    @staticmethod
    def forward(ctx, q, k, v, plan, shift, eps):
        ctx.save_for_backward(q, k, v)
        ctx.plan, ctx.shift, ctx.eps = plan, shift, eps
        return kattn_fwd(q, k, v, plan, shift=shift, eps=eps)

    @staticmethod
    def backward(ctx, dout):
        q, k, v = ctx.saved_tensors
        acc = P.acc_dtype(q.dtype)
        B, H, T, _ = q.shape
        H_kv, S = k.shape[1], k.shape[2]
        group = H // H_kv if H_kv else 1
        dq = torch.zeros(q.shape, dtype=acc, device=q.device)
        dk = torch.zeros(k.shape, dtype=acc, device=q.device)
        dv = torch.zeros(v.shape, dtype=acc, device=q.device)
        if B * H * T > 0 and S > 0:
            step = max(1, BWD_CHUNK_ELEMENTS // max(1, B * H * S))
            with torch.enable_grad():
                ka = k.detach().to(acc).requires_grad_(True)
                va = v.detach().to(acc).requires_grad_(True)
                for t0 in range(0, T, step):
                    qc = q[:, :, t0:t0 + step].detach().to(acc).requires_grad_(True)
                    out = smoother_rows(qc, ka, va, ctx.plan, shift=ctx.shift, eps=ctx.eps,
                                        group=group, t0=t0)
                    gq, gk, gv = torch.autograd.grad(out, (qc, ka, va), dout[:, :, t0:t0 + step].to(acc),
                                                     allow_unused=True)
                    dq[:, :, t0:t0 + step] = gq
                    if gk is not None:
                        dk += gk
                    dv += gv
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, None, None


@fill_doc(kernels=kernel_list_doc())
def kernel_attention(q, k, v, kernel="rbf", *, is_causal=False, causal_alignment="top_left", eps=1e-6,
                     enable_gqa=False, **params):
    r"""Attention as an exact kernel smoother, for any registry kernel, fused in Triton.

    .. math::

        \mathrm{out}_i = \frac{\sum_{j \in V(i)} \kappa(q_i, k_j)\, v_j}
                              {\max\big(\sum_{j \in V(i)} \kappa(q_i, k_j),\ \varepsilon\big)}

    with V(i) every key, or ``j <= i + shift`` with ``is_causal`` (shift 0 top-left aligned, as
    torch SDPA, or S - T bottom-right aligned: ``causal_alignment``); a row whose guarded
    denominator is 0 (``eps=0`` and no positive weight, or no visible key) outputs 0. Equivalent
    to ``kernelkit_math.attention.kernel_smoother(q, k, v, kernel, is_causal=is_causal,
    causal_alignment=causal_alignment, eps=eps, **params)`` up to dtype tolerance. The (T, S) kernel matrix is never stored.

    Parameters
    ----------
    q : torch.Tensor, shape (B, H, T, D)
    k : torch.Tensor, shape (B, H_kv, S, D)
    v : torch.Tensor, shape (B, H_kv, S, Dv)
        One dtype (float16, bfloat16, float32), one device (CUDA, or CPU under the Triton
        interpreter). D, Dv from 1 to 256; any T, S.
    kernel : str
        A registry kernel (default ``"rbf"``): {kernels}.
    is_causal : bool
        Causal mask, aligned by ``causal_alignment``.
    causal_alignment : {"top_left", "bottom_right"}, default "top_left"
        Only read when ``is_causal`` is True (validated always). ``"top_left"``: key j visible to
        query i iff j <= i (torch ``CausalVariant.UPPER_LEFT``, SDPA's ``is_causal=True``);
        ``"bottom_right"``: iff j <= i + S - T (torch ``CausalVariant.LOWER_RIGHT``,
        FlashAttention's KV-cache decoding). With T > S the first T - S rows see no key: their
        numerator is 0 and they output 0 (zero gradients).
    eps : float
        Denominator floor (>= 0); kernels with weights <= 0 (linear, polynomial, sigmoid, cosine)
        need it.
    enable_gqa : bool
        H_kv may divide H (query head h reads key/value head h // (H / H_kv)).
    **params
        Kernel parameters with the registry's names (``gamma``, ``degree``, ``coef0``,
        ``length_scale``, ``nu``, ``alpha``, ``scale``), validated by the registry; per-feature
        ``gamma`` / ``length_scale`` arrays are accepted.

    Returns
    -------
    torch.Tensor, shape (B, H, T, Dv), q's dtype.

    Raises
    ------
    TypeError, ValueError
        As :func:`kernelkit_gpu.softmax_attention` for the tensors; the registry's
        errors for the kernel name and parameters; ValueError for a negative or non-finite eps
        or an unknown ``causal_alignment`` (TypeError for a non-string one).
    ValueError
        ``q``, ``k`` or ``v`` contains NaN or infinity ("q contains NaN or infinity; ..."). Unlike
        softmax attention, whose NaN propagates row by row, the kernel smoother prepares its
        operands as :func:`kernelkit_gpu.gram` does (centring by a mean over all rows, row
        normalisation, clamped distances), where one non-finite value would spread to unrelated
        rows or be hidden; such input is refused for every kernel, ``exponential`` included.

    Notes
    -----
    * Numerics: the pairwise quantity is formed as in :func:`kernelkit_gpu.gram` (direct float32
      differences for D <= 16 and the L1 distance; otherwise ``tl.dot`` on centred data with the
      exact direct recomputation of near-duplicate tiles: native 16-bit products with float32
      accumulation for float16 / bfloat16, IEEE float32 products for float32 — not the Gram's
      split TF32, whose extra error would break the 2x rule against eager float32). Kernel
      values, the numerator and the denominator stay float32; V is converted to float32 and
      K @ V uses split-TF32 tensor-core products for 16-bit input (far below the output's 16-bit
      rounding) and IEEE float32 products for float32 input; only the output is rounded to the
      input dtype. Measured (interpreter, T, S <= 100): within 2x of the eager float32 error.
    * ``kernel="exponential"`` runs :func:`kernelkit_gpu.softmax_attention`
      (online max; never overflows) with ``scale`` (default 1 / sqrt(D)) and multiplies by
      min(1, exp(lse) / eps), which is the guard max(den, eps) exactly. Forward and backward are
      then both the Triton flash-attention kernels.
    * Backward (other kernels) is **not** a Triton kernel: it recomputes the smoother in plain
      PyTorch (float32, the kernel matrix materialised one chunk of queries at a time, about 2^26
      values per chunk) and differentiates it with torch.autograd. It is correct and bounded in
      memory, but O(T S) in memory traffic and much slower than the forward.

    Examples
    --------
    >>> import os; os.environ.setdefault("TRITON_INTERPRET", "1")  # CPU: the Triton interpreter
    '1'
    >>> import torch
    >>> from kernelkit_gpu.attention.smoother import kernel_attention
    >>> q, k, v = torch.randn(1, 2, 5, 16), torch.randn(1, 2, 7, 16), torch.randn(1, 2, 7, 16)
    >>> kernel_attention(q, k, v, "rbf", gamma=0.1, is_causal=True).shape
    torch.Size([1, 2, 5, 16])
    """
    B, H, H_kv, T, S, D, Dv = checks.check_qkv(q, k, v, is_causal=is_causal, enable_gqa=enable_gqa,
                                          max_head_dim=checks.MAX_HEAD_DIM)
    eps = checks.check_eps(eps)
    shift = causal_shift(is_causal, causal_alignment, T, S)
    plan = P.kernel_plan(kernel, D, params)
    checks.check_triton_device(q, "q, k and v", "kernelkit_gpu.attention.naive")
    finite = checks.FiniteCheck(q=q, k=k, v=v)
    if plan.kind == E.K_EXPONENTIAL.value:
        out, lse = softmax_attention(q, k, v, is_causal=is_causal, causal_alignment=causal_alignment,
                                     scale=exponential_scale(plan, D), enable_gqa=enable_gqa,
                                     return_lse=True)
        out = guard_from_lse(out, lse, eps)
    else:
        q, k, v = (_launch.unit_last_stride(t) for t in (q, k, v))
        out = KernelAttentionFunction.apply(q, k, v, plan, shift, eps)
    finite.raise_if_not_finite()  # read after the launches: the GPU does not wait for the host
    return out
