"""Property tests (hypothesis) over shapes and values for every registry kernel."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from kernelkit_math import get_kernel
from tests.cases import PARAM_CASES

SCALAR_CASES = [
    pytest.param(name, params, id=f"{name}-{i}")
    for name, cases in PARAM_CASES.items()
    for i, params in enumerate(cases)
    if all(np.ndim(v) == 0 for v in params.values())  # per-feature cases need a fixed width
]

finite = st.floats(min_value=-3, max_value=3, allow_nan=False, allow_subnormal=False)


@st.composite
def matrices(draw, max_rows=12, max_cols=5):
    n = draw(st.integers(1, max_rows))
    d = draw(st.integers(1, max_cols))
    return draw(arrays(np.float64, (n, d), elements=finite))


PROPERTY_SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("name,params", SCALAR_CASES)
@PROPERTY_SETTINGS
@given(X=matrices())
def test_symmetry_diag_and_self_consistency(name, params, X):
    spec = get_kernel(name)
    K = spec.value(X, **params)
    assert K.shape == (X.shape[0],) * 2
    np.testing.assert_array_equal(K, K.T)
    np.testing.assert_array_equal(np.diag(K), spec.diag(X, **params))
    np.testing.assert_allclose(K, spec.value(X, X.copy(), **params), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name,params", [c for c in SCALAR_CASES if get_kernel(c.values[0]).psd])
@PROPERTY_SETTINGS
@given(X=matrices())
def test_psd_kernels_have_no_negative_eigenvalues(name, params, X):
    K = get_kernel(name).value(X, **params)
    smallest = np.linalg.eigvalsh(K)[0]
    assert smallest >= -1e-10 * np.linalg.norm(K, 2)


def test_sigmoid_is_not_psd_and_says_so():
    # A witness: two points whose sigmoid Gram has a negative eigenvalue.
    X = np.array([[1.0], [2.0]])  # det = tanh(1) tanh(4) - tanh(2)**2 < 0
    K = get_kernel("sigmoid").value(X, gamma=1.0, coef0=0.0)
    assert np.linalg.eigvalsh(K)[0] < 0
    assert not get_kernel("sigmoid").psd


@pytest.mark.parametrize("name,params", SCALAR_CASES)
@PROPERTY_SETTINGS
@given(X=matrices(max_rows=6, max_cols=3), data=st.data())
def test_gradient_is_a_derivative_along_random_directions(name, params, X, data):
    """dK · u equals the directional finite difference of K in log-hyperparameter space."""
    spec = get_kernel(name)
    hyper = spec.hyperparameters
    if not hyper:
        return
    resolved = spec.resolve(X.shape[1], **params)
    values = {
        p.name: resolved[p.name]
        if resolved[p.name] is not None
        else (1.0 / X.shape[1] if p.name == "gamma" else 1.0 / np.sqrt(X.shape[1]))
        for p in hyper
    }
    u = np.array(data.draw(st.lists(st.floats(-1, 1), min_size=len(hyper), max_size=len(hyper))))
    K, dK = spec.gradient(X, **{**params, **values})
    h = 1e-6

    def at(t):
        moved = {p.name: values[p.name] * np.exp(t * ui) for p, ui in zip(hyper, u)}
        return spec.value_fn(X, None, **{**resolved, **moved})

    fd = (at(h) - at(-h)) / (2 * h)
    scale = max(1.0, np.abs(K).max())
    np.testing.assert_allclose(dK @ u, fd, rtol=1e-5, atol=1e-7 * scale)
