"""kernelkit_gpu.kernel_matvec: matrix-free K(X, Y) @ V against float64 K_ref @ V.

Runs on the CPU under the Triton interpreter (``TRITON_INTERPRET=1``, exported by .ci/run) and,
unchanged, on a GPU with ``pytest --device cuda``.
"""

import importlib

import numpy as np
import pytest
import torch

import kernelkit_gpu
from kernelkit_gpu import _launch
from kernelkit_gpu import epilogues
from kernelkit_gpu import prepare
from tests.conftest import TOL
from tests.gpu_cases import (
    ARD_KERNELS, CASE_IDS, DOT_KINDS, DTYPES, GPU_CASES, OFFSET_DOT_CASES,
    OFFSET_DOT_CASES_WELL_CONDITIONED, STATIONARY_CASES, ard_case, dot_slope,
    exact_ard, randn, reference, scaled_rows, spy_kernels, to_numpy64,
)

matvec_module = importlib.import_module("kernelkit_gpu.pairwise.matvec_fused")
MV = kernelkit_gpu.kernel_matvec

pytestmark = pytest.mark.usefixtures("triton_can_run")


def dot_error(X, Y, dtype_name):
    """Bound on the error of the dot products x·y as the kernel forms them (before |dk/ds|).

    float32 / float64: the tensor-core path (D > 16) centres the data, x·y = x̃·ỹ + b_x + b_y:
    64 u |x̃|·|ỹ| for the centred product (as ``gpu_cases.check_values``: D = 17 accumulation and
    split tf32x3 products) plus 4 u |x|·|y| for the four roundings of at most u/2 each of b_x,
    b_y, their sum and the total, each of size <= |x|·|y|. D <= 16 sums the uncentred products
    one feature at a time in IEEE arithmetic: (D + 1) u |x|·|y|. 16-bit data are not centred
    (their products are exact in float32): 64 u |x|·|y|. On data far from the origin
    |x̃|·|ỹ| << |x|·|y|, so this is 16x tighter than 64 u |x|·|y|, which let uncentred tensor-core
    products (digits lost to truncated accumulation) pass.
    """
    u = 2.0**-53 if dtype_name == "float64" else 2.0**-24
    absdot = np.abs(X) @ np.abs(Y).T
    d = X.shape[1]
    if dtype_name not in ("float32", "float64"):
        return 64 * u * absdot
    if d <= 16:
        return (d + 1) * u * absdot
    mean = X.mean(axis=0)
    return 64 * u * (np.abs(X - mean) @ np.abs(Y - mean).T) + 4 * u * absdot


def check_matvec(out, K_ref, V, dtype_name, name, params, x, y):
    """|out - K_ref V| <= (rtol + 4 M u) (|K_ref| |V|) + atol (+ the dot-product conditioning
    term |dk/ds| ``dot_error`` |V|).

    A float32 sum of M products is exact only to ~M u times the sum of magnitudes (u = 2^-24);
    4 M u bounds that comfortably, TOL[dtype] covers the kernel values themselves.
    """
    tol = TOL[dtype_name]
    u = 2.0**-53 if dtype_name == "float64" else 2.0**-24
    o = to_numpy64(out)
    assert np.isfinite(o).all()
    Vn = to_numpy64(V)
    V2 = Vn[:, None] if Vn.ndim == 1 else Vn
    ref = K_ref @ V2
    mag = np.abs(K_ref) @ np.abs(V2)
    m = K_ref.shape[1]
    bound = (tol["rtol"] + 4 * m * u) * mag + tol["atol"]
    if name in DOT_KINDS:
        X, Y = to_numpy64(x), to_numpy64(y)
        cond = dot_slope(name, params, X, Y) * dot_error(X, Y, dtype_name)
        bound = bound + cond @ np.abs(V2)
    o2 = o[:, None] if o.ndim == 1 else o
    assert o.shape == (ref.shape[0],) if Vn.ndim == 1 else o.shape == ref.shape
    err = np.abs(o2 - ref)
    assert (err <= bound).all(), f"max error {err.max():.3g}, excess {(err - bound).max():.3g}"


