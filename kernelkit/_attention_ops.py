"""Dispatch of the attention API: each call goes to the Triton kernels or the plain-PyTorch path.

The functions here are the public :mod:`kernelkit.attention` API (re-exported there, documented
there); this module sits below both that API and the comparison tool (:mod:`kernelkit.compare`),
so neither imports the other. See :mod:`kernelkit.attention` for which dtypes run which path.
"""

from __future__ import annotations

from kernelkit_math.attention import resolve_is_causal

__all__ = ["softmax_attention", "linear_attention", "kernel_attention", "FUSED_FEATURE_MAPS",
           "use_triton"]

#: Feature maps applied inside the linear-attention kernels; others run as their own torch op.
FUSED_FEATURE_MAPS = ("identity", "elu+1", "relu")


def use_triton(t):
    """Triton for the dtypes its kernels take (float16, bfloat16, float32) on CUDA tensors, and
    on CPU tensors when the interpreter is on; the plain-PyTorch path otherwise (float64 on any
    device, every dtype where triton is not installed; other dtypes get their TypeError from the
    PyTorch path's checks)."""
    import torch

    if not isinstance(t, torch.Tensor):
        raise TypeError(f"q must be a torch.Tensor of shape (B, H, T, D); got {type(t).__name__}")
    from kernelkit_gpu import _checks, _launch  # the interpreter flag as read at import

    if t.dtype not in _checks.ATTN_DTYPES:
        return False
    return (t.is_cuda and _launch.HAS_TRITON) or _launch.INTERPRET


def softmax_attention(q, k, v, *, is_causal=False, causal_alignment="top_left", scale=None,
                      enable_gqa=False, return_lse=False):
    r"""Softmax attention, ``scaled_dot_product_attention``'s signature where they overlap.

    .. math::

        \mathrm{out} = \mathrm{softmax}(\text{scale}\; q k^\top + \text{mask})\, v

    Parameters
    ----------
    q : torch.Tensor of shape (B, H, T, D)
    k : torch.Tensor of shape (B, H_kv, S, D)
    v : torch.Tensor of shape (B, H_kv, S, Dv)
        One dtype, one device; H_kv == H, or divides H with ``enable_gqa``. float16, bfloat16
        and float32 run the FlashAttention-style Triton kernels (CUDA, or the CPU under
        ``TRITON_INTERPRET=1``; else the plain-PyTorch path); float64 runs the plain-PyTorch path
        in float64 on any device (it materialises the (T, S) scores).
    is_causal : bool
        Causal mask, aligned by ``causal_alignment``.
    causal_alignment : {"top_left", "bottom_right"}, default "top_left"
        Only read when ``is_causal`` is True (validated always). ``"top_left"``: key j visible
        to query i iff j <= i (torch ``CausalVariant.UPPER_LEFT``, SDPA's ``is_causal=True``);
        ``"bottom_right"``: iff j <= i + S - T (torch ``CausalVariant.LOWER_RIGHT``,
        FlashAttention's alignment for decoding with a KV cache: the T queries are the last T of
        S positions). With T > S the first T - S queries see no key: output 0, lse -inf, no
        gradient through them, whatever k and v hold.
    scale : float or None
        None means 1 / sqrt(D).
    enable_gqa : bool
        Grouped-query attention: each group of H / H_kv query heads shares one k/v head.
    return_lse : bool
        Also return the natural-log log-sum-exp of the scaled scores, (B, H, T) float32.

    Returns
    -------
    out : torch.Tensor of shape (B, H, T, Dv), the dtype of q
    lse : torch.Tensor of shape (B, H, T), only with ``return_lse``; float32 (float64 for
        float64 input)

    Raises
    ------
    ValueError, TypeError
        For mismatched shapes, devices or dtypes, a head count H_kv that does not divide H,
        ``scale <= 0``, or a ``causal_alignment`` other than "top_left" / "bottom_right".

    Notes
    -----
    Masked keys are absent, not weighted by 0, on every path (the rule of
    :mod:`kernelkit_math.attention`): a NaN or infinity in v_j, k_j or q_i reaches exactly the
    outputs and gradients of a row-by-row computation over the visible keys.

    Examples
    --------
    >>> import torch
    >>> from kernelkit.attention import softmax_attention
    >>> q = k = v = torch.randn(1, 2, 5, 16)
    >>> softmax_attention(q, k, v, is_causal=True).shape
    torch.Size([1, 2, 5, 16])
    """
    if use_triton(q):
        from kernelkit_gpu.attention.softmax import softmax_attention as impl
    else:
        from kernelkit_gpu.attention.naive import softmax_attention_naive as impl
    return impl(q, k, v, is_causal=is_causal, causal_alignment=causal_alignment, scale=scale,
                enable_gqa=enable_gqa, return_lse=return_lse)


