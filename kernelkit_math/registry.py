"""The kernel registry: one entry per kernel, read by every layer of kernelkit.

An entry (:class:`KernelSpec`) names a kernel, declares its parameters with defaults and valid
ranges, says whether it is stationary, normalised (k(x, x) = 1) and positive semi-definite,
which pairwise quantity it is a function of (what a GPU kernel must tile over), and points at
its float64 value, diagonal, log-hyperparameter gradient and exact feature map (where one
exists). :func:`kernel_list_doc`, :func:`param_list_doc` and :func:`fill_doc` put the
registry's kernel and parameter names into docstrings, so no docstring lists them by hand.

Examples
--------
>>> import numpy as np
>>> from kernelkit_math.registry import get_kernel
>>> spec = get_kernel("rbf")
>>> K = spec.value(np.eye(3), gamma=0.5)
>>> K.shape, bool(K[0, 0] == 1.0)
((3, 3), True)
"""

from __future__ import annotations

import math
import numbers
import textwrap
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from kernelkit_math import feature_maps as _fm
from kernelkit_math import kernels as _k

__all__ = ["Param", "Example", "SklearnEquivalent", "KernelSpec", "REGISTRY", "get_kernel",
           "kernel_names", "kernel_list_doc", "param_list_doc", "fill_doc"]


def _is_single_number_array(value):
    """Whether ``value`` is a NumPy array or list holding exactly one real number."""
    if not isinstance(value, (np.ndarray, list, tuple)):
        return False
    try:
        arr = np.asarray(value)
    except ValueError:  # ragged nesting
        return False
    return arr.ndim > 0 and arr.size == 1 and arr.dtype.kind in "iuf"


@dataclass(frozen=True)
class Param:
    """One kernel parameter.

    Attributes
    ----------
    name : str
        The scikit-learn name (``gamma``, ``degree``, ``coef0``, ``length_scale``...).
    default : object
        Default value; ``None`` for ``gamma`` means 1 / n_features, for ``scale`` 1 / sqrt(n_features).
    low, high : float
        Valid range; ``low_inclusive`` says whether ``low`` itself is allowed.
    integer : bool
        The value must be an integer (``degree``).
    choices : tuple
        If not empty, the only values allowed (``nu``).
    per_feature : bool
        The value may be an array with one entry per feature.
    hyperparameter : bool
        Differentiable, optimised in log space; gradients are taken with respect to its log.
    """

    name: str
    default: object
    low: float = -math.inf
    high: float = math.inf
    low_inclusive: bool = False
    integer: bool = False
    choices: tuple = ()
    per_feature: bool = False
    hyperparameter: bool = False
    doc: str = ""

    def _range_text(self):
        if self.choices:
            return "one of " + ", ".join(str(c) for c in self.choices)
        kind = "an integer" if self.integer else "a finite number"
        if self.low > -math.inf:
            kind = f"{kind} {'>=' if self.low_inclusive else '>'} {self.low:g}"
        if self.high < math.inf:
            kind += f" and <= {int(self.high) if self.integer else format(self.high, 'g')}"
        return kind

    def check(self, value, n_features=None, kernel="kernel"):
        """Validate ``value`` and return it as a float, an int or a float64 array.

        Raises
        ------
        TypeError
            For a value of the wrong type (a string, a non-integer ``degree``...).
        ValueError
            For a value outside the valid range, or a per-feature array of the wrong length.
        """
        where = f"{kernel}: parameter {self.name!r}"
        if not self.integer and _is_single_number_array(value) and not (
                self.per_feature and n_features == 1):
            # as scikit-learn, whose formulas broadcast: a one-element array is that number
            value = np.asarray(value).reshape(())[()]
        if self.integer:
            integral = isinstance(value, numbers.Integral) or (
                isinstance(value, numbers.Real) and float(value).is_integer()
            )
            if isinstance(value, bool) or not integral:
                raise TypeError(f"{where} must be {self._range_text()}; got {value!r}")
            value = int(value)
            # compared as Python ints (NumPy would overflow on huge values such as 10**30)
            low_ok = value >= self.low if self.low_inclusive else value > self.low
            if not (low_ok and value <= self.high):
                raise ValueError(f"{where} must be {self._range_text()}; got {value!r}")
            return value
        elif self.per_feature and np.ndim(value) > 0:
            arr = np.asarray(value)
            if arr.dtype.kind not in "iuf" or arr.ndim != 1:
                raise TypeError(f"{where} must be a number or a 1-D array of numbers; got {value!r}")
            if n_features is not None and arr.shape[0] != n_features:
                raise ValueError(
                    f"{where} has {arr.shape[0]} entries but the data have {n_features} features"
                )
            value = arr.astype(np.float64)
        elif isinstance(value, bool) or not isinstance(value, numbers.Real):
            if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "iuf":
                value = float(value)
            else:
                raise TypeError(f"{where} must be {self._range_text()}; got {value!r}")
        else:
            value = float(value)
        values = np.atleast_1d(value)
        if self.choices:
            if value not in self.choices:
                raise ValueError(f"{where} must be {self._range_text()}; got {value!r}")
            return value
        bad = ~np.isfinite(values) | (values > self.high)
        bad |= (values < self.low) if self.low_inclusive else (values <= self.low)
        if bad.any():
            raise ValueError(f"{where} must be {self._range_text()}; got {value!r}")
        return value


