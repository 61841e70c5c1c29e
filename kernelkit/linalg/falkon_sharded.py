r""":class:`kernelkit.KernelRidge` over a process group: the Falkon system with K_nM row-sharded.

Every rank holds the whole X and y (scikit-learn's ``fit(X, y)``), the same landmarks (rank 0's
draw, broadcast) and the same M x M matrices: K_MM, its Cholesky factor and the per-alpha
factors are computed by :class:`kernelkit.linalg.falkon.FalkonSystem` and then replaced by
rank 0's copies (broadcast), so every rank runs the same CG, step for step. The n-sized work is
sharded: rank r streams only its rows of K_nM, and each product

.. math::

    K_{Mn} W K_{nM} u = \sum_r K_{M n_r} W_r K_{n_r M} u

is one float64 all-reduce of an M x k partial. CG itself runs on the M-dimensional replicated
vectors, so its scalars need no communication and are equal on every rank. Limit: the M x M
float64 matrices (four, plus one per further distinct alpha) are held by every rank, 3.2 GB each
at M = 2e4; M is bounded by one GPU's memory, not by the number of ranks.

``KernelRidge.fit`` checks its arguments on every rank and compares their digests first
(:func:`kernelkit.distributed.checked`); the decisions taken from the free memory
(``n_components="auto"``, the row-block bytes and the refusal of a fit that does not fit, the
dense fallback) are rank 0's (:func:`kernelkit.distributed.rank0_decision`), so every rank runs
the same M and the same collectives.

The exact solver ("cg") is not sharded here: its products K @ P go through
:func:`kernelkit_gpu.kernel_matvec`, which shards its rows over the group on the GPU; its
Nyström preconditioner is computed whole on every rank.
"""

from __future__ import annotations

import numpy as np
import torch

from kernelkit.linalg.falkon import FalkonSystem, kmn_product

__all__ = ["ShardedFalkonSystem", "fit_nystrom", "same_on_all_ranks"]


def same_on_all_ranks(array):
    """Rank 0's NumPy ``array`` on every rank (same shape and dtype everywhere)."""
    from kernelkit_gpu import distributed as D

    if array.size == 0:  # the same on every rank already (no landmarks)
        return array
    t = D.broadcast(torch.from_numpy(np.ascontiguousarray(array)))
    return t.numpy()


class ShardedFalkonSystem(FalkonSystem):
    """:class:`FalkonSystem` whose n-sized products cover this rank's rows and are all-reduced.

    Same arguments as :class:`FalkonSystem` (the full data); the M x M matrices are rank 0's.
    """

    def __init__(self, op, data, exact, alphas, weights, landmark_indices):
        from kernelkit_gpu import distributed as D

        D.agree(super().__init__, op, data, exact, alphas, weights, landmark_indices)
        self.Kmm, self.L = D.broadcast(self.Kmm), D.broadcast(self.L)
        self.factors = [(D.broadcast(f), cols) for f, cols in self.factors]
        lo, hi = D.shard(exact[0].shape[0])
        self.full = (data, exact, weights, self.sw)
        self.data = (data[0][lo:hi], data[1])
        self.exact = (exact[0][lo:hi], exact[1])
        self.weights = None if weights is None else weights[lo:hi]
        self.sw = None if self.sw is None else self.sw[lo:hi]
        self.rows = (lo, hi)

    def rhs(self, Y):
        from kernelkit_gpu import distributed as D

        X, Z = self.exact
        Yr = Y[self.rows[0]:self.rows[1]]
        WY = Yr if self.weights is None else self.weights[:, None] * Yr
        partial = D.agree(kmn_product, self.op, X, Z, WY)
        return self._left(D.all_reduce(partial))

    def _data_term(self, u, X, Z):
        """This rank's rows of K_Mn W K_nM u, all-reduced (float64)."""
        from kernelkit_gpu import distributed as D

        return D.all_reduce(D.agree(super()._data_term, u, X, Z))

    def dense_solve(self, Y):
        """The dense M x M normal equations from the whole data on this rank alone (the dense
        fallback runs on each rank without collectives; the coefficients are rank 0's)."""
        sharded = (self.data, self.exact, self.weights, self.sw)
        self.data, self.exact, self.weights, self.sw = self.full
        try:
            return super().dense_solve(Y)
        finally:
            self.data, self.exact, self.weights, self.sw = sharded


def fit_nystrom(warn_lstsq, op, data, exact, idx, Y, alphas, weights, tol, max_iter, callback):
    """``KernelRidge._fit_nystrom`` with :class:`ShardedFalkonSystem`: ``(result, beta, dense
    solve)``; ``warn_lstsq`` is ``KernelRidge._warn_lstsq``. Kernel products inside run on this
    rank alone (``local()``)."""
    from kernelkit.linalg.cg import conjugate_gradient
    from kernelkit_gpu import distributed as D

    with D.local():
        system = ShardedFalkonSystem(op, data, exact, alphas, weights, idx)
        result = conjugate_gradient(system.matvec, system.rhs(Y), tol=tol, max_iter=max_iter,
                                    exact_matvec=system.exact_matvec, callback=callback)

    def dense():
        with D.local():
            beta, used_lstsq = system.dense_solve(Y)
        warn_lstsq(used_lstsq)
        return beta

    return result, system.to_beta(result.x), dense
