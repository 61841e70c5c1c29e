"""How many landmarks KernelRidge's ``n_components="auto"`` asks for: from the data's effective
dimension for ``solver="nystrom"``, sqrt(n) ln n for the "cg" preconditioner.

The effective dimension of the ridge problem,

.. math::

    d_{\\mathrm{eff}}(\\alpha) = \\operatorname{tr}\\, K (K + \\alpha I)^{-1}
    = \\sum_i \\frac{\\lambda_i}{\\lambda_i + \\alpha},

counts the eigen-directions of K above the ridge: those the fit resolves. Uniform Nyström with
M of order d_eff times a log factor keeps the optimal statistical rate (Rudi, Camoriano and
Rosasco 2015, "Less is more: Nyström computational regularization"); more landmarks buy nothing
the ridge does not discard. Measured, a constant multiple of d_eff reaches the plateau
(:data:`FACTOR`). :func:`effective_dimension` estimates it from a uniform subsample
of s rows: the eigenvalues mu_j of the s x s kernel matrix, scaled by n / s, estimate the top
eigenvalues of K, so d_eff ~ sum_j mu_j / (mu_j + alpha s / n).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["effective_dimension", "nystrom_components", "preconditioner_components"]

#: Rows of the subsample behind the estimate: an s x s float64 kernel matrix and its eigenvalues
#: (32 MB and about a second on two CPU cores, a small part of a fit that needs n M kernel
#: values with M in the thousands). The estimate counts at most s directions.
SUBSAMPLE = 2000


def effective_dimension(op, X, alpha, rng, weights=None, size=SUBSAMPLE):
    """Estimate d_eff(alpha) = tr(S K S (S K S + alpha I)^-1) of the n training rows from ``size``
    of them drawn uniformly (all n when n <= ``size``: then it is exact up to rounding).

    Parameters
    ----------
    op : KernelOperator
        The fit's kernel operator (:mod:`kernelkit.operators.kernel_operator`).
    X : ndarray of shape (n, n_features) or (n, n)
        The training data as ``fit`` holds them (the kernel matrix for "precomputed").
    alpha : float
        The ridge, >= 0 (of several, the smallest: the largest d_eff).
    rng : numpy.random.RandomState
        Draws the subsample (unless n <= ``size``).
    weights : ndarray of shape (n,) or None
        Sample weights (S = diag(weights)^(1/2)); None for the identity.
    size : int
        Rows of the subsample.

    Returns
    -------
    float
        The estimate, in [0, min(n, size)]; with alpha = 0 the numerical rank of the subsample's
        kernel matrix. Computed in float64 on the operator's device.
    """
    import torch

    from kernelkit.linalg import falkon

    n = len(X)
    s = min(n, size)
    sub = falkon.landmarks(n, s, rng) if s < n else np.arange(n)
    # on the GPU only the subsample travels; on the CPU the operand is X itself ("precomputed":
    # its row indices)
    Z = op.exact_data(X[sub]) if op.triton else op.take(op.exact_data(X), sub)
    K = op.block(Z)
    if weights is not None:
        sw = torch.as_tensor(np.sqrt(weights[sub]), dtype=K.dtype, device=K.device)
        K = sw[:, None] * K * sw[None, :]
    mu = torch.linalg.eigvalsh(K)
    # eigenvalues below the float64 rounding of K are zero (their sign is noise)
    floor = s * float(np.finfo(np.float64).eps) * max(float(mu[-1]), 0.0)
    mu = mu[mu > floor]
    return float((mu / (mu + alpha * s / n)).sum())


#: M = ceil(FACTOR d_eff) for "nystrom". The cheapest M within 1% of the best test RMSE over
#: M (grid 250, 375, 500, 1000, 2000, 4000; benchmarks/krr_auto_m.py on the CPU at n <= 1e4,
#: the zoo's kernels fitted by a GP on 1000 rows, alpha their noise level;
#: benchmarks/results/krr-auto-m-cpu-2core-rule-third-deff-ln-n.json) lies between these
#: multiples of the estimated d_eff (the largest M not within 1%, the first within):
#: make_friedman1 d = 20 with alpha = 1 (n = 1e4, d_eff 188) 2.7-5.3, quakes (800, 172)
#: 2.2-2.9 (M = 500-600 within 1% for some landmark draws only), txhousing (6000, 341)
#: 1.5-2.9, concrete (830, 254) 1.4-1.9; cps1988, flights, diabetes, spatial2d: every M
#: within 1% (d_eff 16-369); ridge (alpha 1e-5, d_eff at the subsample's 2000): still
#: improving at M = 4000. At n = 1e6 (benchmarks/kernel_ridge.py --parts defaults, a GPU,
#: d_eff ~ 1100 from 2000 rows) M = 5000 (4.5 d_eff) was within 1% of M = 2e4 (1.1995 against
#: 1.1918) in 4.5 s, against 5.6 s for M = 1e4. 5 covers every lower end and gives M ~ 5600
#: there. Theory's ln n factor (Rudi et al.) does not fit these figures: M / (d_eff ln n)
#: needed 0.29-0.58 at n = 1e4 but at most 0.33 at 1e6 (where the subsample estimate is
#: already low: 1354 from 4000 rows).
FACTOR = 5
#: The fewest landmarks "auto" takes (where n has as many): below a few hundred the estimate's
#: noise matters more than the cost (diabetes, d_eff ~ 19: M = 100 and 352 within 0.1%).
M_MIN = 100


def nystrom_components(d_eff, n):
    """Landmarks for ``solver="nystrom"``: ceil(FACTOR d_eff), at least :data:`M_MIN` and at
    most n (before the device cap and the memory cut of
    :func:`kernelkit.estimators._ridge_memory.auto_components`)."""
    return min(n, max(M_MIN, math.ceil(FACTOR * d_eff)))


def preconditioner_components(n):
    """Landmarks of the "cg" preconditioner: ceil(sqrt(n) ln n), at most n."""
    return min(n, math.ceil(math.sqrt(n) * math.log(max(n, 2))))
