"""The hyperparameter optimiser of :class:`~kernelkit.GaussianProcessRegressor`.

- :func:`optimize_theta`: the best of L-BFGS-B runs (or of the caller's optimiser) from the
  kernel's hyperparameters, a pretrained start or random restarts;
- :func:`optimize` and :func:`lbfgs`: one run; on the iterative path with stopping rules for a
  noisy objective (the standard error of a gain);
- :class:`StochasticObjective`: the iterative path's objective, the log marginal likelihood
  estimate summed over the targets, which steps back from estimates it cannot trust;
- :func:`pretrained_theta`: the optimum of the same fit on a uniform subset of the rows.

Importing this module loads NumPy, SciPy, scikit-learn and threadpoolctl (a scikit-learn
dependency) only; torch loads with the first objective.
"""

from __future__ import annotations

import dataclasses
import math
import time
import warnings

import numpy as np
import scipy.optimize
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning
from threadpoolctl import threadpool_limits

from kernelkit import distributed

__all__ = ["CG_BUDGET_FACTOR", "CG_BUDGET_MIN_STEPS", "LINE_SEARCH_RESTARTS", "PRETRAIN_DIVISOR",
           "PRETRAIN_MIN_SIZE", "PRETRAINED_STEP", "STALL_EVALUATIONS", "StochasticObjective",
           "WARM_UP_RANK",
           "lbfgs", "optimize", "optimize_theta", "pretrain_rows", "pretrained_theta",
           "standard_error"]

#: ``pretrain_size="auto"``: the optimiser first runs on n // PRETRAIN_DIVISOR training points
#: when that is at least PRETRAIN_MIN_SIZE (n >= 131 072). At n = 1e6 (d = 8, ARD RBF + noise,
#: GPU) one evaluation at the kernel's initial hyperparameters took 124 CG steps (489 s), one
#: near the fitted ones 10 (70 s): far from the optimum the kernel is rougher than the
#: preconditioner's landmarks can follow.
PRETRAIN_DIVISOR = 8
PRETRAIN_MIN_SIZE = 2**14
#: The full-data run's first trial step from a pretrained start (2-norm in theta; L-BFGS-B's own
#: is the whole gradient within finite bounds: far from the start, where one evaluation can cost
#: hundreds of CG steps at large n; 136 at n = 125 000). n = 1e6 (GPU, two default fits): a
#: first trial of 0.1 lost 1025 and 1605 nats, and the line searches accepted points at 0.0078
#: (+10 nats) and 0.0052 (+13; the next iterate at 0.025, +41) after two more evaluations.
PRETRAINED_STEP = 0.01
#: Iterative path: L-BFGS-B stops after this many evaluations in a row that do not beat the best
#: value by the standard error of the gain (StochasticObjective.gain_spread).
STALL_EVALUATIONS = 5
#: Iterative path: where L-BFGS-B's line search fails (its answer is then the start of that
#: search) after a better point was evaluated, it starts again from the best point, at most
#: this many times (a noisy estimate makes line searches fail; the best point is never lost).
LINE_SEARCH_RESTARTS = 3
#: Iterative path, while optimising: a trial point's CG gets at most CG_BUDGET_FACTOR times the
#: steps of the run's best evaluation so far, where the optimiser stands (at least
#: CG_BUDGET_MIN_STEPS, at most max_cg_iter), so that no evaluation costs more than a few
#: typical ones (an evaluation is a preconditioner, one CG solve and one gradient pass; the
#: steps are what varies). On a ridge-function data set at n = 1e5 a trial point's solve ran
#: > 380 s after 14 evaluations of 5-6 s. A trial point whose budgeted solve ends above
#: sqrt(cg_tol) is stepped back from, as any untrusted estimate is. (A median over the run
#: failed: L-BFGS-B's first trial points sit on the bounds, where noise 1e5 takes 1 step, and
#: the budget of 10 rejected every point between them and the start at n = 1e5.)
CG_BUDGET_FACTOR = 4
CG_BUDGET_MIN_STEPS = 10
#: Landmarks of the warm-up evaluation (:meth:`StochasticObjective.warm_up`).
WARM_UP_RANK = 32


