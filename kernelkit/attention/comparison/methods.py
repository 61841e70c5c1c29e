"""Attention methods compared with softmax: parse a spec string into a :class:`Method`.

A method is named by a spec string (whitespace around it is ignored, case matters):

- ``"softmax"``: exact softmax attention, the reference itself;
- a feature map of the registry (:data:`kernelkit_math.random_features.FEATURE_MAPS`), a sized
  one with its size M (``"favor+:256"``): normalised linear attention with that map;
- ``"kernel:<registry name>"``, optionally with parameters, ``"kernel:rbf(gamma=0.5)"``:
  the exact kernel smoother (no parameter: the registry defaults at the head dim D); the
  kernelkit class name works too, in any case (``"kernel:RBF"`` is ``"kernel:rbf"``);
- ``"nystrom:M"``: Nyström attention with M landmarks on the exponential kernel
  (:mod:`kernelkit.attention.comparison.nystrom`), a training-free approximation of softmax;
- ``"local:B"``, ``"local:B:W"``: local + summary attention
  (:mod:`kernelkit_math.attention_local`): exact softmax over the query's block of B positions
  and W blocks on each side (default W = 1), one calibrated summary key per other block; a
  training-free approximation of softmax whose weights are a distribution by construction.

A kernelkit kernel object (``kernelkit.RBF(length_scale=2.0)``) or a
:class:`kernelkit_math.random_features.FeatureMap` object is accepted too; a feature-map object
keeps its own random weights, so its results do not change with the seed.

Every :class:`Method` computes, for float64 NumPy q, k, v of shape (..., T, D):

- ``weights(q, k, is_causal=, seed=, scale=)``: the row-normalised weights A (..., T, S) the method
  implies and the raw denominators (..., T) (to count den <= 0), with the public API's guard
  max(den, eps), eps = :data:`EPS`; the signed feature maps (``identity``, ``rff``) also take
  the guard of :data:`SIGNED_GUARD`;
- ``floor(q, k, ...)``: the value the guard raises each denominator to (:data:`EPS`, or per row
  for a signed map): rows with den < floor are the guarded rows of the comparison report;
- ``output(q, k, v, ...)``: A v in float64, through the ``kernelkit_math`` reference of the
  method (``linear_attention``, ``kernel_smoother``, ``softmax_attention``);
- ``run(q, k, v, ..., backend="auto")`` on torch tensors (B, H, T, D): the method through the
  public :mod:`kernelkit.attention` functions, for timing (``backend="auto"``: Triton on CUDA,
  and on CPU under ``TRITON_INTERPRET=1``; PyTorch otherwise). The signed maps pass their guard
  (``linear_attention(..., guard=)``), which runs on the plain-PyTorch path (the Triton
  linear-attention kernels have no guard).

Examples
--------
>>> from kernelkit.attention.comparison.methods import parse_method
>>> m = parse_method("favor+:64", d=16)
>>> m.spec, m.family, m.n_features, m.random
('favor+:64', 'favor+', 64, True)
>>> parse_method(" kernel:rbf(gamma=0.5) ", d=16).spec
'kernel:rbf(gamma=0.5)'
"""

from __future__ import annotations

import ast
import functools
import numbers
import re
from dataclasses import dataclass
from typing import Optional

import numpy as np

from kernelkit.attention import _dispatch as api
from kernelkit.attention import local as local_api
from kernelkit_math import random_features as rf

__all__ = ["Method", "parse_method", "method_names", "registry_kernel_name", "EPS",
           "SIGNED_GUARD"]

#: Denominator guard max(den, eps) of the public linear- and kernel-attention functions.
EPS = 1e-6

