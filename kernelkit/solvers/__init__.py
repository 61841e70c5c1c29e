"""Large-scale kernel solvers as scikit-learn estimators.

:class:`KernelRidge`
    Kernel ridge regression by preconditioned conjugate gradients, matrix-free on the GPU
    (:func:`kernelkit_gpu.kernel_matvec`) or the CPU, exact or Nyström (Falkon-style).

Importing this package loads NumPy and scikit-learn only; torch loads on the first ``fit``.
"""

from kernelkit.solvers.kernel_ridge import KernelRidge

__all__ = ["KernelRidge"]
