"""kernelkit.attention, the public API, against the float64 references in kernelkit_math.

Each test runs twice on the CPU: through the Triton kernels (interpreter, as CI sets
TRITON_INTERPRET=1) and through the plain-PyTorch path (the interpreter flag that dispatch reads,
``kernelkit_gpu._launch.INTERPRET``, switched off for the test); on ``--device cuda`` the Triton
path is the compiled kernels. Spies on the Triton entry points and on the plain-PyTorch functions
prove which path ran.
"""

import importlib

import numpy as np
import pytest
import torch

import kernelkit
from kernelkit import attention as ka
from kernelkit_math import attention as ref
from kernelkit_math.random_features import feature_map_names, get_feature_map, make_feature_map
from tests.conftest import TOL
from tests.gpu_cases import spy_calls

#: (module, function) of each path's entry points, as ``kernelkit.attention`` imports them.
ENTRY_POINTS = {
    "triton": [("kernelkit_gpu.attention.softmax", "softmax_attention"),
               ("kernelkit_gpu.attention.linear", "linear_attention"),
               ("kernelkit_gpu.attention.smoother", "kernel_attention")],
    "torch": [("kernelkit_gpu.attention.naive", "softmax_attention_naive"),
              ("kernelkit_gpu.attention.naive", "kernel_attention_naive"),
              ("kernelkit_gpu.attention.linear_naive", "linear_attention_naive")],
}


class Ran:
    """The entry points called during a test, as (path, function name) pairs, and the path the
    test expects (``expected``, which a test may change where dispatch must fall back)."""

    def __init__(self, expected, calls):
        self.expected, self.calls = expected, calls

    def paths(self):
        return {p for p, _ in self.calls}


def spy_entry_points(monkeypatch):
    """Spy on every entry point of both paths; returns the list the calls are appended to."""
    return spy_calls(monkeypatch, [(importlib.import_module(mod), name, (path, name))
                                   for path, targets in ENTRY_POINTS.items()
                                   for mod, name in targets])


@pytest.fixture(params=["triton", "torch"])
def path(request, device, monkeypatch):
    """Which implementation runs: the Triton kernels or (CPU only) the plain-PyTorch path.

    Dispatch reads ``kernelkit_gpu._launch.INTERPRET`` (what Triton saw at import), so the torch
    case switches that flag off; the environment variable is read by nobody at call time. After
    the test, the spies must show that every call went to the expected path.
    """
    from kernelkit_gpu import _launch

    if request.param == "torch":
        if device == "cuda":
            pytest.skip("the plain-PyTorch path is the CPU fallback; CUDA runs Triton")
        monkeypatch.setattr(_launch, "INTERPRET", False)
    elif device == "cpu" and not _launch.INTERPRET:
        pytest.fail("CPU Triton tests need TRITON_INTERPRET=1 exported before Python starts")
    ran = Ran(request.param, spy_entry_points(monkeypatch))
    yield ran
    assert ran.calls and ran.paths() == {ran.expected}, (
        f"expected only the {ran.expected} path to run; entry points called: {ran.calls}")


def qkv(rng, device, T=9, S=9, D=16, H=2, Hkv=2, dtype=torch.float32):
    arrays = [rng.normal(size=(1, H, T, D)), rng.normal(size=(1, Hkv, S, D)), rng.normal(size=(1, Hkv, S, D))]
    return [torch.from_numpy(a).to(device=device, dtype=dtype) for a in arrays]


