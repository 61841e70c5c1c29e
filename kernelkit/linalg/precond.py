r"""The low-rank preconditioner of every solver: P = B B^T + mu I from a Nyström factor B.

Both estimators precondition a shifted kernel system A + mu I (A = K for the GP's training
covariance without its noise, A = S K S for KernelRidge with the sample weights' square roots
S) by a Nyström approximation of A on k columns, landmarks drawn uniformly (the GP's
:func:`kernelkit.estimators.gp._lml.make_probes`, KernelRidge's plan). It is built in the stable
form of Frangella, Tropp and Udell (2023, "Randomized Nyström preconditioning"):

1. shift: with Y = A[:, S] (n x k) and G = A[S, S], take nu = eps ||Y||_F and
   C = chol(G + nu I) (nu raised tenfold until the factorisation succeeds, :func:`cholesky_jitter`);
2. with Y_nu = Y + nu I[:, S] (the columns of A + nu I), B = Y_nu C^{-T}, so that
   B B^T = Y_nu (G + nu I)^{-1} Y_nu^T is the Nyström approximation of A + nu I;
3. B = Q R (Householder), R R^T = W Sigma^2 W^T (symmetric eigenproblem), U = Q W: orthonormal
   columns to rounding;
4. unshift: Lambda = max(Sigma^2 - nu, 0).

(:func:`nystrom_factor` with ``rows=None`` skips the shift of Y and the unshift: B = Y C^{-T} for a
factor Y G^{-1} Y^T that is not a column sample of A, as KernelRidge's S K_nM K_MM^{-1} K_Mn S.)

Then, all in float64, in one of two forms of the same preconditioner, chosen by how far the
shift mu lies below ||B||^2 (:data:`WOODBURY_MAX_RATIO`):

- the Cholesky (Woodbury) form, P = B B^T + mu I: C = mu I + B^T B = L L^T (k x k) and
  F = B L^{-T} (n x k, held instead of B),

  .. math::

      P^{-1} v = \frac{1}{\mu}\left(v - B C^{-1} B^\top v\right)
               = \frac{1}{\mu}\left(v - F F^\top v\right),\qquad
      \log\det P = (n - k) \log \mu + \log\det C.

  It costs two n x k x k products (B^T B, and F from an explicit L^{-1}: cond(L) <= 1e5
  here), a k x k Cholesky and triangular inverse, and each solve two skinny GEMMs (cheaper than
  the eigen form's QR and eigenproblem; figures in docs/benchmarks.md). Its solve loses
  about eps ||B||^2 / mu relative (the subtraction cancels where B's singular values are large),
  so it is used only where that is at most 2e-6: mu >= ||B||_F^2 / 1e10, and a scalar mu;
- the eigen form, for smaller shifts and per-column ones (3. and 4. above): P = U Lambda U^T
  + mu I,

  .. math::

      P^{-1} v = U (\Lambda + \mu I)^{-1} U^T v + \frac{1}{\mu} (I - U U^T) v,

  with the projection onto the complement of U applied twice (classical Gram-Schmidt twice), so
  that the part divided by a tiny mu carries no O(eps ||v||) leftover of range(U): the solve is
  backward stable when the ridge or noise mu is far below ||A|| (measured backward error 5e-17
  relative at mu = 1e-13 ||A||, tests/test_solver_precond.py);
  log det P = sum log(lambda_i + mu) + (n - k) log mu.

Both give probes z = (low-rank part) e_1 + sqrt(mu) e_2 ~ N(0, P), with the low-rank part B e_1
up to the unshift (the same draws in either form), and w^T P w, differentiable (through B and
Sigma, never through U, whose derivative is unstable for close singular values; the part left
out, nu w^T d(U U^T) w, has zero expectation over the probes because tr(P^{-1} d(U U^T)) = 0).
The two forms differ by the unshift nu = eps ||Y||_F (the Cholesky form keeps it: a change of P at
rounding level); each is consistent in itself (solve, log det, probes and quad describe one P),
which is what the GP's log-determinant identity needs. The GP builds P with
:func:`nystrom_preconditioner`, whose :meth:`LowRankPreconditioner.terms` (its part of the
gradient surrogate, -1/2 log det P + 1/(2t) sum w^T P w) has a closed-form backward in the
Cholesky form (:class:`_WoodburyTerms`).
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["WOODBURY_MAX_RATIO", "cholesky_jitter", "plus_diagonal", "symmetrize_",
           "nystrom_factor", "nystrom_preconditioner", "LowRankPreconditioner"]

#: Cholesky retries: the jitter grows tenfold each time.
_JITTER_TRIES = 12
EPS64 = float(np.finfo(np.float64).eps)
#: The Cholesky (Woodbury) form is used where ||B||_F^2 <= WOODBURY_MAX_RATIO mu: its solve then
#: loses at most about eps64 x this ratio = 2e-6 relative (module docstring), in the directions
#: of B's largest singular values, where P^{-1} is smallest. CG only needs a fixed symmetric
#: positive definite P close to the intended one (its residuals come from A); the GP's log
#: det P is exact from L. Raised from 1e8: a GP fitted at n = 1e6 (ratio 4.6e8) fell into the
#: eigen form, whose memory peak at rank 1334 exceeded the Cholesky form's at rank 2048, which
#: needed half the CG steps (docs/benchmarks.md, figures behind choices in the code).
WOODBURY_MAX_RATIO = 1e10


def plus_diagonal(A, shift):
    """A + shift I as one new matrix (A itself when shift is 0); no identity matrix is formed,
    so an M x M step costs one M x M copy (M = 5e4: 20 GB in float64)."""
    if not shift:
        return A
    B = A.clone()
    B.diagonal().add_(shift)
    return B


def symmetrize_(A, block=4096):
    """A <- (A + A^T) / 2 in place, in square blocks (no M x M temporary); the values are those
    of ``0.5 * (A + A.T)``, and the result is exactly symmetric. Returns A."""
    m = A.shape[0]
    for i0 in range(0, m, block):
        i1 = min(m, i0 + block)
        for j0 in range(i0, m, block):
            j1 = min(m, j0 + block)
            avg = 0.5 * (A[i0:i1, j0:j1] + A[j0:j1, i0:i1].T)
            A[i0:i1, j0:j1] = avg
            A[j0:j1, i0:i1] = avg.T
    return A


def cholesky_jitter(A, jitter):
    """``(L, s)``: the lower Cholesky factor of ``A + s I`` for the smallest s in jitter 10^k
    (k = 0, 1, ...) that works.

    ``jitter`` may be 0 (try A itself first, then 1e-14 times its mean diagonal upwards).

    Raises
    ------
    ValueError
        If no shift up to 10^11 times the first one succeeds (A far from positive semi-definite).
    """
    shift = float(jitter)
    for _ in range(_JITTER_TRIES):
        L, info = torch.linalg.cholesky_ex(plus_diagonal(A, shift))
        if int(info) == 0:
            return L, shift
        shift = 10.0 * shift if shift else 1e-14 * (float(A.detach().diagonal().abs().mean())
                                                   or 1.0)
    raise ValueError(
        f"the {A.shape[0]} x {A.shape[0]} landmark matrix is not positive definite even with a "
        f"diagonal shift of {shift:.3g}: is the kernel positive semi-definite for these data?"
    )


def nystrom_factor(Y, G, rows=None, jitter=0.0):
    """``(B, unshift)`` with B B^T the shifted Nyström approximation Y_nu (G + nu I)^{-1} Y_nu^T.

    Parameters
    ----------
    Y : torch.Tensor of shape (n, k), float64
        Columns A[:, S] (differentiable).
    G : torch.Tensor of shape (k, k), float64
        A[S, S] (symmetrised here).
    rows : torch.Tensor of shape (k,), int64, optional
        S, when Y's columns are columns of A: then Y_nu = Y + nu I[:, S] and ``unshift`` = nu
        (module docstring). None: B = Y (G + nu I)^{-1/2}, unshift 0.
    jitter : float
        Smallest nu; at least eps ||Y||_F is used.

    Returns
    -------
    B : torch.Tensor of shape (n, k)
    unshift : float
    """
    B, nu, _ = _nystrom_parts(Y, G, rows, jitter)
    return B, nu


def _nystrom_parts(Y, G, rows, jitter=0.0):
    """:func:`nystrom_factor`'s ``(B, unshift)`` and the lower Cholesky factor C of G + nu I."""
    nu0 = max(float(jitter), EPS64 * float(torch.linalg.matrix_norm(Y.detach())))
    C, nu = cholesky_jitter(0.5 * (G + G.T), nu0)
    # Y C^-T as a right-side solve: no transposed copies (faster than the left-side solve of
    # Y^T; docs/benchmarks.md)
    if rows is None:
        return torch.linalg.solve_triangular(C.T, Y, upper=True, left=False), 0.0, C
    cols = torch.arange(Y.shape[1], device=Y.device)
    Y = Y.index_put((rows, cols), torch.full_like(cols, nu, dtype=Y.dtype), accumulate=True)
    if torch.is_grad_enabled() and (Y.requires_grad or C.requires_grad):
        return torch.linalg.solve_triangular(C.T, Y, upper=True, left=False), nu, C
    # in place over the fresh Y_nu: one n x k matrix less at the peak (16 GB at n = 1e6,
    # k = 2048)
    return torch.linalg.solve_triangular(C.T, Y, upper=True, left=False, out=Y), nu, C


