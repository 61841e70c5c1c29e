"""kernelkit.KernelPCA against scikit-learn's KernelPCA and a dense float64 eigendecomposition;
the block Krylov eigensolver (kernelkit.linalg.eigen) against its residual bounds."""

import numpy as np
import pytest
import torch
from sklearn import config_context
from sklearn.base import clone
from sklearn.decomposition import KernelPCA as SKKernelPCA
from sklearn.exceptions import NotFittedError
from sklearn.gaussian_process.kernels import RBF as SKRBF
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.metrics.pairwise import rbf_kernel
from sklearn.pipeline import make_pipeline
from sklearn.utils.estimator_checks import parametrize_with_checks

from kernelkit import KernelPCA, KernelRidge
from kernelkit.linalg.eigen import block_krylov_eigsh
from kernelkit.operators import kernel_operator

EPS = np.finfo(np.float64).eps
SOLVERS = ["dense", "arpack", "randomized", "krylov"]


def _data(rng, n=120, d=4):
    return rng.normal(size=(n, d)), rng.normal(size=(15, d))


def _centred(K):
    """H K H with H = I - 1 1^T / n, explicitly (the reference the estimator avoids forming)."""
    n = K.shape[0]
    H = np.eye(n) - 1.0 / n
    return H @ K @ H


def _same_up_to_sign(A, B, atol):
    """Columns of A equal those of B up to one sign per column."""
    signs = np.sign(np.sum(A * B, axis=0))
    np.testing.assert_allclose(A * signs, B, rtol=0, atol=atol)


# ------------------------------------------------------------------------- against sklearn
@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("kernel, params", [("linear", {}), ("rbf", {"gamma": 0.3}),
                                            ("poly", {"degree": 2, "gamma": 0.5, "coef0": 1.0})],
                         ids=["linear", "rbf", "poly"])
def test_matches_sklearn(rng, solver, kernel, params):
    """Eigenvalues, eigenvectors (up to sign), projections and pre-images as scikit-learn's
    dense solver gives them, for every solver."""
    X, Xt = _data(rng)
    kw = dict(n_components=4, kernel=kernel, fit_inverse_transform=True, random_state=0, **params)
    ours = KernelPCA(eigen_solver=solver, device="cpu", **kw)
    Z = ours.fit_transform(X)
    ref = SKKernelPCA(eigen_solver="dense", **kw)
    Zref = ref.fit_transform(X)
    scale = ref.eigenvalues_[0]
    # float64 eigensolvers on the same matrix: eigenvalues to a few hundred eps of lambda_1,
    # eigenvectors to eps * lambda_1 / gap (the gaps here are >= 1e-2 lambda_1)
    np.testing.assert_allclose(ours.eigenvalues_, ref.eigenvalues_, rtol=0, atol=1e3 * EPS * scale)
    _same_up_to_sign(ours.eigenvectors_, ref.eigenvectors_, atol=1e-9)
    _same_up_to_sign(Z, Zref, atol=1e-9 * np.sqrt(scale))
    _same_up_to_sign(ours.transform(Xt), ref.transform(Xt), atol=1e-9 * np.sqrt(scale))
    np.testing.assert_allclose(ours.inverse_transform(ours.transform(Xt)),
                               ref.inverse_transform(ref.transform(Xt)), rtol=0, atol=1e-8)
    assert ours.eigen_solver_ == solver
    assert ours.residual_bounds_.shape == (4,)


def test_inverse_transform_default_gamma(rng):
    """gamma=None is 1 / n_features of X for the pre-image kernel too (scikit-learn's gamma_),
    not 1 / n_components of the projections it is evaluated on."""
    X, Xt = _data(rng)
    kw = dict(n_components=2, kernel="rbf", fit_inverse_transform=True)
    ours = KernelPCA(device="cpu", **kw).fit(X)
    ref = SKKernelPCA(**kw).fit(X)
    assert ours.gamma_ == ref.gamma_ == 1 / X.shape[1]
    np.testing.assert_allclose(ours.inverse_transform(ours.transform(Xt)),
                               ref.inverse_transform(ref.transform(Xt)), rtol=0, atol=1e-8)


