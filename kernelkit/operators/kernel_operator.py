"""Kernel products for the solvers, on the CPU (float64 reference) or the GPU (Triton).

One :class:`KernelOperator` is the operator family's member (:mod:`.base`) for KernelRidge and
the Falkon system: a kernel tree at its fixed parameter values (a registry kernel by name is
the one-leaf tree; a scikit-learn kernel built with ``+``, ``*`` and ``**`` the general case),
where it runs, and the operand forms of the solvers. Each leaf is the registry's own
computation: on the CPU its float64 reference
(``kernelkit_math.registry.get_kernel(name).value_fn``), on the GPU the Triton Gram
(:func:`kernelkit_gpu.gram`); the tree combines them. It offers:

- :meth:`KernelOperator.matmul`: K(A, B) @ V without storing K. On the GPU, for one registry
  leaf (times constants), :func:`kernelkit_gpu.kernel_matvec` (matrix-free, in the operands'
  dtype: float32 products in "accurate" mode for :meth:`KernelOperator.data`); otherwise row
  blocks times V (float32 blocks times float64 V with float64 sums,
  :func:`kernelkit_gpu.mixed_gemv.gemv_float64`, on the GPU).
- :meth:`KernelOperator.row_blocks`: K(A[lo:hi], B) one row block at a time, never more than
  :attr:`KernelOperator.block_bytes` at once (:meth:`~.base.Operator.row_chunks`).
- :meth:`KernelOperator.block`: one whole block K(A, B), and :meth:`KernelOperator.diag`.
- :meth:`KernelOperator.rows_of`: K(P[indices], P) of one point set P for many ``indices`` (a
  solver's kernel rows, the SVMs'), the points prepared once, kept on the device or streamed
  to it where they do not fit (:data:`ROWS_MEMORY_SHARE`).

Operands (:meth:`KernelOperator.data`) are float64 NumPy arrays on the CPU and float32 torch
tensors on the GPU; vectors and results are float64 torch tensors on :attr:`KernelOperator.device`.
:meth:`KernelOperator.exact_data` gives float64 operands on every device: products and blocks of
those are computed in float64 arithmetic (the Triton kernels take float64 input too), for the
solvers' true residuals and dense fallbacks. :attr:`KernelOperator.eps` is the relative
precision of the kernel values of :meth:`KernelOperator.data` operands.

:class:`PrecomputedOperator` is the same for a kernel given as its matrix (KernelRidge's
``kernel="precomputed"``): operands are row indices into it.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from kernelkit._util import host_memory
from kernelkit.operators import kernel_tree
from kernelkit.operators.base import (TRITON_MATMUL_MAX_COLUMNS, WIDE_BLOCK_ELEMENTS, Operator,
                                      triton_block, triton_matmul)

__all__ = ["KernelOperator", "PrecomputedOperator", "CPU_BLOCK_BYTES", "TRITON_ON_CPU",
           "ROWS_MEMORY_SHARE", "ROWS_CHUNK_BYTES"]

#: Kernel-block memory on the CPU (float64 blocks and the registry's temporaries).
CPU_BLOCK_BYTES = 256 * 2**20
#: Share of the device's free memory that :meth:`KernelOperator.rows_of` may fill with its
#: points (float64, and each registry leaf's prepared copy) together with the caller's
#: ``reserve_bytes`` (a solver's row cache and working arrays, counted by the caller); where
#: they need more, the points stay in host memory and stream to the device at every call. The
#: rest covers what neither counts: the solver's vectors, temporaries, the allocator's slack.
ROWS_MEMORY_SHARE = 0.8
#: Device memory of one streamed chunk of points of :meth:`KernelOperator.rows_of` (float64
#: and its prepared copy): 256 MiB, a few thousand points at D = 256 (about 16 chunks of a
#: million points), each copy long enough to run the host-to-device link at its full rate.
ROWS_CHUNK_BYTES = 256 * 2**20
#: Run the Triton path on CPU tensors (needs ``TRITON_INTERPRET=1`` before Python starts; slow).
#: Only the tests switch it on, to prove the GPU code path end to end on a machine without a GPU.
TRITON_ON_CPU = False


class KernelOperator(Operator):
    """Products with K(A, B) of a kernel at its fixed parameter values, on one device.

    Parameters
    ----------
    kernel : str or KernelStructure
        A registry name (with ``params``: the one-leaf tree,
        :func:`~kernelkit.operators.kernel_tree.registry_kernel`), or a parsed kernel
        (:func:`~kernelkit.operators.kernel_tree.parse_kernel`) whose kernel part is used
        (:func:`~kernelkit.operators.kernel_tree.kernel_part`: WhiteKernels are 0, as in
        scikit-learn's k(X, Y)), at the kernel's own parameter values.
    params : dict, optional
        Resolved registry parameters of a kernel given by name
        (:meth:`kernelkit_math.registry.KernelSpec.resolve`).
    where : {"cpu", "cuda"}
        Where the products run; "cuda" uses the Triton kernels (as does "cpu" when
        :data:`TRITON_ON_CPU` is set).
    block_bytes : int, optional
        Memory for one row block of kernel values and its float64 temporaries; default
        :data:`CPU_BLOCK_BYTES`.
    """

    def __init__(self, kernel, params=None, where="cpu", block_bytes=None):
        structure = (kernel_tree.registry_kernel(kernel, params) if isinstance(kernel, str)
                     else kernel_tree.kernel_part(kernel))
        super().__init__(structure, where)
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

    def _dtype(self, A):
        """The dtype of the kernel values of operand ``A``."""
        return A.dtype if self.triton else torch.float64

    def _leaf(self, leaf, A, B):
        """K(A, B) of one registry leaf at its parameter values, as :meth:`block`."""
        numbers = leaf.fixed_numbers(A.shape[1])
        if self.triton:
            return triton_block(A, B, leaf.spec.name, numbers)  # validated once, at fit
        return torch.from_numpy(leaf.spec.value_fn(A, B, **numbers)).to(self.device)

    def block(self, A, B=None):
        """K(A, B) (B None: K(A, A), exactly symmetric) as a tensor in the operands' precision:
        float32 for :meth:`data` operands on the GPU, float64 for :meth:`exact_data` ones."""
        shape = (A.shape[0], A.shape[0] if B is None else B.shape[0])
        return self.values(shape, self._dtype(A), lambda leaf: self._leaf(leaf, A, B),
                           lambda constant: constant.value)

    def diag(self, A):
        """k(a_i, a_i) for the rows of operand ``A``, a float64 tensor of shape (len(A),) (the
        registry's float64 diagonals of the float64 rows)."""
        rows = A.detach().cpu().double().numpy() if torch.is_tensor(A) else A

        def leaf(node):
            numbers = node.fixed_numbers(rows.shape[1])
            return torch.from_numpy(node.spec.diag_fn(rows, **numbers)).to(self.device)

        return self.values((A.shape[0],), torch.float64, leaf, lambda constant: constant.value)

    def row_blocks(self, A, B):
        """Yield ``(lo, hi, K(A[lo:hi], B))`` over the rows of A (blocks as :meth:`block`)."""
        for lo, hi in self.row_chunks(self.rows_per_block(B.shape[0]), (0, A.shape[0])):
            yield lo, hi, self.block(A[lo:hi], B)

    def rows_of(self, X, points=None, *, reserve_bytes=0):
        """Kernel rows of one point set, for a solver that asks for many: a callable
        ``rows(indices)`` that returns K(P[indices], P) for the points P = X[points] (all of X
        where ``points`` is None) as a float64 tensor of shape (len(indices), len(P)) on
        :attr:`device`, ``indices`` being a 1-D integer NumPy array or CPU tensor.

        Its values are those of ``block(take(Pe, indices), Pe)`` for the float64 operand
        ``Pe = take(exact_data(X), points)``: that very computation on the CPU. With the Triton
        kernels, one :class:`kernelkit_gpu.GramRows` per registry leaf computes them in float64
        on the points checked and prepared once (centred on the column mean of P where
        ``block`` centres on that of P[indices], so equal to float64 rounding), and a call
        neither prepares P again nor waits for the device.

        Where the points (about 8 (D + L (2 D' + 2)) bytes each: the float64 points and the
        prepared copy of each of the L leaves, D' = D rounded up to 16) and ``reserve_bytes``
        need more than :data:`ROWS_MEMORY_SHARE` of the device's free memory (host memory
        for the interpreter), P stays in pinned host memory and each call streams it to the
        device in chunks of about :data:`ROWS_CHUNK_BYTES`: the same values (bit for bit for
        the distance kernels; :mod:`kernelkit_gpu.pairwise.gram_rows`) at the cost of a
        transfer of P (8 N D bytes per leaf) per call.

        Parameters
        ----------
        X : ndarray of shape (n_samples, n_features)
            Validated (finite) data; for :class:`PrecomputedOperator` the kernel matrix.
        points : 1-D integer array, optional
            The rows of X that are the points.
        reserve_bytes : int, default=0
            Device memory the caller holds beside the points while it asks for rows.

        Returns
        -------
        callable
        """
        if not self.triton:
            Pe = self.exact_data(X)
            Pe = Pe if points is None else self.take(Pe, points)
            return lambda indices: self.block(self.take(Pe, np.asarray(indices)), Pe)
        from kernelkit_gpu import GramRows, assume_finite

        source = torch.from_numpy(np.ascontiguousarray(X, dtype=np.float64))
        index = None if points is None else torch.from_numpy(np.asarray(points, dtype=np.int64))
        n, d = (source.shape[0] if index is None else len(index)), source.shape[1]
        leaves = _leaves(self.structure.root)
        point_bytes = 8 * (d + len(leaves) * (2 * _round16(d) + 2))
        free = _free_bytes(self.device)
        fits = free is None or n * point_bytes + reserve_bytes <= ROWS_MEMORY_SHARE * free
        chunk = None if fits else max(1, ROWS_CHUNK_BYTES // point_bytes)
        if chunk is not None and self.device.type == "cuda":  # one copy, into pinned memory
            P = torch.empty((n, d), dtype=torch.float64, pin_memory=True)
            if index is None:
                P.copy_(source)
            else:
                torch.index_select(source, 0, index, out=P)
        else:
            P = source if index is None else source.index_select(0, index)
        with assume_finite():  # validated by the caller
            prepared = {leaf: GramRows(P, leaf.spec.name, device=self.device, chunk_rows=chunk,
                                       **leaf.fixed_numbers(d)) for leaf in leaves}

        def rows(indices):
            indices = np.asarray(indices, dtype=np.int64)
            return self.values((len(indices), n), torch.float64,
                               lambda leaf: prepared[leaf](indices),
                               lambda constant: constant.value)

        return rows

    def matmul(self, A, B, V):
        """K(A, B) @ V for V of shape (len(B), k); float64 result of shape (len(A), k).

        On the GPU, for at most :data:`~.base.TRITON_MATMUL_MAX_COLUMNS` columns, the Triton
        K @ V for one registry leaf times constants, V rounded to the operands' dtype (float32
        for :meth:`data`, none for :meth:`exact_data`); otherwise row blocks times V with
        float64 sums: float32 blocks of a narrow V by the mixed-precision GEMV, of a wide V
        (Nystroem's features) made float64 in Triton Gram blocks of
        :data:`~.base.WIDE_BLOCK_ELEMENTS` values and multiplied by one float64 GEMM each.
        """
        wide = V.shape[1] > TRITON_MATMUL_MAX_COLUMNS
        scaled = self.scaled_leaf() if self.triton and not wide else None
        if scaled is not None:
            amplitude = math.prod(c.value for c in scaled.constants)
            numbers = scaled.leaf.fixed_numbers(A.shape[1])
            return triton_matmul(A, B, V.to(A.dtype), scaled.leaf.spec.name, numbers,
                                 amplitude).to(torch.float64)
        rows = (0, A.shape[0])
        if self._dtype(A) == torch.float64:
            return self.chunked_matmul(rows, self.rows_per_block(B.shape[0]), V,
                                       lambda lo, hi: self.block(A[lo:hi], B))
        if wide:
            return self.chunked_matmul(rows, max(1, WIDE_BLOCK_ELEMENTS // B.shape[0]), V,
                                       lambda lo, hi: self.block(A[lo:hi], B).double())
        from kernelkit_gpu.mixed_gemv import gemv_float64

        return self.chunked_matmul(rows, self.rows_per_block(B.shape[0]), V,
                                   lambda lo, hi: self.block(A[lo:hi], B), gemv_float64)


def _round16(d):
    return -(-d // 16) * 16


def _leaves(node):
    """The registry leaves of the kernel tree ``node`` (None: none), left to right."""
    if isinstance(node, (kernel_tree.Sum, kernel_tree.Product)):
        return _leaves(node.k1) + _leaves(node.k2)
    if isinstance(node, kernel_tree.Power):
        return _leaves(node.k)
    return [node] if isinstance(node, kernel_tree.Leaf) else []


def _free_bytes(device):
    """Free memory of ``device`` in bytes: the GPU's, or the host's available memory
    (:func:`kernelkit._util.host_memory.available_bytes`; None where it cannot be read)."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    return host_memory.available_bytes()


class PrecomputedOperator(KernelOperator):
    """:class:`KernelOperator` of a kernel given as its matrix ``K`` (KernelRidge's
    ``kernel="precomputed"``; K(train, train) at fit, K(test, train) at predict): operands are
    row indices, of K's rows for A and of its columns for B, and every value is K's own, in
    float64 on the CPU.

    Parameters
    ----------
    K : ndarray of shape (n_rows, n_columns)
        The kernel matrix (float64; not copied, not modified).
    block_bytes : int, optional
        As :class:`KernelOperator`.
    """

    def __init__(self, K, block_bytes=None):
        super().__init__(kernel_tree.KernelStructure("precomputed", None, None, 0, None),
                         where="cpu", block_bytes=block_bytes)
        self.triton = False
        self.matrix = K

    def data(self, X):
        """The operand of the rows of ``X`` (K itself at fit, K(test, train) at predict): their
        indices."""
        return np.arange(X.shape[0])

    exact_data = data

    def block(self, A, B=None):
        """K[A][:, B] (B None: K[A][:, A]) as a float64 tensor."""
        return torch.from_numpy(self.matrix[np.ix_(A, A if B is None else B)])

    def diag(self, A):
        """K[a_i, a_i] as a float64 tensor."""
        return torch.from_numpy(self.matrix[A, A])
