r"""Gaussian-process regression: exact (dense float64 Cholesky) for small n, matrix-free
(BBMM-style) for large n, on the GPU or the CPU.

The estimator mirrors :class:`sklearn.gaussian_process.GaussianProcessRegressor`. Up to
``exact_max_n`` training points (:data:`kernelkit.gp._exact.EXACT_MAX_N` by default) it computes
what scikit-learn computes, with a float64 Cholesky factor on the fit device (:mod:`._exact`).
Above it, it never factorises K and never builds the (n, n, n_theta) gradient tensor:

- K^{-1} y by preconditioned conjugate gradients (:mod:`kernelkit.solvers._cg`), exact to
  ``cg_tol``;
- log det K by stochastic Lanczos quadrature on the CG coefficients of ``n_probes`` probe vectors,
  corrected by the exact log determinant of a rank-``preconditioner_rank`` pivoted-Cholesky
  preconditioner (:mod:`kernelkit.solvers._precond`);
- the hyperparameter gradient by Hutchinson trace estimation, all terms from one chunked autograd
  backward (:mod:`._lml`, :mod:`._operator`).

There, K itself is held densely (one matrix product per CG iteration) when it fits in half the
free GPU memory (1 GiB on the CPU), else never formed: memory O(n (n_probes + rank) + chunk x n),
time O(n^2 d) per CG iteration (:mod:`._operator`).
Importing this module loads NumPy, SciPy and scikit-learn only; torch loads on the first ``fit``.
"""

from __future__ import annotations

import numbers
import warnings

import numpy as np
import scipy.optimize
from sklearn.base import BaseEstimator, RegressorMixin, clone
from sklearn.exceptions import ConvergenceWarning, NotFittedError
from sklearn.gaussian_process.kernels import ConstantKernel
from sklearn.utils import check_random_state
from sklearn.utils.validation import validate_data

from kernelkit._device import resolve_device
from kernelkit.gp._structure import parse_kernel
from kernelkit.kernels import RBF

__all__ = ["GaussianProcessRegressor"]

#: Test points per batch of predictive variances: n * batch <= this many values.
VARIANCE_BATCH_ELEMENTS = 2**27

_DTYPES = ("auto", "float32", "float64")


def _check_int(name, value, low):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer; got {value!r}")
    if value < low:
        raise ValueError(f"{name} must be >= {low}; got {value!r}")
    return int(value)


def _check_positive(name, value, allow_zero=False):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number; got {value!r}")
    if not np.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"{name} must be a finite number {'>=' if allow_zero else '>'} 0; "
                         f"got {value!r}")
    return float(value)


def _check_alpha(alpha, n):
    """``alpha`` as a float, or as a float64 array of shape (n,) (one of shape (1,) is a scalar)."""
    if np.ndim(alpha) == 0:
        return _check_positive("alpha", alpha, allow_zero=True)
    values = np.asarray(alpha)
    if values.dtype.kind not in "iuf":
        raise TypeError(f"alpha must be a real number or an array of them; got {alpha!r}")
    values = values.astype(np.float64)
    if values.shape == (1,):
        return _check_positive("alpha", float(values[0]), allow_zero=True)
    if values.shape != (n,):
        raise ValueError(f"alpha must be a scalar or an array with one entry per sample; got "
                         f"shape {values.shape} for {n} samples")
    if not (np.all(np.isfinite(values)) and np.all(values >= 0)):
        raise ValueError("alpha must be finite and >= 0")
    return values


