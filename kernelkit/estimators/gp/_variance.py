"""Predictive variances and covariances of :class:`~kernelkit.GaussianProcessRegressor`
(:func:`predictive`): the prior's less the diagonal, or all, of K(X*, X) K^{-1} K(X, X*) for
test rows X*.

- Exact path: from the Cholesky factor of K, one triangular solve per batch of test points
  (:func:`exact_columns`).
- Iterative path: from a cache built at the end of ``fit`` (:func:`build_cache`): the Galerkin
  projection of K^{-1} onto the span of the kernel's columns at uniformly drawn landmarks
  (:class:`kernelkit.linalg.galerkin.SubspaceCache`, from float64 products). Each test point
  gets a certified bound on its error (||r||^2 / (noise + alpha) for the Galerkin residual r);
  where it exceeds ``cg_tol`` times the prior variance, that point's column K(X, x*) is solved
  by batched CG instead (:func:`cached_columns`, :func:`solve_columns`). So every variance is
  within ``cg_tol`` times its prior variance of the exact one (covariances: the whole matrix
  by CG unless every point is certified). Rough kernels (Matern 0.5) or tiny noise send more
  points to CG.
"""

from __future__ import annotations

import numpy as np
import torch

from kernelkit.estimators.gp import _lml, _sharded
from kernelkit.estimators.gp._exact import reduced
from kernelkit.linalg.galerkin import SubspaceCache

__all__ = ["VARIANCE_BATCH_ELEMENTS", "VARIANCE_COPIES", "VARIANCE_RANK", "build_cache",
           "cached_columns", "exact_columns", "lower_bound", "predictive", "solve_columns",
           "variance_rank"]

#: Test points per batch of predictive variances: n * batch <= this many values.
VARIANCE_BATCH_ELEMENTS = 2**27
#: Iterative path's predictive-variance cache, built at the end of ``fit``: min(n,
#: VARIANCE_RANK) landmarks (at least an integer ``preconditioner_rank``), fewer where n x k
#: float64 values exceed 2^28 (on the CPU) or VARIANCE_COPIES n x k float64 matrices exceed 0.9
#: of a GPU's free memory (:func:`kernelkit.estimators.gp._lml.factor_columns`): the cache holds
#: two (U and K U; 32 GB at n = 1e6, k = 2048) and its build peaks at the QR's
#: three. Its build costs k float64 products with K. At n = 2e4 (d = 8, fitted ARD RBF, CPU
#: simulation) 1024 landmarks certified every test point at cg_tol = 1e-3 with bounds up to
#: 9.3e-4 of the prior variance; the error falls steeply with k (about 70x from 1024 to 2048
#: landmarks at n = 1e4 and 2e4, CPU simulation at the n = 1e6 fit's theta) and grows about
#: like n^1.7. At n = 1e5 on a GPU every one of 1e4 test points was certified with 2048
#: landmarks (largest error 1.7e-4), and 62 were not with 1342 (largest 4.2e-4; those went to
#: CG: 2 s more).
VARIANCE_RANK = 2048
VARIANCE_COPIES = 3.5


def variance_rank(n, device, preconditioner_rank):
    """Landmarks of the predictive-variance cache for n training points on ``device``:
    min(n, :data:`VARIANCE_RANK`, what :data:`VARIANCE_COPIES` n x k float64 matrices may take
    (:func:`kernelkit.estimators.gp._lml.factor_columns`)), at least an integer
    ``preconditioner_rank`` (capped at n)."""
    k = max(1, min(n, VARIANCE_RANK, _lml.factor_columns(n, device, VARIANCE_COPIES)))
    if preconditioner_rank != "auto":
        k = max(k, _lml.resolve_rank(preconditioner_rank, n))
    return k


def lower_bound(op, params):
    """The lower bound on K's eigenvalues that the cache's certificate divides by: the noise plus
    the operator's jitter (``alpha``)."""
    return float(params["noise"]) + op.jitter


def build_cache(op, params, preconditioner_rank, seed):
    """The cache of one fit: the Galerkin projection of K^{-1} onto the span of the kernel's
    columns at :func:`variance_rank` landmarks drawn uniformly from ``seed``, with K U from
    float64 products and the certificate's :func:`lower_bound` (which must be > 0)."""
    # the free memory may differ between the ranks of a process group: rank 0's
    k = int(_sharded.from_rank0([variance_rank(op.n, op.device, preconditioner_rank)])[0])

    def basis():  # orthonormal columns spanning k(X, X[landmarks])
        landmarks = _lml.uniform_landmarks(op.n, k, seed, op.device)
        return torch.linalg.qr(op.block(op.X64, op.X64[landmarks], params,
                                        dtype=torch.float64))[0]

    with torch.no_grad():
        U = op.agree(basis)
        # float64 products: the bound assumes K U to round-off of K, which float32
        # products (error ~ u ||K||, ||K|| ~ n) would not give at large n
        return SubspaceCache(U, op.exact_matmul(U, params), lower_bound(op, params))


