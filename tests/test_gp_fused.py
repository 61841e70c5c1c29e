"""The GP gradient through the fused Triton contractions (kernelkit.operators.fused) against the
autograd-of-blocks path (kernelkit.operators.covariance.bilinear) at the same probes and CG solves.

On the CPU the fused path is off (``fused_tree.DEVICES`` is CUDA only); these tests switch it on
for the CPU so the Triton kernel runs under the interpreter, and a spy on its launcher proves it
ran.
Under ``--device cuda`` they run on the GPU as written.

Tolerance: both paths contract the same columns A, B with the same kernel matrix; they differ
only in rounding, the sums over a row of n pairs being formed in the block dtype (float32 or
float64) in different orders. The classic bound for a sum of n terms is n eps times the sum of
their magnitudes; the largest gradient entry stands in for that sum, so the tolerance is
n eps(dtype) max |g|. Measured at n = 64 (offset data) under the interpreter, error / max|g|:
float64 <= 2.5e-15 (bound 1.4e-14), float32 2.0e-6 (rbf ARD; Matern and RQ <= 3.1e-7; bound
7.6e-6). The direct contractions (float64, random columns) compare value and gradient with n eps
times the summed magnitudes. Planted once each, these fail here: a missing power (rbf's -2), a
missing amplitude on the leaf's entries or on the value, a missing constant's entry; and the
autograd reference itself gave NaN length-scale gradients for ARD rational quadratic before its
torch epilogue stopped taking log(0) (the fixed-amplitude-rq-ard case).
"""

import numpy as np
import pytest
import torch
from sklearn.gaussian_process.kernels import RBF, DotProduct, Matern, RationalQuadratic
from sklearn.gaussian_process.kernels import ConstantKernel as C
from sklearn.gaussian_process.kernels import WhiteKernel as W

import kernelkit as kk
from kernelkit.operators import fused as _fused
from kernelkit.operators import fused_tree
from kernelkit.operators import covariance
from kernelkit.estimators.gp._lml import SolverSettings, log_marginal_likelihood, make_probes
from kernelkit.operators.covariance import CovarianceOperator
from kernelkit.operators.kernel_tree import parse_kernel
from kernelkit_gpu.pairwise import contract_fused
from kernelkit_math.registry import get_kernel
from tests.cases import is_per_feature, make_class

DTYPES = {"float32": torch.float32, "float64": torch.float64}

FAST = {  # the common GP: [C *] one supported stationary leaf [+ White]
    "rbf-ard": C(1.5) * RBF([0.8, 1.2, 2.0]) + W(0.05),
    "matern15-ard": C(1.5) * Matern([0.8, 1.2, 2.0], nu=1.5) + W(0.05),
    "matern25": C(0.7) * Matern(0.9, nu=2.5) + W(0.05),
    "rq": C(1.5) * RationalQuadratic(0.8, alpha=2.0) + W(0.05),
}
FAST_MORE = {  # other layouts of the same trees (direct contractions only: cheap)
    "laplacian-ard": C(0.7) * kk.Laplacian([0.8, 1.2, 2.0]) + W(0.05),
    "reordered-nested-constants": W(0.05) + (RBF(0.8) * C(1.5)) * C(0.5),
    "no-constant-no-white": kk.Matern(0.8, nu=0.5),
    "fixed-length-scale": C(1.5) * RBF(0.8, length_scale_bounds="fixed") + W(0.05),
    "fixed-amplitude-rq-ard": C(1.5, "fixed") * kk.RationalQuadratic([0.8, 1.3, 0.5], alpha=0.7),
    # a WhiteKernel within: the kernel part is C * RBF, the noise C * 0.05 + 0.02
    "white-inside-a-product": C(1.5) * (RBF(0.8) + W(0.05)) + W(0.02),
}
#: The common tree on every leaf with a fused contraction (FUSED_KERNELS, from the epilogue
#: table), at its registry GPU example (a per-feature one where it has one): a new kernel's fused
#: GP gradient is checked with no edit here.
for _name in contract_fused.FUSED_KERNELS:
    _gpu = [ex for ex in get_kernel(_name).examples if ex.gpu]
    _ex = next((ex for ex in _gpu if is_per_feature(ex.params(3))), _gpu[0])
    FAST_MORE[f"registry-{_name}-{_ex.id}"] = C(1.5) * make_class(_name, _ex.params(3), 3) + W(0.05)
