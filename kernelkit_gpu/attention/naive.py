"""Plain-PyTorch softmax attention and kernel smoothers: the twins of the Triton attention kernels.

:func:`softmax_attention_naive` and :func:`kernel_attention_naive` have the signatures of
:func:`kernelkit_gpu.softmax_attention` and
:func:`kernelkit_gpu.kernel_attention`. They materialise the (T, S) score matrix
of every head, run on any device (CPU included, no Triton), accept float64, and are differentiable
with torch.autograd. They serve as CPU fallback, as the gradient reference of the tests (float64
autograd through them) and, in float16 / bfloat16 / float32, as the *same-dtype PyTorch
computation* of the FlashAttention accuracy rule (a fused kernel's error must stay within 2x of
the error of this eager computation in the same dtype).

Float64 references: ``kernelkit_math.attention.softmax_attention`` and
``kernelkit_math.attention.kernel_smoother``. The argument validation shared with the Triton
versions is in :mod:`kernelkit_gpu.checks`.
"""

from __future__ import annotations

import math

import torch

from kernelkit_gpu import checks
from kernelkit_gpu import epilogues as E
from kernelkit_gpu import prepare as P
from kernelkit_gpu.attention._visible import VisibleMatmul, VisibleScores
from kernelkit_gpu.pairwise.naive import epilogue_torch
from kernelkit_math.attention import causal_shift, mask_band
from kernelkit_math.registry import get_kernel

__all__ = ["softmax_attention_naive", "kernel_attention_naive"]

#: Kernel values materialised per query chunk in :func:`kernel_attention_naive`.
CHUNK_ELEMENTS = 1 << 26


def _expand_kv(t, group):
    """Repeat each key/value head ``group`` times (GQA): (B, H_kv, S, D) -> (B, H, S, D)."""
    return t if group == 1 else t.repeat_interleave(group, dim=1)


def _causal_mask(t0, t1, s, shift, device):
    """(t1 - t0, s) bool: key j visible to query i iff j <= i + shift (shift 0: top-left aligned,
    as torch SDPA; S - T: bottom-right; :func:`kernelkit_math.attention.causal_shift`)."""
    i = torch.arange(t0, t1, device=device)[:, None]
    j = torch.arange(s, device=device)[None, :]
    return j <= i + shift


def _band_mask(t, s, lower, upper, device):
    """(t, s) bool: key j visible to query i iff i + lower <= j <= i + upper (a None bound is
    absent; :func:`kernelkit_math.attention.mask_band`)."""
    d = torch.arange(s, device=device)[None, :] - torch.arange(t, device=device)[:, None]
    visible = torch.ones((t, s), dtype=torch.bool, device=device)
    if lower is not None:
        visible &= d >= lower
    if upper is not None:
        visible &= d <= upper
    return visible


def _empty_rows(t, s, lower, upper, device):
    """(t, 1) bool of the rows that see no key of a band, or None when every row sees one. The
    band i + lower <= j <= i + upper has upper >= lower and moves right with i, so row i misses
    [0, s) exactly when i + upper < 0 or i + lower > s - 1: the empty rows are a prefix and a
    suffix, and none is empty when the first and the last row see a key."""
    def sees(i):
        return (upper is None or i + upper >= 0) and (lower is None or i + lower <= s - 1)

    if sees(0) and sees(t - 1):
        return None
    i = torch.arange(t, device=device)[:, None]
    empty = torch.zeros((t, 1), dtype=torch.bool, device=device)
    if upper is not None:
        empty |= i + upper < 0
    if lower is not None:
        empty |= i + lower > s - 1
    return empty


