r"""Float64 reference attention: attention as a kernel smoother.

Attention is a Nadaraya–Watson kernel smoother over the keys:

.. math::

    \text{out}_i = \frac{\sum_{j \in V(i)} k(q_i, k_j)\, v_j}{\sum_{j \in V(i)} k(q_i, k_j)}

Softmax attention is the exponential kernel k(q, k) = exp(scale q·k); linear attention uses a
feature-map kernel phi(q)·phi(k), which can be summed as a running state. These functions are the
references the GPU kernels in ``kernelkit_gpu`` are tested against; they favour clarity over
speed.

Shapes use one legend: B batch, H heads, T query length, S key length, D head dim, Dv value dim,
M feature size. ``q`` is (..., T, D), ``k`` is (..., S, D), ``v`` is (..., S, Dv); leading batch
dims broadcast. Inputs are converted to float64 and never modified.

Conventions
-----------
Causal mask
    Two alignments, chosen with ``causal_alignment`` (resolved by :func:`causal_shift`); both
    are ``mask[i, j] = j <= i + shift`` (:func:`causal_mask`).

    ``"top_left"`` (the default; torch's ``CausalVariant.UPPER_LEFT``, as
    ``torch.nn.functional.scaled_dot_product_attention(is_causal=True)``): shift 0, key j is
    visible to query i iff ``j <= i`` (``torch.ones(T, S).tril()``), whatever T and S are. With
    T > S the queries i >= S see every key; with T < S the last S - T keys are seen by no query.

    ``"bottom_right"`` (torch's ``CausalVariant.LOWER_RIGHT``, FlashAttention's convention for
    decoding with a KV cache: the T queries are the last T of S positions): shift S - T, key j
    visible to query i iff ``j <= i + S - T``. The last query sees every key. With T > S the
    first T - S queries see no key.

    With T == S the two coincide. A row with no visible key (bottom-right with T > S, or S = 0)
    outputs 0 (lse = -inf for softmax attention, FlashAttention's convention), never NaN.
Sliding window (softmax attention)
    ``window_size=(left, right)``, FlashAttention's local attention: key j is visible to query i
    iff ``i + shift - left <= j <= i + shift + right``, -1 meaning no bound on that side, with
    the same ``shift`` as the causal mask (``causal_alignment``: 0 top-left, S - T
    bottom-right), read whether or not the call is causal. With ``is_causal`` the window is
    also cut at the causal diagonal, so ``right`` is 0 in effect (as FlashAttention, which sets
    it to 0). FlashAttention aligns both masks bottom-right: its ``window_size`` is
    ``causal_alignment="bottom_right"`` here. Both bounds together form a band
    ``i + lower <= j <= i + upper`` (:func:`mask_band`, :func:`band_mask`).
Masked keys are absent
    A query row's output depends only on the keys and values it is allowed to see: a masked
    position (a key after the causal diagonal) is left out of the sums, not multiplied by a
    zero weight. So a NaN or infinity in v_j (or k_j) reaches exactly the rows that see key j,
    with IEEE semantics as in a computation row by row (0 * inf, inf - inf and NaN give NaN);
    rows that see no key output 0 whatever the keys and values hold. Every implementation
    follows this rule, outputs and gradients: the PyTorch twins compute it directly; the Triton
    paths of ``kernelkit_gpu`` check causal calls for non-finite inputs and run the twin when
    they hold one (:mod:`kernelkit_gpu.attention.gate`).
Grouped-query attention (GQA)
    If k or v has fewer heads (axis -3) than q and that number divides H, each k/v head serves
    H / H_kv consecutive query heads (:func:`repeat_kv`, as ``enable_gqa=True`` in PyTorch).
Denominator guard
    Wherever weights may be <= 0 the denominator is replaced by ``max(den, eps)``
    (:func:`guard_denominator`); a row whose guarded denominator is exactly 0 outputs 0.
    Linear attention with a signed feature map (identity, rff) can also take ``guard=delta``:
    ``max(den, delta * |phi(q_i)| . sum_j |phi(k_j)|)``, which bounds every output by
    ``max |v| / delta`` (see :func:`linear_attention`).
"""

from __future__ import annotations

import numbers
import warnings

import numpy as np

from kernelkit_math.random_features import FeatureMap, _make, feature_map_list_doc
from kernelkit_math.registry import fill_doc

__all__ = [
    "repeat_kv",
    "causal_mask",
    "causal_shift",
    "check_window_size",
    "mask_band",
    "band_mask",
    "CAUSAL_ALIGNMENTS",
    "resolve_is_causal",
    "guard_denominator",
    "kernel_smoother",
    "softmax_attention",
    "linear_attention",
]


