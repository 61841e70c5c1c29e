"""Float64 attention references: the references agree with each other first, then with
direct formulas written here (and with torch's scaled_dot_product_attention where available)."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import logsumexp

from kernelkit_math import get_kernel, kernel_names
from kernelkit_math.attention import (
    causal_mask,
    causal_shift,
    guard_denominator,
    kernel_smoother,
    linear_attention,
    repeat_kv,
    softmax_attention,
)
from kernelkit_math.random_features import FEATURE_MAPS, make_feature_map
from tests.conftest import TOL

F64 = TOL["float64"]

# (batch, T, S, D, Dv): T = 1, S = 1, T != S both ways, D = 1, two batch dims
SHAPES = [
    ((), 1, 1, 1, 1),
    ((2,), 1, 5, 3, 2),
    ((2,), 5, 1, 3, 4),
    ((2, 3), 7, 4, 2, 3),
    ((2, 3), 4, 7, 5, 2),
    ((3,), 6, 6, 1, 2),
    ((2, 2), 9, 9, 4, 4),
]
SHAPE_IDS = ["T1-S1-D1", "T1", "S1", "T>S-batch2x3", "T<S-batch2x3", "D1", "square"]

#: Every map whose weights cannot cancel (the registry's non-signed rows), sized maps with 16
#: features (hyp-favor+: 8 pairs).
POSITIVE_MAPS = [spec.form.replace(":M", ":8" if spec.name == "hyp-favor+" else ":16")
                 for spec in FEATURE_MAPS.values() if spec.sign != "signed"]


def _qkv(rng, batch, T, S, D, Dv, positive=False):
    draw = (lambda s: rng.uniform(0.1, 1.0, size=s)) if positive else (lambda s: rng.normal(size=s))
    return draw(batch + (T, D)), draw(batch + (S, D)), draw(batch + (S, Dv))


def _naive_softmax(q, k, v, scale, causal, shift=0):
    """Loops and math.exp, one (T, D) problem: out and lse; causal: key j visible iff
    j <= i + shift."""
    T, S = q.shape[0], k.shape[0]
    out, lse = np.zeros((T, v.shape[1])), np.full(T, -np.inf)
    for i in range(T):
        js = [j for j in range(S) if not causal or j <= i + shift]
        s = [scale * float(np.dot(q[i], k[j])) for j in js]
        if not s:
            continue
        m = max(s)
        w = [math.exp(x - m) for x in s]
        out[i] = sum(wj * v[j] for wj, j in zip(w, js)) / sum(w)
        lse[i] = m + math.log(sum(w))
    return out, lse


# ------------------------------------------------------------- references agree with each other
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
def test_softmax_equals_exponential_kernel_smoother(rng, shape, causal):
    q, k, v = _qkv(rng, *shape)
    D = q.shape[-1]
    for scale in (None, 0.3, 1.7):
        ref = kernel_smoother(q, k, v, "exponential", is_causal=causal,
                              scale=1 / math.sqrt(D) if scale is None else scale)
        np.testing.assert_allclose(softmax_attention(q, k, v, is_causal=causal, scale=scale), ref, **F64)


@pytest.mark.parametrize("normalize", [True, False], ids=["normalized", "numerator"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("feature_map", POSITIVE_MAPS)
def test_linear_parallel_equals_recurrent(rng, feature_map, causal, normalize):
    q, k, v = _qkv(rng, (2, 3), 7, 5, 4, 3)
    kw = dict(feature_map=feature_map, is_causal=causal, normalize=normalize, return_state=True, seed=1)
    a, (Sa, za) = linear_attention(q, k, v, form="parallel", **kw)
    b, (Sb, zb) = linear_attention(q, k, v, form="recurrent", **kw)
    np.testing.assert_allclose(a, b, **F64)
    phi = make_feature_map(feature_map, 4, seed=1)
    K = phi(k)
    for S_, z_ in ((Sa, za), (Sb, zb)):  # the final state is phi(K)^T V and phi(K)^T 1
        np.testing.assert_allclose(S_, np.swapaxes(K, -1, -2) @ v, **F64)
        np.testing.assert_allclose(z_, K.sum(axis=-2), **F64)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("normalize", [True, False], ids=["normalized", "numerator"])
def test_linear_parallel_equals_recurrent_with_initial_state(rng, causal, normalize):
    q, k, v = _qkv(rng, (2,), 6, 8, 3, 2)
    phi = make_feature_map("favor+:10", 3, seed=4)
    S0 = rng.uniform(0, 1, size=(2, 10, 2))
    z0 = rng.uniform(0.5, 1, size=(10,))  # broadcast over the batch
    kw = dict(feature_map=phi, is_causal=causal, normalize=normalize, initial_state=(S0, z0),
              return_state=True)
    a, (Sa, za) = linear_attention(q, k, v, form="parallel", **kw)
    b, (Sb, zb) = linear_attention(q, k, v, form="recurrent", **kw)
    np.testing.assert_allclose(a, b, **F64)
    K = phi(k)
    for S_, z_ in ((Sa, za), (Sb, zb)):
        np.testing.assert_allclose(S_, S0 + np.swapaxes(K, -1, -2) @ v, **F64)
        np.testing.assert_allclose(z_, z0 + K.sum(axis=-2), **F64)
    # direct formula for the non-causal case: every query reads S0 + K^T V
    if not causal:
        Q = phi(q)
        num = Q @ (S0 + np.swapaxes(K, -1, -2) @ v)
        den = np.einsum("btm,bm->bt", Q, z0 + K.sum(-2))
        expect = num / den[..., None] if normalize else num
        np.testing.assert_allclose(a, expect, **F64)


@pytest.mark.parametrize("form", ["parallel", "recurrent"])
def test_linear_state_carries_across_chunks(rng, form):
    """Causal attention over a sequence == two chunks with the first chunk's state passed on."""
    q, k, v = _qkv(rng, (3,), 10, 10, 4, 2)
    kw = dict(feature_map="elu+1", is_causal=True, form=form)
    full = linear_attention(q, k, v, **kw)
    first, state = linear_attention(q[:, :6], k[:, :6], v[:, :6], return_state=True, **kw)
    second = linear_attention(q[:, 6:], k[:, 6:], v[:, 6:], initial_state=state, **kw)
    np.testing.assert_allclose(np.concatenate([first, second], axis=1), full, **F64)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