# ------------------------------------------------------------------------------------ softmax
def softmax_attention_naive(q, k, v, *, is_causal=False, causal_alignment="top_left", scale=None,
                            enable_gqa=False, return_lse=False, window_size=None):
    r"""Softmax attention with the score matrix materialised; the signature of the Triton version.

    .. math::

        \mathrm{out}_i = \sum_j \frac{e^{s_{ij}}}{\sum_{j'} e^{s_{ij'}}} v_j, \qquad
        s_{ij} = \mathrm{scale}\; q_i \cdot k_j, \qquad
        \mathrm{lse}_i = \log \sum_j e^{s_{ij}}

    Equivalent to ``kernelkit_math.attention.softmax_attention`` up to dtype tolerance.

    Parameters
    ----------
    q : torch.Tensor, shape (B, H, T, D)
    k : torch.Tensor, shape (B, H_kv, S, D)
    v : torch.Tensor, shape (B, H_kv, S, Dv)
        One dtype: float16, bfloat16, float32 or float64; any device.
    is_causal : bool
        Causal mask: key j is visible to query i iff j <= i + shift.
    causal_alignment : {"top_left", "bottom_right"}, default "top_left"
        Only read when ``is_causal`` is True or a window is given (validated always).
        ``"top_left"``: shift 0, as torch SDPA (``CausalVariant.UPPER_LEFT``);
        ``"bottom_right"``: shift S - T, as FlashAttention's KV-cache decoding
        (``CausalVariant.LOWER_RIGHT``); with T > S the first T - S rows see no key.
    scale : float, optional
        Multiplies the scores; default 1 / sqrt(D).
    enable_gqa : bool
        Allow H_kv dividing H: query head h reads key/value head h // (H / H_kv).
    return_lse : bool
        Also return the log-sum-exp of the scaled scores (natural log).
    window_size : None or tuple (left, right) of int, default None
        Sliding window, as :func:`kernelkit_gpu.softmax_attention`: key j visible to query i
        iff i + shift - left <= j <= i + shift + right (-1: no bound on that side).

    Returns
    -------
    out : torch.Tensor, shape (B, H, T, Dv), the input dtype
    lse : torch.Tensor, shape (B, H, T), float32 (float64 for float64 input); only if return_lse.
        Rows with no visible key (S == 0, bottom-right with T > S, a window that misses every
        key) give out 0, lse -inf and zero gradients.

    Masked keys are absent, not weighted by 0 (:mod:`kernelkit_math.attention`): with
    ``is_causal`` or a window the products over keys run through :class:`VisibleScores` and
    :class:`VisibleMatmul`, so a NaN or infinity in v_j, k_j or q_i reaches exactly the outputs
    and gradients of a row-by-row computation over the visible keys.

    Notes
    -----
    Computed in the input dtype the way eager PyTorch does it: the scores, the probabilities and
    the output are rounded to that dtype (matrix products accumulate in float32 inside torch).
    """
    B, H, H_kv, T, S, D, Dv = checks.check_qkv(q, k, v, is_causal=is_causal, enable_gqa=enable_gqa,
                                          dtypes=checks.ATTN_DTYPES + (torch.float64,))
    checks.check_flag(return_lse, "return_lse")
    lower, upper = mask_band(is_causal, causal_alignment, window_size, T, S)
    scale = checks.check_scale(scale, D)
    lse_dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
    if S == 0 or T == 0:
        out = q.new_zeros((B, H, T, Dv)) + 0.0 * q.sum() + 0.0 * (k.sum() + v.sum())
        lse = torch.full((B, H, T), -math.inf, dtype=lse_dtype, device=q.device)
        return (out, lse) if return_lse else out
    group = H // H_kv
    kk, vv = _expand_kv(k, group), _expand_kv(v, group)
    if lower is None and upper is None:
        scores = torch.matmul(q, kk.transpose(-1, -2)) * scale
        out = torch.matmul(torch.softmax(scores, dim=-1), vv)
        if return_lse:
            return out, torch.logsumexp(scores.to(lse_dtype), dim=-1)
        return out
    # Causal / window: masked keys are absent (kernelkit_math.attention): the products that
    # involve a key go through the visible pairs only, so a NaN / inf key or value reaches only
    # the rows that see it, and rows that see no key are 0.
    visible = _band_mask(T, S, lower, upper, q.device)
    scores = VisibleScores.apply(q, kk, visible) * scale
    scores = scores.masked_fill(~visible, -math.inf)
    # rows with no visible key: finite scores here, zeroed after the softmax
    empty = _empty_rows(T, S, lower, upper, q.device)
    if empty is not None:
        scores = scores.masked_fill(empty, 0.0)
    p = torch.softmax(scores, dim=-1)
    if empty is not None:
        p = p.masked_fill(empty, 0.0)
    out = VisibleMatmul.apply(p, vv, visible)
    if return_lse:
        lse = torch.logsumexp(scores.to(lse_dtype), dim=-1)
        return out, (lse if empty is None else lse.masked_fill(empty[:, 0], -math.inf))
    return out


# ------------------------------------------------------------------------------ kernel smoother
def _pairwise_torch(qc, kk, plan):
    """Batched pairwise quantity (dot, squared distance or L1 distance) of prepared rows."""
    if plan.pairwise == E.PW_DOT.value:
        return torch.matmul(qc, kk.transpose(-1, -2))
    if plan.pairwise == E.PW_SQEUCLIDEAN.value:
        nq = (qc * qc).sum(-1)
        nk = (kk * kk).sum(-1)
        dot = torch.matmul(qc, kk.transpose(-1, -2))
        return torch.clamp_min(nq[..., :, None] + nk[..., None, :] - 2.0 * dot, 0.0)
    return torch.cdist(qc, kk, p=1.0)


def _prepare_smoother(q, k, plan, group):
    """Transform q and k as the kernel needs (normalise, centre, scale per feature); expand GQA."""
    kk = _expand_kv(k, group)
    if plan.cosine:
        q, kk = P.normalize_rows(q)[0], P.normalize_rows(kk)[0]
    if plan.pairwise != E.PW_DOT.value:
        # Distances do not change under a common shift: centre each head on its keys' mean
        # (float64, scaled per feature, rounded once: the shared preparation of _prepare).
        mean = P.column_mean(kk)
        scale = P.feature_scales(plan, q.device)
        q, kk = (P.centre_and_scale(t, mean, scale, t.dtype) for t in (q, kk))
    return q, kk


