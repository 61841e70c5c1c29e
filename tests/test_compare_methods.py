"""kernelkit.compare.methods: spec parsing, weights against the kernelkit_math references,
the torch fast paths, and Nyström attention (including its win over FAVOR+ on peaky heads)."""

import numpy as np
import pytest
import torch

import kernelkit
from kernelkit.compare.methods import EPS, Method, method_names, parse_method
from kernelkit.compare.nystrom import nystrom_attention, nystrom_weights
from kernelkit_math import attention as ref
from kernelkit_math.random_features import FavorPlusMap, make_feature_map

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
    q, k, _ = qkv(rng, lead=(1, 1), T=40, S=40)
    m = parse_method("rff:1", 4)
    A, den = m.weights(q, k, seed=0)
    phi = make_feature_map("rff:1", 4, seed=0)
    direct = (phi(q[0, 0]) @ phi(k[0, 0]).T).sum(-1)
    n_bad = int(np.sum(direct <= 0))
    assert 0 < n_bad < 40
    assert int(np.sum(den <= 0)) == n_bad
    bad = direct <= 0
    np.testing.assert_allclose(A[0, 0][bad], (phi(q[0, 0]) @ phi(k[0, 0]).T)[bad] / EPS, **F64)


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
    from kernelkit.compare import nystrom

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
