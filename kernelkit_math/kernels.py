"""Float64 reference kernels: value K(X, Y), diagonal and log-hyperparameter gradients.

Every function takes X of shape (n_X, n_features) and optional Y of shape (n_Y, n_features)
and returns float64. Parameters follow scikit-learn's names; ``gamma=None`` means
``1 / n_features`` and ``scale=None`` means ``1 / sqrt(n_features)``. Vector parameters
(``gamma`` of RBF and Laplacian, ``length_scale`` of Matérn and rational quadratic) may hold
one value per feature.

With ``Y=None`` each kernel is exactly symmetric and its diagonal equals ``<kernel>_diag``
bit for bit. ``<kernel>_gradient(X, ...)`` returns ``(K, dK)`` with ``dK`` of shape
(n, n, n_dims): the derivative of K(X, X) with respect to the natural log of each
hyperparameter, in registry order (a per-feature parameter contributes one column per feature).

These functions trust their parameters; :mod:`kernelkit_math.registry` validates them.
"""

import numpy as np

from kernelkit_math import distances as _d

SQRT3 = np.sqrt(3.0)
SQRT5 = np.sqrt(5.0)


def _n_features(X):
    return np.shape(X)[1]


def default_gamma(n_features):
    """What ``gamma=None`` means: 1 / n_features (scikit-learn's rule)."""
    return 1.0 / n_features


def default_scale(n_features):
    """What the exponential kernel's ``scale=None`` means: 1 / sqrt(n_features)."""
    return 1.0 / np.sqrt(n_features)


def _gamma(gamma, X):
    return default_gamma(_n_features(X)) if gamma is None else gamma


def _scale(scale, X):
    return default_scale(_n_features(X)) if scale is None else scale


def _finish(K, X, Y, diag):
    """Make K(X, X) exactly symmetric with an exact diagonal."""
    if Y is None:
        _d.symmetrize_upper(K, diag)
    return K


def _stack(*columns):
    """Stack per-hyperparameter gradients (n, n) or (n, n, k) into (n, n, n_dims)."""
    parts = [c[..., None] if c.ndim == 2 else c for c in columns]
    return np.concatenate(parts, axis=2) if parts else None


def _vector_or_scalar_grad(K, per_feature, total, param):
    """dK/dlog p for a parameter that multiplies the distance: -p_k D_k K (vector) or -D K."""
    if np.ndim(param) == 0:
        return -(total * K)[..., None]
    return -per_feature * K[..., None]


# ----------------------------------------------------------------------------------- linear
def linear(X, Y=None):
    """Linear kernel ``k(x, y) = x·y``."""
    return _d.dot(X, Y)


def linear_diag(X):
    return _d.row_dots(X)


def linear_gradient(X):
    K = linear(X)
    return K, np.empty(K.shape + (0,))


# ------------------------------------------------------------------------------- polynomial
def polynomial(X, Y=None, gamma=None, degree=3, coef0=1.0):
    """Polynomial kernel ``k(x, y) = (gamma x·y + coef0) ** degree``."""
    gamma = _gamma(gamma, X)
    K = (gamma * _d.dot(X, Y) + coef0) ** degree
    return _finish(K, X, Y, None if Y is not None else polynomial_diag(X, gamma, degree, coef0))


def polynomial_diag(X, gamma=None, degree=3, coef0=1.0):
    return (_gamma(gamma, X) * _d.row_dots(X) + coef0) ** degree


def polynomial_gradient(X, gamma=None, degree=3, coef0=1.0):
    gamma = _gamma(gamma, X)
    S = _d.dot(X)
    base = gamma * S + coef0
    K = base**degree
    _d.symmetrize_upper(K, polynomial_diag(X, gamma, degree, coef0))
    d_base = degree * base ** (degree - 1) if degree > 0 else np.zeros_like(base)
    return K, _stack(gamma * S * d_base, coef0 * d_base)


# -------------------------------------------------------------------------------------- rbf
def rbf(X, Y=None, gamma=None):
    """Gaussian kernel ``k(x, y) = exp(-sum_k gamma_k (x_k - y_k)**2)``.

    ``gamma`` may be a scalar or one value per feature; ``gamma = 1 / (2 length_scale**2)``.
    """
    K = np.exp(-_d.sqeuclidean(X, Y, _gamma(gamma, X)))
    return _finish(K, X, Y, None if Y is not None else 1.0)


def rbf_diag(X, gamma=None):
    return np.ones(np.shape(X)[0])


