r"""Nyström landmarks, the Nyström preconditioner of K + alpha I, and the Falkon system.

Notation: X the n training points, Z the M landmarks (a uniform sample of X without
replacement), K_nM = K(X, Z), K_MM = K(Z, Z), S = diag(sqrt(w)) the square roots of the sample
weights (S = I without weights), alpha_j the ridge of target j (one per target, or one for
all). Everything M x M is float64 on the solver's device; K_nM is streamed in row blocks
(:meth:`KernelOperator.row_blocks`). K_MM is computed in float64 arithmetic on every device
(from float64 operands); the blocks of K_nM in the operator's precision (float32 on the GPU),
or in float64 from float64 operands for the exact products.

Two jitters
    The preconditioners factor L L^T = K_MM + s I with s = M eps mean(diag K_MM), eps the
    machine epsilon of the kernel values of K_nM (float32 on the GPU, float64 on the CPU), more
    only if the Cholesky factorisation needs it (Falkon's choice). The Falkon preconditioner
    models K_Mn K_nM ~ (n / M) K_MM^2, whose eigenvalues along K_MM's numerical null space are
    (n / M) s^2; K_nM carries rounding of relative size eps in every entry, so along those
    directions ||K_nM u||^2 ~ n eps^2 max(K)^2. With s of order M eps mean(diag) the model
    covers that rounding; with a float64 jitter and float32 products it undershoots by ~1e16
    and CG stalls (a degree-3 polynomial kernel, finite rank, with M = n hit max_iter with
    prediction errors of order 1).
    The *system* (the model being fitted) uses s_sys = s max(1 / M, eps64 / eps) <= s: the
    ridge term is alpha beta^T (K_MM + s_sys I) beta, and s stays a change of variables only
    (the preconditioned system is no longer exactly T + alpha I; CG does not need it to be).
    On the float32 path s_sys = s / M = eps mean(diag K_MM), one rounding unit of the kernel
    values: with s there too, the ridge itself grew by alpha s and cost test RMSE
    1.193 -> 1.214 at n = 1e6 (GPU, M = 1e4). s_sys cannot be float64-sized there: along
    K_MM's numerical null space the system's curvature alpha s_sys must stay above the float32
    products' rounding, or refinement stalls. Measured on the degree-3 polynomial kernel (rank
    20) with M = n = 60, alpha = 0.1, tol = 1e-8, float32 products: s_sys / s = 1e-9
    (float64-sized) ended at residual 81 and prediction error 509; 1e-4: 0.099 and 0.59; 1e-2:
    converged, error 3.4e-6; here s_sys / s = 1 / 60.
    Nor can s_sys be below the float64 rounding of K_MM itself (spectral norm up to about
    eps64 ||K_MM|| <= eps64 trace K_MM = M eps64 mean(diag)), or K_MM + s_sys I is indefinite
    in floating point along K_MM's numerical null space. On the float64 path that rounding is
    s itself, which the Cholesky factorisation certifies, so s_sys = s there and the ridge
    metric below is the identity (as in Falkon). With s_sys = eps64 mean(diag) there, the
    degree-2 polynomial kernel (rank 15) with M = n = 300 had K_MM + s_sys I with eigenvalues
    down to -50 s_sys: the Falkon system was indefinite, CG stalled near a residual of 1e-4
    and the dense fallback took the least-squares branch with scikit-learn's "Singular matrix"
    warning. On the float32 path s / M = eps32 mean(diag) is above M eps64 mean(diag) for any
    M below 5e8.

Landmarks in the span of the others (float64 path)
    Where K_MM is numerically singular (a finite-rank kernel such as the linear or a
    polynomial one with M above its rank, repeated points), the change of variables
    beta = L^{-T} A^{-T} gamma scales K_MM's numerical null space by s^{-1/2} (A^{-T} by
    alpha^{-1/2} more), and along it the preconditioned system is only the float64 rounding
    of K_Mn y and of the products, so amplified: its true residual could not fall below 1e-6
    to 2e-5 (linear and degree-2 and -3 polynomial kernels, alpha = 1e-2, n = 300 to 3000, M
    from twice the rank to 1000; it grows with n), and CG ended in the dense fallback even
    at tol = 1e-6. A larger s would precondition those directions as stiff, but also every
    direction where K_MM's eigenvalues lie below s: with s = M eps32 mean(diag) the rbf kernel
    (n = 2e4, M = 1e3, tol = 1e-6) took 399 CG steps instead of 90 at alpha = 1e-2, and more
    than 1000 instead of 686 at alpha = 1e-5. :func:`spanning_landmarks` drops those landmarks
    instead: a pivoted Cholesky factorisation of K_MM (LAPACK dpstrf) stops where the largest
    remaining pivot, the squared distance in feature space from a landmark to the span of
    those already taken, is below K_MM's float64 rounding, M eps64 max(diag K_MM); the
    landmarks not taken add nothing that float64 resolves. For a finite-rank kernel this keeps
    as many landmarks as its rank, which span its feature space when M was at least the rank:
    the Nyström model is then the exact kernel ridge model. The kept landmarks are no longer a
    uniform sample, but the preconditioner's (n / M) K_MM^2 stays close (degree-3 polynomial,
    35 kept of 300: 33 CG steps to tol = 1e-8, against 65 with 35 uniform landmarks). On the
    float32 path the landmarks are kept (a float64 K_MM would have to be factored on the
    host): there the float32-sized s covers these directions, as above.

Preconditioner of the exact system (S K S + alpha_j I) c = S y
    P_j = S K_nM (K_MM + s I)^{-1} K_Mn S + alpha_j I = B B^T + alpha_j I with
    B = S K_nM L^{-T} (float64 kernel values), applied in the stable eigen form of
    :class:`~kernelkit.linalg.precond.LowRankPreconditioner` (B = U Sigma V^T). B and its
    orthonormal basis are stored (2 n M float64); each application is two products with them.

Falkon system (Rudi, Carratino, Rosasco 2017), in scikit-learn's alpha convention
    The Nyström estimator f(x) = sum_j beta_j k(x, z_j) minimises
    sum_i w_i (y_i - f(x_i))^2 + alpha beta^T (K_MM + s_sys I) beta, whose normal equations are
    H beta = K_Mn W y with H = K_Mn W K_nM + alpha (K_MM + s_sys I). With uniform landmarks
    K_Mn W K_nM ~ (n / M) K_MM W_M K_MM (W_M the landmarks' weights), so
    H ~ L ((n / M) L^T W_M L + alpha R) L^T = L A A^T L^T, A the Cholesky factor of
    (n / M) L^T W_M L + alpha R, where R = L^{-1} (K_MM + s_sys I) L^{-T} is the system's ridge
    in these variables (:func:`_ridge_metric`; I on the float64 path). CG runs on the
    preconditioned system
    W gamma = A^{-1} L^{-1} K_Mn W y with W = A^{-1} L^{-1} H L^{-T} A^{-T} (close to I), and
    beta = L^{-T} A^{-T} gamma. With M = n the approximation is exact up to the jitters and CG
    converges in a step or two. One factor A per distinct alpha.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg
import torch

from kernelkit.linalg.dense import alpha_groups, shifted_solve
from kernelkit.linalg.precond import (
    EPS64, LowRankPreconditioner, cholesky_jitter, plus_diagonal, symmetrize_,
)

__all__ = [
    "landmarks", "spanning_landmarks", "landmark_factor", "kmn_product", "normal_product",
    "nystrom_preconditioner", "FalkonSystem",
]



def landmarks(n, m, random_state):
    """``m`` distinct indices out of ``n``, uniform, sorted (``random_state``: a RandomState)."""
    return np.sort(random_state.choice(n, size=m, replace=False))


def spanning_landmarks(op, X_exact, idx):
    """The landmarks ``idx`` (sorted indices into the rows of ``X_exact``, the
    :meth:`KernelOperator.exact_data` form of X) less those in the numerical span of the others
    (module docstring), sorted; on the float32 path ``idx`` itself. At least one is kept."""
    if op.triton or not len(idx):
        return idx
    Kmm = op.block(op.take(X_exact, idx)).numpy()
    tol = len(idx) * EPS64 * float(Kmm.diagonal().max())
    _, piv, rank, _ = scipy.linalg.lapack.dpstrf(Kmm, lower=1, tol=tol)
    return np.sort(idx[piv[:max(rank, 1)] - 1])


def landmark_factor(op, Z_exact):
    """``(K_MM, L, s)``: K(Z, Z) in float64 from the float64 landmarks ``Z_exact``
    (:meth:`KernelOperator.exact_data` form), and L L^T = K_MM + s I with the jitter
    s >= M ``op.eps`` mean(diag K_MM) of the module docstring."""
    Kmm = op.block(Z_exact)
    L, shift = cholesky_jitter(Kmm, _jitter(Kmm, op.eps))
    return Kmm, L, shift


def _jitter(Kmm, eps):
    """M eps mean(diag K_MM)."""
    return Kmm.shape[0] * eps * float(Kmm.diagonal().abs().mean())


def _tri(L, B, upper=False):
    """L^{-1} B (``upper=False``, L lower) or L^{-T} B (``upper=True``, pass L^T)."""
    return torch.linalg.solve_triangular(L, B, upper=upper)


def _scaled(G, sw, lo, hi):
    """Rows lo:hi of S K_nM from the block G = K(X[lo:hi], Z) (``sw`` None: S = I), in G's
    dtype."""
    return G if sw is None else sw[lo:hi].to(G.dtype) * G


def kmn_product(op, X, Z, V, sw=None):
    """K_Mn S @ V = sum over row blocks of (S_b K_bM)^T V_b, float64, shape (M, k)."""
    out = torch.zeros((Z.shape[0], V.shape[1]), dtype=torch.float64, device=op.device)
    for lo, hi, G in op.row_blocks(X, Z):
        out += (_scaled(G, sw, lo, hi).T @ V[lo:hi].to(G.dtype)).to(torch.float64)
    return out


def normal_product(op, X, Z, U, sw=None):
    """K_Mn S^2 K_nM @ U over the rows of X, float64, shape (M, k): one Nyström iteration's
    kernel work. A float32 row block G (GPU) is multiplied as it is, with float64 products and
    sums (:func:`kernelkit_gpu.mixed_gemv.gemv_float64`: 8 bytes moved per entry, against 28 for
    a float64 copy and two float64 GEMVs; a float32 GEMV's rounding had tripled the CG steps at
    n = 1e6); S^2 scales G U, so G is never copied."""
    out = torch.zeros((Z.shape[0], U.shape[1]), dtype=torch.float64, device=op.device)
    w = None if sw is None else sw * sw
    if op.triton:
        from kernelkit_gpu.mixed_gemv import gemv_float64
    for lo, hi, G in op.row_blocks(X, Z):
        if G.dtype == torch.float64:
            T = G @ U
            out += G.T @ (T if w is None else w[lo:hi] * T)
        else:
            T = gemv_float64(G, U)
            out += gemv_float64(G, T if w is None else w[lo:hi] * T, transpose=True)
    return out


def _per_alpha(factors, V, fn):
    """Apply ``fn(factor, columns of V)`` group by group (``factors``: ``[(factor, cols)]``)."""
    out = torch.empty_like(V)
    for factor, cols in factors:
        out[:, cols] = fn(factor, V[:, cols])
    return out


def _shifted_factors(S, alphas, R=None):
    """``[(Cholesky factor of S + alpha R, columns with that alpha)]`` for each distinct alpha
    (R None: the identity; :func:`~kernelkit.linalg.dense.shifted_solve` is the dense solve of
    the same shifts). R = L^{-1} (K_MM + s_sys I) L^{-T} is positive definite (s_sys is above
    K_MM's rounding, module docstring); S + alpha R may still miss positive definiteness by
    S's rounding where alpha is tiny, then :func:`cholesky_jitter` adds the smallest diagonal
    shift that works. One M x M temporary at a time besides the factors (two while a shift is
    tried)."""
    factors = []
    for alpha, cols in alpha_groups(alphas):
        shifted = plus_diagonal(S, alpha) if R is None else torch.add(S, R, alpha=alpha)
        factors.append((cholesky_jitter(shifted, 0.0)[0], cols))
        del shifted
    return factors


def _ridge_metric(L, shift, system_shift):
    """L^{-1} (K_MM + s_sys I) L^{-T} = I - (s - s_sys) L^{-1} L^{-T} (L L^T = K_MM + s I):
    the system's ridge term in the preconditioned variables, None when s_sys = s (then I: the
    float64 path).
    Formed in place: at most two M x M temporaries (L^{-1}, then R) besides L."""
    d = shift - system_shift
    if not d:
        return None
    Linv = _tri(L, torch.eye(L.shape[0], dtype=torch.float64, device=L.device))
    R = Linv @ Linv.T
    del Linv
    R.mul_(-d)
    R.diagonal().add_(1.0)
    return symmetrize_(R)


def nystrom_preconditioner(op, exact, alphas, sw=None):
    """P_j^{-1} for P_j = S K_nM (K_MM + s I)^{-1} K_Mn S + alpha_j I (module docstring).

    ``exact = (X, Z)``: float64 operands; ``alphas`` the ridge of each column (tensor of
    shape (k,)); ``sw`` the square roots of the sample weights, shape (n, 1), or None. Where
    alpha_j = 0 (no ridge: S K S c = S y, singular wherever K is), P_j takes the jitter s in
    its place, so that it stays positive definite. Building
    streams K_nM once (float64 kernel values) and costs about 3 n M^2 operations (triangular
    solves, QR, the products with the small SVD's factor).
    """
    X, Z = exact
    _, L, shift = landmark_factor(op, Z)
    B = torch.empty((X.shape[0], Z.shape[0]), dtype=torch.float64, device=op.device)
    for lo, hi, G in op.row_blocks(X, Z):
        B[lo:hi] = _tri(L, _scaled(G, sw, lo, hi).T).T
    return LowRankPreconditioner(B, torch.where(alphas > 0, alphas, shift))


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
        #: the system's jitter s_sys = s max(1 / M, eps64 / eps) <= s (module docstring)
        self.system_shift = self.shift * max(1.0 / m, EPS64 / op.eps)
        Lw = self.L if weights is None else weights[landmark_indices][:, None] * self.L
        inner = torch.mm(self.L.T, Lw).mul_(n / m)
        del Lw
        #: A_j A_j^T = (n / M) L^T W_M L + alpha_j L^{-1} (K_MM + s_sys I) L^{-T}: the ridge
        #: term enters the preconditioner exactly (with alpha_j I there instead, the directions
        #: where K_MM < s are preconditioned by alpha s against the system's alpha s_sys, M times
        #: too much: 645 CG steps at M = 2e4, n = 1e6 on a GPU, against 28 with this form)
        self.ridge_metric = _ridge_metric(self.L, self.shift, self.system_shift)
        self.factors = _shifted_factors(symmetrize_(inner), alphas, self.ridge_metric)

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

    def dense_solve(self, Y):
        """``(beta, used_lstsq)``: the normal equations H beta = K_Mn W y by a dense float64
        solve, float64 kernel values. In the variables x = L^T beta they read
        (T + alpha_j (I - d N)) x_j = c_j with T = L^{-1} K_Mn W K_nM L^{-T},
        c = L^{-1} K_Mn W y, N = L^{-1} L^{-T} and d = s - s_sys (so that
        L^{-1} (K_MM + s_sys I) L^{-T} = I - d N); each distinct alpha is one
        :func:`~kernelkit.linalg.dense.shifted_solve`."""
        X, Z = self.exact
        m = Z.shape[0]
        T = torch.zeros((m, m), dtype=torch.float64, device=self.op.device)
        for lo, hi, B in self.op.row_blocks(X, Z):
            Ub = _tri(self.L, _scaled(B, self.sw, lo, hi).T)
            T.addmm_(Ub, Ub.T)
        T = 0.5 * (T + T.T)
        WY = Y if self.weights is None else self.weights[:, None] * Y
        c = _tri(self.L, kmn_product(self.op, X, Z, WY))
        R = self.ridge_metric
        x = torch.empty_like(c)
        used = False
        for alpha, cols in alpha_groups(self.alphas):
            A = T + alpha * (R - torch.eye(m, dtype=T.dtype, device=T.device)) if R is not None \
                else T.clone()
            x[:, cols], lstsq = shifted_solve(0.5 * (A + A.T), c[:, cols],
                                              torch.full((len(cols),), alpha, dtype=c.dtype,
                                                         device=c.device))
            used = used or lstsq
        return _tri(self.L.T, x, upper=True), used

    def _data_term(self, u, X, Z):
        """K_Mn W K_nM u over the rows of X (:func:`normal_product`)."""
        return normal_product(self.op, X, Z, u, self.sw)

    def _matvec(self, G, X, Z):
        u = self.to_beta(G)
        return self._left(self._data_term(u, X, Z)
                          + self.alphas * (self.Kmm @ u + self.system_shift * u))

    def matvec(self, G):
        """W gamma = A^{-1} L^{-1} (K_Mn W K_nM u + alpha (K_MM + s_sys I) u), u = beta(gamma), with
        the operator's kernel values (float32 on the GPU)."""
        return self._matvec(G, *self.data)

    def exact_matvec(self, G):
        """:meth:`matvec` with float64 kernel values."""
        return self._matvec(G, *self.exact)
