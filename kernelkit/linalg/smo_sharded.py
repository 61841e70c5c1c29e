r"""libsvm's dual (:mod:`kernelkit.linalg.smo`) over a ``torch.distributed`` process group: the
kernel points sharded over the ranks.

Every rank holds the problem's vectors (p, y, C: one number per variable) and the same a, and
owns a contiguous block of the kernel points, :func:`kernelkit_gpu.distributed.shard` of them
(sizes differ by at most one; ranks past the number of points own none), and the variables on
them (SVR: both variables of a point). For those it keeps the gradient G, and of each working
set W it computes only its columns of the kernel rows, K[W, own points], in its own row cache
(``cache_bytes`` per rank). One outer step:

1. m(a) and M(a) over the active variables: each rank's, then one float64 min all-reduce of
   (-m, M) (exact).
2. Shrinking from them, on each rank's variables. Each rank's working-set candidates (its
   ``working_set`` best of I_up and of I_low by u, ties to the lower index), its set sizes and
   the previous subproblem's step count go to every rank in one all-gather; every rank merges
   the same table into the single process's candidates (the best q of a union are the best q of
   the parts' best q) and takes the same working set, with the same decisions (stop, unshrink).
3. The q x q block K[W, W] and G_W: each rank has the columns, and the gradient, of the
   working set's variables it owns; one all-gather assembles both on every rank (copies).
4. Every rank solves the same subproblem (the same inputs, so the same steps and the same new
   a_W), and updates the gradient of its variables by its columns of the rows.

Shrinking, the unshrinking at 10 ``tol`` and the gradient reconstructions act on each rank's
variables. At the end G is all-gathered and rho computed from the whole a and G on every rank.

Every number is the single process's: the reductions are maxima, minima and counts, the
gradient's products over kernel rows sum each column in an order that does not depend on the
other columns (:func:`kernelkit.linalg.smo._combine`), and the rest is elementwise. So every
rank returns :func:`kernelkit.linalg.smo.solve`'s result bit for bit, wherever the kernel values
of a block of columns are those of whole rows (the CPU's registry kernels compute each entry on
its own, and a precomputed matrix is read).

Each step runs four agreements (:func:`kernelkit_gpu.distributed.agree`: an exception on one
rank is raised on every rank, as ``rank R of W: ...``) and three data collectives: the
all-reduce of two numbers, the all-gather of ``4 working_set + 6`` numbers per rank and that of
the working set's columns (q (q + 1) float64 in all). Kernel calls inside run on this rank alone
(:func:`kernelkit_gpu.distributed.local`).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from kernelkit.linalg import smo
from kernelkit.linalg.smo import (RowCache, SMOResult, _combine, _sets, _subproblem, _to_device,
                                  _working_set, rho)

__all__ = ["solve"]


def _least(keys):
    """The smallest of the float64 tensor ``keys``, as a 0-d tensor (inf where it is empty)."""
    if keys.numel() == 0:
        return torch.tensor(math.inf, dtype=torch.float64, device=keys.device)
    return keys.min()


def _merge(table, width):
    """The ``width`` best candidates of the ranks' lists: ``table`` holds per rank the keys
    (``width``) then the variables (``width``); the smallest keys, ties to the lower variable
    (the single process's stable sort)."""
    keys, variables = table[:, :width].ravel(), table[:, width:].ravel()
    return variables[np.lexsort((variables, keys))][:width].astype(np.int64)


def _grouped(owners, size):
    """The (lo, hi) of each rank's rows among rows grouped by their owner rank (``owners``), in
    rank order: the bounds of an all-gather of every rank's own rows."""
    ends = np.concatenate([[0], np.cumsum(np.bincount(owners, minlength=size))])
    return list(zip(ends[:-1], ends[1:]))


class _Shard:
    """This rank's part of the problem: its kernel points, its variables, their gradient and
    its row cache.

    Parameters
    ----------
    rows : callable
        ``rows(indices, lo, hi) = K[indices, lo:hi]``.
    points : ndarray of shape (n_variables,)
        The kernel point of each variable.
    n_points : int
    p, y, C : torch.Tensor of shape (n_variables,)
    cache_bytes : int
    """

    def __init__(self, rows, points, n_points, p, y, C, cache_bytes):
        from kernelkit_gpu import distributed as D

        self.rank, self.size = D.world()
        bounds = [D.shard(n_points, r, self.size) for r in range(self.size)]
        self.lo, hi = bounds[self.rank]
        #: the rank owning each variable's point
        self.owner = np.searchsorted([b for _, b in bounds], points, side="right")
        own = np.flatnonzero(self.owner == self.rank)
        self.points = points
        self.n_own = len(own)
        self.position = np.full(len(points), -1)  # a variable's place among this rank's
        self.position[own] = np.arange(len(own))
        device = y.device
        self.own = _to_device(own, device)
        self.columns = _to_device(points[own] - self.lo, device)  # their columns of the rows
        self.p, self.y, self.C = p[self.own], y[self.own], C[self.own]
        if hi > self.lo:
            self.cache = RowCache(lambda indices: rows(indices, self.lo, hi), cache_bytes,
                                  n_rows=n_points)
        else:  # no columns: nothing to compute or cache
            self.cache = lambda indices: torch.zeros((len(indices), 0), dtype=torch.float64,
                                                     device=device)

    def reconstruct(self, alpha, y, G, stale, chunk):
        """:func:`kernelkit.linalg.smo._reconstruct` on this rank's variables: G[stale] =
        p + Q[stale, :] a from the kernel rows' columns of this rank."""
        support = torch.nonzero(alpha).flatten()
        coef = y[support] * alpha[support]
        support = support.cpu().numpy()
        w = None  # this rank's columns of K[support, :] (y a)[support]
        for begin in range(0, len(support), chunk):
            rows = self.cache(torch.from_numpy(self.points[support[begin:begin + chunk]]))
            part = _combine(rows, coef[begin:begin + chunk])
            w = part if w is None else w + part
        return torch.where(stale, self.p if w is None else self.p + self.y * w[self.columns], G)

    def ends(self, alpha, G, active):
        """u, I_up and I_low (active) of this rank's variables and its (-m(a), M(a))."""
        u = -self.y * G
        up, low = _sets(alpha[self.own], self.y, self.C)
        up, low = up & active, low & active
        return u, up, low, torch.stack([_least(torch.where(up, -u, math.inf)),
                                        _least(torch.where(low, u, math.inf))])

    def candidates(self, u, up, low, alpha, active, ends, steps, shrinking, width):
        """The variables that stay active (libsvm's shrinking from the global ``ends`` =
        (-m(a), M(a))) and this rank's row of the step's table: (-m, M), the sizes of I_up,
        I_low (after shrinking) and of the active set, ``steps``, then the ``width`` best of
        I_up by -u and of I_low by u: keys, then variables (padded with inf, -1)."""
        kept = active
        if shrinking:  # libsvm's be_shrunk, as one process runs it
            kept = active & ~smo._shrunk(torch.stack([-u, u]), torch.stack([up, low]), ends)
        up, low = up & kept, low & kept
        sizes = torch.stack([up.sum(), low.sum(), active.sum()]).to(torch.float64)
        parts = [ends, sizes, steps.to(torch.float64).reshape(1)]
        for members, key in ((up, -u), (low, u)):
            key = torch.where(members, key, math.inf)
            best = torch.argsort(key, stable=True)[:width]
            found = torch.full((2, width), math.inf, dtype=torch.float64, device=u.device)
            found[1] = -1
            found[0, :len(best)] = key[best]
            found[1, :len(best)] = self.own[best].to(torch.float64)
            parts.append(found.reshape(-1))
        return kept, torch.cat(parts)

    def block(self, ws, G):
        """This rank's columns K[W, own points] of the working set ``ws`` (host indices), and
        this rank's rows of the working set's (K[W, W]^T | G_W): those of the variables of W it
        owns, in the order of W."""
        K_rows = self.cache(torch.from_numpy(self.points[ws]))
        mine = ws[self.owner[ws] == self.rank]
        device = G.device
        cols = _to_device(self.points[mine] - self.lo, device)
        return K_rows, torch.cat([K_rows[:, cols].T, G[_to_device(self.position[mine],
                                                                  device)][:, None]], dim=1)


def solve(rows, p, y, C, alpha, *, index=None, tol=1e-3, max_iter=-1, working_set=None,
          cache_bytes=200 * 2**20, shrinking=True):
    r""":func:`kernelkit.linalg.smo.solve` over the process group, kernel points sharded (module
    docstring): every rank passes the same arguments and gets the same result, the single
    process's.

    Parameters
    ----------
    rows : callable
        ``rows(indices, lo, hi) = K[indices, lo:hi]`` for a 1-D int64 CPU tensor of
        kernel-point indices: a float64 tensor of shape (len(indices), hi - lo) on the solver's
        device. Each rank asks only for its own columns.
    p, y, C, alpha, index, tol, max_iter, cache_bytes, shrinking
        As :func:`kernelkit.linalg.smo.solve` (``cache_bytes`` per rank).
    working_set : int, optional
        As :func:`kernelkit.linalg.smo.solve`; default :data:`kernelkit.linalg.smo.WORKING_SET`.

    Returns
    -------
    SMOResult
        The same on every rank.
    """
    from kernelkit_gpu import distributed as D

    width = smo.WORKING_SET if working_set is None else working_set
    n_var = y.shape[0]
    device = y.device
    points = (np.arange(n_var) if index is None
              else np.asarray(index.cpu(), dtype=np.int64))  # the kernel point of each variable
    n_points = int(points.max()) + 1 if n_var else 0
    if max_iter < 0:
        max_iter = max(10_000_000, 100 * n_var)
    with D.local():  # kernel calls on this rank alone; the collectives below are explicit
        shard = D.agree(_Shard, rows, points, n_points, p, y, C, cache_bytes)
        alpha = alpha.clone()
        active = torch.ones(shard.n_own, dtype=torch.bool, device=device)
        G = D.agree(shard.reconstruct, alpha, y, shard.p, active, width)
        unshrunk = False  # libsvm's one unshrinking when the gap first reaches 10 tol
        n_iter = 0
        ran = False  # a subproblem ran since the start or the last reconstruction
        steps = torch.zeros(1, device=device)
        per_rank = [(r, r + 1) for r in range(shard.size)]
        while True:
            u, up, low, ends = D.agree(shard.ends, alpha, G, active)
            ends = D.all_reduce(ends, "min")  # (-m(a), M(a)) of the whole problem
            kept, row = D.agree(shard.candidates, u, up, low, alpha, active, ends, steps,
                                shrinking, width)
            table = D.all_gather_rows(row[None], shard.size, per_rank).cpu().numpy()
            m, M = -table[0, 0], table[0, 1]
            n_up, n_low, n_active = table[:, 2:5].sum(axis=0).tolist()
            last = table[0, 5]
            n_iter += int(last) if ran else 0
            gap = m - M
            stopping, unshrink, unshrunk = smo._stop_or_unshrink(
                gap, tol, n_iter, max_iter, ran, last, unshrunk, n_active, n_var)
            if unshrink:
                G = D.agree(shard.reconstruct, alpha, y, G, ~active, width)
                active = torch.ones_like(active)
                ran = False
                continue  # the stopping rule again, on the whole problem
            if stopping:
                break
            active = kept
            ws_host = _working_set(_merge(table[:, 6:6 + 2 * width], width),
                                   _merge(table[:, 6 + 2 * width:], width), int(n_up),
                                   int(n_low), width)
            K_rows, mine = D.agree(shard.block, ws_host, G)
            gathered = D.all_gather_rows(mine, len(ws_host),
                                         _grouped(shard.owner[ws_host], shard.size))
            a_new, steps, G = D.agree(_step, shard, ws_host, gathered, alpha, y, C, G, active,
                                      K_rows, tol, min(10 * len(ws_host), max_iter - n_iter))
            alpha[_to_device(ws_host, device)] = a_new
            ran = True
        whole = D.all_gather_rows(G[:, None], n_var, _grouped(shard.owner, shard.size))
    G = torch.empty(n_var, dtype=torch.float64, device=device)
    G[_to_device(np.argsort(shard.owner, kind="stable"), device)] = whole[:, 0]
    return SMOResult(alpha, G, rho(alpha, G, y, C), gap, n_iter, gap <= tol)


def _step(shard, ws_host, gathered, alpha, y, C, G, active, K_rows, tol, budget):
    """The subproblem on the working set ``ws_host`` from the gathered (K[W, W]^T | G_W) rows
    (grouped by owner), and this rank's gradient after it: (new a_W, steps, G)."""
    device = G.device
    q = len(ws_host)
    grouped = _to_device(np.argsort(shard.owner[ws_host], kind="stable"), device)
    K_ws = torch.empty((q, q), dtype=torch.float64, device=device)
    K_ws[:, grouped] = gathered[:, :q].T
    G_ws = torch.empty(q, dtype=torch.float64, device=device)
    G_ws[grouped] = gathered[:, q]
    ws = _to_device(ws_host, device)
    a_ws, y_ws, C_ws = alpha[ws], y[ws], C[ws]
    u_ws = -y_ws * G_ws
    up, low = _sets(a_ws, y_ws, C_ws)
    local = torch.stack([torch.where(up, u_ws, -math.inf).max(),
                         torch.where(low, u_ws, math.inf).min()])
    local_tol = torch.clamp((local[0] - local[1]) / 10, min=tol).reshape(1)
    a_new, _, steps = _subproblem(a_ws, G_ws, y_ws, C_ws, K_ws, local_tol, budget)
    # G += Q[:, W] (a_W - a_W^old) on this rank's active variables, by its columns of the rows
    w = _combine(K_rows, y_ws * (a_new - a_ws))
    return a_new, steps, torch.where(active, G + shard.y * w[shard.columns], G)