@pytest.mark.parametrize("d", [3, 17])
@pytest.mark.parametrize("r", ["1d", 5])
@pytest.mark.parametrize("n,m", [(1, 1), (63, 65), (70, 33)], ids=["1x1", "63x65", "70x33"])
@pytest.mark.parametrize("case", GPU_CASES, ids=CASE_IDS)
def test_matvec_float32_matches_reference(case, n, m, r, d, device, rng):
    _, name, params_fn = case
    params = params_fn(d)
    x = randn(rng, (n, d), torch.float32, device)
    y = randn(rng, (m, d), torch.float32, device)
    v = randn(rng, (m,) if r == "1d" else (m, r), torch.float32, device)
    out = kernelkit_gpu.kernel_matvec(x, y, v, name, **params)
    assert out.dtype == torch.float32 and out.device == x.device
    check_matvec(out, reference(name, params, x, y), v, "float32", name, params, x, y)


@pytest.mark.parametrize("d", [3, 17])
@pytest.mark.parametrize("case", GPU_CASES, ids=CASE_IDS)
def test_matvec_transpose(case, d, device, rng):
    """K(X, Y).T @ U for U of shape (N,) and (N, 3)."""
    _, name, params_fn = case
    params = params_fn(d)
    x = randn(rng, (63, d), torch.float32, device)
    y = randn(rng, (41, d), torch.float32, device)
    K_ref_T = reference(name, params, x, y).T
    for shape in [(63,), (63, 3)]:
        u = randn(rng, shape, torch.float32, device)
        out = kernelkit_gpu.kernel_matvec(x, y, u, name, transpose=True, **params)
        assert out.shape == ((41,) if len(shape) == 1 else (41, 3))
        check_matvec(out, K_ref_T, u, "float32", name, params, y, x)


@pytest.mark.parametrize("d", [3, 17])
@pytest.mark.parametrize("name", ["rbf", "laplacian", "matern", "polynomial"])
def test_matvec_wide_v(name, d, device, rng):
    """R = 70 spans more than one BLOCK_R chunk (a second grid axis); R = 1 as a 2-D column."""
    x = randn(rng, (45, d), torch.float32, device)
    y = randn(rng, (37, d), torch.float32, device)
    K_ref = reference(name, {}, x, y)
    for r in (70, 1):
        v = randn(rng, (37, r), torch.float32, device)
        out = kernelkit_gpu.kernel_matvec(x, y, v, name)
        assert out.shape == (45, r)
        check_matvec(out, K_ref, v, "float32", name, {}, x, y)


@pytest.mark.parametrize("dtype_name", ["float64", "float16", "bfloat16"])
@pytest.mark.parametrize("d", [3, 17])
@pytest.mark.parametrize("case", GPU_CASES, ids=CASE_IDS)
def test_matvec_other_dtypes(case, d, dtype_name, device, rng):
    """float64 throughout; 16-bit x, y against the reference on the rounded inputs (see
    test_gpu_gram.test_gram_other_dtypes for why TOL[dtype] is the right yardstick); V float32."""
    _, name, params_fn = case
    params = params_fn(d)
    dtype = DTYPES[dtype_name]
    x = randn(rng, (50, d), dtype, device)
    y = randn(rng, (39, d), dtype, device)
    vdtype = torch.float64 if dtype == torch.float64 else torch.float32
    v = randn(rng, (39, 5) if d == 17 else (39,), vdtype, device)
    out = kernelkit_gpu.kernel_matvec(x, y, v, name, **params)
    assert out.dtype == vdtype
    check_matvec(out, reference(name, params, x, y), v, dtype_name, name, params, x, y)


@pytest.mark.parametrize("d", [3, 17])
@pytest.mark.parametrize("case", STATIONARY_CASES, ids=[c[0] for c in STATIONARY_CASES])
def test_matvec_offset_and_near_duplicates(case, d, device, rng):
    """Gating numerics carry over: data at 1000 (spread 0.05) and points 1e-6 apart give
    relative error <= 1e-6 (V >= 0, so the sums themselves are well conditioned)."""
    _, name, params_fn = case
    params = params_fn(d)
    xo = randn(rng, (40, d), torch.float32, device, offset=1000.0, spread=1.0)
    a = rng.standard_normal((40, d))
    xn = torch.from_numpy(a).float().to(device)
    yn = torch.from_numpy(a + 1e-6 * rng.standard_normal((40, d))).float().to(device)
    v = torch.from_numpy(rng.uniform(0.5, 1.5, 40)).float().to(device)
    for x, y in [(xo, xo.flip(0)), (xn, yn)]:
        out = to_numpy64(kernelkit_gpu.kernel_matvec(x, y, v, name, **params))
        ref = reference(name, params, x, y) @ to_numpy64(v)
        assert np.linalg.norm(out - ref) / np.linalg.norm(ref) <= 1e-6


