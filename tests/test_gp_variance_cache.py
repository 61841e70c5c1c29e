"""The iterative path's predictive-variance cache (a Galerkin projection onto Nyström columns,
with a certified error bound).

References are dense float64 solves computed here and scikit-learn's exact GPR.
"""

import numpy as np
import pytest
import torch
from sklearn.gaussian_process import GaussianProcessRegressor as SklearnGPR
from sklearn.gaussian_process.kernels import RBF, Matern
from sklearn.gaussian_process.kernels import ConstantKernel as C
from sklearn.gaussian_process.kernels import WhiteKernel as W

import kernelkit as kk
from kernelkit.estimators.gp import _variance as R
from kernelkit.linalg.galerkin import SubspaceCache

NOISE = 1e-2


def _problem(n, m, length_scale=0.7, seed=0):
    """Kernel part A = RBF(X, X) of 2-D points and test columns RBF(X, X*)."""
    rng = np.random.default_rng(seed)
    X, Xt = rng.uniform(-2.0, 2.0, (n, 2)), rng.uniform(-2.0, 2.0, (m, 2))
    kernel = RBF(length_scale)
    return torch.as_tensor(kernel(X)), torch.as_tensor(kernel(X, Xt))


def _cache(A, k, noise=NOISE, seed=0):
    """The cache on the columns of k uniformly drawn landmarks, as the regressor builds it."""
    rows = torch.as_tensor(np.sort(np.random.default_rng(seed).permutation(A.shape[0])[:k]))
    U = torch.linalg.qr(A[:, rows])[0]
    K = A + noise * torch.eye(A.shape[0], dtype=torch.float64)
    return SubspaceCache(U, K @ U, noise), K


@pytest.mark.parametrize("k", [5, 30, 80])
def test_cache_bounds_the_exact_quadratic_form(k):
    """b^T G^{-1} b <= x^T K^{-1} x <= b^T G^{-1} b + bound, for columns x of kernel values;
    exact when the landmarks are every point."""
    A, X = _problem(80, 30)
    cache, K = _cache(A, k)
    exact = (X * torch.linalg.solve(K, X)).sum(0)
    quad, bound = cache.quadratic(X)
    slack = 1e-10 * exact.abs().max()  # round-off of the solves (cond(K) ~ 3e3)
    assert bool((quad <= exact + slack).all())
    assert bool((exact <= quad + bound + slack).all())
    if k == 80:
        np.testing.assert_allclose(quad, exact, rtol=0, atol=slack)
        np.testing.assert_allclose(bound, 0.0, rtol=0, atol=slack)
    full = cache.cross(X)
    ref = X.T @ torch.linalg.solve(K, X)
    # the gap is a PSD form: |entry error| <= sqrt(bound_i bound_j)
    gap = (ref - full).abs()
    assert bool((gap <= torch.sqrt(bound[:, None] * bound[None, :]) + slack).all())


def test_bound_is_close_to_the_true_error():
    """A bound that certifies nothing is useless: on a smooth kernel it is close to the real
    gap. Measured here (n = 400, 60 landmarks): the largest bound 1.16x the largest error
    (4.1e-5 of the prior variance), the median bound 1.07x the median error; 2x leaves room for
    other BLAS builds."""
    A, X = _problem(400, 60, length_scale=1.0)
    cache, K = _cache(A, 60)
    exact = (X * torch.linalg.solve(K, X)).sum(0)
    quad, bound = cache.quadratic(X)
    error = exact - quad
    assert float(bound.max()) <= 2.0 * float(error.max())
    assert float(bound.median()) <= 2.0 * float(error.median())
    assert float(bound.max()) < 1e-3 * (1.0 + NOISE)  # every point certified at cg_tol 1e-3


def _fit(kernel, n, cg_tol, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2.0, 2.0, (n, 2))
    y = np.sin(2.0 * X[:, 0]) + 0.1 * rng.standard_normal(n)
    Xt = rng.uniform(-2.5, 2.5, (30, 2))
    ours = kk.GaussianProcessRegressor(kernel, optimizer=None, device="cpu", exact_max_n=0,
                                       cg_tol=cg_tol, preconditioner_rank=20,
                                       random_state=0).fit(X, y)
    return ours, SklearnGPR(kernel, optimizer=None).fit(X, y), Xt


def _count_cg_columns(monkeypatch):
    calls = []
    original = R.solve_columns

    def spy(op, params, Z, settings, probes, keep):
        calls.append(Z.shape[0])
        return original(op, params, Z, settings, probes, keep)

    monkeypatch.setattr(R, "solve_columns", spy)
    return calls


