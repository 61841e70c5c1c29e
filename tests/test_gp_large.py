"""kernelkit.GaussianProcessRegressor (kernelkit/estimators/gp/): BBMM-style large-n GP regression.

References are scikit-learn's exact GaussianProcessRegressor (dense Cholesky, float64) and dense
float64 NumPy linear algebra. Stochastic estimates are checked against tolerances of five
standard deviations of the estimator, computed from the exact matrices (Gaussian probes:
Var[e^T B e] = 2 ||sym(B)||_F^2 for e ~ N(0, I)), plus the CG tolerance.
"""

import pickle

import numpy as np
import pytest
import torch
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.gaussian_process import GaussianProcessRegressor as SklearnGPR
from sklearn.gaussian_process.kernels import RBF as SkRBF
from sklearn.gaussian_process.kernels import ConstantKernel as C
from sklearn.gaussian_process.kernels import Matern as SkMatern
from sklearn.gaussian_process.kernels import PairwiseKernel
from sklearn.gaussian_process.kernels import WhiteKernel as W
from sklearn.utils.estimator_checks import parametrize_with_checks
from torch.utils._python_dispatch import TorchDispatchMode

import kernelkit as kk
from kernelkit.operators import covariance
from kernelkit.estimators.gp._lml import SolverSettings, log_marginal_likelihood, make_probes
from kernelkit.operators.covariance import CovarianceOperator
from kernelkit.operators.kernel_tree import parse_kernel
from kernelkit_gpu.pairwise.naive import squared_distances

KERNELS = {
    "rbf": C(1.5) * kk.RBF(0.8) + W(0.05),
    "rbf-ard": C(1.5) * kk.RBF([0.8, 1.6]) + W(0.05),
    "rbf-sklearn-reordered": W(0.05) + SkRBF(0.8) * C(1.5),
    "matern05": C(1.5) * kk.Matern(0.8, nu=0.5) + W(0.05),
    "matern15": C(1.5) * kk.Matern([0.8, 1.3], nu=1.5) + W(0.05),
    "matern25-sklearn": C(1.5) * SkMatern(0.8, nu=2.5) + W(0.05),
    "rq": C(1.5) * kk.RationalQuadratic(0.8, alpha=2.0) + W(0.05),
    "fixed-length-scale": C(1.5) * kk.RBF(0.8, length_scale_bounds="fixed") + W(0.05),
    "no-constant-no-white": kk.RBF(0.8),
}
JITTER = {"no-constant-no-white": 1e-2}


def _data(n, d=2, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2.0, 2.0, (n, d))
    y = np.sin(2.0 * X[:, 0]) + 0.5 * np.cos(X[:, -1]) + 0.2 * rng.standard_normal(n)
    return X, y


def _lml(kernel, X, y, jitter, *, rank, n_probes, dtype=torch.float64, cg_tol=1e-10, seed=1):
    op = CovarianceOperator(X, parse_kernel(kernel), jitter, "cpu", dtype)
    probes = make_probes(len(y), min(rank, len(y)), n_probes, seed, "cpu")
    settings = SolverSettings(n_probes, cg_tol, 2000, rank)
    value, grad, _ = log_marginal_likelihood(op, kernel.theta, torch.as_tensor(y), probes,
                                             settings, eval_gradient=True)
    return value, grad


def _exact(kernel, X, y, jitter):
    gp = SklearnGPR(kernel, alpha=jitter, optimizer=None).fit(X, y)
    return gp.log_marginal_likelihood(kernel.theta, eval_gradient=True)