SLOW = {  # trees the fused pass does not cover: the autograd path stays
    "rbf-plus-dotproduct": RBF(0.8) + DotProduct(0.5) + W(0.05),
    "white-inside-the-kernel-part": DotProduct(0.5) * W(0.05) + C(0.3) * RBF(1.2),
    "power": C(1.5) * RBF(0.8) ** 2 + W(0.05),
    "two-leaves": RBF(0.8) * Matern(1.2, nu=1.5) + W(0.05),
}


# NaN-poisoned Triton outputs (conftest): a partial sum the kernel leaves unwritten shows
pytestmark = pytest.mark.usefixtures("triton_can_run", "poisoned_outputs")


@pytest.fixture
def fused_here(monkeypatch, device):
    """Switch the fused path on for the test's device and count the Triton launches."""
    monkeypatch.setattr(fused_tree, "DEVICES", (device,))
    calls = []
    launch = contract_fused.contract_fwd

    def spy(*args, **kwargs):
        calls.append(args[0].shape)
        return launch(*args, **kwargs)

    monkeypatch.setattr(contract_fused, "contract_fwd", spy)
    return calls


def _data(n=97, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2.0, 2.0, (n, d)) + 1000.0  # offset data: centring must hold the digits
    y = np.sin(2.0 * X[:, 0]) + 0.5 * np.cos(X[:, -1]) + 0.2 * rng.standard_normal(n)
    return X, y


def _tolerance(n, dtype, g):
    return n * torch.finfo(dtype).eps * np.abs(g).max()  # see the module docstring


def _lml(op, kernel, y):
    probes = make_probes(len(y), 20, 8, 1, op.device)
    settings = SolverSettings(8, 1e-8, 1000, 20)
    return log_marginal_likelihood(op, kernel.theta, torch.as_tensor(y, device=op.device),
                                   probes, settings, eval_gradient=True)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("name", list(FAST))
def test_fused_lml_gradient_equals_autograd_gradient(name, dtype, device, fused_here,
                                                     monkeypatch):
    kernel, dtype = FAST[name], DTYPES[dtype]
    X, y = _data(n=64)
    op = CovarianceOperator(X, parse_kernel(kernel), 1e-6, device, dtype)
    assert _fused.fused_tree(op) is not None
    value, grad, _ = _lml(op, kernel, y)
    assert fused_here, "the fused Triton contraction did not run"
    assert all(shape == (3, len(y)) for shape in fused_here)

    monkeypatch.setattr(fused_tree, "DEVICES", ())  # the autograd-of-blocks path, same probes
    n_fused = len(fused_here)
    ref_value, ref_grad, _ = _lml(op, kernel, y)
    assert len(fused_here) == n_fused
    # the value does not use the contractions; its float64 residual products (Triton K @ V
    # against torch blocks) differ in rounding only, which moves the CG iterate at cg_tol 1e-8
    # (measured 1.6e-8 of -57.6, RQ in float32)
    assert abs(value - ref_value) <= 1e-6
    assert grad.shape == kernel.theta.shape
    np.testing.assert_allclose(grad, ref_grad, rtol=0, atol=_tolerance(len(y), dtype, ref_grad))


def test_float64_products_with_float32_contractions(device, fused_here, monkeypatch):
    """The regressor's dtype="auto" mix: float64 CG products, the fused gradient contractions in
    float32 (float64 sums): the value is the float64 operator's, the gradient within float32
    rounding of the float64 autograd one, and the contraction saw float32 operands."""
    kernel = FAST["rbf-ard"]
    X, y = _data(n=64)
    op = CovarianceOperator(X, parse_kernel(kernel), 1e-6, device, torch.float64,
                            contraction_dtype=torch.float32)
    seen = []
    launch = contract_fused.contract_fwd
    monkeypatch.setattr(contract_fused, "contract_fwd",
                        lambda *a, **k: seen.append(a[0].dtype) or launch(*a, **k))
    value, grad, _ = _lml(op, kernel, y)
    assert seen and set(seen) == {torch.float32}
    monkeypatch.setattr(fused_tree, "DEVICES", ())  # float64 autograd of blocks, same probes
    ref_value, ref_grad, _ = _lml(op, kernel, y)
    assert abs(value - ref_value) <= 1e-6  # as in the test above: products' rounding only
    np.testing.assert_allclose(grad, ref_grad, rtol=0,
                               atol=_tolerance(len(y), torch.float32, ref_grad))