def rbf_gradient(X, gamma=None):
    gamma = _gamma(gamma, X)
    D = _d.sqeuclidean(X, None, gamma)
    K = _d.symmetrize_upper(np.exp(-D), 1.0)
    per_feature = None if np.ndim(gamma) == 0 else _d.per_feature_sqdiff(X, None, gamma)
    return K, _vector_or_scalar_grad(K, per_feature, D, gamma)


# -------------------------------------------------------------------------------- laplacian
def laplacian(X, Y=None, gamma=None):
    """Laplacian kernel ``k(x, y) = exp(-sum_k gamma_k |x_k - y_k|)`` (L1 distance)."""
    K = np.exp(-_d.manhattan(X, Y, _gamma(gamma, X)))
    return _finish(K, X, Y, None if Y is not None else 1.0)


def laplacian_diag(X, gamma=None):
    return np.ones(np.shape(X)[0])


def laplacian_gradient(X, gamma=None):
    gamma = _gamma(gamma, X)
    D = _d.manhattan(X, None, gamma)
    K = _d.symmetrize_upper(np.exp(-D), 1.0)
    per_feature = None if np.ndim(gamma) == 0 else _d.per_feature_absdiff(X, None, gamma)
    return K, _vector_or_scalar_grad(K, per_feature, D, gamma)


# ----------------------------------------------------------------------------------- matern
def _inv_sq(length_scale):
    return 1.0 / np.asarray(length_scale, dtype=np.float64) ** 2


def _matern_profile(r, nu):
    """Matérn value as a function of the scaled distance r = ||(x - y) / length_scale||."""
    if nu == 0.5:
        return np.exp(-r)
    if nu == 1.5:
        t = SQRT3 * r
        return (1.0 + t) * np.exp(-t)
    t = SQRT5 * r
    return (1.0 + t + t * t / 3.0) * np.exp(-t)


def _matern_dk_dr2(r, nu):
    """-2 dK/d(r**2): the factor that multiplies (x_k - y_k)**2 / l_k**2 in dK/dlog l_k."""
    if nu == 0.5:
        with np.errstate(divide="ignore", invalid="ignore"):
            g = np.exp(-r) / r
        g[r == 0] = 0.0  # the one-sided derivative of exp(-r) at r = 0 is not defined; use 0
        return g
    if nu == 1.5:
        return 3.0 * np.exp(-SQRT3 * r)
    t = SQRT5 * r
    return 5.0 / 3.0 * (1.0 + t) * np.exp(-t)


def matern(X, Y=None, length_scale=1.0, nu=1.5):
    """Matérn kernel for ``nu`` in {0.5, 1.5, 2.5} on r = ||(x - y) / length_scale||.

    nu = 0.5: exp(-r); nu = 1.5: (1 + √3 r) exp(-√3 r); nu = 2.5: (1 + √5 r + 5r²/3) exp(-√5 r).
    """
    r = np.sqrt(_d.sqeuclidean(X, Y, _inv_sq(length_scale)))
    return _finish(_matern_profile(r, nu), X, Y, None if Y is not None else matern_diag(X))


def matern_diag(X, length_scale=1.0, nu=1.5):
    return np.ones(np.shape(X)[0])


def matern_gradient(X, length_scale=1.0, nu=1.5):
    w = _inv_sq(length_scale)
    D = _d.sqeuclidean(X, None, w)
    r = np.sqrt(D)
    K = _d.symmetrize_upper(_matern_profile(r, nu), 1.0)
    g = _matern_dk_dr2(r, nu)
    if np.ndim(length_scale) == 0:
        return K, (g * D)[..., None]
    return K, g[..., None] * _d.per_feature_sqdiff(X, None, w)


# ----------------------------------------------------------------------- rational quadratic
def rational_quadratic(X, Y=None, length_scale=1.0, alpha=1.0):
    """Rational quadratic kernel ``(1 + r**2 / (2 alpha)) ** -alpha``, r as for Matérn."""
    D = _d.sqeuclidean(X, Y, _inv_sq(length_scale))
    K = (1.0 + D / (2.0 * alpha)) ** -alpha
    return _finish(K, X, Y, None if Y is not None else 1.0)


def rational_quadratic_diag(X, length_scale=1.0, alpha=1.0):
    return np.ones(np.shape(X)[0])


def rational_quadratic_gradient(X, length_scale=1.0, alpha=1.0):
    w = _inv_sq(length_scale)
    D = _d.sqeuclidean(X, None, w)
    base = 1.0 + D / (2.0 * alpha)
    K = _d.symmetrize_upper(base**-alpha, 1.0)
    g = K / base
    if np.ndim(length_scale) == 0:
        d_length = (g * D)[..., None]
    else:
        d_length = g[..., None] * _d.per_feature_sqdiff(X, None, w)
    d_alpha = K * (-alpha * np.log(base) + D / (2.0 * base))
    return K, _stack(d_length, d_alpha)