# ------------------------------------------------------------------ LML against sklearn
@pytest.mark.parametrize("name", list(KERNELS))
def test_lml_and_gradient_exact_when_rank_is_n(name):
    # With rank n every point is a landmark: P = K up to the Nystrom shift nu ~ eps ||K||, so
    # ||P^-1 K - I|| <= 1e-8 * outputscale / (noise + jitter) (<= 1e-6 here); SLQ then sees
    # P^-1/2 K P^-1/2 = I to that level and the control variate cancels the Hutchinson term, so
    # both estimates are exact up to ~1e-6 relative (measured <= 2.1e-6 in the gradients).
    kernel, jitter = KERNELS[name], JITTER.get(name, 1e-10)
    X, y = _data(200)
    ref, ref_grad = _exact(kernel, X, y, jitter)
    value, grad = _lml(kernel, X, y, jitter, rank=200, n_probes=4)
    np.testing.assert_allclose(value, ref, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["rbf-ard", "matern15"])
def test_lml_float32_rank_n(name):
    # float32 kernel blocks and CG (cg_tol 1e-5): measured |error| <= 4e-4 in LML ~ 1e2 and
    # <= 5e-3 in gradients ~ 1e2 at n = 300 (eps32 * n * cond-sized); tolerances 3-5x that.
    kernel = KERNELS[name]
    X, y = _data(300)
    ref, ref_grad = _exact(kernel, X, y, 1e-10)
    value, grad = _lml(kernel, X, y, 1e-10, rank=300, n_probes=4, dtype=torch.float32,
                       cg_tol=1e-5)
    np.testing.assert_allclose(value, ref, rtol=0, atol=2e-3)
    np.testing.assert_allclose(grad, ref_grad, rtol=0, atol=2e-2)


@pytest.mark.parametrize("n_probes", [16, 256])
@pytest.mark.parametrize("name", ["rbf-ard", "matern05", "rq"])
def test_stochastic_lml_and_gradient_within_probe_tolerance(name, n_probes):
    # Rank 0: P = s I (s = noise + jitter), z = sqrt(s) e. The estimates are means over t probes
    # of e^T B e with B = log(K / s) (log det) and B_i = K^-1 K_i - (ds/dtheta_i / s) I
    # (gradient, control variate included), so one standard deviation is sqrt(2 / t) ||sym B||_F,
    # times 1/2 as they enter the LML with factor -1/2.
    kernel = KERNELS[name]
    X, y = _data(250, seed=3)
    ref, ref_grad = _exact(kernel, X, y, 1e-10)
    value, grad = _lml(kernel, X, y, 1e-10, rank=0, n_probes=n_probes)
    K, K_grad = kernel(X, eval_gradient=True)
    K[np.diag_indices_from(K)] += 1e-10
    s = 0.05 + 1e-10
    eig = np.linalg.eigvalsh(K)
    scale = 0.5 * np.sqrt(2.0 / n_probes)
    np.testing.assert_allclose(value, ref, rtol=0,
                               atol=5 * scale * np.linalg.norm(np.log(eig / s)))
    noise_index = len(kernel.theta) - 1  # WhiteKernel is the last leaf: d s / d log noise = 0.05
    for i in range(len(ref_grad)):
        B = np.linalg.solve(K, K_grad[:, :, i])
        if i == noise_index:
            B -= 0.05 / s * np.eye(len(y))
        sigma = scale * np.linalg.norm(0.5 * (B + B.T))
        np.testing.assert_allclose(grad[i], ref_grad[i], rtol=0, atol=5 * sigma + 1e-5)


def test_preconditioned_estimate_is_closer_than_unpreconditioned():
    kernel = KERNELS["rbf-ard"]
    X, y = _data(300, seed=4)
    ref, ref_grad = _exact(kernel, X, y, 1e-10)
    errors = {}
    for rank in (0, 40):
        value, grad = _lml(kernel, X, y, 1e-10, rank=rank, n_probes=16)
        errors[rank] = abs(value - ref) + np.abs(grad - ref_grad).sum()
    assert errors[40] < 0.2 * errors[0], errors


# ------------------------------------------------------------------------ the estimator
def _toy(d, n, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3.0, 3.0, (n, d))
    y = np.sin(1.5 * X[:, 0]) + (0.5 * X[:, 1] ** 2 / 3.0 if d > 1 else 0.0)
    return X, y + 0.1 * rng.standard_normal(n), rng.uniform(-3.0, 3.0, (60, d))