#: Guard delta of the feature maps whose weights phi(q)·phi(k) are signed, by family:
#: den_i <- max(den_i, delta |phi(q_i)| . sum_j |phi(k_j)|) (``guard=`` of
#: :func:`kernelkit_math.attention.linear_attention`), so |out_i| <= max |v| / delta. Without
#: it, on the heads of a pretrained encoder (tests/data/real_heads.npz, 24 heads, T = 512),
#: rff:128 gave output errors of 5e6 times the signal and the identity map 6e9. Measured there
#: (mean output rel. error, seed 0; uniform attention 0.757): rff:128 delta 0.01 1.90, 0.03 1.10,
#: 0.1 0.89, 0.3 0.91, 1 0.97; identity delta 0.1 3.3, 0.2 2.0, 0.3 1.61, 0.5 1.33, 1 1.15. On
#: synthetic heads where rff is accurate (``synthetic_qkv`` temperature 0.5 and 1, with and
#: without 8 clusters, rff:128 and rff:1024), delta 0.1 changes the error by <= 0.001 (it even
#: rescues rff:128 at temperature 1, 1.82 -> 0.77), delta 0.3 costs up to +0.09 (rff:1024,
#: temperature 1: 0.69 -> 0.78); on peaky ones (temperature 2, 8 clusters) delta 0.1 costs
#: rff:1024 0.785 -> 0.81. The identity map's weights q·k cancel on most rows of the real heads
#: (den <= 0 on 33408 of 36864), so it takes a larger delta: every output <= 2 max |v|.
SIGNED_GUARD = {"rff": 0.1, "identity": 0.5}

_KERNEL_SPEC = re.compile(r"kernel:\s*([A-Za-z_][A-Za-z0-9_]*)\s*(?:\((.*)\))?", re.DOTALL)


def method_names():
    """The accepted method spec forms, for help texts and error messages.

    Examples
    --------
    >>> "nystrom:M" in method_names()
    True
    """
    return ("softmax", *rf.feature_map_names(), "kernel:NAME", "kernel:NAME(param=value, ...)",
            "nystrom:M", "local:B", "local:B:W")


# ---------------------------------------------------------------------------------- helpers
def _causal_where(W, is_causal):
    if not is_causal:
        return W
    T, S = W.shape[-2:]
    return np.where(np.tri(T, S, dtype=bool), W, 0.0)


def _normalise(W):
    """(W / max(den, EPS), den) with den the row sums."""
    den = W.sum(axis=-1)
    return W / np.maximum(den, EPS)[..., None], den


def _as64(x):
    return np.asarray(x, dtype=np.float64)


def _check_d(d):
    if isinstance(d, bool) or not isinstance(d, numbers.Integral) or d < 1:
        raise ValueError(f"d (the head dimension D) must be a positive integer; got {d!r}")
    return int(d)


@functools.lru_cache(maxsize=64)
def _make_map(name, d, seed, scale):
    """The feature map of a spec; cached so timed runs do not redraw its random weights."""
    from kernelkit_math.random_features import make_feature_map

    return make_feature_map(name, d, seed=seed, **({} if scale is None else {"scale": scale}))


def _format_value(value):
    arr = np.asarray(value)
    if arr.ndim:
        return "[" + ", ".join(_format_value(x) for x in arr.tolist()) + "]"
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value))
    if isinstance(value, numbers.Integral):
        return str(int(value))
    return repr(float(value))


