"""Where and in what precision :class:`~kernelkit.GaussianProcessRegressor` computes: the covariance
operator of its training data on its device, in its product dtype, with its rows sharded over
the ranks of a process group on the iterative path."""

from __future__ import annotations

import torch

from kernelkit import distributed
from kernelkit._util.device import resolve_device
from kernelkit.operators.covariance import CovarianceOperator

__all__ = ["covariance_operator"]


def covariance_operator(X, structure, jitter, device, dtype, iterative, held=None):
    """The covariance operator of the training inputs X and its device data.

    Parameters
    ----------
    X : ndarray of shape (n, d)
    structure : KernelStructure
        The kernel's structure (:func:`kernelkit.operators.kernel_tree.parse_kernel`).
    jitter : float
        Added to the diagonal (the iterative path's ``alpha``).
    device, dtype : str
        The regressor's parameters: "auto" device is the GPU when one is present; "auto"
        dtype is float64 products, whose fused gradient contractions run in float32 (with
        float64 sums) on a GPU.
    iterative : bool
        The iterative path: under a process group the rows are sharded over its ranks
        (:class:`kernelkit.operators.covariance_sharded.ShardedCovarianceOperator`).
    held : tuple, optional
        The device data returned with an earlier operator on the same X: reused on the same
        device (every ``log_marginal_likelihood`` / ``predict`` call would copy X again).

    Returns
    -------
    op : CovarianceOperator
    held : tuple
        ``(device, op.data)``: the ``held`` of later calls.
    """
    where = torch.device(resolve_device(device))
    products = getattr(torch, "float64" if dtype == "auto" else dtype)
    kind = CovarianceOperator
    if distributed.active() and iterative:  # rows sharded over the process group
        from kernelkit.operators.covariance_sharded import ShardedCovarianceOperator as kind
    data = held[1] if held is not None and held[0] == where else None
    contraction = torch.float32 if dtype == "auto" and where.type == "cuda" else products
    op = kind(X, structure, jitter, where, products, data=data, contraction_dtype=contraction)
    return op, (where, op.data)
