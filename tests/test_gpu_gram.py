"""kernelkit_gpu.gram: the fused Triton Gram kernel against the float64 registry references.

Runs on the CPU under the Triton interpreter (``TRITON_INTERPRET=1``, exported by .ci/run) and,
unchanged, on a GPU with ``pytest --device cuda``. Every output is allocated poisoned (NaN) and
passed as ``out=``, so an element the kernel forgets to write fails the test.
"""

import importlib
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import kernelkit_gpu
from kernelkit_gpu import epilogues
from kernelkit_gpu import prepare
from kernelkit_gpu.pairwise import gram_configs
from kernelkit_math.registry import get_kernel, kernel_names
from tests.conftest import TOL
from tests.gpu_cases import (
    ARD_KERNELS, CASE_IDS, DTYPES, GPU_CASES, OFFSET_DOT_CASES_WELL_CONDITIONED, OFFSET_OTHER_CASES,
    STATIONARY_CASES, ard_case, check_values,
    exact_ard, poisoned, randn, reference, rel_fro, scaled_rows, spy_kernels,
)

gram_module = importlib.import_module("kernelkit_gpu.pairwise.gram_fused")
G = kernelkit_gpu.gram

pytestmark = pytest.mark.usefixtures("triton_can_run")


def gram_into_nan(x, y=None, kernel="rbf", **kwargs):
    n = x.shape[0]
    m = n if y is None else y.shape[0]
    dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    out = poisoned((n, m), dtype, x.device)
    K = kernelkit_gpu.gram(x, y, kernel, out=out, **kwargs)
    assert K is out
    return K


def check_float32_gram(x, y, name, params):
    """K(x, y) (y None: K(x, x)) of float32 input, written into a poisoned output: elementwise
    TOL["float32"] and relative Frobenius error <= 1e-6 against the float64 reference."""
    K = gram_into_nan(x, y, name, **params)
    ref = reference(name, params, x, y)
    check_values(K, ref, "float32", name, params, x, y)
    assert rel_fro(K, ref) <= 1e-6
    return K


def test_every_registry_kernel_has_gpu_cases():
    assert set(kernel_names()) == {c[1] for c in GPU_CASES}


# ------------------------------------------------------------------------ agreement, float32
@pytest.mark.parametrize("d", [1, 3, 17])
@pytest.mark.parametrize("n,m", [(1, 1), (63, 65), (70, 33)], ids=["1x1", "63x65", "70x33"])
@pytest.mark.parametrize("case", GPU_CASES, ids=CASE_IDS)
def test_gram_float32_matches_reference(case, n, m, d, device, rng):
    """K(X, Y) for every kernel, sizes that are not multiples of a tile, D = 1, 3 (direct
    differences) and 17 (tensor-core dot): elementwise TOL and relative Frobenius <= 1e-6."""
    _, name, params_fn = case
    params = params_fn(d)
    x = randn(rng, (n, d), torch.float32, device)
    y = randn(rng, (m, d), torch.float32, device)
    check_float32_gram(x, y, name, params)


@pytest.mark.parametrize("d", [1, 3, 17])
@pytest.mark.parametrize("n", [1, 70])
@pytest.mark.parametrize("case", GPU_CASES, ids=CASE_IDS)
def test_gram_symmetric_exact(case, n, d, device, rng):
    """K(X, X): exactly symmetric, exact diagonal, and as accurate as K(X, Y)."""
    _, name, params_fn = case
    params = params_fn(d)
    x = randn(rng, (n, d), torch.float32, device)
    K = check_float32_gram(x, None, name, params)
    assert torch.equal(K, K.T)
    if get_kernel(name).normalized or name == "cosine":
        # k(0) = 1; cosine: exactly 1 (0 for zero rows). Dot-product kernels: the kernel of the
        # float32 row norms, checked elementwise above (ref's diagonal is the reference diag).
        diag = K.diagonal().cpu().double().numpy()
        assert (diag == get_kernel(name).diag(x.cpu().double().numpy(), **params)).all()


def test_gram_y_is_x_takes_the_symmetric_path(device, rng):
    x = randn(rng, (40, 20), torch.float32, device)
    assert torch.equal(kernelkit_gpu.gram(x, x), kernelkit_gpu.gram(x))


