r"""libsvm's dual problem solved by batched sequential minimal optimisation (SMO).

:func:`solve` minimises the dual of every support vector machine of libsvm (Chang and Lin,
2011), in libsvm's form

.. math::

    \min_a\ f(a) = \tfrac12 a^T Q a + p^T a \quad\text{subject to}\quad y^T a = \Delta,
    \qquad 0 \le a_t \le C_t,

with :math:`y_t = \pm 1` and :math:`Q_{st} = y_s y_t K_{st}`, K a kernel matrix over the
variables' points (SVC: p = -1; SVR: 2n variables, p = epsilon - y and epsilon + y; one-class:
p = 0, y = 1, :math:`\Delta = \nu n`, C = 1), without forming K: the solver asks for kernel rows
through ``rows(indices) = K[indices, :]`` and keeps them in a least-recently-used cache bounded
in bytes.

The outer loop is ThunderSVM's (Wen et al., 2018): the gradient G = Q a + p is known for every
variable; with :math:`u_t = -y_t G_t`,

.. math::

    I_{up} = \{t : a_t < C_t, y_t = 1 \text{ or } a_t > 0, y_t = -1\}, \qquad
    I_{low} = \{t : a_t < C_t, y_t = -1 \text{ or } a_t > 0, y_t = 1\},

    m(a) = \max_{t \in I_{up}} u_t, \qquad M(a) = \min_{t \in I_{low}} u_t,

a is optimal when m(a) <= M(a), and the solver stops at :math:`m(a) - M(a) \le` ``tol``,
libsvm's stopping rule and its meaning of ``tol``. Each outer step takes a working set of at
most ``working_set`` variables, the half of it with the largest u in :math:`I_{up}` and the half
with the smallest u in :math:`I_{low}` (so it always holds libsvm's maximal violating pair),
solves the subproblem over them (the other variables fixed) by pairwise SMO on its q x q block
of K with libsvm's second-order working-set selection (WSS3 of Fan, Chen and Lin, 2005:
:math:`i = \arg\max_{t \in I_{up}} u_t`, then
:math:`j = \arg\min_{t \in I_{low}, u_t < u_i} -(u_i - u_t)^2 / (K_{ii} + K_{tt} - 2 K_{it})`,
the denominator replaced by 1e-12 where it is not positive) and libsvm's clipped pair update,
until the subproblem's own gap falls to a tenth of its start (or ``tol``); then updates the
whole gradient by one product, G += Q[:, W] (a_W - a_W^old), in float64.

The intercept is libsvm's: :math:`\rho` is the mean of :math:`y_t G_t` over the free variables
(0 < a_t < C_t), else the midpoint of the interval the bounded ones allow; the decision
function of the machine is :math:`\sum_t y_t a_t k(x, x_t) - \rho`.

Shrinking (``shrinking=True``; libsvm's ``Solver::do_shrinking``, Fan, Chen and Lin, 2005):
after every outer step, a variable at a bound that cannot enter a violating pair given the
current m(a) and M(a) of the active variables (libsvm's ``be_shrunk``: in I_up only with
:math:`u_t < M(a)`, or in I_low only with :math:`u_t > m(a)`) leaves the active set; working
sets are taken from the active variables only, and only their gradient is updated. The
removed variables' gradient is rebuilt from scratch, :math:`G_t = p_t + y_t \sum_{s: a_s > 0}
K_{ts} y_s a_s` by the float64 kernel rows of the variables with :math:`a_s > 0`, and every
variable made active again (libsvm's ``reconstruct_gradient``): once when the active gap first
reaches 10 ``tol`` (libsvm's ``unshrink`` step), and whenever the solver would stop (the gap at
most ``tol``, no pair able to move, or ``max_iter``), after which the stopping rule is checked
again on the whole problem. The answer obeys the same stopping rule on the full problem with or
without shrinking.

Precision: a, G, the subproblem and every reduction are float64 torch tensors on the device of
the kernel rows.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import NamedTuple

import torch

__all__ = ["SMOResult", "RowCache", "solve", "objective", "WORKING_SET", "TAU"]

#: Most variables of one outer step's working set (ThunderSVM's batch).
WORKING_SET = 512
#: libsvm's stand-in for a curvature K_ii + K_jj - 2 K_ij that is not positive.
TAU = 1e-12


class SMOResult(NamedTuple):
    """The output of :func:`solve`.

    Attributes
    ----------
    alpha : torch.Tensor of shape (n_variables,)
        The solution a, float64.
    gradient : torch.Tensor of shape (n_variables,)
        Q a + p at the solution, float64.
    rho : float
        libsvm's rho (the decision function's constant is -rho).
    gap : float
        m(a) - M(a) at exit (-inf where one of the two sets is empty).
    n_iter : int
        Pairwise SMO steps, over all outer steps (libsvm's iteration count).
    converged : bool
        The gap is at most ``tol``; False where ``max_iter`` steps ran out first.
    """

    alpha: torch.Tensor
    gradient: torch.Tensor
    rho: float
    gap: float
    n_iter: int
    converged: bool


class RowCache:
    """Kernel rows ``rows(indices) = K[indices, :]`` kept in least-recently-used order, at most
    ``max_bytes`` of them (at least one working set's rows are always held while in use).

    Parameters
    ----------
    rows : callable
        ``rows(indices)`` for a 1-D int64 tensor of kernel-row indices returns a float64 tensor
        of shape (len(indices), n_points).
    max_bytes : int
        Bytes of rows kept between calls.
    """

    def __init__(self, rows, max_bytes):
        self.rows = rows
        self.max_bytes = int(max_bytes)
        self.kept = OrderedDict()
        self.computed = 0

    def __call__(self, indices):
        """K[indices, :] as a float64 tensor, computing only the rows not in the cache."""
        wanted = indices.tolist()
        missing = sorted({i for i in wanted if i not in self.kept})
        if missing:
            fresh = self.rows(torch.tensor(missing, dtype=torch.int64))
            self.computed += len(missing)
            for i, row in zip(missing, fresh):
                self.kept[i] = row
        for i in wanted:
            self.kept.move_to_end(i)
        out = torch.stack([self.kept[i] for i in wanted])
        row_bytes = out.shape[1] * out.element_size()
        while len(self.kept) > max(len(wanted), self.max_bytes // max(row_bytes, 1)):
            self.kept.popitem(last=False)
        return out


def objective(alpha, gradient, p):
    """f(a) = 1/2 a^T Q a + p^T a from a and its gradient G = Q a + p: (a^T (G + p)) / 2."""
    return float(alpha @ (gradient + p)) / 2


def _sets(alpha, y, C):
    """Boolean masks of I_up and I_low."""
    below, above = alpha < C, alpha > 0
    positive = y > 0
    return (positive & below) | (~positive & above), (positive & above) | (~positive & below)


def _gap(u, up, low):
    """m(a) - M(a) (-inf when one of the sets is empty)."""
    if not bool(up.any()) or not bool(low.any()):
        return float("-inf")
    return float(u[up].max() - u[low].min())


def rho(alpha, gradient, y, C):
    """libsvm's rho: the mean of y_t G_t over free variables, else the midpoint of the bounds
    the variables at a bound set on it."""
    yG = y * gradient
    at_upper, at_lower = alpha >= C, alpha <= 0
    free = ~(at_upper | at_lower)
    if bool(free.any()):
        return float(yG[free].mean())
    positive = y > 0
    ub_mask = (at_upper & ~positive) | (at_lower & positive)
    lb_mask = (at_upper & positive) | (at_lower & ~positive)
    ub = float(yG[ub_mask].min()) if bool(ub_mask.any()) else float("inf")
    lb = float(yG[lb_mask].max()) if bool(lb_mask.any()) else float("-inf")
    return (ub + lb) / 2


def _pair_update(ai, aj, yi, yj, Ci, Cj, Gi, Gj, Kii, Kjj, Kij):
    """libsvm's analytic step on the pair (i, j), clipped to the box; the new (a_i, a_j)."""
    if yi != yj:
        quad = Kii + Kjj - 2 * Kij  # Q_ii + Q_jj + 2 Q_ij with Q_ij = -K_ij
        delta = (-Gi - Gj) / (quad if quad > 0 else TAU)
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
        quad = Kii + Kjj - 2 * Kij
        delta = (Gi - Gj) / (quad if quad > 0 else TAU)
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


def _subproblem(alpha, G, y, C, K, tol, budget):
    """Pairwise SMO with WSS3 on one working set (its a, G, y, C and q x q block K, modified in
    place) until its gap is at most ``tol`` or ``budget`` steps ran; the steps taken."""
    diagK = torch.diagonal(K)
    steps = 0
    while steps < budget:
        u = -y * G
        up, low = _sets(alpha, y, C)
        if not bool(up.any()) or not bool(low.any()):
            break
        u_up = torch.where(up, u, torch.tensor(float("-inf"), dtype=u.dtype))
        i = int(torch.argmax(u_up))
        ui = float(u[i])
        grad_diff = ui - u
        candidates = low & (grad_diff > 0)
        if ui - float(u[low].min()) <= tol or not bool(candidates.any()):
            break
        quad = diagK[i] + diagK - 2 * K[i]
        quad = torch.where(quad > 0, quad, torch.full_like(quad, TAU))
        score = torch.where(candidates, -grad_diff * grad_diff / quad,
                            torch.tensor(float("inf"), dtype=u.dtype))
        j = int(torch.argmin(score))
        old_i, old_j = float(alpha[i]), float(alpha[j])
        new_i, new_j = _pair_update(old_i, old_j, float(y[i]), float(y[j]), float(C[i]),
                                    float(C[j]), float(G[i]), float(G[j]), float(K[i, i]),
                                    float(K[j, j]), float(K[i, j]))
        alpha[i], alpha[j] = new_i, new_j
        # G += Q[:, i] da_i + Q[:, j] da_j with Q[:, t] = y y_t K[:, t]
        G += y * (K[:, i] * (y[i] * (new_i - old_i)) + K[:, j] * (y[j] * (new_j - old_j)))
        steps += 1
    return steps


def _working_set(u, up, low, q):
    """Up to q indices: the q/2 largest u in I_up and the q/2 smallest in I_low (their union,
    filled from the longer list when one is short)."""
    inf = torch.tensor(float("inf"), dtype=u.dtype, device=u.device)
    order_up = torch.argsort(torch.where(up, -u, inf))[:int(up.sum())]
    order_low = torch.argsort(torch.where(low, u, inf))[:int(low.sum())]
    half = q // 2
    take_up = min(len(order_up), max(half, q - len(order_low)))
    take_low = min(len(order_low), q - take_up)
    chosen = torch.cat([order_up[:take_up], order_low[:take_low]])
    return torch.unique(chosen)


def _shrunk(u, up, low, alpha, C, gap_ends):
    """libsvm's ``be_shrunk``: the variables at a bound that cannot be in a violating pair given
    ``gap_ends`` = (m(a), M(a)): in I_up only with u_t < M(a), or in I_low only with u_t > m(a)."""
    m, M = gap_ends
    bounded = (alpha <= 0) | (alpha >= C)
    return bounded & ((up & ~low & (u < M)) | (low & ~up & (u > m)))


def _reconstruct(cache, index, y, alpha, p, G, stale, chunk):
    """libsvm's ``reconstruct_gradient``: G[stale] = p + Q[stale, :] a from scratch, by the
    float64 kernel rows of the variables with a > 0, ``chunk`` rows at a time."""
    support = torch.nonzero(alpha).flatten()
    G[stale] = p[stale]
    columns = index[stale]
    for begin in range(0, len(support), chunk):
        part = support[begin:begin + chunk]
        G[stale] += y[stale] * (cache(index[part])[:, columns].T @ (y[part] * alpha[part]))


def solve(rows, p, y, C, alpha, *, index=None, tol=1e-3, max_iter=-1,
          working_set=WORKING_SET, cache_bytes=200 * 2**20, shrinking=True):
    r"""Solve libsvm's dual (module docstring) from a feasible start ``alpha``.

    Parameters
    ----------
    rows : callable
        ``rows(indices) = K[indices, :]`` for a 1-D int64 tensor of kernel-point indices: a
        float64 tensor of shape (len(indices), n_points) on the solver's device.
    p : torch.Tensor of shape (n_variables,)
        The linear term, float64.
    y : torch.Tensor of shape (n_variables,)
        Labels +1 / -1, float64.
    C : torch.Tensor of shape (n_variables,)
        Upper bounds, float64, > 0.
    alpha : torch.Tensor of shape (n_variables,)
        A feasible start (0 <= a <= C, y^T a = Delta), float64; not modified.
    index : torch.Tensor of shape (n_variables,), optional
        The kernel point of each variable (SVR: t mod n); default the identity.
    tol : float, default=1e-3
        Stop at m(a) - M(a) <= tol.
    max_iter : int, default=-1
        Most pairwise steps in all; -1: libsvm's own limit, max(10^7, 100 n_variables).
    working_set : int, default=:data:`WORKING_SET`
        Variables per outer step (at least 2).
    cache_bytes : int, default=200 MiB
        Bound of the kernel-row cache.
    shrinking : bool, default=True
        Remove the variables stuck at a bound after every outer step (module docstring); the
        stopping rule is checked on the whole problem either way.

    Returns
    -------
    SMOResult
    """
    n_var = y.shape[0]
    device = y.device
    if index is None:
        index = torch.arange(n_var, device=device)
    alpha = alpha.clone()
    cache = RowCache(rows, cache_bytes)
    start = torch.nonzero(alpha).flatten()
    G = p.clone()
    if len(start):
        K_start = cache(torch.unique(index[start]))
        lookup = {int(k): r for r, k in enumerate(torch.unique(index[start]).tolist())}
        at = torch.tensor([lookup[int(k)] for k in index[start].tolist()], device=device)
        G += y * (K_start[at][:, index].T @ (y[start] * alpha[start]))
    if max_iter < 0:
        max_iter = max(10_000_000, 100 * n_var)
    active = torch.ones(n_var, dtype=torch.bool, device=device)
    unshrunk = False  # libsvm's one unshrinking when the gap first reaches 10 tol
    n_iter = 0
    steps = None
    while True:
        u = -y * G
        up, low = _sets(alpha, y, C)
        up, low = up & active, low & active
        gap = _gap(u, up, low)
        stopping = gap <= tol or n_iter >= max_iter or steps == 0
        first_near = not unshrunk and gap <= 10 * tol
        unshrunk = unshrunk or first_near
        if (stopping or first_near) and not bool(active.all()):
            _reconstruct(cache, index, y, alpha, p, G, ~active, working_set)
            active[:] = True
            steps = None
            continue  # the stopping rule again, on the whole problem
        if stopping:
            break
        if shrinking:
            active &= ~_shrunk(u, up, low, alpha, C, (float(u[up].max()), float(u[low].min())))
            up, low = up & active, low & active
        ws = _working_set(u, up, low, working_set)
        points = index[ws]
        K_rows = cache(points)  # (q, n_points)
        K_ws = K_rows[:, points]
        a_ws, G_ws = alpha[ws].clone(), G[ws].clone()
        local_gap = _gap(-y[ws] * G_ws, *_sets(a_ws, y[ws], C[ws]))
        budget = min(10 * len(ws), max_iter - n_iter)
        steps = _subproblem(a_ws, G_ws, y[ws], C[ws], K_ws, max(tol, local_gap / 10), budget)
        if steps == 0:  # no pair of the working set can move: numerically converged
            continue
        n_iter += steps
        change = a_ws - alpha[ws]
        alpha[ws] = a_ws
        moved = change != 0
        kept = torch.nonzero(active).flatten()
        G[kept] += y[kept] * (K_rows[moved][:, index[kept]].T @ (y[ws][moved] * change[moved]))
    return SMOResult(alpha, G, rho(alpha, G, y, C), gap, n_iter, gap <= tol)
