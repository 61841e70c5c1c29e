"""Kernel products for the solvers, on the CPU (float64 reference) or the GPU (Triton).

One :class:`KernelOperator` knows a registry kernel, its resolved parameters and where it runs.
It offers the three things the solvers need:

- :meth:`KernelOperator.product`: K(A, B) @ V without storing K. On the GPU this is
  :func:`kernelkit_gpu.kernel_matvec` (matrix-free, in the operands' dtype: float32 products in
  "accurate" mode for :meth:`KernelOperator.data`); on the
  CPU, row blocks of the float64 registry reference
  (``kernelkit_math.registry.get_kernel(name).value_fn``) times V.
- :meth:`KernelOperator.row_blocks`: K(A[lo:hi], B) one row block at a time, as float64 tensors
  (:func:`kernelkit_gpu.gram` in the operands' dtype on the GPU, then widened), never more than
  :attr:`KernelOperator.block_bytes` at once.
- :meth:`KernelOperator.block`: one whole float64 block K(A, B).

Operands (:meth:`KernelOperator.data`) are float64 NumPy arrays on the CPU and float32 torch
tensors on the GPU; vectors and results are float64 torch tensors on :attr:`KernelOperator.device`.
:meth:`KernelOperator.exact_data` gives float64 operands on every device: products and blocks of
those are computed in float64 arithmetic (the Triton kernels take float64 input too), for the
solvers' true residuals and dense fallbacks. :attr:`KernelOperator.eps` is the relative
precision of the kernel values of :meth:`KernelOperator.data` operands.
"""

from __future__ import annotations

import numpy as np
import torch

from kernelkit_math.registry import get_kernel

__all__ = ["KernelOperator", "CPU_BLOCK_BYTES", "TRITON_ON_CPU"]

#: Kernel-block memory on the CPU (float64 blocks and the registry's temporaries).
CPU_BLOCK_BYTES = 256 * 2**20
#: Run the Triton path on CPU tensors (needs ``TRITON_INTERPRET=1`` before Python starts; slow).
#: Only the tests switch it on, to prove the GPU code path end to end on a machine without a GPU.
TRITON_ON_CPU = False


class KernelOperator:
    """Products with K(A, B) of one registry kernel on one device.

    Parameters
    ----------
    kernel : str
        Registry name.
    params : dict
        Resolved registry parameters (:meth:`kernelkit_math.registry.KernelSpec.resolve`).
    where : {"cpu", "cuda"}
        Where the products run; "cuda" uses the Triton kernels (as does "cpu" when
        :data:`TRITON_ON_CPU` is set).
    block_bytes : int, optional
        Memory for one row block of kernel values and its float64 temporaries; default
        :data:`CPU_BLOCK_BYTES`.
    """

    def __init__(self, kernel, params, where, block_bytes=None):
        self.spec = get_kernel(kernel)
        self.params = dict(params)
        self.device = torch.device(where)
        self.triton = where == "cuda" or TRITON_ON_CPU
        self.block_bytes = CPU_BLOCK_BYTES if block_bytes is None else int(block_bytes)

    #: Bytes per kernel value of a row block: on the GPU the block (float64 for exact operands,
    #: float32 otherwise) and one float64 temporary of its shape (scaled rows, triangular solves),
    #: with slack; the float64 block plus two same-sized temporaries of the registry reference
    #: (distances, exponentials) on the CPU.
    @property
    def bytes_per_value(self):
        return 20 if self.triton else 24

    def data(self, X):
        """The operand form of a NumPy array: float64 NumPy (CPU) or a float32 tensor (GPU)."""
        if self.triton:
            A = torch.tensor(np.asarray(X), dtype=torch.float32, device=self.device)
            if not bool(torch.isfinite(A).all()):  # checked here once; the kernels assume it
                raise ValueError("X holds values beyond the float32 range (|x| > 3.4e38) that the "
                                 "GPU kernels compute in; rescale the data")
            return A
        return np.ascontiguousarray(X, dtype=np.float64)

    @property
    def eps(self):
        """Machine epsilon of the kernel values of :meth:`data` operands (float32 on the GPU)."""
        return float(np.finfo(np.float32 if self.triton else np.float64).eps)

    def exact_data(self, X):
        """The float64 operand form of a NumPy array: products with it are float64 throughout."""
        if self.triton:
            return self.vectors(X)
        return np.ascontiguousarray(X, dtype=np.float64)

    def vectors(self, V):
        """A float64 tensor on this operator's device holding a copy of NumPy array ``V``."""
        return torch.tensor(np.asarray(V), dtype=torch.float64, device=self.device)

    def take(self, A, rows):
        """Rows ``rows`` (a NumPy integer array) of operand ``A``, as an operand."""
        if self.triton:
            return A[torch.as_tensor(rows, device=A.device)].contiguous()
        return np.ascontiguousarray(A[rows])

    def rows_per_block(self, n_cols):
        """Rows of a block K(A[lo:hi], B) with ``n_cols`` columns that fit in ``block_bytes``."""
        return max(1, self.block_bytes // (max(1, n_cols) * self.bytes_per_value))

    def block(self, A, B=None):
        """K(A, B) (B None: K(A, A), exactly symmetric) as a tensor in the operands' precision:
        float32 for :meth:`data` operands on the GPU, float64 for :meth:`exact_data` ones."""
        if self.triton:
            import kernelkit_gpu

            with kernelkit_gpu.assume_finite():  # validated once, at fit
                return kernelkit_gpu.gram(A, B, kernel=self.spec.name, **self.params)
        return torch.from_numpy(self.spec.value_fn(A, B, **self.params)).to(self.device)

    def row_blocks(self, A, B):
        """Yield ``(lo, hi, K(A[lo:hi], B))`` over the rows of A (blocks as :meth:`block`)."""
        n = A.shape[0]
        step = self.rows_per_block(B.shape[0])
        for lo in range(0, n, step):
            hi = min(n, lo + step)
            yield lo, hi, self.block(A[lo:hi], B)

    def product(self, A, B, V):
        """K(A, B) @ V for V of shape (len(B), k); float64 result of shape (len(A), k).

        On the GPU, V is rounded to the operands' dtype (float32 for :meth:`data`, none for
        :meth:`exact_data`).
        """
        if self.triton:
            import kernelkit_gpu

            with kernelkit_gpu.assume_finite():  # no device sync per product in CG loops
                out = kernelkit_gpu.kernel_matvec(A, B, V.to(A.dtype), self.spec.name,
                                                  **self.params)
            return out.to(torch.float64)
        out = torch.empty((A.shape[0], V.shape[1]), dtype=torch.float64, device=self.device)
        for lo, hi, G in self.row_blocks(A, B):
            out[lo:hi] = G @ V
        return out
