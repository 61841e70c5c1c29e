r"""Float64 reference of one SMO subproblem: libsvm's pairwise steps on a working set.

The dual of every support vector machine of libsvm restricted to q variables (the others
fixed) is

.. math::

    \min_a\ \tfrac12 a^T Q a + G_0^T a \quad\text{subject to}\quad y^T a = \text{const},
    \qquad 0 \le a_t \le C_t,

with :math:`y_t = \pm 1` and :math:`Q_{st} = y_s y_t K_{st}` (K the q x q kernel block); G is
its gradient Q a + G_0 at the current a. :func:`subproblem` runs libsvm's pairwise SMO on it
(Fan, Chen and Lin, 2005): with :math:`u_t = -y_t G_t` and

.. math::

    I_{up} = \{t : a_t < C_t, y_t = 1 \text{ or } a_t > 0, y_t = -1\}, \qquad
    I_{low} = \{t : a_t < C_t, y_t = -1 \text{ or } a_t > 0, y_t = 1\},

each step takes :math:`i = \arg\max_{t \in I_{up}} u_t` and (WSS3, second order)
:math:`j = \arg\min_{t \in I_{low}, u_t < u_i} -(u_i - u_t)^2 / \text{quad}_t` with
:math:`\text{quad}_t = K_{ii} + K_{tt} - 2 K_{it}` (:data:`TAU` where that is not positive),
moves (a_i, a_j) by libsvm's clipped analytic step (:func:`pair_update`) and updates G with rows
i and j of K. It stops when :math:`u_i - \min_{I_{low}} u \le` ``tol``, when no t qualifies
for j, when one of the two sets is empty, or after ``budget`` steps. Ties go to the first
index (``numpy.argmax`` / ``argmin``).

This is the specification of the Triton kernel :mod:`kernelkit_gpu.smo_subproblem` (the same
float64 operations in the same order) and the CPU path of :func:`kernelkit.linalg.smo.solve`.
Inputs are converted to float64 and never modified; they must be finite.

:func:`combine_rows` is the solver's gradient product over kernel rows, sum_t c_t K[t, :], in
the order that makes each column's sum independent of the other columns (the specification of
:mod:`kernelkit_gpu.smo_combine`).
"""

from __future__ import annotations

import numpy as np

__all__ = ["TAU", "combine_rows", "pair_update", "subproblem"]

#: libsvm's stand-in for a curvature K_ii + K_jj - 2 K_ij that is not positive.
TAU = 1e-12


def pair_update(ai, aj, yi, yj, Ci, Cj, Gi, Gj, Kii, Kjj, Kij):
    """libsvm's analytic step on the pair (i, j), clipped to the box (``Solver::Solve``).

    The unconstrained minimiser along the feasible direction of the pair, then clipped so that
    both variables stay in [0, C] with y_i a_i + y_j a_j unchanged.

    Parameters
    ----------
    ai, aj : float
        The current a_i, a_j.
    yi, yj : float
        Their labels, +1 or -1.
    Ci, Cj : float
        Their upper bounds.
    Gi, Gj : float
        Their gradients.
    Kii, Kjj, Kij : float
        Kernel values.

    Returns
    -------
    (float, float)
        The new (a_i, a_j).

    Examples
    --------
    >>> pair_update(0.0, 0.0, 1.0, -1.0, 1.0, 1.0, -1.0, -1.0, 1.0, 1.0, 0.0)
    (1.0, 1.0)
    """
    ai, aj, Gi, Gj = float(ai), float(aj), float(Gi), float(Gj)
    Ci, Cj, Kii, Kjj, Kij = float(Ci), float(Cj), float(Kii), float(Kjj), float(Kij)
    quad = Kii + Kjj - 2 * Kij
    if not quad > 0:
        quad = TAU
    if yi != yj:  # Q_ii + Q_jj + 2 Q_ij with Q_ij = -K_ij
        delta = (-Gi - Gj) / quad
        diff = ai - aj
        ai, aj = ai + delta, aj + delta
        if diff > 0:
            if aj < 0:
                aj, ai = 0.0, diff
        elif ai < 0:
            ai, aj = 0.0, -diff
        if diff > Ci - Cj:
            if ai > Ci:
                ai, aj = Ci, Ci - diff
        elif aj > Cj:
            aj, ai = Cj, Cj + diff
    else:
        delta = (Gi - Gj) / quad
        total = ai + aj
        ai, aj = ai - delta, aj + delta
        if total > Ci:
            if ai > Ci:
                ai, aj = Ci, total - Ci
        elif aj < 0:
            aj, ai = 0.0, total
        if total > Cj:
            if aj > Cj:
                aj, ai = Cj, total - Cj
        elif ai < 0:
            ai, aj = 0.0, total
    return ai, aj


