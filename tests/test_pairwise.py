"""kernelkit.pairwise: scikit-learn's pairwise kernel functions, validated and without lost digits.

- agreement with scikit-learn to 1e-12 relative in float64 (Y None and given, odd shapes);
- float32 in, float32 out, correctly rounded even for data offset by 1000;
- pairwise_kernels over every registry kernel, and delegation of the rest to scikit-learn;
- bad input raises ValueError/TypeError naming the argument; inputs are never modified;
- properties (hypothesis): exact symmetry, unit diagonal, positive semi-definiteness.
"""

import doctest
import inspect

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from sklearn.gaussian_process import kernels as skk
from sklearn.metrics import pairwise as skp

import kernelkit.pairwise as kp
from kernelkit_math.registry import REGISTRY, get_kernel, kernel_names
from tests.cases import N_FEATURES, PARAM_CASES, examples, sklearn_function_name, sklearn_metric
from tests.conftest import TOL

F64 = TOL["float64"]
F32 = TOL["float32"]

#: kernelkit function name -> parameter settings compared with scikit-learn's namesake.
#: Values cover gamma=None (1 / n_features), default and non-default coef0 (negative included)
#: and degrees 1, 2, 3 (default), 4.
SK_FUNCS = {
    "linear_kernel": [{}, dict(dense_output=True)],
    "polynomial_kernel": [
        {}, dict(degree=2, gamma=0.5, coef0=0.0), dict(degree=1, gamma=None, coef0=2.5),
        dict(degree=4, gamma=0.1, coef0=-0.5),
    ],
    "rbf_kernel": [{}, dict(gamma=None), dict(gamma=0.1), dict(gamma=2.0)],
    "laplacian_kernel": [{}, dict(gamma=None), dict(gamma=0.1), dict(gamma=2.0)],
    "sigmoid_kernel": [{}, dict(gamma=0.3, coef0=0.0), dict(gamma=0.05, coef0=-1.0)],
    "cosine_similarity": [{}, dict(dense_output=True)],
}
FUNC_NAMES = list(SK_FUNCS)
#: The registry kernel behind each function (from the scikit-learn equivalents it declares).
REGISTRY_NAME = {sklearn_function_name(name): name for name in kernel_names()
                 if sklearn_function_name(name) in FUNC_NAMES}

# (n_X, n_Y, n_features): one row, one feature, 63 rows (not a power of two), a plain square.
SHAPES = [
    pytest.param(1, 4, 3, id="1row"),
    pytest.param(7, 1, 3, id="1rowY"),
    pytest.param(9, 5, 1, id="1feature"),
    pytest.param(63, 17, 5, id="63rows"),
    pytest.param(10, 10, 4, id="square"),
]
SAME = pytest.mark.parametrize("same", [True, False], ids=["Ynone", "Ygiven"])


def _params_id(params):
    return ",".join(f"{k}={v}" for k, v in params.items()) or "defaults"


SK_CASES = [
    pytest.param(fname, params, id=f"{fname}-{_params_id(params)}")
    for fname, cases in SK_FUNCS.items()
    for params in cases
]
REGISTRY_CASES = [
    pytest.param(name, params, id=f"{name}-{i}")
    for name in kernel_names()
    for i, params in enumerate(PARAM_CASES[name])
]


def _data(rng, n, d, offset=0.0):
    return rng.normal(size=(n, d)) + offset


# --------------------------------------------------------------------------------- signatures
@pytest.mark.parametrize("fname", FUNC_NAMES + ["pairwise_kernels"])
def test_signature_is_sklearns_plus_keyword_device(fname):
    ours = inspect.signature(getattr(kp, fname)).parameters
    theirs = inspect.signature(getattr(skp, fname)).parameters
    ours_wo_device = [p for name, p in ours.items() if name != "device"]
    assert [(p.name, p.kind, p.default) for p in ours_wo_device] == [
        (p.name, p.kind, p.default) for p in theirs.values()
    ]
    device = ours["device"]
    assert device.kind is inspect.Parameter.KEYWORD_ONLY and device.default == "auto"
    # device comes after every sklearn argument (only **kwds may follow it)
    names = list(ours)
    after = names[names.index("device") + 1:]
    assert all(ours[n].kind is inspect.Parameter.VAR_KEYWORD for n in after)


def test_positional_arguments_in_sklearns_order(rng):
    X, Y = _data(rng, 5, 3), _data(rng, 4, 3)
    np.testing.assert_allclose(
        kp.polynomial_kernel(X, Y, 2, 0.5, 0.25), skp.polynomial_kernel(X, Y, 2, 0.5, 0.25), **F64
    )
    np.testing.assert_allclose(
        kp.sigmoid_kernel(X, Y, 0.5, 0.25), skp.sigmoid_kernel(X, Y, 0.5, 0.25), **F64
    )