class _Stalled(Exception):
    """Raised through L-BFGS-B to stop it (the iterative path's stall rule)."""


class StochasticObjective:
    """``objective(theta, eval_gradient)`` -> lml or (lml, grad): the iterative path's estimate
    (:func:`kernelkit.estimators.gp._lml.log_marginal_likelihood`), one per target column (the
    same probes), summed as scikit-learn sums.

    ``optimizing``: the objective of L-BFGS-B, which never warns. Where CG stops above
    sqrt(``cg_tol``), less than half the digits asked for (a trial point with far too little
    noise for float32 products: at n = 1e5 a line search probed noise 1e-4, where the estimate
    came out 3e5 nats above the optimum), the estimate is not trusted: the value is the best
    one so far minus max(1, |best|), with a zero gradient, so the line search steps back (an
    infinite value would end L-BFGS-B at once). A solve that stalls nearer ``cg_tol`` (float32
    products near the optimum at n = 1e5 stalled at 1e-2) is used as it is. A rejection before
    any trusted value warns. Once a value is trusted, each solve of an ``optimizing`` objective
    stops after :meth:`cg_budget` steps.

    Parameters
    ----------
    op : CovarianceOperator
    Y : torch.Tensor of shape (n, t), float64
    probes : Draws
        The fit's draws (:func:`kernelkit.estimators.gp._lml.make_probes`).
    settings : SolverSettings
    optimizing : bool, default=False
    adapt_rank : callable, optional
        ``adapt_rank(theta, probes, steps)`` -> new draws or None, called once, after the first
        trusted evaluation (:class:`kernelkit.estimators.gp._rank.RankAdapter`); with new draws
        that evaluation is repeated on them, and the values before are forgotten.

    Attributes
    ----------
    spread : float
        The standard error of the last trusted estimate (the probes' spread, summed in
        quadrature over the targets).
    gain_spread : float
        The standard error of the last trusted estimate's difference from the best estimate
        before it (the spread of the per-probe differences; ``spread`` where there is no best
        yet): the stopping rules of :func:`optimize` read it. The probes are the same at every
        theta (common random numbers), so a difference is far more precise than either
        estimate: ``spread`` in its place stopped a fit 18 nats below the optimum (heavy-tailed
        data, n = 200, rank 28), each step gaining 0.7 nats against a standard error of 0.75.
    best_steps : int or None
        CG steps (the most over the target columns) of the current run's best trusted
        evaluation; None before one (:meth:`start_run`: a restart's start gets
        ``max_cg_iter``).
    last_cg_steps : int
        The CG steps of the last evaluation, summed over the targets (the fit's records,
        :mod:`kernelkit.estimators.gp._progress`).
    """

    def __init__(self, op, Y, probes, settings, optimizing=False, adapt_rank=None):
        self.op, self.Y, self.probes, self.settings = op, Y, probes, settings
        self.optimizing, self._adapt_rank = optimizing, adapt_rank
        self.spread = self.gain_spread = 0.0
        self.best_steps, self._run_best = None, -np.inf
        self.last_cg_steps = 0
        self._best, self._best_terms = -np.inf, None

    @property
    def ranks(self):
        """``(rank, eigen_rank)`` of the draws now used (:class:`~kernelkit.estimators.gp._lml.
        Draws`)."""
        eigen = self.probes.eigen_landmarks
        rank = int(self.probes.landmarks.numel())
        return rank, rank if eigen is None else int(eigen.numel())

    def warm_up(self, theta):
        """The seconds of one evaluation at ``theta`` cut to one CG step on
        :data:`WARM_UP_RANK` landmarks, its result dropped: it compiles the GPU kernels and
        initialises the libraries that every evaluation uses, a one-time cost that would
        otherwise fall on the first evaluation (n = 2e4 on a GPU: 1-6 s, against a median
        evaluation of 25-66 ms, for 1-35 CG steps)."""
        import torch

        from kernelkit.estimators.gp._lml import log_marginal_likelihood, make_probes

        begin = time.perf_counter()
        settings = dataclasses.replace(self.settings, max_cg_iter=1)
        rank = min(WARM_UP_RANK, int(self.probes.landmarks.numel()))
        probes = make_probes(self.op.n, rank, settings.n_probes, 0, self.op.device)
        try:
            log_marginal_likelihood(self.op, theta, self.Y[:, 0], probes, settings, True,
                                    warn=False)
        except torch.linalg.LinAlgError:  # the evaluation itself will say
            pass
        if self.op.device.type == "cuda":
            torch.cuda.synchronize(self.op.device)
        return time.perf_counter() - begin

    def start_run(self):
        """Forget the last run's spreads and CG steps: an optimiser run starts."""
        self.spread = self.gain_spread = 0.0
        self.best_steps, self._run_best = None, -np.inf

    def cg_budget(self):
        """The most CG steps the next evaluation's solves may take: ``max_cg_iter``, or while
        optimising once a value is trusted, :data:`CG_BUDGET_FACTOR` times ``best_steps`` (at
        least :data:`CG_BUDGET_MIN_STEPS`; rank 0's under a process group, so that every rank
        stops at the same step)."""
        from kernelkit.estimators.gp import _sharded

        cap = self.settings.max_cg_iter
        if not self.optimizing or self.best_steps is None:
            return cap
        budget = max(CG_BUDGET_MIN_STEPS, CG_BUDGET_FACTOR * self.best_steps)
        return int(_sharded.from_rank0([min(cap, budget)])[0])

    def __call__(self, theta, eval_gradient):
        import torch

        from kernelkit.estimators.gp._lml import (estimate_residual, log_marginal_likelihood,
                                                  warn_unconverged)

        best = self._best
        settings = dataclasses.replace(self.settings, max_cg_iter=self.cg_budget())
        lml, grad, variance, failed, steps = 0.0, np.zeros(len(theta)), 0.0, None, 0
        terms, gain_variance = [], 0.0
        have_best = self.optimizing and np.isfinite(best)  # a trusted value to step back from
        self.last_cg_steps = 0
        try:
            for k in range(self.Y.shape[1]):
                info = {}
                out = log_marginal_likelihood(self.op, theta, self.Y[:, k], self.probes, settings,
                                              eval_gradient, info, warn=not self.optimizing)
                lml += out[0]
                self.last_cg_steps += info["cg"].n_iter
                terms.append(info["slq_terms"])
                variance += info["spread"] ** 2
                gain_variance += self._difference_spread(k, info) ** 2
                steps = max(steps, info["cg"].n_iter)
                if eval_gradient:
                    grad += out[1]
                if estimate_residual(info["cg"]) > math.sqrt(settings.cg_tol):
                    failed = info["cg"]
        except torch.linalg.LinAlgError:  # the preconditioner's factorisation
            return _rejected(theta, eval_gradient,
                             best - max(1.0, abs(best)) if have_best else -np.inf)
        if self.optimizing and failed is not None:
            if have_best:
                return _rejected(theta, eval_gradient, best - max(1.0, abs(best)))
            warn_unconverged("log_marginal_likelihood", failed, settings, stacklevel=4)
        if self._adapt_rank is not None:
            adapt, self._adapt_rank = self._adapt_rank, None
            probes = adapt(theta, self.probes, steps)
            if probes is not None:  # the evaluation again on the new rank's draws
                self.probes = probes
                return self(theta, eval_gradient)
        if lml > best:
            self._best, self._best_terms = lml, terms
        self.spread, self.gain_spread = float(np.sqrt(variance)), float(np.sqrt(gain_variance))
        if lml > self._run_best:
            self.best_steps, self._run_best = steps, lml
        return (lml, grad) if eval_gradient else lml

    def _difference_spread(self, k, info):
        """The standard error of target ``k``'s estimate (``info``: its
        :func:`~kernelkit.estimators.gp._lml.log_marginal_likelihood` info) minus the best
        estimate's, from the per-probe differences of their log-determinant terms; the
        estimate's own standard error before a best one."""
        if self._best_terms is None:
            return info["spread"]
        difference = info["slq_terms"] - self._best_terms[k]
        t = difference.size
        return 0.5 * float(np.std(difference, ddof=1)) / math.sqrt(t) if t > 1 else 0.0


