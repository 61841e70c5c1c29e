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
with the smallest u in :math:`I_{low}`, ties to the lower index (so it always holds libsvm's
maximal violating pair),
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

Where it runs: the subproblem is one Triton program on a CUDA device
(:func:`kernelkit_gpu.smo_subproblem.subproblem`) and its float64 NumPy reference on the CPU
(:func:`kernelkit_math.smo.subproblem`), the same arithmetic. Everything else stays on the
device, and the host waits for it once per outer step, for one array: m(a), M(a), the sizes of
the two sets after shrinking, whether every variable is active, the previous subproblem's step
count and the candidates of the next working set (shrinking and the candidates are computed
before the host knows whether the solver goes on). Index arrays go to the device through pinned
memory, without a wait. The kernel rows are cached in one block of device memory with the
bookkeeping in NumPy on the host (:class:`RowCache`), and the gradient update is one product
K_rows^T (y (a_W - a_W^old))_W over the rows of the working set, each column summed in the order
of the rows (:func:`kernelkit_math.smo.combine_rows`: the same bits for any block of columns).
An outer step is some forty launches (the rows, the product and the subproblem aside): a, G, y
and C are the rows of one state tensor (a working set's four vectors are one gather), the masks
of I_up and I_low and the keys of the two orders are two-row tensors (one sort of both), and
the working set's own gap comes from the keys of m(a) and M(a).

Under a ``torch.distributed`` process group the estimators call
:func:`kernelkit.linalg.smo_sharded.solve` instead: the same steps, the kernel points' columns
sharded over the ranks.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import torch

from kernelkit_math import smo as _reference
from kernelkit_math.smo import TAU

__all__ = ["SMOResult", "RowCache", "solve", "held_bytes", "objective", "WORKING_SET",
           "TAU"]

#: Most variables of one outer step's working set (ThunderSVM's batch).
WORKING_SET = 512


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


def _to_device(values, device):
    """A host int64 array as a tensor on ``device``; to a GPU through pinned memory, without
    waiting for the work queued on it."""
    t = torch.from_numpy(np.ascontiguousarray(values, dtype=np.int64))
    if device.type == "cuda":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


class RowCache:
    """Kernel rows ``rows(indices) = K[indices, :]`` kept in one block of memory on their
    device, evicted least recently used first: rows of at most ``max_bytes`` in all, or of the
    largest request where that is more (a request's rows are all held while in use), and never
    more slots than there are rows.

    The bookkeeping (which point's row is in which slot of the block, and when it was last
    used) is NumPy arrays on the host: a request costs a few array operations and one gather
    on the device, whatever its number of rows.

    Parameters
    ----------
    rows : callable
        ``rows(indices)`` for a 1-D int64 CPU tensor of kernel-row indices returns a float64
        tensor of shape (len(indices), n_columns).
    max_bytes : int
        Bytes of rows kept between calls.
    n_rows : int, optional
        Kernel rows the indices range over; default n_columns (a square kernel matrix; a rank
        of :mod:`kernelkit.linalg.smo_sharded` caches its columns of every row).

    Attributes
    ----------
    computed : int
        Rows computed so far (``rows`` called on them).
    """

    def __init__(self, rows, max_bytes, n_rows=None):
        self.rows = rows
        self.n_rows = n_rows
        self.max_bytes = int(max_bytes)
        self.computed = 0
        self._block = None  # (slots, n_points): the rows held
        self._slot_of = None  # per point: the slot of its row, -1 where none is held
        self._point_of = np.zeros(0, dtype=np.int64)  # per slot: its point, -1 where free
        self._used = np.zeros(0, dtype=np.int64)  # per slot: the call that last used it
        self._calls = 0

    @property
    def kept(self):
        """The points whose rows are held, in increasing order (an int64 array)."""
        if self._slot_of is None:
            return np.zeros(0, dtype=np.int64)
        return np.flatnonzero(self._slot_of >= 0)

    def __call__(self, indices):
        """K[indices, :] (``indices`` a 1-D int64 tensor, best on the CPU), computing only the
        rows not held."""
        wanted = np.asarray(indices.cpu(), dtype=np.int64)
        self._calls += 1
        held = (np.full(len(wanted), -1) if self._slot_of is None else self._slot_of[wanted])
        self._used[held[held >= 0]] = self._calls
        missing = np.unique(wanted[held < 0])
        if len(missing):
            fresh = self.rows(torch.from_numpy(missing))
            self.computed += len(missing)
            self._store(missing, fresh, len(np.unique(wanted)))
        slots = self._slot_of[wanted]
        return self._block.index_select(0, _to_device(slots, self._block.device))

    def _store(self, missing, fresh, n_wanted):
        """Put the rows ``fresh`` of the points ``missing`` in free slots or in place of the
        least recently used rows that this call does not use (the block grown to ``n_wanted``
        rows where it is smaller)."""
        n_points = fresh.shape[1]
        if self._slot_of is None:
            self._slot_of = np.full(n_points if self.n_rows is None else self.n_rows, -1,
                                    dtype=np.int64)
        row_bytes = max(n_points * fresh.element_size(), 1)
        # never more slots than rows (a small problem, or a rank's narrow columns)
        capacity = max(min(self.max_bytes // row_bytes, len(self._slot_of)), n_wanted)
        if self._block is None or len(self._block) < capacity:
            block = torch.empty((capacity, n_points), dtype=fresh.dtype, device=fresh.device)
            extra = capacity - len(self._point_of)
            if self._block is not None:
                block[:len(self._block)] = self._block
            self._block = block
            self._point_of = np.concatenate([self._point_of, np.full(extra, -1)])
            self._used = np.concatenate([self._used, np.zeros(extra, dtype=np.int64)])
        free = np.flatnonzero(self._point_of < 0)
        if len(free) < len(missing):
            # the rows this call uses carry its stamp, the newest, and the block holds at least
            # n_wanted rows: the victims are rows that it does not use
            held = np.flatnonzero(self._point_of >= 0)
            victims = held[np.argsort(self._used[held], kind="stable")][:len(missing) - len(free)]
            self._slot_of[self._point_of[victims]] = -1
            free = np.concatenate([free, victims])
        slots = free[:len(missing)]
        self._point_of[slots] = missing
        self._slot_of[missing] = slots
        self._used[slots] = self._calls
        self._block.index_copy_(0, _to_device(slots, fresh.device), fresh)


def objective(alpha, gradient, p):
    """f(a) = 1/2 a^T Q a + p^T a from a and its gradient G = Q a + p: (a^T (G + p)) / 2."""
    return float(alpha @ (gradient + p)) / 2


def _sets(alpha, y, C):
    """Boolean masks of I_up and I_low."""
    below, above = alpha < C, alpha > 0
    positive = y > 0
    return (positive & below) | (~positive & above), (positive & above) | (~positive & below)


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


def _subproblem(alpha, G, y, C, K, tol, budget):
    """Pairwise SMO with WSS3 on one working set (its a, G, y, C and q x q block K; not
    modified) until its gap is at most ``tol`` (a one-element float64 tensor) or ``budget``
    steps ran (:func:`kernelkit_math.smo.subproblem`): the Triton kernel on a CUDA device, the
    NumPy reference elsewhere. Returns the new a and G and the steps taken (a one-element
    tensor on the device)."""
    if K.is_cuda:
        from kernelkit_gpu import HAS_TRITON, smo_subproblem

        if HAS_TRITON:
            return smo_subproblem.subproblem(alpha, G, y, C, K, tol, budget)
    host = [t.cpu().numpy() for t in (alpha, G, y, C, K)]
    a, g, steps = _reference.subproblem(*host, float(tol), budget)
    return (torch.from_numpy(a).to(K.device), torch.from_numpy(g).to(K.device),
            torch.tensor([steps], device=K.device))


def _combine(rows, coef):
    """sum_t coef_t rows[t, :] (float64, one value per column): the gradient's product over
    kernel rows. Each column is summed over t in order, the same bits whatever the number of
    columns or threads (a BLAS matrix-vector product may round a column differently with the
    matrix's shape or its threads), so a rank's columns under a process group
    (:mod:`kernelkit.linalg.smo_sharded`) equal the single process's: the Triton kernel on a
    CUDA device (:func:`kernelkit_gpu.smo_combine.combine_rows`), its NumPy reference elsewhere
    (:func:`kernelkit_math.smo.combine_rows`)."""
    if rows.is_cuda:
        from kernelkit_gpu import HAS_TRITON, smo_combine

        if HAS_TRITON:
            return smo_combine.combine_rows(rows, coef)
    return torch.from_numpy(_reference.combine_rows(rows.cpu().numpy(),
                                                    coef.cpu().numpy())).to(rows.device)


def _working_set(order_up, order_low, n_up, n_low, q):
    """Up to q indices, sorted and distinct: the q/2 largest u in I_up and the q/2 smallest in
    I_low (their union, filled from the longer list when one is short). ``order_up``: I_up by
    decreasing u, ``order_low``: I_low by increasing u (at least their first q); ``n_up``,
    ``n_low``: the sizes of the two sets."""
    half = q // 2
    take_up = min(n_up, max(half, q - n_low))
    take_low = min(n_low, q - take_up)
    return np.unique(np.concatenate([order_up[:take_up], order_low[:take_low]]))


def _stop_or_unshrink(gap, tol, n_iter, max_iter, ran, last, unshrunk, n_active, n_var):
    """``(stopping, unshrink, unshrunk)`` of one outer step: libsvm's stopping rule (gap <= tol,
    the step limit, or a subproblem that made no step), and whether the shrunk variables come
    back (their gradient rebuilt, the rule then asked again on the whole problem): at a stop
    while some are shrunk, and once when the gap first falls under 10 tol."""
    stopping = gap <= tol or n_iter >= max_iter or (ran and last == 0)
    first_near = not unshrunk and gap <= 10 * tol
    return stopping, (stopping or first_near) and n_active < n_var, unshrunk or first_near


def _shrunk(signed, sets, ends):
    """libsvm's ``be_shrunk``: the variables that cannot be in a violating pair given
    ``ends`` = (-m(a), M(a)): in I_up only with u_t < M(a), or in I_low only with u_t > m(a)
    (``signed`` = (-u, u), ``sets`` = (I_up, I_low)). Such a variable is at a bound: a free one
    is in both sets (C > 0)."""
    up, low = sets
    beyond = signed < ends[:, None]  # (u > m(a), u < M(a))
    return torch.where(up, ~low & beyond[1], low & beyond[0])


def _reconstruct(cache, points, index, y, alpha, p, G, stale, chunk):
    """libsvm's ``reconstruct_gradient``: G with G[stale] = p + Q[stale, :] a from scratch, by
    the float64 kernel rows of the variables with a > 0, ``chunk`` rows at a time (``points``:
    the kernel point of each variable on the host; ``index``: the same on the device, None for
    the identity)."""
    support = torch.nonzero(alpha).flatten()
    coef = y[support] * alpha[support]
    support = support.cpu().numpy()
    w = None  # K[:, support] (y a)[support] over all kernel points
    for begin in range(0, len(support), chunk):
        rows = cache(torch.from_numpy(points[support[begin:begin + chunk]]))
        part = _combine(rows, coef[begin:begin + chunk])
        w = part if w is None else w + part
    if w is not None and index is not None:
        w = w[index]
    return torch.where(stale, p if w is None else p + y * w, G)


def held_bytes(n_points, n_variables, cache_bytes, working_set=None):
    """About the most device memory :func:`solve` holds, besides what ``rows`` keeps: the row
    cache's block (``cache_bytes``, or one working set of rows where that is more), one
    request's fresh rows and the working set's gathered rows (float64 rows of ``n_points``
    values), and some 32 float64 vectors of ``n_variables`` values (the state, sort keys and
    temporaries)."""
    q = min(WORKING_SET if working_set is None else working_set, n_points)
    row = 8 * n_points
    return max(cache_bytes, q * row) + 2 * q * row + 32 * 8 * n_variables


def solve(rows, p, y, C, alpha, *, index=None, tol=1e-3, max_iter=-1, working_set=None,
          cache_bytes=200 * 2**20, shrinking=True):
    r"""Solve libsvm's dual (module docstring) from a feasible start ``alpha``.

    Parameters
    ----------
    rows : callable
        ``rows(indices) = K[indices, :]`` for a 1-D int64 CPU tensor of kernel-point indices: a
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
    working_set : int, optional
        Variables per outer step (at least 2; on a GPU at most 1024, the block of the
        subproblem's one program); default :data:`WORKING_SET` (read at the call).
    cache_bytes : int, default=200 MiB
        Bound of the kernel-row cache.
    shrinking : bool, default=True
        Remove the variables stuck at a bound after every outer step (module docstring); the
        stopping rule is checked on the whole problem either way.

    Returns
    -------
    SMOResult
    """
    if working_set is None:
        working_set = WORKING_SET
    n_var = y.shape[0]
    device = y.device
    points = (np.arange(n_var) if index is None
              else np.asarray(index.cpu(), dtype=np.int64))  # the kernel point of each variable
    index = None if index is None else _to_device(points, device)
    cache = RowCache(rows, cache_bytes)
    active = torch.ones(n_var, dtype=torch.bool, device=device)
    # the state, one row each: a, G, y, C (a working set's four are one gather)
    state = torch.stack([alpha, p, y, C])
    state[1] = _reconstruct(cache, points, index, y, alpha, p, p, active, working_set)
    # signs * G = (y G, -y G) = (-u, u); where I_up and I_low ask a < C (a > 0 elsewhere)
    signs = torch.stack([y, -y])
    room = torch.stack([y > 0, y < 0])
    if max_iter < 0:
        max_iter = max(10_000_000, 100 * n_var)
    unshrunk = False  # libsvm's one unshrinking when the gap first reaches 10 tol
    n_iter = 0
    ran = False  # a subproblem ran since the start or the last reconstruction
    steps = torch.zeros(1, device=device)  # its steps, read with the next outer step's numbers
    while True:
        a, G = state[0], state[1]
        signed = signs * G
        sets = torch.where(room, a < state[3], a > 0) & active  # I_up, I_low
        # (-m(a), M(a)): the least -u over I_up and the least u over I_low
        ends_keys = torch.where(sets, signed, math.inf)
        ends = ends_keys.amin(dim=1)
        # shrinking and the next working set, computed before the host knows whether the solver
        # goes on, so that one read brings every number the host decides on
        if shrinking:
            kept = active & ~_shrunk(signed, sets, ends)
            sets_kept = sets & kept
        else:
            kept, sets_kept = active, sets
        # I_up by decreasing u, I_low by increasing u, ties to the lower index (at least their
        # first working_set)
        order = torch.argsort(torch.where(sets_kept, signed, math.inf), dim=1,
                              stable=True)[:, :working_set]
        numbers = torch.cat([
            ends, sets_kept.sum(dim=1, dtype=torch.float64),
            active.sum(dtype=torch.float64).reshape(1), steps.to(torch.float64),
            *order.to(torch.float64)]).cpu().numpy()
        minus_m, M, n_up, n_low, n_active, last = numbers[:6].tolist()
        n_iter += int(last) if ran else 0
        gap = -minus_m - M
        stopping, unshrink, unshrunk = _stop_or_unshrink(gap, tol, n_iter, max_iter, ran, last,
                                                         unshrunk, n_active, n_var)
        if unshrink:
            state[1] = _reconstruct(cache, points, index, state[2], a, p, G, ~active,
                                    working_set)
            active = torch.ones_like(active)
            ran = False
            continue  # the stopping rule again, on the whole problem
        if stopping:
            break
        active = kept
        ranked = numbers[6:].astype(np.int64).reshape(2, -1)
        ws_host = _working_set(ranked[0], ranked[1], int(n_up), int(n_low), working_set)
        kernel_points = points[ws_host]
        ws, ws_points = _to_device(np.stack([ws_host, kernel_points]), device)
        K_rows = cache(torch.from_numpy(kernel_points))  # (q, n_points)
        K_ws = K_rows[:, ws_points]
        a_ws, G_ws, y_ws, C_ws = state[:, ws]
        # the working set's own (-m, M): its gap is m - M = -(-m + M)
        local_tol = (ends_keys[:, ws].amin(dim=1).sum() / -10).clamp(min=tol).reshape(1)
        budget = min(10 * len(ws_host), max_iter - n_iter)
        a_new, _, steps = _subproblem(a_ws, G_ws, y_ws, C_ws, K_ws, local_tol, budget)
        ran = True
        # G += Q[:, W] (a_W - a_W^old) on the active variables, one product over the rows
        w = _combine(K_rows, y_ws * (a_new - a_ws))
        a.index_copy_(0, ws, a_new)
        torch.where(active, G + state[2] * (w if index is None else w[index]), G, out=G)
    alpha, G = state[0].clone(), state[1].clone()
    return SMOResult(alpha, G, rho(alpha, G, y, C), gap, n_iter, gap <= tol)
