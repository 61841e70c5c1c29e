"""kernelkit_gpu: torch + Triton compute kernels (Gram matrices, matrix-free products, attention).

Imported lazily by :mod:`kernelkit`; may import :mod:`kernelkit_math`, never :mod:`kernelkit`.
Importing it loads torch and triton (nothing else heavy). On the CPU the Triton kernels run under
the interpreter, which must be switched on (``TRITON_INTERPRET=1``) before this package is imported:
Triton reads the variable when a kernel is defined.

Public functions
----------------
gram(x, y=None, kernel="rbf", *, precision="accurate", out=None, **params)
    Fused Gram matrix K(X, Y) (:mod:`kernelkit_gpu.gram`).
kernel_matvec(x, y, v, kernel="rbf", *, transpose=False, precision="accurate", **params)
    Matrix-free K(X, Y) @ V (:mod:`kernelkit_gpu.matvec`).
gram_naive, kernel_matvec_naive
    Plain-PyTorch versions with the same signatures (:mod:`kernelkit_gpu.naive`).

The submodules ``kernelkit_gpu.gram`` and ``kernelkit_gpu.matvec`` share their names with the
functions exported here; reach the modules through ``sys.modules`` or ``importlib``.
"""

from kernelkit_gpu.gram import gram
from kernelkit_gpu.matvec import kernel_matvec
from kernelkit_gpu.naive import gram_naive, kernel_matvec_naive

__all__ = ["gram", "kernel_matvec", "gram_naive", "kernel_matvec_naive"]