def _form_numbers(B, mu):
    """(||B||_F^2, mu) read to the host in one synchronisation: what decides the preconditioner's
    form (Cholesky where mu >= ||B||_F^2 / :data:`WOODBURY_MAX_RATIO`) for a scalar shift mu."""
    return torch.stack([torch.linalg.vector_norm(B) ** 2,
                        mu.to(B.device, torch.float64)]).tolist()


def nystrom_preconditioner(Y, rows, shift):
    """The GP's P: Y = A[:, rows] (differentiable), P = B B^T + ``shift`` I with B from
    ``nystrom_factor(Y, Y[rows], rows)``, whose :meth:`LowRankPreconditioner.terms` is
    differentiable in Y and ``shift``.

    In the Cholesky form the factorisations run without autograd and :meth:`~LowRankPreconditioner.terms`
    has its gradient in closed form (:class:`_WoodburyTerms`: one n x k x k GEMM, where autograd
    through the triangular solve, both Cholesky factorisations and B^T B cost several times
    more; docs/benchmarks.md); in the eigen form B is rebuilt with autograd."""
    grad = Y.requires_grad or (torch.is_tensor(shift) and shift.requires_grad)
    with torch.no_grad():
        Yd = Y.detach()
        B, nu, C = _nystrom_parts(Yd, Yd[rows], rows)
        mu = torch.as_tensor(shift).detach()
        frob2, mu_value = _form_numbers(B, mu)
        # the eigen form with a gradient is built once, below, with autograd: not here first
        # (its QR and eigenvectors would be two n x k matrices more at the peak)
        eigen = grad and frob2 > WOODBURY_MAX_RATIO * mu_value
        pre = None if eigen else LowRankPreconditioner(B, mu, nu, read=(frob2, mu_value))
    if not grad:
        return pre
    if pre is not None and pre.woodbury:
        pre._closed = (Y, torch.as_tensor(shift, dtype=torch.float64, device=Y.device), C, rows)
        return pre
    del B, pre
    B, nu = nystrom_factor(Y, Y[rows], rows=rows)  # the eigen form: autograd through B
    return LowRankPreconditioner(B, shift, nu)


