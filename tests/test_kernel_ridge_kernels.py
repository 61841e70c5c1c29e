"""kernelkit.KernelRidge takes what scikit-learn's KernelRidge takes (issue 38 item 2): kernel
objects and their algebra, kernel="precomputed", alpha=0 and sparse X, against scikit-learn's
dense solve; the kernel operators those run on (the one-leaf tree of a registry kernel, a tree
of several, a given matrix); and the clear errors for the kernels that cannot work.

Tolerance of a CG fit against a dense solve of the same system (K + alpha I) a = y, at a test
point x: |f(x) - f*(x)| = |k_x^T (a - a*)| <= ||k_x|| ||(K + alpha I)^{-1} r|| <=
||k_x|| tol ||y|| / alpha, r the exit residual (||r|| <= tol ||y||, the reported true residual;
K PSD, so ||(K + alpha I)^{-1}|| <= 1 / alpha). The kernel values of the two sides differ by
rounding only (a few eps64 relative), far below tol; the factor 2 covers them.
"""

import warnings

import numpy as np
import pytest
import scipy.sparse
from sklearn.gaussian_process.kernels import RBF, DotProduct, ExpSineSquared, Matern
from sklearn.gaussian_process.kernels import ConstantKernel as C
from sklearn.gaussian_process.kernels import PairwiseKernel, RationalQuadratic
from sklearn.gaussian_process.kernels import WhiteKernel as W
from sklearn.kernel_ridge import KernelRidge as SKKernelRidge
from sklearn.metrics.pairwise import pairwise_kernels

import kernelkit as kk
from kernelkit import KernelRidge
from kernelkit.operators import kernel_operator
from kernelkit.operators.kernel_tree import parse_kernel
from kernelkit_math.registry import REGISTRY
from tests.cases import examples, make_class

TOL = 1e-10
ALPHA = 0.1

#: Kernels of scikit-learn's algebra, of kernelkit's classes, of both.
ALGEBRA = {
    "sum": RBF(0.8) + Matern(1.2, nu=1.5),
    "scaled": 2.0 * RBF(1.5),
    "kernelkit-product": kk.RBF(0.7) * kk.Laplacian(2.0),
    "kernelkit-sum-ard": kk.RBF([0.8, 1.5, 1.1]) + kk.RationalQuadratic(1.3, alpha=0.6),
    "constants-and-dot": C(0.5) * RationalQuadratic(0.9, alpha=2.0) + DotProduct(0.3),
    "power": RBF(1.1) ** 2,
    "white-adds-nothing": Matern(0.9, nu=2.5) + W(0.5),
    "mixed": C(1.5) * (kk.Matern(1.0, nu=0.5) + RBF(2.0)) * kk.Laplacian(3.0),
}


def _data(rng, n=120, d=3):
    X = rng.uniform(-2.0, 2.0, size=(n, d))
    return X, np.sin(X[:, 0]) + X[:, 1] * X[:, 2] + 0.05 * rng.normal(size=n)


def _bound(Xt, X, kernel, y, alpha=ALPHA, tol=TOL):
    """2 ||k_x|| tol ||y|| / alpha at every test point (module docstring)."""
    Kt = kernel(Xt, X)
    return 2 * np.linalg.norm(Kt, axis=1) * tol * np.linalg.norm(y) / alpha


@pytest.mark.parametrize("name", list(ALGEBRA))
def test_kernel_objects_and_algebra_give_sklearns_model(name, rng):
    kernel = ALGEBRA[name]
    X, y = _data(rng)
    Xt = rng.uniform(-2.0, 2.0, size=(40, 3))
    model = KernelRidge(alpha=ALPHA, kernel=kernel, solver="cg", tol=TOL, device="cpu",
                        random_state=0).fit(X, y)
    ref = SKKernelRidge(alpha=ALPHA, kernel=kernel).fit(X, y)
    assert not model.dense_fallback_ and model.residuals_[-1] <= TOL
    got, want = model.predict(Xt), ref.predict(Xt)
    assert np.all(np.abs(got - want) <= _bound(Xt, X, kernel, y)), np.abs(got - want).max()


