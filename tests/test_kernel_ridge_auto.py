"""KernelRidge's ``n_components="auto"`` default: the effective-dimension estimate and the rule of
kernelkit.estimators._ridge_auto ("nystrom"), sqrt(n) ln n for the "cg" preconditioner, the caps
and memory cut of kernelkit.estimators._ridge_memory.auto_components, the memory plan's count of
landmark matrices, and the default settings against scikit-learn's exact KernelRidge."""

import math

import numpy as np
import pytest
import torch
from sklearn.kernel_ridge import KernelRidge as SKKernelRidge
from sklearn.metrics.pairwise import rbf_kernel

from kernelkit import KernelRidge
from kernelkit.estimators import _ridge_auto, _ridge_memory
from kernelkit.linalg import falkon
from kernelkit.operators.kernel_operator import KernelOperator, PrecomputedOperator

EPS64 = float(np.finfo(np.float64).eps)


def _data(rng, n, d=3):
    X = rng.uniform(-2.0, 2.0, size=(n, d))
    return X, np.sin(X[:, 0]) + X[:, 1] * X[:, 2] + 0.05 * rng.normal(size=n)


def _exact_d_eff(K, alpha):
    """tr(K (K + alpha I)^-1) = n - alpha tr((K + alpha I)^-1), by a dense solve (no
    eigenvalues)."""
    n = len(K)
    return n - alpha * np.trace(np.linalg.solve(K + alpha * np.eye(n), np.eye(n)))


def _estimate(X, alpha, gamma=0.5, seed=0, **kw):
    op = KernelOperator("rbf", {"gamma": gamma}, "cpu")
    return _ridge_auto.effective_dimension(op, X, alpha, np.random.RandomState(seed), **kw)


@pytest.mark.parametrize("alpha", [1e-3, 1e-1, 10.0])
@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
def test_effective_dimension_is_exact_on_all_rows(rng, alpha, weighted):
    """n <= the subsample size: the estimate is tr(S K S (S K S + alpha I)^-1) itself. Rounding:
    eigvalsh moves each eigenvalue by at most ~ n eps ||K|| (<= n^2 eps here, ||K|| <= n), and a
    term lambda / (lambda + alpha) moves by at most 1 / alpha times that, as do the eigenvalues
    under the zero floor (n eps max lambda): over n terms, 2 n^3 eps / alpha in all (5e-8 at
    alpha = 1e-3, n = 300), against the dense solve's own n cond eps (cond <= n / alpha)."""
    n = 300
    X, _ = _data(rng, n)
    w = rng.uniform(0.0, 2.0, size=n) if weighted else None
    K = rbf_kernel(X, gamma=0.5)
    if weighted:
        K = np.sqrt(w)[:, None] * K * np.sqrt(w)[None, :]
    exact = _exact_d_eff(K, alpha)
    got = _estimate(X, alpha, weights=w)
    bound = 2 * n**3 * EPS64 / alpha + n * (n / alpha) * EPS64
    assert abs(got - exact) <= bound
    assert 0 < got < n


def test_effective_dimension_of_a_precomputed_kernel(rng):
    """The precomputed path reads K's own rows and columns: the same estimate as the rbf
    operator's on a subsample (n = 3000 > 2000 rows, same draw), to the rounding of two float64
    evaluations of the same kernel values (rbf_kernel against the registry's)."""
    X, _ = _data(rng, 3000)
    K = rbf_kernel(X, gamma=0.5)
    got = _ridge_auto.effective_dimension(PrecomputedOperator(K), K, 0.1,
                                          np.random.RandomState(0))
    np.testing.assert_allclose(got, _estimate(X, 0.1), rtol=1e-9)


@pytest.mark.parametrize("alpha", [3.0, 10.0, 30.0])
def test_effective_dimension_from_a_subsample(rng, alpha):
    """n = 4000 rows, s = 1000 of them: the subsample's eigenvalues, scaled by n / s, estimate
    K's top ones with a relative error of order 1 / sqrt(s) (3.2%; Braun 2006, "Accurate error
    bounds for the eigenvalues of the kernel matrix"), and a term lambda / (lambda + alpha)
    moves by at most 1/4 of its eigenvalue's relative error; three such standard errors,
    3 / sqrt(s) = 9.5% of d_eff, bound the estimate where d_eff is well below s (d_eff 20 to
    60 here; measured errors <= 3%). Ignoring alpha counts every direction (d_eff = s), and
    dropping the n / s scale evaluates d_eff at 4 alpha (30-45% less): both fail."""
    n, s = 4000, 1000
    X, _ = _data(rng, n)
    exact = _exact_d_eff(rbf_kernel(X, gamma=0.5), alpha)
    got = _estimate(X, alpha, size=s)
    assert exact < s / 10
    np.testing.assert_allclose(got, exact, rtol=3 / math.sqrt(s))