@pytest.mark.parametrize("solver", ["dense", "arpack", "randomized"])
def test_bit_for_bit_sklearn_on_the_same_matrix(rng, solver):
    """scikit-learn's own solvers on the same float64 kernel matrix (precomputed: the kernel
    values are the user's): identical eigenpairs and projections."""
    X, Xt = _data(rng)
    K, Kt = rbf_kernel(X, gamma=0.2), rbf_kernel(Xt, X, gamma=0.2)
    kw = dict(n_components=3, kernel="precomputed", eigen_solver=solver, random_state=0)
    ours = KernelPCA(**kw).fit(K)
    ref = SKKernelPCA(**kw).fit(K)
    np.testing.assert_array_equal(ours.eigenvalues_, ref.eigenvalues_)
    np.testing.assert_array_equal(ours.eigenvectors_, ref.eigenvectors_)
    # transform: the centring applied to the product, not to K(test, train) (a few eps)
    np.testing.assert_allclose(ours.transform(Kt), ref.transform(Kt), rtol=0,
                               atol=100 * EPS * np.abs(ref.transform(Kt)).max())


def test_kernel_object_and_precomputed(rng):
    """A kernel object and the precomputed matrix give the named kernel's components."""
    X, Xt = _data(rng)
    gamma = 0.25
    named = KernelPCA(3, kernel="rbf", gamma=gamma, eigen_solver="krylov", device="cpu",
                      random_state=0).fit(X)
    obj = KernelPCA(3, kernel=SKRBF(length_scale=np.sqrt(1 / (2 * gamma))), eigen_solver="krylov",
                    device="cpu", random_state=0).fit(X)
    pre = KernelPCA(3, kernel="precomputed", eigen_solver="krylov", random_state=0).fit(
        rbf_kernel(X, gamma=gamma))
    scale = named.eigenvalues_[0]
    for other, Zt in [(obj, obj.transform(Xt)), (pre, pre.transform(rbf_kernel(Xt, X, gamma=gamma)))]:
        np.testing.assert_allclose(other.eigenvalues_, named.eigenvalues_, rtol=0,
                                   atol=1e-9 * scale)
        _same_up_to_sign(Zt, named.transform(Xt), atol=1e-7)


# ------------------------------------------------------------------- krylov at moderate n
def _assert_within_residual_bounds(values, vectors, residuals, Kc):
    """The Ritz pairs are as close to the exact eigenpairs of Kc (dense float64 eigh) as their
    residuals r allow: |theta_i - lambda_i| <= r_i^2 / gap_i and sin angle(v_i, u_i) <= r_i / gap_i
    (Kato-Temple, Davis-Kahan), each plus the reference's own error, n eps lambda_1 (/ gap)."""
    exact, U = np.linalg.eigh(Kc)
    exact, U = exact[::-1], U[:, ::-1]
    k = len(values)
    ref_err = Kc.shape[0] * EPS * exact[0]
    for i in range(k):
        gap = np.min(np.abs(np.delete(exact, i) - values[i]))
        assert abs(values[i] - exact[i]) <= residuals[i] ** 2 / gap + ref_err, i
        v, u = vectors[:, i], U[:, i]
        sine = np.linalg.norm(v - u * (u @ v))  # not sqrt(1 - cos^2): that cancels
        assert sine <= (residuals[i] + ref_err) / gap, i


