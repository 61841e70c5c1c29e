"""K(X, X) and its log-hyperparameter gradient on the GPU (issue 10, item 2).

``kernelkit_gpu.gram_log_gradient`` against the float64 registry reference
(``KernelSpec.gradient``) for every registry kernel (``GPU_CASES``), on random, offset (x + 1000)
and duplicated data, odd sizes, every floating input dtype and a NaN-poisoned output buffer; then
the scikit-learn classes' ``kernel(X, eval_gradient=True)``, which takes this path when the kernel
runs on the GPU and the result fits, and the reference otherwise.

Pure torch (no Triton): runs on the CPU here and with ``pytest --device cuda`` on a GPU.
"""

import numpy as np
import pytest
import torch
from numpy.testing import assert_allclose, assert_array_equal

import kernelkit._compute
import kernelkit_gpu
from kernelkit_gpu.pairwise import log_gradient
from kernelkit.kernels import RBF, Matern, Polynomial, RationalQuadratic
from kernelkit_math.registry import get_kernel
from tests.gpu_cases import CASE_IDS, DOT_KINDS, GPU_CASES, to_numpy64

#: float64 throughout, distances by direct differences as in the reference; the GPU path
#: differentiates by forward-mode AD where the reference uses closed forms, so the two differ by
#: rounding (a few 1e-16 relative): rtol 1e-10 leaves a wide margin and still catches any wrong
#: factor, sign or column. The absolute floor is relative to the largest entry (dot kernels
#: cancel).
RTOL = 1e-10
ATOL_REL = 1e-12


def _data(rng, n, d, name, offset):
    """Standard normal rows shifted by ``offset`` (stationary kernels only: dot kernels of
    offset data saturate), with the first row repeated last (a zero distance off the diagonal)."""
    shift = offset if name not in DOT_KINDS else 0.0
    X = shift + rng.standard_normal((n, d))
    return np.vstack([X, X[:1]]) if n > 1 else X


def _check(K, dK, X, name, params):
    Kr, dKr = get_kernel(name).gradient(X, **params)
    K, dK = to_numpy64(K), to_numpy64(dK)
    assert dK.shape == dKr.shape
    assert np.isfinite(dK).all() and np.isfinite(K).all()
    assert_array_equal(K, K.T)
    for i in range(dK.shape[2]):
        assert_array_equal(dK[:, :, i], dK[:, :, i].T)
    assert_allclose(K, Kr, rtol=RTOL, atol=ATOL_REL * np.abs(Kr).max())
    if dKr.size:
        assert_allclose(dK, dKr, rtol=RTOL, atol=ATOL_REL * max(np.abs(dKr).max(), 1e-300))


@pytest.mark.parametrize("offset", [0.0, 1000.0])
@pytest.mark.parametrize("n", [1, 2, 63])
@pytest.mark.parametrize("d", [3, 20])
@pytest.mark.parametrize("case", GPU_CASES, ids=CASE_IDS)
def test_gram_log_gradient_matches_reference(case, d, n, offset, device, rng, poisoned_outputs):
    _, name, make_params = case
    params = make_params(d)
    X = _data(rng, n, d, name, offset)
    x = torch.from_numpy(X).to(device)
    x0 = x.clone()
    K, dK = kernelkit_gpu.gram_log_gradient(x, name, **params)
    assert K.device == x.device and dK.device == x.device
    assert K.dtype == dK.dtype == torch.float64
    _check(K, dK, X, name, params)
    assert torch.equal(x, x0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_gram_log_gradient_low_precision_input_is_computed_in_float64(dtype, device, rng):
    """16- and 32-bit data: the gradient of the rounded values, in float64."""
    x = torch.from_numpy(rng.standard_normal((17, 4))).to(dtype=dtype, device=device)
    params = dict(gamma=np.array([0.1, 0.2, 0.3, 0.4]))
    K, dK = kernelkit_gpu.gram_log_gradient(x, "rbf", **params)
    _check(K, dK, to_numpy64(x), "rbf", params)


@pytest.mark.parametrize("bad, error, match", [
    (lambda x: torch.where(x > 1.0, float("nan"), x), ValueError, "x contains NaN or infinity"),
    (lambda x: x[0], ValueError, "x"),
    (lambda x: x.to(torch.int64), TypeError, "x"),
], ids=["nan", "1-D", "integer"])
def test_gram_log_gradient_bad_input(bad, error, match, device, rng):
    x = torch.from_numpy(rng.standard_normal((8, 3))).to(device)
    with pytest.raises(error, match=match):
        kernelkit_gpu.gram_log_gradient(bad(x), "rbf")


def test_gram_log_gradient_is_thread_safe(device, rng):
    """Forward-mode AD levels are process-wide in torch: concurrent calls must not interfere."""
    from concurrent.futures import ThreadPoolExecutor

    X = rng.standard_normal((40, 3))
    x = torch.from_numpy(X).to(device)
    params = [dict(gamma=np.array([0.1, 0.5, 1.0]) * (1 + i / 10)) for i in range(16)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda p: kernelkit_gpu.gram_log_gradient(x, "rbf", **p), params))
    for p, (K, dK) in zip(params, results):
        _check(K, dK, X, "rbf", p)


