"""``layout="bthd"`` and ``scale=`` in :mod:`kernelkit.attention`.

(B, T, H, D) operands must give, transposed, what their (B, H, T, D) transposes give (the same
kernels on strided views; no copy of q, k, v in the Triton launchers), outputs in the (B, T, H, Dv)
layout, and the same gradients. ``scale`` multiplies q before the feature map or kernel: checked
against the float64 references of :mod:`kernelkit_math.attention` on ``scale * q``.
"""

import importlib

import numpy as np
import pytest
import torch

import kernelkit
from kernelkit.attention import kernel_attention, linear_attention, softmax_attention
from kernelkit_math import attention as ref_attn
from tests.gpu_cases import to_numpy64

pytestmark = pytest.mark.usefixtures("triton_can_run", "attention_autotune_off")

FUNCS = {
    "softmax": lambda q, k, v, **kw: softmax_attention(q, k, v, is_causal=True, **kw),
    "linear": lambda q, k, v, **kw: linear_attention(q, k, v, is_causal=True, **kw),
    "kernel": lambda q, k, v, **kw: kernel_attention(q, k, v, "rbf", gamma=0.1, **kw),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("name", list(FUNCS))
def test_bthd_is_the_transposed_bhtd(name, dtype, device, poisoned_outputs):
    """Output and gradients in (B, T, H, D) equal those of the (B, H, T, D) call, transposed."""
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 37, 3, 16, generator=gen, dtype=dtype).to(device)
               .requires_grad_(True) for _ in range(3))
    out = FUNCS[name](q, k, v, layout="bthd")
    assert out.shape == (2, 37, 3, 16)
    qt, kt, vt = (t.detach().transpose(1, 2).contiguous().requires_grad_(True) for t in (q, k, v))
    ref = FUNCS[name](qt, kt, vt)
    torch.testing.assert_close(out, ref.transpose(1, 2), rtol=1e-6, atol=1e-6)  # same kernels
    g = torch.randn(out.shape, generator=gen, dtype=dtype).to(device)
    grads = torch.autograd.grad((out * g).sum(), (q, k, v))
    ref_grads = torch.autograd.grad((ref * g.transpose(1, 2)).sum(), (qt, kt, vt))
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got, want.transpose(1, 2), rtol=1e-5, atol=1e-5)


def test_bthd_runs_in_place(device, monkeypatch):
    """The Triton softmax and linear launchers get views of the caller's (B, T, H, D) memory (no
    copy), and softmax writes its output contiguous in that layout."""
    sa = importlib.import_module("kernelkit_gpu.attention.softmax")  # Triton: imported here
    la = importlib.import_module("kernelkit_gpu.attention.linear")
    q = torch.randn(1, 40, 2, 16, device=device)
    seen = []

    def spy(real):
        def run(q_, *args, **kwargs):
            seen.append(q_.data_ptr() == q.data_ptr())
            return real(q_, *args, **kwargs)
        return run

    monkeypatch.setattr(sa, "attn_fwd", spy(sa.attn_fwd))
    out = softmax_attention(q, q, q, layout="bthd")
    assert out.is_contiguous() and out.shape == (1, 40, 2, 16)
    monkeypatch.setattr(la, "linear_attention_fwd", spy(la.linear_attention_fwd))
    linear_attention(q, q, q, layout="bthd", is_causal=True)
    assert seen == [True, True]