def test_identity_linear_attention_is_the_linear_kernel_smoother(rng, shape, causal):
    q, k, v = _qkv(rng, *shape, positive=True)  # positive denominators
    for form in ("parallel", "recurrent"):
        out = linear_attention(q, k, v, "identity", is_causal=causal, form=form)
        np.testing.assert_allclose(out, kernel_smoother(q, k, v, "linear", is_causal=causal), **F64)
    # unnormalised: (Q K^T masked) V, with any signs
    q, k, v = _qkv(rng, *shape)
    A = q @ np.swapaxes(k, -1, -2)
    if causal:
        A = A * causal_mask(q.shape[-2], k.shape[-2])
    for form in ("parallel", "recurrent"):
        out = linear_attention(q, k, v, "identity", is_causal=causal, normalize=False, form=form)
        np.testing.assert_allclose(out, A @ v, **F64)


@settings(max_examples=25, deadline=None)
@given(
    T=st.integers(1, 9), S=st.integers(1, 9), D=st.integers(1, 5), Dv=st.integers(1, 3),
    causal=st.booleans(), seed=st.integers(0, 2**16),
)
def test_property_linear_forms_agree_and_softmax_matches_smoother(T, S, D, Dv, causal, seed):
    rng = np.random.default_rng(seed)
    q, k, v = _qkv(rng, (2,), T, S, D, Dv)
    a = linear_attention(q, k, v, "hyp-favor+:6", is_causal=causal, seed=seed)
    b = linear_attention(q, k, v, "hyp-favor+:6", is_causal=causal, seed=seed, form="recurrent")
    np.testing.assert_allclose(a, b, **F64)
    np.testing.assert_allclose(softmax_attention(q, k, v, is_causal=causal),
                               kernel_smoother(q, k, v, is_causal=causal, scale=1 / math.sqrt(D)), **F64)


# --------------------------------------------------------------------- against direct formulas
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
def test_softmax_and_lse_against_naive_loops(rng, shape, causal):
    q, k, v = _qkv(rng, *shape)
    out, lse = softmax_attention(q, k, v, is_causal=causal, scale=0.8, return_lse=True)
    batch = shape[0]
    assert out.shape == batch + (shape[1], shape[4]) and lse.shape == batch + (shape[1],)
    for idx in np.ndindex(*batch):
        o, l = _naive_softmax(q[idx], k[idx], v[idx], 0.8, causal)
        np.testing.assert_allclose(out[idx], o, **F64)
        np.testing.assert_allclose(lse[idx], l, **F64)
    scores = 0.8 * q @ np.swapaxes(k, -1, -2)
    if causal:
        scores = np.where(causal_mask(shape[1], shape[2]), scores, -np.inf)
    np.testing.assert_allclose(lse, logsumexp(scores, axis=-1), **F64)