# ----------------------------------------------------------------------------- other dtypes
@pytest.mark.parametrize("dtype_name", ["float64", "float16", "bfloat16"])
@pytest.mark.parametrize("d", [3, 17])
@pytest.mark.parametrize("case", GPU_CASES, ids=CASE_IDS)
def test_gram_other_dtypes(case, d, dtype_name, device, rng):
    """float64 (IEEE float64 throughout) and 16-bit inputs, K(X, Y) and K(X, X).

    16-bit inputs are compared with the float64 reference evaluated on the *rounded* inputs: the
    kernel sees exactly those values, products of 16-bit numbers are exact in float32 and
    accumulate in float32 (cosine and per-feature scales run in float32 after upcasting), so the
    remaining error is float32-sized; TOL["float16"] / TOL["bfloat16"] (the rounding of the
    inputs themselves) is therefore a loose bound that still catches a wrong formula or dtype.
    """
    _, name, params_fn = case
    params = params_fn(d)
    dtype = DTYPES[dtype_name]
    x = randn(rng, (63, d), dtype, device)
    y = randn(rng, (65, d), dtype, device)
    K = gram_into_nan(x, y, name, **params)
    assert K.dtype == (torch.float64 if dtype == torch.float64 else torch.float32)
    check_values(K, reference(name, params, x, y), dtype_name, name, params, x, y)
    Ks = gram_into_nan(x, None, name, **params)
    check_values(Ks, reference(name, params, x), dtype_name, name, params, x)
    assert torch.equal(Ks, Ks.T)


# ----------------------------------------------------------------- gating numerics, float32
@pytest.mark.parametrize("d", [3, 17, 40])
@pytest.mark.parametrize("case", OFFSET_OTHER_CASES, ids=[c[0] for c in OFFSET_OTHER_CASES])
def test_gram_offset_1000(case, d, device, rng):
    """Data at 1000 with spread 0.05 (the registry's offset examples: K spans (0, 1) there): the
    naive float32 expansion errs by up to 1.0 here."""
    _, name, params_fn = case
    params = params_fn(d)
    x = randn(rng, (70, d), torch.float32, device, offset=1000.0, spread=0.05)
    y = randn(rng, (33, d), torch.float32, device, offset=1000.0, spread=0.05)
    check_float32_gram(x, y, name, params)
    Ks = check_float32_gram(x, None, name, params)
    assert torch.equal(Ks, Ks.T)


@pytest.mark.parametrize("d", [17, 40, 512])
@pytest.mark.parametrize("case", OFFSET_DOT_CASES_WELL_CONDITIONED,
                         ids=[c[0] for c in OFFSET_DOT_CASES_WELL_CONDITIONED])
def test_gram_offset_1000_dot_kernels(case, d, device, rng):
    """Dot products of data at 1000 reach 1e6 D: accumulated uncentred on tensor cores they lost
    digits (polynomial D = 512: 5.6e-6 on an H100); centred with float64 row offsets they do not."""
    _, name, params_fn = case
    params = params_fn(d)
    x = randn(rng, (70, d), torch.float32, device, offset=1000.0, spread=0.05)
    y = randn(rng, (33, d), torch.float32, device, offset=1000.0, spread=0.05)
    check_float32_gram(x, y, name, params)
    Ks = check_float32_gram(x, None, name, params)
    assert torch.equal(Ks, Ks.T)


WIDE_DOT_CASES = [c for c in GPU_CASES if c[0] in ("linear", "cosine", "polynomial")]


@pytest.mark.parametrize("case", WIDE_DOT_CASES, ids=[c[0] for c in WIDE_DOT_CASES])
def test_gram_many_features_dot_kernels(case, device, rng):
    """D = 512 standard-normal data: x·y ~ 22 while partial sums wander as far; tensor cores
    accumulating with truncation over all features erred 3.3e-6 (linear, H200) until each
    16-feature slice got its own accumulator."""
    _, name, params_fn = case
    params = params_fn(512)
    x = randn(rng, (70, 512), torch.float32, device)
    y = randn(rng, (33, 512), torch.float32, device)
    check_float32_gram(x, y, name, params)
    Ks = check_float32_gram(x, None, name, params)
    assert torch.equal(Ks, Ks.T)


def _near_duplicates(rng, n, d, device):
    """Standard-normal points and copies moved by 1e-3, 1e-6 or exactly 0."""
    x = rng.standard_normal((n, d))
    shift = rng.standard_normal((n, d)) * np.array([1e-3, 1e-6, 0.0])[np.arange(n) % 3, None]
    y = (x + shift)[rng.permutation(n)]
    t = lambda a: torch.from_numpy(a).to(dtype=torch.float32, device=device)  # noqa: E731
    return t(x), t(y), t(np.concatenate([x, x + shift]))


