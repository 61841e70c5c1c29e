"""Packed variable-length batches (``cu_seqlens``) in :func:`kernelkit.attention.softmax_attention`
(Triton varlen kernels) and :func:`kernelkit.attention.linear_attention` (a per-sequence loop).

The references are per-sequence loops of the float64 references of :mod:`kernelkit_math.attention`
(outputs, lse) and float64 torch autograd through the per-sequence dense twins (gradients); a
varlen kernel must follow the FlashAttention rule of the dense tests against them
(:func:`tests.gpu_cases.check_rule`), with every buffer NaN-poisoned and the Triton launchers
proven to run. Sequences of length 0 and 1 and odd lengths are in every case.
"""

import importlib

import numpy as np
import pytest
import torch

from kernelkit.attention import linear_attention, softmax_attention
from kernelkit_gpu.attention.linear_naive import linear_attention_naive
from kernelkit_gpu.attention.naive import softmax_attention_naive
from kernelkit_math import attention as ref_attn
from tests.conftest import TOL
from tests.gpu_cases import ATTN_DTYPES, FLOOR_GRAD, check_rule, f64, spy_calls, to_numpy64

pytestmark = pytest.mark.usefixtures("triton_can_run", "attention_autotune_off")

#: Lengths of the packed sequences: empty ones (first, middle, last), length 1, odd lengths
#: below and above the interpreter's 32-row tiles.
LENGTHS = {"cpu": [0, 1, 37, 0, 63, 5, 0], "cuda": [0, 1, 37, 0, 263, 5, 130, 1000, 0]}


def _cu(lengths, device, dtype=torch.int32):
    return torch.tensor(np.concatenate([[0], np.cumsum(lengths)]), dtype=dtype, device=device)


def _packed(rng, total, h, d, dtype, device):
    x = torch.from_numpy(rng.standard_normal((total, h, d))).to(dtype=dtype, device=device)
    return x.requires_grad_(True)


def _bounds(lengths):
    cu = np.concatenate([[0], np.cumsum(lengths)]).astype(int)
    return list(zip(cu[:-1], cu[1:]))


def _dense(x, s, e):
    """(1, H, L, D) view of one sequence."""
    return x[s:e].transpose(0, 1).unsqueeze(0)


def _ref_softmax(q, k, v, lengths, causal, scale):
    """Per-sequence float64 kernelkit_math reference: out (total, H, Dv), lse (H, total)."""
    h, dv = q.shape[1], v.shape[2]
    out = np.zeros((q.shape[0], h, dv))
    lse = np.zeros((h, q.shape[0]))
    rep = q.shape[1] // k.shape[1]
    for s, e in _bounds(lengths):
        if e == s:
            continue
        qs, ks, vs = (to_numpy64(_dense(t, s, e))[0] for t in (q, k, v))
        ks, vs = np.repeat(ks, rep, axis=0), np.repeat(vs, rep, axis=0)
        o, l = ref_attn.softmax_attention(qs, ks, vs, is_causal=causal, scale=scale,
                                          return_lse=True)
        out[s:e] = o.transpose(1, 0, 2)
        lse[:, s:e] = l
    return out, lse


def _naive_loop(q, k, v, lengths, causal, scale, dtype=None):
    """Per-sequence loop of the dense plain-PyTorch twin (``dtype``: cast first, e.g. float64)."""
    outs, lses = [], []
    for s, e in _bounds(lengths):
        qs, ks, vs = (_dense(t if dtype is None else t.to(dtype), s, e) for t in (q, k, v))
        o, l = softmax_attention_naive(qs, ks, vs, is_causal=causal, scale=scale,
                                       enable_gqa=True, return_lse=True)
        outs.append(o[0].transpose(0, 1))
        lses.append(l[0])
    return torch.cat(outs, 0), torch.cat(lses, 1)


# (causal, dtype, H, H_kv, D)
CASES = [
    (False, "float32", 2, 2, 16),
    (True, "float32", 2, 1, 24),
    (False, "float16", 2, 1, 16),
    (True, "float16", 2, 2, 16),
    (False, "bfloat16", 2, 2, 16),
    (True, "bfloat16", 4, 2, 16),
]


