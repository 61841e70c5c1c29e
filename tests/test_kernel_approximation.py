"""kernelkit.Nystroem and kernelkit.RBFSampler: agreement with scikit-learn's transformers (same
draws from the same random_state), the landmark choices, torch in / torch out, the Triton path
(under the interpreter on the CPU), the estimator contract and bad input.

Tolerances: RBFSampler's features are cosines of the same float64 products, so they agree to a
few eps64. Nystroem's features K(X, Z) K_ZZ^(-1/2) move by about cond(K_ZZ) times the relative
rounding of the kernel values (m eps64, m landmarks) times their size: :func:`_nystroem_atol`.
"""

import numpy as np
import pytest
import sklearn.gaussian_process.kernels as skk
from sklearn import kernel_approximation as ska
from sklearn.cluster import kmeans_plusplus
from sklearn.linear_model import Ridge
from sklearn.metrics.pairwise import pairwise_kernels
from sklearn.pipeline import make_pipeline
from sklearn.utils.estimator_checks import parametrize_with_checks

import kernelkit as kk
from kernelkit import Nystroem, RBFSampler
from kernelkit.operators import kernel_operator

EPS64 = np.finfo(np.float64).eps
EPS32 = float(np.finfo(np.float32).eps)


def _data(n=60, d=4, seed=0):
    rng = np.random.RandomState(seed)
    return rng.normal(size=(n, d)), rng.normal(size=(17, d))


def _nystroem_atol(K_mm, features):
    """cond(K_mm) m eps64 max|features|, times 10 for the constants."""
    return 10 * np.linalg.cond(K_mm) * len(K_mm) * EPS64 * np.abs(features).max()


# -------------------------------------------------------------------------------- RBFSampler
@pytest.mark.parametrize("gamma", [0.3, "scale"])
def test_rbf_sampler_matches_sklearn(gamma):
    X, Y = _data()
    ours = RBFSampler(gamma=gamma, n_components=50, random_state=3, device="cpu").fit(X)
    ref = ska.RBFSampler(gamma=gamma, n_components=50, random_state=3).fit(X)
    np.testing.assert_array_equal(ours.random_weights_, ref.random_weights_)
    np.testing.assert_array_equal(ours.random_offset_, ref.random_offset_)
    np.testing.assert_allclose(ours.transform(Y), ref.transform(Y), rtol=0, atol=1e-12)
    np.testing.assert_array_equal(ours.get_feature_names_out(), ref.get_feature_names_out())


@pytest.mark.parametrize("fit_dtype, transform_dtype, out_dtype", [
    (np.float32, np.float32, np.float32), (np.float32, np.float64, np.float64),
    (np.float64, np.float32, np.float64)])
def test_rbf_sampler_dtypes_as_sklearn(fit_dtype, transform_dtype, out_dtype):
    X, Y = _data()
    ours = RBFSampler(random_state=0, device="cpu").fit(X.astype(fit_dtype))
    ref = ska.RBFSampler(random_state=0).fit(X.astype(fit_dtype))
    assert ours.random_weights_.dtype == ours.random_offset_.dtype == fit_dtype
    out = ours.transform(Y.astype(transform_dtype))
    assert out.dtype == ref.transform(Y.astype(transform_dtype)).dtype == out_dtype
    eps = np.finfo(out_dtype).eps
    np.testing.assert_allclose(out, ref.transform(Y.astype(transform_dtype)), rtol=0,
                               atol=100 * eps * np.abs(Y @ ours.random_weights_).max())


def test_rbf_sampler_torch_in_torch_out():
    torch = pytest.importorskip("torch")
    X, Y = _data()
    model = RBFSampler(gamma=0.2, random_state=0, device="cpu")
    out = model.fit(torch.tensor(X)).transform(torch.tensor(Y))
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float64 and out.device.type == "cpu"
    ref = ska.RBFSampler(gamma=0.2, random_state=0).fit(X).transform(Y)
    np.testing.assert_allclose(out.numpy(), ref, rtol=0, atol=1e-12)