def test_docstring_examples_run():
    result = doctest.testmod(kp, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 8 and result.failed == 0


# --------------------------------------------------------------- float64: equal to sklearn's
@pytest.mark.parametrize("fname, params", SK_CASES)
@pytest.mark.parametrize("n_x, n_y, d", SHAPES)
@SAME
def test_float64_matches_sklearn(rng, fname, params, n_x, n_y, d, same):
    X = _data(rng, n_x, d)
    Y = None if same else _data(rng, n_y, d)
    K = getattr(kp, fname)(X, Y, **params)
    expected = getattr(skp, fname)(X, Y, **params)
    assert K.dtype == np.float64 and K.shape == expected.shape
    # Relative only: no entry is near 0 from cancellation at these parameters, none underflows.
    np.testing.assert_allclose(K, expected, rtol=F64["rtol"], atol=0)


@pytest.mark.parametrize("fname, gamma", [("rbf_kernel", 40.0), ("laplacian_kernel", 200.0)])
@SAME
def test_float64_matches_sklearn_where_values_underflow(rng, fname, gamma, same):
    # These gammas on standard-normal data put entries of exp(-gamma * D) in the subnormal range
    # (< 2.2e-308) or at 0. A subnormal near 1e-320 keeps only ~10 bits, so there a last-bit
    # difference in D (sklearn's rbf uses ||x||^2 + ||y||^2 - 2 x.y, kernelkit direct
    # differences) can be a large *relative* difference. atol = the smallest normal float64
    # absorbs exactly those entries and nothing a user could see; every normal entry is still
    # held to rtol=1e-12.
    X, Y = _data(rng, 30, 4), _data(rng, 20, 4)
    Y = None if same else Y
    K = getattr(kp, fname)(X, Y, gamma=gamma)
    expected = getattr(skp, fname)(X, Y, gamma=gamma)
    tiny = np.finfo(np.float64).tiny
    assert np.any(expected < tiny)  # the case this test is about does occur
    np.testing.assert_allclose(K, expected, rtol=F64["rtol"], atol=tiny)
    normal = np.abs(expected) >= tiny
    np.testing.assert_allclose(K[normal], expected[normal], rtol=F64["rtol"], atol=0)


@pytest.mark.parametrize("metric", ["linear", "poly", "polynomial", "rbf", "laplacian", "sigmoid", "cosine"])
@SAME
def test_pairwise_kernels_matches_sklearn(rng, metric, same):
    X = _data(rng, 11, 3)
    Y = None if same else _data(rng, 6, 3)
    params = skp.KERNEL_PARAMS[metric]
    kwds = {k: v for k, v in dict(gamma=0.3, degree=2, coef0=0.7).items() if k in params}
    np.testing.assert_allclose(
        kp.pairwise_kernels(X, Y, metric=metric, **kwds),
        skp.pairwise_kernels(X, Y, metric=metric, **kwds),
        rtol=F64["rtol"], atol=0,
    )
    # filter_params drops what the kernel does not take, as sklearn does
    extra = dict(kwds, nu=2.5, length_scale=3.0, dense_output=True)
    np.testing.assert_allclose(
        kp.pairwise_kernels(X, Y, metric=metric, filter_params=True, **extra),
        skp.pairwise_kernels(X, Y, metric=metric, filter_params=True, **extra),
        rtol=F64["rtol"], atol=0,
    )


@pytest.mark.parametrize("metric", ["linear", "cosine"])
def test_pairwise_kernels_passes_dense_output_like_sklearn(rng, metric):
    X = _data(rng, 5, 3)
    np.testing.assert_allclose(
        kp.pairwise_kernels(X, metric=metric, dense_output=False),
        skp.pairwise_kernels(X, metric=metric, dense_output=False),
        rtol=F64["rtol"], atol=0,
    )


def test_poly_is_polynomial(rng):
    X = _data(rng, 6, 3)
    np.testing.assert_array_equal(
        kp.pairwise_kernels(X, metric="poly", degree=2),
        kp.pairwise_kernels(X, metric="polynomial", degree=2),
    )


# ------------------------------------------------------- pairwise_kernels: every registry name
@pytest.mark.parametrize("name, params", REGISTRY_CASES)
@SAME
def test_pairwise_kernels_equals_registry_reference(rng, name, params, same):
    X = _data(rng, 13, N_FEATURES)
    Y = None if same else _data(rng, 8, N_FEATURES)
    K = kp.pairwise_kernels(X, Y, metric=name, device="cpu", **params)
    # Same float64 code path, so equal bit for bit (device="cpu": on a GPU machine "auto" would
    # take the GPU, whose float64 rounds differently; tests/test_dispatch.py covers that path).
    np.testing.assert_array_equal(K, get_kernel(name).value(X, Y, **params))
    assert K.dtype == np.float64


SKLEARN_METRIC_CASES = [case for case in REGISTRY_CASES
                        if sklearn_metric(case.values[0], case.values[1]) is not None]


@pytest.mark.parametrize("name, params", SKLEARN_METRIC_CASES)
@SAME
def test_declared_sklearn_metric_is_the_registry_kernel(rng, name, params, same):
    """The scikit-learn equivalent a registry entry declares computes that kernel."""
    X = _data(rng, 13, N_FEATURES)
    Y = None if same else _data(rng, 8, N_FEATURES)
    expected = skp.pairwise_kernels(X, Y, metric=sklearn_metric(name), **params)
    np.testing.assert_allclose(get_kernel(name).value(X, Y, **params), expected,
                               rtol=F64["rtol"], atol=0)


def test_every_registry_kernel_is_a_metric():
    assert set(PARAM_CASES) == set(REGISTRY)
    # each scikit-learn-named function is the declared equivalent of one registry kernel
    assert set(REGISTRY_NAME) == set(FUNC_NAMES)
    X = np.eye(3)
    for name in kernel_names():
        assert kp.pairwise_kernels(X, metric=name).shape == (3, 3)


@pytest.mark.parametrize("fname", FUNC_NAMES)
def test_functions_equal_pairwise_kernels(rng, fname):
    X, Y = _data(rng, 7, 3), _data(rng, 4, 3)
    params = {k: v for k, v in SK_FUNCS[fname][-1].items() if k != "dense_output"}
    np.testing.assert_array_equal(
        getattr(kp, fname)(X, Y, **params),
        kp.pairwise_kernels(X, Y, metric=REGISTRY_NAME[fname], **params),
    )


@pytest.mark.parametrize("fname", ["rbf_kernel", "laplacian_kernel"])
def test_per_feature_gamma_weights_each_feature(rng, fname):
    X, Y = _data(rng, 6, 3), _data(rng, 5, 3)
    g = np.array([0.1, 0.7, 0.3])
    # rbf: sum g_k (x_k - y_k)^2 = ||sqrt(g) (x - y)||^2; laplacian: sum g_k |x_k - y_k| = ||g (x - y)||_1
    w = np.sqrt(g) if fname == "rbf_kernel" else g
    np.testing.assert_allclose(
        getattr(kp, fname)(X, Y, gamma=g), getattr(kp, fname)(X * w, Y * w, gamma=1.0), **F64
    )


# --------------------------------------------------------------------------- delegation
@SAME
@pytest.mark.parametrize("metric", ["chi2", "additive_chi2"])
def test_delegates_chi2_to_sklearn(rng, metric, same):
    X = rng.uniform(size=(8, 4))
    Y = None if same else rng.uniform(size=(5, 4))
    kwds = dict(gamma=0.7) if metric == "chi2" else {}
    np.testing.assert_array_equal(
        kp.pairwise_kernels(X, Y, metric=metric, **kwds),
        skp.pairwise_kernels(X, Y, metric=metric, **kwds),
    )
    np.testing.assert_array_equal(
        kp.pairwise_kernels(X, Y, metric=metric, device="cpu", n_jobs=2, filter_params=True,
                            unrelated=1, **kwds),
        skp.pairwise_kernels(X, Y, metric=metric, n_jobs=2, filter_params=True, unrelated=1, **kwds),
    )


def test_delegates_callable_with_kwds(rng):
    X, Y = _data(rng, 6, 3), _data(rng, 4, 3)

    def metric(x, y, shift):
        return float(np.dot(x, y) + shift)

    K = kp.pairwise_kernels(X, Y, metric=metric, shift=2.0)
    np.testing.assert_allclose(K, X @ Y.T + 2.0, **F64)
    np.testing.assert_array_equal(K, skp.pairwise_kernels(X, Y, metric=metric, shift=2.0))


def test_delegates_gp_kernel_object_and_precomputed(rng):
    X, Y = _data(rng, 6, 3), _data(rng, 4, 3)
    gp = skk.Matern(length_scale=1.3, nu=2.5)
    np.testing.assert_array_equal(kp.pairwise_kernels(X, Y, metric=gp), gp(X, Y))
    G = X @ X.T
    np.testing.assert_array_equal(kp.pairwise_kernels(G, metric="precomputed"), G)


@pytest.mark.parametrize("device", ["cuda", "gpu"])
def test_delegated_metric_needs_cpu(rng, device):
    X = rng.uniform(size=(4, 3))
    with pytest.raises(ValueError, match="device"):
        kp.pairwise_kernels(X, metric="chi2", device=device)


# ------------------------------------------------------------------------- float32 and dtypes
def _offset_data(n, d, seed):
    """float32 points spread ~0.05 around 1000, with an exact duplicate and a 1-ulp neighbour."""
    rng = np.random.default_rng(seed)
    X = (1000.0 + 0.05 * rng.normal(size=(n, d))).astype(np.float32)
    X[1] = X[0]
    X[2] = np.nextafter(X[0], np.float32(np.inf))
    X[3] = X[0] + np.float32(0.001)
    return X


#: The offset-1000 data have this many features.
OFFSET_FEATURES = 4
#: (registry name, params): the registry's examples for data at offset 1000 with spread 0.05
#: (``Example.offset``): widths ~0.05 sqrt(d), and dot-product scales ~1e-6 / d so that
#: gamma x.y + coef0 is O(1) (exp(x.y / 2) would overflow).
OFFSET_CASES = [
    (name, example.params(OFFSET_FEATURES))
    for name in kernel_names()
    for example in examples(name, offset=True)
]


def test_every_registry_kernel_has_offset_params():
    assert {name for name, _ in OFFSET_CASES} == set(REGISTRY)


#: (function, params) pairs at offset 1000; parameters put K in an informative range there.
#: Each offset example through its scikit-learn-named function (where kernelkit.pairwise has
#: one) and through pairwise_kernels.
F32_CASES = [
    pytest.param(fname, params, id=f"{fname}-{_params_id(params)}")
    for name, params in OFFSET_CASES
    if (fname := sklearn_function_name(name)) in FUNC_NAMES
] + [
    pytest.param(("pairwise_kernels", name), params, id=f"pairwise_kernels-{name}-{_params_id(params)}")
    for name, params in OFFSET_CASES
]


def _call(fn, X, Y, params):
    # The CPU path: its float32 results are correctly rounded float64 ones. The GPU's accurate
    # float32 mode is checked against its own bounds in tests/test_gpu_gram.py.
    if isinstance(fn, tuple):
        return kp.pairwise_kernels(X, Y, metric=fn[1], device="cpu", **params)
    return getattr(kp, fn)(X, Y, device="cpu", **params)


@pytest.mark.parametrize("fn, params", F32_CASES)
@SAME
def test_float32_offset_1000_agrees_with_float64(fn, params, same):
    X = _offset_data(40, 4, 0)
    Y = None if same else np.concatenate([X[:2], _offset_data(15, 4, 1)])
    K32 = _call(fn, X, Y, params)
    K64 = _call(fn, X.astype(np.float64), None if Y is None else Y.astype(np.float64), params)
    assert K32.dtype == np.float32 and K64.dtype == np.float64
    np.testing.assert_allclose(K32, K64, **F32)
    # Stronger: each float32 entry is the float64 result rounded once (|error| <= half an ulp).
    half_ulp = np.spacing(np.abs(K32)).astype(np.float64) / 2
    assert np.all(np.abs(K32.astype(np.float64) - K64) <= half_ulp)


def test_float32_rbf_offset_test_is_discriminating():
    """The 1e-6 gate catches the textbook float32 algorithm; sklearn's float32 rbf is no better."""
    X = _offset_data(40, 4, 0)
    X64 = X.astype(np.float64)
    gamma = 50.0
    ref = skp.rbf_kernel(X64, gamma=gamma)  # independent float64 reference on the same data
    ours = kp.rbf_kernel(X, gamma=gamma, device="cpu")
    np.testing.assert_allclose(ours, ref, **F32)

    # ||x||^2 + ||y||^2 - 2 x.y in float32 (what a naive GPU Gram kernel does): loses everything.
    sq = np.einsum("ij,ij->i", X, X)
    D = np.maximum(sq[:, None] + sq[None, :] - 2.0 * (X @ X.T), np.float32(0))
    naive = np.exp(-gamma * D)
    assert np.abs(naive - ref).max() > 1e-1

    # scikit-learn 1.9 upcasts float32 chunks to float64 for distances, so it passes the gate
    # too; ours is correctly rounded, so no entry of sklearn's float32 result is closer.
    sk32 = skp.rbf_kernel(X, gamma=gamma)
    assert sk32.dtype == np.float32
    assert np.all(np.abs(ours - ref) <= np.abs(sk32.astype(np.float64) - ref))


@pytest.mark.parametrize("fname", FUNC_NAMES)
def test_result_dtype(rng, fname):
    f = getattr(kp, fname)
    X = rng.normal(size=(5, 3))
    X32 = X.astype(np.float32)
    assert f(X32).dtype == np.float32
    assert f(X32, X32[:2]).dtype == np.float32
    assert f(X32, X[:2]).dtype == np.float64  # any float64 input gives float64
    assert f(X, X32[:2]).dtype == np.float64
    assert f(X.astype(np.int64)).dtype == np.float64
    assert f(X.tolist()).dtype == np.float64
    assert isinstance(f(X), np.ndarray)  # dense even with dense_output accepted


# ------------------------------------------------------------------------------ bad input
def _bad_data_cases():
    ok = np.ones((4, 3))
    nan, inf = ok.copy(), ok.copy()
    nan[1, 2], inf[0, 0] = np.nan, np.inf
    cases = [
        ("nan-X", nan, None, ValueError, r"\bX\b.*NaN"),
        ("nan-Y", ok, nan, ValueError, r"\bY\b.*NaN"),
        ("inf-X", inf, None, ValueError, r"\bX\b.*infinity"),
        ("inf-Y", ok, inf, ValueError, r"\bY\b.*infinity"),
        ("1d-X", np.ones(3), None, ValueError, r"X must be a 2-D.*reshape"),
        ("1d-Y", ok, np.ones(3), ValueError, r"Y must be a 2-D"),
        ("3d-X", np.ones((2, 4, 3)), None, ValueError, r"X must be a 2-D.*3-D"),
        ("empty-rows", np.empty((0, 3)), None, ValueError, r"X is empty"),
        ("empty-features", np.empty((3, 0)), None, ValueError, r"X is empty"),
        ("empty-Y", ok, np.empty((0, 3)), ValueError, r"Y is empty"),
        ("complex", ok + 1j, None, TypeError, r"X has complex dtype"),
        ("strings", [["a", "b", "c"]], None, TypeError, r"X has non-numeric dtype"),
        ("object", np.array([[1.0, "a", 2.0]], dtype=object), None, TypeError, r"X holds non-numeric"),
        # None in an object array converts to NaN (NumPy's and sklearn's missing-value convention)
        ("object-None", np.array([[1.0, None, 2.0]], dtype=object), None, ValueError, r"\bX\b.*NaN"),
        ("sparse-X", sp.csr_matrix(ok), None, TypeError, r"X is a sparse matrix"),
        ("sparse-Y", ok, sp.csr_matrix(ok), TypeError, r"Y is a sparse matrix"),
        ("mismatched", ok, np.ones((4, 2)), ValueError, r"X has 3 features but Y has 2"),
    ]
    return [pytest.param(X, Y, exc, match, id=cid) for cid, X, Y, exc, match in cases]


ALL_FUNCS = [pytest.param(getattr(kp, f), id=f) for f in FUNC_NAMES] + [
    pytest.param(lambda X, Y=None, **kw: kp.pairwise_kernels(X, Y, metric=m, **kw), id=f"pairwise_kernels-{m}")
    for m in ("rbf", "matern", "exponential")
]


@pytest.mark.parametrize("X, Y, exc, match", _bad_data_cases())
@pytest.mark.parametrize("f", ALL_FUNCS)
def test_bad_data_raises_naming_the_argument(f, X, Y, exc, match):
    with pytest.raises(exc, match=match):
        f(X, Y)


GAMMA_FUNCS = ["polynomial_kernel", "rbf_kernel", "laplacian_kernel", "sigmoid_kernel"]


def _bad_param_cases():
    cases = []
    for fname in GAMMA_FUNCS:
        for gamma, exc in [(0.0, ValueError), (-1.0, ValueError), (np.nan, ValueError),
                           (np.inf, ValueError), ("0.5", TypeError)]:
            cases.append((fname, dict(gamma=gamma), exc, "'gamma'", f"{fname}-gamma={gamma!r}"))
    for fname in ["rbf_kernel", "laplacian_kernel"]:
        cases.append((fname, dict(gamma=np.array([0.5, 0.5])), ValueError, "'gamma' has 2 entries",
                      f"{fname}-gamma-wrong-length"))
        cases.append((fname, dict(gamma=np.array([0.5, -0.5, 1.0])), ValueError, "'gamma'",
                      f"{fname}-gamma-negative-entry"))
    for degree, exc in [(2.5, TypeError), (-1, ValueError), ("3", TypeError), (True, TypeError)]:
        cases.append(("polynomial_kernel", dict(degree=degree), exc, "'degree'", f"degree={degree!r}"))
    for fname in ["polynomial_kernel", "sigmoid_kernel"]:
        cases.append((fname, dict(coef0=np.nan), ValueError, "'coef0'", f"{fname}-coef0=nan"))
        cases.append((fname, dict(coef0=None), TypeError, "'coef0'", f"{fname}-coef0=None"))
    for fname in ["linear_kernel", "cosine_similarity"]:
        cases.append((fname, dict(dense_output="yes"), TypeError, "dense_output", f"{fname}-dense_output"))
    for fname in FUNC_NAMES:
        for device in ["gpu", "CPU", None, 0, "cuda"]:
            cases.append((fname, dict(device=device), ValueError, "device", f"{fname}-device={device!r}"))
    return [pytest.param(f, p, e, m, id=cid) for f, p, e, m, cid in cases]


@pytest.mark.parametrize("fname, params, exc, match", _bad_param_cases())
def test_bad_parameter_raises_naming_it(rng, no_gpu, fname, params, exc, match):
    X = rng.normal(size=(4, 3))
    with pytest.raises(exc, match=match):
        getattr(kp, fname)(X, **params)
    metric = REGISTRY_NAME[fname]
    kwds = {k: v for k, v in params.items() if k != "dense_output"}
    if kwds:  # the same parameter through pairwise_kernels
        with pytest.raises(exc, match=match):
            kp.pairwise_kernels(X, metric=metric, **kwds)


@pytest.mark.parametrize(
    "metric, kwds, exc, match",
    [
        pytest.param("gaussian", {}, ValueError, r"unknown metric 'gaussian'.*additive_chi2.*chi2.*"
                     r"exponential.*matern.*poly.*rbf", id="unknown-name"),
        pytest.param("RBF", {}, ValueError, r"unknown metric 'RBF'; valid names", id="wrong-case"),
        pytest.param(42, {}, ValueError, r"metric must be a string or a callable.*rbf", id="int"),
        pytest.param(None, {}, ValueError, r"metric must be", id="None"),
        pytest.param("rbf", dict(degree=3), TypeError, r"rbf kernel got unknown parameter\(s\) "
                     r"\['degree'\]; allowed: gamma", id="rbf-degree"),
        pytest.param("linear", dict(gamma=1.0), TypeError, r"linear kernel .*\['gamma'\]; allowed: none",
                     id="linear-gamma"),
        pytest.param("poly", dict(nu=1.5), TypeError, r"polynomial kernel .*\['nu'\]; allowed: gamma, "
                     r"degree, coef0", id="poly-nu"),
        pytest.param("matern", dict(nu=1.0), ValueError, r"'nu' must be one of 0.5, 1.5, 2.5", id="matern-nu"),
        pytest.param("matern", dict(length_scale=0.0), ValueError, r"'length_scale'", id="matern-length0"),
        pytest.param("rational_quadratic", dict(alpha=-1.0), ValueError, r"'alpha'", id="rq-alpha"),
        pytest.param("exponential", dict(scale=0.0), ValueError, r"'scale'", id="exponential-scale0"),
        # An explicit None is only meaningful where it is the default (gamma, scale)
        pytest.param("matern", dict(nu=None), TypeError, r"'nu'", id="matern-nu-None"),
        pytest.param("matern", dict(length_scale=None), TypeError, r"'length_scale'", id="matern-length-None"),
        pytest.param("rational_quadratic", dict(alpha=None), TypeError, r"'alpha'", id="rq-alpha-None"),
        pytest.param("polynomial", dict(degree=None), TypeError, r"'degree'", id="poly-degree-None"),
        pytest.param("sigmoid", dict(coef0=None), TypeError, r"'coef0'", id="sigmoid-coef0-None"),
        pytest.param("cosine", dict(dense_output=1), TypeError, r"dense_output", id="cosine-dense_output"),
        pytest.param("rbf", dict(filter_params="yes"), TypeError, r"filter_params", id="filter_params"),
        pytest.param("rbf", dict(n_jobs=1.5), TypeError, r"n_jobs", id="n_jobs"),
        pytest.param("rbf", dict(device="tpu"), ValueError, r"device", id="device"),
    ],
)
def test_pairwise_kernels_bad_metric_or_parameter(rng, metric, kwds, exc, match):
    X = rng.normal(size=(4, 3))
    with pytest.raises(exc, match=match):
        kp.pairwise_kernels(X, metric=metric, **kwds)


def test_filter_params_and_n_jobs_accepted(rng):
    X = rng.normal(size=(5, 3))
    K = kp.pairwise_kernels(X, metric="rbf", filter_params=True, n_jobs=-1, gamma=0.3, degree=7)
    np.testing.assert_array_equal(K, kp.rbf_kernel(X, gamma=0.3))


def test_degree_with_integer_value_is_accepted(rng):
    X = rng.normal(size=(5, 3))
    np.testing.assert_array_equal(kp.polynomial_kernel(X, degree=2.0), kp.polynomial_kernel(X, degree=2))
    np.testing.assert_array_equal(kp.polynomial_kernel(X, degree=np.int64(2)), kp.polynomial_kernel(X, degree=2))


# ---------------------------------------------------------------------- inputs never modified
def _input_variants(rng):
    X = rng.normal(size=(6, 3))
    return {
        "float64": (X, X[:4] + 1.0),
        "float32": (X.astype(np.float32), X[:4].astype(np.float32)),
        "fortran": (np.asfortranarray(X), np.asfortranarray(X[:4])),
        "strided": (X[::2], X[1::2]),
        "int": ((10 * X).astype(np.int64), (10 * X[:4]).astype(np.int64)),
    }


@pytest.mark.parametrize("variant", ["float64", "float32", "fortran", "strided", "int"])
@pytest.mark.parametrize("f", ALL_FUNCS)
@SAME
def test_inputs_unchanged(rng, f, variant, same):
    X, Y = _input_variants(rng)[variant]
    Y = None if same else Y
    X_before = X.copy(order="K")
    Y_before = None if Y is None else Y.copy(order="K")
    K = f(X, Y)
    assert X.dtype == X_before.dtype and np.array_equal(X, X_before)
    assert X.flags.f_contiguous == X_before.flags.f_contiguous
    if Y is not None:
        assert Y.dtype == Y_before.dtype and np.array_equal(Y, Y_before)
    assert not np.shares_memory(K, X) and (Y is None or not np.shares_memory(K, Y))


# ------------------------------------------------------------------------ properties (hypothesis)
PROPERTY_SETTINGS = settings(max_examples=30, deadline=None)


@st.composite
def data_matrices(draw, dtypes=(np.float64, np.float32), max_rows=12, max_features=5, bound=4.0):
    n = draw(st.integers(1, max_rows))
    d = draw(st.integers(1, max_features))
    dtype = draw(st.sampled_from(dtypes))
    elements = st.floats(-bound, bound, allow_nan=False, allow_infinity=False, width=32)
    X = draw(hnp.arrays(dtype, (n, d), elements=elements))
    if n > 2 and draw(st.booleans()):  # duplicate rows: singular Gram matrices
        X[-1] = X[0]
    return X


SYMMETRIC_CALLS = [pytest.param(f, id=f) for f in FUNC_NAMES] + [
    pytest.param(("pairwise_kernels", name), id=f"pairwise_kernels-{name}") for name in kernel_names()
]


@pytest.mark.parametrize("fn", SYMMETRIC_CALLS)
@PROPERTY_SETTINGS
@given(X=data_matrices())
def test_property_symmetric_exactly(fn, X):
    K = _call(fn, X, None, {})
    assert K.shape == (X.shape[0], X.shape[0])
    assert np.array_equal(K, K.T)
    assert np.all(np.isfinite(K))


def registry_params(spec):
    """Hypothesis: a value for each of ``spec``'s parameters from its registry range: one of its
    choices, its default for an integer, else a float in [1e-3, 1e3] (widths and scales from
    far below to far above the data's spread), or [-1e3, 1e3] where negative values are valid."""
    values = {}
    for p in spec.params:
        if p.choices:
            values[p.name] = st.sampled_from(p.choices)
        elif p.integer:
            values[p.name] = st.just(p.default)
        else:
            low = max(p.low, 1e-3 if p.low >= 0 else -1e3)
            values[p.name] = st.floats(low, min(p.high, 1e3),
                                       exclude_min=low == p.low and not p.low_inclusive)
    return st.fixed_dictionaries(values)


NORMALIZED = [n for n in kernel_names() if REGISTRY[n].normalized]
NORMALIZED_FUNCS = [f for f in FUNC_NAMES if REGISTRY[REGISTRY_NAME[f]].normalized]


@pytest.mark.parametrize("name", NORMALIZED)
@PROPERTY_SETTINGS
@given(X=data_matrices(), draw=st.data())
def test_property_unit_diagonal(name, X, draw):
    """The registry's ``normalized`` flag: k(x, x) = 1 exactly, at any parameter value."""
    spec = get_kernel(name)
    K = kp.pairwise_kernels(X, metric=name, **draw.draw(registry_params(spec)))
    assert np.all(np.diag(K) == 1.0)
    if spec.psd:  # |k(x, y)| <= sqrt(k(x, x) k(y, y)) = 1 (Cauchy-Schwarz)
        assert np.all(np.abs(K) <= 1.0)


@pytest.mark.parametrize("fname", NORMALIZED_FUNCS)
@PROPERTY_SETTINGS
@given(X=data_matrices(), draw=st.data())
def test_property_unit_diagonal_of_functions(fname, X, draw):
    f = getattr(kp, fname)
    params = draw.draw(registry_params(get_kernel(REGISTRY_NAME[fname])))
    assert np.all(np.diag(f(X)) == 1.0) and np.all(np.diag(f(X, **params)) == 1.0)


PSD_CALLS = [
    pytest.param(f, id=f)
    for f in FUNC_NAMES
    if REGISTRY[REGISTRY_NAME[f]].psd
] + [
    pytest.param(("pairwise_kernels", name), id=f"pairwise_kernels-{name}")
    for name in kernel_names()
    if REGISTRY[name].psd
]


@pytest.mark.parametrize("fn", PSD_CALLS)
@PROPERTY_SETTINGS
@given(X=data_matrices(dtypes=(np.float64,), bound=3.0))
def test_property_positive_semidefinite(fn, X):
    K = _call(fn, X, None, {})
    eig = np.linalg.eigvalsh(K)
    norm = max(np.abs(eig).max(), np.finfo(np.float64).tiny)
    assert eig.min() >= -1e-10 * norm


def test_sigmoid_is_not_psd_so_it_is_left_out():
    assert not REGISTRY["sigmoid"].psd
    assert "sigmoid_kernel" not in [p.values[0] for p in PSD_CALLS]


# ------------------------------------------------------- scikit-learn broadcasting (issue 9.12)
@pytest.mark.parametrize("fname", ["rbf_kernel", "laplacian_kernel", "polynomial_kernel",
                                   "sigmoid_kernel"])
@pytest.mark.parametrize("gamma", [np.array([0.3]), np.array([[0.3]]), [0.3]],
                         ids=["1-elem", "1x1", "list"])
def test_one_element_gamma_broadcasts_like_sklearn(rng, fname, gamma):
    """scikit-learn's formulas broadcast a one-element gamma over every feature (its
    PairwiseKernel passes gamma as such an array); kernelkit treats it as that number."""
    X, Y = rng.normal(size=(5, 3)), rng.normal(size=(4, 3))
    want = getattr(skp, fname)(X, Y, gamma=np.asarray(gamma))
    np.testing.assert_allclose(getattr(kp, fname)(X, Y, gamma=gamma), want, **F64)


# ---------------------------------------------------------- data frames with text (issue 9.13)
def test_data_frame_with_text_column_raises_type_error():
    import pandas as pd  # a test dependency (pyproject [test])
    frame = pd.DataFrame({"a": [1.0, 2.0], "label": ["x", "y"]})
    with pytest.raises(TypeError, match=r"X has non-numeric column\(s\) \['label'\]"):
        kp.rbf_kernel(frame)
    with pytest.raises(TypeError, match=r"Y has non-numeric column"):
        kp.linear_kernel(np.ones((2, 2)), frame)


def test_data_frame_with_numeric_and_boolean_columns_is_accepted():
    import pandas as pd
    frame = pd.DataFrame({"a": [1.0, 2.0, 0.5], "flag": [True, False, True],
                          "n": pd.Series([1, 2, 3], dtype="category")})
    want = skp.rbf_kernel(frame.to_numpy(dtype=np.float64), gamma=0.5)
    np.testing.assert_allclose(kp.rbf_kernel(frame, gamma=0.5), want, **F64)


# ------------------------------------------------------- precision per device (issue 18, docs)
@pytest.mark.parametrize("fname", kp.__all__)
def test_docstring_states_each_devices_precision(fname):
    """rbf_kernel said "computed in float64, never by expansion" on every device, but float32
    data on the GPU run kernelkit_gpu.gram's float32 mode (centred expansion, tensor cores).
    Every function's Notes carry the one statement per device and dtype, and no sentence claims
    float64 unconditionally."""
    doc = " ".join(getattr(kp, fname).__doc__.split())
    assert " ".join(kp._PRECISION_DOC.split()) in doc
    assert "Computed in float64" not in doc and "never by expansion" not in doc


@pytest.mark.parametrize("dtypes", [(np.float32, np.float32), (np.float32, np.float64),
                                    (np.float64, np.float32), (np.float64, np.float64)],
                         ids=["f32", "f32-f64", "f64-f32", "f64"])
def test_gpu_path_computes_as_the_notes_say(device, rng, monkeypatch, triton_can_run, dtypes):
    """The GPU rows of the Notes: kernelkit_gpu.gram in float32 for float32 data, in float64 for
    float64 data and for float32 mixed with float64 (the mixture used to raise TypeError "x and
    y must have the same dtype"). On the CPU the Triton interpreter stands in for the GPU."""
    import torch

    import kernelkit._util.device
    import kernelkit_gpu

    if device == "cpu":
        monkeypatch.setattr(kernelkit._util.device, "gpu_available", lambda: True)
        monkeypatch.setattr(torch.Tensor, "cuda", lambda self: self)
    calls, real = [], kernelkit_gpu.gram

    def spy(x, y=None, **kwargs):
        calls.append((x.dtype, y.dtype, kwargs.get("precision", "accurate")))
        return real(x, y, **kwargs)

    monkeypatch.setattr(kernelkit_gpu, "gram", spy)
    X, Y = _data(rng, 9, 3).astype(dtypes[0]), _data(rng, 5, 3).astype(dtypes[1])
    K = kp.rbf_kernel(X, Y, gamma=0.5, device="cuda")
    single = dtypes == (np.float32, np.float32)
    want = torch.float32 if single else torch.float64
    assert calls == [(want, want, "accurate")]
    assert K.dtype == (np.float32 if single else np.float64)
    ref = get_kernel("rbf").value(X.astype(np.float64), Y.astype(np.float64), gamma=0.5)
    np.testing.assert_allclose(K, ref, **(F32 if single else F64))
