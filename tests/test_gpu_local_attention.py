"""kernelkit_gpu.attention.local.local_attention: the Triton forward against the float64
reference (kernelkit_math.attention_local.local_attention) on the rounded inputs.

Outputs are allocated NaN-poisoned (unwritten elements show). Runs on the CPU under the Triton
interpreter (tiny cases) and, unchanged, on a GPU with ``pytest --device cuda`` (more cases).
"""

import importlib

import numpy as np
import pytest
import torch

from kernelkit_gpu.attention.local_naive import local_attention_naive
from kernelkit_math.attention_local import local_attention as local_reference
from tests.gpu_cases import DTYPES, spy_calls, to_numpy64

la = importlib.import_module("kernelkit_gpu.attention.local")

pytestmark = pytest.mark.usefixtures("triton_can_run", "poisoned_outputs")

#: Tolerances of the Triton forward against float64, relative to max(1, max |reference|).
#: float32: IEEE products, float32 sums of ~100 exponentials (exp2 with ~2 ulp error): 2e-5.
#: float16 / bfloat16: the probabilities and the summaries' values are rounded to the input
#: dtype before the tensor-core products (unit roundoff 2^-11 / 2^-8), the output too: 8 units.
TOL = {
    "float32": dict(rtol=2e-5, atol=2e-5),
    "float16": dict(rtol=8 * 2.0**-11, atol=8 * 2.0**-11),
    "bfloat16": dict(rtol=8 * 2.0**-8, atol=8 * 2.0**-8),
}

# (T, D, Dv, block, window, causal, dtype)
_CPU = [
    (1, 16, 16, 16, 1, False, "float32"),
    (63, 16, 16, 16, 1, True, "float32"),
    (63, 20, 12, 16, 0, False, "float32"),
    (63, 16, 16, 16, 1, False, "float16"),
    (100, 32, 24, 32, 0, True, "float16"),
    (100, 16, 16, 16, 2, False, "bfloat16"),
    (70, 16, 16, 16, 1, True, "bfloat16"),
    # tiles smaller than the block: float32 32 x 16 in blocks of 64, 16-bit 64 x 64 in 128
    (150, 16, 16, 64, 1, True, "float32"),
    (150, 16, 16, 128, 0, True, "float16"),
    (150, 16, 16, 128, 0, False, "bfloat16"),
]
_CUDA = _CPU + [
    (t, d, d, block, window, causal, dt)
    for t in (1, 63, 1000)
    for d in (32, 64, 128)
    for block, window in ((16, 3), (64, 1), (128, 0))
    for causal in (False, True)
    for dt in ("float32", "float16", "bfloat16")
]


def _cases(device):
    return _CUDA if device == "cuda" else _CPU


def _id(c):
    t, d, dv, block, window, causal, dt = c
    return f"T{t}-D{d}-Dv{dv}-b{block}w{window}-{'causal' if causal else 'full'}-{dt}"


def pytest_generate_tests(metafunc):
    if "case" in metafunc.fixturenames:
        cases = _cases(metafunc.config.getoption("--device"))
        metafunc.parametrize("case", cases, ids=[_id(c) for c in cases])


def _qkv(case, device, offset=0.0, B=2, H=3, seed=0):
    t, d, dv, *_, dt = case
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, t, d, generator=g)
    k = torch.randn(B, H, t, d, generator=g) + offset
    v = torch.randn(B, H, t, dv, generator=g) + offset
    return tuple(x.to(DTYPES[dt]).to(device) for x in (q, k, v))


def _check(out, q, k, v, case):
    t, d, dv, block, window, causal, dt = case
    ref = local_reference(to_numpy64(q), to_numpy64(k), to_numpy64(v), block=block,
                          window=window, is_causal=causal)
    got = to_numpy64(out)
    assert got.shape == ref.shape and np.isfinite(got).all()
    size = max(1.0, float(np.abs(ref).max(initial=0.0)))
    np.testing.assert_allclose(got / size, ref / size, **TOL[dt])


def test_matches_the_float64_reference(case, device, monkeypatch):
    q, k, v = _qkv(case, device)
    copies = [x.clone() for x in (q, k, v)]
    calls = spy_calls(monkeypatch, [(la, "local_fwd", "fwd")])
    out = la.local_attention(q, k, v, block=case[3], window=case[4], is_causal=case[5])
    assert len(calls) == 1  # the Triton forward ran
    _check(out, q, k, v, case)
    for x, c in zip((q, k, v), copies):
        assert torch.equal(x, c)  # inputs are not modified


