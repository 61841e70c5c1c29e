"""Non-finite input to the low-level kernelkit_gpu entry points (issue 9, item 1).

The Gram-family kernels centre (a mean over all rows), normalise (row norms) and clamp their
pairwise quantities, so one NaN used to spread to every entry or hide: ``gram`` of rbf at D > 16
returned a matrix of ones. Every entry point that prepares Gram-family data now refuses NaN and
infinity with a ValueError naming the argument (as scikit-learn's ``check_array``); the naive
torch twins apply the same rule. Inputs are never modified.

Runs under the Triton interpreter on the CPU (``TRITON_INTERPRET=1``) and with
``pytest --device cuda``.
"""

import numpy as np
import pytest
import torch

import kernelkit
import kernelkit_gpu
from kernelkit_gpu.attention.naive import kernel_attention_naive
from kernelkit_gpu.attention.smoother import kernel_attention
from tests.gpu_cases import randn

pytestmark = [
    pytest.mark.usefixtures("triton_can_run"),
    # the launchers read the NaN check after queueing their kernels, which then run on the NaN
    # input: NumPy's warnings from the interpreter's arithmetic are expected here
    pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning"),
]

BAD_VALUES = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}


def _spoil(t, value, index):
    t = t.clone()
    t[index] = value
    return t


#: id -> (entry point, K(X, X) or K(X, Y), the argument spoiled)
GRAM_CALLS = {
    "gram-xx": (kernelkit_gpu.gram, True, "x"),
    "gram-xy-x": (kernelkit_gpu.gram, False, "x"),
    "gram-xy-y": (kernelkit_gpu.gram, False, "y"),
    "gram_naive-xx": (kernelkit_gpu.gram_naive, True, "x"),
    "gram_naive-xy-y": (kernelkit_gpu.gram_naive, False, "y"),
}


@pytest.mark.parametrize("value", list(BAD_VALUES), ids=list(BAD_VALUES))
@pytest.mark.parametrize("d", [3, 20])
@pytest.mark.parametrize("call", list(GRAM_CALLS), ids=list(GRAM_CALLS))
@pytest.mark.parametrize("kernel", ["rbf", "linear", "cosine", "laplacian"])
def test_gram_refuses_non_finite(kernel, call, d, value, device, rng):
    """One NaN / inf in x or y: ValueError naming it (D = 3 direct, D = 20 tensor-core path);
    the inputs are left as they were."""
    fn, symmetric, which = GRAM_CALLS[call]
    x = randn(rng, (6, d), torch.float32, device)
    y = randn(rng, (5, d), torch.float32, device)
    if which == "x":
        x = _spoil(x, BAD_VALUES[value], (2, d - 1))
    else:
        y = _spoil(y, BAD_VALUES[value], (4, 0))
    x0, y0 = x.clone(), y.clone()
    with pytest.raises(ValueError, match=rf"^{which} contains NaN or infinity"):
        fn(x, None if symmetric else y, kernel=kernel)
    assert torch.equal(x, x0) or (value == "nan" and torch.equal(x.nan_to_num(), x0.nan_to_num()))
    assert torch.equal(y, y0) or (value == "nan" and torch.equal(y.nan_to_num(), y0.nan_to_num()))


def test_audit_example_no_longer_returns_ones(device):
    """The audit's call: it returned a 6 x 6 matrix of ones, now it raises."""
    x = torch.randn(6, 20, device=device)
    x[2, 3] = float("nan")
    with pytest.raises(ValueError, match="x contains NaN or infinity"):
        kernelkit_gpu.gram(x, kernel="rbf", gamma=0.05)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16],
                         ids=["float64", "float16", "bfloat16"])
def test_gram_refuses_non_finite_every_dtype(dtype, device, rng):
    x = _spoil(randn(rng, (4, 17), dtype, device), float("inf"), (0, 0))
    with pytest.raises(ValueError, match="x contains NaN or infinity"):
        kernelkit_gpu.gram(x, kernel="matern")


