r"""Nyström landmarks, the Nyström preconditioner of K + alpha I, and the Falkon system.

Notation: X the n training points, Z the M landmarks (a uniform sample of X without
replacement), K_nM = K(X, Z), K_MM = K(Z, Z) = L L^T - s I (Cholesky factor with a jitter s),
S = diag(sqrt(w)) the square roots of the sample weights (S = I without weights), alpha_j the
ridge of target j (one per target, or one for all). Everything M x M is float64 on the
solver's device; K_nM is streamed in row blocks (:meth:`KernelOperator.row_blocks`) and never
stored whole. K_MM is computed in float64 arithmetic on every device (from float64 operands);
the blocks of K_nM in the operator's precision (float32 on the GPU), or in float64 from float64
operands for the exact products.

Jitter
    s = M eps mean(diag K_MM), eps the machine epsilon of the kernel values of K_nM (float32 on
    the GPU, float64 on the CPU), more only if the Cholesky factorisation needs it (Falkon's
    choice). Both preconditioners model K_nM by K_MM: the Falkon one assumes
    K_Mn K_nM ~ (n / M) K_MM^2, whose eigenvalues along K_MM's numerical null space are
    (n / M) s^2. K_nM carries rounding of relative size eps in every entry, so along those
    directions ||K_nM u||^2 ~ n eps^2 max(K)^2. With s of order M eps mean(diag) the model
    covers that rounding; with a float64 jitter and float32 products it undershoots by ~1e16
    and CG stalls (a degree-3 polynomial kernel, finite rank, with M = n hit max_iter with
    prediction errors of order 1). The jitter moves the predictions by at most about
    s / alpha times |y| (the components of y along K's eigenvalues below s).

Preconditioner of the exact system (S K S + alpha_j I) c = S y
    P_j = S K_nM K_MM^{-1} K_Mn S + alpha_j I = U U^T + alpha_j I with U = S K_nM L^{-T},
    applied by Woodbury:

    .. math::

        P_j^{-1} v = \frac{1}{\alpha_j}\left(v - U (\alpha_j I + U^T U)^{-1} U^T v\right),

    with the M x M inverse factored through L, so that alpha_j I + U^T U (eigenvalues
    >= alpha_j) is the only matrix inverted besides the triangular L. C = U^T U is accumulated
    block by block as the Gram matrix of the computed blocks U_b = S_b K_bM L^{-T}, so it is
    positive semi-definite in floating point and the Cholesky factor of alpha_j I + C exists.

Falkon system (Rudi, Carratino, Rosasco 2017), in scikit-learn's alpha convention
    The Nyström estimator f(x) = sum_j beta_j k(x, z_j) minimises
    sum_i w_i (y_i - f(x_i))^2 + alpha beta^T (K_MM + s I) beta, whose normal equations are
    H beta = K_Mn W y with H = K_Mn W K_nM + alpha (K_MM + s I). With uniform landmarks
    K_Mn W K_nM ~ (n / M) K_MM W_M K_MM (W_M the landmarks' weights), so
    H ~ L ((n / M) L^T W_M L + alpha I) L^T = L A A^T L^T, A the Cholesky factor of
    (n / M) L^T W_M L + alpha I. CG runs on the preconditioned system
    W gamma = A^{-1} L^{-1} K_Mn W y with W = A^{-1} L^{-1} H L^{-T} A^{-T} (close to I), and
    beta = L^{-T} A^{-T} gamma. With M = n the approximation is exact up to the jitter and CG
    converges in a step or two. One factor A per distinct alpha.
"""

from __future__ import annotations

import numpy as np
import torch

from kernelkit.solvers._dense import alpha_groups

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


def landmark_factor(op, Z_exact):
    """``(K_MM, L, s)``: K(Z, Z) in float64 from the float64 landmarks ``Z_exact``
    (:meth:`KernelOperator.exact_data` form), and L L^T = K_MM + s I with the jitter
    s >= M ``op.eps`` mean(diag K_MM) of the module docstring."""
    Kmm = op.block(Z_exact)
    jitter = Kmm.shape[0] * op.eps * float(Kmm.diagonal().abs().mean())
    L, shift = cholesky_jitter(Kmm, jitter)
    return Kmm, L, shift


def _tri(L, B, upper=False):
    """L^{-1} B (``upper=False``, L lower) or L^{-T} B (``upper=True``, pass L^T)."""
    return torch.linalg.solve_triangular(L, B, upper=upper)


def _scaled(G, sw, lo, hi):
    """Rows lo:hi of S K_nM from the block G = K(X[lo:hi], Z) (``sw`` None: S = I)."""
    return G if sw is None else sw[lo:hi] * G


def knm_product(op, X, Z, U, sw=None):
    """S K_nM @ U from row blocks, float64, shape (n, k)."""
    out = torch.empty((X.shape[0], U.shape[1]), dtype=torch.float64, device=op.device)
    for lo, hi, G in op.row_blocks(X, Z):
        out[lo:hi] = _scaled(G, sw, lo, hi) @ U
    return out


def kmn_product(op, X, Z, V, sw=None):
    """K_Mn S @ V = sum over row blocks of (S_b K_bM)^T V_b, float64, shape (M, k)."""
    out = torch.zeros((Z.shape[0], V.shape[1]), dtype=torch.float64, device=op.device)
    for lo, hi, G in op.row_blocks(X, Z):
        out += _scaled(G, sw, lo, hi).T @ V[lo:hi]
    return out


def _per_alpha(factors, V, fn):
    """Apply ``fn(factor, columns of V)`` group by group (``factors``: ``[(factor, cols)]``)."""
    out = torch.empty_like(V)
    for factor, cols in factors:
        out[:, cols] = fn(factor, V[:, cols])
    return out


