"""kernelkit_math: float64 NumPy/SciPy reference math for every kernelkit kernel.

Never imports torch or triton. The registry (:mod:`kernelkit_math.registry`) is the single
source of truth that the GPU kernels, the scikit-learn classes and the tests all read.
"""

from kernelkit_math.registry import REGISTRY, KernelSpec, Param, get_kernel, kernel_names

__all__ = ["REGISTRY", "KernelSpec", "Param", "get_kernel", "kernel_names"]
