"""The GP's iterative path (kernelkit.estimators.gp._lml on the one CG and preconditioner) against
scikit-learn's exact GaussianProcessRegressor, with a preconditioner of rank < n (so that the
stochastic log-determinant term matters), at default and at tight settings.

Tolerances are about four standard deviations of the estimate over probe seeds, measured at
these settings and written beside each one.
"""

import numpy as np
import pytest
import torch
from sklearn.gaussian_process import GaussianProcessRegressor as SklearnGPR
from sklearn.gaussian_process.kernels import RBF
from sklearn.gaussian_process.kernels import ConstantKernel as C
from sklearn.gaussian_process.kernels import WhiteKernel as W

import kernelkit as kk
from kernelkit.estimators.gp._lml import (SolverSettings, log_marginal_likelihood, make_probes,
                               resolve_rank)
from kernelkit.operators.covariance import CovarianceOperator
from kernelkit.operators.kernel_tree import parse_kernel

KERNEL = C(1.5) * RBF([0.8, 1.2]) + W(0.05)


def _data(n=300, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2.0, 2.0, (n, 2))
    y = np.sin(2.0 * X[:, 0]) + 0.5 * np.cos(X[:, 1]) + 0.2 * rng.standard_normal(n)
    return X, y


@pytest.fixture(scope="module")
def problem():
    X, y = _data()
    ref = SklearnGPR(KERNEL, alpha=1e-10, optimizer=None).fit(X, y)
    lml, grad = ref.log_marginal_likelihood(KERNEL.theta, eval_gradient=True)
    op = CovarianceOperator(X, parse_kernel(KERNEL), 1e-10, "cpu", torch.float64)
    return X, y, op, lml, grad


def _estimate(op, y, rank, n_probes, cg_tol, seed):
    probes = make_probes(len(y), resolve_rank(rank, len(y)), n_probes, seed, "cpu")
    settings = SolverSettings(n_probes, cg_tol, 1000, rank)
    value, grad, _ = log_marginal_likelihood(op, KERNEL.theta, torch.as_tensor(y), probes,
                                             settings, eval_gradient=True)
    return value, grad


@pytest.mark.parametrize("seed", [0, 1])
def test_low_rank_preconditioner_lml_needs_and_gets_the_stochastic_correction(problem, seed):
    """Rank 20 of n = 300: log det P misses log det K by 27 nats; the SLQ correction brings the
    estimate to the exact value within its spread (over probe seeds 0-23, 16 probes, cg_tol
    1e-10: value sd 1.36 nats, mean -0.15; largest gradient entry's error rms 4.7; seeds 0 and 1
    measured -0.93 / -1.05 nats and 4.2 / 5.2)."""
    X, y, op, lml, grad = problem
    value, g = _estimate(op, y, rank=20, n_probes=16, cg_tol=1e-10, seed=seed)
    assert abs(value - lml) <= 5.5  # 4 sd
    assert np.abs(g - grad).max() <= 19.0  # 4 rms


@pytest.mark.parametrize("cg_tol", [1e-3, 1e-8], ids=["default", "tight"])
def test_rank_100_lml_matches_sklearn(problem, cg_tol):
    """Rank 100 of 300 uniform landmarks, 16 probes, cg_tol 1e-3 (the default) and tight: P
    is then close to K; the probes' spread dominates at both tolerances (over probe seeds 0-23:
    value sd 6.6e-3 nats, largest gradient entry's error rms 0.043; seed 0 measured -3.7e-3
    and 0.037 (0.030 tight)). A CG stopped 1000x early (cg_tol 1) fails the value by 99 nats;
    the correction itself (0.011 nats here) is checked at rank 20, where it is 27 nats."""
    X, y, op, lml, grad = problem
    value, g = _estimate(op, y, rank=100, n_probes=16, cg_tol=cg_tol, seed=0)
    assert abs(value - lml) <= 0.026  # 4 sd
    np.testing.assert_allclose(g, grad, rtol=0, atol=0.17)  # 4 rms


@pytest.mark.parametrize("cg_tol", [1e-3, 1e-8], ids=["default", "tight"])
def test_default_rank_is_exact_up_to_1024_points(problem, cg_tol):
    """preconditioner_rank="auto" takes every point as a landmark for n <= 1024: P = K up to
    the Nystrom shift, so the estimate is exact (measured 4e-13 nats, gradient 1.3e-12 over
    seeds 0-3, at both tolerances)."""
    X, y, op, lml, grad = problem
    value, g = _estimate(op, y, rank="auto", n_probes=16, cg_tol=cg_tol, seed=0)
    assert abs(value - lml) <= 1e-9
    np.testing.assert_allclose(g, grad, rtol=0, atol=1e-8)