def _feature_map(feature_map, d, seed):
    """(name of a fused map or None, feature-map object or None)."""
    from kernelkit_math.random_features import FeatureMap, make_feature_map

    if isinstance(feature_map, str) and feature_map.strip() in FUSED_FEATURE_MAPS:
        return feature_map.strip(), None
    if isinstance(feature_map, FeatureMap):
        return None, feature_map
    if isinstance(feature_map, str):
        return None, make_feature_map(feature_map, d, seed=seed)
    raise TypeError(
        "feature_map must be a name ('elu+1', 'favor+:256', 'rff:512'...) or a "
        f"kernelkit_math.random_features.FeatureMap; got {feature_map!r}"
    )


def _triton_max_dim():
    from kernelkit_gpu.attention.linear import MAX_DIM

    return MAX_DIM


def linear_attention(q, k, v, feature_map="elu+1", *, is_causal=False, causal_alignment="top_left",
                     normalize=True, eps=1e-6, initial_state=None, return_state=False, seed=0,
                     causal=None):
    r"""Linear attention with the feature-map kernel phi(q)·phi(k).

    .. math::

        \mathrm{out}_t = \frac{\phi(q_t)^\top S_t}{\max(\phi(q_t)^\top z_t,\ \varepsilon)},\qquad
        S_t = S_0 + \sum_{s \in V(t)} \phi(k_s) v_s^\top,\quad
        z_t = z_0 + \sum_{s \in V(t)} \phi(k_s)

    with V(t) = {s <= t + shift} when causal (shift 0 top-left, S - T bottom-right:
    ``causal_alignment``), every key otherwise.

    Parameters
    ----------
    q, k : torch.Tensor of shape (B, H, T, D) and (B, H, S, D)
    v : torch.Tensor of shape (B, H, S, Dv)
        One dtype, one device. float16, bfloat16 and float32 run the chunked Triton kernels
        (CUDA, or the CPU under ``TRITON_INTERPRET=1``; else the plain-PyTorch path) when the
        map has at most 256 features and Dv <= 256, the chunked PyTorch path otherwise; float64
        always runs the PyTorch path, in float64, on any device.
    feature_map : str or kernelkit_math.random_features.FeatureMap
        ``"identity"``, ``"elu+1"``, ``"relu"`` (fused into the kernels), a random map with its
        size (``"favor+:256"``, ``"favor+orth:256"``, ``"hyp-favor+:128"``, ``"rff:512"``),
        ``"taylor2"``, or a feature-map object (seeded, reusable). Maps wider than the Triton
        kernels' limit (256 features) run through the chunked PyTorch path.
    is_causal : bool
        Causal mask, aligned by ``causal_alignment``.
        ``causal`` is the deprecated name of ``is_causal`` (FutureWarning).
    causal_alignment : {"top_left", "bottom_right"}, default "top_left"
        Only read when ``is_causal`` is True (validated always). ``"top_left"``: key j visible
        to query i iff j <= i (torch ``CausalVariant.UPPER_LEFT``, SDPA's ``is_causal=True``);
        ``"bottom_right"``: iff j <= i + S - T (torch ``CausalVariant.LOWER_RIGHT``,
        FlashAttention's alignment for decoding with a KV cache: the T queries are the last T of
        S positions). With T > S the first T - S queries see no key and read the
        initial state alone (output 0 without one).

    normalize : bool
        Divide by the guarded denominator; False returns the numerator.
    eps : float
        Denominator guard: max(den, eps).
    initial_state : tuple (S0, z0) or None
        S0 (B, H, M, Dv) and z0 (B, H, M), float32 (float64 with float64 input): continue from
        an earlier call.
    return_state : bool
        Also return the final (S, z), float32 (float64 with float64 input), so decoding can
        continue.
    seed : int
        Seed of a random feature map given by name.

    Returns
    -------
    out : torch.Tensor of shape (B, H, T, Dv)
    (S, z) : the final state, only with ``return_state``

    Raises
    ------
    ValueError, TypeError
        For an unknown feature map, mismatched shapes, dtypes or devices, a bad
        ``causal_alignment``.

    Notes
    -----
    NaN is never hidden, and masked keys are absent: a NaN or infinity in q_t reaches output row
    t, one in k_s or v_s every row that sees key s (and the final state) and no other row, in
    the output and in the gradients, on every path, as in
    :func:`kernelkit_math.attention.linear_attention`. Rows that see no key read the initial
    state alone (0 without one, whatever q_t holds).

    Examples
    --------
    >>> import torch
    >>> from kernelkit.attention import linear_attention
    >>> q = k = v = torch.randn(1, 2, 7, 16)
    >>> linear_attention(q, k, v, "favor+:32", is_causal=True).shape
    torch.Size([1, 2, 7, 16])
    """
    causal = resolve_is_causal(is_causal, causal, "linear_attention")
    fused, fmap = _feature_map(feature_map, q.shape[-1] if hasattr(q, "shape") else None, seed)
    triton = use_triton(q)
    if fmap is not None:
        from kernelkit_gpu.feature_maps import apply_feature_map

        q, k = apply_feature_map(fmap, q), apply_feature_map(fmap, k)
    if triton and max(q.shape[-1], v.shape[-1]) <= _triton_max_dim():
        from kernelkit_gpu.attention.linear import linear_attention as impl
    else:  # wide maps (taylor2 of D >= 16 has 1 + D + D² features) take the chunked torch path
        from kernelkit_gpu.attention.linear_naive import linear_attention_naive as impl
    return impl(q, k, v, feature_map=fused, is_causal=causal, causal_alignment=causal_alignment,
                normalize=normalize, eps=eps, initial_state=initial_state,
                return_state=return_state)