@pytest.mark.parametrize("causal,dt,h,hkv,d", CASES,
                         ids=[f"{'causal' if c[0] else 'full'}-{c[1]}-H{c[2]}kv{c[3]}-D{c[4]}"
                              for c in CASES])
def test_softmax_varlen_matches_per_sequence_loop(causal, dt, h, hkv, d, device, rng,
                                                  poisoned_outputs, monkeypatch):
    """Output, lse and dq, dk, dv of the varlen kernels against the per-sequence references
    (FlashAttention rule), buffers poisoned, the Triton launchers spied."""
    from tests.test_gpu_softmax_attention import gradient_term_scales

    sa = importlib.import_module("kernelkit_gpu.attention.softmax")  # Triton: imported here, so
    # that the module collects where triton is missing (.ci/run's step without it)
    calls = spy_calls(monkeypatch, [(sa, "attn_fwd", "fwd"), (sa, "attn_bwd", "bwd")])
    lengths = LENGTHS[device]
    total = int(sum(lengths))
    dtype = ATTN_DTYPES[dt]
    q = _packed(rng, total, h, d, dtype, device)
    k = _packed(rng, total, hkv, d, dtype, device)
    v = _packed(rng, total, hkv, d, dtype, device)
    cu = _cu(lengths, device)
    scale = 0.4
    out, lse = softmax_attention(q, k, v, cu_seqlens=cu, is_causal=causal, scale=scale,
                                 enable_gqa=hkv != h, return_lse=True)
    assert calls == ["fwd"]
    assert out.shape == (total, h, d) and out.dtype == dtype and out.is_contiguous()
    assert lse.shape == (h, total) and lse.dtype == torch.float32

    ref_out, ref_lse = _ref_softmax(q, k, v, lengths, causal, scale)
    n_out, n_lse = _naive_loop(q, k, v, lengths, causal, scale)
    check_rule(out, n_out, ref_out, dt, "out")
    check_rule(lse, n_lse, ref_lse, dt, "lse")

    g_out = torch.from_numpy(rng.standard_normal(out.shape)).to(device)
    g_lse = torch.from_numpy(rng.standard_normal(lse.shape)).to(device)

    def loss(o, l):
        return (o.to(g_out.dtype) * g_out).sum() + (l.to(g_lse.dtype) * g_lse).sum()

    grads = torch.autograd.grad(loss(out, lse), (q, k, v))
    assert calls == ["fwd", "bwd"]
    n_grads = torch.autograd.grad(loss(n_out, n_lse), (q, k, v))
    q64, k64, v64 = (f64(t).requires_grad_(True) for t in (q, k, v))
    r_out, r_lse = _naive_loop(q64, k64, v64, lengths, causal, scale)
    r_grads = torch.autograd.grad(loss(r_out, r_lse), (q64, k64, v64))
    # the cancellation floor of the dense tests, per sequence (gradient_term_scales)
    t_dq = t_dk = 0.0
    for s, e in _bounds(lengths):
        if e > s:
            a, b, _ = gradient_term_scales(*(_dense(t, s, e) for t in (q, k, v)),
                                           _dense(g_out, s, e), g_lse[None, :, s:e],
                                           0 if causal else None, scale)
            t_dq, t_dk = max(t_dq, a), max(t_dk, b)
    for name, g, ng, rg, term in zip("q k v".split(), grads, n_grads, r_grads, (t_dq, t_dk, 0)):
        assert g.shape == rg.shape and torch.isfinite(g).all(), name
        check_rule(g, ng, rg, dt, f"d{name}", FLOOR_GRAD, term)