# --------------------------------------------------------------------------------- periodic
def _periodic_terms(D, length_scale, periodicity):
    """(arg, sin(arg), K) for squared distances D: arg = pi ||x - y|| / periodicity."""
    arg = np.pi * np.sqrt(D) / periodicity
    sin_arg = np.sin(arg)
    return arg, sin_arg, np.exp(-2.0 * (sin_arg / length_scale) ** 2)


def periodic(X, Y=None, length_scale=1.0, periodicity=1.0):
    """Periodic kernel ``exp(-2 sin(pi ||x - y|| / periodicity)**2 / length_scale**2)``.

    scikit-learn's ``ExpSineSquared``; the distance is formed from direct differences.
    """
    K = _periodic_terms(_d.sqeuclidean(X, Y), length_scale, periodicity)[2]
    return _finish(K, X, Y, None if Y is not None else 1.0)


def periodic_diag(X, length_scale=1.0, periodicity=1.0):
    return np.ones(np.shape(X)[0])


def periodic_gradient(X, length_scale=1.0, periodicity=1.0):
    arg, sin_arg, K = _periodic_terms(_d.sqeuclidean(X), length_scale, periodicity)
    K = _d.symmetrize_upper(K, 1.0)
    scale = 4.0 / length_scale**2 * K
    return K, _stack(scale * sin_arg**2, scale * arg * np.cos(arg) * sin_arg)


# ----------------------------------------------------------------------------------- cosine
def _normalized(X):
    """Rows scaled to unit norm; zero rows stay zero (as sklearn.preprocessing.normalize).

    Each row is first divided by its largest magnitude so that squaring cannot underflow or
    overflow (rows of tiny or huge values keep full precision).
    """
    X = _d.as_float64_2d(X)
    peak = np.abs(X).max(axis=1)
    peak[peak == 0.0] = 1.0
    Xs = X / peak[:, None]
    return Xs / np.sqrt(_d.row_dots(Xs))[:, None].clip(min=np.finfo(np.float64).tiny)


def cosine(X, Y=None):
    """Cosine similarity ``x·y / (||x|| ||y||)``; a zero row gives similarity 0."""
    Xn = _normalized(X)
    K = _d.dot(Xn, None if Y is None else _normalized(Y))
    return _finish(K, X, Y, None if Y is not None else cosine_diag(X))


def cosine_diag(X):
    return (np.abs(_d.as_float64_2d(X)).max(axis=1) > 0).astype(np.float64)


def cosine_gradient(X):
    K = cosine(X)
    return K, np.empty(K.shape + (0,))


# ---------------------------------------------------------------------------------- sigmoid
def sigmoid(X, Y=None, gamma=None, coef0=1.0):
    """Sigmoid kernel ``tanh(gamma x·y + coef0)``; not positive semi-definite."""
    K = np.tanh(_gamma(gamma, X) * _d.dot(X, Y) + coef0)
    return _finish(K, X, Y, None if Y is not None else sigmoid_diag(X, gamma, coef0))


def sigmoid_diag(X, gamma=None, coef0=1.0):
    return np.tanh(_gamma(gamma, X) * _d.row_dots(X) + coef0)


def sigmoid_gradient(X, gamma=None, coef0=1.0):
    gamma = _gamma(gamma, X)
    S = _d.dot(X)
    K = _d.symmetrize_upper(np.tanh(gamma * S + coef0), sigmoid_diag(X, gamma, coef0))
    sech2 = 1.0 - K * K
    return K, _stack(gamma * S * sech2, coef0 * sech2)


# ------------------------------------------------------------------------------ exponential
def exponential(X, Y=None, scale=None):
    """Exponential (softmax-attention) kernel ``exp(scale x·y)``.

    The unnormalised weight of softmax attention with ``scale = 1 / sqrt(head_dim)``.
    """
    K = np.exp(_scale(scale, X) * _d.dot(X, Y))
    return _finish(K, X, Y, None if Y is not None else exponential_diag(X, scale))


def exponential_diag(X, scale=None):
    return np.exp(_scale(scale, X) * _d.row_dots(X))


def exponential_gradient(X, scale=None):
    scale = _scale(scale, X)
    S = _d.dot(X)
    K = _d.symmetrize_upper(np.exp(scale * S), exponential_diag(X, scale))
    return K, (scale * S * K)[..., None]