#: Dot-product kernels on data at 1000: parameters that keep k finite and not saturated
#: (x·y ~ 1e6 D; sigmoid's coef0 cancels half of gamma x·y).


@pytest.mark.parametrize("dtype_name", ["float32", "float64"])
@pytest.mark.parametrize("d", [3, 16, 17, 40])
@pytest.mark.parametrize("case", OFFSET_DOT_CASES, ids=[c[0] for c in OFFSET_DOT_CASES])
def test_matvec_offset_1000_dot_kernels(case, d, dtype_name, device, rng):
    """Dot-product kernels on data at 1000 (spread 0.05): D >= 17 centres as gram does
    (x·y = x̃·ỹ + b_x + b_y), checked with ``dot_error``'s bound, 16x tighter there than the
    64 u |x|·|y| that let uncentred products pass; D <= 16: direct products."""
    _, name, params_fn = case
    params = params_fn(d)
    dtype = DTYPES[dtype_name]
    x = randn(rng, (45, d), dtype, device, offset=1000.0, spread=0.05)
    y = randn(rng, (37, d), dtype, device, offset=1000.0, spread=0.05)
    v = torch.from_numpy(rng.uniform(0.5, 1.5, (37, 2))).to(dtype=dtype, device=device)
    K_ref = reference(name, params, x, y)
    check_matvec(kernelkit_gpu.kernel_matvec(x, y, v, name, **params), K_ref, v, dtype_name, name,
                 params, x, y)
    check_matvec(kernelkit_gpu.kernel_matvec(x, y, v[:, 0], name, **params), K_ref, v[:, 0],
                 dtype_name, name, params, x, y)


@pytest.mark.parametrize("dtype_name", ["float32", "float64"])
@pytest.mark.parametrize("case", OFFSET_DOT_CASES_WELL_CONDITIONED,
                         ids=[c[0] for c in OFFSET_DOT_CASES_WELL_CONDITIONED])
def test_matvec_centres_dot_kernels(case, dtype_name, device, rng, monkeypatch):
    """The tensor-core matvec of a dot-product kernel gets centred operands and the per-row
    offsets (BIAS), as the docstring says and gram does: it used to get the raw data."""
    seen = []
    real = matvec_module._matvec_kernel

    class _Spy:  # records the operands handed to the Triton kernel, then launches it
        def __getitem__(self, grid):
            def run(*args, **kwargs):
                seen.append((to_numpy64(args[0]), to_numpy64(args[2]), kwargs.get("BIAS")))
                return real[grid](*args, **kwargs)
            return run

    monkeypatch.setattr(matvec_module, "_matvec_kernel", _Spy())
    monkeypatch.setattr(_launch, "autotuning", lambda: False)  # the direct launch, spied here
    dtype = DTYPES[dtype_name]
    _, name, params_fn = case
    params = params_fn(20)
    x = randn(rng, (30, 20), dtype, device, offset=1000.0, spread=0.05)
    y = randn(rng, (25, 20), dtype, device, offset=1000.0, spread=0.05)
    v = torch.ones(25, dtype=dtype, device=device)
    out = kernelkit_gpu.kernel_matvec(x, y, v, name, **params)
    assert len(seen) == 1
    xk, nx, bias = seen[0]
    assert bias is True
    assert np.abs(xk).max() < 1.0, "x reached the kernel uncentred"
    X, Y = to_numpy64(x), to_numpy64(y)
    mx, my = X.mean(axis=0), Y.mean(axis=0)
    # x and y each centred on their own mean: b_x = (x - m_x)·m_y + m_x·m_y / 2 (offsets of ~1e7
    # formed in float64 and rounded to the dtype: float32 rounding, rtol 1e-6)
    np.testing.assert_allclose(nx, (X - mx) @ my + 0.5 * (mx @ my), rtol=1e-6, atol=0)
    check_matvec(out, reference(name, params, x, y), v, dtype_name, name, params, x, y)