def test_effective_dimension_is_deterministic_in_the_draw(rng):
    X, _ = _data(rng, 3000)
    assert _estimate(X, 0.1, seed=4) == _estimate(X, 0.1, seed=4)


def test_nystrom_rule_clamps():
    """ceil(FACTOR d_eff), at least M_MIN, at most n."""
    n = 10**6
    assert _ridge_auto.nystrom_components(0.0, n) == _ridge_auto.M_MIN
    assert _ridge_auto.nystrom_components(400.5, n) == math.ceil(_ridge_auto.FACTOR * 400.5)
    assert _ridge_auto.nystrom_components(5000.0, 3000) == 3000
    assert _ridge_auto.nystrom_components(10.0, 50) == 50


def _auto_m(X, y, **kw):
    return KernelRidge(solver="nystrom", device="cpu", random_state=0, **kw).fit(X, y).n_components_


def test_auto_landmarks_follow_the_effective_dimension(rng, monkeypatch):
    """solver="nystrom": n_components="auto" is the rule's M at the d_eff of the data, the kernel
    and the smallest alpha: more landmarks for a smaller alpha or a larger gamma (a rougher
    kernel), within n and the device cap. A rule that ignored alpha, or took the largest of
    several, fails."""
    monkeypatch.setattr(_ridge_memory, "available_bytes", lambda where: 2**40)
    X, y = _data(rng, 3000)
    Y = np.column_stack([y, y])

    def expected(alpha, gamma):
        d_eff = _estimate(X, alpha, gamma=gamma)
        return min(3000, _ridge_memory.AUTO_M_MAX["cpu"],
                   _ridge_auto.nystrom_components(d_eff, 3000))

    coarse = _auto_m(X, y, alpha=10.0, gamma=0.5)
    fine = _auto_m(X, y, alpha=0.3, gamma=0.5)
    rough = _auto_m(X, y, alpha=10.0, gamma=5.0)
    assert coarse == expected(10.0, 0.5) < fine == expected(0.3, 0.5)
    assert coarse < rough == expected(10.0, 5.0)
    assert _auto_m(X, Y, alpha=[10.0, 0.3], gamma=0.5) == fine


def test_auto_nystrom_keeps_the_landmarks_of_an_explicit_m(rng):
    """An integer n_components draws its landmarks as before (no subsample from the estimator's
    rng); "auto" draws the subsample first, deterministically under random_state."""
    X, y = _data(rng, 3000)
    model = KernelRidge(solver="nystrom", n_components=200, device="cpu", random_state=3)
    idx = model.fit(X, y).landmark_indices_
    np.testing.assert_array_equal(idx, falkon.landmarks(3000, 200, np.random.RandomState(3)))
    auto = [KernelRidge(solver="nystrom", device="cpu", random_state=3).fit(X, y)
            for _ in range(2)]
    np.testing.assert_array_equal(auto[0].landmark_indices_, auto[1].landmark_indices_)


@pytest.mark.parametrize("n, expected", [(10, 8), (1000, 219), (10**5, 3641), (10**6, 13816)])
def test_preconditioner_components_is_sqrt_n_log_n_capped(monkeypatch, n, expected):
    """"cg": ceil(sqrt(n) ln n), at most n (n = 10: 7.3 -> 8) and the device cap (GPU 10 000, CPU
    4 000), with memory to spare."""
    monkeypatch.setattr(_ridge_memory, "available_bytes", lambda where: 2**40)
    assert expected == min(n, math.ceil(math.sqrt(n) * math.log(n)))
    wanted = _ridge_auto.preconditioner_components(n)
    assert wanted == expected
    assert _ridge_memory.auto_components(wanted, n=n, d=20, k=1, solver="cg", where="cuda",
                                         triton=True) == min(expected, 10_000)
    assert _ridge_memory.auto_components(wanted, n=n, d=20, k=1, solver="cg", where="cpu",
                                         triton=False) == min(expected, 4000)


def test_auto_components_shrinks_to_fit_memory(monkeypatch):
    """With 1 GiB free, n = 1e5 and "cg" (n x M factor and basis, 16 n M bytes) M is cut until
    the landmark arrays take at most a quarter of what the data and CG vectors leave."""
    monkeypatch.setattr(_ridge_memory, "available_bytes", lambda where: 2**30)
    n = 10**5
    m = _ridge_memory.auto_components(3641, n=n, d=20, k=1, solver="cg", where="cpu",
                                      triton=False)
    fixed = sum(_ridge_memory.persistent_bytes(n=n, d=20, k=1, m=0, solver="cg",
                                               triton=False).values())
    assert 1 <= m < 3641
    assert _ridge_memory._landmark_bytes(n, m, "cg", 1) <= 0.25 * (2**30 - fixed)


