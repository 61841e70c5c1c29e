"""Exact feature maps reproduce their kernels."""

import numpy as np
import pytest

from kernelkit_math import get_kernel
from kernelkit_math.feature_maps import MAX_FEATURES, polynomial_feature_count
from tests.conftest import TOL


@pytest.mark.parametrize(
    "name,params",
    [
        ("linear", {}),
        ("polynomial", {}),
        ("polynomial", dict(gamma=0.5, degree=2, coef0=0.0)),
        ("polynomial", dict(gamma=1.3, degree=4, coef0=2.0)),
        ("polynomial", dict(degree=0)),
    ],
    ids=["linear", "poly-default", "poly-homogeneous", "poly-deg4", "poly-deg0"],
)
def test_feature_map_reproduces_kernel(rng, name, params):
    spec = get_kernel(name)
    X, Y = rng.normal(size=(8, 3)), rng.normal(size=(5, 3))
    FX, FY = spec.feature_map(X, **params), spec.feature_map(Y, **params)
    np.testing.assert_allclose(FX @ FY.T, spec.value(X, Y, **params), rtol=1e-10, atol=1e-10)


def test_polynomial_map_width_is_minimal(rng):
    F = get_kernel("polynomial").feature_map(rng.normal(size=(2, 4)), degree=3)
    assert F.shape == (2, polynomial_feature_count(4, 3)) == (2, 35)


def test_polynomial_map_refuses_negative_coef0_and_huge_widths(rng):
    spec = get_kernel("polynomial")
    with pytest.raises(ValueError, match="coef0 must be >= 0"):
        spec.feature_map(rng.normal(size=(2, 3)), coef0=-1.0)
    with pytest.raises(ValueError, match=f"more than {MAX_FEATURES}"):
        spec.feature_map(rng.normal(size=(2, 200)), degree=4)


@pytest.mark.parametrize("name", ["rbf", "laplacian", "matern", "rational_quadratic", "cosine", "sigmoid", "exponential"])
def test_kernels_without_exact_map_say_so(rng, name):
    with pytest.raises(NotImplementedError, match=name):
        get_kernel(name).feature_map(rng.normal(size=(2, 3)))


def test_feature_map_returns_a_copy(rng):
    X = rng.normal(size=(3, 2))
    F = get_kernel("linear").feature_map(X)
    F[0, 0] = 99.0
    assert X[0, 0] != 99.0
