"""Plain-PyTorch linear attention: the gradient reference and CPU fallback of
:func:`kernelkit_gpu.linear_attention`, plus the argument validation both share.

Same signature as the Triton version, any device, float64-capable, differentiable through
torch.autograd (q, k, v and the initial state). Float16 / bfloat16 input is computed in float32
(states float32) and the output rounded to the input dtype; float64 input stays float64.

Equivalent to ``kernelkit_math.attention.linear_attention(q, k, v, feature_map, is_causal=...,
causal_alignment=..., normalize=..., eps=..., initial_state=..., return_state=..., guard=...)`` up
to dtype tolerance. ``guard=`` (the signed-map denominator guard) exists here and in the float64
reference only: the Triton kernels have none, so signed maps there are the caller's
responsibility. :func:`run_shifted` builds the bottom-right causal alignment (T != S) from top-left
runs, here and in the Triton version.
"""

from __future__ import annotations

import math
import numbers

import torch
import torch.nn.functional as F

from kernelkit_gpu import checks
from kernelkit_gpu.attention._visible import VisibleMatmul, VisibleScores
from kernelkit_gpu.feature_maps import TORCH_MAPS
from kernelkit_math import random_features as rf
from kernelkit_math.attention import causal_shift, resolve_is_causal
from kernelkit_math.registry import fill_doc

__all__ = ["linear_attention_naive", "FEATURE_MAPS", "check_args", "run_shifted"]

#: Fused feature maps and their kernel codes, from the registry
#: (:data:`kernelkit_math.random_features.FEATURE_MAPS`). ``None`` means q and k are already
#: feature-mapped by the caller (identity inside the kernels).
FEATURE_MAPS = {name: rf.get_feature_map(name).fused for name in rf.feature_map_names(fused=True)}
FEATURE_MAPS[None] = FEATURE_MAPS["identity"]
#: The torch phi of each fused code.
_PHI = {code: TORCH_MAPS[name] for name, code in FEATURE_MAPS.items() if name is not None}
#: Default chunk length of the causal chunked form.
DEFAULT_CHUNK = 64
CHUNK_SIZES = (16, 32, 64, 128)