# ---------------------------------------------------------------------------------- helpers
def repeat_kv(k, n_rep):
    """Repeat each key/value head ``n_rep`` times along axis -3 (grouped-query attention).

    Head h of the output is head ``h // n_rep`` of the input, as ``torch.repeat_interleave`` and
    ``scaled_dot_product_attention(enable_gqa=True)``.

    Parameters
    ----------
    k : array_like, shape (..., H_kv, S, D)
    n_rep : int
        Positive number of query heads per key/value head.

    Returns
    -------
    ndarray, shape (..., H_kv * n_rep, S, D)
        ``k`` itself (as an array, not copied) when ``n_rep == 1``.

    Raises
    ------
    ValueError
        If ``k`` has fewer than 3 dimensions or ``n_rep`` is not a positive integer.
    """
    k = np.asarray(k)
    if isinstance(n_rep, bool) or not isinstance(n_rep, numbers.Integral) or n_rep < 1:
        raise ValueError(f"n_rep must be a positive integer; got {n_rep!r}")
    if k.ndim < 3:
        raise ValueError(f"k must have a heads axis (..., H_kv, S, D); got shape {k.shape}")
    return k if n_rep == 1 else np.repeat(k, int(n_rep), axis=-3)


def resolve_is_causal(is_causal, causal, function):
    """The causal switch of an attention function: ``is_causal``, or its old name ``is_causal``.

    ``causal`` (None when not given) is the deprecated spelling; when given it wins, with a
    FutureWarning. One name across kernelkit's attention API, as torch's
    ``scaled_dot_product_attention``.
    """
    if causal is None:
        return is_causal
    warnings.warn(
        f"{function}(causal=...) is deprecated and will be removed; use is_causal=... (the name "
        "torch.nn.functional.scaled_dot_product_attention uses)", FutureWarning, stacklevel=3)
    return causal


def causal_mask(T, S, shift=0):
    """Causal mask, bool (T, S): ``mask[i, j] = j <= i + shift``.

    ``shift = 0`` (the default) is the top-left alignment of
    ``scaled_dot_product_attention(is_causal=True)`` (``torch.ones(T, S).tril()``); ``shift =
    S - T`` the bottom-right alignment of decoding with a KV cache (:func:`causal_shift`).

    Parameters
    ----------
    T, S : int
        Query and key lengths.
    shift : int
        Diagonal offset; negative values hide key 0 from the first ``-shift`` queries.

    Returns
    -------
    ndarray of bool, shape (T, S)

    Examples
    --------
    >>> causal_mask(2, 3, shift=1).astype(int).tolist()
    [[1, 1, 0], [1, 1, 1]]
    """
    return np.tri(T, S, k=shift, dtype=bool)


#: The values of ``causal_alignment`` (torch's ``CausalVariant.UPPER_LEFT`` / ``LOWER_RIGHT``).
CAUSAL_ALIGNMENTS = ("top_left", "bottom_right")


def causal_shift(is_causal, causal_alignment, T, S):
    """The diagonal shift of a causal mask ``j <= i + shift``, or None when not causal.

    Every attention function of kernelkit (references, PyTorch twins, Triton kernels) resolves
    its ``causal_alignment`` here.

    Parameters
    ----------
    is_causal : bool
    causal_alignment : {"top_left", "bottom_right"}
        Validated even when ``is_causal`` is False. ``"top_left"``: shift 0 (torch
        ``CausalVariant.UPPER_LEFT``, SDPA's ``is_causal=True``); ``"bottom_right"``: shift
        ``S - T`` (``CausalVariant.LOWER_RIGHT``, FlashAttention's KV-cache decoding).
    T, S : int
        Query and key lengths.

    Returns
    -------
    int or None
        0 or ``S - T`` (negative when T > S), None when ``is_causal`` is False.

    Raises
    ------
    TypeError
        ``causal_alignment`` is not a string.
    ValueError
        ``causal_alignment`` is not one of :data:`CAUSAL_ALIGNMENTS`.

    Examples
    --------
    >>> causal_shift(True, "bottom_right", 2, 5), causal_shift(True, "top_left", 2, 5)
    (3, 0)
    >>> causal_shift(False, "bottom_right", 2, 5) is None
    True
    """
    if not isinstance(causal_alignment, str):
        raise TypeError(f"causal_alignment must be 'top_left' or 'bottom_right' (a string); got "
                        f"{causal_alignment!r}")
    if causal_alignment not in CAUSAL_ALIGNMENTS:
        raise ValueError(f"causal_alignment must be 'top_left' or 'bottom_right'; got "
                         f"{causal_alignment!r}")
    if not is_causal:
        return None
    return 0 if causal_alignment == "top_left" else int(S) - int(T)


