r"""``SVC(probability=True)``: Platt scaling fitted as libsvm fits it
(:mod:`kernelkit.estimators._platt`), against independent solutions of the same problems and
against scikit-learn's libsvm.

Tolerances:

* :func:`sigmoid_train` stops where both gradient components are below 1e-5; near the minimum
  the distance to it is at most ``|g| / lambda_min(H)`` (H the Hessian), so the reference
  minimiser and libsvm's Newton method agree within ``sqrt(2) 1e-5 / lambda_min(H)``, computed
  here (the data are sized so that it is below 1e-6).
* :func:`pairwise_coupling` stops where :math:`e = Qp - (p^T Q p) \mathbf 1` has
  :math:`\|e\|_\infty < 0.005 / k`; the exact solution p* has the same form with e = 0 and both
  sum to 1, so d = p - p* is orthogonal to 1 and :math:`P Q d = P e` (P the projection on
  :math:`\mathbf 1^\perp`), giving :math:`\|d\|_2 \le \sqrt k\, 0.005 / k / \lambda`, lambda the
  smallest eigenvalue of Q on :math:`\mathbf 1^\perp`.
* Against scikit-learn: the folds are the same (libsvm's Mersenne Twister and bounded integers,
  seeded as scikit-learn seeds them), so the fits differ only where the two SMO solvers stop
  and by libsvm's float32 kernel cache: each machine's decision values move by about
  :math:`n C (2^{-24} + tol)` (dual coefficients in [0, C], kernel values rounded to float32,
  a stopping gap ``tol``); Platt's sigmoid has slope at most |A| / 4 in f and its refit on
  decision values that move by Delta moves A f + B by a few |A| Delta, so probabilities and
  A, B are compared within ``4 |A| n C (2^-24 + tol)``.
"""

import warnings

import numpy as np
import pytest
from scipy.optimize import minimize
from sklearn import svm as sksvm
from sklearn.datasets import make_blobs
from sklearn.exceptions import NotFittedError
from sklearn.metrics.pairwise import rbf_kernel

from kernelkit import SVC
from kernelkit.estimators import _platt

TOL = 1e-8  # both libraries' tol in the comparisons


def _platt_data(rng, n, positive_fraction):
    labels = rng.random(n) < positive_fraction
    return np.where(labels, 1.5, -1.0) + rng.normal(scale=1.2, size=n), labels


def _reference_sigmoid(f, labels):
    """Minimise Platt's regularised negative log-likelihood, written here as
    -sum t log p + (1 - t) log(1 - p), p = 1 / (1 + exp(A f + B)), by BFGS."""
    n_pos, n_neg = labels.sum(), (~labels).sum()
    t = np.where(labels, (n_pos + 1) / (n_pos + 2), 1 / (n_neg + 2))

    def loss(theta):
        z = theta[0] * f + theta[1]
        value = np.sum(np.logaddexp(0, z) - (1 - t) * z)  # -log p = log(1 + e^z)
        dz = 1 / (1 + np.exp(-z)) - (1 - t)
        return value, np.array([dz @ f, dz.sum()])

    theta = minimize(loss, np.zeros(2), jac=True, method="BFGS", options={"gtol": 1e-12}).x
    p = 1 / (1 + np.exp(theta[0] * f + theta[1]))
    w = p * (1 - p)
    hessian = np.array([[w @ (f * f), w @ f], [w @ f, w.sum()]])
    return theta, np.linalg.eigvalsh(hessian)[0]


@pytest.mark.parametrize("n, positive_fraction", [(400, 0.5), (600, 0.15)])
def test_sigmoid_train_minimises_platt_objective(rng, n, positive_fraction):
    f, labels = _platt_data(rng, n, positive_fraction)
    theta, lambda_min = _reference_sigmoid(f, labels)
    bound = np.sqrt(2) * 1e-5 / lambda_min
    assert bound < 1e-6
    np.testing.assert_allclose(_platt.sigmoid_train(f, labels), theta, rtol=0, atol=bound)


def test_sigmoid_predict_is_platts_sigmoid():
    f = np.array([-800.0, -2.0, 0.0, 3.0, 800.0])
    expected = np.array([0.0, 1 / (1 + np.exp(5.0)), 1 / (1 + np.exp(1.0)),
                         1 / (1 + np.exp(-5.0)), 1.0])  # 1 / (1 + exp(-2 f + 1))
    np.testing.assert_allclose(_platt.sigmoid_predict(f, -2.0, 1.0), expected, rtol=1e-15,
                               atol=0)


