r"""The GP gradient's kernel contractions through the fused Triton pass, for the common trees.

The BBMM gradient (:mod:`kernelkit.estimators.gp._lml`) needs, for every log-hyperparameter
theta_i, sum_j a_j^T (dK/dtheta_i) b_j (and the value sum_j a_j^T K b_j) for the columns
A = [alpha, -U/t], B = [alpha, W]: the operator's ``contract``
(:meth:`kernelkit.operators.covariance.CovarianceOperator.contract`), by autograd through row
blocks of the kernel tree, for any tree. For a kernel part that is

    [ConstantKernel *] one leaf with a fused contraction  (d <= 16; the leaves whose row of the
    epilogue table names its fused_derivatives: kernelkit_gpu.pairwise.contract_fused.FUSED_KERNELS)

with the WhiteKernels' noise beside it (``+ WhiteKernel``, or within: ``C * (RBF + WhiteKernel)``
has the kernel part ``C * RBF``, :mod:`.kernel_tree`), :func:`bilinear` here gets the same
numbers from one pass of
:func:`kernelkit_gpu.pairwise.contract_fused.kernel_contractions` (tile by tile from X, never
forming K or dK): ``kg`` = sum_j a_j^T K_leaf b_j and ``grad`` = the contractions with the
derivatives along the registry's log-parameters. They map to theta (scikit-learn's log layout) as

- leaf parameter: the kernel class maps theta to the registry parameter p = coef exp(power theta)
  (:data:`kernelkit._kernel_base._ParamMap`), so dK/dtheta = power dK/dlog p; for rbf (gamma =
  1 / (2 l^2), power -2) dK/dlog l = -2 dK/dlog gamma, for laplacian (gamma = 1 / l) -1;
- every factor: the leaf's contractions times the amplitude c (the product of the constants);
- a free constant c_k = exp(power theta_k): dK/dtheta_k = power c kg;
- the noise summands: (noise + jitter) sum_j a_j^T b_j, differentiated by autograd in
  ``contract``.

The pass runs in the operator's ``contraction_dtype`` (the regressor's dtype="auto": float32
operands, float64 sums, beside float64 CG products; at n = 1e6 a float64 pass took 69 s against
4.2 s).

Only on :data:`kernelkit.operators.fused_tree.DEVICES` (CUDA); on the CPU the float64 autograd path
stays (tests add "cpu" to run the Triton interpreter). Every other tree and wider data take the
autograd path. An operator whose rows are sharded over a process group runs the pass on its rows
(``rows=op.rows``) and all-reduces the sums (``op.reduce``).
"""

from __future__ import annotations

import numpy as np
import torch

from kernelkit.operators.fused_tree import _leaf_numbers, fused_tree

__all__ = ["bilinear", "landmark_columns"]

def _contract(op, tree, theta, A, B):
    """(value, gradient along theta) of sum_j a_j^T k_theta(X, X) b_j, kernel part only."""
    from kernelkit_gpu import assume_finite
    from kernelkit_gpu.pairwise.contract_fused import kernel_contractions

    leaf = tree.leaf
    numbers, amplitude = _leaf_numbers(op, tree, theta)
    def share():  # this process's rows of the sums (all n rows on one process)
        with assume_finite():  # CG columns: finite, checked nowhere else per iteration
            res = kernel_contractions(op.X64.to(A.dtype), A, B, leaf.spec.name, rows=op.rows,
                                      **numbers)
        return torch.cat([res.grad, res.kg.reshape(1)])

    summed = op.reduce(share)  # float64; all-reduced over the ranks of a sharded operator
    return _theta_terms(tree, theta, numbers, amplitude, summed[:-1], summed[-1])


def _theta_terms(tree, theta, numbers, amplitude, res_grad, res_kg):
    """``(value, gradient along theta)`` from the leaf's sums: ``res_kg`` = sum W o K_leaf and
    ``res_grad`` = sum W o dK_leaf / dlog p for the registry's hyperparameters p in order (one
    entry per element of each value), for some weights W (the module docstring's mapping)."""
    leaf = tree.leaf
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


class _RBFColumns(torch.autograd.Function):
    r"""The columns Y = c k_rbf(X, X[S]) of a ``[ConstantKernel *] rbf`` kernel part (float64,
    the matrix-product form of the distances, as :meth:`~.covariance.CovarianceOperator.block`
    with ``direct=False``), with the gradient of <G, Y> in closed form. With H = G o Y, r and q
    its row and column sums, and the features f of the centred X and Z = X[S],

    .. math::

        \sum_{ij} H_{ij} (x_{if} - z_{jf})^2 = (x_f^2)^\top r + (z_f^2)^\top q
            - 2 x_f^\top H z_f,

    times -gamma_f / c for dK_leaf / dlog gamma_f, and sum H / c for K_leaf: one n x k pass and an
    n x k x d GEMM, where autograd through the block saved four n x k temporaries and ran about
    ten n x k passes backward (the preconditioner's landmark block)."""

    @staticmethod
    def forward(ctx, theta, op, tree, landmarks):
        X = op.X64
        with torch.no_grad():
            Y = op.block(X, X[landmarks], op.structure.params(theta), dtype=torch.float64,
                         direct=False)
        ctx.op, ctx.tree, ctx.landmarks = op, tree, landmarks
        ctx.save_for_backward(theta, Y)
        return Y

    @staticmethod
    def backward(ctx, G):
        theta, Y = ctx.saved_tensors
        op, tree, landmarks = ctx.op, ctx.tree, ctx.landmarks
        X = op.X64
        Z = X[landmarks]
        numbers, amplitude = _leaf_numbers(op, tree, theta)
        H = G * Y
        distance_sums = ((X * X).T @ H.sum(1) + (Z * Z).T @ H.sum(0)
                         - 2.0 * (X * (H @ Z)).sum(0))
        gamma = torch.as_tensor(numbers["gamma"], dtype=torch.float64, device=Y.device)
        res_grad = -gamma * distance_sums / amplitude
        if gamma.ndim == 0:
            res_grad = res_grad.sum().reshape(1)
        _, grad = _theta_terms(tree, theta, numbers, amplitude, res_grad, H.sum() / amplitude)
        return grad, None, None, None


def landmark_columns(op, params, landmarks):
    """k(X, X[landmarks]) (kernel part, float64, differentiable in ``params["theta"]``): for a
    ``[ConstantKernel *] rbf`` kernel part with its gradient in closed form
    (:class:`_RBFColumns`), else :meth:`~.covariance.CovarianceOperator.block` with autograd."""
    tree = op.scaled_leaf()
    theta = params["theta"]
    if tree is None or tree.leaf.spec.name != "rbf" or not theta.requires_grad:
        X = op.X64
        return op.block(X, X[landmarks], params, dtype=torch.float64, direct=False)
    return _RBFColumns.apply(theta, op, tree, landmarks)


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
    r"""The operator's ``contract`` (:meth:`~.covariance.CovarianceOperator.contract`) with the
    kernel part from the fused pass where :func:`fused_tree` covers the tree.

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
        :func:`kernelkit.operators.covariance.bilinear`.
    """
    tree = fused_tree(op)
    if tree is None:
        return op.contract(theta, A, B)
    return op.contract(theta, A, B, lambda t, A, B: _FusedBilinear.apply(t, op, tree, A, B),
                       op.contraction_dtype)