class _Gram(torch.autograd.Function):
    """B^T B with the backward of one GEMM, B (G + G^T), where autograd of ``B.T @ B`` runs two
    (B appears twice): an n x k x k product saved."""

    @staticmethod
    def forward(ctx, B):
        ctx.save_for_backward(B)
        return B.T @ B

    @staticmethod
    def backward(ctx, G):
        (B,) = ctx.saved_tensors
        return B @ (G + G.T)


class LowRankPreconditioner:
    """P = B B^T + mu I (up to the unshift) from a Nyström factor B, in the Cholesky or the
    eigen form (module docstring).

    Parameters
    ----------
    B : torch.Tensor of shape (n, k), float64
        From :func:`nystrom_factor`; may carry autograd history (for :attr:`logdet` and
        :meth:`quad`).
    shift : float or torch.Tensor
        mu > 0: a scalar (may require grad), or one value per right-hand-side column, shape
        (m,), for :meth:`solve` only (KernelRidge's per-target alpha).
    unshift : float
        nu of :func:`nystrom_factor`.
    read : tuple of two floats, optional
        (||B||_F^2, mu) for a scalar shift, already read to the host by the caller (one
        synchronisation less).

    Attributes
    ----------
    woodbury : bool
        Whether the Cholesky form is used (scalar mu >= ||B||_F^2 / :data:`WOODBURY_MAX_RATIO`).
    """

    def __init__(self, B, shift, unshift=0.0, read=None):
        n, k = B.shape
        self.n, self.rank = n, k
        self.shift = torch.as_tensor(shift, dtype=torch.float64, device=B.device)
        self.unshift = float(unshift)
        self.woodbury = False
        self._closed = None  # set by nystrom_preconditioner: the closed-form gradient's inputs
        # kept only for the gradient of quad (the GP); KernelRidge frees its n x k factor
        self._B = B if B.requires_grad else None
        if k and self.shift.ndim == 0:
            # one pass over B decides the form; B^T B (an n x k x k GEMM) only where it is used
            frob2, self._mu = read or _form_numbers(B.detach(), self.shift.detach())
            if frob2 <= WOODBURY_MAX_RATIO * self._mu:
                gram = _Gram.apply(B)
                L, info = torch.linalg.cholesky_ex(gram + torch.diag_embed(self.shift.expand(k)))
                self.woodbury = int(info) == 0
        if self.woodbury:
            self._L = L  # carries the gradient of log det C
            with torch.no_grad():  # F = B L^-T: P^-1 v = (v - F F^T v) / mu, two GEMMs
                self._chol = L.detach()
                # by a GEMM with L^-1 (cond(L) <= 1e5 here, so 1e-11 relative), in place of a
                # triangular solve with n right-hand sides (slower; docs/benchmarks.md)
                eye = torch.eye(k, dtype=L.dtype, device=L.device)
                self._Linv = torch.linalg.solve_triangular(self._chol, eye, upper=False)
                self._F = B.detach() @ self._Linv.T
        elif k:
            Q, R = torch.linalg.qr(B)
            # R R^T = W Sigma^2 W^T: a symmetric eigenproblem instead of the SVD of R (7x faster
            # at k = 1024, docs/benchmarks.md); only the eigenvalues carry gradients (stable
            # for repeated ones), and U = Q W stays orthonormal to rounding
            sigma2, W = torch.linalg.eigh(R @ R.T)
            self.sigma2 = sigma2.clamp_min(0.0)
            with torch.no_grad():
                self.U = Q @ W
                sigma = self.sigma2.sqrt()
                # V^T = Sigma^-1 W^T R (B = U Sigma V^T), 0 where sigma = 0 (lambda is 0 there)
                self._Vh = torch.where(sigma[:, None] > 0, (W.T @ R)
                                       / torch.where(sigma > 0, sigma, 1.0)[:, None], 0.0)
                self.lam = (self.sigma2 - self.unshift).clamp_min(0.0)
        else:
            self.U = torch.zeros((n, 0), dtype=torch.float64, device=B.device)
            self.lam = self.sigma2 = torch.zeros(0, dtype=torch.float64, device=B.device)
            self._Vh = torch.zeros((0, 0), dtype=torch.float64, device=B.device)
            self._B = None

    def map_factors_(self, fn):
        """Replace each constant tensor that :meth:`solve` and :meth:`sample` read by
        ``fn(tensor)`` (under a process group: rank 0's, broadcast). Returns self."""
        names = ("_F", "_chol", "_Linv") if self.woodbury else ("U", "lam", "_Vh")
        for name in names:
            setattr(self, name, fn(getattr(self, name)))
        return self

    @property
    def logdet(self):
        """log det P, exact (float64), differentiable (scalar shift only)."""
        if self.woodbury:
            return (2.0 * torch.log(self._L.diagonal()).sum()
                    + (self.n - self.rank) * torch.log(self.shift))
        lam = (self.sigma2 - self.unshift).clamp_min(0.0)
        return torch.log(lam + self.shift).sum() + (self.n - self.rank) * torch.log(self.shift)

    def solve(self, R):
        """P^{-1} R (no autograd), float64, shape of R."""
        with torch.no_grad():
            mu = self.shift.detach()
            R = R.to(torch.float64)
            if self.woodbury:  # (R - F (F^T R)) / mu in one GEMM's epilogue
                return torch.addmm(R, self._F, self._F.T @ R, beta=1.0 / self._mu,
                                   alpha=-1.0 / self._mu)
            UtR = self.U.T @ R
            rest = R - self.U @ UtR
            rest = rest - self.U @ (self.U.T @ rest)  # twice is enough
            inner = UtR / (self.lam[:, None] + mu)
            return self.U @ inner + rest / mu

    __call__ = solve

    def sample(self, eps_low, eps_full):
        """Probes z = B eps_low[:k] + sqrt(mu) eps_full ~ N(0, P) (no autograd).

        In the eigen form the low-rank part is U Lambda^{1/2} V^T eps_low (B = U Sigma V^T): the
        same draws as B eps_low up to the unshift."""
        with torch.no_grad():
            noise = torch.sqrt(self.shift.detach()) * eps_full
            if self.woodbury:  # B e = F (L^T e)
                return self._F @ (self._chol.T @ eps_low[:self.rank]) + noise
            return self.U @ (self.lam.sqrt()[:, None] * (self._Vh @ eps_low[:self.rank])) + noise

    def quad(self, W):
        """sum_j w_j^T P w_j over the columns of W (float64), differentiable in B and mu."""
        W = W.detach().to(torch.float64)
        if self.woodbury:  # B^T W = L F^T W
            BtW = self._B.T @ W if self._B is not None else self._chol @ (self._F.T @ W)
            return BtW.square().sum() + self.shift * W.square().sum()
        with torch.no_grad():
            UtW = self.U.T @ W
            kept_out = self.sigma2.detach().clamp_max(self.unshift)  # sigma^2 - lambda
            removed = (kept_out[:, None] * UtW.square()).sum()
            low_rank = (self.lam[:, None] * UtW.square()).sum()
        if self._B is not None:  # the factor carries the gradient: w^T B B^T w - unshift part
            low_rank = (self._B.T @ W).square().sum() - removed
        return low_rank + self.shift * W.square().sum()

    def terms(self, W):
        """-1/2 log det P + 1/(2t) sum_j w_j^T P w_j over the t columns of W (the first term
        alone for t = 0): the preconditioner's part of the GP's gradient surrogate,
        differentiable (in closed form where :func:`nystrom_preconditioner` built P in the
        Cholesky form, else by autograd through :attr:`logdet` and :meth:`quad`)."""
        W = W.detach().to(torch.float64)
        if self._closed is not None:
            Y, shift, C, rows = self._closed
            return _WoodburyTerms.apply(Y, shift, self, C, rows, W)
        value = -0.5 * self.logdet
        return value + 0.5 / W.shape[1] * self.quad(W) if W.shape[1] else value