def test_softmax_is_stable_for_huge_scores(rng):
    q, k, v = _qkv(rng, (2,), 5, 6, 4, 3)
    out, lse = softmax_attention(q * 100, k * 100, v, scale=1.0, return_lse=True)  # scores ~ 1e4
    assert np.isfinite(out).all() and np.isfinite(lse).all()
    scores = 1e4 * q @ np.swapaxes(k, -1, -2)
    hot = np.take_along_axis(v, scores.argmax(-1)[..., None], axis=-2)  # one-hot weights
    np.testing.assert_allclose(out, hot, **F64)
    np.testing.assert_allclose(lse, scores.max(-1), rtol=1e-12)


def test_softmax_matches_torch_sdpa(rng):
    torch = pytest.importorskip("torch")
    sdpa = torch.nn.functional.scaled_dot_product_attention
    for T, S in [(7, 4), (4, 7), (5, 5)]:
        q, k, v = rng.normal(size=(2, 6, T, 3)), rng.normal(size=(2, 2, S, 3)), rng.normal(size=(2, 2, S, 2))
        for causal in (False, True):
            ref = sdpa(*(torch.from_numpy(a) for a in (q, k, v)), is_causal=causal, enable_gqa=True)
            np.testing.assert_allclose(softmax_attention(q, k, v, is_causal=causal), ref.numpy(), **F64)


# ---------------------------------------------------------------------- causal mask alignment
def test_causal_mask_is_top_left_aligned():
    np.testing.assert_array_equal(causal_mask(3, 5), [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0]])
    np.testing.assert_array_equal(causal_mask(4, 2), [[1, 0], [1, 1], [1, 1], [1, 1]])


def test_causal_rows_beyond_S_see_every_key(rng):
    """Top-left alignment with T > S: query i >= S sees all keys, so those rows equal the
    non-causal ones; no row is empty (row 0 sees key 0)."""
    q, k, v = _qkv(rng, (2,), 7, 3, 4, 2)
    for fn in (softmax_attention, kernel_smoother, linear_attention):
        causal, full = fn(q, k, v, is_causal=True), fn(q, k, v)
        np.testing.assert_allclose(causal[:, 3:], full[:, 3:], **F64)
        assert not np.allclose(causal[:, :2], full[:, :2])
    _, lse = softmax_attention(q, k, v, is_causal=True, return_lse=True)
    assert np.isfinite(lse).all()


def test_rows_without_keys_output_zero(rng):
    """S = 0 (under the top-left alignment the only way to get rows with no visible key):
    output 0, lse -inf, no NaN."""
    q, k, v = rng.normal(size=(2, 4, 3)), np.zeros((2, 0, 3)), np.zeros((2, 0, 5))
    for causal in (False, True):
        out, lse = softmax_attention(q, k, v, is_causal=causal, return_lse=True)
        np.testing.assert_array_equal(out, np.zeros((2, 4, 5)))
        np.testing.assert_array_equal(lse, np.full((2, 4), -np.inf))
        np.testing.assert_array_equal(kernel_smoother(q, k, v, "rbf", is_causal=causal), 0.0)
        for form in ("parallel", "recurrent"):
            np.testing.assert_array_equal(linear_attention(q, k, v, is_causal=causal, form=form), 0.0)


# ------------------------------------------------------------------ bottom-right alignment
BR = dict(is_causal=True, causal_alignment="bottom_right")


def _hand_mask(T, S):
    """Bottom-right mask written out: query i is position i + S - T of S, key j position j."""
    return np.array([[j <= i + (S - T) for j in range(S)] for i in range(T)])


def test_causal_mask_shift_and_causal_shift():
    np.testing.assert_array_equal(causal_mask(2, 5, 3), [[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]])
    np.testing.assert_array_equal(causal_mask(4, 2, -2), [[0, 0], [0, 0], [1, 0], [1, 1]])
    np.testing.assert_array_equal(causal_mask(4, 2), causal_mask(4, 2, 0))
    for T, S in [(2, 5), (5, 2), (3, 3), (1, 63)]:
        assert causal_shift(True, "top_left", T, S) == 0
        shift = causal_shift(True, "bottom_right", T, S)
        assert shift == S - T
        np.testing.assert_array_equal(causal_mask(T, S, shift), _hand_mask(T, S))
        assert causal_shift(False, "bottom_right", T, S) is None


