r"""Nyström attention: the exponential kernel of softmax attention through M landmarks.

Softmax attention is the smoother of the exponential kernel
:math:`\kappa(q, k) = e^{s\, q\cdot k}`, which is positive semi-definite. The Nyström method
approximates it through M landmark points :math:`\ell_1..\ell_M`:

.. math::

    \kappa(q, k) \approx \kappa(q, L)\, \kappa(L, L)^{-1} \kappa(L, k),

exact for every pair in which q or k is a landmark. It is a linear-attention method with M
signed features per head: cost O((T + S) M D + M^3) instead of O(T S D).

Numerics. :math:`e^{s q\cdot\ell}` spans a huge range, so everything is written with shifted
logits. With :math:`\lambda_m(x) = s\, x\cdot\ell_m - \tfrac{s}{2}\lVert\ell_m\rVert^2`,
:math:`\kappa(x, \ell_m) = e^{\lambda_m(x)} e^{s\lVert\ell_m\rVert^2/2}` and
:math:`\kappa(L, L) = D^{1/2} G D^{1/2}` with :math:`D = \mathrm{diag}(e^{s\lVert\ell\rVert^2})`
and :math:`G_{ab} = e^{-s\lVert\ell_a - \ell_b\rVert^2/2}` (entries in (0, 1], unit diagonal),
so the weight of key j for query i is

.. math::

    W_{ij} = F^q_i\, (G + \delta I)^{-1} F^{k\,\top}_j,\qquad
    F^q_{im} = e^{\lambda_m(q_i) - \max_{m'} \lambda_{m'}(q_i)},\quad
    F^k_{jm} = e^{\lambda_m(k_j) - \max_{j', m'} \lambda_{m'}(k_{j'})}.

The per-query shift cancels in the normalised ratio; the key shift is one constant per head and
cancels too. ``delta`` = 1e-6 regularises landmarks that (nearly) coincide. Weights may be
negative and a denominator may be <= 0; it is guarded as in linear attention, max(den, eps).

Landmarks (per batch element and head), drawn from the seed:

1. *importance*: r = min(T, M) queries drawn uniformly without replacement; their exact softmax
   rows over the keys (causal mask respected) are summed into a weight w_j per key, the
   attention mass the sampled queries put on key j (O(M S D));
2. *weighted k-means++* seeding on the keys: D² sampling with probability proportional to
   w_j d_j² (d_j the distance to the nearest centre so far), in at most 16 rounds of
   independent draws (:data:`SEEDING_ROUNDS`, a batched variant of k-means++; a key drawn twice
   in one round wastes a landmark);
3. three weighted Lloyd iterations (a centre whose keys all have weight 0 stays put).

So landmarks settle on the keys that attention concentrates on (peaky heads, attention sinks,
clusters of keys), where FAVOR+'s random features have their largest variance. In causal mode
the landmarks are chosen from all keys (the prefill setting, not a streaming decoder).
With M >= S the landmarks can be the keys themselves, so M is capped at S.

:func:`nystrom_weights` is the float64 NumPy version (weights and denominators);
:func:`nystrom_attention` the torch version (any device, float32 / bfloat16 / float16 / float64),
which runs the final step through :func:`kernelkit.attention.linear_attention` (Triton on CUDA).
Both take their random draws from :func:`landmark_draws`, so they choose the same landmarks up to
the rounding of the sampling probabilities.

Cost, measured on an H200 (``kernelkit.compare.sweeps``, B=1 H=8 D=64 bfloat16, forward,
non-causal): at T = 65536, ``nystrom:64`` 13.0 ms (landmark selection 8.9 ms of it) against
``favor+:64`` 1.8 ms and softmax 20.2 ms; ``nystrom:256`` 29 ms (causal: 81 ms, its signed
features run the linear-attention kernel in float32). Nyström buys accuracy, not speed.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from kernelkit_math.attention import resolve_is_causal

__all__ = ["nystrom_weights", "nystrom_attention", "landmark_draws", "LLOYD_ITERATIONS",
           "SEEDING_ROUNDS", "DELTA"]

#: Weighted Lloyd iterations after k-means++ seeding.
LLOYD_ITERATIONS = 3
#: k-means++ seeding draws its M centres in at most this many rounds (ceil((M - 1) / rounds)
#: independent draws per round), so the GPU version launches O(rounds) kernels, not O(M).
SEEDING_ROUNDS = 16
#: Floors of the seeding probabilities (w_j + W_FLOOR) d_j² + P_FLOOR: keys the sampled queries
#: ignore are drawn once every attended key is a centre, and any key once all are.
_W_FLOOR = 1e-12
_P_FLOOR = 1e-30
#: Ridge added to the unit diagonal of the landmark Gram matrix G.
DELTA = 1e-6


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


def _importance_np(q, k, query_index, scale, causal):
    qs = np.take_along_axis(q, query_index[..., None], axis=1)  # (n, r, D)
    scores = scale * (qs @ np.swapaxes(k, -1, -2))  # (n, r, S)
    if causal:
        visible = np.arange(k.shape[1])[None, None, :] <= query_index[..., None]
        scores = np.where(visible, scores, -np.inf)
    p = np.exp(scores - scores.max(axis=-1, keepdims=True))
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


def _landmarks_np(q, k, m, causal, seed, scale):
    query_index, uniforms = landmark_draws(seed, q.shape[0], q.shape[1], m)
    w = _importance_np(q, k, query_index, scale, causal)
    mean = k.mean(axis=1, keepdims=True)  # k-means is translation invariant; centring helps
    return _kmeans_np(k - mean, w, uniforms) + mean


def _shifted_features(x, landmarks, scale, per_row):
    logits = scale * (x @ np.swapaxes(landmarks, -1, -2)) \
        - 0.5 * scale * np.sum(landmarks**2, axis=-1)[:, None, :]
    axes = -1 if per_row else (-2, -1)
    return np.exp(logits - logits.max(axis=axes, keepdims=True))


def _gram(landmarks, scale):
    diff = landmarks[:, :, None, :] - landmarks[:, None, :, :]
    G = np.exp(-0.5 * scale * np.sum(diff**2, axis=-1))
    return G + DELTA * np.eye(landmarks.shape[1])


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
        Row-normalised weights W / max(den, eps) (rows may hold negative entries).
    den : ndarray of shape (..., T)
        The raw denominators sum_j W_ij (in units of the shifted features).

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> q, k = rng.normal(size=(2, 6, 4)), rng.normal(size=(2, 9, 4))
    >>> A, den = nystrom_weights(q, k, 9)  # M = S: every key is a landmark
    >>> s = q @ k.transpose(0, 2, 1) / 2.0
    >>> exact = np.exp(s - s.max(-1, keepdims=True))
    >>> bool(np.allclose(A, exact / exact.sum(-1, keepdims=True), atol=1e-4))
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
    qf, kf = q.reshape(-1, T, D), k.reshape(-1, S, D)
    L = _landmarks_np(qf, kf, m, causal, seed, scale)
    Fq = _shifted_features(qf, L, scale, per_row=True)
    Fk = _shifted_features(kf, L, scale, per_row=False)
    W = Fq @ np.linalg.solve(_gram(L, scale), np.swapaxes(Fk, -1, -2))  # (n, T, S)
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


def _landmarks_torch(q, k, m, causal, seed, scale):
    import torch

    n, T, D = q.shape
    S = k.shape[1]
    query_index, uniforms = landmark_draws(seed, n, T, m)
    query_index = torch.as_tensor(query_index, device=q.device)
    uniforms = torch.as_tensor(uniforms, dtype=q.dtype, device=q.device)
    rows = torch.arange(n, device=q.device)[:, None]
    # importance of each key: the softmax mass the sampled queries put on it
    qs = torch.gather(q, 1, query_index[..., None].expand(-1, -1, D))
    scores = scale * (qs @ k.transpose(-1, -2))
    if causal:
        visible = torch.arange(S, device=q.device)[None, None, :] <= query_index[..., None]
        scores = scores.masked_fill(~visible, float("-inf"))
    w = torch.softmax(scores, dim=-1).sum(dim=1)
    w = w / w.sum(dim=-1, keepdim=True)
    # weighted k-means++ seeding on the centred keys, in rounds of independent draws
    mean = k.mean(dim=1, keepdim=True)
    x = k - mean
    idx = torch.empty((n, m), dtype=torch.long, device=q.device)
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


def nystrom_attention(q, k, v, m, *, is_causal=False, seed=0, scale=None, eps=1e-6, causal=None):
    """Nyström attention on torch tensors: the fast twin of :func:`nystrom_weights`.

    Landmarks, features and the linear-attention step run in float32 (float64 for float64
    input); the M x M Cholesky factorisation in float64. Differentiable in q, k and v, with the
    landmarks treated as constants (their selection is not differentiated). The last step is
    :func:`kernelkit.attention.linear_attention` with the identity map on the M Nyström
    features, so it runs the Triton kernels on CUDA (and under ``TRITON_INTERPRET=1``).

    Parameters
    ----------
    q : torch.Tensor of shape (B, H, T, D)
    k : torch.Tensor of shape (B, H, S, D)
    v : torch.Tensor of shape (B, H, S, Dv)
    m, is_causal, seed, scale, eps
        As :func:`nystrom_weights`.

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

    from kernelkit._attention_ops import linear_attention

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
    qf = q.reshape(B * H, T, D).to(work)
    kf = k.reshape(B * H, S, D).to(work)
    with torch.no_grad():  # landmarks are data-dependent constants for autograd
        L = _landmarks_torch(qf.detach(), kf.detach(), m, causal, seed, scale)
    half_norm = 0.5 * scale * (L**2).sum(-1)[:, None, :]
    lq = scale * (qf @ L.transpose(-1, -2)) - half_norm
    lk = scale * (kf @ L.transpose(-1, -2)) - half_norm
    Fq = torch.exp(lq - lq.amax(dim=-1, keepdim=True))
    Fk = torch.exp(lk - lk.amax(dim=(-2, -1), keepdim=True))
    L64 = L.double()
    dist = torch.cdist(L64, L64, compute_mode="donot_use_mm_for_euclid_dist")  # direct differences
    G = torch.exp(-0.5 * scale * dist**2)
    G = G + DELTA * torch.eye(m, dtype=torch.float64, device=q.device)
    chol = torch.linalg.cholesky(G)
    eye = torch.eye(m, dtype=torch.float64, device=q.device).expand(B * H, m, m)
    inv_t = torch.linalg.solve_triangular(chol, eye, upper=False).transpose(-1, -2).to(work)
    phi_q = (Fq @ inv_t).reshape(B, H, T, m)  # W = phi_q phi_k^T = Fq G^-1 Fk^T
    phi_k = (Fk @ inv_t).reshape(B, H, S, m)
    if work == torch.float64:  # the Triton kernels take float32 at most
        out = _linear_attention_float64(phi_q, phi_k, v.double(), causal, eps)
    else:
        out = linear_attention(phi_q, phi_k, v.to(work), "identity", is_causal=causal, eps=eps)
    return out.to(q.dtype)


def _linear_attention_float64(phi_q, phi_k, v, causal, eps):
    from kernelkit_gpu.attention.linear_naive import linear_attention_naive

    return linear_attention_naive(phi_q, phi_k, v, feature_map=None, is_causal=causal, eps=eps)
