"""The float64 references: agreement with scikit-learn's own kernels, gradients, exactness."""

import doctest

import numpy as np
import pytest
from sklearn.gaussian_process import kernels as skk
from sklearn.metrics import pairwise as skp

from kernelkit_math import REGISTRY, get_kernel, kernel_names
from kernelkit_math import distances as dist
from kernelkit_math import registry
from tests.cases import N_FEATURES, PARAM_CASES, case_ids
from tests.conftest import TOL

CASES = case_ids()
CASE_PARAMS = [pytest.param(name, params, id=cid) for name, params, cid in CASES]


def data(rng, n=9, d=N_FEATURES, offset=0.0):
    return rng.normal(size=(n, d)) + offset


def test_every_kernel_has_cases():
    assert set(PARAM_CASES) == set(REGISTRY)


def test_registry_entries_are_complete():
    for name in kernel_names():
        spec = get_kernel(name)
        assert spec.name == name
        assert spec.pairwise in {"dot", "sqeuclidean", "manhattan", "cosine"}
        assert callable(spec.value_fn) and callable(spec.diag_fn) and callable(spec.gradient_fn)
        assert spec.stationary == (spec.pairwise in {"sqeuclidean", "manhattan"})
    assert not get_kernel("sigmoid").psd
    assert {n for n in REGISTRY if REGISTRY[n].feature_map_fn} == {"linear", "polynomial"}


@pytest.mark.parametrize("name", kernel_names())
def test_normalized_flag_says_whether_k_x_x_is_1(rng, name):
    """``normalized`` (k(x, x) = 1 for every x, which the GPU kernels rely on to write the
    diagonal) against the float64 values: on rows near 0, at 1000, tiny and zero, for every
    registry example. A normalised kernel is 1 on all of them (its ``diag`` exactly); any other
    kernel differs from 1 on some, so a wrong flag either way fails."""
    spec = get_kernel(name)
    d = N_FEATURES
    X = np.vstack([data(rng, n=4), data(rng, n=1, offset=1000.0), 1e-3 * data(rng, n=1),
                   np.zeros((1, d))])
    ones = []
    for example in spec.examples:
        params = example.params(d)
        # Y given: the computed k(x, x), not K(X, X)'s diagonal (written from diag());
        # the exponential kernel overflows to inf at 1000, which is not 1 either
        with np.errstate(over="ignore"):
            k_xx, diag = np.diag(spec.value(X, X.copy(), **params)), spec.diag(X, **params)
        ones.append(bool(np.all(np.abs(k_xx - 1.0) <= 1e-12) and np.all(diag == 1.0)))
    assert all(ones) == spec.normalized, f"{name}: k(x, x) == 1 per example: {ones}"


def test_registry_examples_run():
    result = doctest.testmod(registry)
    assert result.attempted > 0 and result.failed == 0


def test_unknown_kernel_names_known_ones():
    with pytest.raises(ValueError, match="unknown kernel 'gauss'.*rbf"):
        get_kernel("gauss")


# ------------------------------------------------------------- agreement with sklearn's kernels
SKLEARN_PAIRWISE = {
    "linear": (skp.linear_kernel, {}),
    "polynomial": (skp.polynomial_kernel, dict(degree=2, gamma=0.3, coef0=0.5)),
    "rbf": (skp.rbf_kernel, dict(gamma=0.4)),
    "laplacian": (skp.laplacian_kernel, dict(gamma=0.4)),
    "sigmoid": (skp.sigmoid_kernel, dict(gamma=0.2, coef0=0.3)),
    "cosine": (skp.cosine_similarity, {}),
}


@pytest.mark.parametrize("name", SKLEARN_PAIRWISE)
@pytest.mark.parametrize("same", [True, False], ids=["XX", "XY"])
def test_matches_sklearn_pairwise(rng, name, same):
    fn, params = SKLEARN_PAIRWISE[name]
    X, Y = data(rng), data(rng, n=6)
    Yarg = None if same else Y
    np.testing.assert_allclose(
        get_kernel(name).value(X, Yarg, **params), fn(X, Yarg, **params), **TOL["float64"]
    )


