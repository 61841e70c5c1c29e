"""kernel_contractions: sum_i u_i^T (dK / dlog theta_j) w_i and K @ v against float64 references.

The reference is the registry's float64 NumPy gradient ``get_kernel(k).gradient(X)`` (K and dK
formed densely, distances by cdist), contracted here with G = U W^T. Runs on the CPU under the
Triton interpreter and, unchanged, on a GPU with ``pytest --device cuda``.
"""

import importlib

import numpy as np
import pytest
import torch

from kernelkit_math.registry import REGISTRY, get_kernel
from tests.conftest import TOL
from tests.gpu_cases import spy_kernels

fused = importlib.import_module("kernelkit_gpu.pairwise.contract_fused")
naive = importlib.import_module("kernelkit_gpu.pairwise.contract_naive")

pytestmark = pytest.mark.usefixtures("triton_can_run")

DTYPES = {"float32": torch.float32, "float64": torch.float64}
#: Unit roundoff of the accumulation dtype.
UNIT = {"float32": 2.0**-24, "float64": 2.0**-53}

#: (id, kernel, params(d)): the Triton kernels, ARD and isotropic.
FUSED_CASES = [
    ("rbf-ard", "rbf", lambda d: dict(gamma=np.linspace(0.2, 1.5, d))),
    ("rbf-default", "rbf", lambda d: {}),
    ("laplacian-ard", "laplacian", lambda d: dict(gamma=np.linspace(0.2, 0.9, d))),
    ("matern05-ard", "matern", lambda d: dict(nu=0.5, length_scale=np.linspace(0.7, 2.0, d))),
    ("matern15", "matern", lambda d: dict(nu=1.5, length_scale=1.3)),
    ("matern25-ard", "matern", lambda d: dict(nu=2.5, length_scale=np.linspace(0.8, 1.6, d))),
    ("rq-ard", "rational_quadratic",
     lambda d: dict(length_scale=np.linspace(0.7, 2.0, d), alpha=0.3)),
    ("rq", "rational_quadratic", lambda d: dict(length_scale=0.9, alpha=2.5)),
]

#: (id, kernel, params(d)): every kernel with a Triton contraction (``FUSED_KERNELS``, read from
#: the epilogue table) at each of its registry GPU examples, so a new kernel's fused
#: contraction is tested with no edit here.
REGISTRY_FUSED_CASES = [(f"registry-{name}-{ex.id}", name, ex.params)
                        for name in fused.FUSED_KERNELS
                        for ex in get_kernel(name).examples if ex.gpu]


def data(n, d, t, r, offset, dtype, device, seed=0, spread=1.0):
    rng = np.random.default_rng(seed)
    x = spread * rng.normal(size=(n, d)) + offset
    u, w = rng.normal(size=(n, t)), rng.normal(size=(n, t))
    v = None if r is None else rng.normal(size=(n, r))

    def dev(a):
        return None if a is None else torch.tensor(a, dtype=dtype, device=device)

    return dev(x), dev(u), dev(w), dev(v)


def f64(t):
    return t.detach().cpu().to(torch.float64).numpy()


