"""kernelkit_gpu.kernel_attention: the Triton kernel smoother against the float64 reference.

Reference: ``kernelkit_math.attention.kernel_smoother`` (float64 NumPy) for the output; float64
torch.autograd through ``kernelkit_gpu.attention.naive.kernel_attention_naive`` for the gradients
(checked against the reference first). Tolerances follow the FlashAttention rule as in
tests/test_gpu_softmax_attention.py: our error at most twice that of the eager PyTorch computation
on the same inputs (``kernel_attention_naive``, which computes 16-bit input in float32) plus a
floor of a few units in the last place. Every registry kernel is covered (``tests.gpu_cases``).
"""

import importlib

import numpy as np
import pytest
import torch

from kernelkit_gpu.attention.naive import (
    kernel_attention_naive, smoother_rows, softmax_attention_naive,
)
from kernelkit_math.registry import kernel_names
from tests.gpu_cases import (
    ATTN_DTYPES, CASE_IDS, FLOOR_GRAD, GPU_CASES, check_rule, f64, max_err, spy_calls, to_numpy64,
)

ka = importlib.import_module("kernelkit_gpu.attention.smoother")
sa = importlib.import_module("kernelkit_gpu.attention.softmax")
CASES = dict((c[0], c) for c in GPU_CASES)

# no autotuning inside the suite (compilation time): the first config that fits
pytestmark = pytest.mark.usefixtures("triton_can_run", "attention_autotune_off")


def make_qkv(rng, b, h, hkv, t, s, d, dv, dtype, device, requires_grad=False, offset=1.0):
    """q, k = offset + 0.5 N(0, 1) (a common offset keeps dot-product kernels' denominators well
    away from 0, and exercises the centring of distance kernels); v standard normal."""
    q = offset + 0.5 * rng.standard_normal((b, h, t, d))
    k = offset + 0.5 * rng.standard_normal((b, hkv, s, d))
    v = rng.standard_normal((b, hkv, s, dv))
    return [torch.from_numpy(a).to(dtype=dtype, device=device).requires_grad_(requires_grad)
            for a in (q, k, v)]


def reference(q, k, v, name, params, causal, eps, causal_alignment="top_left"):
    from kernelkit_math.attention import kernel_smoother

    q, k, v = (to_numpy64(t) for t in (q, k, v))
    return kernel_smoother(q, k, v, name, is_causal=causal, causal_alignment=causal_alignment,
                           eps=eps, **params)


@pytest.fixture
def launch_spy(monkeypatch):
    """The launches of the kernel-smoother and softmax forward launchers, in order."""
    return spy_calls(monkeypatch, [(ka, "kattn_fwd", "kattn"), (sa, "attn_fwd", "softmax")])


def test_every_registry_kernel_is_covered():
    assert {c[1] for c in GPU_CASES} == set(kernel_names())


# ----------------------------------------------------------------------- references first
@pytest.mark.parametrize("mask", [None, "top_left", "bottom_right"], ids=str)
@pytest.mark.parametrize("case", GPU_CASES, ids=CASE_IDS)
def test_naive_float64_matches_kernelkit_math(case, mask, rng):
    """attention_naive (float64 torch, centred expansion) agrees with kernelkit_math (direct);
    bottom-right with T < S (7 of 9) and with T > S (9 of 7: two rows without keys)."""
    _, name, params_fn = case
    params = params_fn(5)
    kw = dict(is_causal=mask is not None, causal_alignment=mask or "top_left")
    for t, s in [(7, 9)] + ([(9, 7)] if mask == "bottom_right" else []):
        q, k, v = make_qkv(rng, 2, 4, 2, t, s, 5, 3, torch.float64, "cpu")
        out = kernel_attention_naive(q, k, v, name, **kw, enable_gqa=True, eps=1e-6, **params)
        ref = reference(q, k, v, name, params, kw["is_causal"], 1e-6, kw["causal_alignment"])
        np.testing.assert_allclose(to_numpy64(out), ref, rtol=1e-10, atol=1e-10)