def sklearn_gp_equivalent(name, params):
    """The sklearn GP kernel equal to a registry kernel, or None."""
    if name == "rbf":
        return skk.RBF(length_scale=1.0 / np.sqrt(2.0 * params["gamma"]))
    if name == "matern":
        return skk.Matern(length_scale=params["length_scale"], nu=params["nu"])
    if name == "rational_quadratic" and np.ndim(params["length_scale"]) == 0:
        return skk.RationalQuadratic(length_scale=params["length_scale"], alpha=params["alpha"])
    return None


GP_CASES = [
    ("rbf", dict(gamma=0.4)),
    ("rbf", dict(gamma=np.array([0.1, 0.7, 0.3]))),
    ("matern", dict(nu=0.5, length_scale=1.3)),
    ("matern", dict(nu=1.5, length_scale=np.array([0.8, 1.5, 2.0]))),
    ("matern", dict(nu=2.5, length_scale=0.9)),
    ("rational_quadratic", dict(length_scale=0.7, alpha=2.5)),
]


@pytest.mark.parametrize("name,params", GP_CASES, ids=lambda v: v if isinstance(v, str) else "")
def test_matches_sklearn_gp_kernels_value_and_gradient(rng, name, params):
    X, Y = data(rng), data(rng, n=5)
    sk = sklearn_gp_equivalent(name, params)
    spec = get_kernel(name)
    np.testing.assert_allclose(spec.value(X, Y, **params), sk(X, Y), **TOL["float64"])
    K, dK = spec.gradient(X, **params)
    K_sk, dK_sk = sk(X, eval_gradient=True)
    np.testing.assert_allclose(K, K_sk, **TOL["float64"])
    if name == "rbf":  # sklearn differentiates w.r.t. log length_scale = -(log 2 + log gamma) / 2
        dK = -2.0 * dK
    if name == "rational_quadratic":  # sklearn orders (alpha, length_scale)
        dK = dK[..., ::-1]
    np.testing.assert_allclose(dK, dK_sk, rtol=1e-10, atol=1e-12)


def test_exponential_is_exp_of_scaled_dot(rng):
    X, Y = data(rng), data(rng, n=4)
    np.testing.assert_allclose(
        get_kernel("exponential").value(X, Y, scale=0.3), np.exp(0.3 * X @ Y.T), **TOL["float64"]
    )
    np.testing.assert_allclose(
        get_kernel("exponential").value(X, Y), np.exp(X @ Y.T / np.sqrt(N_FEATURES)), **TOL["float64"]
    )


# ------------------------------------------------------------------------------- gradients
def _log_params(spec, params, n_features):
    """Flattened log hyperparameters and a function rebuilding params from them."""
    resolved = spec.resolve(n_features, **params)
    for p in spec.hyperparameters:  # defaults of None resolve to numbers for differentiation
        if resolved[p.name] is None:
            resolved[p.name] = 1.0 / n_features if p.name == "gamma" else 1.0 / np.sqrt(n_features)
    sizes = [np.size(resolved[p.name]) for p in spec.hyperparameters]
    theta = np.concatenate([np.log(np.atleast_1d(resolved[p.name])) for p in spec.hyperparameters] or [np.empty(0)])

    def rebuild(t):
        out, i = dict(resolved), 0
        for p, size in zip(spec.hyperparameters, sizes):
            vals = np.exp(t[i : i + size])
            out[p.name] = vals if np.ndim(resolved[p.name]) else float(vals[0])
            i += size
        return out

    return theta, rebuild


