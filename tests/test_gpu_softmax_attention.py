"""kernelkit_gpu.softmax_attention: the Triton flash-attention kernels against the float64 reference.

The reference is ``kernelkit_math.attention.softmax_attention`` (float64 NumPy) for the output and
the lse, and float64 torch.autograd through ``kernelkit_gpu.attention_naive`` for the gradients (the
naive version is itself checked against the reference first). Tolerances follow the FlashAttention
rule: on the same (rounded) inputs, our error against the float64 reference must be at most twice
the error of the eager PyTorch computation in the same dtype (``softmax_attention_naive``), plus a
floor of a few units in the last place of the output (:func:`tests.gpu_cases.check_rule`).

Runs on the CPU under the Triton interpreter (``TRITON_INTERPRET=1``; few, tiny cases) and,
unchanged, on a GPU with ``pytest --device cuda`` (the full grid of cases, and torch SDPA).
"""

import importlib
import itertools
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from kernelkit_gpu.attention import _configs as _attn_configs
from kernelkit_gpu.attention.naive import softmax_attention_naive
from tests.conftest import TOL
from tests.gpu_cases import ATTN_DTYPES, FLOOR_GRAD, check_rule, f64, spy_calls, to_numpy64

sa = importlib.import_module("kernelkit_gpu.attention.softmax")

# no autotuning inside the suite: test_every_config runs each config of the autotuner's sets
pytestmark = pytest.mark.usefixtures("triton_can_run", "attention_autotune_off")


# ------------------------------------------------------------------------------------ cases
# (T, S, D, Dv, H, H_kv, mask, dtype); mask None (no mask) or the causal alignment. T != S
# everywhere; T, S in {1, 63, 100}.
_LENGTHS = [(1, 63), (63, 100), (100, 63)]
_FULL = [
    (t, s, d, d, 4, 2 if (li + di) % 2 == 0 else 4, mask, dt)
    for (li, (t, s)), (di, d), mask, dt in itertools.product(
        enumerate(_LENGTHS), enumerate([16, 32, 64]), [None, "top_left", "bottom_right"],
        list(ATTN_DTYPES))
] + [
    (100, 63, 24, 40, 4, 2, "top_left", "float32"),   # head dims that are not powers of two
    (63, 100, 128, 128, 2, 1, "top_left", "bfloat16"),
    (100, 63, 128, 128, 2, 1, "bottom_right", "bfloat16"),
    (63, 100, 128, 64, 4, 4, None, "float16"),
]
#: The interpreter is slow: a covering subset (every length pair, D 16 and 32, both causal
#: alignments and none, GQA and not, every dtype, ragged head dims).
_CPU = [
    (63, 100, 16, 16, 4, 2, None, "float32"),
    (100, 63, 32, 32, 2, 2, "top_left", "float32"),
    (1, 63, 16, 16, 4, 2, "top_left", "float32"),
    (100, 63, 16, 16, 4, 2, "top_left", "float16"),
    (63, 100, 32, 32, 2, 2, None, "float16"),
    (63, 100, 16, 16, 4, 2, "top_left", "bfloat16"),
    (100, 63, 32, 32, 4, 2, None, "bfloat16"),
    (100, 63, 24, 40, 4, 2, "top_left", "float32"),
    # bottom-right: decoding (one query, the last of 63 positions), T < S, and T > S (the
    # first 37 rows see no key: out 0, lse -inf, no gradient)
    (1, 63, 16, 16, 4, 2, "bottom_right", "float32"),
    (63, 100, 32, 32, 2, 2, "bottom_right", "float16"),
    (100, 63, 16, 16, 4, 2, "bottom_right", "bfloat16"),
]


def _case_id(c):
    t, s, d, dv, h, hkv, mask, dt = c
    dims = f"D{d}" if d == dv else f"D{d}-Dv{dv}"
    return f"T{t}-S{s}-{dims}-H{h}kv{hkv}-{mask or 'full'}-{dt}"


def _mask_kwargs(mask):
    """is_causal / causal_alignment of a case's mask (None: no mask)."""
    return dict(is_causal=mask is not None, causal_alignment=mask or "top_left")


def _shift(mask, t, s):
    """The diagonal of the causal mask j <= i + shift, written out (None: no mask)."""
    return None if mask is None else (0 if mask == "top_left" else s - t)


def pytest_generate_tests(metafunc):
    if "case" in metafunc.fixturenames:
        cases = _FULL if metafunc.config.getoption("--device") == "cuda" else _CPU
        metafunc.parametrize("case", cases, ids=[_case_id(c) for c in cases])


# ---------------------------------------------------------------------------------- helpers
def make_qkv(rng, b, h, hkv, t, s, d, dv, dtype, device, requires_grad=False):
    """Standard-normal q, k, v rounded to ``dtype``."""
    shapes = [(b, h, t, d), (b, hkv, s, d), (b, hkv, s, dv)]
    out = [torch.from_numpy(rng.standard_normal(sh)).to(dtype=dtype, device=device) for sh in shapes]
    return [x.requires_grad_(requires_grad) for x in out]