# ---------------------------------------------------------------------------------- methods
@dataclass(frozen=True, eq=False)
class Method:
    """An attention method compared with softmax.

    Attributes
    ----------
    spec : str
        Canonical spec string (the ``method`` key of report rows).
    label : str
        Name for tables and legends.
    family : str
        What groups points of an error-vs-feature-count curve: ``"softmax"``, a feature map's
        name without its size (``"favor+"``), ``"nystrom"``, ``"kernel:rbf"``...
    n_features : int or None
        Features (or landmarks) per head: the width of the linear-attention state; None for
        exact methods (softmax, kernel smoothers).
    random : bool
        True when the result depends on the seed.
    """

    spec: str
    label: str
    family: str
    n_features: Optional[int]
    random: bool

    def weights(self, q, k, *, is_causal=False, seed=0, scale=None):
        """``(A, den)``: weights (..., T, S) and raw denominators (..., T), float64."""
        raise NotImplementedError

    def output(self, q, k, v, *, is_causal=False, seed=0, scale=None):
        """The attention output (..., T, Dv) in float64 through the method's reference."""
        raise NotImplementedError

    def run(self, q, k, v, *, is_causal=False, seed=0, scale=None, backend="auto"):
        """The output on torch tensors (B, H, T, D) through the public attention functions
        with ``backend`` (:data:`kernelkit.attention.BACKENDS`), for timing."""
        raise NotImplementedError

    def floor(self, q, k, *, is_causal=False, seed=0, scale=None):
        """What the guard raises a denominator to: :data:`EPS` (or an array (..., T))."""
        return EPS


@dataclass(frozen=True, eq=False)
class _Softmax(Method):
    def weights(self, q, k, *, is_causal=False, seed=0, scale=None):
        q, k = _as64(q), _as64(k)
        s = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
        scores = s * (q @ np.swapaxes(k, -1, -2))
        if is_causal:
            scores = np.where(np.tri(*scores.shape[-2:], dtype=bool), scores, -np.inf)
        p = np.exp(scores - scores.max(axis=-1, keepdims=True))
        den = p.sum(axis=-1)
        return p / den[..., None], den

    def output(self, q, k, v, *, is_causal=False, seed=0, scale=None):
        from kernelkit_math.attention import softmax_attention

        return softmax_attention(q, k, v, is_causal=is_causal, scale=scale)

    def run(self, q, k, v, *, is_causal=False, seed=0, scale=None, backend="auto"):
        return api.softmax_attention(q, k, v, is_causal=is_causal, scale=scale, backend=backend)


@dataclass(frozen=True, eq=False)
class _FeatureMapAttention(Method):
    feature_map: object  # a spec string, or a FeatureMap object (fixed weights)

    def _map(self, d, seed, scale):
        if not isinstance(self.feature_map, str):
            return self.feature_map
        takes_scale = "scale" in rf.get_feature_map(self.family).params  # the softmax scale
        return _make_map(self.feature_map, d, seed, scale if takes_scale else None)

    @property
    def guard(self):
        """delta of :data:`SIGNED_GUARD` for a signed map, else None."""
        return SIGNED_GUARD.get(self.family)

    def _features(self, q, k, seed, scale):
        phi = self._map(q.shape[-1], seed, scale)
        return np.asarray(phi(q), dtype=np.float64), np.asarray(phi(k), dtype=np.float64)

    def floor(self, q, k, *, is_causal=False, seed=0, scale=None):
        if self.guard is None:
            return EPS
        Q, K = self._features(_as64(q), _as64(k), seed, scale)
        # sum_j |Q_i|.|K_j| over the visible keys, the quadratic way (the references sum
        # prefix sums of |K| in linear time): >= sum_j |w_ij|
        bound = _causal_where(np.abs(Q) @ np.swapaxes(np.abs(K), -1, -2), is_causal).sum(-1)
        return np.maximum(self.guard * bound, EPS)

    def weights(self, q, k, *, is_causal=False, seed=0, scale=None):
        q, k = _as64(q), _as64(k)
        Q, K = self._features(q, k, seed, scale)
        W = _causal_where(Q @ np.swapaxes(K, -1, -2), is_causal)
        if self.guard is None:
            return _normalise(W)
        den = W.sum(axis=-1)
        floor = self.floor(q, k, is_causal=is_causal, seed=seed, scale=scale)
        return W / np.maximum(den, floor)[..., None], den

    def output(self, q, k, v, *, is_causal=False, seed=0, scale=None):
        from kernelkit_math.attention import linear_attention

        phi = self._map(np.shape(q)[-1], seed, scale)
        return linear_attention(q, k, v, phi, is_causal=is_causal, eps=EPS, guard=self.guard)

    def run(self, q, k, v, *, is_causal=False, seed=0, scale=None, backend="auto"):
        fused = isinstance(self.feature_map, str) and self.feature_map in api.FUSED_FEATURE_MAPS
        phi = self.feature_map if fused else self._map(q.shape[-1], seed, scale)
        # the guard of a signed map runs on the PyTorch path (the Triton kernels have none)
        return api.linear_attention(q, k, v, phi, is_causal=is_causal, eps=EPS, seed=seed,
                                    guard=self.guard, backend=backend)