def _method2_solution(r):
    """Wu, Lin and Weng's method 2 as the linear system of its optimality conditions,
    [[2Q, 1], [1^T, 0]] [p; b] = [0; 1], and lambda_min of Q on the sum-zero subspace."""
    k = len(r)
    Q = np.zeros((k, k))
    for t in range(k):
        for j in range(k):
            if j != t:
                Q[t, t] += r[j, t] ** 2
                Q[t, j] = -r[j, t] * r[t, j]
    system = np.block([[2 * Q, np.ones((k, 1))], [np.ones((1, k)), np.zeros((1, 1))]])
    p = np.linalg.solve(system, np.r_[np.zeros(k), 1.0])[:k]
    basis = np.linalg.qr(np.c_[np.ones(k), np.eye(k)[:, :k - 1]])[0][:, 1:]  # of 1-perp
    return p, np.linalg.eigvalsh(basis.T @ Q @ basis)[0]


@pytest.mark.parametrize("k", [2, 3, 5, 8])
def test_pairwise_coupling_solves_method_2(rng, k):
    n = 25
    r = np.zeros((n, k, k))
    i, j = np.triu_indices(k, 1)
    upper = rng.uniform(0.02, 0.98, size=(n, len(i)))
    r[:, i, j], r[:, j, i] = upper, 1 - upper
    p = _platt.pairwise_coupling(r)
    np.testing.assert_allclose(p.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    for row, r_row in zip(p, r):
        expected, lam = _method2_solution(r_row)
        assert np.linalg.norm(row - expected) <= np.sqrt(k) * 0.005 / k / lam


def _libsvm_permutation(n, seed):
    """libsvm's shuffle with scikit-learn's bounded_rand_int, transcribed draw by draw from
    newrand.h (mt19937 outputs from NumPy's legacy RandomState); also counts the rejections."""
    stream = np.random.RandomState(seed)
    perm, rejections = list(range(n)), 0
    for i in range(n):
        bound = n - i
        m = int(stream.randint(0, 2**32, dtype=np.uint32)) * bound
        low = m & 0xFFFFFFFF
        if low < bound:
            t = 2**32 - bound
            if t >= bound:
                t -= bound
                if t >= bound:
                    t %= bound
            while low < t:
                m = int(stream.randint(0, 2**32, dtype=np.uint32)) * bound
                low = m & 0xFFFFFFFF
                rejections += 1
        j = i + (m >> 32)
        perm[i], perm[j] = perm[j], perm[i]
    return np.array(perm), rejections


def test_libsvm_random_stream_and_permutation():
    # C++'s [rand.predef]: the 10000th output of mt19937 with the default seed 5489
    assert _platt.LibsvmRandom(5489)._raw(10000)[-1] == 4123659995
    for n, seed in [(1, 3), (7, 11), (100_000, 4)]:
        expected, rejections = _libsvm_permutation(n, seed)
        random = _platt.LibsvmRandom(seed)
        np.testing.assert_array_equal(random.permutation(n), expected)
        if n == 100_000:
            assert rejections > 0  # the rejection path ran
            # the stream continues after exactly the draws used
            stream = np.random.RandomState(seed)
            stream.randint(0, 2**32, size=n + rejections, dtype=np.uint32)
            assert random._raw(1)[0] == stream.randint(0, 2**32, dtype=np.uint32)


def _blobs(n, k, seed):
    return make_blobs(n_samples=n, centers=k, cluster_std=2.5, random_state=seed)


CASES = {  # name -> (n, classes, kernelkit's and scikit-learn's extra arguments, weights)
    "binary": (120, 2, {"C": 1.0}, False),
    "three-class-weighted": (150, 3, {"C": 2.0, "class_weight": {0: 0.5, 2: 3.0}}, True),
    "four-class-precomputed": (160, 4, {"C": 1.0, "kernel": "precomputed"}, False),
}


@pytest.mark.parametrize("case", list(CASES))
def test_matches_scikit_learn(case):
    n, k, params, weighted = CASES[case]
    X, y = _blobs(n, k, seed=1)
    Xt, _ = _blobs(60, k, seed=2)
    sample_weight = np.random.default_rng(0).uniform(0.5, 2.0, n) if weighted else None
    if params.get("kernel") == "precomputed":
        X, Xt = rbf_kernel(X, X, gamma=0.1), rbf_kernel(Xt, X, gamma=0.1)
    X_before = X.copy()
    ours = SVC(probability=True, random_state=7, tol=TOL, device="cpu", **params)
    ours.fit(X, y, sample_weight=sample_weight)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # scikit-learn 1.9 deprecates it
        theirs = sksvm.SVC(probability=True, random_state=7, tol=TOL, **params)
        theirs.fit(X, y, sample_weight=sample_weight)
        prob_a, prob_b = theirs.probA_, theirs.probB_
    np.testing.assert_array_equal(X, X_before)
    C = params["C"] * max([1.0, *params.get("class_weight", {}).values()]) * (
        sample_weight.max() if weighted else 1.0)
    atol = 4 * np.abs(prob_a).max() * n * C * (2.0**-24 + TOL)
    assert ours.probA_.shape == ours.probB_.shape == (k * (k - 1) // 2,)
    assert np.all(ours.probA_ < 0)  # libsvm's sign: a larger f, a larger P(class i)
    np.testing.assert_allclose(ours.probA_, prob_a, rtol=0, atol=atol)
    np.testing.assert_allclose(ours.probB_, prob_b, rtol=0, atol=atol)
    proba = ours.predict_proba(Xt)
    expected = theirs.predict_proba(Xt)
    np.testing.assert_allclose(proba, expected, rtol=0, atol=atol)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    top2 = np.sort(expected, axis=1)[:, -2:]
    clear = top2[:, 1] - top2[:, 0] > 2 * atol
    assert clear.mean() > 0.9
    np.testing.assert_array_equal(proba.argmax(axis=1)[clear], expected.argmax(axis=1)[clear])
    np.testing.assert_allclose(ours.predict_log_proba(Xt), np.log(proba), rtol=1e-15, atol=0)


def test_binary_proba_follows_decision_function():
    """Two classes: P(classes_[0]) is Platt's sigmoid of libsvm's decision value, the opposite
    of decision_function, up to where libsvm's coupling iteration stops (for k = 2, lambda of
    the module docstring is 1/2)."""
    X, y = _blobs(80, 2, seed=3)
    model = SVC(probability=True, random_state=0, device="cpu").fit(X, y)
    f = model.decision_function(X)
    sigmoid = 1 / (1 + np.exp(model.probA_[0] * -f + model.probB_[0]))
    proba = model.predict_proba(X)
    bound = np.sqrt(2) * 0.005 / 2 / 0.5
    np.testing.assert_allclose(proba[:, 0], sigmoid, rtol=0, atol=bound)
    clear = np.abs(sigmoid - 0.5) > bound
    assert clear.mean() > 0.9
    np.testing.assert_array_equal(proba[clear].argmax(axis=1), (sigmoid[clear] < 0.5))


def test_random_state_seeds_the_folds():
    X, y = _blobs(60, 2, seed=4)
    fit = lambda state: SVC(probability=True, random_state=state, device="cpu").fit(X, y)
    first, again, other = fit(0), fit(0), fit(1)
    np.testing.assert_array_equal(first.probA_, again.probA_)
    np.testing.assert_array_equal(first.probB_, again.probB_)
    assert first.probA_[0] != other.probA_[0]


def test_probability_false_hides_predict_proba():
    X, y = _blobs(40, 2, seed=5)
    model = SVC(device="cpu")
    assert not hasattr(model, "predict_proba")
    assert not hasattr(model, "predict_log_proba")
    model.fit(X, y)
    with pytest.raises(AttributeError, match="has no attribute 'predict_proba'") as raised:
        model.predict_proba(X)
    assert str(raised.value.__cause__) == "predict_proba is not available when probability=False"
    assert model.probA_.shape == model.probB_.shape == (0,)
    model.set_params(probability=True)
    with pytest.raises(NotFittedError, match="predict_proba is not available when fitted "
                                             "with probability=False"):
        model.predict_proba(X)


def test_bad_probability():
    X, y = _blobs(40, 2, seed=5)
    with pytest.raises(TypeError, match="probability must be True or False; got 'yes'"):
        SVC(probability="yes", device="cpu").fit(X, y)