def test_naive_exponential_is_softmax(rng):
    """The exponential smoother is softmax attention (eps inactive), in both naive functions."""
    q, k, v = make_qkv(rng, 1, 2, 2, 6, 8, 4, 3, torch.float64, "cpu", offset=0.0)
    a = kernel_attention_naive(q, k, v, "exponential", scale=0.7, eps=0.0)
    b = softmax_attention_naive(q, k, v, scale=0.7)
    np.testing.assert_allclose(to_numpy64(a), to_numpy64(b), rtol=1e-13, atol=1e-13)


# ------------------------------------------------------------------------------- forward
def _fwd_cases(device):
    """D = 16: direct differences in registers; D = 32: tensor-core dots (MODE_MMA)."""
    if device != "cuda":  # the interpreter is slow: one shape per mode, causal on one of them
        shapes = [(63, 100, 16, False), (100, 63, 32, True)]
    else:
        shapes = [(t, s, d, causal) for (t, s, d) in [(63, 100, 16), (100, 63, 32), (1, 63, 64),
                                                      (257, 130, 64), (100, 63, 20)]
                  for causal in (False, True)]
    return [(case,) + shape for case in GPU_CASES for shape in shapes]


def pytest_generate_tests(metafunc):
    if "fwd_case" in metafunc.fixturenames:
        cases = _fwd_cases(metafunc.config.getoption("--device"))
        ids = [f"{c[0][0]}-T{c[1]}-S{c[2]}-D{c[3]}-{'causal' if c[4] else 'full'}" for c in cases]
        metafunc.parametrize("fwd_case", cases, ids=ids)


def test_forward_float32_matches_reference(fwd_case, device, rng, poisoned_outputs, launch_spy):
    """Every registry kernel, GQA (H 4, H_kv 2; 2, 1 on the CPU), T != S not multiples of a
    tile, causal or not;
    output buffer poisoned; the Triton kernel proven to run (softmax kernel for exponential)."""
    case, t, s, d, causal = fwd_case
    _, name, params_fn = case
    params = params_fn(d)
    h, hkv = (4, 2) if device == "cuda" else (2, 1)
    q, k, v = make_qkv(rng, 1, h, hkv, t, s, d, 24, torch.float32, device)
    out = ka.kernel_attention(q, k, v, name, is_causal=causal, enable_gqa=True, **params)
    assert launch_spy == (["softmax"] if name == "exponential" else ["kattn"])
    assert out.shape == (1, h, t, 24) and out.dtype == torch.float32
    ref = reference(q, k, v, name, params, causal, 1e-6)
    naive = kernel_attention_naive(q, k, v, name, is_causal=causal, enable_gqa=True, **params)
    check_rule(out, naive, ref, "float32", f"{name} out")


_16BIT = ["rbf", "laplacian", "polynomial", "matern-25", "cosine", "exponential"]


@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
@pytest.mark.parametrize("cid", _16BIT)
def test_forward_16bit_matches_reference(cid, dt, device, rng, poisoned_outputs):
    _, name, params_fn = CASES[cid]
    d = 32
    params = params_fn(d)
    q, k, v = make_qkv(rng, 1, 2, 2, 70, 45, d, 16, ATTN_DTYPES[dt], device)
    out = ka.kernel_attention(q, k, v, name, is_causal=True, **params)
    assert out.dtype == ATTN_DTYPES[dt]
    ref = reference(q, k, v, name, params, True, 1e-6)
    naive = kernel_attention_naive(q, k, v, name, is_causal=True, **params)
    check_rule(out, naive, ref, dt, f"{name} out")


# -------------------------------------------------------------------------------- gradients
@pytest.mark.parametrize("dt,cid", [("float32", "rbf"), ("float32", "laplacian-pf"),
                                    ("float32", "matern-25"), ("float32", "polynomial-neg"),
                                    ("float32", "cosine"), ("float32", "rational_quadratic-pf"),
                                    ("bfloat16", "rbf"), ("float16", "sigmoid")])