@pytest.mark.parametrize("d", [3, 20])
@pytest.mark.parametrize("dtype_name", ["float32", "float64"])
def test_matvec_cosine_rows_of_any_scale(dtype_name, d, device, rng):
    """Rows at 1e-30 ... 1e30 and zero rows (``gpu_cases.ROW_SCALES``): one such row in y put
    every output row off, since each sums over all of y. K @ V, K.T @ U and the naive twin."""
    x = scaled_rows(rng, 13, d, dtype_name, device)
    y = scaled_rows(rng, 9, d, dtype_name, device).flip(0)
    v = randn(rng, (9, 2), DTYPES[dtype_name], device)
    K_ref = reference("cosine", {}, x, y)
    for fn in (kernelkit_gpu.kernel_matvec, kernelkit_gpu.kernel_matvec_naive):
        check_matvec(fn(x, y, v, "cosine"), K_ref, v, dtype_name, "cosine", {}, x, y)
        u = randn(rng, (13,), DTYPES[dtype_name], device)
        check_matvec(fn(x, y, u, "cosine", transpose=True), K_ref.T, u, dtype_name, "cosine", {},
                     y, x)


@pytest.mark.parametrize("d", [3, 20])
@pytest.mark.parametrize("dtype_name", ["float64", "float32"])
@pytest.mark.parametrize("name", ARD_KERNELS)
def test_matvec_per_feature_scales_far_from_origin(name, dtype_name, d, device, rng):
    """Per-feature scales spanning 1e-4..1 on data at 1e6 (float64; float32: ``ARD_DATA``)
    against the kernel of exact float64 differences (see the gram test of the same name)."""
    x, y, params = ard_case(rng, name, 11, 7, d, dtype_name, device)
    v = torch.from_numpy(rng.uniform(0.5, 1.5, 7)).to(dtype=DTYPES[dtype_name], device=device)
    exact = exact_ard(name, params, x, y)
    for fn in (kernelkit_gpu.kernel_matvec, kernelkit_gpu.kernel_matvec_naive):
        check_matvec(fn(x, y, v, name, **params), exact, v, dtype_name, name, params, x, y)


def test_matvec_huge_polynomial_degree(device, rng):
    """degree 10**6 (and 10**6 + 1) finishes fast and matches float64 (rtol 4 degree u, see
    test_gpu_gram.test_gram_huge_polynomial_degree_is_fast_and_exact); degree=10**30 raises a
    ValueError that names degree."""
    import time

    x = randn(rng, (8, 20), torch.float64, device, spread=0.1)
    v = torch.from_numpy(rng.uniform(0.5, 1.5, 8)).to(device)
    params = dict(gamma=1e-6, coef0=1.0)
    kernelkit_gpu.kernel_matvec(x, x, v, "polynomial", degree=3, **params)  # compile / warm up
    for degree in (10**6, 10**6 + 1):
        t0 = time.perf_counter()
        out = kernelkit_gpu.kernel_matvec(x, x, v, "polynomial", degree=degree, **params)
        assert time.perf_counter() - t0 < 10.0, f"degree {degree}: slower than 10 s"
        ref = reference("polynomial", dict(params, degree=degree), x, x) @ to_numpy64(v)
        np.testing.assert_allclose(to_numpy64(out), ref, rtol=4 * degree * 2.0**-53, atol=0)
    for fn in (kernelkit_gpu.kernel_matvec, kernelkit_gpu.kernel_matvec_naive):
        with pytest.raises(ValueError, match=r"'degree' must be .*<= 2147483647"):
            fn(x, x, v, "polynomial", degree=10**30)


