r"""Platt scaling as libsvm fits it, for :class:`kernelkit.SVC` with ``probability=True``.

For each one-vs-one pair, :func:`cross_validated_sigmoid` draws libsvm's 5-fold split of the
pair's samples, takes each held-out sample's decision value from a machine fitted on the other
folds, and fits the sigmoid :math:`P(+1 \mid f) = 1 / (1 + \exp(A f + B))` to them by
:func:`sigmoid_train`; at predict time, :func:`sigmoid_predict` gives each pair's
probabilities and :func:`pairwise_coupling` the class probabilities.

References: J. Platt, "Probabilistic outputs for support vector machines", 2000; H.-T. Lin,
C.-J. Lin and R. C. Weng, "A note on Platt's probabilistic outputs for support vector
machines", Machine Learning 68, 2007; T.-F. Wu, C.-J. Lin and R. C. Weng, "Probability
estimates for multi-class classification by pairwise coupling", JMLR 5, 2004 (method 2).
Everything is float64 NumPy.
"""

from __future__ import annotations

import numpy as np
from scipy.special import expit

#: libsvm's folds of the internal cross-validation.
N_FOLDS = 5
#: libsvm's clip of each pair's probability at predict time, to [MIN_PROB, 1 - MIN_PROB].
MIN_PROB = 1e-7


def _platt_loss(z, targets):
    """Platt's negative log-likelihood terms, t z + log(1 + exp(-z)), for z = A f + B."""
    return targets * z + np.logaddexp(0.0, -z)


def sigmoid_train(decision_values, labels):
    """libsvm's ``sigmoid_train``: the A, B of Platt's sigmoid, by Lin, Lin and Weng's Newton
    method.

    Minimises :math:`\\sum_i t_i z_i + \\log(1 + e^{-z_i})`, :math:`z_i = A f_i + B`, with
    Platt's targets :math:`t_i = (N_+ + 1) / (N_+ + 2)` for the positive samples and
    :math:`1 / (N_- + 2)` for the negative ones, from A = 0, B = log((N_- + 1) / (N_+ + 1)):
    Newton steps on the Hessian plus 1e-12 I, each with a backtracking line search (halving
    from 1, sufficient decrease 1e-4 step g.d, given up below 1e-10), at most 100 of them,
    until both gradient components are below 1e-5.

    Parameters
    ----------
    decision_values : ndarray of shape (n_samples,)
        The decision values f_i (float64).
    labels : ndarray of shape (n_samples,), dtype=bool
        True for the positive class.

    Returns
    -------
    A, B : float
    """
    f = np.asarray(decision_values, dtype=np.float64)
    positive = np.asarray(labels, dtype=bool)
    prior1 = float(positive.sum())
    prior0 = float(len(positive) - prior1)
    targets = np.where(positive, (prior1 + 1.0) / (prior1 + 2.0), 1.0 / (prior0 + 2.0))
    A, B = 0.0, float(np.log((prior0 + 1.0) / (prior1 + 1.0)))
    fval = _platt_loss(f * A + B, targets).sum()
    for _ in range(100):
        z = f * A + B
        p = expit(-z)  # 1 / (1 + exp(z)), the sigmoid's probability of the positive class
        d2 = p * (1.0 - p)
        d1 = targets - p
        h11, h22, h21 = (f * f * d2).sum() + 1e-12, d2.sum() + 1e-12, (f * d2).sum()
        g1, g2 = (f * d1).sum(), d1.sum()
        if abs(g1) < 1e-5 and abs(g2) < 1e-5:
            break
        det = h11 * h22 - h21 * h21
        dA = -(h22 * g1 - h21 * g2) / det
        dB = -(-h21 * g1 + h11 * g2) / det
        gd = g1 * dA + g2 * dB
        step = 1.0
        while step >= 1e-10:
            newA, newB = A + step * dA, B + step * dB
            newf = _platt_loss(f * newA + newB, targets).sum()
            if newf < fval + 1e-4 * step * gd:
                A, B, fval = newA, newB, newf
                break
            step /= 2.0
        else:  # the line search failed: libsvm stops at the current point
            break
    return A, B


def sigmoid_predict(decision_values, A, B):
    """libsvm's ``sigmoid_predict``: :math:`1 / (1 + \\exp(A f + B))`, the probability of the
    positive class.

    Parameters
    ----------
    decision_values : ndarray
    A, B : float

    Returns
    -------
    ndarray of the shape of ``decision_values``
    """
    return expit(-(np.asarray(decision_values, dtype=np.float64) * A + B))