def test_gram_log_gradient_bad_kernel_and_params(device):
    x = torch.ones((4, 2), dtype=torch.float64, device=device)
    with pytest.raises(ValueError, match="kernel"):
        kernelkit_gpu.gram_log_gradient(x, "no-such-kernel")
    with pytest.raises(ValueError, match="gamma"):
        kernelkit_gpu.gram_log_gradient(x, "rbf", gamma=-1.0)
    with pytest.raises(TypeError, match="length_scale"):
        kernelkit_gpu.gram_log_gradient(x, "rbf", length_scale=1.0)


# ------------------------------------------------------------------ the scikit-learn classes
CLASS_CASES = {
    "rbf-aniso": lambda dev: RBF([0.5, 1.0, 2.0, 3.0], device=dev),
    "matern-1.5": lambda dev: Matern(1.3, nu=1.5, device=dev),
    "rq-aniso": lambda dev: RationalQuadratic([1.0, 2.0, 0.5, 1.5], alpha=2.0, device=dev),
    "polynomial-coef0-fixed": lambda dev: Polynomial(degree=3, gamma=0.5, coef0=-0.5,
                                                    coef0_bounds="fixed", device=dev),
}


@pytest.mark.parametrize("case", list(CLASS_CASES), ids=list(CLASS_CASES))
def test_class_eval_gradient_on_the_gpu(case, device, rng, monkeypatch):
    """On the GPU the classes take gram_log_gradient (spied) and agree with the CPU reference."""
    if device != "cuda":
        pytest.skip("needs a CUDA GPU (pytest --device cuda)")
    calls = []
    real = log_gradient.gram_log_gradient
    monkeypatch.setattr(log_gradient, "gram_log_gradient",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    X = rng.standard_normal((50, 4)) + 1000.0 * (case != "polynomial-coef0-fixed")
    kernel = CLASS_CASES[case]("cuda")
    K, dK = kernel(X, eval_gradient=True)
    Kr, dKr = CLASS_CASES[case]("cpu")(X, eval_gradient=True)
    assert calls == [1]
    assert_array_equal(K, kernel(X))  # the same K with and without the gradient
    assert_array_equal(np.diag(K), kernel.diag(X))
    assert_allclose(K, Kr, rtol=RTOL, atol=ATOL_REL)
    assert_allclose(dK, dKr, rtol=RTOL, atol=ATOL_REL * np.abs(dKr).max())


def test_class_eval_gradient_falls_back_to_the_cpu_when_it_does_not_fit(monkeypatch, rng):
    """A GPU without room for K and dK: the float64 reference on the CPU, no CUDA call."""
    monkeypatch.setattr(kernelkit._compute, "resolve_device", lambda device: "cuda")
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *a: (1 << 20, 1 << 30))

    def no_gpu(*args, **kwargs):
        raise AssertionError("the GPU path ran although the result does not fit")

    monkeypatch.setattr(log_gradient, "gram_log_gradient", no_gpu)
    monkeypatch.setattr(kernelkit._compute, "_gpu_gram",  # K alone: the reference stands in
                        lambda spec, X, Y, params: spec.value_fn(X, Y, **params))
    X = rng.standard_normal((400, 4))  # K and dK: 400^2 x (1 + 4 + 8) x 8 bytes = 16.6 MB > 1 MiB
    K, dK = RBF([0.5, 1.0, 2.0, 3.0], device="cuda")(X, eval_gradient=True)
    Kr, dKr = RBF([0.5, 1.0, 2.0, 3.0], device="cpu")(X, eval_gradient=True)
    assert_array_equal(K, Kr)
    assert_array_equal(dK, dKr)
