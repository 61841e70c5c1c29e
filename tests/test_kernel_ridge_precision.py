"""kernelkit.KernelRidge's precision contract and its hard cases, against independent exact
references (scikit-learn's KernelRidge, or residuals recomputed here in float64 with
scikit-learn's kernel values):

- the reported residual is the true ||y - (K + alpha I) a|| / ||y||, and float32 products
  reach ``tol`` by iterative refinement (issue 17 item 3, issue 18 "tol" docstring);
- the Falkon system with M = n on the float32 path, for a finite-rank kernel (issue 18 M);
- a ridge far below K's float64 resolution (issue 18 L): the dense fallback gives
  scikit-learn's model; where no fallback fits, a clear error, never a zero model.

The Triton tests run under the interpreter on the CPU (``kernel_operator.TRITON_ON_CPU``), or on a
GPU with ``pytest --device cuda``; their sizes are small because the interpreter runs every
program of a launch in turn (0.3-0.6 s per product at n = 100-200).
"""

import warnings

import numpy as np
import pytest
import torch
from sklearn.exceptions import ConvergenceWarning
from sklearn.kernel_ridge import KernelRidge as SKKernelRidge
from sklearn.metrics.pairwise import pairwise_kernels

from kernelkit import KernelRidge
from kernelkit.operators import kernel_operator
from kernelkit.estimators import kernel_ridge
from kernelkit.linalg.cg import conjugate_gradient

EPS32 = 2.0**-24  # unit roundoff of float32


def _data(rng, n, d=3):
    X = rng.uniform(-2.0, 2.0, size=(n, d))
    return X, np.sin(X[:, 0]) + X[:, 1] * X[:, 2] + 0.05 * rng.normal(size=n)


def _true_residual(X, y, coef, alpha, **kernel):
    """||y - (K + alpha I) a|| / ||y|| in float64 with scikit-learn's kernel values."""
    K = pairwise_kernels(X, **kernel)
    return np.linalg.norm(y - K @ coef - alpha * coef) / np.linalg.norm(y)


def _float32_prediction_bound(Xt, model, **kernel):
    """10 eps32 max_x sum_j |k(x, c_j) a_j|: a float32 kernel product's rounding (measured
    1.3-1.4 eps32 times that sum for the models below)."""
    Kt = pairwise_kernels(Xt, model.X_fit_, **kernel)
    return 10 * EPS32 * (np.abs(Kt) * np.abs(model.dual_coef_)).sum(axis=1).max()


@pytest.fixture
def triton_device(device, monkeypatch):
    """The device for a KernelRidge on the Triton path (float32 products), CPU or GPU."""
    if device == "cpu":
        monkeypatch.setattr(kernel_operator, "TRITON_ON_CPU", True)
    return device


# ---------------------------------------------------------------------- the true residual
def test_cg_reports_the_true_residual_and_refines_inexact_products(rng):
    """A matvec with float32 rounding (the GPU's products) and a float64 exact_matvec: the
    reported residual is the float64 one of the returned x, and refinement reaches tol."""
    n = 80
    Q, _ = np.linalg.qr(rng.normal(size=(n, n)))
    A = (Q * np.geomspace(1.0, 1e-3, n)) @ Q.T
    B = rng.normal(size=(n, 2))
    At = torch.from_numpy(A)

    def rounded(P):  # A P with float32 values of A and P, summed in float32
        return (At.to(torch.float32) @ P.to(torch.float32)).to(torch.float64)

    res = conjugate_gradient(rounded, torch.from_numpy(B), tol=1e-12, max_iter=2000,
                             exact_matvec=lambda P: At @ P)
    x = res.x.numpy()
    true = (np.linalg.norm(B - A @ x, axis=0) / np.linalg.norm(B, axis=0)).max()
    assert res.converged and true <= 1e-12
    # the reported figure is that residual, up to the rounding of computing it in float64:
    # ~n eps ||A|| ||x|| / ||b|| ~ 1e-14 here (BLAS summation orders differ: measured 1.5e-15
    # between this machine and a 16-core GPU host)
    np.testing.assert_allclose(res.residuals[-1], true, rtol=1e-3, atol=1e-14)
    # cond(A) = 1e3 and a relative residual of 1e-12: forward error <= 1e-9 relative
    np.testing.assert_allclose(x, np.linalg.solve(A, B), rtol=0, atol=1e-9 * np.abs(x).max())