class _WoodburyTerms(torch.autograd.Function):
    r""":meth:`LowRankPreconditioner.terms` in the Cholesky form, with its gradient in closed form.

    With A = G + nu I = C C^T (G = Y[S]), Y_nu = Y + nu I[:, S] = B C^T, P = Y_nu A^{-1} Y_nu^T
    + mu I, mu I + B^T B = L L^T, F = B L^{-T}, and M = -1/2 P^{-1} + 1/(2t) W W^T, the value
    tr(M dP) of the differential gives

    .. math::

        \frac{\partial}{\partial Y} = 2 M Y_\nu A^{-1}
            = \left(-F L^{-1} + \tfrac1t W (B^\top W)^\top\right) C^{-1}, \qquad
        \frac{\partial}{\partial G} = -A^{-1} Y_\nu^\top M Y_\nu A^{-1}
            = C^{-\top}\left(\tfrac12 (I - \mu L^{-\top} L^{-1})
              - \tfrac1{2t} (B^\top W)(B^\top W)^\top\right) C^{-1},

    (added to the rows S of the first, G being those rows of Y), and
    d/d mu = tr(M) = -1/2 ((n - k) / mu + ||L^{-1}||_F^2) + ||W||_F^2 / (2t), from
    P^{-1} B = F L^{-1} and B^T P^{-1} B = I - mu L^{-T} L^{-1}. C^{-1} is an explicit triangular
    inverse (cond(C) <= eps^{-1/2} with nu >= eps ||Y||_F)."""

    @staticmethod
    def forward(ctx, Y, mu, pre, C, rows, W):
        # every k x k part here (the backward then has two n x k GEMMs and no allocation of
        # its own beyond them, and runs behind the GP's fused contraction)
        t, k, mu = W.shape[1], C.shape[0], pre._mu
        Linv = pre._Linv
        Cinv = torch.linalg.solve_triangular(C, torch.eye(k, dtype=C.dtype, device=C.device),
                                             upper=False)
        BtW = pre._chol @ (pre._F.T @ W)  # B^T W, B = F L^T
        inner = (Linv.T @ Linv).mul_(-0.5 * mu)
        inner.diagonal().add_(0.5)
        d_mu = -0.5 * ((pre.n - k) / mu + Linv.square().sum())
        value = -0.5 * pre.logdet.detach()
        if t:
            value = value + 0.5 / t * (BtW.square().sum() + mu * W.square().sum())
            inner -= (BtW @ BtW.T) / (2.0 * t)
            d_mu = d_mu + W.square().sum() / (2.0 * t)
        ctx.pre, ctx.rows = pre, rows
        ctx.save_for_backward(W, -(Linv @ Cinv), BtW.T @ Cinv / max(t, 1),
                              Cinv.T @ inner @ Cinv, d_mu)
        return value

    @staticmethod
    def backward(ctx, g):
        W, coef_F, coef_W, grad_G, d_mu = ctx.saved_tensors
        grad_Y = ctx.pre._F @ coef_F
        if W.shape[1]:
            grad_Y.addmm_(W, coef_W)
        grad_Y.index_add_(0, ctx.rows, grad_G)
        return grad_Y.mul_(g), g * d_mu, None, None, None, None