def test_krylov_against_dense_eigh_within_residual_bounds():
    """n = 5000: "krylov" (never forming K) against a dense float64 eigh of the centred K; at
    tol=1e-6 the residuals are large enough for the bounds to matter."""
    rng = np.random.default_rng(7)
    X = rng.normal(size=(5000, 3)) * [1.0, 0.7, 0.4]
    gamma, tol = 0.3, 1e-6
    model = KernelPCA(8, kernel="rbf", gamma=gamma, eigen_solver="krylov", tol=tol,
                      device="cpu", random_state=0).fit(X)
    assert np.all(model.residual_bounds_ <= tol * model.eigenvalues_[0])
    Kc = _centred(rbf_kernel(X, gamma=gamma))
    _assert_within_residual_bounds(model.eigenvalues_, model.eigenvectors_,
                                   model.residual_bounds_, Kc)
    # the residuals are the true ones, not the solver's estimate
    true = np.linalg.norm(Kc @ model.eigenvectors_ - model.eigenvectors_ * model.eigenvalues_,
                          axis=0)
    np.testing.assert_allclose(model.residual_bounds_, true, rtol=0,
                               atol=100 * EPS * model.eigenvalues_[0])


def test_residual_bound_check_catches_missing_centring():
    """A planted bug: the eigensolver on K instead of H K H (centring left out) fails the
    check above."""
    rng = np.random.default_rng(7)
    X = rng.normal(size=(400, 3))
    K = rbf_kernel(X, gamma=0.3)
    Kt = torch.from_numpy(K)
    result = block_krylov_eigsh(lambda V: Kt @ V, 400, 4, tol=1e-8, max_iter=200,
                                rng=np.random.RandomState(0))
    with pytest.raises(AssertionError):
        _assert_within_residual_bounds(result.eigenvalues.numpy(), result.eigenvectors.numpy(),
                                       result.residuals.numpy(), _centred(K))


def test_krylov_stops_at_max_iter_with_a_warning(rng):
    X, _ = _data(rng, n=400)
    with pytest.warns(Warning, match=r"stopped at max_iter=1 block products"):
        KernelPCA(3, kernel="linear", eigen_solver="krylov", tol=1e-15, max_iter=1,
                  device="cpu", random_state=0).fit(X @ rng.normal(size=(4, 4)))


@pytest.mark.usefixtures("triton_can_run")
def test_block_rounds_up_to_the_columns_a_product_costs(monkeypatch, rng):
    """On the Triton path the block is rounded up to the K @ V's chunk of 64 columns (64
    components: 96 -> 128 columns per product, as the products show); elsewhere not."""
    from kernelkit.linalg import eigen

    assert eigen.block_size(10_000, 64) == 96
    assert eigen.block_size(10_000, 64, 64) == 128
    assert eigen.block_size(100, 64, 64) == 100  # at most n
    widths = []
    monkeypatch.setattr(kernel_operator, "TRITON_ON_CPU", True)
    monkeypatch.setattr(kernel_operator.KernelOperator, "matmul", lambda self, A, B, V: (
        widths.append(V.shape[1]) or torch.from_numpy(rbf_kernel(
            np.asarray(A, dtype=np.float64), np.asarray(B, dtype=np.float64), gamma=0.1)) @ V))
    X, _ = _data(rng, n=300)
    KernelPCA(5, kernel="rbf", gamma=0.1, eigen_solver="krylov", max_iter=2, device="cpu",
              random_state=0).fit(X)
    assert 64 in widths and 15 not in widths  # the block: 5 + 10 columns made 64


def test_eigsh_finds_an_invariant_subspace():
    """A rank-2 operator asked for 5 pairs: the basis is filled with random directions where
    the Krylov space closes; the zero eigenvalues come out with zero residual."""
    rng = np.random.default_rng(3)
    B = rng.normal(size=(300, 2))
    A = torch.from_numpy(B @ B.T)
    result = block_krylov_eigsh(lambda V: A @ V, 300, 5, tol=1e-10, max_iter=100,
                                rng=np.random.RandomState(0))
    exact = np.linalg.eigvalsh(B.T @ B)[::-1]
    assert result.converged
    np.testing.assert_allclose(result.eigenvalues[:2].numpy(), exact, rtol=1e-12)
    np.testing.assert_allclose(result.eigenvalues[2:].numpy(), 0, atol=1e-10 * exact[0])
    V = result.eigenvectors
    np.testing.assert_allclose((V.T @ V).numpy(), np.eye(5), atol=1e-12)