def check(res, x, u, w, v, kernel, params, dtype_name):
    """Compare with the float64 registry gradient contracted with G = U W^T.

    grad and kg: |err| <= (32 + 2 sqrt(n)) u M + u M_all, where M = sum_ab |dK_ab| |G_ab| (|K| |G|
    for kg), M_all = sum_ab (|K_ab| + sum_j |dK_ab,j|) |G_ab| and u the unit roundoff. Each term
    carries a relative error of a few u: the prepared operands are centred and scaled in float64
    and rounded once (distances off by a few u of themselves), exp2 (approximate on the GPU, a
    couple of ulp, possibly of one sign: hence a multiple of M, not of sqrt(sum t^2)), G on
    tensor cores (tf32x3: a few u); the float32 row sums add about sqrt(n) u M for independent
    roundings. Measured under the interpreter (n = 63, offset 1000, float32): errors 1e-9 to
    1e-8 of M, i.e. 0.01-0.1 of this bound; the bound still catches a 0.3 % error in one
    derivative factor (5e-5 M). Dot-product kernels (twin only) add TOL's rtol for their
    conditioning. kv: the K @ V rule of tests/test_gpu_matvec.py.
    """
    X, U, W = f64(x), f64(u), f64(w)
    U2 = U[:, None] if U.ndim == 1 else U
    W2 = W[:, None] if W.ndim == 1 else W
    n = X.shape[0]
    K, dK = get_kernel(kernel).gradient(X, **params)
    G = U2 @ W2.T
    ref_grad = np.einsum("abj,ab->j", dK, G)
    mag = np.einsum("abj,ab->j", np.abs(dK), np.abs(G))
    ref_kg = (K * G).sum()
    mag_kg = (np.abs(K) * np.abs(G)).sum()
    mag_all = mag.sum() + mag_kg
    u_ = UNIT[dtype_name]
    rel = (32 + 2 * np.sqrt(n)) * u_
    if get_kernel(kernel).pairwise in ("dot", "cosine"):
        # the twin's dot products are uncentred: x·y ~ 3e6 at offset 1000 carries u x·y, which
        # the offset examples' gamma ~ 1e-6 turns into a relative error up to ~1e4 u of the base
        rel += TOL[dtype_name]["rtol"]
    floor = u_ * mag_all + 1e-300

    grad = f64(res.grad)
    assert res.grad.dtype == torch.float64 and grad.shape == ref_grad.shape
    assert np.isfinite(grad).all()
    err = np.abs(grad - ref_grad)
    bound = rel * mag + floor
    assert (err <= bound).all(), f"grad error {err}, bound {bound}"
    err_kg = abs(float(res.kg) - ref_kg)
    assert err_kg <= rel * mag_kg + floor, f"kg error {err_kg:.3g}"
    if v is None:
        assert res.kv is None
        return
    V = f64(v)
    kv = f64(res.kv)
    assert kv.shape == V.shape and np.isfinite(kv).all()
    V2 = V[:, None] if V.ndim == 1 else V
    kv2 = kv[:, None] if kv.ndim == 1 else kv
    tol = TOL[dtype_name]
    bound_kv = (tol["rtol"] + 4 * n * u_) * (np.abs(K) @ np.abs(V2)) + tol["atol"]
    err_kv = np.abs(kv2 - K @ V2)
    assert (err_kv <= bound_kv).all(), f"kv error {err_kv.max():.3g}"


@pytest.fixture
def spy(monkeypatch):
    return spy_kernels(monkeypatch, fused, {"_contract_kernel": "contract"})


@pytest.mark.parametrize("dtype_name", list(DTYPES))
@pytest.mark.parametrize("case_id,kernel,make", FUSED_CASES + REGISTRY_FUSED_CASES,
                         ids=[c[0] for c in FUSED_CASES + REGISTRY_FUSED_CASES])
def test_fused_kernels_offset(case_id, kernel, make, dtype_name, device, spy, poisoned_outputs):
    """Every Triton kernel, data at offset 1000 (float32 would lose every digit of the distances
    without centring), n = 63, t = 3, with K @ V (r = 2); outputs NaN-poisoned."""
    d = 3
    params = make(d)
    x, u, w, v = data(63, d, 3, 2, 1000.0, DTYPES[dtype_name], device)
    # the length scales are relative to the unit spread of the data, which offset does not change
    res = fused.kernel_contractions(x, u, w, kernel, v=v, **params)
    assert [c[0] for c in spy] == ["contract"]
    check(res, x, u, w, v, kernel, params, dtype_name)


@pytest.mark.parametrize("dtype_name", list(DTYPES))
@pytest.mark.parametrize("n,t,r", [(1, 1, None), (130, 1, "1d"), (130, 16, 3), (17, 3, None)],
                         ids=["n1", "n130-t1-v1d", "n130-t16", "n17"])
def test_sizes(n, t, r, dtype_name, device, spy, poisoned_outputs):
    """Odd sizes (ragged tiles), 1-D v, t = 1 and 16, ARD RBF, d = 5 (not a power of two)."""
    d = 5
    params = dict(gamma=np.linspace(0.1, 0.8, d))
    x, u, w, v = data(n, d, t, None if r is None else (1 if r == "1d" else r), 0.0,
                      DTYPES[dtype_name], device, seed=n)
    if r == "1d":
        v = v[:, 0]
    if t == 1:
        u, w = u[:, 0], w[:, 0]
    res = fused.kernel_contractions(x, u, w, "rbf", v=v, **params)
    assert len(spy) == 1
    check(res, x, u, w, v, "rbf", params, dtype_name)


def test_wide_u_and_v_take_several_launches(device, spy, poisoned_outputs):
    """t = 70 and r = 65 exceed one launch's 64 columns: two launches, results summed."""
    x, u, w, v = data(20, 2, 70, 65, 0.0, torch.float64, device)
    res = fused.kernel_contractions(x, u, w, "matern", v=v, nu=2.5, length_scale=[0.5, 2.0])
    assert len(spy) == 2
    check(res, x, u, w, v, "matern", dict(nu=2.5, length_scale=[0.5, 2.0]), "float64")