def gradient_term_scales(q, k, v, g_out, g_lse, shift, scale=None, lower=None):
    """Largest single term summed into dq and into dk (float64): (t_dq, t_dk, 0 for dv).

    dq_i = scale sum_j dS_ij k_j and dk_j = scale sum_i dS_ij q_i with dS_ij = P_ij (dP_ij - delta_i),
    dP_ij = dO_i . v_j, delta_i = dO_i . O_i - dlse_i. Each length-Dv dot product is measured by
    the sum of its products' magnitudes (which bounds its rounding in any order). Where
    dP_ij - delta_i cancels the gradient is far smaller than its terms, and a kernel keeps an
    error of a few u times them: for T = 1 causal the single query sees one key, P = 1 and
    O = v_0, so dP - delta = dlse exactly; eager autograd's softmax backward (p (g - sum p g))
    cancels to the bit there, while the fused form subtracts two differently rounded length-Dv
    sums (seen on an H100: dq error 8.5e-7 with max|dq| < 1, against 4.9e-8 for eager
    float32). The terms are bounded per element, so this scale does not grow with S, and a
    wrong or missing term (an error of the size of a term) still fails by ~1 / (8u).
    ``shift``: None (no mask) or the causal diagonal j <= i + shift (rows without keys: P = 0);
    ``lower``: None or a sliding window's left edge j >= i + lower.
    """
    q64, k64, v64 = (f64(x).cpu() for x in (q, k, v))
    rep = q64.shape[1] // k64.shape[1]
    k64, v64 = k64.repeat_interleave(rep, dim=1), v64.repeat_interleave(rep, dim=1)
    sc = q64.shape[-1] ** -0.5 if scale is None else scale
    s = sc * q64 @ k64.transpose(-1, -2)
    t, n = s.shape[-2:]
    if shift is not None:
        s = s.masked_fill(~torch.ones(t, n, dtype=torch.bool).tril(shift), -float("inf"))
    if lower is not None:
        s = s.masked_fill(~torch.ones(t, n, dtype=torch.bool).triu(lower), -float("inf"))
    p = torch.nan_to_num(torch.softmax(s, dim=-1))
    o = p @ v64
    go, gl = f64(g_out).cpu().abs(), f64(g_lse).cpu().abs()
    dp = go @ v64.abs().transpose(-1, -2)
    delta = (go * o.abs()).sum(-1) + gl
    w = p * torch.maximum(dp, delta[..., None])                       # (B, H, T, S)
    t_dq = sc * float((w * k64.abs().amax(-1)[:, :, None, :]).max())
    t_dk = sc * float((w * q64.abs().amax(-1)[:, :, :, None]).max())
    return t_dq, t_dk, 0.0


def reference(q, k, v, is_causal, scale=None, causal_alignment="top_left"):
    """Float64 kernelkit_math reference (output and natural-log lse) on the rounded inputs."""
    from kernelkit_math.attention import softmax_attention as ref_attention

    q, k, v = (to_numpy64(t) for t in (q, k, v))
    return ref_attention(q, k, v, is_causal=is_causal, causal_alignment=causal_alignment,
                         scale=scale, return_lse=True)


def loss_of(out, lse, g_out, g_lse):
    """A scalar whose gradient exercises both outputs: <out, g_out> + <lse, g_lse> (over the
    rows that see a key: lse -inf elsewhere)."""
    lse = lse.to(g_lse.dtype)
    return (out.to(g_out.dtype) * g_out).sum() + torch.where(lse > -np.inf, lse * g_lse, 0.0).sum()


def check_lse(lse, n_lse, ref_lse, dt):
    """-inf exactly where the reference has it (rows without keys), the rule elsewhere."""
    finite = torch.from_numpy(np.isfinite(ref_lse)).to(lse.device)
    assert torch.equal(torch.isneginf(lse), ~finite)
    check_rule(lse[finite], n_lse[finite], ref_lse[np.isfinite(ref_lse)], dt, "lse")


@pytest.fixture
def launch_spy(monkeypatch):
    """The launches of the Triton forward and backward launchers, in order ("fwd", "bwd")."""
    return spy_calls(monkeypatch, [(sa, "attn_fwd", "fwd"), (sa, "attn_bwd", "bwd")])


# ----------------------------------------------------------------------- references first
@pytest.mark.parametrize("mask", [None, "top_left", "bottom_right"], ids=str)
@pytest.mark.parametrize("t,s,h,hkv", [(7, 5, 4, 2), (5, 9, 2, 2), (1, 3, 3, 1)])
def test_naive_float64_matches_kernelkit_math(t, s, h, hkv, mask, rng):
    """attention_naive (float64 torch) agrees with kernelkit_math.attention to rounding; rows
    without keys (bottom-right, T > S) give 0, lse -inf and zero gradients, never NaN."""
    q, k, v = make_qkv(rng, 2, h, hkv, t, s, 8, 6, torch.float64, "cpu", requires_grad=True)
    out, lse = softmax_attention_naive(q, k, v, **_mask_kwargs(mask), enable_gqa=hkv != h,
                                       scale=0.3, return_lse=True)
    ref_out, ref_lse = reference(q, k, v, **_mask_kwargs(mask), scale=0.3)
    np.testing.assert_allclose(to_numpy64(out), ref_out, **TOL["float64"])
    np.testing.assert_allclose(to_numpy64(lse), ref_lse, **TOL["float64"])
    grads = torch.autograd.grad(loss_of(out, lse, torch.ones_like(out), torch.ones_like(lse)), (q, k, v))
    assert all(torch.isfinite(g).all() for g in grads)
    if mask == "bottom_right" and t > s:
        assert torch.all(grads[0][:, :, :t - s] == 0)


