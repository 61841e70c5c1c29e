"""Non-finite input to the low-level kernelkit_gpu entry points (issue 9, item 1).

The Gram-family kernels centre (a mean over all rows), normalise (row norms) and clamp their
pairwise quantities, so one NaN used to spread to every entry or hide: ``gram`` of rbf at D > 16
returned a matrix of ones. Every entry point that prepares Gram-family data now refuses NaN and
infinity with a ValueError naming the argument (as scikit-learn's ``check_array``); the naive
torch twins apply the same rule. Inputs are never modified.

Runs under the Triton interpreter on the CPU (``TRITON_INTERPRET=1``) and with
``pytest --device cuda``.
"""

import importlib

import numpy as np
import pytest
import torch

import kernelkit
import kernelkit_gpu
from kernelkit_gpu import checks
from kernelkit_gpu.attention.naive import kernel_attention_naive
from kernelkit_gpu.attention.smoother import kernel_attention
from tests.conftest import TOL
from tests.gpu_cases import DTYPES, randn, reference, spy_kernels, to_numpy64

gram_module = importlib.import_module("kernelkit_gpu.pairwise.gram_fused")
matvec_module = importlib.import_module("kernelkit_gpu.pairwise.matvec_fused")

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


# ------------------------------------------------- issue 18: the check fused into the preparation
def _spy_start_read(monkeypatch, calls):
    real = checks.FiniteCheck.start_read

    def start_read(self):
        calls.append(("read", {}))
        return real(self)

    monkeypatch.setattr(checks.FiniteCheck, "start_read", start_read)


@pytest.mark.parametrize("value", ["nan", "inf"])
@pytest.mark.parametrize("which", ["x", "y"])
@pytest.mark.parametrize("d", [3, 20], ids=["direct", "mma"])
def test_gram_check_is_fused_into_the_preparation(d, which, value, device, rng, monkeypatch):
    """gram() sets its NaN / range flags in ``_gram_prep_kernel`` (spy: every preparation
    launch has CHECK=True and a flag pointer) and runs no ``torch.isfinite`` reduction on finite
    input; the flags are read (``FiniteCheck.start_read``) before the Gram kernel is queued, so
    the host waits for the preparation only. NaN or inf in x or in y still raises naming it."""
    calls = spy_kernels(monkeypatch, gram_module, {
        "_gram_prep_kernel": "prep", "_gram_mma_kernel": "tiles", "_gram_direct_kernel": "tiles"})
    _spy_start_read(monkeypatch, calls)
    reductions = []
    real_isfinite = torch.isfinite
    monkeypatch.setattr(torch, "isfinite", lambda t: (reductions.append(t), real_isfinite(t))[1])
    x = randn(rng, (6, d), torch.float32, device)
    y = randn(rng, (5, d), torch.float32, device)
    K = kernelkit_gpu.gram(x, y, kernel="rbf")
    assert [c[0] for c in calls] == ["prep", "prep", "read", "tiles"], calls
    assert all(kw["CHECK"] for tag, kw in calls if tag == "prep")
    assert reductions == [] and bool(real_isfinite(K).all())
    if which == "x":
        x = _spoil(x, BAD_VALUES[value], (3, d - 1))
    else:
        y = _spoil(y, BAD_VALUES[value], (1, 0))
    with pytest.raises(ValueError, match=rf"^{which} contains NaN or infinity"):
        kernelkit_gpu.gram(x, y, kernel="rbf")


@pytest.mark.parametrize("d", [3, 20], ids=["direct", "mma"])
def test_matvec_check_is_read_before_the_product(d, device, rng, monkeypatch):
    """kernel_matvec prepares in torch (no preparation kernel): its flags are set by reductions
    over the prepared x and y and over v, and their read starts before the product is queued
    (spy), so the call waits for the preparation only; bad y is still named."""
    calls = spy_kernels(monkeypatch, matvec_module, {"_matvec_kernel": "product"})
    _spy_start_read(monkeypatch, calls)
    x = randn(rng, (6, d), torch.float32, device)
    y = randn(rng, (5, d), torch.float32, device)
    v = randn(rng, (5,), torch.float32, device)
    kernelkit_gpu.kernel_matvec(x, y, v, "rbf")
    assert [c[0] for c in calls] == ["read", "product"], calls
    with pytest.raises(ValueError, match=r"^y contains NaN or infinity"):
        kernelkit_gpu.kernel_matvec(x, _spoil(y, float("inf"), (2, 1)), v, "rbf")