@pytest.mark.parametrize("name,params", CASE_PARAMS)
def test_gradient_matches_finite_differences(rng, name, params):
    spec = get_kernel(name)
    X = data(rng, n=7)
    theta, rebuild = _log_params(spec, params, X.shape[1])
    K, dK = spec.gradient(X, **params)
    np.testing.assert_array_equal(K, spec.value(X, **params))
    assert dK.shape == K.shape + (theta.size,)
    h = 1e-6
    for i in range(theta.size):
        up, down = theta.copy(), theta.copy()
        up[i] += h
        down[i] -= h
        fd = (spec.value_fn(X, None, **rebuild(up)) - spec.value_fn(X, None, **rebuild(down))) / (2 * h)
        # central differences: truncation O(h^2) ~ 1e-12, rounding O(eps / h) ~ 1e-10
        np.testing.assert_allclose(dK[..., i], fd, rtol=1e-6, atol=1e-8)


# ------------------------------------------------------------------------------- exactness
@pytest.mark.parametrize("name,params", CASE_PARAMS)
def test_symmetric_and_exact_diagonal(rng, name, params):
    spec = get_kernel(name)
    X = data(rng, n=40)
    K = spec.value(X, **params)
    np.testing.assert_array_equal(K, K.T)
    np.testing.assert_array_equal(np.diag(K), spec.diag(X, **params))
    np.testing.assert_allclose(K, spec.value(X, X.copy(), **params), **TOL["float64"])
    if spec.normalized:
        np.testing.assert_array_equal(np.diag(K), 1.0)


def test_distances_have_no_cancellation_far_from_origin(rng):
    # Points on a dyadic grid near 1000 are exact in float64, so shifting them back is exact
    # and the distances must be identical bit for bit.
    X = np.round(rng.normal(scale=0.05, size=(30, 4)) * 2**20) / 2**20
    for fn in (dist.sqeuclidean, dist.manhattan):
        np.testing.assert_array_equal(fn(X + 1000.0), fn(X))
    near = np.vstack([X[:1], X[:1] + 2.0**-30])
    assert dist.sqeuclidean(near + 1000.0)[0, 1] == 4 * 2.0**-60


#: Per-feature parameters of each stationary kernel for length scales ``ls`` (one per feature).
ARD_PARAMS = {
    "rbf": lambda ls: dict(gamma=1.0 / (2.0 * ls**2)),
    "laplacian": lambda ls: dict(gamma=1.0 / ls),
    "matern": lambda ls: dict(length_scale=ls, nu=2.5),
    "rational_quadratic": lambda ls: dict(length_scale=ls, alpha=0.7),
}


def _exact_weighted(X, Y, w, power):
    """sum_k w_k |x_k - y_k| ** power from float64 differences formed first (exact here: the
    points lie within a factor 2 of each other, so every difference is exact, Sterbenz)."""
    return (w * np.abs(X[:, None, :] - Y[None, :, :]) ** power).sum(-1)


@pytest.mark.parametrize("same", [True, False], ids=["XX", "XY"])
@pytest.mark.parametrize("name", list(ARD_PARAMS))
def test_per_feature_parameters_keep_digits_far_from_origin(rng, name, same):
    """Length scales 1e-4..1 on data at 1e6: weighting coordinates before subtracting rounded
    each to ~1e-6 of its weighted offset (RBF(length_scale=[1e-4, 1]) erred 8.7e-6, sklearn does
    the same); the references weight the exact differences. Compared with the exact weighted
    distances of the same points: float64 TOL, for the values and the K of the gradients."""
    ls = np.array([1e-4, 1e-2, 1.0])
    X = 1e6 + ls * rng.normal(size=(9, 3))
    Y = X if same else 1e6 + ls * rng.normal(size=(6, 3))
    r2 = _exact_weighted(X, Y, 1.0 / ls**2, 2)
    r1 = _exact_weighted(X, Y, 1.0 / ls, 1)
    t = np.sqrt(5.0 * r2)
    exact = {"rbf": np.exp(-r2 / 2.0), "laplacian": np.exp(-r1),
             "matern": (1.0 + t + t * t / 3.0) * np.exp(-t),
             "rational_quadratic": (1.0 + r2 / 1.4) ** -0.7}[name]
    spec, params = get_kernel(name), ARD_PARAMS[name](ls)
    np.testing.assert_allclose(spec.value(X, None if same else Y, **params), exact, **TOL["float64"])
    if same:
        np.testing.assert_allclose(spec.gradient(X, **params)[0], exact, **TOL["float64"])


