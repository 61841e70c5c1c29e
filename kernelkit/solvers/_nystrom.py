r"""Nyström landmarks, the Nyström preconditioner of K + alpha I, and the Falkon system.

Notation: X the n training points, Z the M landmarks (a uniform sample of X without
replacement), K_nM = K(X, Z), K_MM = K(Z, Z) = L L^T (Cholesky factor with a small jitter).
Everything M x M is float64 on the solver's device; K_nM is streamed in row blocks
(:meth:`KernelOperator.row_blocks`) and never stored whole.

Preconditioner of the exact system (K + alpha I) a = y
    P = K_nM K_MM^{-1} K_Mn + alpha I = U U^T + alpha I with U = K_nM L^{-T}, applied by Woodbury:

    .. math::

        P^{-1} v = \frac{1}{\alpha}\left(v - U (\alpha I + U^T U)^{-1} U^T v\right),

    which is the textbook form (v - K_nM (alpha K_MM + K_Mn K_nM)^{-1} K_Mn v) / alpha with
    the M x M inverse factored through L, so that alpha I + U^T U (eigenvalues >= alpha) is the
    only matrix inverted besides the triangular L. C = U^T U is accumulated block by block as
    the Gram matrix of the computed blocks U_b = K_bM L^{-T}, so it is positive semi-definite
    in floating point and the Cholesky factor of alpha I + C always exists.

Falkon system (Rudi, Carratino, Rosasco 2017), in scikit-learn's alpha convention
    The Nyström estimator f(x) = sum_j beta_j k(x, z_j) minimises
    ||y - K_nM beta||^2 + alpha beta^T (K_MM + s I) beta, whose normal equations are
    H beta = K_Mn y with H = K_Mn K_nM + alpha (K_MM + s I). The jitter s (M times the float64
    epsilon times the mean of diag(K_MM), more only if the Cholesky factorisation needs it) keeps
    H positive definite when K_MM is singular (repeated landmarks, finite-rank kernels such as
    the polynomial); it changes the fit by a relative 1e-13 when K_MM is well conditioned.
    With uniform landmarks K_Mn K_nM ~ (n / M) K_MM^2, so
    H ~ L ((n / M) L^T L + alpha I) L^T = L A A^T L^T with L L^T = K_MM + s I, where
    A is the Cholesky factor of (n / M) L^T L + alpha I. CG runs on the preconditioned system
    W gamma = A^{-1} L^{-1} K_Mn y with W = A^{-1} L^{-1} H L^{-T} A^{-T} (close to I), and
    beta = L^{-T} A^{-T} gamma. With M = n the approximation is exact up to the jitter and CG
    converges in a step or two.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = [
    "landmarks", "cholesky_jitter", "landmark_factor", "knm_product", "kmn_product",
    "NystromPreconditioner", "FalkonSystem",
]

#: Cholesky retries: the jitter grows tenfold each time.
_JITTER_TRIES = 12


def landmarks(n, m, random_state):
    """``m`` distinct indices out of ``n``, uniform, sorted (``random_state``: a RandomState)."""
    return np.sort(random_state.choice(n, size=m, replace=False))


def cholesky_jitter(A, jitter):
    """``(L, s)``: the lower Cholesky factor of ``A + s I`` for the smallest s in jitter 10^k
    (k = 0, 1, ...) that works.

    ``jitter`` may be 0 (try A itself first, then 1e-14 times its mean diagonal upwards).

    Raises
    ------
    ValueError
        If no shift up to 10^11 times the first one succeeds (A far from positive semi-definite).
    """
    eye = torch.eye(A.shape[0], dtype=A.dtype, device=A.device)
    scale = float(A.diagonal().abs().mean()) or 1.0
    shift = float(jitter)
    for _ in range(_JITTER_TRIES):
        L, info = torch.linalg.cholesky_ex(A + shift * eye if shift else A)
        if int(info) == 0:
            return L, shift
        shift = 10.0 * shift if shift else 1e-14 * scale
    raise ValueError(
        f"the {A.shape[0]} x {A.shape[0]} landmark matrix is not positive definite even with a "
        f"diagonal shift of {shift:.3g}: is the kernel positive semi-definite for these data?"
    )


def landmark_factor(op, Z):
    """``(K_MM, L, s)``: K(Z, Z) in float64, and L L^T = K_MM + s I with s >= M eps mean(diag).

    K_MM is computed in float64 on every device (:meth:`KernelOperator.exact_block`), so the
    jitter starts at Falkon's M times the float64 machine epsilon (relative to the diagonal).
    """
    Kmm = op.exact_block(Z)
    jitter = Kmm.shape[0] * np.finfo(np.float64).eps * float(Kmm.diagonal().abs().mean())
    L, shift = cholesky_jitter(Kmm, jitter)
    return Kmm, L, shift


def _tri(L, B, upper=False):
    """L^{-1} B (``upper=False``, L lower) or L^{-T} B (``upper=True``, pass L^T)."""
    return torch.linalg.solve_triangular(L, B, upper=upper)


def knm_product(op, X, Z, U):
    """K_nM @ U from row blocks, float64, shape (n, k)."""
    out = torch.empty((X.shape[0], U.shape[1]), dtype=torch.float64, device=op.device)
    for lo, hi, G in op.row_blocks(X, Z):
        out[lo:hi] = G @ U
    return out


def kmn_product(op, X, Z, V):
    """K_Mn @ V = sum over row blocks of K_bM^T V_b, float64, shape (M, k)."""
    out = torch.zeros((Z.shape[0], V.shape[1]), dtype=torch.float64, device=op.device)
    for lo, hi, G in op.row_blocks(X, Z):
        out += G.T @ V[lo:hi]
    return out


class NystromPreconditioner:
    """P^{-1} for P = K_nM K_MM^{-1} K_Mn + alpha I (the module docstring has the algebra).

    Building costs n M^2 (triangular solves and the Gram of the blocks) plus O(M^3); each
    application streams K_nM twice (2 n M kernel values).
    """

    def __init__(self, op, X, Z, alpha):
        self.op, self.X, self.Z, self.alpha = op, X, Z, float(alpha)
        _, self.L, _ = landmark_factor(op, Z)
        m = Z.shape[0]
        C = torch.zeros((m, m), dtype=torch.float64, device=op.device)
        for _, _, G in op.row_blocks(X, Z):
            Ub = _tri(self.L, G.T)  # (M, b) = L^{-1} K_Mb
            C.addmm_(Ub, Ub.T)
        C = 0.5 * (C + C.T)
        C.diagonal().add_(self.alpha)
        self.R, _ = cholesky_jitter(C, 0.0)

    def __call__(self, V):
        t = _tri(self.L, kmn_product(self.op, self.X, self.Z, V))
        s = torch.cholesky_solve(t, self.R)
        u = _tri(self.L.T, s, upper=True)
        return (V - knm_product(self.op, self.X, self.Z, u)) / self.alpha


class FalkonSystem:
    """The preconditioned M-dimensional Nyström system W gamma = c (module docstring)."""

    def __init__(self, op, X, Z, alpha):
        self.op, self.X, self.Z, self.alpha = op, X, Z, float(alpha)
        self.Kmm, self.L, self.shift = landmark_factor(op, Z)
        n, m = X.shape[0], Z.shape[0]
        inner = (n / m) * (self.L.T @ self.L)
        inner = 0.5 * (inner + inner.T)
        inner.diagonal().add_(self.alpha)
        self.A, _ = cholesky_jitter(inner, 0.0)

    def _left(self, V):
        """A^{-1} L^{-1} V."""
        return _tri(self.A, _tri(self.L, V))

    def to_beta(self, G):
        """beta = L^{-T} A^{-T} gamma."""
        return _tri(self.L.T, _tri(self.A.T, G, upper=True), upper=True)

    def rhs(self, Y):
        """c = A^{-1} L^{-1} K_Mn y."""
        return self._left(kmn_product(self.op, self.X, self.Z, Y))

    def matvec(self, G):
        """W gamma = A^{-1} L^{-1} (K_Mn K_nM u + alpha (K_MM + s I) u) with u = beta(gamma)."""
        u = self.to_beta(G)
        h = self.alpha * (self.Kmm @ u + self.shift * u)
        for _, _, B in self.op.row_blocks(self.X, self.Z):
            h += B.T @ (B @ u)
        return self._left(h)
