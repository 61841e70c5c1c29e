"""Dispatch from the user API: NumPy or torch in, CPU or GPU, the right type and device out.

On the CPU (CI) these cover torch CPU tensors and the no-GPU rules; with ``--device cuda`` the
same tests run the Triton Gram kernels behind the sklearn classes, pairwise functions and
``kernelkit.gram``, and a spy proves the GPU path ran.
"""

import subprocess
import sys

import numpy as np
import pytest
import torch

import kernelkit
from kernelkit.blocked_gram import gram
from kernelkit_math import get_kernel
from tests.conftest import TOL


@pytest.fixture
def gpu_spy(device, monkeypatch):
    """Counts calls into kernelkit_gpu.gram (only meaningful on --device cuda)."""
    calls = []
    if device == "cuda":
        import kernelkit_gpu

        real = kernelkit_gpu.gram

        def spy(*args, **kwargs):
            calls.append(args[0].device.type)
            return real(*args, **kwargs)

        monkeypatch.setattr(kernelkit_gpu, "gram", spy)
    return calls


@pytest.fixture
def data(rng):
    return rng.normal(size=(37, 5)), rng.normal(size=(20, 5))


# ----------------------------------------------------------------------------- torch tensors
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16], ids=str)
@pytest.mark.parametrize("same", [True, False], ids=["XX", "XY"])
def test_pairwise_torch_in_torch_out_same_device(device, data, dtype, same, gpu_spy):
    X, Y = data
    x = torch.from_numpy(X).to(device=device, dtype=dtype)
    y = None if same else torch.from_numpy(Y).to(device=device, dtype=dtype)
    K = kernelkit.rbf_kernel(x, y, gamma=0.3)
    assert isinstance(K, torch.Tensor) and K.device.type == device
    assert K.dtype == (torch.float64 if dtype == torch.float64 else torch.float32)
    x64 = x.double().cpu().numpy()
    ref = get_kernel("rbf").value(x64, None if same else y.double().cpu().numpy(), gamma=0.3)
    tol = TOL["float64"] if dtype == torch.float64 else TOL["float32"]
    np.testing.assert_allclose(K.cpu().numpy(), ref, **tol)
    assert gpu_spy == (["cuda"] if device == "cuda" else [])


def test_kernel_class_torch_in_gives_float64_tensor(device, data, gpu_spy):
    X, Y = data
    x, y = (torch.from_numpy(a).float().to(device) for a in (X, Y))
    K = kernelkit.Matern(length_scale=1.7, nu=2.5)(x, y)
    assert isinstance(K, torch.Tensor) and K.dtype == torch.float64 and K.device.type == device
    ref = get_kernel("matern").value(x.double().cpu().numpy(), y.double().cpu().numpy(), length_scale=1.7, nu=2.5)
    np.testing.assert_allclose(K.cpu().numpy(), ref, **TOL["float64"])
    assert len(gpu_spy) == (1 if device == "cuda" else 0)


def test_torch_inputs_are_validated(device):
    x = torch.ones(4, 3, device=device)
    with pytest.raises(ValueError, match="X must be 2-D"):
        kernelkit.rbf_kernel(torch.ones(3, device=device))
    with pytest.raises(ValueError, match="Input X contains NaN"):
        kernelkit.rbf_kernel(torch.full((2, 2), float("nan"), device=device))
    with pytest.raises(ValueError, match="3 features but Y has 2"):
        kernelkit.rbf_kernel(x, torch.ones(2, 2, device=device))
    with pytest.raises(TypeError, match="floating dtype"):
        kernelkit.rbf_kernel(torch.ones(2, 2, dtype=torch.int64, device=device))
    with pytest.raises(TypeError, match="both be torch tensors"):
        kernelkit.rbf_kernel(x, np.ones((2, 3)))
    other = "cuda" if device == "cpu" else "cpu"
    with pytest.raises(ValueError, match=f"device='{other}' but the tensors are on"):
        kernelkit.rbf_kernel(x, device=other)


def test_torch_inputs_are_not_modified(device, data):
    x = torch.from_numpy(data[0]).to(device)
    before = x.clone()
    kernelkit.laplacian_kernel(x)
    assert torch.equal(x, before)