@dataclass(frozen=True)
class Example:
    """A parameter setting every registry-wide test runs the kernel with.

    ``params(d)`` returns registry parameters for data with ``d`` features (per-feature values
    with ``d`` entries), chosen so that K is neither ~0 nor ~1 on standard-normal data. The
    kernel-class and scikit-learn agreement tests (``tests/cases.py``) take every example not
    marked ``offset``; ``math``: also a case of the float64 reference tests; ``gpu``: also a case
    of the GPU kernel tests (``tests/gpu_cases.py``), which multiply each case by dtypes, sizes and
    devices, so they take a representative few.

    ``offset``: the parameters are chosen for data at 1000 + 0.05 N(0, 1) instead (widths ~0.05
    sqrt(d), dot-product scales ~1e-6 / d so that x·y ~ 1e6 d gives O(1) arguments), for the
    float32 offset-1000 tests (``tests/test_pairwise.py``) and nothing else; :func:`_offset`
    makes them, with ``gpu`` and ``math`` False.
    """

    id: str
    params: Callable
    gpu: bool = True
    math: bool = True
    offset: bool = False


def _offset(id, params):
    """An :class:`Example` for data at offset 1000 (spread 0.05) only."""
    return Example(id, params, gpu=False, math=False, offset=True)


@dataclass(frozen=True)
class SklearnEquivalent:
    """Where scikit-learn computes the same kernel, by name (this package never imports it).

    Every registry entry declares one, with None where scikit-learn has no equivalent;
    ``tests/cases.py`` resolves the names into scikit-learn functions and kernel objects.

    Attributes
    ----------
    pairwise : str or None
        The kernel's key in ``sklearn.metrics.pairwise.PAIRWISE_KERNEL_FUNCTIONS``, which is also
        the ``kernel="..."`` string of scikit-learn's estimators (``"poly"`` for polynomial). It
        takes the registry parameters under the same names (``gamma``, ``degree``, ``coef0``;
        ``gamma=None`` is 1 / n_features there too), scalar values only: scikit-learn has no
        per-feature gamma.
    gp_kernel : str or None
        The class in ``sklearn.gaussian_process.kernels`` equal in value and log-gradient. It
        takes the parameters in scikit-learn's Gaussian-process convention, exactly those of
        kernelkit's class for the kernel (``kernelkit.kernels``: rbf's ``length_scale`` with
        gamma = 1 / (2 length_scale**2)); that class's parameter map is the one copy of the
        conversion from the registry parameters.
    gp_fixed : tuple of (str, object) pairs
        Further constructor arguments that make ``gp_kernel`` this kernel, for example
        ``DotProduct``'s ``sigma_0=0`` with ``sigma_0_bounds="fixed"`` for the linear kernel.
    gp_per_feature : bool
        ``gp_kernel`` also takes per-feature values of the per-feature parameters (scikit-learn's
        RBF and Matern do, its RationalQuadratic does not).
    """

    pairwise: Optional[str]
    gp_kernel: Optional[str]
    gp_fixed: tuple = ()
    gp_per_feature: bool = False


def _ramp(d, lo, hi):
    return np.linspace(lo, hi, d)