def test_gradients_match_float64_autograd(dt, cid, device, rng):
    """dq, dk, dv (recomputed through the chunked torch smoother) against float64 autograd."""
    _, name, params_fn = CASES[cid]
    d = 16
    params = params_fn(d)
    dtype = ATTN_DTYPES[dt]
    q, k, v = make_qkv(rng, 1, 4, 2, 37, 29, d, 8, dtype, device, requires_grad=True)
    kw = dict(is_causal=True, enable_gqa=True, eps=1e-6, **params)
    out = ka.kernel_attention(q, k, v, name, **kw)
    g = torch.from_numpy(rng.standard_normal(out.shape)).to(device)
    grads = torch.autograd.grad(out, (q, k, v), g.to(dtype))
    naive = kernel_attention_naive(q, k, v, name, **kw)
    n_grads = torch.autograd.grad(naive, (q, k, v), g.to(dtype))
    q64, k64, v64 = (f64(x).requires_grad_(True) for x in (q, k, v))
    o64 = kernel_attention_naive(q64, k64, v64, name, **kw)
    np.testing.assert_allclose(to_numpy64(o64), reference(q, k, v, name, params, True, 1e-6),
                               rtol=1e-10, atol=1e-10)
    ref_grads = torch.autograd.grad(o64, (q64, k64, v64), g)
    for gname, a, b, r in zip(("dq", "dk", "dv"), grads, n_grads, ref_grads):
        assert a.shape == r.shape and a.dtype == dtype
        check_rule(a, b, r, dt, f"{name} {gname}", FLOOR_GRAD)


def test_exponential_eps_guard_and_gradient(device, rng, launch_spy):
    """kernel="exponential" runs the flash kernel; with eps above the denominator the guard
    min(1, exp(lse) / eps) is exact, and its gradient (through the lse) too."""
    from kernelkit_gpu.prepare import kernel_plan

    q, k, v = make_qkv(rng, 1, 2, 1, 33, 20, 16, 8, torch.float32, device, requires_grad=True,
                       offset=0.0)
    eps = 25.0  # den = sum_j exp(0.05 q.k) is about S = 20 < eps: the guard is active
    out = ka.kernel_attention(q, k, v, "exponential", scale=0.05, eps=eps, is_causal=True,
                              enable_gqa=True)
    assert launch_spy == ["softmax"]
    ref = reference(q, k, v, "exponential", dict(scale=0.05), True, eps)
    naive = kernel_attention_naive(q, k, v, "exponential", scale=0.05, eps=eps, is_causal=True,
                                   enable_gqa=True)
    check_rule(out, naive, ref, "float32", "out")
    g = torch.from_numpy(rng.standard_normal(out.shape)).float().to(device)
    grads = torch.autograd.grad(out, (q, k, v), g)
    n_grads = torch.autograd.grad(naive, (q, k, v), g)
    # Independent float64 gradient: the smoother with the exponential kernel materialised.
    plan = kernel_plan("exponential", 16, dict(scale=0.05))
    q64, k64, v64 = (f64(x).requires_grad_(True) for x in (q, k, v))
    o64 = smoother_rows(q64, k64, v64, plan, shift=0, eps=eps, group=2)
    np.testing.assert_allclose(to_numpy64(o64), ref, rtol=1e-12, atol=1e-12)
    ref_grads = torch.autograd.grad(o64, (q64, k64, v64), g.double())
    for gname, a, b, r in zip(("dq", "dk", "dv"), grads, n_grads, ref_grads):
        check_rule(a, b, r, "float32", gname, FLOOR_GRAD)


@pytest.mark.parametrize("cid,t,s,d", [("rbf", 63, 20, 16), ("polynomial-neg", 1, 63, 32),
                                       ("exponential", 45, 30, 16)],
                         ids=["rbf-T>S", "polynomial-decode", "exponential-T>S"])
