"""Torch feature maps equal the float64 kernelkit_math maps (same seeded weights)."""

import numpy as np
import pytest
import torch

from kernelkit_gpu.feature_maps import apply_feature_map
from kernelkit_math.random_features import make_feature_map
from tests.conftest import TOL

SPECS = ["identity", "elu+1", "relu", "favor+:64", "favor+orth:64", "hyp-favor+:32", "rff:64", "taylor2"]


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
def test_torch_map_matches_reference(device, rng, spec, dtype):
    fmap = make_feature_map(spec, 8, seed=3)
    X = rng.normal(size=(2, 5, 8))
    got = apply_feature_map(fmap, torch.from_numpy(X).to(device=device, dtype=dtype))
    assert got.dtype == dtype and got.device.type == device
    ref = fmap(X.astype(np.float32).astype(np.float64) if dtype == torch.float32 else X)
    np.testing.assert_allclose(got.double().cpu().numpy(), ref, **TOL["float64" if dtype == torch.float64 else "float32"])


def test_map_is_differentiable(device, rng):
    fmap = make_feature_map("favor+:16", 4, seed=0)
    x = torch.from_numpy(rng.normal(size=(3, 4))).to(device).requires_grad_()
    assert torch.autograd.gradcheck(lambda t: apply_feature_map(fmap, t), (x,))


def test_bad_arguments(device):
    fmap = make_feature_map("rff:8", 4)
    with pytest.raises(ValueError, match="D = 4"):
        apply_feature_map(fmap, torch.ones(2, 5, device=device))
    with pytest.raises(TypeError, match="FeatureMap"):
        apply_feature_map("rff:8", torch.ones(2, 4, device=device))
    with pytest.raises(TypeError, match="floating"):
        apply_feature_map(fmap, torch.ones(2, 4, dtype=torch.int32, device=device))