@dataclass(frozen=True)
class KernelSpec:
    """A registry entry. Call :meth:`resolve` before the raw functions when values come from users."""

    name: str
    formula: str
    params: tuple
    #: k(x, y) depends on x - y only.
    stationary: bool
    #: k(x, x) = 1 for every x and every parameter value (scikit-learn's NormalizedKernelMixin):
    #: the diagonal of K(X, X) is exactly 1, and the GPU kernels write it so.
    normalized: bool
    psd: bool
    #: The pairwise quantity the kernel is a function of: "dot", "sqeuclidean", "manhattan"
    #: or "cosine" (a dot product of normalised rows).
    pairwise: str
    value_fn: Callable
    diag_fn: Callable
    gradient_fn: Callable
    feature_map_fn: Optional[Callable] = None
    #: The settings the shared tests run (tests/cases.py, tests/gpu_cases.py derive their tables).
    examples: tuple = ()
    #: Where scikit-learn computes the same kernel (a :class:`SklearnEquivalent`; every entry has one).
    sklearn: Optional[SklearnEquivalent] = None

    @property
    def param_names(self):
        return tuple(p.name for p in self.params)

    @property
    def hyperparameters(self):
        """The parameters whose log-gradients :meth:`gradient` returns, in order."""
        return tuple(p for p in self.params if p.hyperparameter)

    def param(self, name):
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(name)

    def resolve(self, n_features=None, **params):
        """Validate parameters and fill in defaults (``gamma=None`` stays None: 1 / n_features).

        Raises
        ------
        TypeError
            For an unknown parameter name or a value of the wrong type.
        ValueError
            For a value out of range.
        """
        unknown = set(params) - set(self.param_names)
        if unknown:
            allowed = ", ".join(self.param_names) or "none"
            raise TypeError(
                f"{self.name} kernel got unknown parameter(s) {sorted(unknown)}; allowed: {allowed}"
            )
        out = {}
        for p in self.params:
            value = params.get(p.name, p.default)
            keep_default_none = value is None and p.default is None  # gamma=None: 1 / n_features
            out[p.name] = None if keep_default_none else p.check(value, n_features, self.name)
        return out

    def explicit(self, n_features, resolved):
        """``resolved`` parameters with each None default replaced by the value it stands for.

        ``gamma=None`` is 1 / n_features, the exponential kernel's ``scale=None`` is
        1 / sqrt(n_features), as the kernel functions apply them.
        """
        defaults = {"gamma": _k.default_gamma(n_features), "scale": _k.default_scale(n_features)}
        return {k: defaults[k] if v is None else v for k, v in resolved.items()}

    def value(self, X, Y=None, **params):
        """K(X, Y) in float64, parameters validated. Shape (n_X, n_Y)."""
        return self.value_fn(X, Y, **self.resolve(np.shape(X)[-1], **params))

    def diag(self, X, **params):
        """The diagonal of K(X, X), shape (n_X,)."""
        return self.diag_fn(X, **self.resolve(np.shape(X)[-1], **params))

    def gradient(self, X, **params):
        """``(K, dK)``: K(X, X) and its derivatives w.r.t. the log hyperparameters, (n, n, n_dims)."""
        return self.gradient_fn(X, **self.resolve(np.shape(X)[-1], **params))

    def feature_map(self, X, **params):
        """Exact features phi(X) with phi(X) @ phi(Y).T == K(X, Y) up to rounding.

        Raises
        ------
        NotImplementedError
            If the kernel has no exact finite feature map.
        """
        if self.feature_map_fn is None:
            raise NotImplementedError(f"the {self.name} kernel has no exact finite feature map")
        return self.feature_map_fn(X, **self.resolve(np.shape(X)[-1], **params))


def _gamma_param(per_feature=False):
    return Param(
        "gamma", None, low=0.0, per_feature=per_feature, hyperparameter=True,
        doc="inverse width; None means 1 / n_features",
    )


_LENGTH_SCALE = Param("length_scale", 1.0, low=0.0, per_feature=True, hyperparameter=True)
_COEF0 = Param(
    "coef0", 1.0, hyperparameter=True,
    doc="additive constant; any real number (the kernel is PSD only for coef0 >= 0)",
)