def test_matvec_launcher_runs(device, rng, monkeypatch):
    """Spies on the Triton kernel and both autotuned launchers: R == 1 takes the elementwise
    path, R > 1 tl.dot; without KERNELKIT_GPU_AUTOTUNE=1 the kernel is launched directly with
    its default config (no autotuner)."""
    calls = spy_kernels(monkeypatch, matvec_module,
                        {"_matvec_vec": "vec", "_matvec_block": "block", "_matvec_kernel": "kernel"})
    x = randn(rng, (30, 3), torch.float32, device)
    kernelkit_gpu.kernel_matvec(x, x, torch.ones(30, device=device), "rbf")
    kernelkit_gpu.kernel_matvec(x, x, torch.ones((30, 4), device=device), "laplacian")
    expected = ["vec", "block"] if _launch.autotuning() else ["kernel", "kernel"]
    assert [c[0] for c in calls] == expected
    assert calls[0][1]["VEC"] and calls[0][1]["KIND"] == epilogues.K_RBF.value
    assert not calls[1][1]["VEC"] and calls[1][1]["MODE"] == epilogues.MODE_DIRECT.value


def test_default_config_by_operands(monkeypatch):
    """Without the autotuner: several columns of V with direct-difference operands (D <= 16)
    take the 256 x 32 tiles measured fastest there (1.35-1.48x at 17 columns, H100; 4 warps
    for chunks of at most 16 columns), float64 ones 128 x 32 with 4 warps; tensor-core
    operands take 256 x 64 tiles for chunks of 64 columns (13% faster than 128 x 64 at D = 28,
    H200), 128 x 64 for narrower chunks and float64; single vectors keep the first config of
    their list (the GPU configs, whatever the device running this test)."""
    from types import SimpleNamespace

    monkeypatch.setattr(_launch, "INTERPRET", False)
    direct = SimpleNamespace(mode=epilogues.MODE_DIRECT.value, acc=torch.float32)
    mma = SimpleNamespace(mode=epilogues.MODE_MMA.value, acc=torch.float32)
    picked = matvec_module._default_config(direct, False).all_kwargs()
    assert (picked["BLOCK_M"], picked["BLOCK_N"], picked["num_warps"]) == (256, 32, 8)
    for block_r in (16, 32):  # chunks of at most 16 columns: 4 warps (1.3x at 16 columns, H100)
        picked = matvec_module._default_config(direct, False, block_r).all_kwargs()
        assert (picked["BLOCK_M"], picked["BLOCK_N"]) == (256, 32)
        assert picked["num_warps"] == (4 if block_r == 16 else 8)
    direct64 = SimpleNamespace(mode=epilogues.MODE_DIRECT.value, acc=torch.float64)
    picked = matvec_module._default_config(direct64, False, 16).all_kwargs()
    assert (picked["BLOCK_M"], picked["BLOCK_N"], picked["num_warps"]) == (128, 32, 4)
    picked = matvec_module._default_config(mma, False).all_kwargs()
    assert (picked["BLOCK_M"], picked["BLOCK_N"], picked["num_warps"]) == (256, 64, 8)
    mma64 = SimpleNamespace(mode=epilogues.MODE_MMA.value, acc=torch.float64)
    for ops, block_r in ((mma64, 64), (mma, 32)):  # float64, or a chunk under 64 columns
        picked = matvec_module._default_config(ops, False, block_r).all_kwargs()
        assert (picked["BLOCK_M"], picked["BLOCK_N"], picked["num_warps"]) == (128, 64, 8)
    for ops in (direct, mma):
        assert (matvec_module._default_config(ops, True).all_kwargs()
                == matvec_module._vec_configs()[0].all_kwargs())


@pytest.mark.parametrize("r", [1, 20])
@pytest.mark.parametrize("name,d", [("rbf", 3), ("matern", 40), ("laplacian", 20)])
def test_every_config_is_correct(name, d, r, device, rng):
    """Each autotune config of the launcher (one under the interpreter), launched directly."""
    x = randn(rng, (150, d), torch.float32, device)
    y = randn(rng, (133, d), torch.float32, device)
    v = randn(rng, (133, r), torch.float32, device)
    K_ref = reference(name, {}, x, y)
    plan = prepare.kernel_plan(name, d, {})
    tuner = matvec_module._matvec_vec if r == 1 else matvec_module._matvec_block
    for config in tuner.configs:
        ops = prepare.prepare(x, y, plan, "accurate", symmetric=False)
        out = torch.full((150, r), float("nan"), device=device)
        matvec_module.matvec_fwd(ops, plan, v, out, "accurate", config=config)
        check_matvec(out, K_ref, v, "float32", name, {}, x, y)


