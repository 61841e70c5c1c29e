r"""Largest eigenpairs of a symmetric operator given only as a product ``matmul(V) = A @ V``.

:func:`block_krylov_eigsh` is a randomized block Krylov method with thick restarts (block
Lanczos with full reorthogonalisation; Musco and Musco 2015 for the randomized block Krylov
subspace, Stathopoulos, Saad and Wu 1998 for the thick restart): a random start block Q_0 of b
columns is extended by the products A Q_j, each new block orthonormalised against the basis.
After every product the Rayleigh-Ritz step takes the eigenpairs (theta_i, W_i) of
T = Q^T A Q and the Ritz pairs (theta_i, v_i = Q W_i) with

.. math::

    r_i = \|A v_i - \theta_i v_i\| = \|(A Q) W_i - \theta_i Q W_i\|,

known without another product. The run stops as soon as the k wanted Ritz pairs all have
r_i <= tol |theta|_max (or the basis spans the whole space: Rayleigh-Ritz is then exact). A
basis of ``depth + 1`` blocks that has not converged restarts from its b leading Ritz vectors,
whose products (A Q) W are already known.

For a symmetric A the residual bounds the error of each pair (Kahan, Parlett): some eigenvalue
lambda of A lies within r_i of theta_i (within r_i^2 / gap_i, gap_i the distance from theta_i to
the rest of the spectrum), and the angle between v_i and that eigenvalue's eigenvector is at most
r_i / gap_i (Davis-Kahan).

Precision: the products run in the operator's own dtype (float32 kernel values on the GPU); the
basis, its orthonormalisation, T, the Ritz vectors and the residuals are float64.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

__all__ = ["EigenResult", "block_krylov_eigsh", "block_size", "default_tol", "DEPTH"]

#: Blocks added to the basis per restart cycle (the basis holds up to DEPTH + 1 blocks). A
#: restart discards most of the basis: on RBF spectra (HIGGS-shaped data, 64 components, blocks of
#: 128) a depth of 6 converged in 7 products, a depth of 4 needed 9 (docs/decisions.md).
DEPTH = 6


class EigenResult(NamedTuple):
    """The output of :func:`block_krylov_eigsh`.

    Attributes
    ----------
    eigenvalues : torch.Tensor of shape (k,)
        Ritz values, float64, in decreasing order.
    eigenvectors : torch.Tensor of shape (n, k)
        Orthonormal Ritz vectors, float64.
    residuals : torch.Tensor of shape (k,)
        ||A v_i - theta_i v_i|| of each pair, float64 (from the operator's products).
    n_products : int
        Products with A, each of one block of columns.
    converged : bool
        Every residual is at most ``tol`` times the largest |theta|, or the basis spans the
        whole space.
    """

    eigenvalues: torch.Tensor
    eigenvectors: torch.Tensor
    residuals: torch.Tensor
    n_products: int
    converged: bool


def block_size(n, k, multiple=1):
    """Columns of a block for the k largest eigenpairs of an n x n operator: k plus an
    oversampling of max(10, k / 2) (the gap between the k-th and the (b + 1)-th eigenvalue
    sets the rate), rounded up to a multiple of ``multiple`` (an operator whose product costs
    the same for every width up to the next multiple: the extra columns are free and speed
    convergence), at most n."""
    b = k + max(10, k // 2)
    return min(n, -(-b // multiple) * multiple)


def _orthonormal_block(Q, R, draws):
    """An orthonormal block spanning R's part outside span(Q) (Q orthonormal, may have 0
    columns); the directions of R that lie numerically in span(Q) (an invariant subspace was
    found) are replaced by random ones from the torch generator ``draws``. At most
    n - Q.shape[1] columns."""
    n = R.shape[0]
    width = min(R.shape[1], n - Q.shape[1])
    R = R[:, :width]
    # the largest column norm: within sqrt(width) of ||R||_2, without an SVD of R
    scale = float(torch.linalg.vector_norm(R, dim=0).max()) if width else 0.0
    for _ in range(2):  # classical Gram-Schmidt twice: orthogonal to working precision
        R = R - Q @ (Q.T @ R)
    U, s, _ = torch.linalg.svd(R, full_matrices=False)
    keep = U[:, s > 1e-10 * scale] if scale > 0 else U[:, :0]
    while keep.shape[1] < width:  # fill with random directions outside span(Q, keep)
        basis = torch.cat([Q, keep], dim=1)
        Z = torch.randn((n, width - keep.shape[1]), generator=draws, dtype=R.dtype,
                        device=R.device)
        for _ in range(2):
            Z = Z - basis @ (basis.T @ Z)
        U, s, _ = torch.linalg.svd(Z, full_matrices=False)
        keep = torch.cat([keep, U[:, s > 1e-10 * float(s[0])]], dim=1)
    return keep


def block_krylov_eigsh(matmul, n, k, *, tol, max_iter, rng, device="cpu", multiple=1,
                       depth=DEPTH, start=None):
    """The k algebraically largest eigenpairs of a symmetric n x n operator.

    Parameters
    ----------
    matmul : callable
        ``matmul(V)`` = A @ V for a float64 tensor V of shape (n, b) on ``device``; returns a
        float64 tensor of the same shape (it may compute in a lower precision).
    n : int
        Order of A.
    k : int
        Eigenpairs wanted, 1 <= k <= n.
    tol : float
        Stop when every wanted pair has ||A v - theta v|| <= tol * max_i |theta_i|.
    max_iter : int
        Most products with A (each of one block of :func:`block_size` columns).
    rng : numpy.random.RandomState
        Seeds a torch generator on ``device`` that draws the start block (and fills the basis
        where an invariant subspace was found).
    device : str or torch.device
        Where the vectors live.
    multiple : int, default=1
        Round the block's columns up to a multiple of this (:func:`block_size`).
    depth : int, default=DEPTH
        Blocks added per restart cycle, >= 1: the basis and its products take
        2 n (depth + 1) b float64 numbers.
    start : torch.Tensor of shape (n, j), optional
        Directions the start block spans (j <= b; its other columns are random). The first call
        of ``matmul`` is on the start block.

    Returns
    -------
    EigenResult
    """
    if not 1 <= k <= n:
        raise ValueError(f"k must be in [1, n={n}]; got {k}")
    if depth < 1:
        raise ValueError(f"depth must be >= 1; got {depth}")
    b = block_size(n, k, multiple)
    width = min(n, (depth + 1) * b)
    # random numbers drawn where the vectors live (a host draw of 10^6 x 128 took seconds)
    draws = torch.Generator(device=device).manual_seed(int(rng.randint(2**31 - 1)))
    Q = torch.empty((n, width), dtype=torch.float64, device=device)  # the basis
    P = torch.empty_like(Q)  # its products A Q
    given = 0 if start is None else start.shape[1]
    if given > b:
        raise ValueError(f"start must have at most {b} columns; got {given}")
    block = torch.randn((n, b - given), generator=draws, dtype=torch.float64, device=device)
    if given:
        block = torch.cat([start.to(device=device, dtype=torch.float64), block], dim=1)
    block = _orthonormal_block(Q[:, :0], block, draws)
    columns, products = 0, 0
    while True:
        last = block.shape[1]
        Q[:, columns:columns + last] = block
        P[:, columns:columns + last] = matmul(block)
        columns += last
        products += 1
        T = Q[:, :columns].T @ P[:, :columns]
        theta, W = torch.linalg.eigh((T + T.T) / 2)
        order = torch.argsort(theta, descending=True)[:b]
        theta, W = theta[order], W[:, order]
        wanted = Q[:, :columns] @ W[:, :k]
        residuals = torch.linalg.vector_norm(P[:, :columns] @ W[:, :k] - wanted * theta[:k],
                                             dim=0)
        full = columns >= n  # the basis spans the space: Rayleigh-Ritz is exact
        converged = full or bool((residuals <= tol * float(theta.abs().max())).all())
        if converged or products >= max_iter:
            return EigenResult(theta[:k], wanted, residuals, products, converged)
        if columns >= width:  # restart from the b leading Ritz vectors and their products
            last = W.shape[1]
            Q[:, :last], P[:, :last] = Q[:, :columns] @ W, P[:, :columns] @ W
            columns = last
        # the next block: the product of the last one, orthonormalised against the basis
        block = _orthonormal_block(Q[:, :columns], P[:, columns - last:columns], draws)
        block = block[:, :width - columns]


def default_tol(eps):
    """The stopping tolerance for ``tol=0``: sqrt(eps) of the products' precision (1.5e-8 for
    float64 products, 3.5e-4 for float32): eigenvalues then carry about eps relative error
    where the spectrum is not clustered (the error is below r^2 / gap)."""
    return float(np.sqrt(eps))