def test_float32_sums_across_column_tiles_are_float64(device, spy):
    """Each column tile's float32 row sums go into float64 accumulators: a row whose running
    sum reaches 2^25 before 30 tiles that each add exactly 1 keeps those 30 (a float32
    accumulator rounds every 2^25 + 1 back to 2^25 and returns 0 per row). All x equal, so
    K = 1 exactly; u = 1, and w constant per tile of the launch's BLOCK_N columns: 2^25 / BLOCK_N
    in the first tile, 1 / BLOCK_N in the next 30, -2^25 / BLOCK_N in the last (all exact in
    float32 and tf32x3), so every tile sum is exact and kg = n * 30 exactly."""
    block = fused._configs(torch.float32, 1)["BLOCK_N"]
    tiles = 32
    n = block * tiles
    per_tile = np.full(tiles, 1.0)
    per_tile[0], per_tile[-1] = 2.0**25, -(2.0**25)
    w = torch.tensor(np.repeat(per_tile / block, block), dtype=torch.float32, device=device)
    x = torch.zeros((n, 1), dtype=torch.float32, device=device)
    u = torch.ones(n, dtype=torch.float32, device=device)
    res = fused.kernel_contractions(x, u, w, "rbf", gamma=1.0)
    assert len(spy) == 1
    assert float(res.kg) == n * (tiles - 2)
    assert float(res.grad[0]) == 0.0  # every distance is 0


def test_half_precision_input(device, spy):
    """float16 x, u, w compute in float32: compared with the reference on the rounded inputs."""
    x, u, w, _ = data(40, 3, 2, None, 0.0, torch.float16, device)
    res = fused.kernel_contractions(x, u, w, "rbf", gamma=0.4)
    assert len(spy) == 1
    check(res, x, u, w, None, "rbf", dict(gamma=0.4), "float32")


def test_inputs_unchanged(device):
    x, u, w, v = data(30, 3, 2, 2, 1000.0, torch.float32, device)
    before = [t.clone() for t in (x, u, w, v)]
    fused.kernel_contractions(x, u, w, "rational_quadratic", v=v, length_scale=0.5, alpha=0.7)
    for a, b in zip(before, (x, u, w, v)):
        assert torch.equal(a, b)


def test_wide_x_runs_the_twin(device, spy):
    """d > 16: no Triton launch, the torch twin's answer."""
    x, u, w, v = data(20, 17, 2, 1, 0.0, torch.float64, device)
    res = fused.kernel_contractions(x, u, w, "rbf", v=v, gamma=0.05)
    assert spy == []
    check(res, x, u, w, v, "rbf", dict(gamma=0.05), "float64")


#: Every registry kernel through the torch twin: its GPU examples and its offset-1000 examples
#: (data 1000 + 0.05 N(0, 1), the registry's offset convention), float32 and float64. Not run:
#: polynomial "offset-cancel" in float32, (gamma x·y - 1)^3 with x·y ~ 3e6 d: the twin forms
#: x·y uncentred in float32 (as kernelkit_gpu.pairwise.naive does), so the base loses ~u x·y
#: gamma ~ 1e-7 absolute on values ~1e-6; a float32 conditioning limit of the twin's dot
#: products, not of the contraction (float64 runs it; the Triton kernels have no dot kernels).
TWIN_CASES = [
    pytest.param(name, ex.params, ex.offset, dtype_name, id=f"{name}-{ex.id}-{dtype_name}")
    for name, spec in REGISTRY.items() for ex in spec.examples if ex.gpu or ex.offset
    for dtype_name in DTYPES
    if not (dtype_name == "float32" and name == "polynomial" and ex.id == "offset-cancel")
]


@pytest.mark.parametrize("kernel,make,offset,dtype_name", TWIN_CASES)
def test_twin_every_registry_kernel(kernel, make, offset, dtype_name, device):
    d = 3
    params = make(d)
    x, u, w, v = data(23, d, 2, 2, 1000.0 if offset else 0.0, DTYPES[dtype_name], device,
                      spread=0.05 if offset else 1.0)
    res = naive.kernel_contractions_naive(x, u, w, kernel, v=v, **params)
    check(res, x, u, w, v, kernel, params, dtype_name)