def check_window_size(window_size):
    """Validate a sliding window: None, or ``(left, right)`` of two ints >= -1.

    Parameters
    ----------
    window_size : None or tuple (left, right) of int
        FlashAttention's ``window_size``: keys at most ``left`` positions before and ``right``
        after the query's (aligned) position; -1: no bound on that side. A list is taken too.

    Returns
    -------
    tuple (left, right) of int, or None
        None when the window bounds nothing (None or ``(-1, -1)``, FlashAttention's default).

    Raises
    ------
    TypeError
        Not None and not a tuple / list, or an entry that is not an int (bool included).
    ValueError
        Not two entries, or an entry below -1.

    Examples
    --------
    >>> check_window_size((128, 0)), check_window_size((-1, -1)), check_window_size(None)
    ((128, 0), None, None)
    """
    if window_size is None:
        return None
    if not isinstance(window_size, (tuple, list)):
        raise TypeError("window_size must be None or a tuple (left, right) of two ints >= -1; "
                        f"got {window_size!r}")
    if len(window_size) != 2:
        raise ValueError("window_size must be a tuple (left, right) of two ints >= -1; got "
                         f"{len(window_size)} entries: {tuple(window_size)!r}")
    for side, w in zip(("left", "right"), window_size):
        if isinstance(w, bool) or not isinstance(w, numbers.Integral):
            raise TypeError(f"window_size must hold two ints >= -1; its {side} entry is {w!r}")
        if w < -1:
            raise ValueError(f"window_size entries must be >= -1 (-1: no bound on that side); its "
                             f"{side} entry is {w}")
    left, right = int(window_size[0]), int(window_size[1])
    return None if (left, right) == (-1, -1) else (left, right)


def mask_band(is_causal, causal_alignment, window_size, T, S):
    """The visible band of a causal mask and / or a sliding window: ``(lower, upper)``.

    Key j is visible to query i iff ``i + lower <= j <= i + upper`` (and 0 <= j < S); a side
    that is None has no bound. ``shift`` is the alignment's (0 ``"top_left"``, S - T
    ``"bottom_right"``: :func:`causal_shift`); ``upper`` is ``shift`` with ``is_causal``, else
    ``shift + right`` when the window has a right bound; ``lower`` is ``shift - left`` when the
    window has a left bound. With ``is_causal`` and a window, ``right`` is cut to 0 (the causal
    diagonal), as FlashAttention does.

    Parameters
    ----------
    is_causal : bool
    causal_alignment : {"top_left", "bottom_right"}
        Validated always; read with ``is_causal`` or a window.
    window_size : None or tuple (left, right) of int
        :func:`check_window_size`.
    T, S : int
        Query and key lengths.

    Returns
    -------
    (lower, upper) : int or None each
        Both None: every key is visible.

    Examples
    --------
    >>> mask_band(True, "top_left", None, 4, 4), mask_band(False, "top_left", (2, 1), 4, 4)
    ((None, 0), (-2, 1))
    >>> mask_band(True, "bottom_right", (3, 5), 2, 6)  # causal: the right edge is the diagonal
    (1, 4)
    """
    window = check_window_size(window_size)
    causal = causal_shift(is_causal, causal_alignment, T, S)
    shift = causal_shift(True, causal_alignment, T, S)
    lower = upper = None
    if window is not None:
        left, right = window
        lower = None if left < 0 else shift - left
        upper = None if right < 0 else shift + right
    if causal is not None:
        upper = causal if upper is None else min(upper, causal)
    return lower, upper


def band_mask(T, S, lower=None, upper=None):
    """The bool (T, S) mask of a band: ``mask[i, j] = i + lower <= j <= i + upper``.

    A bound that is None is absent; ``band_mask(T, S, None, shift) == causal_mask(T, S, shift)``.

    Examples
    --------
    >>> band_mask(3, 4, -1, 0).astype(int).tolist()
    [[1, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 0]]
    """
    d = np.arange(S)[None, :] - np.arange(T)[:, None]  # j - i
    mask = np.ones((T, S), dtype=bool)
    if lower is not None:
        mask &= d >= lower
    if upper is not None:
        mask &= d <= upper
    return mask


def guard_denominator(den, eps):
    r"""The denominator guard of attention with possibly non-positive weights.

    .. math::

        \text{den}_\text{guarded} = \max(\text{den}, \varepsilon)

    With ``eps > 0`` the result is always >= eps, so ``num / den_guarded`` is finite; a zero or
    negative denominator (ReLU features that all vanish, a polynomial or sigmoid kernel with
    negative weights, a row that sees no key) becomes ``eps``. With ``eps = 0`` a denominator
    <= 0 becomes 0, and the callers here output 0 for such rows (a 0 / 0 := 0 convention) instead
    of inf or NaN. GPU kernels implement the same ``max``.

    Parameters
    ----------
    den : array_like
    eps : float
        Non-negative floor.

    Returns
    -------
    ndarray (float64), same shape as ``den``.
    """
    return np.maximum(np.asarray(den, dtype=np.float64), float(eps))


def _safe_divide(num, den_guarded):
    """num / den[..., None], 0 where the (guarded) denominator is 0; NaN propagates."""
    den = den_guarded[..., None]
    out = np.zeros(np.broadcast_shapes(num.shape, den.shape))
    np.divide(num, den, out=out, where=den != 0)
    return out


