"""Dispatch of the attention API: each call goes to the Triton kernels or the plain-PyTorch path.

The functions here are the public :mod:`kernelkit.attention` API (re-exported there, documented
there); this module sits below both that API and the comparison tool
(:mod:`kernelkit.attention.comparison`), so neither imports the other. See
:mod:`kernelkit.attention` for which dtypes run which path, and ``backend=`` to choose it.
"""

from __future__ import annotations

from kernelkit_math import random_features as rf
from kernelkit_math.attention import causal_shift, check_window_size, resolve_is_causal
from kernelkit_math.registry import fill_doc

__all__ = ["softmax_attention", "linear_attention", "kernel_attention", "FUSED_FEATURE_MAPS",
           "BACKENDS", "use_triton", "runs_triton"]

#: Feature maps applied inside the linear-attention kernels (the registry's maps with a fused
#: code); others run as their own torch op.
FUSED_FEATURE_MAPS = rf.feature_map_names(fused=True)

#: The values of ``backend=``: "auto" picks the path (the Triton kernels where they can run),
#: "triton" the Triton kernels or an error saying why they cannot run, "torch" the plain-PyTorch
#: twin (``kernelkit_gpu.*_naive``) on any device.
BACKENDS = ("auto", "triton", "torch")


def use_triton(t):
    """Triton for the dtypes its kernels take (float16, bfloat16, float32) on CUDA tensors, and
    on CPU tensors when the interpreter is on; the plain-PyTorch path otherwise (float64 on any
    device, every dtype where triton is not installed; other dtypes get their TypeError from the
    PyTorch path's checks)."""
    import torch

    if not isinstance(t, torch.Tensor):
        raise TypeError(f"q must be a torch.Tensor of shape (B, H, T, D); got {type(t).__name__}")
    from kernelkit_gpu import checks

    return t.dtype in checks.ATTN_DTYPES and checks.triton_runs_on(t)


def _no_triton_reason(t):
    """Why the Triton kernels cannot take tensor ``t`` (dtype, device, triton missing)."""
    from kernelkit_gpu import HAS_TRITON, checks

    if not HAS_TRITON:
        return "triton is not installed"
    if t.dtype not in checks.ATTN_DTYPES:
        return f"they take float16, bfloat16 or float32 tensors, and q is {t.dtype}"
    if t.device.type == "cpu":
        return ("q is on the CPU and the Triton interpreter is off (TRITON_INTERPRET=1 set "
                "before kernelkit_gpu is imported runs them on the CPU, slowly)")
    return f"they run on CUDA devices, and q is on {t.device}"


def _check_backend(backend):
    names = ", ".join(map(repr, BACKENDS))
    if not isinstance(backend, str):
        raise TypeError(f"backend must be one of {names}; got {backend!r}")
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {names}; got {backend!r}")
    return backend


def runs_triton(backend, q, why_not=None):
    """Whether a call with ``backend`` runs the Triton kernels on ``q``.

    ``why_not``: why this call cannot run them whatever the device (a map too wide, a block size
    they lack...), or None. "auto": Triton where :func:`use_triton` and no ``why_not``; "torch":
    never; "triton": always, else a ValueError that says why not.
    """
    if _check_backend(backend) == "torch":
        return False
    can = use_triton(q)
    if backend == "auto":
        return can and why_not is None
    reason = why_not if can else _no_triton_reason(q)
    if reason is not None:
        raise ValueError(f"backend='triton' cannot run this call on the Triton kernels: {reason} "
                         "(backend='auto' runs it on the PyTorch path)")
    return True


LAYOUTS = ("bhtd", "bthd")


def _check_layout(layout):
    if not isinstance(layout, str):
        raise TypeError(f"layout must be 'bhtd' or 'bthd'; got {layout!r}")
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be 'bhtd' (B, H, T, D) or 'bthd' (B, T, H, D); got {layout!r}")
    return layout