def _shifted_factors(S, alphas):
    """``[(Cholesky factor of S + alpha I, columns with that alpha)]`` for each distinct alpha
    (:func:`~kernelkit.solvers._dense.shifted_solve` is the dense solve of the same shifts)."""
    eye = torch.eye(S.shape[0], dtype=S.dtype, device=S.device)
    return [(cholesky_jitter(S + alpha * eye, 0.0)[0], cols) for alpha, cols in alpha_groups(alphas)]


class NystromPreconditioner:
    """P_j^{-1} for P_j = S K_nM K_MM^{-1} K_Mn S + alpha_j I (module docstring).

    ``data = (X, Z)`` operands of the products, ``Z_exact`` the float64 landmarks, ``alphas``
    the ridge of each column (tensor of shape (k,)), ``sw`` the square roots of the sample
    weights, shape (n, 1), or None. Building costs n M^2 (triangular solves and the Gram of the
    blocks) plus O(M^3) per distinct alpha; each application streams K_nM twice (2 n M kernel
    values).
    """

    def __init__(self, op, data, Z_exact, alphas, sw=None):
        self.op, (self.X, self.Z), self.alphas, self.sw = op, data, alphas, sw
        _, self.L, _ = landmark_factor(op, Z_exact)
        m = self.Z.shape[0]
        C = torch.zeros((m, m), dtype=torch.float64, device=op.device)
        for lo, hi, G in op.row_blocks(self.X, self.Z):
            Ub = _tri(self.L, _scaled(G, sw, lo, hi).T)  # (M, b) = L^{-1} K_Mb S_b
            C.addmm_(Ub, Ub.T)
        C = 0.5 * (C + C.T)
        self.factors = _shifted_factors(C, alphas)

    def __call__(self, V):
        t = _tri(self.L, kmn_product(self.op, self.X, self.Z, V, self.sw))
        s = _per_alpha(self.factors, t, lambda R, T: torch.cholesky_solve(T, R))
        u = _tri(self.L.T, s, upper=True)
        return (V - knm_product(self.op, self.X, self.Z, u, self.sw)) / self.alphas


class FalkonSystem:
    """The preconditioned M-dimensional Nyström system W gamma = c (module docstring).

    ``data`` and ``exact`` are the ``(X, Z)`` operands in the operator's precision and in
    float64; ``weights`` the sample weights (n,) or None, ``alphas`` the ridge of each target.
    """

    def __init__(self, op, data, exact, alphas, weights, landmark_indices):
        self.op, self.data, self.exact, self.alphas = op, data, exact, alphas
        self.weights = weights
        self.sw = None if weights is None else weights.sqrt()[:, None]
        self.Kmm, self.L, self.shift = landmark_factor(op, exact[1])
        n, m = exact[0].shape[0], exact[1].shape[0]
        Lw = self.L if weights is None else weights[landmark_indices][:, None] * self.L
        inner = (n / m) * (self.L.T @ Lw)
        self.factors = _shifted_factors(0.5 * (inner + inner.T), alphas)

    def _left(self, V):
        """A_j^{-1} L^{-1} V, column by column."""
        return _per_alpha(self.factors, _tri(self.L, V), lambda A, T: _tri(A, T))

    def to_beta(self, G):
        """beta = L^{-T} A_j^{-T} gamma."""
        return _tri(self.L.T, _per_alpha(self.factors, G, lambda A, T: _tri(A.T, T, upper=True)),
                    upper=True)

    def rhs(self, Y):
        """c = A^{-1} L^{-1} K_Mn W y, with float64 kernel values."""
        X, Z = self.exact
        WY = Y if self.weights is None else self.weights[:, None] * Y
        return self._left(kmn_product(self.op, X, Z, WY))

    def dense_system(self, Y):
        """``(T, c)`` with T = L^{-1} K_Mn W K_nM L^{-T} and c = L^{-1} K_Mn W y, float64 kernel
        values: the normal equations are (T + alpha_j I) x_j = c_j with beta_j = L^{-T} x_j
        (:meth:`dense_beta`), a dense M x M system for :func:`shifted_solve`."""
        X, Z = self.exact
        m = Z.shape[0]
        T = torch.zeros((m, m), dtype=torch.float64, device=self.op.device)
        for lo, hi, B in self.op.row_blocks(X, Z):
            Ub = _tri(self.L, _scaled(B, self.sw, lo, hi).T)
            T.addmm_(Ub, Ub.T)
        WY = Y if self.weights is None else self.weights[:, None] * Y
        return 0.5 * (T + T.T), _tri(self.L, kmn_product(self.op, X, Z, WY))

    def dense_beta(self, x):
        """beta = L^{-T} x from the solution of :meth:`dense_system`."""
        return _tri(self.L.T, x, upper=True)

    def _matvec(self, G, X, Z):
        u = self.to_beta(G)
        h = self.alphas * (self.Kmm @ u + self.shift * u)
        for lo, hi, B in self.op.row_blocks(X, Z):
            Bs = _scaled(B, self.sw, lo, hi)
            h += Bs.T @ (Bs @ u)
        return self._left(h)

    def matvec(self, G):
        """W gamma = A^{-1} L^{-1} (K_Mn W K_nM u + alpha (K_MM + s I) u), u = beta(gamma), with
        the operator's kernel values (float32 on the GPU)."""
        return self._matvec(G, *self.data)

    def exact_matvec(self, G):
        """:meth:`matvec` with float64 kernel values."""
        return self._matvec(G, *self.exact)
