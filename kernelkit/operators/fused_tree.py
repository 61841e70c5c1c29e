"""Which kernel trees of the Gaussian process the fused Triton passes cover, and the Triton
K @ V and Gram blocks for them.

A kernel part ``[ConstantKernel *] one leaf`` (:meth:`~kernelkit.operators.base.Operator.
scaled_leaf`) whose leaf has a fused contraction
(:data:`kernelkit_gpu.pairwise.contract_fused.FUSED_KERNELS`, read from the epilogue table), on
at most ``DIRECT_MAX_D`` features, with pure-noise summands beside it, is a fused tree; on
:data:`DEVICES` its gradient contractions come from one fused pass (:mod:`.fused`) and, when K
is not held dense, its products K @ V from :func:`kernelkit_gpu.kernel_matvec`
(:func:`kernel_part_matmul`). This module imports no other GP module, so the operator
(:mod:`.covariance`) and the gradient (:mod:`.fused`) can both use it.
"""

from __future__ import annotations

import torch

from kernelkit.operators.base import triton_block, triton_matmul

__all__ = ["DEVICES", "fused_tree", "kernel_part_gram", "kernel_part_block",
           "kernel_part_matmul"]

#: Device types where the gradient's contractions run fused.
DEVICES = ("cuda",)


def fused_tree(op):
    """The :class:`~kernelkit.operators.base.ScaledLeaf` of ``op``'s kernel part where the fused
    passes cover it, or None where the autograd path stays (another device or tree, more than
    ``DIRECT_MAX_D`` features, no Triton)."""
    import kernelkit_gpu
    from kernelkit_gpu import prepare as P
    from kernelkit_gpu.pairwise.contract_fused import FUSED_KERNELS

    if (op.device.type not in DEVICES or not kernelkit_gpu.HAS_TRITON
            or op.X64.shape[1] > P.DIRECT_MAX_D):
        return None
    tree = op.scaled_leaf()
    return tree if tree is not None and tree.leaf.spec.name in FUSED_KERNELS else None


def _leaf_numbers(op, tree, theta):
    """``(registry parameters as NumPy values, amplitude)`` of the tree at ``theta``; kept for
    the last ``theta`` object, so the products of one evaluation do not wait for the device."""
    held = op._leaf_numbers_memo
    if held is not None and held[0] is theta:
        return held[1]
    numbers = {k: (v.detach().cpu().numpy() if torch.is_tensor(v) else v)
               for k, v in tree.leaf.numbers(theta, op.X64.shape[1]).items()}
    amplitude = 1.0
    for c in tree.constants:
        amplitude *= float(c.number(theta))
    op._leaf_numbers_memo = (theta, (numbers, amplitude))
    return numbers, amplitude


def kernel_part_matmul(op, tree, params, V, dtype):
    """This process's rows (``op.rows``) of k_theta(X, X) @ V, the kernel part of ``tree``, by
    the Triton K @ V (:func:`kernelkit_gpu.kernel_matvec`) in ``dtype``: float32 ("accurate":
    float32 products of centred operands) or float64 (float64 arithmetic). Nothing of size
    n x n is formed; the torch row blocks it replaces walk d elementwise passes over every
    chunk. Result in ``dtype``."""
    numbers, amplitude = _leaf_numbers(op, tree, params["theta"])
    first, last = op.rows
    X = op.X64.to(dtype)
    return triton_matmul(X[first:last], X, V.to(dtype), tree.leaf.spec.name, numbers, amplitude)


def kernel_part_gram(op, tree, params, dtype):
    """This process's rows (``op.rows``) of the kernel part k_theta(X, X) of ``tree`` as a dense
    matrix in ``dtype`` (:func:`kernel_part_block`; exactly symmetric on one process)."""
    first, last = op.rows
    return kernel_part_block(op, tree, params, first, last, dtype)


def kernel_part_block(op, tree, params, lo, hi, dtype):
    """Rows lo:hi of the kernel part k_theta(X, X) of ``tree`` as a dense matrix in ``dtype``, by
    the Triton Gram (:func:`kernelkit_gpu.gram`, "accurate" float32: exact differences for
    d <= 16; all rows: exactly symmetric)."""
    numbers, amplitude = _leaf_numbers(op, tree, params["theta"])
    X = op.X64.to(dtype)
    return triton_block(X[lo:hi], None if (lo, hi) == (0, op.n) else X, tree.leaf.spec.name,
                        numbers, amplitude)
