"""Local + summary attention: the float64 reference (kernelkit_math.attention_local) against a
row-by-row implementation written here, its invariants, its plain-PyTorch twin, and its accuracy
on real heads (all-MiniLM-L6-v2, tests/data/real_heads.npz: issue 20's floors).

The Triton forward is tested in tests/test_gpu_local_attention.py.
"""

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from kernelkit.attention.comparison.methods import method_names, parse_method
from kernelkit_gpu.attention.local_naive import block_summaries, local_attention_naive
from kernelkit_math.attention import softmax_attention
from kernelkit_math.attention_local import (check_local_args, keys_per_row, local_attention,
                                            local_weights)
from kernelkit_math.attention_local import block_summaries as block_summaries64

REAL_HEADS = Path(__file__).resolve().parent / "data" / "real_heads.npz"
#: favor+:1024's mean output error on these heads: 0.75 in issue 20's table, 0.777 measured with
#: kernelkit.attention.compare (seed 0; 7 s on the CI machine, hence the constant: the smaller one).
FAVOR_1024_ERROR = 0.75


def _rowwise(q, k, v, block, window, is_causal, scale):
    """Local + summary attention for one head, one query at a time, from the module's formulas
    (plain loops over blocks and keys; independent of the vectorised reference)."""
    T = q.shape[0]
    G = math.ceil(T / block)
    members = [list(range(g * block, min(T, (g + 1) * block))) for g in range(G)]
    summaries = []
    for idx in members:
        qbar = q[idx].mean(0)
        z = np.array([scale * qbar @ k[j] for j in idx])
        w = np.exp(z - z.max())
        w /= w.sum()
        kbar = sum(wj * k[j] for wj, j in zip(w, idx))
        vbar = sum(wj * v[j] for wj, j in zip(w, idx))
        mass = sum(math.exp(scale * qbar @ (k[j] - kbar)) for j in idx)
        summaries.append((kbar, vbar, math.log(mass)))
    out = np.zeros((T, v.shape[1]))
    for i in range(T):
        b = i // block
        scores, values = [], []
        for g in range(G):
            near = (b - window <= g <= b) if is_causal else abs(g - b) <= window
            far = g < b - window if is_causal else abs(g - b) > window
            if near:
                for j in members[g]:
                    if not is_causal or j <= i:
                        scores.append(scale * q[i] @ k[j])
                        values.append(v[j])
            elif far:
                kbar, vbar, bias = summaries[g]
                scores.append(scale * q[i] @ kbar + bias)
                values.append(vbar)
        s = np.array(scores)
        p = np.exp(s - s.max())
        out[i] = (p / p.sum()) @ np.array(values)
    return out


def _qkv(rng, T, D=5, Dv=3, lead=(2,), offset=0.0):
    q = rng.standard_normal(lead + (T, D))
    k = rng.standard_normal(lead + (T, D)) + offset
    v = rng.standard_normal(lead + (T, Dv)) + offset
    return q, k, v


# ----------------------------------------------------------------------------- the reference
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("T,block,window", [(1, 4, 1), (63, 8, 1), (63, 16, 0), (40, 7, 2)])
def test_reference_matches_a_row_by_row_computation(rng, T, block, window, causal):
    q, k, v = _qkv(rng, T)
    got = local_attention(q, k, v, block=block, window=window, is_causal=causal, scale=0.7)
    for h in range(2):
        want = _rowwise(q[h], k[h], v[h], block, window, causal, 0.7)
        np.testing.assert_allclose(got[h], want, rtol=1e-12, atol=1e-12)  # float64, O(T) sums


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_a_window_over_every_block_is_softmax_attention(rng, causal):
    q, k, v = _qkv(rng, 63)
    got = local_attention(q, k, v, block=8, window=8, is_causal=causal)
    np.testing.assert_allclose(got, softmax_attention(q, k, v, is_causal=causal),
                               rtol=1e-12, atol=1e-12)  # float64