@pytest.mark.parametrize("params, error, match", [
    (dict(gamma=-1.0), ValueError, "gamma must be 'scale' or a real number >= 0; got -1.0"),
    (dict(gamma="auto"), TypeError, "gamma must be 'scale' or a real number >= 0; got 'auto'"),
    (dict(n_components=0), ValueError, "n_components must be an integer >= 1; got 0"),
    (dict(n_components=2.5), TypeError, "n_components must be an integer >= 1; got 2.5"),
    (dict(device="tpu"), ValueError, "device must be one of"),
])
def test_rbf_sampler_bad_parameters(params, error, match):
    with pytest.raises(error, match=match):
        RBFSampler(**params).fit(_data()[0])


def test_rbf_sampler_refuses_nan():
    X = _data()[0]
    X[3, 1] = np.nan
    with pytest.raises(ValueError, match="Input X contains NaN"):
        RBFSampler(device="cpu").fit(X)


# ---------------------------------------------------------------------------------- Nystroem
@pytest.mark.parametrize("kernel, params", [
    ("rbf", {}), ("rbf", dict(gamma=0.4)), ("laplacian", dict(gamma=0.2)),
    ("poly", dict(degree=2, coef0=0.5)), ("polynomial", {}), ("cosine", {})])
def test_nystroem_matches_sklearn(kernel, params):
    X, Y = _data()
    ours = Nystroem(kernel, n_components=15, random_state=0, device="cpu", **params).fit(X)
    ref = ska.Nystroem(kernel, n_components=15, random_state=0, **params).fit(X)
    np.testing.assert_array_equal(ours.component_indices_, ref.component_indices_)
    np.testing.assert_array_equal(ours.components_, ref.components_)
    K_mm = pairwise_kernels(ref.components_, metric=kernel, **params)
    expected = ref.transform(Y)
    np.testing.assert_allclose(ours.transform(Y), expected, rtol=0,
                               atol=_nystroem_atol(K_mm, expected))
    np.testing.assert_array_equal(ours.get_feature_names_out(), ref.get_feature_names_out())


@pytest.mark.parametrize("kernel, params", [
    ("matern", dict(kernel_params={"nu": 1.5, "length_scale": 2.0})),
    (kk.RBF(length_scale=1.5), {}), (2.0 * skk.RBF(1.2) + skk.Matern(2.0, nu=2.5), {}),
    ("exponential", {})], ids=["matern", "kk-RBF", "sk-tree", "exponential"])
def test_nystroem_on_all_rows_is_exact(kernel, params):
    """With every row a landmark, phi(X) phi(X)^T = K (reference: scikit-learn's kernel
    values, or the registry's formula written out here)."""
    X = _data(n=25)[0]
    Z = Nystroem(kernel, n_components=25, random_state=0, device="cpu", **params).fit_transform(X)
    if kernel == "matern":
        K = skk.Matern(length_scale=2.0, nu=1.5)(X)
    elif kernel == "exponential":
        K = np.exp(X @ X.T / np.sqrt(X.shape[1]))
    else:
        K = kernel(X)
    np.testing.assert_allclose(Z @ Z.T, K, rtol=0, atol=_nystroem_atol(K, K))


def test_nystroem_landmark_rows_are_exact_for_user_landmarks():
    X, _ = _data()
    landmarks = X[[5, 1, 40]] + 0.25
    model = Nystroem(gamma=0.3, landmarks=landmarks, device="cpu").fit(X)
    assert not hasattr(model, "component_indices_")
    np.testing.assert_array_equal(model.components_, landmarks)
    features = model.transform(landmarks)
    K = pairwise_kernels(landmarks, metric="rbf", gamma=0.3)
    np.testing.assert_allclose(features @ features.T, K, rtol=0, atol=_nystroem_atol(K, K))


def test_nystroem_kmeans_plus_plus_is_sklearns_seeding():
    X, _ = _data(n=80)
    model = Nystroem(n_components=12, landmarks="kmeans++", random_state=7, device="cpu").fit(X)
    expected = kmeans_plusplus(X, 12, random_state=np.random.RandomState(7))[1]
    np.testing.assert_array_equal(model.component_indices_, expected)


