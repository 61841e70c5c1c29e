"""Feature maps for linear attention: each random map is an unbiased estimator of its kernel.

Statistical tests use fixed seeds (deterministic) and compare the sample mean of the per-feature
terms with the exact registry kernel within a few standard errors computed from the same samples.
The tests over every map read the feature-map registry (``FEATURE_MAPS``), so a new row is
covered with no edit here.
"""

import math

import numpy as np
import pytest

from kernelkit_math import get_kernel
from kernelkit_math.random_features import (
    EluPlusOneMap,
    FavorPlusMap,
    HyperbolicFavorMap,
    IdentityMap,
    RandomFourierMap,
    ReluMap,
    FEATURE_MAPS,
    Taylor2Map,
    feature_map_names,
    get_feature_map,
    make_feature_map,
    orthogonal_gaussian_weights,
)
from tests.conftest import TOL

N_SE = 4.0  # "within a few standard errors"

#: Every registry map, the sized ones with M = 64.
RANDOM_SPECS = [form.replace(":M", ":64") for form in feature_map_names(sized=True)]
ALL_SPECS = [form.replace(":M", ":64") for form in feature_map_names()]
#: The positive random features of the exponential kernel (FAVOR+ and its variants).
POSITIVE_RANDOM_SPECS = [form.replace(":M", ":64") for form in
                         feature_map_names(sized=True, kernel="exponential")]


def _pairs(rng, d, norm):
    """Pairs (x, y) with ||x|| = ||y|| = norm: aligned, opposite, orthogonal-ish and random."""
    x = rng.normal(size=d)
    x *= norm / np.linalg.norm(x)
    y = rng.normal(size=d)
    y *= norm / np.linalg.norm(y)
    return [(x, x), (x, -x), (x, y), (y, 0.5 * x)]


def _exact(phi, x, y):
    name, params = phi.kernel
    return get_kernel(name).value(x[None], y[None], **params)[0, 0]


def _check_unbiased(terms, exact):
    """terms: i.i.d. samples whose mean estimates ``exact``."""
    mean = terms.mean()
    se = terms.std(ddof=1) / math.sqrt(terms.size)
    assert se < 0.05 * abs(exact), f"test has no power: se {se} vs kernel {exact}"
    # + rounding: for y = -x every FAVOR+ term is exactly exp(-||x'||^2) (zero variance)
    assert abs(mean - exact) <= N_SE * se + 1e-12 * abs(exact), f"mean {mean} vs {exact}, se {se}"


# ---------------------------------------------------------------------------- unbiasedness
@pytest.mark.parametrize("scale", [None, 0.7], ids=["scale-default", "scale-0.7"])
def test_favor_iid_is_unbiased_for_exponential_kernel(rng, scale):
    d, m = 6, 200_000
    phi = FavorPlusMap(d, m, scale=scale, seed=3)
    assert phi.kernel == ("exponential", {"scale": 1 / math.sqrt(d) if scale is None else scale})
    for x, y in _pairs(rng, d, norm=1.2):
        terms = m * phi(x) * phi(y)  # one i.i.d. sample per random feature
        _check_unbiased(terms, _exact(phi, x, y))


def test_favor_orthogonal_is_unbiased_for_exponential_kernel(rng):
    d, m = 6, 200_004  # a multiple of d: whole orthogonal blocks
    phi = FavorPlusMap(d, m, scale=0.7, seed=4, orthogonal=True)
    for x, y in _pairs(rng, d, norm=1.2):
        # features inside one block are dependent; the block means are i.i.d.
        terms = (m * phi(x) * phi(y)).reshape(-1, d).mean(axis=1)
        _check_unbiased(terms, _exact(phi, x, y))


def test_hyperbolic_favor_is_unbiased_for_exponential_kernel(rng):
    d, m = 6, 100_000
    phi = HyperbolicFavorMap(d, m, scale=0.7, seed=5)
    for x, y in _pairs(rng, d, norm=1.2):
        prod = phi(x) * phi(y)
        terms = m * (prod[:m] + prod[m:])  # one sample per random vector w (an antithetic pair)
        _check_unbiased(terms, _exact(phi, x, y))


@pytest.mark.parametrize("gamma", [0.3, np.array([0.1, 0.5, 0.2, 1.0])], ids=["scalar", "per-feature"])
def test_rff_is_unbiased_for_rbf_kernel(rng, gamma):
    d, m = 4, 200_000
    phi = RandomFourierMap(d, m, gamma=gamma, seed=6)
    assert phi.kernel[0] == "rbf"
    for x, y in _pairs(rng, d, norm=1.0):
        terms = m * phi(x) * phi(y)
        _check_unbiased(terms, _exact(phi, x, y))


