"""The parameter and argument checks of :class:`~kernelkit.GaussianProcessRegressor`: a
TypeError or ValueError that names the parameter and says what was expected. Importing this
module loads NumPy and scikit-learn only."""

from __future__ import annotations

import numbers

import numpy as np
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.gaussian_process.kernels import ConstantKernel
from sklearn.utils.validation import validate_data

from kernelkit._util.device import resolve_device
from kernelkit.estimators._verbosity import check_verbose
from kernelkit.kernels import RBF
from kernelkit.operators.kernel_tree import parse_kernel

__all__ = ["DTYPES", "check_alpha", "check_int", "check_params", "check_path", "check_positive",
           "check_pretrain_size", "check_rank", "fit_inputs", "lml_inputs", "predict_inputs"]

#: The values of ``dtype``.
DTYPES = ("auto", "float32", "float64")


def check_int(name, value, low):
    """``value`` as an int >= ``low``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer; got {value!r}")
    if value < low:
        raise ValueError(f"{name} must be >= {low}; got {value!r}")
    return int(value)


def check_rank(value):
    """``preconditioner_rank``: "auto" or an int >= 0."""
    if isinstance(value, str):
        if value != "auto":
            raise ValueError(f'preconditioner_rank must be "auto" or an integer >= 0; got '
                             f'{value!r}')
        return value
    return check_int("preconditioner_rank", value, 0)


def check_pretrain_size(value):
    """``pretrain_size``: "auto", None or an int >= 1."""
    if value is None or (isinstance(value, str) and value == "auto"):
        return value
    if isinstance(value, str):
        raise ValueError(f'pretrain_size must be "auto", None or an integer >= 1; got {value!r}')
    return check_int("pretrain_size", value, 1)


def check_positive(name, value, allow_zero=False):
    """``value`` as a finite float > 0 (>= 0 with ``allow_zero``)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number; got {value!r}")
    if not np.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"{name} must be a finite number {'>=' if allow_zero else '>'} 0; "
                         f"got {value!r}")
    return float(value)


def check_alpha(alpha, n):
    """``alpha`` as a float, or as a float64 array of shape (n,) (one of shape (1,) is a scalar)."""
    if np.ndim(alpha) == 0:
        return check_positive("alpha", alpha, allow_zero=True)
    values = np.asarray(alpha)
    if values.dtype.kind not in "iuf":
        raise TypeError(f"alpha must be a real number or an array of them; got {alpha!r}")
    values = values.astype(np.float64)
    if values.shape == (1,):
        return check_positive("alpha", float(values[0]), allow_zero=True)
    if values.shape != (n,):
        raise ValueError(f"alpha must be a scalar or an array with same number of entries as y "
                         f"(one per sample); got shape {values.shape} for {n} samples")
    if not (np.all(np.isfinite(values)) and np.all(values >= 0)):
        raise ValueError("alpha must be finite and >= 0")
    return values


def check_params(gp):
    """Check the parameters of the regressor ``gp`` that need no data (all but ``kernel`` and
    ``alpha``); return the iterative path's
    :class:`~kernelkit.estimators.gp._lml.SolverSettings`."""
    from kernelkit.estimators.gp._lml import SolverSettings

    if not (gp.optimizer is None or callable(gp.optimizer)
            or (isinstance(gp.optimizer, str) and gp.optimizer == "fmin_l_bfgs_b")):
        raise ValueError(f"optimizer must be 'fmin_l_bfgs_b', a callable or None; "
                         f"got {gp.optimizer!r}")
    check_int("n_restarts_optimizer", gp.n_restarts_optimizer, 0)
    check_int("optimizer_max_iter", gp.optimizer_max_iter, 1)
    check_pretrain_size(gp.pretrain_size)
    check_verbose(gp.verbose)
    if gp.exact_max_n is not None:
        check_int("exact_max_n", gp.exact_max_n, 0)
    if gp.n_targets is not None:
        check_int("n_targets", gp.n_targets, 1)
    if not isinstance(gp.normalize_y, (bool, np.bool_)):
        raise TypeError(f"normalize_y must be a bool; got {gp.normalize_y!r}")
    if not isinstance(gp.dtype, str) or gp.dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}; got {gp.dtype!r}")
    return SolverSettings(
        n_probes=check_int("n_probes", gp.n_probes, 1),
        cg_tol=check_positive("cg_tol", gp.cg_tol),
        max_cg_iter=check_int("max_cg_iter", gp.max_cg_iter, 1),
        preconditioner_rank=check_rank(gp.preconditioner_rank),
    )


