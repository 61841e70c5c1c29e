"""Feature maps for linear attention and kernel approximation, in float64.

A feature map phi sends vectors of shape (..., D) to features of shape (..., M) so that
phi(x)·phi(y) is (exactly, in expectation, or approximately) a kernel k(x, y). Linear attention
(:func:`kernelkit_math.attention.linear_attention`) replaces the softmax weight exp(scale q·k)
by phi(q)·phi(k), which makes the cost linear in the sequence length.

The feature-map registry (:data:`FEATURE_MAPS`, one :class:`FeatureMapSpec` per map, as
:mod:`kernelkit_math.registry` is for kernels) names every map with its width, the sign of its
weights, its kernel, its float64 phi (and phi' for the maps fused into the Triton kernels) and
its fused code; :func:`make_feature_map` builds a map from its name. The maps, from the registry:

{registry}

Every map has ``name`` (its canonical spec string), ``kernel`` (registry name and parameters, or
None), ``relation`` ("exact", "unbiased", "taylor2" or None), ``seed`` (None for deterministic maps),
``weights`` (the random matrix, None for deterministic maps; the GPU side reuses it verbatim so
both sides compute the same features) and ``num_features(d)``. Random maps draw their weights from
``numpy.random.default_rng(seed)`` when built, so the same seed always gives the same map.

Examples
--------
>>> import numpy as np
>>> from kernelkit_math.random_features import make_feature_map
>>> phi = make_feature_map("favor+:256", 4, seed=0)
>>> phi.weights.shape, phi.num_features(4), phi.kernel[0]
((256, 4), 256, 'exponential')
>>> phi(np.zeros((2, 3, 4))).shape
(2, 3, 256)
"""

from __future__ import annotations

import math
import numbers
import textwrap
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from kernelkit_math.registry import fill_doc

__all__ = [
    "FeatureMap",
    "ElementwiseMap",
    "IdentityMap",
    "EluPlusOneMap",
    "ReluMap",
    "FavorPlusMap",
    "HyperbolicFavorMap",
    "RandomFourierMap",
    "Taylor2Map",
    "make_feature_map",
    "feature_map_names",
    "FeatureMapSpec",
    "FEATURE_MAPS",
    "get_feature_map",
    "feature_map_list_doc",
    "feature_map_set_doc",
    "gaussian_weights",
    "orthogonal_gaussian_weights",
]

#: Refuse maps wider than this (same limit as the exact maps in :mod:`kernelkit_math.feature_maps`).
MAX_FEATURES = 1_000_000


# ------------------------------------------------------------------------------ validation
def _check_dim(d, argname="d"):
    if isinstance(d, bool) or not isinstance(d, numbers.Integral):
        raise TypeError(f"{argname} must be a positive integer; got {d!r}")
    if d < 1:
        raise ValueError(f"{argname} must be a positive integer; got {d!r}")
    return int(d)


def _check_seed(seed):
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise TypeError(f"seed must be a non-negative integer; got {seed!r}")
    if seed < 0:
        raise ValueError(f"seed must be a non-negative integer; got {seed!r}")
    return int(seed)


def _check_size(m, argname="m"):
    if isinstance(m, bool) or not isinstance(m, numbers.Integral) or m < 1 or m > MAX_FEATURES:
        raise ValueError(f"{argname}: the number of random features must be an integer in "
                         f"[1, {MAX_FEATURES}]; got {m!r}")
    return int(m)


def _resolve(kernel, d, **params):
    """Validate kernel parameters through the registry (imported lazily: no import cycle)."""
    from kernelkit_math.registry import get_kernel

    return get_kernel(kernel).resolve(d, **params)


def _as_input(x, d):
    x = np.asarray(x)
    if x.dtype.kind not in "iuf":
        raise TypeError(f"x must be a real numeric array; got dtype {x.dtype}")
    x = x.astype(np.float64, copy=False)
    if x.ndim < 1:
        raise ValueError("x must have at least one dimension (..., D)")
    if d is not None and x.shape[-1] != d:
        raise ValueError(f"x has {x.shape[-1]} features on its last axis but this map was built "
                         f"for D = {d}")
    return x