def subproblem(alpha, G, y, C, K, tol, budget):
    """Pairwise SMO with WSS3 on one working set (module docstring).

    Parameters
    ----------
    alpha : array_like of shape (q,)
        A feasible start, 0 <= a <= C.
    G : array_like of shape (q,)
        The gradient at ``alpha``.
    y : array_like of shape (q,)
        Labels +1 / -1.
    C : array_like of shape (q,)
        Upper bounds, > 0.
    K : array_like of shape (q, q)
        The kernel block of the working set (any float dtype; used in float64).
    tol : float
        Stop at u_i - min over I_low of u <= tol.
    budget : int
        Most steps.

    Returns
    -------
    alpha : ndarray of shape (q,)
        The new a, float64.
    G : ndarray of shape (q,)
        Its gradient, float64.
    steps : int
        Steps taken.

    Examples
    --------
    >>> a, G, steps = subproblem([0.0, 0.0], [-1.0, -1.0], [1.0, -1.0], [1.0, 1.0],
    ...                          [[1.0, 0.0], [0.0, 1.0]], 1e-3, 10)
    >>> a.tolist(), G.tolist(), steps
    ([1.0, 1.0], [0.0, 0.0], 1)
    """
    alpha = np.array(alpha, dtype=np.float64)
    G = np.array(G, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    C = np.asarray(C, dtype=np.float64)
    K = np.asarray(K, dtype=np.float64)
    diag = np.diagonal(K)
    positive = y > 0
    steps = 0
    while steps < budget:
        u = -y * G
        below, above = alpha < C, alpha > 0
        up = (positive & below) | (~positive & above)
        low = (positive & above) | (~positive & below)
        if not up.any() or not low.any():
            break
        i = int(np.argmax(np.where(up, u, -np.inf)))
        grad_diff = u[i] - u
        candidates = low & (grad_diff > 0)
        if u[i] - u[low].min() <= tol or not candidates.any():
            break
        quad = diag[i] + diag - 2 * K[i]
        quad = np.where(quad > 0, quad, TAU)
        j = int(np.argmin(np.where(candidates, -grad_diff * grad_diff / quad, np.inf)))
        old_i, old_j = alpha[i], alpha[j]
        new_i, new_j = pair_update(old_i, old_j, y[i], y[j], C[i], C[j], G[i], G[j], K[i, i],
                                   K[j, j], K[i, j])
        alpha[i], alpha[j] = new_i, new_j
        # G += Q[:, i] da_i + Q[:, j] da_j with Q[:, t] = y y_t K[t, :] (K symmetric)
        G += y * (K[i] * (y[i] * (new_i - old_i)) + K[j] * (y[j] * (new_j - old_j)))
        steps += 1
    return alpha, G, steps


def combine_rows(rows, coef):
    """sum_t coef_t rows[t, :] for every column, summed in the order of t: the first product,
    then each next product added (every product and sum rounded to float64, no fused
    multiply-add).

    Each column's value depends on that column and ``coef`` alone, not on the number of columns
    (nor on threads or a BLAS): any block of columns gives the bits of the whole matrix's
    product, so ranks that each own some columns compute what one process computes.

    Parameters
    ----------
    rows : array_like of shape (q, n)
        Kernel rows (read in float64).
    coef : array_like of shape (q,)
        Their coefficients.

    Returns
    -------
    ndarray of shape (n,)
        Float64; zeros for q = 0.

    Examples
    --------
    >>> combine_rows([[1.0, 2.0], [3.0, 4.0]], [0.5, -1.0]).tolist()
    [-2.5, -3.0]
    """
    rows = np.asarray(rows, dtype=np.float64)
    coef = np.asarray(coef, dtype=np.float64)
    if len(coef) == 0:
        return np.zeros(rows.shape[1])
    out = rows[0] * coef[0]
    term = np.empty_like(out)
    for t in range(1, len(coef)):
        np.multiply(rows[t], coef[t], out=term)
        out += term
    return out