def test_unbiasedness_over_many_seeds(rng):
    """Same property from the other side: small M, the estimate averaged over 400 seeds."""
    d, m, n_seeds = 4, 8, 400
    x, y = _pairs(rng, d, norm=1.0)[2]
    for spec in [form.replace(":M", ":8") for form in feature_map_names(relation="unbiased")]:
        est = []
        for seed in range(n_seeds):
            phi = make_feature_map(spec, d, seed=seed)
            est.append(phi(x) @ phi(y))
        est = np.array(est)
        exact = _exact(phi, x, y)
        se = est.std(ddof=1) / math.sqrt(n_seeds)
        assert abs(est.mean() - exact) < N_SE * se, spec


# ---------------------------------------------------------------------------------- variance
def test_orthogonal_favor_has_lower_variance_than_iid(rng):
    """MSE of the M = D estimator of exp(x·y), orthogonal vs i.i.d., over 5000 independent draws.

    One map of 5000 * D features holds 5000 independent M = D estimators (one per block of D rows,
    each block orthogonal for favor+orth). The relative squared error of each estimator, averaged
    over 10 x 10 point pairs, is one sample; the MSE difference must exceed 5 standard errors.
    ||x'|| = 0.5 keeps the log-normal tails light enough for a stable MSE estimate (at ||x'|| >= 1
    the i.i.d. MSE is dominated by rare huge draws).
    """
    d, n = 16, 5000
    X = rng.normal(size=(10, d))
    X *= 0.5 / np.linalg.norm(X, axis=1, keepdims=True)
    exact = np.exp(X @ X.T)
    stats = {}
    for orth in (False, True):
        phi = FavorPlusMap(d, n * d, scale=1.0, seed=11, orthogonal=orth)
        F = phi(X).reshape(10, n, d) * math.sqrt(n)  # rescale: each block is an M = d map
        est = np.einsum("ink,jnk->nij", F, F)
        sq = (((est - exact) / exact) ** 2).mean(axis=(1, 2))  # one sample per estimator
        stats[orth] = (sq.mean(), sq.std(ddof=1) / math.sqrt(n))
    (mse_iid, se_iid), (mse_orth, se_orth) = stats[False], stats[True]
    # measured: ratio 0.84, difference 13 standard errors
    assert mse_orth < 0.9 * mse_iid, stats
    assert mse_iid - mse_orth > 5 * math.hypot(se_iid, se_orth), stats


def test_orthogonal_weights_rows_are_orthogonal_within_blocks():
    d, m = 5, 13
    W = orthogonal_gaussian_weights(m, d, np.random.default_rng(0))
    assert W.shape == (m, d)
    for start in range(0, m, d):
        block = W[start:start + d]
        G = block @ block.T
        np.testing.assert_allclose(G - np.diag(np.diag(G)), 0.0, atol=1e-12)
    # row lengths are chi(d), not 1
    assert np.ptp(np.linalg.norm(W, axis=1)) > 0.1


# ------------------------------------------------------------------------------ exactness
@pytest.mark.parametrize("scale", [None, 0.3, 2.0], ids=["scale-default", "scale-0.3", "scale-2"])
def test_taylor2_is_exactly_the_truncated_exponential(rng, scale):
    d = 5
    phi = Taylor2Map(d, scale=scale)
    s = 1 / math.sqrt(d) if scale is None else scale
    Q, K = rng.normal(size=(7, d)), rng.normal(size=(6, d))
    t = s * Q @ K.T
    np.testing.assert_allclose(phi(Q) @ phi(K).T, 1 + t + t**2 / 2, **TOL["float64"])
    assert phi.num_features() == 1 + d + d * d == phi(Q).shape[-1]
    assert phi.kernel == ("exponential", {"scale": s}) and phi.relation == "taylor2"


def test_identity_map_gives_the_linear_kernel_exactly(rng):
    X, Y = rng.normal(size=(4, 3)), rng.normal(size=(5, 3))
    phi = IdentityMap(3)
    np.testing.assert_allclose(phi(X) @ phi(Y).T, get_kernel("linear").value(X, Y), **TOL["float64"])
    assert phi.kernel == ("linear", {}) and phi.relation == "exact"