@pytest.mark.parametrize("dtype,products,contractions", [
    ("auto", torch.float64, "float32 on cuda"), ("float32", torch.float32, torch.float32),
    ("float64", torch.float64, torch.float64)])
def test_regressor_dtype_sets_products_and_contractions(dtype, products, contractions, device):
    """dtype="auto": float64 products everywhere, float32 fused contractions on CUDA only (the
    CPU's gradient is float64 autograd); an explicit dtype is both."""
    X, y = _data(n=40)
    gp = kk.GaussianProcessRegressor(FAST["rbf-ard"], optimizer=None, device=device,
                                     dtype=dtype, exact_max_n=0).fit(X, y)
    op = gp._operator(parse_kernel(gp.kernel_, X.shape[1]))
    if contractions == "float32 on cuda":
        contractions = torch.float32 if device == "cuda" else torch.float64
    assert (op.dtype, op.contraction_dtype) == (products, contractions)


@pytest.mark.parametrize("name,n", [(name, 63) for name in list(FAST) + list(FAST_MORE)]
                         + [("rbf-ard", 1), ("rq", 1)])
def test_fused_bilinear_value_and_gradient(name, n, device, fused_here):
    """Random columns, every free hyperparameter (leaf, per feature, constants, noise)."""
    kernel = {**FAST, **FAST_MORE}[name]
    X, _ = _data(n=n)
    op = CovarianceOperator(X, parse_kernel(kernel), 1e-3, device, torch.float64)
    gen = torch.Generator().manual_seed(3)
    A = torch.randn(n, 5, generator=gen, dtype=torch.float64).to(device)
    B = torch.randn(n, 5, generator=gen, dtype=torch.float64).to(device)
    theta = torch.tensor(kernel.theta, device=device, requires_grad=True)

    value = _fused.bilinear(op, theta, A, B)
    (grad,) = torch.autograd.grad(value, theta)
    assert fused_here
    ref = covariance.bilinear(op, theta, A, B)
    (ref_grad,) = torch.autograd.grad(ref, theta)

    # n eps times the magnitudes of the summed terms: sum_j |a_j|^T K |b_j| (K >= 0 here) and
    # its gradient (the length-scale derivatives are >= 0 too); the largest entry bounds them
    magnitude = covariance.bilinear(op, theta, A.abs(), B.abs())
    (magnitude_grad,) = torch.autograd.grad(magnitude, theta)
    scale = float(magnitude.detach()) + float(magnitude_grad.abs().max())
    tol = max(n, 2) * torch.finfo(torch.float64).eps * scale
    assert abs(float(value.detach()) - float(ref.detach())) <= tol
    np.testing.assert_allclose(grad.cpu().numpy(), ref_grad.cpu().numpy(), rtol=0, atol=tol)
    if n > 1:  # one point: the distance derivatives vanish, amplitude and noise entries remain
        assert np.abs(ref_grad.cpu().numpy()).min() > 100 * tol  # every entry really compared


@pytest.mark.parametrize("name", list(SLOW))
def test_other_trees_take_the_autograd_path(name, device, fused_here, monkeypatch):
    kernel = SLOW[name]
    X, y = _data(n=40)
    op = CovarianceOperator(X, parse_kernel(kernel), 1e-6, device, torch.float64)
    assert _fused.fused_tree(op) is None
    autograd_calls = []
    backward = covariance.theta_gradient
    monkeypatch.setattr(covariance, "theta_gradient",
                        lambda *a, **k: autograd_calls.append(1) or backward(*a, **k))
    _, grad, _ = _lml(op, kernel, y)
    assert autograd_calls and not fused_here
    assert np.isfinite(grad).all()