def _rejected(theta, eval_gradient, value):
    """The objective's answer for an estimate it does not trust: ``value``, a zero gradient."""
    return (value, np.zeros_like(theta)) if eval_gradient else value


def optimize_theta(lml_at, initial_theta, bounds, rng, *, optimizer, max_iter, n_restarts,
                   start=None, estimate=None, report=None):
    """The best theta of the optimiser's runs on ``lml_at(theta, eval_gradient)`` -> lml or
    (lml, grad), maximised (rank 0's value under a process group): one run from ``start`` (a
    pretrained optimum: L-BFGS-B's first trial step is then :data:`PRETRAINED_STEP`, and there
    are no restarts) or from ``initial_theta``, and ``n_restarts`` more from uniform draws of
    ``rng`` within ``bounds`` (rank 0's under a process group). ``report``: a
    :class:`~kernelkit.estimators.gp._progress.FitReport` told of every evaluation (its value,
    standard error, CG steps and seconds). The other arguments: :func:`optimize`."""
    from kernelkit.estimators.gp import _sharded

    if distributed.active():
        lml_at = _sharded.rank0_objective(lml_at)
    if report is not None:
        lml_at = _reported(lml_at, estimate, report)

    def obj_func(theta, eval_gradient=True):
        if eval_gradient:
            lml, grad = lml_at(theta, True)
            return -lml, -grad
        return -lml_at(theta, False)

    pretrained = start is not None
    runs = [optimize(obj_func, initial_theta if start is None else start, bounds,
                     optimizer=optimizer, max_iter=max_iter, estimate=estimate,
                     step=PRETRAINED_STEP if pretrained else None, report=report)]
    if n_restarts > 0 and not pretrained:
        if not np.isfinite(bounds).all():
            raise ValueError("Multiple optimizer restarts (n_restarts_optimizer>0) "
                             "requires that all bounds are finite.")
        for _ in range(n_restarts):
            start = _sharded.from_rank0(rng.uniform(bounds[:, 0], bounds[:, 1]))
            runs.append(optimize(obj_func, start, bounds, optimizer=optimizer,
                                 max_iter=max_iter, estimate=estimate, report=report))
    return min(runs, key=lambda run: run[1])[0]