@pytest.mark.parametrize("name", [name for name, spec in REGISTRY.items() if spec.psd])
def test_every_psd_registry_kernel_by_name_and_as_object(name, rng):
    """Every kernel KernelRidge takes by name, at its first registry example, by name and as
    kernelkit's object: scikit-learn's model with that object (bound of the module
    docstring)."""
    params = examples(name)[0].params(3)
    kernel = make_class(name, params, 3, device="cpu")
    X, y = _data(rng, n=80)
    Xt = rng.uniform(-2.0, 2.0, size=(20, 3))
    want = SKKernelRidge(alpha=ALPHA, kernel=kernel).fit(X, y).predict(Xt)
    bound = _bound(Xt, X, kernel, y)
    for given in ({"kernel": name, "kernel_params": params}, {"kernel": kernel}):
        model = KernelRidge(alpha=ALPHA, solver="cg", tol=TOL, device="cpu", random_state=0,
                            **given).fit(X, y)
        assert np.all(np.abs(model.predict(Xt) - want) <= bound), given


def test_kernel_object_and_its_name_give_the_same_model(rng):
    """``kernelkit.RBF(l)`` is the one-leaf tree of ``"rbf"`` with gamma = 1 / (2 l^2): the
    same kernel values, so the same CG run to the last bit."""
    X, y = _data(rng)
    a = KernelRidge(kernel=kk.RBF(2.0), device="cpu", random_state=0).fit(X, y)
    b = KernelRidge(kernel="rbf", gamma=0.125, device="cpu", random_state=0).fit(X, y)
    np.testing.assert_array_equal(a.dual_coef_, b.dual_coef_)


@pytest.mark.parametrize("solver", ["cg", "nystrom"])
def test_precomputed_fit_and_predict(solver, rng):
    """X is K(train, train) at fit and K(test, train) at predict, as in scikit-learn: the model
    of the same kernel given by name (the same landmarks: the same random_state), and
    scikit-learn's precomputed model for "cg" (bound of the module docstring). The matrices are
    not modified."""
    X, y = _data(rng)
    Xt = rng.uniform(-2.0, 2.0, size=(30, 3))
    K, Kt = pairwise_kernels(X, metric="rbf", gamma=0.4), pairwise_kernels(Xt, X, metric="rbf",
                                                                           gamma=0.4)
    K0, Kt0 = K.copy(), Kt.copy()
    kw = dict(alpha=ALPHA, solver=solver, n_components=40, tol=TOL, random_state=0)
    model = KernelRidge(kernel="precomputed", **kw).fit(K, y)
    named = KernelRidge(kernel="rbf", gamma=0.4, device="cpu", **kw).fit(X, y)
    np.testing.assert_array_equal(model.landmark_indices_, named.landmark_indices_)
    got = model.predict(Kt)
    # the same system from the same kernel values to rounding: both within tol of its solution
    bound = 2 * _bound(Xt, X, lambda A, B: pairwise_kernels(A, B, metric="rbf", gamma=0.4), y)
    if solver == "nystrom":  # the M-dimensional system: its own residual, scaled by K_nM
        bound = 1e-6 * np.abs(named.predict(Xt)).max()
    np.testing.assert_allclose(got, named.predict(Xt), rtol=0, atol=bound.max() if solver ==
                               "cg" else bound)
    if solver == "cg":
        want = SKKernelRidge(alpha=ALPHA, kernel="precomputed").fit(K, y).predict(Kt)
        assert np.all(np.abs(got - want) <= bound)
    np.testing.assert_array_equal(K, K0)
    np.testing.assert_array_equal(Kt, Kt0)


def test_precomputed_with_sample_weights_as_sklearn(rng):
    X, y = _data(rng)
    K = pairwise_kernels(X, metric="laplacian", gamma=0.3)
    w = rng.uniform(0.0, 2.0, size=len(y))
    w[:5] = 0.0
    model = KernelRidge(alpha=ALPHA, kernel="precomputed", tol=TOL).fit(K, y, sample_weight=w)
    ref = SKKernelRidge(alpha=ALPHA, kernel="precomputed").fit(K, y, sample_weight=w)
    # (S K S + alpha I) c = S y with S = sqrt(w) <= sqrt(2): the bound scaled by max S^2
    bound = 2 * 2.0 * np.linalg.norm(K, axis=1) * TOL * np.linalg.norm(np.sqrt(w) * y) / ALPHA
    assert np.all(np.abs(model.predict(K) - ref.predict(K)) <= bound)


def test_precomputed_needs_a_square_matrix(rng):
    X, y = _data(rng, n=20)
    with pytest.raises(ValueError, match=r"kernel='precomputed' takes X as the square kernel "
                       r"matrix of the training samples; got X of shape \(20, 3\)"):
        KernelRidge(kernel="precomputed").fit(X, y)