def test_softmax_varlen_rows_see_only_their_sequence(device, rng):
    """A NaN in one sequence's keys and values changes no other sequence (non-causal calls are
    not gated: the kernels must never read another sequence's keys), and changing another
    sequence leaves a sequence's output bit for bit."""
    lengths = [5, 40, 1, 33]
    total = sum(lengths)
    q, k, v = (_packed(rng, total, 2, 16, torch.float32, device).detach() for _ in range(3))
    cu = _cu(lengths, device, torch.int64)
    base = softmax_attention(q, k, v, cu_seqlens=cu)
    k2, v2 = k.clone(), v.clone()
    k2[5:45, 1] = float("nan")
    v2[5:45, 0] = float("inf")
    got = softmax_attention(q, k2, v2, cu_seqlens=cu)
    keep = torch.ones(total, dtype=torch.bool)
    keep[5:45] = False
    assert torch.equal(got[keep], base[keep])
    assert torch.isnan(got[5:45]).any()


def test_softmax_varlen_causal_non_finite_is_the_twin(device, rng):
    """Causal varlen with a NaN value follows the masked-keys-absent rule (the gate's twin): the
    NaN reaches the rows of its sequence at and after it, nothing else; so do the gradients."""
    lengths = [7, 20, 9]
    total = sum(lengths)
    q, k, v = (_packed(rng, total, 2, 16, torch.float32, device) for _ in range(3))
    with torch.no_grad():
        v[7 + 12, 1, 3] = float("nan")
    cu = _cu(lengths, device)
    out = softmax_attention(q, k, v, cu_seqlens=cu, is_causal=True)
    bad = torch.zeros(total, dtype=torch.bool)
    bad[19:27] = True
    assert torch.isnan(out[bad]).any(dim=(1, 2)).all()
    assert torch.isfinite(out[~bad]).all()
    ref, _ = _naive_loop(q.detach().double(), k.detach().double(), v.detach().double(), lengths,
                         True, None)
    torch.testing.assert_close(out[~bad].double(), ref[~bad], rtol=1e-5, atol=1e-5)
    dq, dk, dv = torch.autograd.grad(out[~bad].sum(), (q, k, v))
    other = torch.ones(total, dtype=torch.bool)
    other[7:27] = False  # the other sequences: untouched by the NaN
    assert all(torch.isfinite(g[other]).all() for g in (dq, dk, dv))
    assert torch.isfinite(dq[7:19]).all()  # rows before the NaN value do not see it


def test_softmax_varlen_float64_and_all_empty(rng):
    """float64 runs the per-sequence twin; empty sequences only (total 0) give empty results."""
    lengths = [3, 0, 4]
    q, k, v = (_packed(rng, 7, 2, 8, torch.float64, "cpu") for _ in range(3))
    out, lse = softmax_attention(q, k, v, cu_seqlens=_cu(lengths, "cpu"), is_causal=True,
                                 return_lse=True)
    ref_out, ref_lse = _ref_softmax(q, k, v, lengths, True, None)
    np.testing.assert_allclose(to_numpy64(out), ref_out, **TOL["float64"])
    np.testing.assert_allclose(to_numpy64(lse), ref_lse, **TOL["float64"])
    z = torch.zeros((0, 2, 16))
    for dtype in (torch.float32, torch.float64):
        out, lse = softmax_attention(z.to(dtype), z.to(dtype), z.to(dtype),
                                     cu_seqlens=_cu([0, 0], "cpu"), return_lse=True)
        assert out.shape == (0, 2, 16) and lse.shape == (2, 0)


