r"""Float64 reference for gated and decayed linear attention (RetNet, Mamba2, GLA).

Linear attention with a forget gate keeps a state S_t (D x Dv) that decays before each new
key-value pair is added:

.. math::

    S_t = \operatorname{diag}(\alpha_t)\, S_{t-1} + k_t v_t^\top, \qquad
    \mathrm{out}_t = (s\, q_t)^\top S_t, \qquad
    \alpha_t = \gamma\, \exp(g_t) \in [0, 1]^D,

with s the ``scale``, g_t the log-gate of step t (``log_gate``: one value per head and step, as
Mamba2 and simple GLA, broadcast over the D channels; or one per channel, as GLA) and gamma a
fixed per-head decay (``decay``, as RetNet). Unrolled, the same output is a causal kernel
smoother without normalisation:

.. math::

    \mathrm{out}_t = \sum_{j \le t} \Big(\sum_c s\, q_{tc}\, k_{jc}\, w_{tjc}\Big) v_j,\qquad
    w_{tjc} = \prod_{r=j+1}^{t} \alpha_{rc},

so a scalar decay alone is the dot-product kernel q·k times the exponential kernel
gamma^{t - j} = exp(-|t - j| ln(1/gamma)) in position. :func:`gated_linear_attention` runs the
recurrence; :func:`gated_linear_attention_smoother` computes the unrolled sum with explicit
weights (O(T^2), an independent check of the recurrence).

Shapes: q, k (B, H, T, D), v (B, H, T, Dv); ``log_gate`` (B, H, T) or (B, H, T, D), values in
[-inf, 0]; ``decay`` a number or H numbers in [0, 1]; states (B, H, D, Dv). Leading dims of
q, k, v must match (no broadcasting). Inputs are converted to float64 and never modified. A NaN
in k_j or v_j reaches every row t >= j, even across a gate of exactly 0 (0 * NaN is NaN: NaN
is never hidden).
"""

from __future__ import annotations

import numpy as np

__all__ = ["gated_linear_attention", "gated_linear_attention_smoother", "log_decay_per_step",
           "segment_log_weights"]


def _check_qkv(q, k, v):
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    for name, x in (("q", q), ("k", k), ("v", v)):
        if x.ndim < 2:
            raise ValueError(f"{name} must have shape (..., T, D); got {x.shape}")
    if q.shape != k.shape:
        raise ValueError(f"q and k must have the same shape; got {q.shape} and {k.shape}")
    if v.shape[:-1] != q.shape[:-1]:
        raise ValueError(f"v must have shape {q.shape[:-1]} + (Dv,); got {v.shape}")
    return q, k, v


def log_decay_per_step(q_shape, log_gate=None, decay=None):
    """ln alpha_t of every step and channel, shape ``q_shape`` (..., H, T, D), float64.

    Parameters
    ----------
    q_shape : tuple
        The shape of q, (..., H, T, D).
    log_gate : array-like of shape (..., H, T) or (..., H, T, D), optional
        ln of the gate of each step (per channel for the 4-d form); values in [-inf, 0].
    decay : float or array-like of shape (H,), optional
        A fixed gate per head in [0, 1].
    """
    *lead, H, T, D = q_shape
    out = np.zeros(q_shape)
    if log_gate is not None:
        g = np.asarray(log_gate, dtype=np.float64)
        if g.shape == tuple(lead) + (H, T):
            g = g[..., None]
        elif g.shape != tuple(q_shape):
            raise ValueError(f"log_gate must have shape {tuple(lead) + (H, T)} (one value per "
                             f"head and step) or {tuple(q_shape)} (one per channel); got "
                             f"{g.shape}")
        if np.any(g > 0):
            raise ValueError("log_gate must be <= 0 (the log of a gate in [0, 1])")
        out = out + g
    if decay is not None:
        gamma = np.asarray(decay, dtype=np.float64)
        if gamma.ndim == 0:
            gamma = np.full(H, float(gamma))
        if gamma.shape != (H,):
            raise ValueError(f"decay must be a number or one per head, shape ({H},); got "
                             f"{gamma.shape}")
        if not np.all((gamma >= 0) & (gamma <= 1)):
            raise ValueError(f"decay must be in [0, 1]; got {gamma}")
        with np.errstate(divide="ignore"):
            out = out + np.log(gamma)[:, None, None]
    return out