def _visible_sum(w, v, visible):
    """sum_j w_ij v_j over the visible (i, j) only: (..., T, S) x (..., S, Dv) -> (..., T, Dv).

    A masked pair contributes nothing, whatever ``w_ij`` and ``v_j`` hold: ``w @ v`` would add
    0 * inf = NaN for a non-finite ``v_j`` a row does not see. ``visible`` (T, S) bool, or None
    (every key visible).
    """
    if visible is None:
        return w @ v
    w = np.where(visible, w, 0.0)
    if np.isfinite(v).all():  # every masked term is 0 * finite = 0: w @ v is the masked sum
        return w @ v
    terms = np.where(visible[:, :, None], w[..., :, :, None] * v[..., None, :, :], 0.0)
    return terms.sum(axis=-2)


def _as_array(x, name, min_ndim=2):
    arr = np.asarray(x)
    if arr.dtype.kind not in "iuf":
        raise TypeError(f"{name} must be a real numeric array; got dtype {arr.dtype}")
    if arr.ndim < min_ndim:
        raise ValueError(f"{name} must have at least {min_ndim} dimensions; got shape {arr.shape}")
    return arr.astype(np.float64, copy=False)


def _check_eps(eps):
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not np.isfinite(eps) or eps < 0:
        raise ValueError(f"eps must be a finite number >= 0; got {eps!r}")
    return float(eps)