def _to_bhtd(layout, *tensors):
    """The (B, H, T, D) views of (B, T, H, D) operands (no copy); as given for "bhtd"."""
    if layout == "bhtd":
        return tensors
    import torch

    names = ("q", "k", "v")
    for name, t in zip(names, tensors):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor of shape (B, T, H, D); got "
                            f"{type(t).__name__}")
        if t.ndim != 4:
            raise ValueError(f"{name} must have shape (B, T, H, D) with layout='bthd'; got "
                             f"{t.ndim} dimensions")
    return tuple(t.transpose(1, 2) for t in tensors)


def _from_bhtd(layout, out):
    return out if layout == "bhtd" else out.transpose(1, 2)


def _check_q_scale(scale):
    """None, or a finite number > 0 (float): the multiplier of q before a feature map / kernel."""
    if scale is None:
        return None
    import math
    import numbers

    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        raise TypeError(f"scale must be a positive number or None; got {scale!r}")
    if not math.isfinite(float(scale)) or float(scale) <= 0:
        raise ValueError(f"scale must be a finite number > 0; got {scale!r}")
    return float(scale)


def softmax_attention(q, k, v, *, is_causal=False, causal_alignment="top_left", scale=None,
                      enable_gqa=False, return_lse=False, layout="bhtd", cu_seqlens=None,
                      max_seqlen=None, backend="auto", window_size=None):
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
        in float64 on any device (it materialises the (T, S) scores). (B, T, H, D) shapes with
        ``layout="bthd"``; packed (total, H, D) shapes with ``cu_seqlens``.
    is_causal : bool
        Causal mask, aligned by ``causal_alignment``.
    causal_alignment : {"top_left", "bottom_right"}, default "top_left"
        Only read when ``is_causal`` is True or a window is given (validated always).
        ``"top_left"``: key j visible to query i iff j <= i (torch ``CausalVariant.UPPER_LEFT``,
        SDPA's ``is_causal=True``); ``"bottom_right"``: iff j <= i + S - T (torch
        ``CausalVariant.LOWER_RIGHT``, FlashAttention's alignment for decoding with a KV cache:
        the T queries are the last T of S positions). With T > S the first T - S queries see no
        key: output 0, lse -inf, no gradient through them, whatever k and v hold.
    scale : float or None
        None means 1 / sqrt(D).
    enable_gqa : bool
        Grouped-query attention: each group of H / H_kv query heads shares one k/v head.
    return_lse : bool
        Also return the natural-log log-sum-exp of the scaled scores, (B, H, T) float32.
    layout : {"bhtd", "bthd"}, default "bhtd"
        Memory order of q, k, v and out: (B, H, T, D) as ``scaled_dot_product_attention``, or
        (B, T, H, D) as FlashAttention and flash-linear-attention. The Triton kernels take
        strides, so neither layout is copied, and out is allocated contiguous in the input's
        layout. lse is (B, H, T) in both (as FlashAttention's). Not read with ``cu_seqlens``.
    cu_seqlens : torch.Tensor of shape (n_seqs + 1,), int32 or int64, optional
        Variable-length packed batch, as FlashAttention's varlen functions and
        flash-linear-attention: q (total, H, D), k (total, H_kv, D), v (total, H_kv, Dv) hold
        the sequences one after another; sequence i is the tokens
        ``cu_seqlens[i]:cu_seqlens[i + 1]`` (0 first, non-decreasing, total last; on q's
        device). Each token attends to the keys of its own sequence only (causal: the keys at or
        before its position in the sequence). Empty sequences are allowed (as in
        FlashAttention). The Triton path never reads cu_seqlens on the host before launching
        (its values are checked on the device, the flag read after the launch); the
        plain-PyTorch path loops over the sequences. One packing for queries and keys
        (self-attention), so ``causal_alignment`` makes no difference.
    max_seqlen : int, optional
        Only with ``cu_seqlens``: checked as an upper bound of the lengths; not needed.
    backend : {"auto", "triton", "torch"}, default "auto"
        Which path runs: ``"auto"`` the Triton kernels where they can run (the dtypes and devices
        above), the plain-PyTorch path otherwise; ``"triton"`` the Triton kernels, or a
        ValueError that says why they cannot run the call; ``"torch"`` the plain-PyTorch path
        (``kernelkit_gpu``'s ``*_naive`` twins) on any device and dtype.
    window_size : None or tuple (left, right) of int, default None
        Sliding-window (local) attention, FlashAttention's ``window_size``: query i sees the
        keys j with i + shift - left <= j <= i + shift + right, -1 meaning no bound on that
        side; None or (-1, -1): no window. ``shift`` is the causal mask's, from
        ``causal_alignment`` (0 ``"top_left"``, S - T ``"bottom_right"``), read with a window
        whether or not ``is_causal``; FlashAttention aligns its window bottom-right, so
        ``causal_alignment="bottom_right"`` reproduces its mask for any T and S (T == S: both
        agree). With ``is_causal`` the window stops at the causal diagonal (``right`` is 0 in
        effect, as in FlashAttention). With ``cu_seqlens`` positions count within each
        sequence. The Triton kernels visit only the key tiles of the window (cost O(T (left +
        right)) instead of O(T S)); queries whose window holds no key output 0, lse -inf.

    Returns
    -------
    out : torch.Tensor of shape (B, H, T, Dv) (layout "bthd": (B, T, H, Dv); packed:
        (total, H, Dv)), the dtype of q
    lse : torch.Tensor of shape (B, H, T) (packed: (H, total)), only with ``return_lse``;
        float32 (float64 for float64 input)

    Raises
    ------
    ValueError, TypeError
        For mismatched shapes, devices or dtypes, a head count H_kv that does not divide H,
        ``scale <= 0``, a ``causal_alignment`` other than "top_left" / "bottom_right", a
        ``layout`` other than "bhtd" / "bthd", a bad ``cu_seqlens`` (dtype, shape, device,
        not starting at 0, decreasing, not ending at total) or ``max_seqlen``, a
        ``window_size`` that is not None or a tuple of two ints >= -1, an unknown ``backend``,
        or ``backend="triton"`` where the Triton kernels cannot run.

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
    >>> packed = torch.randn(9, 2, 16)  # sequences of 4 and 5 tokens
    >>> cu = torch.tensor([0, 4, 9], dtype=torch.int32)
    >>> softmax_attention(packed, packed, packed, cu_seqlens=cu, is_causal=True).shape
    torch.Size([9, 2, 16])
    >>> softmax_attention(q, k, v, is_causal=True, window_size=(2, 0)).shape  # keys i - 2 .. i
    torch.Size([1, 2, 5, 16])
    """
    _check_layout(layout)
    check_window_size(window_size)
    if cu_seqlens is not None:
        causal_shift(is_causal, causal_alignment, 0, 0)  # validates both
        if runs_triton(backend, q):
            from kernelkit_gpu.attention.varlen import softmax_attention_varlen as vimpl
        else:
            from kernelkit_gpu.attention.varlen_naive import softmax_attention_varlen_naive as vimpl
        return vimpl(q, k, v, cu_seqlens, max_seqlen=max_seqlen, is_causal=is_causal,
                     scale=scale, enable_gqa=enable_gqa, return_lse=return_lse,
                     window_size=window_size)
    if max_seqlen is not None:
        raise ValueError("max_seqlen is only read with cu_seqlens")
    q, k, v = _to_bhtd(layout, q, k, v)
    if runs_triton(backend, q):
        from kernelkit_gpu.attention.softmax import softmax_attention as impl
    else:
        from kernelkit_gpu.attention.naive import softmax_attention_naive as impl
    res = impl(q, k, v, is_causal=is_causal, causal_alignment=causal_alignment, scale=scale,
               enable_gqa=enable_gqa, return_lse=return_lse, window_size=window_size)
    if return_lse:
        return _from_bhtd(layout, res[0]), res[1]
    return _from_bhtd(layout, res)


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


@fill_doc(fused=rf.feature_map_list_doc(fused=True),
          other=rf.feature_map_list_doc(fused=False))
def linear_attention(q, k, v, feature_map="elu+1", *, is_causal=False, causal_alignment="top_left",
                     normalize=True, eps=1e-6, initial_state=None, return_state=False, seed=0,
                     causal=None, scale=None, layout="bhtd", cu_seqlens=None, max_seqlen=None,
                     guard=None, backend="auto"):
    r"""Linear attention with the feature-map kernel phi(q)·phi(k).

    .. math::

        \mathrm{out}_t = \frac{\phi(q_t)^\top S_t}{\max(\phi(q_t)^\top z_t,\ \varepsilon)},\qquad
        S_t = S_0 + \sum_{s \in V(t)} \phi(k_s) v_s^\top,\quad
        z_t = z_0 + \sum_{s \in V(t)} \phi(k_s)

    with V(t) = {s <= t + shift} when causal (shift 0 top-left, S - T bottom-right:
    ``causal_alignment``), every key otherwise, and q_t multiplied by ``scale`` first when it is
    given.

    Parameters
    ----------
    q, k : torch.Tensor of shape (B, H, T, D) and (B, H, S, D)
    v : torch.Tensor of shape (B, H, S, Dv)
        One dtype, one device. float16, bfloat16 and float32 run the chunked Triton kernels
        (CUDA, or the CPU under ``TRITON_INTERPRET=1``; else the plain-PyTorch path) when the
        map has at most 256 features and Dv <= 256, the chunked PyTorch path otherwise; float64
        always runs the PyTorch path, in float64, on any device.
    feature_map : str or kernelkit_math.random_features.FeatureMap
        A name of the feature-map registry (:data:`kernelkit_math.random_features.FEATURE_MAPS`):
        {fused} (fused into the kernels), or {other} (M: the number of random vectors,
        ``"favor+:256"``), applied as their own torch op; or a feature-map object (seeded,
        reusable). Maps wider than the Triton kernels' limit (256 features) run through the
        chunked PyTorch path.
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
        Denominator floor: max(den, eps). With a signed map (``"identity"``, ``"rff:M"``), whose
        weights phi(q)·phi(k) can cancel, a denominator near 0 gives huge outputs: pass
        ``guard``.
    guard : float or None
        delta > 0: the denominator is also raised to delta |phi(q_t)|·sum_s |phi(k_s)| (over the
        visible keys; linear time), so |out_t| <= max |v| / delta whatever the signs
        (:data:`kernelkit.attention.comparison.methods.SIGNED_GUARD` has the values measured on
        real heads: rff 0.1, identity 0.5). Runs the plain-PyTorch path
        (:func:`kernelkit_gpu.attention.linear_naive.linear_attention_naive`); not with
        ``initial_state``. None (the default): no guard.
    initial_state : tuple (S0, z0) or None
        S0 (B, H, M, Dv) and z0 (B, H, M), float32 (float64 with float64 input): continue from
        an earlier call.
    return_state : bool
        Also return the final (S, z), float32 (float64 with float64 input), so decoding can
        continue.
    seed : int
        Seed of a random feature map given by name.
    scale : float or None
        q is multiplied by ``scale`` before the feature map: phi(scale q_t). None (the default)
        multiplies by nothing, the behaviour before ``scale`` existed. flash-linear-attention's
        ops take q already mapped and multiply *that* by ``scale`` (default 1 / sqrt(D)); with
        the ``"identity"`` map the two agree for the same ``scale``, and with ``normalize=True``
        a scale on phi(q) cancels between numerator and denominator (up to ``eps``), so fla's
        default changes nothing there. With a non-linear map (elu+1, favor+...) the scale
        changes the kernel itself, as in softmax attention.
    layout : {"bhtd", "bthd"}, default "bhtd"
        (B, H, T, D) or (B, T, H, D) operands and output, as :func:`softmax_attention`; states
        are (B, H, M, Dv) and (B, H, M) in both. The Triton kernels take strides (no copy).
        Not read with ``cu_seqlens``.
    cu_seqlens : torch.Tensor of shape (n_seqs + 1,), int32 or int64, optional
        Packed batch, as :func:`softmax_attention`: q (total, H, D), k (total, H, D), v
        (total, H, Dv); each sequence starts from its own state (``initial_state`` then holds one
        per sequence, (n_seqs, H, M, Dv) and (n_seqs, H, M), and so does the returned state).
        Empty sequences are allowed (their output has no row; their final state is their
        initial state). Runs one dense call per sequence (a host read of cu_seqlens; see Notes).
    max_seqlen : int, optional
        Only with ``cu_seqlens``: checked as an upper bound of the lengths; not needed.
    backend : {"auto", "triton", "torch"}, default "auto"
        As :func:`softmax_attention`. ``"triton"`` refuses (ValueError) maps wider than 256
        features, Dv > 256 and ``guard``, which ``"auto"`` runs on the PyTorch path.

    Returns
    -------
    out : torch.Tensor of shape (B, H, T, Dv) (layout "bthd": (B, T, H, Dv); packed:
        (total, H, Dv))
    (S, z) : the final state, only with ``return_state``

    Raises
    ------
    ValueError, TypeError
        For an unknown feature map, mismatched shapes, dtypes or devices, a bad
        ``causal_alignment``, ``scale``, ``layout``, ``cu_seqlens``, ``max_seqlen`` or
        ``backend``, or ``backend="triton"`` where the Triton kernels cannot run.

    Notes
    -----
    NaN is never hidden, and masked keys are absent: a NaN or infinity in q_t reaches output row
    t, one in k_s or v_s every row that sees key s (and the final state) and no other row, in
    the output and in the gradients, on every path, as in
    :func:`kernelkit_math.attention.linear_attention`. Rows that see no key read the initial
    state alone (0 without one, whatever q_t holds).

    With ``cu_seqlens`` the sequences run one after another, each as a dense call on its rows
    (views, no copies of q, k, v; one host read of ``cu_seqlens``): correct forward and
    backward, but not one fused launch, so many short sequences cost one launch each.

    Examples
    --------
    >>> import torch
    >>> from kernelkit.attention import linear_attention
    >>> q = k = v = torch.randn(1, 2, 7, 16)
    >>> linear_attention(q, k, v, "favor+:32", is_causal=True).shape
    torch.Size([1, 2, 7, 16])
    >>> linear_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), scale=0.25,
    ...                  layout="bthd").shape
    torch.Size([1, 7, 2, 16])
    """
    causal = resolve_is_causal(is_causal, causal, "linear_attention")
    _check_layout(layout)
    _check_backend(backend)
    scale = _check_q_scale(scale)
    if cu_seqlens is None:
        if max_seqlen is not None:
            raise ValueError("max_seqlen is only read with cu_seqlens")
        q, k, v = _to_bhtd(layout, q, k, v)
    fused, fmap = _feature_map(feature_map, q.shape[-1] if hasattr(q, "shape") else None, seed)
    triton = use_triton(q) and backend != "torch"
    if scale is not None:
        q = q * scale
    if fmap is not None:
        from kernelkit_gpu.feature_maps import apply_feature_map

        q, k = apply_feature_map(fmap, q), apply_feature_map(fmap, k)
    why_not = None
    if guard is not None:  # the guarded denominator exists in the plain-PyTorch path only
        why_not = "they have no guard (guard= runs on the PyTorch path)"
    elif triton and max(q.shape[-1], v.shape[-1]) > _triton_max_dim():
        # wide maps (taylor2 of D >= 16 has 1 + D + D² features) take the chunked torch path
        why_not = (f"they take maps of at most {_triton_max_dim()} features and Dv <= "
                   f"{_triton_max_dim()}; got {q.shape[-1]} features and Dv = {v.shape[-1]}")
    if runs_triton(backend, q, why_not):
        from kernelkit_gpu.attention.linear import linear_attention as impl
    else:
        from kernelkit_gpu.attention.linear_naive import linear_attention_naive as impl
    kwargs = dict(feature_map=fused, is_causal=causal, causal_alignment=causal_alignment,
                  normalize=normalize, eps=eps)
    if guard is not None:
        kwargs["guard"] = guard
    if cu_seqlens is not None:
        return _linear_varlen(impl, q, k, v, cu_seqlens, max_seqlen, initial_state, return_state,
                              kwargs)
    res = impl(q, k, v, initial_state=initial_state, return_state=return_state, **kwargs)
    if return_state:
        return _from_bhtd(layout, res[0]), res[1]
    return _from_bhtd(layout, res)


def _linear_varlen(impl, q, k, v, cu_seqlens, max_seqlen, initial_state, return_state, kwargs):
    """Packed linear attention: ``impl`` (a dense linear attention) on each sequence's rows."""
    import torch
    from kernelkit_gpu.attention import varlen_naive as VN

    causal_shift(kwargs["is_causal"], kwargs["causal_alignment"], 0, 0)  # validates both
    total = VN.check_packed(q, k, v)
    n_seqs = VN.check_cu_seqlens(cu_seqlens, q.device, max_seqlen)
    if initial_state is not None:
        if not (isinstance(initial_state, (tuple, list)) and len(initial_state) == 2
                and all(isinstance(t, torch.Tensor) and t.ndim >= 1 and t.shape[0] == n_seqs
                        for t in initial_state)):
            raise ValueError("with cu_seqlens, initial_state must be (S0, z0) with one state per "
                             f"sequence: shapes (n_seqs={n_seqs}, H, M, Dv) and (n_seqs, H, M)")

    def one(i, qb, kb, vb):
        state = None if initial_state is None else tuple(t[i:i + 1] for t in initial_state)
        return impl(qb, kb, vb, initial_state=state, return_state=True, **kwargs)

    parts = VN.per_sequence(one, cu_seqlens, total, max_seqlen, q, k, v)
    out = torch.cat([VN.to_packed(o) for o, _ in parts], 0)
    if not return_state:
        return out
    return out, (torch.cat([s for _, (s, _) in parts], 0), torch.cat([z for _, (_, z) in parts], 0))


