"""Scikit-learn-native kernel classes built on the :mod:`kernelkit_math` registry.

Every class here is a :class:`sklearn.gaussian_process.kernels.Kernel`: it has ``theta`` and
``bounds`` in log space, analytic gradients for Gaussian-process hyperparameter optimisation,
``diag``, ``clone_with_theta``, ``get_params`` / ``set_params``, and it combines with scikit-learn's
own kernels through ``+``, ``*`` and ``**``. It is also a callable ``kernel(X, Y)``, so it can be
passed wherever scikit-learn takes a callable kernel: ``SVC(kernel=RBF(2.0))``,
``KernelRidge(kernel=...)``, ``KernelPCA``, ``Nystroem``, ``pairwise_kernels(X, metric=...)``.

The math lives in the registry; this module only maps the scikit-learn parameter names onto the
registry's (for example ``gamma = 1 / (2 length_scale**2)`` for :class:`RBF`) and converts the
gradients accordingly. :data:`KERNEL_CLASSES` maps each registry name to its class.

Examples
--------
>>> import numpy as np
>>> from sklearn.gaussian_process.kernels import WhiteKernel
>>> from kernelkit.kernels import RBF
>>> X = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 2.0]])
>>> k = RBF(length_scale=1.5) + WhiteKernel(noise_level=0.1)
>>> K, dK = k(X, eval_gradient=True)
>>> K.shape, dK.shape
((3, 3), (3, 3, 2))
"""

from __future__ import annotations

import dataclasses
import numbers
from collections import namedtuple

import numpy as np
from sklearn.gaussian_process.kernels import Hyperparameter, Kernel

from kernelkit._compute import kernel_gradient, kernel_matrix
from kernelkit._util.device import resolve_device
from kernelkit._util.validation import check_data
from kernelkit_math.registry import get_kernel

__all__ = [
    "Linear",
    "Polynomial",
    "RBF",
    "Laplacian",
    "Matern",
    "RationalQuadratic",
    "ExpSineSquared",
    "Cosine",
    "Sigmoid",
    "Exponential",
    "KERNEL_CLASSES",
]

#: How one constructor parameter maps onto one registry parameter:
#: ``registry_value = coef * value ** power``. A gradient with respect to the log of the
#: registry parameter becomes one with respect to the log of the class parameter through the
#: factor ``power`` (d/dlog v = power * d/dlog(coef * v**power)).
_ParamMap = namedtuple("_ParamMap", ("name", "registry", "coef", "power"), defaults=(1.0, 1.0))


def _is_fixed(bounds):
    return isinstance(bounds, str) and bounds == "fixed"


def _hyperparameter_property(name):
    """A ``hyperparameter_<name>`` property as scikit-learn's kernels define them by hand."""

    def fget(self):
        value = getattr(self, name)
        # As sklearn's RBF: a vector with more than one entry is one element per feature.
        n_elements = len(value) if np.iterable(value) and not isinstance(value, str) else 1
        return Hyperparameter(name, "numeric", getattr(self, name + "_bounds"), max(n_elements, 1))

    return property(fget, doc=f"The :class:`Hyperparameter` for ``{name}``.")