# ----------------------------------------------------------------------------- NumPy + device
@pytest.mark.subprocess
def test_numpy_auto_on_cpu_machine_does_not_import_torch():
    code = (
        "import sys, numpy as np, kernelkit; import kernelkit._util.device as d; "
        "K = kernelkit.rbf_kernel(np.ones((3, 2))); "
        "print(d.gpu_available() or 'torch' not in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


def test_device_cuda_without_gpu_is_a_clear_error(no_gpu, data):
    with pytest.raises(ValueError, match="device='cuda' but no CUDA GPU is available"):
        kernelkit.rbf_kernel(data[0], device="cuda")
    with pytest.raises(ValueError, match="device='cuda' but no CUDA GPU is available"):
        gram(data[0], device="cuda")


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("kernel", ["rbf", "laplacian", "polynomial", "cosine"])
def test_numpy_on_requested_device_matches_reference(device, data, dtype, kernel, gpu_spy):
    X, Y = (a.astype(dtype) for a in data)
    K = kernelkit.pairwise_kernels(X, Y, metric=kernel, device=device)
    assert isinstance(K, np.ndarray) and K.dtype == dtype
    ref = get_kernel(kernel).value(X.astype(np.float64), Y.astype(np.float64))
    tol = TOL["float64"] if dtype == np.float64 else TOL["float32"]
    np.testing.assert_allclose(K, ref, **tol)
    assert len(gpu_spy) == (1 if device == "cuda" else 0)


def test_sklearn_class_on_device_is_float64_numpy(device, data, gpu_spy):
    X, _ = data
    K = kernelkit.RBF(length_scale=1.3, device=device)(X.astype(np.float32))
    assert isinstance(K, np.ndarray) and K.dtype == np.float64 and K.flags.writeable
    np.testing.assert_array_equal(K, K.T)
    np.testing.assert_allclose(K, get_kernel("rbf").value(X.astype(np.float32).astype(np.float64), gamma=1 / (2 * 1.3**2)), **TOL["float64"])
    assert len(gpu_spy) == (1 if device == "cuda" else 0)


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["float64", "float32"])
def test_streamed_gram_on_device(device, tmp_path, rng, dtype, gpu_spy):
    X = (rng.normal(size=(70, 3)) + 1000.0).astype(dtype)
    path = gram(X, kernel="rbf", gamma=0.7, out=tmp_path / "K.npy", block_size=16, device=device)
    K = np.load(path)
    assert K.dtype == dtype
    np.testing.assert_array_equal(K, K.T)
    np.testing.assert_array_equal(np.diag(K), 1.0)
    ref = get_kernel("rbf").value(X.astype(np.float64), gamma=0.7)
    np.testing.assert_allclose(K, ref, **(TOL["float64"] if dtype == np.float64 else TOL["float32"]))
    assert (len(gpu_spy) > 0) == (device == "cuda")


@pytest.mark.parametrize("kernel", ["sigmoid", "polynomial", "exponential", "rbf"])
def test_gpu_float64_gram_diagonal_is_the_reference_diagonal(kernel, monkeypatch, rng):
    """K(X, X) from the GPU (float64) carries diag() exactly: the GPU's tanh / pow / exp may
    round the diagonal 1 ulp away from NumPy's, and the classes promise np.diag(k(X)) ==
    k.diag(X). A GPU result one ulp off on the diagonal stands in for the real kernel."""
    import kernelkit._compute as compute

    spec = get_kernel(kernel)
    X = rng.normal(size=(9, 3))

    def off_by_ulps(spec, X, Y, params):
        K = spec.value_fn(X, Y, **params)
        return K + 4 * np.spacing(np.abs(K))

    monkeypatch.setattr(compute, "_gpu_gram", off_by_ulps)
    params = spec.resolve(3)
    K = compute.numpy_kernel_matrix(spec, X, None, params, "cuda")
    np.testing.assert_array_equal(np.diag(K), spec.diag_fn(X, **params))
    KXY = compute.numpy_kernel_matrix(spec, X, X[:4], params, "cuda")  # K(X, Y): left alone
    np.testing.assert_array_equal(KXY, off_by_ulps(spec, X, X[:4], params))