def test_alpha_zero_singular_kernel_is_least_squares_with_sklearns_warning(rng):
    """A linear kernel of 5 features on 60 points (K of rank 5) and targets outside its range:
    K a = y has no solution, CG cannot solve it, and the dense fallback's Cholesky fails, so the
    minimum-norm least-squares solution, with scikit-learn's warning (scikit-learn's own path).
    Its predictions at the training points are the projection of y onto the span of X's
    columns (computed here by NumPy's lstsq on X): error about cond(K) eps ||y|| on the kept
    range, cond(K) = cond(X)^2 (~10 here); 1e-10 ||y|| leaves room."""
    X = rng.normal(size=(60, 5))
    y = X @ rng.normal(size=5) + rng.normal(size=60)
    with pytest.warns(UserWarning, match="Singular matrix in solving dual problem") as record:
        model = KernelRidge(alpha=0.0, kernel="linear", solver="cg", device="cpu",
                            random_state=0).fit(X, y)
    with pytest.warns(UserWarning, match="Singular matrix in solving dual problem"):
        ref = SKKernelRidge(alpha=0.0, kernel="linear").fit(X, y)
    assert model.dense_fallback_ and len(record) == 1
    projection = X @ np.linalg.lstsq(X, y, rcond=None)[0]
    atol = 1e-10 * np.linalg.norm(y)
    np.testing.assert_allclose(model.predict(X), projection, rtol=0, atol=atol)
    np.testing.assert_allclose(ref.predict(X), projection, rtol=0, atol=atol)


@pytest.mark.parametrize("solver", ["cg", "nystrom"])
def test_alpha_zero_full_rank_kernel_interpolates(solver, rng):
    """alpha = 0 with a positive definite K: K a = y is solved (no warning); at the training
    points the model interpolates, |f(x_i) - y_i| <= ||y - K a|| <= tol ||y|` (the reported true
    residual). "nystrom" with M = n is the same system (up to its jitter)."""
    X, y = _data(rng, n=60)
    tol = 1e-9
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = KernelRidge(alpha=0.0, kernel="laplacian", gamma=0.5, solver=solver,
                            n_components=60, tol=tol, device="cpu", random_state=0).fit(X, y)
    assert model.residuals_[-1] <= tol
    if solver == "cg":
        assert np.abs(model.predict(X) - y).max() <= tol * np.linalg.norm(y)
    else:  # the normal equations' residual, relative to K y: the same order at the points
        assert np.abs(model.predict(X) - y).max() <= 1e3 * tol * np.linalg.norm(y)


def test_sparse_input_is_made_dense(rng):
    X, y = _data(rng, n=50)
    X[X < 0] = 0.0
    dense = KernelRidge(kernel="rbf", gamma=0.5, device="cpu", random_state=0).fit(X, y)
    for fmt in (scipy.sparse.csr_matrix, scipy.sparse.csc_array):
        sparse = KernelRidge(kernel="rbf", gamma=0.5, device="cpu", random_state=0).fit(fmt(X),
                                                                                         y)
        np.testing.assert_array_equal(sparse.dual_coef_, dense.dual_coef_)
        np.testing.assert_array_equal(sparse.predict(fmt(X)), dense.predict(X))


@pytest.mark.parametrize("kernel, error, match", [
    (np.dot, TypeError, r"kernel must be a registry name such as 'rbf', 'precomputed', or a "
                        r"kernel object .* a Python function cannot be used\); got <function"),
    (kk.Sigmoid(), TypeError, r"Sigmoid is not positive semi-definite\); supported: Sum"),
    (kk.RBF() + C() * kk.Sigmoid(), TypeError, r"Sigmoid is not positive semi-definite"),
    (RBF() + PairwiseKernel(metric="laplacian"), TypeError,
     r"not supported by kernelkit's estimators \(PairwiseKernel is not a kernel of the "
     r"kernelkit registry\)"),
    (ExpSineSquared(), TypeError, r"ExpSineSquared is not positive semi-definite with more than "
                                  r"one feature"),
    ("sigmoid", ValueError, r"kernel 'sigmoid' is not positive semi-definite"),
], ids=["callable", "sigmoid", "sigmoid-in-a-sum", "pairwise-kernel", "periodic-3-features",
        "sigmoid-name"])
def test_kernels_that_cannot_work_are_refused_by_name(kernel, error, match, rng):
    X, y = _data(rng, n=20)
    with pytest.raises(error, match=match):
        KernelRidge(kernel=kernel, device="cpu").fit(X, y)