@pytest.mark.parametrize("T,S", [(1, 1), (1, 7), (4, 7), (6, 6)])
def test_bottom_right_is_top_left_after_padding_queries_in_front(rng, T, S):
    """T <= S: the T queries are the last T of S positions, so bottom-right equals top-left on
    the queries padded in front with S - T (arbitrary) rows, last T rows kept. GQA for softmax."""
    q, k, v = rng.normal(size=(2, 4, T, 3)), rng.normal(size=(2, 2, S, 3)), rng.normal(size=(2, 2, S, 2))
    qp = np.concatenate([rng.normal(size=(2, 4, S - T, 3)), q], axis=-2)
    out, lse = softmax_attention(q, k, v, **BR, return_lse=True)
    out_p, lse_p = softmax_attention(qp, k, v, is_causal=True, return_lse=True)
    np.testing.assert_allclose(out, out_p[..., S - T:, :], **F64)
    np.testing.assert_allclose(lse, lse_p[..., S - T:], **F64)
    k, v = k[:, :1], v[:, :1]  # one k/v head, broadcast over q's heads
    np.testing.assert_allclose(kernel_smoother(q, k, v, "rbf", gamma=0.3, **BR),
                               kernel_smoother(qp, k, v, "rbf", gamma=0.3, is_causal=True)[..., S - T:, :], **F64)
    S0, z0 = rng.uniform(size=(10, 2)), rng.uniform(0.5, 1.0, size=10)
    for form in ("parallel", "recurrent"):
        kw = dict(feature_map="favor+:10", form=form, initial_state=(S0, z0), return_state=True)
        a, (Sa, za) = linear_attention(q, k, v, **BR, **kw)
        b, (Sb, zb) = linear_attention(qp, k, v, is_causal=True, **kw)
        np.testing.assert_allclose(a, b[..., S - T:, :], **F64)
        np.testing.assert_allclose(Sa, Sb, **F64)
        np.testing.assert_allclose(za, zb, **F64)


@pytest.mark.parametrize("T,S", [(5, 2), (7, 4), (3, 1), (4, 7), (1, 5)])
def test_bottom_right_against_direct_formulas(rng, T, S):
    """The mask written out (loops and math.exp for softmax, explicit weights for the smoother,
    the state read by hand for linear attention); T > S leaves the first T - S rows without
    keys: out 0 and lse -inf (FlashAttention's convention), or the initial state alone."""
    q, k, v = _qkv(rng, (2,), T, S, 3, 2)
    out, lse = softmax_attention(q, k, v, **BR, scale=0.8, return_lse=True)
    for b in range(2):
        o, l = _naive_softmax(q[b], k[b], v[b], 0.8, True, shift=S - T)
        np.testing.assert_allclose(out[b], o, **F64)
        np.testing.assert_allclose(lse[b], l, **F64)
    empty = max(T - S, 0)
    assert np.all(out[:, :empty] == 0) and np.all(lse[:, :empty] == -np.inf)
    assert np.isfinite(lse[:, empty:]).all()

    mask = _hand_mask(T, S)
    W = np.exp(-0.3 * ((q[..., :, None, :] - k[..., None, :, :]) ** 2).sum(-1)) * mask
    den = W.sum(-1, keepdims=True)
    expect = np.divide(W @ v, np.maximum(den, 1e-6))
    np.testing.assert_allclose(kernel_smoother(q, k, v, "rbf", gamma=0.3, eps=1e-6, **BR), expect, **F64)
    np.testing.assert_array_equal(kernel_smoother(q, k, v, "rbf", gamma=0.3, eps=0.0, **BR)[:, :empty], 0.0)

    phi = make_feature_map("elu+1", 3)
    Q, K = phi(q), phi(k)
    S0, z0 = rng.uniform(size=(2, 3, 2)), rng.uniform(0.5, 1.0, size=(2, 3))
    num = (Q @ np.swapaxes(K, -1, -2) * mask) @ v + Q @ S0
    den = (Q @ np.swapaxes(K, -1, -2) * mask).sum(-1) + np.einsum("btm,bm->bt", Q, z0)
    for form in ("parallel", "recurrent"):
        got = linear_attention(q, k, v, "elu+1", **BR, form=form, initial_state=(S0, z0))
        np.testing.assert_allclose(got, num / den[..., None], **F64)
        none = linear_attention(q, k, v, "elu+1", **BR, form=form)  # no state: empty rows are 0
        np.testing.assert_array_equal(none[:, :empty], 0.0)
        assert np.isfinite(none).all()