@pytest.mark.parametrize("kernel, cg_tol", [
    (C(1.0) * RBF(1.0) + W(0.05), 1e-3), (C(1.0) * RBF(1.0) + W(0.05), 1e-6),
    (C(1.0) * Matern(0.5, nu=0.5) + W(0.01), 1e-3)], ids=["smooth", "smooth-tight", "rough"])
def test_predictive_variance_within_cg_tol_of_sklearn(monkeypatch, kernel, cg_tol):
    """Certified points from the cache, the others by CG: every variance within cg_tol times
    the prior variance of scikit-learn's (the contract), the covariance likewise. 60 landmarks
    for n = 160, so the cache is not trivially exact: the smooth kernel's points are all
    certified at 1e-3, the rough kernel's need CG."""
    monkeypatch.setattr(R, "VARIANCE_RANK", 60)
    calls = _count_cg_columns(monkeypatch)
    ours, ref, Xt = _fit(kernel, 160, cg_tol)
    _, std = ours.predict(Xt, return_std=True)
    _, ref_std = ref.predict(Xt, return_std=True)
    prior = kernel.diag(Xt)
    np.testing.assert_array_less(np.abs(std**2 - ref_std**2), cg_tol * prior)
    assert ours._variance_cache is not None and ours._variance_cache.rank == 60
    if kernel.k1.k2.__class__ is RBF and cg_tol == 1e-3:
        assert calls == []  # every point certified: no CG at all
    if kernel.k1.k2.__class__ is Matern:
        assert sum(calls) > 0  # the bound sent points to CG
    _, cov = ours.predict(Xt[:10], return_cov=True)
    _, ref_cov = ref.predict(Xt[:10], return_cov=True)
    np.testing.assert_allclose(cov, ref_cov, rtol=0, atol=cg_tol * prior.max())


def _count_cache_builds(monkeypatch):
    """The n of every SubspaceCache built."""
    builds = []
    original = SubspaceCache.__init__

    def spy(self, U, KU, lambda_min):
        builds.append(U.shape[0])
        original(self, U, KU, lambda_min)

    monkeypatch.setattr(SubspaceCache, "__init__", spy)
    return builds


def test_cache_is_built_by_fit_and_used_by_predict(monkeypatch):
    """fit builds the cache once (so no prediction waits for it); predictions reuse it; a refit
    builds a new one; a model without it (unpickled) builds it at its first variance request."""
    builds = _count_cache_builds(monkeypatch)
    ours, _, Xt = _fit(C(1.0) * RBF(1.0) + W(0.05), 120, 1e-3)
    first = ours._variance_cache
    assert first is not None and builds == [120]
    ours.predict(Xt, return_std=True)
    ours.predict(Xt, return_cov=True)
    assert ours._variance_cache is first and builds == [120]
    ours.fit(ours.X_train_, ours.y_train_ + 1.0)
    assert ours._variance_cache is not first and builds == [120, 120]
    ours._variance_cache = None  # as after unpickling
    _, std = ours.predict(Xt, return_std=True)
    assert ours._variance_cache is not None and builds == [120, 120, 120]


def test_pretraining_fit_builds_no_cache(monkeypatch):
    """The pretraining subset's fit only gives the optimiser a start: only the full data's
    cache is built."""
    builds = _count_cache_builds(monkeypatch)
    rng = np.random.default_rng(0)
    X = rng.uniform(-2.0, 2.0, (300, 2))
    y = np.sin(2.0 * X[:, 0]) + 0.1 * rng.standard_normal(300)
    kk.GaussianProcessRegressor(C(1.0) * RBF(1.0) + W(0.05), device="cpu", exact_max_n=0,
                                preconditioner_rank=20, pretrain_size=100, optimizer_max_iter=3,
                                random_state=0).fit(X, y)
    assert builds == [300]


@pytest.mark.parametrize("free_gb, preconditioner_rank, want", [
    (75, "auto", 2048), (20, "auto", 642), (20, 700, 700), (0, "auto", 268)])
def test_variance_rank_follows_the_free_gpu_memory(monkeypatch, free_gb, preconditioner_rank,
                                                   want):
    """At n = 1e6: VARIANCE_RANK = 2048 where 0.9 of the free memory holds 3.5 n x k float64
    matrices (75 GB: 2410 columns), fewer below (20 GB: 0.9 * 20e9 / (3.5 * 8 * 1e6) = 642),
    never below the CPU's 2^28 // n = 268, and at least an integer preconditioner rank."""
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (free_gb * 10**9, 0))
    n = 10**6
    assert R.variance_rank(n, "cpu", "auto") == 268
    assert R.variance_rank(n, "cuda", preconditioner_rank) == want
    assert R.variance_rank(500, "cuda", "auto") == 500
