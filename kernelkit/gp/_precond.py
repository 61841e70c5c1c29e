r"""Pivoted-Cholesky (Nyström) preconditioner with an exact, differentiable log determinant.

A partial pivoted Cholesky factorisation of the kernel part outputscale * k(X, X) picks ``rank``
pivot rows S greedily (largest remaining diagonal). With the pivots fixed, the rank-k factor is
the Nyström factor L = K_XS chol(K_SS)^{-T}, so the preconditioner

.. math::  P = L L^\top + \sigma^2 I, \qquad \sigma^2 = \text{noise} + \text{jitter},

is a smooth function of the hyperparameters for the given pivots. In float64:

- P^{-1} v = (v - L M^{-1} L^T v) / sigma^2 with M = sigma^2 I_k + L^T L (Woodbury);
- log det P = log det M + (n - k) log sigma^2, exact;
- z = L e_1 + sigma e_2 (e_1, e_2 standard normal) has covariance P, the probes of BBMM;
- :meth:`Preconditioner.quad` gives sum_j w_j^T P w_j, whose autograd gradient is
  sum_j w_j^T (dP/dtheta) w_j, the control variate of the trace estimator in :mod:`._lml`.

Pivoting stops early once the largest remaining diagonal is below ``rel_tol`` times the
outputscale (the factor is then exact to that level), which also keeps K_SS well conditioned.
"""

from __future__ import annotations

import math

import torch

__all__ = ["pivoted_cholesky_pivots", "Preconditioner"]


def pivoted_cholesky_pivots(op, params, rank, rel_tol=1e-8):
    """Greedy pivots of a partial pivoted Cholesky factorisation of outputscale * k(X, X).

    Parameters
    ----------
    op : CovarianceOperator
    params : dict of torch.Tensor
        Kernel parameters (no gradient needed).
    rank : int
        Most pivots.
    rel_tol : float
        Stop when the largest remaining diagonal is <= rel_tol * outputscale.

    Returns
    -------
    torch.Tensor of shape (k,), int64, k <= rank
    """
    X = op.X64
    n = X.shape[0]
    rank = min(int(rank), n)
    scale = float(params["outputscale"])
    with torch.no_grad():
        residual = op.kernel_diagonal(X, params)  # the kernel part's diagonal (any kernel)
        rows = torch.empty((rank, n), dtype=torch.float64, device=X.device)
        pivots = []
        for m in range(rank):
            i = int(torch.argmax(residual))
            pivot_value = float(residual[i])
            if pivot_value <= rel_tol * scale:
                break
            row = op.block(X[i:i + 1], X, params, dtype=torch.float64)[0]
            row = (row - rows[:m, i] @ rows[:m]) / math.sqrt(pivot_value)
            rows[m] = row
            residual = (residual - row * row).clamp_min(0.0)
            residual[i] = 0.0
            pivots.append(i)
    return torch.tensor(pivots, dtype=torch.int64, device=X.device)


class Preconditioner:
    """P = L L^T + sigma^2 I from fixed pivots, differentiable with respect to ``params``.

    Parameters
    ----------
    op : CovarianceOperator
    params : dict of torch.Tensor
        Kernel parameters; gradients flow through :attr:`logdet` and :meth:`quad` when they
        require grad.
    pivots : torch.Tensor of shape (k,), int64
        May be empty (then P = sigma^2 I).
    """

    def __init__(self, op, params, pivots):
        self.op = op
        X = op.X64
        self.sigma2 = (params["noise"] + op.jitter).to(torch.float64)
        n, k = X.shape[0], int(pivots.numel())
        self.n, self.rank = n, k
        if k:
            XS = X[pivots]
            K_SS = op.block(XS, XS, params, dtype=torch.float64)
            K_SS = 0.5 * (K_SS + K_SS.T)
            R = torch.linalg.cholesky(K_SS)
            K_SX = op.block(XS, X, params, dtype=torch.float64)
            self.L = torch.linalg.solve_triangular(R, K_SX, upper=False).T
            M = self.sigma2 * torch.eye(k, dtype=torch.float64, device=X.device) + self.L.T @ self.L
            self.chol_M = torch.linalg.cholesky(M)
            logdet_M = 2.0 * torch.log(torch.diagonal(self.chol_M)).sum()
        else:
            self.L = torch.zeros((n, 0), dtype=torch.float64, device=X.device)
            logdet_M = torch.zeros((), dtype=torch.float64, device=X.device)
        #: log det P, exact (float64), differentiable.
        self.logdet = logdet_M + (n - k) * torch.log(self.sigma2)
        with torch.no_grad():
            self._L = self.L.detach()
            self._chol_M = self.chol_M.detach() if k else None
            self._sigma2 = self.sigma2.detach()

    def solve(self, R):
        """P^{-1} R (no autograd), computed in float64, returned in R's dtype."""
        with torch.no_grad():
            V = R.to(torch.float64)
            if self.rank:
                W = torch.cholesky_solve(self._L.T @ V, self._chol_M)
                V = V - self._L @ W
            return (V / self._sigma2).to(R.dtype)

    def sample(self, eps_low, eps_full):
        """Probes z = L eps_low[:k] + sigma eps_full ~ N(0, P) (no autograd, float64)."""
        with torch.no_grad():
            return self._L @ eps_low[:self.rank] + torch.sqrt(self._sigma2) * eps_full

    def quad(self, W):
        """sum_j w_j^T P w_j for the columns of W (float64), differentiable."""
        W = W.detach().to(torch.float64)
        return (self.L.T @ W).square().sum() + self.sigma2 * W.square().sum()
