"""kernelkit.attention.comparison.methods: spec parsing, weights against the kernelkit_math
references, the torch fast paths, and Nyström attention (including its win over FAVOR+ on peaky
heads)."""

import ast
from pathlib import Path

import numpy as np
import pytest
import torch

import kernelkit
from kernelkit.attention.comparison.methods import (EPS, SIGNED_GUARD, Method, method_names,
                                                   parse_method)
from kernelkit.attention.comparison.nystrom import nystrom_attention, nystrom_weights
from kernelkit_math import attention as ref
from kernelkit_math.random_features import FavorPlusMap, feature_map_names, make_feature_map

F64 = dict(rtol=1e-12, atol=1e-12)
#: run() in float32 against the float64 output: rounding of inputs, features and sums.
F32 = dict(rtol=1e-4, atol=1e-4)


def qkv(rng, lead=(2, 3), T=7, S=7, D=4, Dv=3, sd=1.0):
    return (sd * rng.standard_normal(lead + (T, D)), sd * rng.standard_normal(lead + (S, D)),
            rng.standard_normal(lead + (S, Dv)))


# ------------------------------------------------------------------------------- parsing
@pytest.mark.parametrize("spec, canonical, family, n_features, random", [
    ("softmax", "softmax", "softmax", None, False),
    (" elu+1 ", "elu+1", "elu+1", 8, False),
    ("relu", "relu", "relu", 8, False),
    ("identity", "identity", "identity", 8, False),
    ("taylor2", "taylor2", "taylor2", 1 + 8 + 64, False),
    ("favor+:32", "favor+:32", "favor+", 32, True),
    ("favor+orth:16", "favor+orth:16", "favor+orth", 16, True),
    ("hyp-favor+:8", "hyp-favor+:8", "hyp-favor+", 16, True),
    ("rff:64", "rff:64", "rff", 64, True),
    ("kernel:rbf", "kernel:rbf", "kernel:rbf", None, False),
    ("kernel:rbf(gamma=0.5)", "kernel:rbf(gamma=0.5)", "kernel:rbf", None, False),
    ("kernel: polynomial(degree=2, coef0=1)", "kernel:polynomial(degree=2, coef0=1)",
     "kernel:polynomial", None, False),
    ("nystrom:64", "nystrom:64", "nystrom", 64, True),
    ("kernel:RBF(gamma=0.5)", "kernel:rbf(gamma=0.5)", "kernel:rbf", None, False),
    ("kernel:ExpSineSquared", "kernel:periodic", "kernel:periodic", None, False),
    ("kernel:RationalQuadratic", "kernel:rational_quadratic", "kernel:rational_quadratic", None,
     False),
], ids=lambda x: repr(x))
def test_parse_spec_strings(spec, canonical, family, n_features, random):
    m = parse_method(spec, d=8)
    assert isinstance(m, Method)
    assert (m.spec, m.family, m.n_features, m.random) == (canonical, family, n_features, random)


def test_parse_kernel_object():
    kernel = kernelkit.RBF(length_scale=2.0)
    m = parse_method(kernel, d=8)
    assert m.spec == "kernel:rbf(gamma=0.125)"  # gamma = 1 / (2 l^2)
    assert m.label == repr(kernel) and m.family == "kernel:rbf"


def test_parse_feature_map_object_is_fixed():
    phi = FavorPlusMap(8, 16, seed=5)
    m = parse_method(phi, d=8)
    assert m.spec == "favor+:16(seed=5)" and m.n_features == 16 and not m.random


def test_parse_method_object_passes_through():
    m = parse_method("elu+1", 4)
    assert parse_method(m, 4) is m


def test_method_names_lists_every_family():
    names = method_names()
    for form in ("softmax", "elu+1", "favor+:M", "rff:M", "kernel:NAME", "nystrom:M"):
        assert form in names


@pytest.mark.parametrize("spec, match", [
    ("favor", "unknown attention method 'favor'.*nystrom:M"),
    ("Softmax", "unknown attention method 'Softmax'"),
    ("favor+:0", "needs a size M"),
    ("elu+1:4", "takes no size"),
    ("nystrom", "number of landmarks"),
    ("nystrom:0", "number of landmarks"),
    ("nystrom:x", "number of landmarks"),
    ("kernel:nope", "no registry kernel 'nope'"),
    ("kernel:rbf(gamma=-1)", "kernel:rbf\\(gamma=-1\\)"),
    ("kernel:rbf(1)", "param=value"),
    ("kernel:rbf(gamma=x)", "param=value"),
], ids=lambda x: repr(x))
def test_parse_errors(spec, match):
    with pytest.raises(ValueError, match=match):
        parse_method(spec, d=8)