def test_bottom_right_matches_reference(cid, t, s, d, device, rng, poisoned_outputs, launch_spy):
    """Bottom-right causal alignment (key j visible iff j <= i + S - T), GQA, odd sizes: output
    and gradients against float64 autograd; with T > S the first T - S rows see no key and
    output 0 with zero gradient (for every eps), never NaN."""
    _, name, params_fn = CASES[cid]
    params = params_fn(d)
    q, k, v = make_qkv(rng, 1, 2, 1, t, s, d, 8, torch.float32, device, requires_grad=True)
    kw = dict(is_causal=True, causal_alignment="bottom_right", enable_gqa=True, eps=1e-6, **params)
    out = ka.kernel_attention(q, k, v, name, **kw)
    assert launch_spy == (["softmax"] if name == "exponential" else ["kattn"])
    ref = reference(q, k, v, name, params, True, 1e-6, "bottom_right")
    naive = kernel_attention_naive(q, k, v, name, **kw)
    check_rule(out, naive, ref, "float32", f"{name} out")
    g = torch.from_numpy(rng.standard_normal(out.shape)).float().to(device)
    grads = torch.autograd.grad(out, (q, k, v), g)
    n_grads = torch.autograd.grad(naive, (q, k, v), g)
    q64, k64, v64 = (f64(x).requires_grad_(True) for x in (q, k, v))
    ref_grads = torch.autograd.grad(kernel_attention_naive(q64, k64, v64, name, **kw), (q64, k64, v64),
                                    g.double())
    for gname, a, b, r in zip(("dq", "dk", "dv"), grads, n_grads, ref_grads):
        check_rule(a, b, r, "float32", f"{name} {gname}", FLOOR_GRAD)
    if t > s:
        assert torch.all(out[:, :, :t - s] == 0) and torch.all(grads[0][:, :, :t - s] == 0)
        out0 = ka.kernel_attention(q, k, v, name, **dict(kw, eps=0.0))
        assert torch.all(out0[:, :, :t - s] == 0) and torch.isfinite(out0).all()


def test_alignments_agree_when_t_equals_s(device, rng, poisoned_outputs):
    q, k, v = make_qkv(rng, 1, 2, 2, 33, 33, 16, 8, torch.float32, device)
    a, b = (ka.kernel_attention(q, k, v, "laplacian", gamma=0.2, is_causal=True, causal_alignment=al)
            for al in ("top_left", "bottom_right"))
    assert torch.equal(a, b)


# ----------------------------------------------------------------------------- edge cases
def test_eps_zero_nonpositive_rows_output_zero(device, rng, poisoned_outputs):
    """eps = 0 and den <= 0 (linear kernel, queries pointing away from the keys): rows output 0,
    as the reference's guard defines; the other rows are the plain ratio."""
    q, k, v = make_qkv(rng, 1, 1, 1, 40, 30, 16, 8, torch.float32, device)
    sign = torch.ones(40, device=device)
    sign[::3] = -1.0
    q = q * sign[None, None, :, None]
    out = ka.kernel_attention(q, k, v, "linear", eps=0.0)
    ref = reference(q, k, v, "linear", {}, False, 0.0)
    assert np.all(ref[0, 0, ::3] == 0.0)
    naive = kernel_attention_naive(q, k, v, "linear", eps=0.0)
    check_rule(out, naive, ref, "float32", "out")
    assert torch.all(out[0, 0, ::3] == 0)


def test_no_keys_and_empty(device, rng, poisoned_outputs):
    q, k, v = make_qkv(rng, 1, 2, 2, 5, 0, 16, 8, torch.float32, device, requires_grad=True)
    out = ka.kernel_attention(q, k, v, "rbf", is_causal=True)
    assert out.shape == (1, 2, 5, 8) and torch.all(out == 0)
    np.testing.assert_array_equal(to_numpy64(out), reference(q, k, v, "rbf", {}, True, 1e-6))
    dq, = torch.autograd.grad(out.sum(), (q,))
    assert torch.all(dq == 0)
    q, k, v = make_qkv(rng, 1, 2, 2, 0, 7, 16, 8, torch.float32, device)
    assert ka.kernel_attention(q, k, v, "matern").shape == (1, 2, 0, 8)