def test_summary_weight_is_exact_for_the_block_mean_query(rng):
    """exp(scale qbar_g·kbar_g + bias_g) = sum_j exp(scale qbar_g·k_j) and vbar_g is the block's
    exact softmax average for the query qbar_g."""
    q, k, v = _qkv(rng, 20, lead=())
    kbar, vbar, bias, _ = block_summaries64(q, k, v, block=8, scale=0.5)
    for g, idx in enumerate([range(0, 8), range(8, 16), range(16, 20)]):
        idx = list(idx)
        qbar = q[idx].mean(0)
        e = np.exp(0.5 * k[idx] @ qbar)
        np.testing.assert_allclose(np.exp(0.5 * qbar @ kbar[g] + bias[g]), e.sum(), rtol=1e-12)
        np.testing.assert_allclose(vbar[g], e @ v[idx] / e.sum(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("offset", [0.0, 1000.0], ids=["centred", "offset1000"])
def test_weights_are_a_distribution_and_give_the_output(rng, causal, offset):
    q, k, v = _qkv(rng, 63, offset=offset)
    A, den = local_weights(q, k, block=8, window=1, is_causal=causal)
    assert (A >= 0).all() and (den >= 1).all()
    np.testing.assert_allclose(A.sum(-1), 1.0, rtol=1e-12)
    out = local_attention(q, k, v, block=8, window=1, is_causal=causal)
    np.testing.assert_allclose(A @ v, out, rtol=1e-12, atol=1e-12 * max(1.0, offset))
    if causal:
        assert (np.triu(A, 1) == 0).all()


def test_causal_rows_do_not_depend_on_later_positions(rng):
    q, k, v = _qkv(rng, 50)
    before = local_attention(q, k, v, block=8, window=1, is_causal=True)
    q2, k2, v2 = q.copy(), k.copy(), v.copy()
    for t in (q2, k2, v2):
        t[:, 30:] = rng.standard_normal(t[:, 30:].shape) * 10
    after = local_attention(q2, k2, v2, block=8, window=1, is_causal=True)
    np.testing.assert_array_equal(after[:, :30], before[:, :30])
    assert not np.allclose(after[:, 30:], before[:, 30:])


def test_inputs_are_not_modified(rng):
    q, k, v = _qkv(rng, 20)
    copies = [t.copy() for t in (q, k, v)]
    local_attention(q, k, v, block=4)
    local_weights(q, k, block=4)
    for t, c in zip((q, k, v), copies):
        np.testing.assert_array_equal(t, c)


def test_keys_per_row_counts_window_keys_and_summaries():
    A, _ = local_weights(np.zeros((40, 2)), np.zeros((40, 2)), block=8, window=1)
    # every row of block 2 (the middle) sees 24 keys and 2 summaries
    assert keys_per_row(40, 8, 1) == 26
    assert keys_per_row(512, 32, 1) == 96 + 13
    assert keys_per_row(512, 32, 1, is_causal=True) == 64 + 14
    assert keys_per_row(10, 32, 3) == 10
    assert A.shape == (40, 40)


@pytest.mark.parametrize("kwargs,err,match", [
    (dict(block=0), ValueError, "block must be an integer >= 1"),
    (dict(block=2.5), TypeError, "block must be an integer"),
    (dict(block=True), TypeError, "block must be an integer"),
    (dict(window=-1), ValueError, "window must be an integer >= 0"),
    (dict(scale=0.0), ValueError, "scale must be a finite number > 0"),
    (dict(scale="x"), TypeError, "scale must be a positive number"),
])
def test_reference_rejects_bad_settings(kwargs, err, match):
    x = np.zeros((4, 2))
    with pytest.raises(err, match=match):
        local_attention(x, x, x, **kwargs)


def test_reference_rejects_cross_attention_and_bad_v():
    with pytest.raises(ValueError, match="self-attention"):
        local_attention(np.zeros((4, 2)), np.zeros((5, 2)), np.zeros((5, 2)))
    with pytest.raises(ValueError, match="v must have shape"):
        local_attention(np.zeros((4, 2)), np.zeros((4, 2)), np.zeros((5, 2)))
    assert check_local_args(np.int64(3), 0) == (3, 0)


# ------------------------------------------------------------------------------------- twin
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("T,block,window", [(1, 16, 1), (63, 16, 1), (63, 7, 0), (100, 32, 2)])
def test_twin_float64_matches_the_reference(rng, T, block, window, causal):
    q, k, v = _qkv(rng, T, D=8, Dv=6, lead=(2, 3), offset=0.0)
    k += 1000.0  # the scores shift by q·1000 in every row: softmax (and the method) ignore it
    got = local_attention_naive(*(torch.from_numpy(t) for t in (q, k, v)), block=block,
                                window=window, is_causal=causal)
    want = local_attention(q, k, v, block=block, window=window, is_causal=causal)
    # float64 with scores of size |q|·1000·scale ~ 1e3: cancellation leaves ~1e3 eps
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-10, atol=1e-10)


def test_twin_summaries_match_the_reference(rng):
    q, k, v = _qkv(rng, 37, D=4, Dv=3, lead=(1, 2))
    got = block_summaries(*(torch.from_numpy(t) for t in (q, k, v)), 8, 0.3)
    want = block_summaries64(q, k, v, block=8, scale=0.3)[:3]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w, rtol=1e-12, atol=1e-12)  # float64


def test_twin_gradients_match_finite_differences(rng):
    q, k, v = (torch.from_numpy(t).requires_grad_(True)
               for t in _qkv(rng, 11, D=3, Dv=2, lead=(1, 1)))
    assert torch.autograd.gradcheck(
        lambda a, b, c: local_attention_naive(a, b, c, block=3, window=1, is_causal=True),
        (q, k, v), eps=1e-6, atol=1e-6)