def _expand_heads(q, x, name):
    """Apply GQA to ``x`` (k or v) against ``q``'s heads on axis -3."""
    if q.ndim < 3 or x.ndim < 3:
        return x
    H, H_kv = q.shape[-3], x.shape[-3]
    if H_kv == H or H_kv == 1 or H == 1:  # equal, or plain broadcasting
        return x
    if H % H_kv:
        raise ValueError(
            f"{name} has {H_kv} heads (axis -3) but q has {H}: for grouped-query attention the "
            f"number of query heads must be a multiple of the key/value heads"
        )
    return repeat_kv(x, H // H_kv)


def _prepare_qkv(q, k, v):
    """Validate q, k, v, apply GQA, return float64 arrays and the broadcast batch shape."""
    q, k, v = _as_array(q, "q"), _as_array(k, "k"), _as_array(v, "v")
    if k.shape[-1] != q.shape[-1]:
        raise ValueError(f"k must have the head dim D of q: q is (..., T, {q.shape[-1]}), "
                         f"k is (..., S, {k.shape[-1]})")
    if v.shape[-2] != k.shape[-2]:
        raise ValueError(f"v must have the key length S of k: k has S = {k.shape[-2]}, "
                         f"v has {v.shape[-2]}")
    k, v = _expand_heads(q, k, "k"), _expand_heads(q, v, "v")
    try:
        batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except ValueError:
        raise ValueError(f"the batch dims of q {q.shape[:-2]}, k {k.shape[:-2]} and v "
                         f"{v.shape[:-2]} do not broadcast") from None
    return q, k, v, batch


def _swap(x):
    return np.swapaxes(x, -1, -2)


# --------------------------------------------------------------------------- kernel smoother
def kernel_smoother(q, k, v, kernel="exponential", *, is_causal=False,
                    causal_alignment="top_left", eps=0.0, causal=None, **params):
    r"""Attention with any registry kernel: a Nadaraya–Watson smoother over the keys.

    .. math::

        \text{out}_i = \frac{\sum_{j \in V(i)} \kappa(q_i, k_j)\, v_j}
                            {\max\left(\sum_{j \in V(i)} \kappa(q_i, k_j),\ \varepsilon\right)}

    with V(i) all keys, or ``{j : j <= i + shift}`` when ``is_causal`` (shift 0 top-left aligned,
    as ``scaled_dot_product_attention(is_causal=True)``, or S - T bottom-right aligned; see
    ``causal_alignment``). The weights are
    ``get_kernel(kernel).value_fn(q_b, k_b, **params)`` for each batch element b. The denominator
    goes through :func:`guard_denominator`: a no-op for positive kernels with the default
    ``eps = 0``; for kernels whose weights can be <= 0 (linear, polynomial, sigmoid, cosine) a
    row with ``den <= 0`` gives ``den_guarded = eps`` (and output 0 if eps = 0). Rows whose
    guarded denominator is 0 output 0. Masked keys are left out of the sums (a NaN in v_j
    reaches only the rows that see key j; rows that see no key output 0), as in every function
    of this module.

    The weights are the raw kernel values: with the exponential kernel, scores above ~709
    overflow. Use :func:`softmax_attention` (max-subtracted) for large scores.

    Parameters
    ----------
    q : array_like, shape (..., T, D)
    k : array_like, shape (..., S, D)
    v : array_like, shape (..., S, Dv)
    kernel : str
        A registry kernel name (:func:`kernelkit_math.registry.kernel_names`).
    is_causal : bool
        Causal mask, aligned by ``causal_alignment``.
        ``causal`` is the deprecated name of ``is_causal`` (FutureWarning).
    causal_alignment : {"top_left", "bottom_right"}, default "top_left"
        Only read when ``is_causal`` is True (validated always). ``"top_left"``: key j visible
        to query i iff ``j <= i`` (torch ``CausalVariant.UPPER_LEFT``, SDPA's
        ``is_causal=True``); ``"bottom_right"``: iff ``j <= i + S - T`` (torch
        ``CausalVariant.LOWER_RIGHT``, FlashAttention's KV-cache decoding), where with T > S
        the first T - S queries see no key: their numerator is 0, so they output 0. See :func:`causal_shift`.
    eps : float
        Floor of the denominator (>= 0).
    **params
        The kernel's parameters as in the registry (``scale`` for exponential, ``gamma`` for
        rbf...), validated by :meth:`KernelSpec.resolve`.

    Returns
    -------
    ndarray (float64), shape (..., T, Dv)

    Raises
    ------
    ValueError
        Unknown kernel, mismatched D or S, heads not divisible, bad ``eps``, bad parameter value,
        bad ``causal_alignment``.
    TypeError
        Unknown parameter name, non-numeric input, a non-string ``causal_alignment``.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.normal(size=(2, 5, 4)), rng.normal(size=(2, 6, 4)), rng.normal(size=(2, 6, 3))
    >>> out = kernel_smoother(q, k, v, "rbf", gamma=0.5, is_causal=True)
    >>> out.shape
    (2, 5, 3)
    """
    causal = resolve_is_causal(is_causal, causal, "kernel_smoother")
    from kernelkit_math.registry import get_kernel

    spec = get_kernel(kernel)
    eps = _check_eps(eps)
    q, k, v, batch = _prepare_qkv(q, k, v)
    T, S, D = q.shape[-2], k.shape[-2], q.shape[-1]
    shift = causal_shift(causal, causal_alignment, T, S)
    resolved = spec.resolve(D, **params)
    n_b = int(np.prod(batch, dtype=np.int64))
    qb = np.broadcast_to(q, batch + q.shape[-2:]).reshape(n_b, T, D)
    kb = np.broadcast_to(k, batch + k.shape[-2:]).reshape(n_b, S, D)
    W = np.empty((n_b, T, S))
    for b in range(n_b):
        W[b] = spec.value_fn(qb[b], kb[b], **resolved)
    W = W.reshape(batch + (T, S))
    visible = None if shift is None else causal_mask(T, S, shift)
    if visible is not None:
        W = np.where(visible, W, 0.0)
    return _safe_divide(_visible_sum(W, v, visible), guard_denominator(W.sum(axis=-1), eps))


# -------------------------------------------------------------------------- softmax attention
def softmax_attention(q, k, v, *, is_causal=False, causal_alignment="top_left", scale=None,
                      return_lse=False, causal=None, window_size=None):
    r"""Scaled dot-product (softmax) attention, numerically stable, float64.

    .. math::

        s_{ij} = \text{scale}\; q_i \cdot k_j, \qquad
        m_i = \max_{j \in V(i)} s_{ij}, \qquad
        \ell_i = \sum_{j \in V(i)} e^{s_{ij} - m_i},

        \text{out}_i = \frac{1}{\ell_i} \sum_{j \in V(i)} e^{s_{ij} - m_i}\, v_j, \qquad
        \text{lse}_i = m_i + \log \ell_i = \log \sum_{j \in V(i)} e^{s_{ij}}.

    Equal to ``kernel_smoother(q, k, v, "exponential", scale=scale)`` (without overflow), and to
    ``torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale,
    enable_gqa=True)``. V(i) is every key, or ``{j <= i + shift}`` with ``is_causal`` (shift 0
    top-left aligned, S - T bottom-right aligned: ``causal_alignment``), intersected with the
    sliding window ``{i + shift - left <= j <= i + shift + right}`` of ``window_size``. Rows
    without visible keys (S = 0, bottom-right with T > S, a window that misses every key) output
    0 and their lse is -inf (not NaN), as FlashAttention, whatever k and v hold. Masked keys
    are left out of the sums, not given a zero weight: a NaN or infinity in v_j (or k_j)
    reaches exactly the rows that see key j.

    Parameters
    ----------
    q : array_like, shape (..., H, T, D) or (..., T, D)
    k : array_like, shape (..., H_kv, S, D); H_kv divides H (GQA)
    v : array_like, shape (..., H_kv, S, Dv)
    is_causal : bool
        ``causal`` is the deprecated name of ``is_causal`` (FutureWarning).
    causal_alignment : {"top_left", "bottom_right"}, default "top_left"
        Only read when ``is_causal`` is True (validated always). ``"top_left"``: key j visible
        to query i iff ``j <= i`` (torch ``CausalVariant.UPPER_LEFT``, SDPA's
        ``is_causal=True``); ``"bottom_right"``: iff ``j <= i + S - T`` (torch
        ``CausalVariant.LOWER_RIGHT``, FlashAttention's KV-cache decoding), where with T > S
        the first T - S queries see no key (output 0, lse -inf). See :func:`causal_shift`.
    scale : float or None
        Finite; None means 1 / sqrt(D).
    return_lse : bool
        Also return the log-sum-exp of the scaled scores over the visible keys.
    window_size : None or tuple (left, right) of int, default None
        Sliding window (FlashAttention's local attention): key j visible to query i iff
        ``i + shift - left <= j <= i + shift + right``; -1 means no bound on that side, and None
        or (-1, -1) no window. ``shift`` is the alignment's, as for the causal mask (0 for
        ``"top_left"``, S - T for ``"bottom_right"``; ``causal_alignment`` is read with a
        window even when ``is_causal`` is False). FlashAttention's ``window_size`` is
        ``causal_alignment="bottom_right"``; with T == S the two coincide. With ``is_causal``
        the window also ends at the causal diagonal (``right`` is 0 in effect). See
        :func:`mask_band`.

    Returns
    -------
    out : ndarray (float64), shape (..., T, Dv)
    lse : ndarray (float64), shape (..., T); only with ``return_lse``.

    Raises
    ------
    ValueError
        Mismatched D or S, heads not divisible, non-finite scale, bad ``causal_alignment``,
        a ``window_size`` that does not have two entries or has one below -1.
    TypeError
        A non-string ``causal_alignment``, a ``window_size`` that is not None or a tuple of
        two ints.

    Examples
    --------
    >>> import numpy as np
    >>> q = k = v = np.eye(3)[None]
    >>> out, lse = softmax_attention(q, k, v, is_causal=True, return_lse=True)
    >>> out[0, 0].tolist(), float(lse[0, 0])
    ([1.0, 0.0, 0.0], 0.5773502691896258)
    """
    causal = resolve_is_causal(is_causal, causal, "softmax_attention")
    q, k, v, _ = _prepare_qkv(q, k, v)
    T, S, D = q.shape[-2], k.shape[-2], q.shape[-1]
    lower, upper = mask_band(causal, causal_alignment, window_size, T, S)
    if scale is None:
        scale = 1.0 / np.sqrt(D)
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real) or not np.isfinite(scale):
        raise ValueError(f"scale must be a finite number or None; got {scale!r}")
    scores = float(scale) * (q @ _swap(k))
    visible = None if lower is None and upper is None else band_mask(T, S, lower, upper)
    if visible is not None:
        scores = np.where(visible, scores, -np.inf)
    m = scores.max(axis=-1, keepdims=True, initial=-np.inf)
    m = np.where(m == -np.inf, 0.0, m)  # rows with no visible key: exp(-inf) = 0, no NaN
    p = np.exp(scores - m)
    ell = p.sum(axis=-1)
    out = _safe_divide(_visible_sum(p, v, visible), ell)
    if not return_lse:
        return out
    with np.errstate(divide="ignore"):
        lse = m[..., 0] + np.log(ell)
    return out, lse


