"""The pieces under kernelkit.KernelRidge against dense NumPy linear algebra: multi-RHS CG, the
low-rank Nyström preconditioner, and the Nyström (Falkon) normal equations."""

import numpy as np
import pytest
import torch
from sklearn.metrics.pairwise import rbf_kernel

from kernelkit import KernelRidge
from kernelkit.linalg.cg import conjugate_gradient
from kernelkit.operators.kernel_operator import KernelOperator
from kernelkit.linalg.falkon import nystrom_preconditioner
from kernelkit.linalg.precond import cholesky_jitter


def _spd(rng, n, cond):
    Q, _ = np.linalg.qr(rng.normal(size=(n, n)))
    return (Q * np.geomspace(1.0, 1.0 / cond, n)) @ Q.T


@pytest.mark.parametrize("jacobi", [False, True], ids=["plain", "jacobi"])
def test_cg_solves_several_right_hand_sides(rng, jacobi):
    n = 60
    A = _spd(rng, n, 1e4)
    A += np.diag(rng.uniform(0.0, 5.0, n))  # unequal diagonal: Jacobi helps
    B = rng.normal(size=(n, 3))
    B[:, 1] = 0.0
    At, Bt = torch.from_numpy(A), torch.from_numpy(B)
    d = torch.from_numpy(np.diag(A).copy())
    res = conjugate_gradient(lambda P: At @ P, Bt, tol=1e-12, max_iter=500,
                             precond=(lambda R: R / d[:, None]) if jacobi else None)
    assert res.converged and not res.breakdown
    x = res.x.numpy()
    assert np.all(x[:, 1] == 0.0)
    # relative residual <= 1e-12 and cond(A) <= 1e4 x 6: forward error <= 1e-12 * cond
    np.testing.assert_allclose(x, np.linalg.solve(A, B), rtol=0, atol=1e-12 * 1e5 * np.abs(x).max())
    assert res.residuals[0] == 1.0 and res.residuals.shape == (res.n_iter + 1,)
    assert res.residuals[-1] <= 1e-12


def test_cg_reports_breakdown_on_indefinite_matrix(rng):
    A = torch.from_numpy(np.diag([1.0, 2.0, -3.0]))
    B = torch.ones((3, 1), dtype=torch.float64)
    res = conjugate_gradient(lambda P: A @ P, B, tol=1e-10, max_iter=10)
    assert res.breakdown and not res.converged


def test_cholesky_jitter_handles_singular_matrix():
    v = torch.tensor([[1.0], [2.0], [3.0]], dtype=torch.float64)
    L, shift = cholesky_jitter(v @ v.T, 0.0)  # rank one
    assert shift > 0
    np.testing.assert_allclose((L @ L.T).numpy(), (v @ v.T).numpy() + shift * np.eye(3),
                               rtol=0, atol=1e-12)


@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
def test_nystrom_preconditioner_is_the_inverse_of_p(rng, weighted):
    X = rng.uniform(-1.0, 1.0, size=(80, 2))
    idx = np.arange(0, 80, 8)  # 10 well-spread landmarks: K_MM well conditioned
    gamma, alphas = 2.0, np.array([0.05, 0.3, 0.05])  # one ridge per column, two distinct
    w = rng.uniform(0.0, 3.0, size=80) if weighted else np.ones(80)
    op = KernelOperator("rbf", {"gamma": gamma}, "cpu")
    sw = torch.from_numpy(np.sqrt(w))[:, None] if weighted else None
    pre = nystrom_preconditioner(op, (X, X[idx]), torch.from_numpy(alphas), sw)
    Knm = np.sqrt(w)[:, None] * rbf_kernel(X, X[idx], gamma=gamma)
    Kmm = rbf_kernel(X[idx], gamma=gamma)
    V = rng.normal(size=(80, 3))
    got = pre(torch.from_numpy(V)).numpy()
    for j, alpha in enumerate(alphas):
        P = Knm @ np.linalg.solve(Kmm, Knm.T) + alpha * np.eye(80)
        # cond(K_MM) ~ 1e3 and the jitter is 10 * eps * mean(diag): agreement to ~1e-12 relative
        np.testing.assert_allclose(got[:, j], np.linalg.solve(P, V[:, j]), rtol=1e-9, atol=1e-9)


def test_nystrom_solver_solves_the_normal_equations(rng):
    X = rng.uniform(-2.0, 2.0, size=(200, 3))
    y = np.sin(X[:, 0]) + X[:, 1] * X[:, 2]
    gamma, alpha = 0.5, 0.1
    model = KernelRidge(alpha=alpha, gamma=gamma, solver="nystrom", n_components=30, tol=1e-12,
                        device="cpu", random_state=3).fit(X, y)
    Z = X[model.landmark_indices_]
    Knm = rbf_kernel(X, Z, gamma=gamma)
    H = Knm.T @ Knm + alpha * rbf_kernel(Z, gamma=gamma)
    beta = np.linalg.solve(H, Knm.T @ y)
    np.testing.assert_array_equal(model.X_fit_, Z)
    # compare the fitted functions (beta itself is ill-determined along K_MM's small eigenvalues)
    np.testing.assert_allclose(Knm @ model.dual_coef_, Knm @ beta, rtol=0, atol=1e-7)