@pytest.mark.parametrize("d, kernel", [
    (1, C(1.0) * kk.RBF(1.0) + W(0.1)),
    (2, C(1.0) * kk.Matern([1.0, 1.0], nu=2.5) + W(0.1)),
], ids=["1d-rbf", "2d-matern25-ard"])
def test_fit_and_predict_match_sklearn(d, kernel):
    X, y, Xt = _toy(d, 300)
    ref = SklearnGPR(kernel, random_state=0).fit(X, y)
    ours = kk.GaussianProcessRegressor(kernel, device="cpu", random_state=0, cg_tol=1e-8,
                                       preconditioner_rank=100, exact_max_n=0).fit(X, y)
    # The stochastic objective has a probe-dependent optimum, and L-BFGS stops once an
    # iteration gains less than its standard error. Measured (100 uniform
    # landmarks, 2-D Matern): scikit-learn's exact LML at our theta 0.048 nats below its
    # optimum (the bar: 0.5), our LML estimate 0.089 nats off, theta up to 0.38 off
    # along the flat amplitude / length-scale ridge (the 1-D RBF: exact to 1e-11).
    gap = ref.log_marginal_likelihood_value_ - ref.log_marginal_likelihood(ours.kernel_.theta)
    assert gap <= 0.5, gap
    np.testing.assert_allclose(ours.log_marginal_likelihood_value_,
                               ref.log_marginal_likelihood_value_, rtol=0, atol=0.5)
    mean, std = ours.predict(Xt, return_std=True)
    ref_mean, ref_std = ref.predict(Xt, return_std=True)
    # Measured: mean within 2.6e-3, std within 8.6e-4 (2-D Matern); tolerances ~8x.
    np.testing.assert_allclose(mean, ref_mean, rtol=0, atol=2e-2)
    np.testing.assert_allclose(std, ref_std, rtol=0, atol=7e-3)


@pytest.mark.parametrize("normalize_y", [False, True])
def test_predictions_with_fixed_hyperparameters_match_sklearn_exactly(normalize_y):
    X, y, Xt = _toy(2, 200, seed=1)
    y = 3.0 * y + 5.0
    kernel = C(2.0) * kk.RBF([1.0, 1.5]) + W(0.05)
    ref = SklearnGPR(kernel, optimizer=None, normalize_y=normalize_y).fit(X, y)
    ours = kk.GaussianProcessRegressor(kernel, optimizer=None, normalize_y=normalize_y,
                                       device="cpu", cg_tol=1e-10, exact_max_n=0).fit(X, y)
    # CG to 1e-10 on cond(K) ~ 1e3: everything is the exact solution to ~1e-7.
    np.testing.assert_allclose(ours.alpha_, ref.alpha_, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(ours.y_train_, ref.y_train_, rtol=1e-12, atol=1e-12)
    for ours_out, ref_out in zip(ours.predict(Xt, return_std=True),
                                 ref.predict(Xt, return_std=True)):
        np.testing.assert_allclose(ours_out, ref_out, rtol=1e-6, atol=1e-6)
    _, cov = ours.predict(Xt[:7], return_cov=True)
    np.testing.assert_allclose(cov, ref.predict(Xt[:7], return_cov=True)[1], rtol=1e-6,
                               atol=1e-6)


def test_variance_batches_and_chunks_do_not_change_results(monkeypatch):
    X, y, Xt = _toy(2, 150, seed=2)
    kernel = C(1.0) * kk.RBF(1.0) + W(0.1)
    gp = kk.GaussianProcessRegressor(kernel, optimizer=None, device="cpu", cg_tol=1e-10,
                                     exact_max_n=0)
    whole = gp.fit(X, y).predict(Xt, return_std=True)
    monkeypatch.setattr("kernelkit.estimators.gp._variance.VARIANCE_BATCH_ELEMENTS", 150 * 7)
    monkeypatch.setattr(covariance, "BLOCK_ELEMENTS", 150 * 13)
    batched = gp.fit(X, y).predict(Xt, return_std=True)
    for a, b in zip(whole, batched):
        np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-10)