def test_parse_type_errors():
    with pytest.raises(TypeError, match="unknown parameter"):
        parse_method("kernel:rbf(foo=1)", d=8)
    with pytest.raises(TypeError, match="spec string"):
        parse_method(3, d=8)
    with pytest.raises(ValueError, match="head dimension"):
        parse_method("elu+1", d=0)
    with pytest.raises(ValueError, match="built for D = 8"):
        parse_method(FavorPlusMap(8, 4), d=4)


# ------------------------------------------------------------- weights vs the references
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("spec, reference", [
    ("elu+1", lambda q, k, v, c: ref.linear_attention(q, k, v, "elu+1", is_causal=c, eps=EPS)),
    ("relu", lambda q, k, v, c: ref.linear_attention(q, k, v, "relu", is_causal=c, eps=EPS)),
    ("favor+:16", lambda q, k, v, c: ref.linear_attention(q, k, v, "favor+:16", is_causal=c,
                                                          eps=EPS, seed=3)),
    ("hyp-favor+:8", lambda q, k, v, c: ref.linear_attention(q, k, v, "hyp-favor+:8",
                                                             is_causal=c, eps=EPS, seed=3)),
    ("kernel:rbf(gamma=0.3)", lambda q, k, v, c: ref.kernel_smoother(
        q, k, v, "rbf", is_causal=c, eps=EPS, gamma=0.3)),
    ("kernel:polynomial(degree=2)", lambda q, k, v, c: ref.kernel_smoother(
        q, k, v, "polynomial", is_causal=c, eps=EPS, degree=2)),
    ("softmax", lambda q, k, v, c: ref.softmax_attention(q, k, v, is_causal=c)),
], ids=lambda x: x if isinstance(x, str) else "")
def test_weights_times_v_equals_reference(rng, spec, reference, causal):
    q, k, v = qkv(rng)
    m = parse_method(spec, d=4)
    A, den = m.weights(q, k, is_causal=causal, seed=3)
    expected = reference(q, k, v, causal)
    np.testing.assert_allclose(A @ v, expected, **F64)
    np.testing.assert_allclose(m.output(q, k, v, is_causal=causal, seed=3), expected, **F64)
    assert A.shape == (2, 3, 7, 7) and den.shape == (2, 3, 7)


def test_kernel_object_weights_equal_registry_spec(rng):
    q, k, v = qkv(rng)
    A_obj, _ = parse_method(kernelkit.RBF(length_scale=2.0), 4).weights(q, k)
    A_spec, _ = parse_method("kernel:rbf(gamma=0.125)", 4).weights(q, k)
    np.testing.assert_array_equal(A_obj, A_spec)


def test_scale_reaches_exponential_feature_maps(rng):
    q, k, v = qkv(rng)
    A, _ = parse_method("favor+:16", 4).weights(q, k, seed=2, scale=0.7)
    phi = FavorPlusMap(4, 16, scale=0.7, seed=2)
    expected = ref.linear_attention(q, k, v, phi, eps=EPS)
    np.testing.assert_allclose(A @ v, expected, **F64)


@pytest.mark.parametrize("spec", ["softmax", "elu+1", "favor+:8", "rff:8", "kernel:rbf",
                                  "nystrom:3"])
def test_causal_masking_respected(rng, spec):
    q, k, _ = qkv(rng, T=6, S=6)
    A, _ = parse_method(spec, 4).weights(q, k, is_causal=True, seed=1)
    assert np.all(A[..., np.triu_indices(6, 1)[0], np.triu_indices(6, 1)[1]] == 0)


def test_softmax_weights_are_the_softmax(rng):
    q, k, _ = qkv(rng)
    A, den = parse_method("softmax", 4).weights(q, k, scale=0.3)
    s = 0.3 * np.einsum("...td,...sd->...ts", q, k)
    expected = np.exp(s) / np.exp(s).sum(-1, keepdims=True)
    np.testing.assert_allclose(A, expected, **F64)
    assert np.all(den >= 1.0)  # after max subtraction the largest term is 1


