r"""Lanczos tridiagonalisation with full reorthogonalisation, for a cache of K^{-1}.

:func:`lanczos` runs k steps of Lanczos on a symmetric positive definite K from a start vector
b: K Q = Q T + beta_k q_{k+1} e_k^T, Q (n, k) orthonormal, T (k, k) tridiagonal. Every new
vector is reorthogonalised against all earlier ones (twice, classical Gram-Schmidt), in
float64, so Q stays orthonormal to working precision even when the products K v are float32.

:class:`LanczosCache` turns it into the LOVE predictive-variance cache (Pleiss et al. 2018):
for a column x (a cross-covariance k(X, x*)) with a = Q^T x,

.. math:: x^\top K^{-1} x \approx a^\top T^{-1} a,

which never exceeds the exact value (it is the maximum of 2 v^T x - v^T K v over v in the span
of Q). Its error has a computable bound: in the basis [Q, Q_perp], K^{-1}'s quadratic form is
a^T T^{-1} a plus the Schur-complement term of the remainder
r = x - Q a - beta_k (e_k^T T^{-1} a) q_{k+1}, and the Schur complement is at least
lambda_min(K), so

.. math:: 0 \le x^\top K^{-1} x - a^\top T^{-1} a \le \lVert r \rVert^2 / \lambda_{\min}(K).

The caller passes a lower bound of lambda_min(K) (the noise on the diagonal) and falls back to
a solve for the columns whose bound is too large.
"""

from __future__ import annotations

import torch

__all__ = ["lanczos", "LanczosCache"]


def lanczos(matmul, b, max_iter, breakdown_tol=1e-12):
    """k <= ``max_iter`` Lanczos steps with full reorthogonalisation.

    Parameters
    ----------
    matmul : callable
        V (n, 1) -> K V, in any float dtype (the result is used in float64).
    b : torch.Tensor of shape (n,)
        Start vector (not zero).
    max_iter : int
    breakdown_tol : float
        Stop when beta_k <= breakdown_tol * ||T||: the span of Q is invariant under K.

    Returns
    -------
    Q : torch.Tensor of shape (n, k), float64
    T : torch.Tensor of shape (k, k), float64
    beta : float
        beta_k (0 after a breakdown).
    q_next : torch.Tensor of shape (n,), float64
        q_{k+1} (zeros after a breakdown).
    """
    b = b.to(torch.float64)
    n = b.shape[0]
    k_max = min(int(max_iter), n)
    Q = torch.zeros((n, k_max), dtype=torch.float64, device=b.device)
    alphas, betas = [], []
    q = b / torch.linalg.vector_norm(b)
    beta, scale = 0.0, 0.0
    for j in range(k_max):
        Q[:, j] = q
        w = matmul(q[:, None])[:, 0].to(torch.float64)
        alpha = float(q @ w)
        alphas.append(alpha)
        for _ in range(2):  # full reorthogonalisation, twice is enough
            w = w - Q[:, :j + 1] @ (Q[:, :j + 1].T @ w)
        beta = float(torch.linalg.vector_norm(w))
        scale = max(scale, abs(alpha) + beta + (betas[-1] if betas else 0.0))
        if beta <= breakdown_tol * scale or j + 1 == n:
            k = j + 1
            T = _tridiagonal(alphas, betas, b.device)
            return Q[:, :k], T, 0.0, torch.zeros(n, dtype=torch.float64, device=b.device)
        betas.append(beta)
        q = w / beta
    T = _tridiagonal(alphas, betas[:-1], b.device)
    return Q, T, beta, q


def _tridiagonal(alphas, betas, device):
    T = torch.diag(torch.tensor(alphas, dtype=torch.float64, device=device))
    if betas:
        off = torch.tensor(betas, dtype=torch.float64, device=device)
        T = T + torch.diag(off, 1) + torch.diag(off, -1)
    return T


class LanczosCache:
    """x^T K^{-1} x for many columns x from one Lanczos run, with a certified error bound.

    Parameters
    ----------
    matmul, b, max_iter
        As :func:`lanczos`.
    lambda_min : float
        A lower bound of the smallest eigenvalue of K (> 0).
    """

    def __init__(self, matmul, b, max_iter, lambda_min):
        self.Q, T, self.beta, self.q_next = lanczos(matmul, b, max_iter)
        self.chol_T = torch.linalg.cholesky(T)
        self.lambda_min = float(lambda_min)

    @property
    def rank(self):
        return self.Q.shape[1]

    def quadratic(self, X):
        """(a^T T^{-1} a per column, error bound per column) for X of shape (n, m).

        The first never exceeds x^T K^{-1} x; the exact value is at most first + second.
        """
        X = X.to(torch.float64)
        A = self.Q.T @ X
        W = torch.cholesky_solve(A, self.chol_T)
        quad = (A * W).sum(0)
        R = X - self.Q @ A - self.beta * self.q_next[:, None] * W[-1][None, :]
        return quad, R.square().sum(0) / self.lambda_min

    def cross(self, X):
        """X^T Q T^{-1} Q^T X, shape (m, m), float64: the approximation of X^T K^{-1} X (the
        error of entry (i, j) is at most sqrt(bound_i bound_j), the form being PSD)."""
        A = self.Q.T @ X.to(torch.float64)
        return A.T @ torch.cholesky_solve(A, self.chol_T)