def test_wide_data_and_other_devices_take_the_autograd_path(device, monkeypatch):
    kernel = C(1.5) * RBF(0.8) + W(0.05)
    X17, _ = _data(n=20, d=17)  # above DIRECT_MAX_D = 16 features
    X3, _ = _data(n=20, d=3)
    monkeypatch.setattr(fused_tree, "DEVICES", (device,))
    assert _fused.fused_tree(CovarianceOperator(X17, parse_kernel(kernel), 0.0, device,
                                                torch.float64)) is None
    op3 = CovarianceOperator(X3, parse_kernel(kernel), 0.0, device, torch.float64)
    assert _fused.fused_tree(op3) is not None
    op3.rows = (0, 10)  # this process's share of rows under a process group: fused on them
    assert _fused.fused_tree(op3) is not None
    monkeypatch.setattr(fused_tree, "DEVICES", ("cuda",))  # the default: never on the CPU
    cpu = CovarianceOperator(X3, parse_kernel(kernel), 0.0, "cpu", torch.float64)
    assert _fused.fused_tree(cpu) is None


def test_ard_rational_quadratic_autograd_gradient_is_finite():
    """The autograd path's reference for ARD rational quadratic (the regressor's exact path here,
    n = 30): its torch epilogue took log(s) at s = 0 on the diagonal, and autograd turned
    inf * 0 into NaN length-scale gradients. Central differences, h = 1e-5: truncation
    ~h^2 |f'''| ~ 1e-9 and rounding ~eps |f| / h ~ 1e-10; measured 7.4e-10 at most."""
    rng = np.random.default_rng(0)
    X = rng.uniform(-2.0, 2.0, (30, 2))
    kernel = C(1.0) * kk.RationalQuadratic([0.8, 1.3], alpha=0.7) + W(0.05)
    gp = kk.GaussianProcessRegressor(kernel, optimizer=None).fit(X, np.sin(X[:, 0]))
    theta = kernel.theta
    _, grad = gp.log_marginal_likelihood(theta, eval_gradient=True)
    h = 1e-5
    fd = [(gp.log_marginal_likelihood(theta + h * e) - gp.log_marginal_likelihood(theta - h * e))
          / (2 * h) for e in np.eye(len(theta))]
    np.testing.assert_allclose(grad, fd, rtol=0, atol=1e-8)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("name", ["rbf-ard", "matern15-ard", "reordered-nested-constants"])
def test_products_without_a_dense_k_run_the_triton_matvec(name, dtype, device, monkeypatch):
    """K @ V when K is not held dense (large n), and the float64 K @ V of CG's true residual:
    the Triton K @ V for the common trees, equal to the torch row blocks to rounding, on a
    process's share of the rows too. Tolerance: both sum n products of the same kernel values
    in ``dtype``, so n eps(dtype) (|K| |V|) bounds the difference (with the float64 residual
    product, eps of float64)."""
    from kernelkit_gpu.pairwise import matvec_fused

    kernel = {**FAST, **FAST_MORE}[name]
    X, _ = _data(n=70)
    monkeypatch.setattr(covariance, "dense_budget", lambda device: 0)  # no dense K, any device
    op = CovarianceOperator(X, parse_kernel(kernel), 1e-3, device, DTYPES[dtype])
    assert not op.dense
    params = op.structure.params(torch.as_tensor(kernel.theta, device=op.device))
    V = torch.as_tensor(np.random.default_rng(1).standard_normal((70, 3)), device=op.device)
    launches = []
    launch = matvec_fused.kernel_matvec

    def spy(*args, **kwargs):
        launches.append(args[0].shape[0])
        return launch(*args, **kwargs)

    monkeypatch.setattr(matvec_fused, "kernel_matvec", spy)
    import kernelkit_gpu
    monkeypatch.setattr(kernelkit_gpu, "kernel_matvec", spy)
    results = {}
    for fused in (False, True):
        monkeypatch.setattr(fused_tree, "DEVICES", (device,) if fused else ())
        op.rows = (0, 70)
        whole = op.matmul(V.to(op.dtype), params).to(torch.float64)
        exact = op.exact_matmul(V, params)
        op.rows = (13, 50)  # a process's share
        share = op._matmul_rows(V.to(op.dtype), params).to(torch.float64)
        results[fused] = (whole, exact, share)
    assert launches == [70, 70, 37]  # the Triton K @ V ran, on the share's rows too
    Kabs = torch.as_tensor(np.abs(kernel(X)), device=op.device)
    scale = Kabs @ V.abs()
    for got, want, eps, rows in zip(results[True], results[False],
                                    (torch.finfo(op.dtype).eps, 2.0**-52,
                                     torch.finfo(op.dtype).eps),
                                    (slice(None), slice(None), slice(13, 50))):
        assert got.shape == want.shape
        bound = 70 * eps * scale[rows] + 1e-300
        assert ((got - want).abs() <= bound).all(), float(((got - want).abs() / bound).max())