def test_deterministic_maps_values():
    x = np.array([-2.0, -0.5, 0.0, 0.5, 3.0])
    np.testing.assert_array_equal(EluPlusOneMap()(x), [np.exp(-2.0), np.exp(-0.5), 1.0, 1.5, 4.0])
    np.testing.assert_array_equal(ReluMap()(x), [0.0, 0.0, 0.0, 0.5, 3.0])
    assert EluPlusOneMap().kernel is None and ReluMap().kernel is None


def test_rff_approximates_rbf_gram_in_max_norm(rng):
    d, m, gamma = 5, 2000, 0.3
    X = rng.normal(size=(30, d))
    F = RandomFourierMap(d, m, gamma=gamma, seed=0)(X)
    err = np.abs(F @ F.T - get_kernel("rbf").value(X, gamma=gamma)).max()
    assert err < 3 / math.sqrt(m), err  # measured 2.5 / sqrt(M)


# --------------------------------------------------------------------------- seeds, shapes
@pytest.mark.parametrize("spec", RANDOM_SPECS)
def test_same_seed_same_weights_different_seed_different(spec):
    a, b, c = (make_feature_map(spec, 4, seed=s) for s in (7, 7, 8))
    np.testing.assert_array_equal(a.weights, b.weights)
    assert not np.allclose(a.weights, c.weights)
    assert a.seed == 7 and c.seed == 8
    x = np.linspace(-1, 1, 8).reshape(2, 4)
    np.testing.assert_array_equal(a(x), b(x))


@pytest.mark.parametrize(
    "spec,width",
    [("identity", 4), ("elu+1", 4), ("relu", 4), ("taylor2", 21), ("favor+:64", 64),
     ("favor+orth:64", 64), ("hyp-favor+:64", 128), ("rff:64", 64)],
)
def test_shapes_and_num_features(rng, spec, width):
    phi = make_feature_map(spec, 4, seed=0)
    assert phi.num_features(4) == phi.num_features() == width
    assert phi.name == spec
    for batch in [(), (3,), (2, 3, 5)]:
        out = phi(rng.normal(size=batch + (4,)))
        assert out.shape == batch + (width,) and out.dtype == np.float64
    if spec in RANDOM_SPECS:
        assert phi.weights.shape == (64, 4)
    else:
        assert phi.weights is None and phi.seed is None


def test_favor_odd_sizes_not_multiple_of_d():
    phi = make_feature_map("favor+orth:7", 3, seed=1)
    assert phi.weights.shape == (7, 3) and phi(np.ones(3)).shape == (7,)
    phi = make_feature_map("favor+orth:1", 1, seed=1)
    assert phi(np.ones((2, 1))).shape == (2, 1)


# ------------------------------------------------------------------------ positivity, range
@pytest.mark.parametrize("spec", POSITIVE_RANDOM_SPECS)
def test_favor_features_are_positive(rng, spec):
    F = make_feature_map(spec, 8, seed=2)(rng.normal(size=(50, 8)) * 2)
    assert (F > 0).all()


@pytest.mark.parametrize("spec", POSITIVE_RANDOM_SPECS)
def test_large_norms_give_finite_features(rng, spec):
    d = 16
    phi = make_feature_map(spec, d, seed=2, scale=1.0)
    x = rng.normal(size=(10, d))
    x *= 30.0 / np.linalg.norm(x, axis=1, keepdims=True)  # ||x'|| = 30
    F = phi(x)
    assert np.isfinite(F).all() and (F >= 0).all()
    assert np.isfinite(phi.log_features(x)).all()
    x *= 100.0 / 30.0  # ||x'|| = 100: plain features underflow to 0, stabilised stay useful
    St = phi.stabilized(x)
    assert np.isfinite(St).all()
    np.testing.assert_array_equal(St.max(axis=-1), 1.0)


def test_stabilisers_cancel_in_the_attention_ratio(rng):
    """Row stabiliser on queries, per-sequence stabiliser on keys: the ratio is unchanged."""
    d = 8
    phi = FavorPlusMap(d, 32, seed=3)
    q, k, v = rng.normal(size=(2, 5, d)), rng.normal(size=(2, 9, d)), rng.normal(size=(2, 9, 3))

    def ratio(Q, K):
        A = Q @ np.swapaxes(K, -1, -2)
        return (A @ v) / A.sum(-1, keepdims=True)

    plain = ratio(phi(q), phi(k))
    stab = ratio(phi.stabilized(q, axis=-1), phi.stabilized(k, axis=(-2, -1)))
    np.testing.assert_allclose(stab, plain, **TOL["float64"])