def test_nonpositive_denominators_of_rff_are_counted_and_guarded(rng):
    # one random Fourier feature: den_i = phi(q_i) * sum_j phi(k_j) changes sign across rows
    q, k, v = qkv(rng, lead=(1, 1), T=40, S=40)
    m = parse_method("rff:1", 4)
    A, den = m.weights(q, k, seed=0)
    phi = make_feature_map("rff:1", 4, seed=0)
    W = phi(q[0, 0]) @ phi(k[0, 0]).T
    direct = W.sum(-1)
    n_bad = int(np.sum(direct <= 0))
    assert 0 < n_bad < 40
    assert int(np.sum(den <= 0)) == n_bad
    # the guard floor, written out: delta |phi(q_i)| . sum_j |phi(k_j)|
    floor = SIGNED_GUARD["rff"] * (np.abs(phi(q[0, 0])) @ np.abs(phi(k[0, 0])).sum(0))
    np.testing.assert_allclose(m.floor(q, k, seed=0)[0, 0], floor, **F64)
    np.testing.assert_allclose(A[0, 0], W / np.maximum(direct, floor)[:, None], **F64)
    # a sub-convex combination scaled by 1 / delta: |out| <= max |v| / delta
    assert np.abs(A).sum(-1).max() <= 1 / SIGNED_GUARD["rff"] * (1 + 1e-12)
    np.testing.assert_allclose(m.output(q, k, v, seed=0), A @ v, **F64)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("spec", ["identity", "rff:8"])
def test_signed_maps_are_guarded_in_weights_output_and_run(rng, spec, causal):
    q, k, v = qkv(rng, lead=(2, 2), T=9, S=9, Dv=4)
    q, k = q + 1.0, k + 1.0  # weights of one sign for most pairs, not all: some rows guarded
    m = parse_method(spec, 4)
    assert m.guard == SIGNED_GUARD[spec.partition(":")[0]]
    A, den = m.weights(q, k, is_causal=causal, seed=2)
    floor = m.floor(q, k, is_causal=causal, seed=2)
    guarded = den < floor
    assert 0 < np.count_nonzero(guarded) < guarded.size  # both kinds of rows are exercised
    # rows above the floor are the plain normalisation, the others divide by the floor
    W = A * np.maximum(den, floor)[..., None]
    np.testing.assert_allclose(W.sum(-1), den, **F64)
    out = m.output(q, k, v, is_causal=causal, seed=2)
    np.testing.assert_allclose(out, A @ v, **F64)
    assert np.abs(out).max() <= np.abs(v).max() / m.guard
    fast = m.run(*(torch.tensor(x, dtype=torch.float32) for x in (q, k, v)), is_causal=causal,
                 seed=2)
    # the guarded denominator is >= delta times the absolute mass: float32 rounding of the
    # sums stays ~1e-7 / delta relative to max |v|
    np.testing.assert_allclose(fast.double().numpy(), out, **F32)


def _guard_direct(q, k, v, guard, visible):
    """The guarded linear attention with the identity map, written out the quadratic way."""
    W = np.where(visible, q @ np.swapaxes(k, -1, -2), 0.0)
    bound = np.where(visible, np.abs(q) @ np.abs(np.swapaxes(k, -1, -2)), 0.0).sum(-1)
    den = np.maximum(np.maximum(W.sum(-1), EPS), guard * bound)
    return (W @ v) / den[..., None]


@pytest.mark.parametrize("T, S", [(1, 1), (63, 63), (5, 9), (9, 5)], ids=str)
@pytest.mark.parametrize("causal, alignment", [(False, "top_left"), (True, "top_left"),
                                               (True, "bottom_right")],
                         ids=["full", "causal-tl", "causal-br"])
def test_guard_in_the_reference_and_the_twin(rng, T, S, causal, alignment):
    from kernelkit_gpu.attention.linear_naive import linear_attention_naive

    q, k, v = qkv(rng, lead=(1, 2), T=T, S=S)
    q = q + 1000.0  # offset data: den and the bound are large, the guard still applies
    shift = 0 if alignment == "top_left" else S - T
    visible = (np.arange(S)[None, :] <= np.arange(T)[:, None] + shift) if causal else True
    expected = _guard_direct(q, k, v, 0.5, visible)
    kw = dict(is_causal=causal, causal_alignment=alignment, eps=EPS)
    for form in ("parallel", "recurrent"):
        np.testing.assert_allclose(ref.linear_attention(q, k, v, "identity", form=form,
                                                        guard=0.5, **kw), expected, **F64)
    # float64 twin, chunks of 16 so T = 63 spans several chunks
    twin = linear_attention_naive(*(torch.tensor(x) for x in (q, k, v)), feature_map="identity",
                                  guard=0.5, chunk_size=16, **kw)
    np.testing.assert_allclose(twin.numpy(), expected, **F64)


