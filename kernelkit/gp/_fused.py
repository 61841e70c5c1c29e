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

Only on :data:`kernelkit.gp._fused_tree.DEVICES` (CUDA); on the CPU the float64 autograd path
stays (tests add "cpu" to run the Triton interpreter). Every other tree and wider data take the
autograd path. An operator whose rows are sharded over a process group runs the pass on its rows
(``rows=op.rows``) and all-reduces the sums (``op.reduce``).
"""

from __future__ import annotations

import numpy as np
import torch

from kernelkit.gp import _operator
from kernelkit.gp._fused_tree import _leaf_numbers, fused_tree

__all__ = ["bilinear"]

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
