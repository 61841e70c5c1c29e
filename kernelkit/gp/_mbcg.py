r"""Preconditioned batched conjugate gradients that also return Lanczos tridiagonals (mBCG).

Solves K X = B for all columns of B at once (one matrix product K @ P per iteration for every
column), as in BBMM (Gardner et al. 2018, "GPyTorch: Blackbox Matrix-Matrix Gaussian Process
Inference with GPU Acceleration"). Preconditioned CG on column b is the Lanczos process on
P^{-1/2} K P^{-1/2} started from P^{-1/2} b / ||P^{-1/2} b||; its step sizes alpha_i and
beta_i give that process's tridiagonal matrix

.. math::

    T_{ii} = 1/\alpha_i + \beta_{i-1}/\alpha_{i-1}, \qquad
    T_{i,i+1} = T_{i+1,i} = \sqrt{\beta_i}/\alpha_i,

from which :func:`lanczos_quadrature` gets e_1^T log(T) e_1, the Gauss quadrature estimate of
(P^{-1/2} b)^T log(P^{-1/2} K P^{-1/2}) (P^{-1/2} b) / ||P^{-1/2} b||^2 used for log det K.

A column stops (its iterate is frozen) when its relative residual ||r|| / ||b|| falls to ``tol``
or when its curvature p^T K p is not positive (breakdown); the loop stops when every column has.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from scipy.linalg import eigh_tridiagonal

__all__ = ["mbcg", "MBCGResult", "lanczos_quadrature"]


@dataclass
class MBCGResult:
    """What :func:`mbcg` returns.

    Attributes
    ----------
    solution : torch.Tensor of shape (n, t)
    alphas, betas : ndarray of shape (n_iterations, t), float64
        CG step sizes per iteration and column (0 after a column stopped).
    n_iter : ndarray of shape (t,), int
        Iterations each column took.
    relative_residual : ndarray of shape (t,)
        ||b - K x|| / ||b|| of each column's recurrence residual at the end.
    converged : ndarray of shape (t,), bool
        Whether each column reached the tolerance it was run with.
    """

    solution: torch.Tensor
    alphas: np.ndarray
    betas: np.ndarray
    n_iter: np.ndarray
    relative_residual: np.ndarray
    converged: np.ndarray


def mbcg(matmul, rhs, precond=None, *, tol, max_iter):
    """Solve K X = rhs column by column with preconditioned CG, all columns in one batch.

    Parameters
    ----------
    matmul : callable
        ``matmul(V)`` returns K @ V for V of shape (n, t); K symmetric positive definite.
    rhs : torch.Tensor of shape (n, t)
    precond : callable or None
        ``precond(R)`` returns P^{-1} R (P symmetric positive definite); None for P = I.
    tol : float
        Relative residual ||r|| / ||b|| at which a column stops.
    max_iter : int
        Most iterations (K products).

    Returns
    -------
    MBCGResult
    """
    if precond is None:
        def precond(R):
            return R
    n, t = rhs.shape
    x = torch.zeros_like(rhs)
    r = rhs.clone()
    z = precond(r)
    p = z.clone()
    rz = (r * z).sum(0)
    b_norm = torch.linalg.vector_norm(rhs, dim=0)
    active = (b_norm > 0) & (rz > 0)
    b_norm = torch.where(b_norm > 0, b_norm, torch.ones_like(b_norm))
    alphas, betas = [], []
    n_iter = torch.zeros(t, dtype=torch.int64, device=rhs.device)
    rel = torch.linalg.vector_norm(r, dim=0) / b_norm
    active &= rel > tol
    for _ in range(max_iter):
        if not bool(active.any()):
            break
        q = matmul(p)
        pq = (p * q).sum(0)
        active &= pq > 0
        a = torch.where(active, rz / torch.where(active, pq, torch.ones_like(pq)), 0.0)
        x += a * p
        r -= a * q
        z = precond(r)
        rz_new = (r * z).sum(0)
        b = torch.where(active, rz_new / torch.where(active, rz, torch.ones_like(rz)), 0.0)
        p = z + b * p
        rz = torch.where(active, rz_new, rz)
        alphas.append(a.to(torch.float64))
        betas.append(b.to(torch.float64))
        n_iter += active.to(torch.int64)
        rel = torch.linalg.vector_norm(r, dim=0) / b_norm
        active &= (rel > tol) & (rz > 0)
    stack = (lambda xs: torch.stack(xs).cpu().numpy()) if alphas else (
        lambda xs: np.zeros((0, t)))
    rel = rel.to(torch.float64).cpu().numpy()
    return MBCGResult(x, stack(alphas), stack(betas), n_iter.cpu().numpy(), rel, rel <= tol)


def lanczos_quadrature(result, columns=None, fn=np.log):
    """e_1^T fn(T_j) e_1 for the Lanczos tridiagonal T_j of each requested column.

    Parameters
    ----------
    result : MBCGResult
    columns : sequence of int, optional
        Which columns; default all.
    fn : callable
        Applied to the Ritz values (eigenvalues of T_j), float64.

    Returns
    -------
    ndarray of shape (len(columns),), float64
        0 for a column that took no iteration.
    """
    columns = range(result.alphas.shape[1]) if columns is None else columns
    out = np.zeros(len(columns))
    for out_i, j in enumerate(columns):
        k = int(result.n_iter[j])
        if k == 0:
            continue
        a, b = result.alphas[:k, j], result.betas[:k, j]
        diag = 1.0 / a
        diag[1:] += b[:-1] / a[:-1]
        off = np.sqrt(b[:-1]) / a[:-1]
        ritz, vecs = eigh_tridiagonal(diag, off)
        ritz = np.maximum(ritz, np.finfo(np.float64).tiny)
        out[out_i] = float(np.sum(vecs[0] ** 2 * fn(ritz)))
    return out