def test_softmax_bthd_lse_and_bottom_right(device):
    """lse stays (B, H, T) in both layouts; the causal alignment reads T and S of the layout."""
    q = torch.randn(1, 5, 2, 16, device=device)
    k = torch.randn(1, 9, 2, 16, device=device)
    out, lse = softmax_attention(q, k, k, layout="bthd", is_causal=True,
                                 causal_alignment="bottom_right", return_lse=True)
    assert out.shape == (1, 5, 2, 16) and lse.shape == (1, 2, 5)
    ref, ref_lse = ref_attn.softmax_attention(
        *(to_numpy64(t.transpose(1, 2)) for t in (q, k, k)), is_causal=True,
        causal_alignment="bottom_right", return_lse=True)
    np.testing.assert_allclose(to_numpy64(out.transpose(1, 2)), ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(to_numpy64(lse), ref_lse, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("bad,exc", [("BTHD", ValueError), ("bhdt", ValueError), (1, TypeError)])
@pytest.mark.parametrize("name", list(FUNCS))
def test_bad_layout(name, bad, exc):
    q = torch.randn(1, 2, 4, 8, dtype=torch.float64)
    with pytest.raises(exc, match="layout"):
        FUNCS[name](q, q, q, layout=bad)


@pytest.mark.parametrize("name", list(FUNCS))
def test_bthd_needs_four_dims(name):
    q = torch.randn(2, 4, 8, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"\(B, T, H, D\)"):
        FUNCS[name](q, q, q, layout="bthd")


# ------------------------------------------------------------------------------------ scale
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("fmap", ["elu+1", "identity", "favor+:32"])
def test_linear_scale_multiplies_q_before_the_map(fmap, dtype, device):
    gen = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(1, 2, 21, 8, generator=gen, dtype=dtype).to(device) for _ in range(3))
    s = 0.3
    out = linear_attention(q, k, v, fmap, scale=s, is_causal=True, normalize=False)
    ref = ref_attn.linear_attention(s * to_numpy64(q), to_numpy64(k), to_numpy64(v), fmap,
                                    is_causal=True, normalize=False)
    np.testing.assert_allclose(to_numpy64(out), ref, rtol=2e-5, atol=2e-5 * np.abs(ref).max())
    if fmap != "identity":  # a non-linear map: the scale changes the kernel, not a factor
        plain = linear_attention(q, k, v, fmap, is_causal=True, normalize=False)
        assert not torch.allclose(out, s * plain, rtol=1e-3, atol=1e-3)


def test_linear_scale_identity_is_fla_scale(device):
    """With the identity map and no normalisation, out_t = scale q_t · sum_{s<=t} k_s v_s^T:
    flash-linear-attention's scaled linear attention, written out in float64."""
    gen = torch.Generator().manual_seed(6)
    q, k, v = (torch.randn(1, 1, 9, 8, generator=gen).to(device) for _ in range(3))
    out = linear_attention(q, k, v, "identity", scale=8 ** -0.5, is_causal=True, normalize=False)
    q64, k64, v64 = (to_numpy64(t)[0, 0] for t in (q, k, v))
    want = np.stack([8 ** -0.5 * q64[t] @ (k64[:t + 1].T @ v64[:t + 1]) for t in range(9)])
    np.testing.assert_allclose(to_numpy64(out)[0, 0], want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_kernel_scale(dtype, device):
    """kernel_attention: k(scale q, k) for every kernel; for "exponential" by name, scale is
    its own parameter, so it equals softmax attention with that scale; with an Exponential
    object the two multiply."""
    gen = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(1, 2, 13, 8, generator=gen, dtype=dtype).to(device) for _ in range(3))
    out = kernel_attention(q, k, v, "rbf", gamma=0.2, scale=0.5)
    ref = ref_attn.kernel_smoother(0.5 * to_numpy64(q), to_numpy64(k), to_numpy64(v), "rbf",
                                   gamma=0.2)
    np.testing.assert_allclose(to_numpy64(out), ref, rtol=1e-5, atol=1e-5)
    soft = ref_attn.softmax_attention(*(to_numpy64(t) for t in (q, k, v)), scale=0.7)
    np.testing.assert_allclose(to_numpy64(kernel_attention(q, k, v, "exponential", scale=0.7)),
                               soft, rtol=1e-5, atol=1e-5)
    both = kernel_attention(q, k, v, kernelkit.Exponential(scale=0.35), scale=2.0)
    np.testing.assert_allclose(to_numpy64(both), soft, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("bad,exc", [(0.0, ValueError), (-1.0, ValueError),
                                     (float("nan"), ValueError), ("2", TypeError),
                                     (True, TypeError)], ids=str)
def test_bad_scale(bad, exc):
    q = torch.randn(1, 2, 4, 8, dtype=torch.float64)
    with pytest.raises(exc, match="scale"):
        linear_attention(q, q, q, scale=bad)
    with pytest.raises(exc, match="scale"):
        kernel_attention(q, q, q, "rbf", scale=bad)