@pytest.mark.parametrize("d", [3, 17, 40])
@pytest.mark.parametrize("case", STATIONARY_CASES, ids=[c[0] for c in STATIONARY_CASES])
def test_gram_near_duplicates(case, d, device, rng):
    """Pairs 1e-6 apart: the expansion alone loses d² entirely (Matérn 0.5 then errs by ~1e-3);
    the tiles holding them are recomputed by direct differences."""
    _, name, params_fn = case
    params = params_fn(d)
    x, y, xx = _near_duplicates(rng, 40, d, device)
    check_float32_gram(x, y, name, params)
    check_float32_gram(xx, None, name, params)


def test_direct_recompute_is_what_saves_near_duplicates(device, rng, monkeypatch):
    """With the per-tile fallback switched off (TAU = 0) the same test fails: it is not vacuous."""
    x, y, _ = _near_duplicates(rng, 40, 17, device)
    params = dict(nu=0.5, length_scale=1.3)
    ref = reference("matern", params, x, y)
    assert rel_fro(gram_into_nan(x, y, "matern", **params), ref) <= 1e-6
    monkeypatch.setattr(epilogues, "TAU", 0.0)
    assert rel_fro(gram_into_nan(x, y, "matern", **params), ref) > 1e-5


# --------------------------------------------------------------------------- precision="fast"
#: precision="fast" uses TF32 products (10 explicit mantissa bits, each input rounded by up to
#: 2^-11 relative) on centred data: errors of a few 1e-4 in K; on the CPU interpreter the product
#: is IEEE float32 and the numbers are those of "accurate".
FAST_TOL = dict(rtol=5e-3, atol=5e-3)


@pytest.mark.parametrize("d", [3, 40])
@pytest.mark.parametrize("name", ["rbf", "laplacian", "matern", "rational_quadratic", "polynomial", "cosine"])
def test_gram_fast_precision(name, d, device, rng):
    x = randn(rng, (63, d), torch.float32, device)
    y = randn(rng, (65, d), torch.float32, device)
    K = gram_into_nan(x, y, name, precision="fast")
    ref = reference(name, {}, x, y)
    assert rel_fro(K, ref) <= 2e-3
    if name != "polynomial":
        check_values(K, ref, "float32", name, {}, x, y, tol=FAST_TOL)


# ---------------------------------------------------------------------------- properties
@settings(max_examples=10, deadline=None)
@given(
    n=st.integers(1, 40), d=st.integers(1, 24),
    name=st.sampled_from(["rbf", "laplacian", "matern", "rational_quadratic", "cosine"]),
    seed=st.integers(0, 2**31 - 1),
)
def test_gram_properties(n, d, name, seed, device):
    """Exact symmetry, exact unit diagonal and positive semi-definiteness (to rounding)."""
    x = randn(np.random.default_rng(seed), (n, d), torch.float32, device)
    K = kernelkit_gpu.gram(x, kernel=name)
    assert torch.equal(K, K.T)
    if name != "cosine":
        assert (K.diagonal() == 1).all()
    assert np.linalg.eigvalsh(K.cpu().double().numpy()).min() >= -1e-5 * n


