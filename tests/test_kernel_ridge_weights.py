"""kernelkit.KernelRidge's ``sample_weight`` and per-target ``alpha`` against scikit-learn's
KernelRidge (issue 17 item 5, issue 18 "Drop-in claims"), on every solver and on the Triton path.

Tolerances: CG stops at a true relative residual ``tol`` of (S K S + alpha_j I) c = S y
(S = diag(sqrt(w))). The worst case, ||k(x, X) S|| tol ||S y|| / alpha, is 1e3-1e4 times the
error seen; the residual of smooth targets lies mostly along K's large eigenvalues, where it
moves a prediction f by about tol |f| (measured 0.7-1.6 tol max|f| below), so the tests allow
10 tol max|f|.
"""

import warnings

import numpy as np
import pytest
from sklearn.kernel_ridge import KernelRidge as SKKernelRidge
from sklearn.metrics.pairwise import pairwise_kernels

from kernelkit import KernelRidge
from kernelkit.operators import kernel_operator

EPS32 = 2.0**-24


def _data(rng, n=150, d=3, k=3):
    X = rng.uniform(-2.0, 2.0, size=(n, d))
    f = np.sin(1.5 * X[:, 0]) * np.cos(X[:, 1])
    Y = np.stack([f, X[:, 0] ** 2 - 1.0, X[:, 2]], axis=1)[:, :k]
    return X, Y + 0.05 * rng.normal(size=(n, k))


def _weights(rng, n):
    """Weights spread over three decades, with zeros (samples that must not count)."""
    w = 10.0 ** rng.uniform(-1.5, 1.5, size=n)
    w[::7] = 0.0
    return w


RBF = dict(kernel="rbf", gamma=0.4)
SK_RBF = dict(metric="rbf", gamma=0.4)


@pytest.mark.parametrize("solver", ["cg", "nystrom"])
@pytest.mark.parametrize("alpha", [0.05, [0.02, 0.3, 0.02]], ids=["one-alpha", "per-target"])
@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
def test_matches_sklearn(rng, solver, alpha, weighted):
    X, Y = _data(rng)
    w = _weights(rng, len(X)) if weighted else None
    Xt = rng.uniform(-2.0, 2.0, size=(40, X.shape[1]))
    tol = 1e-10
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # nystrom with M = n is the exact model; cg with 40 landmarks in its preconditioner
        model = KernelRidge(alpha=alpha, solver=solver, n_components=150 if solver == "nystrom"
                            else 40, tol=tol, device="cpu", random_state=0, **RBF)
        model.fit(X, Y, sample_weight=w)
    ref = SKKernelRidge(alpha=alpha, **RBF).fit(X, Y, sample_weight=w)
    assert not model.dense_fallback_
    if solver == "cg":
        if weighted:  # zero weight: exactly 0, as scikit-learn's
            assert np.all(model.dual_coef_[::7] == 0.0) and np.all(ref.dual_coef_[::7] == 0.0)
        expected = ref.predict(Xt)
        # measured 1.9e-10 to 2.9e-10 with max|f| ~ 3 (module docstring)
        np.testing.assert_allclose(model.predict(Xt), expected, rtol=0,
                                   atol=10 * tol * np.abs(expected).max())
    else:
        # M = n: the Falkon system is the exact one up to the jitter 150 eps mean(diag); its
        # residual lives in the preconditioned space (tests/test_kernel_ridge.py): measured
        # 4e-10 (weights over three decades make the system less well conditioned than there)
        np.testing.assert_allclose(model.predict(Xt), ref.predict(Xt), rtol=0, atol=5e-9)


def test_scalar_weight_and_unit_weights_are_no_weights(rng):
    """sample_weight=c multiplies every weight: the same fit, and the same dual coefficients,
    as alpha / c (a = S c' with (c K + alpha I) c' = sqrt(c) y, so a = (K + alpha / c I)^{-1} y);
    scikit-learn's float sample_weight. Unit weights leave the fit unchanged."""
    X, Y = _data(rng, k=2)
    kw = dict(solver="cg", n_components=40, tol=1e-12, device="cpu", random_state=0, **RBF)
    plain = KernelRidge(alpha=0.1, **kw).fit(X, Y)
    ones = KernelRidge(alpha=0.1, **kw).fit(X, Y, sample_weight=np.ones(len(X)))
    scaled = KernelRidge(alpha=0.1, **kw).fit(X, Y, sample_weight=4.0)
    quarter = KernelRidge(alpha=0.025, **kw).fit(X, Y)
    ref = SKKernelRidge(alpha=0.1, **RBF).fit(X, Y, sample_weight=4.0)
    # residual 1e-12 at cond(K + alpha I) <= 1 + 150 / 0.025: coefficients agree to ~1e-8
    np.testing.assert_allclose(ones.dual_coef_, plain.dual_coef_, rtol=0, atol=1e-8)
    np.testing.assert_allclose(scaled.dual_coef_, quarter.dual_coef_, rtol=0, atol=1e-7)
    np.testing.assert_allclose(scaled.dual_coef_, ref.dual_coef_, rtol=0, atol=1e-7)