@dataclass(frozen=True, eq=False)
class _KernelSmoother(Method):
    kernel: str  # registry name
    params: dict  # registry parameters, validated
    kernel_object: object = None  # the kernelkit kernel object it came from, if any

    def weights(self, q, k, *, is_causal=False, seed=0, scale=None):
        from kernelkit_math.registry import get_kernel

        q, k = _as64(q), _as64(k)
        spec = get_kernel(self.kernel)
        resolved = spec.resolve(q.shape[-1], **self.params)
        lead = q.shape[:-2]
        qf = q.reshape((-1,) + q.shape[-2:])
        kf = k.reshape((-1,) + k.shape[-2:])
        W = np.stack([spec.value_fn(a, b, **resolved) for a, b in zip(qf, kf)])
        W = W.reshape(lead + W.shape[-2:])
        return _normalise(_causal_where(W, is_causal))

    def output(self, q, k, v, *, is_causal=False, seed=0, scale=None):
        from kernelkit_math.attention import kernel_smoother

        return kernel_smoother(q, k, v, self.kernel, is_causal=is_causal, eps=EPS, **self.params)

    def run(self, q, k, v, *, is_causal=False, seed=0, scale=None, backend="auto"):
        if self.kernel_object is not None:
            return api.kernel_attention(q, k, v, self.kernel_object, is_causal=is_causal, eps=EPS,
                                        backend=backend)
        return api.kernel_attention(q, k, v, self.kernel, is_causal=is_causal, eps=EPS,
                                    backend=backend, **self.params)


@dataclass(frozen=True, eq=False)
class _Nystrom(Method):
    def weights(self, q, k, *, is_causal=False, seed=0, scale=None):
        from kernelkit.attention.comparison.nystrom import nystrom_weights

        return nystrom_weights(q, k, self.n_features, is_causal=is_causal, seed=seed, scale=scale,
                               eps=EPS)

    def output(self, q, k, v, *, is_causal=False, seed=0, scale=None):
        A, _ = self.weights(q, k, is_causal=is_causal, seed=seed, scale=scale)
        return A @ _as64(v)

    def run(self, q, k, v, *, is_causal=False, seed=0, scale=None, backend="auto"):
        from kernelkit.attention.comparison.nystrom import nystrom_attention

        return nystrom_attention(q, k, v, self.n_features, is_causal=is_causal, seed=seed,
                                 scale=scale, eps=EPS, backend=backend)


@dataclass(frozen=True, eq=False)
class _Local(Method):
    block: int = 32
    window: int = 1

    def _settings(self, is_causal, scale):
        return dict(block=self.block, window=self.window, is_causal=is_causal, scale=scale)

    def weights(self, q, k, *, is_causal=False, seed=0, scale=None):
        from kernelkit_math.attention_local import local_weights

        return local_weights(q, k, **self._settings(is_causal, scale))

    def output(self, q, k, v, *, is_causal=False, seed=0, scale=None):
        from kernelkit_math.attention_local import local_attention

        return local_attention(q, k, v, **self._settings(is_causal, scale))

    def run(self, q, k, v, *, is_causal=False, seed=0, scale=None, backend="auto"):
        return local_api.local_attention(q, k, v, **self._settings(is_causal, scale),
                                         backend=backend)