def test_eigsh_start_block_spans_the_given_directions():
    """``start``: the first product is on a block that spans the given directions (KernelPCA
    reads K's row means from it); the eigenpairs are still those of the operator, and a start
    wider than the block is refused."""
    rng = np.random.default_rng(5)
    B = rng.normal(size=(200, 200))
    A = torch.from_numpy(B @ B.T)
    ones = torch.ones((200, 1), dtype=torch.float64)
    blocks = []

    def product(V):
        blocks.append(V)
        return A @ V

    result = block_krylov_eigsh(product, 200, 3, tol=1e-10, max_iter=100,
                                rng=np.random.RandomState(0), start=ones)
    first = blocks[0]
    np.testing.assert_allclose((first @ (first.T @ ones)).numpy(), ones.numpy(), atol=1e-12)
    exact = np.linalg.eigvalsh(A.numpy())[::-1][:3]
    np.testing.assert_allclose(result.eigenvalues.numpy(), exact, rtol=1e-9)
    with pytest.raises(ValueError, match="start must have at most 13 columns"):
        block_krylov_eigsh(product, 200, 3, tol=1e-10, max_iter=100,
                           rng=np.random.RandomState(0), start=torch.ones((200, 14)))


def test_krylov_row_means_are_those_of_k(rng):
    """The row means KernelPCA keeps for ``transform`` (read from the first product) are K's."""
    X, _ = _data(rng, n=300)
    kpca = KernelPCA(4, kernel="rbf", gamma=0.2, eigen_solver="krylov", device="cpu",
                     random_state=0).fit(X)
    K = rbf_kernel(X, gamma=0.2)
    np.testing.assert_allclose(kpca._row_means, K.mean(axis=1), rtol=1e-12)
    np.testing.assert_allclose(kpca._all_mean, K.mean(), rtol=1e-12)