def _reported(lml_at, estimate, report):
    """``lml_at`` telling ``report`` of each evaluation (on every rank: the standard error is
    rank 0's)."""

    def reported(theta, eval_gradient):
        begin = time.perf_counter()
        out = lml_at(theta, eval_gradient)
        seconds = time.perf_counter() - begin
        exact = estimate is None
        report.evaluation(np.array(theta, dtype=float), float(out[0] if eval_gradient else out),
                          None if exact else float(estimate.spread),
                          None if exact else int(estimate.last_cg_steps), seconds)
        return out

    return reported


def optimize(obj_func, initial_theta, bounds, *, optimizer, max_iter, estimate=None, step=None,
             report=None):
    """One optimiser run from ``initial_theta``; returns (theta, value).

    Parameters
    ----------
    obj_func : callable
        ``obj_func(theta, eval_gradient=True)`` -> value, or (value, gradient), to minimise.
    initial_theta : ndarray of shape (n_theta,)
    bounds : ndarray of shape (n_theta, 2)
    optimizer : "fmin_l_bfgs_b" or callable
        A callable is called as scikit-learn calls it:
        ``optimizer(obj_func, initial_theta, bounds=bounds)``.
    max_iter : int
        Most L-BFGS-B iterations.
    estimate : StochasticObjective or None
        The iterative path's objective (a run starts here:
        :meth:`StochasticObjective.start_run`), whose ``gain_spread`` is the standard error of
        its last gain: L-BFGS-B then also stops once an iteration gains less than that, or after
        :data:`STALL_EVALUATIONS` evaluations in a row that do not beat the best by that much,
        returning the best point (line searches that the estimate's noise makes fail: at
        n = 2e4 on a GPU L-BFGS-B spent 30 of 45 evaluations at one point).
        None (the exact path): SciPy's tolerances alone.
    step : float or None
        L-BFGS-B's first trial step (:func:`lbfgs`).
    report : FitReport or None
        Told of the run's start, each iteration and why it stopped
        (:class:`~kernelkit.estimators.gp._progress.FitReport`).
    """
    if report is not None:
        report.new_run()
    if callable(optimizer):
        out = optimizer(obj_func, initial_theta, bounds=bounds)
        if report is not None:
            report.stopped("the optimizer callable returned")
        return out
    if estimate is None:
        return lbfgs(obj_func, initial_theta, bounds, max_iter,
                     callback=None if report is None else _iterations(report), step=step,
                     report=report)
    estimate.start_run()
    previous = [np.inf]
    best = {"f": np.inf, "x": np.asarray(initial_theta, dtype=float), "stale": 0}

    def resolved(intermediate_result):
        value, se = float(intermediate_result.fun), standard_error(estimate)
        if report is not None:
            report.iteration(value, se)
        if previous[0] - value < se:
            if report is not None:
                report.stopped(f"an iteration gained {previous[0] - value:.3g} < the "
                               f"gain's standard error {se:.3g}")
            raise StopIteration
        previous[0] = value

    def watched(theta, eval_gradient=True):
        out = obj_func(theta, eval_gradient)
        value = float(out[0] if eval_gradient else out)
        gained = best["f"] - value > standard_error(estimate)
        if value < best["f"]:
            best.update(f=value, x=np.array(theta, dtype=float))
        best["stale"] = 0 if gained else best["stale"] + 1
        if best["stale"] >= STALL_EVALUATIONS:
            raise _Stalled
        return out

    start, iterations_left = np.asarray(initial_theta, dtype=float), max_iter
    try:
        for restart in range(LINE_SEARCH_RESTARTS + 1):
            theta, res = _lbfgs_run(watched, start, bounds, iterations_left, callback=resolved,
                                    step=step if restart == 0 else None)
            iterations_left -= res.nit
            # a failed line search (status 2; L-BFGS-B's answer is where it began) after a
            # better point was seen: start again there, with a fresh curvature memory
            gain = res.fun - best["f"]
            if res.status != 2 or iterations_left <= 0 or gain <= standard_error(estimate):
                break
            start, previous[0] = best["x"], np.inf
    except _Stalled:
        if report is not None:
            report.stopped(f"{STALL_EVALUATIONS} evaluations in a row did not beat the best by "
                           f"the gain's standard error")
        return best["x"], best["f"]
    _stopped(res, report)
    _warn_unconverged(res, stacklevel=5)
    if best["f"] < res.fun:  # the estimate's best point beats where L-BFGS-B ended
        return best["x"], best["f"]
    return theta, res.fun


