"""The base of :mod:`kernelkit.kernels`: scikit-learn's kernel contract over a registry entry.

:class:`_RegistryKernel` turns a :mod:`kernelkit_math` registry entry into a
:class:`sklearn.gaussian_process.kernels.Kernel`: the ``hyperparameter_<name>`` properties, the
checks of parameter values (with a kernel's extra hints), the mapping of constructor parameters
onto the registry's (:data:`_ParamMap`) and of the registry's log-gradients onto ``theta``, and
the repr. :class:`_LengthScaleKernel` adds ``anisotropic``. The public classes, one per registry
entry, are in :mod:`kernelkit.kernels`; only they are meant to be used (and pickled) by name.
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