# ---------------------------------------------------------------------- forward + backward
def test_matches_reference(case, device, rng, poisoned_outputs, launch_spy):
    """Output, lse and the gradients of q, k, v (through out and lse) within the FlashAttention
    rule of the float64 references, every buffer poisoned, the Triton launchers proven to run."""
    t, s, d, dv, h, hkv, mask, dt = case
    dtype = ATTN_DTYPES[dt]
    q, k, v = make_qkv(rng, 2 if device == "cuda" else 1, h, hkv, t, s, d, dv, dtype, device,
                       requires_grad=True)
    gqa = hkv != h
    kw = _mask_kwargs(mask)
    out, lse = sa.softmax_attention(q, k, v, **kw, enable_gqa=gqa, return_lse=True)
    assert launch_spy.count("fwd") == 1
    assert out.shape == (q.shape[0], h, t, dv) and out.dtype == dtype
    assert lse.shape == (q.shape[0], h, t) and lse.dtype == torch.float32

    ref_out, ref_lse = reference(q, k, v, **kw)
    n_out, n_lse = softmax_attention_naive(q, k, v, **kw, enable_gqa=gqa, return_lse=True)
    check_rule(out, n_out, ref_out, dt, "out")
    check_lse(lse, n_lse, ref_lse, dt)

    g_out = torch.from_numpy(rng.standard_normal(out.shape)).to(device)
    g_lse = torch.from_numpy(rng.standard_normal(lse.shape)).to(device)
    grads = torch.autograd.grad(loss_of(out, lse, g_out, g_lse), (q, k, v))
    assert launch_spy.count("bwd") == 1
    n_grads = torch.autograd.grad(loss_of(n_out, n_lse, g_out, g_lse), (q, k, v))
    q64, k64, v64 = (f64(x).requires_grad_(True) for x in (q, k, v))
    o64, l64 = softmax_attention_naive(q64, k64, v64, **kw, enable_gqa=gqa, return_lse=True)
    np.testing.assert_allclose(to_numpy64(o64), ref_out, rtol=1e-10, atol=1e-10)
    ref_grads = torch.autograd.grad(loss_of(o64, l64, g_out, g_lse), (q64, k64, v64))
    terms = gradient_term_scales(q, k, v, g_out, g_lse, _shift(mask, t, s))
    for name, g, gn, gr, ts in zip(("dq", "dk", "dv"), grads, n_grads, ref_grads, terms):
        assert g.shape == gr.shape and g.dtype == dtype
        check_rule(g, gn, gr, dt, name, FLOOR_GRAD, term_scale=ts)
    if mask == "bottom_right" and t > s:  # rows without keys: exactly 0, no gradient
        assert torch.all(out[:, :, :t - s] == 0) and torch.all(grads[0][:, :, :t - s] == 0)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_no_visible_key_and_empty(causal, device, rng, poisoned_outputs):
    """S = 0: every row outputs 0 with lse -inf and zero gradients; T = 0 gives empty outputs."""
    q, k, v = make_qkv(rng, 1, 2, 2, 5, 0, 16, 16, torch.float32, device, requires_grad=True)
    out, lse = sa.softmax_attention(q, k, v, is_causal=causal, return_lse=True)
    assert torch.all(out == 0) and torch.all(lse == -float("inf"))
    ref_out, ref_lse = reference(q, k, v, causal)
    np.testing.assert_array_equal(to_numpy64(out), ref_out)
    np.testing.assert_array_equal(to_numpy64(lse), ref_lse)
    dq, dk, dv = torch.autograd.grad(out.sum(), (q, k, v))
    assert torch.all(dq == 0) and dk.shape == k.shape and dv.shape == v.shape

    q, k, v = make_qkv(rng, 1, 2, 2, 0, 7, 16, 16, torch.float32, device)
    out, lse = sa.softmax_attention(q, k, v, is_causal=causal, return_lse=True)
    assert out.shape == (1, 2, 0, 16) and lse.shape == (1, 2, 0)


def test_alignments_agree_when_t_equals_s(device, rng, poisoned_outputs):
    """T == S: bottom-right is top-left (shift 0), output and gradients bit for bit; odd size."""
    q, k, v = make_qkv(rng, 1, 2, 1, 33, 33, 16, 16, torch.float32, device, requires_grad=True)
    res = []
    for alignment in ("top_left", "bottom_right"):
        out, lse = sa.softmax_attention(q, k, v, is_causal=True, causal_alignment=alignment,
                                        enable_gqa=True, return_lse=True)
        res.append((out, lse) + torch.autograd.grad(out.sum() + lse.sum(), (q, k, v)))
    for a, b in zip(*res):
        assert torch.equal(a, b)