def test_nystroem_leverage_scores():
    """The scores are k(x_i, x_i) - K_iS (K_SS + lambda I)^-1 K_Si, lambda = mean k(x_i, x_i)
    (here written with scikit-learn's kernel values and a dense solve), and they find outliers:
    95 rows in a tight cluster, 5 far apart (one of them in the pilot) score at least 4 times
    any clustered row, so "leverage" draws more of them than a uniform draw does."""
    from kernelkit.estimators import kernel_approximation as ka

    rng = np.random.RandomState(0)
    X = np.vstack([0.01 * rng.normal(size=(95, 2)), 10.0 * np.arange(1, 6)[:, None] * [1, -1]])
    pilot = np.r_[np.arange(9), 97]
    op = kernel_operator.KernelOperator("rbf", {"gamma": 1.0})
    scores = ka._leverage_scores(op, X, X, pilot)
    K_ns = pairwise_kernels(X, X[pilot], metric="rbf", gamma=1.0)
    expected = 1.0 - np.einsum("ij,ji->i", K_ns, np.linalg.solve(K_ns[pilot] + np.eye(10), K_ns.T))
    np.testing.assert_allclose(scores, expected, rtol=0, atol=100 * EPS64)
    assert scores[95:].min() >= 4 * scores[:95].max()
    leverage = Nystroem(gamma=1.0, n_components=10, landmarks="leverage", random_state=0,
                        device="cpu").fit(X).component_indices_
    uniform = Nystroem(gamma=1.0, n_components=10, random_state=0, device="cpu").fit(X)
    assert len(np.unique(leverage)) == 10
    assert np.sum(leverage >= 95) > np.sum(uniform.component_indices_ >= 95)


def test_nystroem_precomputed_as_sklearn():
    X, Y = _data(n=12)
    K = pairwise_kernels(X, metric="polynomial", degree=2, coef0=0.1)
    ours = Nystroem("precomputed", n_components=12, random_state=0, device="cpu").fit(K)
    ref = ska.Nystroem("precomputed", n_components=12, random_state=0).fit(K)
    Kt = pairwise_kernels(Y, X, metric="polynomial", degree=2, coef0=0.1)
    expected = ref.transform(Kt)
    np.testing.assert_allclose(ours.transform(Kt), expected, rtol=0,
                               atol=_nystroem_atol(K, expected))


def test_nystroem_transform_in_row_blocks(monkeypatch):
    """A block budget of a few rows: the products run in several blocks and agree with one
    block up to the summation order of m products (GEMV for a 1-row block, GEMM otherwise)."""
    X, Y = _data()
    model = Nystroem(n_components=15, random_state=0, device="cpu").fit(X)
    whole = model.transform(Y)
    calls = []
    block = kernel_operator.KernelOperator.block
    monkeypatch.setattr(kernel_operator, "CPU_BLOCK_BYTES", 4 * 15 * 24)
    monkeypatch.setattr(kernel_operator.KernelOperator, "block",
                        lambda self, A, B=None: calls.append(len(A)) or block(self, A, B))
    np.testing.assert_allclose(model.transform(Y), whole, rtol=0, atol=15 * EPS64 * np.abs(
        model.normalization_).sum(axis=1).max())
    assert calls == [4, 4, 4, 4, 1]


def test_nystroem_dtypes_and_torch():
    torch = pytest.importorskip("torch")
    X, Y = _data()
    model = Nystroem(n_components=15, random_state=0, device="cpu").fit(X.astype(np.float32))
    assert model.components_.dtype == np.float32
    assert model.transform(Y.astype(np.float32)).dtype == np.float32
    assert model.transform(Y).dtype == np.float64
    out = model.transform(torch.tensor(Y, dtype=torch.float32))
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32
    np.testing.assert_allclose(out.numpy(), model.transform(Y.astype(np.float32)), rtol=0,
                               atol=0)


