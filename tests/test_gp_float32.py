"""Issue 18 A: the GP's float32 kernel blocks keep their digits at any offset and spread.

The blocks are formed from data centred on the float64 mean, scaled in float64 and rounded once
to float32, with squared distances from direct differences (:mod:`kernelkit.operators.covariance`). The
reference is scikit-learn's exact float64 GPR with the same fixed kernel. Runs on the CPU (torch
float32) and with ``pytest --device cuda`` on the GPU.
"""

import numpy as np
import pytest
import torch
from sklearn.gaussian_process import GaussianProcessRegressor as SklearnGPR
from sklearn.gaussian_process.kernels import RBF, WhiteKernel

import kernelkit as kk
from kernelkit.operators.covariance import CovarianceOperator
from kernelkit.operators.kernel_tree import parse_kernel

U32 = 2.0**-24  # float32 unit round-off
N = 150
OFFSETS = [1e3, 1e4, 1e5]
#: Length scale as a fraction of the spread of the data.
LENGTH_FRACTIONS = [1e-3, 1e-1, 1e1, 1e3]


def _data(offset, seed=0):
    """N sorted points spread over [offset, 2 offset] (spread = offset), and noisy targets."""
    rng = np.random.default_rng(seed)
    base = np.sort(rng.uniform(0.0, 1.0, N))[:, None]
    y = np.sin(10.0 * np.pi * base[:, 0]) + 0.1 * rng.standard_normal(N)
    test = np.linspace(0.0, 1.0, 40)[:, None]
    return offset + offset * base, y, offset + offset * test


def _kernel_bound(X, length_scale):
    """Worst error of a float32 kernel value, derived.

    Each centred coordinate x~ is rounded once to float32 (error <= u |x~|), so the scaled
    distance r = |x~_i - x~_j| / l errs by at most 2 u max|x~| / l plus the rounding of the
    difference and of r^2 (u r, ...). |dk/dr| <= r exp(-r^2 / 2) <= 0.61 for the RBF, and the
    exp2 and the product with p0 add a few u: |dk| <= 2 u max|x~| / l + 4 u. Measured 0.2-0.3 of
    this bound at l = 1e-3 of the spread and 0.1 at l >= 10 spreads (where the 4 u floor rules).
    """
    R = np.abs(X - X.mean(0)).max()
    return 2.0 * U32 * R / length_scale + 4.0 * U32


@pytest.mark.parametrize("fraction", LENGTH_FRACTIONS, ids=lambda f: f"ls{f:g}")
@pytest.mark.parametrize("offset", OFFSETS, ids=lambda o: f"offset{o:g}")
def test_float32_kernel_block_within_rounding_bound(device, offset, fraction):
    X, _, _ = _data(offset)
    length_scale = fraction * offset
    kernel = RBF(length_scale, "fixed") + WhiteKernel(0.1, "fixed")
    op = CovarianceOperator(X, parse_kernel(kernel), 0.0, device, torch.float32)
    params = op.structure.params(torch.zeros(0, dtype=torch.float64, device=device))
    K = torch.full((N, N), float("nan"), dtype=torch.float32, device=device)  # poisoned
    K[:] = op.block(op.X64, op.X64, params)
    K = K.double().cpu().numpy()
    ref = RBF(length_scale)(X)
    np.testing.assert_allclose(K, ref, rtol=0, atol=_kernel_bound(X, length_scale))
    np.testing.assert_array_equal(np.diag(K), 1.0)  # direct differences: exact diagonal
    np.testing.assert_array_equal(K, K.T)


@pytest.mark.parametrize("fraction", LENGTH_FRACTIONS, ids=lambda f: f"ls{f:g}")
@pytest.mark.parametrize("offset", OFFSETS, ids=lambda o: f"offset{o:g}")
def test_float32_gp_matches_sklearn_at_any_offset(device, offset, fraction):
    X, y, Xt = _data(offset)
    length_scale = fraction * offset
    kernel = RBF(length_scale, "fixed") + WhiteKernel(0.1, "fixed")
    ref = SklearnGPR(kernel, optimizer=None).fit(X, y)
    ours = kk.GaussianProcessRegressor(kernel, optimizer=None, device=device, dtype="float32",
                                       exact_max_n=0, cg_tol=1e-6).fit(X, y)
    mean, std = ours.predict(Xt, return_std=True)
    ref_mean, ref_std = ref.predict(Xt, return_std=True)
    bound = _kernel_bound(X, length_scale)
    # mean = sum_j k(x*, x_j) alpha_j: kernel errors dk move it by about dk ||alpha||_inf, and
    # CG stopping at relative residual cg_tol by about cg_tol ||alpha||_inf (float32 CG; this
    # term rules at long length scales, cond(K) ~ 1e4). Measured <= 2.9 (bound + cg_tol)
    # ||alpha||_inf (l = 1e3 spreads), 0.1 at l = 1e-3. std: the variance is
    # k(x*, x*) - k*^T K^-1 k*, whose kernel terms err by O(dk); measured <= 0.4 bound.
    # Before the fix (r^2 expanded in float32) errors reached 0.3.
    np.testing.assert_allclose(mean, ref_mean, rtol=0,
                               atol=10.0 * (bound + 1e-6) * np.abs(ref.alpha_).max())
    np.testing.assert_allclose(std, ref_std, rtol=0, atol=3.0 * bound)


def test_float32_gp_issue_reproduction(device):
    """Issue 18's case: 400 timestamps in seconds over a day, RBF(20) + WhiteKernel(0.1)."""
    rng = np.random.default_rng(0)
    t = np.sort(rng.uniform(0.0, 86400.0, 400))[:, None]
    y = np.sin(t[:, 0] / 300.0) + 0.1 * rng.standard_normal(400)
    tt = np.linspace(0.0, 86400.0, 50)[:, None]
    kernel = RBF(20.0, "fixed") + WhiteKernel(0.1, "fixed")
    ref = SklearnGPR(kernel, optimizer=None).fit(t, y)
    ours = kk.GaussianProcessRegressor(kernel, optimizer=None, device=device, dtype="float32",
                                       exact_max_n=0, cg_tol=1e-6).fit(t, y)
    mean, std = ours.predict(tt, return_std=True)
    ref_mean, ref_std = ref.predict(tt, return_std=True)
    bound = _kernel_bound(t, 20.0)  # 2.6e-4: the float32 rounding of 43200 s is 0.004 s
    # Measured (CPU): mean 3.1e-5, std 8.4e-5 (0.3 bound); before the fix 0.33 and 0.16.
    np.testing.assert_allclose(mean, ref_mean, rtol=0, atol=bound)
    np.testing.assert_allclose(std, ref_std, rtol=0, atol=bound)