def _format_value(value):
    """Format a parameter as scikit-learn's kernel reprs do (3 significant digits)."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return str(int(value))
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return f"{value:.3g}"
    if isinstance(value, (list, tuple, np.ndarray)):
        try:
            flat = np.asarray(value, dtype=np.float64).ravel()
        except (TypeError, ValueError):
            return repr(value)
        return "[" + ", ".join(f"{v:.3g}" for v in flat) + "]"
    return repr(value)


class _RegistryKernel(Kernel):
    """Glue between a registry entry and scikit-learn's kernel contract.

    A subclass sets ``_registry_name`` and ``_param_map`` (one :data:`_ParamMap` per constructor
    parameter, in constructor order, covering every registry parameter). From those this base
    class derives the ``hyperparameter_<name>`` properties (created when the subclass is
    defined, one per registry hyperparameter), validates parameter values at call time,
    converts them to the registry's, reorders and rescales the registry's log-gradients to the
    order of ``self.hyperparameters`` (which scikit-learn sorts by attribute name), and drops
    the columns of fixed hyperparameters.

    Nothing is stored or cached on the instance during a call, so one kernel object may be
    called from many threads at once.
    """

    _registry_name = None
    _param_map = ()
    #: Extra text appended to a ValueError about the named parameter.
    _hints = {}

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls._registry_name is None:
            return
        spec = get_kernel(cls._registry_name)
        for m in cls._param_map:
            if spec.param(m.registry).hyperparameter:
                setattr(cls, "hyperparameter_" + m.name, _hyperparameter_property(m.name))

    # ----------------------------------------------------------------------------- helpers
    @property
    def _spec(self):
        return get_kernel(self._registry_name)

    def _check_log_space(self):
        """A hyperparameter lives in log space: negative values only with "fixed" bounds.

        Only for parameters the registry allows to be negative (``coef0``); the others get
        the registry's range error.
        """
        for m in self._param_map:
            rparam = self._spec.param(m.registry)
            if not rparam.hyperparameter or rparam.low >= 0:
                continue
            value = getattr(self, m.name)
            if _is_fixed(getattr(self, m.name + "_bounds")):
                continue
            try:
                negative = bool(np.any(np.asarray(value, dtype=np.float64) < 0))
            except (TypeError, ValueError):
                continue  # a wrong type is reported by the registry's check
            if negative:
                raise ValueError(
                    f"{type(self).__name__}: parameter {m.name!r} is negative ({value!r}); "
                    f"hyperparameters are optimised in log space, so a negative {m.name} "
                    f"needs {m.name}_bounds='fixed'"
                )

    def _registry_params(self, n_features):
        """Validate this kernel's parameters and return them as registry keyword arguments.

        Raises
        ------
        TypeError
            For a value of the wrong type (a string, a non-integer ``degree``...).
        ValueError
            For a value out of range, or a per-feature array of the wrong length.
        """
        spec = self._spec
        kernel = type(self).__name__
        self._check_log_space()
        out = {}
        for m in self._param_map:
            rparam = spec.param(m.registry)
            value = getattr(self, m.name)
            if rparam.per_feature and not isinstance(value, str) and np.iterable(value):
                try:
                    arr = np.asarray(value)
                except ValueError:
                    raise TypeError(
                        f"{kernel}: parameter {m.name!r} must be a number or a 1-D array of "
                        f"numbers; got {value!r}"
                    ) from None
                if arr.size == 1:  # as sklearn: a one-element vector is isotropic
                    value = arr.reshape(())[()]
            try:
                value = dataclasses.replace(rparam, name=m.name).check(value, n_features, kernel)
            except ValueError as exc:
                if m.name in self._hints:
                    raise ValueError(f"{exc}; {self._hints[m.name]}") from None
                raise
            if (m.coef, m.power) != (1.0, 1.0):
                with np.errstate(over="ignore", divide="ignore", under="ignore"):
                    converted = m.coef * np.asarray(value, dtype=np.float64) ** m.power
                if not (np.isfinite(converted).all() and (converted > 0).all()):
                    raise ValueError(
                        f"{kernel}: parameter {m.name!r} = {getattr(self, m.name)!r} is out of "
                        f"float64 range for this kernel: it gives {m.registry} = "
                        f"{m.coef:g} * {m.name} ** {m.power:g} = {converted.tolist()}, which must be a "
                        f"finite number > 0"
                    )
                value = float(converted) if converted.ndim == 0 else converted
            out[m.registry] = value
        return spec.resolve(n_features, **out)

    def _gradient_columns(self, params):
        """How registry gradient columns become ``theta``'s: ``dK_theta = dK[:, :, index] * factor``.

        Reorders to the order of ``self.theta`` (sklearn sorts hyperparameters by name), drops
        fixed hyperparameters, and rescales by each parameter map's power. NumPy index and
        factor arrays, applied where dK is (NumPy or torch).
        """
        by_registry = {m.registry: m for m in self._param_map}
        columns, start = {}, 0
        for rparam in self._spec.hyperparameters:
            width = 1 if np.ndim(params[rparam.name]) == 0 else np.shape(params[rparam.name])[0]
            m = by_registry[rparam.name]
            columns[m.name] = (np.arange(start, start + width), np.full(width, m.power))
            start += width
        order = [h.name for h in self.hyperparameters if not h.fixed]
        index = np.concatenate([columns[name][0] for name in order] + [np.zeros(0, np.intp)])
        factor = np.concatenate([columns[name][1] for name in order] + [np.zeros(0)])
        return index.astype(np.intp), factor

    # ---------------------------------------------------------------------- the contract
    def __call__(self, X, Y=None, eval_gradient=False):
        """Return the kernel k(X, Y) and, optionally, its gradient.

        Parameters
        ----------
        X : array-like of shape (n_samples_X, n_features)
            Left argument. float32 input is computed in float64.
        Y : array-like of shape (n_samples_Y, n_features), default=None
            Right argument; None means k(X, X), which is then exactly symmetric with a
            diagonal equal to :meth:`diag` bit for bit.
        eval_gradient : bool, default=False
            Also return the gradient with respect to the log of the non-fixed hyperparameters.
            Only supported when ``Y`` is None.

        Returns
        -------
        K : ndarray of shape (n_samples_X, n_samples_Y), float64
        K_gradient : ndarray of shape (n_samples_X, n_samples_X, n_dims), float64
            Only when ``eval_gradient`` is True; columns in the order of ``self.theta``.

        Raises
        ------
        ValueError
            For bad data (NaN, infinity, wrong number of dimensions, empty, mismatched
            features), an out-of-range parameter, an unknown ``device``, or ``eval_gradient``
            with ``Y`` given.
        TypeError
            For non-numeric, complex or sparse data, or a parameter of the wrong type.
        """
        if eval_gradient and Y is not None:
            raise ValueError("Gradient can only be evaluated when Y is None.")
        if not eval_gradient:
            return kernel_matrix(
                self._spec, X, Y, self._registry_params, self.device, always_float64=True
            )
        X = np.asarray(check_data(X, "X"), dtype=np.float64)
        params = self._registry_params(X.shape[1])
        K, dK = kernel_gradient(self._spec, X, params, self.device, self._gradient_columns(params))
        return np.require(K, np.float64, ["W"]), np.require(dK, np.float64, ["W"])

    def diag(self, X):
        """The diagonal of k(X, X), equal to ``np.diag(self(X))`` bit for bit.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        K_diag : ndarray of shape (n_samples,), float64
        """
        X = np.asarray(check_data(X, "X"), dtype=np.float64)
        resolve_device(self.device)  # the diagonal is cheap: always the float64 reference
        params = self._registry_params(X.shape[1])
        return np.require(self._spec.diag_fn(X, **params), np.float64, ["W"])

    def is_stationary(self):
        """Whether k(x, y) depends on x - y only (from the registry)."""
        return self._spec.stationary

    @property
    def requires_vector_input(self):
        """Always True: the kernels act on fixed-length feature vectors."""
        return True

    @property
    def theta(self):
        """The non-fixed hyperparameters, log-transformed, in the order of ``hyperparameters``.

        A zero ``coef0`` gives ``-inf``, as ``DotProduct(sigma_0=0)`` does in scikit-learn.
        """
        self._check_log_space()
        with np.errstate(divide="ignore"):
            return Kernel.theta.fget(self)

    @theta.setter
    def theta(self, theta):
        Kernel.theta.fset(self, theta)

    def __repr__(self):
        parts = [f"{m.name}={_format_value(getattr(self, m.name))}" for m in self._param_map]
        if not (isinstance(self.device, str) and self.device == "auto"):
            parts.append(f"device={self.device!r}")
        return f"{type(self).__name__}({', '.join(parts)})"


class _LengthScaleKernel(_RegistryKernel):
    """Adds scikit-learn's ``anisotropic`` property to kernels with a ``length_scale``."""

    @property
    def anisotropic(self):
        """True when ``length_scale`` holds one value per feature (more than one entry)."""
        value = self.length_scale
        return bool(np.iterable(value) and not isinstance(value, str) and len(value) > 1)