def test_nystroem_n_components_above_n_warns_as_sklearn():
    X = _data(n=8)[0]
    with pytest.warns(UserWarning, match="n_components > n_samples. This is not possible."):
        model = Nystroem(n_components=20, device="cpu").fit(X)
    assert model.normalization_.shape == (8, 8)


def test_nystroem_does_not_modify_input():
    X, Y = _data()
    X.flags.writeable = False
    Y.flags.writeable = False
    Nystroem(n_components=10, landmarks="leverage", random_state=0, device="cpu").fit(X).transform(Y)


@pytest.mark.parametrize("params, error, match", [
    (dict(kernel="sigmoid"), ValueError, "kernel 'sigmoid' is not positive semi-definite"),
    (dict(kernel="periodic"), ValueError, "kernel 'periodic' is not positive semi-definite"),
    (dict(kernel="chi2"), ValueError, "kernel: .*chi2"),
    (dict(kernel=lambda x, y: x @ y), TypeError, "a Python function cannot be used"),
    (dict(kernel=kk.RBF(), gamma=1.0), ValueError, "Don't pass gamma, coef0 or degree"),
    (dict(kernel="precomputed", degree=2), ValueError, "Don't pass gamma, coef0 or degree"),
    (dict(n_components=0), ValueError, "n_components must be an integer >= 1; got 0"),
    (dict(landmarks="greedy"), ValueError, "landmarks must be one of 'uniform', 'kmeans\\+\\+'"),
    (dict(landmarks=np.ones((3, 2))), ValueError, "landmarks must have the n_features=4 columns"),
    (dict(landmarks=np.full((3, 4), np.nan)), ValueError, "landmarks: Input landmarks contains NaN"),
    (dict(kernel="precomputed", landmarks="kmeans++"), ValueError, "kernel='precomputed' takes"),
    (dict(degree=2.5, kernel="poly"), TypeError, "degree"),
])
def test_nystroem_bad_input(params, error, match):
    X = _data()[0]
    with pytest.raises(error, match=match):
        Nystroem(device="cpu", **params).fit(X)


def test_nystroem_refuses_nan():
    X, _ = _data()
    X[0, 0] = np.inf
    with pytest.raises(ValueError, match="Input X contains infinity"):
        Nystroem(device="cpu").fit(X)


@pytest.mark.usefixtures("triton_can_run")
def test_nystroem_triton_path(device, monkeypatch):
    """The GPU code path (Triton products of float32 operands, float64 K_ZZ): the features
    within float32 rounding of the kernel values times sum_j |normalization_| of the CPU's."""
    if device == "cpu":
        monkeypatch.setattr(kernel_operator, "TRITON_ON_CPU", True)
    calls = []
    triton_matmul = kernel_operator.triton_matmul
    monkeypatch.setattr(kernel_operator, "triton_matmul",
                        lambda *args: calls.append(1) or triton_matmul(*args))
    X, Y = _data(n=40)
    model = Nystroem(gamma=0.3, n_components=10, random_state=0, device=device).fit(X)
    out = model.transform(Y)
    assert calls == [1]  # the matrix-free Triton K @ V ran
    monkeypatch.setattr(kernel_operator, "TRITON_ON_CPU", False)
    ref = Nystroem(gamma=0.3, n_components=10, random_state=0, device="cpu").fit(X)
    np.testing.assert_allclose(model.normalization_, ref.normalization_, rtol=0,
                               atol=_nystroem_atol(np.linalg.inv(ref.normalization_) ** 2,
                                                   ref.normalization_))
    bound = 10 * EPS32 * np.abs(ref.normalization_).sum(axis=1).max()
    np.testing.assert_allclose(out, ref.transform(Y), rtol=0, atol=bound)