@pytest.mark.parametrize("solver", ["cg", "nystrom"])
def test_per_target_alpha_with_one_dimensional_y(rng, solver):
    X, Y = _data(rng, k=1)
    y = Y[:, 0]
    model = KernelRidge(alpha=[0.2], solver=solver, n_components=150, tol=1e-10, device="cpu",
                        random_state=0, **RBF).fit(X, y)
    ref = SKKernelRidge(alpha=[0.2], **RBF).fit(X, y)
    assert model.dual_coef_.shape == ref.dual_coef_.shape == (150,)
    # as test_matches_sklearn: 10 tol max|f| (cg) and the Falkon system's 5e-9 (nystrom)
    np.testing.assert_allclose(model.predict(X), ref.predict(X), rtol=0, atol=5e-9)


def test_dense_fallback_with_weights_and_per_target_alpha(rng):
    """A ridge of 1e-300 on one target: the dense fallback solves each ridge's system."""
    X, Y = _data(rng, n=120, k=2)
    w = _weights(rng, len(X))
    alpha = [1e-300, 0.1]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = KernelRidge(alpha=alpha, solver="cg", n_components=30, device="cpu",
                            random_state=0, **RBF).fit(X, Y, sample_weight=w)
    ref = SKKernelRidge(alpha=alpha, **RBF).fit(X, Y, sample_weight=w)
    assert model.dense_fallback_
    # Cholesky of the same float64 matrices (kernel values computed differently: 1e-16
    # relative), target 0 interpolating; measured 2.4e-12
    np.testing.assert_allclose(model.predict(X), ref.predict(X), rtol=0, atol=3e-11)


@pytest.mark.usefixtures("triton_can_run")
@pytest.mark.parametrize("solver", ["cg", "nystrom"])
def test_triton_path_with_weights_and_per_target_alpha(rng, device, monkeypatch, solver):
    if device == "cpu":
        monkeypatch.setattr(kernel_operator, "TRITON_ON_CPU", True)
    X, Y = _data(rng, n=60, k=2)
    w = _weights(rng, len(X))
    alpha = [0.05, 0.5]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = KernelRidge(alpha=alpha, solver=solver, n_components=60, tol=1e-10,
                            device=device, random_state=0, **RBF).fit(X, Y, sample_weight=w)
    assert not model.dense_fallback_
    K = pairwise_kernels(X, **SK_RBF)
    if solver == "cg":
        ref = SKKernelRidge(alpha=alpha, **RBF).fit(X, Y, sample_weight=w).predict(X)
    else:
        # M = n: the Falkon normal equations (K W K + alpha_j (K + s I)) beta = K W y with the
        # system's jitter s = eps32 mean(diag K) of float32 products (kernelkit.linalg.falkon,
        # "Two jitters"; measured 3.6e-7 from this reference, 1e-5 from M times that jitter),
        # solved densely in float64 here
        # (against scikit-learn the jitter alone moves predictions by up to s / alpha |y|)
        assert np.array_equal(model.X_fit_, X)
        s = np.finfo(np.float32).eps * np.mean(np.diag(K))
        ref = np.stack([K @ np.linalg.solve(K @ (w[:, None] * K) + a * (K + s * np.eye(60)),
                                            K @ (w * Y[:, j])) for j, a in enumerate(alpha)], 1)
    # the coefficients are converged in float64 (true residual 1e-10: ~1e-8 in predictions);
    # predict's float32 product errs by ~eps32 sum |k a| (tests/test_kernel_ridge_precision.py)
    Kt = pairwise_kernels(X, model.X_fit_, **SK_RBF)
    bound = 10 * EPS32 * (np.abs(Kt) @ np.abs(model.dual_coef_)).max() + 1e-7
    np.testing.assert_allclose(model.predict(X), ref, rtol=0, atol=bound)
