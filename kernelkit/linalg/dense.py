"""Dense float64 solves of shifted symmetric systems, as scikit-learn's KernelRidge solves them.

:func:`shifted_solve` is the fallback of the iterative solvers when conjugate gradients cannot
reach ``tol`` (a ridge near the float64 resolution of K, an indefinite system in floating point)
and the matrix fits in memory; :func:`alpha_groups` splits the columns of a multi-target
problem by their ridge, so that each distinct ridge is factored once.
"""

from __future__ import annotations

import torch

__all__ = ["alpha_groups", "shifted_solve"]



def alpha_groups(alphas):
    """``[(alpha, columns), ...]``: each distinct value of the 1-D tensor ``alphas`` with the
    indices (a tensor) of the columns that have it, in increasing order of alpha."""
    values, inverse = torch.unique(alphas, return_inverse=True)
    return [(float(a), torch.nonzero(inverse == i).flatten()) for i, a in enumerate(values)]


def shifted_solve(A, B, alphas):
    """X with (A + alpha_j I) x_j = b_j for every column j; ``(X, used_lstsq)``.

    Parameters
    ----------
    A : torch.Tensor, shape (n, n)
        Symmetric positive semi-definite, float64. Its diagonal is changed during the call and
        restored exactly.
    B : torch.Tensor, shape (n, k)
        Right-hand sides, float64, same device.
    alphas : torch.Tensor, shape (k,)
        The shift of each column.

    Returns
    -------
    X : torch.Tensor, shape (n, k)
    used_lstsq : bool
        Some shifted matrix was not positive definite in floating point (its Cholesky
        factorisation failed) and was solved by least squares instead, as scikit-learn's
        ``_solve_cholesky_kernel`` does: the minimum-norm solution by the SVD-based LAPACK
        ``gelsd`` driver (on the CPU: the GPU drivers assume full rank). Singular values below
        n eps times the largest are cut (NumPy's and torch's default); scikit-learn's SciPy
        call cuts at eps and so keeps rounding-level directions: on 10 duplicated points with
        inconsistent targets and alpha = 1e-300 its coefficients reach 5e11 and its
        predictions miss the least-squares optimum by 1e-4, where this cut gives 24 and 7e-14.
    """
    X = torch.empty_like(B)
    diagonal = A.diagonal().clone()
    used_lstsq = False
    for alpha, cols in alpha_groups(alphas):
        A.diagonal().copy_(diagonal + alpha)
        try:
            L, info = torch.linalg.cholesky_ex(A)
            if int(info) == 0:
                X[:, cols] = torch.cholesky_solve(B[:, cols], L)
                continue
            del L
            used_lstsq = True
            sol = torch.linalg.lstsq(A.cpu(), B[:, cols].cpu(), driver="gelsd").solution
            X[:, cols] = sol.to(X.device)
        finally:
            A.diagonal().copy_(diagonal)
    return X, used_lstsq