@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
def test_alignments_agree_when_T_equals_S_and_differ_otherwise(rng, shape):
    q, k, v = _qkv(rng, *shape, positive=True)
    T, S = shape[1], shape[2]
    for fn in (softmax_attention, kernel_smoother, linear_attention):
        top, bottom = fn(q, k, v, is_causal=True), fn(q, k, v, **BR)
        if T == S:
            np.testing.assert_array_equal(top, bottom)
        elif min(T, S) > 1 or S > T:  # some row sees other keys
            assert not np.allclose(top, bottom)
        # not causal: the alignment is never read
        np.testing.assert_array_equal(fn(q, k, v), fn(q, k, v, causal_alignment="bottom_right"))


def test_bottom_right_matches_torch_sdpa_lower_right(rng):
    torch = pytest.importorskip("torch")
    from torch.nn.attention.bias import causal_lower_right

    sdpa = torch.nn.functional.scaled_dot_product_attention
    for T, S in [(1, 6), (4, 7), (5, 5)]:  # T <= S: torch warns of NaN rows for T > S
        q, k, v = rng.normal(size=(2, 3, T, 4)), rng.normal(size=(2, 3, S, 4)), rng.normal(size=(2, 3, S, 2))
        ref = sdpa(*(torch.from_numpy(a) for a in (q, k, v)), attn_mask=causal_lower_right(T, S))
        np.testing.assert_allclose(softmax_attention(q, k, v, **BR), ref.numpy(), **F64)


@pytest.mark.parametrize("fn", [softmax_attention, kernel_smoother, linear_attention],
                         ids=["softmax", "smoother", "linear"])
def test_bad_causal_alignment(rng, fn):
    q = rng.normal(size=(2, 3, 4))
    for bad in ("bottom-right", "lower_right", "", "TOP_LEFT"):
        with pytest.raises(ValueError, match="causal_alignment must be 'top_left' or 'bottom_right'"):
            fn(q, q, q, is_causal=True, causal_alignment=bad)
        with pytest.raises(ValueError, match="causal_alignment"):  # validated without is_causal too
            fn(q, q, q, causal_alignment=bad)
    for bad in (None, True, 1, ("top_left",)):
        with pytest.raises(TypeError, match="causal_alignment"):
            fn(q, q, q, is_causal=True, causal_alignment=bad)