REGISTRY = {
    spec.name: spec
    for spec in [
        KernelSpec(
            "linear", "x·y", (), stationary=False, normalized=False, psd=True,
            pairwise="dot",
            value_fn=_k.linear, diag_fn=_k.linear_diag, gradient_fn=_k.linear_gradient,
            feature_map_fn=_fm.linear_features,
            examples=(
                Example("default", lambda d: {}),
                _offset("offset", lambda d: {}),
            ),
            sklearn=SklearnEquivalent("linear", "DotProduct",
                                      gp_fixed=(("sigma_0", 0.0), ("sigma_0_bounds", "fixed"))),
        ),
        KernelSpec(
            "polynomial", "(gamma x·y + coef0) ** degree",
            (_gamma_param(),
             Param("degree", 3, low=0, low_inclusive=True, high=2**31 - 1, integer=True,
                   doc="at most 2**31 - 1: the GPU kernels take it as a 32-bit integer"),
             _COEF0),
            stationary=False, normalized=False, psd=True, pairwise="dot",
            value_fn=_k.polynomial, diag_fn=_k.polynomial_diag, gradient_fn=_k.polynomial_gradient,
            feature_map_fn=_fm.polynomial_features,
            examples=(
                Example("default", lambda d: {}),
                Example("neg", lambda d: dict(gamma=0.3, degree=2, coef0=-0.5), math=False),
                Example("d2", lambda d: dict(gamma=0.3, degree=2, coef0=0.5), gpu=False),
                Example("d1", lambda d: dict(gamma=0.2, degree=1, coef0=2.0), gpu=False),
                _offset("offset", lambda d: {}),
                _offset("offset-cancel", lambda d: dict(degree=2, gamma=1e-6 / d, coef0=-1.0)),
            ),
            sklearn=SklearnEquivalent("poly", None),
        ),
        KernelSpec(
            "rbf", "exp(-sum_k gamma_k (x_k - y_k)**2)", (_gamma_param(per_feature=True),),
            stationary=True, normalized=True, psd=True, pairwise="sqeuclidean",
            value_fn=_k.rbf, diag_fn=_k.rbf_diag, gradient_fn=_k.rbf_gradient,
            examples=(
                Example("default", lambda d: {}),
                Example("pf", lambda d: dict(gamma=_ramp(d, 0.5, 1.5) / d), math=False),
                Example("g", lambda d: dict(gamma=1.2 / d), gpu=False),
                Example("pf3", lambda d: dict(gamma=np.resize([0.1, 0.7, 0.3], d) * 3 / d), gpu=False),
                _offset("offset", lambda d: {}),
                _offset("offset-g", lambda d: dict(gamma=200.0 / d)),
            ),
            sklearn=SklearnEquivalent("rbf", "RBF", gp_per_feature=True),
        ),
        KernelSpec(
            "laplacian", "exp(-sum_k gamma_k |x_k - y_k|)", (_gamma_param(per_feature=True),),
            stationary=True, normalized=True, psd=True, pairwise="manhattan",
            value_fn=_k.laplacian, diag_fn=_k.laplacian_diag, gradient_fn=_k.laplacian_gradient,
            examples=(
                Example("default", lambda d: {}),
                Example("pf", lambda d: dict(gamma=_ramp(d, 0.5, 1.5) / d), math=False),
                Example("g", lambda d: dict(gamma=1.2 / d), gpu=False),
                Example("pf3", lambda d: dict(gamma=np.resize([0.2, 0.5, 0.9], d) * 3 / d), gpu=False),
                _offset("offset", lambda d: {}),
                _offset("offset-g", lambda d: dict(gamma=40.0 / d)),
            ),
            sklearn=SklearnEquivalent("laplacian", None),
        ),
        KernelSpec(
            "matern", "Matérn(nu) of r = ||(x - y) / length_scale||",
            (_LENGTH_SCALE, Param("nu", 1.5, choices=(0.5, 1.5, 2.5))),
            stationary=True, normalized=True, psd=True, pairwise="sqeuclidean",
            value_fn=_k.matern, diag_fn=_k.matern_diag, gradient_fn=_k.matern_gradient,
            examples=(
                Example("05", lambda d: dict(nu=0.5, length_scale=1.3 * np.sqrt(d / 3))),
                Example("05-pf", lambda d: dict(nu=0.5, length_scale=np.resize([0.7, 1.0, 2.0, 1.5], d) * np.sqrt(d / 3)), gpu=False),
                Example("15-pf", lambda d: dict(nu=1.5, length_scale=_ramp(d, 0.8, 2.0) * np.sqrt(d / 3)), math=False),
                Example("25", lambda d: dict(nu=2.5, length_scale=0.9 * np.sqrt(d / 3)), math=False),
                Example("15", lambda d: dict(nu=1.5, length_scale=0.9 * np.sqrt(d / 3)), gpu=False),
                Example("25-pf", lambda d: dict(nu=2.5, length_scale=np.resize([0.8, 1.5, 2.0], d) * np.sqrt(d / 3)), gpu=False),
                _offset("offset-05", lambda d: dict(nu=0.5, length_scale=0.05 * np.sqrt(d))),
                _offset("offset-15", lambda d: dict(nu=1.5, length_scale=0.05 * np.sqrt(d))),
                _offset("offset-25", lambda d: dict(nu=2.5, length_scale=0.05 * np.sqrt(d))),
            ),
            sklearn=SklearnEquivalent(None, "Matern", gp_per_feature=True),
        ),
        KernelSpec(
            "rational_quadratic", "(1 + r**2 / (2 alpha)) ** -alpha",
            (_LENGTH_SCALE, Param("alpha", 1.0, low=0.0, hyperparameter=True)),
            stationary=True, normalized=True, psd=True, pairwise="sqeuclidean",
            value_fn=_k.rational_quadratic, diag_fn=_k.rational_quadratic_diag,
            gradient_fn=_k.rational_quadratic_gradient,
            examples=(
                Example("default", lambda d: {}),
                Example("pf", lambda d: dict(length_scale=_ramp(d, 1.0, 2.0) * np.sqrt(d / 3), alpha=0.3), math=False),
                Example("a", lambda d: dict(length_scale=0.7 * np.sqrt(d / 3), alpha=2.5), gpu=False),
                Example("pf3", lambda d: dict(length_scale=np.resize([1.0, 2.0, 0.5], d) * np.sqrt(d / 3), alpha=0.3), gpu=False),
                _offset("offset", lambda d: dict(length_scale=0.05 * np.sqrt(d), alpha=0.5)),
            ),
            sklearn=SklearnEquivalent(None, "RationalQuadratic"),
        ),
        KernelSpec(
            "periodic", "exp(-2 sin(pi ||x - y|| / periodicity)**2 / length_scale**2)",
            (Param("length_scale", 1.0, low=0.0, hyperparameter=True),
             Param("periodicity", 1.0, low=0.0, hyperparameter=True)),
            # PSD on one feature; with the Euclidean distance of several features it need not be
            stationary=True, normalized=True, psd=False, pairwise="sqeuclidean",
            value_fn=_k.periodic, diag_fn=_k.periodic_diag, gradient_fn=_k.periodic_gradient,
            examples=(
                Example("default", lambda d: dict(periodicity=2.0 * np.sqrt(d / 3))),
                Example("lp", lambda d: dict(length_scale=0.7, periodicity=4.5 * np.sqrt(d / 3))),
                _offset("offset", lambda d: dict(length_scale=1.0, periodicity=0.2 * np.sqrt(d))),
            ),
            sklearn=SklearnEquivalent(None, "ExpSineSquared"),
        ),
        KernelSpec(
            "cosine", "x·y / (||x|| ||y||)", (), stationary=False,
            # k(x, x) = 1 except for a zero row, whose similarity with everything is 0
            normalized=False, psd=True, pairwise="cosine",
            value_fn=_k.cosine, diag_fn=_k.cosine_diag, gradient_fn=_k.cosine_gradient,
            examples=(
                Example("default", lambda d: {}),
                _offset("offset", lambda d: {}),
            ),
            sklearn=SklearnEquivalent("cosine", None),
        ),
        KernelSpec(
            "sigmoid", "tanh(gamma x·y + coef0)",
            (_gamma_param(), _COEF0),
            stationary=False, normalized=False, psd=False, pairwise="dot",
            value_fn=_k.sigmoid, diag_fn=_k.sigmoid_diag, gradient_fn=_k.sigmoid_gradient,
            examples=(
                Example("default", lambda d: {}),
                Example("neg", lambda d: dict(gamma=0.2, coef0=-0.3), math=False),
                Example("pos", lambda d: dict(gamma=0.2, coef0=0.3), gpu=False),
                _offset("offset", lambda d: {}),
                _offset("offset-cancel", lambda d: dict(gamma=1e-6 / d, coef0=-1.0)),
            ),
            sklearn=SklearnEquivalent("sigmoid", None),
        ),
        KernelSpec(
            "exponential", "exp(scale x·y)",
            (Param("scale", None, low=0.0, hyperparameter=True, doc="None means 1 / sqrt(n_features)"),),
            stationary=False, normalized=False, psd=True, pairwise="dot",
            value_fn=_k.exponential, diag_fn=_k.exponential_diag, gradient_fn=_k.exponential_gradient,
            examples=(
                Example("default", lambda d: {}),
                Example("s", lambda d: dict(scale=0.25), gpu=False),
                _offset("offset", lambda d: dict(scale=1e-6 / d)),
            ),
            sklearn=SklearnEquivalent(None, None),
        ),
    ]
}