def check_path(n, exact_max_n, alpha, structure):
    """Whether n training points take the exact path (n <= ``exact_max_n``); the iterative path
    refuses a per-sample ``alpha`` (checked) and a WhiteKernel noise that varies from point to
    point (``structure``: the kernel's :class:`~kernelkit.operators.kernel_tree` structure)."""
    if n <= exact_max_n:
        return True
    if np.ndim(alpha):
        raise ValueError(
            f"per-sample alpha needs the exact path: n_samples={n} > exact_max_n={exact_max_n}")
    if structure.varying_noise is not None:
        raise ValueError(
            f"kernel: {structure.varying_noise!r} adds a WhiteKernel noise that varies from "
            f"point to point, which the iterative path (n_samples={n} > exact_max_n="
            f"{exact_max_n}) cannot precondition; write the noise as a summand "
            f"(... + WhiteKernel()) or as a WhiteKernel times constants and kernels with "
            f"k(x, x) = 1 (RBF, Matern...)")
    return False


def fit_inputs(gp, X, y):
    """The checked arguments of ``gp.fit``: ``(settings, X, y, kernel, structure, alpha, exact)``
    with the settings of :func:`check_params`, a clone of ``gp.kernel`` (or of the default
    kernel) and its structure, the alpha of :func:`check_alpha` and the path of
    :func:`check_path`; sets ``gp.n_features_in_`` (scikit-learn's ``validate_data``)."""
    from kernelkit.estimators.gp._exact import exact_max_n

    settings = check_params(gp)
    kernel = ConstantKernel(1.0) * RBF(1.0) if gp.kernel is None else gp.kernel
    parse_kernel(kernel)  # the kernel's type and structure, before anything else
    kernel = clone(kernel)
    X, y = validate_data(gp, X, y, multi_output=True, y_numeric=True, dtype=np.float64,
                         reset=True)
    structure = parse_kernel(kernel, X.shape[1])
    n_targets_seen = y.shape[1] if y.ndim > 1 else 1
    if gp.n_targets is not None and n_targets_seen != gp.n_targets:
        raise ValueError(
            f"The number of targets seen in `y` is different from the parameter "
            f"`n_targets`. Got {n_targets_seen} != {gp.n_targets}.")
    alpha = check_alpha(gp.alpha, X.shape[0])
    exact = check_path(X.shape[0], exact_max_n(gp.exact_max_n, resolve_device(gp.device)), alpha,
                       structure)
    return settings, X, y, kernel, structure, alpha, exact


def lml_inputs(gp, theta, eval_gradient, clone_kernel):
    """The checked arguments of ``gp.log_marginal_likelihood``: ``(theta, settings)``, or
    ``(None, None)`` for the stored value."""
    if not hasattr(gp, "X_train_"):  # the requires_fit=False tag turns check_is_fitted off
        raise NotFittedError("This GaussianProcessRegressor instance is not fitted yet; call "
                             "'fit' before log_marginal_likelihood.")
    if theta is None:
        if eval_gradient:
            raise ValueError("Gradient can only be evaluated for theta!=None")
        return None, None
    theta = np.asarray(theta, dtype=np.float64)
    if theta.shape != gp.kernel_.theta.shape:
        raise ValueError(f"theta must have shape {gp.kernel_.theta.shape}; got {theta.shape}")
    return theta, check_params(gp)


def predict_inputs(gp, X, return_std, return_cov):
    """The checked arguments of ``gp.predict``: ``(X, settings)``, settings None before fit."""
    if return_std and return_cov:
        raise RuntimeError("At most one of return_std or return_cov can be requested.")
    X = validate_data(gp, X, dtype=np.float64, reset=False)
    return X, (check_params(gp) if hasattr(gp, "X_train_") else None)
