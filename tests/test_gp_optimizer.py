"""The iterative path's L-BFGS-B: its objective at hyperparameters where CG cannot reach cg_tol,
and its stopping rules for a noisy estimate.

A trial point with far too little noise for float32 products (n = 1e5 on an H200: a line search
probed noise 1e-4, CG ran 1000 steps to a true residual of 4) gives an estimate that is not to
be trusted. Where the true residual is above sqrt(cg_tol) the objective reports a value below
the best so far with a zero gradient, so that the line search steps back, and it does not warn;
a rejection before any trusted value warns.
"""

import math
import types
import warnings

import numpy as np
import pytest
import scipy.optimize
import torch
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process import GaussianProcessRegressor as GPR
from sklearn.gaussian_process.kernels import ConstantKernel as C
from sklearn.gaussian_process.kernels import WhiteKernel as W

import kernelkit as kk
from kernelkit.estimators.gp import _lml, _optimizer
from kernelkit.estimators.gp._checks import check_params
from kernelkit.estimators.gp._progress import FitReport
from kernelkit.operators.kernel_tree import parse_kernel


def _objective(**params):
    """``(make, theta)``: a factory of the optimiser's objective on a small iterative-path GP
    (``params``: its settings) and the kernel's theta."""
    rng = np.random.default_rng(0)
    X = rng.uniform(-2.0, 2.0, (120, 2))
    y = np.sin(2.0 * X[:, 0]) + 0.1 * rng.standard_normal(120)
    gp = kk.GaussianProcessRegressor(C(1.0) * kk.RBF(1.0) + W(0.05), optimizer=None,
                                     device="cpu", exact_max_n=0, random_state=0,
                                     **params).fit(X, y)
    op = gp._operator(parse_kernel(gp.kernel_, 2))

    def make():
        return gp._lml_function(op, check_params(gp), FitReport(0, "fit"))

    return make, gp.kernel_.theta


@pytest.fixture
def objective():
    return _objective()


def _failing_solves(monkeypatch, residual=1.0):
    """Every solve reports a final true residual of ``residual`` (cg_tol is 1e-3 here)."""
    original = _lml.conjugate_gradient

    def unconverged(*args, **kwargs):
        result = original(*args, **kwargs)
        result.converged = False
        result.residuals[-1] = residual
        return result

    monkeypatch.setattr(_lml, "conjugate_gradient", unconverged)