@pytest.mark.parametrize("which", ["q", "k", "v"])
@pytest.mark.parametrize("dt", ["float32", "float16", "bfloat16"])
def test_offset_data(device, dt, which):
    """q + 1000 (keys scaled to keep the scores of size ~1): every block's mean query is
    ~1000; k + 1000 shifts every score of a row by q·1000 (the method ignores it in exact
    arithmetic; 16-bit summaries keep their digits through the hi + lo split of kbar);
    v + 1000 moves the output to ~1000."""
    case = (63, 16, 16, 16, 0, False, dt)  # window 0: 3 summaries of 4 blocks per row
    q, k, v = _qkv(case, device)
    if which == "q":
        q = (q.float() + 1000.0).to(q.dtype)
        k = k * 0.05
    elif which == "k":
        q = q * 0.05  # scores of size ~1 around the row's shift: the summaries carry weight
        k = (k.float() + 1000.0).to(k.dtype)
    else:
        v = (v.float() + 1000.0).to(v.dtype)
    _check(la.local_attention(q, k, v, block=16, window=0), q, k, v, case)


def test_strided_inputs(device):
    """(B, T, H, D) storage seen as (B, H, T, D), and a non-unit last stride."""
    case = (40, 16, 16, 16, 1, False, "float32")
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 40, 3, 16, generator=g).to(device).transpose(1, 2)
               for _ in range(3))
    v = torch.randn(2, 3, 40, 32, generator=g).to(device)[..., ::2]
    _check(la.local_attention(q, k, v, block=16, window=1), q, k, v, case)


def test_backward_is_the_twins(device):
    """The gradients come from the twin's autograd (documented): compare them with the float64
    twin's gradients on the same inputs."""
    case = (40, 16, 16, 16, 1, True, "float32")
    q, k, v = (x.requires_grad_(True) for x in _qkv(case, device))
    out = la.local_attention(q, k, v, block=16, window=1, is_causal=True)
    dout = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), dout)
    q64, k64, v64 = (x.detach().double().requires_grad_(True) for x in (q, k, v))
    out64 = local_attention_naive(q64, k64, v64, block=16, window=1, is_causal=True)
    want = torch.autograd.grad(out64, (q64, k64, v64), dout.double())
    for g, w in zip(grads, want):
        np.testing.assert_allclose(to_numpy64(g), to_numpy64(w), **TOL["float32"])


@pytest.mark.parametrize("kwargs,err,match", [
    (dict(block=24), ValueError, r"block must be one of \(16, 32, 64, 128\)"),
    (dict(block=0), ValueError, "block must be an integer >= 1"),
    (dict(window=-1), ValueError, "window must be an integer >= 0"),
    (dict(window=1.0), TypeError, "window must be an integer"),
    (dict(scale=-1.0), ValueError, "scale must be a finite number > 0"),
])
def test_bad_settings(device, kwargs, err, match):
    x = torch.zeros(1, 1, 8, 16, device=device)
    with pytest.raises(err, match=match):
        la.local_attention(x, x, x, **kwargs)


def test_bad_tensors(device):
    x = torch.zeros(1, 1, 8, 16, device=device)
    with pytest.raises(ValueError, match="same length T"):
        la.local_attention(x, torch.zeros(1, 1, 9, 16, device=device),
                           torch.zeros(1, 1, 9, 16, device=device))
    with pytest.raises(TypeError, match="dtype"):
        la.local_attention(x.double(), x.double(), x.double())
    with pytest.raises(ValueError, match="at most 256"):
        y = torch.zeros(1, 1, 8, 300, device=device)
        la.local_attention(y, y, y)


def test_empty_length(device):
    x = torch.zeros(2, 3, 0, 16, device=device)
    assert la.local_attention(x, x, x).shape == (2, 3, 0, 16)


def test_public_function_dispatch(device, monkeypatch):
    """kernelkit.attention.local_attention: the Triton forward for 16/32-bit tensors and a
    Triton block size; the twin for float64 or another block size (same values)."""
    from kernelkit.attention import local_attention

    case = (40, 16, 16, 16, 1, True, "float32")
    q, k, v = _qkv(case, device)
    calls = spy_calls(monkeypatch, [(la, "local_fwd", "fwd")])
    _check(local_attention(q, k, v, block=16, window=1, is_causal=True), q, k, v, case)
    assert calls == ["fwd"]
    out = local_attention(q, k, v, block=10, window=1, is_causal=True)
    ref = local_reference(to_numpy64(q), to_numpy64(k), to_numpy64(v), block=10, window=1,
                          is_causal=True)
    np.testing.assert_allclose(to_numpy64(out), ref, **TOL["float32"])
    out64 = local_attention(q.double(), k.double(), v.double(), block=16, is_causal=True)
    assert calls == ["fwd"] and out64.dtype == torch.float64


def test_a_window_wider_than_the_sequence_is_softmax(device):
    """window 2**40 (clamped before the launch: no int32 overflow) is exact softmax."""
    from kernelkit_gpu.attention.softmax import softmax_attention

    case = (63, 16, 16, 16, 0, True, "float32")
    q, k, v = _qkv(case, device)
    for causal in (False, True):
        out = la.local_attention(q, k, v, block=16, window=2**40, is_causal=causal)
        want = softmax_attention(q, k, v, is_causal=causal)
        np.testing.assert_allclose(to_numpy64(out), to_numpy64(want), **TOL["float32"])