# ---------------------------------------------------------------------------------- parsing
def _unknown(spec, detail=""):
    forms = ", ".join(repr(f) for f in method_names())
    from kernelkit_math.registry import kernel_names

    names = ", ".join(kernel_names())
    return ValueError(f"unknown attention method {spec!r}{detail}; accepted forms: {forms} "
                      f"(kernel NAME one of {names}), or a kernelkit kernel / FeatureMap object")


def _parse_kernel_params(text, spec):
    if text is None or not text.strip():
        return {}
    try:
        call = ast.parse(f"f({text})", mode="eval").body
        if call.args or not isinstance(call, ast.Call):
            raise ValueError
        params = {}
        for kw in call.keywords:
            if kw.arg is None or kw.arg in params:
                raise ValueError
            params[kw.arg] = ast.literal_eval(kw.value)
    except (SyntaxError, ValueError, TypeError):
        raise ValueError(f"method {spec!r}: kernel parameters must be written "
                         f"'kernel:NAME(param=value, ...)' with numeric values") from None
    return params


def registry_kernel_name(name):
    """The registry name of a kernel given by its registry name or its kernelkit class name,
    in any case: ``"RBF"``, ``"rbf"`` -> ``"rbf"``; ``"ExpSineSquared"`` -> ``"periodic"``.

    Returns
    -------
    str or None
        None when ``name`` names no kernel.

    Examples
    --------
    >>> registry_kernel_name("Matern"), registry_kernel_name("nope")
    ('matern', None)
    """
    from kernelkit.kernels import KERNEL_CLASSES

    key = name.strip().lower()
    for registry_name, cls in KERNEL_CLASSES.items():
        if key in (registry_name, cls.__name__.lower()):
            return registry_name
    return None


def _kernel_method(name, params, d, spec, kernel_object=None):
    from kernelkit_math.registry import get_kernel

    if registry_kernel_name(name) is None:
        raise _unknown(spec, f" (no registry kernel {name!r})")
    name = registry_kernel_name(name)
    try:
        get_kernel(name).resolve(d, **params)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"method {spec!r}: {exc}") from None
    shown = {key: value for key, value in params.items() if value is not None}
    inner = ", ".join(f"{key}={_format_value(value)}" for key, value in shown.items())
    canonical = f"kernel:{name}" + (f"({inner})" if inner else "")
    label = repr(kernel_object) if kernel_object is not None else canonical
    return _KernelSmoother(canonical, label, f"kernel:{name}", None, False, name, params,
                           kernel_object)


def _feature_map_method(spec, d):
    from kernelkit_math.random_features import make_feature_map

    base = spec.partition(":")[0]
    phi = make_feature_map(spec, d, seed=0)  # validates the size; rebuilt per seed later
    return _FeatureMapAttention(phi.name, phi.name, base, phi.num_features(d),
                                phi.seed is not None, phi.name)


def _feature_map_object(phi, d):
    if phi.d is not None and phi.d != d:
        raise ValueError(f"feature map {phi.name!r} was built for D = {phi.d}, but the head "
                         f"dim is {d}")
    family = phi.name.partition(":")[0]
    spec = phi.name if phi.seed is None else f"{phi.name}(seed={phi.seed})"
    label = phi.name if phi.seed is None else f"{phi.name} (fixed seed {phi.seed})"
    return _FeatureMapAttention(spec, label, family, phi.num_features(d), False, phi)


def _nystrom_method(spec):
    size = spec.partition(":")[2].strip()
    try:
        m = int(size)
    except ValueError:
        m = None
    if m is None or m < 1 or size != str(m):
        raise ValueError(f"method {spec!r} needs a number of landmarks M >= 1 after ':', "
                         f"e.g. 'nystrom:64'")
    return _Nystrom(f"nystrom:{m}", f"nystrom:{m}", "nystrom", m, True)


