"""scikit-learn's ``GaussianProcessRegressor`` interface (:class:`GaussianProcessRegressor`). The
numbers are computed beside it: the exact path in :mod:`._exact`, the iterative path's log
marginal likelihood in :mod:`._lml`, the optimiser in :mod:`._optimizer`, the predictive
variances in :mod:`._variance`, the device set-up in :mod:`._device`, the checks in :mod:`._checks`.

Importing this module loads NumPy, SciPy and scikit-learn only; torch loads on the first ``fit``.
"""

from __future__ import annotations

import functools

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.gaussian_process.kernels import ConstantKernel
from sklearn.utils import check_random_state

from kernelkit import distributed
from kernelkit.estimators.gp._checks import check_int, fit_inputs, lml_inputs, predict_inputs
from kernelkit.kernels import RBF
from kernelkit.operators.kernel_tree import parse_kernel

__all__ = ["GaussianProcessRegressor"]


class GaussianProcessRegressor(RegressorMixin, BaseEstimator):
    r"""Gaussian-process regression: exact for small n, with likelihood and gradients that
    scale to large n.

    scikit-learn's :class:`sklearn.gaussian_process.GaussianProcessRegressor` interface for any
    kernel of scikit-learn's kernel algebra (``Sum``, ``Product``, ``Exponentiation``,
    ``ConstantKernel`` and ``WhiteKernel`` anywhere, ``DotProduct``) over the positive
    semi-definite kernels of the kernelkit registry, as kernelkit's classes or scikit-learn's
    classes of the same kernels (``RBF``, ``Matern`` with nu in {0.5, 1.5, 2.5},
    ``RationalQuadratic``, ``ExpSineSquared`` on one feature);
    :mod:`kernelkit.operators.kernel_tree` lists them:

    .. math::

        \log p(y) = -\tfrac12 y^\top K^{-1} y - \tfrac12 \log\det K - \tfrac n2 \log 2\pi,
        \qquad K = k_\theta(X, X) + \text{alpha}\, I

    **Exact path** (n <= ``exact_max_n``): a float64 Cholesky factor of K on the fit device gives
    the log marginal likelihood, its exact gradient, ``alpha_``, ``L_`` and the predictions, as
    scikit-learn computes them (agreement to float64 round-off of the kernel values).
    Per-sample ``alpha`` is supported here only.

    **Iterative path** (n > ``exact_max_n``): preconditioned conjugate gradients and stochastic
    trace estimation (BBMM, Gardner et al. 2018; :mod:`kernelkit.estimators.gp._lml`), O(n)
    memory besides a chunk of kernel rows. ``y^T K^{-1} y`` and the predictive mean are exact to
    ``cg_tol``; ``log det K`` and the gradient are unbiased estimates from ``n_probes`` probe
    vectors drawn once per fit from ``random_state`` (a deterministic objective in theta). The
    gradient estimates the exact gradient, not the estimate's derivative (~10% apart at
    ``preconditioner_rank`` << n), so L-BFGS-B's line search can stop early (with a warning).

    Differences from scikit-learn: the kernels above only (others raise TypeError);
    ``optimizer_max_iter`` bounds each L-BFGS-B run (scikit-learn: 15000); negative predicted
    variances (round-off) become 0; the iterative path refuses per-sample ``alpha`` and noise
    that varies over points (``DotProduct() * WhiteKernel()``). scikit-learn's ``test_gpr.py``
    passes but for a kernel outside the registry (``benchmarks/sklearn_gpr_suite.py``).

    Parameters
    ----------
    kernel : kernel object, default=None
        ``None`` means ``ConstantKernel(1.0) * kernelkit.RBF(1.0)`` with both hyperparameters
        optimised, as scikit-learn's ``C() * RBF()``. Hyperparameters with
        ``*_bounds="fixed"`` are not optimised.
    alpha : float or ndarray of shape (n_samples,), default=1e-10
        Added to the diagonal of K, as scikit-learn's (an array: exact path only). The iterative
        path's CG needs K conditioned: a WhiteKernel or alpha >= ~1e-6 x the signal variance.
    optimizer : "fmin_l_bfgs_b", callable or None, default="fmin_l_bfgs_b"
        As scikit-learn: a callable is called as ``optimizer(obj_func, initial_theta, bounds)``
        and returns ``(theta_opt, func_min)``; None keeps the kernel's hyperparameters. An
        L-BFGS-B run that stops without converging warns (ConvergenceWarning), as scikit-learn.
    n_restarts_optimizer : int, default=0
        Extra optimiser runs from log-uniform draws within the bounds (finite bounds needed).
    normalize_y : bool, default=False
        Centre and scale each column of y before fitting, as scikit-learn.
    copy_X_train : bool, default=True
        As scikit-learn: False stores a reference to the (validated) training inputs.
    n_targets : int or None, default=None
        As scikit-learn: the number of targets of the prior (``predict`` and ``sample_y`` before
        ``fit``); ``fit`` checks y against it.
    random_state : int, RandomState instance or None, default=None
        Draws the probe vectors and the restart points.
    device : {"auto", "cpu", "cuda"}, default="auto"
        Where the kernel products and the Cholesky factorisation run; "auto" is the GPU when one
        is present.
    dtype : {"auto", "float32", "float64"}, default="auto"
        Iterative path: dtype of the kernel products in CG. "auto" is float64 (on the GPU the
        gradient's fused contractions in float32 with float64 sums); float32 products cost less
        but bias the log-determinant estimate (hundreds of nats at large n) and take more CG
        steps. Everything else is float64 (:mod:`kernelkit.operators.covariance`).
    exact_max_n : int or None, default=None
        Largest n for the exact path; None means
        :data:`kernelkit.estimators.gp._exact.EXACT_MAX_N` (10 000 on the CPU and on a GPU); 0
        always takes the iterative path.
    n_probes : int, default=15
        Iterative path: probe vectors for the log-determinant and trace estimates. They share
        every K @ V product with y, so the default makes 16 columns, one tensor-core tile.
    max_cg_iter : int, default=1000
        Iterative path: most CG iterations per solve (a ConvergenceWarning says when too few).
    cg_tol : float, default=1e-3
        Iterative path: relative residual ||K x - b|| / ||b|| at which CG stops; enough for
        fitting; 1e-6 or less (float64 products) for reference accuracy.
    preconditioner_rank : int or "auto", default="auto"
        Iterative path: landmarks of the Nyström preconditioner, drawn uniformly once per fit
        (0: none). "auto" starts at min(n, max(1024, 2 sqrt(n)), 2**28 // n; on a GPU what 90%
        of its free memory holds) and, while optimising, takes the rank that the costs measured
        at the first evaluation say is cheapest (:mod:`kernelkit.estimators.gp._rank`).
    optimizer_max_iter : int, default=100
        Most L-BFGS-B iterations per optimiser run. The iterative path also stops when an
        iteration gains less than the standard error of that gain (the same probes at every
        theta), or after 5 evaluations in a row without such a gain, keeping the best point;
        each trial point's CG is budgeted (:mod:`kernelkit.estimators.gp._optimizer`).
    pretrain_size : int, "auto" or None, default="auto"
        Below n: the hyperparameters are first fitted on this many points drawn uniformly (the
        same settings), and the full-data optimiser starts from that optimum, without restarts
        (far from the optimum CG takes many more steps). "auto" is n // 8 from n = 131 072 on;
        None never pretrains.
    verbose : int or bool, default=0
        0: silent. 1: a status line per phase on stderr (rank 0 only): evaluations, best log
        marginal likelihood, the last gain against the standard error it stops below, CG steps
        and seconds. 2: also a line per evaluation on stdout. INFO :mod:`logging` records per
        evaluation are emitted whatever ``verbose`` (:mod:`kernelkit.estimators.gp._progress`).

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
        In ``fit``: an unsupported kernel (named, with what is supported), a parameter's type.
    ValueError
        In ``fit``: a parameter out of range, data that scikit-learn's validation rejects, y
        whose number of targets differs from ``n_targets``, or with n > ``exact_max_n``
        per-sample alpha or noise that varies over points (``DotProduct() * WhiteKernel()``).

    Notes
    -----
    Iterative path: predictive variances come from a cache built at the end of ``fit`` (after
    unpickling, at the first variance request) and certified point by point, or else by CG:
    each is within ``cg_tol`` times its prior variance of the exact one
    (:mod:`kernelkit.estimators.gp._variance`).

    Under a ``torch.distributed`` process group of several ranks every rank calls ``fit(X, y)``
    with the whole data and gets the same fitted attributes: the iterative path shards the rows
    of every K @ V and gradient kernel term; the exact path keeps rank 0's (docs/distributed.md).

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
                 n_restarts_optimizer=0, normalize_y=False, copy_X_train=True, n_targets=None,
                 random_state=None, device="auto", dtype="auto", exact_max_n=None, n_probes=15,
                 max_cg_iter=1000, cg_tol=1e-3, preconditioner_rank="auto",
                 optimizer_max_iter=100, pretrain_size="auto", verbose=0):
        self.kernel = kernel
        self.alpha = alpha
        self.optimizer = optimizer
        self.n_restarts_optimizer = n_restarts_optimizer
        self.normalize_y = normalize_y
        self.copy_X_train = copy_X_train
        self.n_targets = n_targets
        self.random_state = random_state
        self.device = device
        self.dtype = dtype
        self.exact_max_n = exact_max_n
        self.n_probes = n_probes
        self.max_cg_iter = max_cg_iter
        self.cg_tol = cg_tol
        self.preconditioner_rank = preconditioner_rank
        self.optimizer_max_iter = optimizer_max_iter
        self.pretrain_size = pretrain_size
        self.verbose = verbose

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        tags.requires_fit = False  # predict and sample_y use the prior before fit
        return tags

    def __getstate__(self):
        """scikit-learn's state without the device caches (loads where the fit's device is not)."""
        state = dict(super().__getstate__())  # a copy: this estimator keeps its caches
        state.pop("_device_data", None)
        if "_variance_cache" in state:
            state["_variance_cache"] = None
        return state

    def _operator(self, structure):
        """The covariance operator of X_train_
        (:func:`kernelkit.estimators.gp._device.covariance_operator`), on the device copy of
        X_train_ kept from the fit's first operator."""
        from kernelkit.estimators.gp._device import covariance_operator

        op, self._device_data = covariance_operator(
            self.X_train_, structure, 0.0 if self._exact else self._alpha, self.device,
            self.dtype, iterative=not self._exact, held=getattr(self, "_device_data", None))
        return op

    def _probes(self, op, settings):
        """The fit's draws (:func:`~kernelkit.estimators.gp._lml.make_probes`) at its ranks."""
        from kernelkit.estimators.gp._lml import make_probes

        rank, eigen_rank = self._ranks(op, settings)
        return make_probes(op.n, rank, settings.n_probes, self._probe_seed, op.device,
                           eigen_rank=eigen_rank)

    def _ranks(self, op, settings):
        """The fit's preconditioner ranks (:func:`~kernelkit.estimators.gp._lml.fit_ranks`), set
        once per fit ("auto" reads the free memory, then adapts: :mod:`._rank`)."""
        from kernelkit.estimators.gp._lml import fit_ranks

        key = (settings.preconditioner_rank, op.n, str(op.device))
        if getattr(self, "_rank", None) is None or self._rank[0] != key:
            self._rank = (key, *fit_ranks(settings.preconditioner_rank, op.n, op.device))
        return self._rank[1:]

    def _targets(self, op):
        """y_train_ as an (n, t) float64 tensor on the operator's device."""
        import torch

        Y = torch.as_tensor(self.y_train_, dtype=torch.float64, device=op.device)
        return Y.reshape(op.n, -1)

    def _lml_function(self, op, settings, report=None):
        """theta, eval_gradient -> lml or (lml, grad) on this fit's path: the exact value, or
        the estimate (:class:`~kernelkit.estimators.gp._optimizer.StochasticObjective`; with
        the fit's ``report``, L-BFGS-B's objective, whose "auto" rank adapts)."""
        import torch

        from kernelkit.estimators.gp._exact import exact_lml
        from kernelkit.estimators.gp._optimizer import StochasticObjective
        from kernelkit.estimators.gp._rank import RankAdapter

        Y = self._targets(op)
        if self._exact:
            alpha = torch.as_tensor(self._alpha, dtype=torch.float64, device=op.device)
            return lambda theta, eval_gradient: exact_lml(op, theta, Y, alpha, eval_gradient)
        adapt = (RankAdapter(op, settings.n_probes, self._probe_seed, report)
                 if report is not None and settings.preconditioner_rank == "auto" else None)
        return StochasticObjective(op, Y, self._probes(op, settings), settings,
                                   report is not None, adapt)

    def _cache(self, op, params, settings):
        """The predictive-variance cache of this fit (built at the end of ``fit``; after
        unpickling, here at the first variance request), or None when K has no positive lower
        bound on its eigenvalues (no noise, no alpha)."""
        from kernelkit.estimators.gp._variance import build_cache, lower_bound

        if lower_bound(op, params) <= 0:
            return None
        if getattr(self, "_variance_cache", None) is None:
            self._variance_cache = build_cache(op, params, settings.preconditioner_rank,
                                               self._probe_seed)
        return self._variance_cache

    def fit(self, X, y):
        """Fit the Gaussian process: optimise the hyperparameters, then solve for ``alpha_``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,) or (n_samples, n_targets)
            On the iterative path, one log-likelihood estimate per target (the same probes),
            summed.

        Returns
        -------
        self : GaussianProcessRegressor
        """
        return self._fit(X, y, variance_cache=True)

    def _fit(self, X, y, variance_cache, phase="fit"):
        """:meth:`fit`; ``variance_cache``: on the iterative path, also build the predictive
        variance cache (not for a pretraining subset, whose fit only gives a start); ``phase``:
        its name in the records and display (:mod:`kernelkit.estimators.gp._progress`)."""
        import torch

        from kernelkit.estimators.gp import _optimizer, _progress, _sharded
        from kernelkit.estimators.gp._exact import exact_fit
        from kernelkit.estimators.gp._lml import solve_targets

        # under a process group: checked on every rank, errors shared (kernelkit.distributed)
        settings, X, y, self.kernel_, structure, self._alpha, self._exact = distributed.checked(
            "GaussianProcessRegressor.fit", self, functools.partial(fit_inputs, self), X=X, y=y)
        if self.normalize_y:
            self._y_train_mean = np.mean(y, axis=0)
            std = np.std(y, axis=0)  # a (numerically) constant target is only centred
            self._y_train_std = np.where(std < 10 * np.finfo(np.float64).eps, 1.0, std)
        else:
            self._y_train_mean = np.zeros(y.shape[1:])
            self._y_train_std = np.ones(y.shape[1:])
        self.X_train_ = np.copy(X) if self.copy_X_train else X
        self.y_train_ = (np.asarray(y, dtype=np.float64) - self._y_train_mean) / self._y_train_std
        # the previous fit's predictive-variance cache, device data and preconditioner rank
        self._variance_cache = self._device_data = self._rank = None
        rng = check_random_state(self.random_state)
        # under a process group rank 0's draw (random_state=None differs between ranks)
        self._probe_seed = int(_sharded.from_rank0([rng.randint(2**31 - 1)])[0])

        optimizing = self.optimizer is not None and self.kernel_.n_dims > 0
        with _progress.FitReport(self.verbose, phase) as report:
            # before this fit's operator: its "auto" rank then sees the memory the subset freed
            start = (_optimizer.pretrained_theta(self, X, self.y_train_, self._alpha,
                                                 self._probe_seed) if optimizing else None)
            op = self._operator(structure)
            report.start(self.kernel_, *X.shape, self._exact, op.device, op.dtype,
                         None if self._exact else self._ranks(op, settings)[0],
                         _optimizer.pretrain_rows(self.pretrain_size, len(X)) if optimizing else 0)
            if optimizing:
                objective = self._lml_function(op, settings, report)
                if not self._exact:  # compilation and library set-up, apart from evaluations
                    report.warm_up(objective.warm_up(self.kernel_.theta))
                self.kernel_.theta = _optimizer.optimize_theta(
                    objective, self.kernel_.theta, self.kernel_.bounds, rng,
                    optimizer=self.optimizer, max_iter=self.optimizer_max_iter,
                    n_restarts=self.n_restarts_optimizer, start=start,
                    estimate=None if self._exact else objective, report=report)
                self.kernel_._check_bounds_params()  # scikit-learn's warning near a bound
                if not self._exact:  # "auto" may have adapted it at the first evaluation
                    self._rank = (self._rank[0], *objective.ranks)
            Y, theta = self._targets(op), self.kernel_.theta
            if self._exact:
                alpha = torch.as_tensor(self._alpha, dtype=torch.float64, device=op.device)
                lml, alpha, L = exact_fit(op, theta, Y, alpha, self.kernel_)
                self.L_ = L.cpu().numpy()
            else:
                lml, alpha = solve_targets(op, theta, Y, self._probes(op, settings), settings)
            self.log_marginal_likelihood_value_ = np.float64(lml)
            self.alpha_ = alpha.to(torch.float64).cpu().numpy().reshape(self.y_train_.shape)
            if distributed.active():  # rows sharded over a process group
                _sharded.share_fit(self)
            if not self._exact and variance_cache:  # predictions then take no solve
                theta = torch.as_tensor(self.kernel_.theta, dtype=torch.float64, device=op.device)
                self._cache(op, op.structure.params(theta), settings)
            report.end(float(self.log_marginal_likelihood_value_))
        return self

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
            False sets ``kernel_.theta`` to ``theta``, as scikit-learn.

        Returns
        -------
        log_likelihood : float
        log_likelihood_gradient : ndarray of shape (n_kernel_params,)
            Only when ``eval_gradient`` is True.
        """
        # under a process group: checked on every rank, errors shared (kernelkit.distributed)
        theta, settings = distributed.checked(
            "GaussianProcessRegressor.log_marginal_likelihood", self,
            functools.partial(lml_inputs, self), theta=theta, eval_gradient=eval_gradient,
            clone_kernel=clone_kernel)
        if theta is None:
            return self.log_marginal_likelihood_value_
        op = self._operator(parse_kernel(self.kernel_, self.n_features_in_))
        if not clone_kernel:  # as scikit-learn: kernel_ takes theta
            self.kernel_.theta = theta
        out = self._lml_function(op, settings)(theta, eval_gradient)
        return (np.float64(out[0]), out[1]) if eval_gradient else np.float64(out)

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

        Before ``fit``, the prior (mean 0, covariance ``kernel(X)``), as scikit-learn.

        Raises
        ------
        RuntimeError
            When both ``return_std`` and ``return_cov`` are requested.
        """
        import torch

        from kernelkit.estimators.gp import _variance

        # under a process group: checked on every rank, errors shared (kernelkit.distributed)
        X, settings = distributed.checked(
            "GaussianProcessRegressor.predict", self, functools.partial(predict_inputs, self), X=X,
            return_std=return_std, return_cov=return_cov)
        if settings is None:  # not fitted
            return self._prior(X, return_std, return_cov)
        op = self._operator(parse_kernel(self.kernel_, self.n_features_in_))
        theta = torch.as_tensor(self.kernel_.theta, dtype=torch.float64, device=op.device)
        params = op.structure.params(theta)
        Z = op.centred(X)
        weights = torch.as_tensor(self.alpha_, dtype=torch.float64, device=op.device)
        weights = weights.reshape(op.n, -1).to(torch.float64 if self._exact else op.dtype)
        mean = op.cross_matmul(Z, weights, params).to(torch.float64).cpu().numpy()
        y_std = np.reshape(self._y_train_std, -1)  # (n_targets,), (1,) for 1-D y
        mean = self._drop_single_target(mean * y_std + np.reshape(self._y_train_mean, -1))
        if not (return_std or return_cov):
            return mean
        L = torch.as_tensor(self.L_, device=op.device) if self._exact else None
        cache = None if self._exact else self._cache(op, params, settings)
        var = _variance.predictive(op, params, Z, settings, return_cov, L, cache,
                                   lambda: self._probes(op, settings))
        var = self._drop_single_target(np.multiply.outer(var, y_std**2))
        return mean, var if return_cov else np.sqrt(var)

    def _prior(self, X, return_std, return_cov):
        """Mean 0 and the kernel's covariance at X (``n_targets`` copies), as scikit-learn's."""
        kernel = ConstantKernel(1.0, "fixed") * RBF(1.0, "fixed") if self.kernel is None \
            else self.kernel
        parse_kernel(kernel, X.shape[1])
        n_targets = 1 if self.n_targets is None else check_int("n_targets", self.n_targets, 1)
        mean = self._drop_single_target(np.zeros((X.shape[0], n_targets)))
        if not (return_std or return_cov):
            return mean
        values = kernel(X) if return_cov else np.sqrt(kernel.diag(X))
        return mean, self._drop_single_target(np.repeat(values[..., None], n_targets, axis=-1))

    @staticmethod
    def _drop_single_target(values):
        """Drop the trailing target axis when there is one target (as scikit-learn)."""
        return values[..., 0] if values.shape[-1] == 1 else values

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
        # checked on every rank of a process group (X by predict; kernelkit.distributed)
        n_samples, rng = distributed.checked(
            "GaussianProcessRegressor.sample_y", self,
            lambda n_samples, random_state: (check_int("n_samples", n_samples, 1),
                                             check_random_state(random_state)),
            n_samples=n_samples, random_state=random_state)
        mean, cov = self.predict(X, return_cov=True)

        def draw():
            if mean.ndim == 1:
                return rng.multivariate_normal(mean, cov, n_samples).T
            return np.stack([rng.multivariate_normal(mean[:, k], cov[..., k], n_samples).T
                             for k in range(mean.shape[1])], axis=1)

        # under a process group rank 0's draws (random_state=None differs between ranks)
        return distributed.rank0_decision(draw)