def _summaries_case(device, dt):
    q, k, v = _qkv((37, 20, 12, 16, 0, False, dt), device)  # a ragged last block
    return q, (k.float() + 100.0).to(k.dtype), v  # k far from the origin


def _summary_error_bound(q, k, v, block, scale):
    """Bounds on the float32 errors of kbar and vbar, per (B, H, G, D) and (B, H, G, Dv).

    The weights w_j = softmax_j(scale qbar·k_j) come from logits rounded in a D-term float32 dot:
    |dz_j| <= (D + 2) eps scale sum_d |k_jd qbar_d| (large where k is far from the origin), which
    moves a weighted mean m = sum_j w_j x_j by at most 2 max_j |dz_j| sum_j w_j |x_j - m|; the
    n-term float32 sum adds (n + 2) eps max_j |x_j|."""
    eps = np.finfo(np.float32).eps
    B, H, T, D = q.shape
    bounds_k, bounds_v = [], []
    for g0 in range(0, T, block):
        qb, kk, vv = q[:, :, g0:g0 + block].mean(2), k[:, :, g0:g0 + block], v[:, :, g0:g0 + block]
        z = scale * np.einsum("bhnd,bhd->bhn", kk, qb)
        w = np.exp(z - z.max(-1, keepdims=True))
        w /= w.sum(-1, keepdims=True)
        dz = (D + 2) * eps * scale * np.einsum("bhnd,bhd->bhn", np.abs(kk), np.abs(qb)) + 2 * eps
        for x, out in ((kk, bounds_k), (vv, bounds_v)):
            m = np.einsum("bhn,bhnd->bhd", w, x)
            spread = np.einsum("bhn,bhnd->bhd", w, np.abs(x - m[:, :, None]))
            n = x.shape[2]
            out.append(2 * dz.max(-1)[..., None] * spread + (n + 2) * eps * np.abs(x).max(2))
    return np.stack(bounds_k, 2), np.stack(bounds_v, 2)


def _check_summaries(summaries, q, k, v, dt):
    """Summaries (hi + lo parts of kbar, vbar, log2-domain bias) of blocks of 16 at scale 0.3
    against kernelkit_math.attention_local.block_summaries on the same inputs."""
    from kernelkit_math.attention_local import block_summaries

    kb_hi, kb_lo, vbar, bias2 = summaries
    kbar = to_numpy64(kb_hi) + (to_numpy64(kb_lo) if kb_lo is not kb_hi else 0.0)
    q, k, v = to_numpy64(q), to_numpy64(k), to_numpy64(v)
    want_k, want_v, want_bias, _ = block_summaries(q, k, v, block=16, scale=0.3)
    bound_k, bound_v = _summary_error_bound(q, k, v, block=16, scale=0.3)
    if dt != "float32":
        # 16-bit kbar is two parts hi + lo, each within one of its ulps (conversions may
        # truncate: the interpreter's do): |lo| < ulp(hi) = 2^-7 |kbar| and lo's error is below
        # 2^-7 |lo|, so 2^-14 relative; vbar is converted to the input dtype once (< 2^-7)
        bound_k = bound_k + 2.0**-14 * np.abs(want_k)
        bound_v = bound_v + 2.0**-7 * np.abs(want_v)
    np.testing.assert_array_less(np.abs(kbar - want_k), bound_k)
    np.testing.assert_array_less(np.abs(to_numpy64(vbar) - want_v), bound_v)
    np.testing.assert_allclose(to_numpy64(bias2) * np.log(2.0), want_bias, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dt", ["float32", "bfloat16"])
def test_summaries_match_the_float64_reference(device, dt):
    """The Triton summaries kernel against the float64 summaries."""
    q, k, v = _summaries_case(device, dt)
    _check_summaries(la.local_summaries(q, k, v, block=16, scale=0.3), q, k, v, dt)


@pytest.mark.parametrize("dt", ["float32", "bfloat16"])
def test_large_summary_tiles_go_to_torch_and_match_the_reference(device, dt, monkeypatch):
    """Blocks whose summary tile exceeds SUMMARY_TILE_MAX (float32 128 x 128 failed to run on
    the H200) are summarised by torch: same outputs as the float64 reference, kernel not run."""
    monkeypatch.setattr(la, "SUMMARY_TILE_MAX", {False: 16 * 16, True: 16 * 16})
    monkeypatch.setattr(la, "_local_summary_kernel", None)  # would raise if launched
    q, k, v = _summaries_case(device, dt)
    _check_summaries(la.local_summaries(q, k, v, block=16, scale=0.3), q, k, v, dt)
    q, k, v = _qkv((37, 20, 12, 16, 0, False, dt), device)  # the whole forward, near the origin
    out = la.local_attention(q, k, v, block=16, window=0)
    want = local_reference(to_numpy64(q), to_numpy64(k), to_numpy64(v), block=16, window=0)
    np.testing.assert_allclose(to_numpy64(out), want, **TOL[dt])
