"""kernelkit.KernelRidge(solver="nystrom") with finite-rank kernels (linear, polynomial), with
fewer landmarks than the kernel's rank, as many, and more: K_MM is then singular, and the Falkon
system must still be positive definite and solved by CG to ``tol`` (issue 37, N8: with M above
the rank CG stalled, the dense fallback took the least-squares branch with a false "Singular
matrix" warning, and the predictions were 7.5e-6 away from scikit-learn's). On the CPU the
landmarks in the numerical span of the others are dropped, so as many as the rank are kept
(and one of each repeated point, for any kernel).

With M >= rank the landmarks span the kernel's feature space, so the Nyström model is the exact
kernel ridge model: the reference is scikit-learn's dense KernelRidge. With M < rank it is the
Nyström model itself, from the dense normal equations in NumPy.

Tolerance, from the conditioning of what is compared. With H = K_Mn K_nM + alpha K_MM, b = K_Mn y
and the Falkon preconditioner P = (n / M) K_MM^2 + alpha K_MM (jitters aside), CG stops on the
preconditioned residual r, ||r|| <= tol ||c|| with ||c||^2 = b^T P^{-1} b. The coefficients'
error is e = H^{-1} F r with F F^T = P (F = L A in the code), so a prediction k(x, Z)^T e
errs by at most sqrt(k^T H^{-1} P H^{-1} k) tol ||c|| <= sqrt(k^T H^{-1} k) tol ||y|| sqrt(kappa),
kappa the condition number of the pencil (H, P) on the range of K_MM (b^T H^{-1} b <= ||y||^2).
The reference's own float64 error adds eps64 cond times its largest prediction, cond that of the
matrix it factors (K + alpha I for scikit-learn, H for the NumPy Nyström model). The same kappa
bounds CG's steps: 1/2 sqrt(kappa) ln(2 sqrt(kappa) / tol) for the residual to fall by tol.
"""

import math
import warnings

import numpy as np
import pytest
import scipy.linalg
from sklearn.kernel_ridge import KernelRidge as SKKernelRidge
from sklearn.metrics.pairwise import pairwise_kernels

from kernelkit import KernelRidge

EPS64 = float(np.finfo(np.float64).eps)
N, D, ALPHA, TOL = 300, 4, 1e-2, 1e-8
# (kernelkit/scikit-learn kernel name, parameters, rank in D = 4 features: C(D + degree, D))
KERNELS = {
    "linear": ("linear", {}, 4),
    "poly2": ("poly", dict(degree=2, gamma=0.25, coef0=1.0), 15),
    "poly3": ("poly", dict(degree=3, gamma=0.25, coef0=1.0), 35),
}
LANDMARKS = {"below": lambda r: r // 2, "rank": lambda r: r, "above": lambda r: 2 * r,
             "all": lambda r: N}


def _data(rng):
    X = rng.uniform(-2.0, 2.0, size=(N, D))
    y = np.sin(1.5 * X[:, 0]) * np.cos(X[:, 1]) + 0.3 * X[:, -1] + 0.05 * rng.normal(size=N)
    return X, y, rng.uniform(-2.0, 2.0, size=(50, D))


def _range(K, m):
    """Orthonormal basis of the numerical range of the PSD matrix K (eigenvalues above
    m eps64 times the largest)."""
    lam, V = np.linalg.eigh(K)
    return V[:, lam > m * EPS64 * lam[-1]]


def _check_against(model, X, y, Xt, ref, cond, **sk):
    """``model``'s predictions at Xt against ``ref`` (the exact model's, from a float64
    factorisation of a matrix of condition number ``cond``), and its CG steps, within the
    bounds of the module docstring."""
    Z = X[model.landmark_indices_]
    np.testing.assert_array_equal(model.X_fit_, Z)
    Knm, Kmm, Ktm = (pairwise_kernels(A, B, **sk) for A, B in ((X, Z), (Z, Z), (Xt, Z)))
    Q = _range(Kmm, len(Z))
    Hq = Q.T @ (Knm.T @ Knm + ALPHA * Kmm) @ Q
    pencil = scipy.linalg.eigh(Hq, Q.T @ ((len(X) / len(Z)) * Kmm @ Kmm + ALPHA * Kmm) @ Q,
                               eigvals_only=True)
    kappa = pencil[-1] / pencil[0]
    # k^T H^{-1} k for each test point, on the range of K_MM (where k(x, Z) lies)
    kq = Ktm @ Q
    spread = np.sqrt(np.einsum("ij,ij->i", kq, np.linalg.solve(Hq, kq.T).T)).max()
    bound = spread * TOL * np.linalg.norm(y) * math.sqrt(kappa) + EPS64 * cond * np.abs(ref).max()
    np.testing.assert_allclose(model.predict(Xt), ref, rtol=0, atol=bound)
    assert not model.dense_fallback_ and model.residuals_[-1] <= TOL
    # CG converged, in no more steps than its convergence bound at this conditioning
    # (measured 4 to 65; before the fix, M above the rank stopped after 7 to 13 steps above tol)
    assert model.n_iter_ <= 0.5 * math.sqrt(kappa) * math.log(2 * math.sqrt(kappa) / TOL)


