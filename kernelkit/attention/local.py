"""Dispatch of :func:`kernelkit.attention.local_attention` (re-exported there): the Triton
forward or the plain-PyTorch twin. A module of its own below both the attention API and the
comparison tool (:mod:`kernelkit.attention.comparison.methods` runs the method through it)."""

from __future__ import annotations

__all__ = ["local_attention"]


def local_attention(q, k, v, *, block=32, window=1, is_causal=False, scale=None, backend="auto"):
    r"""Local + summary attention: exact softmax over the keys of the query's block and
    ``window`` blocks on each side (causal: before), one calibrated summary key per other block.

    A training-free approximation of softmax attention (issue 20) whose weights on the keys are
    a distribution in every row by construction. The formulas and the calibration of the
    summaries (each block's softmax under its own mean query): :mod:`kernelkit_math.attention_local`
    (the float64 reference, ``local_attention``). Each row reads (2 window + 1) block keys and
    ceil(T / block) - 2 window - 1 summaries: 109 at T = 512, block 32, window 1 (mean output
    error 0.25 against softmax on all-MiniLM-L6-v2 heads, uniform attention 0.76).

    Parameters
    ----------
    q, k : torch.Tensor of shape (B, H, T, D)
    v : torch.Tensor of shape (B, H, T, Dv)
        Self-attention: q and k have the same length. float16, bfloat16 and float32 run the
        Triton forward (CUDA, or the CPU under ``TRITON_INTERPRET=1``) when ``block`` is 16, 32,
        64 or 128; otherwise, and for float64, the plain-PyTorch twin (it materialises the (T, T)
        scores). Gradients: through the twin (its forward recomputed), on either path.
        Inputs must be finite, and a call with a NaN or infinity in q, k or v raises
        ValueError: unlike the other attention functions, no path leaves masked keys out of its
        sums (a NaN in a later key of the query's own block would reach it with
        ``is_causal``). The check is one float32 sum per input, read on the host after the
        kernels are queued (skipped under CUDA graph capture and torch.compile tracing).
    block : int, default 32
        Positions per block.
    window : int, default 1
        Neighbouring blocks on each side (causal: before) attended exactly.
    is_causal : bool
        Query i sees keys j <= i and the summaries of blocks wholly before its window.
    scale : float or None
        None means 1 / sqrt(D).
    backend : {"auto", "triton", "torch"}, default "auto"
        As :func:`kernelkit.attention.softmax_attention`: ``"triton"`` runs the Triton forward
        or raises a ValueError that says why it cannot (a ``block`` it lacks, float64, a CPU
        tensor without the interpreter); ``"torch"`` the plain-PyTorch twin.

    Returns
    -------
    torch.Tensor of shape (B, H, T, Dv), the dtype of q

    Raises
    ------
    ValueError, TypeError
        For mismatched shapes, devices or dtypes, q and k of different lengths, a block < 1, a
        window < 0, ``scale <= 0``, a bad ``backend`` or ``backend="triton"`` where the Triton
        forward cannot run; ValueError for non-finite inputs.

    Examples
    --------
    >>> import torch
    >>> from kernelkit.attention import local_attention
    >>> x = torch.randn(1, 2, 100, 16, dtype=torch.float64)
    >>> local_attention(x, x, x, block=16, window=1, is_causal=True).shape
    torch.Size([1, 2, 100, 16])
    """
    from kernelkit.attention._dispatch import _check_backend, runs_triton
    from kernelkit_gpu import checks
    from kernelkit_gpu.attention import gate
    from kernelkit_gpu.attention.local_naive import (TRITON_BLOCKS, check_local_qkv,
                                                     local_attention_naive)

    _check_backend(backend)
    check_local_qkv(q, k, v, block, window, is_causal, scale, checks.FLOAT_DTYPES)
    why_not = (None if block in TRITON_BLOCKS else
               f"they take blocks of {', '.join(map(str, TRITON_BLOCKS))} positions; got {block}")
    triton = runs_triton(backend, q, why_not)
    pending = gate.start(q, k, v)  # queued before the kernels, read after them
    settings = dict(block=block, window=window, is_causal=is_causal, scale=scale)
    if triton:
        from kernelkit_gpu.attention.local import local_attention as triton_local

        out = triton_local(q, k, v, **settings)
    else:
        out = local_attention_naive(q, k, v, **settings)
    if pending is not None and not pending.finite():
        raise ValueError("local_attention: q, k and v must be finite (a NaN or infinity would "
                         "reach rows that do not see it through the block summaries)")
    return out