def test_dot_gram_is_exactly_symmetric_with_row_norm_diagonal(rng):
    X = rng.normal(size=(50, 13))
    S = dist.dot(X)
    np.testing.assert_array_equal(S, S.T)
    np.testing.assert_array_equal(np.diag(S), dist.row_dots(X))


def test_cosine_zero_rows_give_zero_like_sklearn():
    X = np.array([[0.0, 0.0], [1.0, 2.0], [-3.0, 0.5]])
    K = get_kernel("cosine").value(X)
    np.testing.assert_allclose(K, skp.cosine_similarity(X), **TOL["float64"])
    np.testing.assert_array_equal(np.diag(K), [0.0, 1.0, 1.0])


def test_references_do_not_modify_inputs(rng):
    X, Y = data(rng), data(rng, n=5)
    X0, Y0 = X.copy(), Y.copy()
    for name, params, _ in CASES:
        spec = get_kernel(name)
        spec.value(X, Y, **params)
        spec.gradient(X, **params)
    np.testing.assert_array_equal(X, X0)
    np.testing.assert_array_equal(Y, Y0)


# --------------------------------------------------------------------------- parameter checks
@pytest.mark.parametrize(
    "name,params,error,match",
    [
        ("rbf", dict(gamma=0.0), ValueError, "'gamma' must be a finite number > 0"),
        ("rbf", dict(gamma=-1.0), ValueError, "'gamma'"),
        ("rbf", dict(gamma=np.inf), ValueError, "'gamma'"),
        ("rbf", dict(gamma="big"), TypeError, "'gamma'"),
        ("rbf", dict(gamma=np.array([1.0, 2.0])), ValueError, "2 entries but the data have 3"),
        ("rbf", dict(gamma=np.array([1.0, -2.0, 1.0])), ValueError, "'gamma'"),
        ("polynomial", dict(degree=2.5), TypeError, "'degree' must be an integer"),
        ("polynomial", dict(degree=-1), ValueError, "'degree' must be an integer >= 0"),
        ("polynomial", dict(degree=True), TypeError, "'degree'"),
        ("polynomial", dict(degree=10**30), ValueError, r"'degree' must be .* <= 2147483647"),
        ("polynomial", dict(degree=2**31), ValueError, r"'degree' must be .* <= 2147483647"),
        ("matern", dict(nu=2.0), ValueError, "'nu' must be one of 0.5, 1.5, 2.5"),
        ("matern", dict(length_scale=0.0), ValueError, "'length_scale'"),
        ("rational_quadratic", dict(alpha=-1.0), ValueError, "'alpha'"),
        ("exponential", dict(scale=0.0), ValueError, "'scale'"),
        ("matern", dict(nu=None), TypeError, "'nu' must be one of"),
        ("polynomial", dict(degree=None), TypeError, "'degree' must be an integer"),
        ("rational_quadratic", dict(length_scale=None), TypeError, "'length_scale'"),
        ("rbf", dict(sigma=1.0), TypeError, "unknown parameter.*allowed: gamma"),
        ("linear", dict(gamma=1.0), TypeError, "allowed: none"),
    ],
)
def test_bad_parameters_name_the_parameter(rng, name, params, error, match):
    with pytest.raises(error, match=match):
        get_kernel(name).value(data(rng), **params)


def test_integral_float_degree_is_accepted(rng):
    X = data(rng)
    np.testing.assert_array_equal(
        get_kernel("polynomial").value(X, degree=2.0), get_kernel("polynomial").value(X, degree=2)
    )


@pytest.mark.parametrize("magnitude", [1e-200, 1e-162, 1.0, 1e200], ids=lambda m: f"{m:g}")
def test_cosine_keeps_precision_for_tiny_and_huge_rows(rng, magnitude):
    X = rng.normal(size=(5, 3))
    np.testing.assert_allclose(
        get_kernel("cosine").value(X * magnitude), get_kernel("cosine").value(X), rtol=1e-14, atol=1e-15
    )