def kernel_attention(q, k, v, kernel, *, is_causal=False, causal_alignment="top_left", eps=1e-6,
                     enable_gqa=False, scale=None, layout="bhtd", backend="auto", **params):
    r"""The exact kernel smoother for a kernelkit kernel.

    .. math::

        \mathrm{out}_i = \frac{\sum_j k(s\,q_i, k_j)\, v_j}{\max\left(\sum_j k(s\,q_i, k_j),\ \varepsilon\right)}

    with s = ``scale`` (1 by default).

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
    scale : float or None
        q is multiplied by ``scale`` before the kernel (as SDPA's scale multiplies q·k). None:
        no multiplier (the behaviour before ``scale`` existed). For ``"exponential"`` given by
        name, ``scale`` is that kernel's own parameter, the same thing: exp(scale q·k), default
        1 / sqrt(D) as SDPA. With an ``Exponential`` object the two multiply.
    layout : {"bhtd", "bthd"}, default "bhtd"
        (B, H, T, D) or (B, T, H, D) operands and output, as :func:`softmax_attention` (the
        smoother's preparation copies its operands in either layout).
    backend : {"auto", "triton", "torch"}, default "auto"
        As :func:`softmax_attention`.
    **params
        The kernel's registry parameters when ``kernel`` is a name; none with a kernel object.

    Returns
    -------
    torch.Tensor of shape (B, H, T, Dv) (layout "bthd": (B, T, H, Dv))

    Raises
    ------
    TypeError
        If ``kernel`` is neither a registry name nor a kernelkit kernel object, or parameters
        are given with a kernel object (they belong in its constructor).
    ValueError
        For an unknown kernel name, a parameter out of range, a bad ``causal_alignment``,
        ``scale``, ``layout`` or ``backend``, ``backend="triton"`` where the Triton kernels
        cannot run, or NaN or infinity in q, k or v.

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

    _check_layout(layout)
    scale = _check_q_scale(scale)
    q, k, v = _to_bhtd(layout, q, k, v)
    triton = runs_triton(backend, q)
    if isinstance(kernel, str) and kernel.strip() == "exponential" and scale is not None:
        params["scale"], scale = scale, None  # that kernel's own parameter (docstring)
    if scale is not None:
        q = q * scale
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
    if triton:
        from kernelkit_gpu.attention.smoother import kernel_attention as impl
    else:
        from kernelkit_gpu.attention.naive import kernel_attention_naive as impl
    return _from_bhtd(layout, impl(q, k, v, name, is_causal=is_causal,
                                   causal_alignment=causal_alignment, eps=eps,
                                   enable_gqa=enable_gqa, **params))