def _fit(X, y, **params):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "Singular matrix", no ConvergenceWarning
        return KernelRidge(alpha=ALPHA, solver="nystrom", tol=TOL, device="cpu", random_state=0,
                           **params).fit(X, y)


@pytest.mark.parametrize("where", list(LANDMARKS))
@pytest.mark.parametrize("kernel", list(KERNELS))
def test_finite_rank_kernel_matches_the_exact_model_without_fallback(rng, kernel, where):
    name, params, rank = KERNELS[kernel]
    m = LANDMARKS[where](rank)
    X, y, Xt = _data(rng)
    model = _fit(X, y, kernel=name, n_components=m, **params)
    # the landmarks kept span the feature space when M >= rank: as many as the rank
    assert model.n_components_ == min(m, rank) == len(model.landmark_indices_)
    sk = dict(metric="linear" if name == "linear" else "polynomial", **params)
    Z = X[model.landmark_indices_]
    assert np.linalg.matrix_rank(pairwise_kernels(Z, **sk)) == min(m, rank)
    if m >= rank:
        ref = SKKernelRidge(alpha=ALPHA, kernel=name, **params).fit(X, y).predict(Xt)
        cond = np.linalg.cond(pairwise_kernels(X, **sk) + ALPHA * np.eye(N))
    else:
        Knm = pairwise_kernels(X, Z, **sk)
        H = Knm.T @ Knm + ALPHA * pairwise_kernels(Z, **sk)
        ref = pairwise_kernels(Xt, Z, **sk) @ np.linalg.solve(H, Knm.T @ y)
        cond = np.linalg.cond(H)
    _check_against(model, X, y, Xt, ref, cond, **sk)


def test_repeated_points_are_one_landmark(rng):
    """Every point twice (a singular K_MM for any kernel): with all 2 x 100 points as landmarks
    one of each pair is kept, and the model is scikit-learn's."""
    X, y, Xt = _data(rng)
    X, y = np.vstack([X[:100], X[:100]]), np.concatenate([y[:100], y[:100]])
    model = _fit(X, y, kernel="rbf", gamma=0.5, n_components=200)
    assert model.n_components_ == 100
    np.testing.assert_array_equal(np.unique(model.landmark_indices_ % 100), np.arange(100))
    ref = SKKernelRidge(alpha=ALPHA, kernel="rbf", gamma=0.5).fit(X, y).predict(Xt)
    cond = np.linalg.cond(pairwise_kernels(X, metric="rbf", gamma=0.5) + ALPHA * np.eye(200))
    _check_against(model, X, y, Xt, ref, cond, metric="rbf", gamma=0.5)


@pytest.mark.parametrize("kernel", list(KERNELS))
def test_falkon_system_ridge_is_positive_definite_above_the_rank(rng, kernel):
    """One cause of the stall: the system's ridge K_MM + s_sys I must be positive definite in
    float64 although K_MM is singular (the Falkon system built on all N points as landmarks,
    none dropped, M = N > rank); with s_sys = eps64 mean(diag K_MM) it had eigenvalues down to
    -50 s_sys (degree 2)."""
    import torch

    from kernelkit.operators.kernel_operator import KernelOperator
    from kernelkit.linalg.falkon import FalkonSystem

    name, params, _ = KERNELS[kernel]
    X, _, _ = _data(rng)
    op = KernelOperator("polynomial" if name == "poly" else name, params, "cpu")
    Xe = op.exact_data(X)
    system = FalkonSystem(op, (Xe, Xe), (Xe, Xe), torch.tensor([ALPHA], dtype=torch.float64),
                          None, np.arange(N))
    ridge = system.Kmm + system.system_shift * torch.eye(N, dtype=torch.float64)
    assert int(torch.linalg.cholesky_ex(ridge).info) == 0
    assert system.system_shift <= system.shift