# ==================================================================================== kernels
class Linear(_RegistryKernel):
    r"""Linear (dot-product) kernel.

    .. math::

        k(x, y) = x \cdot y

    Equal to scikit-learn's ``DotProduct(sigma_0=0, sigma_0_bounds="fixed")`` and to
    :func:`sklearn.metrics.pairwise.linear_kernel`. Not stationary; no hyperparameters, so
    ``theta`` is empty.

    Parameters
    ----------
    device : {"auto", "cpu", "cuda"}, default="auto"
        Where the Gram matrix is computed: "auto" is the GPU when one is present (float64 there
        too), else the CPU. ``eval_gradient=True`` runs on the GPU too (float64) when K and its
        gradient fit in GPU memory, else on the CPU; ``diag`` always uses the CPU reference.

    Attributes
    ----------
    theta : ndarray of shape (0,)
        Empty.

    Examples
    --------
    >>> import numpy as np
    >>> from kernelkit.kernels import Linear
    >>> X = np.array([[1.0, 2.0], [3.0, 4.0]])
    >>> Linear()(X)
    array([[ 5., 11.],
           [11., 25.]])
    """

    _registry_name = "linear"
    _param_map = ()

    def __init__(self, *, device="auto"):
        self.device = device


class Polynomial(_RegistryKernel):
    r"""Polynomial kernel.

    .. math::

        k(x, y) = (\gamma\, x \cdot y + c_0)^{d}

    Equal to :func:`sklearn.metrics.pairwise.polynomial_kernel` with the same ``degree``,
    ``gamma`` and ``coef0``, and to
    ``ConstantKernel(gamma**degree) * DotProduct(sigma_0=sqrt(coef0 / gamma)) ** degree``.
    Not stationary. Positive semi-definite for ``coef0 >= 0``.

    Parameters
    ----------
    degree : int, default=3
        The exponent d, an integer >= 0; a plain parameter, not a hyperparameter.
    gamma : float, default=1.0
        Scale of the dot product, > 0. Unlike ``polynomial_kernel``, None (1 / n_features) is
        not accepted: a hyperparameter needs a value to take the log of.
    coef0 : float, default=1.0
        The additive constant c0. Zero is allowed (``theta`` then holds ``-inf``, as
        ``DotProduct(sigma_0=0)``); a negative value needs ``coef0_bounds="fixed"``.
    gamma_bounds, coef0_bounds : pair of floats >= 0 or "fixed", default=(1e-5, 1e5)
        Bounds for hyperparameter optimisation, or "fixed" to keep the value.
    device : {"auto", "cpu", "cuda"}, default="auto"
        Where the Gram matrix is computed.

    Attributes
    ----------
    hyperparameter_coef0, hyperparameter_gamma : Hyperparameter
        ``theta`` is ``[log coef0, log gamma]`` (scikit-learn orders hyperparameters by name).

    Examples
    --------
    >>> import numpy as np
    >>> from kernelkit.kernels import Polynomial
    >>> X = np.array([[1.0, 0.0], [1.0, 1.0]])
    >>> Polynomial(degree=2, gamma=0.5, coef0=1.0)(X)
    array([[2.25, 2.25],
           [2.25, 4.  ]])
    """

    _registry_name = "polynomial"
    _param_map = (_ParamMap("degree", "degree"), _ParamMap("gamma", "gamma"),
                  _ParamMap("coef0", "coef0"))

    def __init__(self, degree=3, gamma=1.0, coef0=1.0, gamma_bounds=(1e-5, 1e5),
                 coef0_bounds=(1e-5, 1e5), *, device="auto"):
        self.degree = degree
        self.gamma = gamma
        self.coef0 = coef0
        self.gamma_bounds = gamma_bounds
        self.coef0_bounds = coef0_bounds
        self.device = device