# ---------------------------------------------------------------------------- plumbing
def _candidate_configs(name, d, precision="accurate"):
    plan = prepare.kernel_plan(name, d, {})
    if prepare.recipe(plan, torch.float32, d, precision).mode == epilogues.MODE_MMA.value:
        kd = -(-d // gram_module.PAD_K) * gram_module.PAD_K
        split = precision == "accurate"
        sliced = split and plan.pairwise == epilogues.PW_DOT.value
        return gram_configs.mma_configs(kd, split, 4, sliced)
    return gram_configs.direct_configs(d, plan.pairwise)


@pytest.mark.parametrize("symmetric", [False, True], ids=["xy", "xx"])
@pytest.mark.parametrize("name,d", [("rbf", 3), ("matern", 40), ("laplacian", 20), ("polynomial", 40)])
def test_every_config_is_correct(name, d, symmetric, device, rng):
    """Each candidate config (one under the interpreter), launched directly: right values, every
    element written, K(X, X) exactly symmetric."""
    x = randn(rng, (152, d), torch.float32, device)
    y = None if symmetric else randn(rng, (80, d), torch.float32, device)
    ref = reference(name, {}, x, y)
    plan = prepare.kernel_plan(name, d, {})
    for config in _candidate_configs(name, d):
        out = poisoned(ref.shape, torch.float32, device)
        gram_module.gram_fwd(x, y, plan, out, "accurate", symmetric, config=config)
        check_values(out, ref, "float32", name, {}, x, y)
        if symmetric:
            assert torch.equal(out, out.T), config


@pytest.mark.parametrize("super_tile", [1, 2])
@pytest.mark.parametrize("precision", ["accurate", "fast"])
def test_super_tile_orders(precision, super_tile, device, rng, monkeypatch):
    """Other super-tile sizes of the triangle order compute the same K, near-duplicate flags and
    fix-ups included (1: plain triangle order; 2 over 3 blocks of the interpreter's 64:
    super-tiles with programs below the diagonal and past the edge that must write nothing)."""
    monkeypatch.setattr(gram_module, "SUPER_TILE", super_tile)
    _, _, xx = _near_duplicates(rng, 70, 20, device)  # 140 rows
    params = dict(nu=0.5, length_scale=1.3)
    plan = prepare.kernel_plan("matern", 20, params)
    ref = reference("matern", params, xx)
    out = poisoned(ref.shape, torch.float32, device)
    gram_module.gram_fwd(xx, None, plan, out, precision, True)
    assert torch.equal(out, out.T)
    assert rel_fro(out, ref) <= (1e-6 if precision == "accurate" else 2e-3)
    check_values(out, ref, "float32", "matern", params, xx,
                 tol=None if precision == "accurate" else FAST_TOL)


def test_triton_launcher_runs(device, rng, monkeypatch):
    """Spies on the Triton kernel objects: gram() launches the tensor-core kernel (with its
    preparation and fix-up) for rbf at D = 20 and the direct kernel for laplacian."""
    names = ("_gram_prep_kernel", "_gram_mma_kernel", "_gram_fix_kernel", "_gram_direct_kernel")
    calls = spy_kernels(monkeypatch, gram_module, {name: name for name in names})
    x = randn(rng, (50, 20), torch.float32, device)
    kernelkit_gpu.gram(x, kernel="rbf")
    kernelkit_gpu.gram(x, x[:7], kernel="laplacian")
    names = [c[0] for c in calls]
    assert names == ["_gram_prep_kernel", "_gram_mma_kernel", "_gram_fix_kernel",
                     "_gram_prep_kernel", "_gram_prep_kernel", "_gram_direct_kernel"], names
    mma, direct = calls[1][1], calls[5][1]
    assert mma["KIND"] == epilogues.K_RBF.value and mma["TRIANGLE"] and mma["SPLIT"]
    assert direct["KIND"] == epilogues.K_LAPLACIAN.value and not direct["TRIANGLE"]


def test_out_with_strides_and_default_allocation(device, rng):
    x = randn(rng, (37, 5), torch.float32, device)
    y = randn(rng, (21, 5), torch.float32, device)
    big = poisoned((21, 37), torch.float32, device)
    K = kernelkit_gpu.gram(x, y, "rbf", out=big.T)  # a transposed (non-contiguous) view
    assert K.data_ptr() == big.data_ptr()
    np.testing.assert_allclose(K.cpu().numpy(), reference("rbf", {}, x, y), **TOL["float32"])
    K2 = kernelkit_gpu.gram(x, y, "rbf")
    assert K2.is_contiguous() and K2.dtype == torch.float32 and K2.device == x.device
    assert torch.equal(K2, K)


def test_empty_inputs(device):
    x = torch.zeros((0, 3), device=device)
    assert kernelkit_gpu.gram(x).shape == (0, 0)
    assert kernelkit_gpu.gram(torch.ones((4, 3), device=device), x).shape == (4, 0)


def test_zero_rows_cosine(device):
    x = torch.tensor([[0.0, 0.0, 0.0], [1.0, 2.0, 2.0], [0.0, 0.0, 0.0]], device=device)
    K = kernelkit_gpu.gram(x, kernel="cosine")
    np.testing.assert_array_equal(K.cpu().numpy(), get_kernel("cosine").value(x.cpu().double().numpy()))


@pytest.mark.parametrize("d", [3, 20])
@pytest.mark.parametrize("dtype_name", ["float32", "float64"])
def test_gram_cosine_rows_of_any_scale(dtype_name, d, device, rng):
    """Rows at 1e-30 ... 1e30 (float64 also 1e-300, 1e300) and zero rows: the squares summed
    for a row norm underflowed or overflowed (a row at 1e-30 gave 1.6e-30 instead of 0.926).
    Direct (D = 3) and tensor-core (D = 20) paths, K(X, Y) and K(X, X), the naive twin too."""
    x = scaled_rows(rng, 13, d, dtype_name, device)
    y = scaled_rows(rng, 9, d, dtype_name, device).flip(0)
    for a, b in [(x, y), (x, None)]:
        ref = reference("cosine", {}, a, b)
        check_values(gram_into_nan(a, b, "cosine"), ref, dtype_name, "cosine", {}, a, b)
        check_values(kernelkit_gpu.gram_naive(a, b, "cosine"), ref, dtype_name, "cosine", {}, a, b)


@pytest.mark.parametrize("d", [3, 20])
@pytest.mark.parametrize("dtype_name", ["float64", "float32"])
@pytest.mark.parametrize("name", ARD_KERNELS)
def test_gram_per_feature_scales_far_from_origin(name, dtype_name, d, device, rng):
    """Per-feature gamma / length_scale spanning 1e-4..1 on data at 1e6 (float64; float32: see
    ``ARD_DATA``): K matches the kernel of exact float64 differences to the dtype's TOL. Scaling
    coordinates before subtracting lost the differences (RBF(length_scale=[1e-4, 1]) erred by
    8.7e-6 in the float64 reference); the registry reference must agree too."""
    x, y, params = ard_case(rng, name, 11, 7, d, dtype_name, device)
    for a, b in [(x, y), (x, None)]:
        exact = exact_ard(name, params, a, a if b is None else b)
        np.testing.assert_allclose(reference(name, params, a, b), exact, **TOL["float64"])
        check_values(gram_into_nan(a, b, name, **params), exact, dtype_name, name, params, a, b)
        check_values(kernelkit_gpu.gram_naive(a, b, name, **params), exact, dtype_name, name,
                     params, a, b)


def test_gram_huge_polynomial_degree_is_fast_and_exact(device, rng):
    """degree 10**6 used to loop 10**6 times in the epilogue (63 s for 8 x 8 under the
    interpreter); exponentiation by squaring takes 20 squarings. Values: base gamma x·y + coef0
    near 1 (float64): the base's rounding (u = 2^-53 relative) is amplified degree times, so
    rtol = 4 degree u. Sign: base exactly -1 (zero data, coef0 = -1) gives exactly (-1)**degree."""
    import time

    x64 = randn(rng, (8, 3), torch.float64, device, spread=0.1)
    params = dict(gamma=1e-6, coef0=1.0)
    gram_into_nan(x64, None, "polynomial", degree=3, **params)  # compile / warm up
    for degree in (10**6, 10**6 + 1, 2**31 - 1):
        t0 = time.perf_counter()
        K = gram_into_nan(x64, None, "polynomial", degree=degree, **params)
        assert time.perf_counter() - t0 < 10.0, f"degree {degree}: slower than 10 s"
        ref = reference("polynomial", dict(params, degree=degree), x64)
        np.testing.assert_allclose(K.cpu().numpy(), ref, rtol=4 * degree * 2.0**-53, atol=0)
    for dtype in (torch.float32, torch.float64):
        for d in (3, 20):  # direct and tensor-core paths
            zero = torch.zeros((5, d), dtype=dtype, device=device)
            for degree, sign in ((10**6, 1.0), (10**6 + 1, -1.0), (0, 1.0)):
                K = gram_into_nan(zero, zero[:4], "polynomial", degree=degree, coef0=-1.0)
                assert (K == sign).all(), (dtype, d, degree)


@pytest.mark.parametrize("fn", [kernelkit_gpu.gram, kernelkit_gpu.gram_naive], ids=["triton", "naive"])
def test_gram_degree_out_of_int32_range_names_degree(fn, device):
    """degree=10**30 raised numpy's TypeError from np.isfinite on an object array; the kernels
    take the degree as a 32-bit integer, so the registry bounds it by 2**31 - 1 and says so."""
    x = torch.ones((4, 3), device=device)
    for degree in (10**30, 2**31):
        with pytest.raises(ValueError, match=r"'degree' must be .*<= 2147483647"):
            fn(x, kernel="polynomial", degree=degree)


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda x: G(x.cpu().numpy()), TypeError, "x must be a torch.Tensor"),
        (lambda x: G(x[0]), ValueError, "x must be 2-D"),
        (lambda x: G(x.to(torch.int32)), TypeError, "x must have dtype"),
        (lambda x: G(x[:, :0]), ValueError, "at least one feature"),
        (lambda x: G(x, x[:, :2]), ValueError, "same number of features"),
        (lambda x: G(x, x.double()), TypeError, "same dtype"),
        (lambda x: G(x, x.to("meta")), ValueError, "same device"),
        (lambda x: G(x, kernel="gaussian"), ValueError, "unknown kernel"),
        (lambda x: G(x, "rbf"), TypeError, "kernel by keyword"),
        (lambda x: G(x, gamma=-1.0), ValueError, "gamma"),
        (lambda x: G(x, gamma=[1.0, 2.0]), ValueError, "gamma"),
        (lambda x: G(x, kernel="polynomial", degree=2.5), TypeError, "degree"),
        (lambda x: G(x, kernel="matern", nu=1.0), ValueError, "nu"),
        (lambda x: G(x, kernel="rbf", length_scale=1.0), TypeError, "unknown parameter"),
        (lambda x: G(x, precision="exact"), ValueError, "precision"),
        (lambda x: G(x, out=torch.empty(3, 3, device=x.device)), ValueError, "out must have shape"),
        (lambda x: G(x, out=torch.empty(4, 4, dtype=torch.float64, device=x.device)),
         TypeError, "out must have dtype"),
    ],
    ids=["numpy", "1d", "int", "no-features", "features", "dtype", "device", "kernel", "y-str", "range",
         "per-feature-length", "degree", "nu", "unknown-param", "precision", "out-shape", "out-dtype"],
)
def test_bad_input_errors(call, error, match, device):
    x = torch.ones((4, 3), device=device)
    with pytest.raises(error, match=match):
        call(x)