def _iterations(report):
    """SciPy's callback telling ``report`` of each iteration's value."""
    return lambda intermediate_result: report.iteration(float(intermediate_result.fun))


def standard_error(estimate):
    """The standard error of the last gain, ``estimate.gain_spread``: rank 0's under
    torch.distributed (so that every rank stops at the same point)."""
    from kernelkit.estimators.gp import _sharded

    return float(_sharded.from_rank0([estimate.gain_spread])[0])


def lbfgs(obj_func, initial_theta, bounds, max_iter, callback=None, step=None, report=None):
    """L-BFGS-B from ``initial_theta``, at most ``max_iter`` iterations; returns (theta, value)
    and warns (ConvergenceWarning) where it stopped without converging.

    ``step``: the length of its first trial step in theta. L-BFGS-B tries the start minus
    its gradient first where every bound is finite (else a step of length 1), so it runs on
    ``theta = initial_theta + s * phi`` with s = sqrt(step / |gradient|) (else s = step);
    the start's evaluation is computed once for both. None: SciPy's own first step.
    ``callback``: SciPy's, called after each iteration (raising StopIteration stops the run).
    ``report``: told why the run stopped, but by ``callback`` (the caller says that)."""
    theta, res = _lbfgs_run(obj_func, initial_theta, bounds, max_iter, callback, step)
    _stopped(res, report)
    _warn_unconverged(res, stacklevel=6)
    return theta, res.fun