class RBF(_LengthScaleKernel):
    r"""Gaussian (squared-exponential) kernel with a scalar or per-feature length scale.

    .. math::

        k(x, y) = \exp\Big(-\tfrac12 \sum_k (x_k - y_k)^2 / \ell_k^2\Big)
                = \exp\Big(-\sum_k \gamma_k (x_k - y_k)^2\Big),
        \qquad \gamma_k = \frac{1}{2 \ell_k^2}

    Equal in value and gradient to :class:`sklearn.gaussian_process.kernels.RBF` and to
    ``rbf_kernel(X, Y, gamma=1 / (2 * length_scale**2))``. Stationary. The gradient with respect
    to log l is -2 times the registry's gradient with respect to log gamma.

    Parameters
    ----------
    length_scale : float or ndarray of shape (n_features,), default=1.0
        Length scale l > 0; one value per feature makes the kernel anisotropic.
    length_scale_bounds : pair of floats >= 0 or "fixed", default=(1e-5, 1e5)
        Bounds on ``length_scale``, or "fixed".
    device : {"auto", "cpu", "cuda"}, default="auto"
        Where the Gram matrix is computed.

    Attributes
    ----------
    hyperparameter_length_scale : Hyperparameter
        With ``n_elements == n_features`` when anisotropic.
    anisotropic : bool

    Examples
    --------
    >>> import numpy as np
    >>> from kernelkit.kernels import RBF
    >>> X = np.array([[0.0], [1.0]])
    >>> K = RBF(length_scale=1.0)(X)
    >>> bool(np.isclose(K[0, 1], np.exp(-0.5)))
    True
    >>> RBF(length_scale=[1.0, 2.0])
    RBF(length_scale=[1, 2])
    """

    _registry_name = "rbf"
    _param_map = (_ParamMap("length_scale", "gamma", coef=0.5, power=-2.0),)

    def __init__(self, length_scale=1.0, length_scale_bounds=(1e-5, 1e5), *, device="auto"):
        self.length_scale = length_scale
        self.length_scale_bounds = length_scale_bounds
        self.device = device