def _run_python(code, env):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.subprocess
def test_cpu_without_interpreter_says_what_to_do():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    code = (
        "import torch, kernelkit_gpu\n"
        "try:\n    kernelkit_gpu.gram(torch.ones(3, 2))\n"
        "except ValueError as e:\n    print('ERR', e)\n"
    )
    res = _run_python(code, env)
    assert "ERR" in res.stdout and "TRITON_INTERPRET=1" in res.stdout, res.stderr[-2000:]


@pytest.mark.subprocess
def test_import_never_loads_kernelkit():
    res = _run_python("import sys, kernelkit_gpu; print('kernelkit' in sys.modules)", dict(os.environ))
    assert res.stdout.strip() == "False", res.stderr[-2000:]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("centre,scale", [(False, False), (True, False), (True, True)],
                         ids=["raw", "centred", "centred-scaled"])
def test_fused_preparation_equals_the_shared_definition(dtype, centre, scale, device, rng):
    """The Gram kernel's fused preparation (``_gram_prep_kernel``) forms exactly the values of
    ``prepare.centre_and_scale``, the definition every other consumer uses, bit for bit; padding
    is zero and the norms are those of the prepared values."""
    x = (torch.from_numpy(rng.standard_normal((37, 21)) + 1000.0)).to(dtype).to(device)
    mean = prepare.column_mean(x) if centre else None
    scales = torch.from_numpy(rng.uniform(0.1, 3.0, 21)).to(device) if scale else None
    acc = prepare.acc_dtype(dtype)
    buf, norms = gram_module._prep_launch(x, mean, scales, 32, False, acc, acc)
    want = prepare.centre_and_scale(x, mean, scales, acc)
    assert torch.equal(buf[:37, :21], want)
    assert not buf[37:].any() and not buf[:, 21:].any()
    # the same 21 squares, summed in another order: a few ulps of the accumulation dtype
    rtol = 4e-7 if acc == torch.float32 else 1e-15
    torch.testing.assert_close(norms[:37], (want * want).sum(dim=1), rtol=rtol, atol=0)


def test_pairwise_docstrings_cite_only_files_the_repo_has():
    """Issue 18: gram_fused's docstring pointed to an ARCHITECTURE.md the repository does not
    have. Every ``*.md`` / ``*.py`` path named in a kernelkit_gpu/pairwise source file exists."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    missing = []
    for src in sorted((root / "kernelkit_gpu" / "pairwise").glob("*.py")):
        for name in re.findall(r"[\w./-]+\.md\b|\b(?:benchmarks|tests)/[\w./-]+\.py\b",
                               src.read_text()):
            if not (root / name).exists() and not list(root.rglob(Path(name).name)):
                missing.append(f"{src.name}: {name}")
    assert not missing, missing