# --------------------------------------------------------------------------- linear attention
def _check_guard(guard):
    if guard is None:
        return None
    if isinstance(guard, bool) or not isinstance(guard, numbers.Real):
        raise TypeError(f"guard must be None or a real number > 0; got {guard!r}")
    if not np.isfinite(guard) or guard <= 0:
        raise ValueError(f"guard must be None or a finite number > 0; got {guard!r}")
    return float(guard)


def _abs_mass(Q, K, shift):
    """``|Q_i| . sum_{j in V(i)} |K_j|`` (..., T) in linear time: prefix sums of |K| when causal.

    It bounds the absolute weight mass of each row, sum_j |Q_i . K_j|."""
    T, S = Q.shape[-2], K.shape[-2]
    absQ, absK = np.abs(Q), np.abs(K)
    if shift is None:
        return np.einsum("...tm,...m->...t", absQ, absK.sum(axis=-2))
    seen = np.clip(np.arange(T) + shift + 1, 0, S)  # keys visible to each query
    prefix = np.concatenate([np.zeros_like(absK[..., :1, :]), np.cumsum(absK, axis=-2)], axis=-2)
    return np.einsum("...tm,...tm->...t", absQ, prefix[..., seen, :])


def _resolve_feature_map(feature_map, d, seed):
    if isinstance(feature_map, str):
        return _make(feature_map, d, seed, argname="feature_map")
    if isinstance(feature_map, FeatureMap) or callable(feature_map):
        return feature_map
    raise TypeError(f"feature_map must be a name or a callable feature map; got {feature_map!r}")


def _apply_map(phi, x, name):
    fx = np.asarray(phi(x), dtype=np.float64)
    if fx.ndim != x.ndim or fx.shape[:-1] != x.shape[:-1]:
        raise ValueError(f"feature_map must map (..., D) to (..., M); mapped {name} of shape "
                         f"{x.shape} to {fx.shape}")
    return fx


@fill_doc(maps=feature_map_list_doc(), positive=feature_map_list_doc(sign="positive"),
          signed=feature_map_list_doc(sign="signed"))
