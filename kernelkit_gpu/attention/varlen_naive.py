"""Packed variable-length batches (``cu_seqlens``) in plain PyTorch: their checks, and a loop over
the sequences that serves as the twin of the Triton varlen kernels and as the varlen path of
linear attention.

A packed batch: q (total, H, D), k (total, H_kv, D), v (total, H_kv, Dv), and ``cu_seqlens``
(n_seqs + 1,) int32 or int64 on q's device, ``cu_seqlens[0] == 0``, non-decreasing,
``cu_seqlens[-1] == total``; sequence i is the tokens ``cu_seqlens[i]:cu_seqlens[i + 1]`` of q,
k and v (self-attention packing, as flash-linear-attention's ``cu_seqlens``; FlashAttention's
varlen functions with ``cu_seqlens_q == cu_seqlens_k``). Empty sequences are allowed (as in
FlashAttention): they hold no token, so they produce nothing.
"""

from __future__ import annotations

import torch

from kernelkit_gpu import checks
from kernelkit_gpu.attention.naive import softmax_attention_naive
from kernelkit_gpu.flags import PendingFlag
from kernelkit_math.attention import check_window_size

__all__ = ["softmax_attention_varlen_naive", "per_sequence", "check_packed", "check_cu_seqlens",
           "start_check", "raise_if_invalid", "to_batch", "to_packed"]


def to_batch(x):
    """(total, H, X) packed -> the (1, H, total, X) view the dense code takes (no copy)."""
    return x.unsqueeze(0).transpose(1, 2)


def to_packed(x):
    """(1, H, total, X) -> the (total, H, X) view (no copy)."""
    return x[0].transpose(0, 1)