# ------------------------------------------------------------------------- the operators
@pytest.mark.parametrize("name", ["sum", "constants-and-dot", "power", "white-adds-nothing"])
def test_kernel_operator_of_a_tree_against_sklearn(name, rng):
    """block (K(A, B); K(A, A) exactly symmetric), diag and matmul of a tree's KernelOperator
    (float64 registry references combined) against scikit-learn's kernel(A, B) and its diag
    without the WhiteKernel's noise: a few eps64 apart (relative error of the leaves' values
    ~10 eps, combined: 1e-14 of the largest value)."""
    kernel = ALGEBRA[name]
    A, B = rng.normal(size=(17, 3)), rng.normal(size=(11, 3))
    op = kernel_operator.KernelOperator(parse_kernel(kernel, 3), where="cpu",
                                        block_bytes=5 * 11 * 24)
    want = kernel(A, B)
    scale = np.abs(want).max()
    np.testing.assert_allclose(op.block(A, B).numpy(), want, rtol=0, atol=1e-14 * scale)
    KA = op.block(A).numpy()
    np.testing.assert_array_equal(KA, KA.T)
    np.testing.assert_allclose(KA, kernel(A, A), rtol=0, atol=1e-14 * scale)
    noise = sum(k.noise_level for k in [kernel.k2] if isinstance(k, W)) if name.startswith(
        "white") else 0.0
    np.testing.assert_allclose(op.diag(A).numpy(), kernel.diag(A) - noise, rtol=0,
                               atol=1e-14 * scale)
    V = rng.normal(size=(11, 2))
    assert op.rows_per_block(11) == 5  # four row blocks of A
    np.testing.assert_allclose(op.matmul(A, B, op.vectors(V)).numpy(), want @ V, rtol=0,
                               atol=1e-13 * scale * np.abs(V).sum(0).max())


def test_registry_kernel_is_the_one_leaf_tree(rng):
    """A kernel by name is the one-leaf tree at its resolved parameters: its operator's block is
    the registry's float64 reference bit for bit."""
    from kernelkit_math.registry import get_kernel

    A, B = rng.normal(size=(9, 4)), rng.normal(size=(5, 4))
    op = kernel_operator.KernelOperator("polynomial", {"gamma": None, "degree": 2, "coef0": 0.5},
                                        "cpu")
    assert op.scaled_leaf().leaf.spec.name == "polynomial"
    want = get_kernel("polynomial").value(A, B, degree=2, coef0=0.5)
    np.testing.assert_array_equal(op.block(A, B).numpy(), want)


def test_precomputed_operator_indexes_the_matrix(rng):
    K = rng.normal(size=(6, 6))
    op = kernel_operator.PrecomputedOperator(K)
    rows, cols = np.array([4, 0, 2]), np.array([3, 1])
    np.testing.assert_array_equal(op.block(rows, cols).numpy(), K[np.ix_(rows, cols)])
    np.testing.assert_array_equal(op.diag(rows).numpy(), K[rows, rows])
    V = rng.normal(size=(2, 3))
    np.testing.assert_allclose(op.matmul(rows, cols, op.vectors(V)).numpy(),
                               K[np.ix_(rows, cols)] @ V, rtol=1e-15, atol=0)
    np.testing.assert_array_equal(op.data(K), np.arange(6))


@pytest.mark.usefixtures("triton_can_run")
def test_tree_on_the_triton_path_gives_sklearns_model(device, monkeypatch, rng):
    """A sum of two registry kernels on the Triton path (float32 Gram blocks of each leaf,
    combined, times float64 vectors with float64 sums; refinement to tol with float64 exact
    products): scikit-learn's model within the module docstring's bound at tol = 1e-8, plus
    predict's float32 kernel values, 10 eps32 sum_j |k(x, x_j) a_j| (as
    tests/test_kernel_ridge_precision.py)."""
    if device == "cpu":
        monkeypatch.setattr(kernel_operator, "TRITON_ON_CPU", True)
    kernel = kk.RBF(1.2) + 0.5 * kk.Laplacian(2.0)
    X, y = _data(rng, n=48)
    Xt = rng.uniform(-2.0, 2.0, size=(10, 3))
    tol = 1e-8
    model = KernelRidge(alpha=ALPHA, kernel=kernel, solver="cg", n_components=12, tol=tol,
                        device=device, random_state=0).fit(X, y)
    ref = SKKernelRidge(alpha=ALPHA, kernel=kernel).fit(X, y)
    assert model.residuals_[-1] <= tol
    Kt = kernel(Xt, X)
    bound = (_bound(Xt, X, kernel, y, tol=tol)
             + 10 * 2.0**-24 * (np.abs(Kt) * np.abs(model.dual_coef_)).sum(axis=1))
    assert np.all(np.abs(model.predict(Xt) - ref.predict(Xt)) <= bound)