def test_unconverged_trial_point_is_stepped_back_from(objective, monkeypatch):
    make, theta = objective
    f = make()
    best, _ = f(theta, True)
    worse, _ = f(theta + 0.5, True)
    assert worse < best  # a trusted value below the best leaves the best unchanged
    _failing_solves(monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no ConvergenceWarning for a rejected trial point
        value, grad = f(theta - 0.3, True)
        only_value = f(theta - 0.3, False)
    assert value == only_value == best - max(1.0, abs(best))
    assert not np.any(grad)


def test_unconverged_first_evaluation_warns_and_keeps_the_estimate(objective, monkeypatch):
    make, theta = objective
    expected, expected_grad = make()(theta, True)
    _failing_solves(monkeypatch)
    with pytest.warns(ConvergenceWarning, match="log_marginal_likelihood: conjugate gradients"):
        value, grad = make()(theta, True)
    assert value == expected
    np.testing.assert_array_equal(grad, expected_grad)


def _unfaithful_lanczos_runs(monkeypatch, residual):
    """Every solve converges, but its Lanczos run (the log determinant's) ended at a true
    residual of ``residual``: float32 products whose run stalled before CG went on with exact
    ones (CGResult.exact_from)."""
    original = _lml.conjugate_gradient

    def switched(*args, **kwargs):
        result = original(*args, **kwargs)
        if result.lanczos is not None:
            result.lanczos.true_residual = residual
        return result

    monkeypatch.setattr(_lml, "conjugate_gradient", switched)


def test_an_estimate_from_a_stalled_lanczos_run_is_stepped_back_from(objective, monkeypatch):
    """The solve converged, but the log determinant's coefficients come from a run whose true
    residual was 0.5 (above sqrt(cg_tol)): rejected as an unconverged solve is; directly
    (not optimising) the estimate warns, naming that run."""
    make, theta = objective
    f = make()
    best, _ = f(theta, True)
    _unfaithful_lanczos_runs(monkeypatch, 0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        value, grad = f(theta - 0.3, True)
    assert value == best - max(1.0, abs(best)) and not np.any(grad)
    with pytest.warns(ConvergenceWarning, match="its log determinant comes from a CG run"):
        make()(theta, True)  # no trusted value yet: warns and keeps the estimate


def test_public_lml_warns_when_its_lanczos_run_stalled(monkeypatch):
    """GaussianProcessRegressor.log_marginal_likelihood on the iterative path, with a Lanczos
    run that ended at 0.5: a ConvergenceWarning naming it; at 0.01 (below sqrt(cg_tol)) none."""
    rng = np.random.default_rng(1)
    X = rng.uniform(-2.0, 2.0, (150, 2))
    y = np.sin(2.0 * X[:, 0]) + 0.1 * rng.standard_normal(150)
    gp = kk.GaussianProcessRegressor(C(1.0) * kk.RBF(1.0) + W(0.05), optimizer=None,
                                     device="cpu", exact_max_n=0, random_state=0).fit(X, y)
    _unfaithful_lanczos_runs(monkeypatch, 1e-2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gp.log_marginal_likelihood(gp.kernel_.theta)
    _unfaithful_lanczos_runs(monkeypatch, 0.5)
    with pytest.warns(ConvergenceWarning, match="ended at true relative residual 5.00e-01"):
        gp.log_marginal_likelihood(gp.kernel_.theta)


def test_a_stall_near_cg_tol_is_used_as_it_is(objective, monkeypatch):
    """Residual 1e-2 > cg_tol = 1e-3 but below sqrt(cg_tol): float32 products near the
    optimum stalled there at n = 1e5, and rejecting such points stopped L-BFGS 1400 nats short."""
    make, theta = objective
    expected = make()(theta - 0.3, True)
    f = make()
    f(theta, True)
    _failing_solves(monkeypatch, residual=1e-2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        value, grad = f(theta - 0.3, True)
    assert value == expected[0]
    np.testing.assert_array_equal(grad, expected[1])


def test_stalled_line_searches_stop_at_the_best_point():
    """Every point but the start evaluates worse (as where the estimate's noise makes L-BFGS-B's
    line searches fail: at n = 2e4 on an H200 it spent 30 of 45 evaluations at one point).
    Without the stall rule L-BFGS-B took 16 evaluations and ended abnormally, returning a value
    of a point it did not return; with it, STALL_EVALUATIONS evaluations after the best one it
    returns that point and its value, without a warning."""
    # the objective's standard error, and its run's start
    estimate = types.SimpleNamespace(gain_spread=0.0, start_run=lambda: None)
    start, seen = np.full(4, 2.0), []

    def obj_func(theta, eval_gradient=True):
        estimate.gain_spread = 0.1
        value = float(np.sum((theta - 3.0) ** 2)) + (0.0 if np.array_equal(theta, start) else 10.0)
        seen.append(value)
        return value, 2.0 * (theta - 3.0)

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        x, f = _optimizer.optimize(obj_func, start.copy(), np.array([[-10.0, 10.0]] * 4),
                                   optimizer="fmin_l_bfgs_b", max_iter=1000, estimate=estimate)
    np.testing.assert_array_equal(x, start)
    assert f == 4.0
    assert len(seen) == 1 + _optimizer.STALL_EVALUATIONS


def _recorded_solves(monkeypatch, stall_at=None):
    """Record (max_iter, n_iter) of every CG solve of the GP's estimate; the solve numbered
    ``stall_at`` (from 0) gets products with noise of 30% of the vector's size, so that its
    CG can never converge (a planted stall)."""
    original, solves = _lml.conjugate_gradient, []

    def recorded(matvec, *args, **kwargs):
        if len(solves) == stall_at:
            generator = torch.Generator().manual_seed(0)

            def noisy(V, matvec=matvec):
                noise = torch.randn(V.shape, generator=generator, dtype=V.dtype)
                return matvec(V) + 0.3 * V.norm() / V.shape[0] ** 0.5 * noise
            matvec = noisy
        result = original(matvec, *args, **kwargs)
        solves.append((kwargs["max_iter"], result.n_iter))
        return result

    monkeypatch.setattr(_lml, "conjugate_gradient", recorded)
    return solves


def test_a_trial_point_whose_cg_never_converges_costs_a_few_typical_solves(monkeypatch):
    """Once a value is trusted, a trial point's solve stops after CG_BUDGET_FACTOR times the
    steps at the best point so far (not max_cg_iter = 1000: a solve at n = 1e5 ran > 380 s)
    and, ending far above cg_tol, is stepped back from. A worse point that took fewer steps
    (L-BFGS-B's first trials on the bounds take 1) leaves the budget as it was."""
    make, theta = _objective(preconditioner_rank=5)  # CG takes ~20 steps at theta
    solves = _recorded_solves(monkeypatch, stall_at=2)
    f = make()
    best, _ = f(theta, True)
    assert solves[0][0] == 1000  # the first evaluation: no history, max_cg_iter
    at_best = solves[0][1]
    budget = max(_optimizer.CG_BUDGET_MIN_STEPS, _optimizer.CG_BUDGET_FACTOR * at_best)
    worse, _ = f(np.full_like(theta, 5.0), True)  # huge noise: CG takes a step or two
    assert worse < best and solves[1][1] < at_best and f.cg_budget() == budget
    value, grad = f(theta - 0.3, True)
    assert solves[2] == (budget, budget)  # ran to its budget, not to 1000
    assert value == best - max(1.0, abs(best)) and not np.any(grad)
    f.start_run()  # a restart's start gets max_cg_iter again
    f(theta + 0.2, True)
    assert solves[3][0] == 1000


def test_a_fit_with_a_planted_stall_ends_bounded_and_at_the_same_optimum(monkeypatch):
    """A whole iterative fit with one trial point whose CG never converges: that solve takes no
    more than CG_BUDGET_FACTOR times the others' steps, and the optimum's exact LML is that of
    the same fit without the stall."""
    rng = np.random.default_rng(3)
    X = rng.uniform(-2.0, 2.0, (150, 2))
    y = np.sin(2.0 * X[:, 0]) + 0.1 * rng.standard_normal(150)

    def fit():
        return kk.GaussianProcessRegressor(C(1.0) * kk.RBF([1.0, 1.0]) + W(0.05), device="cpu",
                                           exact_max_n=0, preconditioner_rank=5,
                                           random_state=0).fit(X, y)

    clean = fit()
    solves = _recorded_solves(monkeypatch, stall_at=2)
    stalled = fit()
    others = [n_iter for i, (_, n_iter) in enumerate(solves) if i != 2]
    bound = max(_optimizer.CG_BUDGET_MIN_STEPS, _optimizer.CG_BUDGET_FACTOR * max(others))
    assert solves[2][1] <= bound < 1000  # the stall ran to a budget, not to max_cg_iter
    exact = [GPR(model.kernel_, optimizer=None).fit(X, y).log_marginal_likelihood_value_
             for model in (clean, stalled)]
    assert exact[1] >= exact[0] - 0.5  # the stall costs no more than the noise of one estimate


def test_default_preconditioner_keeps_cg_short():
    """At n = 400 the default rank is every point, so CG needs a few steps per evaluation; a
    preconditioner whose rank were fixed at 1 would need hundreds (a planted stall)."""
    rng = np.random.default_rng(4)
    X = rng.uniform(-2.0, 2.0, (400, 3))
    y = np.sin(2.0 * X[:, 0]) * np.cos(X[:, 1]) + 0.1 * rng.standard_normal(400)
    solves = []
    original = _lml.conjugate_gradient

    def recorded(*args, **kwargs):
        result = original(*args, **kwargs)
        solves.append(result.n_iter)
        return result

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_lml, "conjugate_gradient", recorded)
        kk.GaussianProcessRegressor(C(1.0) * kk.RBF([1.0] * 3) + W(0.1), device="cpu",
                                    exact_max_n=0, random_state=0).fit(X, y)
    assert len(solves) > 3 and max(solves) <= 10


def test_a_failed_line_search_starts_again_from_the_best_point(monkeypatch):
    """L-BFGS-B's answer after a failed line search (status 2) is where that search began,
    even when it evaluated a better point. The run starts again from the best point and ends
    at the optimum, without a warning."""
    estimate = types.SimpleNamespace(gain_spread=0.0, start_run=lambda: None)
    real, starts = _optimizer._lbfgs_run, []

    def first_search_fails(obj_func, start, bounds, max_iter, callback=None, step=None):
        starts.append(np.array(start))
        if len(starts) > 1:
            return real(obj_func, start, bounds, max_iter, callback, step)
        value, _ = obj_func(start)
        obj_func(start + 1.0)  # a better point, seen by the search that then fails
        return start, scipy.optimize.OptimizeResult(fun=value, status=2, nit=1,
                                                    message="ABNORMAL: ")

    def quadratic(theta, eval_gradient=True):
        return float(np.sum((theta - 3.0) ** 2)), 2.0 * (theta - 3.0)

    monkeypatch.setattr(_optimizer, "_lbfgs_run", first_search_fails)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        x, f = _optimizer.optimize(quadratic, np.zeros(2), np.array([[-10.0, 10.0]] * 2),
                                   optimizer="fmin_l_bfgs_b", max_iter=100, estimate=estimate)
    np.testing.assert_array_equal(starts[1], [1.0, 1.0])
    np.testing.assert_allclose(x, [3.0, 3.0], atol=1e-6)  # L-BFGS-B's own tolerance
    assert f < 1e-10


def test_spread_is_that_of_the_difference_from_the_best_estimate():
    """The stopping rules compare a gain with the standard error of the difference of two
    estimates (the same probes at every theta), which near the best point is far below either
    estimate's own: with the latter a fit stopped 18 nats short (tests/test_zoo.py)."""
    make, theta = _objective(preconditioner_rank=5)
    f = make()
    f(theta, True)
    own = f.spread
    assert own > 0 and f.gain_spread == own  # no best estimate yet: the estimate's own
    f(theta + 0.01, True)
    assert 0 < f.gain_spread < 0.1 * own and f.spread > 0.5 * own


def test_lbfgs_runs_its_objective_with_one_blas_thread():
    """NumPy / SciPy get one BLAS thread while L-BFGS-B runs: OpenBLAS's idle threads spinning
    after L-BFGS-B's own BLAS calls took the cores from torch's (an exact fit at n = 200 on 2
    CPU cores: 6.4 s against 0.75 s)."""
    from threadpoolctl import threadpool_info

    seen = []

    def quadratic(theta):
        seen.extend(lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas")
        return float(np.sum((theta - 1.0) ** 2)), 2.0 * (theta - 1.0)

    _optimizer.lbfgs(quadratic, np.zeros(2), np.array([[-5.0, 5.0]] * 2), 20)
    assert seen and set(seen) == {1}