@pytest.mark.parametrize("free_gb, want, eigen", [(75, 1875, 1205), (300, 2000, 2000),
                                                  (1, 268, 268)])
def test_auto_rank_on_a_gpu_follows_its_free_memory(monkeypatch, free_gb, want, eigen):
    """"auto" at n = 1e6: 2**28 // n = 268 on the CPU; on a CUDA device 2 sqrt(n) = 2000 where
    0.9 of the free memory holds 4.5 n x k float64 matrices in the preconditioner's Cholesky
    form (75 GB: 0.9 * 75e9 / (36 * 1e6) = 1875) and 7 in its eigen form (1205), never below
    the CPU's bound; at n <= 262 144 (2 sqrt(n) <= 1024) at most 1024."""
    from kernelkit.estimators.gp import _lml

    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (free_gb * 10**9, 0))
    assert resolve_rank("auto", 10**6) == 268
    assert resolve_rank("auto", 10**6, "cuda") == want
    assert resolve_rank("auto", 10**6, "cuda", "eigen") == eigen
    assert resolve_rank("auto", 500, "cuda") == 500 and resolve_rank(64, 10**6, "cuda") == 64
    assert resolve_rank("auto", 262_144, "cuda") == 1024  # 2**28 // 262 144 = 1024 as well
    assert _lml.PRECONDITIONER_COPIES == {"cholesky": 4.5, "eigen": 7.0}
    assert _lml.AUTO_GPU_SHARE == 0.9


def test_auto_rank_is_resolved_once_per_fit(monkeypatch):
    """The fit's ranks (which may depend on the free memory) are kept for later calls, so that
    log_marginal_likelihood draws the fit's landmarks: a resolver that answers differently on
    every call changes nothing after the fit, and a refit resolves again."""
    from kernelkit.estimators.gp import _lml

    answers = iter([7, 5, 11, 13, 17])
    monkeypatch.setattr(_lml, "resolve_rank",
                        lambda rank, n, device=None, form="cholesky": next(answers))
    X, y = _data()
    gp = kk.GaussianProcessRegressor(KERNEL, optimizer=None, device="cpu", exact_max_n=0,
                                     random_state=0).fit(X, y)
    assert gp._rank[1:] == (7, 5)
    first = gp.log_marginal_likelihood(gp.kernel_.theta)
    assert gp.log_marginal_likelihood(gp.kernel_.theta) == first and gp._rank[1:] == (7, 5)
    gp.fit(X, y)
    assert gp._rank[1:] == (11, 13)


def test_eigen_form_evaluations_use_the_eigen_landmarks(problem, monkeypatch):
    """Where the trace of the kernel part exceeds WOODBURY_MAX_RATIO / 2 times the noise (the
    preconditioner may take the eigen form, which needs more memory), an evaluation builds P on
    Draws.eigen_landmarks, a uniform subset of the landmarks drawn from the same seed; below
    it on all of them (the Cholesky form). Both estimates agree with the exact LML (errors over
    probe seeds 0-3 measured up to 0.0097 nats at rank 100 and 0.26 at rank 40; bounds about 4x
    those)."""
    from kernelkit.estimators.gp import _lml
    from kernelkit.linalg import precond

    X, y, op, lml, grad = problem
    probes = make_probes(len(y), 100, 16, 0, "cpu", eigen_rank=40)
    assert probes.eigen_landmarks.numel() == 40
    assert set(probes.eigen_landmarks.tolist()) < set(probes.landmarks.tolist())
    assert make_probes(len(y), 100, 16, 0, "cpu", eigen_rank=100).eigen_landmarks is None
    built = []
    original = _lml.nystrom_preconditioner

    def spy(Y, rows, shift):
        built.append(original(Y, rows, shift))
        return built[-1]

    monkeypatch.setattr(_lml, "nystrom_preconditioner", spy)
    settings = SolverSettings(16, 1e-8, 1000, 100)
    # trace 450 (n = 300, amplitude 1.5), noise 0.05: ratio 9000
    for ratio, rank, woodbury, bound in [(1e8, 100, True, 0.04), (1e3, 40, False, 1.0)]:
        monkeypatch.setattr(_lml, "WOODBURY_MAX_RATIO", ratio)
        monkeypatch.setattr(precond, "WOODBURY_MAX_RATIO", ratio)
        value, _, _ = log_marginal_likelihood(op, KERNEL.theta, torch.as_tensor(y), probes,
                                              settings, eval_gradient=True)
        assert built[-1].rank == rank and built[-1].woodbury == woodbury
        assert abs(value - lml) <= bound
