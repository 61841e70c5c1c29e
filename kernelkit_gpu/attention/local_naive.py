"""Plain-PyTorch local + summary attention: the twin of the Triton forward, and the summaries.

:func:`block_summaries` computes the calibrated block summaries (kbar, vbar, bias) that both
paths use (O(T D) work; the Triton path calls it before its kernel). :func:`local_attention_naive`
has the signature of :func:`kernelkit_gpu.attention.local.local_attention`; it materialises the
(T, T) window scores and (T, G) summary scores of every head, runs on any device, accepts
float64 and is differentiable with torch.autograd: it is the CPU fallback, the gradient path of
the Triton forward, and the same-dtype eager computation of the accuracy tests.

Float64 reference: :func:`kernelkit_math.attention_local.local_attention` (the formulas are
there).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kernelkit_gpu import checks
from kernelkit_math.attention_local import check_local_args

__all__ = ["local_attention_naive", "block_summaries", "check_local_qkv", "TRITON_BLOCKS"]

#: The block sizes the Triton forward takes (one query tile = one key block; tl.dot needs >= 16).
TRITON_BLOCKS = (16, 32, 64, 128)


def check_local_qkv(q, k, v, block, window, is_causal, scale, dtypes):
    """Validate the operands and settings of local attention; return ``(block, window, scale)``."""
    checks.check_qkv(q, k, v, is_causal=is_causal, dtypes=dtypes)
    if q.shape[2] != k.shape[2]:
        raise ValueError(f"local attention is self-attention: q and k must have the same length "
                         f"T; got {q.shape[2]} and {k.shape[2]}")
    block, window = check_local_args(block, window)
    return block, window, checks.check_scale(scale, q.shape[-1])


def _blocks(x, block):
    """(B, H, T, D) -> (B, H, G, block, D), zero-padded at the end."""
    B, H, T, D = x.shape
    G = -(-T // block)
    return F.pad(x, (0, 0, 0, G * block - T)).view(B, H, G, block, D)


def block_summaries(q, k, v, block, scale):
    """Calibrated summaries of the key blocks, in float32 (float64 for float64 input).

    Returns ``kbar`` (B, H, G, D), ``vbar`` (B, H, G, Dv), ``bias`` (B, H, G) with
    G = ceil(T / block): the w-weighted block averages of k and v and the log-mass correction,
    w = softmax over the block of scale * qbar_g·k_j, qbar_g the block's mean query
    (:mod:`kernelkit_math.attention_local`).
    """
    work = torch.float64 if q.dtype == torch.float64 else torch.float32
    T = q.shape[2]
    G = -(-T // block)
    valid = (torch.arange(G * block, device=q.device) < T).view(G, block)
    count = valid.sum(-1).to(work)
    qg, kg, vg = (_blocks(t.to(work), block) for t in (q, k, v))
    qbar = qg.sum(-2) / count[:, None]  # padding rows are 0
    z = scale * torch.einsum("bhgjd,bhgd->bhgj", kg, qbar)
    z = z.masked_fill(~valid, float("-inf"))
    lse = torch.logsumexp(z, -1)
    w = torch.exp(z - lse[..., None])
    kbar = torch.einsum("bhgj,bhgjd->bhgd", w, kg)
    vbar = torch.einsum("bhgj,bhgjd->bhgd", w, vg)
    bias = lse - scale * (qbar * kbar).sum(-1)
    return kbar, vbar, bias


def local_attention_naive(q, k, v, *, block=32, window=1, is_causal=False, scale=None):
    r"""Local + summary attention with the scores materialised; the signature of the Triton
    version (:func:`kernelkit_gpu.attention.local.local_attention`).

    Equivalent to ``kernelkit_math.attention_local.local_attention`` up to dtype tolerance.

    Parameters
    ----------
    q, k : torch.Tensor, shape (B, H, T, D)
    v : torch.Tensor, shape (B, H, T, Dv)
        One dtype (float16, bfloat16, float32 or float64), one device. 16-bit inputs are
        computed in float32 and the output rounded to their dtype.
    block : int, default 32
        Positions per block (any integer >= 1 here).
    window : int, default 1
        Neighbouring blocks on each side (causal: before) attended exactly.
    is_causal : bool
        Query i sees keys j <= i and summaries of blocks wholly before its window.
    scale : float, optional
        Score multiplier, > 0; default 1 / sqrt(D).

    Returns
    -------
    torch.Tensor, shape (B, H, T, Dv), q's dtype

    Raises
    ------
    TypeError, ValueError
        As :func:`kernelkit_gpu.softmax_attention` for the tensors; q and k of different
        lengths; a block < 1 or window < 0.

    Examples
    --------
    >>> import torch
    >>> x = torch.randn(1, 2, 10, 8, dtype=torch.float64)
    >>> local_attention_naive(x, x, x, block=4, window=1).shape
    torch.Size([1, 2, 10, 8])
    """
    block, window, scale = check_local_qkv(q, k, v, block, window, is_causal, scale,
                                           checks.FLOAT_DTYPES)
    B, H, T, _ = q.shape
    if B * H * T == 0:
        return q.new_zeros((B, H, T, v.shape[-1]))
    work = torch.float64 if q.dtype == torch.float64 else torch.float32
    kbar, vbar, bias = block_summaries(q, k, v, block, scale)
    qw, kw, vw = (t.to(work) for t in (q, k, v))
    G = kbar.shape[2]
    pos = torch.arange(T, device=q.device)
    bq = pos // block
    diff = bq[:, None] - bq[None, :]
    gdiff = bq[:, None] - torch.arange(G, device=q.device)[None, :]
    if is_causal:
        near = (diff >= 0) & (diff <= window) & (pos[None, :] <= pos[:, None])
        far = gdiff > window
    else:
        near, far = diff.abs() <= window, gdiff.abs() > window
    s_key = (scale * qw @ kw.transpose(-1, -2)).masked_fill(~near, float("-inf"))
    s_sum = (scale * qw @ kbar.transpose(-1, -2) + bias[:, :, None, :]).masked_fill(
        ~far, float("-inf"))
    p = torch.softmax(torch.cat([s_key, s_sum], -1), -1)
    out = p[..., :T] @ vw + p[..., T:] @ vbar
    return out.to(q.dtype)
