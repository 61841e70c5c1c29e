"""The parameter checks of :class:`~kernelkit.GaussianProcessRegressor`: a TypeError or
ValueError that names the parameter and says what was expected. NumPy only (no torch)."""

from __future__ import annotations

import numbers

import numpy as np

__all__ = ["DTYPES", "check_alpha", "check_int", "check_params", "check_positive",
           "check_pretrain_size", "check_rank"]

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
