""":class:`kernelkit.GaussianProcessRegressor` over a process group: what the estimator shares
between ranks besides the sharded products of
:class:`kernelkit.operators.covariance_sharded.ShardedCovarianceOperator`: rank 0's random draws
and decisions, the objective L-BFGS sees, and the exact path's fit (docs/distributed.md).
"""

from __future__ import annotations

import numpy as np
import torch

from kernelkit import distributed

__all__ = ["from_rank0", "rank0_objective", "share_fit"]


def from_rank0(values):
    """Rank 0's float64 ``values`` (flattened; exact for integers below 2**53) on every rank of a
    process group; without one, this process's."""
    values = np.asarray(values, dtype=np.float64).reshape(-1)
    if not distributed.active():
        return values
    from kernelkit_gpu import distributed as D

    t = torch.as_tensor(values)
    return D.broadcast(t).numpy() if t.numel() else t.numpy()


def rank0_objective(lml_at):
    """``lml_at(theta, eval_gradient)`` returning rank 0's value (and gradient) on every rank,
    so that L-BFGS takes the same steps everywhere."""

    def shared(theta, eval_gradient):
        out = lml_at(theta, eval_gradient)
        if not eval_gradient:
            return float(from_rank0([out])[0])
        flat = from_rank0(np.concatenate([[out[0]], out[1]]))
        return float(flat[0]), flat[1:]

    return shared


def share_fit(model):
    """Rank 0's fitted hyperparameters, ``alpha_``, ``L_`` (exact path) and log-likelihood on
    every rank (the exact path's dense factorisation runs on every rank alone)."""
    model.kernel_.theta = from_rank0(model.kernel_.theta)
    model.alpha_ = from_rank0(model.alpha_).reshape(model.alpha_.shape)
    if getattr(model, "L_", None) is not None:
        model.L_ = from_rank0(model.L_).reshape(model.L_.shape)
    model.log_marginal_likelihood_value_ = np.float64(
        from_rank0([model.log_marginal_likelihood_value_])[0])