def smoother_rows(q, k, v, plan, *, shift, eps, group, t0=0):
    """Kernel smoother for the queries ``q`` = rows t0 .. t0 + len of the full query set; causal
    mask ``j <= i + shift`` unless ``shift`` is None."""
    T, S = q.shape[-2], k.shape[-2]
    qc, kk = _prepare_smoother(q, k, plan, group)
    Kv = epilogue_torch(_pairwise_torch(qc, kk, plan), plan)
    if shift is not None:
        Kv = Kv.masked_fill(~_causal_mask(t0, t0 + T, S, shift, q.device), 0.0)
    num = torch.matmul(Kv, _expand_kv(v, group))
    den = Kv.sum(-1, keepdim=True)
    return guarded_divide(num, den, eps)


def guarded_divide(num, den, eps):
    """num / max(den, eps); rows whose guarded denominator is 0 (eps = 0, den <= 0) output 0."""
    g = torch.clamp_min(den, eps)
    pos = g > 0
    return torch.where(pos, num / torch.where(pos, g, torch.ones_like(g)), torch.zeros_like(num))


def exponential_scale(plan, d):
    """The exponential kernel's scale, its None default resolved by the registry."""
    return float(get_kernel(plan.name).explicit(d, plan.params)["scale"])


def guard_from_lse(out, lse, eps):
    """Turn a softmax output into the smoother's num / max(den, eps) with den = exp(lse)."""
    if eps <= 0:
        return out
    factor = torch.exp(torch.clamp_max(lse - math.log(eps), 0.0))
    return (out.to(factor.dtype) * factor[..., None]).to(out.dtype)


def kernel_attention_naive(q, k, v, kernel="rbf", *, is_causal=False, causal_alignment="top_left",
                           eps=1e-6, enable_gqa=False, **params):
    r"""Exact kernel smoother with the kernel matrix materialised; the signature of the Triton version.

    .. math::

        \mathrm{out}_i = \frac{\sum_j k(q_i, k_j)\, v_j}{\max\big(\sum_j k(q_i, k_j),\ \varepsilon\big)}

    Equivalent to ``kernelkit_math.attention.kernel_smoother`` up to dtype tolerance. The kernel
    values come from :func:`kernelkit_gpu.pairwise.naive.epilogue_torch` (the torch twin of the Triton
    epilogues) on centred data; ``kernel="exponential"`` goes through
    :func:`softmax_attention_naive` (online-max safe) and applies the guard from the lse.

    Parameters
    ----------
    q, k, v : torch.Tensor
        Shapes (B, H, T, D), (B, H_kv, S, D), (B, H_kv, S, Dv); float16, bfloat16, float32 or
        float64; any device; finite values only (NaN or infinity raise ValueError, as in the
        Triton version).
    kernel : str
        A registry kernel name; parameters as keywords, validated by the registry.
    is_causal, enable_gqa : bool
        As :func:`softmax_attention_naive`.
    causal_alignment : {"top_left", "bottom_right"}, default "top_left"
        As :func:`softmax_attention_naive` (torch ``CausalVariant.UPPER_LEFT`` /
        ``LOWER_RIGHT``); rows with no visible key (bottom-right, T > S) output 0.
    eps : float
        Denominator guard, >= 0.

    Returns
    -------
    torch.Tensor, shape (B, H, T, Dv), the input dtype. float16 / bfloat16 are computed in float32
    (the kernel formulas cancel in 16 bits) and rounded once at the end.
    """
    B, H, H_kv, T, S, D, Dv = checks.check_qkv(q, k, v, is_causal=is_causal, enable_gqa=enable_gqa,
                                          dtypes=checks.ATTN_DTYPES + (torch.float64,))
    eps = checks.check_eps(eps)
    shift = causal_shift(is_causal, causal_alignment, T, S)
    plan = P.kernel_plan(kernel, D, params)
    checks.FiniteCheck(q=q, k=k, v=v).raise_if_not_finite()
    group = H // H_kv if H_kv else 1
    if plan.kind == E.K_EXPONENTIAL.value:
        out, lse = softmax_attention_naive(q, k, v, is_causal=is_causal,
                                           causal_alignment=causal_alignment,
                                           scale=exponential_scale(plan, D), enable_gqa=enable_gqa,
                                           return_lse=True)
        return guard_from_lse(out, lse, eps)
    if S == 0 or T == 0:
        return q.new_zeros((B, H, T, Dv)) + 0.0 * q.sum() + 0.0 * (k.sum() + v.sum())
    acc = P.acc_dtype(q.dtype)
    qa, ka, va = q.to(acc), k.to(acc), v.to(acc)
    step = max(1, CHUNK_ELEMENTS // max(1, B * H * S))
    parts = [smoother_rows(qa[:, :, t0:t0 + step], ka, va, plan, shift=shift, eps=eps,
                           group=group, t0=t0) for t0 in range(0, T, step)]
    out = parts[0] if len(parts) == 1 else torch.cat(parts, dim=2)
    return out.to(q.dtype)