def test_twin_agrees_with_fused(device):
    """The two implementations agree with each other (references checked against each other)."""
    x, u, w, v = data(50, 4, 3, 2, 5.0, torch.float64, device)
    params = dict(length_scale=[0.5, 1.0, 1.5, 2.0], alpha=0.8)
    a = fused.kernel_contractions(x, u, w, "rational_quadratic", v=v, **params)
    b = naive.kernel_contractions_naive(x, u, w, "rational_quadratic", v=v, **params)
    torch.testing.assert_close(a.grad, b.grad, rtol=1e-12, atol=1e-12)  # float64, n = 50 sums
    torch.testing.assert_close(a.kg, b.kg, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(a.kv, b.kv, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("bad,err,match", [
    (dict(u="shape"), ValueError, "u must have shape"),
    (dict(w="cols"), ValueError, "u and w must have the same shape"),
    (dict(u="nan"), ValueError, "u contains NaN"),
    (dict(v="shape"), ValueError, "v must have shape"),
    (dict(x="numpy"), TypeError, "x"),
    (dict(u="int"), TypeError, "u"),
    (dict(kernel="nope"), ValueError, "nope"),
], ids=["u-shape", "w-cols", "u-nan", "v-shape", "x-numpy", "u-int", "kernel"])
def test_bad_input(bad, err, match, device):
    x, u, w, v = data(10, 2, 2, 1, 0.0, torch.float32, device)
    if bad.get("u") == "shape":
        u = u[:5]
    if bad.get("w") == "cols":
        w = w[:, :1]
    if bad.get("u") == "nan":
        u = u.clone()
        u[3, 1] = float("nan")
    if bad.get("v") == "shape":
        v = v[:4]
    if bad.get("x") == "numpy":
        x = x.cpu().numpy()
    if bad.get("u") == "int":
        u = u.to(torch.int64)
    with pytest.raises(err, match=match):
        fused.kernel_contractions(x, u, w, bad.get("kernel", "rbf"), v=v)



def test_assume_finite_skips_the_data_checks(device):
    """Inside kernelkit_gpu.assume_finite() non-finite data are not refused (no wait for the
    GPU); the values are then undefined, parameters are still checked."""
    import kernelkit_gpu

    x, u, w, _ = data(10, 2, 2, None, 0.0, torch.float32, device)
    u = u.clone()
    u[3, 1] = float("nan")
    with kernelkit_gpu.assume_finite():
        fused.kernel_contractions(x, u, w, "rbf")
        with pytest.raises(ValueError, match="gamma"):
            fused.kernel_contractions(x, u, w, "rbf", gamma=-1.0)


@pytest.mark.parametrize("impl", ["fused", "twin"])
def test_no_samples(impl, device):
    """n = 0: empty sums (zeros), an empty K @ v, no launch."""
    x, u, w, v = data(0, 3, 2, 2, 0.0, torch.float32, device)
    f = fused.kernel_contractions if impl == "fused" else naive.kernel_contractions_naive
    res = f(x, u, w, "rbf", v=v, gamma=[0.1, 0.2, 0.3])
    assert torch.equal(res.grad.cpu(), torch.zeros(3, dtype=torch.float64))
    assert float(res.kg) == 0.0 and res.kv.shape == (0, 2)


@pytest.mark.parametrize("dtype_name", list(DTYPES))
@pytest.mark.parametrize("d", [3, 17], ids=["triton", "twin-d17"])
def test_row_range_is_the_share_of_a_row_sharded_sum(d, dtype_name, device, poisoned_outputs):
    """``rows=(first, last)``: the sums over i restricted to those rows (the same numbers as u
    zeroed outside them, checked against the float64 reference) and kv's rows first:last; the
    shares of a partition, empty and ragged ones included, add up to the whole."""
    params = dict(gamma=np.linspace(0.2, 1.5, d))
    x, u, w, v = data(63, d, 3, 2, 1000.0, DTYPES[dtype_name], device, seed=3)
    whole = fused.kernel_contractions(x, u, w, "rbf", v=v, **params)
    shares = [(0, 40), (40, 40), (40, 63)]
    total_grad, total_kg = 0.0, 0.0
    for first, last in shares:
        res = fused.kernel_contractions(x, u, w, "rbf", v=v, rows=(first, last), **params)
        keep = torch.zeros_like(u)
        keep[first:last] = 1
        check(res._replace(kv=None), x, u * keep, w, None, "rbf", params, dtype_name)
        assert res.kv.shape == (last - first, 2)
        np.testing.assert_allclose(f64(res.kv), f64(whole.kv)[first:last],
                                   rtol=TOL[dtype_name]["rtol"], atol=TOL[dtype_name]["atol"])
        total_grad, total_kg = total_grad + f64(res.grad), total_kg + float(res.kg)
    # the same float32 row sums added in another float64 order: a few units of the sum's terms
    scale = (np.abs(f64(whole.grad)).max() + abs(float(whole.kg))) * 64 * UNIT[dtype_name]
    np.testing.assert_allclose(total_grad, f64(whole.grad), rtol=0, atol=scale)
    assert abs(total_kg - float(whole.kg)) <= scale


@pytest.mark.parametrize("rows,error", [((5, 3), ValueError), ((0, 64), ValueError),
                                        ((-1, 3), ValueError), ("ab", TypeError),
                                        ((1, 2, 3), TypeError)])
def test_bad_row_range_is_refused_by_name(rows, error, device):
    x, u, w, _ = data(63, 3, 2, None, 0.0, torch.float32, device)
    with pytest.raises(error, match="rows"):
        fused.kernel_contractions(x, u, w, "rbf", rows=rows, gamma=0.5)
