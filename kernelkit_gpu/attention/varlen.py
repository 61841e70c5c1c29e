"""Softmax attention over packed variable-length batches (``cu_seqlens``) with the Triton kernels
of :mod:`kernelkit_gpu.attention.softmax` in their VARLEN form: one program per (tile, head) of
the packed tokens, each reading its sequence from the tile table of
:mod:`kernelkit_gpu.attention._varlen` and looping over that sequence's keys only. Forward and
backward; the twin is :func:`kernelkit_gpu.attention.varlen_naive.softmax_attention_varlen_naive`.
"""

from __future__ import annotations


from kernelkit_gpu import checks
from kernelkit_gpu import _launch
from kernelkit_gpu.attention import gate
from kernelkit_gpu.attention import _varlen
from kernelkit_gpu.attention import varlen_naive as VN
from kernelkit_gpu.attention.softmax import SoftmaxAttentionFunction
from kernelkit_gpu.flags import PendingFlag, host_read_impossible
from kernelkit_math.attention import mask_band

__all__ = ["softmax_attention_varlen"]


def _twin(cu_seqlens, is_causal, scale, window_size):
    """The exact twin of a masked call on the (1, H, total, X) views SoftmaxAttentionFunction
    holds."""
    def twin(q, k, v):
        out, lse = VN.softmax_attention_varlen_naive(
            VN.to_packed(q), VN.to_packed(k), VN.to_packed(v), cu_seqlens, is_causal=is_causal,
            scale=scale, enable_gqa=True, return_lse=True, window_size=window_size)
        return VN.to_batch(out), lse[None]
    return twin


def softmax_attention_varlen(q, k, v, cu_seqlens, *, max_seqlen=None, is_causal=False,
                             scale=None, enable_gqa=False, return_lse=False, window_size=None):
    r"""Softmax attention over each sequence of a packed batch, in Triton, forward and backward.

    Sequence i is the tokens ``cu_seqlens[i]:cu_seqlens[i + 1]`` of q, k and v; its rows see its
    own keys only (all of them, or j <= i within the sequence with ``is_causal``, and
    i - left <= j <= i + right with ``window_size``: positions within the sequence, so both
    alignments coincide). Equivalent to
    :func:`kernelkit_gpu.attention.varlen_naive.softmax_attention_varlen_naive` (a loop of dense
    calls) up to dtype tolerance; same numerics, configs and non-finite rules as
    :func:`kernelkit_gpu.softmax_attention` (causal calls are gated, non-causal ones never read
    another sequence's keys).

    Parameters
    ----------
    q : torch.Tensor, shape (total, H, D)
    k : torch.Tensor, shape (total, H_kv, D)
    v : torch.Tensor, shape (total, H_kv, Dv)
        float16, bfloat16 or float32, on CUDA (the CPU under ``TRITON_INTERPRET=1``); any
        strides with a unit last stride (else one copy).
    cu_seqlens : torch.Tensor, shape (n_seqs + 1,), int32 or int64, on q's device
        0, then non-decreasing, ending at total; empty sequences are allowed. Its values are
        checked on the device by the launch that builds the tile table, and the flag read after
        the kernels are queued (ValueError if wrong; under CUDA graph capture or torch.compile
        tracing not read: the kernels clamp every sequence into [0, total], so a wrong
        cu_seqlens gives wrong rows, never an access out of bounds).
    max_seqlen : int, optional
        Not needed (the grid comes from total and n_seqs); checked as a bound when given.
    is_causal, scale, enable_gqa, return_lse, window_size
        As :func:`kernelkit_gpu.softmax_attention` (top-left: a sequence's queries and keys are
        the same tokens, so both alignments coincide). A window's tiles alone are visited in
        each sequence.

    Returns
    -------
    out : torch.Tensor, shape (total, H, Dv), contiguous
    lse : torch.Tensor, shape (H, total), float32; only with ``return_lse``

    Raises
    ------
    TypeError, ValueError
        As :func:`kernelkit_gpu.softmax_attention`, and for a bad ``cu_seqlens`` (not an int32 /
        int64 tensor of shape (n_seqs + 1,) on q's device, not starting at 0, decreasing, not
        ending at total) or ``max_seqlen``.
    """
    total = VN.check_packed(q, k, v)
    qb, kb, vb = (VN.to_batch(t) for t in (q, k, v))
    _, H, H_kv, T, S, D, Dv = checks.check_qkv(qb, kb, vb, is_causal=is_causal,
                                                enable_gqa=enable_gqa,
                                                max_head_dim=checks.MAX_HEAD_DIM)
    checks.check_flag(return_lse, "return_lse")
    lower, upper = mask_band(is_causal, "top_left", window_size, 0, 0)  # per sequence: T = S
    scale = checks.check_scale(scale, D)
    checks.check_triton_device(q, "q, k and v", "kernelkit_gpu.attention.varlen_naive")
    n_seqs = VN.check_cu_seqlens(cu_seqlens, q.device, max_seqlen)
    masked = lower is not None or upper is not None
    check = gate.start(q, k, v) if masked else None  # read after the launch
    table, ok = _varlen.tile_table(cu_seqlens, total, max_seqlen)
    valid = None if host_read_impossible(q) else PendingFlag(ok)
    qs, ks, vs = (_launch.unit_last_stride(t) for t in (qb, kb, vb))
    out, lse = SoftmaxAttentionFunction.apply(qs, ks, vs, upper, lower, scale,
                                              _twin(cu_seqlens, is_causal, scale, window_size),
                                              (table, n_seqs))
    if valid is not None:
        VN.raise_if_invalid(valid, cu_seqlens, total, max_seqlen)
    if check is not None and not check.finite():  # the exact twin, as the dense masked path
        return VN.softmax_attention_varlen_naive(q, k, v, cu_seqlens, max_seqlen=max_seqlen,
                                                 is_causal=is_causal, scale=scale,
                                                 enable_gqa=enable_gqa, return_lse=return_lse,
                                                 window_size=window_size)
    out = VN.to_packed(out)
    return (out, lse[0]) if return_lse else out
