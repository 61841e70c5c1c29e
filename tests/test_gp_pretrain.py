"""Pretraining (``pretrain_size``): the optimiser first runs on a uniform subset of the training
points and the full-data run starts from that optimum.

The checks: which fits run on how many points and where each optimiser run starts; the "auto"
rule; that the full-data run still reaches scikit-learn's exact optimum; argument validation.
"""

import warnings

import numpy as np
import pytest
import scipy.optimize
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process import GaussianProcessRegressor as SklearnGPR
from sklearn.gaussian_process.kernels import RBF
from sklearn.gaussian_process.kernels import ConstantKernel as C
from sklearn.gaussian_process.kernels import WhiteKernel as W

import kernelkit as kk
from kernelkit.estimators.gp import _optimizer, regressor

KERNEL = C(1.0) * RBF([1.0, 1.0]) + W(0.05)


def _data(n, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2.0, 2.0, (n, 2))
    y = np.sin(2.0 * X[:, 0]) + 0.5 * np.cos(X[:, 1]) + 0.2 * rng.standard_normal(n)
    return X, y


class _Recorder:
    """An optimizer callable (L-BFGS-B, as scikit-learn's) that records each run's start and
    optimum."""

    def __init__(self):
        self.runs = []

    def __call__(self, obj_func, initial_theta, bounds):
        res = scipy.optimize.minimize(obj_func, initial_theta, method="L-BFGS-B", jac=True,
                                      bounds=bounds)
        self.runs.append((np.array(initial_theta), res.x, res.fun))
        return res.x, res.fun


def _record_fit_sizes(monkeypatch):
    sizes = []
    fit = regressor.GaussianProcessRegressor._fit

    def recorded(self, X, y, variance_cache, **kwargs):
        sizes.append(len(X))
        return fit(self, X, y, variance_cache, **kwargs)

    monkeypatch.setattr(regressor.GaussianProcessRegressor, "_fit", recorded)
    return sizes


def test_the_full_fit_starts_at_the_subset_optimum(monkeypatch):
    sizes = _record_fit_sizes(monkeypatch)
    X, y = _data(400)
    opt = _Recorder()
    gp = kk.GaussianProcessRegressor(KERNEL, optimizer=opt, pretrain_size=120, device="cpu",
                                     random_state=0).fit(X, y)
    assert sizes == [400, 120]
    (start0, end0, _), (start1, end1, _) = opt.runs
    np.testing.assert_array_equal(start0, KERNEL.theta)  # the subset from the kernel's start
    # the full data from the subset's optimum (through kernel_.theta: exp and log, 1 ulp)
    np.testing.assert_allclose(start1, end0, rtol=1e-14, atol=0)
    np.testing.assert_allclose(gp.kernel_.theta, end1, rtol=1e-14, atol=0)
    assert np.abs(end0 - end1).max() > 1e-3  # the full-data run moved on from there


def test_restarts_run_on_the_subset_only(monkeypatch):
    """n_restarts_optimizer = 2: three runs on the subset, then one on all points, from the
    best of the three."""
    sizes = _record_fit_sizes(monkeypatch)
    X, y = _data(300)
    opt = _Recorder()
    kk.GaussianProcessRegressor(KERNEL, optimizer=opt, pretrain_size=100, n_restarts_optimizer=2,
                                device="cpu", random_state=0).fit(X, y)
    assert sizes == [300, 100]
    assert len(opt.runs) == 4
    best = min(opt.runs[:3], key=lambda run: run[2])
    np.testing.assert_allclose(opt.runs[3][0], best[1], rtol=1e-14, atol=0)


def test_the_full_fit_reaches_the_exact_optimum():
    """Both stages exact (n <= exact_max_n): the pretrained fit's optimum has scikit-learn's
    exact log marginal likelihood to 0.01 nats of scikit-learn's own optimum (L-BFGS-B's
    tolerances on a smooth 7-parameter-free problem; measured difference below 1e-4)."""
    X, y = _data(500, seed=1)
    ref = SklearnGPR(KERNEL, random_state=0).fit(X, y)
    gp = kk.GaussianProcessRegressor(KERNEL, pretrain_size=100, device="cpu",
                                     random_state=0).fit(X, y)
    ours = ref.log_marginal_likelihood(gp.kernel_.theta)
    assert ours >= ref.log_marginal_likelihood_value_ - 0.01