def check_packed(q, k, v):
    """Packed operands: tensors of rank 3 with one token count; returns total."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        checks.check_tensor(t, name, "(total_tokens, H, D)")
        checks.check_ndim(t, name, 3, "(total_tokens, H, D) with cu_seqlens")
    if not (q.shape[0] == k.shape[0] == v.shape[0]):
        raise ValueError("with cu_seqlens, q, k and v hold the same packed tokens: shape[0] must "
                         f"agree; got {q.shape[0]}, {k.shape[0]} and {v.shape[0]}")
    return q.shape[0]


def check_cu_seqlens(cu_seqlens, device, max_seqlen=None):
    """Type, dtype, shape and device of ``cu_seqlens`` (the values: :func:`start_check`);
    returns the number of sequences."""
    if not isinstance(cu_seqlens, torch.Tensor):
        raise TypeError("cu_seqlens must be a torch.Tensor of int32 or int64 cumulative sequence "
                        f"lengths, shape (n_seqs + 1,); got {type(cu_seqlens).__name__}")
    if cu_seqlens.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"cu_seqlens must be int32 or int64; got {cu_seqlens.dtype}")
    if cu_seqlens.ndim != 1 or cu_seqlens.numel() < 2:
        raise ValueError("cu_seqlens must have shape (n_seqs + 1,) with n_seqs >= 1; got shape "
                         f"{tuple(cu_seqlens.shape)}")
    if cu_seqlens.device != device:
        raise ValueError(f"cu_seqlens must be on q's device {device}; got {cu_seqlens.device}")
    if max_seqlen is not None and (isinstance(max_seqlen, bool) or not isinstance(max_seqlen, int)
                                   or max_seqlen < 0):
        raise TypeError(f"max_seqlen must be an int >= 0 or None; got {max_seqlen!r}")
    return cu_seqlens.numel() - 1


def _valid_flag(cu_seqlens, total, max_seqlen):
    cu = cu_seqlens.to(torch.int64)
    diff = cu[1:] - cu[:-1]
    ok = (cu[0] == 0) & (cu[-1] == total) & (diff >= 0).all()
    if max_seqlen is not None:
        ok = ok & (diff <= max_seqlen).all()
    return ok


def start_check(cu_seqlens, total, max_seqlen=None):
    """Queue the check of the values of ``cu_seqlens`` (starts at 0, non-decreasing, ends at
    ``total``, no length above ``max_seqlen``); :func:`raise_if_invalid` reads it."""
    return PendingFlag(_valid_flag(cu_seqlens, total, max_seqlen))


def raise_if_invalid(check, cu_seqlens, total, max_seqlen):
    """ValueError naming what is wrong with ``cu_seqlens`` if the queued check failed."""
    if check.value():
        return
    cu = cu_seqlens.to(torch.int64).cpu()
    if int(cu[0]) != 0:
        why = f"must start at 0; got {int(cu[0])}"
    elif int(cu[-1]) != total:
        why = f"must end at the number of packed tokens q.shape[0] = {total}; got {int(cu[-1])}"
    elif bool((cu[1:] < cu[:-1]).any()):
        why = "must be non-decreasing (sequence lengths >= 0)"
    else:
        why = f"has a sequence longer than max_seqlen = {max_seqlen}"
    raise ValueError(f"cu_seqlens {why}")


def _bounds(cu_seqlens, total, max_seqlen):
    """Host list of (start, end) of a checked ``cu_seqlens`` (one host read)."""
    check = start_check(cu_seqlens, total, max_seqlen)
    raise_if_invalid(check, cu_seqlens, total, max_seqlen)
    cu = cu_seqlens.tolist()
    return list(zip(cu[:-1], cu[1:]))


def per_sequence(fn, cu_seqlens, total, max_seqlen, *tensors):
    """Run ``fn(i, *batch_views)`` on each sequence i (views (1, H, L, X) of the packed tensors)
    and return its results, a list with one entry per sequence."""
    return [fn(i, *(to_batch(t[s:e]) for t in tensors))
            for i, (s, e) in enumerate(_bounds(cu_seqlens, total, max_seqlen))]


def softmax_attention_varlen_naive(q, k, v, cu_seqlens, *, max_seqlen=None, is_causal=False,
                                   scale=None, enable_gqa=False, return_lse=False,
                                   window_size=None):
    r"""Softmax attention over each sequence of a packed batch: a loop of
    :func:`kernelkit_gpu.softmax_attention_naive` (the twin of
    :func:`kernelkit_gpu.attention.varlen.softmax_attention_varlen`; any device, float64 too).

    Parameters
    ----------
    q : torch.Tensor, shape (total, H, D)
    k : torch.Tensor, shape (total, H_kv, D)
    v : torch.Tensor, shape (total, H_kv, Dv)
    cu_seqlens : torch.Tensor, shape (n_seqs + 1,), int32 or int64
        Cumulative sequence lengths (module docstring).
    max_seqlen : int, optional
        Checked as an upper bound of the lengths when given; not needed.
    is_causal, scale, enable_gqa, return_lse, window_size
        As :func:`kernelkit_gpu.softmax_attention`; causal masks and windows are per sequence
        (query i of a sequence sees its keys j <= i, and i - left <= j <= i + right).

    Returns
    -------
    out : torch.Tensor, shape (total, H, Dv)
    lse : torch.Tensor, shape (H, total), only with ``return_lse`` (as FlashAttention's varlen
        functions).
    """
    total = check_packed(q, k, v)
    check_cu_seqlens(cu_seqlens, q.device, max_seqlen)
    checks.check_flag(return_lse, "return_lse")
    check_window_size(window_size)
    if q.shape[1] == 0 or total == 0:  # no token: the dense checks and an empty result
        out, lse = softmax_attention_naive(to_batch(q), to_batch(k), to_batch(v),
                                           is_causal=is_causal, scale=scale,
                                           enable_gqa=enable_gqa, return_lse=True,
                                           window_size=window_size)
        _bounds(cu_seqlens, total, max_seqlen)
        return (to_packed(out), lse[0]) if return_lse else to_packed(out)

    def one(_, qb, kb, vb):
        return softmax_attention_naive(qb, kb, vb, is_causal=is_causal, scale=scale,
                                       enable_gqa=enable_gqa, return_lse=True,
                                       window_size=window_size)

    parts = per_sequence(one, cu_seqlens, total, max_seqlen, q, k, v)
    out = torch.cat([to_packed(o) for o, _ in parts], 0)
    lse = torch.cat([l[0] for _, l in parts], 1)
    return (out, lse) if return_lse else out