# ------------------------------------------------------------------------------------- GQA
@pytest.mark.parametrize("h_kv", [1, 2, 3], ids=["mqa", "gqa-2", "gqa-3"])
def test_gqa_repeats_kv_heads(rng, h_kv):
    q, k, v = rng.normal(size=(2, 6, 5, 4)), rng.normal(size=(2, h_kv, 7, 4)), rng.normal(size=(2, h_kv, 7, 3))
    kr, vr = repeat_kv(k, 6 // h_kv), repeat_kv(v, 6 // h_kv)
    assert kr.shape == (2, 6, 7, 4)
    for h in range(6):  # query head h uses kv head h // n_rep
        np.testing.assert_array_equal(kr[:, h], k[:, h // (6 // h_kv)])
    for fn in (softmax_attention, kernel_smoother, linear_attention):
        for causal in (False, True):
            np.testing.assert_allclose(fn(q, k, v, is_causal=causal), fn(q, kr, vr, is_causal=causal), **F64)


def test_gqa_heads_not_divisible_raise(rng):
    q, k, v = rng.normal(size=(1, 6, 5, 4)), rng.normal(size=(1, 4, 7, 4)), rng.normal(size=(1, 4, 7, 3))
    for fn in (softmax_attention, kernel_smoother, linear_attention):
        with pytest.raises(ValueError, match="k has 4 heads"):
            fn(q, k, v)
    with pytest.raises(ValueError, match="n_rep"):
        repeat_kv(k, 0)


# ----------------------------------------------------------------------- denominator guard
def test_guard_denominator():
    den = np.array([-1.0, 0.0, 1e-9, 0.5, 3.0])
    np.testing.assert_array_equal(guard_denominator(den, 1e-6), [1e-6, 1e-6, 1e-6, 0.5, 3.0])
    np.testing.assert_array_equal(guard_denominator(den, 0.0), [0.0, 0.0, 1e-9, 0.5, 3.0])


def test_guarded_rows_in_linear_attention(rng):
    """relu features of an all-negative query vanish: den = 0 -> eps, output num / eps = 0."""
    q = rng.normal(size=(4, 3))
    q[1] = -np.abs(q[1])
    k, v = np.abs(rng.normal(size=(5, 3))), rng.normal(size=(5, 2))
    for eps in (1e-6, 0.0):
        for form in ("parallel", "recurrent"):
            out = linear_attention(q, k, v, "relu", eps=eps, form=form)
            assert np.isfinite(out).all()
            np.testing.assert_array_equal(out[1], 0.0)
    # a tiny positive denominator below eps is floored, not divided by
    Q, K = np.maximum(q, 0), np.maximum(k, 0)
    den = Q @ K.sum(0)
    out = linear_attention(q, k, v, "relu", eps=10.0)
    np.testing.assert_allclose(out, (Q @ K.T @ v) / np.maximum(den, 10.0)[:, None], **F64)


@pytest.mark.parametrize("kernel", kernel_names())
def test_kernel_smoother_over_registry_reproduces_constants(rng, kernel):
    """Weights normalised by their row sum: v = 1 gives 1 (positive inputs: den > 0)."""
    q, k, _ = _qkv(rng, (2,), 5, 6, 3, 1, positive=True)
    for causal in (False, True):
        out = kernel_smoother(q, k, np.ones((6, 2)), kernel, is_causal=causal)
        np.testing.assert_allclose(out, 1.0, **F64)
    # and the weights are the registry's: one row written out
    v = rng.normal(size=(6, 2))
    W = get_kernel(kernel).value(q[0], k[0])
    np.testing.assert_allclose(kernel_smoother(q[0], k[0], v, kernel), (W @ v) / W.sum(1)[:, None], **F64)


def test_kernel_smoother_signed_kernel_guard(rng):
    """Sigmoid weights with a negative row sum: eps = 0 gives 0, eps > 0 divides by eps."""
    q, k, v = np.ones((1, 2)), -np.ones((3, 2)), rng.normal(size=(3, 2))
    W = np.tanh(q @ k.T - 1.0)  # all negative
    np.testing.assert_array_equal(kernel_smoother(q, k, v, "sigmoid", gamma=1.0, coef0=-1.0), 0.0)
    np.testing.assert_allclose(kernel_smoother(q, k, v, "sigmoid", gamma=1.0, coef0=-1.0, eps=0.5),
                               W @ v / 0.5, **F64)


# ------------------------------------------------------------------------- feature maps
def test_feature_map_object_equals_name_with_seed(rng):
    q, k, v = _qkv(rng, (2,), 5, 5, 4, 2)
    by_name = linear_attention(q, k, v, "favor+orth:32", seed=9, is_causal=True)
    by_obj = linear_attention(q, k, v, make_feature_map("favor+orth:32", 4, seed=9), is_causal=True)
    np.testing.assert_array_equal(by_name, by_obj)
    assert not np.allclose(by_name, linear_attention(q, k, v, "favor+orth:32", seed=10, is_causal=True))


def test_favor_linear_attention_approximates_softmax(rng):
    q, k, v = [0.5 * a for a in _qkv(rng, (2,), 6, 6, 4, 2)]
    exact = softmax_attention(q, k, v, is_causal=True)
    approx = linear_attention(q, k, v, "hyp-favor+:4096", is_causal=True, seed=0)
    assert np.abs(approx - exact).max() < 0.05


def test_taylor2_linear_attention_matches_truncated_exponential_smoother(rng):
    q, k, v = _qkv(rng, (2,), 5, 6, 3, 2)
    t = q @ np.swapaxes(k, -1, -2) / math.sqrt(3)
    W = (1 + t + t**2 / 2) * causal_mask(5, 6)
    expect = (W @ v) / W.sum(-1, keepdims=True)
    np.testing.assert_allclose(linear_attention(q, k, v, "taylor2", is_causal=True), expect, **F64)


# ----------------------------------------------------------------------------- hygiene
def test_inputs_not_modified(rng):
    q, k, v = _qkv(rng, (2, 3), 5, 4, 3, 2)
    S0, z0 = rng.uniform(size=(2, 3, 3, 2)), rng.uniform(size=(2, 3, 3))
    arrays = (q, k, v, S0, z0)
    copies = [a.copy() for a in arrays]
    for a in arrays:
        a.setflags(write=False)
    softmax_attention(q, k, v, is_causal=True, return_lse=True)
    kernel_smoother(q, k, v, "rbf", is_causal=True)
    for form in ("parallel", "recurrent"):
        linear_attention(q, k, v, "identity", is_causal=True, form=form, initial_state=(S0, z0),
                         return_state=True)
    for a, c in zip(arrays, copies):
        np.testing.assert_array_equal(a, c)


def test_nan_propagates_and_is_not_masked_to_zero(rng):
    q, k, v = _qkv(rng, (), 3, 4, 2, 2)
    q[1, 0] = np.nan
    for out in (softmax_attention(q, k, v), kernel_smoother(q, k, v, "rbf"),
                linear_attention(q, k, v), linear_attention(q, k, v, form="recurrent")):
        assert np.isnan(out[1]).all() and np.isfinite(out[[0, 2]]).all()


def test_integer_inputs_become_float64():
    q = np.arange(6).reshape(3, 2)
    out = softmax_attention(q, q, q)
    assert out.dtype == np.float64
    np.testing.assert_allclose(out, softmax_attention(q.astype(float), q * 1.0, q * 1.0), **F64)


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda q, k, v: softmax_attention(q, k[..., :3], v), "k must have the head dim"),
        (lambda q, k, v: kernel_smoother(q, k[..., :3], v), "k must have the head dim"),
        (lambda q, k, v: linear_attention(q, k[..., :3], v), "k must have the head dim"),
        (lambda q, k, v: softmax_attention(q, k, v[..., :5, :]), "v must have the key length"),
        (lambda q, k, v: linear_attention(q, k, v[..., :5, :]), "v must have the key length"),
        (lambda q, k, v: linear_attention(q, k, v, "nope"), "feature_map"),
        (lambda q, k, v: linear_attention(q, k, v, "favor+:0"), "feature_map"),
        (lambda q, k, v: linear_attention(q, k, v, form="chunked"), "form"),
        (lambda q, k, v: linear_attention(q, k, v, eps=-1.0), "eps"),
        (lambda q, k, v: linear_attention(q, k, v, "identity", initial_state=(np.zeros((4, 3)), np.zeros(3))),
         "initial_state"),
        (lambda q, k, v: kernel_smoother(q, k, v, "nope"), "unknown kernel"),
        (lambda q, k, v: kernel_smoother(q, k, v, "rbf", gamma=-1.0), "gamma"),
        (lambda q, k, v: softmax_attention(q, k, v, scale=float("nan")), "scale"),
        (lambda q, k, v: softmax_attention(q[0, 0, 0], k, v), "q must have at least 2"),
        (lambda q, k, v: softmax_attention(q[..., :1, :], k[:1, :1].repeat(3, 0), v[:1, :1]),
         "do not broadcast"),
    ],
    ids=["D-softmax", "D-smoother", "D-linear", "S-softmax", "S-linear", "unknown-map", "favor+:0",
         "bad-form", "bad-eps", "bad-state", "unknown-kernel", "bad-gamma", "nan-scale",
         "1d-q", "batch-mismatch"],
)
def test_bad_inputs_raise_value_error(rng, call, match):
    q, k, v = rng.normal(size=(2, 3, 5, 4)), rng.normal(size=(2, 3, 6, 4)), rng.normal(size=(2, 3, 6, 2))
    with pytest.raises(ValueError, match=match):
        call(q, k, v)