def test_gram_check_is_off_inside_assume_finite(device, rng, monkeypatch):
    """Inside assume_finite the preparation is launched without the check (CHECK=False)."""
    calls = spy_kernels(monkeypatch, gram_module, {"_gram_prep_kernel": "prep"})
    x = randn(rng, (6, 20), torch.float32, device)
    with kernelkit_gpu.assume_finite():
        kernelkit_gpu.gram(x, kernel="rbf")
    assert [kw["CHECK"] for _, kw in calls] == [False]


# ------------------------------------------- issue 18 N: the edge of the float32 range
#: The four entry points of the Gram family, each returning K (matvec: K @ e_j column by column
#: is too slow; K @ 1 is compared instead, against the reference's row sums).
def _gram(fn):
    return lambda x, y, kernel, **p: fn(x, y, kernel=kernel, **p)


def _matvec(fn):
    return lambda x, y, kernel, **p: fn(x, x if y is None else y,
                                        torch.ones(x.shape[0] if y is None else y.shape[0],
                                                   dtype=x.dtype, device=x.device), kernel, **p)


ENTRY_POINTS = {
    "gram": (_gram(kernelkit_gpu.gram), False),
    "gram_naive": (_gram(kernelkit_gpu.gram_naive), False),
    "kernel_matvec": (_matvec(kernelkit_gpu.kernel_matvec), True),
    "kernel_matvec_naive": (_matvec(kernelkit_gpu.kernel_matvec_naive), True),
}


def _check_against_reference(out, name, params, x, y, matvec, dtype_name):
    ref = reference(name, params, x, y)
    if matvec:
        ref = ref.sum(axis=1)
    # float32: the kernels' own accuracy bound (TOL, see tests/conftest.py); the sums of K @ 1
    # add up to 5 values below 1 (1e-6 each)
    np.testing.assert_allclose(to_numpy64(out), ref, **TOL[dtype_name])


@pytest.mark.parametrize("symmetric", [True, False], ids=["xx", "xy"])
@pytest.mark.parametrize("d", [3, 20])
@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
def test_gamma_that_overflows_float32_is_refused(entry, d, symmetric, device, rng):
    """rbf with gamma = 3e38: gamma log2(e) (the number the epilogue computes with) overflows
    float32, which gave NaN on duplicate rows (0 * inf) and an all-NaN kernel_matvec. float32
    input is refused naming gamma; float64 input computes it (1 on duplicates, 0 elsewhere), and
    float32 with gamma = 2e38 (in range) matches the float64 reference."""
    fn, matvec = ENTRY_POINTS[entry]
    # small integers in 4 rows: centred on their mean they are multiples of 1/4, so every
    # squared distance is exact (the naive twins' expansion included): the duplicates' 0 stays 0
    # and every other pair has d² >= 1
    x = torch.from_numpy(rng.integers(-3, 4, (4, d))).to(torch.float32).to(device)
    x[1] = x[0]
    y = None if symmetric else x.flip(0).clone()
    with pytest.raises(ValueError, match=r"gamma=3e\+38.*out of range|out of range.*gamma=3e\+38"):
        fn(x, y, "rbf", gamma=3e38)
    x64 = x.to(torch.float64)
    y64 = None if y is None else y.to(torch.float64)
    _check_against_reference(fn(x64, y64, "rbf", gamma=3e38), "rbf", dict(gamma=3e38), x64, y64,
                             matvec, "float64")
    _check_against_reference(fn(x, y, "rbf", gamma=2e38), "rbf", dict(gamma=2e38), x, y,
                             matvec, "float32")