def predictive(op, params, Z, settings, cov=False, L=None, cache=None, probes=None):
    """The predictive variances (shape (m,); round-off below 0 clipped) or, with ``cov``,
    covariance (m, m) at centred test rows Z, WhiteKernel noise included, in the units of the
    normalised targets. K(X*, X) K^{-1} K(X, X*) comes from the Cholesky factor ``L`` (the
    exact path), else from ``cache`` where it is certified and by batched CG for the other
    points (all of them where ``cache`` is None) with the fit's draws ``probes()`` (called only
    where CG runs)."""
    def by_cg(Z, keep):
        return solve_columns(op, params, Z, settings, probes(), keep)

    if L is not None:
        solved = exact_columns(op, params, L, Z, cov)
    elif cache is None:
        solved = by_cg(Z, cov)
    else:
        solved = cached_columns(op, params, Z, cache, settings.cg_tol, by_cg, cov)
    if not cov:
        with torch.no_grad():
            prior = (op.diag(Z, params) + params["noise"]).cpu().numpy()
        return np.maximum(prior - solved, 0.0)
    with torch.no_grad():  # diagonal_offset=0: z_i is the same point as itself (white noise)
        K_zz = op.block(Z, Z, params, diagonal_offset=0, dtype=torch.float64).cpu().numpy()
    return K_zz + float(params["noise"]) * np.eye(Z.shape[0]) - solved


def exact_columns(op, params, L, Z, keep):
    """diag (keep=False) or all (keep=True) of K(X*, X) K^{-1} K(X, X*) for centred test rows Z,
    from the lower Cholesky factor L of K (a tensor on the operator's device)."""
    with torch.no_grad():
        if keep:
            V = reduced(op, params, L, Z)
            return (V.T @ V).cpu().numpy()
        batch = max(1, VARIANCE_BATCH_ELEMENTS // op.n)
        parts = [reduced(op, params, L, Z[lo:lo + batch]).square().sum(0)
                 for lo in range(0, Z.shape[0], batch)]
        return torch.cat(parts).cpu().numpy()


def cached_columns(op, params, Z, cache, cg_tol, by_cg, keep):
    """diag (keep=False) or all (keep=True) of K(X*, X) K^{-1} K(X, X*) from ``cache`` where its
    certified error bound is at most ``cg_tol`` times the prior variance; for the other test
    points (covariances: for all of them, unless every point is certified) by
    ``by_cg(Z, keep)`` (batched CG: :func:`solve_columns`)."""
    op64 = op.with_dtype(torch.float64)  # float64 columns: the bound is for these
    with torch.no_grad():
        batch = max(1, min(Z.shape[0], VARIANCE_BATCH_ELEMENTS // op.n))
        quads, bounds = [], []
        for lo in range(0, Z.shape[0], batch):
            quad, bound = cache.quadratic(op64.cross_block_T(Z[lo:lo + batch], params))
            quads.append(quad)
            bounds.append(bound)
        quad, bound = torch.cat(quads), torch.cat(bounds)
        prior = op.diag(Z, params) + params["noise"]
        uncertified = bound > cg_tol * prior.clamp_min(torch.finfo(torch.float64).tiny)
        if keep:
            if bool(uncertified.any()):
                return by_cg(Z, True)
            full = cache.cross(op64.cross_block_T(Z, params))
            return (0.5 * (full + full.T)).cpu().numpy()
        if bool(uncertified.any()):
            index = torch.nonzero(uncertified)[:, 0]
            quad[index] = torch.as_tensor(by_cg(Z[index], False), device=quad.device)
        return quad.cpu().numpy()


def solve_columns(op, params, Z, settings, probes, keep):
    """diag (keep=False) or all (keep=True) of K(X*, X) K^{-1} K(X, X*), by batched CG with the
    fit's preconditioner (``probes``: the fit's draws)."""
    with torch.no_grad():
        pre = op.agree(_lml.preconditioner, op, params, probes)
        m = Z.shape[0]
        batch = max(1, min(m, VARIANCE_BATCH_ELEMENTS // op.n))
        K_all = op.cross_block_T(Z, params).to(torch.float64) if keep else None
        parts = []
        for lo in range(0, m, batch):
            K_xz = op.cross_block_T(Z[lo:lo + batch], params)
            V = _lml.solve(op, params, K_xz, pre, settings, "predict").x
            K64 = K_xz.to(torch.float64)
            parts.append(K_all.T @ V if keep else (K64 * V).sum(0))
        if keep:
            full = torch.cat(parts, dim=1)
            return (0.5 * (full + full.T)).cpu().numpy()
        return torch.cat(parts).cpu().numpy()