# ---------------------------------------------------------------------------------- validation
def check_args(q, k, v, feature_map, causal, normalize, eps, initial_state, return_state,
               chunk_size, allowed_dtypes=checks.FLOAT_DTYPES, max_dim=None):
    """Validate the arguments of linear attention; return (B, H, T, S, M, Dv, map_code, chunk).

    Raises
    ------
    TypeError
        A non-tensor, a non-floating or mismatched dtype, a non-bool flag, a bad chunk_size type.
    ValueError
        Wrong ranks or mismatched shapes, devices, an unknown feature map, eps < 0, a bad
        chunk_size value, a malformed initial_state.
    """
    for name, t, shape_doc in (("q", q, "(B, H, T, D)"), ("k", k, "(B, H, S, D)"),
                               ("v", v, "(B, H, S, Dv)")):
        checks.check_tensor(t, name, shape_doc)
        checks.check_ndim(t, name, 4, shape_doc)
    for name, t in (("q", q), ("k", k), ("v", v)):
        checks.check_dtype(t, name, allowed_dtypes, hint=(
            " (float64: use kernelkit_gpu.linear_attention_naive)" if t.dtype == torch.float64 else ""))
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError(f"q, k and v must have the same dtype; got {q.dtype}, {k.dtype}, {v.dtype}")
    if k.device != q.device or v.device != q.device:
        raise ValueError(f"q, k and v must be on the same device; got {q.device}, {k.device}, {v.device}")
    B, H, T, M = q.shape
    S, Dv = k.shape[2], v.shape[3]
    if k.shape[:2] != (B, H) or v.shape[:2] != (B, H):
        raise ValueError(f"q, k and v must share (B, H); got {tuple(q.shape)}, {tuple(k.shape)}, "
                         f"{tuple(v.shape)}")
    if k.shape[3] != M:
        raise ValueError(f"k must have the feature size of q: q is (..., {M}), k is (..., {k.shape[3]})")
    if v.shape[2] != S:
        raise ValueError(f"v must have the key length S of k: k has S = {S}, v has {v.shape[2]}")
    if M == 0 or Dv == 0:
        raise ValueError(f"q, k and v must have at least one feature; got D = {M}, Dv = {Dv}")
    if max_dim is not None and (M > max_dim or Dv > max_dim):
        raise ValueError(f"the Triton kernels support D (or M) and Dv up to {max_dim}; got "
                         f"D = {M}, Dv = {Dv} (use linear_attention_naive for wider heads)")
    if not (feature_map is None or isinstance(feature_map, str)):
        raise TypeError(f"feature_map must be a string or None; got {type(feature_map).__name__}"
                        " (apply other maps to q and k yourself and pass feature_map=None)")
    if feature_map not in FEATURE_MAPS:
        fused = ", ".join(repr(name) for name in FEATURE_MAPS if name is not None)
        raise ValueError(f"feature_map must be one of {fused} or None (q, k already mapped); "
                         f"got {feature_map!r}")
    checks.check_flag(causal, "is_causal")
    checks.check_flag(normalize, "normalize")
    checks.check_flag(return_state, "return_state")
    checks.check_eps(eps, kind="a real number")
    if chunk_size is not None:
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, numbers.Integral):
            raise TypeError(f"chunk_size must be an int or None; got {chunk_size!r}")
        if int(chunk_size) not in CHUNK_SIZES:
            raise ValueError(f"chunk_size must be one of {CHUNK_SIZES} or None; got {chunk_size}")
        chunk_size = int(chunk_size)
    if initial_state is not None:
        if not isinstance(initial_state, (tuple, list)) or len(initial_state) != 2:
            raise ValueError("initial_state must be a pair (S_0 (B, H, M, Dv), z_0 (B, H, M)) or None")
        for name, t, shape in (("initial_state[0]", initial_state[0], (B, H, M, Dv)),
                               ("initial_state[1]", initial_state[1], (B, H, M))):
            checks.check_tensor(t, name, shape)
            checks.check_floating(t, name)
            if tuple(t.shape) != shape:
                raise ValueError(f"{name} must have shape {shape} (B, H, M{', Dv' if len(shape) == 4 else ''}); "
                                 f"got {tuple(t.shape)}")
            if t.device != q.device:
                raise ValueError(f"{name} must be on {q.device}; got {t.device}")
    return B, H, T, S, M, Dv, FEATURE_MAPS[feature_map], chunk_size


# ------------------------------------------------------------------------------------ naive
def apply_feature_map(x, code):
    """phi(x) for a kernel code of :data:`FEATURE_MAPS` (torch, differentiable)."""
    return _PHI[code](None, x)


def guarded_divide(num, den, eps):
    """num / max(den, eps)[..., None], and 0 where the guarded denominator is 0 (eps = 0).

    A NaN denominator gives NaN rows, as in the float64 reference (``clamp_min`` keeps NaN and
    ``!=`` is true for it; a ``> 0`` test would turn those rows into zeros)."""
    g = torch.clamp_min(den, eps)
    nonzero = g != 0
    return torch.where(nonzero[..., None],
                       num / torch.where(nonzero, g, torch.ones_like(g))[..., None],
                       torch.zeros_like(num))


def run_shifted(run, q, k, v, shift):
    """Linear attention with the causal mask ``j <= i + shift`` (or none) from top-left runs.

    ``run(q, k, v, causal)`` -> ``(out, (S_final, z_final))`` is top-left causal (or, with
    ``causal=False``, unmasked) linear attention with the caller's feature map, initial state and
    flags. ``shift`` is None (not causal), 0 (top-left, one run as is), > 0 (T < S: the queries
    are padded in front with ``shift`` zero rows, so query i sits at key position i + shift; the
    padded rows' outputs are dropped, so no gradient flows through them) or < 0 (T > S: the first
    ``-shift`` queries see no key and read the initial state alone, a run without keys; the
    other S queries are a top-left run with as many queries as keys). The state returned is
    always the state after all S keys.
    """
    if not shift:
        return run(q, k, v, shift is not None)
    if shift > 0:
        out, state = run(F.pad(q, (0, 0, shift, 0)), k, v, True)
        return out[:, :, shift:], state
    n = -shift
    head, _ = run(q[:, :, :n], k[:, :, :0], v[:, :, :0], False)
    tail, state = run(q[:, :, n:], k, v, True)
    return torch.cat([head, tail], dim=2), state