@pytest.mark.parametrize("dtype_name", ["float32", "bfloat16", "float64"])
@pytest.mark.parametrize("which", ["x", "y"])
@pytest.mark.parametrize("d", [3, 20])
@pytest.mark.parametrize("kernel", ["linear", "rbf"])
@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
def test_data_whose_products_overflow_are_refused(entry, kernel, d, which, dtype_name, device,
                                                   rng):
    """Linear on data of magnitude 1e20 gave NaN (float32 products overflow, inf - inf); rbf
    the same through ||x||² + ||y||² - 2 x·y. Such data are refused naming the argument
    (float64: at 1e160); linear on data 1000 times smaller (float64: 1e10) computes, matching
    the float64 reference."""
    fn, matvec = ENTRY_POINTS[entry]
    big, shrink = (1e160, 1e-10) if dtype_name == "float64" else (1e20, 1e-3)
    small = randn(rng, (4, d), DTYPES[dtype_name], device)
    huge = randn(rng, (5, d), DTYPES[dtype_name], device, spread=big)
    x, y = (huge, small) if which == "x" else (small, huge)
    with pytest.raises(ValueError, match=rf"^{which} is out of range for float(32|64) arithmetic"):
        fn(x, y, kernel)
    if kernel != "linear":
        return
    # in range: squared norms of at most D (4 sigma)² 1e34 (1e300), below finfo.max / 8
    x, y = (t * shrink for t in (x, y))
    X, Y = to_numpy64(x), to_numpy64(y)
    ref, size = X @ Y.T, np.abs(X) @ np.abs(Y).T
    if matvec:
        ref, size = ref.sum(axis=1), size.sum(axis=1)
    # a float32 (float64) dot product of length D errs by at most ~D u sum |x_k y_k|; 64 u covers
    # D = 20 and the split tensor-core products (as gpu_cases.check_values)
    u = 2.0**-53 if dtype_name == "float64" else 2.0**-24
    err = np.abs(to_numpy64(fn(x, y, kernel)) - ref)
    assert (err <= 64 * u * size).all(), err / size


@pytest.mark.parametrize("case", [
    ("matern", dict(length_scale=1e-15, nu=1.5)),
    ("matern", dict(length_scale=1e-15, nu=2.5)),
    ("rational_quadratic", dict(length_scale=1e-15, alpha=1e-3)),
], ids=["matern15", "matern25", "rational_quadratic"])
@pytest.mark.parametrize("d", [3, 20])
@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
def test_epilogue_where_the_scaled_distance_overflows(entry, d, case, device, rng):
    """matern (nu 1.5, 2.5) and rational quadratic with length_scale = 1e-15 on data spread 1e5:
    p0 s = d² / l² overflows float32 (but the parameters and data are in range). Matérn gave
    (1 + inf) * 0 = NaN (now 0, the reference's value) and rational quadratic
    log2(inf) * (inf / inf) = NaN in Triton and 0 in the torch twin (now
    (p0 s)^-alpha, about 0.91 at alpha = 1e-3)."""
    fn, matvec = ENTRY_POINTS[entry]
    name, params = case
    x = randn(rng, (6, d), torch.float32, device, spread=1e5)
    y = randn(rng, (5, d), torch.float32, device, spread=1e5)
    _check_against_reference(fn(x, y, name, **params), name, params, x, y, matvec, "float32")


@pytest.mark.parametrize("dtype_name", ["float32", "float64"])
@pytest.mark.parametrize("d", [3, 20])
@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
def test_range_limit_is_finfo_max_over_8(entry, d, dtype_name, device):
    """The limit is on the squared row norm, finfo.max / 8, not on overflow to infinity: rows
    of squared norm 1.5 x the limit (finite) are refused, rows of 0.5 x the limit are not."""
    fn, _ = ENTRY_POINTS[entry]
    dtype = DTYPES[dtype_name]
    limit = checks.range_limit(dtype)
    for factor, refused in ((1.5, True), (0.5, False)):
        # rows 0, a, -a: the column mean is 0, so centred or not, rows 1 and 2 have squared
        # norm factor * limit
        x = torch.zeros((3, d), dtype=torch.float64)
        x[1] = (factor * limit / d) ** 0.5
        x[2] = -x[1]
        x = x.to(dtype=dtype, device=device)
        if refused:
            with pytest.raises(ValueError, match=r"^x is out of range"):
                fn(x, None, "rbf")
        else:
            assert bool(torch.isfinite(fn(x, None, "rbf")).all())


def test_gram_returns_before_its_tiles_finish(device):
    """On a GPU the default (checked) call waits for the preparation's flags only: right after
    it returns, the Gram kernel of a 2-3 ms problem (N = 32768, D = 64 on an H100) is still
    running. (The check before issue 18 read its flags behind the Gram kernels: the stream was
    idle on return, and the host's next launches left the GPU waiting.)"""
    if device != "cuda":
        pytest.skip("host / GPU overlap exists on a GPU only (pytest --device cuda)")
    x = torch.randn(32768, 64, device=device)
    out = torch.empty(32768, 32768, device=device)
    kernelkit_gpu.gram(x, kernel="rbf", out=out)  # compile
    torch.cuda.synchronize()
    kernelkit_gpu.gram(x, kernel="rbf", out=out)
    still_running = not torch.cuda.current_stream().query()
    torch.cuda.synchronize()
    assert still_running