def kernel_names():
    """Names of all registered kernels, in registry order."""
    return tuple(REGISTRY)


def get_kernel(name):
    """Return the :class:`KernelSpec` called ``name``.

    Raises
    ------
    ValueError
        If no kernel has that name (the message lists the known names).
    """
    if not isinstance(name, str) or name not in REGISTRY:
        raise ValueError(f"unknown kernel {name!r}; known kernels: {', '.join(REGISTRY)}")
    return REGISTRY[name]


def kernel_list_doc(names=None):
    """Kernel names as a docstring list: ``"linear"``, ``"polynomial"``, ... in registry order.

    Parameters
    ----------
    names : iterable of str, default=None
        The kernels to list, for example those with a registry flag
        (``[n for n in kernel_names() if get_kernel(n).psd]``); None lists every kernel.

    Returns
    -------
    str
        The names, each as an inline literal of the quoted string (``"rbf"``), comma-separated.
    """
    return ", ".join(f'``"{name}"``' for name in (kernel_names() if names is None else names))


def param_list_doc():
    """Every parameter name of the registry as a docstring list: ``gamma``, ``degree``, ...

    Each name once, in order of first appearance in the registry.
    """
    names = dict.fromkeys(p.name for spec in REGISTRY.values() for p in spec.params)
    return ", ".join(f"``{name}``" for name in names)


