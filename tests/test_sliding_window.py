"""Sliding-window softmax attention: ``window_size=(left, right)``, FlashAttention's local
attention.

Query i sees the keys j with i + shift - left <= j <= i + shift + right (-1: no bound on that
side), shift = 0 ("top_left") or S - T ("bottom_right", FlashAttention's alignment), cut at the
causal diagonal j <= i + shift with ``is_causal``. The references come first: the float64
reference (:func:`kernelkit_math.attention.softmax_attention`) against that definition written
out here row by row and against FlashAttention's documented masks, the float64 twin's gradients
against torch's SDPA with an explicit mask. Then the Triton kernels (forward, backward, dense
and varlen, both layouts, GQA, every dtype) against them with the FlashAttention rule of
tests/test_gpu_softmax_attention.py, every launcher buffer poisoned with NaN; that the key
tiles outside the window are never read (NaN there leaves every output and gradient finite and
exact); that a window that bounds nothing is the plain causal / full path; the non-finite gate;
and the errors for bad ``window_size`` values.

The Triton modules are imported inside the tests: this module is collected where triton is
missing too (.ci/run's step without it runs the tests that are not marked ``interpreter``).
"""

import importlib
import itertools
import math

import numpy as np
import pytest
import torch

from kernelkit.attention import softmax_attention
from kernelkit_gpu.attention.naive import softmax_attention_naive
from kernelkit_gpu.attention.varlen_naive import softmax_attention_varlen_naive
from kernelkit_math import attention as ref_attn
from tests.conftest import TOL
from tests.gpu_cases import ATTN_DTYPES, FLOOR_GRAD, check_rule, f64, spy_calls, to_numpy64

WINDOWS = [(0, 0), (3, 0), (5, 2), (-1, 4), (7, -1)]
ALIGNMENTS = ("top_left", "bottom_right")


def _band(window, causal, alignment, t, s):
    """(lower, upper) of the visible band i + lower <= j <= i + upper (None: unbounded),
    FlashAttention's definition written out here: [i + shift - left, i + shift + right], cut at
    the causal diagonal i + shift."""
    shift = 0 if alignment == "top_left" else s - t
    left, right = window
    lower = None if left == -1 else shift - left
    upper = None if right == -1 else shift + right
    if causal:
        upper = shift if upper is None else min(upper, shift)
    return lower, upper


def _visible(t, s, lower, upper):
    """(T, S) bool: key j visible to query i, one pair at a time."""
    return np.array([[(lower is None or j >= i + lower) and (upper is None or j <= i + upper)
                      for j in range(s)] for i in range(t)], dtype=bool).reshape(t, s)


def _rowwise(q, k, v, scale, visible):
    """One (T, D) problem with loops and math.exp over each row's visible keys: out and lse
    (rows without keys: 0 and -inf)."""
    out, lse = np.zeros((q.shape[0], v.shape[1])), np.full(q.shape[0], -np.inf)
    for i in range(q.shape[0]):
        js = np.flatnonzero(visible[i])
        if js.size == 0:
            continue
        sc = [scale * float(np.dot(q[i], k[j])) for j in js]
        m = max(sc)
        w = [math.exp(x - m) for x in sc]
        out[i] = sum(wj * v[j] for wj, j in zip(w, js)) / sum(w)
        lse[i] = m + math.log(sum(w))
    return out, lse