def test_cg_without_refinement_gain_goes_on_with_exact_products(rng):
    """Products too far from the exact operator for refinement to gain (half the spectrum
    scaled by 0.4: each step multiplies that part of the error by 1 - 1 / 0.4 = -1.5): after
    the first refinement step that fails to halve the true residual, CG takes the exact
    products (``exact_from``), converges to tol against the dense A, and reports that residual.
    (Until 2026-11-26i it stopped there unconverged, at a true residual above 0.1.)"""
    n = 40
    Q, _ = np.linalg.qr(rng.normal(size=(n, n)))
    lam = np.geomspace(1.0, 1e-2, n)
    A = (Q * lam) @ Q.T
    wrong = torch.from_numpy((Q * (lam * np.where(np.arange(n) % 2, 0.4, 1.0))) @ Q.T)
    b = torch.from_numpy(rng.normal(size=(n, 1)))
    At = torch.from_numpy(A)
    res = conjugate_gradient(lambda P: wrong @ P, b, tol=1e-10, max_iter=5000,
                             exact_matvec=lambda P: At @ P)
    true = float(np.linalg.norm(b.numpy() - A @ res.x.numpy()) / np.linalg.norm(b.numpy()))
    assert res.converged and not res.breakdown and res.exact_from is not None
    assert res.exact_from < 200 and res.residuals[res.exact_from] > 0.1  # where it switched
    assert true <= 1e-10
    # both are b - A x in float64 at 1e-10 of ||b||: they differ by rounding (eps cond ~ 1e-14)
    np.testing.assert_allclose(res.residuals[-1], true, rtol=1e-3)


@pytest.mark.usefixtures("triton_can_run")
def test_float32_path_reaches_tol_by_refinement(rng, triton_device, monkeypatch):
    """tol = 1e-10 is below the float32 products' floor (before refinement the recurrence said
    4.7e-11 while the true residual was 1.1e-7, without a warning)."""
    monkeypatch.setattr(kernel_ridge, "DENSE_MAX", 0)  # the iterative path alone must get there
    n = 100 if triton_device == "cpu" else 3000
    X, y = _data(rng, n)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = KernelRidge(alpha=0.1, gamma=0.5, n_components=30, tol=1e-10, solver="cg",
                            device=triton_device, random_state=0).fit(X, y)
    true = _true_residual(X, y, model.dual_coef_, 0.1, metric="rbf", gamma=0.5)
    assert true <= 1e-10
    # the reported residual is that one, recomputed here from scikit-learn's kernel values (the
    # two float64 evaluations of a residual of 1e-10 ||y|| differ by ~1e-16 ||K|| ||a||)
    np.testing.assert_allclose(model.residuals_[-1], true, rtol=1e-3)


@pytest.mark.usefixtures("triton_can_run")
def test_float32_path_warns_with_the_true_residual(rng, triton_device, monkeypatch):
    """A ridge of 1e-7 next to ||K|| ~ n: float32 products cannot approximate K + alpha I well
    enough for refinement to gain (relative error 1e-7 times cond 1e9), and n is over the dense
    limit: the ConvergenceWarning quotes the true residual, which is the one reported."""
    monkeypatch.setattr(kernel_ridge, "DENSE_MAX", 0)
    X, y = _data(rng, 60)
    model = KernelRidge(alpha=1e-7, gamma=0.5, n_components=20, tol=1e-12, max_iter=40,
                        solver="cg", device=triton_device, random_state=0)
    with pytest.warns(ConvergenceWarning, match="true relative residual"):
        model.fit(X, y)
    true = _true_residual(X, y, model.dual_coef_, 1e-7, metric="rbf", gamma=0.5)
    assert true > 1e-12
    np.testing.assert_allclose(model.residuals_[-1], true, rtol=1e-3)


