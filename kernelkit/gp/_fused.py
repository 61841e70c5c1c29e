r"""The GP gradient's kernel contractions through the fused Triton pass, for the common trees.

The BBMM gradient (:mod:`._lml`) needs, for every log-hyperparameter theta_i,
sum_j a_j^T (dK/dtheta_i) b_j (and the value sum_j a_j^T K b_j) for the columns A = [alpha, -U/t],
B = [alpha, W]. :func:`kernelkit.gp._operator.bilinear` gets them by autograd through row blocks
of the kernel tree, for any tree. For a kernel part that is

    [ConstantKernel *] one stationary leaf  (rbf, laplacian, matern, rational_quadratic; d <= 16)

with any pure-noise summands beside it (``+ WhiteKernel``), :func:`bilinear` here gets the same
numbers from one pass of
:func:`kernelkit_gpu.pairwise.contract_fused.kernel_contractions` (tile by tile from X, never
forming K or dK): ``kg`` = sum_j a_j^T K_leaf b_j and ``grad`` = the contractions with the
derivatives along the registry's log-parameters. They map to theta (scikit-learn's log layout) as

- leaf parameter: the kernel class maps theta to the registry parameter p = coef exp(power theta)
  (:data:`kernelkit.kernels._ParamMap`), so dK/dtheta = power dK/dlog p; for rbf (gamma =
  1 / (2 l^2), power -2) dK/dlog l = -2 dK/dlog gamma, for laplacian (gamma = 1 / l) -1;
- every factor: the leaf's contractions times the amplitude c (the product of the constants);
- a free constant c_k = exp(power theta_k): dK/dtheta_k = power c kg;
- the noise summands: (noise + jitter) sum_j a_j^T b_j, differentiated by autograd as in
  :func:`~kernelkit.gp._operator.bilinear`.

Only on :data:`DEVICES` (CUDA); on the CPU the float64 autograd path stays (tests add "cpu" to
run the Triton interpreter). Every other tree and wider data take the autograd path. An operator
whose rows are sharded over a process group runs the pass on its rows (``rows=op.rows``) and
all-reduces the sums (``op.reduce``).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from kernelkit.gp import _operator
from kernelkit.gp import _structure as S

__all__ = ["FusedTree", "fused_tree", "bilinear", "kernel_part_matmul", "DEVICES"]

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
    from kernelkit_gpu import _launch
    from kernelkit_gpu import _prepare as P
    from kernelkit_gpu.pairwise.contract_fused import FUSED_KERNELS

    if (op.device.type not in DEVICES or not _launch.HAS_TRITON
            or op.X64.shape[1] > P.DIRECT_MAX_D or op.structure.root is None):
        return None
    factors = _factors(op.structure.root)
    leaves = [f for f in factors if isinstance(f, S.Leaf)]
    constants = tuple(f for f in factors if isinstance(f, S.Scalar) and not f.white)
    if (len(leaves) != 1 or len(leaves) + len(constants) != len(factors)
            or leaves[0].spec.name not in FUSED_KERNELS):
        return None
    return FusedTree(leaves[0], constants)


def _leaf_numbers(op, tree, theta):
    """``(registry parameters as NumPy values, amplitude)`` of the tree at ``theta``."""
    numbers = {k: (v.detach().cpu().numpy() if torch.is_tensor(v) else v)
               for k, v in tree.leaf.numbers(theta, op.X64.shape[1]).items()}
    amplitude = 1.0
    for c in tree.constants:
        amplitude *= float(c.number(theta))
    return numbers, amplitude


def kernel_part_matmul(op, tree, params, V, dtype):
    """This process's rows (``op.rows``) of k_theta(X, X) @ V, the kernel part of ``tree``, by
    the Triton K @ V (:func:`kernelkit_gpu.kernel_matvec`) in ``dtype``: float32 ("accurate":
    float32 products of centred operands) or float64 (float64 arithmetic). Nothing of size
    n x n is formed; the torch row blocks it replaces walk d elementwise passes over every
    chunk. Result in ``dtype``."""
    from kernelkit_gpu import assume_finite, kernel_matvec

    numbers, amplitude = _leaf_numbers(op, tree, params["theta"].detach())
    first, last = op.rows
    X = op.X64.to(dtype)
    with assume_finite():  # training data checked at fit, CG columns finite
        out = kernel_matvec(X[first:last], X, V.to(dtype), tree.leaf.spec.name, **numbers)
    return out if amplitude == 1.0 else amplitude * out


def _contract(op, tree, theta, A, B):
    """(value, gradient along theta) of sum_j a_j^T k_theta(X, X) b_j, kernel part only."""
    from kernelkit_gpu import assume_finite
    from kernelkit_gpu.pairwise.contract_fused import kernel_contractions

    leaf = tree.leaf
    numbers, amplitude = _leaf_numbers(op, tree, theta)
    def share():  # this process's rows of the sums (all n rows on one process)
        with assume_finite():  # CG columns: finite, checked nowhere else per iteration
            res = kernel_contractions(op.X64.to(op.dtype), A, B, leaf.spec.name, rows=op.rows,
                                      **numbers)
        return torch.cat([res.grad, res.kg.reshape(1)])

    summed = op.reduce(share)  # float64; all-reduced over the ranks of a sharded operator
    res_grad, res_kg = summed[:-1], summed[-1]
    # res.grad: the registry's hyperparameters in order, one entry per element of each value
    where, pos = {}, 0
    for p in leaf.spec.hyperparameters:
        size = int(np.size(numbers[p.name]))
        where[p.name] = slice(pos, pos + size)
        pos += size
    grad = torch.zeros_like(theta)
    maps = {m.name: m for m in leaf.kernel._param_map}
    for name, start, size, _ in leaf.free:
        m = maps[name]
        grad[start:start + size] += amplitude * m.power * res_grad[where[m.registry]]
    for c in tree.constants:
        if c.start is not None:
            grad[c.start] += c.power * amplitude * res_kg
    return amplitude * res_kg, grad


class _FusedBilinear(torch.autograd.Function):
    """The kernel part of :func:`bilinear`: value and gradient from one fused pass."""

    @staticmethod
    def forward(ctx, theta, op, tree, A, B):
        value, grad = _contract(op, tree, theta.detach(), A, B)
        ctx.save_for_backward(grad)
        return value

    @staticmethod
    def backward(ctx, grad_output):
        (grad,) = ctx.saved_tensors
        return grad_output * grad, None, None, None, None


def bilinear(op, theta, A, B):
    r""":func:`kernelkit.gp._operator.bilinear` with the kernel part from the fused pass.

    .. math:: s(\theta) = \sum_j a_j^\top K_\theta b_j

    Parameters
    ----------
    op : CovarianceOperator
    theta : torch.Tensor of shape (n_theta,), float64
        Log-hyperparameters laid out as ``kernel.theta``.
    A, B : torch.Tensor of shape (n, t)
        Constant columns (detached).

    Returns
    -------
    torch.Tensor, 0-d float64
        Differentiable with respect to ``theta``. Where :func:`fused_tree` is None, exactly
        :func:`kernelkit.gp._operator.bilinear`.
    """
    tree = fused_tree(op)
    if tree is None:
        return _operator.bilinear(op, theta, A, B)
    A, B = A.detach().to(op.dtype), B.detach().to(op.dtype)
    kernel_part = _FusedBilinear.apply(theta, op, tree, A, B)
    params = op.structure.params(theta)
    diag = (A.to(torch.float64) * B.to(torch.float64)).sum()
    return kernel_part + (params["noise"] + op.jitter) * diag
