r"""Attention as a kernel smoother: softmax, linear (feature-map) and exact kernel attention.

.. math::

    \mathrm{out}_i = \frac{\sum_j k(q_i, k_j)\, v_j}{\sum_j k(q_i, k_j)}

- :func:`softmax_attention`: k(q, k) = exp(scale q·k), the exponential kernel, computed with an
  online softmax (FlashAttention-style Triton kernels, forward and backward).
- :func:`linear_attention`: k(q, k) = phi(q)·phi(k) for a feature map phi, O(T·D·M) instead of
  O(T·S·D); causal or not, normalised or not, with a recurrent state for decoding.
- :func:`kernel_attention`: the exact smoother for any registry kernel, by name or as a kernelkit
  kernel object (RBF, polynomial...), so "a different kernel" can be told apart from "an
  approximated kernel".

Shapes follow one legend: q (B, H, T, D), k (B, H_kv, S, D), v (B, H_kv, S, Dv), the layout of
``torch.nn.functional.scaled_dot_product_attention``. Everything is differentiable with torch
autograd.

Which path runs: float16, bfloat16 and float32 tensors run the Triton kernels on CUDA, and on the
CPU when ``TRITON_INTERPRET=1`` was set before import (the interpreter), else the plain-PyTorch
path (``kernelkit_gpu.*_naive``). float64 tensors always run the plain-PyTorch path, in float64,
on their device (CPU or CUDA): the Triton kernels take 16- and 32-bit floats only. Float64
references live in :mod:`kernelkit_math.attention`.

Masked keys are absent, on every path: a causal mask leaves the keys a query may not see out of
its sums (not weighted by 0), so a NaN or infinity in a key or value reaches exactly the rows
that see it (and their gradients), and rows that see no key output 0 (the rule of
:mod:`kernelkit_math.attention`; :func:`kernel_attention` refuses non-finite input).
"""

from __future__ import annotations

from kernelkit._attention_ops import (
    FUSED_FEATURE_MAPS,
    kernel_attention,
    linear_attention,
    softmax_attention,
)

__all__ = ["softmax_attention", "linear_attention", "kernel_attention", "FUSED_FEATURE_MAPS",
           "compare", "sweep"]


def compare(*args, **kwargs):
    """Errors, speed and memory of attention methods against softmax on given q, k, v.

    The same as :func:`kernelkit.compare.compare` (defined in :mod:`kernelkit.compare.comparison`;
    see there for the parameters); loads :mod:`kernelkit.compare` on first use.

    Examples
    --------
    >>> import numpy as np
    >>> from kernelkit.attention import compare
    >>> q = k = v = np.random.default_rng(0).standard_normal((16, 8))
    >>> compare(q, k, v, ["softmax", "elu+1"], measure=False).rows[1]["method"]
    'elu+1'
    """
    from kernelkit.compare import compare as impl

    return impl(*args, **kwargs)


def sweep(*args, **kwargs):
    """Time and peak memory of attention methods against sequence length, with crossovers.

    The same as :func:`kernelkit.compare.sweep` (defined in :mod:`kernelkit.compare.sweeps`; see
    there for the parameters); loads :mod:`kernelkit.compare` on first use.
    """
    from kernelkit.compare import sweep as impl

    return impl(*args, **kwargs)


# ----------------------------------------------------------------- local + summary attention
__all__ += ["local_attention"]


def local_attention(q, k, v, *, block=32, window=1, is_causal=False, scale=None):
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
    block : int, default 32
        Positions per block.
    window : int, default 1
        Neighbouring blocks on each side (causal: before) attended exactly.
    is_causal : bool
        Query i sees keys j <= i and the summaries of blocks wholly before its window.
    scale : float or None
        None means 1 / sqrt(D).

    Returns
    -------
    torch.Tensor of shape (B, H, T, Dv), the dtype of q

    Raises
    ------
    ValueError, TypeError
        For mismatched shapes, devices or dtypes, q and k of different lengths, a block < 1, a
        window < 0, ``scale <= 0``.

    Examples
    --------
    >>> import torch
    >>> from kernelkit.attention import local_attention
    >>> x = torch.randn(1, 2, 100, 16, dtype=torch.float64)
    >>> local_attention(x, x, x, block=16, window=1, is_causal=True).shape
    torch.Size([1, 2, 100, 16])
    """
    from kernelkit._attention_ops import use_triton
    from kernelkit_gpu.attention.local_naive import TRITON_BLOCKS, local_attention_naive

    settings = dict(block=block, window=window, is_causal=is_causal, scale=scale)
    if use_triton(q) and block in TRITON_BLOCKS:
        from kernelkit_gpu.attention.local import local_attention as triton_local

        return triton_local(q, k, v, **settings)
    return local_attention_naive(q, k, v, **settings)