def test_strided_inputs_and_scale(device, rng, poisoned_outputs):
    """(B, T, H, D) memory viewed as (B, H, T, D) (SDPA's usual layout), a custom scale."""
    dt = "float32"
    base = [torch.from_numpy(rng.standard_normal(sh)).float().to(device)
            for sh in [(1, 37, 2, 16), (1, 21, 2, 16), (1, 21, 2, 16)]]
    q, k, v = (x.transpose(1, 2).requires_grad_(True) for x in base)
    assert not q.is_contiguous()
    out = sa.softmax_attention(q, k, v, scale=0.7, is_causal=True)
    ref_out, _ = reference(q, k, v, True, scale=0.7)
    n_out = softmax_attention_naive(q, k, v, scale=0.7, is_causal=True)
    check_rule(out, n_out, ref_out, dt, "out")
    g = torch.from_numpy(rng.standard_normal(out.shape)).float().to(device).transpose(2, 3)
    g = g.contiguous().transpose(2, 3)  # a gradient that is not contiguous either
    grads = torch.autograd.grad(out, (q, k, v), g)
    n_grads = torch.autograd.grad(n_out, (q, k, v), g)
    q64, k64, v64 = (f64(x).requires_grad_(True) for x in (q, k, v))
    o64 = softmax_attention_naive(q64, k64, v64, scale=0.7, is_causal=True)
    ref_grads = torch.autograd.grad(o64, (q64, k64, v64), g.double())
    for name, a, b, r in zip(("dq", "dk", "dv"), grads, n_grads, ref_grads):
        check_rule(a, b, r, dt, name, FLOOR_GRAD)


def test_large_scores_stay_finite(device, rng):
    """Scores of several hundred (exp overflows float32 without the online max) stay exact."""
    q, k, v = make_qkv(rng, 1, 1, 1, 20, 17, 16, 16, torch.float32, device)
    q, k = q * 8, k * 8
    out, lse = sa.softmax_attention(q, k, v, scale=1.0, return_lse=True)
    ref_out, ref_lse = reference(q, k, v, False, scale=1.0)
    assert float(np.max(ref_lse)) > 300
    np.testing.assert_allclose(to_numpy64(out), ref_out, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(to_numpy64(lse), ref_lse, rtol=1e-6)


#: (dtype, D, mask, T, S) on the GPU: every config, no mask and both alignments (T < S and
#: T > S for bottom-right, whose diagonal then crosses the tiles at other offsets).
_EVERY_CONFIG_GPU = [
    ("bfloat16", 64, None, 300, 257), ("bfloat16", 64, "top_left", 300, 257),
    ("bfloat16", 128, None, 300, 257), ("bfloat16", 128, "bottom_right", 300, 257),
    ("float16", 64, None, 300, 257), ("float16", 64, "bottom_right", 257, 300),
    ("float16", 128, None, 300, 257), ("float16", 128, "top_left", 300, 257),
    ("float32", 64, "bottom_right", 300, 257),
]


def _every_config_cases(device):
    if device != "cuda":
        return [("bfloat16", 32, "bottom_right", 45, 37)]
    return _EVERY_CONFIG_GPU


@pytest.mark.parametrize("idx", range(len(_EVERY_CONFIG_GPU)))
def test_every_config(idx, device, rng):
    """Each config the autotuner may pick (after pruning), forced: forward and backward agree with
    float64 autograd within the rule, on ragged lengths with GQA."""
    cases = _every_config_cases(device)
    if idx >= len(cases):
        pytest.skip("fewer cases on this device")
    dt, d, mask, t, s = cases[idx]
    dtype = ATTN_DTYPES[dt]
    q, k, v = make_qkv(rng, 1, 4, 2, t, s, d, d, dtype, device)
    scale = d ** -0.5
    kw = _mask_kwargs(mask)
    q64, k64, v64 = (f64(x).requires_grad_(True) for x in (q, k, v))
    o64 = softmax_attention_naive(q64, k64, v64, **kw, enable_gqa=True)
    g = torch.from_numpy(rng.standard_normal(o64.shape)).to(device)
    ref_grads = torch.autograd.grad(o64, (q64, k64, v64), g)
    qn, kn, vn = (x.detach().clone().requires_grad_(True) for x in (q, k, v))
    n_out = softmax_attention_naive(qn, kn, vn, **kw, enable_gqa=True)
    n_grads = torch.autograd.grad(n_out, (qn, kn, vn), g.to(dtype))
    cands = _attn_configs.candidate_configs(dtype, d, d)
    for c in cands["fwd"]:
        out, lse2 = sa.attn_fwd(q, k, v, shift=_shift(mask, t, s), scale=scale, config=c)
        check_rule(out, n_out, o64, dt, f"out with {c}")
    n_bwd = max(len(cands["dkdv"]), len(cands["dq"]))
    for i in range(n_bwd):
        ckv = cands["dkdv"][min(i, len(cands["dkdv"]) - 1)]
        cq = cands["dq"][min(i, len(cands["dq"]) - 1)]
        grads = sa.attn_bwd(g.to(dtype), q, k, v, out, lse2, None, shift=_shift(mask, t, s),
                            scale=scale, configs=(ckv, cq))
        for name, a, b, r in zip(("dq", "dk", "dv"), grads, n_grads, ref_grads):
            check_rule(a, b, r, dt, f"{name} with {ckv} / {cq}", FLOOR_GRAD)


# --------------------------------------------------------------------------------- SDPA (GPU)
@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("t,s,d,gqa", [(100, 63, 64, True), (257, 257, 128, False), (1000, 777, 64, True)])
def test_matches_torch_sdpa(t, s, d, gqa, causal, dt, device, rng):
    """On the GPU: output and gradients as close to the float64 reference as torch SDPA's are."""
    if device != "cuda":
        pytest.skip("compares with torch SDPA on the GPU (the CPU case is covered by the naive rule)")
    import torch.nn.functional as F

    dtype = ATTN_DTYPES[dt]
    h, hkv = (4, 2) if gqa else (4, 4)
    q, k, v = make_qkv(rng, 2, h, hkv, t, s, d, d, dtype, device, requires_grad=True)
    out = sa.softmax_attention(q, k, v, is_causal=causal, enable_gqa=gqa)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)
    q64, k64, v64 = (f64(x).requires_grad_(True) for x in (q, k, v))
    o64 = softmax_attention_naive(q64, k64, v64, is_causal=causal, enable_gqa=gqa)
    check_rule(out, ref, o64, dt, "out vs sdpa")
    g = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), g)
    sdpa_grads = torch.autograd.grad(ref, (q, k, v), g)
    ref_grads = torch.autograd.grad(o64, (q64, k64, v64), g.double())
    for name, a, b, r in zip(("dq", "dk", "dv"), grads, sdpa_grads, ref_grads):
        check_rule(a, b, r, dt, name + " vs sdpa", FLOOR_GRAD)