# -------------------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    "spec",
    ["favor+:0", "favor+:-3", "favor+:abc", "favor+", "rff:", "hyp-favor+:1.5", "taylor2:4",
     "nope", "relu:3"],
)
def test_bad_specs_raise_value_error(spec):
    with pytest.raises(ValueError, match="spec"):
        make_feature_map(spec, 4)


def test_bad_parameters_raise():
    with pytest.raises(ValueError, match="scale"):
        make_feature_map("favor+:8", 4, scale=-1.0)
    with pytest.raises(ValueError, match="gamma"):
        make_feature_map("rff:8", 4, gamma=np.ones(3))
    with pytest.raises(TypeError, match="gamma"):
        make_feature_map("favor+:8", 4, gamma=1.0)
    with pytest.raises(ValueError, match="seed"):
        make_feature_map("favor+:8", 4, seed=-1)
    with pytest.raises(TypeError, match="spec"):
        make_feature_map(3, 4)
    with pytest.raises(ValueError, match="D = 4"):
        make_feature_map("favor+:8", 4)(np.ones((2, 5)))


def test_call_does_not_modify_input(rng):
    x = rng.normal(size=(3, 4))
    x.setflags(write=False)
    for spec in ALL_SPECS:
        make_feature_map(spec, 4)(x)


# ------------------------------------------------------------------ the registry, row by row
@pytest.mark.parametrize("name", list(FEATURE_MAPS))
def test_registry_row_describes_its_map(name, rng):
    """Each row's width, kernel and sign are those of the map it builds: phi(q)·phi(k) > 0 for
    a positive map, >= 0 (some 0 among inputs of both signs) for a non-negative one, of both
    signs for a signed one."""
    spec = get_feature_map(name)
    d, m = 5, 16
    phi = make_feature_map(spec.form.replace(":M", f":{m}"), d, seed=1)
    assert phi.name == spec.form.replace(":M", f":{m}") and get_feature_map(phi.name) is spec
    assert phi.num_features() == spec.width(d, m if spec.sized else None)
    assert (phi.kernel and phi.kernel[0]) == spec.kernel and phi.relation == spec.relation
    assert (phi.seed is not None) == spec.sized and set(spec.params) <= {"scale", "gamma"}
    Q, K = phi(rng.normal(size=(40, d))), phi(rng.normal(size=(30, d)))
    assert Q.shape == (40, phi.num_features()) and np.isfinite(Q).all()
    W = Q @ K.T
    if spec.sign == "positive":
        assert (W > 0).all()
    elif spec.sign == "non-negative":
        assert (W >= 0).all() and (W == 0).any()
    else:
        assert spec.sign == "signed" and (W < 0).any() and (W > 0).any()


@pytest.mark.parametrize("name", [n for n, spec in FEATURE_MAPS.items() if spec.phi is not None])
def test_elementwise_phi_and_its_derivative(name):
    """phi acts entry by entry (the map object applies it); dphi is its derivative: central
    differences with step h, whose error is O(h^2) (smooth phi) plus rounding eps |phi| / h,
    at points away from 0, where the fused maps have a kink."""
    spec = get_feature_map(name)
    x = np.concatenate([-np.geomspace(3.0, 1e-2, 20), np.geomspace(1e-2, 3.0, 20)])
    np.testing.assert_array_equal(make_feature_map(name, 40)(x), spec.phi(x))
    np.testing.assert_array_equal(spec.phi(x.reshape(4, 10)), spec.phi(x).reshape(4, 10))
    h = 1e-5
    fd = (spec.phi(x + h) - spec.phi(x - h)) / (2 * h)
    np.testing.assert_allclose(spec.dphi(x), fd, rtol=1e-8, atol=1e-8)


def test_registry_is_consistent():
    """Fused codes are distinct and the identity is 0 (the kernels' "no map"); a fused map is
    elementwise (the kernels apply phi and phi' entry by entry); names are spec strings."""
    codes = [spec.fused for spec in FEATURE_MAPS.values() if spec.fused is not None]
    assert len(set(codes)) == len(codes) and get_feature_map("identity").fused == 0
    for name, spec in FEATURE_MAPS.items():
        assert spec.name == name and ":" not in name
        assert spec.sign in ("positive", "non-negative", "signed")
        if spec.fused is not None:
            assert spec.phi is not None and spec.dphi is not None and not spec.sized
    with pytest.raises(ValueError, match="unknown feature map 'nope'"):
        get_feature_map("nope")