@pytest.mark.parametrize("cg_tol", [1e-3, 1e-8], ids=["default", "tight"])
def test_iterative_predictions_match_sklearn_with_rank_below_n(cg_tol):
    """Mean and std from the iterative path with a rank-20 preconditioner (its Nyström
    approximation alone is far from K: a std taken from it is off by ~1e-2) against
    scikit-learn's exact ones. The mean's solve has relative residual cg_tol, so its error
    scales with it: measured with random_state=0 7.7e-4 at cg_tol 1e-3 and 9.6e-9 at 1e-8
    (over seeds 0-19 up to 4.2e-3 and 2.2e-8: the landmarks are random, so the seed is fixed
    here). Bounds: about 4x seed 0's. The std comes from the variance cache, whose basis spans
    all n = 300 training columns here: exact to round-off (7e-15 over the seeds), hence 1e-12."""
    X, y = _data()
    Xt = np.random.default_rng(5).uniform(-2.0, 2.0, (40, 2))
    ref = SklearnGPR(KERNEL, alpha=1e-10, optimizer=None).fit(X, y)
    ours = kk.GaussianProcessRegressor(KERNEL, alpha=1e-10, optimizer=None, device="cpu",
                                       exact_max_n=0, cg_tol=cg_tol,
                                       preconditioner_rank=20, random_state=0).fit(X, y)
    mean, std = ours.predict(Xt, return_std=True)
    ref_mean, ref_std = ref.predict(Xt, return_std=True)
    mean_atol, std_atol = (3e-3, 1e-12) if cg_tol == 1e-3 else (4e-8, 1e-12)
    np.testing.assert_allclose(mean, ref_mean, rtol=0, atol=mean_atol)
    np.testing.assert_allclose(std, ref_std, rtol=0, atol=std_atol)


def test_quadratic_term_is_second_order_in_the_residual_on_float32_products():
    """y^T K^-1 y from a solve on float32 products (refinement leaves x outside CG's Galerkin
    condition, so y^T alpha is off to first order in the residual r): the estimate is
    y^T alpha + alpha^T r, whose error is exactly r^T K^-1 r, computed here with a dense
    float64 solve (measured: 0.0045 against 0.29 for y^T alpha alone, noise 1e-3, data at
    1000, n = 3000, rank 50, cg_tol 1e-3). No probes: log det P is the whole log determinant
    the estimate uses, so the quadratic term is read off the LML."""
    import math

    from kernelkit.estimators.gp._lml import preconditioner

    kernel = C(4.0) * RBF([0.5, 0.7]) + W(1e-3)
    X, y = _data(3000)
    X = X + 1000.0
    K = torch.as_tensor(kernel(X))
    y_t = torch.as_tensor(y)
    exact = float(y_t @ torch.linalg.solve(K, y_t))
    op = CovarianceOperator(X, parse_kernel(kernel), 0.0, "cpu", torch.float32)
    probes = make_probes(len(y), 50, 0, 0, "cpu")
    info = {}
    value, _ = log_marginal_likelihood(op, kernel.theta, y_t, probes,
                                       SolverSettings(0, 1e-3, 1000, 50), info=info)
    params = op.structure.params(torch.as_tensor(kernel.theta))
    logdet = float(preconditioner(op, params, probes).logdet)
    quadratic = -2.0 * value - logdet - len(y) * math.log(2.0 * math.pi)
    # the parts reported in info add up to the value
    assert info["slq"] == 0.0 and info["logdet_pre"] == pytest.approx(logdet, rel=1e-12)
    assert info["quadratic"] == pytest.approx(quadratic, rel=1e-9)
    r = info["cg"].residual[:, 0]
    second_order = float(r @ torch.linalg.solve(K, r))
    assert info["cg"].converged and second_order > 0
    assert abs((exact - quadratic) - second_order) <= 1e-3 * second_order + 1e-9 * exact
    alpha = info["cg"].x[:, 0]
    assert abs(exact - float(y_t @ alpha)) > 10 * second_order  # what the correction removes