class Laplacian(_LengthScaleKernel):
    r"""Laplacian kernel (exponential of the L1 distance), scalar or per-feature length scale.

    .. math::

        k(x, y) = \exp\Big(-\sum_k |x_k - y_k| / \ell_k\Big),
        \qquad \gamma_k = 1 / \ell_k

    Equal to ``laplacian_kernel(X, Y, gamma=1 / length_scale)`` (isotropic). Stationary. Not to
    be confused with ``Matern(nu=0.5)``, which is the exponential of the L2 distance.

    Parameters
    ----------
    length_scale : float or ndarray of shape (n_features,), default=1.0
        Length scale l > 0; one value per feature makes the kernel anisotropic.
    length_scale_bounds : pair of floats >= 0 or "fixed", default=(1e-5, 1e5)
        Bounds on ``length_scale``, or "fixed".
    device : {"auto", "cpu", "cuda"}, default="auto"
        Where the Gram matrix is computed.

    Attributes
    ----------
    hyperparameter_length_scale : Hyperparameter
    anisotropic : bool

    Examples
    --------
    >>> import numpy as np
    >>> from kernelkit.kernels import Laplacian
    >>> X = np.array([[0.0, 0.0], [1.0, 1.0]])
    >>> K = Laplacian(length_scale=2.0)(X)
    >>> bool(np.isclose(K[0, 1], np.exp(-1.0)))
    True
    """

    _registry_name = "laplacian"
    _param_map = (_ParamMap("length_scale", "gamma", coef=1.0, power=-1.0),)

    def __init__(self, length_scale=1.0, length_scale_bounds=(1e-5, 1e5), *, device="auto"):
        self.length_scale = length_scale
        self.length_scale_bounds = length_scale_bounds
        self.device = device