# ---------------------------------------------------------------- issue 18 M: Falkon, M = n
@pytest.mark.usefixtures("triton_can_run")
@pytest.mark.parametrize("solver", ["nystrom", "cg"])
def test_finite_rank_kernel_with_all_landmarks_on_the_float32_path(rng, triton_device,
                                                                    monkeypatch, solver):
    """Degree-3 polynomial in 3 features (rank 20) with M = n = 60 landmarks, float32 K_nM.
    The jitter of K_MM must be of the float32 products' size (it was float64's: "nystrom" hit
    max_iter at error 1.8 here; "cg" needed 187 iterations, now 3)."""
    monkeypatch.setattr(kernel_ridge, "DENSE_MAX", 0)  # no dense rescue: CG itself converges
    X, y = _data(rng, 60)
    kernel = dict(kernel="polynomial", degree=3, gamma=0.5, coef0=1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = KernelRidge(alpha=0.1, solver=solver, n_components=60, tol=1e-8, max_iter=200,
                            device=triton_device, random_state=0, **kernel).fit(X, y)
    assert model.n_iter_ <= 20  # measured 10 (nystrom: two refinement steps), 3 (cg)
    ref = SKKernelRidge(alpha=0.1, **kernel).fit(X, y)
    sk_kernel = dict(metric="polynomial", degree=3, gamma=0.5, coef0=1.0)
    # M = n: the Nystrom model is the exact one up to the jitter (relative 60 eps32 of K_MM's
    # diagonal); the rest is predict's float32 product (measured 1.4 eps32 sum |k a|)
    bound = _float32_prediction_bound(X, model, **sk_kernel)
    np.testing.assert_allclose(model.predict(X), ref.predict(X), rtol=0, atol=bound)


# ------------------------------------------------------------------ issue 18 L: tiny alpha
@pytest.mark.parametrize("alpha", [1e-300, 1e-100])
def test_tiny_alpha_gives_sklearn_model(rng, alpha):
    """CG cannot solve K + 1e-300 I (it broke down at once and returned a zero model, train R^2
    -0.003; at 1e-100 R^2 0.04): the dense float64 fallback solves it as scikit-learn does."""
    X, y = _data(rng, 300, d=4)
    Xt = rng.uniform(-2.0, 2.0, size=(50, 4))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = KernelRidge(alpha=alpha, gamma=0.3, solver="cg", n_components=60,
                            device="cpu", random_state=0).fit(X, y)
    ref = SKKernelRidge(alpha=alpha, kernel="rbf", gamma=0.3).fit(X, y)
    assert model.dense_fallback_
    # both solve K a = y by a float64 Cholesky factorisation; K is near singular, so the
    # coefficients are ill-determined, but the predictions agree to ~cond(K) eps |y| on this
    # data (measured 3e-12 at the training points, 1e-11 at new points)
    np.testing.assert_allclose(model.predict(X), ref.predict(X), rtol=0, atol=1e-10)
    np.testing.assert_allclose(model.predict(Xt), ref.predict(Xt), rtol=0, atol=1e-10)
    assert model.score(X, y) > 1 - 1e-12


def test_singular_system_falls_back_to_least_squares_as_sklearn(rng):
    """Duplicated rows with inconsistent targets and a ridge below K's resolution: Cholesky
    fails and the minimum-norm least-squares solution is used, with scikit-learn's warning.
    The least-squares optimum is known exactly: the mean target on each duplicated pair (so a
    residual of 0.05 on each of its 20 points) and the target itself on the other 30."""
    X, y = _data(rng, 40)
    X = np.vstack([X, X[:10]])
    y = np.concatenate([y, y[:10] + 0.1])
    with pytest.warns(UserWarning, match="Singular matrix") as ours:
        model = KernelRidge(alpha=1e-300, gamma=0.5, solver="cg", device="cpu",
                            random_state=0).fit(X, y)
    with pytest.warns(UserWarning, match="Singular matrix"):
        ref = SKKernelRidge(alpha=1e-300, kernel="rbf", gamma=0.5).fit(X, y)
    assert model.dense_fallback_ and len([w for w in ours if "Singular" in str(w.message)]) == 1
    optimum = np.concatenate([y[:10] + 0.05, y[10:40], y[:10] + 0.05])
    # gelsd with the n eps cut-off: the rank-deficient part is cut cleanly (measured 7e-14;
    # 1e-9 leaves room for cond(K restricted to its kept range) ~1e5 times eps |y|)
    np.testing.assert_allclose(model.predict(X), optimum, rtol=0, atol=1e-9)
    # scikit-learn's own answer reaches the same least-squares residual to 3e-4 relative here and
    # 3.5e-3 on a 16-core GPU host (its eps cut-off keeps rounding-level directions, so its answer
    # depends on the BLAS; see _dense.shifted_solve): 2e-2
    np.testing.assert_allclose(np.linalg.norm(ref.predict(X) - y),
                               np.linalg.norm(model.predict(X) - y), rtol=2e-2)


@pytest.mark.usefixtures("triton_can_run")
def test_tiny_alpha_on_the_float32_path_gives_sklearn_model(rng, triton_device):
    X, y = _data(rng, 60)
    with warnings.catch_warnings():
        # (not "error" for every warning: under the interpreter NumPy warns about the NaN that
        # the preconditioner's division by 1e-300 feeds the kernels, before CG breaks down)
        warnings.simplefilter("error", ConvergenceWarning)
        warnings.simplefilter("error", UserWarning)
        model = KernelRidge(alpha=1e-300, gamma=0.3, n_components=20, solver="cg",
                            device=triton_device, random_state=0).fit(X, y)
    ref = SKKernelRidge(alpha=1e-300, kernel="rbf", gamma=0.3).fit(X, y)
    assert model.dense_fallback_
    # the dense fallback factors float64 kernel values on every device; predict's product is
    # float32 (the bound's derivation is in _float32_prediction_bound)
    bound = _float32_prediction_bound(X, model, metric="rbf", gamma=0.3)
    np.testing.assert_allclose(model.predict(X), ref.predict(X), rtol=0, atol=bound)


def test_breakdown_beyond_the_dense_limit_is_an_error(rng, monkeypatch):
    """Where no dense fallback fits, CG's breakdown is an error naming alpha, not a warning
    next to a zero model."""
    monkeypatch.setattr(kernel_ridge, "DENSE_MAX", 100)
    X, y = _data(rng, 300, d=4)
    with pytest.raises(ValueError, match="broke down .* too many for the dense .* alpha"):
        KernelRidge(alpha=1e-300, gamma=0.3, solver="cg", device="cpu").fit(X, y)


def test_dense_fallback_checks_memory(rng, monkeypatch):
    from kernelkit.estimators import _ridge_memory

    X, y = _data(rng, 300, d=4)
    # room for the fit itself (kilobytes) but not for four 300 x 300 float64 matrices (2.9 MB)
    monkeypatch.setattr(_ridge_memory, "available_bytes", lambda where: 2 * 2**20)
    with pytest.raises(ValueError, match="broke down"):
        KernelRidge(alpha=1e-300, gamma=0.3, solver="cg", n_components=10, device="cpu").fit(X, y)


def test_falkon_factor_models_the_system_ridge_and_shifts_below_its_rounding(rng):
    """The Falkon preconditioner's factor A A^T = S + alpha R, R = L^{-1} (K_MM + s_sys I) L^{-T}
    (the system's ridge in the preconditioned variables): checked against a dense float64
    product; and where alpha is below S's rounding and S is singular, the factor of S + alpha R
    plus the smallest diagonal shift that works (``cholesky_jitter``)."""
    from kernelkit.linalg.falkon import _ridge_metric, _shifted_factors

    m = 30
    G = rng.standard_normal((m, 5))
    Kmm = torch.as_tensor(G @ G.T)  # rank 5: a finite-rank kernel's landmark matrix
    shift, system_shift = 1e-6, 1e-8
    L = torch.linalg.cholesky(Kmm + shift * torch.eye(m, dtype=torch.float64))
    R = _ridge_metric(L, shift, system_shift)
    Linv = torch.linalg.inv(L)
    want_R = Linv @ (Kmm + system_shift * torch.eye(m, dtype=torch.float64)) @ Linv.T
    # R is formed as I - (s - s_sys) L^{-1} L^{-T}: the cancellation costs eps / s_sys relative
    np.testing.assert_allclose(R.numpy(), want_R.numpy(), rtol=0, atol=1e-12 / system_shift)
    S = torch.as_tensor(np.eye(m) * 3.0)
    alphas = torch.tensor([0.5, 0.5, 2.0], dtype=torch.float64)
    factors = _shifted_factors(S, alphas, R)
    assert [cols.tolist() for _, cols in factors] == [[0, 1], [2]]
    for (A, _), alpha in zip(factors, (0.5, 2.0)):
        np.testing.assert_allclose((A @ A.T).numpy(), (S + alpha * R).numpy(), rtol=1e-12,
                                   atol=1e-12)
    # rank 3, as S = (n / M) L^T W_M L is where landmarks have zero weights
    singular = torch.as_tensor(G[:, :3] @ G[:, :3].T)
    tiny = torch.tensor([1e-300], dtype=torch.float64)
    assert int(torch.linalg.cholesky_ex(singular + 1e-300 * R).info) != 0
    ((A, _),) = _shifted_factors(singular, tiny, R)
    # the first shift cholesky_jitter tries is 1e-14 mean(diag), then tenfold steps: a
    # singular PSD matrix factors within a few of them
    scale = float(singular.diagonal().mean())
    np.testing.assert_allclose((A @ A.T).numpy(), singular.numpy(), rtol=0, atol=1e-10 * scale)


@pytest.mark.usefixtures("triton_can_run")
@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
def test_nystrom_iteration_product_matches_float64(weighted, triton_device, rng):
    """One Nyström iteration's data term K_Mn W K_nM U on the Triton path (float32 Gram row
    blocks, float64-accumulated products) against the same product of scikit-learn's float64
    kernel values, relative to S = |K|^T W |K| |U|. The float32 kernel values' errors (a few
    eps32 each) are independent, so they add like a random walk, far below eps32 S: measured
    6.3e-3 eps32 S (unweighted). Tolerance 0.1 eps32 S, 16x that. A float32-summed GEMV (what
    the float64 accumulation replaced) measured 2.0 eps32 S and fails."""
    from kernelkit.linalg.falkon import normal_product

    n, m, gamma = 300, 40, 0.7
    X = rng.uniform(-2.0, 2.0, size=(n, 20)) + 100.0  # d > 16: tensor cores, centred operands
    Z = X[rng.choice(n, m, replace=False)]
    U = rng.normal(size=(m, 2)) * 1e3
    w = rng.uniform(0.5, 2.0, size=n) if weighted else np.ones(n)
    op = kernel_operator.KernelOperator("rbf", {"gamma": gamma}, triton_device)
    op.block_bytes = 8 * m * op.bytes_per_value  # several row blocks (8 rows each)
    sw = torch.tensor(np.sqrt(w)[:, None], device=triton_device) if weighted else None
    got = normal_product(op, op.data(X), op.data(Z), op.vectors(U), sw).cpu().numpy()
    K = pairwise_kernels(X, Z, metric="rbf", gamma=gamma)
    want = K.T @ (w[:, None] * (K @ U))
    scale = np.abs(K).T @ (w[:, None] * (np.abs(K) @ np.abs(U)))
    assert got.dtype == np.float64
    assert np.all(np.abs(got - want) <= 0.1 * EPS32 * scale)