@pytest.mark.parametrize("naive", [False, True], ids=["triton", "naive"])
@pytest.mark.parametrize("which", ["x", "y", "v", "u"])
@pytest.mark.parametrize("d", [3, 20])
@pytest.mark.parametrize("kernel", ["rbf", "polynomial", "rational_quadratic"])
def test_matvec_refuses_non_finite(kernel, d, which, naive, device, rng):
    """kernel_matvec and its naive twin: x, y, v (u with transpose=True) are checked."""
    fn = kernelkit_gpu.kernel_matvec_naive if naive else kernelkit_gpu.kernel_matvec
    x = randn(rng, (7, d), torch.float32, device)
    y = randn(rng, (5, d), torch.float32, device)
    transpose = which == "u"
    v = randn(rng, (7,) if transpose else (5, 2), torch.float32, device)
    if which == "x":
        x = _spoil(x, float("nan"), (6, 1))
    elif which == "y":
        y = _spoil(y, float("inf"), (0, 2))
    else:
        v = _spoil(v, float("nan"), 3 if transpose else (3, 1))
    with pytest.raises(ValueError, match=rf"^{which} contains NaN or infinity"):
        fn(x, y, v, kernel, transpose=transpose)


@pytest.mark.parametrize("fn", [kernel_attention, kernel_attention_naive], ids=["triton", "naive"])
@pytest.mark.parametrize("which", ["q", "k", "v"])
@pytest.mark.parametrize("kernel", ["rbf", "linear", "exponential"])
def test_kernel_attention_refuses_non_finite(kernel, which, fn, device, rng):
    """kernel_attention prepares q and k as gram does: non-finite q, k or v is refused (every
    kernel, exponential included, so the rule does not depend on the kernel); its naive twin
    applies the same rule."""
    t = {n: randn(rng, (1, 2, 9, 20), torch.float32, device) for n in "qkv"}
    t[which] = _spoil(t[which], float("nan"), (0, 1, 4, 7))
    with pytest.raises(ValueError, match=rf"^{which} contains NaN or infinity"):
        fn(t["q"], t["k"], t["v"], kernel, eps=1e-3)


def test_kernelkit_torch_path_refuses_non_finite(device, rng):
    """The user-facing functions and classes validate torch tensors before any kernel runs."""
    x = _spoil(randn(rng, (6, 20), torch.float32, device), float("nan"), (2, 3))
    with pytest.raises(ValueError, match="NaN or infinity"):
        kernelkit.rbf_kernel(x, gamma=0.05)
    with pytest.raises(ValueError, match="NaN or infinity"):
        kernelkit.RBF(length_scale=3.0)(x)


def test_finite_input_still_runs(device, rng):
    """The check passes finite data of every size, empty tensors included."""
    x = randn(rng, (6, 20), torch.float32, device)
    K = kernelkit_gpu.gram(x, kernel="rbf", gamma=0.05)
    assert bool(torch.isfinite(K).all())
    e = torch.zeros((0, 20), device=device)
    assert kernelkit_gpu.gram(e).shape == (0, 0)
    assert np.isfinite(kernelkit_gpu.kernel_matvec(x, x, torch.ones(6, device=device)).cpu().numpy()).all()


def test_assume_finite_skips_the_check_and_restores_it(device):
    """Inside kernelkit_gpu.assume_finite() non-finite input is not refused (no reduction, no
    sync); outside, and after the block, it is again."""
    x = torch.ones((5, 3), device=device)
    x[2, 1] = float("nan")
    with kernelkit_gpu.assume_finite():
        K = kernelkit_gpu.gram(x, kernel="rbf", gamma=0.05)
        u = kernelkit_gpu.kernel_matvec(x, x, torch.ones(5, device=device), "rbf", gamma=0.05)
        with kernelkit_gpu.assume_finite(False):
            with pytest.raises(ValueError, match="x contains NaN"):
                kernelkit_gpu.gram(x, kernel="rbf")
    assert K.shape == (5, 5) and u.shape == (5,)
    with pytest.raises(ValueError, match="x contains NaN"):
        kernelkit_gpu.gram(x, kernel="rbf")
    with pytest.raises(TypeError, match="enabled"):
        with kernelkit_gpu.assume_finite("yes"):
            pass