class Matern(_LengthScaleKernel):
    r"""Matérn kernel for nu in {0.5, 1.5, 2.5}, scalar or per-feature length scale.

    With :math:`r = \lVert (x - y) / \ell \rVert_2`:

    .. math::

        k_{1/2} = e^{-r}, \qquad
        k_{3/2} = (1 + \sqrt3\, r)\, e^{-\sqrt3\, r}, \qquad
        k_{5/2} = (1 + \sqrt5\, r + \tfrac53 r^2)\, e^{-\sqrt5\, r}

    Equal in value and gradient to :class:`sklearn.gaussian_process.kernels.Matern` with the
    same ``nu``. Stationary. For any other nu (including inf, the RBF limit) use scikit-learn's
    ``Matern``, which evaluates the general Bessel-function form.

    Parameters
    ----------
    length_scale : float or ndarray of shape (n_features,), default=1.0
        Length scale l > 0; one value per feature makes the kernel anisotropic.
    length_scale_bounds : pair of floats >= 0 or "fixed", default=(1e-5, 1e5)
        Bounds on ``length_scale``, or "fixed".
    nu : {0.5, 1.5, 2.5}, default=1.5
        Smoothness; a plain parameter, not a hyperparameter.
    device : {"auto", "cpu", "cuda"}, default="auto"
        Where the Gram matrix is computed.

    Attributes
    ----------
    hyperparameter_length_scale : Hyperparameter
    anisotropic : bool

    Examples
    --------
    >>> import numpy as np
    >>> from kernelkit.kernels import Matern
    >>> X = np.array([[0.0], [1.0]])
    >>> K = Matern(length_scale=1.0, nu=0.5)(X)
    >>> bool(np.isclose(K[0, 1], np.exp(-1.0)))
    True
    """

    _registry_name = "matern"
    _param_map = (_ParamMap("length_scale", "length_scale"), _ParamMap("nu", "nu"))
    _hints = {"nu": "kernelkit has the closed forms of these three only (in kernelkit.Matern and "
                    "in kernelkit's estimators, which convert scikit-learn's Matern to it): pick "
                    "one, use RBF for nu=inf, or for another nu give scikit-learn's Matern to a "
                    "scikit-learn estimator such as "
                    "sklearn.gaussian_process.GaussianProcessRegressor"}

    def __init__(self, length_scale=1.0, length_scale_bounds=(1e-5, 1e5), nu=1.5, *,
                 device="auto"):
        self.length_scale = length_scale
        self.length_scale_bounds = length_scale_bounds
        self.nu = nu
        self.device = device


class RationalQuadratic(_LengthScaleKernel):
    r"""Rational quadratic kernel: a scale mixture of RBF kernels.

    With :math:`r = \lVert (x - y) / \ell \rVert_2`:

    .. math::

        k(x, y) = \Big(1 + \frac{r^2}{2 \alpha}\Big)^{-\alpha}

    Equal in value and gradient to :class:`sklearn.gaussian_process.kernels.RationalQuadratic`
    (isotropic). Unlike scikit-learn's, this one also accepts a per-feature length scale.
    Stationary.

    Parameters
    ----------
    length_scale : float or ndarray of shape (n_features,), default=1.0
        Length scale l > 0.
    alpha : float, default=1.0
        Scale-mixture parameter, > 0; alpha -> inf gives the RBF kernel.
    length_scale_bounds, alpha_bounds : pair of floats >= 0 or "fixed", default=(1e-5, 1e5)
        Bounds for hyperparameter optimisation, or "fixed".
    device : {"auto", "cpu", "cuda"}, default="auto"
        Where the Gram matrix is computed.

    Attributes
    ----------
    hyperparameter_alpha, hyperparameter_length_scale : Hyperparameter
        ``theta`` is ``[log alpha, log length_scale...]``, as in scikit-learn.
    anisotropic : bool

    Examples
    --------
    >>> import numpy as np
    >>> from kernelkit.kernels import RationalQuadratic
    >>> X = np.array([[0.0], [2.0]])
    >>> RationalQuadratic(length_scale=1.0, alpha=1.0)(X)
    array([[1.        , 0.33333333],
           [0.33333333, 1.        ]])
    """

    _registry_name = "rational_quadratic"
    _param_map = (_ParamMap("length_scale", "length_scale"), _ParamMap("alpha", "alpha"))

    def __init__(self, length_scale=1.0, alpha=1.0, length_scale_bounds=(1e-5, 1e5),
                 alpha_bounds=(1e-5, 1e5), *, device="auto"):
        self.length_scale = length_scale
        self.alpha = alpha
        self.length_scale_bounds = length_scale_bounds
        self.alpha_bounds = alpha_bounds
        self.device = device