# ------------------------------------------------------------------------------ bad inputs
def _bad_cases(dev):
    def t(*shape, dtype=torch.float32):
        return torch.zeros(shape, dtype=dtype, device=dev)

    q, k, v = t(1, 4, 5, 16), t(1, 4, 6, 16), t(1, 4, 6, 16)
    return [
        ("q-not-tensor", (np.zeros((1, 4, 5, 16)), k, v), {}, TypeError, "q must be a torch.Tensor"),
        ("k-3d", (q, t(4, 6, 16), v), {}, ValueError, "k must be 4-D"),
        ("float64", (q.double(), k.double(), v.double()), {}, TypeError, "q must have dtype"),
        ("int", (q.int(), k, v), {}, TypeError, "q must have dtype"),
        ("mixed-dtype", (q, k.half(), v), {}, TypeError, "same dtype"),
        ("head-dim", (q, t(1, 4, 6, 8), v), {}, ValueError, "same head dim"),
        ("kv-length", (q, k, t(1, 4, 7, 16)), {}, ValueError, "same length S"),
        ("batch", (q, t(2, 4, 6, 16), t(2, 4, 6, 16)), {}, ValueError, "batch size"),
        ("kv-heads", (q, k, t(1, 2, 6, 16)), {}, ValueError, "same number of heads"),
        ("gqa-off", (q, t(1, 2, 6, 16), t(1, 2, 6, 16)), {}, ValueError, "enable_gqa=True"),
        ("gqa-indivisible", (q, t(1, 3, 6, 16), t(1, 3, 6, 16)), dict(enable_gqa=True), ValueError,
         "must divide"),
        ("head-dim-too-big", (t(1, 1, 5, 272), t(1, 1, 6, 272), t(1, 1, 6, 16)), {}, ValueError,
         "at most 256"),
        ("scale-zero", (q, k, v), dict(scale=0.0), ValueError, "scale must be a finite number > 0"),
        ("scale-negative", (q, k, v), dict(scale=-1.0), ValueError, "scale"),
        ("scale-nan", (q, k, v), dict(scale=float("nan")), ValueError, "scale"),
        ("scale-string", (q, k, v), dict(scale="1"), TypeError, "scale"),
        ("causal-not-bool", (q, k, v), dict(is_causal=1), TypeError, "is_causal"),
        ("lse-not-bool", (q, k, v), dict(return_lse="yes"), TypeError, "return_lse"),
        ("alignment-unknown", (q, k, v), dict(is_causal=True, causal_alignment="lower_right"),
         ValueError, "causal_alignment must be 'top_left' or 'bottom_right'"),
        ("alignment-unknown-not-causal", (q, k, v), dict(causal_alignment="bottom-right"),
         ValueError, "causal_alignment"),
        ("alignment-not-str", (q, k, v), dict(is_causal=True, causal_alignment=None), TypeError,
         "causal_alignment"),
    ]


def test_bad_inputs(device):
    for name, args, kwargs, exc, match in _bad_cases(device):
        with pytest.raises(exc, match=match):
            sa.softmax_attention(*args, **kwargs)
        if name not in ("head-dim-too-big", "float64"):  # the naive version takes these
            with pytest.raises(exc, match=match):
                softmax_attention_naive(*args, **kwargs)


def test_devices_must_match(device):
    if device != "cuda":
        pytest.skip("needs a second device")
    q = torch.zeros(1, 1, 4, 16, device="cuda")
    k = torch.zeros(1, 1, 4, 16)
    with pytest.raises(ValueError, match="same device"):
        sa.softmax_attention(q, k, k)