def test_guard_leaves_nan_visible_and_masked_keys_absent(rng):
    from kernelkit_gpu.attention.linear_naive import linear_attention_naive

    q, k, v = qkv(rng, lead=(1, 1), T=6, S=6)
    k[..., 3, 0] = np.nan  # reaches rows 3.. only (causal)
    out = ref.linear_attention(q, k, v, "identity", is_causal=True, guard=0.5)
    twin = linear_attention_naive(*(torch.tensor(x) for x in (q, k, v)), feature_map="identity",
                                  is_causal=True, guard=0.5).numpy()
    for o in (out, twin):
        assert np.all(np.isfinite(o[..., :3, :])) and np.all(np.isnan(o[..., 3:, :]))


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_guard_in_the_twin_is_differentiable(rng, causal):
    from kernelkit_gpu.attention.linear_naive import linear_attention_naive

    q, k, v = qkv(rng, lead=(1, 1), T=5, S=5)
    q, k, v = (torch.tensor(x, requires_grad=True) for x in (q + 1.0, k + 1.0, v))
    # delta 0.7 guards 2 (full) or 3 (causal) of the 5 rows of this draw, 8% or more away from
    # the switch: both branches of the max are differentiated
    fn = lambda q, k, v: linear_attention_naive(q, k, v, feature_map="identity",  # noqa: E731
                                                is_causal=causal, guard=0.7)
    assert torch.autograd.gradcheck(fn, (q, k, v))


@pytest.mark.parametrize("guard, error", [(0.0, ValueError), (-1.0, ValueError),
                                          (float("nan"), ValueError), (True, TypeError),
                                          ("0.1", TypeError)], ids=str)
def test_guard_errors(rng, guard, error):
    from kernelkit_gpu.attention.linear_naive import linear_attention_naive

    q, k, v = qkv(rng, lead=(1, 1), T=3, S=3)
    with pytest.raises(error, match="guard"):
        ref.linear_attention(q, k, v, "identity", guard=guard)
    with pytest.raises(error, match="guard"):
        linear_attention_naive(*(torch.tensor(x) for x in (q, k, v)), feature_map="identity",
                               guard=guard)


def test_guard_refuses_an_initial_state(rng):
    from kernelkit_gpu.attention.linear_naive import linear_attention_naive

    q, k, v = qkv(rng, lead=(1, 1), T=3, S=3)
    state = (np.zeros((4, 3)), np.zeros(4))
    with pytest.raises(ValueError, match="guard cannot be combined with initial_state"):
        ref.linear_attention(q, k, v, "identity", guard=0.5, initial_state=state)
    t_state = (torch.zeros(1, 1, 4, 3, dtype=torch.float64),
               torch.zeros(1, 1, 4, dtype=torch.float64))
    with pytest.raises(ValueError, match="guard cannot be combined with initial_state"):
        linear_attention_naive(*(torch.tensor(x) for x in (q, k, v)), feature_map="identity",
                               guard=0.5, initial_state=t_state)


def test_compare_reports_guarded_rows(rng):
    from kernelkit.attention.comparison import compare

    q, k, v = qkv(rng, lead=(1, 2), T=16, S=16)
    report = compare(q, k, v, ["softmax", "rff:1", "elu+1"], seeds=[0, 1], measure=False,
                     ranks=[2])
    rff, elu = report.rows[1], report.rows[2]
    m = parse_method("rff:1", 4)
    expected = sum(int(np.count_nonzero(m.weights(q, k, seed=s)[1] < m.floor(q, k, seed=s)))
                   for s in (0, 1))
    assert rff["guarded_rows"] == expected > 0
    assert rff["guarded_rows"] >= rff["nonpositive_denominators"] > 0
    assert elu["guarded_rows"] == elu["nonpositive_denominators"] == 0


def test_random_methods_depend_on_the_seed(rng):
    q, k, _ = qkv(rng)
    for spec in ("favor+:8", "nystrom:3"):
        m = parse_method(spec, 4)
        a0, a0b, a1 = (m.weights(q, k, seed=s)[0] for s in (0, 0, 1))
        np.testing.assert_array_equal(a0, a0b)
        assert not np.allclose(a0, a1)


