"""Torch feature maps equal the float64 kernelkit_math maps (same seeded weights), for every row
of the feature-map registry."""

import numpy as np
import pytest
import torch

from kernelkit_gpu.feature_maps import TORCH_MAPS, apply_feature_map
from kernelkit_math.random_features import FEATURE_MAPS, feature_map_names, make_feature_map
from tests.conftest import TOL

SPECS = [form.replace(":M", ":32") for form in feature_map_names()]


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
def test_torch_map_matches_reference(device, rng, spec, dtype):
    fmap = make_feature_map(spec, 8, seed=3)
    X = rng.normal(size=(2, 5, 8))
    got = apply_feature_map(fmap, torch.from_numpy(X).to(device=device, dtype=dtype))
    assert got.dtype == dtype and got.device.type == device
    X = X.astype(np.float32).astype(np.float64) if dtype == torch.float32 else X
    ref, got = fmap(X), got.double().cpu().numpy()
    if not hasattr(fmap, "log_features"):
        np.testing.assert_allclose(got, ref, **TOL[str(dtype).removeprefix("torch.")])
        return
    # exp(L) with L = w·x - scale ||x||^2 / 2 (+ constants): L's rounding in a D-term dot is at
    # most (D + 2) eps (|w|·|x| + ||x||^2) absolute, which exp turns into relative error
    eps = np.finfo(np.float32 if dtype == torch.float32 else np.float64).eps
    size = np.abs(X) @ np.abs(fmap.weights).T + (X ** 2).sum(axis=-1, keepdims=True)
    rtol = (X.shape[-1] + 2) * eps * size.max(axis=-1, keepdims=True) + 2 * eps
    np.testing.assert_array_less(np.abs(got - ref), rtol * np.abs(ref))


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


def test_every_registry_map_has_a_torch_map():
    assert set(TORCH_MAPS) == set(FEATURE_MAPS)


@pytest.mark.parametrize("name", feature_map_names(fused=True))
def test_fused_map_derivative_is_the_registry_dphi(device, name):
    """The fused maps' torch phi, which the twins differentiate by autograd, has the derivative
    the Triton backward applies (the registry's float64 dphi), away from the kink at 0."""
    x = torch.cat([-torch.logspace(0.5, -2, 20), torch.logspace(-2, 0.5, 20)]).double()
    x = x.to(device).requires_grad_()
    (grad,) = torch.autograd.grad(TORCH_MAPS[name](None, x).sum(), x)
    want = FEATURE_MAPS[name].dphi(x.detach().cpu().numpy())
    np.testing.assert_allclose(grad.cpu().numpy(), want, **TOL["float64"])