def test_unknown_kernel_parameter_is_type_error(rng):
    q = rng.normal(size=(3, 2))
    with pytest.raises(TypeError, match="unknown parameter"):
        kernel_smoother(q, q, q, "rbf", scale=1.0)
    with pytest.raises(TypeError, match="feature_map"):
        linear_attention(q, q, q, feature_map=3)


# ------------------------------------------------------ masked keys are absent (issue 18 J)
#: (alignment, T, S) with rows that see no key (bottom-right T > S), keys that no row sees
#: (top-left T < S) and the reproduction of issue 18 J first.
MASKED_CASES = [("bottom_right", 9, 5), ("top_left", 9, 5), ("top_left", 5, 9),
                ("bottom_right", 5, 9)]
#: (operand, value) put at key 4: one column of v, or one feature of k.
NONFINITE = [("v", np.nan), ("v", np.inf), ("v", -np.inf), ("k", np.nan), ("k", np.inf)]


def _rowwise_linear(q, k, v, phi, shift, eps):
    """Linear attention one row at a time over the visible keys only (sums start at 0)."""
    Q, K = phi(q), phi(k)
    out = np.zeros((q.shape[0], v.shape[1]))
    for i in range(q.shape[0]):
        js = [j for j in range(k.shape[0]) if j <= i + shift]
        num = sum((float(Q[i] @ K[j]) * v[j] for j in js), np.zeros(v.shape[1]))
        den = sum(float(Q[i] @ K[j]) for j in js)
        out[i] = num / max(den, eps)
    return out