# ------------------------------------------------------------------------- references first
@pytest.mark.parametrize("alignment", ALIGNMENTS)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("window", WINDOWS + [(0, -1), (20, 20)], ids=str)
@pytest.mark.parametrize("t,s", [(7, 5), (5, 9), (1, 6), (9, 9)])
def test_reference_is_the_windowed_softmax(t, s, window, causal, alignment, rng):
    """kernelkit_math's reference equals a row-by-row softmax over FlashAttention's window (out
    and lse; rows without keys 0 and -inf), with GQA; a window that bounds nothing is the plain
    call."""
    q, k, v = rng.normal(size=(4, t, 6)), rng.normal(size=(2, s, 6)), rng.normal(size=(2, s, 3))
    out, lse = ref_attn.softmax_attention(q, k, v, is_causal=causal, causal_alignment=alignment,
                                          scale=0.7, window_size=window, return_lse=True)
    vis = _visible(t, s, *_band(window, causal, alignment, t, s))
    for h in range(4):
        o, l = _rowwise(q[h], k[h // 2], v[h // 2], 0.7, vis)
        np.testing.assert_allclose(out[h], o, **TOL["float64"])
        np.testing.assert_array_equal(np.isneginf(lse[h]), np.isneginf(l))
        np.testing.assert_allclose(lse[h][np.isfinite(l)], l[np.isfinite(l)], **TOL["float64"])
    if window == (20, 20) and not causal:  # a window wider than both lengths bounds nothing
        plain = ref_attn.softmax_attention(q, k, v, scale=0.7, causal_alignment=alignment,
                                           return_lse=True)
        for a, b in zip((out, lse), plain):
            np.testing.assert_allclose(a, b, **TOL["float64"])


def test_mask_band_reproduces_flash_attention_masks():
    """FlashAttention's documented masks: causal bottom-right for (seqlen_q, seqlen_k) = (2, 5)
    and (5, 2), and its window formula [i + S - T - left, i + S - T + right] for (1, 0); the
    top-left alignment is SDPA's tril; (-1, -1) and None bound nothing."""
    def mask(causal, alignment, window, t, s):
        return ref_attn.band_mask(t, s, *ref_attn.mask_band(causal, alignment, window, t, s))

    np.testing.assert_array_equal(mask(True, "bottom_right", None, 2, 5),
                                  [[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]])
    np.testing.assert_array_equal(mask(True, "bottom_right", None, 5, 2),
                                  [[0, 0], [0, 0], [0, 0], [1, 0], [1, 1]])
    np.testing.assert_array_equal(mask(False, "bottom_right", (1, 0), 2, 5),
                                  [[0, 0, 1, 1, 0], [0, 0, 0, 1, 1]])
    np.testing.assert_array_equal(mask(True, "top_left", None, 3, 4), np.tri(3, 4, dtype=bool))
    # causal cuts a right bound to the diagonal (FlashAttention sets it to 0)
    np.testing.assert_array_equal(mask(True, "top_left", (1, 3), 3, 4),
                                  [[1, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 0]])
    for window in (None, (-1, -1), [-1, -1]):
        assert ref_attn.mask_band(False, "top_left", window, 3, 4) == (None, None)
    assert ref_attn.mask_band(True, "bottom_right", (np.int64(2), 0), 3, 5) == (0, 2)


#: (window, causal, alignment, T, S) where every row sees a key (torch SDPA's masked rows with no
#: key are NaN, not 0)
_SDPA_CASES = [(w, c, "top_left", 9, 9) for w in WINDOWS for c in (False, True)] + [
    ((5, 2), False, "bottom_right", 5, 9), ((3, 0), True, "bottom_right", 5, 9),
    ((-1, 4), False, "bottom_right", 5, 9)]


@pytest.mark.parametrize("window,causal,alignment,t,s", _SDPA_CASES,
                         ids=[f"{w}-{'causal' if c else 'full'}-{a}-T{t}-S{s}"
                              for w, c, a, t, s in _SDPA_CASES])
def test_twin_float64_matches_reference_and_masked_sdpa(window, causal, alignment, t, s, rng):
    """The float64 twin (the gradient reference of the kernel tests) against kernelkit_math (out,
    lse) and against torch SDPA with the window as an explicit boolean mask (out and dq, dk, dv,
    float64 autograd of an independent implementation)."""
    import torch.nn.functional as F

    q, k, v = (torch.from_numpy(rng.normal(size=(2, 2, n, 8))).requires_grad_(True)
               for n in (t, s, s))
    kw = dict(is_causal=causal, causal_alignment=alignment, window_size=window)
    out, lse = softmax_attention_naive(q, k, v, **kw, return_lse=True)
    ref_out, ref_lse = ref_attn.softmax_attention(*(to_numpy64(x) for x in (q, k, v)), **kw,
                                                  return_lse=True)
    np.testing.assert_allclose(to_numpy64(out), ref_out, **TOL["float64"])
    np.testing.assert_allclose(to_numpy64(lse), ref_lse, **TOL["float64"])
    mask = torch.from_numpy(_visible(t, s, *_band(window, causal, alignment, t, s)))
    expect = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    np.testing.assert_allclose(to_numpy64(out), to_numpy64(expect), **TOL["float64"])
    g = torch.from_numpy(rng.normal(size=out.shape))
    for a, b in zip(torch.autograd.grad(out, (q, k, v), g),
                    torch.autograd.grad(expect, (q, k, v), g)):
        np.testing.assert_allclose(to_numpy64(a), to_numpy64(b), **TOL["float64"])


def test_torch_backend_and_float64_take_the_window(rng):
    """The plain-PyTorch paths of the public API (float64 under backend "torch" and "auto"; dense
    and varlen, both layouts) follow the reference."""
    q, k, v = (torch.from_numpy(rng.normal(size=(1, 3, n, 8))) for n in (11, 14, 14))
    want, want_lse = ref_attn.softmax_attention(*(to_numpy64(x) for x in (q, k, v)),
                                                window_size=(3, 1), causal_alignment="bottom_right",
                                                return_lse=True)
    for backend in ("torch", "auto"):
        for layout in ("bhtd", "bthd"):
            args = [x if layout == "bhtd" else x.transpose(1, 2).contiguous() for x in (q, k, v)]
            out, lse = softmax_attention(*args, window_size=(3, 1), layout=layout,
                                         causal_alignment="bottom_right", backend=backend,
                                         return_lse=True)
            out = out if layout == "bhtd" else out.transpose(1, 2)
            np.testing.assert_allclose(to_numpy64(out), want, **TOL["float64"])
            np.testing.assert_allclose(to_numpy64(lse), want_lse, **TOL["float64"])
    x = torch.from_numpy(rng.normal(size=(13, 2, 8)))
    cu = torch.tensor([0, 4, 4, 13])  # an empty sequence in the middle
    for backend in ("torch", "auto"):
        out = softmax_attention(x, x, x, cu_seqlens=cu, window_size=(2, 0), backend=backend)
        for a, b in ((0, 4), (4, 13)):
            seq = to_numpy64(x[a:b]).transpose(1, 0, 2)
            want = ref_attn.softmax_attention(seq, seq, seq, window_size=(2, 0))
            np.testing.assert_allclose(to_numpy64(out[a:b]).transpose(1, 0, 2), want,
                                       **TOL["float64"])


#: (window_size, exception, message)
BAD_WINDOWS = [
    ((3,), ValueError, r"window_size must be a tuple \(left, right\) of two ints >= -1; got 1"),
    ((1, 2, 3), ValueError, "window_size must be a tuple .* got 3 entries"),
    ((-2, 0), ValueError, "window_size entries must be >= -1 .* left entry is -2"),
    ((0, -5), ValueError, "window_size entries must be >= -1 .* right entry is -5"),
    ((1.0, 2), TypeError, "window_size must hold two ints >= -1; its left entry is 1.0"),
    ((1, "2"), TypeError, "window_size must hold two ints >= -1; its right entry is '2'"),
    ((True, 2), TypeError, "window_size must hold two ints"),
    (5, TypeError, "window_size must be None or a tuple"),
    ("(1, 2)", TypeError, "window_size must be None or a tuple"),
]
_BAD_IDS = ["one-entry", "three-entries", "left-below-minus-one", "right-below-minus-one",
            "float", "string-entry", "bool", "int", "string"]


@pytest.mark.parametrize("window,exc,match", BAD_WINDOWS, ids=_BAD_IDS)
def test_bad_window_size_plain_paths(window, exc, match):
    """Each bad window_size gets a TypeError / ValueError naming it: the reference, the twins
    and the public API's PyTorch paths (dense and varlen), before anything is computed."""
    q = torch.zeros(1, 2, 5, 8)
    packed = torch.zeros(5, 2, 8)
    cu = torch.tensor([0, 2, 5])
    calls = [
        lambda: ref_attn.softmax_attention(q.numpy(), q.numpy(), q.numpy(), window_size=window),
        lambda: softmax_attention_naive(q, q, q, window_size=window),
        lambda: softmax_attention_varlen_naive(packed, packed, packed, cu, window_size=window),
        lambda: softmax_attention(q, q, q, window_size=window, backend="torch"),
        lambda: softmax_attention(q.double(), q.double(), q.double(), window_size=window),
        lambda: softmax_attention(packed, packed, packed, cu_seqlens=cu, window_size=window,
                                  backend="torch"),
    ]
    for call in calls:
        with pytest.raises(exc, match=match):
            call()


# --------------------------------------------------------------------- Triton: the kernels
#: (window, causal, alignment, T, S, dtype, H, H_kv, layout, offset): every window with and
#: without causal in both alignments; T != S both ways, T = 1, lengths that are no multiple of
#: any tile (T 63 and 130: masked ragged last tiles); GQA and not; both layouts; every dtype;
#: data offset by 3 (scores of tens: the online max).
_CPU = [
    ((0, 0), False, "top_left", 63, 100, "float32", 4, 2, "bhtd", 0.0),
    ((0, 0), False, "bottom_right", 130, 63, "bfloat16", 2, 2, "bthd", 0.0),
    ((0, 0), True, "top_left", 130, 100, "float16", 4, 2, "bthd", 0.0),
    ((0, 0), True, "bottom_right", 1, 63, "float32", 2, 2, "bhtd", 3.0),
    ((3, 0), False, "top_left", 1, 63, "bfloat16", 4, 2, "bhtd", 0.0),
    ((3, 0), False, "bottom_right", 63, 100, "float16", 2, 2, "bthd", 0.0),
    ((3, 0), True, "top_left", 130, 63, "float32", 2, 2, "bthd", 3.0),
    ((3, 0), True, "bottom_right", 130, 100, "bfloat16", 4, 2, "bhtd", 0.0),
    ((5, 2), False, "top_left", 130, 100, "float16", 4, 2, "bthd", 0.0),
    ((5, 2), False, "bottom_right", 1, 63, "float32", 4, 2, "bhtd", 0.0),
    ((5, 2), True, "top_left", 63, 100, "bfloat16", 2, 2, "bhtd", 3.0),
    ((5, 2), True, "bottom_right", 130, 63, "float16", 2, 2, "bthd", 0.0),
    ((-1, 4), False, "top_left", 130, 63, "float32", 2, 2, "bhtd", 0.0),
    ((-1, 4), False, "bottom_right", 130, 100, "bfloat16", 4, 2, "bthd", 3.0),
    ((-1, 4), True, "top_left", 1, 63, "float16", 4, 2, "bhtd", 0.0),
    ((-1, 4), True, "bottom_right", 63, 100, "float32", 2, 2, "bthd", 0.0),
    ((7, -1), False, "top_left", 63, 100, "bfloat16", 2, 2, "bthd", 0.0),
    ((7, -1), False, "bottom_right", 130, 63, "float16", 4, 2, "bhtd", 0.0),
    ((7, -1), True, "top_left", 130, 100, "float32", 4, 2, "bthd", 0.0),
    ((7, -1), True, "bottom_right", 1, 63, "bfloat16", 2, 2, "bhtd", 3.0),
]
#: On a GPU: every window (and two wider than a 128-key tile) x causal x alignment x dtype on
#: lengths that cross several 128-row tiles.
_GPU = [
    (w, c, a, t, s, dt, 4, 2 if i % 2 else 4, "bthd" if i % 3 else "bhtd",
     3.0 if i % 5 == 0 else 0.0)
    for i, (w, c, a, dt, (t, s)) in enumerate(itertools.product(
        WINDOWS + [(200, 0), (129, 77)], (False, True), ALIGNMENTS, list(ATTN_DTYPES),
        [(1000, 777), (300, 513)]))
]


def _case_id(c):
    w, causal, a, t, s, dt, h, hkv, layout, off = c
    return (f"w{w[0]}_{w[1]}-{'causal' if causal else 'full'}-{a}-T{t}-S{s}-{dt}-H{h}kv{hkv}"
            f"-{layout}" + ("-offset" if off else ""))


def pytest_generate_tests(metafunc):
    if "case" in metafunc.fixturenames:
        cases = _GPU if metafunc.config.getoption("--device") == "cuda" else _CPU
        metafunc.parametrize("case", cases, ids=[_case_id(c) for c in cases])


def _softmax_module():
    """The Triton module (imported here: this file is collected without triton too)."""
    return importlib.import_module("kernelkit_gpu.attention.softmax")


def _randn(rng, shape, dtype, device, offset=0.0):
    x = offset + rng.standard_normal(shape)
    return torch.from_numpy(x).to(dtype=dtype, device=device)


@pytest.mark.usefixtures("triton_can_run", "attention_autotune_off")
def test_window_matches_reference(case, device, rng, poisoned_outputs, monkeypatch):
    """Output, lse and dq, dk, dv of the Triton kernels through the public API (backend
    "triton", the launchers spied) within the FlashAttention rule of the float64 references,
    every launcher buffer NaN-poisoned (the API has no ``out=``; its outputs come from those
    buffers); rows whose window holds no key give exactly 0, lse -inf and no gradient."""
    from tests.test_gpu_softmax_attention import check_lse, gradient_term_scales, loss_of

    sa = _softmax_module()
    calls = spy_calls(monkeypatch, [(sa, "attn_fwd", "fwd"), (sa, "attn_bwd", "bwd")])
    window, causal, alignment, t, s, dt, h, hkv, layout, offset = case
    dtype = ATTN_DTYPES[dt]
    d = 16 if device == "cpu" else 64
    b = 1 if device == "cpu" else 2
    shapes = [(b, h, t, d), (b, hkv, s, d), (b, hkv, s, d)]
    if layout == "bthd":  # memory (B, T, H, D); the logical (B, H, T, D) views below
        leaves = [_randn(rng, (n, t_, hh, dd), dtype, device, offset).requires_grad_(True)
                  for n, hh, t_, dd in shapes]
        q, k, v = (x.transpose(1, 2) for x in leaves)
    else:
        leaves = [_randn(rng, sh, dtype, device, offset).requires_grad_(True) for sh in shapes]
        q, k, v = leaves
    kw = dict(is_causal=causal, causal_alignment=alignment, window_size=window,
              enable_gqa=hkv != h)
    out, lse = softmax_attention(*leaves, **kw, layout=layout, return_lse=True, backend="triton")
    assert calls == ["fwd"]
    if layout == "bthd":
        assert out.shape == (b, t, h, d) and out.is_contiguous()
        out = out.transpose(1, 2)
    assert out.shape == (b, h, t, d) and out.dtype == dtype and lse.shape == (b, h, t)

    ref_out, ref_lse = ref_attn.softmax_attention(*(to_numpy64(x) for x in (q, k, v)),
                                                  is_causal=causal, causal_alignment=alignment,
                                                  window_size=window, return_lse=True)
    n_out, n_lse = softmax_attention_naive(q, k, v, **kw, return_lse=True)
    check_rule(out, n_out, ref_out, dt, "out")
    check_lse(lse, n_lse, ref_lse, dt)

    g_out = torch.from_numpy(rng.standard_normal(out.shape)).to(device)
    g_lse = torch.from_numpy(rng.standard_normal(lse.shape)).to(device)
    grads = torch.autograd.grad(loss_of(out, lse, g_out, g_lse), leaves)
    assert calls == ["fwd", "bwd"]
    n_grads = torch.autograd.grad(loss_of(n_out, n_lse, g_out, g_lse), leaves)
    if layout == "bthd":
        grads, n_grads = ([x.transpose(1, 2) for x in gs] for gs in (grads, n_grads))
    q64, k64, v64 = (f64(x).requires_grad_(True) for x in (q, k, v))
    o64, l64 = softmax_attention_naive(q64, k64, v64, **kw, return_lse=True)
    np.testing.assert_allclose(to_numpy64(o64), ref_out, rtol=1e-10, atol=1e-10)
    ref_grads = torch.autograd.grad(loss_of(o64, l64, g_out, g_lse), (q64, k64, v64))
    lower, upper = _band(window, causal, alignment, t, s)
    terms = gradient_term_scales(q, k, v, g_out, g_lse, upper, lower=lower)
    for name, gr, gn, g64, term in zip(("dq", "dk", "dv"), grads, n_grads, ref_grads, terms):
        assert gr.shape == g64.shape and gr.dtype == dtype
        check_rule(gr, gn, g64, dt, name, FLOOR_GRAD, term_scale=term)
    empty = torch.from_numpy(~_visible(t, s, lower, upper).any(1)).to(device)
    if empty.any():  # rows whose window holds no key
        assert torch.all(out[:, :, empty] == 0) and torch.all(grads[0][:, :, empty] == 0)


#: Packed sequences: empty ones, length 1, odd lengths below and above the interpreter's tiles.
VARLEN_LENGTHS = {"cpu": [0, 1, 37, 0, 70, 5, 0],
                  "cuda": [0, 1, 37, 0, 263, 5, 130, 1000, 0]}
#: (window, causal, dtype, H, H_kv): every window, causal and not, every dtype, GQA and not
VARLEN_CASES = [
    ((0, 0), True, "float32", 2, 1), ((3, 0), False, "bfloat16", 2, 2),
    ((5, 2), False, "float16", 2, 1), ((5, 2), True, "float32", 2, 2),
    ((-1, 4), True, "bfloat16", 2, 1), ((7, -1), False, "float16", 2, 2),
]


@pytest.mark.usefixtures("triton_can_run", "attention_autotune_off")
@pytest.mark.parametrize("window,causal,dt,h,hkv", VARLEN_CASES,
                         ids=[f"w{w[0]}_{w[1]}-{'causal' if c else 'full'}-{dt}-H{h}kv{hkv}"
                              for w, c, dt, h, hkv in VARLEN_CASES])
def test_window_varlen_matches_per_sequence_reference(window, causal, dt, h, hkv, device, rng,
                                                      poisoned_outputs, monkeypatch):
    """cu_seqlens: the window counts positions within each sequence (no row sees another
    sequence); output, lse and gradients against per-sequence float64 references (rule),
    buffers poisoned, the Triton launchers spied."""
    from tests.test_gpu_softmax_attention import check_lse, gradient_term_scales

    sa = _softmax_module()
    calls = spy_calls(monkeypatch, [(sa, "attn_fwd", "fwd"), (sa, "attn_bwd", "bwd")])
    lengths = VARLEN_LENGTHS[device]
    total = sum(lengths)
    dtype = ATTN_DTYPES[dt]
    q, k, v = (_randn(rng, (total, n, 16), dtype, device).requires_grad_(True)
               for n in (h, hkv, hkv))
    cu = torch.tensor(np.concatenate([[0], np.cumsum(lengths)]), dtype=torch.int32, device=device)
    bounds = [(int(a), int(b)) for a, b in zip(cu[:-1].tolist(), cu[1:].tolist())]
    kw = dict(is_causal=causal, window_size=window, enable_gqa=hkv != h)
    out, lse = softmax_attention(q, k, v, cu_seqlens=cu, **kw, return_lse=True, backend="triton")
    assert calls == ["fwd"]
    ref_out, ref_lse = np.zeros((total, h, 16)), np.zeros((h, total))
    for a, b in bounds:
        seq = [to_numpy64(x[a:b]).transpose(1, 0, 2) for x in (q, k, v)]
        o, l = ref_attn.softmax_attention(*seq, is_causal=causal, window_size=window,
                                          return_lse=True)
        ref_out[a:b], ref_lse[:, a:b] = o.transpose(1, 0, 2), l
    n_out, n_lse = softmax_attention_varlen_naive(q, k, v, cu, **kw, return_lse=True)
    check_rule(out, n_out, ref_out, dt, "out")
    check_lse(lse, n_lse, ref_lse, dt)

    g_out = torch.from_numpy(rng.standard_normal(out.shape)).to(device)
    g_lse = torch.from_numpy(rng.standard_normal(lse.shape)).to(device)

    def loss(o, l):
        return (o.to(g_out.dtype) * g_out).sum() + (l.to(g_lse.dtype) * g_lse).sum()

    grads = torch.autograd.grad(loss(out, lse), (q, k, v))
    assert calls == ["fwd", "bwd"]
    n_grads = torch.autograd.grad(loss(n_out, n_lse), (q, k, v))
    q64, k64, v64 = (f64(x).requires_grad_(True) for x in (q, k, v))
    r_out, r_lse = softmax_attention_varlen_naive(q64, k64, v64, cu, **kw, return_lse=True)
    r_grads = torch.autograd.grad(loss(r_out, r_lse), (q64, k64, v64))
    lower, upper = _band(window, causal, "top_left", 0, 0)
    t_dq = t_dk = 0.0
    for a, b in bounds:
        if b > a:
            dense = [x[a:b].transpose(0, 1)[None] for x in (q, k, v, g_out)]
            s_dq, s_dk, _ = gradient_term_scales(*dense, g_lse[None, :, a:b], upper, lower=lower)
            t_dq, t_dk = max(t_dq, s_dq), max(t_dk, s_dk)
    for name, gr, gn, g64, term in zip("qkv", grads, n_grads, r_grads, (t_dq, t_dk, 0.0)):
        check_rule(gr, gn, g64, dt, f"d{name}", FLOOR_GRAD, term)


#: (T, S, window, causal, alignment, what is NaN, its rows): NaN keys / values (or queries and
#: their incoming gradient) at least 128 positions (the widest tile) away from every window, so
#: that no tile of any config holds both a NaN and a visible pair.
SKIP_CASES = [
    (40, 300, (7, 0), True, "bottom_right", "kv", (0, 120)),    # the left edge (keys >= 253)
    (40, 300, (7, -1), False, "bottom_right", "kv", (0, 120)),  # left edge, no right bound
    (40, 300, (5, 2), False, "top_left", "kv", (180, 300)),     # the right edge (keys <= 41)
    (40, 300, (-1, 4), False, "top_left", "kv", (180, 300)),    # right edge, no left bound
    (300, 40, (3, 0), True, "top_left", "q", (180, 300)),       # rows i >= 43 see no key
]


@pytest.mark.usefixtures("triton_can_run", "attention_autotune_off")
@pytest.mark.parametrize("t,s,window,causal,alignment,what,rows", SKIP_CASES,
                         ids=[f"T{c[0]}-S{c[1]}-w{c[2][0]}_{c[2][1]}-{c[4]}-nan-{c[5]}"
                              for c in SKIP_CASES])
def test_tiles_outside_the_window_are_never_read(t, s, window, causal, alignment, what, rows,
                                                 device, rng, monkeypatch):
    """Block skipping: with the finiteness gate off (as under CUDA graph capture), NaN in keys
    and values (or in queries and dO) that lie outside every window leave the kernels' output,
    lse and dq, dk, dv finite and equal to the reference computed without them. A kernel that
    read such a tile, even fully masked, would multiply a zero weight by NaN (P @ V, dO V^T,
    dS^T Q). The values that share a tile with visible pairs are finite and ignored: that is
    the masking."""
    from kernelkit_gpu.attention import gate

    sa = _softmax_module()
    monkeypatch.setattr(gate, "start", lambda *tensors: None)
    monkeypatch.setattr(gate, "all_finite", lambda *tensors: True)
    calls = spy_calls(monkeypatch, [(sa, "attn_fwd", "fwd"), (sa, "attn_bwd", "bwd"),
                                    (sa, "softmax_attention_naive", "twin")])
    q, k, v = (_randn(rng, (1, 2, n, 16), torch.float32, device) for n in (t, s, s))
    g = _randn(rng, (1, 2, t, 16), torch.float32, device)
    g_lse = _randn(rng, (1, 2, t), torch.float32, device)
    lower, upper = _band(window, causal, alignment, t, s)
    vis = _visible(t, s, lower, upper)
    a, b = rows
    if what == "kv":
        assert not vis[:, a:b].any()
        k_nan, v_nan = k.clone(), v.clone()
        k_nan[:, :, a:b], v_nan[:, :, a:b] = float("nan"), float("nan")
        q_nan, g_nan = q, g
    else:
        assert not vis[a:b].any()
        q_nan, g_nan = q.clone(), g.clone()
        q_nan[:, :, a:b], g_nan[:, :, a:b] = float("nan"), float("nan")
        k_nan, v_nan = k, v
    kw = dict(is_causal=causal, causal_alignment=alignment, window_size=window)
    leaves = [x.requires_grad_(True) for x in (q_nan, k_nan, v_nan)]
    out, lse = sa.softmax_attention(*leaves, **kw, return_lse=True)
    keys = lse > -np.inf
    grads = torch.autograd.grad((out, lse[keys]), leaves, (g_nan, g_lse[keys]))
    assert calls == ["fwd", "bwd"]  # the kernels, not the twin

    q64, k64, v64 = (f64(x).requires_grad_(True) for x in (q, k, v))  # without the NaN
    o64, l64 = softmax_attention_naive(q64, k64, v64, **kw, return_lse=True)
    want = torch.autograd.grad((o64, l64[keys]), (q64, k64, v64),
                               (g.double(), g_lse[keys].double()))
    tol = dict(rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(to_numpy64(out), to_numpy64(o64), **tol)
    np.testing.assert_allclose(to_numpy64(lse[keys]), to_numpy64(l64[keys]), **tol)
    assert torch.isneginf(lse[~keys]).all()
    for name, got, ref in zip("qkv", grads, want):
        assert torch.isfinite(got).all(), f"d{name} read a NaN tile"
        np.testing.assert_allclose(to_numpy64(got), to_numpy64(ref), **tol, err_msg=f"d{name}")


@pytest.mark.usefixtures("triton_can_run", "attention_autotune_off")
@pytest.mark.parametrize("alignment", ALIGNMENTS)
def test_window_that_bounds_nothing_is_the_plain_path(alignment, device, rng, monkeypatch):
    """Causal with (-1, 0), (-1, 3) or (-1, -1) is the causal call itself (the same kernel,
    WINDOW off: bit for bit); (-1, -1) without causal the full one. A left bound wider than
    both lengths runs the window kernel over the same tiles: the causal (full) result within
    the rule."""
    from kernelkit_gpu.attention import softmax_bwd as sb
    from tests.gpu_cases import spy_kernels

    sa = _softmax_module()
    t, s = 70, 45
    q, k, v = (_randn(rng, (1, 2, n, 16), torch.float32, device).requires_grad_(True)
               for n in (t, s, s))
    g = _randn(rng, (1, 2, t, 16), torch.float32, device)

    def run(**kw):
        out, lse = sa.softmax_attention(q, k, v, causal_alignment=alignment, return_lse=True,
                                        **kw)
        return (out, lse) + torch.autograd.grad(out, (q, k, v), g)

    spies = [spy_kernels(monkeypatch, sa, {"_attn_fwd_kernel": "fwd"}),
             spy_kernels(monkeypatch, sb, {"_attn_bwd_dkdv_kernel": "dkdv",
                                           "_attn_bwd_dq_kernel": "dq"})]

    def launches():  # (tag, constexprs) of the kernel launches since the last call
        seen = [c for calls in spies for c in calls]
        for calls in spies:
            calls.clear()
        return seen

    for causal, windows in ((True, [(-1, 0), (-1, 3), (-1, -1)]), (False, [(-1, -1)])):
        plain = run(is_causal=causal)
        for window in windows:
            got = run(is_causal=causal, window_size=window)
            assert all(torch.equal(a, b) for a, b in zip(got, plain)), window
        seen = launches()
        assert len(seen) == 3 * (1 + len(windows))
        assert all(kw["CAUSAL"] == causal and not kw["WINDOW"] for _, kw in seen)
        wide = run(is_causal=causal, window_size=(t + s, t + s))
        assert sorted(tag for tag, kw in launches() if kw["WINDOW"]) == ["dkdv", "dq", "fwd"]
        q64, k64, v64 = (f64(x).requires_grad_(True) for x in (q, k, v))
        o64, l64 = softmax_attention_naive(q64, k64, v64, is_causal=causal,
                                           causal_alignment=alignment, return_lse=True)
        ref = (o64, l64) + torch.autograd.grad(o64, (q64, k64, v64), g.double())
        for name, a, b, r in zip(("out", "lse", "dq", "dk", "dv"), wide, plain, ref):
            keep = torch.isfinite(r)  # (lse -inf of rows without keys: equal in both)
            assert torch.equal(torch.isfinite(a), keep)
            check_rule(a[keep], b[keep], r[keep], "float32", name, FLOOR_GRAD)


@pytest.mark.usefixtures("triton_can_run", "attention_autotune_off")
def test_extreme_windows_and_empty_inputs(device, rng, poisoned_outputs, monkeypatch):
    """Windows of 2^40 keys (their diagonals reach the kernels clamped into int32) bound nothing:
    the plain causal / full results within the rule; rows whose window misses every key give
    0, lse -inf and zero gradients; S = 0 gives 0 and lse -inf, T = 0 empty results."""
    from kernelkit_gpu.attention import _configs as _attn_configs

    sa = _softmax_module()
    diagonals = []  # the SHIFT and LOWER arguments of every launch
    real_launch = _attn_configs.launch

    def launch(kernel, grid, args, kwargs, config):
        named = dict(zip(kernel.arg_names, args))
        diagonals.extend((named["SHIFT"], named["LOWER"]))
        return real_launch(kernel, grid, args, kwargs, config)

    monkeypatch.setattr(_attn_configs, "launch", launch)
    t, s = 37, 29
    q, k, v = (_randn(rng, (1, 2, n, 16), torch.float32, device).requires_grad_(True)
               for n in (t, s, s))
    huge = 2 ** 40
    for causal, window in ((True, (huge, 0)), (False, (huge, huge)), (False, (huge, -1))):
        out, lse = sa.softmax_attention(q, k, v, is_causal=causal, window_size=window,
                                        return_lse=True)
        plain, plain_lse = sa.softmax_attention(q, k, v, is_causal=causal, return_lse=True)
        ref_out, ref_lse = ref_attn.softmax_attention(*(to_numpy64(x) for x in (q, k, v)),
                                                      is_causal=causal, return_lse=True)
        check_rule(out, plain, ref_out, "float32", f"out {window}")
        check_rule(lse, plain_lse, ref_lse, "float32", f"lse {window}")
        torch.autograd.grad(out.sum(), (q, k, v))
    assert len(diagonals) == 2 * 3 * 4 and all(-t <= d <= s for d in diagonals)  # 4 launches
    # top-left (0, 0) with 3 keys: rows i >= 3 have no key i (their tiles hold no key at all)
    far = sa.softmax_attention(q, k[:, :, :3], v[:, :, :3], window_size=(0, 0), return_lse=True)
    rows = torch.arange(t, device=device) >= 3
    assert torch.all(far[0][:, :, rows] == 0) and torch.isneginf(far[1][:, :, rows]).all()
    dq, dk, dv = torch.autograd.grad(far[0].sum(), (q, k, v))
    assert torch.all(dq[:, :, rows] == 0) and torch.isfinite(dq).all()
    assert torch.isfinite(dk).all() and torch.isfinite(dv).all()
    for tq, sk in ((5, 0), (0, 7)):
        out, lse = sa.softmax_attention(q[:, :, :tq], k[:, :, :sk], v[:, :, :sk],
                                        window_size=(2, 1), return_lse=True)
        assert out.shape == (1, 2, tq, 16) and torch.all(out == 0)
        assert lse.shape == (1, 2, tq) and torch.isneginf(lse).all()


@pytest.mark.usefixtures("triton_can_run", "attention_autotune_off")
@pytest.mark.parametrize("window,causal", [((5, 2), False), ((-1, 4), False), ((3, 0), True)],
                         ids=["w5_2", "w-1_4", "w3_0-causal"])
def test_window_gate_routes_non_finite_to_the_twin(window, causal, device, rng, monkeypatch):
    """A windowed call masks keys, so it is gated as a causal one: finite inputs run the Triton
    forward and backward; a NaN value runs the exact twin, which puts the NaN in exactly the
    rows whose window holds that key (the reference's rule); a NaN in dO likewise sends the
    backward to the twin."""
    sa = _softmax_module()
    calls = spy_calls(monkeypatch, [(sa, "attn_fwd", "fwd"), (sa, "attn_bwd", "bwd"),
                                    (sa, "softmax_attention_naive", "twin")])
    t, s, j = 40, 33, 20
    kw = dict(is_causal=causal, window_size=window, causal_alignment="bottom_right")
    q, k, v = (_randn(rng, (1, 2, n, 16), torch.float32, device).requires_grad_(True)
               for n in (t, s, s))
    out = sa.softmax_attention(q, k, v, **kw)
    torch.autograd.grad(out.sum(), (q, k, v))
    assert calls == ["fwd", "bwd"]
    calls.clear()
    out = sa.softmax_attention(q, k, v, **kw)
    g = torch.ones_like(out)
    g[0, 0, 3, 1] = float("nan")
    torch.autograd.grad(out, (q, k, v), g)
    assert calls == ["fwd", "twin"]  # the backward's twin (its forward recomputed)
    calls.clear()
    with torch.no_grad():
        v_nan = v.detach().clone()
        v_nan[0, 1, j, 2] = float("nan")
    out = sa.softmax_attention(q, k, v_nan, **kw)
    assert calls == ["fwd", "twin"]
    ref = ref_attn.softmax_attention(*(to_numpy64(x) for x in (q, k, v_nan)), is_causal=causal,
                                     causal_alignment="bottom_right", window_size=window)
    sees = _visible(t, s, *_band(window, causal, "bottom_right", t, s))[:, j]
    assert sees.any() and not sees.all()
    np.testing.assert_array_equal(np.isnan(to_numpy64(out)[0, 1, :, 2]), sees)
    np.testing.assert_allclose(to_numpy64(out), ref, rtol=1e-5, atol=1e-5)


#: (dtype, D, window, causal, alignment, T, S): every config of the autotuner's sets (GPU)
_EVERY_CONFIG_GPU = [
    ("bfloat16", 64, (37, 0), True, "bottom_right", 300, 257),
    ("bfloat16", 128, (100, 20), False, "top_left", 257, 300),
    ("float16", 64, (64, 64), False, "bottom_right", 300, 257),
    ("float16", 128, (200, -1), False, "top_left", 300, 257),
    ("float32", 64, (-1, 129), False, "bottom_right", 257, 300),
]


@pytest.mark.usefixtures("triton_can_run", "attention_autotune_off")
@pytest.mark.parametrize("idx", range(len(_EVERY_CONFIG_GPU)))
def test_window_every_config(idx, device, rng):
    """Each config the autotuner may pick, forced: the window's tile ranges at every block shape
    (its edges cross the tiles at other offsets), forward and backward within the rule."""
    from kernelkit_gpu.attention import _configs as _attn_configs

    sa = _softmax_module()
    cases = _EVERY_CONFIG_GPU if device == "cuda" else [
        ("bfloat16", 32, (9, 3), False, "bottom_right", 45, 37)]
    if idx >= len(cases):
        pytest.skip("fewer cases on this device")
    dt, d, window, causal, alignment, t, s = cases[idx]
    dtype = ATTN_DTYPES[dt]
    q, k, v = (_randn(rng, (1, n_h, n, d), dtype, device) for n_h, n in ((4, t), (2, s), (2, s)))
    kw = dict(is_causal=causal, causal_alignment=alignment, window_size=window, enable_gqa=True)
    q64, k64, v64 = (f64(x).requires_grad_(True) for x in (q, k, v))
    o64 = softmax_attention_naive(q64, k64, v64, **kw)
    g = torch.from_numpy(rng.standard_normal(o64.shape)).to(device)
    ref_grads = torch.autograd.grad(o64, (q64, k64, v64), g)
    qn, kn, vn = (x.detach().clone().requires_grad_(True) for x in (q, k, v))
    n_out = softmax_attention_naive(qn, kn, vn, **kw)
    n_grads = torch.autograd.grad(n_out, (qn, kn, vn), g.to(dtype))
    lower, upper = _band(window, causal, alignment, t, s)
    cands = _attn_configs.candidate_configs(dtype, d, d)
    for c in cands["fwd"]:
        out, lse2 = sa.attn_fwd(q, k, v, shift=upper, lower=lower, scale=d ** -0.5, config=c)
        check_rule(out, n_out, o64, dt, f"out with {c}")
    for i in range(max(len(cands["dkdv"]), len(cands["dq"]))):
        ckv = cands["dkdv"][min(i, len(cands["dkdv"]) - 1)]
        cq = cands["dq"][min(i, len(cands["dq"]) - 1)]
        grads = sa.attn_bwd(g.to(dtype), q, k, v, out, lse2, None, shift=upper, lower=lower,
                            scale=d ** -0.5, configs=(ckv, cq))
        for name, a, b, r in zip(("dq", "dk", "dv"), grads, n_grads, ref_grads):
            check_rule(a, b, r, dt, f"{name} with {ckv} / {cq}", FLOOR_GRAD)


@pytest.mark.usefixtures("triton_can_run", "attention_autotune_off")
@pytest.mark.parametrize("window,exc,match", BAD_WINDOWS, ids=_BAD_IDS)
def test_bad_window_size_triton_paths(window, exc, match, device):
    """The Triton entry points refuse bad window sizes as the PyTorch paths do (dense, varlen,
    the public API with backend "triton")."""
    from kernelkit_gpu.attention.varlen import softmax_attention_varlen

    sa = _softmax_module()
    q = torch.zeros(1, 2, 5, 16, device=device)
    packed = torch.zeros(5, 2, 16, device=device)
    cu = torch.tensor([0, 2, 5], dtype=torch.int32, device=device)
    calls = [
        lambda: sa.softmax_attention(q, q, q, window_size=window),
        lambda: softmax_attention_varlen(packed, packed, packed, cu, window_size=window),
        lambda: softmax_attention(q, q, q, window_size=window, backend="triton"),
        lambda: softmax_attention(packed, packed, packed, cu_seqlens=cu, window_size=window,
                                  backend="triton"),
    ]
    for call in calls:
        with pytest.raises(exc, match=match):
            call()


@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
@pytest.mark.parametrize("window,causal", [((128, 0), True), ((64, 64), False), ((300, 7), False)],
                         ids=["w128_0-causal", "w64_64", "w300_7"])
def test_window_matches_masked_sdpa_on_gpu(window, causal, dt, device, rng):
    """On the GPU: output and gradients as close to the float64 reference as torch SDPA's with
    the window as an explicit boolean mask (every row sees a key: T = S)."""
    if device != "cuda":
        pytest.skip("compares with torch SDPA on the GPU (the CPU cases: the naive rule)")
    import torch.nn.functional as F

    sa = _softmax_module()
    dtype = ATTN_DTYPES[dt]
    t = 1000
    q, k, v = (_randn(rng, (2, 4, t, 64), dtype, device).requires_grad_(True) for _ in range(3))
    out = sa.softmax_attention(q, k, v, is_causal=causal, window_size=window)
    mask = torch.from_numpy(_visible(t, t, *_band(window, causal, "top_left", t, t))).to(device)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    q64, k64, v64 = (f64(x).requires_grad_(True) for x in (q, k, v))
    o64 = softmax_attention_naive(q64, k64, v64, is_causal=causal, window_size=window)
    check_rule(out, ref, o64, dt, "out vs masked sdpa")
    g = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), g)
    sdpa_grads = torch.autograd.grad(ref, (q, k, v), g)
    ref_grads = torch.autograd.grad(o64, (q64, k64, v64), g.double())
    for name, a, b, r in zip(("dq", "dk", "dv"), grads, sdpa_grads, ref_grads):
        check_rule(a, b, r, dt, name + " vs masked sdpa", FLOOR_GRAD)
