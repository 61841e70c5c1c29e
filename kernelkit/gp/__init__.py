"""Large-n Gaussian-process regression, matrix-free (BBMM-style) on the GPU or the CPU.

:class:`GaussianProcessRegressor`
    scikit-learn's ``GaussianProcessRegressor`` interface; the log marginal likelihood and its
    gradient by preconditioned batched CG, stochastic Lanczos quadrature and Hutchinson trace
    estimation, never a dense Cholesky or an (n, n, n_theta) tensor (K is held densely only
    when it fits: half the free GPU memory).

Importing this package loads NumPy, SciPy and scikit-learn only; torch loads on the first ``fit``.
"""

from kernelkit.gp.regressor import GaussianProcessRegressor

__all__ = ["GaussianProcessRegressor"]
