"""Preconditioned conjugate gradients for several right-hand sides at once.

Each column of B is its own CG run (its own step lengths), but the runs share every product
with A, which is where the time goes for kernel matrices: one ``matvec(P)`` of shape (n, k)
costs about as much as one of shape (n, 1).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

__all__ = ["CGResult", "conjugate_gradient"]


@dataclass
class CGResult:
    """What :func:`conjugate_gradient` returns.

    Attributes
    ----------
    x : torch.Tensor, shape (n, k)
        The approximate solution.
    n_iter : int
        Iterations run (products with A), the most any column needed.
    residuals : ndarray of shape (n_iter + 1,)
        The largest relative residual over the columns, ``||b - A x|| / ||b||`` (from the CG
        recurrence), before the first iteration and after each one.
    converged : bool
        Every column reached ``tol``.
    breakdown : bool
        Stopped because ``p^T A p <= 0`` or ``r^T z <= 0`` for a column that had not converged:
        A or the preconditioner is not positive definite in floating point.
    """

    x: torch.Tensor
    n_iter: int
    residuals: np.ndarray
    converged: bool
    breakdown: bool


def _col_dot(a, b):
    return (a * b).sum(dim=0)


def conjugate_gradient(matvec, B, *, precond=None, tol, max_iter, callback=None):
    r"""Solve A X = B for symmetric positive definite A, every column of B at once.

    Parameters
    ----------
    matvec : callable
        ``matvec(P)`` returns A @ P for P of shape (n, k).
    B : torch.Tensor, shape (n, k)
        Right-hand sides, float64.
    precond : callable, optional
        ``precond(R)`` applies the inverse of a symmetric positive definite preconditioner.
    tol : float
        Stop a column when its relative residual ``||b - A x|| / ||b||`` is at most ``tol``.
        All-zero columns are solved by x = 0 at once.
    max_iter : int
        Most products with A.
    callback : callable, optional
        ``callback(iteration, relative_residual)`` after each iteration (a progress bar).

    Returns
    -------
    CGResult

    Notes
    -----
    The standard recurrence (Hestenes and Stiefel), column by column:

    .. math::

        \alpha_j = \frac{r_j^T z_j}{p_j^T A p_j}, \quad x_j \mathrel{+}= \alpha_j p_j, \quad
        r_j \mathrel{-}= \alpha_j A p_j, \quad z_j = P^{-1} r_j, \quad
        p_j = z_j + \frac{r_j^T z_j}{r_{j,\mathrm{old}}^T z_{j,\mathrm{old}}} p_j.

    Converged columns keep their x and get zero search directions, so they add no work beyond
    their share of the shared product.
    """
    identity = precond is None
    bnorm = torch.linalg.vector_norm(B, dim=0)
    safe_bnorm = torch.where(bnorm > 0, bnorm, torch.ones_like(bnorm))
    x = torch.zeros_like(B)
    r = B.clone()
    active = bnorm > 0
    rel = torch.where(active, torch.ones_like(bnorm), torch.zeros_like(bnorm))
    residuals = [float(rel.max())]
    z = r if identity else precond(r)
    rz = _col_dot(r, z)
    p = z.clone()
    breakdown = False
    n_iter = 0
    while n_iter < max_iter and bool(active.any()):
        Ap = matvec(p)
        pAp = _col_dot(p, Ap)
        bad = active & ~(pAp > 0)
        if bool(bad.any()):
            breakdown = True
            break
        step = torch.where(active, rz / torch.where(active, pAp, torch.ones_like(pAp)), 0.0)
        x += step * p
        r -= step * Ap
        n_iter += 1
        rel = torch.linalg.vector_norm(r, dim=0) / safe_bnorm
        residuals.append(float(rel.max()))
        if callback is not None:
            callback(n_iter, residuals[-1])
        active = active & (rel > tol)
        if not bool(active.any()):
            break
        z = r if identity else precond(r)
        rz_new = _col_dot(r, z)
        bad = active & ~(rz_new > 0)
        if bool(bad.any()):
            breakdown = True
            break
        beta = torch.where(active, rz_new / torch.where(active, rz, torch.ones_like(rz)), 0.0)
        p = torch.where(active, z + beta * p, 0.0)
        rz = rz_new
    converged = not bool(active.any())
    return CGResult(x, n_iter, np.asarray(residuals), converged, breakdown)