def test_auto_rule(rng):
    X, _ = _data(rng, n=250)
    assert KernelPCA(3, device="cpu").fit(X).eigen_solver_ == "arpack"
    assert KernelPCA(20, device="cpu").fit(X).eigen_solver_ == "dense"
    assert KernelPCA(device="cpu").fit(X[:100]).eigen_solver_ == "dense"


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("params, exc, match", [
    ({"kernel": "sigmoid"}, ValueError, "kernel 'sigmoid' is not positive semi-definite"),
    ({"kernel": lambda a, b: a @ b.T}, TypeError, "a Python function cannot be used"),
    ({"kernel": "nope"}, ValueError, "kernel: "),
    ({"eigen_solver": "lobpcg"}, ValueError, "eigen_solver must be one of"),
    ({"n_components": 0}, ValueError, "n_components must be an integer > 0"),
    ({"tol": -1.0}, ValueError, "tol must be a real number >= 0"),
    ({"alpha": "big"}, TypeError, "alpha must be a real number >= 0"),
    ({"max_iter": 0}, ValueError, "max_iter must be an integer > 0"),
    ({"iterated_power": -1}, ValueError, "iterated_power must be 'auto' or an integer >= 0"),
    ({"remove_zero_eig": "yes"}, TypeError, "remove_zero_eig must be True or False"),
    ({"device": "tpu"}, ValueError, "device must be one of"),
    ({"eigen_solver": "arpack", "n_components": 30}, ValueError,
     r"eigen_solver='arpack' finds at most n_samples - 1 = 29 components"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_bad_parameters(rng, params, exc, match):
    X, _ = _data(rng, n=30)
    with pytest.raises(exc, match=match):
        KernelPCA(**{"device": "cpu", **params}).fit(X)


def test_bad_data(rng):
    X, _ = _data(rng, n=30)
    X[3, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        KernelPCA(2, device="cpu").fit(X)
    X, _ = _data(rng, n=30)
    with pytest.raises(ValueError, match=r"square kernel matrix .* shape \(30, 4\)"):
        KernelPCA(2, kernel="precomputed").fit(X)
    with pytest.raises(ValueError, match="Cannot fit_inverse_transform with a precomputed"):
        KernelPCA(2, kernel="precomputed", fit_inverse_transform=True).fit(X @ X.T)
    K = X @ X.T
    K[0, 1] += 1.0
    with pytest.raises(ValueError, match="'krylov' needs a symmetric precomputed kernel"):
        KernelPCA(2, kernel="precomputed", eigen_solver="krylov").fit(K)
    model = KernelPCA(2, device="cpu").fit(X)
    with pytest.raises(ValueError, match="X has 3 features, but KernelPCA is expecting 4"):
        model.transform(X[:, :3])
    with pytest.raises(NotFittedError, match="fit_inverse_transform parameter was not set"):
        model.inverse_transform(model.transform(X))


@pytest.mark.parametrize("solver", SOLVERS)
def test_significant_negative_eigenvalues_refused(solver):
    """scikit-learn's non-PSD precomputed matrix (eigenvalues 52.72 ... -15.11): asking for a
    negative eigenvalue is refused by every solver."""
    K = np.array([
        [4.48, -1.0, 8.07, 2.33, 2.33, 2.33, -5.76, -12.78],
        [-1.0, -6.48, 4.5, -1.24, -1.24, -1.24, -0.81, 7.49],
        [8.07, 4.5, 15.48, 2.09, 2.09, 2.09, -11.1, -23.23],
        [2.33, -1.24, 2.09, 4.0, -3.65, -3.65, 1.02, -0.9],
        [2.33, -1.24, 2.09, -3.65, 4.0, -3.65, 1.02, -0.9],
        [2.33, -1.24, 2.09, -3.65, -3.65, 4.0, 1.02, -0.9],
        [-5.76, -0.81, -11.1, 1.02, 1.02, 1.02, 4.86, 9.75],
        [-12.78, 7.49, -23.23, -0.9, -0.9, -0.9, 9.75, 21.46],
    ])
    with pytest.raises(ValueError, match="There are significant negative eigenvalues"):
        KernelPCA(7, kernel="precomputed", eigen_solver=solver, random_state=0).fit(K)


def test_input_not_modified(rng):
    X, Xt = _data(rng)
    X0, Xt0 = X.copy(), Xt.copy()
    model = KernelPCA(3, kernel="rbf", copy_X=False, fit_inverse_transform=True,
                      eigen_solver="krylov", device="cpu", random_state=0).fit(X)
    model.inverse_transform(model.transform(Xt))
    np.testing.assert_array_equal(X, X0)
    np.testing.assert_array_equal(Xt, Xt0)


# ----------------------------------------------------------------- scikit-learn contract
# device "auto": the CPU where CI runs, the GPU under ``pytest --device cuda``
@parametrize_with_checks([
    KernelPCA(device="auto"),
    KernelPCA(n_components=2, kernel="rbf", eigen_solver="krylov", device="auto", random_state=0),
])
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)


def test_pipelines(rng):
    """KernelPCA feeds kernelkit's KernelRidge and scikit-learn's linear models."""
    X, _ = _data(rng, n=200)
    y = np.sin(X[:, 0]) + X[:, 1] ** 2
    Xt = X[:20] + 0.1
    labels = (X[:, 0] ** 2 + X[:, 1] ** 2 > 2).astype(int)
    kpca = dict(n_components=10, kernel="rbf", gamma=0.2, eigen_solver="krylov", device="cpu",
                random_state=0)
    for model, target in [(KernelRidge(alpha=1e-2, kernel="rbf", solver="cg", tol=1e-10,
                                       device="cpu", random_state=0), y),
                          (Ridge(1e-3), y), (LogisticRegression(), labels)]:
        pipe = make_pipeline(KernelPCA(**kpca), clone(model)).fit(X, target)
        alone = KernelPCA(**kpca)
        fitted = clone(model).fit(alone.fit_transform(X), target)
        np.testing.assert_allclose(pipe.predict(Xt), fitted.predict(alone.transform(Xt)),
                                   rtol=0, atol=1e-9 * np.abs(y).max())
    # the same pipeline with scikit-learn's KernelPCA scores the same
    ours = make_pipeline(KernelPCA(**kpca), Ridge(1e-3)).fit(X, y).score(Xt, y[:20])
    ref = make_pipeline(SKKernelPCA(10, kernel="rbf", gamma=0.2), Ridge(1e-3)).fit(X, y)
    np.testing.assert_allclose(ours, ref.score(Xt, y[:20]), rtol=0, atol=1e-9)


def test_torch_tensors_stay_on_their_device(rng, device):
    """torch in, torch out on the same device and dtype; NumPy in, NumPy out."""
    X, Xt = _data(rng)
    ref = KernelPCA(3, kernel="rbf", gamma=0.3, fit_inverse_transform=True, device="cpu",
                    random_state=0)
    Zref = ref.fit_transform(X)
    model = KernelPCA(3, kernel="rbf", gamma=0.3, fit_inverse_transform=True, device=device,
                      random_state=0)
    for dtype in (torch.float64, torch.float32):
        T = torch.tensor(X, dtype=dtype, device=device)
        Z = model.fit_transform(T)
        back = model.inverse_transform(model.transform(torch.tensor(Xt, dtype=dtype,
                                                                    device=device)))
        for out in (Z, back):
            assert torch.is_tensor(out) and out.device == T.device and out.dtype == dtype
        atol = 1e-9 if dtype == torch.float64 and device == "cpu" else 1e-4
        _same_up_to_sign(Z.cpu().double().numpy(), Zref, atol=atol)
    assert isinstance(ref.transform(Xt), np.ndarray)


@pytest.mark.usefixtures("triton_can_run")
def test_triton_path_krylov(rng, device, monkeypatch):
    """The GPU code path (float32 kernel_matvec products, float64 residuals recomputed):
    on the CPU under the interpreter."""
    import kernelkit_gpu

    from kernelkit.operators import kernel_operator

    if device == "cpu":
        monkeypatch.setattr(kernel_operator, "TRITON_ON_CPU", True)
    calls = []
    real = kernelkit_gpu.kernel_matvec
    monkeypatch.setattr(kernelkit_gpu, "kernel_matvec",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    X, Xt = _data(rng, n=80, d=3)
    model = KernelPCA(3, kernel="rbf", gamma=0.3, eigen_solver="krylov", device=device,
                      random_state=0).fit(X)
    assert calls
    Kc = _centred(rbf_kernel(X, gamma=0.3))
    # float32 products: the default tol is sqrt(float32 eps) = 3.5e-4; the reported residual
    # is the float64 one, and bounds the error as on the CPU
    assert np.all(model.residual_bounds_ <= np.sqrt(np.finfo(np.float32).eps)
                  * model.eigenvalues_[0])
    _assert_within_residual_bounds(model.eigenvalues_, model.eigenvectors_,
                                   model.residual_bounds_, Kc)


def test_pandas_output(rng):
    """Under transform_output="pandas" the internal centring still works on arrays."""
    pd = pytest.importorskip("pandas")
    X, _ = _data(rng, n=250)
    frame = pd.DataFrame(X, columns=list("abcd"))
    with config_context(transform_output="pandas"):
        Z = KernelPCA(2, eigen_solver="arpack", device="cpu", random_state=0).fit_transform(frame)
    assert list(Z.columns) == ["kernelpca0", "kernelpca1"]
