"""kernelkit_gpu: torch + Triton compute kernels (Gram matrices, matrix-free products, attention).

Imported lazily by :mod:`kernelkit`; may import :mod:`kernelkit_math`, never :mod:`kernelkit`.
"""