def test_log_marginal_likelihood_method_is_deterministic_and_matches_fit():
    X, y, _ = _toy(1, 120)
    gp = kk.GaussianProcessRegressor(C(1.0) * kk.RBF(1.0) + W(0.1), device="cpu",
                                     random_state=0, preconditioner_rank=5,
                                     exact_max_n=0).fit(X, y)
    theta = gp.kernel_.theta
    first = gp.log_marginal_likelihood(theta, eval_gradient=True)
    second = gp.log_marginal_likelihood(theta, eval_gradient=True)
    assert first[0] == second[0] and np.array_equal(first[1], second[1])
    np.testing.assert_allclose(gp.log_marginal_likelihood(theta), gp.log_marginal_likelihood(),
                               rtol=1e-9, atol=0)
    with pytest.raises(ValueError, match="Gradient"):
        gp.log_marginal_likelihood(eval_gradient=True)
    with pytest.raises(ValueError, match="theta must have shape"):
        gp.log_marginal_likelihood(np.zeros(5))


def test_clone_pickle_and_inputs_unchanged():
    X, y, Xt = _toy(2, 100)
    X0, y0 = X.copy(), y.copy()
    gp = kk.GaussianProcessRegressor(C(1.0) * kk.RBF([1.0, 1.0]) + W(0.1), device="cpu",
                                     random_state=0, n_probes=8)
    assert clone(gp).get_params() == gp.get_params()
    gp.fit(X, y)
    np.testing.assert_array_equal(X, X0)
    np.testing.assert_array_equal(y, y0)
    restored = pickle.loads(pickle.dumps(gp))
    np.testing.assert_array_equal(restored.predict(Xt), gp.predict(Xt))
    assert gp.n_features_in_ == 2 and gp.X_train_.shape == (100, 2)
    refit = clone(gp).fit(X, y)
    np.testing.assert_array_equal(refit.kernel_.theta, gp.kernel_.theta)


def test_device_copy_of_the_data_follows_refits_and_is_not_pickled():
    """The operator's copy of X_train_ is kept between calls of one fit, renewed by a refit on
    other data (same shape: the values must change with it), and left out of a pickle (it may
    live on a device the unpickling machine lacks) and of the variance cache."""
    X1, y1, Xt = _toy(2, 100)
    X2, y2, _ = _toy(2, 100, seed=1)
    kernel = C(1.0) * kk.RBF([1.0, 1.0]) + W(0.1)
    params = dict(device="cpu", random_state=0, exact_max_n=0, optimizer=None)
    gp = kk.GaussianProcessRegressor(kernel, **params).fit(X1, y1)
    gp.predict(Xt, return_std=True)
    first = gp.log_marginal_likelihood(gp.kernel_.theta)
    held = gp._device_data[1][0]
    assert gp.log_marginal_likelihood(gp.kernel_.theta) == first
    assert gp._device_data[1][0] is held
    state = gp.__getstate__()
    assert "_device_data" not in state and state["_variance_cache"] is None
    assert gp._device_data is not None and gp._variance_cache is not None
    gp.fit(X2, y2)
    fresh = kk.GaussianProcessRegressor(kernel, **params).fit(X2, y2)
    assert gp.log_marginal_likelihood(gp.kernel_.theta) == fresh.log_marginal_likelihood(
        fresh.kernel_.theta) != first


def test_restarts_and_callable_optimizer():
    X, y, _ = _toy(1, 100)
    kernel = C(1.0) * kk.RBF(1.0) + W(0.1)
    calls = []

    def one_step(obj_func, initial_theta, bounds):
        calls.append(obj_func(initial_theta))
        return initial_theta, calls[-1][0]

    gp = kk.GaussianProcessRegressor(kernel, optimizer=one_step, n_restarts_optimizer=2,
                                     device="cpu", random_state=0).fit(X, y)
    assert len(calls) == 3 and all(len(c[1]) == 3 for c in calls)
    assert gp.kernel_.theta.shape == (3,)