@pytest.mark.parametrize("n, size, rows", [
    (131_071, "auto", 0), (131_072, "auto", 16_384), (10**6, "auto", 125_000),
    (600, 200, 200), (600, 600, 0), (600, 900, 0), (10**6, None, 0)])
def test_pretrain_rows(n, size, rows):
    """"auto": n // 8 once that is at least 2**14; an int below n as given; None never."""
    assert _optimizer.pretrain_rows(size, n) == rows


def test_subset_warnings_are_dropped_and_the_full_runs_kept():
    """The subset's ConvergenceWarnings (here: one L-BFGS-B iteration) say nothing of the
    result; the full-data run's are kept, once."""
    X, y = _data(200)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kk.GaussianProcessRegressor(KERNEL, pretrain_size=80, optimizer_max_iter=1, device="cpu",
                                    random_state=0).fit(X, y)
    stops = [w for w in caught if issubclass(w.category, ConvergenceWarning)
             and "L-BFGS-B stopped" in str(w.message)]
    assert len(stops) == 1


def test_no_pretraining_without_an_optimizer(monkeypatch):
    sizes = _record_fit_sizes(monkeypatch)
    X, y = _data(200)
    kk.GaussianProcessRegressor(KERNEL, optimizer=None, pretrain_size=50, device="cpu").fit(X, y)
    assert sizes == [200]


@pytest.mark.parametrize("value, error, match", [
    ("half", ValueError, "pretrain_size"), (0, ValueError, "pretrain_size must be >= 1"),
    (1.5, TypeError, "pretrain_size must be an integer"), (True, TypeError, "pretrain_size")])
def test_bad_pretrain_size(value, error, match):
    X, y = _data(50)
    with pytest.raises(error, match=match):
        kk.GaussianProcessRegressor(KERNEL, pretrain_size=value, device="cpu").fit(X, y)


@pytest.mark.parametrize("bound", [10.0, np.inf], ids=["boxed", "unbounded"])
@pytest.mark.parametrize("step", [None, 0.1])
def test_lbfgs_first_trial_step(step, bound):
    """``step``: L-BFGS-B's first trial point lies ``step`` from the start, within finite bounds
    (where SciPy's own first trial is the start minus the gradient, length 6 sqrt(2) here) and
    without them (SciPy's own: length 1); the start is evaluated once; the minimum of the
    quadratic is still found."""
    seen = []

    def quadratic(theta):
        seen.append(np.array(theta))
        return float(((theta - 3.0) ** 2).sum()), 2.0 * (theta - 3.0)

    theta, value = _optimizer.lbfgs(quadratic, np.zeros(2), np.array([[-bound, bound]] * 2), 50,
                                    None, step)
    scipy_first = 6.0 * np.sqrt(2.0) if np.isfinite(bound) else 1.0
    assert np.linalg.norm(seen[1] - seen[0]) == pytest.approx(step or scipy_first, rel=1e-12)
    assert sum(np.array_equal(t, seen[0]) for t in seen) == 1
    np.testing.assert_allclose(theta, [3.0, 3.0], atol=1e-6)
    assert value == pytest.approx(0.0, abs=1e-10)


def test_the_pretrained_run_takes_small_first_steps(monkeypatch):
    steps = []
    lbfgs = _optimizer.lbfgs

    def recorded(obj_func, initial_theta, bounds, max_iter, callback=None, step=None, **kwargs):
        steps.append(step)
        return lbfgs(obj_func, initial_theta, bounds, max_iter, callback, step, **kwargs)

    monkeypatch.setattr(_optimizer, "lbfgs", recorded)
    X, y = _data(200)
    kk.GaussianProcessRegressor(KERNEL, pretrain_size=80, device="cpu", random_state=0).fit(X, y)
    assert steps == [None, _optimizer.PRETRAINED_STEP]
