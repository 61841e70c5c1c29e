"""Feature maps on torch tensors: the GPU twins of :mod:`kernelkit_math.random_features`.

:func:`apply_feature_map` evaluates any ``kernelkit_math`` feature-map object on a torch tensor with
the object's own random weights (drawn once, in float64, from its seed), so the CPU reference and
the GPU see the same features. Each map is a few fused elementwise ops around one small matmul,
differentiable by torch autograd. :data:`TORCH_MAPS` holds the torch phi of every row of the
feature-map registry (:data:`kernelkit_math.random_features.FEATURE_MAPS`); the maps with a fused
code there are also applied inside the linear-attention kernels themselves, and their twins
(:mod:`kernelkit_gpu.attention.linear_naive`) use the phi of this table.

Arithmetic runs in float32 (float64 for float64 input) and the result is cast back to the input's
dtype. Equivalent to ``fmap(x)`` of the float64 reference up to dtype tolerance.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from kernelkit_math import random_features as rf
from kernelkit_math.registry import fill_doc

__all__ = ["apply_feature_map", "TORCH_MAPS"]


def _weights(array, like):
    return torch.as_tensor(array, dtype=like.dtype, device=like.device)


def _exp_features(fmap, x):
    xs = x * math.sqrt(fmap.scale)
    proj = xs @ _weights(fmap.weights, xs).T
    half_norm = 0.5 * (xs * xs).sum(-1, keepdim=True)
    if isinstance(fmap, rf.HyperbolicFavorMap):
        return torch.exp(torch.cat([proj, -proj], dim=-1) - half_norm
                         - 0.5 * math.log(2 * fmap.m))
    return torch.exp(proj - half_norm - 0.5 * math.log(fmap.m))


def _random_fourier(fmap, x):
    angles = x @ _weights(fmap.weights, x).T + _weights(fmap.offsets, x)
    return math.sqrt(2.0 / fmap.m) * torch.cos(angles)


def _taylor2(fmap, x):
    s = fmap.scale
    outer = (x[..., :, None] * x[..., None, :]).flatten(-2)
    ones = torch.ones(x.shape[:-1] + (1,), dtype=x.dtype, device=x.device)
    return torch.cat([ones, math.sqrt(s) * x, (s / math.sqrt(2.0)) * outer], dim=-1)


#: The torch phi of every registry feature map, by name: ``TORCH_MAPS[name](fmap, x)``, x a float32
#: or float64 tensor (..., D), ``fmap`` the float64 map object (its weights and parameters; unused
#: by the elementwise maps, which the fused twins call with None).
TORCH_MAPS = {
    "identity": lambda fmap, x: x,
    "elu+1": lambda fmap, x: F.elu(x) + 1.0,
    "relu": lambda fmap, x: F.relu(x),
    "favor+": _exp_features,
    "favor+orth": _exp_features,
    "hyp-favor+": _exp_features,
    "rff": _random_fourier,
    "taylor2": _taylor2,
}


@fill_doc(maps=rf.feature_map_list_doc())
def apply_feature_map(fmap, x):
    """phi(x) for a :class:`kernelkit_math.random_features.FeatureMap` on a torch tensor.

    Parameters
    ----------
    fmap : kernelkit_math.random_features.FeatureMap
        A map of the registry: {maps}.
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
    phi = TORCH_MAPS.get(fmap.name.partition(":")[0])
    if phi is None:
        raise TypeError(f"no torch implementation for feature map {type(fmap).__name__}")
    work = x if x.dtype == torch.float64 else x.float()
    return phi(fmap, work).to(x.dtype)
