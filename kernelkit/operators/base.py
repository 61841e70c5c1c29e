"""The kernel operators' one class family: :class:`Operator` and its protocol.

Every operator computes with a kernel given as a tree (:mod:`.kernel_tree`): a scikit-learn
kernel written with ``+``, ``*`` and ``**`` of registry kernels, constants and white noise is
the general case, one registry kernel given by name the one-leaf tree
(:func:`~kernelkit.operators.kernel_tree.registry_kernel`). So both estimators take the same
kernels. The protocol:

- ``block``: the kernel values K(A, B) of two sets of rows (K(A, A), exactly symmetric);
- ``matmul``: K @ V without storing K: row chunks of blocks times V, or the Triton K @ V
  (:func:`triton_matmul`) where the tree is one scaled registry leaf on the GPU;
- ``diag``: k(a_i, a_i);
- ``row_chunks``: the ``(lo, hi)`` row ranges a product walks, sized to the operator's memory;
- ``contract``: sum_j a_j^T K b_j and its gradient along the free hyperparameters theta (the
  derivative contractions of the GP's gradient); only an operator with free hyperparameters
  has it.

The two members: :class:`~kernelkit.operators.kernel_operator.KernelOperator` evaluates the tree
at its fixed parameters on operands in the solvers' forms (KernelRidge, the Falkon system), its
leaves by the registry's float64 reference on the CPU and by the Triton kernels on the GPU;
:class:`~kernelkit.operators.covariance.CovarianceOperator` is the Gaussian process's
k_theta(X, X) + noise I, differentiable in theta, its leaves by the torch twin's pairwise
quantities (:func:`kernelkit_gpu.pairwise.naive.pairwise_quantity`) and the registry's epilogue
table. The tree walk (:func:`evaluate`), the row chunks, the recognition of one scaled leaf
(:meth:`Operator.scaled_leaf`) and its Triton products are written here, once.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from kernelkit.operators import kernel_tree as S

__all__ = ["Operator", "ScaledLeaf", "evaluate", "triton_block", "triton_matmul",
           "TRITON_MATMUL_MAX_COLUMNS", "WIDE_BLOCK_ELEMENTS"]

#: Most columns of V for the Triton K @ V (few-column products: CG, residuals, eigensolver
#: blocks); wider V goes to row blocks and GEMMs: the Triton K @ V costs about a fixed time per
#: column, torch row blocks a large fixed time and little per column, Triton Gram blocks less
#: still (docs/benchmarks.md, "Figures behind choices in the code").
TRITON_MATMUL_MAX_COLUMNS = 768
#: Kernel values in one Triton Gram row block of a wide product (1 GiB of float64).
WIDE_BLOCK_ELEMENTS = 2**27


class ScaledLeaf(NamedTuple):
    """A kernel part ``[ConstantKernel *] one registry leaf``: the leaf and the constant factors
    beside it."""

    leaf: S.Leaf
    constants: tuple


def _factors(node):
    """The factors of a (nested) product, left to right."""
    if isinstance(node, S.Product):
        return _factors(node.k1) + _factors(node.k2)
    return [node]


def evaluate(node, leaf, scalar):
    """The kernel values of the tree ``node``: sums, products and powers of its children,
    ``scalar(node)`` for a constant or white noise (:class:`~.kernel_tree.Scalar`) and
    ``leaf(node)`` for a registry kernel (:class:`~.kernel_tree.Leaf`)."""
    if isinstance(node, S.Sum):
        return evaluate(node.k1, leaf, scalar) + evaluate(node.k2, leaf, scalar)
    if isinstance(node, S.Product):
        return evaluate(node.k1, leaf, scalar) * evaluate(node.k2, leaf, scalar)
    if isinstance(node, S.Power):
        return evaluate(node.k, leaf, scalar) ** node.exponent
    if isinstance(node, S.Scalar):
        return scalar(node)
    return leaf(node)


def triton_block(A, B, name, numbers, amplitude=1.0):
    """``amplitude`` K(A, B) of the registry kernel ``name`` at the registry parameters
    ``numbers`` by the Triton Gram (:func:`kernelkit_gpu.gram`; B None: K(A, A), exactly
    symmetric), in the operands' dtype. The operands were validated by the caller."""
    from kernelkit_gpu import assume_finite, gram

    with assume_finite():
        K = gram(A, B, name, **numbers)
    return K if amplitude == 1.0 else K.mul_(amplitude)


def triton_matmul(A, B, V, name, numbers, amplitude=1.0):
    """``amplitude`` K(A, B) @ V by the Triton K @ V (:func:`kernelkit_gpu.kernel_matvec`:
    nothing of size len(A) x len(B) formed), V in the operands' dtype; result in that dtype."""
    from kernelkit_gpu import assume_finite, kernel_matvec

    with assume_finite():  # operands validated once; CG columns finite
        out = kernel_matvec(A, B, V, name, **numbers)
    return out if amplitude == 1.0 else amplitude * out


class Operator:
    """The base of every kernel operator: the kernel tree, the device, and what every member
    computes alike (module docstring).

    Parameters
    ----------
    structure : KernelStructure
        The kernel (:func:`~.kernel_tree.parse_kernel` or :func:`~.kernel_tree.registry_kernel`).
    device : torch.device or str
    """

    def __init__(self, structure, device):
        self.structure = structure
        self.device = torch.device(device)

    @staticmethod
    def row_chunks(step, rows):
        """``(lo, hi)`` row chunks of at most ``step`` rows covering ``rows = (first, last)``."""
        first, last = rows
        return [(lo, min(lo + step, last)) for lo in range(first, last, step)]

    @classmethod
    def chunked_matmul(cls, rows, step, V, block, times=torch.matmul):
        """The rows ``rows = (first, last)`` of K @ V, shape (last - first, k) in V's dtype, from
        row blocks ``block(lo, hi)`` = K[lo:hi] of at most ``step`` rows, each multiplied as
        ``times(block, V)``."""
        first, last = rows
        out = torch.empty((last - first,) + tuple(V.shape[1:]), dtype=V.dtype, device=V.device)
        for lo, hi in cls.row_chunks(step, rows):
            out[lo - first:hi - first] = times(block(lo, hi), V)
        return out

    def values(self, shape, dtype, leaf, scalar):
        """The kernel tree's values of ``shape`` (a block or a diagonal) in ``dtype``, with
        ``leaf`` and ``scalar`` as :func:`evaluate` (0 for an empty kernel part; a tree of
        constants only broadcast to ``shape``)."""
        root = self.structure.root
        if root is None:
            return torch.zeros(shape, dtype=dtype, device=self.device)
        value = evaluate(root, leaf, scalar)
        if not torch.is_tensor(value) or tuple(value.shape) != tuple(shape):
            value = torch.zeros(shape, dtype=dtype, device=self.device) + value
        return value.to(dtype)

    def scaled_leaf(self):
        """The kernel part as ``[ConstantKernel *] one leaf`` (a :class:`ScaledLeaf`, for any
        leaf and device), or None for every other tree."""
        if self.structure.root is None:
            return None
        factors = _factors(self.structure.root)
        leaves = [f for f in factors if isinstance(f, S.Leaf)]
        constants = tuple(f for f in factors if isinstance(f, S.Scalar) and not f.white)
        if len(leaves) != 1 or len(leaves) + len(constants) != len(factors):
            return None
        return ScaledLeaf(leaves[0], constants)