class GaussianProcessRegressor(RegressorMixin, BaseEstimator):
    r"""Gaussian-process regression: exact for small n, with likelihood and gradients that
    scale to large n.

    scikit-learn's :class:`sklearn.gaussian_process.GaussianProcessRegressor` interface for
    kernels of the form ``[ConstantKernel *] base [+ WhiteKernel]`` (``base``:
    :class:`kernelkit.RBF`, :class:`kernelkit.Matern` with nu in {0.5, 1.5, 2.5},
    :class:`kernelkit.RationalQuadratic`, or scikit-learn's classes of the same names):

    .. math::

        \log p(y) = -\tfrac12 y^\top K^{-1} y - \tfrac12 \log\det K - \tfrac n2 \log 2\pi,
        \qquad K = k_\theta(X, X) + \text{alpha}\, I

    **Exact path** (n <= ``exact_max_n``): a float64 Cholesky factor of K on the fit device gives
    the log marginal likelihood, its exact gradient, ``alpha_``, ``L_`` and the predictions, as
    scikit-learn computes them (agreement to float64 round-off of the kernel values). 2-D y and
    per-sample ``alpha`` are supported here only.

    **Iterative path** (n > ``exact_max_n``): preconditioned conjugate gradients and stochastic
    trace estimation (BBMM, Gardner et al. 2018), O(n) memory besides a chunk of kernel rows.
    ``y^T K^{-1} y`` and the predictive mean are exact to ``cg_tol``; ``log det K`` and the
    gradient are unbiased stochastic estimates from ``n_probes`` probe vectors (standard
    deviation shrinking like 1/sqrt(n_probes), and to zero as the preconditioner approaches K).
    The probes are drawn once per fit from ``random_state``, so the objective is deterministic in
    theta. The gradient there is Hutchinson's estimate of the exact gradient, not the derivative
    of the stochastic log-determinant estimate (they differ by ~10% at ``preconditioner_rank``
    << n): L-BFGS-B's line search can then stop early, and says so with a ConvergenceWarning.

    Differences from scikit-learn: the kernel structures above only; no ``copy_X_train`` (the
    training data are always copied) and no ``n_targets`` (before ``fit``, ``predict`` and
    ``sample_y`` use the prior of one target, as scikit-learn by default);
    ``optimizer_max_iter`` (default 100) bounds each L-BFGS-B run (scikit-learn: SciPy's
    15000); negative predicted variances (round-off) become 0 without scikit-learn's warning;
    2-D y and per-sample ``alpha`` raise ValueError on the iterative path.

    Parameters
    ----------
    kernel : kernel object, default=None
        ``None`` means ``ConstantKernel(1.0) * kernelkit.RBF(1.0)`` with both hyperparameters
        optimised, as scikit-learn's ``C() * RBF()``. Hyperparameters with
        ``*_bounds="fixed"`` are not optimised.
    alpha : float or ndarray of shape (n_samples,), default=1e-10
        Added to the diagonal of K, as scikit-learn's (an array: exact path only). The iterative
        path's CG needs K reasonably conditioned: use a WhiteKernel or alpha of at least ~1e-6
        times the signal variance in float64, ~1e-3 in float32.
    optimizer : "fmin_l_bfgs_b", callable or None, default="fmin_l_bfgs_b"
        As scikit-learn: a callable is called as ``optimizer(obj_func, initial_theta, bounds)``
        and returns ``(theta_opt, func_min)``; None keeps the kernel's hyperparameters. When
        L-BFGS-B stops without converging (iteration limit, abnormal line search), a
        ConvergenceWarning says so, as in scikit-learn.
    n_restarts_optimizer : int, default=0
        Extra optimiser runs from log-uniform draws within the bounds (finite bounds needed).
    normalize_y : bool, default=False
        Centre and scale each column of y before fitting, as scikit-learn.
    random_state : int, RandomState instance or None, default=None
        Draws the probe vectors and the restart points.
    device : {"auto", "cpu", "cuda"}, default="auto"
        Where the kernel products and the Cholesky factorisation run; "auto" is the GPU when one
        is present.
    dtype : {"auto", "float32", "float64"}, default="auto"
        Iterative path: dtype of the kernel blocks and CG vectors; "auto" is float32 on the GPU
        and float64 on the CPU. The kernel blocks are formed from data centred on their float64
        mean and scaled in float64, then rounded once (:mod:`kernelkit.gp._operator`), so float32
        blocks are as accurate as the library's float32 Gram at any offset of the data
        (measured on 400 timestamps in seconds over a day, RBF(20) + WhiteKernel(0.1), cg_tol
        1e-6: mean 3e-5 and std 8e-5 from scikit-learn's float64 result). The
        preconditioner, the tridiagonal eigenproblems and the final sums are float64. The exact
        path is float64 throughout.
    exact_max_n : int or None, default=None
        Largest n for the exact path; None means
        :data:`kernelkit.gp._exact.EXACT_MAX_N` (4000 on the CPU, 10 000 on a GPU); 0 always
        takes the iterative path.
    n_probes : int, default=16
        Iterative path: probe vectors for the log-determinant and trace estimates.
    max_cg_iter : int, default=1000
        Iterative path: most CG iterations per solve (a ConvergenceWarning says when they were
        not enough).
    cg_tol : float, default=1e-3
        Iterative path: relative residual ||K x - b|| / ||b|| at which CG stops. 1e-3 is enough
        for hyperparameter fitting in float32; use 1e-6 or less in float64 for reference
        accuracy.
    preconditioner_rank : int, default=100
        Iterative path: rank of the pivoted-Cholesky preconditioner (0: none).
    optimizer_max_iter : int, default=100
        Most L-BFGS-B iterations per optimiser run.

    Attributes
    ----------
    kernel_ : kernel object
        The kernel with the fitted hyperparameters.
    log_marginal_likelihood_value_ : float
        The log marginal likelihood at ``kernel_.theta`` (exact path), or its estimate.
    alpha_ : ndarray of shape (n_samples,) or (n_samples, n_targets)
        K^{-1} y_train_ (iterative path: to ``cg_tol``).
    L_ : ndarray of shape (n_samples, n_samples)
        Lower Cholesky factor of K (exact path only).
    X_train_ : ndarray of shape (n_samples, n_features)
    y_train_ : ndarray of shape (n_samples,) or (n_samples, n_targets)
        The (normalised, if ``normalize_y``) training targets.
    n_features_in_ : int

    Raises
    ------
    TypeError
        In ``fit``: an unsupported kernel structure (the message lists what is supported) or a
        parameter of the wrong type.
    ValueError
        In ``fit``: a parameter out of range, data that scikit-learn's validation rejects, or 2-D
        y / per-sample alpha with n > ``exact_max_n``.

    Notes
    -----
    Iterative path: predictive standard deviations and covariances are exact to ``cg_tol``: the
    test columns K(X, X*) are solved in batches of ``VARIANCE_BATCH_ELEMENTS / n`` columns (one
    batched CG per batch), so their cost grows linearly with the number of test points. Exact
    path: one triangular solve per batch of test points.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.gaussian_process.kernels import ConstantKernel, WhiteKernel
    >>> import kernelkit
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(-3, 3, (200, 1))
    >>> y = np.sin(X[:, 0]) + 0.1 * rng.standard_normal(200)
    >>> kernel = ConstantKernel() * kernelkit.RBF(1.0) + WhiteKernel(0.1)
    >>> gp = kernelkit.GaussianProcessRegressor(kernel, device="cpu", random_state=0).fit(X, y)
    >>> mean, std = gp.predict(X[:3], return_std=True)
    >>> mean.shape, std.shape
    ((3,), (3,))
    """

    def __init__(self, kernel=None, *, alpha=1e-10, optimizer="fmin_l_bfgs_b",
                 n_restarts_optimizer=0, normalize_y=False, random_state=None, device="auto",
                 dtype="auto", exact_max_n=None, n_probes=16, max_cg_iter=1000, cg_tol=1e-3,
                 preconditioner_rank=100, optimizer_max_iter=100):
        self.kernel = kernel
        self.alpha = alpha
        self.optimizer = optimizer
        self.n_restarts_optimizer = n_restarts_optimizer
        self.normalize_y = normalize_y
        self.random_state = random_state
        self.device = device
        self.dtype = dtype
        self.exact_max_n = exact_max_n
        self.n_probes = n_probes
        self.max_cg_iter = max_cg_iter
        self.cg_tol = cg_tol
        self.preconditioner_rank = preconditioner_rank
        self.optimizer_max_iter = optimizer_max_iter

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True  # 2-D y on the exact path
        tags.requires_fit = False  # predict and sample_y use the prior before fit
        return tags

    # ----------------------------------------------------------------------------- helpers
    def _check_params(self):
        from kernelkit.gp._lml import SolverSettings

        if not (self.optimizer is None or callable(self.optimizer)
                or (isinstance(self.optimizer, str) and self.optimizer == "fmin_l_bfgs_b")):
            raise ValueError(f"optimizer must be 'fmin_l_bfgs_b', a callable or None; "
                             f"got {self.optimizer!r}")
        _check_int("n_restarts_optimizer", self.n_restarts_optimizer, 0)
        _check_int("optimizer_max_iter", self.optimizer_max_iter, 1)
        if self.exact_max_n is not None:
            _check_int("exact_max_n", self.exact_max_n, 0)
        if not isinstance(self.normalize_y, (bool, np.bool_)):
            raise TypeError(f"normalize_y must be a bool; got {self.normalize_y!r}")
        if not isinstance(self.dtype, str) or self.dtype not in _DTYPES:
            raise ValueError(f"dtype must be one of {_DTYPES}; got {self.dtype!r}")
        return SolverSettings(
            n_probes=_check_int("n_probes", self.n_probes, 1),
            cg_tol=_check_positive("cg_tol", self.cg_tol),
            max_cg_iter=_check_int("max_cg_iter", self.max_cg_iter, 1),
            preconditioner_rank=_check_int("preconditioner_rank", self.preconditioner_rank, 0),
        )

    def _torch_setup(self):
        import torch

        where = resolve_device(self.device)
        name = self.dtype if self.dtype != "auto" else ("float32" if where == "cuda" else "float64")
        return torch.device(where), getattr(torch, name)

    def _operator(self, structure):
        from kernelkit.gp._operator import CovarianceOperator

        device, dtype = self._torch_setup()
        jitter = 0.0 if self._exact else self._alpha
        return CovarianceOperator(self.X_train_, structure, jitter, device, dtype)

    def _probes(self, op, settings):
        from kernelkit.gp._lml import make_probes

        rank = min(settings.preconditioner_rank, op.n)
        return make_probes(op.n, rank, settings.n_probes, self._probe_seed, op.device)

    def _targets(self, op):
        """y_train_ as an (n, t) float64 tensor on the operator's device."""
        import torch

        Y = torch.as_tensor(self.y_train_, dtype=torch.float64, device=op.device)
        return Y.reshape(op.n, -1)

    def _alpha_tensor(self, op):
        import torch

        return torch.as_tensor(self._alpha, dtype=torch.float64, device=op.device)

    def _lml_function(self, op, settings):
        """theta, eval_gradient -> lml or (lml, grad) on this fit's path."""
        import torch

        from kernelkit.gp._exact import exact_lml
        from kernelkit.gp._lml import log_marginal_likelihood

        Y = self._targets(op)
        if self._exact:
            alpha = self._alpha_tensor(op)
            return lambda theta, eval_gradient: exact_lml(op, theta, Y, alpha, eval_gradient)
        probes = self._probes(op, settings)

        def stochastic(theta, eval_gradient):
            try:
                out = log_marginal_likelihood(op, theta, Y[:, 0], probes, settings,
                                              eval_gradient)
            except torch.linalg.LinAlgError:
                return (-np.inf, np.zeros_like(theta)) if eval_gradient else -np.inf
            return out[:2] if eval_gradient else out[0]

        return stochastic

    @staticmethod
    def _check_length_scale(structure, n_features):
        n_ls = structure.n_length_scales
        if n_ls != 1 and n_ls != n_features:
            raise ValueError(f"kernel: the per-feature length_scale has {n_ls} entries but X has "
                             f"{n_features} features")

    # ----------------------------------------------------------------------------- API
    def fit(self, X, y):
        """Fit the Gaussian process: optimise the hyperparameters, then solve for ``alpha_``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,) or (n_samples, n_targets)
            2-D y: exact path only (n_samples <= ``exact_max_n``).

        Returns
        -------
        self : GaussianProcessRegressor
        """
        import torch

        from kernelkit.gp._exact import cholesky, exact_max_n
        from kernelkit.gp._lml import log_marginal_likelihood

        settings = self._check_params()
        kernel = ConstantKernel(1.0) * RBF(1.0) if self.kernel is None else self.kernel
        structure = parse_kernel(kernel)
        self.kernel_ = clone(kernel)
        X, y = validate_data(self, X, y, multi_output=True, y_numeric=True, dtype=np.float64,
                             reset=True)
        self._check_length_scale(structure, X.shape[1])
        n = X.shape[0]
        self._alpha = _check_alpha(self.alpha, n)
        self._exact = n <= exact_max_n(self.exact_max_n, self._torch_setup()[0])
        if not self._exact and (y.ndim == 2 or np.ndim(self._alpha)):
            raise ValueError(
                f"2-D y and per-sample alpha need the exact path: n_samples={n} > exact_max_n="
                f"{exact_max_n(self.exact_max_n, self._torch_setup()[0])}")
        if self.normalize_y:
            self._y_train_mean = np.mean(y, axis=0)
            std = np.std(y, axis=0)  # a (numerically) constant target is only centred
            self._y_train_std = np.where(std < 10 * np.finfo(np.float64).eps, 1.0, std)
        else:
            self._y_train_mean = np.zeros(y.shape[1:])
            self._y_train_std = np.ones(y.shape[1:])
        self.X_train_ = np.array(X, dtype=np.float64)
        self.y_train_ = (np.asarray(y, dtype=np.float64) - self._y_train_mean) / self._y_train_std
        rng = check_random_state(self.random_state)
        self._probe_seed = int(rng.randint(2**31 - 1))

        op = self._operator(structure)
        lml_at = self._lml_function(op, settings)

        def obj_func(theta, eval_gradient=True):
            if eval_gradient:
                lml, grad = lml_at(theta, True)
                return -lml, -grad
            return -lml_at(theta, False)

        if self.optimizer is not None and self.kernel_.n_dims > 0:
            bounds = self.kernel_.bounds
            runs = [self._optimize(obj_func, self.kernel_.theta, bounds)]
            if self.n_restarts_optimizer > 0:
                if not np.isfinite(bounds).all():
                    raise ValueError("n_restarts_optimizer > 0 needs finite hyperparameter bounds")
                for _ in range(self.n_restarts_optimizer):
                    start = rng.uniform(bounds[:, 0], bounds[:, 1])
                    runs.append(self._optimize(obj_func, start, bounds))
            best = min(range(len(runs)), key=lambda i: runs[i][1])
            self.kernel_.theta = runs[best][0]
        theta = self.kernel_.theta
        if self._exact:
            params = structure.params(torch.as_tensor(theta, device=op.device))
            L = cholesky(op, params, self._alpha_tensor(op))
            self.log_marginal_likelihood_value_ = lml_at(theta, False)
            self.L_ = L.cpu().numpy()
            alpha = torch.cholesky_solve(self._targets(op), L)
        else:
            lml, alpha = log_marginal_likelihood(op, theta, self._targets(op)[:, 0],
                                                 self._probes(op, settings), settings)
            self.log_marginal_likelihood_value_ = float(lml)
        self.alpha_ = alpha.to(torch.float64).cpu().numpy().reshape(self.y_train_.shape)
        return self

    def _optimize(self, obj_func, initial_theta, bounds):
        if callable(self.optimizer):
            return self.optimizer(obj_func, initial_theta, bounds=bounds)
        res = scipy.optimize.minimize(obj_func, initial_theta, method="L-BFGS-B", jac=True,
                                      bounds=bounds,
                                      options={"maxiter": self.optimizer_max_iter})
        if res.status != 0:
            warnings.warn(
                f"L-BFGS-B stopped without converging after {res.nit} iterations (status "
                f"{res.status}: {res.message}); the hyperparameters may not maximise the log "
                f"marginal likelihood. Raise optimizer_max_iter, or on the iterative path "
                f"n_probes / preconditioner_rank, or scale the data.",
                ConvergenceWarning, stacklevel=3)
        return res.x, res.fun

    def log_marginal_likelihood(self, theta=None, eval_gradient=False, clone_kernel=True):
        """The log marginal likelihood of the training data at ``theta`` (iterative path: its
        estimate, from the probe vectors drawn in ``fit``, so repeated calls agree).

        Parameters
        ----------
        theta : array-like of shape (n_kernel_params,), default=None
            Log-hyperparameters as ``kernel_.theta``; None returns
            ``log_marginal_likelihood_value_``.
        eval_gradient : bool, default=False
            Also return the gradient with respect to ``theta`` (exact path: exact; iterative
            path: the stochastic estimate).
        clone_kernel : bool, default=True
            Accepted for scikit-learn compatibility; ``kernel_`` is never modified here.

        Returns
        -------
        log_likelihood : float
        log_likelihood_gradient : ndarray of shape (n_kernel_params,)
            Only when ``eval_gradient`` is True.
        """
        if not hasattr(self, "X_train_"):  # the requires_fit=False tag turns check_is_fitted off
            raise NotFittedError("This GaussianProcessRegressor instance is not fitted yet; call "
                                 "'fit' before log_marginal_likelihood.")
        if theta is None:
            if eval_gradient:
                raise ValueError("Gradient can only be evaluated for theta!=None")
            return self.log_marginal_likelihood_value_
        theta = np.asarray(theta, dtype=np.float64)
        if theta.shape != self.kernel_.theta.shape:
            raise ValueError(f"theta must have shape {self.kernel_.theta.shape}; "
                             f"got {theta.shape}")
        settings = self._check_params()
        op = self._operator(parse_kernel(self.kernel_))
        return self._lml_function(op, settings)(theta, eval_gradient)

    def predict(self, X, return_std=False, return_cov=False):
        """Predictive mean, and optionally standard deviation or covariance, at ``X``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        return_std : bool, default=False
        return_cov : bool, default=False

        Returns
        -------
        y_mean : ndarray of shape (n_samples,) or (n_samples, n_targets)
        y_std : ndarray of shape (n_samples,) or (n_samples, n_targets)
            Only with ``return_std``. As scikit-learn, it includes the WhiteKernel noise.
        y_cov : ndarray of shape (n_samples, n_samples) or (n_samples, n_samples, n_targets)
            Only with ``return_cov``.

        Before ``fit``, the prior: mean 0, covariance ``kernel(X)`` (``kernel=None``: the default
        kernel at its initial hyperparameters), as scikit-learn.

        Raises
        ------
        RuntimeError
            When both ``return_std`` and ``return_cov`` are requested.
        """
        import torch

        if return_std and return_cov:
            raise RuntimeError("At most one of return_std or return_cov can be requested.")
        X = validate_data(self, X, dtype=np.float64, reset=False)
        if not hasattr(self, "X_train_"):
            return self._prior(X, return_std, return_cov)
        settings = self._check_params()
        structure = parse_kernel(self.kernel_)
        op = self._operator(structure)
        theta = torch.as_tensor(self.kernel_.theta, dtype=torch.float64, device=op.device)
        params = structure.params(theta)
        Z = op.centred(X)
        weights = torch.as_tensor(self.alpha_, dtype=torch.float64, device=op.device)
        weights = weights.reshape(op.n, -1).to(torch.float64 if self._exact else op.dtype)
        mean = op.cross_matmul(Z, weights, params).to(torch.float64).cpu().numpy()
        y_std = np.reshape(self._y_train_std, -1)  # (n_targets,), (1,) for 1-D y
        mean = self._drop_single_target(mean * y_std + np.reshape(self._y_train_mean, -1))
        if not (return_std or return_cov):
            return mean
        solve = self._exact_columns if self._exact else self._solve_test_columns
        solved = solve(op, params, Z, settings, keep=return_cov)
        scale2 = y_std**2
        if return_std:
            prior = float(params["outputscale"] + params["noise"])
            var = np.maximum(prior - solved, 0.0)  # round-off can make it slightly negative
            return mean, np.sqrt(self._drop_single_target(np.multiply.outer(var, scale2)))
        with torch.no_grad():
            K_zz = op.block(Z, Z, params, dtype=torch.float64).cpu().numpy()
        cov = K_zz + float(params["noise"]) * np.eye(len(X)) - solved
        return mean, self._drop_single_target(np.multiply.outer(cov, scale2))

    def _prior(self, X, return_std, return_cov):
        """Mean 0 and the kernel's covariance at X (one target), as scikit-learn before fit."""
        kernel = ConstantKernel(1.0) * RBF(1.0) if self.kernel is None else self.kernel
        parse_kernel(kernel)
        mean = np.zeros(X.shape[0])
        if return_cov:
            return mean, kernel(X)
        if return_std:
            return mean, np.sqrt(kernel.diag(X))
        return mean

    @staticmethod
    def _drop_single_target(values):
        """Drop the trailing target axis when there is one target (as scikit-learn)."""
        return values[..., 0] if values.shape[-1] == 1 else values

    def _exact_columns(self, op, params, Z, settings, keep):
        """diag (keep=False) or all (keep=True) of K(X*, X) K^{-1} K(X, X*), from ``L_``."""
        import torch

        from kernelkit.gp._exact import reduced

        with torch.no_grad():
            L = torch.as_tensor(self.L_, device=op.device)
            if keep:
                V = reduced(op, params, L, Z)
                return (V.T @ V).cpu().numpy()
            batch = max(1, VARIANCE_BATCH_ELEMENTS // op.n)
            parts = [reduced(op, params, L, Z[lo:lo + batch]).square().sum(0)
                     for lo in range(0, Z.shape[0], batch)]
            return torch.cat(parts).cpu().numpy()

    def _solve_test_columns(self, op, params, Z, settings, keep):
        """diag (keep=False) or all (keep=True) of K(X*, X) K^{-1} K(X, X*), by batched CG."""
        import torch

        from kernelkit.gp._lml import preconditioner, solve

        with torch.no_grad():
            pre = preconditioner(op, params, settings.preconditioner_rank)
            m = Z.shape[0]
            batch = max(1, min(m, VARIANCE_BATCH_ELEMENTS // op.n))
            K_all = op.cross_block_T(Z, params).to(torch.float64) if keep else None
            parts = []
            for lo in range(0, m, batch):
                K_xz = op.cross_block_T(Z[lo:lo + batch], params)
                V = solve(op, params, K_xz, pre, settings, "predict").x
                K64 = K_xz.to(torch.float64)
                parts.append(K_all.T @ V if keep else (K64 * V).sum(0))
            if keep:
                full = torch.cat(parts, dim=1)
                return (0.5 * (full + full.T)).cpu().numpy()
            return torch.cat(parts).cpu().numpy()

    def sample_y(self, X, n_samples=1, random_state=0):
        """Draw functions from the posterior Gaussian process, evaluated at ``X``.

        Each draw is ``numpy.random.RandomState.multivariate_normal`` of the predictive mean and
        covariance (``predict(X, return_cov=True)``), per target, as scikit-learn.

        Parameters
        ----------
        X : array-like of shape (n_samples_X, n_features)
        n_samples : int, default=1
            Draws per query point.
        random_state : int, RandomState instance or None, default=0

        Returns
        -------
        y_samples : ndarray of shape (n_samples_X, n_samples) or (n_samples_X, n_targets, n_samples)
        """
        n_samples = _check_int("n_samples", n_samples, 1)
        rng = check_random_state(random_state)
        mean, cov = self.predict(X, return_cov=True)
        if mean.ndim == 1:
            return rng.multivariate_normal(mean, cov, n_samples).T
        return np.stack([rng.multivariate_normal(mean[:, k], cov[..., k], n_samples).T
                         for k in range(mean.shape[1])], axis=1)