def check_guard(guard, initial_state):
    """The signed-map guard delta: None or a finite real > 0, without an initial state."""
    if guard is None:
        return None
    if isinstance(guard, bool) or not isinstance(guard, numbers.Real):
        raise TypeError(f"guard must be None or a real number > 0; got {guard!r}")
    if not math.isfinite(guard) or guard <= 0:
        raise ValueError(f"guard must be None or a finite number > 0; got {guard!r}")
    if initial_state is not None:
        raise ValueError("guard cannot be combined with initial_state: z_0 does not carry the "
                         "sums of |phi(k)| of the earlier keys that the guard needs")
    return float(guard)


@fill_doc(fused=rf.feature_map_set_doc(fused=True))
def linear_attention_naive(q, k, v, *, feature_map="elu+1", is_causal=False,
                           causal_alignment="top_left", normalize=True, eps=1e-6,
                           initial_state=None, return_state=False, chunk_size=None, causal=None,
                           guard=None):
    r"""Linear attention in plain PyTorch (parallel form, or chunked cumulative form when causal).

    With Q = phi(q), K = phi(k) and the state (S_0, z_0) (zero by default):

    .. math::

        \text{num}_t = Q_t^\top \Big(S_0 + \sum_{s \in V(t)} K_s v_s^\top\Big), \quad
        \text{den}_t = Q_t \cdot \Big(z_0 + \sum_{s \in V(t)} K_s\Big), \quad
        \text{out}_t = \text{num}_t / \max(\text{den}_t, \varepsilon)

    and with ``guard=delta`` the denominator is also raised to
    ``delta |Q_t| . sum_{s in V(t)} |K_s|`` (elementwise |.|, prefix sums when causal), so
    ``|out_t| <= max |v| / delta`` for signed maps (identity, rff); see
    :func:`kernelkit_math.attention.linear_attention`.

    V(t) = all keys, or {s <= t + shift} when causal: shift 0 top-left aligned (as torch SDPA),
    S - T bottom-right aligned (``causal_alignment``); a query with no visible key (bottom-right,
    T > S) reads the initial state alone (output 0 without one).

    Parameters
    ----------
    q : torch.Tensor, shape (B, H, T, D)
    k : torch.Tensor, shape (B, H, S, D)
    v : torch.Tensor, shape (B, H, S, Dv)
        Same floating dtype (float16, bfloat16, float32, float64) and device.
    feature_map : {fused} or None
        A map of the registry with a fused code (the Triton kernels' maps); None: q and k are
        already feature-mapped (D = M may be any size).
    is_causal, normalize : bool
        ``causal`` is the deprecated name of ``is_causal`` (FutureWarning).
    causal_alignment : {"top_left", "bottom_right"}, default "top_left"
        Only read when ``is_causal`` is True (validated always). ``"top_left"``: key s visible
        to query t iff s <= t (torch ``CausalVariant.UPPER_LEFT``, SDPA's ``is_causal=True``);
        ``"bottom_right"``: iff s <= t + S - T (torch ``CausalVariant.LOWER_RIGHT``,
        FlashAttention's KV-cache decoding), computed by :func:`run_shifted`.
    eps : float
        Floor of the denominator (>= 0); a guarded denominator of 0 gives an output of 0.
    initial_state : (torch.Tensor (B, H, M, Dv), torch.Tensor (B, H, M)) or None
    return_state : bool
        Also return (S_final, z_final), the state after all S keys.
    chunk_size : int or None
        Chunk length of the causal form (default 64); changes rounding only.
    guard : float or None
        delta > 0 of the signed-map guard; None (the default): ``max(den, eps)`` only. Not with
        ``initial_state``.

    Returns
    -------
    out : torch.Tensor, shape (B, H, T, Dv), dtype of q
    state : (S_final (B, H, M, Dv), z_final (B, H, M)), float32 (float64 for float64 input);
        only with ``return_state``.

    Notes
    -----
    Masked keys are absent, as in the float64 reference: a NaN or infinity in q_t reaches row
    t, one in k_s or v_s every row that sees key s (and the final state), never the rows that do
    not see it, in the output and in the gradients; rows that see no key read the initial state
    alone.

    Examples
    --------
    >>> import torch
    >>> q, k, v = torch.randn(1, 2, 5, 4), torch.randn(1, 2, 5, 4), torch.randn(1, 2, 5, 3)
    >>> linear_attention_naive(q, k, v, is_causal=True).shape
    torch.Size([1, 2, 5, 3])
    """
    causal = resolve_is_causal(is_causal, causal, "linear_attention_naive")
    _, _, T, S, _, _, code, chunk = check_args(q, k, v, feature_map, causal, normalize, eps,
                                               initial_state, return_state, chunk_size)
    guard = check_guard(guard, initial_state)
    shift = causal_shift(causal, causal_alignment, T, S)
    out, state = run_shifted(
        lambda q, k, v, causal: twin_top_left(q, k, v, code, causal, normalize, float(eps),
                                          initial_state, chunk, guard=guard), q, k, v, shift)
    return (out, state) if return_state else out


