"""Exact finite feature maps: phi(X) @ phi(Y).T equals the kernel up to rounding."""

import itertools
import math

import numpy as np

from kernelkit_math import distances as _d
from kernelkit_math.kernels import default_gamma

#: Refuse feature maps wider than this many columns (they would not fit in memory usefully).
MAX_FEATURES = 1_000_000


def linear_features(X):
    """Feature map of the linear kernel: phi(x) = x. Returns a float64 copy, shape (n, d)."""
    return _d.as_float64_2d(X).copy()


def polynomial_feature_count(n_features, degree):
    """Width of :func:`polynomial_features`: C(n_features + degree, degree)."""
    return math.comb(n_features + degree, degree)


def polynomial_features(X, gamma=None, degree=3, coef0=1.0):
    """Exact feature map of ``(gamma x·y + coef0) ** degree``.

    With z = (sqrt(gamma) x, sqrt(coef0)), each feature is one monomial of degree ``degree`` in z
    weighted by the square root of its multinomial coefficient, so phi(x)·phi(y) = (z·z') ** degree.

    Returns
    -------
    ndarray of shape (n, C(d + degree, degree))

    Raises
    ------
    ValueError
        If ``coef0 < 0`` (no real feature map exists) or the map would exceed ``MAX_FEATURES``.
    """
    X = _d.as_float64_2d(X)
    n, d = X.shape
    gamma = default_gamma(d) if gamma is None else gamma
    if coef0 < 0:
        raise ValueError(f"coef0 must be >= 0 for a real polynomial feature map; got {coef0}")
    width = polynomial_feature_count(d, degree)
    if width > MAX_FEATURES:
        raise ValueError(
            f"the degree-{degree} polynomial feature map of {d} features has {width} columns "
            f"(more than {MAX_FEATURES}); use the kernel itself instead"
        )
    Z = np.hstack([np.sqrt(gamma) * X, np.full((n, 1), np.sqrt(coef0))])
    out = np.empty((n, width))
    for col, combo in enumerate(itertools.combinations_with_replacement(range(d + 1), degree)):
        counts = np.bincount(combo, minlength=d + 1) if combo else np.zeros(d + 1, dtype=int)
        weight = math.factorial(degree) / math.prod(math.factorial(c) for c in counts)
        out[:, col] = np.sqrt(weight) * np.prod(Z[:, list(combo)], axis=1)
    return out
