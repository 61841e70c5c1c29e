"""Feature maps on torch tensors: the GPU twins of :mod:`kernelkit_math.random_features`.

:func:`apply_feature_map` evaluates any ``kernelkit_math`` feature-map object on a torch tensor with
the object's own random weights (drawn once, in float64, from its seed), so the CPU reference and
the GPU see the same features. Each map is a few fused elementwise ops around one small matmul,
differentiable by torch autograd. The cheap deterministic maps (identity, elu+1, relu) are also
fused into the linear-attention kernels themselves; this module serves every other map.

Arithmetic runs in float32 (float64 for float64 input) and the result is cast back to the input's
dtype. Equivalent to ``fmap(x)`` of the float64 reference up to dtype tolerance.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from kernelkit_math import random_features as rf

__all__ = ["apply_feature_map"]


def _weights(array, like):
    return torch.as_tensor(array, dtype=like.dtype, device=like.device)


def _exp_log_features(fmap, x):
    xs = x * math.sqrt(fmap.scale)
    proj = xs @ _weights(fmap.weights, xs).T
    half_norm = 0.5 * (xs * xs).sum(-1, keepdim=True)
    if isinstance(fmap, rf.HyperbolicFavorMap):
        return torch.cat([proj, -proj], dim=-1) - half_norm - 0.5 * math.log(2 * fmap.m)
    return proj - half_norm - 0.5 * math.log(fmap.m)


def apply_feature_map(fmap, x):
    """phi(x) for a :class:`kernelkit_math.random_features.FeatureMap` on a torch tensor.

    Parameters
    ----------
    fmap : kernelkit_math.random_features.FeatureMap
        Identity, elu+1, relu, FAVOR+ (i.i.d. or orthogonal), hyperbolic FAVOR+, random Fourier
        features or the second-order Taylor map.
    x : torch.Tensor of shape (..., D)

    Returns
    -------
    torch.Tensor of shape (..., M), the dtype and device of ``x``.

    Raises
    ------
    TypeError
        If ``fmap`` is not a known feature-map object or ``x`` not a floating tensor.
    ValueError
        If ``x``'s last dimension differs from the map's input dimension.
    """
    if not isinstance(fmap, rf.FeatureMap):
        raise TypeError(f"feature_map must be a kernelkit_math FeatureMap; got {type(fmap).__name__}")
    if not isinstance(x, torch.Tensor) or not x.dtype.is_floating_point:
        raise TypeError(f"x must be a floating torch.Tensor; got {type(x).__name__}")
    if fmap.d is not None and x.shape[-1] != fmap.d:
        raise ValueError(f"feature map {fmap.name!r} takes D = {fmap.d} features; x has {x.shape[-1]}")
    work = x if x.dtype == torch.float64 else x.float()
    if isinstance(fmap, rf.IdentityMap):
        out = work
    elif isinstance(fmap, rf.EluPlusOneMap):
        out = F.elu(work) + 1.0
    elif isinstance(fmap, rf.ReluMap):
        out = F.relu(work)
    elif isinstance(fmap, (rf.FavorPlusMap, rf.HyperbolicFavorMap)):
        out = torch.exp(_exp_log_features(fmap, work))
    elif isinstance(fmap, rf.RandomFourierMap):
        angles = work @ _weights(fmap.weights, work).T + _weights(fmap.offsets, work)
        out = math.sqrt(2.0 / fmap.m) * torch.cos(angles)
    elif isinstance(fmap, rf.Taylor2Map):
        s = fmap.scale
        outer = (work[..., :, None] * work[..., None, :]).flatten(-2)
        ones = torch.ones(work.shape[:-1] + (1,), dtype=work.dtype, device=work.device)
        out = torch.cat([ones, math.sqrt(s) * work, (s / math.sqrt(2.0)) * outer], dim=-1)
    else:
        raise TypeError(f"no torch implementation for feature map {type(fmap).__name__}")
    return out.to(x.dtype)
