"""Gaussian-process regression on the GPU or the CPU: exact for small n, matrix-free
(BBMM-style) for large n.

:class:`GaussianProcessRegressor`
    scikit-learn's ``GaussianProcessRegressor`` interface. Up to ``exact_max_n`` samples a dense
    float64 Cholesky factor (:mod:`._exact`); above it the log marginal likelihood and its
    gradient by preconditioned batched CG, stochastic Lanczos quadrature and Hutchinson trace
    estimation, never a dense Cholesky or an (n, n, n_theta) tensor (K is held densely only
    when it fits: half the free GPU memory); predictive variances from a Galerkin cache on
    Nyström columns.
    Any kernel of scikit-learn's kernel algebra over the registry's PSD kernels
    (:mod:`kernelkit.operators.kernel_tree`).

Importing this package loads NumPy, SciPy and scikit-learn only; torch loads on the first ``fit``.
"""

from kernelkit.estimators.gp.regressor import GaussianProcessRegressor

__all__ = ["GaussianProcessRegressor"]