def test_matvec_empty(device):
    x = torch.ones((4, 3), device=device)
    e = torch.zeros((0, 3), device=device)
    assert torch.equal(kernelkit_gpu.kernel_matvec(x, e, torch.zeros(0, device=device)),
                       torch.zeros(4, device=device))
    assert kernelkit_gpu.kernel_matvec(e, x, torch.ones(4, device=device)).shape == (0,)
    assert kernelkit_gpu.kernel_matvec(x, x, torch.ones((4, 0), device=device)).shape == (4, 0)


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda x, v: MV(x, None, v), TypeError, "y must be a torch.Tensor"),
        (lambda x, v: MV(x, x, v[:3]), ValueError, r"v must have shape \(M,\)"),
        (lambda x, v: MV(x, x, v[:3], transpose=True), ValueError, "u must have shape"),
        (lambda x, v: MV(x, x, v[:, None, None]), ValueError, "v must have shape"),
        (lambda x, v: MV(x, x, v.to(torch.int64)), TypeError, "floating"),
        (lambda x, v: MV(x, x, v.cpu().numpy()),
         TypeError, "v must be a torch.Tensor"),
        (lambda x, v: MV(x, x, v.to("meta")), ValueError, "same device"),
        (lambda x, v: MV(x, x, v, transpose=1), TypeError, "transpose"),
        (lambda x, v: MV(x, x, v, kernel="nope"), ValueError, "unknown kernel"),
        (lambda x, v: MV(x, x, v, kernel="rbf", alpha=1.0), TypeError, "unknown parameter"),
        (lambda x, v: MV(x, x, v, precision=None), ValueError, "precision"),
        (lambda x, v: MV(x, x[:, :2], v), ValueError, "same number of features"),
    ],
    ids=["y-none", "v-len", "u-len", "v-3d", "v-int", "v-numpy", "v-device", "transpose", "kernel",
         "param", "precision", "features"],
)
def test_matvec_bad_input_errors(call, error, match, device):
    x = torch.ones((4, 3), device=device)
    v = torch.ones(4, device=device)
    with pytest.raises(error, match=match):
        call(x, v)


# ---------------------------------------------------------------------------- naive twins
@pytest.mark.parametrize("dtype_name", ["float64", "float32"])
@pytest.mark.parametrize("case", GPU_CASES, ids=CASE_IDS)
def test_naive_versions_match_reference(case, dtype_name, device, rng):
    """The plain-PyTorch twins (no Triton): K(X, Y), K(X, X) (exactly symmetric) and K @ V.

    Their squared distances use the eager expansion on centred data; on standard-normal data
    that keeps float32 accuracy, so the float32 TOL applies (float64: TOL['float64'])."""
    _, name, params_fn = case
    params = params_fn(4)
    dtype = DTYPES[dtype_name]
    x = randn(rng, (37, 4), dtype, device)
    y = randn(rng, (29, 4), dtype, device)
    v = randn(rng, (29, 2), dtype, device)
    tol = dict(TOL[dtype_name])
    if dtype_name == "float64":
        tol = dict(rtol=1e-11, atol=1e-11)  # exponential/polynomial amplify the dot's rounding
    else:
        tol = dict(rtol=5e-6, atol=5e-6)  # IEEE float32 expansion without the direct fallback
    K = kernelkit_gpu.gram_naive(x, y, name, **params)
    np.testing.assert_allclose(to_numpy64(K), reference(name, params, x, y), **tol)
    Ks = kernelkit_gpu.gram_naive(x, None, name, **params)
    assert torch.equal(Ks, Ks.T)
    np.testing.assert_allclose(to_numpy64(Ks), reference(name, params, x), **tol)
    mv = kernelkit_gpu.kernel_matvec_naive(x, y, v, name, **params)
    np.testing.assert_allclose(to_numpy64(mv), reference(name, params, x, y) @ to_numpy64(v),
                               rtol=tol["rtol"] * 10, atol=tol["atol"] * 10)