def as64(*tensors):
    return [t.detach().double().cpu().numpy() for t in tensors]


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_softmax_attention_matches_reference(rng, device, path, causal):
    q, k, v = qkv(rng, device, T=9, S=13, H=4, Hkv=2)
    out, lse = ka.softmax_attention(q, k, v, is_causal=causal, enable_gqa=True, return_lse=True)
    want, want_lse = ref.softmax_attention(*as64(q, k, v), is_causal=causal, return_lse=True)
    np.testing.assert_allclose(out.double().cpu().numpy(), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(lse.double().cpu().numpy(), want_lse, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("feature_map", ["elu+1", "relu", "favor+:32", "taylor2", "object"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_linear_attention_matches_reference(rng, device, path, feature_map, causal):
    q, k, v = qkv(rng, device, T=11, S=11)
    fmap = make_feature_map("hyp-favor+:8", 16, seed=5) if feature_map == "object" else feature_map
    if feature_map == "taylor2":  # 1 + 16 + 16² = 273 features > 256: the chunked PyTorch path
        path.expected = "torch"
    out, (S, z) = ka.linear_attention(q, k, v, fmap, is_causal=causal, return_state=True, seed=2)
    want, (S_ref, z_ref) = ref.linear_attention(*as64(q, k, v), feature_map=fmap, is_causal=causal,
                                               return_state=True, seed=2)
    np.testing.assert_allclose(out.double().cpu().numpy(), want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(S.double().cpu().numpy(), S_ref, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(z.double().cpu().numpy(), z_ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("where", ["q", "k"])
@pytest.mark.parametrize("feature_map", ["elu+1", "relu", "favor+:16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_linear_attention_nan_where_float64_has_nan(rng, device, path, feature_map, causal, where):
    """A NaN in q or k is not hidden: the output and the final state are NaN exactly where the
    float64 reference's are, and agree with it elsewhere (equal_nan compares the NaN pattern)."""
    q, k, v = qkv(rng, device, T=11, S=11)
    (q if where == "q" else k)[0, 1, 5, 3] = float("nan")
    out, (S, z) = ka.linear_attention(q, k, v, feature_map, is_causal=causal, return_state=True, seed=2)
    want, (S_ref, z_ref) = ref.linear_attention(*as64(q, k, v), feature_map=feature_map,
                                               is_causal=causal, return_state=True, seed=2)
    assert np.isnan(want).any()
    for got, expected in ((out, want), (S, S_ref), (z, z_ref)):
        np.testing.assert_allclose(got.double().cpu().numpy(), expected, rtol=1e-4, atol=1e-5,
                                   equal_nan=True)


def test_linear_attention_state_continues_decoding(rng, device, path):
    q, k, v = qkv(rng, device, T=10, S=10)
    full = ka.linear_attention(q, k, v, "elu+1", is_causal=True)
    first, state = ka.linear_attention(q[:, :, :6], k[:, :, :6], v[:, :, :6], "elu+1", is_causal=True, return_state=True)
    rest = ka.linear_attention(q[:, :, 6:], k[:, :, 6:], v[:, :, 6:], "elu+1", is_causal=True, initial_state=state)
    np.testing.assert_allclose(torch.cat([first, rest], 2).cpu().numpy(), full.cpu().numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("T,S", [(5, 13), (13, 5)], ids=["T<S", "T>S"])
def test_bottom_right_alignment_through_every_api(rng, device, path, T, S):
    """causal_alignment="bottom_right" reaches every path: key j visible to query i iff
    j <= i + S - T, rows without keys (T > S) output 0 (lse -inf), gradients finite."""
    q, k, v = qkv(rng, device, T=T, S=S, H=4, Hkv=2)
    q.requires_grad_(True)
    br = dict(is_causal=True, causal_alignment="bottom_right")
    out, lse = ka.softmax_attention(q, k, v, **br, enable_gqa=True, return_lse=True)
    want, want_lse = ref.softmax_attention(*as64(q, k, v), **br, return_lse=True)
    np.testing.assert_allclose(as64(out)[0], want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(as64(lse)[0], want_lse, rtol=1e-5, atol=1e-5)
    kout = ka.kernel_attention(q, k, v, kernelkit.RBF(length_scale=3.0), **br, enable_gqa=True)
    np.testing.assert_allclose(as64(kout)[0],
                               ref.kernel_smoother(*as64(q, k, v), "rbf", gamma=1 / 18, eps=1e-6, **br),
                               rtol=1e-5, atol=1e-5)
    k2, v2 = k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1)  # linear: no GQA
    for fmap in ("elu+1", "favor+:8"):
        lout, (S_, _) = ka.linear_attention(q, k2, v2, fmap, **br, return_state=True, seed=2)
        lwant, (S_ref, _) = ref.linear_attention(*as64(q, k2, v2), feature_map=fmap, **br,
                                                 return_state=True, seed=2)
        np.testing.assert_allclose(as64(lout)[0], lwant, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(as64(S_)[0], S_ref, rtol=1e-4, atol=1e-5)
    if T > S:
        assert torch.all(out[:, :, :T - S] == 0) and torch.all(lse[:, :, :T - S] == -np.inf)
        assert torch.all(kout[:, :, :T - S] == 0) and torch.all(lout[:, :, :T - S] == 0)
    (g,) = torch.autograd.grad(out.sum() + kout.sum() + lout.sum(), (q,))
    assert torch.isfinite(g).all()


@pytest.mark.parametrize(
    "kernel, name, params",
    [
        (kernelkit.RBF(length_scale=3.0), "rbf", dict(gamma=1 / 18)),
        (kernelkit.Laplacian(length_scale=5.0), "laplacian", dict(gamma=0.2)),
        (kernelkit.Polynomial(degree=2, gamma=0.1, coef0=1.0), "polynomial", dict(degree=2, gamma=0.1, coef0=1.0)),
    ],
    ids=["rbf", "laplacian", "polynomial"],
)
def test_kernel_attention_takes_kernel_objects_and_names(rng, device, path, kernel, name, params):
    q, k, v = qkv(rng, device, T=7, S=10)
    want = ref.kernel_smoother(*as64(q, k, v), kernel=name, eps=1e-6, **params)
    by_object = ka.kernel_attention(q, k, v, kernel)
    by_name = ka.kernel_attention(q, k, v, name, **params)
    np.testing.assert_allclose(by_object.double().cpu().numpy(), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(by_name.double().cpu().numpy(), want, rtol=1e-5, atol=1e-5)


def test_exponential_kernel_attention_is_softmax(rng, device, path):
    q, k, v = qkv(rng, device)
    a = ka.kernel_attention(q, k, v, kernelkit.Exponential(scale=0.25))
    b = ka.softmax_attention(q, k, v, scale=0.25)
    np.testing.assert_allclose(a.cpu().numpy(), b.cpu().numpy(), rtol=1e-5, atol=1e-6)


def test_gradients_flow_through_every_api(rng, device, path):
    q, k, v = (t.requires_grad_() for t in qkv(rng, device, T=5, S=5))
    loss = (
        ka.softmax_attention(q, k, v, is_causal=True).sum()
        + ka.linear_attention(q, k, v, "favor+:8").sum()
        + ka.kernel_attention(q, k, v, kernelkit.RBF(length_scale=4.0)).sum()
    )
    loss.backward()
    for t in (q, k, v):
        assert t.grad is not None and bool(torch.isfinite(t.grad).all()) and t.grad.abs().sum() > 0


@pytest.mark.parametrize("op", ["softmax", "elu+1", "favor+:8", "rbf"])
def test_float64_runs_the_torch_path_in_float64(rng, device, path, op):
    """The Triton kernels take float16 / bfloat16 / float32; float64 goes to the plain-PyTorch
    path on either setting (and on CUDA), computed in float64 (it used to raise TypeError on the
    Triton path)."""
    path.expected = "torch"
    q, k, v = qkv(rng, device, T=7, S=10, dtype=torch.float64)
    if op == "softmax":
        out = ka.softmax_attention(q, k, v, is_causal=True)
        want = ref.softmax_attention(*as64(q, k, v), is_causal=True)
    elif op == "rbf":
        out = ka.kernel_attention(q, k, v, kernelkit.RBF(length_scale=3.0))
        want = ref.kernel_smoother(*as64(q, k, v), kernel="rbf", eps=1e-6, gamma=1 / 18)
    else:
        out = ka.linear_attention(q, k, v, op, is_causal=True, seed=2)
        want = ref.linear_attention(*as64(q, k, v), feature_map=op, is_causal=True, seed=2)
    assert out.dtype == torch.float64 and out.device == q.device
    np.testing.assert_allclose(out.cpu().numpy(), want, **TOL["float64"])


def test_bad_arguments_are_clear(rng, device):
    q, k, v = qkv(rng, device)
    with pytest.raises(TypeError, match="registry name .* or a kernelkit kernel object"):
        ka.kernel_attention(q, k, v, 3)
    with pytest.raises(TypeError, match="set them in its constructor"):
        ka.kernel_attention(q, k, v, kernelkit.RBF(), gamma=0.5)
    with pytest.raises(ValueError, match="kernel"):
        ka.kernel_attention(q, k, v, "no-such-kernel")
    with pytest.raises(ValueError, match="gamma"):
        ka.kernel_attention(q, k, v, "rbf", gamma=-1.0)
    with pytest.raises(ValueError, match="unknown feature map"):
        ka.linear_attention(q, k, v, "favour")
    with pytest.raises(TypeError, match="feature_map must be"):
        ka.linear_attention(q, k, v, 3)
    with pytest.raises(TypeError, match="q must be a torch.Tensor"):
        ka.softmax_attention(q.cpu().numpy(), k, v)
    for call in (lambda **kw: ka.softmax_attention(q, k, v, **kw),
                 lambda **kw: ka.kernel_attention(q, k, v, "rbf", **kw),
                 lambda **kw: ka.linear_attention(q, k, v, "elu+1", **kw),
                 lambda **kw: ka.linear_attention(q, k, v, "favor+:8", **kw)):
        with pytest.raises(ValueError, match="causal_alignment must be 'top_left' or 'bottom_right'"):
            call(is_causal=True, causal_alignment="lower_right")
        with pytest.raises(TypeError, match="causal_alignment"):
            call(is_causal=True, causal_alignment=None)


def test_causal_is_the_deprecated_name_of_is_causal(rng, device):
    """One name for the causal switch across the attention API (is_causal, as SDPA): the old
    keyword still works, with a FutureWarning, and means the same."""
    from kernelkit.attention.comparison import compare
    from kernelkit.attention.comparison.metrics import uniform_weights
    from kernelkit_gpu.attention.linear_naive import linear_attention_naive

    q, k, v = qkv(rng, device, T=7, S=7)
    calls = [
        lambda **kw: ka.linear_attention(q, k, v, "elu+1", **kw),
        lambda **kw: linear_attention_naive(q, k, v, **kw),
        lambda **kw: ref.linear_attention(*as64(q, k, v), **kw),
        lambda **kw: ref.softmax_attention(*as64(q, k, v), **kw),
        lambda **kw: ref.kernel_smoother(*as64(q, k, v), "rbf", gamma=0.1, **kw),
        lambda **kw: uniform_weights(7, 7, **kw),
        lambda **kw: compare(*as64(q, k, v), ["elu+1"], measure=False, **kw).rows[0]["output_rel_error"],
    ]
    for call in calls:
        new = call(is_causal=True)
        with pytest.warns(FutureWarning, match=r"causal=\.\.\.\) is deprecated.*is_causal"):
            old = call(causal=True)
        np.testing.assert_array_equal(_as_numpy(old), _as_numpy(new))
        assert not np.array_equal(_as_numpy(new), _as_numpy(call(is_causal=False)))


def _as_numpy(x):
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


# ------------------------------------------------------ masked keys are absent (issue 18 J)
@pytest.mark.parametrize("feature_map", ["elu+1", "favor+:16"])
def test_issue_18_j_reproduction_through_every_api(rng, device, path, feature_map):
    """Bottom-right causal, T = 9, S = 5, NaN in v[4]: rows 0-3 see no key (0), rows 4-7 do not
    see key 4 (finite, equal to the reference), row 8 sees it (NaN), on both paths;
    kernel_attention refuses the non-finite value with a ValueError naming v."""
    q, k, v = qkv(rng, device, T=9, S=5)
    v[0, 1, 4, 3] = float("nan")
    br = dict(is_causal=True, causal_alignment="bottom_right")
    outs = {
        "softmax": (ka.softmax_attention(q, k, v, **br),
                    ref.softmax_attention(*as64(q, k, v), **br)),
        "linear": (ka.linear_attention(q, k, v, feature_map, seed=2, **br),
                   ref.linear_attention(*as64(q, k, v), feature_map=feature_map, seed=2, **br)),
    }
    for name, (out, want) in outs.items():
        got = out.double().cpu().numpy()
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=name)
        np.testing.assert_array_equal(got[0, :, :4], 0.0, err_msg=name)
        assert np.isfinite(got[0, :, 4:8]).all() and np.isnan(got[0, 1, 8, 3]), name
    with pytest.raises(ValueError, match="^v contains NaN or infinity"):
        ka.kernel_attention(q, k, v, "rbf", gamma=0.1, **br)


# ------------------------------------------------------------------------ docstrings (issue 18)
def _signature_in_docstring(doc, name):
    """The signature ``name(...)`` written in a docstring: (name, kind, default) per parameter."""
    import ast

    text = " ".join(doc.split())
    start = text.index(f"{name}(")
    node = ast.parse(f"def {text[start:text.index(')', start) + 1]}: pass").body[0].args
    params = [(a.arg, "positional", None) for a in node.args[:len(node.args) - len(node.defaults)]]
    params += [(a.arg, "positional", ast.literal_eval(d))
               for a, d in zip(node.args[len(node.args) - len(node.defaults):], node.defaults)]
    params += [(a.arg, "keyword", None if d is None else ast.literal_eval(d))
               for a, d in zip(node.kwonlyargs, node.kw_defaults)]
    return params + ([(node.kwarg.arg, "var_keyword", None)] if node.kwarg else [])


@pytest.mark.parametrize("name", ["softmax_attention", "kernel_attention", "linear_attention"])
def test_kernelkit_gpu_docstring_shows_the_true_signatures(name):
    """The package docstring of kernelkit_gpu writes each attention function's full signature
    (it used to omit causal_alignment)."""
    import inspect

    import kernelkit_gpu

    P = inspect.Parameter
    kinds = {P.POSITIONAL_OR_KEYWORD: "positional", P.KEYWORD_ONLY: "keyword",
             P.VAR_KEYWORD: "var_keyword"}
    true = [(p.name, kinds[p.kind], None if p.default is P.empty else p.default)
            for p in inspect.signature(getattr(kernelkit_gpu, name)).parameters.values()]
    assert _signature_in_docstring(kernelkit_gpu.__doc__, name) == true


def test_kernelkit_attention_docstrings_point_to_functions():
    """Every :func:`...` target in kernelkit.attention's docstrings is a function (it used to
    name the modules kernelkit.compare.comparison and kernelkit.compare.sweeps)."""
    import re

    docs = [ka.__doc__] + [getattr(ka, n).__doc__ for n in ka.__all__ if callable(getattr(ka, n))]
    targets = {t for doc in docs for t in re.findall(r":func:`([\w.]+)`", doc or "")}
    assert {"kernelkit.attention.comparison.compare",
            "kernelkit.attention.comparison.sweep"} <= targets
    for target in targets:
        mod, _, attr = target.rpartition(".")
        obj = getattr(importlib.import_module(mod), attr) if mod else getattr(ka, attr)
        assert callable(obj) and not isinstance(obj, type(importlib)), target


# ------------------------------------------------------------------------------- backend=
#: Each public function on small float32 inputs, with its keyword arguments.
CALLS = {
    "softmax": lambda q, k, v, **kw: ka.softmax_attention(q, k, v, is_causal=True, **kw),
    "linear": lambda q, k, v, **kw: ka.linear_attention(q, k, v, "elu+1", is_causal=True, **kw),
    "kernel": lambda q, k, v, **kw: ka.kernel_attention(q, k, v, "rbf", **kw),
    "local": lambda q, k, v, **kw: ka.local_attention(q, k, v, block=16, is_causal=True, **kw),
}
#: The entry points of local attention, beside :data:`ENTRY_POINTS`.
LOCAL_ENTRY_POINTS = [("kernelkit_gpu.attention.local", "local_attention", "triton"),
                      ("kernelkit_gpu.attention.local_naive", "local_attention_naive", "torch")]


def spy_all_paths(monkeypatch):
    """The paths every entry point called (softmax, linear, kernel and local attention) ran."""
    calls = [spy_entry_points(monkeypatch),
             spy_calls(monkeypatch, [(importlib.import_module(mod), name, (path, name))
                                     for mod, name, path in LOCAL_ENTRY_POINTS])]
    return lambda: {path for spied in calls for path, _ in spied}


@pytest.mark.usefixtures("triton_can_run")
@pytest.mark.parametrize("backend", ["auto", "triton", "torch"])
@pytest.mark.parametrize("call", sorted(CALLS))
def test_backend_picks_the_path(rng, device, monkeypatch, call, backend):
    """backend="torch" runs the plain-PyTorch twin on any device, "triton" the Triton kernels,
    "auto" the Triton kernels where they run (CUDA, or the CPU under the interpreter); the
    results agree (float32 sums in another order)."""
    q, k, v = qkv(rng, device, T=20, S=20)
    paths = spy_all_paths(monkeypatch)
    out = CALLS[call](q, k, v, backend=backend)
    assert paths() == {"torch" if backend == "torch" else "triton"}
    twin = CALLS[call](q, k, v, backend="torch")
    np.testing.assert_allclose(out.double().cpu().numpy(), twin.double().cpu().numpy(),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("call", sorted(CALLS))
def test_backend_torch_takes_float64_and_triton_refuses_it(rng, device, call):
    q, k, v = qkv(rng, device, T=20, S=20, dtype=torch.float64)
    assert CALLS[call](q, k, v, backend="torch").dtype == torch.float64
    with pytest.raises(ValueError, match=r"backend='triton' cannot run this call on the Triton "
                                         r"kernels: they take float16, bfloat16 or float32 "
                                         r"tensors, and q is torch.float64"):
        CALLS[call](q, k, v, backend="triton")


def test_backend_triton_says_why_it_cannot_run(rng, device, monkeypatch):
    """What backend="auto" quietly runs on the PyTorch path, "triton" refuses by name."""
    from kernelkit_gpu import _launch

    q, k, v = qkv(rng, device, T=20, S=20)
    why = r"backend='triton' cannot run this call on the Triton kernels: "
    with pytest.raises(ValueError, match=why + r"they have no guard"):
        ka.linear_attention(q, k, v, "identity", guard=0.5, backend="triton")
    with pytest.raises(ValueError, match=why + r"they take maps of at most 256 features and "
                                               r"Dv <= 256; got 273 features and Dv = 16"):
        ka.linear_attention(q, k, v, "taylor2", backend="triton")  # 1 + 16 + 16^2 features
    with pytest.raises(ValueError, match=why + r"they take blocks of 16, 32, 64, 128 positions; "
                                               r"got 5"):
        ka.local_attention(q, k, v, block=5, backend="triton")
    if device == "cpu":
        monkeypatch.setattr(_launch, "INTERPRET", False)
        for call in CALLS.values():
            with pytest.raises(ValueError, match=why + r"q is on the CPU and the Triton "
                                                       r"interpreter is off"):
                call(q, k, v, backend="triton")


@pytest.mark.parametrize("call", sorted(CALLS))
def test_backend_must_be_a_known_name(rng, device, call):
    q, k, v = qkv(rng, device, T=20, S=20)
    with pytest.raises(ValueError, match=r"backend must be one of 'auto', 'triton', 'torch'; "
                                         r"got 'cuda'"):
        CALLS[call](q, k, v, backend="cuda")
    with pytest.raises(TypeError, match=r"backend must be one of 'auto', 'triton', 'torch'; "
                                        r"got None"):
        CALLS[call](q, k, v, backend=None)


@pytest.mark.usefixtures("triton_can_run")
@pytest.mark.parametrize("backend", ["triton", "torch"])
@pytest.mark.parametrize("feature_map", [form.replace(":M", ":8")
                                         for form in feature_map_names()])
def test_every_feature_map_on_each_backend(rng, device, feature_map, backend):
    """Every map of the feature-map registry through the public function, on both paths,
    against the float64 reference (a new registry row is covered here with no edit); signed
    maps with their guard, which only the PyTorch path has."""
    q, k, v = qkv(rng, device, T=20, S=20, D=4)
    kw = dict(is_causal=True, seed=3)
    guard = 0.5 if get_feature_map(feature_map).sign == "signed" else None
    if guard is not None and backend == "triton":
        with pytest.raises(ValueError, match="they have no guard"):
            ka.linear_attention(q, k, v, feature_map, guard=guard, backend=backend, **kw)
        return
    out = ka.linear_attention(q, k, v, feature_map, guard=guard, backend=backend, **kw)
    want = ref.linear_attention(*as64(q, k, v), feature_map=feature_map, guard=guard, **kw)
    np.testing.assert_allclose(out.double().cpu().numpy(), want, rtol=1e-4, atol=1e-5)