class ExpSineSquared(_RegistryKernel):
    r"""Periodic (exp-sine-squared) kernel.

    With :math:`d = \lVert x - y \rVert_2`:

    .. math::

        k(x, y) = \exp\Big(-\frac{2 \sin^2(\pi d / p)}{\ell^2}\Big)

    Equal in value and gradient to :class:`sklearn.gaussian_process.kernels.ExpSineSquared`
    (registry name ``"periodic"``). Stationary.

    Parameters
    ----------
    length_scale : float, default=1.0
        Length scale l > 0.
    periodicity : float, default=1.0
        Period p > 0.
    length_scale_bounds, periodicity_bounds : pair of floats >= 0 or "fixed", default=(1e-5, 1e5)
        Bounds for hyperparameter optimisation, or "fixed".
    device : {"auto", "cpu", "cuda"}, default="auto"
        Where the Gram matrix is computed.

    Attributes
    ----------
    hyperparameter_length_scale, hyperparameter_periodicity : Hyperparameter
        ``theta`` is ``[log length_scale, log periodicity]``, as in scikit-learn.

    Examples
    --------
    >>> import numpy as np
    >>> from kernelkit.kernels import ExpSineSquared
    >>> X = np.array([[0.0], [0.5], [2.0]])
    >>> ExpSineSquared(length_scale=1.0, periodicity=2.0)(X).round(4)
    array([[1.    , 0.3679, 1.    ],
           [0.3679, 1.    , 0.3679],
           [1.    , 0.3679, 1.    ]])
    """

    _registry_name = "periodic"
    _param_map = (_ParamMap("length_scale", "length_scale"), _ParamMap("periodicity", "periodicity"))

    def __init__(self, length_scale=1.0, periodicity=1.0, length_scale_bounds=(1e-5, 1e5),
                 periodicity_bounds=(1e-5, 1e5), *, device="auto"):
        self.length_scale = length_scale
        self.periodicity = periodicity
        self.length_scale_bounds = length_scale_bounds
        self.periodicity_bounds = periodicity_bounds
        self.device = device


class Cosine(_RegistryKernel):
    r"""Cosine-similarity kernel.

    .. math::

        k(x, y) = \frac{x \cdot y}{\lVert x \rVert\, \lVert y \rVert}

    Equal to :func:`sklearn.metrics.pairwise.cosine_similarity`; a zero row has similarity 0
    with everything (itself included). Not stationary; no hyperparameters.

    Parameters
    ----------
    device : {"auto", "cpu", "cuda"}, default="auto"
        Where the Gram matrix is computed.

    Examples
    --------
    >>> import numpy as np
    >>> from kernelkit.kernels import Cosine
    >>> X = np.array([[1.0, 0.0], [1.0, 1.0]])
    >>> bool(np.isclose(Cosine()(X)[0, 1], 1 / np.sqrt(2)))
    True
    """

    _registry_name = "cosine"
    _param_map = ()

    def __init__(self, *, device="auto"):
        self.device = device


