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
- :func:`gated_linear_attention`: causal linear attention whose state forgets (RetNet's decay,
  Mamba2's and GLA's data-dependent gates); with a decay alone, the dot-product kernel times an
  exponential kernel in position (Triton kernels with backend="triton").

Shapes follow one legend: q (B, H, T, D), k (B, H_kv, S, D), v (B, H_kv, S, Dv), the layout of
``torch.nn.functional.scaled_dot_product_attention``. Everything is differentiable with torch
autograd. The same interface in all three functions:

- ``layout="bthd"`` takes and returns (B, T, H, D) tensors (FlashAttention's and
  flash-linear-attention's layout) instead; the Triton kernels read them through their strides
  (no copy). lse and recurrent states keep their (B, H, ...) shapes.
- ``scale=`` multiplies q before the score, feature map or kernel: SDPA's scale for softmax
  attention (default 1 / sqrt(D)); phi(scale q) for linear attention and k(scale q, k) for
  kernel attention (default: no multiplier, as before the argument existed).
- ``cu_seqlens=`` (softmax and linear attention): a variable-length packed batch, q, k, v of
  shape (total_tokens, H, D) and int32 / int64 cumulative lengths (n_seqs + 1,), as
  FlashAttention's varlen functions and flash-linear-attention; each token attends within its
  own sequence. Softmax runs one Triton launch over all sequences (forward and backward);
  linear attention runs one dense call per sequence.
- ``window_size=(left, right)`` (softmax attention): FlashAttention's sliding window, query i
  seeing keys i + shift - left .. i + shift + right (shift from ``causal_alignment``); the
  Triton kernels visit only the window's key tiles.

Which path runs (``backend="auto"``, the default): float16, bfloat16 and float32 tensors run the
Triton kernels on CUDA, and on the CPU when ``TRITON_INTERPRET=1`` was set before import (the
interpreter), else the plain-PyTorch path (``kernelkit_gpu.*_naive``). float64 tensors always run
the plain-PyTorch path, in float64, on their device (CPU or CUDA): the Triton kernels take 16- and
32-bit floats only. ``backend="torch"`` runs the plain-PyTorch path on any device;
``backend="triton"`` runs the Triton kernels or raises a ValueError that says why they cannot.
Float64 references live in :mod:`kernelkit_math.attention`.

:func:`compare` and :func:`sweep` (the comparison tool, :mod:`kernelkit.attention.comparison`)
measure how far and how fast the approximations are against softmax; they run the methods
through the functions above, and load on first use.

Masked keys are absent, on every path: a causal mask or a window leaves the keys a query may
not see out of its sums (not weighted by 0), so a NaN or infinity in a key or value reaches
exactly the rows that see it (and their gradients), and rows that see no key output 0 (the rule of
:mod:`kernelkit_math.attention`; :func:`kernel_attention` refuses non-finite input).
"""

from __future__ import annotations

from kernelkit.attention._dispatch import (
    BACKENDS,
    FUSED_FEATURE_MAPS,
    kernel_attention,
    linear_attention,
    softmax_attention,
)
from kernelkit.attention.gated import gated_linear_attention

__all__ = ["softmax_attention", "linear_attention", "kernel_attention", "gated_linear_attention",
           "FUSED_FEATURE_MAPS", "BACKENDS", "compare", "sweep"]


def compare(*args, **kwargs):
    """Errors, speed and memory of attention methods against softmax on given q, k, v.

    The same as :func:`kernelkit.attention.comparison.compare` (defined in
    :mod:`kernelkit.attention.comparison.accuracy`; see there for the parameters); loads the
    comparison tool on first use.

    Examples
    --------
    >>> import numpy as np
    >>> from kernelkit.attention import compare
    >>> q = k = v = np.random.default_rng(0).standard_normal((16, 8))
    >>> compare(q, k, v, ["softmax", "elu+1"], measure=False).rows[1]["method"]
    'elu+1'
    """
    from kernelkit.attention.comparison import compare as impl

    return impl(*args, **kwargs)


def sweep(*args, **kwargs):
    """Time and peak memory of attention methods against sequence length, with crossovers.

    The same as :func:`kernelkit.attention.comparison.sweep` (defined in
    :mod:`kernelkit.attention.comparison.sweeps`; see there for the parameters); loads the
    comparison tool on first use.
    """
    from kernelkit.attention.comparison import sweep as impl

    return impl(*args, **kwargs)


# ----------------------------------------------------------------- local + summary attention
from kernelkit.attention.local import local_attention  # noqa: E402 - a block of its own

__all__ += ["local_attention"]