def _local_method(spec):
    parts = spec.split(":")[1:]
    try:
        sizes = [int(p) for p in parts]
    except ValueError:
        sizes = None
    if (sizes is None or len(sizes) not in (1, 2) or sizes[0] < 1 or min(sizes) < 0
            or [str(n) for n in sizes] != [p.strip() for p in parts]):
        raise ValueError(f"method {spec!r} needs a block size B >= 1 and optionally a window "
                         f"W >= 0: 'local:B' or 'local:B:W', e.g. 'local:32' or 'local:32:1'")
    block, window = sizes[0], (sizes[1] if len(sizes) == 2 else 1)
    return _Local(f"local:{block}:{window}", f"local:{block}:{window}", "local", None, False,
                  block, window)


def parse_method(spec, d):
    """Build the :class:`Method` for a spec string or object.

    Parameters
    ----------
    spec : str, Method, kernelkit kernel object or kernelkit_math FeatureMap
        See the module docstring for the accepted strings (:func:`method_names`).
    d : int
        Head dimension D of the queries and keys (defaults depend on it: gamma = 1 / D,
        scale = 1 / sqrt(D); elu+1 has D features).

    Returns
    -------
    Method

    Raises
    ------
    ValueError
        For an unknown spec (the message lists the accepted forms), a bad size
        (``"favor+:0"``, ``"nystrom:x"``), a bad kernel parameter, or a feature-map object
        built for another D.
    TypeError
        For a spec of another type, or an unknown kernel parameter name.

    Examples
    --------
    >>> import kernelkit
    >>> parse_method(kernelkit.RBF(length_scale=2.0), d=8).spec
    'kernel:rbf(gamma=0.125)'
    >>> parse_method("nystrom:32", d=8).n_features
    32
    """
    from kernelkit_math.random_features import FeatureMap

    d = _check_d(d)
    if isinstance(spec, Method):
        return spec
    if isinstance(spec, FeatureMap):
        return _feature_map_object(spec, d)
    from kernelkit.kernels import KERNEL_CLASSES

    if isinstance(spec, tuple(KERNEL_CLASSES.values())):
        params = spec._registry_params(d)
        return _kernel_method(spec._registry_name, params, d, repr(spec), kernel_object=spec)
    if not isinstance(spec, str):
        raise TypeError(f"a method must be a spec string such as 'favor+:256', a kernelkit "
                        f"kernel or a FeatureMap object; got {spec!r}")
    text = spec.strip()
    if text == "softmax":
        return _Softmax("softmax", "softmax", "softmax", None, False)
    if text.startswith("kernel:"):
        match = _KERNEL_SPEC.fullmatch(text)
        if match is None:
            raise _unknown(spec)
        return _kernel_method(match.group(1), _parse_kernel_params(match.group(2), spec), d,
                              spec)
    base = text.partition(":")[0]
    if base == "nystrom":
        return _nystrom_method(text)
    if base == "local":
        return _local_method(text)
    if base in rf.FEATURE_MAPS:
        return _feature_map_method(text, d)
    raise _unknown(spec)


def parse_methods(methods, d):
    """Build the :class:`Method` of each spec in ``methods`` (a sequence; see
    :func:`parse_method`) for head dimension ``d``.

    Raises
    ------
    TypeError
        When ``methods`` is a lone spec rather than a sequence of them.
    ValueError
        When ``methods`` is empty or names one method more than once.
    """
    if isinstance(methods, str) or not hasattr(methods, "__iter__"):
        raise TypeError(f"methods must be a sequence of method specs such as "
                        f"('softmax', 'favor+:256'); got {methods!r}")
    parsed = [parse_method(m, d) for m in methods]
    if not parsed:
        raise ValueError("methods must hold at least one method, e.g. ('softmax', 'elu+1')")
    specs = [m.spec for m in parsed]
    repeated = sorted({s for s in specs if specs.count(s) > 1})
    if repeated:
        raise ValueError(f"methods lists {', '.join(map(repr, repeated))} more than once")
    return parsed