# ---------------------------------------------------------------------- Nyström numerics
def test_nystrom_with_every_query_and_key_as_landmark_is_softmax(rng, monkeypatch):
    # M = T = S: every query's row is a landmark row, fitted exactly by a coefficient vector
    # e_a >= 0; the fit reaches it as its iterations grow (64 leave ~3e-2 here; 20 000 reach 1e-6), up to FLOOR
    from kernelkit.attention.comparison import nystrom

    monkeypatch.setattr(nystrom, "NNLS_ITERATIONS", 20000)
    q, k, v = qkv(rng, T=6, S=6, sd=1.5)
    A, den = nystrom_weights(q, k, 6)
    expected, _ = parse_method("softmax", 4).weights(q, k)
    np.testing.assert_allclose(A, expected, rtol=0, atol=1e-5)
    np.testing.assert_allclose(A.sum(-1), 1.0, **F64)
    assert np.all(den >= nystrom.FLOOR)


def test_nystrom_weights_are_distributions(rng):
    # non-negative coefficients times positive landmark rows: every row a distribution
    q, k, _ = qkv(rng, T=9, S=11, sd=3.0)
    for causal in (False, True):
        A, den = nystrom_weights(q, k, 4, is_causal=causal, seed=3)
        assert A.min() >= 0 and np.all(den > 0)
        np.testing.assert_allclose(A.sum(-1), 1.0, **F64)


def test_nystrom_reproduces_landmark_columns(rng):
    # M >= S caps M at S: the same result as M = S
    q, k, _ = qkv(rng, T=5, S=4)
    np.testing.assert_array_equal(nystrom_weights(q, k, 4, seed=2)[0],
                                  nystrom_weights(q, k, 50, seed=2)[0])


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_nystrom_torch_matches_float64(rng, causal):
    q, k, v = qkv(rng, T=12, S=12)
    expected = nystrom_weights(q, k, 5, is_causal=causal, seed=4)[0] @ v
    t = [torch.tensor(x) for x in (q, k, v)]
    out64 = nystrom_attention(*t, 5, is_causal=causal, seed=4)
    np.testing.assert_allclose(out64.numpy(), expected, rtol=1e-10, atol=1e-10)
    out32 = nystrom_attention(*(x.float() for x in t), 5, is_causal=causal, seed=4)
    assert out32.dtype == torch.float32
    np.testing.assert_allclose(out32.double().numpy(), expected, **F32)


def test_nystrom_torch_bfloat16(rng):
    q, k, v = (torch.tensor(x, dtype=torch.bfloat16) for x in qkv(rng, lead=(1, 1)))
    out = nystrom_attention(q, k, v, 3)
    assert out.dtype == torch.bfloat16 and out.shape == (1, 1, 7, 3)
    assert torch.isfinite(out.float()).all()


def test_nystrom_torch_shape_errors():
    q = torch.zeros(1, 1, 4, 2)
    with pytest.raises(ValueError, match="do not match"):
        nystrom_attention(q, torch.zeros(1, 1, 4, 3), torch.zeros(1, 1, 4, 2), 2)
    with pytest.raises(ValueError, match="4-D"):
        nystrom_attention(q[0], q, q, 2)


# ------------------------------------------------------------------------ fast paths
@pytest.mark.parametrize("spec", ["softmax", "elu+1", "favor+:8", "kernel:rbf(gamma=0.3)",
                                  "nystrom:3"])
def test_run_agrees_with_output(rng, spec):
    q, k, v = qkv(rng, lead=(1, 2), T=8, S=8, Dv=4)
    m = parse_method(spec, 4)
    expected = m.output(q, k, v, is_causal=True, seed=1)
    out = m.run(*(torch.tensor(x, dtype=torch.float32) for x in (q, k, v)), is_causal=True, seed=1)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32
    np.testing.assert_allclose(out.double().numpy(), expected, **F32)


def test_run_kernel_object(rng):
    q, k, v = qkv(rng, lead=(1, 1), T=5, S=5)
    m = parse_method(kernelkit.RBF(length_scale=2.0), 4)
    out = m.run(*(torch.tensor(x, dtype=torch.float32) for x in (q, k, v)))
    np.testing.assert_allclose(out.double().numpy(), m.output(q, k, v), **F32)