def twin_top_left(q, k, v, code, causal, normalize, eps, initial_state, chunk, guard=None):
    """(out, (S_final, z_final)) of validated input; causal: top-left aligned."""
    B, H, T, M = q.shape
    S, Dv = k.shape[2], v.shape[3]
    cdt = torch.float64 if q.dtype == torch.float64 else torch.float32
    qc = q.to(cdt)
    if S == 0 and initial_state is None:
        # no key and no state: the rows read nothing, 0 whatever q holds (no phi(q) . 0 = NaN);
        # masked_fill keeps q in the graph with zero gradients
        qc = qc.masked_fill(torch.ones((), dtype=torch.bool, device=q.device), 0.0)
    Q = apply_feature_map(qc, code)
    K = apply_feature_map(k.to(cdt), code)
    V = v.to(cdt)
    if initial_state is None:
        S0 = torch.zeros((B, H, M, Dv), dtype=cdt, device=q.device)
        z0 = torch.zeros((B, H, M), dtype=cdt, device=q.device)
    else:
        S0, z0 = initial_state[0].to(cdt), initial_state[1].to(cdt)
    S_fin = S0 + K.transpose(-1, -2) @ V
    z_fin = z0 + K.sum(dim=-2)
    if not causal:
        num = Q @ S_fin
        den = (Q * z_fin[:, :, None, :]).sum(-1)
        if guard is not None:  # no initial state (check_guard): the |K| sum over all keys
            floor = (Q.abs() * K.abs().sum(dim=-2)[:, :, None, :]).sum(-1)
    else:
        C = chunk or DEFAULT_CHUNK
        L = max(T, S)
        NC = -(-L // C) if L else 0
        P = NC * C

        def pad(x):
            return F.pad(x, (0, 0, 0, P - x.shape[2]))

        Qc = pad(Q).reshape(B, H, NC, C, M)
        Kc = pad(K).reshape(B, H, NC, C, M)
        Vc = pad(V).reshape(B, H, NC, C, Dv)
        # Masked keys are absent (kernelkit_math.attention): the intra-chunk products run over
        # the visible pairs only, so a NaN / inf in a later key or value (0 * NaN) never reaches
        # an earlier row, in the output or in the gradients.
        tril = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()
        A = VisibleScores.apply(Qc, Kc, tril).masked_fill(~tril, 0.0)
        Sc = Kc.transpose(-1, -2) @ Vc                          # (B, H, NC, M, Dv)
        zc = Kc.sum(dim=-2)                                     # (B, H, NC, M)
        S_prev = torch.cat([S0[:, :, None], Sc[:, :, :-1]], dim=2).cumsum(dim=2)
        z_prev = torch.cat([z0[:, :, None], zc[:, :, :-1]], dim=2).cumsum(dim=2)
        num = (VisibleMatmul.apply(A, Vc, tril) + Qc @ S_prev).reshape(B, H, P, Dv)[:, :, :T]
        den = (A.sum(-1) + (Qc * z_prev[:, :, :, None, :]).sum(-1)).reshape(B, H, P)[:, :, :T]
        if guard is not None:  # prefix sums of |K|: query t sees keys 0 .. min(t, S - 1)
            floor = (Q.abs() * pad(K.abs()).cumsum(dim=2)[:, :, :T]).sum(-1)
    if guard is not None:
        den = torch.maximum(den, guard * floor)
    out = guarded_divide(num, den, eps) if normalize else num
    return out.to(q.dtype), (S_fin, z_fin)
