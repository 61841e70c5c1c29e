r"""Accuracy metrics of approximate attention: small float64 NumPy functions.

Attention weights are arrays of shape (..., T, S) whose rows are distributions over the keys
(the softmax reference is one; an approximation's rows may hold negative entries). Every function
converts its inputs to float64, never modifies them, and reduces over the trailing axes only, so
leading batch axes (B, H) are kept:

- :func:`relative_error`: ||A' - A||_F / ||A||_F per matrix;
- :func:`total_variation`: 0.5 sum_j |A'_ij - A_ij| per row;
- :func:`kl_divergence`: KL(A_i || A'_i) per row, ``inf`` where A'_ij <= 0 < A_ij;
- :func:`entropy`, :func:`peakiness`: how spread out the reference rows are;
- :func:`uniform_weights`: the uniform-attention baseline (causal or not);
- :func:`best_rank_approximation`, :func:`svd_floor`: the best rank-M approximation of the
  weights (Eckart–Young) and its relative error, the floor of any method whose weights have
  rank M (every M-feature linear attention, Nyström with M landmarks).

Examples
--------
>>> import numpy as np
>>> from kernelkit.attention.comparison import metrics
>>> A = np.array([[0.5, 0.5], [1.0, 0.0]])
>>> metrics.total_variation(np.array([[1.0, 0.0], [1.0, 0.0]]), A).tolist()
[0.5, 0.0]
>>> metrics.entropy(A).round(4).tolist()
[0.6931, 0.0]
"""

from __future__ import annotations

import numbers

import numpy as np

from kernelkit_math.attention import resolve_is_causal

__all__ = [
    "relative_error",
    "total_variation",
    "kl_divergence",
    "entropy",
    "peakiness",
    "uniform_weights",
    "best_rank_approximation",
    "svd_floor",
]


def _pair(approx, exact):
    a = np.asarray(approx, dtype=np.float64)
    e = np.asarray(exact, dtype=np.float64)
    if a.shape != e.shape:
        raise ValueError(f"approx and exact must have the same shape; got {a.shape} and {e.shape}")
    return a, e


def _matrices(A, name="A"):
    A = np.asarray(A, dtype=np.float64)
    if A.ndim < 2:
        raise ValueError(f"{name} must have at least 2 dimensions (..., T, S); got shape {A.shape}")
    return A


def relative_error(approx, exact):
    r"""Relative Frobenius error of each trailing (T, N) matrix.

    .. math::

        \frac{\lVert A' - A \rVert_F}{\lVert A \rVert_F}

    A zero ``exact`` matrix gives 0 when ``approx`` is zero too, ``inf`` otherwise.

    Parameters
    ----------
    approx, exact : array_like of shape (..., T, N)

    Returns
    -------
    ndarray of shape (...), float64

    Examples
    --------
    >>> relative_error([[3.0, 4.0]], [[0.0, 5.0]]).item()
    0.6324555320336759
    """
    a, e = _pair(approx, exact)
    if a.ndim < 2:
        raise ValueError(f"approx and exact must have at least 2 dimensions; got shape {a.shape}")
    num = np.sqrt(np.sum((a - e) ** 2, axis=(-2, -1)))
    den = np.sqrt(np.sum(e**2, axis=(-2, -1)))
    out = np.full(num.shape, np.inf)
    np.divide(num, den, out=out, where=den > 0)
    out[(den == 0) & (num == 0)] = 0.0
    return out


def total_variation(approx, exact):
    r"""Total variation distance between corresponding rows, 0.5 sum_j |A'_ij - A_ij|.

    In [0, 1] for two distributions; larger when ``approx`` has negative entries or rows that do
    not sum to 1.

    Parameters
    ----------
    approx, exact : array_like of shape (..., S)

    Returns
    -------
    ndarray of shape (...), float64
    """
    a, e = _pair(approx, exact)
    return 0.5 * np.sum(np.abs(a - e), axis=-1)


def kl_divergence(exact, approx):
    r"""Kullback–Leibler divergence KL(A_i || A'_i) of each row, in nats.

    .. math::

        \mathrm{KL}(A_i \,\|\, A'_i) = \sum_{j:\, A_{ij} > 0} A_{ij} \log \frac{A_{ij}}{A'_{ij}}

    Terms with A_ij = 0 contribute 0 whatever A'_ij is; a row with some A'_ij <= 0 < A_ij is
    ``inf`` (the approximation gives no, or negative, weight to a key the reference attends to).

    Parameters
    ----------
    exact : array_like of shape (..., S)
        The reference rows (non-negative).
    approx : array_like of shape (..., S)

    Returns
    -------
    ndarray of shape (...), float64, ``inf`` for the rows described above.

    Raises
    ------
    ValueError
        If ``exact`` has a negative entry, or the shapes differ.

    Examples
    --------
    >>> kl_divergence([[0.5, 0.5]], [[0.25, 0.75]]).round(6).tolist()
    [0.143841]
    >>> kl_divergence([[0.5, 0.5]], [[1.0, 0.0]]).tolist()
    [inf]
    """
    a, e = _pair(approx, exact)
    if np.any(e < 0):
        raise ValueError("exact must hold non-negative weights")
    support = e > 0
    bad = np.any(support & (a <= 0), axis=-1)
    ok = support & (a > 0)
    terms = np.zeros(e.shape)
    np.log(np.divide(e, a, out=np.ones(e.shape), where=ok), out=terms, where=ok)
    out = np.sum(e * terms, axis=-1)
    out[bad] = np.inf
    return out


