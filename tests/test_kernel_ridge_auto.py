"""KernelRidge's ``n_components="auto"`` default (kernelkit.estimators._ridge_memory.auto_components), the
memory plan's count of landmark matrices, and the default settings against scikit-learn's exact
KernelRidge."""

import math

import numpy as np
import pytest
import torch
from sklearn.kernel_ridge import KernelRidge as SKKernelRidge

from kernelkit import KernelRidge
from kernelkit.estimators import _ridge_memory

def _data(rng, n, d=3):
    X = rng.uniform(-2.0, 2.0, size=(n, d))
    return X, np.sin(X[:, 0]) + X[:, 1] * X[:, 2] + 0.05 * rng.normal(size=n)


@pytest.mark.parametrize("n, expected", [(10, 8), (1000, 219), (10**5, 3641), (10**6, 13816)])
def test_auto_components_is_sqrt_n_log_n_capped(monkeypatch, n, expected):
    """ceil(sqrt(n) ln n), at most n (n = 10: 7.3 -> 8) and the device cap (GPU 10 000, CPU
    4 000), with memory to spare."""
    monkeypatch.setattr(_ridge_memory, "available_bytes", lambda where: 2**40)
    assert expected == min(n, math.ceil(math.sqrt(n) * math.log(n)))
    assert _ridge_memory.auto_components(n=n, d=20, k=1, solver="nystrom", where="cuda",
                                   triton=True) == min(expected, 10_000)
    assert _ridge_memory.auto_components(n=n, d=20, k=1, solver="nystrom", where="cpu",
                                   triton=False) == min(expected, 4000)


def test_auto_components_shrinks_to_fit_memory(monkeypatch):
    """With 1 GiB free, n = 1e5 and "cg" (n x M factor and basis, 16 n M bytes) M is cut until
    the landmark arrays take at most a quarter of what the data and CG vectors leave."""
    monkeypatch.setattr(_ridge_memory, "available_bytes", lambda where: 2**30)
    n = 10**5
    m = _ridge_memory.auto_components(n=n, d=20, k=1, solver="cg", where="cpu", triton=False)
    fixed = sum(_ridge_memory.persistent_bytes(n=n, d=20, k=1, m=0, solver="cg",
                                         triton=False).values())
    assert 1 <= m < 3641
    assert _ridge_memory._landmark_bytes(n, m, "cg", 1) <= 0.25 * (2**30 - fixed)


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