def linear_attention(
    q, k, v, feature_map="elu+1", *, is_causal=False, causal_alignment="top_left", normalize=True,
    eps=1e-6, form="parallel", initial_state=None, return_state=False, seed=0, causal=None,
    guard=None,
):
    r"""Linear attention with a feature-map kernel phi(q)·phi(k), in parallel or recurrent form.

    With Q = phi(q) (..., T, M), K = phi(k) (..., S, M) and an optional initial state
    (S_0 (..., M, Dv), z_0 (..., M)), zero by default:

    .. math::

        \text{num}_i = Q_i^\top \Big(S_0 + \sum_{j \in V(i)} K_j v_j^\top\Big), \qquad
        \text{den}_i = Q_i \cdot \Big(z_0 + \sum_{j \in V(i)} K_j\Big), \qquad
        \text{out}_i = \frac{\text{num}_i}{\max(\text{den}_i, \varepsilon)}

    (``normalize=False`` returns num). V(i) is every key, or ``{j <= i + shift}`` with
    ``is_causal`` (shift 0 top-left or S - T bottom-right aligned, as softmax attention; see
    ``causal_alignment``). A query with no visible key (bottom-right with T > S) reads the
    initial state alone: output 0 without one (whatever q_i holds). Masked keys are left out of
    the sums, so a NaN or infinity in v_j (or k_j) reaches exactly the rows that see key j (and
    the final state).
    Two forms compute the same thing:

    - ``"parallel"``: num = (Q K^T ⊙ mask) v + Q S_0, den = (Q K^T ⊙ mask) 1 + Q z_0, with the
      causal mask :func:`causal_mask` (diagonal included) when causal; the masked terms are
      left out of the product, not multiplied by 0 (see "Masked keys are absent" in the module
      docstring: a NaN in v_j reaches only the rows that see key j);
    - ``"recurrent"``: state S_j = S_{j-1} + K_j v_j^T (M x Dv), z_j = z_{j-1} + K_j, and
      out_i = Q_i^T S / max(Q_i·z, eps) with the state after key i + shift (the initial state
      when i + shift < 0); without ``is_causal`` every query reads the state after the last key.

    In float64 the two forms agree to ~1e-14 relative whenever the denominators are not tiny
    (the maps of positive weights: {positive}). Denominators near 0, where both forms are
    ill-conditioned and differ by rounding / den, come with the signed maps: {signed}.

    Signed maps: the guard. The weights phi(q_i)·phi(k_j) of a signed map can cancel, so
    den_i can be ~0 or negative and out_i huge (on the heads of a pretrained encoder, rff:128
    gave output errors of 5e6 times the signal, the identity map 6e9). ``guard=delta`` raises
    each denominator to

    .. math::

        \text{den}_i \leftarrow \max\Big(\text{den}_i,\ \delta\, |Q_i| \cdot
        \sum_{j \in V(i)} |K_j|\Big) \quad (|\cdot| \text{ elementwise})

    (then ``max(., eps)``), linear time (prefix sums of |K| when causal). The right side is
    at least delta sum_j |w_ij|, so ``|out_i| <= max_j |v_j| / delta``: with delta = 1 the
    signed weights form a sub-convex combination. Rows with den_i >= delta times the bound are
    untouched. Not with ``initial_state`` (its z_0 does not carry the earlier keys' |K| sums).

    The final state is always the state after all S keys: (S_0 + K^T v, z_0 + K^T 1).

    Parameters
    ----------
    q : array_like, shape (..., T, D)
    k : array_like, shape (..., S, D)
    v : array_like, shape (..., S, Dv)
    feature_map : str or callable
        A name for :func:`kernelkit_math.random_features.make_feature_map` ({maps}), built
        with D = q.shape[-1] and ``seed``; or a feature-map object (any callable (..., D) ->
        (..., M)), applied to both q and k.
    is_causal : bool
        ``causal`` is the deprecated name of ``is_causal`` (FutureWarning).
    causal_alignment : {"top_left", "bottom_right"}, default "top_left"
        Only read when ``is_causal`` is True (validated always). ``"top_left"``: key j visible
        to query i iff ``j <= i`` (torch ``CausalVariant.UPPER_LEFT``, SDPA's
        ``is_causal=True``); ``"bottom_right"``: iff ``j <= i + S - T`` (torch
        ``CausalVariant.LOWER_RIGHT``, FlashAttention's KV-cache decoding), where with T > S
        the first T - S queries see no key (they read the initial state only). See :func:`causal_shift`.
    normalize : bool
        Divide by the guarded denominator; False returns the numerator only.
    eps : float
        Floor of the denominator, see :func:`guard_denominator`.
    form : {"parallel", "recurrent"}
    initial_state : tuple (S_0, z_0) or None
        S_0 (..., M, Dv) and z_0 (..., M), added before the first key.
    return_state : bool
        Also return the final state (S_final (..., M, Dv), z_final (..., M)).
    seed : int
        Seed of a random feature map built from its name.
    guard : float or None
        delta > 0 of the signed-map guard above; None (the default): ``max(den, eps)`` only.

    Returns
    -------
    out : ndarray (float64), shape (..., T, Dv)
    state : tuple (S_final, z_final); only with ``return_state``.

    Raises
    ------
    ValueError
        Mismatched D or S, heads not divisible, unknown feature map or bad size ("favor+:0"),
        bad ``form``, ``eps``, ``causal_alignment`` or ``initial_state`` shapes, ``guard`` <= 0
        or not finite, ``guard`` with ``initial_state``.
    TypeError
        A non-string ``causal_alignment``; a feature map that is neither a name nor callable;
        a ``guard`` that is not a real number.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.normal(size=(3, 4)), rng.normal(size=(3, 4)), rng.normal(size=(3, 2))
    >>> a = linear_attention(q, k, v, is_causal=True)
    >>> b = linear_attention(q, k, v, is_causal=True, form="recurrent")
    >>> bool(np.allclose(a, b, rtol=1e-12, atol=1e-12))
    True
    """
    causal = resolve_is_causal(is_causal, causal, "linear_attention")
    if form not in ("parallel", "recurrent"):
        raise ValueError(f"form must be 'parallel' or 'recurrent'; got {form!r}")
    eps = _check_eps(eps)
    guard = _check_guard(guard)
    if guard is not None and initial_state is not None:
        raise ValueError("guard cannot be combined with initial_state: z_0 does not carry the "
                         "sums of |phi(k)| of the earlier keys that the guard needs")
    q, k, v, batch = _prepare_qkv(q, k, v)
    T, S, D, Dv = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    shift = causal_shift(causal, causal_alignment, T, S)
    phi = _resolve_feature_map(feature_map, D, seed)
    Q, K = _apply_map(phi, q, "q"), _apply_map(phi, k, "k")
    M = Q.shape[-1]
    if K.shape[-1] != M:
        raise ValueError(f"feature_map gave {M} features for q but {K.shape[-1]} for k")

    if initial_state is None:
        S0, z0 = np.zeros((M, Dv)), np.zeros(M)
        # A row that sees no key and has no state to read reads nothing: output 0 whatever q_i
        # holds (phi(q_i) . 0 would be NaN for a NaN q_i).
        reads = np.full(T, S > 0) if shift is None else causal_mask(T, S, shift).any(axis=1)
        Q = np.where(reads[:, None], Q, 0.0)
    else:
        if not isinstance(initial_state, (tuple, list)) or len(initial_state) != 2:
            raise ValueError("initial_state must be a pair (S_0 (..., M, Dv), z_0 (..., M))")
        S0 = _as_array(initial_state[0], "initial_state[0]", 2)
        z0 = _as_array(initial_state[1], "initial_state[1]", 1)
        if S0.shape[-2:] != (M, Dv) or z0.shape[-1] != M:
            raise ValueError(f"initial_state must be (S_0 (..., {M}, {Dv}), z_0 (..., {M})) for "
                             f"M = {M} features and Dv = {Dv}; got {S0.shape} and {z0.shape}")
    try:
        batch = np.broadcast_shapes(batch, S0.shape[:-2], z0.shape[:-1])
    except ValueError:
        raise ValueError(f"initial_state batch dims {S0.shape[:-2]} / {z0.shape[:-1]} do not "
                         f"broadcast with the batch dims {batch} of q, k, v") from None
    Q = np.broadcast_to(Q, batch + (T, M))
    K = np.broadcast_to(K, batch + (S, M))
    v = np.broadcast_to(v, batch + (S, Dv))
    S0 = np.broadcast_to(S0, batch + (M, Dv))
    z0 = np.broadcast_to(z0, batch + (M,))

    if form == "parallel":
        A = Q @ _swap(K)  # (..., T, S)
        visible = None if shift is None else causal_mask(T, S, shift)
        if visible is not None:
            A = np.where(visible, A, 0.0)
        num = _visible_sum(A, v, visible) + Q @ S0
        den = A.sum(axis=-1) + np.einsum("...tm,...m->...t", Q, z0)
        S_fin = S0 + _swap(K) @ v
        z_fin = z0 + K.sum(axis=-2)
    else:
        state, norm = S0.copy(), z0.copy()
        num, den = np.empty(batch + (T, Dv)), np.empty(batch + (T,))
        added = 0  # keys 0 .. added - 1 are in the state
        for i in range(T if shift is not None else 0):
            while added < min(S, i + shift + 1):
                state = state + K[..., added, :, None] * v[..., added, None, :]
                norm = norm + K[..., added, :]
                added += 1
            num[..., i, :] = np.einsum("...m,...md->...d", Q[..., i, :], state)
            den[..., i] = np.einsum("...m,...m->...", Q[..., i, :], norm)
        for j in range(added, S):
            state = state + K[..., j, :, None] * v[..., j, None, :]
            norm = norm + K[..., j, :]
        if shift is None:
            num = np.einsum("...tm,...md->...td", Q, state)
            den = np.einsum("...tm,...m->...t", Q, norm)
        S_fin, z_fin = state, norm

    den = guard_denominator(den, eps)
    if guard is not None:
        den = np.maximum(den, guard * _abs_mass(Q, K, shift))
    out = _safe_divide(num, den) if normalize else np.array(num)
    return (out, (S_fin, z_fin)) if return_state else out
