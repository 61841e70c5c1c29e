"""The signed-map denominator guard of the public linear_attention (issue 20)."""

import numpy as np
import pytest
import torch

from kernelkit.attention import linear_attention
from kernelkit_gpu.attention.linear_naive import linear_attention_naive


def _signed_qkv(seed=0, T=33, D=8):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, 2, T, D, generator=g, dtype=torch.float64)
    k = torch.randn(1, 2, T, D, generator=g, dtype=torch.float64)
    v = torch.randn(1, 2, T, 3, generator=g, dtype=torch.float64)
    return q, k, v


@pytest.mark.parametrize("causal", [False, True])
def test_guard_bounds_signed_outputs(causal):
    # identity map: weights q.k of both signs, denominators near 0 on some rows
    q, k, v = _signed_qkv()
    raw = linear_attention(q, k, v, "identity", is_causal=causal)
    delta = 0.5
    out = linear_attention(q, k, v, "identity", is_causal=causal, guard=delta)
    assert float(raw.abs().max()) > float(v.abs().max()) / delta  # unguarded blows past it
    assert float(out.abs().max()) <= float(v.abs().max()) / delta * (1 + 1e-12)
    # the guard written out (float64): den_t = max(sum_s w_ts, delta |q_t|.sum_s |k_s|)
    w = q @ k.transpose(-1, -2)
    vis = torch.ones_like(w, dtype=torch.bool)
    if causal:
        vis = torch.tril(vis)
    w = torch.where(vis, w, 0.0)
    bound = delta * (q.abs() @ torch.where(vis[..., None], k.abs()[..., None, :, :], 0.0)
                     .sum(-2).transpose(-1, -2)).diagonal(dim1=-2, dim2=-1)
    den = torch.maximum(w.sum(-1), torch.maximum(bound, torch.tensor(1e-6, dtype=w.dtype)))
    want = (w @ v) / den[..., None]
    np.testing.assert_allclose(out.numpy(), want.numpy(), rtol=1e-10, atol=1e-12)


def test_guard_is_the_twins_and_refuses_bad_values():
    q, k, v = _signed_qkv(1)
    out = linear_attention(q.float(), k.float(), v.float(), "rff:16", guard=0.1, seed=3)
    from kernelkit_gpu.feature_maps import apply_feature_map
    from kernelkit_math.random_features import make_feature_map

    fmap = make_feature_map("rff:16", 8, seed=3)
    qf, kf = apply_feature_map(fmap, q.float()), apply_feature_map(fmap, k.float())
    want = linear_attention_naive(qf, kf, v.float(), feature_map="identity", guard=0.1)
    torch.testing.assert_close(out, want, rtol=0, atol=0)
    with pytest.raises(ValueError, match="guard"):
        linear_attention(q, k, v, "identity", guard=0.0)
    with pytest.raises(TypeError, match="guard"):
        linear_attention(q, k, v, "identity", guard="big")