def kernel_attention(q, k, v, kernel, *, is_causal=False, causal_alignment="top_left", eps=1e-6,
                     enable_gqa=False, **params):
    r"""The exact kernel smoother for a kernelkit kernel.

    .. math::

        \mathrm{out}_i = \frac{\sum_j k(q_i, k_j)\, v_j}{\max\left(\sum_j k(q_i, k_j),\ \varepsilon\right)}

    Parameters
    ----------
    q, k, v : torch.Tensor
        Shapes as :func:`softmax_attention`. float16, bfloat16 and float32 run the Triton kernel
        (CUDA, or the CPU under ``TRITON_INTERPRET=1``; else the plain-PyTorch path); float64
        runs the plain-PyTorch path in float64 on any device.
    kernel : str or kernelkit kernel object
        A registry name (``"rbf"``, ``"polynomial"``...) with its parameters in ``**params``
        (registry names: ``gamma``, ``degree``...), or a kernel object such as
        ``kernelkit.RBF(length_scale=4.0)`` whose parameters are converted to the registry's
        (for RBF, gamma = 1 / (2 length_scale²)). ``"exponential"`` / ``kernelkit.Exponential``
        with scale s is softmax attention with that scale.
    is_causal, causal_alignment, enable_gqa
        As :func:`softmax_attention`; rows without a visible key output 0. q, k and v must be
        finite (ValueError otherwise): the operands are prepared as for a Gram matrix
        (centring over all rows), where one NaN would spread to unrelated rows.
    eps : float
        Denominator guard for kernels whose weights can sum to <= 0 (polynomial, sigmoid).
    **params
        The kernel's registry parameters when ``kernel`` is a name; none with a kernel object.

    Returns
    -------
    torch.Tensor of shape (B, H, T, Dv)

    Raises
    ------
    TypeError
        If ``kernel`` is neither a registry name nor a kernelkit kernel object, or parameters
        are given with a kernel object (they belong in its constructor).
    ValueError
        For an unknown kernel name, a parameter out of range, a bad ``causal_alignment``, or
        NaN or infinity in q, k or v.

    Examples
    --------
    >>> import torch, kernelkit
    >>> from kernelkit.attention import kernel_attention
    >>> q = k = v = torch.randn(1, 2, 6, 8)
    >>> kernel_attention(q, k, v, kernelkit.RBF(length_scale=3.0)).shape
    torch.Size([1, 2, 6, 8])
    >>> kernel_attention(q, k, v, "rbf", gamma=0.05).shape
    torch.Size([1, 2, 6, 8])
    """
    from kernelkit.kernels import KERNEL_CLASSES

    if isinstance(kernel, str):
        name = kernel
    elif isinstance(kernel, tuple(KERNEL_CLASSES.values())):
        if params:
            raise TypeError(
                f"kernel_attention: parameters {sorted(params)} given with the kernel object "
                f"{kernel!r}; set them in its constructor")
        params = kernel._registry_params(q.shape[-1])
        name = kernel._spec.name
    else:
        raise TypeError(
            "kernel must be a registry name ('rbf', 'polynomial'...) or a kernelkit kernel object "
            f"such as kernelkit.RBF(length_scale=2.0); got {kernel!r}"
        )
    if use_triton(q):
        from kernelkit_gpu.attention.smoother import kernel_attention as impl
    else:
        from kernelkit_gpu.attention.naive import kernel_attention_naive as impl
    return impl(q, k, v, name, is_causal=is_causal, causal_alignment=causal_alignment, eps=eps,
                enable_gqa=enable_gqa, **params)