def _lbfgs_run(obj_func, initial_theta, bounds, max_iter, callback=None, step=None):
    """:func:`lbfgs` without its warning and report: (theta, SciPy's OptimizeResult in the
    scaled variables)."""
    start = np.asarray(initial_theta, dtype=np.float64)
    bounds = np.asarray(bounds, dtype=np.float64)
    scale, first = 1.0, None
    if step is not None:
        first = obj_func(start)
        norm = float(np.linalg.norm(first[1]))
        boxed = bool(np.isfinite(bounds).all())
        scale = math.sqrt(step / norm) if boxed and norm > 0 else step

    def scaled(phi):
        nonlocal first
        if first is not None and not phi.any():  # the start, evaluated above
            value, grad = first
        else:
            value, grad = obj_func(start + scale * phi)
        first = None
        return value, scale * np.asarray(grad)

    # One BLAS thread for NumPy / SciPy while L-BFGS-B runs: after its small BLAS calls between
    # evaluations OpenBLAS's idle threads spin and take the cores from torch's threads in the
    # next evaluation (an exact fit at n = 200 on 2 CPU cores: 6.4 s, with one thread 0.75 s)
    with threadpool_limits(limits=1, user_api="blas"):
        res = scipy.optimize.minimize(scaled, np.zeros_like(start), method="L-BFGS-B", jac=True,
                                      bounds=(bounds - start[:, None]) / scale,
                                      options={"maxiter": max_iter}, callback=callback)
    return start + scale * res.x, res


def _stopped(res, report):
    """Tell ``report`` (if any) why an L-BFGS-B run stopped, unless its callback stopped it
    (status 99: the callback said why)."""
    if report is not None and res.status != 99:
        report.stopped(f"L-BFGS-B after {res.nit} iterations: {res.message}")


def _warn_unconverged(res, stacklevel):
    """The ConvergenceWarning of an L-BFGS-B run that stopped without converging (``res``:
    SciPy's result; status 99: stopped by a callback, which is a decision, not a failure)."""
    if res.status not in (0, 99):
        warnings.warn(
            f"L-BFGS-B stopped without converging after {res.nit} iterations (status "
            f"{res.status}: {res.message}); the hyperparameters may not maximise the log "
            f"marginal likelihood. Raise optimizer_max_iter, or on the iterative path "
            f"n_probes / preconditioner_rank, or scale the data.",
            ConvergenceWarning, stacklevel=stacklevel + 1)


def pretrain_rows(size, n):
    """How many of n training points the optimiser first runs on for ``pretrain_size`` ``size``
    (checked), or 0."""
    if size == "auto":
        size = n // PRETRAIN_DIVISOR
        return size if size >= PRETRAIN_MIN_SIZE else 0
    return 0 if size is None or size >= n else size


def pretrained_theta(model, X, y, alpha, seed):
    """The optimum of ``model``'s fit (restarts included) on :func:`pretrain_rows` of its
    ``pretrain_size`` training points drawn uniformly from ``seed`` (so every rank of a process
    group takes the same rows), or None when there is no pretraining.

    ``y``: the (normalised) targets; ``alpha``: the checked alpha, whose rows a per-sample one
    keeps. Its ConvergenceWarnings are dropped: only the full-data run's outcome is reported.
    Its records and display, at ``model``'s ``verbose``, are the phase "pretraining"
    (:mod:`kernelkit.estimators.gp._progress`)."""
    m = pretrain_rows(model.pretrain_size, X.shape[0])
    if m == 0:
        return None
    rows = np.sort(np.random.default_rng(seed).choice(X.shape[0], m, replace=False))
    subset = clone(model).set_params(normalize_y=False, copy_X_train=False, n_targets=None,
                                     random_state=seed,
                                     optimizer=model.optimizer)  # the caller's, not a copy
    if np.ndim(alpha):
        subset.set_params(alpha=alpha[rows])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        subset._fit(X[rows], y[rows], variance_cache=False, phase="pretraining")
    return subset.kernel_.theta