@pytest.mark.parametrize("name", ["rbf-ard", "matern15-ard"])
def test_wide_products_run_triton_gram_blocks(name, device, monkeypatch):
    """K @ V with more columns than the Triton K @ V takes (the variance cache's K U): Triton
    Gram row blocks and GEMMs, equal to the torch row blocks to rounding (float64: both sum n
    products of kernel values correct to a few eps, so 70 eps (|K| |V|) bounds the
    difference), on a process's share of the rows too."""

    kernel = {**FAST, **FAST_MORE}[name]
    X, _ = _data(n=70)
    monkeypatch.setattr(covariance, "dense_budget", lambda device: 0)
    monkeypatch.setattr(covariance, "TRITON_MATMUL_MAX_COLUMNS", 2)
    monkeypatch.setattr(covariance, "WIDE_BLOCK_ELEMENTS", 16 * 70)  # blocks of 16 rows
    op = CovarianceOperator(X, parse_kernel(kernel), 1e-3, device, torch.float32)
    params = op.structure.params(torch.as_tensor(kernel.theta, device=op.device))
    V = torch.as_tensor(np.random.default_rng(1).standard_normal((70, 3)), device=op.device)
    blocks = []
    block = fused_tree.kernel_part_block

    def spy(op, tree, params, lo, hi, dtype):
        blocks.append((lo, hi))
        return block(op, tree, params, lo, hi, dtype)

    monkeypatch.setattr(fused_tree, "kernel_part_block", spy)
    results = {}
    for fused in (False, True):
        monkeypatch.setattr(fused_tree, "DEVICES", (device,) if fused else ())
        op.rows = (0, 70)
        whole = op.exact_matmul(V, params)
        op.rows = (13, 50)
        share = op.kernel_rows_matmul(V, params)
        results[fused] = (whole, share)
    assert blocks == [(0, 16), (16, 32), (32, 48), (48, 64), (64, 70), (13, 29), (29, 45),
                      (45, 50)]
    scale = torch.as_tensor(np.abs(kernel(X)), device=op.device) @ V.abs()
    for got, want, rows in zip(results[True], results[False], (slice(None), slice(13, 50))):
        bound = 70 * 2.0**-52 * scale[rows] + 1e-300
        assert ((got - want).abs() <= bound).all(), float(((got - want).abs() / bound).max())


