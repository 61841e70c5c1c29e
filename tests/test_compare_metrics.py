"""kernelkit.attention.comparison.metrics against small cases computed by hand."""

import math

import numpy as np
import pytest

from kernelkit.attention.comparison import metrics

TOL = dict(rtol=1e-12, atol=1e-12)


# ------------------------------------------------------------------------- relative error
def test_relative_error_hand_case():
    # ||(3, -1)|| / ||(0, 5)|| = sqrt(10) / 5
    got = metrics.relative_error([[3.0, 4.0]], [[0.0, 5.0]])
    np.testing.assert_allclose(got, math.sqrt(10) / 5, **TOL)


def test_relative_error_keeps_leading_axes():
    exact = np.ones((2, 3, 2, 2))
    approx = exact.copy()
    approx[1, 2] *= 1.5  # this matrix is off by half its norm
    got = metrics.relative_error(approx, exact)
    expected = np.zeros((2, 3))
    expected[1, 2] = 0.5
    assert got.shape == (2, 3)
    np.testing.assert_allclose(got, expected, **TOL)


def test_relative_error_zero_reference():
    zero = np.zeros((1, 2, 2))
    assert metrics.relative_error(zero, zero).tolist() == [0.0]
    assert metrics.relative_error(np.ones((1, 2, 2)), zero).tolist() == [math.inf]


def test_relative_error_shape_mismatch():
    with pytest.raises(ValueError, match="same shape"):
        metrics.relative_error(np.ones((2, 2)), np.ones((2, 3)))


# ------------------------------------------------------------------------ total variation
@pytest.mark.parametrize("approx, exact, expected", [
    ([1.0, 0.0], [0.5, 0.5], 0.5),
    ([0.5, 0.5], [0.5, 0.5], 0.0),
    ([1.5, -0.5], [0.5, 0.5], 1.0),  # signed weights: 0.5 * (1 + 1)
    ([0.2, 0.3, 0.5], [0.5, 0.3, 0.2], 0.3),
], ids=["one-hot-vs-half", "equal", "signed", "three-keys"])
def test_total_variation_hand_cases(approx, exact, expected):
    np.testing.assert_allclose(metrics.total_variation([approx], [exact]), [expected], **TOL)


# ------------------------------------------------------------------------ KL divergence
def test_kl_hand_case():
    # 0.5 ln(0.5/0.25) + 0.5 ln(0.5/0.75) = 0.5 ln(4/3)
    got = metrics.kl_divergence([[0.5, 0.5]], [[0.25, 0.75]])
    np.testing.assert_allclose(got, [0.5 * math.log(4 / 3)], **TOL)


def test_kl_ignores_keys_outside_the_reference_support():
    # exact (1, 0): only the first term counts, ln(1 / 0.5)
    got = metrics.kl_divergence([[1.0, 0.0]], [[0.5, 0.5]])
    np.testing.assert_allclose(got, [math.log(2)], **TOL)
    got = metrics.kl_divergence([[1.0, 0.0]], [[0.5, -3.0]])  # negative weight off the support
    np.testing.assert_allclose(got, [math.log(2)], **TOL)


@pytest.mark.parametrize("approx", [[1.0, 0.0], [1.2, -0.2]], ids=["zero", "negative"])
def test_kl_infinite_where_approx_drops_a_key(approx):
    got = metrics.kl_divergence([[0.5, 0.5], [0.5, 0.5]], [approx, [0.5, 0.5]])
    assert got[0] == math.inf and got[1] == 0.0


def test_kl_refuses_negative_reference():
    with pytest.raises(ValueError, match="non-negative"):
        metrics.kl_divergence([[1.5, -0.5]], [[0.5, 0.5]])


# ------------------------------------------------------------------ entropy, peakiness
@pytest.mark.parametrize("row, expected", [
    ([0.25] * 4, math.log(4)),
    ([0.0, 1.0, 0.0], 0.0),
    ([0.5, 0.25, 0.25], 1.5 * math.log(2)),
], ids=["uniform", "one-hot", "half-quarter-quarter"])
def test_entropy_hand_cases(row, expected):
    got = metrics.entropy([row])
    np.testing.assert_allclose(got, [expected], **TOL)
    assert math.copysign(1.0, got[0]) == 1.0  # never -0.0


def test_peakiness():
    got = metrics.peakiness([[0.2, 0.5, 0.3], [0.25, 0.25, 0.5]])
    assert got.tolist() == [0.5, 0.5]


# --------------------------------------------------------------------- uniform baseline
def test_uniform_weights_causal_top_left():
    np.testing.assert_array_equal(
        metrics.uniform_weights(3, 2, is_causal=True), [[1.0, 0.0], [0.5, 0.5], [0.5, 0.5]])


def test_uniform_weights_full():
    np.testing.assert_array_equal(metrics.uniform_weights(2, 4), np.full((2, 4), 0.25))


@pytest.mark.parametrize("T", [-1, 1.5, True])
def test_uniform_weights_bad_length(T):
    with pytest.raises(ValueError, match="T must be"):
        metrics.uniform_weights(T, 3)


# ------------------------------------------------------------------------- SVD floor
def test_best_rank_approximation_hand_case():
    A = np.diag([3.0, 4.0])
    np.testing.assert_allclose(metrics.best_rank_approximation(A, 1), [[0, 0], [0, 4]], **TOL)
    np.testing.assert_allclose(metrics.best_rank_approximation(A, 2), A, **TOL)
    np.testing.assert_allclose(metrics.best_rank_approximation(A, 5), A, **TOL)
    np.testing.assert_allclose(metrics.best_rank_approximation(A, 0), np.zeros((2, 2)), **TOL)


def test_rank_one_matrix_is_its_own_rank_one_approximation():
    A = np.outer([1.0, 2.0, 3.0], [0.5, 0.5])
    np.testing.assert_allclose(metrics.best_rank_approximation(A, 1), A, **TOL)
    assert metrics.svd_floor(A, 1) < 1e-15


@pytest.mark.parametrize("rank, expected", [(0, 1.0), (1, 0.6), (2, 0.0)])
def test_svd_floor_hand_case(rank, expected):
    # singular values 4, 3: dropping 3 leaves sqrt(9 / 25) = 0.6
    np.testing.assert_allclose(metrics.svd_floor(np.diag([3.0, 4.0]), rank), expected, **TOL)


def test_svd_floor_batched_with_precomputed_svd(rng):
    A = rng.random((2, 3, 6, 5))
    svd = np.linalg.svd(A, full_matrices=False)
    for r in (1, 3):
        direct = metrics.relative_error(metrics.best_rank_approximation(A, r), A)
        np.testing.assert_allclose(metrics.svd_floor(A, r, svd=svd), direct, rtol=1e-10)
        np.testing.assert_allclose(metrics.best_rank_approximation(A, r, svd=svd),
                                   metrics.best_rank_approximation(A, r), **TOL)


def test_svd_floor_bad_rank():
    with pytest.raises(ValueError, match="rank"):
        metrics.svd_floor(np.eye(2), -1)
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        metrics.svd_floor(np.ones(3), 1)


def test_metrics_do_not_modify_inputs(rng):
    A = rng.random((2, 4, 4))
    B = rng.random((2, 4, 4)) - 0.2
    A0, B0 = A.copy(), B.copy()
    for fn in (metrics.relative_error, metrics.total_variation):
        fn(B, A)
    metrics.kl_divergence(A, B)
    metrics.entropy(A)
    metrics.svd_floor(A, 2)
    metrics.best_rank_approximation(A, 2)
    np.testing.assert_array_equal(A, A0)
    np.testing.assert_array_equal(B, B0)