@pytest.mark.usefixtures("triton_can_run")
def test_nystroem_wide_features_take_gram_blocks_and_float64_gemms(device, monkeypatch):
    """Past TRITON_MATMUL_MAX_COLUMNS features (here 4; 10^4 landmarks in practice) the
    transform takes Triton Gram blocks made float64 and GEMMs, not the per-column Triton K @ V:
    within float32 rounding of the kernel values of the CPU's float64 features; in row chunks
    of TRANSFORM_BLOCK_ELEMENTS output values (here 7 rows) as in one."""
    from kernelkit.estimators import kernel_approximation

    if device == "cpu":
        monkeypatch.setattr(kernel_operator, "TRITON_ON_CPU", True)
    monkeypatch.setattr(kernel_operator, "TRITON_MATMUL_MAX_COLUMNS", 4)
    monkeypatch.setattr(kernel_operator, "triton_matmul", None)  # must not be called
    X, Y = _data(n=40)
    model = Nystroem(gamma=0.3, n_components=10, random_state=0, device=device).fit(X)
    whole = model.transform(Y)
    monkeypatch.setattr(kernel_approximation, "TRANSFORM_BLOCK_ELEMENTS", 7 * 10)
    chunked = model.transform(Y)
    monkeypatch.setattr(kernel_operator, "TRITON_ON_CPU", False)
    ref = Nystroem(gamma=0.3, n_components=10, random_state=0, device="cpu").fit(X)
    bound = 10 * EPS32 * np.abs(ref.normalization_).sum(axis=1).max()
    np.testing.assert_allclose(whole, ref.transform(Y), rtol=0, atol=bound)
    # the same float32 kernel values and float64 sums per row: chunks change only the GEMM's order
    np.testing.assert_allclose(chunked, whole, rtol=0,
                               atol=10 * EPS64 * np.abs(ref.normalization_).sum(axis=1).max())


def test_nystroem_transform_chunks_keep_the_input_form():
    """A tensor comes back as a tensor, an array as an array, of every row, in row chunks."""
    import torch

    from kernelkit.estimators import kernel_approximation

    X, Y = _data(n=40)
    model = Nystroem(gamma=0.3, n_components=10, random_state=0, device="cpu").fit(X)
    ref = model.transform(Y)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(kernel_approximation, "TRANSFORM_BLOCK_ELEMENTS", 5 * 10)  # 5-row chunks
        as_array = model.transform(Y)
        as_tensor = model.transform(torch.from_numpy(Y))
    assert isinstance(as_array, np.ndarray) and isinstance(as_tensor, torch.Tensor)
    bound = 10 * EPS64 * np.abs(model.normalization_).sum(axis=1).max()
    np.testing.assert_allclose(as_array, ref, rtol=0, atol=bound)
    np.testing.assert_allclose(as_tensor.numpy(), ref, rtol=0, atol=bound)


# ------------------------------------------------------------------------------ the contract
# device "auto": the CPU where CI runs, the GPU under ``pytest --device cuda``
@parametrize_with_checks([Nystroem(device="auto"), RBFSampler(device="auto")])
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)


@pytest.mark.parametrize("ours, ref", [
    (Nystroem(gamma=0.2, n_components=30, random_state=0, device="cpu"),
     ska.Nystroem(gamma=0.2, n_components=30, random_state=0)),
    (RBFSampler(gamma=0.2, n_components=30, random_state=0, device="cpu"),
     ska.RBFSampler(gamma=0.2, n_components=30, random_state=0))], ids=["nystroem", "rbf"])
def test_pipeline_with_linear_models(ours, ref):
    X, Y = _data(n=80)
    y = np.sin(X[:, 0]) + X[:, 1]
    expected = make_pipeline(ref, Ridge(alpha=1e-2)).fit(X, y).predict(Y)
    got = make_pipeline(ours, Ridge(alpha=1e-2)).fit(X, y).predict(Y)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-8 * np.abs(y).max())
    # kernelkit's KernelRidge on the features with the linear kernel: the same ridge, no intercept
    krr = make_pipeline(ours, kk.KernelRidge(alpha=1e-2, kernel="linear", tol=1e-12,
                                             device="cpu")).fit(X, y)
    lin = make_pipeline(ref, Ridge(alpha=1e-2, fit_intercept=False)).fit(X, y)
    np.testing.assert_allclose(krr.predict(Y), lin.predict(Y), rtol=0, atol=1e-6 * np.abs(y).max())
