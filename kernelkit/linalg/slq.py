r"""Stochastic Lanczos quadrature (SLQ) from the coefficients :func:`~._cg.conjugate_gradient`
records.

Preconditioned CG on column b is the Lanczos process on P^{-1/2} A P^{-1/2} started from
P^{-1/2} b / ||P^{-1/2} b||. With the step lengths alpha_i and the ratios beta_i of one column,
that process's tridiagonal matrix is

.. math::

    T_{ii} = 1/\alpha_i + \beta_{i-1}/\alpha_{i-1}, \qquad
    T_{i,i+1} = T_{i+1,i} = \sqrt{\beta_i}/\alpha_i,

and e_1^T f(T) e_1 is the Gauss quadrature estimate of
(P^{-1/2} b)^T f(P^{-1/2} A P^{-1/2}) (P^{-1/2} b) / ||P^{-1/2} b||^2 (Golub and Meurant). With
probes b = z ~ N(0, P), the mean of ||P^{-1/2} z||^2 e_1^T log(T) e_1 estimates
log det(P^{-1/2} A P^{-1/2}) = log det A - log det P (Ubaru, Chen and Saad 2017; Gardner et al.
2018 for the CG form).
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import eigh_tridiagonal

__all__ = ["tridiagonal", "lanczos_quadrature"]


def tridiagonal(coefficients, column):
    """``(diagonal, off_diagonal)`` of the Lanczos matrix T of one column (float64)."""
    k = int(coefficients.n_iter[column])
    a = coefficients.alphas[:k, column]
    b = coefficients.betas[:k, column]
    diag = 1.0 / a
    diag[1:] += b[:-1] / a[:-1]
    return diag, np.sqrt(b[:-1]) / a[:-1]


def lanczos_quadrature(coefficients, columns=None, fn=np.log):
    """e_1^T fn(T_j) e_1 for the Lanczos matrix T_j of each requested column.

    Parameters
    ----------
    coefficients : LanczosCoefficients
        ``CGResult.lanczos`` of a run with ``lanczos=True``.
    columns : sequence of int, optional
        Which columns; default all.
    fn : callable
        Applied to the Ritz values (eigenvalues of T_j, clamped at the smallest positive float).

    Returns
    -------
    ndarray of shape (len(columns),), float64
        0 for a column that took no step.
    """
    columns = range(coefficients.alphas.shape[1]) if columns is None else columns
    out = np.zeros(len(columns))
    for out_i, j in enumerate(columns):
        if int(coefficients.n_iter[j]) == 0:
            continue
        diag, off = tridiagonal(coefficients, j)
        ritz, vecs = eigh_tridiagonal(diag, off)
        ritz = np.maximum(ritz, np.finfo(np.float64).tiny)
        out[out_i] = float(np.sum(vecs[0] ** 2 * fn(ritz)))
    return out
