"""Which kernel trees the fused Triton passes cover, and the Triton K @ V for them.

A kernel part ``[ConstantKernel *] one stationary leaf`` (rbf, laplacian, matern, rational
quadratic; d <= 16) with pure-noise summands beside it is a :class:`FusedTree`; on
:data:`DEVICES` its gradient contractions come from one fused pass (:mod:`.fused`) and, when K
is not held dense, its products K @ V from :func:`kernelkit_gpu.kernel_matvec`
(:func:`kernel_part_matmul`). This module imports no other GP module but the structure, so the
operator (:mod:`.covariance`) and the gradient (:mod:`.fused`) can both use it.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from kernelkit.operators import kernel_tree as S

__all__ = ["DEVICES", "FusedTree", "fused_tree", "kernel_part_gram", "kernel_part_matmul",
           "leaf_tree"]

#: Device types where the gradient's contractions run fused.
DEVICES = ("cuda",)


class FusedTree(NamedTuple):
    """A kernel part the fused pass computes: the leaf and the constant factors beside it."""

    leaf: S.Leaf
    constants: tuple


def _factors(node):
    """The factors of a (nested) product, left to right."""
    if isinstance(node, S.Product):
        return _factors(node.k1) + _factors(node.k2)
    return [node]


def fused_tree(op):
    """The :class:`FusedTree` of ``op``'s kernel part, or None where the autograd path stays
    (another device or tree, more than ``DIRECT_MAX_D`` features, no Triton)."""
    import kernelkit_gpu
    from kernelkit_gpu import prepare as P
    from kernelkit_gpu.pairwise.contract_fused import FUSED_KERNELS

    if (op.device.type not in DEVICES or not kernelkit_gpu.HAS_TRITON
            or op.X64.shape[1] > P.DIRECT_MAX_D):
        return None
    tree = leaf_tree(op)
    return tree if tree is not None and tree.leaf.spec.name in FUSED_KERNELS else None


def leaf_tree(op):
    """The kernel part of ``op`` as ``[ConstantKernel *] one leaf`` (a :class:`FusedTree`, on
    any device and for any leaf), or None for every other tree."""
    if op.structure.root is None:
        return None
    factors = _factors(op.structure.root)
    leaves = [f for f in factors if isinstance(f, S.Leaf)]
    constants = tuple(f for f in factors if isinstance(f, S.Scalar) and not f.white)
    if len(leaves) != 1 or len(leaves) + len(constants) != len(factors):
        return None
    return FusedTree(leaves[0], constants)


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
    from kernelkit_gpu import assume_finite, kernel_matvec

    numbers, amplitude = _leaf_numbers(op, tree, params["theta"])
    first, last = op.rows
    X = op.X64.to(dtype)
    with assume_finite():  # training data checked at fit, CG columns finite
        out = kernel_matvec(X[first:last], X, V.to(dtype), tree.leaf.spec.name, **numbers)
    return out if amplitude == 1.0 else amplitude * out


def kernel_part_gram(op, tree, params, dtype):
    """This process's rows (``op.rows``) of the kernel part k_theta(X, X) of ``tree`` as a dense
    matrix in ``dtype`` (:func:`kernel_part_block`; exactly symmetric on one process)."""
    first, last = op.rows
    return kernel_part_block(op, tree, params, first, last, dtype)


def kernel_part_block(op, tree, params, lo, hi, dtype):
    """Rows lo:hi of the kernel part k_theta(X, X) of ``tree`` as a dense matrix in ``dtype``, by
    the Triton Gram (:func:`kernelkit_gpu.gram`, "accurate" float32: exact differences for
    d <= 16; all rows: exactly symmetric)."""
    from kernelkit_gpu import assume_finite, gram

    numbers, amplitude = _leaf_numbers(op, tree, params["theta"])
    X = op.X64.to(dtype)
    with assume_finite():  # training data checked at fit
        K = gram(X[lo:hi], None if (lo, hi) == (0, op.n) else X, tree.leaf.spec.name, **numbers)
    return K if amplitude == 1.0 else K.mul_(amplitude)