def fill_doc(**fields):
    """Decorator: put ``fields`` into the docstring of a function or class.

    Each ``{name}`` in the docstring is replaced by ``fields[name]`` (text rendered by
    :func:`kernel_list_doc`, for instance), and each paragraph that held a placeholder (a run of
    non-blank lines of one indentation) is wrapped again to 96 columns. Other braces
    (``{0.5, 1.5}``, LaTeX) are left alone. Under ``python -OO`` (no docstrings) it does nothing.

    Examples
    --------
    >>> @fill_doc(kernels=kernel_list_doc(["rbf", "laplacian"]))
    ... def f():
    ...     "Takes {kernels}."
    >>> f.__doc__
    'Takes ``"rbf"``, ``"laplacian"``.'
    """

    def fill(text):
        for name, value in fields.items():
            text = text.replace("{" + name + "}", value)
        return text

    def decorate(obj):
        if obj.__doc__ is None:
            return obj
        lines, out = obj.__doc__.split("\n"), []
        while lines:
            indent = lines[0][: len(lines[0]) - len(lines[0].lstrip())]
            n = 1
            while (n < len(lines) and lines[n].strip() and lines[0].strip()
                   and lines[n][: len(lines[n]) - len(lines[n].lstrip())] == indent):
                n += 1
            paragraph, lines = "\n".join(lines[:n]), lines[n:]
            if fill(paragraph) != paragraph:
                paragraph = textwrap.fill(
                    " ".join(fill(paragraph).split()), width=96, initial_indent=indent,
                    subsequent_indent=indent, break_long_words=False, break_on_hyphens=False)
            out.append(paragraph)
        obj.__doc__ = "\n".join(out)
        return obj

    return decorate