def gated_linear_attention(q, k, v, log_gate=None, *, decay=None, scale=None,
                           initial_state=None, return_state=False):
    """Gated / decayed causal linear attention by its recurrence (module docstring).

    Parameters
    ----------
    q, k : array-like of shape (..., H, T, D)
    v : array-like of shape (..., H, T, Dv)
    log_gate : array-like of shape (..., H, T) or (..., H, T, D), optional
        ln of the forget gate of each step, <= 0 (None: no gate).
    decay : float or array-like of shape (H,), optional
        A fixed forget gate per head in [0, 1] (None: 1).
    scale : float, optional
        Multiplies q (None: 1).
    initial_state : array-like of shape (..., H, D, Dv), optional
        S_0 (None: zeros).
    return_state : bool
        Also return S_T.

    Returns
    -------
    out : ndarray of shape (..., H, T, Dv)
    state : ndarray of shape (..., H, D, Dv), only with ``return_state``
    """
    q, k, v = _check_qkv(q, k, v)
    if q.ndim < 3:
        raise ValueError(f"q must have shape (..., H, T, D); got {q.shape}")
    log_alpha = log_decay_per_step(q.shape, log_gate, decay)
    alpha = np.exp(log_alpha)
    s = 1.0 if scale is None else float(scale)
    state_shape = q.shape[:-2] + (q.shape[-1], v.shape[-1])
    if initial_state is None:
        S = np.zeros(state_shape)
    else:
        S = np.array(initial_state, dtype=np.float64)
        if S.shape != state_shape:
            raise ValueError(f"initial_state must have shape {state_shape}; got {S.shape}")
    out = np.empty(v.shape)
    for t in range(q.shape[-2]):
        S = alpha[..., t, :, None] * S + k[..., t, :, None] * v[..., t, None, :]
        out[..., t, :] = np.einsum("...d,...de->...e", s * q[..., t, :], S)
    return (out, S) if return_state else out


def gated_linear_attention_smoother(q, k, v, log_gate=None, *, decay=None, scale=None):
    """The same output as :func:`gated_linear_attention` (no initial state) from the unrolled
    sum with explicit weights w_tjc = exp(sum_{r=j+1..t} ln alpha_rc): O(T^2 D) memory."""
    q, k, v = _check_qkv(q, k, v)
    log_alpha = log_decay_per_step(q.shape, log_gate, decay)
    s = 1.0 if scale is None else float(scale)
    T = q.shape[-2]
    log_w = np.where(np.tril(np.ones((T, T), dtype=bool))[:, :, None],
                     segment_log_weights(log_alpha), -np.inf)
    w = np.exp(log_w)
    scores = np.einsum("...tc,...jc,...tjc->...tj", s * q, k, w)
    return scores @ v


def segment_log_weights(log_alpha):
    """ln w_tjc = sum_{j < r <= t} ln alpha_rc for every pair t >= j (entries t < j are
    meaningless), shape (..., T, T, D), from cumulative sums without subtracting infinities: a
    gate of exactly 0 (ln alpha = -inf) between j and t makes the weight 0, and the finite steps
    are summed apart (the count of zero gates tells whether one lies between)."""
    zero = np.isneginf(log_alpha)
    finite = np.cumsum(np.where(zero, 0.0, log_alpha), axis=-2)
    resets = np.cumsum(zero, axis=-2)
    diff = finite[..., :, None, :] - finite[..., None, :, :]
    same = resets[..., :, None, :] == resets[..., None, :, :]
    return np.where(same, diff, -np.inf)
