"""The iterative path's predictive-variance cache (LOVE: Lanczos, with a certified error bound).

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
from kernelkit.gp import regressor as R
from kernelkit.solvers._lanczos import LanczosCache, lanczos


def _spd(n, noise, seed=0):
    """K = RBF(X, X) + noise I for 2-D points (a fast-decaying spectrum, as a GP's)."""
    X = np.random.default_rng(seed).uniform(-2.0, 2.0, (n, 2))
    K = RBF(0.7)(X) + noise * np.eye(n)
    return torch.as_tensor(K)


@pytest.mark.parametrize("k", [5, 40, 80])
def test_lanczos_is_a_tridiagonalisation(k):
    K = _spd(80, 1e-2)
    b = torch.ones(80, dtype=torch.float64)
    Q, T, beta, q_next = lanczos(lambda V: K @ V, b, k)
    k = Q.shape[1]
    # orthonormal to working precision thanks to full reorthogonalisation (measured 2e-15)
    np.testing.assert_allclose(Q.T @ Q, np.eye(k), rtol=0, atol=1e-12)
    # K Q = Q T + beta q_{k+1} e_k^T, to round-off of ||K|| ~ 30 (measured 1e-14)
    E = torch.zeros(k, dtype=torch.float64)
    E[-1] = 1.0
    np.testing.assert_allclose(K @ Q, Q @ T + beta * q_next[:, None] * E[None, :], rtol=0,
                               atol=1e-11)


@pytest.mark.parametrize("k", [10, 30, 80])
def test_cache_bounds_the_exact_quadratic_form(k):
    """a^T T^{-1} a <= x^T K^{-1} x <= a^T T^{-1} a + bound, for columns x of kernel values."""
    K = _spd(80, 1e-2)
    cache = LanczosCache(lambda V: K @ V, K @ torch.ones(80, dtype=torch.float64), k, 1e-2)
    X = torch.as_tensor(RBF(0.7)(np.random.default_rng(1).uniform(-2, 2, (80, 2)),
                                 np.random.default_rng(2).uniform(-2, 2, (30, 2))))
    exact = (X * torch.linalg.solve(K, X)).sum(0)
    quad, bound = cache.quadratic(X)
    slack = 1e-10 * exact.abs().max()  # round-off of the solves (cond(K) ~ 3e3)
    assert bool((quad <= exact + slack).all())
    assert bool((exact <= quad + bound + slack).all())
    if cache.rank == 80:  # a full tridiagonalisation is exact
        np.testing.assert_allclose(quad, exact, rtol=0, atol=slack)


def _fit(kernel, n, cg_tol, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2.0, 2.0, (n, 2))
    y = np.sin(2.0 * X[:, 0]) + 0.1 * rng.standard_normal(n)
    Xt = rng.uniform(-2.5, 2.5, (30, 2))
    ours = kk.GaussianProcessRegressor(kernel, optimizer=None, device="cpu", exact_max_n=0,
                                       cg_tol=cg_tol, random_state=0).fit(X, y)
    return ours, SklearnGPR(kernel, optimizer=None).fit(X, y), Xt


def _count_cg_columns(monkeypatch):
    calls = []
    original = R.GaussianProcessRegressor._solve_test_columns

    def spy(self, op, params, Z, settings, keep):
        calls.append(Z.shape[0])
        return original(self, op, params, Z, settings, keep)

    monkeypatch.setattr(R.GaussianProcessRegressor, "_solve_test_columns", spy)
    return calls


@pytest.mark.parametrize("kernel, cg_tol", [
    (C(1.0) * RBF(1.0) + W(0.05), 1e-3), (C(1.0) * RBF(1.0) + W(0.05), 1e-6),
    (C(1.0) * Matern(0.5, nu=0.5) + W(0.01), 1e-3)], ids=["smooth", "smooth-tight", "rough"])
def test_predictive_variance_within_cg_tol_of_sklearn(monkeypatch, kernel, cg_tol):
    """Certified points from the cache, the others by CG: every variance within cg_tol times
    the prior variance of scikit-learn's (the contract), the covariance likewise. 60 Lanczos
    steps for n = 160, so the cache is not trivially exact: the smooth kernel's points are all
    certified at 1e-3, the rough kernel's need CG."""
    monkeypatch.setattr(R, "LOVE_MAX_RANK", 60)
    calls = _count_cg_columns(monkeypatch)
    ours, ref, Xt = _fit(kernel, 160, cg_tol)
    _, std = ours.predict(Xt, return_std=True)
    _, ref_std = ref.predict(Xt, return_std=True)
    prior = kernel.diag(Xt)
    np.testing.assert_array_less(np.abs(std**2 - ref_std**2), cg_tol * prior)
    assert ours._love is not None and ours._love.rank == 60  # the cache was built
    if kernel.k1.k2.__class__ is RBF and cg_tol == 1e-3:
        assert calls == []  # every point certified: no CG at all
    if kernel.k1.k2.__class__ is Matern:
        assert sum(calls) > 0  # the bound sent points to CG
    _, cov = ours.predict(Xt[:10], return_cov=True)
    _, ref_cov = ref.predict(Xt[:10], return_cov=True)
    np.testing.assert_allclose(cov, ref_cov, rtol=0, atol=cg_tol * prior.max())


def test_cache_is_rebuilt_by_fit():
    ours, _, Xt = _fit(C(1.0) * RBF(1.0) + W(0.05), 120, 1e-3)
    ours.predict(Xt, return_std=True)
    first = ours._love
    ours.fit(ours.X_train_, ours.y_train_ + 1.0)
    assert ours._love is None
    ours.predict(Xt, return_std=True)
    assert ours._love is not first