@pytest.mark.subprocess
def test_cpu_without_interpreter_is_a_clear_error():
    """On the CPU with TRITON_INTERPRET unset the call fails with a message naming the fix."""
    code = (
        "import torch\n"
        "from kernelkit_gpu.attention.softmax import softmax_attention\n"
        "q = torch.zeros(1, 1, 4, 16)\n"
        "try:\n"
        "    softmax_attention(q, q, q)\n"
        "except ValueError as e:\n"
        "    print('ValueError', e)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         cwd=root, timeout=300)
    assert "ValueError" in res.stdout and "TRITON_INTERPRET=1" in res.stdout, res.stdout + res.stderr


# ------------------------------------------------------ masked keys are absent (issue 18 J)
#: (alignment, T, S, index of the spoiled key / query row). The first is the reproduction of
#: issue 18 J; the last two span several tiles (full tiles and causal diagonals) under the
#: interpreter's blocks (forward 32 x 16, dK/dV 16 x 32, dQ 32 x 16).
MASKED_CASES = [("bottom_right", 9, 5, 4), ("top_left", 9, 5, 4), ("top_left", 5, 9, 4),
                ("bottom_right", 5, 9, 4), ("top_left", 40, 37, 20), ("bottom_right", 40, 23, 9),
                ("bottom_right", 9, 5, 2)]  # (the last: q_2 of a row that sees no key)
#: (operand, value) put at one entry of key j (k or v) or of query row j (q).
NONFINITE = [("v", float("nan")), ("v", float("inf")), ("v", -float("inf")), ("k", float("nan")),
             ("k", float("inf")), ("q", float("nan"))]
#: Tolerances of the finite entries against float64 in these tests of the masking (the accuracy
#: itself is test_matches_reference's job): float32 scores, exp2 and sums over <= 40 keys
#: (~1e-6), 16-bit probabilities and operands (u = 4.9e-4 / 3.9e-3, gradients summing ~40
#: such terms).
MASK_TOL = {"float32": dict(rtol=1e-4, atol=1e-4), "float16": dict(rtol=2e-2, atol=2e-2),
            "bfloat16": dict(rtol=1e-1, atol=1e-1)}


def _spoiled_qkv(rng, t, s, j, operand, value, dtype, device):
    """q (1, 2, T, 16), k, v (1, 1, S, 16) (GQA: both query heads read the one k/v head) with
    ``value`` at entry (j, 3) of ``operand``."""
    q, k, v = make_qkv(rng, 1, 2, 1, t, s, 16, 16, dtype, device)
    {"q": q, "k": k, "v": v}[operand][0, 0, j, 3] = value
    return q, k, v


def rowwise_reference(q, k, v, shift):
    """Float64 softmax attention one query row at a time over its visible keys only, through
    torch.autograd: the gradients too sum over the visible pairs only (IEEE semantics of a
    row-by-row computation). Rows that see no key are 0. q (B, H, T, D), k, v (B, H_kv, S, *)."""
    B, H, T, D = q.shape
    S, rep = k.shape[2], H // k.shape[1]

    def row(b, h, i):
        js = [j for j in range(S) if shift is None or j <= i + shift]
        if not js:
            return torch.zeros(v.shape[3], dtype=torch.float64)
        p = torch.softmax(D ** -0.5 * (k[b, h // rep, js] @ q[b, h, i]), dim=0)
        return p @ v[b, h // rep, js]

    return torch.stack([torch.stack([torch.stack([row(b, h, i) for i in range(T)])
                                     for h in range(H)]) for b in range(B)])


def _check_masked(fn, rng, device, alignment, t, s, j, operand, value, dt, tol):
    q, k, v = _spoiled_qkv(rng, t, s, j, operand, value, getattr(torch, dt), device)
    causal = dict(is_causal=True, causal_alignment=alignment)
    ref_out, ref_lse = reference(q, k, v, True, causal_alignment=alignment)
    q64, k64, v64 = (f64(x).cpu().requires_grad_(True) for x in (q, k, v))
    row_out = rowwise_reference(q64, k64, v64, _shift(alignment, t, s))
    np.testing.assert_allclose(to_numpy64(row_out), ref_out, **TOL["float64"])  # references agree
    # a NaN output gets a NaN upstream gradient, as a loss like (out ** 2).sum() gives it
    g = torch.from_numpy(rng.standard_normal(ref_out.shape)) + 0.0 * torch.from_numpy(ref_out)
    expect = torch.autograd.grad(row_out, (q64, k64, v64), g)
    q, k, v = (x.requires_grad_(True) for x in (q, k, v))
    out, lse = fn(q, k, v, enable_gqa=True, return_lse=True, **causal)
    np.testing.assert_allclose(to_numpy64(out), ref_out, **tol)
    if not (operand == "k" and value == float("inf")):
        # (an +inf score: the reference's max subtraction and the kernel give NaN (inf - inf),
        # torch's logsumexp gives +inf; not compared)
        np.testing.assert_allclose(to_numpy64(lse), ref_lse, **tol)
    got = torch.autograd.grad(out, (q, k, v), g.to(device=device, dtype=out.dtype))
    for name, a, b in zip("qkv", got, expect):
        np.testing.assert_allclose(to_numpy64(a), b.numpy(), **tol, err_msg=f"d{name}")
    if (alignment, t, s, j, operand) == ("bottom_right", 9, 5, 4, "v"):  # issue 18 J
        o = to_numpy64(out)[0, 0]
        assert (o[:4] == 0).all() and np.isfinite(o[4:8]).all() and not np.isfinite(o[8, 3])


@pytest.mark.parametrize("operand,value", NONFINITE, ids=[f"{o}{x}" for o, x in NONFINITE])
@pytest.mark.parametrize("alignment,t,s,j", MASKED_CASES,
                         ids=[f"{a}-T{t}-S{s}-j{j}" for a, t, s, j in MASKED_CASES])
def test_nonfinite_reaches_only_the_rows_that_see_it(alignment, t, s, j, operand, value, device,
                                                     rng, poisoned_outputs):
    """A NaN / inf in v_j, k_j or q_j reaches exactly the outputs and gradients that a
    row-by-row float64 computation over the visible keys gives (NaN and inf positions
    included): never the rows that do not see key j; rows without keys are 0 (lse -inf, zero
    gradients). The gate sends these calls to the exact twin (test_causal_gate_routes)."""
    _check_masked(sa.softmax_attention, rng, device, alignment, t, s, j, operand, value,
                  "float32", MASK_TOL["float32"])


@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
@pytest.mark.parametrize("operand,value", NONFINITE[:2], ids=["vnan", "vinf"])
def test_nonfinite_masked_16_bit(operand, value, dt, device, rng, poisoned_outputs):
    """The reproduction of issue 18 J in float16 / bfloat16 (the gate's float32 sums see the
    16-bit NaN / inf)."""
    _check_masked(sa.softmax_attention, rng, device, "bottom_right", 9, 5, 4, operand, value, dt,
                  MASK_TOL[dt])


@pytest.mark.parametrize("operand,value", NONFINITE, ids=[f"{o}{x}" for o, x in NONFINITE])
@pytest.mark.parametrize("alignment,t,s,j", MASKED_CASES,
                         ids=[f"{a}-T{t}-S{s}-j{j}" for a, t, s, j in MASKED_CASES])
def test_naive_nonfinite_reaches_only_the_rows_that_see_it(alignment, t, s, j, operand, value, rng):
    """The plain-PyTorch twin follows the same rule, in float64 (the gradient reference of the
    other tests) and float32."""
    for dt, tol in (("float64", TOL["float64"]), ("float32", MASK_TOL["float32"])):
        _check_masked(softmax_attention_naive, rng, "cpu", alignment, t, s, j, operand, value,
                      dt, tol)


def _crafted_tiles(rng, n=16):
    """a (n, n) with zeros, negatives, a NaN and an inf; b (n, n) with NaN, +inf, -inf (one
    column holds both infinities, one an infinity met only by zero weights, one meets the inf
    of a); a random mask."""
    a = rng.standard_normal((n, n))
    a[rng.random((n, n)) < 0.2] = 0.0
    a[3, 5] = np.nan
    b = rng.standard_normal((n, n))
    b[5, 0], b[7, 1], b[9, 2], b[2, 3], b[11, 3] = np.nan, np.inf, -np.inf, np.inf, -np.inf
    b[4, 6] = np.inf
    a[:, 4] = 0.0  # key 4 has weight 0 in every row: inf * 0 = NaN where visible
    valid = rng.random((n, n)) < 0.6
    a[6, 7], b[7, 8], valid[6, 7] = np.inf, -np.inf, True  # inf * -inf = -inf, inf * finite
    with np.errstate(invalid="ignore"):
        expect = np.where(valid[:, :, None], a[:, :, None] * b[None, :, :], 0.0).sum(axis=1)
    return a, b, valid, expect


def test_visible_product_torch_is_the_masked_elementwise_sum(rng):
    """visible_mm (the torch twins' product) equals sum_j where(visible, a_ij b_jc, 0) written
    elementwise: NaN, +inf, -inf exactly where IEEE puts them (0 * inf on a visible pair is NaN,
    +inf and -inf in one sum are NaN), and nothing from masked pairs."""
    from kernelkit_gpu.attention._visible import visible_mm

    a, b, valid, expect = _crafted_tiles(rng)
    assert np.isnan(expect).any() and np.isposinf(expect).any() and np.isneginf(expect).any()
    got = visible_mm(torch.from_numpy(a), torch.from_numpy(b), torch.from_numpy(valid))
    np.testing.assert_allclose(got.numpy(), expect, **TOL["float64"])


# ------------------------------------------------- the finiteness gate of causal calls
def test_causal_gate_routes(device, rng, monkeypatch):
    """Spy: finite causal inputs run the Triton forward and backward and never the twin; with a
    non-finite v (or q, k) the Triton forward (queued before the flag is read) is dropped and
    the twin gives the result and its gradients (no Triton backward); non-causal calls run the
    Triton kernels whatever the values."""
    calls = spy_calls(monkeypatch, [(sa, "attn_fwd", "fwd"), (sa, "attn_bwd", "bwd"),
                                    (sa, "softmax_attention_naive", "twin")])
    for operand, noncausal, want in ((None, False, ["fwd", "bwd"]), ("v", False, ["fwd", "twin"]),
                                     ("q", False, ["fwd", "twin"]), ("k", False, ["fwd", "twin"]),
                                     ("v", True, ["fwd", "bwd"])):
        q, k, v = make_qkv(rng, 1, 2, 1, 9, 5, 16, 16, torch.float32, device)
        if operand:
            {"q": q, "k": k, "v": v}[operand][0, 0, 4, 3] = float("nan")
        q, k, v = (x.requires_grad_(True) for x in (q, k, v))
        out = sa.softmax_attention(q, k, v, is_causal=not noncausal, enable_gqa=True,
                                   causal_alignment="bottom_right")
        torch.autograd.grad(out.sum(), (q, k, v))
        assert calls == want, (operand, noncausal)
        calls.clear()


@pytest.mark.parametrize("which", ["dout", "dlse"])
@pytest.mark.parametrize("alignment", ["top_left", "bottom_right"])
def test_nonfinite_incoming_gradient_runs_the_twin(which, alignment, device, rng, monkeypatch):
    """Finite causal inputs (Triton forward) with a NaN and an inf in dO (or dlse): the backward
    computes that call's gradients through the twin (spy: no Triton backward), equal to the
    row-by-row float64 autograd, NaN and inf positions included (float32: MASK_TOL)."""
    t, s = 40, 23
    q, k, v = make_qkv(rng, 1, 2, 1, t, s, 16, 16, torch.float32, device)
    g = torch.from_numpy(rng.standard_normal((1, 2, t, 16)))
    g_lse = torch.from_numpy(rng.standard_normal((1, 2, t)))
    if which == "dout":
        g[0, 0, 20, 3], g[0, 1, 30, 5] = float("nan"), float("inf")
    else:
        g_lse[0, 0, 20], g_lse[0, 1, 30] = float("nan"), float("inf")
    shift = _shift(alignment, t, s)
    q64, k64, v64 = (f64(x).cpu().requires_grad_(True) for x in (q, k, v))

    def lse_rows(q, k):  # float64 row-by-row lse over the visible keys (-inf without keys)
        sc = (q[0] @ k[0, 0].T) * 16 ** -0.5
        vis = torch.arange(s)[None, :] <= torch.arange(t)[:, None] + shift
        return torch.logsumexp(sc.masked_fill(~vis, -np.inf), dim=-1)[None]

    lse64 = lse_rows(q64, k64)
    keys = lse64 > -np.inf  # rows that see a key (the others' lse has no gradient)
    expect = torch.autograd.grad(
        (rowwise_reference(q64, k64, v64, shift), lse64[keys]),
        (q64, k64, v64), (g, g_lse[keys]))
    calls = spy_calls(monkeypatch, [(sa, "attn_fwd", "fwd"), (sa, "attn_bwd", "bwd"),
                                    (sa, "softmax_attention_naive", "twin")])
    q, k, v = (x.requires_grad_(True) for x in (q, k, v))
    out, lse = sa.softmax_attention(q, k, v, is_causal=True, causal_alignment=alignment,
                                    enable_gqa=True, return_lse=True)
    got = torch.autograd.grad((out, lse), (q, k, v), (g.to(device, out.dtype),
                                                       g_lse.to(device, lse.dtype)))
    assert calls == ["fwd", "twin"]
    assert not np.isfinite(expect[0].numpy()).all()  # (dv: finite when only dlse is not)
    for name, a, b in zip("qkv", got, expect):
        np.testing.assert_allclose(to_numpy64(a), b.numpy(), **MASK_TOL["float32"],
                                   err_msg=f"d{name}")


def count_checks(monkeypatch, launchers):
    """Count the calls of the finiteness check's operations (Tensor.sum, isfinite, bool, item)
    outside the Triton launchers ``(module, name)`` (which the interpreter serves from host
    memory); returns the list of names called."""
    seen, inside = [], [False]

    def trap(name, real):
        def counted(*args, **kwargs):
            if not inside[0]:
                seen.append(name)
            return real(*args, **kwargs)
        return counted

    for name in ("sum", "isfinite", "__bool__", "item"):
        monkeypatch.setattr(torch.Tensor, name, trap(name, getattr(torch.Tensor, name)))
    monkeypatch.setattr(torch, "isfinite", trap("torch.isfinite", torch.isfinite))
    for module, name in launchers:
        real = getattr(module, name)

        def launch(*args, _real=real, **kwargs):
            inside[0] = True
            try:
                return _real(*args, **kwargs)
            finally:
                inside[0] = False

        monkeypatch.setattr(module, name, launch)
    return seen


def test_noncausal_call_is_not_checked(device, rng, monkeypatch):
    """A non-causal call (nothing masked) makes no host read and no extra reduction, forward or
    backward, even with a NaN in v; the spy is live (a causal call trips it)."""
    q, k, v = make_qkv(rng, 1, 2, 1, 9, 5, 16, 16, torch.float32, device, requires_grad=True)
    with torch.no_grad():
        v[0, 0, 2, 3] = float("nan")
    seen = count_checks(monkeypatch, [(sa, "attn_fwd"), (sa, "attn_bwd")])
    out, lse = sa.softmax_attention(q, k, v, enable_gqa=True, return_lse=True)
    torch.autograd.grad((out, lse), (q, k, v), (torch.ones_like(out), torch.ones_like(lse)))
    assert seen == []
    sa.softmax_attention(q, k, v, is_causal=True, enable_gqa=True)
    assert "sum" in seen and "__bool__" in seen