def test_far_from_origin_rbf(device, rng):
    """Distances of data offset by 1000 (spread 0.5): centring keeps them exact in float32."""
    q, k, v = make_qkv(rng, 1, 1, 1, 40, 33, 32, 8, torch.float32, device, offset=1000.0)
    out = ka.kernel_attention(q, k, v, "rbf", gamma=0.05)
    ref = reference(q, k, v, "rbf", dict(gamma=0.05), False, 1e-6)
    assert max_err(out, ref) <= 1e-5


@pytest.mark.parametrize("name,params", [("linear", {}),
                                         ("polynomial", dict(degree=2, gamma=1e-6, coef0=0.5))])
def test_far_from_origin_dot_kernels(name, params, device, rng):
    """Dot products of data offset by 1000 (D = 32: the tensor-core path) are centred, with the
    float64 offsets b_q + b_k added to each tile (q·k ~ 3.2e7): the weights keep float32's
    relative precision, so the smoothed values (|v| <= ~3) stay within 1e-5."""
    q, k, v = make_qkv(rng, 1, 2, 1, 40, 33, 32, 8, torch.float32, device, offset=1000.0)
    out = ka.kernel_attention(q, k, v, name, enable_gqa=True, **params)
    ref = reference(q, k, v, name, params, False, 1e-6)
    assert max_err(out, ref) <= 1e-5


# ------------------------------------------------------------------------------ bad inputs
@pytest.mark.parametrize("kernel,kwargs,exc,match", [
    ("nope", {}, ValueError, "unknown kernel"),
    ("rbf", dict(gamma=-1.0), ValueError, "gamma"),
    ("rbf", dict(gamma=np.ones(3)), ValueError, "entries"),
    ("rbf", dict(foo=1.0), TypeError, "unknown parameter"),
    ("matern", dict(nu=0.7), ValueError, "nu"),
    ("rbf", dict(eps=-1.0), ValueError, "eps"),
    ("rbf", dict(eps="small"), TypeError, "eps"),
    ("rbf", dict(is_causal="yes"), TypeError, "is_causal"),
    ("rbf", dict(enable_gqa=None), TypeError, "enable_gqa"),
    ("rbf", dict(is_causal=True, causal_alignment="lower_right"), ValueError,
     "causal_alignment must be 'top_left' or 'bottom_right'"),
    ("exponential", dict(causal_alignment="bottom-right"), ValueError, "causal_alignment"),
    ("rbf", dict(is_causal=True, causal_alignment=0), TypeError, "causal_alignment"),
], ids=["unknown-kernel", "gamma-negative", "gamma-length", "unknown-param", "nu", "eps-negative",
        "eps-string", "causal-not-bool", "gqa-not-bool", "alignment-unknown",
        "alignment-unknown-exponential", "alignment-not-str"])
def test_bad_inputs(kernel, kwargs, exc, match, device):
    q = torch.zeros(1, 2, 5, 16, device=device)
    k = torch.zeros(1, 2, 6, 16, device=device)
    with pytest.raises(exc, match=match):
        ka.kernel_attention(q, k, k, kernel, **kwargs)
    with pytest.raises(exc, match=match):
        kernel_attention_naive(q, k, k, kernel, **kwargs)


def test_bad_tensors(device):
    q = torch.zeros(1, 4, 5, 16, device=device)
    k = torch.zeros(1, 2, 6, 16, device=device)
    with pytest.raises(ValueError, match="enable_gqa=True"):
        ka.kernel_attention(q, k, k)
    with pytest.raises(ValueError, match="same head dim"):
        ka.kernel_attention(q, k[..., :8], k, enable_gqa=True)
    with pytest.raises(TypeError, match="same dtype"):
        ka.kernel_attention(q, k.half(), k, enable_gqa=True)
    with pytest.raises(TypeError, match="k must be a torch.Tensor"):
        ka.kernel_attention(q, np.zeros((1, 2, 6, 16)), k, enable_gqa=True)
