"""Pairwise quantities that kernels are functions of, in float64, without cancellation.

Distances use direct differences (``scipy.spatial.distance.cdist``), never the expansion
``||x||² + ||y||² - 2 x·y``, so points far from the origin or nearly duplicate keep every digit.
With ``Y=None`` every function returns an exactly symmetric matrix; distances have an exact zero
diagonal, and the dot-product Gram has the row norms ``x·x`` on its diagonal.
"""

import numpy as np
from scipy.spatial.distance import cdist

__all__ = [
    "as_float64_2d",
    "dot",
    "row_dots",
    "sqeuclidean",
    "manhattan",
    "per_feature_sqdiff",
    "per_feature_absdiff",
    "symmetrize_upper",
]


def as_float64_2d(X, name="X"):
    """Return ``X`` as a C-contiguous float64 array of shape (n_samples, n_features).

    A light check for internal callers; user-facing validation lives in ``kernelkit``.
    """
    X = np.ascontiguousarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"{name} must be 2-D (n_samples, n_features); got shape {X.shape}")
    return X


def _pair(X, Y):
    X = as_float64_2d(X, "X")
    if Y is None:
        return X, X, True
    Y = as_float64_2d(Y, "Y")
    if X.shape[1] != Y.shape[1]:
        raise ValueError(
            f"X and Y must have the same number of features; got {X.shape[1]} and {Y.shape[1]}"
        )
    return X, Y, False


def symmetrize_upper(K, diagonal=None):
    """Mirror the upper triangle of square ``K`` onto the lower one, in place.

    Makes ``K`` exactly symmetric whatever rounding produced it; ``diagonal``, if given, is
    written onto the diagonal so that it equals the kernel's ``diag`` bit for bit.
    """
    lower = np.tril_indices(K.shape[0], -1)
    K[lower] = K.T[lower]
    if diagonal is not None:
        np.fill_diagonal(K, diagonal)
    return K


def _weighted_cdist(X, Y, metric, weights):
    """``cdist(X, Y, metric)`` with ``weights`` (None, a scalar or per-feature) on the differences.

    Per-feature weights go to cdist's ``w``, which weights each difference *after* it is formed:
    scaling the coordinates first would round each of them relative to its offset (data at 1e6
    with a weight of 1e8 would keep only ~1e-6 of their differences). A scalar weight multiplies
    the result.
    """
    w = None if weights is None else np.asarray(weights, dtype=np.float64)
    if w is not None and w.ndim > 0:
        return cdist(X, Y, metric, w=w)
    D = cdist(X, Y, metric)
    if w is not None:
        D *= float(w)
    return D


def row_dots(X):
    """Row-wise ``x·x`` for X of shape (n, d): the diagonal of ``dot(X)``."""
    X = as_float64_2d(X)
    return np.einsum("ij,ij->i", X, X)


def dot(X, Y=None):
    """Dot-product matrix ``X @ Y.T``, float64, shape (n_X, n_Y).

    With ``Y=None`` the result is exactly symmetric and its diagonal equals ``row_dots(X)``.
    """
    X, Y, same = _pair(X, Y)
    S = X @ Y.T
    if same:
        symmetrize_upper(S, row_dots(X))
    return S


def sqeuclidean(X, Y=None, weights=None):
    """Weighted squared Euclidean distances ``sum_k w_k (x_k - y_k)**2``.

    ``weights`` is None (all ones), a scalar or a per-feature array of shape (n_features,).
    Computed from direct differences, weighted after subtraction (data far from the origin keep
    their digits); exact zero diagonal and exact symmetry when ``Y=None``.
    """
    X, Y, same = _pair(X, Y)
    D = _weighted_cdist(X, Y, "sqeuclidean", weights)
    if same:
        symmetrize_upper(D, 0.0)
    return D


def manhattan(X, Y=None, weights=None):
    """Weighted L1 distances ``sum_k w_k |x_k - y_k|``; weights as in :func:`sqeuclidean`."""
    X, Y, same = _pair(X, Y)
    D = _weighted_cdist(X, Y, "cityblock", weights)
    if same:
        symmetrize_upper(D, 0.0)
    return D


def per_feature_sqdiff(X, Y=None, weights=None):
    """Per-feature weighted squared differences, shape (n_X, n_Y, n_features)."""
    X, Y, _ = _pair(X, Y)
    diff = X[:, None, :] - Y[None, :, :]
    diff *= diff
    if weights is not None:
        diff *= np.asarray(weights, dtype=np.float64)
    return diff


def per_feature_absdiff(X, Y=None, weights=None):
    """Per-feature weighted absolute differences, shape (n_X, n_Y, n_features)."""
    X, Y, _ = _pair(X, Y)
    diff = np.abs(X[:, None, :] - Y[None, :, :])
    if weights is not None:
        diff *= np.asarray(weights, dtype=np.float64)
    return diff