BAD_CU = [
    (lambda d: torch.tensor([0.0, 3.0, 8.0], device=d), TypeError, "int32 or int64"),
    (lambda d: [0, 3, 8], TypeError, "torch.Tensor"),
    (lambda d: torch.tensor([[0, 3, 8]], dtype=torch.int32, device=d), ValueError, "shape"),
    (lambda d: torch.tensor([0], dtype=torch.int32, device=d), ValueError, "n_seqs >= 1"),
    (lambda d: torch.tensor([1, 3, 8], dtype=torch.int32, device=d), ValueError, "start at 0"),
    (lambda d: torch.tensor([0, 5, 3, 8], dtype=torch.int32, device=d), ValueError,
     "non-decreasing"),
    (lambda d: torch.tensor([0, 3, 7], dtype=torch.int32, device=d), ValueError, "end at"),
    (lambda d: torch.tensor([0, 3, 9], dtype=torch.int64, device=d), ValueError, "end at"),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("make,exc,match", BAD_CU, ids=[m for _, _, m in BAD_CU])
def test_bad_cu_seqlens(make, exc, match, dtype, device):
    """Each bad cu_seqlens gets its own clear error, on the Triton path (values read after the
    launch) and on the per-sequence path, for softmax and linear attention."""
    q = torch.randn(8, 2, 16, dtype=dtype, device=device)
    with pytest.raises(exc, match=match):
        softmax_attention(q, q, q, cu_seqlens=make(device))
    with pytest.raises(exc, match=match):
        linear_attention(q, q, q, cu_seqlens=make(device))


def test_bad_packed_arguments(device):
    q = torch.randn(8, 2, 16, device=device)
    cu = _cu([3, 5], device)
    with pytest.raises(ValueError, match="max_seqlen = 4"):
        softmax_attention(q, q, q, cu_seqlens=cu, max_seqlen=4)
    with pytest.raises(TypeError, match="max_seqlen"):
        softmax_attention(q, q, q, cu_seqlens=cu, max_seqlen=4.0)
    with pytest.raises(ValueError, match="only read with cu_seqlens"):
        softmax_attention(q[None], q[None], q[None], max_seqlen=8)
    with pytest.raises(ValueError, match=r"\(total_tokens, H, D\)"):
        softmax_attention(q[None], q[None], q[None], cu_seqlens=cu)
    with pytest.raises(ValueError, match="same packed tokens"):
        softmax_attention(q, q[:7], q[:7], cu_seqlens=cu)
    if device == "cpu":
        with pytest.raises(ValueError, match="q's device"):
            softmax_attention(q, q, q, cu_seqlens=cu.to("meta"))
    assert softmax_attention(q, q, q, cu_seqlens=cu, max_seqlen=5).shape == (8, 2, 16)


# ------------------------------------------------------------------------------ linear
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dt", ["float32", "bfloat16"])
def test_linear_varlen_matches_per_sequence_reference(causal, dt, device, rng, poisoned_outputs):
    """Output and final states (one initial state per sequence) against the per-sequence
    float64 kernelkit_math reference; gradients against float64 autograd through the dense twin
    per sequence. An empty sequence's final state is its initial state."""
    lengths = [3, 0, 1, 37, 21]
    total, n = sum(lengths), len(lengths)
    dtype = ATTN_DTYPES[dt]
    q, k, v = (_packed(rng, total, 2, 16, dtype, device) for _ in range(3))
    s0 = torch.from_numpy(rng.random((n, 2, 16, 16))).to(device).requires_grad_(True)
    z0 = torch.from_numpy(rng.random((n, 2, 16)) + 1.0).to(device).requires_grad_(True)
    cu = _cu(lengths, device)
    out, (sf, zf) = linear_attention(q, k, v, cu_seqlens=cu, is_causal=causal,
                                     initial_state=(s0, z0), return_state=True)
    assert out.shape == (total, 2, 16) and sf.shape == s0.shape and zf.shape == z0.shape
    # max error relative to max(1, max |reference|): bfloat16 keeps 8 bits (2^-8 ~ 4e-3) and the
    # kernels round phi(q), phi(k) and the state to it; float32 accumulates ~T units of 6e-8.
    rel = {"float32": 2e-5, "bfloat16": 2e-2}[dt]

    def close(got, want):
        got, want = to_numpy64(got) if isinstance(got, torch.Tensor) else got, to_numpy64(want) \
            if isinstance(want, torch.Tensor) else want
        assert np.abs(got - want).max(initial=0.0) <= rel * max(1.0, np.abs(want).max(initial=0.0))

    for i, (s, e) in enumerate(_bounds(lengths)):
        o, (rs, rz) = ref_attn.linear_attention(
            *(to_numpy64(_dense(t, s, e))[0] for t in (q, k, v)), "elu+1", is_causal=causal,
            initial_state=(to_numpy64(s0[i]), to_numpy64(z0[i])), return_state=True)
        close(out[s:e], o.transpose(1, 0, 2))
        close(sf[i], rs)
        close(zf[i], rz)
    # the empty sequence: its final state is its initial state (used as float32)
    assert torch.equal(sf[1], s0[1].detach().to(sf.dtype))
    assert torch.equal(zf[1], z0[1].detach().to(zf.dtype))

    g = torch.from_numpy(rng.standard_normal(out.shape)).to(device)
    grads = torch.autograd.grad((out.double() * g).sum() + sf.sum(), (q, k, v, s0, z0))
    leaves = [f64(t).requires_grad_(True) for t in (q, k, v, s0, z0)]
    outs, finals = [], []
    for i, (s, e) in enumerate(_bounds(lengths)):
        o, (rs, _) = linear_attention_naive(
            *(_dense(t, s, e) for t in leaves[:3]), is_causal=causal,
            initial_state=(leaves[3][i:i + 1], leaves[4][i:i + 1]), return_state=True)
        outs.append(o[0].transpose(0, 1))
        finals.append(rs)
    ref = torch.autograd.grad((torch.cat(outs) * g).sum() + torch.cat(finals).sum(), leaves)
    rel *= 2  # gradients: one more product of rounded terms
    for got, want in zip(grads, ref):
        close(got, want)


def test_linear_varlen_initial_state_per_sequence(device):
    q = torch.randn(8, 2, 16, device=device)
    s0, z0 = torch.zeros(1, 2, 16, 16, device=device), torch.zeros(1, 2, 16, device=device)
    with pytest.raises(ValueError, match="one state per sequence"):
        linear_attention(q, q, q, cu_seqlens=_cu([3, 5], device), initial_state=(s0, z0))


@pytest.mark.parametrize("lengths", [[0, 1, 37, 0, 63, 5, 0], [300], [1] * 40 + [129]],
                         ids=["mixed", "one", "many"])
def test_tile_table_covers_every_tile_once(lengths, device):
    """For every block size, the table's real rows are exactly the tiles of the packing (each
    once, inside its sequence), the rest (0, 0, 0); the validity flag is set."""
    from kernelkit_gpu.attention import _varlen

    total = sum(lengths)
    table, ok = _varlen.tile_table(_cu(lengths, device), total)
    assert int(ok) == 1
    table = table.cpu().numpy()
    n, at = len(lengths), 0
    for block in _varlen.TABLE_BLOCKS:
        rows = table[at:at + _varlen.table_rows(total, n, block)]
        at += len(rows)
        want = sorted((s, e - s, m0) for s, e in _bounds(lengths) for m0 in range(0, e - s, block))
        real = [tuple(r) for r in rows if r[1] > 0]
        assert sorted(real) == want
        assert all(tuple(r) == (0, 0, 0) for r in rows if r[1] == 0)
    assert at == len(table)


def test_every_config_has_a_tile_table(monkeypatch):
    """Every query / key block size of the GPU config sets (and of the float32 and interpreter
    ones) has a table: the varlen kernels locate their rows from it."""
    from kernelkit_gpu import _launch
    from kernelkit_gpu.attention import _configs, _varlen

    sets = [_configs.fwd_configs(), _configs.dkdv_configs(), _configs.dq_configs()]
    monkeypatch.setattr(_launch, "INTERPRET", False)
    sets += [_configs.fwd_configs(), _configs.dkdv_configs(), _configs.dq_configs(),
             list(_configs._FP32_CONFIGS.values())]
    for c in (c for s in sets for c in s):
        block = c.kwargs.get("BLOCK_M", c.kwargs.get("BLOCK_N1", c.kwargs.get("BLOCK_M2")))
        assert block in _varlen.TABLE_BLOCKS, c
    with pytest.raises(RuntimeError, match="no tile table"):
        _varlen.table_rows(100, 3, 256)


def pytest_generate_tests(metafunc):
    """test_varlen_every_config: the GPU's config sets differ per dtype and head dim; the
    interpreter has one config, so one case covers it."""
    if "config_case" in metafunc.fixturenames:
        if metafunc.config.getoption("--device") == "cuda":
            cases = [(dt, d, c) for dt, d in [("bfloat16", 64), ("bfloat16", 128), ("float16", 64),
                                              ("float32", 64)] for c in (False, True)]
        else:
            cases = [("float32", 32, True)]
        metafunc.parametrize("config_case", cases,
                             ids=[f"{dt}-D{d}-{'causal' if c else 'full'}" for dt, d, c in cases])


def test_varlen_every_config(config_case, device, rng):
    """Each config the autotuner may pick (after pruning), forced through the varlen launchers:
    every block size reads its own tile table."""
    dt, d, causal = config_case
    from kernelkit_gpu.attention import _configs, _varlen
    from kernelkit_gpu.attention.varlen_naive import to_batch

    sa = importlib.import_module("kernelkit_gpu.attention.softmax")
    lengths = LENGTHS[device]
    total = int(sum(lengths))
    dtype = ATTN_DTYPES[dt]
    q, k, v = (_packed(rng, total, 2, d, dtype, device).detach() for _ in range(3))
    cu = _cu(lengths, device)
    table, _ = _varlen.tile_table(cu, total)
    varlen = (table, len(lengths))
    q64, k64, v64 = (f64(t).requires_grad_(True) for t in (q, k, v))
    o64, _ = _naive_loop(q64, k64, v64, lengths, causal, None)
    g = torch.from_numpy(rng.standard_normal(o64.shape)).to(device)
    ref_grads = torch.autograd.grad(o64, (q64, k64, v64), g)
    qn, kn, vn = (t.clone().requires_grad_(True) for t in (q, k, v))
    n_out, _ = _naive_loop(qn, kn, vn, lengths, causal, None)
    n_grads = torch.autograd.grad(n_out, (qn, kn, vn), g.to(dtype))
    qb, kb, vb, gb = (to_batch(t) for t in (q, k, v, g.to(dtype)))
    shift = 0 if causal else None
    cands = _configs.candidate_configs(dtype, d, d)
    for c in cands["fwd"]:
        out, lse2 = sa.attn_fwd(qb, kb, vb, shift=shift, scale=d ** -0.5, config=c, varlen=varlen)
        check_rule(out[0].transpose(0, 1), n_out, o64, dt, f"out with {c}")
    for i in range(max(len(cands["dkdv"]), len(cands["dq"]))):
        ckv = cands["dkdv"][min(i, len(cands["dkdv"]) - 1)]
        cq = cands["dq"][min(i, len(cands["dq"]) - 1)]
        grads = sa.attn_bwd(gb, qb, kb, vb, out, lse2, None, shift=shift, scale=d ** -0.5,
                            configs=(ckv, cq), varlen=varlen)
        for name, a, b, r in zip(("dq", "dk", "dv"), grads, n_grads, ref_grads):
            check_rule(a[0].transpose(0, 1), b, r, dt, f"{name} with {ckv} / {cq}", FLOOR_GRAD)


def test_softmax_varlen_causal_non_finite_gradient_is_the_twin(device):
    """A NaN in the incoming gradient of a causal varlen call (the backward's gate, twin by
    sequence): it reaches dq of its row and dk, dv of the keys that row sees, nothing else."""
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(40, 2, 16, generator=gen).to(device).requires_grad_(True)
               for _ in range(3))
    out = softmax_attention(q, k, v, cu_seqlens=_cu([10, 30], device), is_causal=True)
    g = torch.randn(out.shape, generator=gen).to(device)
    g[15, 0, 0] = float("nan")
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), g)
    assert all(torch.isfinite(t[:10]).all() for t in (dq, dk, dv))  # the other sequence
    assert torch.isfinite(dq[10:15]).all() and torch.isnan(dq[15]).any()
    assert torch.isfinite(dq[16:]).all()
    assert torch.isfinite(dk[16:]).all() and torch.isfinite(dv[16:]).all()
    assert torch.isnan(dk[10:16]).any() and torch.isnan(dv[10:16]).any()
