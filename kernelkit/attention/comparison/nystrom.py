r"""Nyström attention: softmax rows rebuilt from a few landmark rows, with weights >= 0.

Softmax attention weighs key j for query i by :math:`\kappa(q_i, k_j) = e^{s\, q_i\cdot k_j}`.
The skeleton (CUR, "Nyström" in Nyströmformer's sense) approximation takes r = min(T, M) sampled
queries :math:`\tilde q_a` (landmark queries) and M landmark keys :math:`\ell_b`, and writes each
query's row as a combination of the landmark queries' exact rows:

.. math::

    W_{ij} = \sum_a \alpha_{ia}\, \kappa(\tilde q_a, k_j),\qquad
    \alpha_i = \arg\min_{\alpha \ge 0}\ \big\lVert \alpha\, U - C_i \big\rVert^2,\qquad
    U_{ab} = \kappa(\tilde q_a, \ell_b),\ C_{ib} = \kappa(q_i, \ell_b),

i.e. the coefficients are fitted on the landmark-key columns. Unlike the classical
:math:`\kappa(q, L)\,\kappa(L, L)^{-1}\kappa(L, k)` the coefficients are **non-negative**, so
every weight is >= 0 and each row, divided by its sum, is a distribution: the method cannot
blow up. (The signed form gave output errors of 100 to 2600 times the signal, negative
denominators and infinite KL on most rows on the heads of a pretrained encoder, issue 20.)
A landmark query's own row is exact (:math:`\alpha = e_a` fits with zero residual), so with
M >= T = S every row is softmax's up to the fit's stopping point.

Numerics. Each landmark row is shifted by its maximum over the keys
(:math:`R_{aj} = e^{s \tilde q_a\cdot k_j - c_a}`, max 1) and U by the same :math:`c_a` (its
exponents are <= 0 because landmark keys lie in the convex hull of the keys); C is shifted per
query, which cancels in the normalised ratio. The fit runs :data:`NNLS_ITERATIONS` steps of
FISTA (projected gradient with Nesterov momentum, step 1 / max row sum of
:math:`U U^\top`, which bounds its largest eigenvalue), then one plain projected step;
:data:`FLOOR` / r is added to every coefficient, so each denominator
:math:`\sum_a \alpha_{ia} \sum_j R_{aj}` is at least FLOOR (every row of R has an entry 1).
The coefficients of each row are then divided by that denominator (with a causal mask, by the
mass of the keys the row sees, from prefix sums of R), so every row sums to 1 before linear
attention's guard max(den, eps); a causal row whose visible mass underflowed to 0 keeps its
coefficients, the guard applies there, and the comparison tool counts it as a denominator <= 0.

Landmarks (per batch element and head), drawn from the seed:

1. *landmark queries*: r = min(T, M) queries drawn uniformly without replacement; their exact
   rows are R. Their softmax rows over the keys (causal mask respected) are summed into an
   importance w_j per key, the attention mass the sampled queries put on key j (O(M S D));
2. *landmark keys*: weighted k-means++ seeding on the keys: D² sampling with probability
   proportional to w_j d_j² (d_j the distance to the nearest centre so far), in at most 16
   rounds of independent draws (:data:`SEEDING_ROUNDS`, a batched variant of k-means++), then
   three weighted Lloyd iterations (a centre whose keys all have weight 0 stays put).

In causal mode the landmarks are chosen from all positions (the prefill setting, not a streaming
decoder). M is capped at S.

:func:`nystrom_weights` is the float64 NumPy version (weights and denominators);
:func:`nystrom_attention` the torch version (any device, float32 / bfloat16 / float16 / float64),
which runs the final step, W v = a (R v), through :func:`kernelkit.attention.linear_attention`
with the coefficients and the landmark rows as features (Triton on CUDA). Both take their random
draws from :func:`landmark_draws`, so they choose the same landmarks up to the rounding of the
sampling probabilities.

Accuracy (output relative error, float64, ``benchmarks/real_heads.py`` and
``benchmarks/nystrom_accuracy.py`` on the CPU): on the 24 real heads of the test fixture
(all-MiniLM-L6-v2, T = 512, D = 32) ``nystrom:64`` 0.46 and ``nystrom:128`` 0.385 (uniform
attention 0.757, favor+:1024 0.772; the signed form 2600 and 610). The sign constraint costs
accuracy where the signed form was well conditioned: on diffuse i.i.d. synthetic heads
(temperature 0.5, T = 512, D = 64) M = 16 / 64 / 256 give 0.49 / 0.42 / 0.35 against the signed
form's 0.42 / 0.33 / 0.20 (uniform 0.48); on peaky clustered heads it stays ahead of FAVOR+
(tests/test_compare_methods.py).

Cost: O((T + S) M D + T M² NNLS_ITERATIONS) per head. Measured on a GPU (sm_90) before the
non-negative fit (signed form, ``kernelkit.attention.sweep``, B=1 H=8 D=64 bfloat16, forward,
non-causal): at T = 65536, ``nystrom:64`` 13.0 ms (landmark selection 8.9 ms of it) against
``favor+:64`` 1.8 ms and softmax 20.2 ms; the fit adds T M² 64 multiply-adds per head, not yet
timed on the GPU. Nyström buys accuracy, not speed.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from kernelkit_math.attention import resolve_is_causal

__all__ = ["nystrom_weights", "nystrom_attention", "landmark_draws", "LLOYD_ITERATIONS",
           "SEEDING_ROUNDS", "NNLS_ITERATIONS", "FLOOR"]

#: Weighted Lloyd iterations after k-means++ seeding.
LLOYD_ITERATIONS = 3
#: k-means++ seeding draws its M centres in at most this many rounds (ceil((M - 1) / rounds)
#: independent draws per round), so the GPU version launches O(rounds) kernels, not O(M).
SEEDING_ROUNDS = 16
#: Floors of the seeding probabilities (w_j + W_FLOOR) d_j² + P_FLOOR: keys the sampled queries
#: ignore are drawn once every attended key is a centre, and any key once all are.
_W_FLOOR = 1e-12
_P_FLOOR = 1e-30
#: Accelerated projected-gradient (FISTA) steps of the non-negative coefficient fit.
NNLS_ITERATIONS = 64
#: Added to every coefficient divided by r: each denominator is >= FLOOR without a causal mask.
FLOOR = 1e-6


def _check_m(m):
    if isinstance(m, bool) or not isinstance(m, numbers.Integral) or m < 1:
        raise ValueError(f"the number of landmarks M must be a positive integer; got {m!r}")
    return int(m)


def _resolve_scale(scale, d):
    if scale is None:
        return 1.0 / math.sqrt(d)
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real) or not (
            math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be a positive finite number or None; got {scale!r}")
    return float(scale)


def landmark_draws(seed, n_heads, T, m):
    """The random draws of the landmark selection, shared by the NumPy and torch versions.

    Parameters
    ----------
    seed : int
        Seed of ``numpy.random.default_rng``.
    n_heads : int
        Number of (batch, head) slices.
    T : int
        Query length.
    m : int
        Number of landmarks (already capped at S).

    Returns
    -------
    query_index : ndarray of int64, shape (n_heads, min(T, m))
        The sampled queries of each head (without replacement).
    uniforms : ndarray of float64, shape (n_heads, m)
        One uniform in [0, 1) per k-means++ draw.
    """
    rng = np.random.default_rng(seed)
    r = min(T, m)
    query_index = np.stack([rng.choice(T, size=r, replace=False) for _ in range(n_heads)])
    return query_index.astype(np.int64), rng.random((n_heads, m))


# ------------------------------------------------------------------------------ NumPy version
def _round_sizes(m):
    """Draws per seeding round after the first centre: at most SEEDING_ROUNDS rounds."""
    per_round = max(1, -(-(m - 1) // SEEDING_ROUNDS))
    return [min(per_round, m - t) for t in range(1, m, per_round)]


def _pick(p, u):
    """Inverse-CDF draws per row: for each u, the first j with cumsum(p)_j > u * sum(p).

    p (n, S), u (n, b) -> (n, b) indices.
    """
    c = np.cumsum(p, axis=-1)
    target = u * c[:, -1:]
    idx = np.stack([np.searchsorted(c[i], target[i], side="right") for i in range(len(c))])
    return np.minimum(idx, p.shape[-1] - 1)


def _importance_np(logits, query_index, causal):
    """The softmax mass the sampled queries put on each key, (n, S), summing to 1."""
    if causal:
        visible = np.arange(logits.shape[-1])[None, None, :] <= query_index[..., None]
        logits = np.where(visible, logits, -np.inf)
    p = np.exp(logits - logits.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    w = p.sum(axis=1)
    return w / w.sum(axis=-1, keepdims=True)


def _kmeans_np(x, w, uniforms):
    n, S, _ = x.shape
    m = uniforms.shape[1]
    rows = np.arange(n)[:, None]
    idx = np.empty((n, m), dtype=np.int64)
    idx[:, :1] = _pick(w, uniforms[:, :1])
    d2 = np.sum((x - x[rows, idx[:, :1]]) ** 2, axis=-1)  # (n, S)
    t = 1
    for size in _round_sizes(m):
        new = _pick((w + _W_FLOOR) * d2 + _P_FLOOR, uniforms[:, t:t + size])  # (n, size)
        idx[:, t:t + size] = new
        for centre in np.swapaxes(x[rows, new], 0, 1):  # (n, D) each, direct differences
            d2 = np.minimum(d2, np.sum((x - centre[:, None, :]) ** 2, axis=-1))
        t += size
    centres = x[rows, idx]  # (n, m, D)
    for _ in range(LLOYD_ITERATIONS):
        dist = (np.sum(centres**2, axis=-1)[:, None, :]
                - 2.0 * (x @ np.swapaxes(centres, -1, -2)))  # + ||x||², constant per key
        assign = np.argmin(dist, axis=-1)  # (n, S)
        member = (assign[..., None] == np.arange(m)) * w[..., None]  # (n, S, m)
        mass = member.sum(axis=1)  # (n, m)
        sums = np.swapaxes(member, -1, -2) @ x  # (n, m, D)
        centres = np.where(mass[..., None] > 0,
                           sums / np.where(mass > 0, mass, 1.0)[..., None], centres)
    return centres


def _nonnegative_fit_np(C, U):
    """Coefficients a >= 0 with a U ~ C: FISTA on min ||a U - C||² then one plain projected
    gradient step, plus FLOOR / r (see the module docstring). C (n, T, m), U (n, r, m)."""
    Ut = np.swapaxes(U, -1, -2)
    UU, CU = U @ Ut, C @ Ut  # (n, r, r), (n, T, r)
    lip = UU.sum(axis=-1).max(axis=-1)[:, None, None]  # 0 only if every entry of U underflowed
    step = np.where(lip > 0, 1.0 / np.where(lip > 0, lip, 1.0), 0.0)
    a = y = np.zeros_like(CU)
    t = 1.0
    for _ in range(NNLS_ITERATIONS):
        a_next = np.maximum(y - (y @ UU - CU) * step, 0.0)
        t_next = 0.5 * (1.0 + math.sqrt(1.0 + 4.0 * t * t))
        y = a_next + ((t - 1.0) / t_next) * (a_next - a)
        a, t = a_next, t_next
    a = np.maximum(a - (a @ UU - CU) * step, 0.0)
    return a + FLOOR / U.shape[-2]


def _skeleton_np(q, k, m, causal, seed, scale):
    """(a, R): W = a R, a (n, T, r) >= 0 the coefficients, R (n, r, S) > 0 the landmark rows."""
    query_index, uniforms = landmark_draws(seed, q.shape[0], q.shape[1], m)
    lq = np.take_along_axis(q, query_index[..., None], axis=1)  # (n, r, D)
    logits = scale * (lq @ np.swapaxes(k, -1, -2))  # (n, r, S)
    shift = logits.max(axis=-1, keepdims=True)
    R = np.exp(logits - shift)
    w = _importance_np(logits, query_index, causal)
    mean = k.mean(axis=1, keepdims=True)  # k-means is translation invariant; centring helps
    L = _kmeans_np(k - mean, w, uniforms) + mean  # (n, m, D)
    # landmark keys are convex combinations of keys, so these exponents are <= 0 but for rounding
    U = np.exp(np.minimum(scale * (lq @ np.swapaxes(L, -1, -2)) - shift, 0.0))  # (n, r, m)
    lc = scale * (q @ np.swapaxes(L, -1, -2))  # (n, T, m)
    C = np.exp(lc - lc.max(axis=-1, keepdims=True))
    a = _nonnegative_fit_np(C, U)
    return a / _row_mass(a, _visible_mass_np(R, q.shape[1], causal)), R


def _visible_mass_np(R, T, causal):
    """(n, T, r): the mass of landmark row a that query i sees (all of it without a mask)."""
    if not causal:
        return np.broadcast_to(np.swapaxes(R.sum(axis=-1, keepdims=True), -1, -2),
                               (R.shape[0], T, R.shape[1]))
    prefix = np.swapaxes(np.cumsum(R, axis=-1), -1, -2)  # (n, S, r)
    return prefix[:, np.minimum(np.arange(T), R.shape[-1] - 1)]


def _row_mass(a, mass):
    """Each row's denominator sum_a a_ia mass_ia, as (n, T, 1); 1 where it underflowed to 0
    (the row keeps its tiny coefficients and the caller's guard max(den, eps) applies)."""
    den = (a * mass).sum(axis=-1, keepdims=True)
    return den + (den <= 0)


def nystrom_weights(q, k, m, *, is_causal=False, seed=0, scale=None, eps=1e-6, causal=None):
    """Nyström attention weights in float64: (A, den) for M landmarks per head.

    Parameters
    ----------
    q : array_like of shape (..., T, D)
    k : array_like of shape (..., S, D)
        Same leading shape as q.
    m : int
        Number of landmarks M (capped at S).
    is_causal : bool
        Top-left aligned causal mask (key j visible to query i iff j <= i).
        ``causal`` is the deprecated name of ``is_causal`` (FutureWarning).
    seed : int
        Seed of the landmark selection (:func:`landmark_draws`).
    scale : float or None
        Softmax scale s; None means 1 / sqrt(D).
    eps : float
        Denominator guard, max(den, eps), as in linear attention.

    Returns
    -------
    A : ndarray of shape (..., T, S)
        Row-normalised weights W / max(den, eps): non-negative, rows summing to 1.
    den : ndarray of shape (..., T)
        The denominators sum_j W_ij of the coefficients after their normalisation: 1 up to
        rounding, below 1 only where a causal row's visible mass underflowed (then the guard
        max(den, eps) applies).

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> q, k = rng.normal(size=(2, 6, 4)), rng.normal(size=(2, 6, 4))
    >>> A, den = nystrom_weights(q, k, 6)  # every query and every key is a landmark
    >>> s = q @ k.transpose(0, 2, 1) / 2.0
    >>> exact = np.exp(s - s.max(-1, keepdims=True))
    >>> bool(np.abs(A - exact / exact.sum(-1, keepdims=True)).max() < 0.02)  # 64 fit steps
    True
    >>> bool(A.min() >= 0 and np.allclose(A.sum(-1), 1.0))
    True
    """
    causal = resolve_is_causal(is_causal, causal, "nystrom_weights")
    q = np.asarray(q, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    if q.ndim < 2 or k.shape[:-2] != q.shape[:-2] or k.shape[-1] != q.shape[-1]:
        raise ValueError(f"q (..., T, D) and k (..., S, D) must share leading dims and D; got "
                         f"shapes {q.shape} and {k.shape}")
    lead, (T, D), S = q.shape[:-2], q.shape[-2:], k.shape[-2]
    if S < 1:
        raise ValueError("Nyström attention needs at least one key (S >= 1)")
    m = min(_check_m(m), S)
    scale = _resolve_scale(scale, D)
    a, R = _skeleton_np(q.reshape(-1, T, D), k.reshape(-1, S, D), m, causal, seed, scale)
    W = a @ R  # (n, T, S)
    if causal:
        W = np.where(np.tri(T, S, dtype=bool), W, 0.0)
    den = W.sum(axis=-1)
    A = W / np.maximum(den, eps)[..., None]
    return A.reshape(lead + (T, S)), den.reshape(lead + (T,))


# ------------------------------------------------------------------------------ torch version
def _pick_torch(p, u):
    import torch

    c = torch.cumsum(p, dim=-1)
    target = (u * c[:, -1:]).contiguous()
    idx = torch.searchsorted(c.contiguous(), target, right=True)
    return idx.clamp_(max=p.shape[-1] - 1)


def _landmarks_torch(k, w, uniforms):
    """Weighted k-means++ seeding and Lloyd iterations on the keys: (n, m, D) landmark keys."""
    import torch

    n = k.shape[0]
    m = uniforms.shape[1]
    rows = torch.arange(n, device=k.device)[:, None]
    mean = k.mean(dim=1, keepdim=True)  # k-means is translation invariant; centring helps
    x = k - mean
    idx = torch.empty((n, m), dtype=torch.long, device=k.device)
    idx[:, :1] = _pick_torch(w, uniforms[:, :1])
    d2 = ((x - x[rows, idx[:, :1]]) ** 2).sum(-1)
    x_sq = (x**2).sum(-1)
    t = 1
    for size in _round_sizes(m):
        new = _pick_torch((w + _W_FLOOR) * d2 + _P_FLOOR, uniforms[:, t:t + size])
        idx[:, t:t + size] = new
        c = x[rows, new]  # (n, size, D); expanded distances: only sampling weights use them
        near = x_sq[..., None] - 2.0 * (x @ c.transpose(-1, -2)) + (c**2).sum(-1)[:, None, :]
        d2 = torch.minimum(d2, near.amin(dim=-1).clamp_(min=0.0))
        t += size
    centres = x[rows, idx]
    for _ in range(LLOYD_ITERATIONS):
        dist = (centres**2).sum(-1)[:, None, :] - 2.0 * (x @ centres.transpose(-1, -2))
        assign = dist.argmin(dim=-1)  # (n, S)
        member = torch.nn.functional.one_hot(assign, m).to(x.dtype) * w[..., None]
        mass = member.sum(dim=1)  # (n, m); products, not scatter_add (atomics on m rows)
        sums = _split_k_product(member, x)
        safe = torch.where(mass > 0, mass, torch.ones_like(mass))
        centres = torch.where(mass[..., None] > 0, sums / safe[..., None], centres)
    return centres + mean


def _nonnegative_fit_torch(C, U, iterations):
    """:func:`_nonnegative_fit_np` on tensors: ``iterations`` FISTA steps without autograd,
    then the plain projected step, differentiable in C and U."""
    import torch

    Ut = U.transpose(-1, -2)
    UU, CU = U @ Ut, C @ Ut
    lip = UU.sum(dim=-1).amax(dim=-1)[:, None, None]  # 0 only if every entry of U underflowed
    step = torch.where(lip > 0, 1.0 / torch.where(lip > 0, lip, 1.0), 0.0)
    with torch.no_grad():  # few passes over the (n, T, r) iterates: one fused product each
        UU_s, CU_s = UU * step, CU * step
        a = y = torch.zeros_like(CU)
        t = 1.0
        for _ in range(iterations):
            a_next = torch.baddbmm(CU_s, y, UU_s, alpha=-1.0).add_(y).clamp_(min=0.0)
            t_next = 0.5 * (1.0 + math.sqrt(1.0 + 4.0 * t * t))
            y = torch.lerp(a, a_next, 1.0 + (t - 1.0) / t_next)  # a_next + mom (a_next - a)
            a, t = a_next, t_next
    a = (a - (a @ UU - CU) * step).clamp(min=0.0)
    return a + FLOOR / U.shape[-2]


def _split_k_product(a, b, chunk=1024):
    """a^T b for a (n, S, m), b (n, S, D), summed over S in chunks: one (m x D) product with a
    reduction of length S leaves most of a GPU idle; chunks of ``chunk`` rows run in parallel."""
    n, S, m = a.shape
    whole = S - S % chunk
    if whole < 4 * chunk:
        return a.transpose(-1, -2) @ b
    out = (a[:, :whole].reshape(n, -1, chunk, m).transpose(-1, -2)
           @ b[:, :whole].reshape(n, -1, chunk, b.shape[-1])).sum(dim=1)
    if whole < S:
        out = out + a[:, whole:].transpose(-1, -2) @ b[:, whole:]
    return out


def nystrom_attention(q, k, v, m, *, is_causal=False, seed=0, scale=None, eps=1e-6, causal=None,
                      backend="auto"):
    """Nyström attention on torch tensors: the fast twin of :func:`nystrom_weights`.

    Everything runs in float32 (float64 for float64 input). Differentiable in q, k and v, with
    the landmarks, the shifts and the fit's iterate before its last step treated as constants
    (so the gradient in q is that of one projected-gradient step of the fit, not of its exact
    solution). The last step is :func:`kernelkit.attention.linear_attention` with the identity
    map on the coefficients (T x r) and the landmark rows (S x r), so it runs the Triton kernels
    on CUDA (and under ``TRITON_INTERPRET=1``).

    Parameters
    ----------
    q : torch.Tensor of shape (B, H, T, D)
    k : torch.Tensor of shape (B, H, S, D)
    v : torch.Tensor of shape (B, H, S, Dv)
    m, is_causal, seed, scale, eps
        As :func:`nystrom_weights`.
    backend : {"auto", "triton", "torch"}, default "auto"
        The ``backend`` of the last step's :func:`kernelkit.attention.linear_attention`.

    Returns
    -------
    torch.Tensor of shape (B, H, T, Dv), the dtype of q.

    Examples
    --------
    >>> import torch
    >>> q = k = v = torch.randn(1, 2, 16, 8)
    >>> nystrom_attention(q, k, v, 4, is_causal=True).shape
    torch.Size([1, 2, 16, 8])
    """
    causal = resolve_is_causal(is_causal, causal, "nystrom_attention")
    import torch

    from kernelkit.attention._dispatch import _check_backend, linear_attention

    _check_backend(backend)
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.ndim != 4:
            raise ValueError(f"{name} must be a 4-D torch.Tensor (B, H, N, D); got "
                             f"{getattr(t, 'shape', type(t).__name__)}")
    B, H, T, D = q.shape
    S = k.shape[2]
    if k.shape[:2] != (B, H) or v.shape[:3] != (B, H, S) or k.shape[3] != D:
        raise ValueError(f"q (B, H, T, D), k (B, H, S, D), v (B, H, S, Dv) do not match: "
                         f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if S < 1:
        raise ValueError("Nyström attention needs at least one key (S >= 1)")
    m = min(_check_m(m), S)
    scale = _resolve_scale(scale, D)
    work = torch.float64 if q.dtype == torch.float64 else torch.float32
    n = B * H
    qf = q.reshape(n, T, D).to(work)
    kf = k.reshape(n, S, D).to(work)
    query_index, uniforms = landmark_draws(seed, n, T, m)
    query_index = torch.as_tensor(query_index, device=q.device)
    uniforms = torch.as_tensor(uniforms, dtype=work, device=q.device)
    lq = torch.gather(qf, 1, query_index[..., None].expand(-1, -1, D))  # (n, r, D)
    logits = scale * (lq @ kf.transpose(-1, -2))  # (n, r, S)
    with torch.no_grad():  # landmarks and shifts are data-dependent constants for autograd
        shift = logits.amax(dim=-1, keepdim=True)
        masked = logits
        if causal:
            visible = torch.arange(S, device=q.device)[None, None, :] <= query_index[..., None]
            masked = logits.masked_fill(~visible, float("-inf"))
        w = torch.softmax(masked, dim=-1).sum(dim=1)
        L = _landmarks_torch(kf.detach(), w / w.sum(dim=-1, keepdim=True), uniforms)
    R = torch.exp(logits - shift)  # (n, r, S) landmark rows, max 1
    U = torch.exp((scale * (lq @ L.transpose(-1, -2)) - shift).clamp(max=0.0))  # (n, r, m)
    lc = scale * (qf @ L.transpose(-1, -2))
    C = torch.exp(lc - lc.amax(dim=-1, keepdim=True).detach())  # (n, T, m)
    a = _nonnegative_fit_torch(C, U, NNLS_ITERATIONS)  # (n, T, r)
    if causal:
        mass = R.cumsum(dim=-1).transpose(-1, -2)[:, torch.arange(T, device=q.device).clamp_(max=S - 1)]
    else:
        mass = R.sum(dim=-1)[:, None, :]
    den = (a * mass).sum(dim=-1, keepdim=True)
    a = a / (den + (den <= 0).to(den.dtype))  # rows sum to 1 before linear attention's guard
    r = a.shape[-1]
    phi_q = a.reshape(B, H, T, r)  # W = phi_q phi_k^T = a R
    phi_k = R.transpose(-1, -2).reshape(B, H, S, r)
    out = linear_attention(phi_q, phi_k, v.to(work), "identity", is_causal=causal, eps=eps,
                           backend=backend)
    return out.to(q.dtype)