def test_auto_nystrom_shrinks_to_fit_memory(rng, monkeypatch):
    """The rule's M goes through the same memory cut: with 64 MiB "free", the fit's M x M
    landmark matrices take at most a quarter of what the data and CG vectors leave."""
    monkeypatch.setattr(_ridge_memory, "available_bytes", lambda where: 2**26)
    X, y = _data(rng, 3000)
    m = _auto_m(X, y, alpha=1e-3, gamma=0.5)
    fixed = sum(_ridge_memory.persistent_bytes(n=3000, d=3, k=1, m=0, solver="nystrom",
                                               triton=False).values())
    assert 1 <= m < _ridge_auto.nystrom_components(_estimate(X, 1e-3), 3000)
    assert _ridge_memory._landmark_bytes(3000, m, "nystrom", 1) <= 0.25 * (2**26 - fixed)


def test_default_settings_match_sklearn(rng):
    """Default solver ("cg" on the CPU at this n), n_components="auto" (ceil(sqrt(600) ln 600)
    = 157 landmarks for the preconditioner), tol 1e-6: the true relative residual is <= 1e-6,
    so the predictions agree with scikit-learn's to at most cond(K + alpha I) 1e-6 |y| ~ 4e-3
    (cond ~ 850); measured 1.0e-6 to 3.1e-6 over three data seeds (CG stops at residuals
    1.4e-7 to 8.5e-7). A CG stopped 1000x early errs by ~1e-3 here."""
    X, y = _data(rng, 600)
    Xt = rng.uniform(-2.0, 2.0, size=(50, 3))
    model = KernelRidge(alpha=0.1, gamma=0.5, device="cpu", random_state=0).fit(X, y)
    assert model.solver_ == "cg" and model.n_components_ == 157
    assert model.residuals_[-1] <= 1e-6
    ref = SKKernelRidge(alpha=0.1, kernel="rbf", gamma=0.5).fit(X, y)
    np.testing.assert_allclose(model.predict(Xt), ref.predict(Xt), rtol=0, atol=1e-5)


def test_n_components_must_be_auto_or_a_positive_integer(rng):
    X, y = _data(rng, 20)
    with pytest.raises(ValueError, match="n_components must be 'auto' or an integer > 0"):
        KernelRidge(n_components="many", device="cpu").fit(X, y)


@pytest.mark.parametrize("n_alphas", [1, 2])
def test_falkon_system_peak_memory_within_the_plan(n_alphas, device, rng):
    """Building the Falkon system allocates at most the plan's count of float64 M x M matrices
    at once (``_ridge_memory._landmark_matrices``) beyond K_nM blocks and vectors: at M = 5e4 each is
    20 GB, and a construction with identity matrices and out-of-place sums took 9 (an H200 ran
    out of memory under a plan of 4). Measured on CUDA (the allocator's peak)."""
    if device != "cuda":
        pytest.skip("the allocator's peak is measured on a GPU only (pytest --device cuda)")
    from kernelkit.operators import kernel_operator
    from kernelkit.linalg.falkon import FalkonSystem, landmarks

    n, m, d = 6000, 3000, 5  # one M x M matrix is 72 MB: library workspaces are far smaller
    X = rng.uniform(-2.0, 2.0, size=(n, d))
    op = kernel_operator.KernelOperator("rbf", {"gamma": 0.5}, "cuda")
    op.block_bytes = 8 * m * 64  # small row blocks: M x M matrices dominate
    idx = landmarks(n, m, np.random.RandomState(0))
    data, exact = op.data(X), op.exact_data(X)
    operands = (data, op.take(data, idx)), (exact, op.take(exact, idx))
    alphas = torch.tensor([1e-3, 1e-2][:n_alphas], dtype=torch.float64, device="cuda")
    small = torch.eye(64, dtype=torch.float64, device="cuda")  # cuBLAS / cuSOLVER workspaces
    torch.linalg.solve_triangular(torch.linalg.cholesky_ex(small @ small)[0], small, upper=False)
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    system = FalkonSystem(op, *operands, alphas, None, idx)
    torch.cuda.synchronize()
    peak = (torch.cuda.max_memory_allocated() - base) / (8 * m * m)
    assert system.ridge_metric is not None  # the path with the most matrices
    assert peak <= _ridge_memory._landmark_matrices("nystrom", n_alphas) + 0.5