class _Recorder(TorchDispatchMode):
    """Largest number of elements of any tensor produced by a torch op."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in (out if isinstance(out, (tuple, list)) else [out]):
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel())
        return out


def test_lml_gradient_never_forms_n_by_n(monkeypatch):
    # n = 1200 with chunks of 50 x n values: no torch tensor ever reaches n^2 (let alone
    # n^2 x n_theta) elements, in the forward CG or the backward pass.
    n, block = 1200, 50 * 1200
    monkeypatch.setattr(covariance, "BLOCK_ELEMENTS", block)
    monkeypatch.setattr(covariance, "DENSE_CPU_BYTES", 0)  # the matrix-free path
    X, y = _data(n, d=3)
    kernel = C(1.0) * kk.RBF([1.0, 1.0, 1.0]) + W(0.1)
    recorder = _Recorder()
    with recorder:
        value, grad = _lml(kernel, X, y, 1e-10, rank=30, n_probes=8, cg_tol=1e-4)
    assert grad.shape == (5,) and np.isfinite(value)
    assert recorder.largest <= block, recorder.largest


@pytest.mark.parametrize("offset", [0.0, 1e3])
def test_float64_squared_distance_gradient_equals_per_feature_autograd(offset, device):
    """The float64 blocks' squared distances (direct differences forward, GEMMs backward)
    against autograd through the per-feature differences, on operands with and without an
    offset of 1e3 (|a| / |a - b| ~ 1e3): the expansion's rounding, eps64 (|a| + |b|) / |a - b|
    relative per term, bounds the difference by ~1e-12 relative (measured 4.3e-13 with the offset,
    2.7e-16 without)."""
    rng = np.random.default_rng(3)
    A0 = torch.tensor(rng.standard_normal((37, 5)) + offset, device=device)
    B0 = torch.tensor(rng.standard_normal((11, 5)) + offset, device=device)
    G = torch.tensor(rng.standard_normal((37, 11)), device=device)
    got, want = {}, {}
    for how, out in (("fast", got), ("loop", want)):
        A, B = A0.clone().requires_grad_(True), B0.clone().requires_grad_(True)
        if how == "fast":
            s = squared_distances(A, B, None)
        else:
            s = sum((A[:, k, None] - B[None, :, k]) ** 2 for k in range(5))
        out["s"] = s.detach()
        out["a"], out["b"] = torch.autograd.grad((G * s).sum(), (A, B))
    # the same direct differences (on the CPU cdist's sum, squared after its square root; on
    # CUDA fused multiply-adds: a few eps64 apart; measured 7.5e-16 relative on random data)
    np.testing.assert_allclose(got["s"].cpu().numpy(), want["s"].cpu().numpy(), rtol=2e-15,
                               atol=0)
    for name in ("a", "b"):
        np.testing.assert_allclose(got[name].cpu().numpy(), want[name].cpu().numpy(), rtol=0,
                                   atol=1e-12 * float(want[name].abs().max()))


def test_dense_and_matrix_free_paths_agree(monkeypatch):
    """K held densely (it fits) and K never formed give the same LML and gradient; the dense
    matrix is formed once per hyperparameter setting, not once per CG product."""
    X, y = _data(300, d=3)
    kernel = C(1.3) * kk.RBF([0.8, 1.0, 1.2]) + W(0.05)
    builds, seen = [], []  # whether each call formed a new matrix; the matrices returned
    real = covariance.CovarianceOperator.kernel_matrix

    def counting(self, params, dtype=None):
        out = real(self, params, dtype)
        builds.append(not any(out is K for K in seen))
        seen.append(out)
        return out

    monkeypatch.setattr(covariance.CovarianceOperator, "kernel_matrix", counting)
    dense = _lml(kernel, X, y, 1e-10, rank=20, n_probes=8)
    assert sum(builds) == 1 and len(builds) > 10, builds
    monkeypatch.setattr(covariance, "DENSE_CPU_BYTES", 0)
    builds.clear()
    free = _lml(kernel, X, y, 1e-10, rank=20, n_probes=8)
    assert builds == []
    np.testing.assert_allclose(dense[0], free[0], rtol=1e-10)
    np.testing.assert_allclose(dense[1], free[1], rtol=1e-8, atol=1e-10)


# ------------------------------------------------------------------------------ bad input
@pytest.mark.parametrize("kernel, name", [
    (kk.Sigmoid(), "Sigmoid"), (kk.RBF() + C() * kk.Sigmoid(), "Sigmoid"),
    (PairwiseKernel(metric="laplacian"), "PairwiseKernel"),
    (kk.ExpSineSquared(), "ExpSineSquared"), ("rbf", "rbf"),
], ids=["sigmoid", "sigmoid-nested", "pairwise-kernel", "periodic-2-features", "string"])
def test_unsupported_kernels_raise_type_error(kernel, name):
    """Non-PSD registry kernels (sigmoid; periodic on more than one feature) and kernels outside
    the registry are refused, by name, before any computation."""
    X, y, _ = _toy(2, 20)
    with pytest.raises(TypeError, match=f"(?i)supported.*{name}|{name}.*supported"):
        kk.GaussianProcessRegressor(kernel, device="cpu").fit(X, y)


@pytest.mark.parametrize("params, error, match", [
    ({"n_probes": 0}, ValueError, "n_probes"),
    ({"n_probes": 2.5}, TypeError, "n_probes"),
    ({"cg_tol": -1.0}, ValueError, "cg_tol"),
    ({"max_cg_iter": 0}, ValueError, "max_cg_iter"),
    ({"preconditioner_rank": -1}, ValueError, "preconditioner_rank"),
    ({"preconditioner_rank": "max"}, ValueError, "preconditioner_rank.*auto"),
    ({"preconditioner_rank": 2.5}, TypeError, "preconditioner_rank"),
    ({"alpha": -1.0}, ValueError, "alpha"),
    ({"alpha": np.ones(19)}, ValueError, "alpha"),
    ({"alpha": np.array(["a"] * 20)}, TypeError, "alpha"),
    ({"alpha": -np.ones(20)}, ValueError, "alpha"),
    ({"exact_max_n": -1}, ValueError, "exact_max_n"),
    ({"dtype": "float16"}, ValueError, "dtype"),
    ({"optimizer": "adam"}, ValueError, "optimizer"),
    ({"device": "tpu"}, ValueError, "device"),
    ({"normalize_y": "yes"}, TypeError, "normalize_y"),
    ({"kernel": kk.Matern(nu=1.0)}, ValueError, "nu"),
    ({"kernel": kk.RBF([1.0, 2.0, 3.0])}, ValueError, "length_scale"),
], ids=lambda v: str(v) if isinstance(v, str) else None)
def test_bad_parameters(params, error, match):
    X, y, _ = _toy(2, 20)
    with pytest.raises(error, match=match):
        kk.GaussianProcessRegressor(**params).fit(X, y)


def test_bad_data_and_unfitted():
    X, y, _ = _toy(2, 20)
    gp = kk.GaussianProcessRegressor(device="cpu")
    with pytest.raises(NotFittedError):
        gp.log_marginal_likelihood(np.zeros(2))
    bad = X.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        gp.fit(bad, y)
    with pytest.raises(ValueError):
        gp.fit(X, y[:10])
    gp.fit(X, y)
    with pytest.raises(ValueError, match="features"):
        gp.predict(X[:, :1])
    with pytest.raises(RuntimeError, match="At most one"):
        gp.predict(X, return_std=True, return_cov=True)


@parametrize_with_checks([kk.GaussianProcessRegressor(device="cpu", random_state=0)])
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)