def test_twin_rejects_cross_attention():
    x, y = torch.zeros(1, 1, 4, 2), torch.zeros(1, 1, 5, 2)
    with pytest.raises(ValueError, match="same length T"):
        local_attention_naive(x, y, y)
    with pytest.raises(ValueError, match="window must be an integer >= 0"):
        local_attention_naive(x, x, x, window=-2)


# ------------------------------------------------------------------------------- real heads
@pytest.mark.skipif(not REAL_HEADS.exists(), reason="tests/data/real_heads.npz not present")
def test_real_heads_error_floor():
    """Issue 20's floor at <= 128 keys per row on every head of the fixture (2 layers x 12
    heads of all-MiniLM-L6-v2, T = 512, D = 32): mean output relative error <= 0.35 and
    <= 0.5 x favor+:1024's (:data:`FAVOR_1024_ERROR`; uniform attention 0.76); weights a
    distribution. Measured: 0.246 (max 0.40); plain mean summaries (log n bias) gave 0.37."""
    data = np.load(REAL_HEADS)
    q, k, v = (data[name].astype(np.float64) for name in ("q", "k", "v"))
    scale = float(data["scale"])
    T = q.shape[-2]
    assert keys_per_row(T, 32, 1) <= 128
    ref = softmax_attention(q, k, v, scale=scale)
    out = local_attention(q, k, v, block=32, window=1, scale=scale)
    err = np.linalg.norm(out - ref, axis=(-2, -1)) / np.linalg.norm(ref, axis=(-2, -1))
    assert err.shape == (2, 12)
    assert err.mean() <= min(0.35, 0.5 * FAVOR_1024_ERROR), err.mean()
    uniform = np.linalg.norm(v.mean(-2, keepdims=True) - ref, axis=(-2, -1)) / np.linalg.norm(
        ref, axis=(-2, -1))
    assert (err < uniform).all()  # better than uniform attention on every head
    A, den = local_weights(q[0, :2], k[0, :2], block=32, window=1, scale=scale)
    assert (A >= 0).all() and (den >= 1).all()
    np.testing.assert_allclose(A.sum(-1), 1.0, rtol=1e-12)


# ------------------------------------------------------------------------------ compare tool
def test_compare_method_parses_and_agrees_with_the_reference(rng):
    m = parse_method(" local:16 ", d=5)
    assert (m.spec, m.family, m.block, m.window, m.random) == ("local:16:1", "local", 16, 1, False)
    assert parse_method("local:8:0", d=5).window == 0
    assert "local:B:W" in method_names()
    q, k, v = _qkv(rng, 40)
    want = local_attention(q, k, v, block=16, window=1, is_causal=True, scale=0.4)
    np.testing.assert_allclose(m.output(q, k, v, is_causal=True, scale=0.4), want,
                               rtol=1e-12, atol=1e-12)  # float64
    A, den = m.weights(q, k, is_causal=True, scale=0.4)
    np.testing.assert_allclose(A @ v, want, rtol=1e-12, atol=1e-12)
    got = m.run(*(torch.from_numpy(t)[None] for t in (q, k, v)), is_causal=True, scale=0.4)
    np.testing.assert_allclose(got[0].numpy(), want, rtol=1e-12, atol=1e-12)  # float64 twin


@pytest.mark.parametrize("spec", ["local", "local:", "local:x", "local:0", "local:8:-1",
                                  "local:8:1:2", "local:+8", "local:8.0"])
def test_compare_method_rejects_bad_specs(spec):
    with pytest.raises(ValueError, match="local:B:W"):
        parse_method(spec, d=4)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
@pytest.mark.parametrize("which", ["q", "k", "v"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_public_function_refuses_non_finite_inputs(which, bad, dtype):
    # A NaN in a later key of a causal row's own block would reach that row through the full
    # block products (and through the block's summary every other row): refused, not returned.
    from kernelkit.attention import local_attention as public

    g = torch.Generator().manual_seed(0)
    qkv = {name: torch.randn(1, 2, 40, 8, generator=g, dtype=dtype) for name in "qkv"}
    qkv[which][0, 1, 17, 3] = bad
    before = {name: t.clone() for name, t in qkv.items()}
    with pytest.raises(ValueError, match="q, k and v must be finite"):
        public(qkv["q"], qkv["k"], qkv["v"], block=16, window=0, is_causal=True)
    for name in "qkv":  # inputs never modified
        assert torch.equal(qkv[name].nan_to_num(), before[name].nan_to_num())
    finite = public(*(t.nan_to_num(posinf=0.0) for t in qkv.values()), block=16, window=0)
    assert torch.isfinite(finite).all()
