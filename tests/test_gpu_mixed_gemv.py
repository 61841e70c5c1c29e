"""kernelkit_gpu.mixed_gemv: float32 matrix times float64 vectors, float64 accumulation, against
a float64 NumPy product.

Runs under the Triton interpreter on the CPU and, unchanged, with ``pytest --device cuda``.
"""

import numpy as np
import pytest
import torch

from kernelkit_gpu import mixed_gemv

pytestmark = pytest.mark.usefixtures("triton_can_run")


def _bound(a64, x64, transpose):
    """|error| <= (terms + 2) 2^-53 (|a| |x|): each product a_ij x_j of a float32 and a float64 is
    rounded once in float64, and a sum of `terms` of them adds at most terms - 1 roundings
    (the transposed product also sums its row splits: at most a few more)."""
    a = np.abs(a64.T if transpose else a64)
    terms = a.shape[1] + 2
    return (terms + 2) * 2.0**-53 * (a @ np.abs(x64))


@pytest.mark.parametrize("transpose", [False, True], ids=["a@x", "a.T@x"])
@pytest.mark.parametrize("k", [None, 1, 3], ids=["1d", "k1", "k3"])
@pytest.mark.parametrize("shape", [(1, 1), (63, 65), (300, 17), (5, 700)],
                         ids=["1x1", "63x65", "300x17", "5x700"])
def test_matches_float64_product(shape, k, transpose, device, rng):
    a = torch.tensor(rng.standard_normal(shape) * 10.0**rng.uniform(-3, 3, shape),
                     dtype=torch.float32, device=device)
    rows = shape[0] if transpose else shape[1]
    x = torch.tensor(rng.standard_normal(rows if k is None else (rows, k)) + 1000.0,
                     dtype=torch.float64, device=device)
    got = mixed_gemv.gemv_float64(a, x, transpose=transpose)
    a64, x64 = a.cpu().double().numpy(), x.cpu().numpy()
    want = (a64.T if transpose else a64) @ x64
    assert got.dtype == torch.float64 and got.shape == want.shape
    err = np.abs(got.cpu().numpy() - want)
    assert np.all(err <= _bound(a64, x64.reshape(rows, -1), transpose).reshape(want.shape))


def test_float64_accumulation_not_float32(device):
    """Terms 1, then 1e-8 many times: a float32 running sum drops every small term (1 + 1e-8
    rounds to 1), float64 keeps them all."""
    m = 4097
    a = torch.full((2, m), 1e-8, dtype=torch.float32, device=device)
    a[:, 0] = 1.0
    x = torch.ones(m, dtype=torch.float64, device=device)
    got = mixed_gemv.gemv_float64(a, x)
    want = 1.0 + (m - 1) * float(np.float32(1e-8))
    np.testing.assert_allclose(got.cpu().numpy(), [want, want], rtol=1e-14, atol=0)


@pytest.mark.parametrize("transpose", [False, True])
def test_overwrites_a_poisoned_output(transpose, device, rng):
    a = torch.tensor(rng.standard_normal((70, 45)), dtype=torch.float32, device=device)
    x = torch.tensor(rng.standard_normal((70 if transpose else 45, 2)), dtype=torch.float64,
                     device=device)
    out = torch.full((45 if transpose else 70, 2), float("nan"), dtype=torch.float64,
                     device=device)
    mixed_gemv.gemv_float64_fwd(a, x, out, transpose)
    want = mixed_gemv.gemv_float64_naive(a, x, transpose)
    np.testing.assert_allclose(out.cpu().numpy(), want.cpu().numpy(), rtol=1e-12, atol=1e-12)


def test_empty_and_strided_rows(device):
    a = torch.zeros((0, 5), device=device)
    assert mixed_gemv.gemv_float64(a, torch.ones(5, dtype=torch.float64, device=device)).shape == (0,)
    assert not mixed_gemv.gemv_float64(a, torch.ones(0, dtype=torch.float64, device=device),
                                       transpose=True).any()
    wide = torch.arange(24.0, device=device).reshape(4, 6)[:, :3]  # row stride 6, columns 1
    got = mixed_gemv.gemv_float64(wide, torch.ones(3, dtype=torch.float64, device=device))
    assert got.tolist() == [3.0, 21.0, 39.0, 57.0]


@pytest.mark.parametrize("call,error,match", [
    (lambda d: mixed_gemv.gemv_float64(np.ones((2, 2)), torch.ones(2, dtype=torch.float64)),
     TypeError, "a must be a 2-D floating torch.Tensor"),
    (lambda d: mixed_gemv.gemv_float64(torch.ones((3, 2), device=d).T,
                                       torch.ones(3, dtype=torch.float64, device=d)),
     ValueError, "contiguous rows"),
    (lambda d: mixed_gemv.gemv_float64(torch.ones((2, 3), device=d),
                                       torch.ones(2, dtype=torch.float64, device=d)),
     ValueError, "x must have 3 rows"),
])
def test_bad_input(call, error, match, device):
    with pytest.raises(error, match=match):
        call(device)