class Sigmoid(_RegistryKernel):
    r"""Sigmoid (hyperbolic tangent) kernel. **Not positive semi-definite.**

    .. math::

        k(x, y) = \tanh(\gamma\, x \cdot y + c_0)

    Equal to :func:`sklearn.metrics.pairwise.sigmoid_kernel`. Because it is not positive
    semi-definite, it is not a valid covariance for Gaussian processes (the Cholesky
    factorisation may fail) and the SVM problem it gives may be non-convex; it is offered for
    compatibility with ``SVC(kernel="sigmoid")``. Not stationary.

    Parameters
    ----------
    gamma : float, default=1.0
        Scale of the dot product, > 0 (None is not accepted, see :class:`Polynomial`).
    coef0 : float, default=1.0
        Additive constant; zero gives ``theta = -inf``, a negative value needs
        ``coef0_bounds="fixed"``.
    gamma_bounds, coef0_bounds : pair of floats >= 0 or "fixed", default=(1e-5, 1e5)
        Bounds for hyperparameter optimisation, or "fixed".
    device : {"auto", "cpu", "cuda"}, default="auto"
        Where the Gram matrix is computed.

    Attributes
    ----------
    hyperparameter_coef0, hyperparameter_gamma : Hyperparameter
        ``theta`` is ``[log coef0, log gamma]``.

    Examples
    --------
    >>> import numpy as np
    >>> from kernelkit.kernels import Sigmoid
    >>> X = np.array([[1.0, 0.0], [0.0, 1.0]])
    >>> bool(np.isclose(Sigmoid(gamma=0.5, coef0=0.0)(X)[0, 0], np.tanh(0.5)))
    True
    """

    _registry_name = "sigmoid"
    _param_map = (_ParamMap("gamma", "gamma"), _ParamMap("coef0", "coef0"))

    def __init__(self, gamma=1.0, coef0=1.0, gamma_bounds=(1e-5, 1e5), coef0_bounds=(1e-5, 1e5),
                 *, device="auto"):
        self.gamma = gamma
        self.coef0 = coef0
        self.gamma_bounds = gamma_bounds
        self.coef0_bounds = coef0_bounds
        self.device = device


class Exponential(_RegistryKernel):
    r"""Exponential dot-product kernel: the unnormalised weight of softmax attention.

    .. math::

        k(x, y) = \exp(s\, x \cdot y)

    Softmax attention with queries X and keys Y is the kernel smoother with this kernel and
    ``scale = 1 / sqrt(head_dim)``. Positive semi-definite, not stationary. Values grow
    quickly with ``scale * x·y``; overflow to inf is not checked.

    Parameters
    ----------
    scale : float, default=1.0
        The scale s > 0.
    scale_bounds : pair of floats >= 0 or "fixed", default=(1e-5, 1e5)
        Bounds on ``scale``, or "fixed".
    device : {"auto", "cpu", "cuda"}, default="auto"
        Where the Gram matrix is computed.

    Attributes
    ----------
    hyperparameter_scale : Hyperparameter

    Examples
    --------
    >>> import numpy as np
    >>> from kernelkit.kernels import Exponential
    >>> X = np.array([[1.0, 0.0], [0.0, 1.0]])
    >>> bool(Exponential(scale=0.5)(X)[0, 0] == np.exp(0.5))
    True
    """

    _registry_name = "exponential"
    _param_map = (_ParamMap("scale", "scale"),)

    def __init__(self, scale=1.0, scale_bounds=(1e-5, 1e5), *, device="auto"):
        self.scale = scale
        self.scale_bounds = scale_bounds
        self.device = device


#: Registry name -> kernel class, one per entry of :data:`kernelkit_math.registry.REGISTRY`.
KERNEL_CLASSES = {
    cls._registry_name: cls
    for cls in (globals()[name] for name in __all__ if name != "KERNEL_CLASSES")
}