def pairwise_coupling(r):
    """libsvm's ``multiclass_probability``: class probabilities from pairwise ones, by method
    2 of Wu, Lin and Weng.

    Minimises :math:`p^T Q p` over the simplex, :math:`Q_{tt} = \\sum_{j \\ne t} r_{jt}^2`,
    :math:`Q_{tj} = -r_{jt} r_{tj}`, by libsvm's fixed-point iteration: from p = 1/k, sweeps
    of coordinate updates :math:`p_t \\mathrel{+}= (p^T Q p - (Q p)_t) / Q_{tt}` each followed
    by renormalisation to sum 1, until :math:`\\max_t |(Q p)_t - p^T Q p| < 0.005 / k`, at
    most max(100, k) sweeps; each sample stops at its own sweep, as libsvm's per-sample loop.

    Parameters
    ----------
    r : ndarray of shape (n_samples, k, k)
        r[:, i, j] = P(class i | class i or j), r[:, j, i] = 1 - r[:, i, j] (the diagonal is
        not read).

    Returns
    -------
    ndarray of shape (n_samples, k)
    """
    r = np.asarray(r, dtype=np.float64)
    n, k = r.shape[0], r.shape[1]
    off = ~np.eye(k, dtype=bool)
    Q = np.where(off, -r * np.swapaxes(r, 1, 2), 0.0)
    Q[:, np.arange(k), np.arange(k)] = (np.where(off, r, 0.0) ** 2).sum(axis=1)  # r[j, t]^2
    p = np.full((n, k), 1.0 / k)
    eps = 0.005 / k
    for _ in range(max(100, k)):
        Qp = np.einsum("nij,nj->ni", Q, p)
        pQp = np.einsum("ni,ni->n", p, Qp)
        active = np.abs(Qp - pQp[:, None]).max(axis=1) >= eps
        if not active.any():
            break
        Qa, pa, Qpa, pQpa = Q[active], p[active], Qp[active], pQp[active]
        for t in range(k):
            diff = (pQpa - Qpa[:, t]) / Qa[:, t, t]
            pa[:, t] += diff
            pQpa = (pQpa + diff * (diff * Qa[:, t, t] + 2 * Qpa[:, t])) / (1 + diff) ** 2
            Qpa = (Qpa + diff[:, None] * Qa[:, t, :]) / (1 + diff[:, None])
            pa /= 1 + diff[:, None]
        p[active] = pa
    return p


class LibsvmRandom:
    """scikit-learn's libsvm random numbers: the 32-bit Mersenne Twister seeded with ``seed``
    (NumPy's legacy ``RandomState(seed)`` draws the same stream) and Lemire's bounded integers
    (scikit-learn's ``bounded_rand_int``).

    Parameters
    ----------
    seed : int
        In [0, 2**31 - 1).
    """

    def __init__(self, seed):
        self.seed = int(seed)
        self.reseed()

    def reseed(self):
        """Restart the stream at ``seed`` (libsvm's ``set_seed``, called by every ``svm_train``)."""
        self._stream = np.random.RandomState(self.seed)

    def _raw(self, size):
        return self._stream.randint(0, 2**32, size=size, dtype=np.uint32).astype(np.uint64)

    def permutation(self, n):
        """libsvm's shuffle of range(n): for i in order, swap i with i + bounded_rand_int(n - i)."""
        ranges = np.arange(n, 0, -1, dtype=np.uint64)
        offsets = np.empty(n, dtype=np.int64)
        i = 0
        while i < n:  # draw all that is left at once; after a rejection, redraw from there
            state = self._stream.get_state()
            m = self._raw(n - i) * ranges[i:]
            rejected = (m & np.uint64(0xFFFFFFFF)) < (np.uint64(2**32) - ranges[i:]) % ranges[i:]
            accepted = int(np.argmax(rejected)) if rejected.any() else n - i
            offsets[i:i + accepted] = (m[:accepted] >> np.uint64(32)).astype(np.int64)
            if accepted < n - i:  # consume the accepted draws and the rejected one only
                self._stream.set_state(state)
                self._raw(accepted + 1)
            i += accepted
        perm = np.arange(n)
        for i, offset in enumerate(offsets):
            j = i + offset
            perm[i], perm[j] = perm[j], perm[i]
        return perm


def cross_validated_sigmoid(labels, held_out_decision, random):
    """libsvm's ``svm_binary_svc_probability``: Platt's A, B of one pair from 5-fold
    cross-validated decision values.

    The folds are the 5 consecutive slices (i n / 5 to (i + 1) n / 5) of
    ``random.permutation(n)``; each fold's decision values come from a machine fitted on the
    other four, except where those hold one class only: +1 (positives only), -1 (negatives
    only) or 0 (no sample), as libsvm. Each fitted fold restarts ``random`` at its seed, as
    libsvm's ``svm_train`` does.

    Parameters
    ----------
    labels : ndarray of shape (n_samples,), dtype=bool
        True for the pair's positive class.
    held_out_decision : callable
        ``held_out_decision(train, test)`` for index arrays into the pair's samples returns the
        decision values of the samples ``test`` (positive for the positive class) of the machine
        fitted on the samples ``train`` (both classes present).
    random : LibsvmRandom

    Returns
    -------
    A, B : float
        As :func:`sigmoid_train`.
    """
    n = len(labels)
    perm = random.permutation(n)
    decision = np.empty(n)
    for fold in range(N_FOLDS):
        begin, end = fold * n // N_FOLDS, (fold + 1) * n // N_FOLDS
        test, train = perm[begin:end], np.concatenate([perm[:begin], perm[end:]])
        positive = labels[train]
        if positive.all() or not positive.any():  # one class or none: +1, -1 or 0
            decision[test] = float(positive.any()) - float((~positive).any())
        else:
            decision[test] = held_out_decision(train, test)
            random.reseed()
    return sigmoid_train(decision, labels)