# ------------------------------------------------------------------------- random matrices
def gaussian_weights(m, d, rng):
    """``m`` i.i.d. standard Gaussian rows, shape (m, d): w ~ N(0, I_d)."""
    return rng.standard_normal((m, d))


def orthogonal_gaussian_weights(m, d, rng):
    """Block-orthogonal Gaussian rows, shape (m, d).

    Rows come in blocks of ``d``: each block is a Haar-random orthogonal matrix (QR of a Gaussian
    matrix, signs fixed by ``sign(diag(R))``) whose rows are rescaled by independent chi(d)
    lengths (norms of fresh Gaussian vectors); the last block is truncated to the rows needed.
    Each row is therefore marginally N(0, I_d) (a uniform direction times an independent chi(d)
    length), so every estimator that is unbiased with i.i.d. rows stays unbiased, while rows of
    one block are exactly orthogonal, which lowers the variance (Choromanski et al., 2021).
    """
    n_blocks = -(-m // d)
    G = rng.standard_normal((n_blocks, d, d))
    Q, R = np.linalg.qr(G)
    signs = np.sign(np.diagonal(R, axis1=-2, axis2=-1))
    signs[signs == 0] = 1.0
    Q = Q * signs[:, None, :]  # Haar: column j of Q times sign(R_jj)
    rows = np.swapaxes(Q, -1, -2)  # orthonormal rows
    lengths = np.linalg.norm(rng.standard_normal((n_blocks, d, d)), axis=-1)  # chi(d)
    return (rows * lengths[..., None]).reshape(n_blocks * d, d)[:m]


# ------------------------------------------------------------------------------- the maps
class FeatureMap:
    """Base class: a map phi from (..., D) arrays to (..., M) float64 features.

    Attributes
    ----------
    name : str
        Canonical spec string (``make_feature_map(name, d, seed)`` rebuilds the map).
    kernel : tuple (str, dict) or None
        The registry kernel phi(x)·phi(y) targets, with its parameters, or None.
    relation : {"exact", "unbiased", "taylor2", None}
        How phi(x)·phi(y) relates to ``kernel``.
    d : int or None
        Input dimension the map was built for (None: any).
    seed : int or None
        Seed of the random weights (None for deterministic maps).
    weights : ndarray or None
        The random matrix, None for deterministic maps.
    """

    name = "feature-map"
    kernel = None
    relation = None
    seed = None
    weights = None
    d = None

    def num_features(self, d=None):
        """Width M of phi(x) for inputs of dimension ``d`` (default: the map's own D)."""
        if d is None:
            d = self.d
        if d is None:
            raise ValueError("d is needed: this map was built without a fixed input dimension")
        d = _check_dim(d)
        if self.d is not None and d != self.d:
            raise ValueError(f"d = {d} but this map was built for D = {self.d}")
        return self._width(d)

    def _width(self, d):
        raise NotImplementedError

    def __call__(self, x):
        raise NotImplementedError

    def __repr__(self):
        return f"<{type(self).__name__} {self.name!r} d={self.d} seed={self.seed}>"


class ElementwiseMap(FeatureMap):
    """phi applied to each entry, with the float64 ``phi`` of its registry row; M = D.

    Parameters
    ----------
    name : str
        A registry row with an elementwise ``phi`` (``"elu+1"``, ``"relu"``...).
    d : int or None
        Input dimension D; None: any.
    """

    def __init__(self, name, d=None):
        spec = get_feature_map(name)
        if spec.phi is None:
            raise ValueError(f"feature map {name!r} is not elementwise")
        self.name, self._phi = spec.name, spec.phi
        self.kernel = None if spec.kernel is None else (spec.kernel, {})
        self.relation = spec.relation
        self.d = None if d is None else _check_dim(d)

    def _width(self, d):
        return d

    def __call__(self, x):
        return self._phi(_as_input(x, self.d))


class IdentityMap(ElementwiseMap):
    """phi(x) = x: phi(q)·phi(k) = q·k, the linear kernel, exactly. M = D."""

    def __init__(self, d=None):
        super().__init__("identity", d)


class EluPlusOneMap(ElementwiseMap):
    """phi(x) = elu(x) + 1 (x + 1 for x > 0, exp(x) otherwise), elementwise; strictly positive.

    The map of Katharopoulos et al. (2020); phi(q)·phi(k) is no closed-form kernel (``kernel`` is
    None). M = D.
    """

    def __init__(self, d=None):
        super().__init__("elu+1", d)


class ReluMap(ElementwiseMap):
    """phi(x) = max(x, 0) elementwise; non-negative (denominators may be 0: they are guarded)."""

    def __init__(self, d=None):
        super().__init__("relu", d)


class _ExpFeatureMap(FeatureMap):
    """Shared code of the positive (log-domain) random features of exp(scale x·y)."""

    relation = "unbiased"

    def _setup(self, d, m, scale, seed):
        self.d = _check_dim(d)
        self.m = _check_size(m)
        self.seed = _check_seed(seed)
        self.scale = _resolve("exponential", self.d, scale=scale)["scale"]
        if self.scale is None:
            self.scale = 1.0 / math.sqrt(self.d)
        self.kernel = ("exponential", {"scale": self.scale})
        return np.random.default_rng(self.seed)

    def _projections(self, x):
        """(w·x', ||x'||²/2) with x' = sqrt(scale) x."""
        xs = _as_input(x, self.d) * math.sqrt(self.scale)
        return xs @ self.weights.T, 0.5 * np.einsum("...i,...i->...", xs, xs)[..., None]

    def log_features(self, x):
        """log phi(x), finite for every finite x (no overflow or underflow)."""
        raise NotImplementedError

    def __call__(self, x):
        """phi(x), the plain (unbiased) features: ``exp(log_features(x))``.

        Never overflows: the exponent w·x' - ||x'||²/2 <= ||w||²/2. For large ||x'|| (past
        ~40, where ||x'||²/2 - max_m w_m·x' exceeds 745) every feature underflows to 0; use
        :meth:`stabilized` where a per-call constant cancels, or :meth:`log_features`.
        """
        return np.exp(self.log_features(x))

    def stabilized(self, x, axis=-1):
        """phi(x) / c with c = exp(max of log phi(x) over ``axis``): finite, max exactly 1.

        c > 0 is one constant per slice along ``axis``, so it cancels only where it is a common
        factor of numerator and denominator of the attention ratio:

        - ``axis=-1`` (one c per vector) on the **queries**: out_i = phi(q_i)·S / phi(q_i)·z is
          invariant to scaling phi(q_i).
        - ``axis=(-2, -1)`` (one c per sequence) on the **keys**: S and z both scale by 1/c.

        It does not cancel for unnormalised attention, when the ``eps`` guard of the denominator
        is active, with an initial state built from unscaled features, or (for ``axis=-1``) on the
        keys. The plain ``__call__`` is the unbiased estimator; this is not.
        """
        lf = self.log_features(x)
        return np.exp(lf - lf.max(axis=axis, keepdims=True))


class FavorPlusMap(_ExpFeatureMap):
    r"""FAVOR+ positive random features for the exponential kernel exp(scale x·y).

    .. math::

        \phi(x) = \frac{1}{\sqrt{M}} \exp\left(W x' - \tfrac12 \|x'\|^2\right),
        \qquad x' = \sqrt{\text{scale}}\, x,\quad W \in \mathbb{R}^{M \times D},

    with rows of W ~ N(0, I) (i.i.d., or block-orthogonal with ``orthogonal=True``, see
    :func:`orthogonal_gaussian_weights`). Since E[exp(w·(x' + y'))] = exp(||x' + y'||² / 2),
    E[phi(x)·phi(y)] = exp(x'·y') = exp(scale x·y): unbiased for both variants. Features are
    strictly positive, so linear-attention denominators are positive.

    Parameters
    ----------
    d : int
        Input dimension D.
    m : int
        Number of features M.
    scale : float or None
        Kernel scale (> 0); None means 1 / sqrt(d), the softmax-attention default.
    seed : int
        Seed of ``numpy.random.default_rng`` that draws ``weights`` (M, D).
    orthogonal : bool
        Block-orthogonal rows with chi(D) norms instead of i.i.d. rows.
    """

    def __init__(self, d, m, scale=None, seed=0, orthogonal=False):
        rng = self._setup(d, m, scale, seed)
        self.orthogonal = bool(orthogonal)
        self.name = f"favor+{'orth' if self.orthogonal else ''}:{self.m}"
        draw = orthogonal_gaussian_weights if self.orthogonal else gaussian_weights
        self.weights = draw(self.m, self.d, rng)

    def _width(self, d):
        return self.m

    def log_features(self, x):
        proj, half_norm = self._projections(x)
        return proj - half_norm - 0.5 * math.log(self.m)


class HyperbolicFavorMap(_ExpFeatureMap):
    r"""Hyperbolic FAVOR+ features for exp(scale x·y); width 2M for M random vectors.

    .. math::

        \phi(x) = \frac{1}{\sqrt{2M}} \left[ e^{W x' - \|x'\|^2/2},\;
        e^{-W x' - \|x'\|^2/2} \right], \qquad x' = \sqrt{\text{scale}}\, x,

    W with M i.i.d. N(0, I) rows. phi(x)·phi(y) averages e^{w·(x'+y')} and e^{-w·(x'+y')}
    (antithetic pairs), both of expectation exp(||x'+y'||²/2): unbiased, positive, and of lower
    variance than FAVOR+ with M features.
    """

    def __init__(self, d, m, scale=None, seed=0):
        rng = self._setup(d, m, scale, seed)
        self.name = f"hyp-favor+:{self.m}"
        self.weights = gaussian_weights(self.m, self.d, rng)

    def _width(self, d):
        return 2 * self.m

    def log_features(self, x):
        proj, half_norm = self._projections(x)
        return np.concatenate([proj, -proj], axis=-1) - half_norm - 0.5 * math.log(2 * self.m)


class RandomFourierMap(FeatureMap):
    r"""Random Fourier features (Rahimi & Recht, 2007) for the RBF kernel exp(-gamma ||x-y||²).

    .. math::

        \phi(x) = \sqrt{2/M}\, \cos(W x + b), \qquad
        W_{mk} \sim N(0, 2\gamma_k),\quad b_m \sim U(0, 2\pi).

    E[phi(x)·phi(y)] = E[cos(w·(x - y))] = exp(-sum_k gamma_k (x_k - y_k)²): unbiased.
    Features are signed (not for attention denominators). ``weights`` is W already scaled
    (M, D) and ``offsets`` is b (M,), so phi(x) = sqrt(2/M) cos(x @ weights.T + offsets).

    Parameters
    ----------
    d, m, seed
        As for :class:`FavorPlusMap`.
    gamma : float, array of shape (d,) or None
        RBF inverse width (per feature allowed); None means 1 / d, as in the registry.
    """

    relation = "unbiased"

    def __init__(self, d, m, gamma=None, seed=0):
        self.d = _check_dim(d)
        self.m = _check_size(m)
        self.seed = _check_seed(seed)
        gamma = _resolve("rbf", self.d, gamma=gamma)["gamma"]
        self.gamma = 1.0 / self.d if gamma is None else gamma
        self.kernel = ("rbf", {"gamma": self.gamma})
        self.name = f"rff:{self.m}"
        rng = np.random.default_rng(self.seed)
        self.weights = rng.standard_normal((self.m, self.d)) * np.sqrt(2.0 * np.asarray(self.gamma))
        self.offsets = rng.uniform(0.0, 2.0 * math.pi, size=self.m)

    def _width(self, d):
        return self.m

    def __call__(self, x):
        x = _as_input(x, self.d)
        return math.sqrt(2.0 / self.m) * np.cos(x @ self.weights.T + self.offsets)


class Taylor2Map(FeatureMap):
    r"""Second-order Taylor features: phi(q)·phi(k) = 1 + s q·k + (s q·k)² / 2 exactly.

    .. math::

        \phi(x) = \left(1,\; \sqrt{s}\, x,\; \tfrac{s}{\sqrt 2}\, \mathrm{vec}(x \otimes x)\right),
        \qquad M = 1 + D + D^2.

    The truncated series *approximates* exp(s q·k) (``relation = "taylor2"``): close for
    |s q·k| << 1, and always positive (1 + t + t²/2 > 0), so attention denominators are positive.
    """

    relation = "taylor2"

    def __init__(self, d, scale=None):
        self.d = _check_dim(d)
        if self._width(self.d) > MAX_FEATURES:
            raise ValueError(f"taylor2 of D = {self.d} has {self._width(self.d)} features "
                             f"(more than {MAX_FEATURES})")
        s = _resolve("exponential", self.d, scale=scale)["scale"]
        self.scale = 1.0 / math.sqrt(self.d) if s is None else s
        self.kernel = ("exponential", {"scale": self.scale})
        self.name = "taylor2"

    def _width(self, d):
        return 1 + d + d * d

    def __call__(self, x):
        x = _as_input(x, self.d)
        s = self.scale
        outer = (x[..., :, None] * x[..., None, :]).reshape(x.shape[:-1] + (self.d * self.d,))
        ones = np.ones(x.shape[:-1] + (1,))
        return np.concatenate([ones, math.sqrt(s) * x, (s / math.sqrt(2.0)) * outer], axis=-1)


# ------------------------------------------------------------------------------ registry
@dataclass(frozen=True)
class FeatureMapSpec:
    """One feature map of the registry (:data:`FEATURE_MAPS`).

    Attributes
    ----------
    name : str
        The map's name; a sized map is written with its size, ``name:M`` (``"favor+:256"``).
    summary : str
        One line for help texts and docs.
    sign : {"positive", "non-negative", "signed"}
        Sign of the weights phi(q)·phi(k): > 0; >= 0 (a denominator can be 0, the guard
        max(den, eps) applies); either (denominators can cancel: guard them, see
        ``linear_attention(guard=)``).
    width : callable
        ``width(d, m)``: M, the number of features for input dimension D (and size m of a sized
        map, None otherwise).
    sized : bool
        Takes its number of random vectors after a colon.
    params : tuple of str
        The kernel parameters it takes (``scale``, ``gamma``), validated by the kernel registry.
    kernel, relation : str or None
        The registry kernel phi(x)·phi(y) targets and how: ``"exact"``, ``"unbiased"``,
        ``"taylor2"`` (truncated series); None where there is no closed-form kernel.
    build : callable or None
        ``build(d, m, seed, **params)``: the float64 :class:`FeatureMap` (the reference phi).
        None: an :class:`ElementwiseMap` of ``phi``.
    phi, dphi : callable or None
        Elementwise maps only: the float64 phi(x) and its derivative phi'(x), entry by entry
        (the derivative is what the Triton backward multiplies gradients by).
    fused : int or None
        The map's code inside the Triton linear-attention kernels (their constexpr ``MAP``),
        which apply phi and phi' as they load q and k; None: the map runs as its own torch op
        (``kernelkit_gpu.feature_maps``) before the kernels.

    The torch phi of every row is ``kernelkit_gpu.feature_maps.TORCH_MAPS[name]``.
    """

    name: str
    summary: str
    sign: str
    width: Callable = lambda d, m: d
    sized: bool = False
    params: tuple = ()
    kernel: Optional[str] = None
    relation: Optional[str] = None
    build: Optional[Callable] = None
    phi: Optional[Callable] = None
    dphi: Optional[Callable] = None
    fused: Optional[int] = None

    @property
    def form(self):
        """How a name is written: ``"elu+1"``, or ``"favor+:M"`` for a sized map."""
        return f"{self.name}:M" if self.sized else self.name

    def make(self, d, m=None, seed=0, **params):
        """The float64 :class:`FeatureMap` of this row for input dimension ``d``."""
        if self.build is None:
            return ElementwiseMap(self.name, d)
        return self.build(d, m, seed, **params)


def _elu_plus_one(x):
    return np.where(x > 0, x + 1.0, np.exp(np.minimum(x, 0.0)))


def _elu_plus_one_grad(x):
    return np.where(x > 0, 1.0, np.exp(np.minimum(x, 0.0)))


def _favor(orthogonal):
    return lambda d, m, seed, **p: FavorPlusMap(d, m, seed=seed, orthogonal=orthogonal, **p)


#: The feature-map registry: one :class:`FeatureMapSpec` per map, in the order help texts list
#: them. The factory, the torch twins, the Triton dispatch, the comparison tool, the command line
#: and the tests all read it.
FEATURE_MAPS = {spec.name: spec for spec in [
    FeatureMapSpec(
        "identity", "phi(x) = x: the linear kernel, exactly", "signed",
        kernel="linear", relation="exact", build=lambda d, m, seed: IdentityMap(d),
        phi=lambda x: x.copy(), dphi=np.ones_like, fused=0),
    FeatureMapSpec(
        "elu+1", "elu(x) + 1 entrywise (Katharopoulos et al., 2020)", "positive",
        build=lambda d, m, seed: EluPlusOneMap(d), phi=_elu_plus_one, dphi=_elu_plus_one_grad,
        fused=1),
    FeatureMapSpec(
        "relu", "max(x, 0) entrywise", "non-negative", build=lambda d, m, seed: ReluMap(d),
        phi=lambda x: np.maximum(x, 0.0), dphi=lambda x: np.where(x > 0, 1.0, 0.0), fused=2),
    FeatureMapSpec(
        "favor+", "positive random features of exp (FAVOR+), M features",
        "positive", width=lambda d, m: m, sized=True, params=("scale",), kernel="exponential",
        relation="unbiased", build=_favor(False)),
    FeatureMapSpec(
        "favor+orth", "FAVOR+ with block-orthogonal random vectors, M features", "positive",
        width=lambda d, m: m, sized=True, params=("scale",), kernel="exponential",
        relation="unbiased", build=_favor(True)),
    FeatureMapSpec(
        "hyp-favor+", "hyperbolic FAVOR+ of exp, 2M features", "positive",
        width=lambda d, m: 2 * m, sized=True, params=("scale",), kernel="exponential",
        relation="unbiased",
        build=lambda d, m, seed, **p: HyperbolicFavorMap(d, m, seed=seed, **p)),
    FeatureMapSpec(
        "rff", "random Fourier features of the RBF kernel, M features", "signed",
        width=lambda d, m: m, sized=True, params=("gamma",), kernel="rbf", relation="unbiased",
        build=lambda d, m, seed, **p: RandomFourierMap(d, m, seed=seed, **p)),
    FeatureMapSpec(
        "taylor2", "second-order Taylor features of exp, 1 + D + D^2 features",
        "positive", width=lambda d, m: 1 + d + d * d, params=("scale",), kernel="exponential",
        relation="taylor2", build=lambda d, m, seed, **p: Taylor2Map(d, **p)),
]}


def get_feature_map(name):
    """The :class:`FeatureMapSpec` of a map name (``"elu+1"``; ``"favor+"`` or ``"favor+:256"``).

    Raises
    ------
    ValueError
        If no map has that name (the message lists the known names).
    """
    base = name.partition(":")[0].strip() if isinstance(name, str) else name
    if base not in FEATURE_MAPS:
        known = ", ".join(repr(n) for n in feature_map_names())
        raise ValueError(f"unknown feature map {name!r}; known: {known}")
    return FEATURE_MAPS[base]


def feature_map_names(**flags):
    """The spec names :func:`make_feature_map` accepts (sized ones written ``"name:M"``), in
    registry order.

    Parameters
    ----------
    **flags
        Keep only the rows whose attributes have these values (``sign="signed"``, ``sized=True``)
        or, for ``fused=True``, a fused code.

    Examples
    --------
    >>> feature_map_names(sign="non-negative")
    ('relu',)
    """
    return tuple(spec.form for spec in _select(flags))


def _select(flags):
    def keep(spec):
        return all((getattr(spec, key) is not None) == value if key == "fused"
                   else getattr(spec, key) == value for key, value in flags.items())

    return [spec for spec in FEATURE_MAPS.values() if keep(spec)]


def feature_map_list_doc(**flags):
    """The names :func:`feature_map_names` gives for ``flags`` as a docstring list: each an
    inline literal of the quoted string (``"favor+:M"``), comma-separated. Used with
    :func:`kernelkit_math.registry.fill_doc`, so that no docstring lists the maps by hand."""
    return ", ".join(f'``"{form}"``' for form in feature_map_names(**flags))


def feature_map_set_doc(**flags):
    """The names :func:`feature_map_names` gives for ``flags`` as a numpydoc type set, each
    quoted, in braces."""
    return "{" + ", ".join(f'"{form}"' for form in feature_map_names(**flags)) + "}"


def _make(spec, d, seed=0, argname="spec", **params):
    if not isinstance(spec, str):
        raise TypeError(f"{argname} must be a feature-map name or object; got {spec!r}")
    base, sep, size = spec.strip().partition(":")
    try:
        row = get_feature_map(base)
    except ValueError:
        known = ", ".join(repr(n) for n in feature_map_names())
        raise ValueError(f"{argname}: unknown feature map {spec!r}; known: {known}") from None
    unknown = sorted(set(params) - set(row.params))
    if unknown:
        takes = f"only {', '.join(row.params)}" if row.params else "no parameters"
        raise TypeError(f"{argname}: feature map {base!r} takes {takes}; got {unknown}")
    if not row.sized:
        if sep:
            raise ValueError(f"{argname}: feature map {base!r} takes no size; got {spec!r}")
        return row.make(d, None, seed, **params)
    try:
        m = int(size)
    except ValueError:
        m = None
    if m is None or m < 1 or m > MAX_FEATURES or size.strip() != str(m):
        raise ValueError(f"{argname}: {spec!r} needs a size M in [1, {MAX_FEATURES}] after ':', "
                         f"e.g. '{base}:256'")
    return row.make(d, m, seed, **params)


@fill_doc(maps=feature_map_list_doc(sized=False), sized=feature_map_list_doc(sized=True))
def make_feature_map(spec, d, seed=0, **params):
    """Build a feature map from its name.

    Parameters
    ----------
    spec : str
        One of {maps}, or a random map with its size M: {sized} (the widths:
        :data:`FEATURE_MAPS`).
    d : int
        Input dimension D.
    seed : int
        Seed of the random weights (ignored by deterministic maps).
    **params
        Kernel parameters (a row's ``params``): ``scale`` for the maps of the exponential kernel
        (None: 1/sqrt(D)), ``gamma`` for the RBF kernel's (None: 1/D). Validated by the kernel
        registry.

    Returns
    -------
    FeatureMap

    Raises
    ------
    ValueError
        For an unknown name, a missing or bad size (``"favor+:0"``), or a bad parameter value.
    TypeError
        For a spec that is not a string, or an unknown parameter.

    Examples
    --------
    >>> make_feature_map("rff:512", 3, seed=1, gamma=0.5).kernel
    ('rbf', {'gamma': 0.5})
    """
    return _make(spec, d, seed, "spec", **params)


def _registry_doc():
    """One line per registry row, for the module docstring."""
    return "\n".join(textwrap.fill(
        f"- ``{spec.form}``: {spec.summary} ({spec.sign}"
        + (", fused into the Triton kernels)" if spec.fused is not None else ")"),
        width=96, subsequent_indent="  ") for spec in FEATURE_MAPS.values())


if __doc__:  # None under python -OO
    __doc__ = __doc__.replace("{registry}", _registry_doc())
