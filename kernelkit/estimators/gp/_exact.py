r"""The exact path: dense float64 Cholesky for the log marginal likelihood, its gradient and
predictions, used up to :func:`exact_max_n` training points.

.. math::

    \log p(Y) = \sum_k \left(-\tfrac12 y_k^\top K^{-1} y_k - \sum_i \log L_{ii}
                - \tfrac n2 \log 2\pi\right),\qquad
    \frac{\partial \log p}{\partial \theta_j}
        = \tfrac12 \sum_{il} W_{il} \frac{\partial K_{il}}{\partial \theta_j},\quad
    W = A A^\top - t K^{-1},

with K = L L^T = k(X, X) + noise I + diag(alpha), A = K^{-1} Y for the t columns y_k of Y
(scikit-learn's formulas). K and its derivatives come from the same kernel blocks as the
iterative path (:meth:`kernelkit.operators.covariance.CovarianceOperator.block`), here in
float64; the gradient is the exact derivative of the exact log marginal likelihood, contracted
one row chunk at a time by autograd (:func:`kernelkit.operators.covariance.theta_gradient`), so
no (n, n, n_theta) tensor exists. Memory: about three n x n float64 matrices.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from kernelkit.operators.covariance import theta_gradient

__all__ = ["EXACT_MAX_N", "exact_max_n", "dense_covariance", "exact_fit", "exact_lml",
           "lml_from_factor", "cholesky", "reduced"]

#: Default largest n of the exact path, by device type: where exact is not much slower than the
#: iterative estimate, whose LML error at default settings is tens of nats there (one LML +
#: gradient at n = 10 000 on 2 CPU cores: 18.0 s against 10.0 s, 29 nats off; on a GPU n =
#: 10 000 is about the crossover). ``benchmarks/gp_exact_threshold.py``; the figures:
#: docs/benchmarks.md, "Figures behind choices in the code".
EXACT_MAX_N = {"cpu": 10_000, "cuda": 10_000}


def exact_max_n(setting, device):
    """The exact path's largest n: ``setting`` (an int), or :data:`EXACT_MAX_N` for ``None``."""
    return EXACT_MAX_N[torch.device(device).type] if setting is None else int(setting)


def dense_covariance(op, params, alpha):
    """K = k(X, X) + noise I + diag(alpha), float64, shape (n, n)."""
    with torch.no_grad():
        K = torch.empty((op.n, op.n), dtype=torch.float64, device=op.device)
        step = op.chunk_rows(op.n)
        for lo in range(0, op.n, step):
            hi = min(lo + step, op.n)
            K[lo:hi] = op.block(op.X64[lo:hi], op.X64, params, diagonal_offset=lo,
                                dtype=torch.float64)
        K.diagonal().add_(params["noise"] + alpha)
    return K


def exact_lml(op, theta, Y, alpha, eval_gradient=False):
    """The exact log marginal likelihood (and gradient) of Y at ``theta``.

    Parameters
    ----------
    op : CovarianceOperator
    theta : ndarray of shape (n_theta,)
    Y : torch.Tensor of shape (n, t), float64
    alpha : torch.Tensor of shape (n,), float64
        The regressor's ``alpha`` on the diagonal (a scalar broadcast to n, or per sample).
    eval_gradient : bool

    Returns
    -------
    lml : float
        ``-inf`` when K is not positive definite (as scikit-learn).
    grad : ndarray of shape (n_theta,)
        Only with ``eval_gradient``; zeros where ``lml`` is ``-inf``.
    """
    theta_t = torch.as_tensor(np.asarray(theta, dtype=np.float64), device=op.device)
    params = op.structure.params(theta_t)
    K = dense_covariance(op, params, alpha)
    L, info = torch.linalg.cholesky_ex(K)
    del K
    if int(info) != 0:
        return (-np.inf, np.zeros(theta_t.shape[0])) if eval_gradient else -np.inf
    A = torch.cholesky_solve(Y, L)
    t = Y.shape[1]
    lml = lml_from_factor(L, Y, A)
    if not eval_gradient:
        return lml
    W = torch.cholesky_inverse(L)
    del L
    W.mul_(-t).addmm_(A, A.T)
    diag_W = torch.diagonal(W).sum()

    def contract(lo, hi, Kb):
        return (W[lo:hi] * Kb).sum()

    grad = theta_gradient(op, theta_t, contract, dtype=torch.float64)
    with torch.enable_grad():  # the noise term: d/dtheta of noise * tr(W)
        leaf = theta_t.detach().requires_grad_(True)
        noise = op.structure.params(leaf)["noise"]
        if noise.requires_grad:
            grad += torch.autograd.grad(noise * diag_W, leaf)[0]
    return lml, (0.5 * grad).cpu().numpy()


def lml_from_factor(L, Y, A):
    """log p(Y) summed over the t columns of Y, from L L^T = K and A = K^{-1} Y (float)."""
    t, n = Y.shape[1], Y.shape[0]
    return float(-0.5 * (Y * A).sum() - t * torch.log(torch.diagonal(L)).sum()
                 - 0.5 * t * n * math.log(2.0 * math.pi))


def cholesky(op, params, alpha, kernel=None):
    """The lower Cholesky factor of K = k(X, X) + noise I + diag(alpha), float64.

    Raises
    ------
    numpy.linalg.LinAlgError
        When K is not positive definite (the message suggests a larger ``alpha``).
    """
    L, info = torch.linalg.cholesky_ex(dense_covariance(op, params, alpha))
    if int(info) != 0:
        raise np.linalg.LinAlgError(
            f"The kernel, {kernel if kernel is not None else 'k'}, is not returning a positive "
            f"definite matrix. Try gradually increasing the 'alpha' parameter of your "
            f"GaussianProcessRegressor estimator.")
    return L


def exact_fit(op, theta, Y, alpha, kernel=None):
    """The fit at ``theta``: ``(lml, A, L)`` with L the lower Cholesky factor of K
    (:func:`cholesky`), A = K^{-1} Y and lml = log p(Y) from that factor (the value of
    :func:`exact_lml`, K formed once)."""
    params = op.structure.params(torch.as_tensor(theta, device=op.device))
    L = cholesky(op, params, alpha, kernel)
    A = torch.cholesky_solve(Y, L)
    return lml_from_factor(L, Y, A), A, L


def reduced(op, params, L, Z):
    """V = L^{-1} k(X, Z), shape (n, m), for centred float64 test rows Z: k(Z, X) K^{-1} k(X, Z)
    = V^T V."""
    K_xz = op.cross_block_T(Z, params, dtype=torch.float64)
    return torch.linalg.solve_triangular(L, K_xz, upper=False)