def _rowwise_smoother(q, k, v, kernel, shift, eps, **params):
    """The kernel smoother one row at a time over the visible keys only."""
    spec = get_kernel(kernel)
    resolved = spec.resolve(q.shape[1], **params)
    out = np.zeros((q.shape[0], v.shape[1]))
    for i in range(q.shape[0]):
        js = [j for j in range(k.shape[0]) if j <= i + shift]
        if js:
            w = spec.value_fn(q[i:i + 1], k[js], **resolved)[0]
            out[i] = sum(wj * v[j] for wj, j in zip(w, js)) / max(float(w.sum()), eps)
    return out


def _with_nonfinite(rng, T, S, operand, value):
    q, k, v = _qkv(rng, (), T, S, 3, 2)
    (v if operand == "v" else k)[4, 0] = value
    return q, k, v


@pytest.mark.parametrize("operand,value", NONFINITE, ids=[f"{o}-{x}" for o, x in NONFINITE])
@pytest.mark.parametrize("alignment,T,S", MASKED_CASES,
                         ids=[f"{a}-T{t}-S{s}" for a, t, s in MASKED_CASES])
def test_nonfinite_key_reaches_only_the_rows_that_see_it(rng, alignment, T, S, operand, value):
    """A NaN / inf at key 4 gives exactly what a row-by-row float64 computation over the visible
    keys gives (IEEE: inf stays inf, 0 * inf is never formed for a masked key); rows without
    keys are 0."""
    q, k, v = _with_nonfinite(rng, T, S, operand, value)
    shift = causal_shift(True, alignment, T, S)
    causal = dict(is_causal=True, causal_alignment=alignment)
    phi = make_feature_map("elu+1", 3)
    with np.errstate(invalid="ignore", over="ignore"):
        expect_soft = _naive_softmax(q, k, v, 1 / math.sqrt(3), True, shift)[0]
        expect_lin = _rowwise_linear(q, k, v, phi, shift, 1e-6)
        expect_rbf = _rowwise_smoother(q, k, v, "rbf", shift, 1e-6, gamma=0.5)
    got = {
        "softmax": (softmax_attention(q, k, v, **causal), expect_soft),
        "exponential": (kernel_smoother(q, k, v, "exponential", **causal), expect_soft),
        "rbf": (kernel_smoother(q, k, v, "rbf", eps=1e-6, gamma=0.5, **causal), expect_rbf),
        "linear-parallel": (linear_attention(q, k, v, **causal), expect_lin),
        "linear-recurrent": (linear_attention(q, k, v, form="recurrent", **causal), expect_lin),
    }
    for name, (out, expect) in got.items():
        # assert_allclose compares NaN and +-inf positions exactly (equal_nan, inf == inf)
        np.testing.assert_allclose(out, expect, **F64, err_msg=name)


@pytest.mark.parametrize("operand", ["v", "k"])
def test_issue_18_j_reproduction(rng, operand):
    """Bottom-right, T = 9, S = 5, NaN at key 4: rows 0-3 see no key (0), rows 4-7 do not see
    key 4 (finite), row 8 does (NaN), in every reference and form."""
    q, k, v = _with_nonfinite(rng, 9, 5, operand, np.nan)
    outs = [softmax_attention(q, k, v, **BR), kernel_smoother(q, k, v, "rbf", eps=1e-6, **BR),
            kernel_smoother(q, k, v, "exponential", **BR), linear_attention(q, k, v, **BR),
            linear_attention(q, k, v, form="recurrent", **BR)]
    for out in outs:
        np.testing.assert_array_equal(out[:4], 0.0)
        assert np.isfinite(out[4:8]).all()
        assert np.isnan(out[8, 0])
