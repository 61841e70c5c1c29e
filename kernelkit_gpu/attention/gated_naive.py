"""Gated / decayed linear attention in plain PyTorch, chunk by chunk (differentiable).

The twin of :func:`kernelkit_math.gated_attention.gated_linear_attention` (same recurrence and
conventions): within a chunk of C steps the output is the inter-chunk term
(q_i * exp(G_i)) @ S plus the intra-chunk sum over j <= i of (q_i * k_j * exp(G_i - G_j)) v_j,
with G the cumulative log-gate from the chunk's start, and the state moves on as
S <- exp(G_C) * S + (k * exp(G_C - G))^T v. Gates of exactly 0 (log -inf) are summed apart, as
:func:`kernelkit_math.gated_attention.segment_log_weights` does, so no infinity is subtracted.
Pairs j > i within a chunk are left out of the sums (:mod:`kernelkit_gpu.attention._visible`),
so a NaN in k_j or v_j reaches rows t >= j only, in the output and the gradients.
float16 / bfloat16 / float32 compute in float32, float64 in float64; the output has q's dtype,
the state float32 (float64).
"""

from __future__ import annotations

import torch

from kernelkit_gpu.attention._visible import VisibleMatmul, VisibleScores

__all__ = ["gated_linear_attention_naive", "CHUNK", "TRITON_MAX_HEAD_DIM"]

#: Steps per chunk: per-channel gates hold a (C, C, D) weight tensor per head.
CHUNK = 64
#: Largest head dim D of q and k (the state's rows) and Dv of v that the Triton forward
#: (:mod:`kernelkit_gpu.attention.gated`, which holds a D x 64 state in registers) takes; here
#: so that callers can tell without importing triton.
TRITON_MAX_HEAD_DIM = 128


def _segments(log_alpha):
    """``(finite, resets)``: cumulative sums of the finite log-gates and of the zero gates."""
    zero = torch.isneginf(log_alpha)
    finite = torch.cumsum(torch.where(zero, torch.zeros_like(log_alpha), log_alpha), dim=-2)
    return finite, torch.cumsum(zero.to(log_alpha.dtype), dim=-2)


def _weight(finite, resets, i_index, j_index, valid=None):
    """exp(G_i - G_j) per channel where ``valid`` (a (len(i), len(j)) mask, or everywhere), 0
    elsewhere and where a zero gate lies between j and i; the exponent is masked before exp,
    so no inf or NaN reaches autograd from a pair that is not used."""
    keep = resets[..., i_index, :] == resets[..., j_index, :]
    if valid is not None:
        keep = keep & valid[..., None]
    diff = finite[..., i_index, :] - finite[..., j_index, :]
    w = torch.exp(torch.where(keep, diff, torch.zeros_like(diff)))
    return torch.where(keep, w, torch.zeros_like(w))


def gated_linear_attention_naive(q, k, v, log_alpha, *, scale=None, initial_state=None,
                                 return_state=False, chunk=CHUNK):
    """Gated linear attention on (B, H, T, D) q, k, (B, H, T, Dv) v.

    Parameters
    ----------
    q, k, v : torch.Tensor
        One floating dtype and device; shapes (B, H, T, D), (B, H, T, D), (B, H, T, Dv).
    log_alpha : torch.Tensor of shape (B, H, T, 1) or (B, H, T, D)
        ln of the forget gate of each step (one value broadcast over the channels, or one per
        channel), <= 0, -inf for a gate of exactly 0.
    scale : float, optional
        Multiplies q.
    initial_state : torch.Tensor of shape (B, H, D, Dv), optional
    return_state : bool
    chunk : int
        Steps per chunk (the result does not depend on it beyond rounding).

    Returns
    -------
    out : torch.Tensor of shape (B, H, T, Dv), q's dtype
    state : torch.Tensor of shape (B, H, D, Dv), float32 (float64 for float64 q), with
        ``return_state``
    """
    work = torch.float64 if q.dtype == torch.float64 else torch.float32
    qw, kw, vw = (x.to(work) for x in (q, k, v))
    la = log_alpha.to(work)
    if scale is not None:
        qw = qw * scale
    B, H, T, D = qw.shape
    if initial_state is None:
        S = qw.new_zeros((B, H, D, vw.shape[-1]))
    else:
        S = initial_state.to(work)
    scalar = la.shape[-1] == 1
    outs = []
    for c0 in range(0, T, chunk):
        c1 = min(T, c0 + chunk)
        qc, kc, vc, lc = qw[..., c0:c1, :], kw[..., c0:c1, :], vw[..., c0:c1, :], la[..., c0:c1, :]
        C = c1 - c0
        finite, resets = _segments(lc)
        rows = torch.arange(C, device=qw.device)
        start = torch.where(resets == 0, torch.exp(finite), torch.zeros_like(finite))
        out = (qc * start) @ S  # the state at the chunk's start, decayed to each step
        i_index, j_index = torch.meshgrid(rows, rows, indexing="ij")
        causal = j_index <= i_index
        w = _weight(finite, resets, i_index, j_index, causal)  # (B, H, C, C, D or 1)
        if scalar:
            scores = VisibleScores.apply(qc, kc, causal) * w[..., 0]
        else:  # k_j per pair, zero where j > i, so a NaN key stays out of earlier rows
            kk = torch.where(causal[..., None], kc[..., None, :, :], 0.0)
            scores = (qc[..., :, None, :] * kk * w).sum(dim=-1)
        scores = torch.where(causal, scores, torch.zeros_like(scores))
        outs.append(out + VisibleMatmul.apply(scores, vc, causal))
        last = torch.full((C,), C - 1, device=qw.device)
        to_end = _weight(finite, resets, last, rows)  # (B, H, C, D or 1): exp(G_C - G_j)
        S = start[..., -1, :, None] * S + (kc * to_end).transpose(-1, -2) @ vc
    out = torch.cat(outs, dim=-2) if outs else vw.new_zeros(vw.shape)
    out = out.to(q.dtype)
    return (out, S) if return_state else out