def test_naive_is_differentiable(device):
    """gram_naive and kernel_matvec_naive support autograd (gradient checks of the Triton ops)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, 3, dtype=torch.float64, generator=g).to(device).requires_grad_(True)
    y = torch.randn(5, 3, dtype=torch.float64, generator=g).to(device).requires_grad_(True)
    v = torch.randn(5, dtype=torch.float64, generator=g).to(device)
    assert torch.autograd.gradcheck(lambda a, b: kernelkit_gpu.gram_naive(a, b, "rbf", gamma=0.3), (x, y))
    assert torch.autograd.gradcheck(
        lambda a, b: kernelkit_gpu.kernel_matvec_naive(a, b, v, "matern", nu=2.5), (x, y))


@pytest.mark.parametrize("d,width", [(17, 32), (20, 32), (32, 32), (40, 48)])
def test_tensor_core_operands_have_16_aligned_rows(d, width, device, rng):
    """Tensor-core operands are padded with zero columns to a multiple of 16 elements (the row
    stride Triton needs to vectorise tile loads, 3x faster at D = 20 and 28 on an H200); the
    padding is zero and the values are the centred data, so every product is unchanged."""
    x = randn(rng, (37, d), torch.float32, device) + 5.0
    y = randn(rng, (29, d), torch.float32, device) + 5.0
    plan = prepare.kernel_plan("rbf", d, {})
    ops = prepare.prepare(x, y, plan, "accurate", symmetric=False)
    assert ops.d == width and ops.x.shape == (37, width) and ops.y.shape == (29, width)
    assert ops.stride_x == (width, 1) and ops.stride_y == (width, 1)
    assert not ops.x[:, d:].any() and not ops.y[:, d:].any()
    mean = x.double().mean(0)
    torch.testing.assert_close(ops.x[:, :d], (x.double() - mean).float(), rtol=0, atol=0)
    torch.testing.assert_close(ops.y[:, :d], (y.double() - mean).float(), rtol=0, atol=0)


@pytest.mark.parametrize("r", ["1d", 5])
@pytest.mark.parametrize("d", [3, 17])
def test_matvec_sums_over_several_column_groups(d, r, device, rng, monkeypatch):
    """Groups of 2 column tiles (``GROUP_TILES``) over M = 229: three full groups, a part group
    and a ragged last tile, each added once (a group dropped or added twice fails the bound)."""
    monkeypatch.setattr(matvec_module, "GROUP_TILES", 2)
    x = randn(rng, (40, d), torch.float32, device)
    y = randn(rng, (229, d), torch.float32, device)
    v = randn(rng, (229,) if r == "1d" else (229, r), torch.float32, device)
    out = kernelkit_gpu.kernel_matvec(x, y, v, "rbf", gamma=0.2)
    check_matvec(out, reference("rbf", {"gamma": 0.2}, x, y), v, "float32", "rbf",
                 {"gamma": 0.2}, x, y)


def test_matvec_long_sums_keep_float32_accuracy(device):
    """M = 2e5 columns: the tiles of a group add on the tensor cores (which truncate where they
    add), the groups in float32 registers (round to nearest). Relative (per column, Euclidean)
    error against the float64 product, measured on an H100 (rbf, D = 8, gamma 0.15): 2.2e-7
    (a positive column) and 8.5e-7 (normal columns, largest of 16) with ``GROUP_TILES`` = 64;
    1.2e-6 and 4.0e-6 with every tile added on the tensor cores. Bounds about 2.3x the grouped
    errors, below the ungrouped ones."""
    if device != "cuda":
        pytest.skip("4e10 pairs: a GPU only (pytest --device cuda); the interpreter's sums are "
                    "IEEE")
    n = 200_000
    g = torch.Generator(device="cuda").manual_seed(0)
    X = torch.rand(n, 8, device="cuda", generator=g, dtype=torch.float64) * 2 - 1
    V = torch.rand(n, 17, device="cuda", generator=g, dtype=torch.float64)
    V[:, 1:] = torch.randn(n, 16, device="cuda", generator=g, dtype=torch.float64)
    ref = kernelkit_gpu.kernel_matvec(X, X, V, "rbf", gamma=0.15)
    out = kernelkit_gpu.kernel_matvec(X.float(), X.float(), V.float(), "rbf", gamma=0.15)
    err = (out.double() - ref).norm(dim=0) / ref.norm(dim=0)
    assert float(err[0]) <= 5e-7
    assert float(err[1:].max()) <= 2e-6
