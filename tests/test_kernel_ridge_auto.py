"""KernelRidge's ``n_components="auto"`` default (kernelkit.solvers._memory.auto_components), and
the default settings against scikit-learn's exact KernelRidge."""

import math

import numpy as np
import pytest
from sklearn.kernel_ridge import KernelRidge as SKKernelRidge

from kernelkit import KernelRidge
from kernelkit.solvers import _memory


def _data(rng, n, d=3):
    X = rng.uniform(-2.0, 2.0, size=(n, d))
    return X, np.sin(X[:, 0]) + X[:, 1] * X[:, 2] + 0.05 * rng.normal(size=n)


@pytest.mark.parametrize("n, expected", [(10, 8), (1000, 219), (10**5, 3641), (10**6, 13816)])
def test_auto_components_is_sqrt_n_log_n_capped(monkeypatch, n, expected):
    """ceil(sqrt(n) ln n), at most n (n = 10: 7.3 -> 8) and the device cap (GPU 10 000, CPU
    4 000), with memory to spare."""
    monkeypatch.setattr(_memory, "available_bytes", lambda where: 2**40)
    assert expected == min(n, math.ceil(math.sqrt(n) * math.log(n)))
    assert _memory.auto_components(n=n, d=20, k=1, solver="nystrom", where="cuda",
                                   triton=True) == min(expected, 10_000)
    assert _memory.auto_components(n=n, d=20, k=1, solver="nystrom", where="cpu",
                                   triton=False) == min(expected, 4000)


def test_auto_components_shrinks_to_fit_memory(monkeypatch):
    """With 1 GiB free, n = 1e5 and "cg" (n x M factor and basis, 16 n M bytes) M is cut until
    the landmark arrays take at most a quarter of what the data and CG vectors leave."""
    monkeypatch.setattr(_memory, "available_bytes", lambda where: 2**30)
    n = 10**5
    m = _memory.auto_components(n=n, d=20, k=1, solver="cg", where="cpu", triton=False)
    fixed = sum(_memory.persistent_bytes(n=n, d=20, k=1, m=0, solver="cg",
                                         triton=False).values())
    assert 1 <= m < 3641
    assert _memory._landmark_bytes(n, m, "cg", 1) <= 0.25 * (2**30 - fixed)


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
