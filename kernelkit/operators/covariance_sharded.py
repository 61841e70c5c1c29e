r""":class:`kernelkit.GaussianProcessRegressor` over a process group: the n-sized kernel products
row-sharded.

Every rank holds the whole X and y (scikit-learn's ``fit(X, y)``) and runs the same fit. On the
iterative path (n > ``exact_max_n``) the covariance operator is a
:class:`ShardedCovarianceOperator`: rank r owns the contiguous rows ``shard(n)`` of
K = k(X, X) + sigma^2 I and computes, with the single-process code of
:mod:`kernelkit.operators.covariance` unchanged, only its rows' part of every n x n product:

- K @ V (CG and its Lanczos coefficients, the float64 true residual, the variance cache): its
  rows of K @ V against the whole V, then an all-gather of the rows (exact: no rounding);
- the gradient's bilinear terms sum_j a_j^T K_i b_j (forward and the backward of
  :func:`~kernelkit.operators.covariance.theta_gradient`): its rows' share, then a float64 all-reduce.

Everything else is replicated: the CG vectors (n x (t + 1), float64) and scalars, the
preconditioner (the n x k landmark block and its factor, O(n k^2)
work against the O(n^2) products, and differentiable: it is computed whole on every rank), the
t x t Lanczos quadrature and L-BFGS. Where floating point could differ between ranks, rank 0's
values are broadcast: the preconditioner's factors that CG and the probes use (k x k and n x k,
once per evaluation), so every rank runs the same CG step for step (the same number of
collectives), and the objective value and gradient L-BFGS sees, so every rank takes the same
steps. Random draws (the probe seed, restart points) are rank 0's, so ``random_state=None``
works too.

The exact path (n <= ``exact_max_n``: dense Cholesky) is not sharded: every rank computes it
alone, then rank 0's hyperparameters, ``alpha_``, ``L_`` and log-likelihood are broadcast.

Errors inside a rank's part (its rows, or the replicated preconditioner) are shared by
:func:`kernelkit_gpu.distributed.agree`: every rank raises ``rank R of W: ...``.
"""

from __future__ import annotations

import torch

from kernelkit.operators.covariance import CovarianceOperator

__all__ = ["ShardedCovarianceOperator"]


class ShardedCovarianceOperator(CovarianceOperator):
    """:class:`~kernelkit.operators.covariance.CovarianceOperator` computing this rank's rows
    (:func:`kernelkit_gpu.distributed.shard`) and combining the ranks' parts.

    Same arguments as :class:`~kernelkit.operators.covariance.CovarianceOperator` (the full X); a dense
    K holds only this rank's rows.
    """

    def __init__(self, X, structure, jitter, device, dtype, block_elements=None, data=None,
                 contraction_dtype=None):
        from kernelkit_gpu import distributed as D

        n = len(X) if data is None else data[0].shape[0]
        super().__init__(X, structure, jitter, device, dtype, block_elements,
                         rows=D.shard(n), data=data, contraction_dtype=contraction_dtype)

    def gather(self, rows_fn):
        """All n rows: this rank's from ``rows_fn()``, the others' by all-gather."""
        from kernelkit_gpu import distributed as D

        with D.local():
            return D.all_gather_rows(_agree(rows_fn), self.n)

    def reduce(self, part_fn):
        """The float64 all-reduce of the ranks' ``part_fn()``."""
        from kernelkit_gpu import distributed as D

        with D.local():
            return D.all_reduce(_agree(part_fn))

    def agree(self, fn, *args):
        """``fn(*args)`` on every rank (replicated work). For the preconditioner, the constant
        tensors CG and the probes use are then rank 0's (broadcast), so every
        rank runs the same CG even if the ranks' floating point differed."""
        from kernelkit_gpu import distributed as D

        with D.local():
            result = _agree(fn, *args)
        if hasattr(result, "map_factors_") and result.rank:  # a low-rank preconditioner
            result.map_factors_(D.broadcast)
        return result


_LINALG = "torch.linalg.LinAlgError: "


def _agree(fn, *args):
    """:func:`kernelkit_gpu.distributed.agree`, keeping ``torch.linalg.LinAlgError`` (a matrix
    that is not positive definite at an extreme theta) as itself on every rank: the regressor
    turns it into a -inf objective, as in one process."""
    from kernelkit_gpu import distributed as D

    def guarded():
        try:
            return fn(*args)
        except torch.linalg.LinAlgError as exc:  # shared as a standard type, then restored
            raise ArithmeticError(_LINALG + str(exc)) from exc

    try:
        return D.agree(guarded)
    except ArithmeticError as exc:
        head, found, message = str(exc).partition(_LINALG)
        if found:
            raise torch.linalg.LinAlgError(head + message) from exc
        raise