def entropy(weights):
    r"""Shannon entropy of each row in nats, -sum_j A_ij log A_ij (0 log 0 = 0).

    Parameters
    ----------
    weights : array_like of shape (..., S), non-negative rows

    Returns
    -------
    ndarray of shape (...), float64
    """
    w = np.asarray(weights, dtype=np.float64)
    logs = np.zeros(w.shape)
    np.log(w, out=logs, where=w > 0)
    return 0.0 - np.sum(w * logs, axis=-1)  # 0.0 - 0.0 is +0.0, not -0.0


def peakiness(weights):
    """The largest weight of each row, max_j A_ij: 1/S for uniform rows, 1 for one-hot rows.

    Parameters
    ----------
    weights : array_like of shape (..., S)

    Returns
    -------
    ndarray of shape (...), float64
    """
    w = np.asarray(weights, dtype=np.float64)
    return np.max(w, axis=-1, initial=-np.inf)


def uniform_weights(T, S, is_causal=False, causal=None):
    """Uniform attention over the visible keys, shape (T, S).

    Row i is 1 / S on every key, or with ``is_causal`` (top-left aligned, key j visible iff
    j <= i) 1 / min(i + 1, S) on keys 0..min(i, S - 1).

    Parameters
    ----------
    T, S : int
        Query and key lengths (>= 0).
    is_causal : bool
        ``causal`` is the deprecated name of ``is_causal`` (FutureWarning).

    Returns
    -------
    ndarray of shape (T, S), float64

    Examples
    --------
    >>> uniform_weights(2, 2, is_causal=True).tolist()
    [[1.0, 0.0], [0.5, 0.5]]
    """
    causal = resolve_is_causal(is_causal, causal, "uniform_weights")
    for name, n in (("T", T), ("S", S)):
        if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 0:
            raise ValueError(f"{name} must be a non-negative integer; got {n!r}")
    visible = np.tri(T, S, dtype=bool) if causal else np.ones((T, S), dtype=bool)
    counts = visible.sum(axis=-1, keepdims=True)
    return np.divide(visible, counts, out=np.zeros((T, S)), where=counts > 0)


def _check_rank(rank, A):
    if isinstance(rank, bool) or not isinstance(rank, numbers.Integral) or rank < 0:
        raise ValueError(f"rank must be a non-negative integer; got {rank!r}")
    return min(int(rank), min(A.shape[-2:]))


def _svd(A, svd):
    if svd is None:
        return np.linalg.svd(A, full_matrices=False)
    return svd


def best_rank_approximation(A, rank, *, svd=None):
    """The best rank-``rank`` approximation of each trailing matrix (truncated SVD).

    By the Eckart–Young theorem no matrix of rank <= M is closer to A in Frobenius norm.

    Parameters
    ----------
    A : array_like of shape (..., T, S)
    rank : int
        M >= 0; values above min(T, S) give A itself (up to rounding).
    svd : tuple (U, s, Vt) or None
        ``np.linalg.svd(A, full_matrices=False)`` when already computed (several ranks of one A).

    Returns
    -------
    ndarray of shape (..., T, S), float64

    Examples
    --------
    >>> best_rank_approximation([[3.0, 0.0], [0.0, 4.0]], 1).tolist()
    [[0.0, 0.0], [0.0, 4.0]]
    """
    A = _matrices(A)
    r = _check_rank(rank, A)
    U, s, Vt = _svd(A, svd)
    return (U[..., :, :r] * s[..., None, :r]) @ Vt[..., :r, :]


def svd_floor(A, rank, *, svd=None):
    r"""Relative Frobenius error of the best rank-M approximation of each trailing matrix.

    .. math::

        \frac{\lVert A - A_M \rVert_F}{\lVert A \rVert_F}
        = \sqrt{\frac{\sum_{i > M} \sigma_i^2}{\sum_i \sigma_i^2}}

    computed from the singular values (0 for a zero matrix).

    Parameters
    ----------
    A : array_like of shape (..., T, S)
    rank : int
    svd : tuple (U, s, Vt) or None
        As :func:`best_rank_approximation`.

    Returns
    -------
    ndarray of shape (...), float64

    Examples
    --------
    >>> float(svd_floor([[3.0, 0.0], [0.0, 4.0]], 1))
    0.6
    """
    A = _matrices(A)
    r = _check_rank(rank, A)
    s = _svd(A, svd)[1]
    total = np.sum(s**2, axis=-1)
    tail = np.sum(s[..., r:] ** 2, axis=-1)
    return np.sqrt(np.divide(tail, total, out=np.zeros(total.shape), where=total > 0))