@pytest.mark.parametrize("fused", [False, True], ids=["tree-blocks", "triton-gram"])
@pytest.mark.parametrize("name", ["rbf-ard", "reordered-nested-constants"])
def test_dense_float32_operator_holds_a_float64_k_for_exact_products(name, fused, device,
                                                                     monkeypatch):
    """A float32 operator whose K is held dense also holds K in float64 (where both fit), and its
    exact products are float64 arithmetic: against (sklearn's K + jitter I) @ V in NumPy the
    difference is within 1000 eps64 (|K| |V|): n = 70 terms per sum, each kernel value from
    differently scaled operands and exp, so a relative error of a few eps times the exponent
    (up to ~30 here); measured up to 240 eps64. A float32 K (error ~ eps32 = 5e8 eps64) misses
    it by far.
    Each matrix is formed once per hyperparameter setting, and a new setting drops both."""
    monkeypatch.setattr(fused_tree, "DEVICES", (device,) if fused else ())
    kernel = {**FAST, **FAST_MORE}[name]
    X, _ = _data(n=70)
    op = CovarianceOperator(X, parse_kernel(kernel), 1e-3, device, torch.float32)
    assert op.dense and op.dense_exact
    V = torch.as_tensor(np.random.default_rng(1).standard_normal((70, 3)), device=op.device)
    formed = []
    real = fused_tree.kernel_part_gram if fused else op.block

    def spy(*args, **kwargs):
        formed.append(args[-1] if fused else kwargs["dtype"])
        return real(*args, **kwargs)

    monkeypatch.setattr(fused_tree if fused else op, "kernel_part_gram" if fused else "block",
                        spy)
    params = op.structure.params(torch.as_tensor(kernel.theta, device=op.device))
    op.matmul(V.to(torch.float32), params)
    got = op.exact_matmul(V, params).cpu().numpy()
    op.exact_matmul(V, params)
    n_blocks = len(formed) // 2
    assert formed == [torch.float32] * n_blocks + [torch.float64] * n_blocks, formed
    Kref = kernel(X) + 1e-3 * np.eye(70)
    Vn = V.cpu().numpy()
    bound = 1000 * 2.0**-52 * (np.abs(Kref) @ np.abs(Vn))
    err = np.abs(got - Kref @ Vn)
    assert (err <= bound).all(), float((err / bound).max())
    assert (np.abs(Kref.astype(np.float32).astype(np.float64) @ Vn - Kref @ Vn) > bound).any()
    other = op.structure.params(torch.as_tensor(kernel.theta + 0.1, device=op.device))
    op.exact_matmul(V, other)
    assert list(op._dense_K) == [torch.float64]  # the old setting's matrices are gone


@pytest.mark.parametrize("kernel", [
    C(1.5) * kk.RBF(0.8) + W(0.05),
    C(1.5) * kk.RBF([0.8, 1.6, 1.1]) + W(0.05),
    W(0.05) + RBF([0.8, 1.6, 1.1]) * C(1.5),
    kk.RBF([0.8, 1.6, 1.1]),
    C(1.5, constant_value_bounds="fixed") * kk.RBF([0.8, 1.6, 1.1]),
    C(1.5) * kk.RBF(0.8, length_scale_bounds="fixed"),
    C(0.5) * C(3.0) * kk.RBF([0.8, 1.6, 1.1]),
], ids=["iso", "ard", "sklearn-reordered", "no-constant", "fixed-constant", "fixed-length",
        "two-constants"])
@pytest.mark.parametrize("offset", [0.0, 1e3])
def test_landmark_columns_gradient_in_closed_form(kernel, offset):
    """The preconditioner's landmark columns of a [C *] rbf kernel part: the same values as the
    operator's block and the same gradient of <G, Y> as autograd through it, on data far from
    the origin too (the operator centres it). Agreement measured: at most 5e-15 of the largest
    entry (the expansion of the distances against autograd's), hence 5e-14."""
    from kernelkit.operators.fused import landmark_columns

    rng = np.random.default_rng(5)
    X = rng.uniform(-2.0, 2.0, (90, 3)) + offset
    op = CovarianceOperator(X, parse_kernel(kernel), 1e-6, "cpu", torch.float64)
    landmarks = torch.tensor([0, 7, 11, 30, 52, 89])
    G = torch.tensor(rng.standard_normal((90, 6)))
    out = {}
    for how in ("closed", "autograd"):
        theta = torch.tensor(kernel.theta, requires_grad=True)
        params = op.structure.params(theta)
        if how == "closed":
            Y = landmark_columns(op, params, landmarks)
            assert Y.grad_fn is not None and type(Y.grad_fn).__name__.startswith("_RBFColumns")
        else:
            Y = op.block(op.X64, op.X64[landmarks], params, dtype=torch.float64, direct=False)
        (grad,) = torch.autograd.grad((G * Y).sum(), theta, allow_unused=True)
        out[how] = (Y.detach().numpy(), np.zeros(len(kernel.theta)) if grad is None
                    else grad.numpy())
    np.testing.assert_array_equal(out["closed"][0], out["autograd"][0])
    want = out["autograd"][1]
    np.testing.assert_allclose(out["closed"][1], want, rtol=0,
                               atol=5e-14 * max(1.0, np.abs(want).max()))