# ------------------------------------------------------- Nyström beats FAVOR+ on peaky heads
def _peaky_clustered(seed, heads=2, T=256, d=32, clusters=8, temperature=4.0):
    """Keys in clusters, queries near cluster centres, scores spread ~ temperature."""
    r = np.random.default_rng(seed)
    sd = np.sqrt(temperature)
    centres = r.standard_normal((heads, clusters, d))

    def members():
        which = r.integers(clusters, size=(heads, T))
        return np.take_along_axis(centres, which[..., None], axis=1)

    k = sd * (members() + 0.3 * r.standard_normal((heads, T, d)))
    q = sd * (members() + 0.3 * r.standard_normal((heads, T, d)))
    return q, k, r.standard_normal((heads, T, d))


def test_nystrom_beats_favor_plus_on_peaky_attention():
    q, k, v = _peaky_clustered(seed=7)
    softmax = parse_method("softmax", 32)
    A_ref, _ = softmax.weights(q, k)
    O_ref = A_ref @ v
    assert A_ref.max(-1).mean() > 0.1  # peaky: a uniform row would have max 1/256

    def errors(spec):
        m = parse_method(spec, 32)
        out = []
        for seed in range(5):
            O = m.output(q, k, v, seed=seed)
            out.append(np.mean(np.linalg.norm(O - O_ref, axis=(-2, -1))
                               / np.linalg.norm(O_ref, axis=(-2, -1))))
        return np.array(out)

    nys, favor, orth = errors("nystrom:32"), errors("favor+:32"), errors("favor+orth:32")
    # every Nyström seed beats every FAVOR+ seed, and on average by more than a factor of 2
    assert nys.max() < min(favor.min(), orth.min())
    assert nys.mean() < 0.5 * min(favor.mean(), orth.mean())


def test_nystrom_torch_is_differentiable():
    # the output is linear in v (landmarks depend on q and k only): an exact gradient check
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 6, 3, generator=g, dtype=torch.float64) for _ in range(3))
    v.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda x: nystrom_attention(q, k, x, 3, is_causal=True), (v,))
    qg, kg = q.clone().requires_grad_(True), k.clone().requires_grad_(True)
    grads = torch.autograd.grad(nystrom_attention(qg, kg, v, 3).sum(), (qg, kg))
    assert all(torch.isfinite(x).all() and x.abs().sum() > 0 for x in grads)


# ------------------------------------------------- the public API, on each backend
#: A method of each kind, and every map of the feature-map registry (sized ones with M = 8).
RUN_SPECS = ["softmax", *(form.replace(":M", ":8") for form in feature_map_names()),
             "kernel:rbf(gamma=0.3)", "nystrom:3", "local:16:1"]


@pytest.mark.usefixtures("triton_can_run")
@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("spec", RUN_SPECS)
def test_run_on_each_backend_agrees_with_output(rng, device, spec, backend):
    """run() goes through the public attention functions with their backend: the float32 result
    is the float64 reference's; a signed map's guard exists on the PyTorch path only, so
    backend="triton" refuses it by name."""
    q, k, v = qkv(rng, lead=(1, 2), T=20, S=20, Dv=4)
    m = parse_method(spec, 4)
    tensors = [torch.tensor(x, dtype=torch.float32, device=device) for x in (q, k, v)]
    if backend == "triton" and getattr(m, "guard", None) is not None:
        with pytest.raises(ValueError, match="backend='triton' cannot run .*no guard"):
            m.run(*tensors, is_causal=True, seed=1, backend=backend)
        return
    out = m.run(*tensors, is_causal=True, seed=1, backend=backend)
    expected = m.output(q, k, v, is_causal=True, seed=1)
    np.testing.assert_allclose(out.double().cpu().numpy(), expected, **F32)


def test_the_comparison_tool_imports_nothing_of_kernelkit_gpu():
    """The methods run through kernelkit.attention's public functions (and their backend=),
    never through kernelkit_gpu's twins or feature maps directly."""
    root = Path(kernelkit.__file__).parent / "attention" / "comparison"
    imported = {}
    for path in sorted(root.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            imported[path.name] = imported.get(path.name, set()) | set(names)
    assert "methods.py" in imported and "nystrom.py" in imported
    assert {name: sorted(n for n in names if n.startswith("kernelkit_gpu"))
            for name, names in imported.items()} == {name: [] for name in imported}
